"""Structural solvability: can an equation be solved for one of its quantities, and how?

Decided from the expression tree alone, without calling sympy, so that planning stays in the
millisecond range (sympy is only asked once a plan is fixed). The classes:

``explicit``  the equation already reads ``x = f(...)`` with x absent from f;
``symbolic``  x occurs only under invertible operations: sympy should find a closed form;
``numeric``   x occurs inside Min/Max: there is no closed form, but the relation is monotone
              in x, so a numeric root on its residual is well defined where one exists;
``none``      x occurs inside ceiling/floor or a Piecewise condition: many values of x give
              the same result, so the equation only ever delivers its other side.
"""

from __future__ import annotations

import sympy


def classify(lhs: sympy.Expr, rhs: sympy.Expr, x: sympy.Symbol) -> str:
    """How ``lhs = rhs`` can be solved for ``x`` (see module docstring). Linear in tree size."""
    if _under(lhs, x, (sympy.ceiling, sympy.floor)) or _under(rhs, x, (sympy.ceiling, sympy.floor)):
        return "none"
    if _in_condition(lhs, x) or _in_condition(rhs, x):
        return "none"
    if (lhs == x and x not in rhs.free_symbols) or (rhs == x and x not in lhs.free_symbols):
        return "explicit"
    if _under(lhs, x, (sympy.Min, sympy.Max, sympy.Piecewise)) or \
            _under(rhs, x, (sympy.Min, sympy.Max, sympy.Piecewise)):
        return "numeric"
    return "symbolic"


def _under(expr: sympy.Basic, x: sympy.Symbol, kinds: tuple) -> bool:
    """True if x occurs inside a node of one of ``kinds``."""
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, kinds) and x in node.free_symbols:
            return True
    return False


def _in_condition(expr: sympy.Basic, x: sympy.Symbol) -> bool:
    for node in sympy.preorder_traversal(expr):
        if isinstance(node, sympy.Piecewise):
            if any(x in pair.cond.free_symbols for pair in node.args):
                return True
    return False
