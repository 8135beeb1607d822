"""Judge the step-time model on published runs it was never fitted on: ``python calibration/held_out.py``.

The runs are in ``calibration/held_out/*.toml`` (one file per source, every figure with its
source; the README there lists each source's caveats). Each row is translated into the question
``symcalc solve step_time ... --hardware H --stack S --option ...`` asks (calibration/runs.py,
``held_out_run``: one translation per source's settings, no per-row tuning) and answered with
the library's coefficients as they are. Nothing is fitted here and calibration/fit.py never
reads these rows.

The error is predicted / published - 1 on the step time: positive when the model is too slow.
Rows marked ``scored = false`` in the data (with the reason in ``unscored``) are counted but not
scored; rows the model cannot express are listed with symcalc's own error.

Options: ``--by source|regime|hardware|stack`` (repeatable; default source and regime),
``--source NAME`` / ``--regime NAME`` to keep some rows, ``--rows`` for every row's error
(worst first) and ``--commands`` for the command line of each row, ``--json`` for one JSON
object. The targets of issue 19 (mean |error| <= 10 %, max <= 25 %, at most 70 % of the rows
on one side) are printed beside the figures, met or not.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import runs as R  # noqa: E402

TARGETS = {"mean": 0.10, "max": 0.25, "one_side": 0.70}


def stats(errors: np.ndarray) -> dict:
    """Summary of relative errors: count, mean / median / max of |e|, mean e (bias) and the
    share of rows predicted too slow."""
    e = np.asarray(errors, dtype=float)
    if e.size == 0:
        return {"n": 0}
    a = np.abs(e)
    return {"n": int(e.size), "mean": float(a.mean()), "median": float(np.median(a)), "max": float(a.max()),
            "bias": float(e.mean()), "too_slow": float(np.mean(e > 0))}


def key_of(run: R.Run, by: str) -> str:
    return {"source": run.source, "regime": run.regime, "hardware": run.hardware,
            "stack": run.options.get("stack", "")}[by]


def evaluate(runs: list[R.Run]) -> tuple[list[tuple[R.Run, float]], dict, list[R.Run]]:
    """(scored rows with their errors, {run id: why the model cannot answer}, unscored rows)."""
    scored = [r for r in runs if r.scored]
    failures: dict = {}
    predicted = R.predict(scored, errors=failures)
    pairs = [(r, p / r.measured - 1) for r, p in zip(scored, predicted) if np.isfinite(p)]
    return pairs, failures, [r for r in runs if not r.scored]


def table(pairs: list, by: str) -> list[tuple[str, dict]]:
    groups = defaultdict(list)
    for r, e in pairs:
        groups[key_of(r, by)].append(e)
    return [(k, stats(np.array(v))) for k, v in sorted(groups.items())]


def pct(x: float) -> str:
    return f"{x * 100:5.1f} %"


def stat_line(name: str, s: dict, width: int) -> str:
    return (f"  {name:<{width}} {s['n']:4d}  {pct(s['mean'])}  {pct(s['median'])}  {pct(s['max'])}  "
            f"{s['bias'] * 100:+6.1f} %  {s['too_slow'] * 100:5.0f} %")


def floor(pairs: list) -> dict:
    """What no model of these inputs can beat: rows whose question is the same command line
    (same model, layout, options and hardware; typically one benchmark table re-published by
    later releases) but whose published step times differ.

    A deterministic model gives one answer p per question. Over a group with published times
    t_min..t_max its largest |p / t - 1| is at least (t_max - t_min) / (t_max + t_min), and its
    summed |p / t_i - 1| is convex and piecewise linear in p, so the least sum is reached at
    one of the t_i. Summing those least errors over the groups (rows alone in their group add
    0) and dividing by all rows gives the floor of the mean. Cost: O(n log n) over the rows.

    Returns {"groups": groups with more than one row, "rows": their rows, "max_floor": the
    least possible max |error|, "mean_floor": the least possible mean |error|, "worst": the
    widest group's run ids and published times}.
    """
    groups: dict = defaultdict(list)
    for r, _ in pairs:
        groups[r.command()].append(r.measured)
    multi = [sorted(t) for t in groups.values() if len(t) > 1]
    if not multi:
        return {"groups": 0, "rows": 0, "max_floor": 0.0, "mean_floor": 0.0}
    max_floor = max((t[-1] - t[0]) / (t[-1] + t[0]) for t in multi)
    least_sum = sum(min(sum(abs(p / ti - 1) for ti in t) for p in t) for t in multi)
    widest = max((cmd for cmd, t in groups.items() if len(t) > 1),
                 key=lambda c: max(groups[c]) / min(groups[c]))
    worst = [(r.id, r.measured) for r, _ in pairs if r.command() == widest]
    return {"groups": len(multi), "rows": sum(len(t) for t in multi), "max_floor": max_floor,
            "mean_floor": least_sum / len(pairs), "worst": worst}


def report(pairs: list, failures: dict, unscored: list, bys: list[str]) -> list[str]:
    lines = []
    header = "rows  mean|e| median|e|  max|e|    bias  too slow"
    for by in bys:
        rows = table(pairs, by)
        width = max([len(by)] + [len(k) for k, _ in rows])
        lines += [f"By {by}:", f"  {by:<{width}} {header}"]
        lines += [stat_line(k, s, width) for k, s in rows]
        lines.append("")
    every = stats(np.array([e for _, e in pairs]))
    lines.append(stat_line("all scored rows", every, 15))
    if every["n"]:
        one_side = max(every["too_slow"], 1 - every["too_slow"])
        checks = [("mean |error|", every["mean"], TARGETS["mean"]), ("max |error|", every["max"], TARGETS["max"]),
                  ("rows on one side", one_side, TARGETS["one_side"])]
        lines.append("Targets: " + "; ".join(f"{n} {pct(v).strip()} (target <= {pct(t).strip()}: "
                                             f"{'met' if v <= t else 'NOT met'})" for n, v, t in checks))
        f = floor(pairs)
        if f["groups"]:
            lines.append(f"Floor of any model: {f['rows']} rows ask {f['groups']} questions more than once (same inputs, "
                         f"another release) with other published times: no model can do better than mean |error| "
                         f"{pct(f['mean_floor']).strip()} and max |error| {pct(f['max_floor']).strip()} on these rows. "
                         "Widest: " + ", ".join(f"{i} {t:.3g} s" for i, t in f["worst"]))
    if unscored:
        lines.append(f"Not scored ({len(unscored)}, marked in the data):")
        lines += [f"  {r.id}: {r.why_not_scored}" for r in unscored]
    if failures:
        lines.append(f"Not expressible ({len(failures)}):")
        lines += [f"  {k}: {v.splitlines()[0]}" for k, v in failures.items()]
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--by", action="append", choices=["source", "regime", "hardware", "stack"])
    ap.add_argument("--source", action="append", help="keep the rows of these sources")
    ap.add_argument("--regime", action="append", help="keep the rows of these regimes")
    ap.add_argument("--rows", action="store_true", help="every row's error, worst first")
    ap.add_argument("--commands", action="store_true", help="with --rows: each row's command line")
    ap.add_argument("--json", action="store_true", help="one JSON object")
    args = ap.parse_args(argv)
    runs = R.held_out_runs()
    if args.source:
        runs = [r for r in runs if r.source in args.source]
    if args.regime:
        runs = [r for r in runs if r.regime in args.regime]
    if not runs:
        known = sorted({r.source for r in R.held_out_runs()} | {r.regime for r in R.held_out_runs()})
        print(f"error: no held-out rows match; sources and regimes: {', '.join(known)}", file=sys.stderr)
        return 2
    pairs, failures, unscored = evaluate(runs)
    bys = args.by or ["source", "regime"]
    if args.json:
        print(json.dumps({"all": stats(np.array([e for _, e in pairs])), "targets": TARGETS,
                          **{f"by_{by}": dict(table(pairs, by)) for by in bys},
                          "rows": {r.id: e for r, e in pairs}, "floor": floor(pairs),
                          "unscored": {r.id: r.why_not_scored for r in unscored}, "not_expressible": failures},
                         indent=1))
        return 0
    print(f"Held-out published runs: {len(runs)} rows of {len({r.source for r in runs})} sources "
          "(error = predicted / published step time - 1)\n")
    print("\n".join(report(pairs, failures, unscored, bys)))
    if args.rows:
        print("\nRows, worst first:")
        for r, e in sorted(pairs, key=lambda t: -abs(t[1])):
            print(f"  {e * 100:+6.1f} %  {r.id}  ({r.source}, {r.regime}, {r.hardware}; published {r.measured:.4g} s)")
            if args.commands:
                print(f"      {r.command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
