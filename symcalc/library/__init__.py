"""The formula library as data: records, the expression parser and its guards, loading and
validation of the TOML files, presets and the options given values imply. Nothing here solves."""

import sys

from symcalc import _Layer

sys.modules[__name__].__class__ = _Layer     # tells symcalc when a submodule of this layer is imported
