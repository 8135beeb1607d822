"""What a new user tries in the first hour, each once a raw exception, a silent wrong number or a
misleading line (a review of ~540 commands and calls): now one clear line, or the right answer."""

from __future__ import annotations

import numpy as np
import pytest

import symcalc
from symcalc.errors import DimensionError, MalformedValueError, QueryError, UnknownNameError

MFU = dict(n_params=7e9, n_gpus=64, tokens_per_second="1e5 token/s", peak_flops="989 TFLOP/s")


@pytest.mark.parametrize("call", [
    lambda: symcalc.solve("model_state_memory", n_params=7e9, dp=64, options={5: 2}),
    lambda: symcalc.solve("model_state_memory", n_params=7e9, dp=64, options={None: 2}),
    lambda: symcalc.sweep("mfu", n_params=7e9, n_gpus=64, peak_flops="989 TFLOP/s", vary={5: "1:10"}),
])
def test_a_key_that_is_not_text_is_named_not_an_attribute_error(call):
    # did_you_mean once called 5.lower()
    with pytest.raises(UnknownNameError, match="'(5|None)'"):
        call()


def test_arrays_that_do_not_make_one_grid_are_named_by_solve_too():
    with pytest.raises(QueryError, match=r"do not broadcast to one grid: n_params \(3,\), n_gpus \(4,\)"):
        symcalc.solve("mfu", **{**MFU, "n_params": np.full(3, 7e9), "n_gpus": np.full(4, 64)})
    with pytest.raises(QueryError, match="an array of 40 dimensions"):
        symcalc.solve("mfu", **{**MFU, "n_params": np.full([1] * 40, 7e9)})


def test_check_is_part_of_the_api():
    # 6 x 7e9 x 1e12 FLOP / (0.4 x 989e12 FLOP/s) = 1.06e8 s = 29,489 GPU-hours, not the 10 claimed:
    # peak_flops from the others is 989 x 2949 TFLOP/s
    c = symcalc.check(n_params=7e9, n_tokens="1e12 token", gpu_hours="10 hour", mfu=0.4, peak_flops="989 TFLOP/s")
    (rel,) = c.relations
    assert rel.quantity == "peak_flops" and not rel.agrees
    assert rel.computed == pytest.approx(6 * 7e9 * 1e12 / (0.4 * 10 * 3600), rel=1e-9)


@pytest.mark.parametrize("kw, says", [
    (dict(conflicts="maybe"), "conflicts must be True"),
    (dict(rtol="abc"), "rtol is a relative tolerance"),       # accepted silently once
    (dict(rtol=2.0), "rtol is a relative tolerance"),
])
def test_solve_arguments_of_the_wrong_kind_are_query_errors(kw, says):
    with pytest.raises(QueryError, match=says):
        symcalc.solve("mfu", **MFU, **kw)


def test_an_option_asked_for_as_a_target_says_it_is_an_option():
    with pytest.raises(QueryError, match=r"zero_stage is an option, not a quantity to solve for: set it \(--option "
                                         r"zero_stage=\.\.\., one of 0, 1, 2, 3\)"):
        symcalc.solve("zero_stage", n_params=7e9)


def test_one_other_quantity_may_be_named_as_text():
    # also="achieved_flops_cluster" was read letter by letter ("unknown quantity 'a'")
    r = symcalc.solve("mfu", **MFU)
    rate = np.array([1e5, 2e5])
    p = r.points(also="achieved_flops_cluster", n_params=7e9, n_gpus=64, tokens_per_second=(rate, "token/s"),
                 peak_flops="989 TFLOP/s")
    np.testing.assert_allclose(p.also["achieved_flops_cluster"][0], 6 * 7e9 * rate / 1e15, rtol=1e-12)


def test_an_answer_far_outside_real_hardware_is_flagged():
    # a deadline of a nanosecond: 6 x 30e9 x 600e9 / (0.45 x 989e12 x 1e-9 s) = 2.43e17 GPUs,
    # above n_gpus' plausible 1e6: said, as it is for a given value
    r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="1e-9 s", mfu=0.45,
                      peak_flops="989 TFLOP/s")
    assert r.value == pytest.approx(6 * 30e9 * 600e9 / (0.45 * 989e12 * 1e-9), rel=1e-9)
    assert any("n_gpus = 2.427e17 is far above 1000000" in w and "units and exponents of the values given" in w
               for w in r.warnings), r.warnings


def test_a_sweep_point_solve_refuses_for_its_order_is_not_feasible():
    # a micro-batch above the global batch: solve refuses it ("can never exceed"); the sweep
    # marked it feasible
    s = symcalc.sweep("step_time", {"tp": 8, "dp": 16, "n_gpus": 128, "global_batch_size": 2048},
                      vary={"micro_batch_size": [1, 128, 4096]}, model="llama3-70b", hardware="h100")
    assert s.feasible.tolist() == [True, True, False]
    assert any("micro_batch_size is more than global_batch_size at 1 point: it can never exceed it" in x
               for x in s.reasons), s.reasons
    with pytest.raises(symcalc.DomainError, match="can never exceed global_batch_size"):
        symcalc.solve("step_time", tp=8, dp=16, n_gpus=128, global_batch_size=2048, micro_batch_size=4096,
                      model="llama3-70b", hardware="h100")


def test_the_rounding_line_shows_enough_digits_to_tell_the_values_apart(cli):
    # 30e9 x 600e9 x 6 / (0.45 x 989e12) = 2.427e11 GPU-seconds; over 30 days that is 93.62 GPUs.
    # Llama 3 70B: 6190.07 GPUs for 30 days; 6190 would take 30 x 6190.07/6190 = 30.0003 days
    run = cli("solve", "n_gpus", "--model", "llama3-70b", "--hardware", "h100", "train_time=30day", "mfu=40%")
    first = run.out.splitlines()[0]
    assert "6190 would give train_time = 30.0003 day, above the given 30 day" in first, first


def test_a_value_in_an_array_that_is_not_finite_is_pointed_at():
    with pytest.raises(MalformedValueError, match=r"n_params: element 1 of the array is nan \(1 of 3"):
        symcalc.solve("mfu", **{**MFU, "n_params": np.array([7e9, np.nan, 8e9])})


def test_a_unit_asked_for_is_a_unit_alone():
    with pytest.raises(MalformedValueError, match=r"--to: '1 GB' is not a unit: give a unit alone"):
        symcalc.solve("model_state_memory", n_params=7e9, dp=8, to="1 GB")
    with pytest.raises(DimensionError, match="model_state_memory is measured in byte"):
        symcalc.solve("model_state_memory", n_params=7e9, dp=8, to="%")      # not "it is a count"


def test_show_explains_a_preset_too(cli):
    run = cli("show", "h100", "--json")
    info = run.json()
    assert info["kind"] == "hardware" and info["name"] == "h100_sxm"
    assert info["values"]["gpu_memory"].startswith("81559 MiB [measured]") and "[measured]" in info["values"]["bf16_gemm_efficiency"]
    run = cli("show", "h10")
    assert run.code == 2 and "Did you mean: h100" in run.err


def test_an_axis_written_with_its_unit_once_takes_it_for_every_value():
    # '1e5,3e6,1e7 token/s' was refused ("a bare number (1e5) could mean several units"):
    # mfu = 6 x 7e9 x R / (64 x 989e12), 6.635 % at 1e5 token/s; the bounds are said in %
    s = symcalc.sweep("mfu", n_params=7e9, n_gpus=64, peak_flops="989 TFLOP/s",
                      vary={"tokens_per_second": "1e5,3e6,1e7 token/s"})
    rate = np.array([1e5, 3e6, 1e7])
    np.testing.assert_allclose(s.values, 100 * 6 * 7e9 * rate / (64 * 989e12), rtol=1e-12)
    assert any("mfu leaves its bounds (0 %, 100 %] at 2 points" in x for x in s.reasons), s.reasons
    r = symcalc.sweep("mfu", n_params=7e9, n_gpus=64, peak_flops="989 TFLOP/s",
                      vary={"tokens_per_second": "1e5:1e6 token/s:3"})
    np.testing.assert_allclose(r.axes[0].base, [1e5, 5.5e5, 1e6], rtol=1e-12)


@pytest.mark.parametrize("unit, hint", [("Day", "did you mean day?"), ("HOUR", "did you mean hour?"),
                                        ("Tflop/s", "did you mean TFLOP?"), ("gib", "did you mean GiB?")])
def test_a_unit_in_the_wrong_case_gets_the_right_spelling(unit, hint):
    with pytest.raises(MalformedValueError, match=f"unknown unit .*; {hint}"):
        symcalc.solve("train_time", n_params=7e9, n_tokens="1e12 token", n_gpus=64, mfu=0.4,
                      peak_flops="989 TFLOP/s", to=unit)


@pytest.mark.parametrize("text", ["32k", "128k token", "32K"])
def test_a_context_written_in_thousands_is_told_to_write_the_number_out(text):
    # "128k" for a context length usually means 128 x 1024 = 131072 tokens, for anything else
    # 128 x 1000: the suffix is refused, and the message gives both readings
    with pytest.raises(MalformedValueError, match="usually 32768 token, 32 x 1024"):
        symcalc.solve("kv_cache_memory", {"batch_size": 1, "seq_len": text}, model="llama3-8b")


def test_a_tuple_that_is_not_a_value_and_its_unit_says_so():
    with pytest.raises(MalformedValueError, match=r"peak_flops: a value with its unit is a pair \(value, 'unit'\); "
                                                  "got a tuple of 3 items"):
        symcalc.solve("mfu", **{**MFU, "peak_flops": (1, "TFLOP/s", 3)})


@pytest.mark.parametrize("typed, means", [
    # the names a capacity engineer types first, from the papers and tools they read: Hugging
    # Face config keys (num_attention_heads' short forms), vLLM's --max-concurrency, InternEvo's
    # TGS (tokens per GPU per second), "training cost" for the run's GPU bill
    ("training_cost", "total_cost"), ("gpu_count", "n_gpus"), ("peak_memory", "total_memory_per_gpu"),
    ("num_layers", "n_layers"), ("num_heads", "n_heads"), ("num_kv_heads", "n_kv_heads"),
    ("num_params", "n_params"), ("max_concurrency", "batch_size"), ("tgs", "tokens_per_second_per_gpu"),
    ("time_to_train", "train_time"), ("compute_budget", "total_flops"),
])
def test_the_names_people_type_first_are_the_quantities_they_mean(cli, typed, means):
    run = cli("show", typed)
    assert run.code == 0 and run.out.split()[:2] == ["quantity", means]


def test_a_time_per_output_token_written_per_token_says_to_drop_it(cli):
    # vLLM prints TPOT in ms and people write "20 ms/token"; a decode step (decode_step_time, alias
    # tpot) gives every sequence one token, so the value is a time: the refusal says what to write
    run = cli("solve", "decode_tokens_per_second", "--model", "llama3-8b", "batch_size=1", "tpot=20 ms/token")
    assert run.code == 2
    assert run.err.strip().endswith("'/token' makes it a rate per token, and decode_step_time is not one: write it "
                                    "without '/token'")
    # and written as a time it answers: one sequence, one token every 20 ms, 50 token/s
    ok = cli("solve", "decode_tokens_per_second", "--model", "llama3-8b", "batch_size=1", "tpot=20 ms", "--json")
    assert ok.code == 0 and ok.json()["value"] == pytest.approx(50)


def test_a_runs_energy_needs_its_gpu_hours_not_a_gpu_count():
    # Llama 3 70B on 2T tokens at 40 % MFU of an H100's 989.4 TFLOP/s: 6 x 70.55e9 x 2e12 FLOP /
    # (0.4 x 989.4e12 FLOP/s) = 594,247 GPU-hours whatever the GPU count, at the preset's 700 W:
    # 416 MWh; and the same with 512 GPUs given (they only split the hours into days)
    run = dict(model="llama3-70b", hardware="h100")
    given = {"n_tokens": "2e12 token", "mfu": "40%"}
    hours = 6 * 70_553_706_496 * 2e12 / (0.4 * 989.4e12) / 3600
    energy = symcalc.solve("cluster_gpu_energy", given, **run)
    assert energy.base_value == pytest.approx(hours * 700 * 3600, rel=1e-6)
    assert symcalc.solve("cluster_gpu_energy", {**given, "n_gpus": 512}, **run).base_value == \
        pytest.approx(energy.base_value, rel=1e-9)


def test_a_runs_step_time_asks_for_the_batches_the_model_runs_on_first(cli):
    # "how long is a step of Llama 3 8B on 8 H100s?": the step-time model needs the micro-batch
    # and the global batch, the two a person chooses (each with its usual value, said once);
    # the pairs that restate the answer (a token rate, an MFU) come after
    run = cli("solve", "step_time", "--model", "llama3-8b", "--hardware", "h100", "n_gpus=8")
    assert run.code == 2
    asked = run.err.split("also give one of: ", 1)[1]
    first = asked.split(" | ")[0]
    assert first.startswith("micro_batch_size (usually 1 to 16") and ", global_batch_size (usually 256 to 4096" in first
    assert asked.count("usually 256 to 4096") == 1 and "global_batch_size, tokens_per_second" in asked
    # and given them, it answers from the model: 6 x 8.03e9 x 64 x 8,192 = 2.53e16 FLOPs a step
    # over 8 x 989.4 TFLOP/s is an MFU between the 30 and 70 % real dense runs reach
    ok = cli("solve", "step_time", "--model", "llama3-8b", "--hardware", "h100", "n_gpus=8", "micro_batch_size=1",
             "global_batch_size=64", "--json")
    assert ok.code == 0
    mfu = 6 * 8_030_261_248 * 64 * 8192 / (8 * 989.4e12 * ok.json()["value"])
    assert 0.3 < mfu < 0.7


def test_a_gpu_count_for_a_load_says_the_load_it_would_miss(cli):
    # 100 requests a second of GPT-OSS 120B (MXFP4, one H100 a replica, the largest batch that
    # fits): 7.807 GPUs exactly, so 8. Both the memory margin and the load agree on rounding up;
    # the note names the load, the question's goal: 7 replicas serve 7 / 7.807 of 100 req/s
    run = cli("solve", "n_gpus", "--model", "gpt-oss-120b", "--hardware", "h100", "tp=1", "--option",
              "weight_dtype=mxfp4", "memory_headroom=0GB", "cluster_requests_per_second=100 req/s",
              "prompt_len=1000token", "output_len=500token", "--json")
    assert run.code == 0
    d = run.json()
    assert d["value"] == 8
    text = cli("solve", "n_gpus", "--model", "gpt-oss-120b", "--hardware", "h100", "tp=1", "--option",
               "weight_dtype=mxfp4", "memory_headroom=0GB", "cluster_requests_per_second=100 req/s",
               "prompt_len=1000token", "output_len=500token", "--brief").out.splitlines()[0]
    assert "rounded up: 7 would give cluster_request_throughput = " in text and "below the given 100 req/s" in text
    exact = float(text.split("(exact ")[1].split(",")[0])
    said = float(text.split("cluster_request_throughput = ")[1].split(" ")[0])
    assert said == pytest.approx(7 / exact * 100, rel=1e-3)


def test_throughput_asked_of_a_replica_answers_its_decode_rate(cli):
    # "throughput" is training's token rate (tokens_per_second); asked with a serving replica's
    # values it has no answer, and the rate those values do settle is answered, said first
    run = cli("solve", "throughput", "--model", "llama3-8b", "--hardware", "h100", "tp=1", "batch_size=8",
              "prompt_len=1000token", "output_len=200token")
    assert run.code == 0 and run.out.startswith("decode_tokens_per_second = ")
    assert run.out.splitlines()[1] == ("  reading: the values given do not settle tokens_per_second; they settle "
                                       "decode_tokens_per_second (output tokens one replica produces per second in "
                                       "steady decode (batch_size over the step time)), answered for it")
    # and a training question is told nothing of it
    assert "decode" not in cli("solve", "tokens_per_second", "n_params=7e9").err
