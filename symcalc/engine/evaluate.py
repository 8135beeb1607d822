"""The one evaluator: compiled derivations over arrays, to values per target and one bounds mask.

Every question asked over arrays comes here: ``Result.function`` and ``Result.points`` (and
through them sweep, calibrate and the planner), several questions on the same knowns at once
(the planner's step time and memory in one call, its metrics in another). Two kernels run
under it, chosen by size, with the same answers and the same rule for a feasible point
(:func:`symcalc.engine.bounds.within`):

* the step walker, :meth:`Derivation.evaluate` (every quantity's values, per-element root
  choice, numeric roots): for small grids, and for derivations the chunked kernel cannot run;
  steps that several derivations share are walked once;
* the chunked kernel, :mod:`symcalc.engine.chunked` (fused or step by step, chunk by chunk,
  memory flat): for grids of at least ``MIN_SIZE`` points. It imports sympy, so it is
  imported only when a grid is that large.

A point is *inside* when every known of it is inside its quantity's bounds (whole where the
quantity is whole), every computed value is finite and inside its bounds, and each rounded
target is inside its bounds after rounding.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from symcalc.engine.bounds import both, outside_of, within
from symcalc.engine.derivation import Derivation, Evaluation
from symcalc.engine.rounding import round_whole
from symcalc.errors import QueryError

__all__ = ["MIN_SIZE", "Target", "Evaluated", "evaluate"]

# From this many points a grid takes the chunked kernel; below it the step walker costs about
# the same and needs neither the kernel's program (whose first build for a step time takes
# ~1 s, more than a planner's many small groups of layouts) nor sympy.
MIN_SIZE = 1 << 15


@dataclass(frozen=True)
class Target:
    """One value asked of an evaluation: a quantity, in a unit ``factor`` base units each,
    rounded to a whole number ``rounding`` ("up", "down", "nearest", "exact") or not (None)."""

    name: str
    factor: float = 1.0
    rounding: str | None = None


@dataclass
class Evaluated:
    """What :func:`evaluate` found over a grid of ``shape``.

    ``values``: each target in its unit, rounded where asked; ``exact``: the rounded targets
    before rounding, in their unit; ``inside``: the one bounds mask (see the module);
    ``outside`` (when asked for): each computed quantity that is finite but outside its bounds
    somewhere, and where."""

    shape: tuple[int, ...]
    values: dict[str, np.ndarray]
    exact: dict[str, np.ndarray]
    inside: np.ndarray
    outside: dict[str, np.ndarray] | None = None


def evaluate(derivations: Derivation | Sequence[Derivation], magnitudes: Mapping[str, Any],
             targets: Sequence[Target], *, integral: frozenset[str] | set[str] = frozenset(),
             strict: bool = False, outside: bool = False) -> Evaluated | None:
    """``targets`` of ``derivations`` over the broadcast grid of ``magnitudes``.

    Parameters
    ----------
    derivations : one derivation, or several that share knowns (each target is taken from the
        first that computes it, or is its own target).
    magnitudes : base-unit magnitudes (floats or arrays) of every derivation's knowns; the
        defaults the derivations use are added here (a given value wins).
    targets : what to return; each a quantity one of the derivations computes.
    integral : names whose arrays came as integers (whole without testing each element).
    strict : return None, leaving the question to :func:`symcalc.solve` and its exact
        messages, unless the chunked kernel answers with every point ordinary (inside, no
        floating-point error, at least MIN_SIZE points).
    outside : also say, per computed quantity, where it is finite but outside its bounds.

    Returns
    -------
    Evaluated, or None (``strict`` only). O(points x steps).

    Raises
    ------
    QueryError when a target is computed by none of the derivations; ValueError when the arrays
    do not broadcast; NoSolutionError from the walker when a step has no admissible value anywhere.
    """
    derivations = [derivations] if isinstance(derivations, Derivation) else list(derivations)
    owner = _owners(derivations, targets)
    shape = np.broadcast_shapes(*(np.shape(v) for v in magnitudes.values()))
    size = math.prod(shape) if shape else 1
    if size >= MIN_SIZE:
        got = _chunked(derivations, owner, magnitudes, targets, integral, strict, shape)
        if got is not None or strict:
            if got is not None and outside:
                got.outside = _outside_where(derivations, magnitudes, ~got.inside) if not got.inside.all() else {}
            return got
    elif strict:
        return None
    return _walked(derivations, owner, magnitudes, targets, outside, shape, integral)


def _owners(derivations: list[Derivation], targets: Sequence[Target]) -> dict[str, Derivation]:
    """Each target's derivation: the one whose target it is, else the first that computes it."""
    computed = [d.computed | {d.target} for d in derivations]
    unknown = [t.name for t in targets if not any(t.name in c for c in computed)]
    if unknown:
        raise QueryError(f"{', '.join(unknown)}: not computed by this derivation (it computes "
                         f"{', '.join(sorted(frozenset().union(*computed)))})")
    return {t.name: next((d for d in derivations if d.target == t.name), None) or
            next(d for d, c in zip(derivations, computed) if t.name in c) for t in targets}


def _environment(derivation: Derivation, magnitudes: Mapping[str, Any]) -> dict[str, Any]:
    """The derivation's knowns: its defaults, then the given magnitudes over them."""
    return {**derivation.constants, **{k: v for k, v in magnitudes.items() if k in derivation.route.given
                                       or k not in derivation.constants}}


def _chunked(derivations: list[Derivation], owner: dict[str, Derivation], magnitudes: Mapping[str, Any],
             targets: Sequence[Target], integral, strict: bool, shape: tuple) -> Evaluated | None:
    """The chunked kernel, one run per derivation that owns targets (or none: its own target,
    for its mask); None when a derivation cannot run there."""
    from symcalc.engine import chunked  # start-up: sympy, needed only for grids this large

    values: dict[str, np.ndarray] = {}
    exact: dict[str, np.ndarray] = {}
    inside: Any = True
    for d in derivations:
        mine = tuple((t.name, t.factor, t.rounding) for t in targets if owner[t.name] is d) or \
            ((d.target, 1.0, None),)
        got = chunked.run(d, magnitudes, mine, integral, strict)
        if got is None:
            return None
        out, unrounded, mask = got
        values.update({k: v for k, v in out.items() if k in owner})
        exact.update(unrounded)
        inside = both(inside, mask)
    inside = np.broadcast_to(np.asarray(inside, dtype=bool), shape)
    return Evaluated(shape=shape, values=values, exact=exact, inside=inside)


def _walked(derivations: list[Derivation], owner: dict[str, Derivation], magnitudes: Mapping[str, Any],
            targets: Sequence[Target], outside: bool, shape: tuple,
            integral: frozenset[str] | set[str] = frozenset()) -> Evaluated:
    """The step walker over each derivation (steps they share walked once), with the bounds
    mask of the knowns, every computed value and the rounded targets: each known checked once
    (whole numbers tested unless they came as integer arrays), each computed quantity's array once."""
    memo: dict | None = {} if len(derivations) > 1 else None
    walked: dict[int, Evaluation] = {}
    inside: Any = True
    where: dict[str, np.ndarray] = {}
    quantities = derivations[0].library.quantities
    checked: set[str] = set()
    scanned: set[tuple[str, int]] = set()    # (quantity, array) a shared step gave several derivations
    with np.errstate(all="ignore"):
        for d in derivations:
            ev = walked[id(d)] = d.evaluate(_environment(d, magnitudes), memo=memo)
            for name in d.route.given:
                if name in magnitudes and name not in checked:
                    checked.add(name)
                    q = quantities[name]
                    inside = both(inside, within(magnitudes[name], q.domain, q.whole is not None and name not in integral))
            fresh = [u for s in d.steps for u in s.unknowns if (u, id(ev.values[u])) not in scanned]
            scanned.update((u, id(ev.values[u])) for u in fresh)
            for name, a, bad in outside_of(quantities, fresh, ev.values):
                inside = both(inside, ~bad)
                if outside:
                    finite_bad = bad & np.isfinite(a)
                    if finite_bad.any():
                        where[name] = np.broadcast_to(finite_bad, shape) | where.get(name, False)
        values, exact = {}, {}
        for t in targets:
            v = np.broadcast_to(np.asarray(walked[id(owner[t.name])].values[t.name], dtype=float), shape)
            if t.rounding:
                exact[t.name] = v / t.factor
                v = np.asarray(round_whole(v, t.rounding), dtype=float)
                inside = both(inside, within(v, quantities[t.name].domain))
            values[t.name] = v / t.factor
    inside = np.array(np.broadcast_to(np.asarray(inside, dtype=bool), shape))
    return Evaluated(shape=shape, values=values, exact=exact, inside=inside, outside=where if outside else None)


def _outside_where(derivations: list[Derivation], magnitudes: Mapping[str, Any], where: np.ndarray
                   ) -> dict[str, np.ndarray]:
    """The per-quantity ``outside`` masks of a chunked run, from the walker run on the points
    ``where`` selects only (a mixed grid's failing points: usually few)."""
    shape = where.shape
    sub = {n: (np.broadcast_to(np.asarray(m), shape)[where] if np.ndim(m) else m) for n, m in magnitudes.items()}
    got = _walked(derivations, {}, sub, (), True, (int(where.sum()),))
    out = {}
    for name, bad in (got.outside or {}).items():
        full = np.zeros(shape, dtype=bool)
        full[where] = bad
        out[name] = full
    return out
