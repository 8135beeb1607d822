"""Compiled expressions that survive pickling as their bytecode, and the guards they call.

sympy's ``lambdify`` writes a Python function from an expression; the function itself cannot
be pickled, and rebuilding it means importing sympy. A :class:`CompiledFunction` keeps that
function's code object (marshalled) and the names it reads (numpy functions, the guards below),
so a cached derivation runs again with numpy alone: the function is rebuilt from its code
object, no text is parsed or executed. The code is only ever what symcalc generated from its
own formula files and the on-disk cache authenticated (:mod:`symcalc.cache`, which also keys
entries by the Python version that marshalled them); the names it may read are resolved from
numpy, scipy.special, this module and ``builtins`` only.
"""

from __future__ import annotations

import builtins
import importlib
import marshal
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
    """A generated function: callable, and picklable as (marshalled code, names).

    Parameters
    ----------
    code:
        ``marshal.dumps`` of the function's code object.
    names:
        Global name -> (module, attribute or None for the module itself), for every global
        the function reads.
    """

    __slots__ = ("code", "names", "function")

    def __init__(self, code: bytes, names: dict[str, tuple[str, str | None]]):
        self.code = code
        self.names = names
        self.function: Callable | None = None   # rebuilt on first call: a cached library holds
        # dozens a question never calls

    def __call__(self, *args: Any) -> Any:
        if self.function is None:
            self.function = _define(self.code, self.names)
        return self.function(*args)

    def __reduce__(self):
        return (CompiledFunction, (self.code, self.names))

    @classmethod
    def wrap(cls, function: Callable) -> CompiledFunction:
        """A CompiledFunction of a generated function, with the modules of the globals it reads
        looked up. Raises TypeError for a function with defaults or a closure, or a global
        that is not from numpy, scipy.special, this module or builtins (it could not be
        rebuilt)."""
        if function.__closure__ or function.__defaults__ or function.__kwdefaults__:
            raise TypeError("a compiled function takes its arguments plainly")
        code = function.__code__
        names: dict[str, tuple[str, str | None]] = {}
        for name in _global_names(code):
            if name not in function.__globals__:
                continue            # a builtin looked up at call time
            value = function.__globals__[name]
            names[name] = _origin(name, value)
        out = cls.__new__(cls)
        out.code, out.names, out.function = marshal.dumps(code), names, function
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


# code -> its function, in this process: derivations of one question under different options
# (a planner's ZeRO stages, recompute modes, schedules) share most of their steps
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


def _define(code: bytes, names: dict[str, tuple[str, str | None]]) -> Callable:
    return _DEFINED.get((code, tuple(sorted(names.items()))), lambda: _define_anew(code, names))


def _define_anew(code: bytes, names: dict[str, tuple[str, str | None]]) -> Callable:
    """The function again: its code object in a namespace of the names it reads."""
    namespace: dict[str, Any] = {"__builtins__": builtins}
    for name, (module_name, attr) in names.items():
        if module_name not in _MODULES:
            raise TypeError(f"a compiled function may not read from {module_name!r}")
        module = importlib.import_module(module_name)
        namespace[name] = module if attr is None else getattr(module, attr)
    compiled = marshal.loads(code)
    if not isinstance(compiled, types.CodeType):
        raise TypeError("a compiled function is kept as a code object")
    return types.FunctionType(compiled, namespace)
