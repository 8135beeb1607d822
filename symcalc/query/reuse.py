"""A finished result evaluated again for new values of its knowns (``Result.function``).

The solver hands each :class:`~symcalc.query.results.Result` this module's :func:`function`,
bound to :func:`symcalc.query.solve.solve` (``Result.again``), so the record never imports the
solver: large arrays take the sweep path (:mod:`symcalc.engine.fastpath`), anything else asks
the question again through the solver, which reuses the cached derivation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import pint

from symcalc import units
from symcalc.engine.rounding import round_whole
from symcalc.engine.derivation import SWEEP_MIN_SIZE as MIN_SIZE
from symcalc.errors import QueryError
from symcalc.query.stacks import check_new_values
from symcalc.query.values import read_value


def function(result, values: dict, solve: Callable) -> pint.Quantity:
    """``result``'s derivation for new ``values`` of the same knowns, in ``result.unit``.

    Raises TypeError when the values are not exactly the ones given to ``result``; anything
    else ``solve`` raises for these values."""
    typed = {n for n, g in result.given.items() if not g.origin}
    names = [result.library.quantity(n).name for n in values]
    if set(names) != typed:
        raise TypeError(f"function() takes exactly the values given to this result: {sorted(typed)}")
    if len(names) == len(typed) and result.quantity.kind != "text":
        fast = sweep_path(result, values)
        if fast is not None:
            return units.Q(fast, result.unit) if result.unit else units.Q(fast)
    r = solve(result.target, values, options=result.all_options, to=result.unit or None, library=result.library,
              on_bounds=result.on_bounds,
              rounding=result.rounding if result.rounding in ("up", "down", "nearest") else None,
              **{k: v for k, v in result.preset_args.items() if v})
    return r.quantity_value


def sweep_path(result, values: dict):
    """The answer from the sweep path, or None when it leaves the question to solve()."""
    arrays = {n: _array_of(v) for n, v in values.items()}
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays.values() if a is not None))
    except ValueError:        # solve() says what does not fit
        return None
    if np.prod(shape) < MIN_SIZE:
        return None
    from symcalc.engine.fastpath import sweep  # start-up: a single answer never sweeps (it fuses with sympy)
    read = _magnitudes(result, values, arrays)
    if read is None:
        return None
    check_new_values(result, read[0])       # what solve() checks of given values, a stack's conditions
    return sweep(result.derivation, read[0], result.rounding, result.factor, read[1])


@dataclass(frozen=True)
class Points:
    """The answer at every point of a grid that may leave the bounds, with where it holds.

    ``value``: the answer in ``unit`` (NaN where the formulas give none); ``inside``: every
    given and computed value of the point lies in its quantity's bounds (whole where it must
    be) and is finite; ``fits``: the answer is within its capacity (``fits_in``, when that is
    known: per-GPU memory in gpu_memory), else all True; ``ok``: both.

    ``outside`` (when asked for, else None): for each computed quantity that leaves its bounds
    at some point, where it does (finite values only: a point with no value at all is NaN in
    ``value``).
    ``capacity``: the capacity the answer must fit in, in ``unit`` (broadcast), or None.
    ``also``: other quantities of the same derivation asked for, {name: (values in their
    display unit, unit)}; the target asked for itself is its exact (unrounded) value."""

    value: np.ndarray
    unit: str
    inside: np.ndarray
    fits: np.ndarray
    outside: dict[str, np.ndarray] | None = None
    capacity: np.ndarray | None = None
    also: dict[str, tuple[np.ndarray, str]] = field(default_factory=dict)

    @property
    def ok(self) -> np.ndarray:
        return self.inside & self.fits


def points(result, values: dict, also: tuple[str, ...] = (), outside: bool = False) -> Points:
    """``result``'s derivation at every point of ``values`` (the knowns given to ``result``, as
    arrays), never refusing a grid because some of its points leave their bounds: those are
    marked in the masks instead.

    Parameters
    ----------
    result : the Result whose derivation runs (its knowns are the names of ``values``).
    values : name -> array (or scalar, or (array, unit)), broadcasting to one grid.
    also : other quantities of the derivation to return over the grid (several targets of one
        question in one pass); the target itself gives its exact value.
    outside : also say which quantities leave their bounds where (Points.outside); on the
        sweep path that runs the general evaluator again on the failing points.

    Returns
    -------
    Points. One pass of the compiled steps: the sweep path (fused, chunked, memory flat) for
    large grids, the general evaluator (every step's values) for small ones and for ``also``;
    the per-quantity ``outside`` masks are computed for the failing points only.

    Raises
    ------
    TypeError when the values are not the ones given to ``result``; QueryError when they do not
    broadcast or ``also`` names a quantity the derivation does not compute; DimensionError and
    the like for values that cannot be read at all."""
    typed = {n for n, g in result.given.items() if not g.origin}
    names = [result.library.quantity(n).name for n in values]
    if set(names) != typed:
        raise TypeError(f"points() takes exactly the values given to this result: {sorted(typed)}")
    arrays = {n: _array_of(v) for n, v in values.items()}
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays.values() if a is not None))
    except ValueError:
        shapes = ", ".join(f"{n} {a.shape}" for n, a in arrays.items() if a is not None)
        raise QueryError(f"the arrays do not broadcast to one grid: {shapes}") from None
    read = _magnitudes(result, values, arrays, strict=True)
    magnitudes, integral = read
    # below MIN_SIZE points the general evaluator costs about the same as the sweep path, and
    # it needs no sweep program (whose first build for a derivation, ~1 s for the step time,
    # would dominate a planner's many small groups of layouts), nor sympy, as in function()
    computed = {n for s in result.derivation.steps for n in s.unknowns}
    unknown = [n for n in also if result.library.quantity(n).name not in computed]
    if unknown:
        raise QueryError(f"{', '.join(unknown)}: not computed by this derivation (it computes "
                         f"{', '.join(sorted(computed))})")
    also = tuple(result.library.quantity(n).name for n in also)
    swept = None if also or np.prod(shape) < MIN_SIZE else \
        _sweep_masked(result.derivation, magnitudes, result.rounding, result.factor, integral)
    extra: dict[str, tuple[np.ndarray, str]] = {}
    if swept is None:
        value, inside, where, extra = _general_masked(result, magnitudes, also, outside)
    else:
        value, inside = swept
        where = {}
        if outside and not np.all(inside):     # which quantities fail, for the failing points only
            where = _outside_at(result, magnitudes, ~np.broadcast_to(inside, value.shape))
    inside = np.broadcast_to(inside, value.shape)
    fits = np.ones(value.shape, dtype=bool)
    capacity = None
    cap_name = result.quantity.fits_in
    if cap_name and cap_name in magnitudes:
        capacity = np.broadcast_to(np.asarray(magnitudes[cap_name], dtype=float) / result.factor, value.shape)
        with np.errstate(invalid="ignore"):
            fits = value <= capacity * (1 + 1e-12)
    return Points(value=value, unit=result.unit, inside=inside, fits=fits, outside=where if outside else None,
                  capacity=capacity, also=extra)


def _sweep_masked(*args):
    """symcalc.engine.fastpath.sweep_masked, imported when a grid is large enough for it (sympy)."""
    from symcalc.engine.fastpath import sweep_masked  # start-up: see MIN_SIZE
    return sweep_masked(*args)


def _general_masked(result, magnitudes: dict, also: tuple[str, ...] = (), want_outside: bool = True):
    """The general evaluator (every step's compiled functions, numeric steps included), with
    the same mask as the sweep path: every computed value inside its bounds. Returns (value,
    inside, {quantity: where it is finite but outside its bounds} (``want_outside``, else empty),
    {also name: (values, unit)})."""
    derivation = result.derivation
    env = {**{k: d["magnitude"] for k, d in result.defaults_used.items() if "magnitude" in d}, **magnitudes}
    with np.errstate(all="ignore"):
        ev = derivation.evaluate(env)
        exact = np.asarray(ev.values[result.target], dtype=float)
        value = np.asarray(round_whole(exact, result.rounding), dtype=float) if result.quantity.whole else exact
        inside = np.ones(value.shape, dtype=bool)
        where: dict[str, np.ndarray] = {}
        for s in derivation.steps:
            for name in s.unknowns:
                q = result.library.quantities[name]
                if q.kind != "text":
                    v = np.asarray(ev.values[name], dtype=float)
                    within = q.domain.contains(v)
                    finite = np.isfinite(v)
                    inside = inside & np.broadcast_to(within & finite, value.shape)
                    if want_outside:
                        bad = np.broadcast_to(finite & ~within, value.shape)
                        if bad.any():
                            where[name] = bad
    extra = {}
    for name in also:
        q = result.library.quantities[name]
        factor, unit = (result.factor, result.unit) if name == result.target else (q.factor, q.display_unit)
        extra[name] = (np.broadcast_to(np.asarray(ev.values[name], dtype=float), value.shape) / factor, unit)
    return value / result.factor, inside, where, extra


def _outside_at(result, magnitudes: dict, where: np.ndarray) -> dict[str, np.ndarray]:
    """The per-quantity ``outside`` masks, by the general evaluator run on the points
    ``where`` selects only (a mixed grid's failing points: usually few)."""
    shape = where.shape
    sub = {n: (np.broadcast_to(np.asarray(m), shape)[where] if np.ndim(m) else m) for n, m in magnitudes.items()}
    _, _, outside_sub, _ = _general_masked(result, sub)
    out = {}
    for name, bad in outside_sub.items():
        full = np.zeros(shape, dtype=bool)
        full[where] = bad
        out[name] = full
    return out


def _magnitudes(result, values: dict, arrays: dict, strict: bool = False):
    """(base-unit magnitudes of the knowns, the names that came as integer arrays), or None
    when a value cannot be read here (``strict``: raise instead, as solve() would)."""
    magnitudes = {n: g.magnitude for n, g in result.given.items() if g.origin}
    integral = set()
    for raw_name, raw in values.items():
        q = result.library.quantity(raw_name)
        a = arrays[raw_name]
        if a is raw and a.dtype.kind in "iu" and a.ndim and units.to_base_factor(q.unit or "count") == 1.0:
            # a bare integer array in base units (counts, tokens): whole by construction,
            # one element read for the unit checks (an error is solve()'s to word), and
            # converted to floats chunk by chunk
            try:
                read_value(q, a[(slice(0, 1),) * a.ndim], check_bounds=False)
            except Exception:
                if strict:
                    raise
                return None
            magnitudes[q.name] = a
            integral.add(q.name)
            continue
        try:
            magnitudes[q.name] = read_value(q, raw, check_bounds=False).magnitude
        except Exception:     # solve() raises it, after the checks that come first there
            if strict:
                raise
            return None
    return magnitudes, integral


def _array_of(value) -> np.ndarray | None:
    """The numpy array inside a given value (an array, a (array, unit) pair, a pint quantity)."""
    if isinstance(value, tuple) and value:
        value = value[0]
    if isinstance(value, pint.Quantity):
        value = value.magnitude
    return value if isinstance(value, np.ndarray) else None
