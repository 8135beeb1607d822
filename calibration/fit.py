"""Calibrate the step-time model on published runs: ``python calibration/fit.py``.

Two parts, both from ``calibration/published_runs.toml`` only (a verbatim copy of
shared/calibration/published_runs.toml, with its sources):

1. Hardware: what the presets' achievable figures follow from. The AllReduce bus bandwidth
   of 8 GPUs at 1 GB and 8 GB gives the alpha-beta model of a node's ring (bandwidth and the
   latency of one step); the 16384^3 GEMM gives the fraction of the peak a large GEMM reaches;
   STREAM gives the achievable HBM bandwidth; the per-NIC bus bandwidth gives the network
   efficiency. These are printed beside the values formulas/presets/hardware.toml carries.
2. Software: the coefficients of formulas/step_time.toml that no measurement gives
   (elementwise_traffic_factor, layer_pass_overhead) are fitted by least squares on the
   relative error of the achieved TFLOP/s per GPU of the ten Megatron-LM runs (A100) and the
   Megatron-Core run (H100), each predicted by symcalc from its configuration and counted in
   its source's FLOP convention. The fitted values are printed as TOML to keep in
   formulas/step_time.toml (the script never edits the library).

What the tables do not print (micro-batch size, interleaving, whether the gradient reduction
overlaps the backward) comes from the sources' launch scripts: calibration/run_configs.toml.

``--check`` prints the error table with the coefficients the library holds now, without
fitting (what tests/test_step_time.py asserts).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import symcalc
from symcalc import units

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).resolve().parent / "published_runs.toml"
CONFIGS = Path(__file__).resolve().parent / "run_configs.toml"
FITTED = ("elementwise_traffic_factor", "layer_pass_overhead")
UNITS = {"elementwise_traffic_factor": "", "layer_pass_overhead": "s"}


def load() -> dict:
    return tomllib.loads(DATA.read_text(encoding="utf-8"))


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
        ("a100 gemm_efficiency", f"{m['a100_80gb_fp16_gemm_tflops'] / 312:.3f}", "256.5 of 312 TFLOP/s"),
        ("hopper gemm_efficiency", f"{m['h200_fp8_gemm_tflops'] / 1978.9:.3f}", "H200 FP8 1366.3 of 1978.9 TFLOP/s"),
        ("blackwell gemm_efficiency", f"{m['gb200_fp8_gemm_tflops'] / 5000:.3f}", "GB200 FP8 2906.9 of 5000 TFLOP/s"),
        ("a100 achievable_hbm_bandwidth", f"{a100_stream:.2f} TB/s", "STREAM, middle of 1.61-1.75"),
        ("h200 achievable_hbm_bandwidth", f"{h200_stream:.2f} TB/s", f"STREAM, middle of 4.0-4.48 ({h200_stream / 4.8:.3f} of 4.8)"),
    ]


# -- runs ------------------------------------------------------------------------------------------

def narayanan_flops(r: dict) -> float:
    """Narayanan et al. 2021's count per iteration, with full recomputation:
    96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    B, s, l, h, V = r["global_batch_size"], r["seq_len"], r["n_layers"], r["d_model"], r["vocab_size"]
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def megatron_core_flops(r: dict) -> float:
    """Megatron-Core's num_floating_point_operations per iteration (MHA, 4h GELU FFN):
    12 B s L h^2 ((1 + 1 + s/h) + 4 + V/(2 L h))."""
    B, s, L, h, V = r["global_batch_size"], r["seq_len"], r["n_layers"], r["d_model"], r["vocab_size"]
    return 12 * B * s * L * h * h * ((2 + s / h) + 4 + V / (2 * L * h))


SOURCES = {"megatron_2021": (narayanan_flops, "achieved_tflops_per_gpu"),
           "megatron_core_2024": (megatron_core_flops, "tflops_per_gpu")}
SHAPE = ("d_model", "n_layers", "n_heads", "vocab_size", "tp", "pp", "dp", "n_gpus", "global_batch_size")


def load_configs() -> dict:
    return tomllib.loads(CONFIGS.read_text(encoding="utf-8"))


def questions(data: dict, configs: dict) -> list[dict]:
    """Each run as a symcalc question: given values, options and hardware, from the published
    table and run_configs.toml (what the sources' launch scripts set)."""
    out = []
    for table, (flops, achieved) in SOURCES.items():
        config = configs[table]
        for row in data[table]:
            run = dict(config["runs"][row["id"]])
            options = dict(config["options"])
            for key in ("overlap_grad_reduce",):
                if key in run:
                    options[key] = run.pop(key)
            if "virtual_stages" in run:
                options["pipeline_schedule"] = "interleaved"
            given = {k: row[k] for k in SHAPE}
            given["seq_len"] = f"{row['seq_len']} token"
            given.update(run)
            out.append(dict(id=row["id"], hardware=config["hardware"], options=options, given=given,
                            flops=flops(row), published=float(row[achieved])))
    return out


def groups(data: dict, configs: dict) -> list[dict]:
    """The questions grouped by hardware, options and given names, each group's values as
    arrays: one solve per group."""
    by_key: dict = {}
    for q in questions(data, configs):
        key = (q["hardware"], tuple(sorted(q["options"].items())), tuple(sorted(q["given"])))
        by_key.setdefault(key, []).append(q)
    out = []
    for (hardware, options, names), qs in by_key.items():
        given = {n: np.array([float(q["given"][n]) for q in qs]) for n in names if n != "seq_len"}
        given["seq_len"] = (np.array([float(q["given"]["seq_len"].split()[0]) for q in qs]), "token")
        out.append(dict(ids=[q["id"] for q in qs], hardware=hardware, options=dict(options), given=given,
                        flops=np.array([q["flops"] for q in qs]), n_gpus=given["n_gpus"],
                        published=np.array([q["published"] for q in qs])))
    return out


class Model:
    """The library's step time for every run, as a function of the fitted coefficients: one
    solve per group, then its compiled derivation for new coefficient values."""

    def __init__(self, data: dict):
        self.groups = groups(data, load_configs())
        lib = symcalc.default_library()
        self.current = {name: float(units.parse_quantity(lib.quantities[name].default, name)
                                    .to_base_units().magnitude) for name in FITTED}
        for g in self.groups:
            g["result"] = symcalc.solve("step_time", g["given"], options=g["options"], hardware=g["hardware"],
                                        **self._coefficients(self.current))

    @staticmethod
    def _coefficients(values: dict) -> dict:
        return {k: (v, UNITS[k]) if UNITS[k] else v for k, v in values.items()}

    def achieved(self, values: dict | None = None) -> list[np.ndarray]:
        """Predicted TFLOP/s per GPU of each group's runs in their source's convention."""
        values = self.current if values is None else values
        out = []
        for g in self.groups:
            step = g["result"].function(**g["given"], **self._coefficients(values)).to("s").magnitude
            out.append(g["flops"] / (np.asarray(step) * g["n_gpus"]) / 1e12)
        return out

    def errors(self, values: dict | None = None) -> np.ndarray:
        return np.concatenate([a / g["published"] - 1 for a, g in zip(self.achieved(values), self.groups)])


def fit(model: Model) -> dict:
    from scipy.optimize import least_squares
    start = np.array([3.0, 100e-6])
    scale = np.array([1.0, 1e-4])

    def residual(x):
        return model.errors(dict(zip(FITTED, x * scale)))

    res = least_squares(residual, start / scale, bounds=(0, np.inf))
    return dict(zip(FITTED, res.x * scale))


def table(model: Model, values: dict | None = None) -> str:
    lines = [f"{'run':16s} {'hardware':10s} {'published':>10s} {'predicted':>10s} {'error':>8s}"]
    errors = []
    for g, achieved in zip(model.groups, model.achieved(values)):
        for i, run in enumerate(g["ids"]):
            e = achieved[i] / g["published"][i] - 1
            errors.append(e)
            lines.append(f"{run:16s} {g['hardware']:10s} {g['published'][i]:10.1f} {achieved[i]:10.1f} {e * 100:+7.1f}%")
    e = np.abs(errors)
    lines.append(f"mean |error| {e.mean() * 100:.2f} %, max {e.max() * 100:.2f} % (TFLOP/s per GPU, in-sample)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only print the table with the library's coefficients")
    args = parser.parse_args(argv)
    data = load()
    print("Hardware figures from the measurements (formulas/presets/hardware.toml carries them):")
    for name, value, how in hardware_figures(data):
        print(f"  {name:32s} {value:>12s}  ({how})")
    model = Model(data)
    print("\nWith the library's coefficients:", ", ".join(f"{k} = {v:.4g}" for k, v in model.current.items()))
    print(table(model))
    if args.check:
        return 0
    fitted = fit(model)
    print("\nFitted:")
    print(table(model, fitted))
    print("\nKeep in formulas/step_time.toml:")
    print(f'elementwise_traffic_factor: default = "{fitted["elementwise_traffic_factor"]:.3g}"')
    print(f'layer_pass_overhead:        default = "{fitted["layer_pass_overhead"] * 1e6:.3g} us"')
    return 0


if __name__ == "__main__":
    sys.exit(main())
