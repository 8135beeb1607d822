"""The Python API: one call, a value with its unit, the derivation, the compiled function."""

import numpy as np
import pytest

import symcalc
from symcalc.errors import (DimensionError, DomainError, MalformedValueError, OutOfBoundsError,
                            UnderdeterminedError, UnknownNameError)


def test_mfu_from_observed_throughput_seed_000_exercise_2():
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                      peak_flops="1979 TFLOP/s")
    # 6 * 7e9 * 150e3 = 6.3e15 FLOP/s over 64 * 1979e12 = 1.26656e17 FLOP/s -> 4.974 %
    assert r.unit == "%"
    assert r.value == pytest.approx(100 * 6.3e15 / 1.26656e17, rel=1e-12)
    assert float(r.to("")) == pytest.approx(0.049741, rel=1e-4)
    # MFU counts the model's FLOPs (6 N per token), not executed ones (recomputation is HFU's)
    assert [s.solves_for for s in r.steps] == [["n_active_params"], ["model_flops_per_token"],
                                                ["achieved_flops_cluster"], ["mfu"]]
    assert "flops_per_param_per_token" in r.defaults_used
    assert str(r.closed_form) == "flops_per_param_per_token*n_params*tokens_per_second/(n_gpus*peak_flops)"


def test_gpus_for_a_deadline_round_up_and_keep_the_exact_value():
    r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu=0.45,
                      peak_flops="989 TFLOP/s")
    # 6 * 30e9 * 600e9 = 1.08e23 FLOP; / (0.45 * 989e12 FLOP/s * 2.592e6 s) = 93.62 GPUs -> 94
    assert r.exact == pytest.approx(1.08e23 / (0.45 * 989e12 * 2.592e6), rel=1e-12)
    assert r.value == 94


def test_hidden_size_is_the_positive_root_of_the_quadratic():
    r = symcalc.solve("d_model", n_params=1.291059e10, n_layers=40, vocab_size=32000)
    # H = (-2V + sqrt(4V^2 + 48 L Psi)) / (24 L)
    h = (-2 * 32000 + (4 * 32000 ** 2 + 48 * 40 * 1.291059e10) ** 0.5) / (24 * 40)
    assert r.exact == pytest.approx(h, rel=1e-12)
    assert r.value == 5120


def test_young_interval_and_its_inverse():
    r = symcalc.solve("checkpoint_interval", checkpoint_write_time="98 s", mtbf="24h")
    assert r.unit == "min" and r.value == pytest.approx((2 * 98 * 86400) ** 0.5 / 60, rel=1e-12)  # 68.59 min
    inv = symcalc.solve("mtbf", checkpoint_interval="30 min", checkpoint_write_time="98 s")
    assert inv.to("s").magnitude == pytest.approx(1800 ** 2 / (2 * 98), rel=1e-12)               # 16531 s
    # the stall is the write (one explicit step), then Young's law is rearranged for the MTBF
    assert [s.method for s in inv.steps] == ["explicit", "rearranged"]


def test_ring_allreduce_reads_gigabits():
    r = symcalc.solve("allreduce_time", message_size="7.38 GB", n_gpus=128, link_bandwidth="400 Gb/s")
    # 2 * 7.38 GB * 127/128 / 50 GB/s = 292.9 ms
    assert r.to("ms").magnitude == pytest.approx(2 * 7.38 * 127 / 128 / 50 * 1000, rel=1e-12)
    assert r.defaults_used["link_latency"]["value"] == "0 s"
    with_latency = symcalc.solve("allreduce_time", message_size="2 GB", n_gpus=8, link_bandwidth="50 GB/s",
                                 link_latency="5 us")
    assert with_latency.to("ms").magnitude == pytest.approx(70 + 14 * 5e-3, rel=1e-12)  # 70 ms + 14 x 5 us


@pytest.mark.parametrize("stage,expected_gb", [(0, 112), (1, 29.3125), (2, 15.53125), (3, 1.75)])
def test_zero_stages_on_64_gpus(stage, expected_gb):
    # 7B: weights 2, grads 2, optimizer 12 bytes/param; stage s shards more of them over dp = 64
    r = symcalc.solve("model_state_memory", n_params=7e9, n_gpus=64, options={"zero_stage": stage})
    assert r.unit == "GB" and r.value == pytest.approx(expected_gb, rel=1e-12)


def test_tensor_parallelism_shards_model_states_before_zero():
    # 16 bytes/param x 7e9 = 112 GB; TP=8 -> 14 GB per GPU; + ZeRO-3 over dp = 64/8 = 8 -> 1.75 GB
    assert symcalc.solve("model_state_memory", n_params=7e9, tp=8).value == pytest.approx(14, rel=1e-12)
    r = symcalc.solve("model_state_memory", n_params=7e9, n_gpus=64, tp=8, options={"zero_stage": 3})
    assert r.value == pytest.approx(1.75, rel=1e-12)
    r = symcalc.solve("n_params", model_state_memory="80 GB", n_gpus=8, tp=8, options={"zero_stage": 3})
    assert r.value == pytest.approx(80e9 * 8 / 16, rel=1e-12)


def test_inverse_memory_question_largest_model_under_zero3():
    r = symcalc.solve("n_params", model_state_memory="80 GB", dp=8, options={"zero_stage": 3})
    assert r.value == pytest.approx(80e9 * 8 / 16, rel=1e-12)   # 16 bytes/param sharded 8 ways


def test_inverse_ring_allreduce_finds_the_group_size():
    r = symcalc.solve("n_gpus", message_size="2 GB", allreduce_time="70 ms", link_bandwidth="50 GB/s")
    assert r.value == 8          # 2 * 2 GB * 7/8 / 50 GB/s = 70 ms
    r = symcalc.solve("n_gpus", message_size="2 GB", allreduce_time="70.07 ms", link_bandwidth="50 GB/s",
                      link_latency="5 us")
    assert r.value == 8 and r.exact == pytest.approx(8, rel=1e-9)


def test_a_closed_form_singular_at_the_given_values_falls_back_to_numbers():
    # With link_latency given as 0 the two-root closed form divides by it; the engine finds the
    # root numerically instead and says so.
    r = symcalc.solve("n_gpus", message_size="2 GB", allreduce_time="70 ms", link_bandwidth="50 GB/s",
                      link_latency="0 s")
    assert r.exact == pytest.approx(8, rel=1e-9)
    assert any("numerically" in w for w in r.warnings)


def test_arrays_broadcast_into_a_grid():
    gpus = np.array([[64], [128], [256]])
    mfu = np.array([[0.3, 0.4, 0.5]])
    r = symcalc.solve("train_time", n_params=70e9, n_tokens="2e12 token", n_gpus=gpus, mfu=mfu,
                      peak_flops="989 TFLOP/s")
    assert r.value.shape == (3, 3)
    expected = 6 * 70e9 * 2e12 / (gpus * mfu * 989e12) / 86400
    assert np.allclose(r.value, expected, rtol=1e-12)


def test_whole_number_arrays_round_each_element():
    r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day",
                      mfu=np.array([0.3, 0.45, 0.6]), peak_flops="989 TFLOP/s")
    exact = 1.08e23 / (np.array([0.3, 0.45, 0.6]) * 989e12 * 2.592e6)
    assert np.allclose(r.exact, exact) and list(r.value) == list(np.ceil(exact))


def test_the_compiled_function_answers_new_values_without_replanning():
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
    again = r.function(n_params=14e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
    assert again.magnitude == pytest.approx(2 * r.value, rel=1e-12)
    r2 = symcalc.solve("mfu", n_params=14e9, tokens_per_second="150000 token/s", n_gpus=64,
                       peak_flops="1979 TFLOP/s")
    assert r2.derivation is r.derivation          # cached by (target, known names, options)


def test_to_unit_and_quantity():
    r = symcalc.solve("checkpoint_interval", checkpoint_write_time="98 s", mtbf="24h", to="hour")
    assert r.unit == "hour" and r.value == pytest.approx((2 * 98 * 86400) ** 0.5 / 3600, rel=1e-12)
    assert r.quantity_value.to("s").magnitude == pytest.approx((2 * 98 * 86400) ** 0.5)
    with pytest.raises(DimensionError):
        symcalc.solve("checkpoint_interval", checkpoint_write_time="98 s", mtbf="24h", to="GB")


def test_mfu_above_one_is_an_error_or_a_flag():
    kwargs = dict(n_params=7e9, tokens_per_second="1.5e6 token/s", n_gpus=8, peak_flops="989 TFLOP/s")
    with pytest.raises(OutOfBoundsError) as e:
        symcalc.solve("mfu", **kwargs)
    assert "mfu" in e.value.message and "796" in e.value.message   # 6*7e9*1.5e6/(8*989e12) = 7.96
    r = symcalc.solve("mfu", on_bounds="flag", **kwargs)
    assert r.value == pytest.approx(100 * 6 * 7e9 * 1.5e6 / (8 * 989e12)) and r.violations


@pytest.mark.parametrize("kwargs,error", [
    (dict(n_params="7B"), DimensionError),
    (dict(mtbf=24), DimensionError),            # a bare number: hours? seconds?
    (dict(n_gpus=0), DomainError),
    (dict(n_gpus=64.5), DomainError),
    (dict(n_params=-7e9), DomainError),
    (dict(mfu=45), DomainError),
    (dict(n_params="seven"), MalformedValueError),
    (dict(n_param=7e9), UnknownNameError),
])
def test_bad_inputs(kwargs, error):
    with pytest.raises(error):
        symcalc.solve("train_time", **kwargs)


def test_bare_numbers_are_read_in_unambiguous_units():
    r = symcalc.solve("total_flops", n_params=7e9, n_tokens=1e12)     # tokens, no unit needed
    assert r.to("FLOP").magnitude == pytest.approx(6 * 7e9 * 1e12)


def test_flops_is_read_as_the_quantity_it_is_given_for_is_measured():
    # 'TFLOPS' is a rate to a datasheet and an amount to a paper's compute budget: given for
    # peak_flops (FLOP/s) it is the rate, for total_flops (FLOP) the amount, the same numbers
    # as written without the ambiguity; 6 x 7e9 x 1e12 FLOP over 64 x 989 TFLOP/s x 40 % = 16.6 h
    rate = symcalc.solve("train_time", total_flops="4.2e22 FLOPs", n_gpus=64, peak_flops="989 TFLOPS", mfu=0.4)
    plain = symcalc.solve("train_time", total_flops="4.2e22 FLOP", n_gpus=64, peak_flops="989 TFLOP/s", mfu=0.4)
    assert rate.base_value == plain.base_value == pytest.approx(4.2e22 / (64 * 989e12 * 0.4))
    # where neither reading fits the quantity, it is still refused as ambiguous
    with pytest.raises(symcalc.SymcalcError, match="ambiguous"):
        symcalc.solve("train_time", n_params="7 TFLOPs")


def test_underdetermined_api_error_lists_missing_sets():
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu=0.45)
    assert ["peak_flops"] in e.value.missing


def test_unused_values_and_aliases():
    r = symcalc.solve("mfu", Psi=7e9, throughput="150000 token/s", gpus=64, peak="1979 TFLOP/s",
                      mtbf="24h")
    assert r.unused == ["mtbf"] and any("mtbf" in w for w in r.warnings)
    with pytest.raises(symcalc.SymcalcError):
        symcalc.solve("mfu", n_params=7e9, Psi=7e9)


def test_jupyter_shows_latex():
    r = symcalc.solve("checkpoint_interval", checkpoint_write_time="98 s", mtbf="24h")
    latex = r._repr_latex_()
    assert latex.startswith("$$") and r"\tau_{\mathrm{ckpt}}" in latex and r"\sqrt" in latex


def test_an_exact_quotient_is_not_rounded_up_by_float_noise():
    # choose the peak so that exactly 1120 GPUs are needed (seed 004's L4 case is such a quotient)
    peak = 1.08e23 / (0.45 * 2.592e6 * 1120)
    r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu=0.45,
                      peak_flops=(peak, "FLOP/s"))
    assert r.exact == pytest.approx(1120, rel=1e-12) and r.value == 1120


def test_a_tiny_need_still_rounds_up_to_one_gpu():
    r = symcalc.solve("n_gpus", n_params=1, n_tokens="1 token", train_time="30 day", mfu=0.5,
                      peak_flops="989 TFLOP/s")
    assert r.value == 1 and r.exact < 1e-20


def test_a_whole_number_that_rounds_to_zero_is_flagged():
    with pytest.raises(OutOfBoundsError) as e:
        symcalc.solve("d_model", n_params=100, n_layers=40, vocab_size=32000)
    assert "rounds nearest to 0" in e.value.message


def test_overflow_is_named_not_reported_as_nan():
    with pytest.raises(symcalc.NoSolutionError) as e:
        symcalc.solve("mfu", n_params=1e300, tokens_per_second="1e300 token/s", n_gpus=64,
                      peak_flops="1979 TFLOP/s")
    assert "floating point" in e.value.message


def test_rounding_is_right_for_large_counts_and_halves():
    # 3e9 + 0.4 GPUs rounds up to 3e9 + 1 (a relative slack of 1e-9 used to round it *down*)
    r = symcalc.solve("n_gpus", gpu_hours="3000000000.4 hour", train_time="1 hour")
    assert r.value == 3000000001 and r.exact == pytest.approx(3000000000.4, rel=1e-15)
    # nearest rounds halves up: 4096.5 -> 4097 (numpy's np.round would give 4096). Asked of a 2D
    # TP split, tp = tp_x tp_y: dp from n_gpus = 8193 with tp = 2 is refused now (the degrees
    # multiply to the GPU count, and 2 does not divide 8193)
    r = symcalc.solve("tp_x", tp=8193, tp_y=2)
    assert r.value == 4097
    assert any("not a whole number" in w for w in r.warnings)


def test_function_applies_the_same_checks_as_solve():
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
    with pytest.raises(OutOfBoundsError):
        r.function(n_params=7e9, tokens_per_second="1.5e7 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
    g = symcalc.solve("n_gpus", message_size="2 GB", allreduce_time="70 ms", link_bandwidth="50 GB/s")
    with pytest.raises(OutOfBoundsError):    # 300 ms > 2 M / beta = 80 ms: no ring is that slow
        g.function(message_size="2 GB", allreduce_time="300 ms", link_bandwidth="50 GB/s")
    assert g.function(message_size="2 GB", allreduce_time="75 ms", link_bandwidth="50 GB/s").magnitude == 16


def test_results_do_not_share_state_with_the_cache():
    kw = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
    r = symcalc.solve("mfu", **kw)
    r.defaults_used["flops_per_param_per_token"]["magnitude"] = 8.0
    assert symcalc.solve("mfu", **kw).value == pytest.approx(r.value, rel=1e-12)


@pytest.mark.parametrize("call,needle", [
    (lambda: symcalc.solve("mfu", {"n_params": 7e9}, n_params=14e9), "given twice"),
    (lambda: symcalc.solve("mfu", n_params=("abc", "")), "number"),
    (lambda: symcalc.solve("mfu", tokens_per_second=([], "token/s")), "empty"),
    (lambda: symcalc.solve("mfu", options=5), "mapping"),
    (lambda: symcalc.solve("mfu", n_params="7b"), "'b' is the bit"),
    (lambda: symcalc.solve("mfu", mfu="101%"), "(got 101 %)"),
])
def test_api_input_errors_are_clear(call, needle):
    with pytest.raises(symcalc.SymcalcError) as e:
        call()
    assert needle in e.value.message and "did you mean 1.01" not in e.value.message


def test_options_may_be_pairs():
    r = symcalc.solve("model_state_memory", n_params=7e9, dp=64, options=[("zero_stage", 3)])
    assert r.value == pytest.approx(1.75, rel=1e-12)


def test_a_whole_number_answer_can_be_rounded_the_way_the_question_needs(cli):
    # bubble (p - 1) / (m + p - 1) = 10 % with m = 32: p = 1 + 3.2 / 0.9 = 4.556. Nearest would give 5, whose
    # bubble 4/36 = 11.1 % misses the target; the given bubble is a limit (at most 10 %), so the answer rounds
    # down to 4 (3/35 = 8.6 %), the largest that meets it, and says what 5 would do
    r = symcalc.solve("pp", n_microbatches=32, bubble_fraction="10%")
    assert r.value == 4 and r.rounding == "down" and r.exact == pytest.approx(1 + 3.2 / 0.9, rel=1e-12)
    assert r.rounding_reason["limit"] == "bubble_fraction" and r.rounding_reason["other"] == 5
    assert r.rounding_reason["value_there"] == pytest.approx(100 * 4 / 36)
    assert "5 would give bubble_fraction = 11.11 %, above the given 10 %" in r.text()
    # --round still overrides: nearest gives 5 and warns that the values do not fit whole numbers
    near = symcalc.solve("pp", n_microbatches=32, bubble_fraction="10%", rounding="nearest")
    assert near.value == 5 and near.rounding == "nearest" and any("--round" in w for w in near.warnings)
    down = symcalc.solve("pp", n_microbatches=32, bubble_fraction="10%", rounding="down")
    assert down.value == 4 and down.exact == pytest.approx(1 + 3.2 / 0.9, rel=1e-12) and down.rounding == "down"
    assert symcalc.solve("bubble_fraction", n_microbatches=32, pp=4).value == pytest.approx(100 * 3 / 35)
    run = cli("solve", "pp", "n_microbatches=32", "bubble_fraction=10%", "--round", "down", "--json")
    assert run.json()["value"] == 4 and run.json()["rounding"] == "down"
    with pytest.raises(symcalc.SymcalcError) as e:
        symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                      peak_flops="1979 TFLOP/s", rounding="up")
    assert "not a whole number" in e.value.message
