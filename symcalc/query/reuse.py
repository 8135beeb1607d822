"""A finished result evaluated again for new values of its knowns (:func:`function`,
:func:`points`), several results on the same knowns at once (:func:`together`), and another
quantity from a result's values (:func:`companion`).

Plain functions of a plain record (:class:`~symcalc.query.results.Result` holds no callable):
where the solver is needed it is passed in (``solve``, ``ask``), so this module never imports
it; the Result that :func:`symcalc.query.solve.solve` returns offers them as ``.function``,
``.points`` and ``.companion_value``, passing its module's solver. The values come from the one
evaluator (:func:`symcalc.engine.evaluate.evaluate`); :func:`function` asks the question again
through the solver whenever the evaluator's strict mode declines (small arrays, a point out of
the ordinary), which reuses the cached derivation and words any refusal exactly as a first
answer would.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pint

from symcalc import units
from symcalc.engine.evaluate import MIN_SIZE, Target, evaluate
from symcalc.errors import QueryError, SymcalcError
from symcalc.query.layout_rules import rounds_to_rules
from symcalc.query.stacks import check_new_values
from symcalc.query.values import WHOLE_RTOL, read_value


def function(result, values: dict, solve: Callable) -> pint.Quantity:
    """``result``'s derivation for new ``values`` of the same knowns, in ``result.unit``: from
    the one evaluator in its strict mode (large grids, every point ordinary), else asked of
    ``solve`` again (which reuses the cached derivation and words any refusal).

    Raises TypeError when the values are not exactly the ones given to ``result``; anything
    else ``solve`` raises for these values."""
    values = as_read(result, values)
    _check_names(result, values, "function")
    # a whole answer that rounds to the layout rules (GPUs a multiple of tp) is solve's to round,
    # as solve rounds it: by the given limits and the rules, not by the direction it took here
    ruled = bool(result.quantity.whole) and rounds_to_rules(result.target, result.derivation)
    if result.quantity.kind != "text" and not ruled:
        fast = _strict(result, values)
        if fast is not None:
            return units.Q(fast, result.unit) if result.unit else units.Q(fast)
    r = solve(result.target, values, options=result.all_options, to=result.unit or None, library=result.library,
              on_bounds=result.on_bounds,
              rounding=result.rounding if result.rounding in ("up", "down", "nearest") and not ruled else None,
              **{k: v for k, v in result.preset_args.items() if v})
    return r.quantity_value


def companion(result, name: str, ask: Callable) -> float | str | None:
    """``name`` from the scalar values ``result`` computed, given as known (so its derivation is
    the one step that combines them: a collective's whole time beside its exposed part), asked
    of ``ask`` (the solver, unshown, bounds flagged) under the same options; None where it
    cannot be had (an array answer, no derivation, a refusal)."""
    lib = result.library
    known = {}
    for k, v in result.values.items():
        q = lib.quantities.get(k)
        if q is None or q.kind == "text" or isinstance(v, str) or np.ndim(v) != 0 or not np.isfinite(v):
            continue
        if not np.all(q.domain.contains(v)):    # a part that came out 0 where a given one must be positive
            continue
        if q.whole is not None and abs(v - round(v)) > WHOLE_RTOL * abs(v):
            continue            # a count backed out of others (a vocabulary from n_params): not a given one
        known[k] = (float(v), q.unit) if q.unit else float(v)
    try:
        r = ask(name, known, options=result.all_options, library=lib)
    except SymcalcError:
        return None
    if isinstance(r.base_value, str):       # a text answer (which bound binds)
        return r.base_value
    return float(r.base_value) if np.ndim(r.base_value) == 0 else None


def _strict(result, values: dict):
    """The answer from the evaluator's strict mode, or None when it leaves the question to solve()."""
    arrays = {n: _array_of(v) for n, v in values.items()}
    try:
        shape = np.broadcast_shapes(*(a.shape for a in arrays.values() if a is not None))
    except ValueError:        # solve() says what does not fit
        return None
    if np.prod(shape) < MIN_SIZE:
        return None
    read = _magnitudes(result, values, arrays)
    if read is None:
        return None
    check_new_values(result, read[0])       # what solve() checks of given values, a stack's conditions
    got = evaluate(result.derivation, read[0], (_target(result),), integral=read[1], strict=True)
    return None if got is None else got.values[result.target]


def _target(result) -> Target:
    """The answer of ``result`` as the evaluator's target: its unit, rounded as it was."""
    return Target(result.target, result.factor, result.rounding if result.quantity.whole else None)


def as_read(result, values: dict) -> dict:
    """``values`` under the names ``result`` read them by: a value it read as its counterpart
    (symcalc.query.rescope: one replica's rate as the deployment's) is passed there, so that a
    function, a grid or a sweep of that answer takes the names the user gave. O(values)."""
    read = {f.values["given"]: f.quantity for f in result.findings if f.kind == "rescoped" and "given" in f.values}
    if not read:
        return values
    return {read.get(result.library.quantity(k).name, k): v for k, v in values.items()}


def _check_names(result, values: dict, what: str) -> None:
    typed = {n for n, g in result.given.items() if not g.origin}
    names = [result.library.quantity(n).name for n in values]
    if set(names) != typed:
        raise TypeError(f"{what}() takes exactly the values given to this result: {sorted(typed)}")


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
        question in one pass); the target itself gives its exact (unrounded) value.
    outside : also say which quantities leave their bounds where (Points.outside).

    Returns
    -------
    Points, from one call of the evaluator (:func:`symcalc.engine.evaluate.evaluate`).

    Raises
    ------
    TypeError when the values are not the ones given to ``result``; QueryError when they do not
    broadcast or ``also`` names a quantity the derivation does not compute; DimensionError and
    the like for values that cannot be read at all."""
    values = as_read(result, values)
    _check_names(result, values, "points")
    magnitudes, integral = _read_grid(result, values)
    lib = result.library
    also = tuple(lib.quantity(n).name for n in also)
    targets = [_target(result)]
    for name in also:
        if name != result.target:
            q = lib.quantities[name]
            targets.append(Target(name, q.factor))
    got = evaluate(result.derivation, magnitudes, targets, integral=integral, outside=outside)
    assert got is not None      # only the strict mode declines
    value = got.values[result.target]
    extra = {}
    for name in also:
        if name == result.target:
            extra[name] = (got.exact.get(name, value), result.unit)
        else:
            extra[name] = (got.values[name], lib.quantities[name].display_unit)
    capacity, fits = _capacity(result, magnitudes, value)
    return Points(value=value, unit=result.unit, inside=got.inside, fits=fits, outside=got.outside,
                  capacity=capacity, also=extra)


def together(results: Sequence, values: dict, also: Sequence[str] = ()) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Several questions asked on the same knowns, over arrays, in one call of the evaluator
    (the planner's step time and memory of every layout; its metrics): each result's answer
    in its unit, and one mask of the points where every value of every question is inside its
    bounds. Steps the derivations share are evaluated once. ``also``: steps of the derivations
    wanted too (the planner's compute part of a step), in base units; one no derivation
    computes is left out.

    ``values`` holds the knowns of all of them (each result reads the ones it was given);
    the same conventions as :func:`points`. Raises TypeError when a result was given a value
    ``values`` lacks."""
    magnitudes: dict = {}
    integral: set[str] = set()
    for r in results:
        mine = {n: v for n, v in values.items() if r.library.quantity(n).name in r.given
                and not r.given[r.library.quantity(n).name].origin}
        _check_names(r, mine, "together")
        got, whole = _read_grid(r, mine)
        magnitudes.update(got)
        integral |= whole
    extra = [Target(n) for n in also if any(n in r.derivation.computed for r in results)]
    evaluated = evaluate([r.derivation for r in results], magnitudes, [_target(r) for r in results] + extra,
                         integral=frozenset(integral))
    assert evaluated is not None
    return {t.name: evaluated.values[t.name] for t in [*map(_target, results), *extra]}, evaluated.inside


def _read_grid(result, values: dict) -> tuple[dict, set[str]]:
    """(base-unit magnitudes, names that came as integer arrays) of values meant for one grid."""
    arrays = {n: _array_of(v) for n, v in values.items()}
    try:
        np.broadcast_shapes(*(a.shape for a in arrays.values() if a is not None))
    except ValueError:
        shapes = ", ".join(f"{n} {a.shape}" for n, a in arrays.items() if a is not None)
        raise QueryError(f"the arrays do not broadcast to one grid: {shapes}") from None
    read = _magnitudes(result, values, arrays, strict=True)
    assert read is not None     # strict: raises instead
    return read


def _capacity(result, magnitudes: dict, value: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
    """(the capacity the answer must fit in, in its unit, or None; where it fits)."""
    cap_name = result.quantity.fits_in
    if not (cap_name and cap_name in magnitudes):
        return None, np.ones(value.shape, dtype=bool)
    capacity = np.broadcast_to(np.asarray(magnitudes[cap_name], dtype=float) / result.factor, value.shape)
    with np.errstate(invalid="ignore"):
        return capacity, value <= capacity * (1 + 1e-12)


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
