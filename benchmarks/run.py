"""Run every benchmark and print one table: ``python benchmarks/run.py [--quick]``.

Each row is one claim: what was measured, the figures, the ratio, the target and whether it
was met (rows without a target are context). Ratios are measured side by side in the same
run, never against numbers from another run or machine. ``--quick`` is a smoke run: fewer
repetitions and fewer naive points, the same rows. Exits 1 if a target was missed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import diagnosis  # noqa: E402
import library_growth  # noqa: E402
import memory_soak  # noqa: E402
import planner  # noqa: E402
import solve_cache  # noqa: E402
import startup  # noqa: E402
import step_time  # noqa: E402
import sweep  # noqa: E402
from common import Row  # noqa: E402

BENCHMARKS = [sweep, step_time, planner, solve_cache, startup, library_growth, diagnosis, memory_soak]
HEADERS = ("benchmark", "measured", "ratio", "target", "result")


def table(rows: list[Row]) -> str:
    """The rows as one plain-text table, notes numbered below it."""
    cells = [HEADERS] + [(r.name + (f" [{i}]" if r.note else ""), r.figures, r.ratio, r.target or "-",
                          "-" if r.ok is None else "PASS" if r.ok else "FAIL")
                         for i, r in enumerate(rows, 1)]
    widths = [max(len(c[i]) for c in cells) for i in range(len(HEADERS))]
    line = "+".join("-" * (w + 2) for w in widths)
    out = [" | ".join(c.ljust(w) for c, w in zip(cells[0], widths)), line]
    out += [" | ".join(c.ljust(w) for c, w in zip(row, widths)) for row in cells[1:]]
    out += [""] + [f"[{i}] {r.note}" for i, r in enumerate(rows, 1) if r.note]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a fast smoke run (fewer repetitions)")
    args = parser.parse_args(argv)
    rows: list[Row] = []
    started = time.perf_counter()
    for bench in BENCHMARKS:
        print(f"running {bench.__name__} ...", file=sys.stderr, flush=True)
        rows += bench.run(quick=args.quick)
    print(table(rows))
    print(f"\n{'quick' if args.quick else 'full'} run, {time.perf_counter() - started:.0f} s; "
          f"Python {sys.version.split()[0]}")
    return 0 if all(r.ok is not False for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
