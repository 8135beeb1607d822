"""How hard an equation is for the solver, decided at load from its tree alone.

An equation can be short and still beyond any solver: ``((b^64)^64)^64`` is b to the 262144th,
and a product of 60 two-term sums expands to 2^60 terms. sympy, asked to solve either
backwards, expands it (``together``, ``Poly``) until memory runs out. The parser caps each
exponent and the text's length, but not what they compose to, so the library refuses at load
an equation whose *effective degree* in a quantity (nested powers multiply, products add) or
whose *expanded size* (terms after multiplying out, sums add, products multiply, an integer
power n of a k-term sum has C(n+k-1, k-1)) is beyond what the engine solves in reasonable
time, and every numeric constant outside floating point's range (``99..9^64``, ``exp(10^4)``).
Linear in the size of the tree; the built-in library stays far below the limits (degree 2,
a few dozen terms).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import sympy

MAX_DEGREE = 64          # effective degree in any one quantity (the parser's cap on one exponent)
MAX_TERMS = 4096         # terms of the equation multiplied out
MAX_QUANTITIES = 40      # distinct quantities (and units) in one equation
FLOAT_RANGE = (1e-300, 1e300)   # magnitudes a constant may have (with room for a factor or two)
_CAP = MAX_TERMS + 1


class TooComplex(ValueError):
    """An equation beyond what the engine can solve; the message says what and by how much."""


@dataclass
class _Shape:
    terms: int = 1
    degree: dict = field(default_factory=dict)      # symbol -> effective degree (Fraction)


def check_equation(lhs: sympy.Expr, rhs: sympy.Expr) -> None:
    """Raise TooComplex unless ``lhs = rhs`` is within the limits above (see module docstring)."""
    symbols = lhs.free_symbols | rhs.free_symbols
    if len(symbols) > MAX_QUANTITIES:
        raise TooComplex(f"it relates {len(symbols)} quantities and units; at most {MAX_QUANTITIES} "
                         "can be solved together")
    for side in (lhs, rhs):
        _constants(side)
    shape = _add([_shape(lhs), _shape(rhs)])
    if shape.degree:
        symbol, degree = max(shape.degree.items(), key=lambda kv: kv[1])
        if degree > MAX_DEGREE:
            raise TooComplex(f"its effective degree in {symbol} is {_show(degree)} (powers of powers multiply); "
                             f"at most {MAX_DEGREE} can be solved")
    if shape.terms > MAX_TERMS:
        raise TooComplex(f"multiplied out it has more than {MAX_TERMS} terms (a product of sums, or a power of "
                         "one); introduce intermediate quantities instead")


def beyond_the_solver(expr: sympy.Expr, unknowns=None, max_degree: float = MAX_DEGREE) -> bool:
    """Whether ``expr`` (an equation's residual, often after substitutions) is beyond symbolic
    work: effective degree above ``max_degree`` in one of ``unknowns`` (every quantity when
    None), or more than MAX_TERMS terms multiplied out. Substituting one degree-64 equation into
    another composes their degrees (64 x 64); such a block is for numbers, not for sympy."""
    shape = _shape(expr)
    degrees = [d for s, d in shape.degree.items() if unknowns is None or s in unknowns]
    return shape.terms > MAX_TERMS or any(d > max_degree for d in degrees)


def _show(x: Fraction) -> str:
    return str(x.numerator) if x.denominator == 1 else f"{float(x):g}"


def _shape(expr: sympy.Basic) -> _Shape:
    if isinstance(expr, sympy.Symbol):
        return _Shape(1, {expr: Fraction(1)})
    if expr.is_Number or isinstance(expr, sympy.NumberSymbol) or not expr.free_symbols:
        return _Shape()
    if isinstance(expr, sympy.Add):
        return _add([_shape(a) for a in expr.args])
    if isinstance(expr, sympy.Mul):
        return _mul([_shape(a) for a in expr.args])
    if isinstance(expr, sympy.Pow):
        base, exponent = expr.args
        if exponent.is_Rational:
            inner = _shape(base)
            power = abs(Fraction(int(exponent.p), int(exponent.q)))
            terms = _power_terms(inner.terms, int(power)) if power.denominator == 1 else 1
            return _Shape(terms, {s: d * max(power, Fraction(1)) for s, d in inner.degree.items()})
        return _atom(expr)      # b^x: transcendental in x, each part checked on its own
    return _atom(expr)          # log, exp, Min, Max, ceiling, floor, Piecewise, an algorithm


def _atom(expr: sympy.Basic) -> _Shape:
    """A function of its arguments: one term, degree 1 in what it holds; the arguments are
    solved for inside it in turn, so each must be within the limits too."""
    for arg in expr.args:
        if isinstance(arg, sympy.Basic) and arg.free_symbols:
            for part in (arg.args if isinstance(arg, (sympy.core.relational.Relational, sympy.Tuple)) else (arg,)):
                inner = _shape(part)
                if inner.terms > MAX_TERMS or any(d > MAX_DEGREE for d in inner.degree.values()):
                    return inner
    return _Shape(1, {s: Fraction(1) for s in expr.free_symbols if isinstance(s, sympy.Symbol)})


def _add(shapes: list[_Shape]) -> _Shape:
    degree: dict = {}
    for sh in shapes:
        for s, d in sh.degree.items():
            degree[s] = max(degree.get(s, 0), d)
    return _Shape(min(sum(sh.terms for sh in shapes), _CAP), degree)


def _mul(shapes: list[_Shape]) -> _Shape:
    degree: dict = {}
    terms = 1
    for sh in shapes:
        terms = min(terms * sh.terms, _CAP)
        for s, d in sh.degree.items():
            degree[s] = degree.get(s, 0) + d
    return _Shape(terms, degree)


def _power_terms(k: int, n: int) -> int:
    """Terms of a k-term sum to the n-th power, multiplied out (at most _CAP)."""
    if k <= 1 or n <= 1:
        return k if n >= 1 else 1
    if n > _CAP:
        return _CAP
    return min(math.comb(n + k - 1, k - 1), _CAP)


def _constants(expr: sympy.Basic) -> None:
    """Every constant, and every part without quantities (``exp(10^4)``), must be a number
    floating point can hold: evaluation would turn it into inf or 0 (or fail outright)."""
    for node in sympy.preorder_traversal(expr):
        if node.free_symbols or not isinstance(node, sympy.Expr) or node in (sympy.true, sympy.false):
            continue
        if node.is_Number:
            value = abs(node)
            if value != 0 and not FLOAT_RANGE[0] <= value <= FLOAT_RANGE[1]:
                raise TooComplex(f"the constant {_short(node)} is beyond the range of floating point "
                                 "(about 1e-300 to 1e300)")
            continue
        try:
            value = abs(complex(node.evalf(15)))
        except (TypeError, ValueError, OverflowError, ZeroDivisionError):
            raise TooComplex(f"the constant {_short(node)} has no finite value") from None
        if not (value == 0 or FLOAT_RANGE[0] <= value <= FLOAT_RANGE[1]):
            raise TooComplex(f"the constant {_short(node)} is beyond the range of floating point "
                             "(about 1e-300 to 1e300)")


def _short(expr: sympy.Basic, n: int = 40) -> str:
    text = str(expr)
    return text if len(text) <= n else text[:n - 3] + "..."
