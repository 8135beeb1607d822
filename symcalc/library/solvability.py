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
    return classify_all(lhs, rhs, [x])[0]


def classify_all(lhs: sympy.Expr, rhs: sympy.Expr, xs) -> list[str]:
    """:func:`classify` for each of ``xs``, from one walk of each side (a formula is classified
    for every quantity it relates when the library loads: four walks per quantity otherwise)."""
    rounded: set = set()        # symbols inside a ceiling or floor
    conditions: set = set()     # symbols in a Piecewise condition
    monotone: set = set()       # symbols inside a Min, Max or Piecewise
    for side in (lhs, rhs):
        for node in sympy.preorder_traversal(side):
            if isinstance(node, (sympy.ceiling, sympy.floor)):
                rounded |= node.free_symbols
            if isinstance(node, sympy.Piecewise):
                for pair in node.args:
                    conditions |= pair.cond.free_symbols
            if isinstance(node, (sympy.Min, sympy.Max, sympy.Piecewise)):
                monotone |= node.free_symbols
    out = []
    for x in xs:
        if x in rounded or x in conditions:
            out.append("none")
        elif (lhs == x and x not in rhs.free_symbols) or (rhs == x and x not in lhs.free_symbols):
            out.append("explicit")
        else:
            out.append("numeric" if x in monotone else "symbolic")
    return out
