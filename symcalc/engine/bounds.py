"""The bounds test: where values are finite and inside their quantity's bounds.

One function answers it for every evaluation over arrays (the chunked path's knowns, steps
and answer, the step walker's computed values, a solve's violations, a sweep's infeasible
points), so a point is feasible by the same rule wherever it is asked.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

from symcalc.library.records import Interval

__all__ = ["within", "both", "outside_of"]

_MIN, _MAX, _NOT_EQUAL, _FLOOR = np.minimum.reduce, np.maximum.reduce, np.not_equal, np.floor


def within(a: Any, domain: Interval, whole: bool = False, seen: list[float] | None = None,
           edge: float = 0.0) -> Any:
    """Where ``a`` is inside ``domain`` and (``whole``) a whole number.

    Parameters
    ----------
    a : a float or an array of floats (base units).
    domain : the quantity's bounds; inf is inside only a closed infinite bound, as in
        (0, inf] (a rate with no limit), and NaN never is.
    whole : the values must be whole numbers (floor(x) == x).
    seen : a [min, max] pair widened to the values' range (the strict mode's overflow proof).
    edge : refuse all of ``a`` when its values come this close (relatively) to a finite bound.

    Returns
    -------
    True when every value passes (decided by one minimum and one maximum: two passes over the
    array, no temporaries), else a boolean mask of ``a``'s shape. NaN never passes.
    O(size of a).
    """
    if type(a) is not np.ndarray or a.dtype != np.float64:
        a = np.asarray(a, dtype=float)
    if a.size:
        lo, hi = _MIN(a, axis=None), _MAX(a, axis=None)
        if seen is not None:
            if lo < seen[0]:
                seen[0] = lo
            if hi > seen[1]:
                seen[1] = hi
        if ((lo > domain.lo if domain.lo_open else lo >= domain.lo)
                and (hi < domain.hi if domain.hi_open else hi <= domain.hi)
                and not (whole and _NOT_EQUAL(_FLOOR(a), a).any())):
            if edge and ((domain.lo != 0 and abs(lo - domain.lo) <= edge * abs(domain.lo))
                         or (math.isfinite(domain.hi) and abs(domain.hi - hi) <= edge * abs(domain.hi))):
                return np.zeros(a.shape, dtype=bool)
            return True
    # two comparisons (NaN fails both; inf passes only a closed infinite bound: (0, inf])
    lower = a > domain.lo if domain.lo_open else a >= domain.lo
    upper = a < domain.hi if domain.hi_open else a <= domain.hi
    ok = np.logical_and(lower, upper, out=lower) if a.ndim else np.asarray(lower & upper)
    if whole:
        ok &= _FLOOR(a) == a
    return ok


def both(ok: Any, more: Any) -> Any:
    """``ok & more`` where either may be True (every point) or a mask; ``ok``'s mask is
    updated in place when the shapes agree."""
    if more is True:
        return ok
    if ok is True:
        return more
    return np.logical_and(ok, more, out=ok) if np.shape(ok) == np.shape(more) else ok & more


def outside_of(quantities: Mapping, names: Iterable[str], values: Mapping[str, Any]
               ) -> Iterator[tuple[str, np.ndarray, np.ndarray]]:
    """For each numeric quantity of ``names`` with a value that fails :func:`within`:
    (name, its values as a float array, the mask of the values that fail). Text values are
    skipped. In the order of ``names``; O(total size of the values)."""
    for name in names:
        q = quantities[name]
        v = values[name]
        if q.kind == "text" or isinstance(v, str):
            continue
        if type(v) is float and q.domain.holds(v):
            continue
        ok = within(v, q.domain)
        if ok is not True:
            a = np.asarray(v, dtype=float)
            yield name, a, ~np.asarray(ok, dtype=bool)
