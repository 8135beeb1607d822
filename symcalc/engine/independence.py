"""Whether a block of equations determines its unknowns, tested numerically in milliseconds.

A block can be square in structure yet dependent: C = 6 N D, F = 6 N R, T = D / R and
C = F T share one fact. The symbolic test (:func:`symcalc.engine.invert.dependent_equation`)
eliminates the block, which takes seconds for the step-time model's blocks of 25 equations.
The search for what would settle an underdetermined question tries many candidate routes, so
it first asks this cheaper question:

1. Find a point where every equation of the block holds: Gauss-Newton with minimum-norm steps
   over *all* the block's quantities (inputs too) in log space, from a random positive start.
   With more quantities than equations the system is underdetermined and the iteration
   projects the start onto the solution set in a few steps.
2. At that point, the Jacobian of the (relative) residuals with respect to the unknowns is
   full rank if the block determines them there. A dependent block is rank-deficient at every
   point of its solution set (an implied equation's gradient is a combination of the others'),
   which is why the point must be on it: off it, C - F T is independent of the rest.

Only a clear verdict counts: a Jacobian between "clearly full rank" and "clearly singular", a
point not found, or a non-smooth equation (floor, ceiling) returns None, and the caller falls
back to the symbolic test.
"""

from __future__ import annotations

import numpy as np
import sympy

from symcalc.engine.numeric import rank_ratio
from symcalc.library.compiling import compile_vector, unit_factors

_ITERATIONS = 60
_STARTS = 4                # random starts for a block with Min/Max (each may land on another branch)
_START_SPREAD = 1.0        # log-space half-width of the random start around 1
_CONVERGED = 1e-11         # largest relative residual accepted as "holds"
_FULL_RANK = 1e-5          # smallest singular value over the largest for a clear "full rank"
_SINGULAR = 1e-9           # ... and for a clear "dependent" (central differences err by ~1e-10)
_STEP = 1e-5               # central-difference step in log space
_SIGNED_LOG = 1e20         # asinh(x 1e20) ~ log|x| + 46 for |x| >> 1e-20: equations compared as logs


def block_determined(equations: list[tuple[sympy.Expr, sympy.Expr]], unknowns: list[sympy.Symbol],
                     zero: frozenset = frozenset(), seed: int = 20261126) -> bool | None:
    """True if the block clearly determines ``unknowns`` (full rank on its solution set), False
    if it clearly does not (rank-deficient there: an equation is implied by the others), None
    if this test cannot tell (the caller should eliminate symbolically).

    Parameters
    ----------
    equations : (lhs, rhs) pairs, units written as unit symbols.
    unknowns : the block's unknowns (as many as equations).
    zero : names of quantities fixed at 0 (defaults of 0 drop their terms).

    Complexity: O(iterations x (V evaluations of the E residuals + E^2 V)) for V quantities.
    """
    if len(equations) != len(unknowns) or not equations:
        return None
    sides = [sympy.sympify(side) for pair in equations for side in pair]
    if any(s.has(sympy.floor, sympy.ceiling) for s in sides):
        return None
    symbols = sorted({s for e in sides for s in e.free_symbols} - set(unit_factors(sympy.Add(*sides))),
                     key=lambda s: s.name)
    fixed = {s: 0 for s in symbols if s.name in zero}
    variables = [s for s in symbols if s not in fixed]
    index = {s: i for i, s in enumerate(variables)}
    if any(u not in index for u in unknowns):
        return None
    fn = compile_vector([s.subs(fixed) for s in sides], variables)

    def relative(y: np.ndarray) -> np.ndarray:
        """Each equation's sides compared on a signed log scale (asinh: log |x| + log 2 for the
        large values of base units, smooth through 0), for each column of log-values ``y``."""
        with np.errstate(all="ignore"):
            out = fn(*np.exp(y))
            v = np.array([np.broadcast_to(np.asarray(x, dtype=float), y.shape[1:]) for x in out])
        v = np.arcsinh(v * _SIGNED_LOG)
        return v[0::2] - v[1::2]

    def jacobian(y: np.ndarray) -> np.ndarray:
        n = len(y)
        cols = np.repeat(y[:, None], 2 * n, axis=1)
        cols[np.arange(n), np.arange(n)] += _STEP
        cols[np.arange(n), n + np.arange(n)] -= _STEP
        r = relative(cols)
        return (r[:, :n] - r[:, n:]) / (2 * _STEP)

    rng = np.random.default_rng(seed)
    columns = [index[u] for u in unknowns]
    # with Min/Max a random point may sit on a branch where an unknown drops out: only a full
    # rank there is a verdict, and other points get their chance
    kinked = any(s.has(sympy.Min, sympy.Max, sympy.Abs, sympy.Piecewise) for s in sides)
    verdict = None
    for _ in range(_STARTS if kinked else 1):
        verdict = _rank_at_a_solution(relative, jacobian, rng.uniform(-_START_SPREAD, _START_SPREAD, len(variables)),
                                      columns)
        if verdict:
            return True
    return None if kinked else verdict


def _rank_at_a_solution(relative, jacobian, y: np.ndarray, columns: list[int]) -> bool | None:
    """Gauss-Newton from ``y`` to a point where the equations hold, then the rank there of the
    Jacobian's ``columns``: True full, False clearly singular, None unclear or no point found."""
    for _ in range(_ITERATIONS):
        g = relative(y[:, None])[:, 0]
        if not np.all(np.isfinite(g)):
            return None
        if np.max(np.abs(g)) < _CONVERGED:
            break
        j = jacobian(y)
        if not np.all(np.isfinite(j)):
            return None
        step = np.linalg.lstsq(j, -g, rcond=None)[0]
        y = y + step * min(1.0, 2.0 / max(np.max(np.abs(step)), 1e-300))
    else:
        return None
    ratio = rank_ratio(jacobian(y)[:, columns])
    if ratio is None:
        return None
    if ratio > _FULL_RANK:
        return True
    return False if ratio < _SINGULAR else None
