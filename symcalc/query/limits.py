"""Rounding that keeps the question true: a whole-number answer rounds the way its limits need.

"How many data-parallel ranks fit Llama 3 70B at 8k tokens with 0 GB of headroom?" comes out
16.3: 16 ranks leave -1.29 GB free (it does not fit), so the answer is 17, rounded *up*,
although the largest micro-batch that fits rounds *down*. The direction is not a property of
the answer's quantity alone but of the question: which given values are limits, and how the
answer moves with them. A quantity whose given value is a limit says so in the data
(``given_is = "at_most"`` for a budget, a deadline, a bubble target, memory; ``"at_least"``
for free memory or a throughput target); this module finds, per element, how the answer moves
with each such value on its route (by evaluating the same compiled derivation once more with
that value nudged) and so which way keeps every limit:

==============  ===================  =========
limit           answer grows with    round
==============  ===================  =========
at most         the limit            down
at most         less of the limit    up
at least        the limit            up
at least        less of the limit    down
==============  ===================  =========

When limits pull both ways (a budget and a run time: more GPUs finish sooner but cost more),
the one of higher ``limit_priority`` wins (a budget or a memory capacity over a deadline or a
target); limits of equal priority that disagree leave the quantity's own rounding and a warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from symcalc.compiled import ceil_tol, floor_tol

NUDGE = 1e-6      # relative change of a limit used to see which way the answer moves


@dataclass
class LimitRounding:
    """How a whole-number answer must round to keep the given limits.

    ``need`` is +1 (round up), -1 (down) or 0 (no limit decides) per element; ``limit`` the
    given quantity that decided (the first, when several agree); ``clash`` marks elements
    where two limits pull opposite ways."""

    need: Any               # int or int array
    limit: str | None
    clash: Any              # bool or bool array

    @property
    def direction(self) -> str | None:
        """'up' or 'down' when every element rounds that way, 'mixed' when they differ, else None."""
        need = np.asarray(self.need)
        if not np.any(need):
            return None
        if np.all(need > 0):
            return "up"
        if np.all(need < 0):
            return "down"
        return "mixed"


def limit_rounding(library, derivation, env: dict, exact) -> LimitRounding:
    """Which way ``exact`` (the target, base units) must round to keep the given limits.

    ``env`` holds the values the derivation was evaluated with. One more evaluation of the
    derivation per limit on the route: O(steps) array passes each.
    """
    target = derivation.target
    exact = np.asarray(exact, dtype=float)
    votes = []                    # (priority, name, +1 / -1 / 0 per element)
    for name in derivation.route.given:
        q = library.quantities[name]
        if not q.given_is:
            continue
        v = np.asarray(env[name], dtype=float)
        nudged = dict(env)
        nudged[name] = v + NUDGE * np.maximum(np.abs(v), q.factor)
        try:
            moved = np.asarray(derivation.evaluate(nudged).values[target], dtype=float)
        except Exception:       # the nudge left a formula's range: this limit decides nothing here
            continue
        with np.errstate(invalid="ignore"):
            slope = np.nan_to_num(np.sign(moved - exact)).astype(int)
        votes.append((q.limit_priority, name, slope * (1 if q.given_is == "at_least" else -1)))
    need = np.zeros(exact.shape, dtype=int)
    clash = np.zeros(exact.shape, dtype=bool)
    decided_by = None
    for priority in sorted({v[0] for v in votes}, reverse=True):
        undecided = (need == 0) & ~clash
        up = np.zeros(exact.shape, dtype=bool)
        down = np.zeros(exact.shape, dtype=bool)
        for _, name, this in (v for v in votes if v[0] == priority):
            if decided_by is None and np.any(undecided & (this != 0)):
                decided_by = name
            up |= this > 0
            down |= this < 0
        clash |= undecided & up & down
        need = np.where(undecided & up & ~down, 1, np.where(undecided & down & ~up, -1, need))
    if need.ndim == 0:
        return LimitRounding(int(need), decided_by, bool(clash))
    return LimitRounding(need, decided_by, clash)


def round_with(exact, rounding: LimitRounding, own):
    """``exact`` rounded: up or down where a limit decides, elsewhere by ``own(exact)``."""
    need = np.asarray(rounding.need)
    if not np.any(need):
        return own(exact)
    out = np.where(need > 0, ceil_tol(exact), np.where(need < 0, floor_tol(exact), own(exact)))
    return float(out) if np.ndim(out) == 0 else out
