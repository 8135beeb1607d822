"""An expression as printed: plain text with a slot for each quantity, and LaTeX.

Renderers of text and JSON read these strings instead of printing a sympy expression, so a
cached answer is shown without importing sympy (symcalc.lazy). The text keeps each quantity
as a slot, ``\\x00name\\x00``: filled with the names it reads as the formula; filled with
values (``(6e11 token)``) it is the "numbers substituted" line. sympy's text printer places
parentheses by the expression tree, not by the text a symbol prints as, so filling the slots
gives what printing with those strings would have given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from symcalc.lazy import LazyField, LazyFields

SLOT = "\x00"
_SLOT = re.compile("\x00([A-Za-z0-9_]+)\x00")


def slot(name: str) -> str:
    """How quantity ``name`` is written in a Printed text."""
    return f"{SLOT}{name}{SLOT}"


@dataclass
class Printed(LazyFields):
    """One expression, printed once.

    ``template``: plain text with a slot per quantity (see the module docstring). ``latex``:
    LaTeX with each quantity as its symbol. ``names``: the quantities it reads. ``expr``: the
    sympy expression itself, for a new printing (LaTeX with numbers); rebuilt on first read.
    """

    template: str
    latex: str
    names: frozenset[str] = frozenset()
    expr: object = LazyField()
    symbol_of: str | None = field(default=None)   # the quantity it is, when it is one bare symbol

    @classmethod
    def of_quantity(cls, name: str, latex: str) -> Printed:
        """A bare quantity (the closed form of a value given, not derived)."""
        return cls(template=slot(name), latex=latex, names=frozenset((name,)), symbol_of=name)

    def text(self, values: Mapping[str, str] | None = None) -> str:
        """The text, each quantity written as ``values`` says (else by its name)."""
        if values is None:
            return _SLOT.sub(lambda m: m.group(1), self.template)
        return _SLOT.sub(lambda m: values.get(m.group(1), m.group(1)), self.template)

    def __str__(self) -> str:
        return self.text()
