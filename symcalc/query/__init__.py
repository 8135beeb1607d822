"""A question and its answer: given values, solve / sweep / compare / check, limit-aware
rounding, and the result records the renderers read."""

import sys
import types


class _Layer(types.ModuleType):
    """A layer package that tells ``symcalc`` when one of its submodules is imported, so that the
    package's exports are bound then (as eager imports would bind them), not on first use."""

    def __setattr__(self, name: str, value) -> None:
        types.ModuleType.__setattr__(self, name, value)
        if isinstance(value, types.ModuleType):
            sys.modules["symcalc"]._bind(value)


sys.modules[__name__].__class__ = _Layer
