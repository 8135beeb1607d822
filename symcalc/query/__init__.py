"""A question and its answer: given values, solve / sweep / compare / check, limit-aware
rounding, and the result records the renderers read."""

import sys

from symcalc import _Layer

sys.modules[__name__].__class__ = _Layer     # tells symcalc when a submodule of this layer is imported
