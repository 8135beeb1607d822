"""Dimensional analysis of formula expressions.

A visitor over a sympy expression computing its dimensionality (a pint ``UnitsContainer``)
from the dimensions of its symbols. It enforces the rules a physicist would: terms of a sum,
arguments of Min/Max and branches of a Piecewise share one dimension; exponents, and the
arguments of log, exp, ceiling and floor, are pure numbers; a dimensioned base may only be
raised to a rational power. Used at library load, so a formula that mixes bytes and FLOPs
never reaches a user.
"""

from __future__ import annotations

from collections.abc import Callable

import sympy
from pint.util import UnitsContainer

from symcalc.units import describe_dimension as show


DIMENSIONLESS = UnitsContainer({})


class DimensionMismatch(ValueError):
    """The expression is not dimensionally consistent; the message names the offending part."""


def dimension_of(expr: sympy.Basic, dim_of_symbol: Callable[[sympy.Symbol], UnitsContainer]) -> UnitsContainer:
    """Dimensionality of ``expr``; raises DimensionMismatch naming the inconsistent part.

    Linear in the size of the expression tree.
    """
    if isinstance(expr, sympy.Symbol):
        return dim_of_symbol(expr)
    if expr.is_Number or expr in (sympy.pi, sympy.E) or isinstance(expr, sympy.NumberSymbol):
        return DIMENSIONLESS
    if isinstance(expr, sympy.Add):
        return _same(expr.args, dim_of_symbol, "terms of a sum", expr)
    if isinstance(expr, sympy.Mul):
        dim = DIMENSIONLESS
        for arg in expr.args:
            dim = dim * dimension_of(arg, dim_of_symbol)
        return dim
    if isinstance(expr, sympy.Pow):
        base, exponent = expr.args
        edim = dimension_of(exponent, dim_of_symbol)
        if edim != DIMENSIONLESS:
            raise DimensionMismatch(f"the exponent of {_short(expr)} has dimension {show(edim)}; "
                                    "exponents must be pure numbers")
        bdim = dimension_of(base, dim_of_symbol)
        if bdim == DIMENSIONLESS:
            return DIMENSIONLESS
        if not exponent.is_Rational:
            raise DimensionMismatch(f"{_short(base)} has dimension {show(bdim)} and can only be "
                                    f"raised to a fixed rational power, not {exponent}")
        return bdim ** float(exponent) if not exponent.is_Integer else bdim ** int(exponent)
    if isinstance(expr, (sympy.Min, sympy.Max)):
        return _same(expr.args, dim_of_symbol, f"arguments of {type(expr).__name__}", expr)
    if isinstance(expr, sympy.Piecewise):
        values = [pair.expr for pair in expr.args]
        for pair in expr.args:
            _condition(pair.cond, dim_of_symbol)
        return _same(values, dim_of_symbol, "branches of a Piecewise", expr)
    if isinstance(expr, (sympy.log, sympy.exp, sympy.ceiling, sympy.floor)):
        for arg in expr.args:
            d = dimension_of(arg, dim_of_symbol)
            if d != DIMENSIONLESS:
                raise DimensionMismatch(f"{type(expr).__name__}() needs a pure number, but "
                                        f"{_short(arg)} has dimension {show(d)}")
        return DIMENSIONLESS
    raise DimensionMismatch(f"cannot check the dimension of {type(expr).__name__} in {_short(expr)}")


def _condition(cond, dim_of_symbol) -> None:
    if cond in (sympy.true, sympy.false):
        return
    if isinstance(cond, sympy.core.relational.Relational):
        _same([cond.lhs, cond.rhs], dim_of_symbol, "sides of a comparison", cond)
        return
    raise DimensionMismatch(f"unsupported Piecewise condition {_short(cond)}")


def _same(args, dim_of_symbol, what: str, whole) -> UnitsContainer:
    dims = [(a, dimension_of(a, dim_of_symbol)) for a in args]
    first_arg, first = dims[0]
    for a, d in dims[1:]:
        if d != first:
            raise DimensionMismatch(f"the {what} {_short(whole)} differ in dimension: "
                                    f"{_short(first_arg)} is {show(first)} but {_short(a)} is {show(d)}")
    return first


def _short(expr, n: int = 60) -> str:
    text = str(expr)
    return text if len(text) <= n else text[: n - 3] + "..."
