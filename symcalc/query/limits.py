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

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from symcalc import budget
from symcalc.compiled import ceil_tol, floor_tol
from symcalc.engine.rounding import round_whole
from symcalc.errors import SymcalcError
from symcalc.findings import Finding
from symcalc.units.format import with_unit

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
    # the limit named is the question's goal where the guards agree with it: of the limits that
    # alone would round every decided element the same way, the lowest priority (a throughput
    # target before the memory margin that only guards it)
    decided = need != 0
    if np.any(decided):
        decided_by = next((name for _, name, this in sorted(votes, key=lambda v: v[0])
                           if np.all(np.broadcast_to(this, need.shape)[decided] == need[decided])), decided_by)
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


def round_to_limits(lib, derivation, ev, knowns: dict, defaults_used: dict, exact, opts: dict, ask: Callable):
    """(rounded answer, how it rounded, why) for a whole-number target whose route passes given
    limits (:func:`limit_rounding`); the quantity's own rounding where no limit decides.

    ``why`` says, for a single answer, what the whole number on the other side would do to the
    limit that decided: "16 would give memory_headroom = -1.29 GB".
    """
    tq = lib.quantities[derivation.target]
    decided = limit_rounding(lib, derivation, _env(knowns, defaults_used), exact)
    rounded = round_with(exact, decided, lambda x: round_whole(x, tq.whole))
    direction = decided.direction
    reason: dict = {}
    if np.any(decided.clash):
        reason["clash"] = Finding("limits_clash", tq.name, {"rounded": tq.whole},
                                  mask=decided.clash if np.ndim(decided.clash) else None)
    if direction is None:
        return rounded, tq.whole, reason or None
    if direction == "mixed":
        return rounded, "mixed", reason or None
    reason.update(direction=direction, limit=decided.limit)
    if np.ndim(exact) == 0 and not _is_whole(exact):
        other = rounded - 1 if direction == "up" else rounded + 1
        reason["other"] = other / tq.factor
        # a direction comes with the limit that decided it
        there = _limit_at(lib, tq, decided.limit, other, knowns, opts, ask)  # type: ignore[arg-type]
        if there is not None:
            q = lib.quantities[decided.limit]
            reason.update(value_there=there / q.factor, given=float(knowns[decided.limit].magnitude) / q.factor,
                          unit=q.display_unit, given_is=q.given_is)
    return rounded, direction, reason


def _env(knowns: dict, defaults_used: dict) -> dict:
    """The values a route reads (base magnitudes): the known ones and the defaults it took."""
    env = {k: v.magnitude for k, v in knowns.items()}
    env.update({k: d["magnitude"] for k, d in defaults_used.items() if "magnitude" in d})
    return env


def _is_whole(x) -> bool:
    return abs(float(x) - round(float(x))) <= 1e-9 * max(abs(float(x)), 1)


def _limit_at(lib, tq, limit: str, value: float, knowns: dict, opts: dict, ask: Callable) -> float | None:
    """The limit quantity's value (base units) when the target is ``value``: the same question
    asked forwards (by ``ask``: the solver, unshown). None when it cannot be asked (the value is
    outside the target's domain)."""
    if not tq.domain.holds(value):
        return None
    others = {k: (float(v.magnitude) / lib.quantities[k].factor, lib.quantities[k].display_unit)
              for k, v in knowns.items() if k != limit and not isinstance(v.magnitude, str)}
    others[tq.name] = (value / tq.factor, tq.display_unit)
    try:
        r = ask(limit, others, options=opts, library=lib)
    except SymcalcError:
        return None
    return float(r.base_value)


def unreachable_limit(lib, derivation, ev, knowns: dict, defaults_used: dict, exact, opts: dict,
                      ask: Callable) -> str | None:
    """Why a whole-number answer below its least value (a batch of -115.8) cannot be had: the
    given limit on its route (:func:`limit_rounding`), at that least value, already misses its
    given figure: "at batch_size = 1, tokens_per_second_per_user = 125.8 token/s, below the
    given 100000 token/s". None for an array, an answer inside its bounds, or no such limit."""
    tq = lib.quantities[derivation.target]
    lo = tq.domain.lo
    if not tq.whole or np.ndim(exact) != 0 or not np.isfinite(lo) or not exact < lo:
        return None
    limit = limit_rounding(lib, derivation, _env(knowns, defaults_used), exact).limit
    if limit is None or limit not in knowns:
        return None
    there = _limit_at(lib, tq, limit, lo, knowns, opts, ask)
    if there is None:
        return None
    q = lib.quantities[limit]
    side = "below" if q.given_is == "at_least" else "above"
    return (f"at {tq.name} = {with_unit(lo / tq.factor, tq.display_unit)}, {limit} = "
            f"{with_unit(there / q.factor, q.display_unit)}, {side} the given "
            f"{with_unit(float(knowns[limit].magnitude) / q.factor, q.display_unit)}: no {tq.name} reaches it")


#: Given values an out-of-bounds answer is asked of at its bound (the ones nearest the question:
#: the route's typed values, in its order); each is one more question, warm (the same graph)
MAX_REACH = 3


def what_would_reach(lib, derivation, exact, knowns: dict, opts: dict, ask: Callable) -> str | None:
    """What the given values would have to be for an answer outside its bounds to reach them
    (what must change to meet a deadline): an MFU of 242 % for 15T tokens on 1,024 H100s in 30
    days is "at mfu = 100 %, n_gpus = 2477 (not 1024), or train_time = 72.53 day (not 30 day)".
    Each of at most MAX_REACH typed values of the route is asked, the others and the target at
    its bound given (by ``ask``, the solver unshown). None for an array, an answer inside its
    bounds or one no given value reaches."""
    tq = lib.quantities[derivation.target]
    if np.ndim(exact) != 0 or not np.isfinite(exact) or tq.domain.holds(float(exact)):
        return None
    bound = tq.domain.hi if exact > tq.domain.hi else tq.domain.lo
    if not np.isfinite(bound) or bound == 0:
        return None
    typed = [name for name in derivation.route.given if name in knowns and not knowns[name].origin
             and np.ndim(knowns[name].magnitude) == 0 and not isinstance(knowns[name].magnitude, str)]
    # a hint to a refusal: asked only with time to spare, within a bound of its own, so that the
    # question's own limit never turns the refusal into a time-out
    if budget.remaining() < 2 * budget.DEFAULT_SYMBOLIC_LIMIT:
        return None
    said: list[str] = []
    with budget.bounded(budget.DEFAULT_SYMBOLIC_LIMIT):
        _reach(lib, tq, bound, typed[:MAX_REACH], knowns, opts, ask, said)
    if not said:
        return None
    return f"at {tq.name} = {with_unit(bound / tq.factor, tq.display_unit)} it would take " + ", or ".join(said)


def _reach(lib, tq, bound: float, names: list[str], knowns: dict, opts: dict, ask: Callable, said: list[str]) -> None:
    """Each of ``names`` at the target's ``bound``, said into ``said`` (filled as found: a bound
    that ends the search keeps what was found)."""
    for name in names:
        there = _limit_at(lib, tq, name, bound, knowns, opts, ask)
        q = lib.quantities[name]
        if there is None or not np.isfinite(there) or not q.domain.holds(there):
            continue
        if q.whole:     # a count rounds away from the given one, which misses the bound
            given = float(knowns[name].magnitude)
            there = float(np.ceil(there * (1 - 1e-9)) if there > given else np.floor(there * (1 + 1e-9)))
        said.append(f"{name} = {with_unit(there / q.factor, q.display_unit)} (not "
                    f"{with_unit(float(knowns[name].magnitude) / q.factor, q.display_unit)})")
