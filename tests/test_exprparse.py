"""Formula text goes through a whitelist parser: nothing in it is ever executed."""

import sympy
import pytest

from symcalc.library.exprparse import ParseError, UnitSymbol, parse_equation, parse_expression, unit_symbol

X, Y = sympy.symbols("x y", positive=True)


def resolve(name):
    if name == "x":
        return X
    if name == "y":
        return Y
    if name in ("FLOP", "token"):
        return unit_symbol(name)
    raise ParseError(f"unknown name {name}")


def test_arithmetic_and_whitelisted_functions():
    assert parse_expression("x^2 + 3*y", resolve) == X ** 2 + 3 * Y
    assert parse_expression("sqrt(2*x*y)", resolve) == sympy.sqrt(2 * X * Y)
    assert parse_expression("ceil(x / y)", resolve) == sympy.ceiling(X / Y)
    assert parse_expression("max(x, y)", resolve) == sympy.Max(X, Y)
    assert parse_expression("log2(x)", resolve) == sympy.log(X, 2)
    pw = parse_expression("Piecewise((x, x > y), (y, True))", resolve)
    assert isinstance(pw, sympy.Piecewise)


def test_decimal_constants_are_exact_rationals():
    assert parse_expression("0.1 * x", resolve) == sympy.Rational(1, 10) * X


def test_units_in_formulas_are_symbols():
    e = parse_expression("6 * FLOP/token * x", resolve)
    units = {s.unit for s in e.free_symbols if isinstance(s, UnitSymbol)}
    assert units == {"FLOP", "token"}


def test_equation_split():
    lhs, rhs = parse_equation("x = 2 * y", resolve)
    assert (lhs, rhs) == (X, 2 * Y)
    with pytest.raises(ParseError):
        parse_equation("x == y", resolve)
    with pytest.raises(ParseError):
        parse_equation("x = y = 1", resolve)


@pytest.mark.parametrize("text", [
    "x.real", "x[0]", "'a'", "lambda: 1", "x if y else 1", "foo(x)", "[x, y]",
    "sqrt(x=1)", "sqrt(*x)", "Piecewise((x, x > y))", "2**10**10", "(" * 400 + "x" + ")" * 400,
    "x and y", "__class__",
])
def test_rejected_text(text):
    with pytest.raises(ParseError):
        parse_expression(text, resolve)


def test_code_in_formula_text_is_never_executed(tmp_path):
    target = tmp_path / "pwned"
    attacks = [
        f"__import__('os').system('touch {target}')",
        f"open('{target}', 'w')",
        "().__class__.__bases__[0].__subclasses__()",
        f"exec(\"open('{target}', 'w')\")",
        f"eval(\"open('{target}', 'w')\")",
    ]
    for text in attacks:
        with pytest.raises(ParseError):
            parse_expression(text, resolve)
    assert not target.exists()
