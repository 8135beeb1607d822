"""symcalc: the arithmetic of training large models, as equations you can solve for anything.

    >>> import symcalc
    >>> r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day",
    ...                   mfu=0.45, peak_flops="989 TFLOP/s")
    >>> r.value, r.unit
    (94.0, '')

See README.md for the command line.
"""

from .api import solve
from .compare import Comparison, compare
from .errors import (DimensionError, DomainError, LibraryError, MalformedValueError, NoSolutionError,
                     OutOfBoundsError, SymcalcError, UnderdeterminedError, UnknownNameError)
from .library import Library, default_library, load_library
from .result import Result
from .sweep import Sweep, sweep
from .units import Q, registry

__version__ = "0.1.0"

__all__ = ["solve", "sweep", "Sweep", "compare", "Comparison", "Result", "Library", "load_library",
           "default_library", "Q", "registry",
           "SymcalcError", "DimensionError", "DomainError", "LibraryError", "MalformedValueError",
           "NoSolutionError", "OutOfBoundsError", "UnderdeterminedError", "UnknownNameError",
           "__version__"]
