"""Record fields that hold sympy objects, pickled apart and rebuilt only when read.

Why: a question whose derivation is cached is answered from compiled code and pre-printed
text (see :mod:`symcalc.compiled`, :class:`symcalc.library.printed.Printed`); sympy is needed
only to build a derivation or to print a new form of one. Importing sympy is about 0.25 s,
more than everything else a cached answer does. The records of the library and of a
derivation still hold sympy expressions for the work that needs them, so those fields are
pickled as nested bytes (:class:`Frozen`) and unpickled, importing sympy, on first read.

A field is declared lazy by giving it a :class:`LazyField` default::

    @dataclass
    class FormulaSpec(LazyFields):
        lhs: sympy.Expr | None = LazyField()

and the class (or one of its bases) mixes in :class:`LazyFields`, whose ``__getstate__``
freezes them. Reading the field thaws it once; writing it stores the value as given.
"""

from __future__ import annotations

import pickle
from typing import Any


class Frozen:
    """A pickled sympy object, kept as bytes until someone reads it."""

    __slots__ = ("data",)

    def __init__(self, data: bytes):
        self.data = data

    def __reduce__(self):
        return (Frozen, (self.data,))


class LazyField:
    """A data descriptor (usable as a dataclass field default): stores its value in the
    instance's ``__dict__`` under ``_lazy_<name>`` and thaws a :class:`Frozen` one on read.
    Reading it on the class gives ``default`` (the dataclass default)."""

    def __init__(self, default: Any = None):
        self.default = default
        self.slot = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_lazy_" + name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            return self.default
        value = obj.__dict__.get(self.slot, self.default)
        if type(value) is Frozen:
            value = thaw(value)
            obj.__dict__[self.slot] = value
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


def thaw(frozen: Frozen) -> Any:
    """The object again, with sympy's evaluation off: sympy objects are rebuilt by calling their
    constructors, and with evaluation on an expression kept as written (``4 * d_model^2``,
    shown "as cited") would come back reordered and simplified; off, it comes back exactly as
    stored, and 4x faster."""
    from sympy.core.parameters import evaluate  # start-up: only a field that is read imports sympy
    with evaluate(False):
        return pickle.loads(frozen.data)


def freeze(value: Any) -> Any:
    """``value`` as a :class:`Frozen` (None, text, numbers and Frozen stay as they are)."""
    if value is None or isinstance(value, (Frozen, str, int, float, bool)):
        return value
    return Frozen(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))


class LazyFields:
    """Mixin: pickles every :class:`LazyField` of the class frozen."""

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for key, value in state.items():
            if key.startswith("_lazy_"):
                state[key] = freeze(value)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
