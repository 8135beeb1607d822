"""Presets as known values of a question.

A preset (symcalc.library.presets) is data: values with their sources. Here its values become
given values of a question: below the user's own, never the target unless published.
"""

from __future__ import annotations

from collections.abc import Mapping

from symcalc.errors import LibraryError
from symcalc.library.presets import Preset, find_preset
from symcalc.library.registry import Library
from symcalc.query.values import GivenValue, read_value


def presets_of(hardware: str | None, model: str | None) -> list[Preset]:
    """The presets a question names (hardware first: its values win over the model's)."""
    out = []
    if hardware:
        out.append(find_preset("hardware", str(hardware)))
    if model:
        out.append(find_preset("model", str(model)))
    return out


def preset_values(lib: Library, presets: list[Preset], opts: Mapping[str, str], target: str | None,
                  given: Mapping[str, GivenValue]) -> dict[str, GivenValue]:
    """Known values from presets, below the user's own and never the target (unless published,
    or ``target`` is None: every value, for a target nothing else determines)."""
    out: dict[str, GivenValue] = {}
    dtype = lib.compute_dtype(opts)
    for preset in presets:
        for name, (text, source) in preset.resolve(dict(opts), dtype).items():
            if name not in lib.quantities:
                raise LibraryError(f"preset {preset.key} sets '{name}', which the formula library does not define")
            if (name == target and name not in preset.published) or name in given or name in out:
                continue
            gv = read_value(lib.quantities[name], text)
            gv.origin = f"{preset.kind} {preset.key}: {source}"
            out[name] = gv
    return out
