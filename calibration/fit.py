"""Calibrate the step-time model on published runs: ``python calibration/fit.py``.

Two parts, both from calibration/published_runs.toml (a verbatim copy of
shared/calibration/published_runs.toml, with its sources):

1. Hardware figures the presets carry, from the measurements of its section 2: the alpha-beta
   model of a node's ring (bandwidth and the latency of one step), the GEMM fraction of the
   peak, the achievable HBM bandwidth, the network efficiency (printed beside the presets').
2. The few coefficients no measurement gives, fitted on the runs of sections 1, 3 and 4:
   per hardware (sustained_clock_fraction, comm_contention) and per training stack
   (layer_pass_overhead, elementwise_traffic_factor), each pulled from its prior (the value
   formulas/stacks.toml or the preset carries before the fit) only as far as the runs pull it
   (symcalc.query.calibrate). Errors are reported in-sample and leave-one-source-out: each
   source's runs predicted by a fit on the other sources only, where a stack or a GPU no other
   source has keeps its prior: the honest figure for a stack the model has not seen.

The fitted values are printed as TOML to keep in formulas/stacks.toml and
formulas/presets/hardware.toml (the script never edits the library).

``--check`` prints the tables with the coefficients the library holds now, without fitting
(what tests/test_step_time.py asserts); ``--loso`` adds the leave-one-source-out table.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runs as published  # noqa: E402  (calibration/runs.py)

import symcalc  # noqa: E402
from symcalc.library.presets import find_preset  # noqa: E402
from symcalc.query.calibrate import Coefficient, Measured, Model, coefficients_for, fit  # noqa: E402

# quantity -> (scope, spread of the prior, default prior, a share in [0, 1])
SPEC = {
    "sustained_clock_fraction": ("hardware", 0.15, 1.0, False),
    "comm_contention": ("hardware", 0.15, 0.15, True),
    "layer_pass_overhead": ("stack", 1.0, 1e-4, False),
    "elementwise_traffic_factor": ("stack", 0.5, 1.0, False),
}


def load() -> dict:
    return published.load_toml(published.PUBLISHED)


def load_configs() -> dict:
    return published.load_toml(published.CONFIGS)


def questions(data: dict | None = None, configs: dict | None = None) -> list[dict]:
    """The Megatron runs of sections 1 and 3 (those with a full layout) as questions: id,
    hardware, options, given (seq_len with its unit), for the planner's tests and
    calibration/published_layouts.py."""
    out = []
    for r in published.calibration_runs():
        if r.source not in ("megatron_2021", "megatron_core_2024"):
            continue
        given = dict(r.given)
        given["seq_len"] = f"{given['seq_len']} token"
        out.append(dict(id=r.id, hardware=r.hardware, options=dict(r.options), given=given, measured=r.measured))
    return out


# -- hardware -------------------------------------------------------------------------------------

def alpha_beta(busbw_1gb: float, busbw_8gb: float, n: int = 8) -> tuple[float, float]:
    """(bandwidth in byte/s, latency of one ring step in s) of t = 2 (n-1) alpha + 2 (n-1)/n S / beta
    through the two measured bus bandwidths (nccl-tests: busbw = 2 (n-1)/n S / t)."""
    f = 2 * (n - 1) / n
    t1, t8 = f * 1e9 / (busbw_1gb * 1e9), f * 8e9 / (busbw_8gb * 1e9)
    beta = f * 7e9 / (t8 - t1)
    return beta, (t1 - f * 1e9 / beta) / (2 * (n - 1))


def hardware_figures(data: dict) -> list[tuple[str, str, str]]:
    """(preset quantity, value, from what) for the figures the calibration data gives."""
    m = {k: v for row in data["measured"] for k, v in row.items()}
    a100_bw, a100_lat = alpha_beta(228.0, m["a100_sxm4_80gb_busbw_GBps"])
    h200_bw, h200_lat = alpha_beta(467.6, m["h200_busbw_GBps"])
    lo, hi = (float(x) for x in m["ndr400_per_nic_busbw_GBps"].split("-"))
    a100_stream, h200_stream = np.mean(m["a100_stream_hbm_TBps"]), np.mean(m["h200_stream_hbm_TBps"])
    return [
        ("a100 intra_node_bus_bandwidth", f"{a100_bw / 1e9:.1f} GB/s", "alpha-beta through 228 GB/s at 1 GB, 231.58 at 8 GB"),
        ("a100 intra_node_step_latency", f"{a100_lat * 1e6:.2f} us", "the same fit"),
        ("h200 intra_node_bus_bandwidth", f"{h200_bw / 1e9:.1f} GB/s", "alpha-beta through 467.6 GB/s at 1 GB, 479.98 at 8 GB"),
        ("h200 intra_node_step_latency", f"{h200_lat * 1e6:.2f} us", "the same fit"),
        ("network_efficiency", f"{(lo + hi) / 2 / 50:.2f}", "46-48 GB/s per 400 Gb/s (50 GB/s) NIC"),
        ("a100 bf16_gemm_efficiency", f"{m['a100_80gb_fp16_gemm_tflops'] / 312:.3f}", "256.5 of 312 TFLOP/s"),
        ("h200 fp8_gemm_efficiency (16384^3)", f"{m['h200_fp8_gemm_tflops'] / 1978.9:.3f}", "H200 FP8 1366.3 of 1978.9 TFLOP/s"),
        ("a100 achievable_hbm_bandwidth", f"{a100_stream:.2f} TB/s", "STREAM, middle of 1.61-1.75"),
        ("h200 achievable_hbm_bandwidth", f"{h200_stream:.2f} TB/s", f"STREAM, middle of 4.0-4.48 ({h200_stream / 4.8:.3f} of 4.8)"),
    ]


# -- the runs as measured steps ------------------------------------------------------------------

def measured(runs: list) -> list[Measured]:
    out = []
    for r in runs:
        given = {k: v for k, v in r.given.items() if k != "seq_len"}
        given["seq_len"] = (r.given["seq_len"], "token")
        opts = dict(r.options)
        out.append(Measured(id=r.id, given=given, options=opts, hardware=find_preset("hardware", r.hardware).key,
                            step_time=r.measured,
                            group=r.source, stack=opts.get("stack", "megatron-core")))
    return out


# Priors: what each coefficient is before any run is fitted, by counting (not fitting). A stack or
# GPU no training source has (in leave-one-source-out) is predicted with these.
PRIORS = {
    # host time to issue a layer's kernels for one pass: about 10 us of eager PyTorch dispatch per
    # kernel (kernels counted per layer forward), plus per-module framework hooks
    ("layer_pass_overhead", "megatron-core"): (500e-6, "about 5 Transformer Engine modules a layer at about 100 us of Python each"),
    ("layer_pass_overhead", "megatron-lm-2021"): (300e-6, "about 30 kernels a layer pass at 10 us each"),
    ("layer_pass_overhead", "deepspeed"): (300e-6, "Megatron-LM 2021's kernels: about 30 a pass at 10 us each"),
    ("layer_pass_overhead", "fsdp"): (400e-6, "about 30 eager kernels at 10 us plus FSDP's per-module hooks (about 100 us)"),
    ("layer_pass_overhead", "torchtitan"): (400e-6, "about 30 eager kernels at 10 us plus FSDP2's hooks"),
    # memory-bound traffic over the unfused count
    ("elementwise_traffic_factor", "megatron-core"): (0.6, "Transformer Engine fuses the norm into the next GEMM, bias and activation, bias, dropout and residual: about 0.6 of the unfused count"),
    ("elementwise_traffic_factor", "megatron-lm-2021"): (1.0, "Megatron's fused bias-GeLU and bias-dropout-add, unfused LayerNorm: about the count"),
    ("elementwise_traffic_factor", "deepspeed"): (1.0, "Megatron-LM 2021's kernels"),
    ("elementwise_traffic_factor", "fsdp"): (1.0, "eager PyTorch, low-precision LayerNorm and GELU in 16 bits: the count"),
    ("elementwise_traffic_factor", "torchtitan"): (3.0, "eager RMSNorm and rotary embeddings upcast to fp32 (6.5 and 5 times the 16-bit count), SwiGLU 1.7 times: about 3 over a layer"),
}
HARDWARE_PRIORS = {
    "sustained_clock_fraction": (1.0, "a benchmark's rate"),
    "comm_contention": (0.15, "NCCL's channels take 16-24 of an H100's 132 streaming multiprocessors"),
}


def prior(name: str, scope: str, key: str):
    """A coefficient's value before any fit (PRIORS; HARDWARE_PRIORS), in base units."""
    if scope == "stack":
        return PRIORS.get((name, key), (None, ""))[0]
    return HARDWARE_PRIORS.get(name, (None, ""))[0]


def coefficients(runs: list[Measured]) -> list[Coefficient]:
    return coefficients_for(runs, SPEC, prior, symcalc.default_library())


def fit_on(train: list[Measured], all_runs: list[Measured]):
    """Fit on ``train``; return (values by (name, key), Fit). Coefficients of a scope ``train``
    does not have keep their priors when ``all_runs`` are predicted."""
    result = fit(train, coefficients(train), symcalc.solve)
    return {(c.name, c.key): v for c, v in zip(result.coefficients, result.values)}, result


def predict_with(runs: list[Measured], values: dict | None) -> np.ndarray:
    """Relative errors of ``runs`` with the coefficients ``values`` ({(name, key): value}); a
    scope not in ``values`` uses its prior. ``values`` None: the library's own values."""
    if values is None:
        return published.errors_of(runs)
    coefs = coefficients(runs)
    model = Model(runs, coefs, symcalc.solve)
    base = model.defaults()
    for n, col in base.items():
        for k, c in enumerate(model.coefficients):
            if c.name == n:
                col[model.index[n] == k] = values.get((c.name, c.key), c.prior)
    x = np.zeros(len(coefs))
    pred = model.predict(x, base)
    return pred / np.array([r.step_time for r in model.runs]) - 1


# -- tables ----------------------------------------------------------------------------------------

def table(runs: list[Measured], errors: np.ndarray, label: str) -> str:
    lines = [f"{'run':40s} {'source':20s} {'hardware':15s} {'measured':>10s} {'error':>8s}"]
    for r, e in zip(runs, errors):
        lines.append(f"{r.id:40s} {r.group:20s} {r.hardware:15s} {r.step_time:9.3f}s {e * 100:+7.1f}%")
    lines.append(summary(runs, errors, label))
    return "\n".join(lines)


def summary(runs: list[Measured], errors: np.ndarray, label: str) -> str:
    by = defaultdict(list)
    for r, e in zip(runs, errors):
        if np.isfinite(e):
            by[r.group].append(e)
    lines = []
    for g, es in by.items():
        a = np.array(es)
        lines.append(f"  {g:22s} n={len(a):3d}  mean |error| {np.abs(a).mean() * 100:5.1f} %  max {np.abs(a).max() * 100:5.1f} %"
                     f"  mean {a.mean() * 100:+5.1f} %")
    ok = errors[np.isfinite(errors)]
    lines.append(f"  all                    n={len(ok):3d}  mean |error| {np.abs(ok).mean() * 100:5.1f} %  "
                 f"max {np.abs(ok).max() * 100:5.1f} %  ({label})")
    return "\n".join(lines)


def loso(runs: list[Measured]) -> np.ndarray:
    """Leave-one-source-out errors: each source predicted by a fit on the others."""
    errors = np.full(len(runs), np.nan)
    for g in sorted({r.group for r in runs}):
        train = [r for r in runs if r.group != g]
        values, _ = fit_on(train, runs)
        idx = [i for i, r in enumerate(runs) if r.group == g]
        errors[idx] = predict_with([runs[i] for i in idx], values)
    return errors


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only the tables with the library's coefficients")
    parser.add_argument("--loso", action="store_true", help="also the leave-one-source-out table")
    args = parser.parse_args(argv)
    data = load()
    print("Hardware figures from the measurements (formulas/presets/hardware.toml carries them):")
    for name, value, how in hardware_figures(data):
        print(f"  {name:36s} {value:>12s}  ({how})")
    runs = measured(published.calibration_runs())
    current = predict_with(runs, None)
    print("\nWith the library's coefficients:")
    print(table(runs, current, "in-sample"))
    if args.check and not args.loso:
        return 0
    if not args.check:
        values, result = fit_on(runs, runs)
        print("\nFitted (in-sample):")
        print(table(runs, result.after, "in-sample, fitted"))
        print("\nKeep in formulas/stacks.toml (stack sets) and formulas/presets/hardware.toml:")
        for c, v in zip(result.coefficients, result.values):
            shown = f"{v * 1e6:.0f} us" if c.name == "layer_pass_overhead" else f"{v:.3g}"
            print(f"  {c.scope:8s} {c.key:16s} {c.name:28s} = {shown:>10s}   (prior {c.prior:.3g})")
    if args.loso:
        errors = loso(runs)
        print("\nLeave-one-source-out (each source predicted by a fit on the others):")
        print(table(runs, errors, "leave-one-source-out"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
