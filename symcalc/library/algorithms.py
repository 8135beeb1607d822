"""Algorithms: procedures the library needs that are not closed-form equations.

A formula file refers to one of these by name (``[[algorithms]]`` with ``function = ...``);
user files can use them but cannot add code, so no text from a file is ever executed. Each
function takes its inputs as scalars in base units (text inputs as str) and returns one value
in base units (or text). The engine applies it element by element over sweeps.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from symcalc.errors import MalformedValueError

REGISTRY: dict[str, Callable] = {}


def algorithm(name: str):
    def register(fn: Callable) -> Callable:
        REGISTRY[name] = fn
        return fn
    return register


def _whole(x: float, name: str) -> int:
    if not float(x).is_integer():
        raise MalformedValueError(f"{name} must be a whole number, got {x:g}")
    return int(x)


@algorithm("layer_distribution")
def layer_distribution(n_layers: float, pp: float) -> str:
    """Spread L layers over p stages as evenly as possible: r = L mod p stages get
    floor(L/p) + 1 layers, the rest floor(L/p). Seed 001: 126 over 16 -> 14 x 8 + 2 x 7."""
    layers, stages = _whole(n_layers, "n_layers"), _whole(pp, "pp")
    q, r = divmod(layers, stages)
    parts = []
    if r:
        parts.append(f"{r} stage{'s' if r != 1 else ''} x {q + 1} layers")
    if stages - r and q:
        parts.append(f"{stages - r} stage{'s' if stages - r != 1 else ''} x {q} layers")
    if q == 0:
        parts.append(f"{stages - r} stages x 0 layers")
    return " + ".join(parts)


_RUN = re.compile(r"^\s*(\d+)\s*(ok|overflows?|overflow)\s*$", re.I)


@algorithm("dynamic_loss_scale")
def dynamic_loss_scale(initial_loss_scale: float, growth_interval: float, overflow_pattern: str) -> float:
    """Dynamic loss scaling (PyTorch GradScaler: growth 2, backoff 0.5): on an overflow the
    step is skipped, the scale halves and the good-step count resets; after
    ``growth_interval`` good steps in a row the scale doubles. ``overflow_pattern`` is runs
    like "1000 ok, 1 overflow, 500 ok". Seed 001: 65536 -> 16384 with W = 2000.

    Returns
    -------
    The loss scale after the pattern.

    Raises
    ------
    MalformedValueError
        ``growth_interval`` is below 1, or ``overflow_pattern`` is empty or unreadable.
    """
    scale = float(initial_loss_scale)
    window = _whole(growth_interval, "growth_interval")
    if window < 1:
        raise MalformedValueError("growth_interval must be at least 1")
    good = 0
    runs = [r for r in str(overflow_pattern).split(",") if r.strip()]
    if not runs:
        raise MalformedValueError("overflow_pattern is empty; write runs like '1000 ok, 1 overflow'")
    for run in runs:
        m = _RUN.match(run)
        if not m:
            raise MalformedValueError(f"overflow_pattern: cannot read '{run.strip()}'; write runs like "
                                      "'1000 ok' or '1 overflow', separated by commas")
        count, kind = int(m.group(1)), m.group(2).lower()
        if kind == "ok":
            total = good + count
            scale *= 2.0 ** (total // window)
            good = total % window
        else:
            scale *= 0.5 ** count
            good = 0
    return scale


@algorithm("roofline_bound")
def roofline_bound(compute: float, memory: float, network: float) -> str:
    """Which roofline binds: the smallest of the compute-, memory- and network-bound token
    rates (seed 004). Ties go to the earlier of compute, memory, network."""
    rates = {"compute": compute, "memory": memory, "network": network}
    finite = {k: v for k, v in rates.items() if not math.isnan(v)}
    return min(finite, key=finite.__getitem__)


@algorithm("slower_of_compute_and_memory")
def slower_of_compute_and_memory(compute_time: float, memory_time: float) -> str:
    """Which roof binds a pass (Williams et al. 2009): "compute" when its FLOPs take longer than
    its reads from memory, else "memory" (a tie goes to memory)."""
    return "compute" if compute_time > memory_time else "memory"
