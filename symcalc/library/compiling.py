"""sympy expressions compiled to numpy functions that can be cached (symcalc.compiled).

Units written in a formula are replaced by their size in base units first ("units at the
boundary, floats inside"); Min/Max broadcast, and floor/ceiling are guarded against float
noise (symcalc.compiled.floor_tol).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import reduce

import numpy as np
import sympy
from sympy.printing.numpy import NumPyPrinter, SciPyPrinter

from symcalc import units
from symcalc.compiled import CompiledFunction, Memo, ceil_tol, floor_tol
from symcalc.library.exprparse import UnitSymbol


class _BroadcastMinMax:
    """Min/Max that broadcast scalars against arrays (sympy#21611 prints amin over a tuple), and
    floor/ceiling guarded against float noise."""

    # the sympy printer it is mixed into supplies these (annotations only: nothing is shadowed)
    _print: Callable[..., str]
    _module_format: Callable[[str], str]

    def _print_floor(self, expr):
        return f"floor_tol({self._print(expr.args[0])})"

    def _print_ceiling(self, expr):
        return f"ceil_tol({self._print(expr.args[0])})"

    def _print_Min(self, expr):
        args = [self._print(a) for a in expr.args]
        return reduce(lambda a, b: f"{self._module_format('numpy.minimum')}({a}, {b})", args)

    def _print_Max(self, expr):
        args = [self._print(a) for a in expr.args]
        return reduce(lambda a, b: f"{self._module_format('numpy.maximum')}({a}, {b})", args)


class _NumpyPrinter(_BroadcastMinMax, NumPyPrinter):
    pass


class _ScipyPrinter(_BroadcastMinMax, SciPyPrinter):
    """For roots with special functions (LambertW); scipy is imported only then."""


def unit_factors(expr: sympy.Expr) -> dict:
    """UnitSymbol -> its size in base units, for every unit written in ``expr``."""
    return {s: sympy.Float(units.to_base_factor(s.unit)) for s in expr.free_symbols
            if isinstance(s, UnitSymbol)}


def compile_expr(expr: sympy.Expr, args: Sequence[sympy.Symbol]) -> CompiledFunction:
    """:func:`compile_anew`, once per process for each (expression, arguments): derivations of one
    question under different options (a planner's ZeRO stages, recompute modes, schedules)
    share most of their steps, and compiling a step (cse, lambdify) is most of what building
    one costs once it is inverted."""
    return _COMPILED.get((expr, tuple(args)), lambda: compile_anew(expr, args))


_COMPILED = Memo(8192)


def compile_anew(expr: sympy.Expr, args: Sequence[sympy.Symbol]) -> CompiledFunction:
    """``expr`` as a numpy function of ``args`` (units replaced by base-unit factors).

    The namespace is numpy itself plus the guards, not lambdify's "numpy" module string: that
    runs ``from numpy import *``, which imports numpy.ma, numpy.f2py, numpy.testing and
    numpy.random (0.13 s, a sixth of start-up) for names the printer never writes: it imports
    each function it prints by name. The result keeps the function's code object, so a cached
    derivation runs again without sympy."""
    numeric_expr = expr.subs(unit_factors(expr))
    special = numeric_expr.has(sympy.LambertW)
    guards = {"floor_tol": floor_tol, "ceil_tol": ceil_tol}
    if special:
        fn = sympy.lambdify(list(args), numeric_expr, modules=[guards, "scipy", "numpy"], cse=True,
                            printer=_ScipyPrinter, docstring_limit=0)
    else:
        fn = sympy.lambdify(list(args), numeric_expr, modules=[guards, {"numpy": np}], cse=True,
                            printer=_NumpyPrinter, docstring_limit=0)
    try:
        return CompiledFunction.wrap(fn)
    except TypeError:     # a name from elsewhere: usable, not cacheable
        return _Uncacheable(fn)


def compile_vector(exprs: Sequence[sympy.Expr], args: Sequence[sympy.Symbol]) -> Callable:
    """Several expressions as one numpy function of ``args`` returning their list (units
    replaced by base-unit factors; Min/Max broadcast; not cached: for one-off numeric checks)."""
    numeric = [e.subs(unit_factors(e)) for e in exprs]
    guards = {"floor_tol": floor_tol, "ceil_tol": ceil_tol}
    return sympy.lambdify(list(args), numeric, modules=[guards, {"numpy": np}], cse=True,
                          printer=_NumpyPrinter, docstring_limit=0)


class _Uncacheable(CompiledFunction):
    """A compiled function that could not be kept for another process: it works, but a
    derivation holding it is not written to the on-disk cache (pickling it raises TypeError)."""

    def __init__(self, function):
        self.code, self.names, self.function = b"", {}, function

    def __reduce__(self):
        raise TypeError("a compiled function that reads names from elsewhere is not cached")
