"""Compiled expressions that survive pickling as their source, and the guards they call.

sympy's ``lambdify`` writes a Python function from an expression; the function itself cannot
be pickled, and rebuilding it means importing sympy. A :class:`CompiledFunction` keeps the
source lambdify wrote and the names it reads (numpy functions, the guards below), so a cached
derivation is executable again with numpy alone. The source is only ever code symcalc
generated and the on-disk cache authenticated (:mod:`symcalc.cache`); the names it may read are
resolved from numpy, scipy.special, this module and ``builtins`` only.
"""

from __future__ import annotations

import builtins
import importlib
import types
from collections.abc import Callable
from typing import Any

import numpy as np

# where a compiled function's global names may come from
_MODULES = ("numpy", "scipy.special", "symcalc.compiled", "builtins")


def floor_tol(x):
    """floor() that does not fall through an integer by float noise: 3/(3*0.1) = 9.999999999999998
    is 10. The slack is relative (1e-12) and capped (1e-3), as for rounding answers."""
    x = np.asarray(x, dtype=float)
    out = np.floor(x + np.minimum(1e-12 * np.abs(x), 1e-3))
    return float(out) if out.ndim == 0 else out


def ceil_tol(x):
    """ceiling() with the same guard: 1120.0000000002 is 1120."""
    x = np.asarray(x, dtype=float)
    out = np.ceil(x - np.minimum(1e-12 * np.abs(x), 1e-3))
    return float(out) if out.ndim == 0 else out


class CompiledFunction:
    """A generated function with its source: callable, and picklable as (source, names).

    Parameters
    ----------
    source:
        The text of one ``def`` (as lambdify writes it).
    names:
        Global name -> (module, attribute or None for the module itself), for every global
        the function reads.
    """

    __slots__ = ("source", "names", "function")

    def __init__(self, source: str, names: dict[str, tuple[str, str | None]]):
        self.source = source
        self.names = names
        self.function: Callable | None = None   # defined on first call: a cached library holds
        # dozens a question never calls, and compiling each costs 0.7 ms

    def __call__(self, *args: Any) -> Any:
        if self.function is None:
            self.function = _define(self.source, self.names)
        return self.function(*args)

    def __reduce__(self):
        return (CompiledFunction, (self.source, self.names))

    @classmethod
    def wrap(cls, function: Callable, source: str) -> CompiledFunction:
        """A CompiledFunction of a function generated from ``source``, with the modules of the
        globals it reads looked up. Raises TypeError for a global that is not from numpy,
        scipy.special, this module or builtins (it could not be rebuilt)."""
        code = function.__code__
        names: dict[str, tuple[str, str | None]] = {}
        for name in _global_names(code):
            if name not in function.__globals__:
                continue            # a builtin looked up at call time
            value = function.__globals__[name]
            names[name] = _origin(name, value)
        out = cls.__new__(cls)
        out.source, out.names, out.function = source, names, function
        return out


def _global_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _origin(name: str, value: Any) -> tuple[str, str | None]:
    if isinstance(value, types.ModuleType):
        if value.__name__ in _MODULES:
            return value.__name__, None
    else:
        for module_name in _MODULES:
            module = _loaded(module_name)
            if module is not None and getattr(module, name, None) is value:
                return module_name, name
    raise TypeError(f"a compiled function reads {name!r}, which is not from {', '.join(_MODULES)}")


def _loaded(module_name: str):
    """The module if it is importable without side effects we do not want (scipy only when
    already imported: a function that needs it imported it when it was compiled)."""
    if module_name == "builtins":
        return builtins
    if module_name == "numpy":
        return np
    if module_name == "symcalc.compiled":
        return importlib.import_module(__name__)
    import sys
    return sys.modules.get(module_name)


# source -> its function, in this process: derivations of one question under different options
# (a planner's ZeRO stages, recompute modes, schedules) share most of their steps, and each
# definition costs a compile (~0.7 ms)
class Memo:
    """A per-process memo of generated functions that empties itself at ``limit`` entries
    (a bound on memory for a long session; refilling is only the cost of a first use)."""

    def __init__(self, limit: int):
        self.limit = limit
        self.table: dict = {}

    def get(self, key, make: Callable[[], Any]) -> Any:
        """The value for ``key``, made by ``make()`` on first use."""
        value = self.table.get(key)
        if value is None:
            if len(self.table) >= self.limit:
                self.table.clear()
            value = self.table[key] = make()
        return value


_DEFINED = Memo(16384)


def _define(source: str, names: dict[str, tuple[str, str | None]]) -> Callable:
    return _DEFINED.get((source, tuple(sorted(names.items()))), lambda: _define_anew(source, names))


def _define_anew(source: str, names: dict[str, tuple[str, str | None]]) -> Callable:
    namespace: dict[str, Any] = {}
    for name, (module_name, attr) in names.items():
        if module_name not in _MODULES:
            raise TypeError(f"a compiled function may not read from {module_name!r}")
        module = importlib.import_module(module_name)
        namespace[name] = module if attr is None else getattr(module, attr)
    before = set(namespace)
    exec(compile(source, "<symcalc compiled>", "exec"), namespace)   # symcalc's own generated code
    defined = [v for k, v in namespace.items() if k not in before and k != "__builtins__" and callable(v)]
    if len(defined) != 1:
        raise TypeError("a compiled function's source must define exactly one function")
    return defined[0]
