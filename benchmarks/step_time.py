"""GPT-3 175B step time over 1e6 parallel layouts, against the same model written by hand.

The question (issue 11): the step time of GPT-3 175B on A100 80GB (full recomputation, eager
attention), the 65-step derivation of ``formulas/step_time.toml`` and ``pipeline.toml``: FLOPs
and HBM bytes of every matrix multiply by the additive roofline, memory-bound passes, TP, CP
and PP communication with intra/inter-node bandwidths (Min/Max of the layout), the pipeline
bubble, the data-parallel AllReduce and the optimizer step. It is solved once for scalars;
``Result.function`` then evaluates it for 1e6 random layouts: tp, pp, dp, micro_batch_size and
n_gpus = tp pp cp dp (cp in 1, 2, 4 follows from n_gpus) vary together, as int64 arrays.

* symcalc: ``Result.function``, i.e. the compiled derivation with every check a user relies
  on (units, bounds, whole numbers, each step's bounds where its sign is not proven);
* hand-written numpy: :func:`by_hand`, the same equations typed from the derivation's steps,
  no checks. It must agree with symcalc to 1e-9 relative before anything is timed.

A second hand-written row runs the same function a cache-sized chunk at a time, as the sweep
path does (context: the strongest baseline one would write by hand without reordering the
model). A last row has a fifth of the layouts infeasible (fewer GPUs than tp pp dp: cp < 1,
so the ring-attention time comes out negative): ``Result.function`` has no feasibility mask;
such an array raises OutOfBoundsError, or with ``on_bounds="flag"`` goes to the general path
and comes back unmarked, which the row times.
"""

from __future__ import annotations

import numpy as np

import symcalc
from common import Row, alternate, fmt_time, median

N = 1_000_000
CHUNK = 1 << 14
TARGET_NUMPY = 1.3
QUESTION = dict(d_model=12288, n_layers=96, n_heads=96, vocab_size=51200, seq_len="2048 token", tp=8, pp=8,
                dp=16, n_gpus=1024, global_batch_size=1536, micro_batch_size=1)
# tp_comm_overlap=false: Megatron-LM as of the 2021 GPT-3 run, every TP collective on the critical path
# (the hand version below writes that model; the default overlaps the backward's input-gradient collective)
PRESETS = dict(hardware="a100-80gb", options={"stack": "megatron-lm-2021", "recompute": "full", "attention_kernel": "eager",
                                             "tp_comm_overlap": "false", "overlap_grad_reduce": "false"})
LAYOUT = ("tp", "pp", "dp", "micro_batch_size", "n_gpus")


def layouts(n: int, seed: int = 0, infeasible: float = 0.0) -> dict[str, np.ndarray]:
    """n random valid layouts of GPT-3 175B with a global batch of 1536: tp within a node,
    pp dividing the 96 layers, dp dividing 1536 (up to 64), a micro-batch of 1-8 (every one
    divides 1536/dp, which keeps a factor 8), cp = 1, 2 or 4. With ``infeasible`` > 0, that
    share of them gets half the GPUs it needs (cp halves below 1), keeping n_gpus >= tp, pp
    and dp (else solve refuses the values before any derivation)."""
    rng = np.random.default_rng(seed)
    tp = rng.choice([1, 2, 4, 8], n)
    pp = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96], n)
    dp = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], n)
    cp = rng.choice([1, 2, 4], n)
    mbs = rng.choice([1, 2, 4, 8], n)
    n_gpus = tp * pp * cp * dp
    if infeasible:
        half = n_gpus // 2
        eligible = np.flatnonzero((cp == 1) & (n_gpus % 2 == 0) & (half >= np.maximum(np.maximum(tp, pp), dp)))
        bad = rng.choice(eligible, int(infeasible * n), replace=False)
        n_gpus[bad] = half[bad]
    return dict(tp=tp, pp=pp, dp=dp, micro_batch_size=mbs, n_gpus=n_gpus)


def by_hand(tp, pp, dp, micro_batch_size, n_gpus, d_model=12288, n_layers=96, n_heads=96, vocab_size=51200,
            seq_len=2048, global_batch_size=1536):
    """The step time in seconds, written from the derivation's steps (``symcalc solve
    step_time ...`` with the options of PRESETS), in SI units: bytes, FLOP, seconds; tokens as
    plain numbers. The coefficients are the library's: read from it once (HAND_COEFFICIENTS)."""
    c = HAND_COEFFICIENTS
    d, L, H, V, S, m = d_model, n_layers, n_heads, vocab_size, seq_len, micro_batch_size
    gpn, nic, ibw, lat_in, hbm = c["gpus_per_node"], c["nic_bandwidth"], c["intra_node_bus_bandwidth"], \
        c["intra_node_step_latency"], c["achievable_hbm_bandwidth"]
    rate = c["bf16_gemm_efficiency"] * c["peak_flops_bf16"] * c["sustained_clock_fraction"]
    kappa, host, ew, loss = c["comm_contention"], c["layer_pass_overhead"], c["elementwise_traffic_factor"], \
        c["loss_bytes_per_logit"]
    bpa, bpg, lat_out, net_eff = 2.0, 2.0, 10e-6, 0.94
    passes = 4.0                                   # full recompute: fwd + recomputed fwd + 2 bwd
    n_mb = global_batch_size / (dp * m)            # micro-batches = accumulation steps
    cp = n_gpus / (dp * pp * tp)
    lps = L / pp
    msl = m * S / cp                               # micro sequence length (tokens on a GPU)
    dpg = dp * cp                                  # ranks sharing a parameter shard
    tp_node = np.minimum(tp, gpn)
    pp_node = np.minimum(pp, np.maximum(1, gpn * pp / n_gpus))
    cp_node = np.minimum(cp, np.maximum(1, gpn / tp))
    dp_node = np.minimum(dpg, np.maximum(1, gpn / tp))
    nic_bus = net_eff * nic
    tp_lat = np.maximum(lat_in, lat_out * np.minimum(1, tp / tp_node - 1))
    dp_lat = np.maximum(lat_in, lat_out * np.minimum(1, dpg / dp_node - 1))
    tp_bw = np.minimum(ibw, tp_node * nic_bus + ibw * np.maximum(0, 2 - tp / tp_node))
    pp_bw = np.minimum(ibw, nic_bus + ibw * np.maximum(0, 2 - pp / pp_node))
    cp_bw = np.minimum(ibw, nic_bus + ibw * np.maximum(0, 2 - cp / cp_node))
    dp_bw = np.minimum(ibw, dp_node * nic_bus + ibw * np.maximum(0, 2 - dpg / dp_node))
    params_layer = 4 * d * d + 2 * d * 4 * d       # attention 4 d^2, GELU FFN 2 d (4 d)
    # GEMMs (additive roofline), eager attention (4 passes: the core recomputed)
    gemm = passes * ((2 * msl * params_layer / tp) / rate
                     + bpa * (msl * (4 * d + params_layer / (d * tp)) + params_layer / tp) / hbm)
    attention = passes * ((4 * msl * S * d / tp) / rate + (2 * bpa * H * msl * S / tp) / hbm)
    # memory-bound: norms, residuals and dropouts on the full width (no sequence parallelism),
    # GELU on d_ffn / tp; 3.5 passes; the scores' softmax and dropout (9 bytes x 2 forwards + 11)
    memory = ew * 3.5 * bpa * msl * ((10 + 5) * d + 2 * 4 * d / tp) / hbm + ew * 29 * H * msl * S / (tp * hbm)
    device = (gemm + attention + memory) / passes
    overhead = passes * ((host ** 2 + device ** 2) ** 0.5 - device)
    layer_time = gemm + attention + memory + overhead
    lm_head = 3 * (2 * msl * V * d / (tp * rate) + bpa * (msl * (d + V / tp) + V * d / tp) / hbm) + loss * msl * V / (tp * hbm)
    cp_comm = passes * (cp - 1) * 2 * msl * d * bpa / (tp * cp_bw)
    cp_exposed = cp_comm - (1 - kappa * cp_bw / ibw) * np.minimum(cp_comm, (cp - 1) / cp * attention)
    tp_comm = 2 * (passes - 1) * (2 * (tp - 1) / tp * (m * S * d / cp * bpa) / tp_bw + 2 * (tp - 1) * tp_lat)
    p2p = np.minimum(1, pp - 1) * 2 * (msl * d * bpa / (tp * pp_bw) + lat_out)
    stage_compute = lps * layer_time + lm_head
    micro_step = stage_compute + lps * tp_comm + lps * cp_exposed + p2p
    # data parallel: one AllReduce a step, after the backward, layer by layer (embeddings spread over the layers)
    layer_dp = (params_layer + 2 * V * d / L) / tp     # untied: the embedding and the output layer
    dp_comm = lps * (2 * (dpg - 1) / dpg * layer_dp * bpg / dp_bw + 2 * (dpg - 1) * dp_lat)
    params_gpu = (L * params_layer + 2 * V * d) / (tp * pp)
    optimizer = 16 * params_gpu / hbm
    return n_mb * micro_step + (pp - 1) * micro_step + dp_comm + optimizer


HAND_COEFFICIENTS: dict = {}


def read_coefficients() -> None:
    """The hardware preset's and the stack's values the hand version needs, read once (so the
    hand version tracks the library's calibration instead of a copy of it)."""
    from symcalc.library.presets import find_preset
    from symcalc import units
    hw = find_preset("hardware", PRESETS["hardware"])
    lib = symcalc.default_library()
    sets = lib.options["stack"].sets[PRESETS["options"]["stack"]]
    base = {**{k: v[0] for k, v in hw.resolve({}, None).items()}, **sets}
    for name in ("gpus_per_node", "nic_bandwidth", "intra_node_bus_bandwidth", "intra_node_step_latency",
                 "achievable_hbm_bandwidth", "bf16_gemm_efficiency", "peak_flops_bf16", "sustained_clock_fraction",
                 "comm_contention", "layer_pass_overhead", "elementwise_traffic_factor", "loss_bytes_per_logit"):
        HAND_COEFFICIENTS[name] = float(units.parse_quantity(base[name], name).to_base_units().magnitude)


def in_chunks(x: dict[str, np.ndarray]) -> np.ndarray:
    """by_hand a cache-sized chunk at a time (the sweep path's own trick)."""
    n = len(next(iter(x.values())))
    out = np.empty(n)
    for start in range(0, n, CHUNK):
        out[start:start + CHUNK] = by_hand(**{k: v[start:start + CHUNK] for k, v in x.items()})
    return out


def solved(on_bounds: str = "raise"):
    result = symcalc.solve("step_time", QUESTION, on_bounds=on_bounds, **PRESETS)
    if not HAND_COEFFICIENTS:
        read_coefficients()
    assert result.unit == "s", result
    assert abs(by_hand(8, 8, 16, 1, 1024) / result.value - 1) < 1e-12, (by_hand(8, 8, 16, 1, 1024), result.value)
    return result


def _ratio(t: dict[str, list[float]], ours: str, hand: str) -> tuple[float, list[float]]:
    """The median over rounds of ours / the mean of the hand runs just before and after it."""
    ratios = [s / ((a + b) / 2) for s, a, b in zip(t[ours], t[hand], t[hand + " again"])]
    return median(ratios), ratios


def run(quick: bool = False) -> list[Row]:
    rounds = 5 if quick else 15
    result = solved()
    x = layouts(N)
    given = {**QUESTION, **x}
    f = lambda: result.function(**given).magnitude   # noqa: E731
    np.testing.assert_allclose(f(), by_hand(**x), rtol=1e-9)
    np.testing.assert_allclose(in_chunks(x), by_hand(**x), rtol=1e-12)
    t = alternate({"numpy": lambda: by_hand(**x), "chunks": lambda: in_chunks(x), "symcalc": f,
                   "numpy again": lambda: by_hand(**x), "chunks again": lambda: in_chunks(x)}, rounds)
    ratio, ratios = _ratio(t, "symcalc", "numpy")
    versus_chunks, _ = _ratio(t, "symcalc", "chunks")
    best = min(t["symcalc"])
    rows = [
        Row("step_time over 1e6 layouts: Result.function vs hand numpy",
            f"{fmt_time(median(t['symcalc']))} vs {fmt_time(median(t['numpy']))} ({N / best / 1e6:.1f}M layouts/s)",
            f"{ratio:.2f}x", f"<= {TARGET_NUMPY}x", ratio <= TARGET_NUMPY,
            "GPT-3 175B on A100 80GB, full recompute, eager attention: 65 steps; tp, pp, dp, micro_batch_size, "
            f"n_gpus (int64) vary; median ratio of {rounds} alternating rounds (quartiles "
            f"{np.percentile(ratios, 25):.2f}-{np.percentile(ratios, 75):.2f}x; best of each: "
            f"{best / min(t['numpy']):.2f}x), layouts/s from the best round"),
        Row("same layouts: Result.function vs hand numpy in cache-sized chunks",
            f"{fmt_time(median(t['symcalc']))} vs {fmt_time(median(t['chunks']))}", f"{versus_chunks:.2f}x", "", None,
            f"the same hand function on {CHUNK} layouts at a time, as the sweep path evaluates (best of each: "
            f"{best / min(t['chunks']):.2f}x)"),
    ]
    return rows + [_infeasible(rounds)]


def _infeasible(rounds: int) -> Row:
    """A fifth of the layouts infeasible: Result.function has no mask to give them."""
    x = layouts(N, seed=1, infeasible=0.2)
    given = {**QUESTION, **x}
    try:
        solved().function(**given)
        raise AssertionError("infeasible layouts were answered without OutOfBoundsError")
    except symcalc.OutOfBoundsError:
        pass
    flagging = solved(on_bounds="flag")
    f = lambda: flagging.function(**given).magnitude  # noqa: E731

    def hand():     # the value and where it is feasible (cp >= 1: every step inside its bounds)
        return by_hand(**x), x["n_gpus"] >= x["tp"] * x["pp"] * x["dp"]
    np.testing.assert_allclose(f(), hand()[0], rtol=1e-9)
    assert abs((~hand()[1]).mean() - 0.2) < 1e-6
    t = alternate({"numpy": hand, "symcalc": f, "numpy again": hand}, max(3, rounds // 3))
    ratio, _ = _ratio(t, "symcalc", "numpy")
    return Row("same, a fifth infeasible: Result.function(on_bounds='flag') vs hand numpy + mask",
               f"{fmt_time(median(t['symcalc']))} vs {fmt_time(median(t['numpy']))}", f"{ratio:.2f}x", "", None,
               "Result.function has no feasibility mask: an infeasible layout (cp < 1) makes the array raise "
               "OutOfBoundsError, or under on_bounds='flag' takes the general path (solve with arrays) and "
               "returns every value unmarked; symcalc.sweep marks infeasible points, over grids of axes")
