"""Symbolic inversion: solve one equation, or a block of equations, for its unknowns with sympy.

Quantities are positive (or nonnegative) symbols, so sympy drops roots it can prove
inadmissible; roots it cannot decide are all kept and chosen between numerically, per value,
by the quantities' bounds (see derivation.py). Results are memoised per (equations, unknowns),
because the same inversion serves every query that takes the same route. Each inversion has a
time limit (symcalc.budget.DEFAULT_SYMBOLIC_LIMIT); past it, the answer is "no closed form"
and the step is solved numerically.

A block of k equations in k unknowns is first reduced by substitution along the plan's
matching (equations that read ``x = f(...)`` go first), which leaves one equation in one
unknown for the common case; sympy's system solver is the fallback. This is ~10x faster than
handing the whole block to ``sympy.solve`` and gives tidier closed forms.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache, wraps

import numpy as np
import sympy

from symcalc import budget
from symcalc.budget import bounded
from symcalc.library.exprsize import beyond_the_solver

# Functions a numpy lambdify can print; anything else in a root means "use numbers instead".
_PRINTABLE = (sympy.Add, sympy.Mul, sympy.Pow, sympy.Symbol, sympy.Number, sympy.log, sympy.exp,
              sympy.Min, sympy.Max, sympy.Piecewise, sympy.ceiling, sympy.floor, sympy.LambertW,
              sympy.NumberSymbol, sympy.Abs, sympy.sign)


def _guarded(fallback: object) -> Callable[[Callable], Callable]:
    """Run the symbolic work of a function within DEFAULT_SYMBOLIC_LIMIT seconds; when that runs
    out (sympy can take minutes, or grow memory without end, on an equation it will not solve
    anyway), return ``fallback`` instead: "no closed form", and the caller finds numbers.
    Inside lru_cache, so a question that meets the equation again does not wait again."""
    def decorate(fn: Callable) -> Callable:
        @wraps(fn)
        def run(*args):
            with bounded(budget.DEFAULT_SYMBOLIC_LIMIT):
                return fn(*args)
            return fallback
        return run
    return decorate


def _admissible(root: sympy.Expr, var: sympy.Symbol) -> bool:
    """False only when the root is provably outside the variable's sign assumptions or not real."""
    if root.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo, sympy.I):
        return False
    if root.is_real is False:
        return False
    if var.is_positive and root.is_positive is False:
        return False
    if var.is_nonnegative and root.is_negative:
        return False
    return True


def _printable(expr: sympy.Expr) -> bool:
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.core.relational.Relational) or node in (sympy.true, sympy.false):
            continue
        if isinstance(node, sympy.logic.boolalg.Boolean):
            continue
        if isinstance(node, sympy.functions.elementary.piecewise.ExprCondPair):
            continue
        if not isinstance(node, _PRINTABLE):
            return False
    return True


@lru_cache(maxsize=4096)
@_guarded(None)
def solve_for(residual: sympy.Expr, var: sympy.Symbol) -> tuple[sympy.Expr, ...] | None:
    """Roots of ``residual = 0`` for ``var`` that may be admissible, or None if sympy cannot invert.

    Rational equations of degree <= 4 in ``var`` go through ``sympy.roots`` of the numerator
    (about 5x faster than ``sympy.solve``); the rest through ``sympy.solve``. None also when a
    root needs functions numpy cannot evaluate (RootOf, integrals, ...).
    """
    roots = _polynomial_roots(residual, var)
    if roots is None:
        try:
            sols = sympy.solve(residual, var, dict=True)
        except (NotImplementedError, ValueError, TypeError, AttributeError, RecursionError):
            return None
        roots = [s[var] for s in sols if var in s]
    roots = [r for r in roots if var not in r.free_symbols and _admissible(r, var)]
    if not roots or not all(_printable(r) for r in roots):
        return None
    return tuple(roots)


def _polynomial_roots(residual: sympy.Expr, var: sympy.Symbol) -> list | None:
    num, den = sympy.fraction(sympy.together(residual))
    if var not in num.free_symbols:
        return None
    try:
        poly = sympy.Poly(num, var)
    except (sympy.PolynomialError, sympy.GeneratorsNeeded):
        return None
    if poly.degree() > 4 or any(var in c.free_symbols for c in poly.coeffs()):
        return None
    found = sympy.roots(poly, multiple=False)
    if sum(found.values()) < poly.degree():
        return None
    out = []
    for root in found:
        root = sympy.together(root)
        if var in den.free_symbols and _vanishes(den.subs(var, root)):
            continue
        out.append(root)
    return out


def _vanishes(value: sympy.Expr) -> bool:
    """Whether a root makes the denominator 0 (the root is then no solution). sympy's own
    assumptions answer first: a value they call nonzero (every positive symbol's ratio, as the
    library declares its quantities) is not 0, and simplify is only asked when they cannot
    tell. simplify's first call imports sympy.physics.units (0.1 s of a cold plan, for two
    denominators that were positive by their symbols' assumptions)."""
    return value.is_zero is not False and sympy.simplify(value) == 0


@lru_cache(maxsize=1024)
@_guarded(None)
def dependent_equation(equations: tuple[tuple[sympy.Expr, sympy.Expr], ...],
                       unknowns: tuple[sympy.Symbol, ...]) -> int | None:
    """Index of an equation of a square block that the others already imply, or None.

    A block can be square in structure yet singular: C = 6 N D, F = 6 N R, T = D / R and
    C = F T share one fact, and a solver would return any point of a line. The test is the
    elimination itself: substituting the others into an equation that they imply leaves it
    with no unknown. When elimination fails, the fallback is the rank of the Jacobian at
    random positive points, which catches linear dependence; the equation removed is the last
    one whose removal keeps the rank.
    """
    red = reduce_block(equations, unknowns)
    if red is not None:
        return red.dependent
    residuals = [lhs - rhs for lhs, rhs in equations]
    jac = sympy.Matrix(residuals).jacobian(list(unknowns))
    symbols = sorted(set().union(*(r.free_symbols for r in residuals)), key=str)
    fn = sympy.lambdify(symbols, jac, modules="numpy")
    rng = random.Random(20251122)
    k = len(unknowns)
    for _ in range(3):
        point = [rng.uniform(0.5, 2.0) for _ in symbols]
        with np.errstate(all="ignore"):
            m = np.array(fn(*point), dtype=float)
        if not np.all(np.isfinite(m)):
            continue
        rank = np.linalg.matrix_rank(m, tol=1e-9 * max(1.0, np.abs(m).max()))
        if rank == k:
            return None
        for i in reversed(range(k)):
            rest = np.delete(m, i, axis=0)
            if np.linalg.matrix_rank(rest, tol=1e-9 * max(1.0, np.abs(rest).max())) == rank:
                return i
    return None


@dataclass(frozen=True)
class Reduction:
    """A block reduced by substitution to one equation in one unknown.

    ``eliminated`` lists (unknown, expression) in elimination order; each expression uses
    only unknowns eliminated after it and ``last``. ``residual`` = 0 determines ``last``.
    """

    eliminated: tuple[tuple[sympy.Symbol, sympy.Expr], ...]
    last: sympy.Symbol | None
    residual: sympy.Expr | None
    dependent: int | None = None   # an equation left with no unknown: implied by the others

    def back_substitute(self, root: sympy.Expr) -> dict:
        sol = {self.last: root}
        for u, value in reversed(self.eliminated):
            sol[u] = sympy.together(value.subs(sol))
        return sol


SYSTEM_DEGREE = 4   # highest degree in an unknown that sympy's system solver is given


@lru_cache(maxsize=1024)
@_guarded(None)
def solve_block(equations: tuple[tuple[sympy.Expr, sympy.Expr], ...],
                unknowns: tuple[sympy.Symbol, ...]) -> tuple[dict, ...] | None:
    """Candidate solutions {unknown: expression in the knowns} of a square block, or None.

    ``equations`` are (lhs, rhs) pairs. The block is first reduced by substitution (see
    :func:`reduce_block`); what cannot be reduced goes to sympy's system solver.
    """
    red = reduce_block(equations, unknowns)
    if red is not None and red.dependent is not None:
        return None
    if red is not None:
        roots = solve_for(red.residual, red.last)
        if roots is None:
            return None
        out = []
        for root in roots:
            sol = red.back_substitute(root)
            if any(set(unknowns) & e.free_symbols for e in sol.values()):
                return None
            if all(_admissible(sol[u], u) for u in sol):
                out.append({u: sol[u] for u in unknowns})
        return tuple(out) or None
    if any(beyond_the_solver(lhs - rhs, set(unknowns), max_degree=SYSTEM_DEGREE) for lhs, rhs in equations):
        return None     # sympy's system solver would multiply the degrees out (Groebner bases)
    try:
        sols = sympy.solve([lhs - rhs for lhs, rhs in equations], list(unknowns), dict=True)
    except (NotImplementedError, ValueError, TypeError, AttributeError, RecursionError):
        return None
    out = []
    for s in sols:
        if set(s) != set(unknowns):
            continue
        if any(set(unknowns) & e.free_symbols for e in s.values()):
            continue
        if all(_admissible(s[u], u) and _printable(s[u]) for u in unknowns):
            out.append({u: s[u] for u in unknowns})
    return tuple(out) or None


@lru_cache(maxsize=1024)
@_guarded(None)
def reduce_block(equations: tuple[tuple[sympy.Expr, sympy.Expr], ...],
                 unknowns: tuple[sympy.Symbol, ...]) -> Reduction | None:
    """Substitution: peel off ``x = f(...)`` equations, then ones with a unique root for some
    remaining unknown, until one equation in one unknown is left (None if that fails)."""
    residuals = [lhs - rhs for lhs, rhs in equations]
    remaining = set(unknowns)
    eliminated: list[tuple[sympy.Symbol, sympy.Expr]] = []
    pending = list(range(len(residuals)))

    def eliminate(i: int, u: sympy.Symbol, value: sympy.Expr) -> None:
        for prev, prev_value in eliminated:  # express value in the unknowns still remaining
            value = value.subs(prev, prev_value)
        eliminated.append((u, value))
        remaining.discard(u)
        pending.remove(i)
        for j in pending:
            residuals[j] = residuals[j].subs(u, value)
            if beyond_the_solver(residuals[j]):
                raise _BeyondTheSolver

    try:
        for i, (lhs, rhs) in enumerate(equations):
            for side, other in ((lhs, rhs), (rhs, lhs)):
                if side in remaining and side not in other.free_symbols and len(pending) > 1:
                    eliminate(i, side, other)
                    break
        progress = True
        while progress and len(pending) > 1:
            progress = False
            for i in list(pending):
                for u in sorted(remaining & residuals[i].free_symbols, key=str):
                    roots = solve_for(residuals[i], u)
                    if roots is not None and len(roots) == 1:
                        eliminate(i, u, roots[0])
                        progress = True
                        break
                if progress:
                    break
    except _BeyondTheSolver:
        return None     # the substitutions compose degrees beyond any closed form: numbers instead
    for j in pending:   # an equation the substitutions emptied of unknowns adds nothing
        if _empty_of(residuals[j], remaining):
            return Reduction(tuple(eliminated), None, None, dependent=j)
    if len(pending) != 1 or len(remaining) != 1:
        return None
    last = next(iter(remaining))
    return Reduction(tuple(eliminated), last, residuals[pending[0]])


def _beyond_a_power_factor(num: sympy.Expr, unknowns: set) -> bool:
    """A numeric test before factoring (which took 5 s on one block of the memory model): if
    ``num`` were the unknowns' powers times the knowns' terms, scaling every unknown by the same
    factor would scale ``num`` by one ratio wherever the knowns stand. A ratio that differs between
    two random points proves the unknowns sit beyond a power factor; equal or unreadable ratios
    prove nothing (the factoring decides). O(size of num)."""
    symbols = sorted(num.free_symbols, key=str)
    fn = sympy.lambdify(symbols, num, modules="numpy")
    rng = random.Random(20261129)
    ratios = []
    for _ in range(2):
        point = [rng.uniform(0.5, 2.0) for _ in symbols]
        scaled = [v * 1.7 if s in unknowns else v for s, v in zip(symbols, point)]
        with np.errstate(all="ignore"):
            a, b = complex(fn(*point)), complex(fn(*scaled))
        if not (np.isfinite(a) and np.isfinite(b)) or a == 0:
            return False
        ratios.append(b / a)
    return abs(ratios[0] - ratios[1]) > 1e-6 * max(abs(ratios[0]), abs(ratios[1]))


class _BeyondTheSolver(Exception):
    """A substitution made an equation too large for symbolic work (see beyond_the_solver)."""


@_guarded(False)
def _empty_of(residual: sympy.Expr, unknowns: set) -> bool:
    """True if ``residual`` = 0 says nothing about ``unknowns``: none is left in it, or only as
    a power factor (R (f - mfu P E / (Pw D)) = 0, from two equations that both fix n T; the
    quantities are positive, so R^k is never the zero)."""
    expr = sympy.cancel(sympy.together(residual))
    if not expr.free_symbols & unknowns:
        return True
    num, _ = sympy.fraction(expr)
    if _beyond_a_power_factor(num, unknowns):
        return False
    try:
        _, factors = sympy.factor_list(num)
    except (sympy.PolynomialError, NotImplementedError, ValueError, TypeError):
        return False
    return not any(base.free_symbols & unknowns for base, _ in factors
                   if not (base.is_Symbol and base in unknowns))
