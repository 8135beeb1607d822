"""symcalc: the arithmetic of training large models, as equations you can solve for anything.

    >>> import symcalc
    >>> r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day",
    ...                   mfu=0.45, peak_flops="989 TFLOP/s")
    >>> r.value, r.unit
    (94.0, '')

See README.md for the command line.

The names below are imported on first use, not with the package: ``import symcalc.cli`` (what
the ``symcalc`` command runs first) then costs nothing, so that the command can answer Ctrl-C
during its own start-up (a second of sympy, numpy and pint) with one line instead of a
traceback. ``solve``, ``sweep``, ``compare`` and ``check`` are whole questions: they take a
``time_limit`` keyword (seconds, None for none; default SYMCALC_TIME_LIMIT or
symcalc.budget.DEFAULT_QUESTION_LIMIT, 30 s) and raise TimeLimitError when it runs out;
``plan`` too, with symcalc.budget.DEFAULT_PLAN_LIMIT (120 s: a first plan solves up to 48
option combinations symbolically; benchmarks/planner.py times it), and ``calibrate`` with
DEFAULT_CALIBRATE_LIMIT.
"""

from __future__ import annotations

import importlib
import types
from typing import TYPE_CHECKING

__version__ = "0.1.0"

_QUESTION = "DEFAULT_QUESTION_LIMIT"
# public name -> (module, attribute, the symcalc.budget constant of its default time limit when
# it is a whole question, else None)
_EXPORTS = {
    "solve": ("query.solve", "solve", _QUESTION), "sweep": ("query.sweep", "sweep", _QUESTION),
    "Sweep": ("query.sweep", "Sweep", None), "compare": ("query.compare", "compare", _QUESTION),
    "check": ("query.check", "check", _QUESTION), "Check": ("query.check", "Check", None),
    "plan": ("planner.search", "plan", "DEFAULT_PLAN_LIMIT"),
    "calibrate": ("query.calibration_api", "calibrate", "DEFAULT_CALIBRATE_LIMIT"),
    "Calibration": ("query.calibrate", "Calibration", None),
    "PlanResult": ("planner.result", "PlanResult", None), "Comparison": ("query.compare", "Comparison", None),
    "Result": ("query.results", "Result", None), "Library": ("library.loading", "Library", None),
    "load_library": ("library.loading", "load_library", None), "default_library": ("library.loading", "default_library", None),
    "Q": ("units", "Q", None), "registry": ("units", "registry", None),
    **{name: ("errors", name, None) for name in (
        "SymcalcError", "DimensionError", "DomainError", "LibraryError", "MalformedValueError", "NoSolutionError",
        "OutOfBoundsError", "UnderdeterminedError", "UnknownNameError", "TimeLimitError")},
}

__all__ = [*_EXPORTS, "__version__"]

if TYPE_CHECKING:   # pragma: no cover - for type checkers and editors
    from symcalc.errors import (
        DimensionError,
        DomainError,
        LibraryError,
        MalformedValueError,
        NoSolutionError,
        OutOfBoundsError,
        SymcalcError,
        TimeLimitError,
        UnderdeterminedError,
        UnknownNameError,
    )
    from symcalc.library.loading import Library, default_library, load_library
    from symcalc.planner.result import PlanResult
    from symcalc.planner.search import plan
    from symcalc.query.calibrate import Calibration
    from symcalc.query.calibration_api import calibrate
    from symcalc.query.check import Check, check
    from symcalc.query.compare import Comparison, compare
    from symcalc.query.results import Result
    from symcalc.query.solve import solve
    from symcalc.query.sweep import Sweep, sweep
    from symcalc.units import Q, registry


del _QUESTION


def _export(name: str, module: types.ModuleType):
    value = getattr(module, _EXPORTS[name][1])
    limit = _EXPORTS[name][2]
    if limit is not None:
        from symcalc import budget  # on use: the command line starts without it (start-up, Ctrl-C)
        value = budget.limited(value, getattr(budget, limit), prepare=_built_in_library)
    return value


def _built_in_library() -> None:
    """The built-in library, loaded once per process before a question's time limit starts."""
    from symcalc.library.loading import default_library  # on use: importing symcalc stays light
    default_library()


def __getattr__(name: str):
    """An export, imported and bound on first use (PEP 562): ``import symcalc`` stays light."""
    if name not in _EXPORTS:
        raise AttributeError(f"module 'symcalc' has no attribute {name!r}")
    value = _export(name, importlib.import_module(f".{_EXPORTS[name][0]}", __name__))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
