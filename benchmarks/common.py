"""What every benchmark shares: timing that survives a noisy machine, and the table row.

Why repeated side-by-side timing: the machine these run on is shared, so a single timing can
be off by 2x. Each comparison therefore times both sides in alternation, several rounds, and
reports the ratio of their medians (and keeps the minimums, the least disturbed runs).
"""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class Row:
    """One line of the table: what was measured, the figures, the ratio and the target."""

    name: str
    figures: str                 # the measured numbers, with units
    ratio: str                   # the headline ratio (or exponent), as shown
    target: str                  # what it must be, as shown ("<= 1.3x"); "" for information
    ok: bool | None              # None: information only, no target
    note: str = ""               # how it was measured, when the figures alone do not say


def seconds(fn: Callable[[], object], repeat: int = 5, number: int = 1) -> list[float]:
    """Wall times of ``number`` calls of fn, ``repeat`` times (collector off while timing)."""
    out = []
    for _ in range(repeat):
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            for _ in range(number):
                fn()
            out.append((time.perf_counter() - t0) / number)
        finally:
            gc.enable()
    return out


def alternate(fns: dict[str, Callable[[], object]], rounds: int, number: int = 1) -> dict[str, list[float]]:
    """Time each function once per round, in turn, so every side sees the same machine load."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            times[name] += seconds(fn, repeat=1, number=number)
    return times


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def fmt_time(s: float) -> str:
    """A duration with a unit people read: 850 ms, 12.3 ms, 41 us, 1.2 s, 3.4 h."""
    if s >= 3600:
        return f"{s / 3600:.3g} h"
    if s >= 1:
        return f"{s:.3g} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3g} ms"
    return f"{s * 1e6:.3g} us"
