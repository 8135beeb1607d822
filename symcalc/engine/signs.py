"""What the structure of an expression guarantees about its value in floating point.

The evaluator's chunked kernel (chunked.py) skips scanning a computed array for bounds its formula already
guarantees, and evaluates a derivation as one fused expression when every step is of that
kind. Both rest on two facts proven here from the expression tree alone:

* :func:`sign`: the value is positive (or nonnegative) whenever the symbols' values are, by
  rules that hold in floating point too (a sum, product or quotient of positive numbers is
  positive); no rule relies on cancellation or an identity, which floats do not honour.
* :func:`interval`: bounds of the value, and of every partial result on the way to it, over a
  box of input values, for the same expressions (all monotone in each argument). When they
  stay inside floating point's normal range, no step can overflow or underflow, so the
  positive values are positive floats and finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import sympy

from symcalc.library.records import Interval

POS, NONNEG = "pos", "nonneg"
TINY, HUGE = 1e-290, 1e290     # well inside the normal range (2.2e-308 .. 1.8e308), with margin


def domain_sign(d: Interval) -> str | None:
    """What a value inside ``d`` is known to be: POS, NONNEG, or neither (None)."""
    if d.lo > 0 or (d.lo == 0 and d.lo_open):
        return POS
    if d.lo >= 0:
        return NONNEG
    return None


def sign(expr: sympy.Expr, facts: Mapping[sympy.Symbol, str]) -> str | None:
    """POS or NONNEG if ``expr`` is so by its structure, given the symbols' facts; else None."""
    if expr.is_Number:
        v = float(expr)
        return POS if v > 0 else NONNEG if v == 0 else None
    if expr.is_Symbol:
        return facts.get(expr)
    if isinstance(expr, sympy.NumberSymbol):
        return POS if expr.is_positive else None
    if expr.is_Pow:
        base, exp = expr.args
        b = sign(base, facts)
        if b == POS and exp.is_Number:
            return POS
        if b == NONNEG and exp.is_Number and exp > 0:
            return NONNEG
        return None
    args = [sign(a, facts) for a in expr.args]
    if expr.is_Add:
        return None if None in args else POS if POS in args else NONNEG
    if expr.is_Mul or isinstance(expr, sympy.Min):
        return None if None in args else POS if all(a == POS for a in args) else NONNEG
    if isinstance(expr, sympy.Max):
        return POS if POS in args else NONNEG if NONNEG in args else None
    if isinstance(expr, sympy.exp):
        return POS if args[0] is not None else None
    if isinstance(expr, sympy.ceiling):
        return args[0]                  # ceiling of a positive value is at least 1
    if isinstance(expr, sympy.floor):
        return NONNEG if args[0] else None
    return None


def interval(expr: sympy.Expr, box: Mapping[sympy.Symbol, tuple[float, float]]) -> tuple[float, float] | None:
    """(lo, hi) of ``expr`` over ``box`` (each symbol's range), for an expression :func:`sign`
    accepts with every symbol nonnegative; None if the value or any partial result (a partial
    sum or product, a denominator) could leave [TINY, HUGE], other than by being exactly 0
    (a factor or base that is exactly 0: floats compute that exactly too)."""
    try:
        return _interval(expr, box)
    except (OverflowError, ValueError, ZeroDivisionError, KeyError):
        return None


def _checked(lo: float, hi: float, zero: bool) -> tuple[float, float] | None:
    """The interval if it is normal; lo may be 0 only where ``zero`` says 0 is exact."""
    if not (0 <= lo <= hi <= HUGE) or (lo < TINY and not (lo == 0 and zero)):
        return None
    return lo, hi


def _interval(expr: sympy.Expr, box) -> tuple[float, float] | None:
    if expr.is_Number or isinstance(expr, sympy.NumberSymbol):
        v = float(expr)
        return _checked(v, v, zero=True) if v >= 0 else None
    if expr.is_Symbol:
        lo, hi = box[expr]
        return _checked(lo, hi, zero=True)
    if expr.is_Pow:
        base, exp = expr.args
        b = _interval(base, box)
        if b is None or not exp.is_Number:
            return None
        e = float(exp)
        if e < 0 and b[0] == 0:
            return None
        lo, hi = (b[0] ** e, b[1] ** e) if e >= 0 else (b[1] ** e, b[0] ** e)
        return _checked(lo, hi, zero=b[0] == 0 and e > 0)
    parts = [_interval(a, box) for a in expr.args]
    known = [p for p in parts if p is not None]
    if len(known) < len(parts):
        return None
    los, his = [p[0] for p in known], [p[1] for p in known]
    if expr.is_Add:                     # partial sums lie between the smallest term and the sum
        return _checked(math.fsum(los), math.fsum(his), zero=all(lo == 0 for lo in los))
    if expr.is_Mul:
        # a partial product, or a denominator, lies between the product of the factors' lows
        # below 1 and the product of their highs above 1
        zero = any(lo == 0 for lo in los)
        if not zero and _checked(math.prod(min(lo, 1.0) for lo in los),
                                 math.prod(max(hi, 1.0) for hi in his), zero=False) is None:
            return None
        return _checked(math.prod(los), math.prod(his), zero=zero)
    if isinstance(expr, sympy.Min):
        return _checked(min(los), min(his), zero=min(los) == 0)
    if isinstance(expr, sympy.Max):
        return _checked(max(los), max(his), zero=max(los) == 0)
    if isinstance(expr, sympy.exp):
        return _checked(math.exp(los[0]), math.exp(his[0]), zero=False)
    if isinstance(expr, sympy.ceiling):      # printed as ceil_tol: may land one lower
        return _checked(0.0 if los[0] == 0 else max(1.0, math.ceil(los[0]) - 1.0), float(math.ceil(his[0])),
                        zero=los[0] == 0)
    if isinstance(expr, sympy.floor):        # printed as floor_tol: may land one higher
        return _checked(float(math.floor(los[0])), math.floor(his[0]) + 1.0, zero=True)
    return None
