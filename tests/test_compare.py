"""Scenario comparison: the 10 `comparison` worked examples of the seeds, the API and the CLI.

Each comparison example names descriptive quantities (`memory_ratio`, `comm_time_saved`) that
the library need not define; `MAPPING` below says how each becomes one `symcalc.query.compare` call:
the target, side A's inputs (`given`, `options`), what side B changes (`vs`, `vs_options`), and
which measure of the comparison the example's `expected` is. Values written `@key` are taken
from the example's own `given`, and `expected`/`tolerance` always come from the toml.
"""

from __future__ import annotations

import sys

import numpy as np
import pytest

import symcalc
from helpers import DATA, base, close
from symcalc.query.compare import InputDifference

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ALL = tomllib.loads((DATA / "seed_examples.toml").read_text())["example"]
COMPARISONS = [e for e in ALL if e["kind"] == "comparison"]

# measure -> the number the example's `expected` is, from a Comparison (in base units)
MEASURES = {
    "B / A": lambda c: c.ratio.magnitude,
    "A / B": lambda c: 1 / c.ratio.magnitude,
    "B - A": lambda c: c.difference.to_base_units().magnitude,
    "A - B": lambda c: -c.difference.to_base_units().magnitude,
}

MAPPING = {
    "s000_ex2_observed_share_of_potential": dict(
        find="mfu", given={"n_params": "7e9", "n_gpus": "64", "peak_flops": "1979 TFLOP/s",
                           "tokens_per_second": "@tokens_per_second_at_45pct_mfu"},
        vs={"tokens_per_second": "@tokens_per_second"}, measure="B / A",
        reason="seed 000 Ex. 2's cluster (7B, 64 GPUs, 1979 TFLOP/s): throughput is MFU times a constant, "
               "so observed / potential throughput is 4.974 % / 45 % MFU"),
    "s001_zero3_memory_reduction_vs_zero2": dict(
        find="model_state_memory", given={"n_params": "@n_params", "dp": "@dp"},
        options={"zero_stage": "2"}, vs_options={"zero_stage": "3"}, measure="A / B",
        reason="model-state memory per GPU under ZeRO-2 (A) over ZeRO-3 (B)"),
    "s001_zero3_memory_reduction_vs_zero1": dict(
        find="model_state_memory", given={"n_params": "@n_params", "dp": "@dp"},
        options={"zero_stage": "1"}, vs_options={"zero_stage": "3"}, measure="A / B",
        reason="model-state memory per GPU under ZeRO-1 (A) over ZeRO-3 (B)"),
    "s001_grad_accum_comm_saved": dict(
        find="train_time", to="s",
        given={"n_tokens": "4194304 token", "seq_len": "2048 token", "micro_batch_size": "4", "dp": "8",
               "micro_step_time": "120 ms", "allreduce_time": "@allreduce_time", "grad_accum_steps": "1"},
        vs={"grad_accum_steps": "@grad_accum_steps"}, measure="A - B",
        reason="time to train on 2048 sequences (4 per GPU x 8 GPUs per micro-batch, seed 001) with an AllReduce "
               "per micro-batch (A) or per 64 (B): the compute is the same, so the difference is the AllReduce "
               "time saved; the 120 ms micro-step (seed 001's next question) and the 2048-token length cancel"),
    "s001_ckpt_vs_accum_time_ratio": dict(
        find="step_time",
        given={"n_params": "7e9", "seq_len": "4096 token", "n_gpus": "8", "dp": "8", "peak_flops": "989 TFLOP/s",
               "hfu": "50%", "micro_batch_size": "8", "grad_accum_steps": "@grad_accum_steps_no_ckpt"},
        vs={"micro_batch_size": "16", "grad_accum_steps": "@grad_accum_steps_ckpt",
            "recompute_multiplier": "@recompute_multiplier"},
        vs_options={"recompute": "full"}, measure="B / A",
        reason="a 2048-sequence step on 8 GPUs at a fixed hardware FLOP/s (HFU): micro-batch 8 x 32 (A) vs 16 x 16 "
               "recomputing activations (B, 1.33x the FLOPs); model size, length, peak and HFU cancel"),
    "s001_hierarchical_vs_nvlink_ratio": dict(
        find="allreduce_time",
        given={"n_params": "10e9", "bytes_per_grad": "2 byte", "n_gpus": "64", "link_bandwidth": "600 GB/s"},
        vs={"n_gpus": "8", "link_bandwidth": "100 GB/s"}, measure="B / A",
        reason="the 20 GB gradient ring-AllReduced by 64 GPUs over NVLink (A, s001_10b_allreduce_nvlink) vs the "
               "cross-node step, a ring of the full 20 GB among 8 node leaders at 100 GB/s (B, "
               "s001_hierarchical_cross_node)"),
    "s001_1f1b_vs_gpipe_memory_ratio": dict(
        find="activation_memory",
        given={"pp": "@pp", "n_microbatches": "@n_microbatches", "activation_memory_per_microbatch": "2 GB"},
        options={"pipeline_schedule": "gpipe"}, vs_options={"pipeline_schedule": "1f1b"}, measure="A / B",
        reason="first-stage activation memory under GPipe (A, all m micro-batches) over 1F1B (B, pp of them); "
               "seed 001's 2 GB per micro-batch cancels"),
    "s001_13b_mixed_vs_fp32_ratio": dict(
        find="model_state_memory_no_grads", given={"n_params": "@n_params"},
        options={"precision": "fp32_adam"}, vs_options={"precision": "mixed_fp16_adam"}, measure="B / A",
        reason="weights + optimizer states (no gradients, as the seed lists them) in mixed precision (B) over "
               "pure FP32 (A)"),
    "s001_fp8_activation_saving_70b": dict(
        find="activation_memory",
        given={"seq_len": "@seq_len", "micro_batch_size": "@micro_batch_size", "n_layers": "@n_layers",
               "d_model": "@d_model", "n_boundary_tensors": "@n_boundary_tensors",
               "bytes_per_activation": "@bytes_per_activation_baseline"},
        options={"activation_model": "boundary_tensors"}, vs={"bytes_per_activation": "@bytes_per_activation"},
        measure="A - B", reason="the 70B model's boundary-tensor activations in FP16 (A) minus FP8 (B)"),
    "s001_405b_mfu_1pct_saving": dict(
        find="total_cost",
        given={"n_gpus": "16384", "gpu_hour_price": "2 USD/hour", "train_time": "77 day"},
        vs={"train_time": "7700/101 day"}, measure="A - B",
        reason="the 77-day 405B run on 16,384 GPUs at $2/GPU-hour ($60.56M, A) vs the same work at 1.01x the MFU, "
               "which takes 77/1.01 days (time is 1/MFU at fixed work, mfu_definition; B)"),
}


def _resolve(values: dict, example: dict) -> dict:
    """``@key`` -> the example's own given value of ``key``."""
    return {k: example["given"][v[1:]] if isinstance(v, str) and v.startswith("@") else v
            for k, v in values.items()}


def _compare(example: dict) -> symcalc.Comparison:
    m = MAPPING[example["id"]]
    return symcalc.compare(m["find"], _resolve(m["given"], example),
                           options={**example.get("options", {}), **m.get("options", {})},
                           vs=_resolve(m.get("vs", {}), example), vs_options=m.get("vs_options"), to=m.get("to"),
                           on_bounds="raise")


def test_every_comparison_example_is_mapped():
    assert len(COMPARISONS) == 10
    assert set(MAPPING) == {e["id"] for e in COMPARISONS}
    assert all(m["measure"] in MEASURES and len(m["reason"]) > 30 for m in MAPPING.values())


@pytest.mark.parametrize("e", COMPARISONS, ids=[e["id"] for e in COMPARISONS])
def test_comparison_example(e):
    c = _compare(e)
    got = MEASURES[MAPPING[e["id"]]["measure"]](c)
    assert close(got, base(e["expected"]), e["tolerance"]), (got, e["expected"], e["tolerance"])
    assert not c.violations


def test_comparison_examples_show_the_sides_the_seeds_state():
    # the sides themselves, not only the measure: hand computations from the seeds' notes
    by_id = {e["id"]: e for e in COMPARISONS}
    c = _compare(by_id["s001_zero3_memory_reduction_vs_zero2"])
    assert c.a.value == pytest.approx(15.53125) and c.b.value == pytest.approx(1.75)   # 7e9 x (2 + 14/64), 7e9 x 16/64
    c = _compare(by_id["s001_13b_mixed_vs_fp32_ratio"])
    assert (c.a.value, c.b.value) == pytest.approx((156, 182))                          # 13e9 x 12 B, 13e9 x 14 B
    c = _compare(by_id["s001_1f1b_vs_gpipe_memory_ratio"])
    assert (c.a.value, c.b.value) == pytest.approx((24, 8))                             # 12 x 2 GB, 4 x 2 GB
    c = _compare(by_id["s001_grad_accum_comm_saved"])
    assert (c.a.value, c.b.value) == pytest.approx((10.88, 7.73))                       # 64 x (120 + 50) ms, 64 x 120 + 50 ms
    c = _compare(by_id["s001_405b_mfu_1pct_saving"])
    assert c.a.value == pytest.approx(60555264)                                         # 16384 x 77 x 24 x 2


# -- the API ----------------------------------------------------------------------------------

def zero_stages(**kw) -> symcalc.Comparison:
    return symcalc.compare("model_state_memory", n_params=7e9, dp=64, options={"zero_stage": 2},
                           vs_options={"zero_stage": 3}, **kw)


def test_api_values_difference_ratio_and_labels():
    c = zero_stages()
    # ZeRO-2: 7e9 x (2 + (2 + 12)/64) = 15.53125 GB; ZeRO-3: 7e9 x 16/64 = 1.75 GB
    assert c.a.value == pytest.approx(15.53125) and c.b.value == pytest.approx(1.75) and c.unit == "GB"
    assert c.difference.to("GB").magnitude == pytest.approx(1.75 - 15.53125)
    assert c.ratio.magnitude == pytest.approx(1.75 / 15.53125)
    assert c.percent_change == pytest.approx((1.75 / 15.53125 - 1) * 100)
    assert c.differences == [InputDifference("zero_stage", "option", "2", "3")]
    assert (c.label_a, c.label_b) == ("zero_stage=2", "zero_stage=3")
    assert c.same == {"n_params": "7e9", "dp": "64"}
    assert str(c) == "model_state_memory: 15.53 GB (zero_stage=2) vs 1.75 GB (zero_stage=3)"


def test_api_json_and_text():
    c = zero_stages(to="GiB")
    d = c.as_dict()
    assert d["unit"] == "GiB" and d["a"]["value"] == pytest.approx(15.53125e9 / 2**30)
    assert d["difference"] == pytest.approx((1.75e9 - 15.53125e9) / 2**30)
    assert d["ratio"] == pytest.approx(1.75 / 15.53125)
    assert d["differs"] == [{"name": "zero_stage", "kind": "option", "a": "2", "b": "3"}]
    assert d["a"]["result"]["options"]["zero_stage"] == "2" and d["b"]["result"]["steps"]
    assert '"percent_change"' in c.json()
    lines = c.text().splitlines()
    assert lines[0] == "model_state_memory: 14.46 GiB (zero_stage=2) vs 1.63 GiB (zero_stage=3)"
    assert "  difference B - A: -12.83 GiB" in lines and "  ratio B / A: 0.1127  (change -88.73 %)" in lines


def test_api_vs_alias_replaces_the_given_value():
    # Psi is n_params: side B is 13B instead of 7B; 16 bytes/param whole model -> 112 vs 208 GB
    c = symcalc.compare("model_state_memory", {"n_params": 7e9}, vs={"Psi": 13e9})
    assert (c.a.value, c.b.value) == pytest.approx((112, 208))
    assert c.differences == [InputDifference("n_params", "value", "7e9", "1.3e10")]


def test_api_whole_numbers_compare_as_shown():
    # README: 93.62 GPUs rounds up to 94; at twice the MFU 46.81 -> 47; ratio of what is shown: 0.5
    c = symcalc.compare("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu="45%",
                        peak_flops="989 TFLOP/s", vs={"mfu": "90%"})
    assert (c.a.value, c.b.value) == (94, 47) and c.ratio.magnitude == 0.5 and c.difference.magnitude == -47
    assert "(exact 93.6224, rounded up)" in c.text()


def test_api_arrays_broadcast():
    # train time is 1/MFU: 40 % -> 50 % is a ratio of 0.8 at every GPU count
    c = symcalc.compare("train_time", n_params=70e9, n_tokens="2e12 token", n_gpus=np.array([64, 128, 256]),
                        mfu="40%", peak_flops="989 TFLOP/s", vs={"mfu": "50%"})
    assert c.ratio.magnitude == pytest.approx(np.full(3, 0.8))
    assert c.difference.magnitude.shape == (3,)


def test_api_zero_denominator_is_reported():
    # no AllReduce saved without accumulation (A: (1 - 1) x 50 ms = 0), 63 x 50 ms = 3.15 s with 64 (B)
    c = symcalc.compare("comm_time_saved_by_accum", grad_accum_steps=1, allreduce_time="50 ms",
                        vs={"grad_accum_steps": 64})
    assert c.a.value == 0 and c.difference.to("s").magnitude == pytest.approx(3.15)
    assert c.ratio is None and c.percent_change is None
    assert c.notes == ["ratio B / A undefined: A is 0"] and "ratio B / A undefined: A is 0" in c.text()
    assert c.as_dict()["ratio"] is None


def test_api_presets_differ():
    # train time is 1/peak: H100 SXM's dense BF16 989.4 TFLOP/s vs A100's 312 TFLOP/s
    c = symcalc.compare("train_time", n_params=70e9, n_tokens="2e12 token", n_gpus=1024, mfu="40%",
                        hardware="h100", vs_hardware="a100-80gb")
    assert c.ratio.magnitude == pytest.approx(989.4 / 312)
    assert c.differences == [InputDifference("hardware", "preset", "h100_sxm", "a100_80gb")]
    assert [(d.name, d.b) for d in c.preset_values] == [("peak_flops", "312 TFLOP/s")]


def test_api_warnings_and_bounds_are_carried():
    # GPipe never needs pp: side B warns; 1.5e6 token/s on 8 GPUs is an MFU of
    # 6 x 7e9 x 1.5e6 / (8 x 989e12) = 796.3 %: flagged, and both values still shown
    c = symcalc.compare("activation_memory", pp=4, n_microbatches=12, activation_memory_per_microbatch="2 GB",
                        vs_options={"pipeline_schedule": "gpipe"})
    assert any(side == "B" and "pp" in w for side, w in c.warnings) and not any(s == "A" for s, _ in c.warnings)
    c = symcalc.compare("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=8, peak_flops="989 TFLOP/s",
                        vs={"tokens_per_second": "1.5e6 token/s"})
    assert c.b.value == pytest.approx(6 * 7e9 * 1.5e6 / (8 * 989e12) * 100)
    assert [side for side, _ in c.violations] == ["B"] and "OUT OF BOUNDS (B): mfu = 796.3 %" in c.text()
    with pytest.raises(symcalc.OutOfBoundsError, match=r"^side B \(tokens_per_second=1.5e6 token/s\): mfu"):
        symcalc.compare("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=8,
                        peak_flops="989 TFLOP/s", vs={"tokens_per_second": "1.5e6 token/s"}, on_bounds="raise")


def test_api_text_quantity_has_no_difference():
    # seed 004's 70B on an H100-like GPU is compute-bound (r_comp 1,785.7 < r_net 6,531 token/s at
    # 200 Gb/s); a NIC ten times slower makes r_net 653.1 token/s, the binding bound
    e = next(x for x in ALL if x["id"] == "s004_h100_bound")
    c = symcalc.compare("bound", e["given"], vs={"nic_bandwidth": "20 Gb/s"})
    assert (c.a.value, c.b.value) == ("compute", "network")
    assert c.difference is None and c.ratio is None and c.notes == ["bound is text: there is no difference or ratio"]


def test_api_errors():
    with pytest.raises(symcalc.SymcalcError, match="both sides are the same"):
        symcalc.compare("model_state_memory", n_params=7e9, options={"zero_stage": 3}, vs_options={"zero_stage": 3})
    with pytest.raises(symcalc.SymcalcError, match="both sides are the same"):
        symcalc.compare("model_state_memory", n_params=7e9, vs={"n_params": "7e9"})     # same value, same side
    with pytest.raises(symcalc.UnknownNameError, match="n_params"):
        symcalc.compare("model_state_memory", n_params=7e9, vs={"n_param": 13e9})
    # 1F1B needs only pp; GPipe needs the micro-batch count, which side B lacks
    with pytest.raises(symcalc.UnderdeterminedError, match=r"^side B \(pipeline_schedule=gpipe\): .*n_microbatches"):
        symcalc.compare("activation_memory", pp=4, activation_memory_per_microbatch="2 GB",
                        vs_options={"pipeline_schedule": "gpipe"})


# -- the command line -------------------------------------------------------------------------

ZERO = ["compare", "model_state_memory", "n_params=7e9", "dp=64", "--option", "zero_stage=2"]


def test_cli_text(cli):
    run = cli(*ZERO, "--vs", "zero_stage=3")
    assert run.code == 0 and run.err == ""
    lines = run.out.splitlines()
    assert lines[0] == "model_state_memory: 15.53 GB (zero_stage=2) vs 1.75 GB (zero_stage=3)"
    assert "  A: model_state_memory = 15.53 GB  [zero_stage=2]" in lines
    assert "  B: model_state_memory = 1.75 GB   [zero_stage=3]" in lines
    assert "  difference B - A: -13.78 GB" in lines                  # 1.75 - 15.53125
    assert "  ratio B / A: 0.1127  (change -88.73 %)" in lines       # 1.75 / 15.53125
    assert "Same on both sides: n_params=7e9, dp=64" in lines


def test_cli_json(cli):
    d = cli(*ZERO, "--vs", "zero_stage=3", "--json").json()
    assert d["a"]["value"] == pytest.approx(15.53125) and d["b"]["value"] == pytest.approx(1.75)
    assert d["ratio"] == pytest.approx(1.75 / 15.53125) and d["differs"][0]["name"] == "zero_stage"


def test_cli_vs_given_value(cli):
    # seed 000 Ex. 2: 150000 token/s is 4.974 % MFU; 45 % MFU would be 1357028.6 token/s
    d = cli("compare", "mfu", "n_params=7e9", "n_gpus=64", "peak_flops=1979 TFLOP/s",
            "tokens_per_second=1357028.6 token/s", "--vs", "tokens_per_second=150000 token/s", "--json").json()
    assert d["a"]["value"] == pytest.approx(45, rel=1e-6)
    assert d["b"]["value"] == pytest.approx(6 * 7e9 * 150000 / (64 * 1979e12) * 100)
    assert d["ratio"] == pytest.approx(150000 / 1357028.6) and d["unit"] == "%"


def test_cli_vs_option_and_value_together(cli):
    # ZeRO-3 over 64 GPUs of a 13B model: 13e9 x 16 / 64 = 3.25 GB vs 7B at ZeRO-2 15.53125 GB
    run = cli(*ZERO, "--vs", "zero_stage=3", "--vs", "n_params=13e9")
    assert run.code == 0
    assert run.out.splitlines()[0] == ("model_state_memory: 15.53 GB (n_params=7e9, zero_stage=2) "
                                       "vs 3.25 GB (n_params=13e9, zero_stage=3)")


def test_cli_vs_hardware(cli):
    run = cli("compare", "train_time", "n_params=70e9", "n_tokens=2e12 token", "n_gpus=1024", "mfu=40%",
              "--hardware", "h100", "--vs", "hardware=a100-80gb", "--to", "day")
    assert run.code == 0
    # 6 x 70e9 x 2e12 / (0.4 x 989.4e12 x 1024) s = 23.99 day; on A100 (312 TFLOP/s) 76.08 day
    assert run.out.splitlines()[0] == "train_time: 23.99 day (hardware=h100_sxm) vs 76.08 day (hardware=a100_80gb)"
    assert "  from presets: peak_flops=989.4 TFLOP/s (A), peak_flops=312 TFLOP/s (B)" in run.out.splitlines()


def test_cli_warnings_go_to_stderr(cli):
    run = cli("compare", "activation_memory", "pp=4", "n_microbatches=12", "activation_memory_per_microbatch=2 GB",
              "--vs", "pipeline_schedule=gpipe")
    assert run.code == 0 and run.out.splitlines()[0] == ("activation_memory: 8 GB (pipeline_schedule=1f1b) "
                                                         "vs 24 GB (pipeline_schedule=gpipe)")
    assert run.err.startswith("warning (B): not used by this derivation: pp")


CLI_ERRORS = [
    (ZERO + ["--vs", "zero=3"], "unknown_name", "Did you mean: zero_stage"),
    (ZERO, "usage", "--vs"),
    (ZERO + ["--vs", "zero_stage=2"], "bad_query", "both sides are the same"),
    (ZERO + ["--vs", "zero_stage=7"], "bad_option_value", "0, 1, 2, 3"),
    (ZERO + ["--vs", "n_params=7B"], "dimension", "n_params"),
    (ZERO + ["--vs", "hardware=h1000"], "unknown_name", "h100"),
    (ZERO + ["--vs", "zero_stage"], "usage", "NAME=VALUE"),
    (["compare", "mfu", "n_params=7e9", "n_gpus=8", "--vs", "n_gpus=16"], "underdetermined", "side A (n_gpus=8)"),
    (ZERO + ["--vs", "zero_stage=3", "--to", "hour"], "dimension", "cannot show model_state_memory in hour"),
]


@pytest.mark.parametrize("args,kind,needle", CLI_ERRORS, ids=[f"{i}-{k}" for i, (_, k, _) in enumerate(CLI_ERRORS)])
def test_cli_errors_are_one_line_and_exit_2(cli, args, kind, needle):
    run = cli(*args)
    assert run.code == 2 and run.out == ""
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], run.err
    run = cli(*args, "--json")
    assert run.code == 2
    err = run.json()["error"]
    assert err["kind"] == kind and needle in err["message"]


def test_python_vs_takes_options_and_presets_as_the_command_line_does():
    """vs={"zero_stage": 3} changes the option (as --vs zero_stage=3 does), vs={"hardware": ...}
    the preset: 2 + 14/64 = 2.22 against 16/64 = 0.25 bytes a parameter for 7B (15.53 vs 1.75 GB);
    an unknown name is refused with the closest names."""
    import symcalc
    c = symcalc.compare("model_state_memory", {"n_params": 7e9, "dp": 64}, options={"zero_stage": "2"},
                        vs={"zero_stage": 3})
    assert c.a.value == pytest.approx(15.53125) and c.b.value == pytest.approx(1.75)
    h = symcalc.compare("train_time", {"n_gpus": 64, "mfu": "40%"}, model="llama3-8b", hardware="a100",
                        vs={"hardware": "h100"})
    assert h.b.value < h.a.value and h.differences[0].name == "hardware"
    with pytest.raises(symcalc.UnknownNameError, match="zero_stage"):
        symcalc.compare("model_state_memory", {"n_params": 7e9, "dp": 64}, vs={"zeroo_stage": 3})
