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
                          "rows": {r.id: e for r, e in pairs},
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
