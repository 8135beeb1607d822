"""Whitelist parser: formula text -> sympy expression, without eval or sympify.

The text is parsed by Python's ``ast`` module (which only builds a syntax tree, it runs
nothing) and the tree is walked by a visitor that accepts exactly: numbers, names resolved by
the caller (declared quantities and units), ``+ - * / ** ^``, unary minus, and calls of the
whitelisted functions sqrt, log, log2, exp, ceiling/ceil, floor, Min/min, Max/max and
Piecewise((value, condition), ..., (value, True)). Anything else (attributes, subscripts,
strings, lambdas, keyword arguments, ``__import__``) is rejected with a message that names it.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from fractions import Fraction

import sympy
from sympy.core.parameters import evaluate as sympy_evaluate

MAX_TEXT = 4000
MAX_EXPONENT = 64
MAX_DIGITS = 40


class ParseError(ValueError):
    """Formula text outside the whitelist; the message says what and where."""


class UnitSymbol(sympy.Symbol):
    """A unit written inside a formula (``6 * FLOP/token``): a positive constant symbol.

    Solving treats it like any positive parameter, so rearranged forms keep their units
    readable; evaluation replaces it by its size in base units (``GB`` -> 1e9).
    """

    is_unit = True

    @property
    def unit(self) -> str:
        return self.name[1:-1]


def unit_symbol(unit: str) -> UnitSymbol:
    return UnitSymbol(f"[{unit}]", positive=True)


def _log(x, base=None):
    return sympy.log(x) if base is None else sympy.log(x, base)


FUNCTIONS: dict[str, Callable] = {
    "sqrt": sympy.sqrt,
    "log": _log,
    "ln": sympy.log,
    "log2": lambda x: sympy.log(x, 2),
    "exp": sympy.exp,
    "ceiling": sympy.ceiling,
    "ceil": sympy.ceiling,
    "floor": sympy.floor,
    "Min": sympy.Min,
    "min": sympy.Min,
    "Max": sympy.Max,
    "max": sympy.Max,
}
ARITY = {"sqrt": (1, 1), "log": (1, 2), "ln": (1, 1), "log2": (1, 1), "exp": (1, 1),
         "ceiling": (1, 1), "ceil": (1, 1), "floor": (1, 1),
         "Min": (2, 8), "min": (2, 8), "Max": (2, 8), "max": (2, 8)}
RESERVED = set(FUNCTIONS) | {"Piecewise", "True", "False", "None"}

_COMPARE = {ast.Lt: sympy.StrictLessThan, ast.LtE: sympy.LessThan,
            ast.Gt: sympy.StrictGreaterThan, ast.GtE: sympy.GreaterThan}

Resolver = Callable[[str], sympy.Expr]


def _clip(text: str, n: int = 60) -> str:
    text = text.strip()
    return text if len(text) <= n else text[: n - 3] + "..."


def parse_expression(text: str, resolve: Resolver, evaluate: bool = True) -> sympy.Expr:
    """Parse one side of a formula. ``resolve(name)`` maps a name to a sympy symbol or raises.

    With ``evaluate=False`` the tree keeps the structure as written (for display: sympy would
    otherwise turn ``sqrt(2*C*F)`` into ``sqrt(2)*sqrt(C)*sqrt(F)``).
    """
    if not isinstance(text, str):
        raise ParseError(f"expected formula text, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        raise ParseError(f"formula text is longer than {MAX_TEXT} characters")
    src = text.strip().replace("^", "**")
    if not src:
        raise ParseError("empty expression")
    try:
        tree = ast.parse(src, mode="eval")
    except SyntaxError as e:
        raise ParseError(f"syntax error in '{_clip(text)}': {e.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ParseError(f"'{_clip(text)}' is too deeply nested") from None
    try:
        with sympy_evaluate(evaluate):
            return _Visitor(resolve).visit(tree.body)
    except RecursionError:
        raise ParseError(f"'{_clip(text)}' is too deeply nested") from None


def split_equation(text: str) -> tuple[str, str]:
    """Split ``"a = b"`` at its single '=' (not part of '==', '<=', '>=')."""
    if not isinstance(text, str):
        raise ParseError("an equation must be text like 'a = b * c'")
    positions = [i for i, ch in enumerate(text)
                 if ch == "=" and (i == 0 or text[i - 1] not in "<>=!")
                 and (i + 1 == len(text) or text[i + 1] != "=")]
    if len(positions) != 1:
        raise ParseError(f"an equation needs exactly one '=' (found {len(positions)}): '{_clip(text)}'")
    i = positions[0]
    lhs, rhs = text[:i].strip(), text[i + 1:].strip()
    if not lhs or not rhs:
        raise ParseError(f"both sides of '=' must be non-empty: '{_clip(text)}'")
    return lhs, rhs


def parse_equation(text: str, resolve: Resolver, evaluate: bool = True) -> tuple[sympy.Expr, sympy.Expr]:
    lhs, rhs = split_equation(text)
    return parse_expression(lhs, resolve, evaluate), parse_expression(rhs, resolve, evaluate)


def _number(value) -> sympy.Expr:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ParseError(f"'{value!r}' is not a number")
    if isinstance(value, int):
        if len(str(abs(value))) > MAX_DIGITS:
            raise ParseError("integer constant is too long")
        return sympy.Integer(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ParseError("constants must be finite")
    # repr() is the shortest round-trip text: 0.1 -> "0.1" -> exactly 1/10.
    frac = Fraction(repr(value))
    return sympy.Rational(frac.numerator, frac.denominator)


class _Visitor:
    def __init__(self, resolve: Resolver):
        self.resolve = resolve

    def visit(self, node: ast.AST, in_condition: bool = False) -> sympy.Expr:
        if isinstance(node, ast.BinOp):
            return self._binop(node)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self.visit(node.operand)
            return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.Constant):
            if node.value is True and in_condition:
                return sympy.true
            if isinstance(node.value, str):
                raise ParseError("strings are not allowed in a formula")
            return _number(node.value)
        if isinstance(node, ast.Name):
            if node.id in RESERVED:
                raise ParseError(f"'{node.id}' is a function and needs arguments, e.g. {node.id}(x)")
            if node.id.startswith("__"):
                raise ParseError(f"name '{node.id}' is not allowed")
            return self.resolve(node.id)
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Compare) and in_condition:
            return self._compare(node)
        raise ParseError(f"{_describe(node)} is not allowed in a formula "
                         "(only numbers, quantity names, units, + - * / ^ and "
                         "sqrt, log, log2, exp, ceiling, floor, Min, Max, Piecewise)")

    def _binop(self, node: ast.BinOp) -> sympy.Expr:
        op = node.op
        if isinstance(op, ast.Pow):
            base = self.visit(node.left)
            exponent = self.visit(node.right)
            if exponent.is_number and abs(float(exponent)) > MAX_EXPONENT:
                raise ParseError(f"exponent {exponent} is too large (at most {MAX_EXPONENT})")
            return sympy.Pow(base, exponent)
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(op, ast.Add):
            return left + right
        if isinstance(op, ast.Sub):
            return left - right
        if isinstance(op, ast.Mult):
            return left * right
        if isinstance(op, ast.Div):
            if right == 0:
                raise ParseError("division by zero")
            return left / right
        raise ParseError(f"operator {type(op).__name__} is not allowed (use + - * / ^)")

    def _call(self, node: ast.Call) -> sympy.Expr:
        if not isinstance(node.func, ast.Name):
            raise ParseError(f"{_describe(node.func)} cannot be called; only "
                             "sqrt, log, log2, exp, ceiling, floor, Min, Max, Piecewise")
        name = node.func.id
        if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
            raise ParseError(f"{name}(...) takes plain arguments only")
        if name == "Piecewise":
            return self._piecewise(node)
        if name not in FUNCTIONS:
            raise ParseError(f"function '{name}' is not allowed; allowed: "
                             "sqrt, log, log2, exp, ceiling, floor, Min, Max, Piecewise")
        lo, hi = ARITY[name]
        if not lo <= len(node.args) <= hi:
            raise ParseError(f"{name}() takes {lo if lo == hi else f'{lo} to {hi}'} argument(s), "
                             f"got {len(node.args)}")
        args = [self.visit(a) for a in node.args]
        if FUNCTIONS[name] in (sympy.Min, sympy.Max) and not all(a.is_number for a in args):
            # symbolic arguments: kept as written, not compared pairwise for ones another makes
            # redundant (sympy's _find_localzeros: a fifth of a cold library build); values put
            # in later evaluate it as usual
            return FUNCTIONS[name](*args, evaluate=False)
        return FUNCTIONS[name](*args)

    def _piecewise(self, node: ast.Call) -> sympy.Expr:
        if not node.args:
            raise ParseError("Piecewise needs (value, condition) pairs")
        pairs = []
        for arg in node.args:
            if not isinstance(arg, ast.Tuple) or len(arg.elts) != 2:
                raise ParseError("each Piecewise argument must be a pair (value, condition)")
            value = self.visit(arg.elts[0])
            cond = self.visit(arg.elts[1], in_condition=True)
            pairs.append((value, cond))
        if pairs[-1][1] is not sympy.true:
            raise ParseError("the last Piecewise pair must have the condition True (the otherwise case)")
        return sympy.Piecewise(*pairs)

    def _compare(self, node: ast.Compare) -> sympy.Expr:
        if len(node.ops) != 1 or type(node.ops[0]) not in _COMPARE:
            raise ParseError("a condition must be one comparison with <, <=, > or >=")
        left = self.visit(node.left)
        right = self.visit(node.comparators[0])
        return _COMPARE[type(node.ops[0])](left, right)


def _describe(node: ast.AST) -> str:
    names = {ast.Attribute: "attribute access", ast.Subscript: "subscripting",
             ast.Lambda: "lambda", ast.List: "a list", ast.Dict: "a dict", ast.Tuple: "a tuple",
             ast.Compare: "a comparison", ast.BoolOp: "and/or", ast.IfExp: "if-else",
             ast.JoinedStr: "an f-string", ast.NamedExpr: "':='"}
    for cls, text in names.items():
        if isinstance(node, cls):
            return text
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return "a string"
    return type(node).__name__


_CONDITION_OPS = ("<=", ">=", "==", "!=", "<", ">")


def parse_condition(text: str, resolve: Resolver) -> tuple[sympy.Expr, str, sympy.Expr]:
    """Parse ``"n_kv_heads < n_heads"``: (left expression, operator, right expression).

    One comparison (``< <= > >= == !=``) between two expressions of the whitelist; the sides
    are parsed like formula sides, so nothing is evaluated."""
    if not isinstance(text, str):
        raise ParseError("a condition must be text like 'n_kv_heads < n_heads'")
    for op in _CONDITION_OPS:
        parts = text.split(op)
        if len(parts) == 2 and not any(o in parts[1] or o in parts[0] for o in _CONDITION_OPS):
            return parse_expression(parts[0], resolve), op, parse_expression(parts[1], resolve)
    raise ParseError(f"a condition needs exactly one comparison (< <= > >= == !=): '{_clip(text)}'")
