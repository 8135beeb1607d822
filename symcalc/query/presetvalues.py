"""Presets as known values of a question: read against the library, and what the answer says of them.

A preset (symcalc.library.presets) is data: values with their sources. Here its values become
given values of a question (below the user's own, never the target unless published), a
hardware profile read from a file is checked against the library the question uses (every name
a quantity, every value of its dimension), and the preset values an answer leans on that were
not measured (``basis = "derived"`` or ``"assumed"``) become findings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from symcalc.errors import (
    AmbiguousUnitError,
    DimensionError,
    DomainError,
    LibraryError,
    MalformedValueError,
    UnknownNameError,
    closest_names,
    did_you_mean,
)
from symcalc.findings import Finding
from symcalc.library.presets import UNMEASURED, Preset, all_presets, find_preset
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
            gv.origin = f"{preset.label}: {source}"
            out[name] = gv
    return out


def check_profile(lib: Library, preset: Preset) -> None:
    """A hardware profile read from a file, checked against ``lib``: every value names one of its
    quantities and reads as one (unit, dimension, bounds), every peak a compute dtype some
    option or built-in GPU names.

    Raises
    ------
    UnknownNameError
        A value names no quantity of the library (the closest names are suggested).
    MalformedValueError, DimensionError, DomainError
        A value that does not read as its quantity, or a peak of an unknown dtype.
    """
    where = f"hardware profile '{preset.file}'"
    for name, (text, _) in preset.values.items():
        if name not in lib.quantities:
            raise UnknownNameError(f"{where}: values.{name}: the library defines no quantity '{name}'."
                                   f"{did_you_mean(name, lib.quantities)}", closest_names(name, lib.quantities))
        _read(lib, name, text, f"{where}: values.{name}")
    # the dtypes an option computes in, and those the built-in hardware lists (fp16, fp32)
    dtypes = {d for opt in lib.options.values() for d in opt.compute_dtype.values()}
    dtypes |= {d for p in all_presets()["hardware"].values() for d in p.peak_flops}
    for dtype, (text, _) in preset.peak_flops.items():
        if dtype not in dtypes:
            raise MalformedValueError(f"{where}: peak_flops.{dtype}: no option or built-in GPU computes in "
                                      f"'{dtype}'.{did_you_mean(dtype, dtypes)} Dtypes: {', '.join(sorted(dtypes))}")
        _read(lib, "peak_flops", text, f"{where}: peak_flops.{dtype}")


def _read(lib: Library, name: str, text: str, where: str) -> None:
    try:
        read_value(lib.quantities[name], text)
    except (AmbiguousUnitError, MalformedValueError, DimensionError, DomainError) as e:
        raise type(e)(f"{where}: {e.message}") from None


def unmeasured(lib: Library, presets: list[Preset], opts: Mapping[str, str], knowns: Mapping[str, GivenValue],
               names: Iterable[str]) -> list[Finding]:
    """One ``unmeasured`` finding for each of ``names`` (values an answer uses) that a preset
    gave with ``basis = "derived"`` or ``"assumed"``."""
    dtype = lib.compute_dtype(opts)
    out = []
    for name in names:
        if name not in knowns or not knowns[name].origin:
            continue
        for p in presets:          # the first preset that gives it gave it (preset_values)
            given = p.resolve(dict(opts), dtype)
            if name in given:
                basis = p.basis_of(name, dtype)
                if basis in UNMEASURED:
                    out.append(Finding("unmeasured", name, {"value": knowns[name].text, "preset": p.label,
                                                            "basis": basis, "source": given[name][1]}))
                break
    return out
