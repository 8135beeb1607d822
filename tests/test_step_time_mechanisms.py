"""The step-time model's mechanisms, each checked by hand on a small case (formulas/step_time.toml,
collectives.toml, stacks.toml).

Every expectation is written from the formulas with the coefficients read from the data the
library holds (the hardware preset, the stack's and the options' ``sets``), never copied: a
calibration rerun moves them, and the hand computations follow. Numbers in the comments are those
of the library at the time of writing (H100: BF16 GEMMs at 0.803 x 989.4 TFLOP/s, FP8 at 0.709 x
1978.9, a sustained clock of 0.96, HBM 2.97 TB/s, NVLink AllReduce 476 GB/s and ring 362 GB/s,
7.88 us a ring step, comm_contention 0.461; FlashAttention-2 340 TFLOP/s, cuDNN 505).
Intermediate quantities come from ``Result.values``.
"""

from __future__ import annotations

import sys
from math import sqrt
from pathlib import Path

import pytest

import symcalc
from symcalc import units
from symcalc.library.presets import find_preset

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
LIB = symcalc.default_library()


def coefficients(hardware: str, stack: str | None = None, **options: str) -> dict[str, float]:
    """The hardware preset's values, the stack's software coefficients and the ``sets`` of the
    given option values (attention_kernel=flash, fp8_recipe=delayed ...), in SI units (tokens
    as plain numbers): the data the model reads, not any of its answers."""
    raw = {k: v[0] for k, v in find_preset("hardware", hardware).resolve({}, None).items()}  # values and each dtype's peak
    if stack:
        raw.update(LIB.options["stack"].sets[stack])
    for option, value in options.items():
        raw.update(LIB.options[option].sets.get(value, {}))
    out = {}
    for k, v in raw.items():
        q = units.parse_quantity(v, k)
        q = q.to_base_units() if hasattr(q, "to_base_units") else q
        out[k] = float(getattr(q, "magnitude", q))
    # the quantities' own defaults where a preset does not set them (step_time.toml, collectives.toml)
    out.setdefault("sustained_clock_fraction", 1.0)
    out.setdefault("comm_contention", 0.0)
    out.setdefault("intra_node_ring_bus_bandwidth", out["intra_node_bus_bandwidth"])
    out["nic_bus_bandwidth"] = 0.94 * out["nic_bandwidth"]            # network_efficiency's default
    return out


def attention_rate(c: dict, seq: float, head: float) -> float:
    """A flash-family kernel's rate: R x clock x s/(s + s_1/2) x w/(w + h_1/2) x (128 + h_1/2)/128."""
    s_half, h_half = c["attention_half_length"], c["attention_head_half_width"]
    return c["kernel_rate"] * c["sustained_clock_fraction"] * seq / (seq + s_half) \
        * head / (head + h_half) * (128 + h_half) / 128


def dense_layer(c: dict, d: int, heads: int, seq: int, tokens: int) -> dict[str, float]:
    """One GPT layer (MHA, GELU FFN of 4d, dropout, learned positions) without TP, no
    recomputation, a flash-family kernel, 16-bit GEMMs, for ``tokens`` tokens on one GPU."""
    hbm, n = c["achievable_hbm_bandwidth"], 12 * d * d
    rate = c["bf16_gemm_efficiency"] * c["peak_flops_bf16"] * c["sustained_clock_fraction"]
    # 3 passes of the additive roofline over the 4 GEMMs (token side d wide, the other n / d)
    gemm = 3 * (2 * tokens * n / rate + 2 * (tokens * (4 * d + n / d) + n) / hbm)
    # causal: 2 s per token per head width; Q, K, V, O read/written once; 3.5 passes (flash backward 2.5)
    score_flops = 2 * tokens * seq * d
    attention = 3.5 * (score_flops / attention_rate(c, seq, d / heads) + 4 * 2 * tokens * d / hbm)
    # norms, residuals, dropouts (10 + 5) d and GELU 2 x 4d, 2 bytes each, 2.5 passes
    memory = c["elementwise_traffic_factor"] * 2.5 * 2 * tokens * (15 * d + 8 * d) / hbm
    device = (gemm + attention + memory) / 3
    host = c["layer_pass_overhead"]
    overhead = 3 * (sqrt(host ** 2 + device ** 2) - device)
    return dict(gemm=gemm, attention=attention, memory=memory, device=device, host=host, overhead=overhead,
                compute=gemm + attention + memory + overhead, score_flops=score_flops)


def solve(given: dict, hardware: str, target: str = "step_time", **options: str):
    return symcalc.solve(target, given, hardware=hardware, options=options)


# -- FP8 per operation -------------------------------------------------------------------------------

# a small Llama-width dense model on one H100 node, Megatron-Core (Transformer Engine FP8);
# bf16_main_grads: fp32 main gradients, reduced in 4 bytes as under the FP8 recipes
FP8_CASE = dict(d_model=4096, n_layers=4, n_heads=32, vocab_size=32000, seq_len="4096 token", tp=1, pp=1, dp=8,
                n_gpus=8, global_batch_size=16, micro_batch_size=2)


@pytest.fixture(scope="module")
def bf16_answer():
    return solve(FP8_CASE, "h100", stack="megatron-core", precision="bf16_main_grads")


# each recipe under a stack that runs it: Transformer Engine's delayed scaling under Megatron-Core,
# torchao's row-wise scaling under torchtitan (Megatron-Core has no row-wise recipe)
@pytest.mark.parametrize("recipe,stack", [("delayed", "megatron-core"), ("rowwise", "torchtitan")])
def test_fp8_only_where_the_recipe_puts_it(bf16_answer, recipe, stack):
    """precision = fp8: the linear layers' GEMMs run at fp8_gemm_efficiency x fp8_gemm_factor x
    the FP8 peak x the clock (delayed scaling: 0.709 x 1 x 1978.9 x 0.96 = 1346.9 TFLOP/s; row-
    wise: x 0.75), their operands in 1 byte; attention and the LM head stay in 16 bits: the same
    times as in BF16. The casts add, per layer and micro-batch (8192 tokens, d = 4096, 4 GEMMs
    of 12 d^2 parameters): the recipe's bytes per element x 8192 x (the 4 d inputs + the 12 d
    output gradients) x its casts of each (Transformer Engine 1: the forward's cast keeps both
    layouts for the weight gradient; torchao 2: the backward casts again from the saved bf16
    tensors) + its weight casts x 3 bytes x 12 d^2, over the HBM bandwidth (delayed: (3 x 8192 x
    65536 + 3 x 201,326,592) / 2.97e12 = 0.746 ms). The step gains less than the peaks' 2x."""
    c = coefficients("h100", stack, fp8_recipe=recipe)
    fp8 = solve(FP8_CASE, "h100", stack=stack, precision="fp8", fp8_recipe=recipe)
    base = bf16_answer if stack == "megatron-core" else solve(FP8_CASE, "h100", stack=stack, precision="bf16_main_grads")
    v, b = fp8.values, base.values
    rate = c["fp8_gemm_efficiency"] * c["fp8_gemm_factor"] * c["peak_flops_fp8"] * c["sustained_clock_fraction"]
    assert v["linear_gemm_rate"] == pytest.approx(rate, rel=1e-12)
    d, n, tokens, hbm = 4096, 12 * 4096 ** 2, 8192, c["achievable_hbm_bandwidth"]
    linear = 2 * tokens * n / rate + 1 * (tokens * (4 * d + n / d) + n) / hbm
    assert v["layer_linear_time"] == pytest.approx(linear, rel=1e-12)
    for same in ("layer_attention_time", "lm_head_gemm_time", "lm_head_loss_time", "layer_elementwise_time"):
        assert v[same] == pytest.approx(b[same], rel=1e-12), same
    assert c["fp8_operand_casts"] == {"delayed": 1, "rowwise": 2}[recipe]
    cast = (c["fp8_cast_bytes_per_element"] * c["fp8_operand_casts"] * tokens * (4 * d + n / d)
            + c["fp8_weight_cast_passes"] * 3 * n) / hbm
    assert v["layer_fp8_cast_time"] == pytest.approx(cast, rel=1e-12)
    assert v["layer_memory_bound_time"] - b["layer_memory_bound_time"] == pytest.approx(cast, rel=1e-9)
    assert "layer_fp8_cast_time" not in b
    assert bf16_answer.value / fp8.value < c["peak_flops_fp8"] / c["peak_flops_bf16"]


# -- attention by sequence length --------------------------------------------------------------------

# d = 2048 with 32 heads: head width 64, where the kernel runs below its head-128 rate
ATTN_CASE = dict(d_model=2048, n_layers=2, n_heads=32, vocab_size=32000, tp=1, pp=1, dp=8, n_gpus=8,
                 micro_batch_size=1)


@pytest.fixture(scope="module")
def attention_answers():
    return {s: solve({**ATTN_CASE, "seq_len": f"{s} token", "global_batch_size": 8}, "h100", stack="fsdp")
            for s in (2048, 8192)}


def test_attention_rate_by_sequence_length(attention_answers):
    """FlashAttention-2 on the H100 (the fsdp stack's kernel), head width 64:
    340 x 0.96 x s/(s + 540) x 64/(64 + 20) x 148/128 = 258.3 x 0.881 TFLOP/s at s = 2048 and
    306.2 x 0.881 at 8192. The longer sequence runs faster per FLOP: its time per score FLOP is
    smaller."""
    c = coefficients("h100", "fsdp", attention_kernel="flash")
    c["kernel_rate"] = c["flash2_attention_rate"]
    per_flop = {}
    for s, r in attention_answers.items():
        assert r.values["attention_rate"] == pytest.approx(attention_rate(c, s, 64), rel=1e-12)
        per_flop[s] = r.values["layer_score_time"] / r.values["layer_score_flops"]
    assert attention_answers[2048].values["attention_rate"] < attention_answers[8192].values["attention_rate"]
    assert per_flop[8192] < per_flop[2048]


def test_causal_flash_scores_are_half_the_eager_ones(attention_answers):
    """Eager attention computes the whole s x s square, 4 s d FLOPs a token forward; a flash
    kernel skips the masked half: 2 s d (8192 tokens of 8192: 2 x 8192^2 x 2048 = 274.9 GFLOP)."""
    flash = attention_answers[8192]
    eager = solve({**ATTN_CASE, "seq_len": "8192 token", "global_batch_size": 8}, "h100", stack="fsdp",
                  attention_kernel="eager")
    assert flash.values["layer_score_flops"] == pytest.approx(2 * 8192 * 8192 * 2048, rel=1e-12)
    assert eager.values["layer_score_flops"] == pytest.approx(2 * flash.values["layer_score_flops"], rel=1e-12)


# -- ZeRO-3 / FSDP, layer by layer ----------------------------------------------------------------------

# hidden: one H100 node, 4 micro-batches of 2 x 2048 tokens, host-bound layers (FSDP's launch
#   overhead): every gather hides behind the neighbouring layer's compute;
# exposed: 16 A100s on two nodes (8 NICs a node: 8 x 23.5 = 188 GB/s rings), 512-token
#   micro-batches of a wide layer: the gathers outlast the compute
ZERO3 = {
    "hidden": dict(hardware="h100", d=2048, heads=16, layers=16, seq=2048, mbs=2, dp=8, batch=64),
    "exposed": dict(hardware="a100-80gb", d=8192, heads=64, layers=4, seq=512, mbs=1, dp=16, batch=32),
}


def zero3_given(case: dict, **more) -> dict:
    return dict(d_model=case["d"], n_layers=case["layers"], n_heads=case["heads"], vocab_size=32000,
                seq_len=f"{case['seq']} token", tp=1, pp=1, dp=case["dp"], n_gpus=case["dp"],
                global_batch_size=case["batch"], micro_batch_size=case["mbs"], **more)


@pytest.fixture(scope="module")
def zero3_answers():
    return {name: solve(zero3_given(case), case["hardware"], stack="fsdp", zero_stage="3")
            for name, case in ZERO3.items()}


def zero3_by_hand(case: dict, c: dict) -> dict[str, float]:
    d, L, g, V = case["d"], case["layers"], case["dp"], 32000
    layer = dense_layer(c, d, case["heads"], case["seq"], case["mbs"] * case["seq"])
    n_mb = case["batch"] / (g * case["mbs"])
    per_node = min(g, c["gpus_per_node"])
    inside = g <= c["gpus_per_node"]
    ring = c["intra_node_ring_bus_bandwidth"] if inside else min(c["intra_node_ring_bus_bandwidth"],
                                                                    per_node * c["nic_bus_bandwidth"])
    latency = c["intra_node_step_latency"] if inside else 10e-6       # inter_node_step_latency's default
    kappa = c["comm_contention"] * ring / c["intra_node_ring_bus_bandwidth"]
    params = 12 * d * d + 2 * V * d / L          # a layer and its share of the two embedding matrices
    gather = (g - 1) / g * params * 2 / ring + (g - 1) * latency     # 2-byte parameters
    reduce = (g - 1) / g * params * 2 / ring + (g - 1) * latency     # 2-byte gradients, reduce-scatter
    forward, backward = layer["compute"] / 3, layer["compute"] * 2 / 3
    fwd = L * max(kappa * min(forward, gather), gather - forward) + gather
    bwd = L * max(kappa * min(backward, gather + reduce), gather + reduce - backward) + reduce
    hidden = n_mb * L * (min(forward, gather) + min(backward, gather + reduce))
    return dict(gather=gather, reduce=reduce, forward=forward, backward=backward, kappa=kappa, n_mb=n_mb,
                exposed=n_mb * fwd + n_mb * bwd, hidden=hidden)


@pytest.mark.parametrize("name", list(ZERO3))
def test_zero3_fsdp_layer_by_layer_by_hand(zero3_answers, name):
    """FSDP FULL_SHARD (zero_stage 3): every micro-batch gathers each layer's parameters in forward,
    gathers them again in backward and reduce-scatters the gradients. A ring all-gather of a
    layer's P = 12 d^2 + 2 V d / L parameters: (g-1)/g 2 P / beta_ring + (g-1) alpha; the
    reduce-scatter the same in 2-byte gradients. Per layer, what a gather takes beyond the
    previous layer's forward is exposed, and what it hides slows that forward by kappa:
    Max(kappa Min(c, x), x - c); the backward's re-gather and reduction likewise against the
    backward; the first gather and the last reduction have nothing beside them. n_mb gathering
    forwards and reducing backwards a step.
    hidden (H100 node): P = 58,523,648, x = 7/8 x 117.0 MB / 362 GB/s + 7 x 7.88 us = 0.338 ms
    against a forward of 3.03 ms: 4 x (16 x 0.461 x 0.338 + 0.338) + 4 x (16 x 0.461 x 0.676 +
    0.338) = 32.6 ms. exposed (2 A100 nodes): x = 9.49 ms against a forward of 5.42 ms."""
    case = ZERO3[name]
    c = coefficients(case["hardware"], "fsdp", attention_kernel="flash")
    c["kernel_rate"] = c["flash2_attention_rate"]
    h, v = zero3_by_hand(case, c), zero3_answers[name].values
    assert v["param_gathers_per_step"] == v["grad_reductions_per_step"] == h["n_mb"]
    assert v["layer_forward_compute_time"] == pytest.approx(h["forward"], rel=1e-12)
    assert v["layer_param_gather_time"] == pytest.approx(h["gather"], rel=1e-12)
    assert v["layer_grad_reduce_time"] == pytest.approx(h["reduce"], rel=1e-12)
    assert v["dp_comm_contention"] == pytest.approx(h["kappa"], rel=1e-12)
    assert v["exposed_dp_comm_time"] == pytest.approx(h["exposed"], rel=1e-12)
    if name == "hidden":
        assert h["gather"] < h["forward"]                     # hides, at kappa's cost
    else:
        assert h["gather"] - h["forward"] > h["kappa"] * h["forward"]     # outlasts the compute
    # a whole step's traffic is never hidden: the first gather and the last reduction of every
    # micro-batch stay exposed
    assert v["exposed_dp_comm_time"] >= h["n_mb"] * (v["layer_param_gather_time"] + v["layer_grad_reduce_time"])


# -- contention ---------------------------------------------------------------------------------------

def test_contention_is_what_hidden_collectives_cost(zero3_answers):
    """The hidden ZeRO-3 case with comm_contention = 0: every collective that hides is free, and
    only the first gather and last reduction of each micro-batch remain: 4 x (0.338 + 0.338) =
    2.70 ms. With the preset's kappa the exposed time is larger by exactly kappa x the hidden
    part, kappa x 4 x 16 x (x + 2 x) = 0.461 x 64.9 ms = 29.9 ms; nothing else in the step moves."""
    case = ZERO3["hidden"]
    c = coefficients("h100", "fsdp", attention_kernel="flash")
    c["kernel_rate"] = c["flash2_attention_rate"]
    h = zero3_by_hand(case, c)
    with_kappa = zero3_answers["hidden"]
    free = solve(zero3_given(case, comm_contention=0), "h100", stack="fsdp", zero_stage="3")
    assert free.values["exposed_dp_comm_time"] == pytest.approx(h["n_mb"] * (h["gather"] + h["reduce"]), rel=1e-12)
    gap = with_kappa.values["exposed_dp_comm_time"] - free.values["exposed_dp_comm_time"]
    assert h["kappa"] > 0 and gap == pytest.approx(h["kappa"] * h["hidden"], rel=1e-9)
    assert with_kappa.value - free.value == pytest.approx(gap, rel=1e-9)


# -- context parallelism --------------------------------------------------------------------------------

# GQA (32 query heads, 8 KV heads of 128), 16k tokens split over cp = 2, tp = 2, dp = 2: one H100
# node; Megatron-Core runs all three exchanges
CP_CASE = dict(d_model=4096, n_layers=2, n_heads=32, n_kv_heads=8, vocab_size=32000, seq_len="16384 token", tp=2,
               pp=1, dp=2, n_gpus=8, global_batch_size=2, micro_batch_size=1)


@pytest.mark.parametrize("exchange", ["ring", "all_gather", "all_to_all"])
def test_context_parallel_exchanges_by_hand(exchange):
    """Each rank holds 8192 tokens; K and V are kv = 8 x 128 = 1024 wide each, 2 bytes, split
    over tp = 2; 3 passes (no recomputation).
    ring: cp - 1 = 1 step a pass sends K and V to the next rank over NVLink (476 GB/s):
        3 x 2 x 8192 x 1024 x 2 B / (2 x 476e9) = 0.1057 ms, hidden behind half the attention at
        kappa's cost: exposed kappa x that;
    all_gather: each rank gathers the cp blocks of K and V over the context-parallel group's
        ring (both ranks in the node: NVLink's ring figure, 362 GB/s): 3 x (1/2 x 2 x 2 x 8192
        x 1024 x 2 B / (2 x 362e9) + 7.88 us) = 0.1627 ms, all exposed;
    all_to_all (Ulysses): Q, K, V and the output, (32 x 256 + 2 x 1024) elements a token, half
        of them leave the rank, and two all-to-alls' latency a pass: 3 x (1/2 x 8192 x 10240 x
        2 B / (2 x 362e9) + 2 x 7.88 us) = 0.3949 ms, exposed."""
    c = coefficients("h100", "megatron-core")
    r = solve(CP_CASE, "h100", stack="megatron-core", attention="gqa", cp_comm=exchange)
    v = r.values
    cp, tp, tokens, kv, b, ring = 2, 2, 8192, 1024, 2, c["intra_node_ring_bus_bandwidth"]
    assert v["cp"] == cp and v["micro_sequence_length"] == tokens and v["kv_width"] == kv
    if exchange == "ring":
        t = 3 * (cp - 1) * 2 * tokens * kv * b / (tp * c["intra_node_bus_bandwidth"])
        exposed = t - (1 - c["comm_contention"]) * min(t, (cp - 1) / cp * v["layer_attention_time"])
    elif exchange == "all_gather":
        t = 3 * ((cp - 1) / cp * 2 * cp * tokens * kv * b / (tp * ring) + (cp - 1) * c["intra_node_step_latency"])
        exposed = t
    else:
        t = 3 * ((cp - 1) / cp * tokens * (32 * (128 + 128) + 2 * kv) * b / (tp * ring)
                 + 2 * c["intra_node_step_latency"])
        exposed = t
    assert v["cp_comm_time_per_layer"] == pytest.approx(t, rel=1e-12)
    assert v["cp_comm_exposed_per_layer"] == pytest.approx(exposed, rel=1e-12)
    assert v["stage_cp_ep_comm_time"] == pytest.approx(2 * exposed, rel=1e-12)


# -- training stacks ------------------------------------------------------------------------------------

STACKS_TOML = tomllib.loads((ROOT / "formulas" / "stacks.toml").read_text(encoding="utf-8"))
SMALL = ["--hardware", "h100", "d_model=2048", "n_layers=16", "n_heads=16", "vocab_size=32000", "seq_len=2048 token",
         "dp=8", "n_gpus=8", "global_batch_size=64", "micro_batch_size=2"]


def test_fsdp_with_tensor_parallelism_is_refused_in_one_line(cli):
    # tp 2 x dp 4 = the 8 GPUs (dp 8 with tp 2 would break n_gpus = tp pp cp dp first)
    run = cli("solve", "step_time", *[a if a != "dp=8" else "dp=4" for a in SMALL], "tp=2", "--stack", "fsdp")
    assert run.code != 0 and run.out == ""
    line = run.err.strip()
    assert "\n" not in line and "stack=fsdp" in line and "tp" in line and "tp = 2" in line


def test_an_unknown_stack_suggests_close_names(cli):
    run = cli("solve", "step_time", *SMALL, "--stack", "fdsp")
    assert run.code != 0
    assert "fdsp" in run.err and "Did you mean: fsdp" in run.err


def test_the_stacks_defaults_appear_in_the_assumptions(zero3_answers):
    """Each option the fsdp stack set (and the answer used) is listed as set by it, with the value
    formulas/stacks.toml gives it."""
    stack = STACKS_TOML["options"]["stack"]["values"]["fsdp"]["options"]
    r = zero3_answers["hidden"]
    set_by = {a["name"]: a["value"] for a in r.assumptions if a.get("kind") == "set_by_option"}
    assert all(a["option"] == "stack" and a["option_value"] == "fsdp" for a in r.assumptions
               if a.get("kind") == "set_by_option")
    assert {"attention_kernel", "overlap_grad_reduce", "overlap_param_gather"} <= set(set_by)
    for name, value in set_by.items():
        assert stack[name] == value, name
    assert "zero_stage" not in set_by             # given explicitly


def test_an_explicit_option_beats_the_stacks_default():
    """torchtitan runs FlashAttention-2; --option attention_kernel=cudnn puts cuDNN's fused kernel
    in its place (H100: 505 x 0.96 x 2048/(2048 + 580) = 377.8 TFLOP/s against FA2's 258.3): a
    smaller attention time, and the kernel is no longer an assumption of the stack."""
    given = dict(d_model=2048, n_layers=16, n_heads=16, vocab_size=32000, seq_len="2048 token", tp=1, pp=1, dp=8,
                 n_gpus=8, global_batch_size=64, micro_batch_size=2)
    stacked = solve(given, "h100", stack="torchtitan")
    chosen = solve(given, "h100", stack="torchtitan", attention_kernel="cudnn")
    for r, kernel, rate in ((stacked, "flash", "flash2_attention_rate"), (chosen, "cudnn", "cudnn_attention_rate")):
        c = coefficients("h100", "torchtitan", attention_kernel=kernel)
        c["kernel_rate"] = c[rate]
        assert r.values["attention_rate"] == pytest.approx(attention_rate(c, 2048, 128), rel=1e-12)
    assert chosen.values["stage_attention_time"] < stacked.values["stage_attention_time"]
    assert chosen.options["attention_kernel"] == "cudnn"
    assert "attention_kernel" not in {a["name"] for a in chosen.assumptions}
    assert {"name": "attention_kernel", "value": "flash"}.items() <= next(
        a for a in stacked.assumptions if a["name"] == "attention_kernel").items()


def test_a_memory_question_keeps_eager_attention_unless_a_stack_is_given():
    """Korthikanti et al. 2022's activations per layer, s b h (34 + 5 a s / h) bytes with the
    eager attention's s x s scores (s = 4096, b = 8, h = 5120, a = 40: 32.548 GB; the seeds'
    figure) never reach the step time, so the default stack's cuDNN kernel does not apply; with
    --stack megatron-core it does: 34 s b h = 5.704 GB, and the kernel's fp32 log-sum-exp, 4 a s b
    bytes (Dao et al. 2022, Algorithm 2)."""
    given = dict(micro_batch_size=8, seq_len="4096 token", d_model=5120, n_heads=40)
    plain = symcalc.solve("activation_memory_per_layer", given)
    stacked = symcalc.solve("activation_memory_per_layer", given, options={"stack": "megatron-core"})
    sbh = 4096 * 8 * 5120
    assert plain.to("B").magnitude == pytest.approx(sbh * (34 + 5 * 40 * 4096 / 5120), rel=1e-12)
    assert plain.options["attention_kernel"] == "eager" and plain.stacks == {}
    assert stacked.to("B").magnitude == pytest.approx(34 * sbh + 4 * 40 * 4096 * 8, rel=1e-12)
    assert stacked.options["attention_kernel"] == STACKS_TOML["options"]["stack"]["values"]["megatron-core"][
        "options"]["attention_kernel"]


# -- mixture of experts -----------------------------------------------------------------------------------

def test_deepseek_v3_step():
    """DeepSeek-V3 as its report trained it: 2048 H800, tp 1, pp 16, ep 64, dp 128, FP8 with
    block-wise scaling, micro-batch 1 of 4096 tokens, 15360 sequences a step.
    Active parameters per layer, from the shapes (MLA: q_a 7168 x 1536, q_b 1536 x 128 x 192,
    kv_a 7168 x 576, kv_b 512 x 128 x 256, o 16384 x 7168 = 187,105,280; an MoE layer adds 9
    experts of 3 x 7168 x 2048 and a router of 256 x 7168, a dense one an FFN of 3 x 7168 x
    18432): (58 x 585,302,016 + 3 x 583,467,008) / 61 = 585,211,769.7 - the preset's 37,551,276,032
    active parameters less the two embedding matrices (2 x 129280 x 7168) over 61 layers.
    8 routed experts a token (9 activated less the shared one); the deduplicating dispatcher sends
    a token to (64/8 - 1)(1 - (1 - 8/64)^8) = 4.595 other nodes on average."""
    r = symcalc.solve("step_time", dict(tp=1, pp=16, ep=64, dp=128, n_gpus=2048, global_batch_size=15360,
                                        micro_batch_size=1), model="deepseek-v3", hardware="h800",
                      options={"precision": "fp8", "fp8_recipe": "blockwise"})
    v = r.values
    assert 0 < r.to("s").magnitude < 100
    d, V = 7168, 129280
    mla = d * 1536 + 1536 * 128 * 192 + d * 576 + 512 * 128 * 256 + 128 * 128 * d
    moe, dense = mla + 9 * 3 * d * 2048 + 256 * d, mla + 3 * d * 18432
    assert v["layer_active_params"] == pytest.approx((58 * moe + 3 * dense) / 61, rel=1e-12)
    assert v["layer_active_params"] == pytest.approx((37_551_276_032 - 2 * V * d) / 61, rel=1e-12)
    assert v["routed_experts_per_token"] == 8
    assert v["ep_network_copies"] == pytest.approx((64 / 8 - 1) * (1 - (1 - 8 / 64) ** 8), rel=1e-12)
    c = coefficients("h800", "megatron-core", fp8_recipe="blockwise")
    assert v["linear_gemm_rate"] == pytest.approx(
        c["fp8_gemm_efficiency"] * c["fp8_gemm_factor"] * c["peak_flops_fp8"] * c["sustained_clock_fraction"],
        rel=1e-12)


# -- host-bound layer passes ------------------------------------------------------------------------------

def test_small_layers_are_host_bound(zero3_answers):
    """A pass over a small layer (d = 2048, 4096 tokens on an H100) takes the GPU g = 0.95 ms;
    FSDP's eager kernels and hooks take the host h = 2.877 ms to issue (the stack's
    layer_pass_overhead). The host runs ahead of the GPU as far as it can: a pass costs
    sqrt(h^2 + g^2), so the overhead is 3 x (sqrt(h^2 + g^2) - g) = 6.24 ms a layer, more than
    its GEMMs, attention and memory-bound work together (2.85 ms). g by hand: the additive
    roofline of the GEMMs, the FlashAttention-2 rate at 2048 tokens, the memory-bound bytes."""
    c = coefficients("h100", "fsdp", attention_kernel="flash")
    c["kernel_rate"] = c["flash2_attention_rate"]
    layer = dense_layer(c, 2048, 16, 2048, 4096)
    v = zero3_answers["hidden"].values
    assert v["layer_gemm_time"] == pytest.approx(layer["gemm"], rel=1e-12)
    assert v["layer_attention_time"] == pytest.approx(layer["attention"], rel=1e-12)
    assert v["layer_memory_bound_time"] == pytest.approx(layer["memory"], rel=1e-12)
    assert v["layer_device_pass_time"] == pytest.approx(layer["device"], rel=1e-12)
    assert v["layer_host_pass_time"] == c["layer_pass_overhead"]
    assert v["layer_overhead_time"] == pytest.approx(3 * (sqrt(layer["host"] ** 2 + layer["device"] ** 2)
                                                          - layer["device"]), rel=1e-12)
    assert layer["host"] > layer["device"] and v["layer_overhead_time"] > 3 * layer["device"]
