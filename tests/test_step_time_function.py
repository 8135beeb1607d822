"""Result.function of the step-time derivation over many parallel layouts (issue 11, point 7).

GPT-3 175B (d = 12288, 96 layers, 96 heads, V = 51200, s = 2048) on A100 80GB as Megatron-LM
ran it in 2021 (``stack=megatron-lm-2021``: eager attention, every TP collective and the
gradient AllReduce on the critical path, no ZeRO), full recomputation, global batch 1536: solved
once, then evaluated for ~1000 layouts at once. The model is written again by hand below
(:func:`hand`, numpy, from the formulas of formulas/step_time.toml, collectives.toml and
pipeline.toml as `symcalc solve step_time ...` shows them); two layouts are worked through in
numbers, and every layout must agree with it.

The hand model does not copy the fitted or measured coefficients: it reads them from the
hardware preset and the stack's data (:func:`coefficients`), as calibration reruns move them.
The numbers in the comments are those of the library at the time of writing (A100 80GB: GEMM
0.822 x 312 TFLOP/s x a sustained clock of 0.95; HBM 1.68 TB/s; NVLink bus 232.1 GB/s, 9.69 us
a ring step; 25 GB/s NICs at 94 %, 10 us a hop; Megatron-LM 2021: 305 us of host time a layer
pass, memory-bound traffic 1.15 x the unfused count, 12 loss bytes a logit).
"""

from __future__ import annotations

import numpy as np
import pytest

import symcalc
import symcalc.query.solve
from symcalc import units
from symcalc.engine import chunked
from symcalc.engine.evaluate import MIN_SIZE
from symcalc.library.presets import find_preset

QUESTION = dict(d_model=12288, n_layers=96, n_heads=96, vocab_size=51200, seq_len="2048 token", tp=8, pp=8,
                dp=16, n_gpus=1024, global_batch_size=1536, micro_batch_size=1)
# the stack sets eager attention, tp_comm_overlap = false, overlap_grad_reduce = false, zero_stage 0
PRESETS = dict(hardware="a100-80gb", options={"stack": "megatron-lm-2021", "recompute": "full"})


def coefficients(hardware: str = "a100-80gb", stack: str = "megatron-lm-2021") -> dict[str, float]:
    """The preset's and the stack's values in SI units, read from the library's data (not from
    any answer): what a calibration rerun changes, the hand model follows."""
    hw = find_preset("hardware", hardware)
    sets = symcalc.default_library().options["stack"].sets[stack]
    raw = {**{k: v[0] for k, v in hw.resolve({}, None).items()}, **sets}  # values and each dtype's peak
    return {k: float(units.parse_quantity(v, k).to_base_units().magnitude) for k, v in raw.items()
            if k in NEEDED}


NEEDED = ("gpus_per_node", "nic_bandwidth", "intra_node_bus_bandwidth", "intra_node_step_latency",
          "achievable_hbm_bandwidth", "bf16_gemm_efficiency", "peak_flops_bf16", "sustained_clock_fraction",
          "comm_contention", "layer_pass_overhead", "elementwise_traffic_factor", "loss_bytes_per_logit")


def hand(tp, pp, dp, micro_batch_size, n_gpus, c=None, d=12288, L=96, H=96, V=51200, S=2048, B=1536):
    """The step and its parts in seconds, by hand. Arrays or scalars; SI units, tokens as numbers."""
    c = c or coefficients()
    tp, pp, dp, m, n_gpus = (np.asarray(x, dtype=float) for x in (tp, pp, dp, micro_batch_size, n_gpus))
    gpn, hbm, ibw = c["gpus_per_node"], c["achievable_hbm_bandwidth"], c["intra_node_bus_bandwidth"]
    rate = c["bf16_gemm_efficiency"] * c["peak_flops_bf16"] * c["sustained_clock_fraction"]  # GEMMs in 16 bits
    nic = 0.94 * c["nic_bandwidth"]            # network_efficiency's default (collectives.toml)
    lat_in, lat_out = c["intra_node_step_latency"], 10e-6   # inter_node_step_latency's default
    ew, host, kappa = c["elementwise_traffic_factor"], c["layer_pass_overhead"], c["comm_contention"]
    b = 2.0                                    # bytes of an activation, parameter and gradient (fp16)
    passes = 4.0                               # full recomputation: forward, recomputed forward, 2 backward
    n_mb = B / (dp * m)                        # micro-batches a step
    cp = n_gpus / (tp * pp * dp)
    lps = L / pp                               # layers a stage
    msl = m * S / cp                           # tokens of a micro-batch on one GPU
    g = dp * cp                                # ranks that share a parameter shard
    # groups and their links (collectives.toml): k ranks of a group in a node
    k_tp = np.minimum(tp, gpn)
    k_pp = np.minimum(pp, np.maximum(1, gpn * pp / n_gpus))
    k_cp = np.minimum(cp, np.maximum(1, gpn / tp))
    k_dp = np.minimum(g, np.maximum(1, gpn / tp))
    tp_bw = np.minimum(ibw, k_tp * nic + ibw * np.maximum(0, 2 - tp / k_tp))
    pp_bw = np.minimum(ibw, nic + ibw * np.maximum(0, 2 - pp / k_pp))
    cp_bw = np.minimum(ibw, nic + ibw * np.maximum(0, 2 - cp / k_cp))
    dp_bw = np.minimum(ibw, k_dp * nic + ibw * np.maximum(0, 2 - g / k_dp))
    tp_lat = np.maximum(lat_in, lat_out * np.minimum(1, tp / k_tp - 1))
    dp_lat = np.maximum(lat_in, lat_out * np.minimum(1, g / k_dp - 1))
    N = 4 * d * d + 2 * d * 4 * d              # a layer: attention 4 d^2, GELU FFN 2 x d x 4d
    # GEMMs: the additive roofline of the 4 GEMMs (token side d wide, the other N / (d tp))
    gemm = passes * (2 * msl * N / tp / rate + b * (msl * (4 * d + N / (d * tp)) + N / tp) / hbm)
    # eager attention: 4 s^2 h FLOPs a forward (full square) at the GEMM rate, the s x s scores
    # written and read in 2 bytes; the core recomputed: 4 passes
    attention = passes * (4 * msl * S * d / tp / rate + 2 * b * H * msl * S / tp / hbm)
    # memory-bound: norms, residuals and dropouts (10 + 5) d unsplit, GELU 2 x 4d split tp ways,
    # 3.5 passes (full recomputation); softmax and dropout of the scores: 9 bytes in each of the
    # 2 forwards, 11 in the backward
    memory = ew * 3.5 * b * msl * (15 * d + 8 * d / tp) / hbm + ew * (9 * 2 + 11) * H * msl * S / (tp * hbm)
    device = (gemm + attention + memory) / passes      # GPU time of a pass
    overhead = passes * (np.sqrt(host ** 2 + device ** 2) - device)   # the host's issue time shows
    layer = gemm + attention + memory + overhead
    lm_head = 3 * (2 * msl * V * d / (tp * rate) + b * (msl * (d + V / tp) + V * d / tp) / hbm) \
        + c["loss_bytes_per_logit"] * msl * V / (tp * hbm)
    compute = lps * layer + lm_head
    # TP: 2 AllReduces of the b s d activation in each of 3 passes with collectives, all exposed
    tp_comm = 2 * (passes - 1) * (2 * (tp - 1) / tp * m * S / cp * d * b / tp_bw + 2 * (tp - 1) * tp_lat)
    # CP ring: K and V (d wide each) pass cp - 1 times a pass, hidden behind the attention
    cp_comm = passes * (cp - 1) * 2 * msl * d * b / (tp * cp_bw)
    cp_exposed = cp_comm - (1 - kappa * cp_bw / ibw) * np.minimum(cp_comm, (cp - 1) / cp * attention)
    p2p = np.minimum(1, pp - 1) * 2 * (msl * d * b / (tp * pp_bw) + lat_out)
    micro = compute + lps * tp_comm + lps * cp_exposed + p2p
    # DP: one AllReduce a step after the last backward, layer by layer, of the layer's TP shard
    # and its share of the two (untied) embedding matrices
    layer_params = (N + 2 * V * d / L) / tp
    dp_comm = lps * (2 * (g - 1) / g * layer_params * b / dp_bw + 2 * (g - 1) * dp_lat)
    optimizer = 16 * (L * N + 2 * V * d) / (tp * pp) / hbm          # 16 bytes a parameter, no ZeRO
    return dict(step=n_mb * micro + (pp - 1) * micro + dp_comm + optimizer, micro=micro, compute=compute,
                tp=lps * tp_comm, p2p=p2p, dp=dp_comm, optimizer=optimizer, layer=layer, n_mb=n_mb)


# Layout A: tp = pp = 1, dp = 8 on one node (cp = 1). No TP, CP or pipeline terms (each has a
# factor tp - 1, cp - 1 or pp - 1); 1536 / 8 = 192 micro-batches of 2048 tokens. A layer has
# N = 12 d^2 = 1,811,939,328 parameters; the GEMM rate is 0.822 x 312e12 x 0.95 = 243.64e12.
#   GEMMs, a pass: 2 x 2048 x N / 243.64e12 + 2 B x (2048 x 16 d + N) / 1.68e12
#       = 30.4617 + 2.6364 = 33.0981 ms; 4 passes: 132.392 ms
#   attention, a pass: 4 x 2048^2 x 12288 / 243.64e12 + 4 B x 96 x 2048^2 / 1.68e12
#       = 0.8462 + 0.9587 = 1.8049 ms; 4 passes: 7.2194 ms
#   memory-bound: 1.15 x 3.5 x 2 B x 2048 x 23 d / 1.68e12 + 1.15 x 29 B x 96 x 2048^2 / 1.68e12
#       = 2.7735 + 7.9931 = 10.7666 ms
#   host: a pass's GPU time g = 150.378 / 4 = 37.595 ms, 4 x (sqrt(g^2 + 0.305^2) - g) = 4.95 us
#   a layer: 150.383 ms; LM head 3 x (2 x 2048 x 51200 x d / 243.64e12 + 2 B x (2048 x (d + V)
#       + V d) / 1.68e12) + 12 B x 2048 x 51200 / 1.68e12 = 31.731 + 2.711 + 0.749 = 35.191 ms
#   a micro-batch: 96 x 150.383 + 35.191 = 14,471.99 ms; x 192 = 2778.622 s
#   DP AllReduce inside the node at 232.1 GB/s, 96 layers of N + 2 V d / 96 parameters:
#       2 x 7/8 x 2 B x 175,204,466,688 / 232.1e9 + 96 x 14 x 9.69 us = 2.6420 + 0.0130 = 2.6551 s
#   optimizer: 16 B x 175,204,466,688 / 1.68e12 = 1.6686 s;  step: 2782.946 s
LAYOUT_A = dict(tp=1, pp=1, dp=8, micro_batch_size=1, n_gpus=8)
STEP_A = 2782.946

# Layout B: the paper's tp = 8, pp = 8, dp = 16 on 1024 GPUs, micro-batch 1: 96 micro-batches,
# 12 layers a stage, TP inside a node, PP and DP across nodes (25 GB/s x 0.94 = 23.5 GB/s).
#   GEMMs, a pass: 30.4617 / 8 ms + 2 B x (2048 x (4 d + 12 d / 8) + N / 8) / 1.68e12
#       = 3.8077 + 0.4344 = 4.2421 ms; 4 passes: 16.968 ms
#   attention: an eighth of A's, 0.9024 ms; memory-bound: 1.15 x 3.5 x 2 B x 2048 x 16 d / 1.68e12
#       + 7.9931 / 8 = 1.9294 + 0.9991 = 2.9285 ms
#   host: g = 20.799 / 4 = 5.200 ms, 4 x (sqrt(g^2 + 0.305^2) - g) = 0.0357 ms; a layer 20.835 ms
#   LM head (V / 8 a GPU): 3.966 + 0.418 (GEMMs) + 0.094 (loss) = 4.478 ms;
#   a stage: 12 x 20.835 + 4.478 = 254.500 ms
#   TP: 2 AllReduces x 3 passes x (2 x 7/8 x 50,331,648 B / 232.1e9 + 14 x 9.69 us) = 3.0909 ms
#       a layer, 37.091 ms a stage
#   PP sends: 2 x (2048 x 12288 x 2 B / 8 / 23.5e9 + 10 us) = 0.5554 ms
#   a micro-batch: 254.500 + 37.091 + 0.555 = 292.146 ms; 96 of them + a bubble of 7: 30.0910 s
#   DP: 12 layers of (N + 2 V d / 96) / 8 = 228,130,816 parameters over 16 nodes' NICs:
#       12 x (2 x 15/16 x 2 B x 228,130,816 / 23.5e9 + 30 x 10 us) = 0.4404 s
#   optimizer: 16 B x 175,204,466,688 / 64 / 1.68e12 = 0.0261 s;  step: 30.5576 s
LAYOUT_B = dict(tp=8, pp=8, dp=16, micro_batch_size=1, n_gpus=1024)
STEP_B = 30.5576


def layouts(n: int, seed: int = 3) -> dict[str, np.ndarray]:
    """n random valid layouts (tp within a node, pp dividing 96, dp dividing 1536, micro-batches
    that divide 1536 / dp; no context parallelism, which Megatron-LM 2021 did not have), A first
    and B second."""
    rng = np.random.default_rng(seed)
    tp, pp = rng.choice([1, 2, 4, 8], n), rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96], n)
    dp = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], n)
    out = dict(tp=tp, pp=pp, dp=dp, micro_batch_size=rng.choice([1, 2, 4, 8], n), n_gpus=tp * pp * dp)
    for i, layout in enumerate((LAYOUT_A, LAYOUT_B)):
        for k, v in layout.items():
            out[k][i] = v
    return out


@pytest.fixture(scope="module")
def result():
    r = symcalc.solve("step_time", QUESTION, **PRESETS)
    assert r.unit == "s"
    return r


def test_the_hand_computed_layouts_alone(result):
    """Both layouts by hand: the hand model to 1e-12, the numbers worked above to 1e-4."""
    assert result.value == pytest.approx(hand(**LAYOUT_B)["step"], rel=1e-12)
    a = symcalc.solve("step_time", {**QUESTION, **LAYOUT_A}, **PRESETS)
    assert a.value == pytest.approx(hand(**LAYOUT_A)["step"], rel=1e-12)
    assert (a.value, result.value) == pytest.approx((STEP_A, STEP_B), rel=1e-4)


def test_the_parts_of_layout_b_by_hand(result):
    """The breakdown's parts are the hand model's: a micro-batch of the last stage, its compute
    and TP, the point-to-point sends, the AllReduce after the pipeline and the optimizer."""
    h, v = hand(**LAYOUT_B), result.values
    assert v["micro_step_time"] == pytest.approx(h["micro"], rel=1e-12)
    assert v["stage_compute_time"] == pytest.approx(h["compute"], rel=1e-12)
    assert v["stage_tp_comm_time"] == pytest.approx(h["tp"], rel=1e-12)
    assert v["pp_p2p_time_per_microbatch"] == pytest.approx(h["p2p"], rel=1e-12)
    assert v["exposed_dp_comm_time"] == pytest.approx(h["dp"], rel=1e-12)
    assert v["optimizer_step_time"] == pytest.approx(h["optimizer"], rel=1e-12)
    layer = sum(v[k] for k in ("layer_gemm_time", "layer_attention_time", "layer_memory_bound_time",
                               "layer_overhead_time"))
    assert layer == pytest.approx(h["layer"], rel=1e-12)


def test_function_over_a_thousand_layouts_is_the_hand_model(result, monkeypatch):
    x = layouts(1000)
    expected = hand(**x)["step"]
    general = symcalc.solve("step_time", {**QUESTION, **x}, **PRESETS).value
    np.testing.assert_allclose(general, expected, rtol=1e-9)
    # small arrays go to the step walker; 33 copies (33,000 layouts) take the chunked kernel,
    # which must answer without falling back to solve()
    assert not chunked.program(result.derivation).fused_expr      # steps that subtract: step by step
    many = {k: np.tile(v, 33) for k, v in x.items()}
    assert many["tp"].size >= MIN_SIZE

    def refuse(*args, **kwargs):
        raise AssertionError("the chunked kernel declined")
    monkeypatch.setattr(symcalc.query.solve, "solve", refuse)
    got = result.function(**QUESTION | many)
    assert got.units == symcalc.Q(1, "s").units
    np.testing.assert_allclose(got.magnitude, np.tile(expected, 33), rtol=1e-9)
    np.testing.assert_array_equal(got.magnitude, np.tile(general, 33))     # the same step functions


def test_an_infeasible_layout_is_refused_as_by_solve(result):
    x = layouts(40_000)
    # layout 5: tp 8, pp 8, dp 16 on 512 GPUs, half what they need (cp = 0.5, and the ring
    # attention's time, 4 x (cp - 1) x ..., would come out negative): refused by the structure
    # rule that the degrees multiply to the GPU count (8 x 8 x 16 = 1024 does not divide 512)
    for k, v in dict(tp=8, pp=8, dp=16, n_gpus=512).items():
        x[k][5] = v
    with pytest.raises(symcalc.DomainError, match=r"tp = 8, pp = 8, dp = 16, n_gpus = 512 at 1 of 40000 points \(rule degrees_gpus"):
        result.function(**QUESTION | x)
