"""Printing finished sympy expressions: LaTeX and plain text, by symbols or by numbers.

These are visitors over an expression tree that only decide how a symbol is written: as the
quantity's symbol (``F_{\\mathrm{peak}}``), its name (``peak_flops``), a unit written in a
formula (``\\mathrm{FLOP}``), or, for the "numbers substituted" line of a derivation, the
quantity's value with its unit. Everything else is sympy's own printing. :func:`printed`
prints an expression once into a :class:`~symcalc.library.printed.Printed`, which renderers
read without sympy.
"""

from __future__ import annotations

from collections.abc import Mapping

import sympy
from sympy.core.function import AppliedUndef
from sympy.printing.latex import LatexPrinter
from sympy.printing.str import StrPrinter

from symcalc.library.exprparse import UnitSymbol
from symcalc.library.printed import Printed, slot
from symcalc.units import unit_to_latex


class _LatexPrinter(LatexPrinter):
    def __init__(self, names: Mapping[sympy.Symbol, str], settings: dict):
        super().__init__(settings)
        self._names = names

    def _print_Symbol(self, expr, style="plain"):
        if expr in self._names:
            return self._names[expr]
        if isinstance(expr, UnitSymbol):
            return unit_to_latex(expr.unit)
        return super()._print_Symbol(expr, style=style)

    def _print_Function(self, expr, exp=None):
        if isinstance(expr, AppliedUndef):   # an algorithm: its name as written, not name_subscript
            name = r"\operatorname{" + expr.func.__name__.replace("_", r"\_") + "}"
            args = ", ".join(self._print(a) for a in expr.args)
            return f"{name}\\left({args}\\right)" + (f"^{{{exp}}}" if exp else "")
        return super()._print_Function(expr, exp=exp)


class _TextPrinter(StrPrinter):
    def __init__(self, names: Mapping[sympy.Symbol, str]):
        super().__init__({"order": "none"})
        self._names = names

    def _print_Symbol(self, expr):
        if expr in self._names:
            return self._names[expr]
        if isinstance(expr, UnitSymbol):
            return expr.unit
        return expr.name


def latex(expr: sympy.Basic, names: Mapping[sympy.Symbol, str], numbers: bool = False,
          as_written: bool = False) -> str:
    """LaTeX of ``expr`` with symbols written as ``names`` says.

    ``numbers``: the names are values, so products get an explicit ``\\cdot``.
    ``as_written``: keep the term order of an unevaluated expression (formula as cited).
    """
    settings = {"mul_symbol": "dot" if numbers else None, "order": "none" if as_written else None,
                "fold_short_frac": False}
    return _LatexPrinter(names, settings).doprint(expr)


def text(expr: sympy.Basic, names: Mapping[sympy.Symbol, str]) -> str:
    """Plain text (Python-like operators) of ``expr`` with symbols written as ``names`` says."""
    return _TextPrinter(names).doprint(expr)


def printed(expr: sympy.Basic, library) -> Printed:
    """``expr`` printed once: text with a slot per quantity, LaTeX with the quantities'
    symbols, the quantities it reads. O(size of expr)."""
    quantities = {q.symbol: q for q in library.quantities.values()}
    read = [quantities[s] for s in expr.free_symbols if s in quantities]
    bare = quantities[expr].name if isinstance(expr, sympy.Symbol) and expr in quantities else None
    return Printed(template=text(expr, {q.symbol: slot(q.name) for q in read}),
                   latex=latex(expr, {q.symbol: q.latex for q in read}),
                   names=frozenset(q.name for q in read), expr=expr, symbol_of=bare)
