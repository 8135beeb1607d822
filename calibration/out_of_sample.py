"""Predict published runs that the calibration never saw: ``python calibration/out_of_sample.py``.

The runs, their sources and what each source prints are in ``calibration/out_of_sample.toml``.
Each is predicted by symcalc from its configuration alone, with the library's coefficients as
they are (``symcalc.solve("step_time", given, options=..., hardware=...)``: the question
``symcalc solve step_time NAME=VALUE ... --hardware H --option K=V`` asks; ``--commands`` prints
those command lines). Nothing is fitted here, and calibration/fit.py never reads these runs.

The error is on the step time, predicted / published - 1: positive when the model is too slow
(pessimistic). Where a source prints TFLOP/s per GPU, its step time follows from its own FLOP
convention: FLOPs per iteration / (TFLOP/s per GPU x GPUs).

``--quick`` predicts only the Korthikanti et al. 2022 rows (a few seconds, what
tests/test_out_of_sample.py checks); ``--group NAME`` one source.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

import numpy as np

import symcalc

sys.path.insert(0, str(Path(__file__).resolve().parent))

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).resolve().parent / "out_of_sample.toml"
QUICK_GROUPS = ("korthikanti2022",)


# -- FLOP conventions of the sources (per iteration) ---------------------------------------------

def narayanan_flops(g: dict) -> float:
    """Narayanan et al. 2021, with full recomputation: 96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    B, s, l, h, V = g["global_batch_size"], g["seq_len"], g["n_layers"], g["d_model"], g["vocab_size"]
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def palm_flops(g: dict) -> float:
    """Chowdhery et al. 2022 (PaLM, appendix B): 6 N + 12 L H Q T per token, N the parameters
    that do matrix multiplies (the layers and the LM head; the input embedding is a lookup),
    H x Q = n_heads x head_dim, T the sequence length (attention counted non-causal)."""
    d, L, V = g["d_model"], g["n_layers"], g["vocab_size"]
    heads, kv = g["n_heads"], g.get("n_kv_heads", g["n_heads"])
    attn = 2 * d * d * (1 + kv / heads)
    ffn = 3 * d * g["d_ffn"] if "d_ffn" in g else 8 * d * d
    N = L * (attn + ffn) + V * d
    tokens = g["global_batch_size"] * g["seq_len"]
    return tokens * (6 * N + 12 * L * d * g["seq_len"])


FLOPS = {"narayanan": narayanan_flops, "palm": palm_flops}


# -- the runs ---------------------------------------------------------------------------------------

def load() -> dict:
    return tomllib.loads(DATA.read_text(encoding="utf-8"))


def questions(data: dict, groups: tuple[str, ...] | None = None) -> list[dict]:
    """Each run as a symcalc question (given, options, hardware) with its published step time."""
    out = []
    for run in data["runs"]:
        if groups and run["group"] not in groups:
            continue
        grp = data["groups"][run["group"]]
        given = {**grp.get("common", {}), **run["given"]}
        options = {**grp.get("options", {}), **run.get("options", {})}
        if "published_step_time_s" in run:
            published = float(run["published_step_time_s"])
        else:
            flops = FLOPS[grp["flops"]](given)
            published = flops / (float(run["published_tflops_per_gpu"]) * 1e12 * given["n_gpus"])
        out.append(dict(id=run["id"], group=run["group"], hardware=grp["hardware"], given=given,
                        options=options, published=published, figure=published_figure(run),
                        scored=run.get("scored", True), why_not_scored=run.get("why_not_scored", "")))
    return out


def published_figure(run: dict) -> str:
    if "published_step_time_s" in run:
        return f"{run['published_step_time_s']} s"
    return f"{run['published_tflops_per_gpu']} TFLOP/s"


def _symcalc_given(given: dict) -> dict:
    out = {k: v for k, v in given.items() if k != "seq_len"}
    out["seq_len"] = (given["seq_len"], "token")
    return out


def command(q: dict) -> str:
    """The command line that asks the same question."""
    args = ["symcalc", "solve", "step_time"]
    for k, v in q["given"].items():
        args.append(f"{k}={v} token" if k == "seq_len" else f"{k}={v}")
    args += ["--hardware", q["hardware"]]
    for k, v in q["options"].items():
        args += ["--option", f"{k}={v}"]
    return shlex.join(args)


def predict(qs: list[dict]) -> np.ndarray:
    """Predicted step time (s) of each question: one solve per group of questions that share
    hardware, options and given names (their values as arrays), as symcalc broadcasts them."""
    by_key: dict = {}
    for i, q in enumerate(qs):
        key = (q["hardware"], tuple(sorted(q["options"].items())), tuple(sorted(q["given"])))
        by_key.setdefault(key, []).append(i)
    out = np.empty(len(qs))
    for (hardware, options, names), idx in by_key.items():
        given = {n: np.array([float(qs[i]["given"][n]) for i in idx]) for n in names}
        result = symcalc.solve("step_time", _symcalc_given(given), options=dict(options), hardware=hardware)
        out[idx] = np.broadcast_to(np.asarray(result.quantity_value.to("s").magnitude, dtype=float), (len(idx),))
    return out


def breakdown(q: dict) -> dict:
    """The step's parts (s) for one question: compute, exposed TP, p2p, bubble, DP, optimizer."""
    r = symcalc.solve("step_time", _symcalc_given(q["given"]), options=q["options"], hardware=q["hardware"])
    return {p["name"]: float(p["value"]) for p in r.breakdown["parts"]}


def errors(qs: list[dict], predicted: np.ndarray) -> np.ndarray:
    return predicted / np.array([q["published"] for q in qs]) - 1


def table(qs: list[dict], predicted: np.ndarray) -> str:
    lines = [f"{'run':24s} {'hardware':10s} {'published':>16s} {'step (pub)':>11s} {'predicted':>10s} {'error':>8s}"]
    err = errors(qs, predicted)
    for q, p, e in zip(qs, predicted, err):
        lines.append(f"{q['id']:24s} {q['hardware']:10s} {q['figure']:>16s} {q['published']:10.2f}s "
                     f"{p:9.2f}s {e * 100:+7.1f}%" + ("" if q["scored"] else "  (not scored)"))
    a = np.abs(scored_errors(qs, predicted))
    lines.append(f"mean |error| {a.mean() * 100:.2f} %, max {a.max() * 100:.2f} % "
                 f"({len(a)} scored runs, step time, out of sample)")
    for q in qs:
        if not q["scored"]:
            lines.append(f"  not scored: {q['id']}: {q['why_not_scored']}")
    return "\n".join(lines)


def scored_errors(qs: list[dict], predicted: np.ndarray) -> np.ndarray:
    """The errors of the rows that count towards the mean and the max."""
    return np.array([e for q, e in zip(qs, errors(qs, predicted)) if q["scored"]])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the Korthikanti et al. 2022 rows")
    parser.add_argument("--group", action="append", help="only this source group (repeatable)")
    parser.add_argument("--commands", action="store_true", help="print each run's symcalc command line")
    parser.add_argument("--breakdown", action="store_true", help="print each run's step-time parts")
    args = parser.parse_args(argv)
    data = load()
    groups = tuple(args.group) if args.group else (QUICK_GROUPS if args.quick else None)
    qs = questions(data, groups)
    predicted = predict(qs)
    print(table(qs, predicted))
    by_group: dict = {}
    for q, e in zip(qs, errors(qs, predicted)):
        if q["scored"]:
            by_group.setdefault(q["group"], []).append(abs(e))
    if len(by_group) > 1:
        for g, es in by_group.items():
            print(f"  {g:20s} mean |error| {np.mean(es) * 100:5.2f} %, max {np.max(es) * 100:5.2f} % "
                  f"({data['groups'][g]['source']})")
    if args.breakdown:
        for q in qs:
            parts = breakdown(q)
            print(f"{q['id']:24s} " + " ".join(f"{k.replace('_time', '')}={v:.3g}" for k, v in parts.items() if v))
    if args.commands:
        for q in qs:
            print(command(q))
    return 0


if __name__ == "__main__":
    sys.exit(main())
