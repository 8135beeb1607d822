"""Memory of a long-lived process: thousands of solves and plans in one process (issue 34).

``symcalc serve``'s workers, a notebook or a script that plans in a loop live for weeks; what
one answer leaves behind must be freed, by reference counting or by the garbage collector on
its own. Before issue 34 every plan left ~10 MB the collector never reached (it was frozen
and unfrozen after each plan, so no full collection ran): 250 plans grew a worker to 2 GB.

The run: warm-up (the library, each question's derivation and the per-process memos made
once), then solves with new values every time (five question shapes) and plans (Llama 3 8B
on 8 H100s, batch sizes in turn, ZeRO stage fixed: 12 option combinations each) interleaved,
one plan per ``SOLVES_PER_PLAN`` solves. Printed: the resident memory (RSS) and the objects
the collector tracks (gc.get_objects(), never forced by gc.collect()) after warm-up and at
each tenth, and the growth from warm-up to the end. Target: RSS growth under 50 % (the
issue's serve load criterion). Counts and memory, never time.

``python benchmarks/memory_soak.py [--quick]`` (quick: 1,000 solves and 100 plans; full:
5,000 and 500).
"""

from __future__ import annotations

import gc
import os
import random
import resource
import sys
import time

import symcalc
from common import Row

TARGET_GROWTH = 0.5
SOLVES_PER_PLAN = 10
QUESTIONS = [
    ("n_gpus", lambda r: dict(n_params=r.uniform(1e9, 4e11), n_tokens=f"{r.uniform(1e11, 2e13):.4g} token",
                              train_time="30day", mfu=f"{r.uniform(20, 60):.3g}%", peak_flops="989 TFLOP/s")),
    ("train_time", lambda r: dict(n_params=r.uniform(1e9, 4e11), n_tokens=f"{r.uniform(1e11, 2e13):.4g} token",
                                  n_gpus=r.choice([64, 512, 4096]), mfu=r.uniform(0.2, 0.6), peak_flops="989 TFLOP/s")),
    ("d_model", lambda r: dict(n_params=r.uniform(1e9, 1e11), n_layers=r.choice([24, 32, 40, 80]), vocab_size=32000)),
    ("model_state_memory", lambda r: dict(n_params=r.uniform(1e9, 4e11), n_gpus=r.choice([8, 64, 512]))),
    ("checkpoint_interval", lambda r: dict(checkpoint_write_time=f"{r.uniform(10, 300):.3g} s", mtbf="24h")),
]
PLAN = dict(top=5, options={"zero_stage": "1"})


def rss_mb() -> float:
    """The resident memory now, in MB (/proc on Linux; elsewhere the peak, which only grows)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak / 1e6 if sys.platform == "darwin" else peak / 1e3


def _solve(r: random.Random, k: int) -> None:
    target, values = QUESTIONS[k % len(QUESTIONS)]
    symcalc.solve(target, **values(r))


def _plan(k: int) -> None:
    symcalc.plan("llama3-8b", "h100", 8, global_batch_size=(128, 256, 512)[k % 3], **PLAN)


def soak(solves: int, plans: int, report=print) -> dict:
    """Warm up, then ``solves`` solves and ``plans`` plans interleaved; the figures at each tenth."""
    r = random.Random(34)
    for k in range(len(QUESTIONS)):
        _solve(r, k)
    for k in range(3):
        _plan(k)
    start = {"rss": rss_mb(), "objects": len(gc.get_objects())}
    report(f"after warm-up: RSS {start['rss']:.0f} MB, {start['objects']:,} objects")
    steps = solves + plans
    done_solves = done_plans = 0
    t0 = time.perf_counter()
    points = []
    for i in range(1, steps + 1):
        if done_plans < plans and (done_solves >= solves or i % (SOLVES_PER_PLAN + 1) == 0):
            _plan(done_plans)
            done_plans += 1
        else:
            _solve(r, done_solves)
            done_solves += 1
        if i % max(1, steps // 10) == 0 or i == steps:
            points.append({"solves": done_solves, "plans": done_plans, "rss": rss_mb(), "objects": len(gc.get_objects())})
            p = points[-1]
            report(f"{p['solves']:>6,} solves {p['plans']:>5,} plans: RSS {p['rss']:.0f} MB, {p['objects']:,} objects "
                   f"({time.perf_counter() - t0:.0f} s)")
    end = points[-1]
    return {"start": start, "end": end, "peak_rss": max(p["rss"] for p in points),
            "collector": {"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}}


def run(quick: bool = False) -> list[Row]:
    solves, plans = (1000, 100) if quick else (5000, 500)
    got = soak(solves, plans, report=lambda line: print(line, file=sys.stderr, flush=True))
    s, e = got["start"], got["end"]
    growth = e["rss"] / s["rss"] - 1
    return [Row(f"memory: {solves:,} solves and {plans:,} plans in one process", f"RSS {s['rss']:.0f} -> {e['rss']:.0f} MB "
                f"(peak {got['peak_rss']:.0f}); objects {s['objects']:,} -> {e['objects']:,}", f"{growth:+.0%} RSS",
                f"< +{TARGET_GROWTH:.0%} RSS", growth < TARGET_GROWTH and got["collector"]["enabled"]
                and not got["collector"]["frozen"],
                "after warm-up to the end; solves with new values each time (5 question shapes), plans of Llama 3 8B "
                "on 8 H100s (ZeRO-1 fixed: 12 option combinations, 3 batch sizes) one per 10 solves; objects are "
                "those the collector tracks, never forced by gc.collect(); the collector on and unfrozen at the end")]


if __name__ == "__main__":
    from run import table
    print(table(run(quick="--quick" in sys.argv[1:])))
