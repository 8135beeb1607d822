"""A finished result evaluated again for new values of its knowns (``Result.function``).

The solver hands each :class:`~symcalc.query.results.Result` this module's :func:`function`,
bound to :func:`symcalc.query.solve.solve` (``Result.again``), so the record never imports the
solver: large arrays take the sweep path (:mod:`symcalc.engine.fastpath`), anything else asks
the question again through the solver, which reuses the cached derivation.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pint

from symcalc import units
from symcalc.engine.fastpath import MIN_SIZE, sweep
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
                return None
            magnitudes[q.name] = a
            integral.add(q.name)
            continue
        try:
            magnitudes[q.name] = read_value(q, raw, check_bounds=False).magnitude
        except Exception:     # solve() raises it, after the checks that come first there
            return None
    return sweep(result.derivation, magnitudes, result.rounding, result.factor, integral)


def _array_of(value) -> np.ndarray | None:
    """The numpy array inside a given value (an array, a (array, unit) pair, a pint quantity)."""
    if isinstance(value, tuple) and value:
        value = value[0]
    if isinstance(value, pint.Quantity):
        value = value.magnitude
    return value if isinstance(value, np.ndarray) else None
