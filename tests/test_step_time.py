"""The step-time model (issue 11): calibrated on published runs, asked as users ask it, backwards.

The calibration table predicts the 27 runs of calibration/published_runs.toml (the ten
Megatron-LM 2021 A100 runs, the Megatron-Core H100 run, llm-foundry's FSDP runs, torchtitan's and
NeMo's) from their configurations alone, in-sample (the hardware's and the stacks' coefficients
were fitted on them) and leave-one-source-out (each source predicted by a fit on the others).
The other tests ask the GPT-3 175B question of issue 11 as Megatron-LM ran it in 2021
(``--stack megatron-lm-2021``) through the CLI and check the parts of the answer by hand.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import numpy as np
import pytest

import symcalc

ROOT = Path(__file__).resolve().parent.parent
GPT3 = ["--hardware", "a100-80gb", "d_model=12288", "n_layers=96", "n_heads=96", "vocab_size=51200",
        "seq_len=2048 token", "tp=8", "pp=8", "dp=16", "n_gpus=1024", "global_batch_size=1536",
        "micro_batch_size=1", "--stack", "megatron-lm-2021", "--option", "recompute=full"]
GIVEN = dict(d_model=12288, n_layers=96, n_heads=96, vocab_size=51200, seq_len="2048 token", tp=8, pp=8, dp=16,
             n_gpus=1024, global_batch_size=1536, micro_batch_size=1)
# Megatron-LM as of 2021 (the stack sets eager attention, every TP collective and the gradient
# AllReduce on the critical path, no ZeRO), with full recomputation as the paper ran GPT-3
OPTIONS = {"stack": "megatron-lm-2021", "recompute": "full"}
PARTS = ("step_compute_time", "step_tp_comm_time", "step_p2p_time", "pipeline_bubble_time",
         "exposed_dp_comm_time", "optimizer_step_time")


def _fit_module():
    spec = importlib.util.spec_from_file_location("calibration_fit", ROOT / "calibration" / "fit.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _gpt3(**changes):
    return symcalc.solve("step_time", {**GIVEN, **changes}, hardware="a100-80gb", options=OPTIONS)


@pytest.fixture(scope="module")
def fit():
    return _fit_module()


@pytest.fixture(scope="module")
def calibration_runs(fit):
    return fit.measured(fit.published.calibration_runs())


# -- calibration (in-sample, and leave-one-source-out) ------------------------------------------------

def test_calibration_table_in_sample(fit, calibration_runs, capsys):
    """The 27 runs with the library's coefficients, within the in-sample bar: mean |error| <= 5 %,
    max <= 12 %; the ten Megatron-LM 2021 A100 runs (Narayanan et al. 2021, Table 1, the source
    with the most runs and the best-known configurations) each within 5 %."""
    errors = fit.predict_with(calibration_runs, None)
    table = fit.table(calibration_runs, errors, "in-sample")
    with capsys.disabled():
        print("\n" + table)
    assert len(errors) == 27 and np.isfinite(errors).all(), table
    assert np.abs(errors).mean() <= 0.05 and np.abs(errors).max() <= 0.12, table
    megatron = [e for r, e in zip(calibration_runs, errors) if r.group == "megatron_2021"]
    assert len(megatron) == 10 and max(abs(e) for e in megatron) <= 0.05, table


def test_calibration_leave_one_source_out(fit, calibration_runs, capsys):
    """Each source predicted by a fit on the others only (a stack or GPU no other source has
    keeps its prior): the honest figure for a stack the model has not seen. Its mean |error|
    over all runs stays below 15 % (the in-sample fit is within 5 %)."""
    errors = fit.loso(calibration_runs)
    table = fit.table(calibration_runs, errors, "leave-one-source-out")
    with capsys.disabled():
        print("\n" + table)
    assert np.isfinite(errors).all(), table
    assert np.abs(errors).mean() < 0.15, table


def test_narayanan_flop_count_by_hand(fit):
    """GPT-3 175B, batch 1536: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) = 4.5110e18 FLOP per iteration
    (2.89910e10 x 1.509949e8 = 4.37755e18, x 1.030490)."""
    assert fit.published.narayanan_flops(1536, 2048, 96, 12288, 51200) == pytest.approx(4.5110e18, rel=1e-4)


def test_hardware_figures_follow_from_the_measurements(fit):
    """A100 NVLink ring, alpha-beta through the two measured bus bandwidths (8 GPUs, f = 2*7/8):
    t(1 GB) = 1.75e9/228e9 = 7.675 ms, t(8 GB) = 14e9/231.58e9 = 60.454 ms, so the bandwidth is
    1.75 x 7e9 / 52.779 ms = 232.1 GB/s and a ring step's latency (7.675 ms - 1.75e9/232.1e9)/14
    = 9.69 us; the preset carries the same figures."""
    beta, alpha = fit.alpha_beta(228.0, 231.58)
    assert beta == pytest.approx(232.1e9, rel=1e-3) and alpha == pytest.approx(9.69e-6, rel=1e-2)
    bw = symcalc.solve("intra_node_bus_bandwidth", hardware="a100-80gb")
    assert bw.to("GB/s").magnitude == pytest.approx(232.1, rel=1e-3)


# -- the question as users ask it -------------------------------------------------------------------

def test_gpt3_step_time_breakdown_text(cli):
    """The breakdown names every part, and the parts add up to the step."""
    run = cli("solve", "step_time", *GPT3)
    assert run.code == 0, run.err
    lines = run.out.splitlines()
    assert lines[0].startswith("step_time = ")
    assert "Breakdown of step_time" in run.out
    for part in PARTS:
        assert part in run.out


def test_gpt3_step_time_breakdown_json_adds_up(cli):
    """JSON: breakdown.parts sum to the total, shares sum to 1. The bubble is (pp - 1) micro-batch
    times on a stage (1F1B): 7 x micro_step_time; the step's compute + TP + p2p are 96 of them
    (1536 / (16 x 1) micro-batches)."""
    run = cli("solve", "step_time", *GPT3, "--json")
    assert run.code == 0, run.err
    data = run.json()
    parts = {p["name"]: p["value"] for p in data["breakdown"]["parts"]}
    assert sum(parts.values()) == pytest.approx(data["breakdown"]["total"], rel=1e-12)
    assert sum(p["share"] for p in data["breakdown"]["parts"]) == pytest.approx(1.0, rel=1e-12)
    r = _gpt3()
    micro = r.values["micro_step_time"]
    assert parts["pipeline_bubble_time"] == pytest.approx(7 * micro, rel=1e-12)
    assert parts["step_compute_time"] + parts["step_tp_comm_time"] + parts["step_p2p_time"] == \
        pytest.approx(96 * micro, rel=1e-12)


def test_gpt3_step_time_near_the_published_figure():
    """Narayanan et al. 2021 (sec. 5.1): GPT-3 175B on 1024 A100s, batch 1536, 140 TFLOP/s per GPU
    in their count, 4.5110e18 FLOP per iteration: 4.5110e18 / (1024 x 140e12) = 31.47 s. Not in
    the calibration file (its 145B and 310B rows are); run on the code of those rows, so within
    their 5 % (the model says 30.56 s, -2.9 %, at the time of writing)."""
    predicted = _gpt3().to("s").magnitude
    assert predicted == pytest.approx(4.5110e18 / (1024 * 140e12), rel=0.05)


def test_gpt3_with_model_preset_gives_the_same_step(cli):
    shapes = [a for a in GPT3 if not a.split("=")[0] in ("d_model", "n_layers", "n_heads", "vocab_size")]
    a = cli("solve", "step_time", *GPT3, "--json").json()["value"]
    b = cli("solve", "step_time", "--model", "gpt3-175b", *shapes, "--json")
    assert b.code == 0, b.err
    assert b.json()["value"] == pytest.approx(a, rel=0.01)


def test_interleaving_divides_the_bubble_by_the_virtual_stages():
    """Interleaved 1F1B: bubble = (pp - 1)/v micro-batch times; v = 3 (96 layers / 8 stages = 12
    layers, 4 per chunk) leaves a third of the 1F1B bubble, for the same micro-batch time."""
    plain = _gpt3()
    inter = symcalc.solve("step_time", {**GIVEN, "virtual_stages": 3}, hardware="a100-80gb",
                          options={**OPTIONS, "pipeline_schedule": "interleaved"})
    ratio = inter.values["pipeline_bubble_time"] / plain.values["pipeline_bubble_time"]
    assert ratio == pytest.approx(inter.values["micro_step_time"] / plain.values["micro_step_time"] / 3, rel=1e-9)
    assert inter.to("s").magnitude < plain.to("s").magnitude


def test_zero3_adds_data_parallel_traffic():
    """Per micro-batch ZeRO-3 moves 1.5x the bytes of ZeRO-1 a step (an all-gather in forward and
    in backward and a reduce-scatter, against one reduce-scatter and one all-gather); it does so
    in each of the 96 micro-batches, ZeRO-1 once a step: its collectives take 3 x 96 / 2 = 144
    times ZeRO-1's (all in 2-byte parameters and gradients, each the same ring time a layer).
    Megatron-DeepSpeed runs both, without a pipeline (Megatron-LM 2021 has no ZeRO; DeepSpeed's
    pipeline engine refuses ZeRO-2 and ZeRO-3): GPT-3's layout with pp folded into dp."""
    given = {**GIVEN, "pp": 1, "dp": 128}

    def solve(target, zero):
        return symcalc.solve(target, given, hardware="a100-80gb",
                             options={**OPTIONS, "stack": "deepspeed", "zero_stage": zero})
    z1, z3 = solve("dp_comm_time", "1"), solve("dp_comm_time", "3")
    assert z3.value == pytest.approx(3 * 12 / 2 * z1.value, rel=1e-12)     # 1536 / 128 = 12 micro-batches
    assert solve("step_time", "3").values["exposed_dp_comm_time"] > \
        solve("step_time", "1").values["exposed_dp_comm_time"]


def test_deepspeed_refuses_zero3_with_a_pipeline_in_one_line(cli):
    """DeepSpeed's PipelineEngine asserts a ZeRO stage below 2 (deepspeed/runtime/pipe/engine.py):
    GPT-3 at pp8 under ZeRO-3 is refused naming the rule and the value given; ZeRO-1 at pp8 and
    ZeRO-3 at pp1 are answered; a plan never ranks a ZeRO-2 or -3 layout with pp > 1 there."""
    args = [f"{k}={v}" for k, v in GIVEN.items()]
    bad = cli("solve", "step_time", *args, "--hardware", "a100-80gb", "--option", "stack=deepspeed",
              "--option", "recompute=full", "--option", "zero_stage=3")
    assert bad.code == 2 and bad.err.count("\n") == 1
    assert "stack=deepspeed requires pp == 1 with zero_stage = 2 or 3" in bad.err and "pp = 8 was given" in bad.err
    ok = cli("solve", "step_time", *args, "--hardware", "a100-80gb", "--option", "stack=deepspeed",
             "--option", "recompute=full", "--option", "zero_stage=1")
    assert ok.code == 0
    p = symcalc.plan("gpt3-175b", "a100-80gb", 384, global_batch_size=2048, top=20, options={"stack": "deepspeed"})
    assert all(r.layout["pp"] == 1 for r in p.rows if int(r.options["zero_stage"]) >= 2)
    assert any("requires pp == 1 with zero_stage = 2 or 3" in why for why in p.rejected)


def test_selective_recompute_with_sequence_parallel_is_faster_than_full():
    """Selective recomputation re-runs only the attention core, not the whole forward:
    fewer FLOPs, so a shorter step (Korthikanti et al. 2022 measure 13.75 against 18.13 s)."""
    full = _gpt3()
    sel = symcalc.solve("step_time", GIVEN, hardware="a100-80gb",
                        options={**OPTIONS, "recompute": "selective", "sequence_parallel": "true"})
    assert sel.to("s").magnitude < full.to("s").magnitude
    assert sel.values["step_compute_time"] < full.values["step_compute_time"]


def test_a_missing_micro_batch_is_named_with_its_usual_value(cli):
    run = cli("solve", "step_time", *[a for a in GPT3 if not a.startswith("micro_batch_size")])
    assert run.code == 2
    line = run.err.strip()
    assert "micro_batch_size (usually 1" in line and line.count("\n") == 0
    assert line.index("micro_batch_size") < line.index("memory_headroom")


def test_show_step_time_explains_the_model(cli):
    """`symcalc show step_time` names the model's mechanisms: the bubble, the collectives and
    their contention, the layer-by-layer data-parallel overlap with its first gather, FP8 only
    where the recipe puts it, attention by sequence length, the stacks, and what it needs."""
    info = cli("show", "step_time", "--json").json()
    for words in ("bubble", "AllReduce", "comm_contention", "first gather", "FP8", "sequence length",
                  "--stack", "micro_batch_size"):
        assert words in info["model"], words


def test_latex_derivation_has_the_breakdown_and_compiles(tmp_path, pdflatex, cli):
    tex = tmp_path / "step.tex"
    run = cli("solve", "step_time", *GPT3, "--latex", str(tex))
    assert run.code == 0, run.err
    text = tex.read_text()
    assert "Breakdown" in text
    done = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", tex.name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-2000:]
    assert (tmp_path / "step.pdf").stat().st_size > 1000


def test_a_given_mfu_still_wins():
    """A user's MFU overrides the model: step = 6 N tokens / (mfu x peak x n) with
    N = 1.752e11, 1536 x 2048 tokens, 312 TFLOP/s, 1024 GPUs at 50 %: 20.2 s."""
    r = symcalc.solve("step_time", {**GIVEN, "mfu": 0.5}, hardware="a100-80gb", options=OPTIONS)
    n = r.values["n_params"]
    assert r.to("s").magnitude == pytest.approx(6 * n * 1536 * 2048 / (0.5 * 312e12 * 1024), rel=1e-6)


# -- backwards ---------------------------------------------------------------------------------------

def test_nic_bandwidth_for_five_percent_exposed_dp_by_hand():
    """The NIC bandwidth B that keeps exposed DP communication at 5 % of the step, by hand.
    tp = 8 fills a node, so each DP ring (16 ranks, one a node) crosses the NICs at 0.94 B, 10 us
    a hop. Megatron-LM 2021 all-reduces the 2-byte gradients once a step after the last
    backward, layer by layer: the 12 layers of the last stage, each its TP shard with its share
    of the two embedding matrices, P = (12 d^2 + 2 V d / 96) / 8 = 228,130,816 parameters:
    DP = 12 (2 (15/16) 2 P / (0.94 B) + 2 x 15 x 10 us). B also carries the pipeline's
    point-to-point sends: 2 (2048 x 12288 x 2 / 8 bytes / (0.94 B) + 10 us) per micro-batch,
    96 micro-batches plus 7 in the bubble. The rest of a micro-batch's stage time (compute and
    TP, inside the node) and the optimizer do not depend on B; they come from the forward answer
    at the preset's 25 GB/s. Then DP = 0.05 x step, solved for B by bisection (6.87 GB/s with the
    coefficients at the time of writing)."""
    base = _gpt3()
    v = base.values
    eff, lat, d, V = 0.94, 10e-6, 12288, 51200
    P = (12 * d * d + 2 * V * d / 96) / 8
    assert v["layer_gathered_params"] == P
    p2p = lambda b: 2 * (2048 * d * 2 / 8 / (eff * b) + lat)   # noqa: E731
    compute_and_tp = v["micro_step_time"] - p2p(25e9)
    dp = lambda b: 12 * (2 * 15 / 16 * 2 * P / (eff * b) + 2 * 15 * lat)   # noqa: E731
    step = lambda b: 103 * (compute_and_tp + p2p(b)) + v["optimizer_step_time"] + dp(b)   # noqa: E731
    assert dp(25e9) == pytest.approx(v["exposed_dp_comm_time"], rel=1e-12)
    assert step(25e9) == pytest.approx(base.to("s").magnitude, rel=1e-12)    # the hand model is the model
    lo, hi = 1e9, 100e9
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if dp(mid) / step(mid) > 0.05 else (lo, mid)
    r = symcalc.solve("nic_bandwidth", {**GIVEN, "dp_comm_fraction": 0.05}, hardware="a100-80gb", options=OPTIONS)
    assert r.to("GB/s").magnitude == pytest.approx(lo / 1e9, rel=1e-6)


def test_largest_tp_whose_communication_stays_under_eight_percent():
    """tp for tp_comm_fraction <= 8 % (dp = 16, everything else as GPT-3's run), against the hand
    model of tests/test_step_time_function.py (tp a real number there): a micro-batch's exposed
    TP time, 12 layers x 2 AllReduces x 3 passes x (2 (t-1)/t 50,331,648 B / 232.1 GB/s +
    2 (t-1) 9.69 us), over its whole time on the last stage. Bisection puts the crossing at
    5.41 (at the time of writing); a limit from above rounds down to 5, and 5 does not divide
    GPT-3's 96 heads (the planner's rule tp_heads, which solve applies to a degree it solves for):
    4, the nearest below that does. Checked forwards: tp = 4 gives at most 8 % and tp = 6, the
    next that divides 96, more (the forward derivation does not share the backward one's torn
    block)."""
    from test_step_time_function import hand

    def fraction(t):
        h = hand(t, 8, 16, 1, 128 * t)
        return float(h["tp"] / h["micro"])
    lo, hi = 1.0, 8.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if fraction(mid) <= 0.08 else (lo, mid)
    r = symcalc.solve("tp", {k: v for k, v in GIVEN.items() if k not in ("tp", "n_gpus")} | {"tp_comm_fraction": 0.08},
                      hardware="a100-80gb", options=OPTIONS)
    assert r.exact == pytest.approx(lo, rel=1e-6)
    assert int(lo) == 5 and 96 % 5 and r.value == 4 and r.rounding == "down"
    [ruled] = [f for f in r.findings if f.kind == "rounded_to_rule"]
    assert ruled.values["was"] == 5 and ruled.values["rules"] == ["tp_heads"]
    at = {t: symcalc.solve("tp_comm_fraction", {**GIVEN, "tp": t, "n_gpus": t * 128}, hardware="a100-80gb",
                           options=OPTIONS).values for t in (4, 6)}
    for t, values in at.items():
        tp_by_hand = 12 * 2 * 3 * (2 * (t - 1) / t * 2048 * 12288 * 2 / 232.1e9 + 2 * (t - 1) * 9.69e-6)
        assert values["stage_tp_comm_time"] == pytest.approx(tp_by_hand, rel=1e-12)
        assert values["tp_comm_fraction"] == pytest.approx(fraction(t), rel=1e-12)
    assert at[4]["tp_comm_fraction"] <= 0.08 < at[6]["tp_comm_fraction"]


def test_micro_batches_for_a_small_bubble_by_hand():
    """1F1B bubble share (p - 1)/(m + p - 1) <= 3 % at pp = 8: m >= 7 x 0.97 / 0.03 = 226.3, so
    227 micro-batches (rounded up: 226 would leave 3.004 %)."""
    g = {k: v for k, v in GIVEN.items() if k != "global_batch_size"}
    r = symcalc.solve("n_microbatches", {**g, "bubble_fraction": 0.03}, hardware="a100-80gb", options=OPTIONS)
    assert r.value == 227 and r.rounding == "up"


# -- memory that matches what runs --------------------------------------------------------------------

@pytest.mark.parametrize("kernel,fits", [("eager", 11), ("flash", 15)])
def test_full_recompute_counts_one_layers_working_set(kernel, fits):
    """Llama 2 7B (6.738e9 params, 32 layers, d 4096, 32 heads, SwiGLU d_ffn 11008, vocabulary
    32000, no dropout) on an H100 (81559 MiB = 85.52 GB), ZeRO-1 over 8, seq 4096, full recomputation;
    the tensors' peak (memory_figure = allocated). Model states 6.738e9 x (2 + 2 + 12/8) = 37.06 GB leave 48.46 GB. Per sequence of the micro-batch: 32 stored layer
    inputs of 2 x 4096 x 4096 bytes (1.074 GB), plus one layer's activations while it is
    recomputed, counted from the architecture: 4 d of norm inputs and outputs, Q, K, V and the
    attention output (4 d) and SwiGLU's gate, up projection and product (3 x 11008), 2 bytes each:
    4096 x 2 x (4 x 4096 + 4 x 4096 + 3 x 11008) = 0.539 GB; with eager attention the softmax
    output, 2 x 32 x 4096^2 (1.074 GB, no dropout); with flash its fp32 log-sum-exp, 4 x 32 x 4096;
    and the logits and cross-entropy at the backward's peak, 4096 x 32000 x 12 bytes (1.573 GB).
    Eager: 48.46 / 4.260 = 11.38 -> 11; flash: 48.46 / 3.186 = 15.21 -> 15."""
    r = symcalc.solve("micro_batch_size", {"dp": 8, "n_gpus": 8, "memory_headroom": "0 GB", "seq_len": "4096 token"},
                      model="llama2-7b", hardware="h100",
                      options={"zero_stage": "1", "recompute": "full", "attention_kernel": kernel,
                               "memory_figure": "allocated", "stack": "textbook"})
    layer = 4096 * 2 * (4 * 4096 + 4 * 4096 + 3 * 11008)
    per_sequence = (32 * 2 * 4096 * 4096 + layer + (2 * 32 * 4096 ** 2 if kernel == "eager" else 4 * 32 * 4096)
                    + 4096 * 32000 * 12)
    free = 81559 * 2**20 - 6738415616 * (2 + 2 + 12 / 8)
    assert r.exact == pytest.approx(free / per_sequence, rel=1e-6)
    assert r.value == fits


def test_experts_shard_over_expert_parallelism():
    """Mixtral 8x7B (46.70e9 params; 32 layers x 8 experts x 3 x 4096 x 14336 = 45.10e9 in
    experts), tp 2, dp 8, ZeRO-1. ep = 8: a GPU holds the dense 1.60e9 / 2 and one expert of each
    layer, 45.10e9 / 8 / 2 = 2.819e9: 3.62e9 parameters at 2 + 2 bytes; Adam's 12 bytes are
    sharded to n_params / (tp dp) = 2.919e9 parameters' worth (experts over dp / ep = 1 rank, the
    dense part over 8). 4 x 3.619e9 + 12 x 2.919e9 = 49.5 GB; ep = 1 holds every expert."""
    def states(ep):
        return symcalc.solve("model_state_memory", {"tp": 2, "pp": 1, "ep": ep, "dp": 8, "n_gpus": 16},
                             model="mixtral-8x7b", hardware="h100", options={"zero_stage": "1"})
    r8 = states(8)
    n = r8.values["n_params"]
    experts = 32 * 8 * 3 * 4096 * 14336
    per_gpu = (n - experts) / 2 + experts / 8 / 2
    assert r8.to("GB").magnitude == pytest.approx((4 * per_gpu + 12 * n / 16) / 1e9, rel=1e-6)
    assert states(1).to("GB").magnitude == pytest.approx((4 * n / 2 + 12 * n / 16) / 1e9, rel=1e-6)


def test_interleaved_pipeline_sends_hide_behind_the_stage_compute_under_megatron_core():
    """Megatron-Core overlaps the interleaved schedule's sends with the chunks' compute
    (--overlap-p2p-communication, on by default; off without interleaving): NVIDIA's Llama 3
    70B FP8 layout on 64 H100s (tp4 pp8 v5 dp2). By hand from the answer's own values: each
    micro-batch sends 2 x v = 10 activations of 8192 x 8192 x 2 bytes / tp4 over the 47 GB/s
    between nodes, plus a 10 us step each: 7.24 ms; the stage computes for ~143 ms a
    micro-batch, so only the contention's share of the sends is exposed,
    comm_contention x 7.24 ms; under 1F1B, or with the overlap off, all of it is."""
    given = dict(n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, vocab_size=128256, seq_len="8192 token",
                 d_ffn=28672, tp=4, pp=8, cp=1, dp=2, n_gpus=64, global_batch_size=256, micro_batch_size=1,
                 virtual_stages=5)
    opts = {"stack": "megatron-core", "attention": "gqa", "ffn": "swiglu", "pipeline_schedule": "interleaved",
            "zero_stage": "1", "recompute": "none", "precision": "fp8", "fp8_recipe": "current",
            "sequence_parallel": "true"}
    r = symcalc.solve("step_time", given, hardware="h100", options=opts)
    v = r.values
    send = 2 * 5 * (8192 * 8192 * 2 / (4 * v["pp_p2p_bandwidth"]) + v["inter_node_step_latency"])
    assert v["pp_p2p_send_time_per_microbatch"] == pytest.approx(send, rel=1e-9)
    assert 7.0e-3 < send < 7.5e-3 and v["stage_compute_time"] > 15 * send
    assert v["step_p2p_time"] == pytest.approx(128 * v["comm_contention"] * send, rel=1e-9)
    blocking = symcalc.solve("step_time", given, hardware="h100", options={**opts, "overlap_p2p_comm": "false"})
    assert blocking.values["step_p2p_time"] == pytest.approx(128 * send, rel=1e-9)
    # the step saves at least that (the bubble's micro-batch time carries the sends too)
    assert blocking.value - r.value >= 128 * send * (1 - v["comm_contention"]) * (1 - 1e-9)
    one_chunk = symcalc.solve("step_p2p_time", {**given, "virtual_stages": 1}, hardware="h100",
                              options={**opts, "pipeline_schedule": "1f1b"})
    assert one_chunk.value == pytest.approx(128 * send / 5, rel=1e-9)


def test_a_lighter_last_stage_moves_the_pace_to_the_fullest_other_stage():
    """Megatron-Core can leave the last stage lighter to make room for the LM head
    (num_layers_in_last_pipeline_stage; NVIDIA's Llama 3 70B FP8 H100 recipe's layout puts 9 of
    80 layers on the last of 8 ranks, 11 on another). By hand from the answer's own values: the
    last stage computes 9 layers and the head a micro-batch; the other 71 layers over 7 stages
    leave ceil(71 / 7) = 11 on the fullest, so each micro-batch waits 11 x t_layer - t_last more.
    Unless given, the split is even (10 layers each) and the last stage, with the head, sets the
    pace: no imbalance."""
    given = dict(n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, vocab_size=128256, seq_len="8192 token",
                 d_ffn=28672, tp=4, pp=8, cp=1, dp=2, n_gpus=64, global_batch_size=256, micro_batch_size=1,
                 virtual_stages=5)
    opts = {"stack": "megatron-core", "attention": "gqa", "ffn": "swiglu", "pipeline_schedule": "interleaved",
            "zero_stage": "1", "recompute": "none", "sequence_parallel": "true"}
    even = symcalc.solve("step_time", given, hardware="h100", options=opts)
    assert even.values["step_imbalance_time"] == 0 and even.values["last_stage_layers"] == 10
    light = symcalc.solve("step_time", {**given, "last_stage_layers": 9}, hardware="h100", options=opts)
    v = light.values
    assert v["other_stage_layers_max"] == 11
    assert v["stage_imbalance_time"] == pytest.approx(11 * v["layer_compute_time"] - v["stage_compute_time"], rel=1e-9)
    assert v["step_imbalance_time"] == pytest.approx(128 * v["stage_imbalance_time"], rel=1e-9)
    # the head (128256 x 8192 in BF16) weighs more than a layer here: 11 layers take less than 10 and the head
    assert even.value > light.value > even.value * 0.95
