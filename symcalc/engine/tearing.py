"""Tearing: a large block of equations solved as one unknown guessed and a chain computed from it.

A simultaneous block of n equations in n unknowns arises whenever a question runs a forward
model backwards (the NIC bandwidth that keeps exposed data-parallel communication under 5 % of
a step: forty equations between the step's parts). Solving such a block symbolically is
hopeless (substitution through Max/Min grows without bound), and a root search in forty
dimensions is fragile. Tearing, as equation-based simulators do it: pick one unknown (the
*tear*), and order the other n - 1 equations so that each gives one more unknown from the
tear, the inputs and the unknowns before it, by its explicit form or a unique symbolic root.
One equation is left over; its residual, computed through the chain, is a function of the tear
alone, and a scalar root search (symcalc.engine.numeric.solve_scalar) finds it for every element of a
sweep at once. Where that residual is flat, the block does not determine its unknowns (a
value is missing), which is a different message from "no value satisfies".

Data only: a :class:`Tearing` holds expressions; symcalc.engine.derivation compiles and evaluates it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

import sympy

from symcalc.engine.invert import solve_for
from symcalc.library.records import FormulaSpec

# blocks smaller than this keep the symbolic block solution (a closed form is worth having)
TEAR_FROM = 6


@dataclass(frozen=True)
class Tearing:
    """A block as one guessed unknown and a chain of single-equation solutions.

    ``chain`` lists (unknown, formula id, expression) in evaluation order; each expression uses
    the tear, the step's inputs and unknowns earlier in the chain. ``residual`` (lhs - rhs of
    ``residual_formula``) vanishes at the tear's true value."""

    tear: str
    chain: tuple[tuple[str, str, sympy.Expr], ...]
    residual_formula: str
    residual: sympy.Expr
    symbols: tuple[sympy.Symbol, ...] = ()    # the tear's, then each chain unknown's, in order


def tear_block(formulas: tuple[FormulaSpec, ...], unknowns: tuple[str, ...],
               symbol: Callable[[str], sympy.Symbol], clean: Callable[[sympy.Expr], sympy.Expr],
               prefer: Iterable[str] = ()) -> Tearing | None:
    """The block torn at one unknown, or None when no single tear orders it.

    Parameters
    ----------
    formulas, unknowns : the block (as many equations as unknowns).
    symbol : quantity name -> its sympy symbol.
    clean : applied to each equation side first (zero defaults dropped).
    prefer : unknowns to try as the tear first (the question's target, quantities people give);
        the rest follow in block order.

    Returns
    -------
    The first tear (in preference order) whose chain covers every other unknown and whose
    leftover equation depends on the tear through the chain, else None.

    Complexity: O(n) tears x O(n^2) scans of the equations; each symbolic inversion is one
    guarded, cached :func:`symcalc.engine.invert.solve_for` call, shared between tears.
    """
    if len(formulas) != len(unknowns) or len(formulas) < 2:
        return None
    members = set(unknowns)
    # preferred tears first, each unknown once (dict keys keep the order)
    order = dict.fromkeys([*(u for u in prefer if u in members), *unknowns])
    # each formula's side cleaned and solved for an unknown once, whichever tear asks
    cleaned: dict = {}
    solved: dict = {}

    def clean_once(e: sympy.Expr) -> sympy.Expr:
        if e not in cleaned:
            cleaned[e] = clean(e)
        return cleaned[e]
    for tear in order:
        torn = _chain_from(tear, formulas, members, symbol, clean_once, solved)
        if torn is not None:
            return torn
    return None


def _chain_from(tear: str, formulas, members: set[str], symbol, clean, solved: dict | None = None) -> Tearing | None:
    """Order the block from ``tear``: each equation with one unknown left gives that unknown.
    ``solved`` keeps each (formula, unknown)'s solution for the other tears of the block."""
    solved = {} if solved is None else solved
    known = {tear}
    depends = {tear}              # unknowns whose value follows from the tear
    pending = list(formulas)
    chain = []
    while len(pending) > 1:
        # a forward-only law (a Max, a count at the peak) gives its left side before any law is
        # inverted: left as the residual its Max would be flat on one side of the root, and its
        # left side would meet its domain's edge exactly there
        given_by = {g.lhs_name for g in pending if g.forward_only}
        candidates = []
        for f in pending:
            left = [q for q in f.quantities if q in members and q not in known]
            if len(left) == 1:
                # a forward law first; an inverted law last if it takes what a forward one gives
                candidates.append((not f.forward_only and left[0] in given_by, not f.forward_only, f, left))
        for _, _, f, left in sorted(candidates, key=lambda c: c[:2]):
            key = (f.id, left[0])
            if key not in solved:
                solved[key] = _solution(f, left[0], symbol, clean)
            expr = solved[key]
            if expr is None:
                continue
            chain.append((left[0], f.id, expr))
            known.add(left[0])
            if any(q in depends for q in f.quantities if q in members and q != left[0]):
                depends.add(left[0])
            pending.remove(f)
            break
        else:
            return None
    last = pending[0]
    if known != members or not any(q in depends for q in last.quantities if q in members):
        return None
    return Tearing(tear=tear, chain=tuple(chain), residual_formula=last.id,
                   residual=clean(last.lhs) - clean(last.rhs),
                   symbols=tuple(symbol(q) for q in [tear, *(name for name, _, _ in chain)]))


def _solution(f: FormulaSpec, name: str, symbol, clean) -> sympy.Expr | None:
    """``name`` from ``f`` alone: its explicit side, or a unique symbolic root."""
    how = f.solvability.get(name)
    x = symbol(name)
    if how == "explicit":
        return clean(f.rhs if f.lhs == x else f.lhs)
    if how == "symbolic":
        # lhs is None only before the library loads (records.FormulaSpec); these are loaded
        roots = solve_for(clean(f.lhs - f.rhs), x)  # type: ignore[operator]
        if roots is not None and len(roots) == 1:
            return roots[0]
    return None
