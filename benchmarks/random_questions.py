"""Random questions over the whole built-in library, each under a time limit:
``python benchmarks/random_questions.py [--count 1000] [--seed 10] [--time-limit 10]``.

Why: the library answers far more questions than anyone writes tests for, and the ones nobody
tried are where a search runs for ever or an internal error hides. Each question is a random
target, one to six known quantities (half of them near the target in the formula graph, so that
many questions can be answered; or the other quantities of a chain of one or two formulas that
settle the target) with plausible values in their display units, sometimes
options and presets, asked through the command line's own entry point (``--json``) in this
process, as a long-lived caller would. Every question must end within its limit (plus a
little to unwind) with an answer or a clear refusal; an "internal" error fails the run.

Prints the outcomes by kind, the slowest questions and any internal error; exits 1 if a
question was internal or overran.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import random
import sys
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

OVERRUN = 2.0          # seconds past its limit a question may take to unwind and print
EXAMPLES = {"%": 45, "GB": 80, "GiB": 80, "TFLOP/s": 989, "PFLOP/s": 6.3, "hour": 24, "day": 30, "GB/s": 50,
            "Gb/s": 400, "TB/s": 3.35, "ms": 70, "us": 5, "min": 30, "s": 98, "USD/hour": 2, "USD": 2e6,
            "token/s": 150000, "token": 2e12, "FLOP": 1e23, "FLOP/token": 6, "byte": 2, "PFLOP": 1, "W": 700,
            "kW": 0.7, "MWh": 1000}
COUNTS = [1, 2, 4, 8, 16, 32, 64, 128, 512, 1024, 4096, 32000, 128256, 7e9, 70e9]


def plausible(q, rng: random.Random) -> str | None:
    """A value of quantity ``q`` as a user would type it, or None for text quantities."""
    if q.kind == "text":
        return None
    if q.default is not None and rng.random() < 0.3:
        return q.default
    d = q.domain
    if d.hi <= 1:                                    # a fraction: MFU, a bubble, an overlap
        x = rng.uniform(max(d.lo, 0.01), min(d.hi, 0.99))
        return f"{100 * x:.3g}%" if q.display_unit == "%" else f"{x:.3g}"
    if q.whole:
        choices = [c for c in COUNTS if d.contains(c)] or [max(d.lo, 1)]
        return f"{rng.choice(choices):g}"
    unit = q.display_unit
    base = EXAMPLES.get(unit, 1.0) * 10 ** rng.uniform(-1.5, 1.5)
    if not unit:
        base = 10 ** rng.uniform(-2, 10)
    return f"{base:.4g} {unit}".strip()


def neighbours(lib, target: str, depth: int = 2) -> list[str]:
    """Quantities within ``depth`` formulas of the target."""
    by_quantity: dict[str, set[str]] = {}
    for f in lib.formulas.values():
        for q in f.quantities:
            by_quantity.setdefault(q, set()).update(f.quantities)
    seen, frontier = {target}, {target}
    for _ in range(depth):
        frontier = {n for q in frontier for n in by_quantity.get(q, ())} - seen
        seen |= frontier
    return sorted(seen - {target})


def chain(lib, target: str, rng: random.Random, steps: int) -> list[str]:
    """Knowns that settle ``target`` through ``steps`` formulas: the other quantities of a
    formula that can be solved for it, one of which is in turn settled by another formula."""
    known: list[str] = []
    wanted = target
    for step in range(steps):
        usable = [f for f in lib.formulas.values() if not f.algorithm and f.solvability.get(wanted, "none") != "none"]
        if not usable:
            break
        f = rng.choice(usable)
        others = [q for q in f.quantities if q != wanted and lib.quantities[q].kind != "text"]
        known += [q for q in others if q not in known and q != target]
        if not others or step == steps - 1:
            break
        wanted = rng.choice(others)            # not given: the next formula settles it
        known = [q for q in known if q != wanted]
    return known


def question(lib, presets, rng: random.Random) -> list[str]:
    """One random question as command-line arguments: half of them settled by a chain of one
    or two formulas (so answerable unless options or bounds say otherwise), the rest any
    known quantities, near the target or anywhere."""
    names = sorted(n for n, q in lib.quantities.items() if q.kind != "text")
    target = rng.choice(names)
    roll = rng.random()
    if roll < 0.5:
        known = chain(lib, target, rng, steps=1 if roll < 0.3 else 2)
    else:
        near = neighbours(lib, target)
        known = []
        for _ in range(rng.randint(1, 6)):
            name = rng.choice(near if near and rng.random() < 0.5 else names)
            if name != target and name not in known:
                known.append(name)
    args = ["solve", target]
    for name in known:
        value = plausible(lib.quantities[name], rng)
        if value is not None:
            args.append(f"{name}={value}")
    if rng.random() < 0.3:
        for option in rng.sample(sorted(lib.options), k=rng.randint(1, 2)):
            args += ["--option", f"{option}={rng.choice(sorted(lib.options[option].values))}"]
    if rng.random() < 0.15:
        args += ["--hardware", rng.choice(sorted(presets["hardware"]))]
    if rng.random() < 0.15:
        args += ["--model", rng.choice(sorted(presets["model"]))]
    return args


def ask(args: list[str], limit: float) -> tuple[str, float, str]:
    """(outcome, seconds, message): outcome is 'answer' or the error kind."""
    from symcalc.cli import main
    out, err = io.StringIO(), io.StringIO()
    start = time.monotonic()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*args, "--json", "--time-limit", str(limit)])
    elapsed = time.monotonic() - start
    if code == 0:
        value = json.loads(out.getvalue())["value"]
        ok = value is None or isinstance(value, (str, list)) or math.isfinite(value)
        return ("answer" if ok else "non-finite answer"), elapsed, ""
    try:
        error = json.loads(out.getvalue())["error"]
        return error["kind"], elapsed, error["message"]
    except (ValueError, KeyError):
        return "unparsable", elapsed, (out.getvalue() + err.getvalue())[:300]


def watchdog(limit: float) -> list[float]:
    """A thread that ends the process if one question runs far past its limit (the limit
    itself failed: the run must report that, not hang). Returns the start-time cell to set."""
    started = [time.monotonic()]

    def watch() -> None:
        while True:
            time.sleep(1.0)
            if time.monotonic() - started[0] > 3 * limit + 10:
                print(f"HUNG: a question ran {time.monotonic() - started[0]:.0f} s past a limit of {limit} s",
                      flush=True)
                os._exit(3)
    threading.Thread(target=watch, daemon=True).start()
    return started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=10)
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--slowest", type=int, default=5)
    opts = parser.parse_args()
    from symcalc.library.loading import default_library
    from symcalc.library.presets import all_presets
    lib, presets = default_library(), all_presets()
    rng = random.Random(opts.seed)
    started = watchdog(opts.time_limit)
    outcomes: Counter = Counter()
    timings: list[tuple[float, str, str]] = []
    bad: list[tuple[str, str, str]] = []
    t0 = time.monotonic()
    for i in range(opts.count):
        args = question(lib, presets, rng)
        started[0] = time.monotonic()
        outcome, elapsed, message = ask(args, opts.time_limit)
        outcomes[outcome] += 1
        shown = " ".join(a if " " not in a else f'"{a}"' for a in ["symcalc", *args])
        timings.append((elapsed, shown, outcome))
        if outcome in ("internal", "unparsable", "non-finite answer") or elapsed > opts.time_limit + OVERRUN:
            bad.append((outcome, shown, message))
        if (i + 1) % 100 == 0:
            print(f"  {i + 1} questions, {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    timings.sort(reverse=True)
    print(f"{opts.count} random questions (seed {opts.seed}, limit {opts.time_limit:g} s each) in "
          f"{time.monotonic() - t0:.0f} s")
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in outcomes.most_common()))
    print(f"median {timings[len(timings) // 2][0]:.3f} s; slowest:")
    for elapsed, shown, outcome in timings[:opts.slowest]:
        print(f"  {elapsed:6.2f} s  {outcome:<16} {shown}")
    print("slowest of each outcome:")
    for kind in outcomes:
        elapsed, shown, _ = next(t for t in timings if t[2] == kind)
        print(f"  {elapsed:6.2f} s  {kind:<16} {shown}")
    for outcome, shown, message in bad:
        print(f"BAD {outcome}: {shown}\n    {message}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
