"""The formula library as data: records, the expression parser and its guards, loading and
validation of the TOML files, presets and the options given values imply. Nothing here solves."""

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
