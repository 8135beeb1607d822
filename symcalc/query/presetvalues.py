"""Presets as known values of a question: read against the library, and what the answer says of them.

A preset (symcalc.library.presets) is data: values with their sources. Here its values become
given values of a question (below the user's own, never the target unless published), a
hardware profile read from a file is checked against the library the question uses (every name
a quantity, every value of its dimension), and the preset values an answer leans on that were
not measured (``basis = "derived"`` or ``"assumed"``) become findings.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

from symcalc.errors import (
    AmbiguousUnitError,
    ConflictError,
    DimensionError,
    DomainError,
    LibraryError,
    MalformedValueError,
    UnknownNameError,
    closest_names,
    did_you_mean,
)
from symcalc.findings import Finding
from symcalc.library.builtin_presets import PEAK, peak_dtype
from symcalc.library.presets import UNMEASURED, Preset, all_presets, find_preset
from symcalc.library.registry import Library
from symcalc.query.values import GivenValue, read_value
from symcalc.units.format import with_unit


def presets_of(hardware: str | None, model: str | None, layout: Mapping[str, object] | None = None) -> list[Preset]:
    """The presets a question names (hardware first: its values win over the model's), then the
    values of the run's layout admitted to it (symcalc.query.runlayout), as a preset of its own:
    known as a preset's are, below the values given, and said as the layout's in the answer."""
    out = []
    if hardware:
        out.append(find_preset("hardware", str(hardware)))
    if model:
        out.append(find_preset("model", str(model)))
    if layout:
        out.append(Preset(kind="layout", key="of the run", title="the run's layout", source="the run's layout",
                          values={name: (str(v), "where the question's values leave it open") for name, v in layout.items()}))
    return out


def preset_values(lib: Library, presets: list[Preset], opts: Mapping[str, str], target: str | None,
                  given: Mapping[str, GivenValue]) -> dict[str, GivenValue]:
    """Known values from presets, below the user's own and never the target (unless published,
    or ``target`` is None: every value, for a target nothing else determines).

    ``peak_flops`` and ``peak_flops_DTYPE`` of the compute dtype name one fact (the dense peak
    the precision computes at): a value the user gives under either name is the value of both,
    so a preset's never stands beside it (MFU and the step time read the same peak)."""
    out: dict[str, GivenValue] = {}
    dtype = lib.compute_dtype(opts)
    same = _same_fact(lib, dtype, given)
    for preset in presets:
        figures = preset.resolve(dict(opts), dtype)
        for name, (text, source) in figures.items():
            if name not in lib.quantities:
                if peak_dtype(name, dtype) is not None:
                    continue        # a dtype's peak no formula of this library reads
                raise LibraryError(f"preset {preset.key} sets '{name}', which the formula library does not define")
            if (name == target and name not in preset.published) or name in given or name in out:
                continue
            yielded = [n for n in lib.quantities[name].yields_to
                       if (n in given and not given[n].origin) or n == target]
            if yielded:         # the user's own value of what decides it wins (said by the answer), as
                continue        # does the question: the longest output is not read off a training context
            if name in same:
                gv = read_value(lib.quantities[name], given[same[name]].text)
                gv.origin = f"as {same[name]} (given): the same fact as {name} under these options"
            else:
                gv = read_value(lib.quantities[name], text)
                gv.origin = f"{preset.label}: {source}"
            out[name] = gv
        out.update(_fractions(lib, preset, figures, given, out))
    return out


def _fractions(lib: Library, preset: Preset, figures: Mapping[str, tuple[str, str]],
               given: Mapping[str, GivenValue], known: Mapping[str, GivenValue]) -> dict[str, GivenValue]:
    """The fractions (``ratio_of``: a measured figure over its datasheet figure) of the preset's
    figures that yielded to a given datasheet value and to nothing else: the H100's measured
    decode rate, 1.905 of 3.35 TB/s, is 0.5686 of whatever hbm_bandwidth is given, and a formula
    of the library scales it there (so a sweep of hbm_bandwidth moves it too). O(fractions)."""
    out = {}
    for name in lib.fractions:
        q = lib.quantities[name]
        if name in given or name in known:
            continue
        figure, base = q.ratio_of
        mine = given.get(base)
        others = [n for n in lib.quantities[figure].yields_to if n != base and n in given]
        if mine is None or mine.origin or figure in given or figure in known or others \
                or figure not in figures or base not in figures:
            continue
        top, bottom = (read_value(lib.quantities[n], figures[n][0]) for n in (figure, base))
        ratio = float(top.magnitude / bottom.magnitude)
        out[name] = GivenValue(name, with_unit(ratio / q.factor, q.display_unit), ratio,
                               f"{preset.label}: {figure} over {base}, {top.text} / {bottom.text} "
                               f"({figures[figure][1]}), taken to the given {base}")
    return out


def yielded(lib: Library, presets: list[Preset], opts: Mapping[str, str], given: Mapping[str, GivenValue],
            used: Iterable[str]) -> list[str]:
    """What the answer says of each preset figure a given value replaced (``yields_to``): the
    figure, the preset and the given value that stands for it, for those the answer ``used``."""
    dtype, used, out = lib.compute_dtype(opts), set(used), []
    for preset in presets:
        for name, (text, _) in preset.resolve(dict(opts), dtype).items():
            q = lib.quantities.get(name)
            mine = [n for n in (q.yields_to if q else ()) if n in given and not given[n].origin]
            if mine and name in used and name not in given:
                share = [f for f in lib.fractions if lib.quantities[f].ratio_of == (name, mine[0]) and f in given]
                how = f"is taken as its fraction of the preset's {mine[0]} ({given[share[0]].text}) of the given " \
                      if share else "is not used; the given "
                out.append(f"{name}: {preset.label}'s {text} {how}{mine[0]} = {given[mine[0]].text}"
                           f"{'' if share else ' decides it'} (give {name} to set it apart)")
    return out


def _same_fact(lib: Library, dtype: str | None, given: Mapping[str, GivenValue]) -> dict[str, str]:
    """The names of the compute dtype's dense peak the user did not give -> the one they gave
    (empty unless they gave exactly one of ``peak_flops`` and ``peak_flops_DTYPE``)."""
    names = [n for n in (PEAK, f"{PEAK}_{dtype}") if dtype and n in lib.quantities]
    mine = [n for n in names if n in given and not given[n].origin]       # the user's own, not a preset's
    if len(mine) == 2 and not np.allclose(given[mine[0]].magnitude, given[mine[1]].magnitude, rtol=1e-9, atol=0):
        a, b = (given[n] for n in mine)
        raise ConflictError(f"{a.name} = {a.text} and {b.name} = {b.text} are one fact under these options (the dense "
                            f"peak of {dtype}, the dtype the math runs in): give one")
    return {n: mine[0] for n in names if n not in given} if len(mine) == 1 else {}


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
        canonical = lib.aliases.get(name)
        if canonical is not None and name not in lib.quantities:     # one name per fact
            dtype = peak_dtype(canonical, None)
            way = f"peak_flops.{dtype or 'bf16'} = {{ ... }}" if dtype is not None else f"values.{canonical}"
            raise UnknownNameError(f"{where}: values.{name}: '{name}' is another name of {canonical}; write {way}",
                                   [canonical])
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
            if name in given and knowns[name].origin.startswith(p.label + ":"):
                basis = p.basis_of(name, dtype)
                if basis in UNMEASURED:
                    out.append(Finding("unmeasured", name, {"value": knowns[name].text, "preset": p.label,
                                                            "basis": basis, "source": given[name][1]}))
                break
    return out
