"""A hardware profile from a file: one table of ``formulas/presets/hardware.toml`` in a TOML file
of its own (what ``symcalc calibrate`` writes), optionally on a built-in ``base``."""

from __future__ import annotations

import sys
from pathlib import Path

from symcalc.errors import (
    MalformedValueError,
    unknown_key,
)
from symcalc.library.builtin_presets import Preset, builtin_named, label, read_document, value_tables

MAX_PROFILE_BYTES = 1 << 20     # a profile is one table of a few kB
PROFILE_KEYS = {"title", "aliases", "source", "notes", "values", "peak_flops", "base"}


def hardware_from_file(path: str | Path) -> Preset:
    """A hardware profile from a TOML file: one table ``[name]`` as in
    ``formulas/presets/hardware.toml`` (title, source, ``values.X = { value, source, basis }``,
    ``peak_flops.DTYPE = { ... }``), optionally ``base = "h100"``: start from that built-in
    preset and override it with the file's values. What ``symcalc calibrate`` will write.

    Whether each name is a quantity of the library, and each value of its dimension, is checked
    against the library the question uses (:func:`symcalc.query.presetvalues.check_profile`).

    Returns
    -------
    Preset
        A hardware preset keyed by the table's name, ``file`` the path.

    Raises
    ------
    MalformedValueError
        The file is missing, not a regular file, too large, not text or not TOML; holds other
        than one table; has unknown keys; or a value without a value or a source.
    UnknownNameError
        ``base`` names no built-in hardware preset (the closest names are suggested).
    """
    p = Path(path)
    where = f"hardware profile '{p}'"
    doc = _read_profile(p, where)
    tables = [k for k, v in doc.items() if isinstance(v, dict)]
    loose = [k for k in doc if k not in tables]
    if loose or len(tables) != 1:
        found = f"top-level key '{loose[0]}' outside a table" if loose else f"{len(tables)} tables"
        raise MalformedValueError(f"{where}: {found}; a profile holds exactly one table [name] (with title, "
                                  "source, values.X = { value, source }, peak_flops.DTYPE = { value, source })")
    key = tables[0]
    table = doc[key]
    here = f"{where}: [{key}]"
    wrong = unknown_key(table, PROFILE_KEYS, "A profile holds")
    if wrong:
        raise MalformedValueError(f"{here}: {wrong}")
    for text_key in ("title", "source", "notes", "base"):
        if text_key in table and not isinstance(table[text_key], str):
            raise MalformedValueError(f"{here}: {text_key} is text")
    aliases = table.get("aliases", [])     # kept as hardware.toml's tables keep them (a copied table reads)
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise MalformedValueError(f"{here}: aliases is a list of names")
    values, basis, peaks, peak_basis = value_tables(table, here, MalformedValueError)
    if not values and not peaks:
        raise MalformedValueError(f"{here}: no values (values.X = {{ value = ..., source = ... }})")
    source = table.get("source") or str(p)
    if "base" in table:
        base = builtin_named("hardware", table["base"], f"{here}: base")
        basis = {**{k: v for k, v in base.basis.items() if k not in values}, **basis}
        peak_basis = {**{k: v for k, v in base.peak_basis.items() if k not in peaks}, **peak_basis}
        values, peaks = {**base.values, **values}, {**base.peak_flops, **peaks}
        source = f"{source}; on {base.key} ({base.source})"
    name = label(key)
    return Preset(kind="hardware", key=name, title=label(table.get("title") or f"{name} (from {p.name})"),
                  source=source, notes=table.get("notes", ""), aliases=tuple(label(a) for a in aliases), values=values,
                  peak_flops=peaks, basis=basis, peak_basis=peak_basis, file=str(p))



def _read_profile(p: Path, where: str) -> dict:
    """The TOML document of a profile file; a clear error for anything else (no such file, not a
    regular file, too large, not text, not TOML, nested beyond reason)."""
    if sys.version_info >= (3, 11):   # start-up: a question without a profile never reads TOML here
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    return read_document(p, where, MAX_PROFILE_BYTES, "a hardware profile is a few kB", tomllib.loads,
                         lambda e: f"not valid TOML ({e})", "a hardware profile")

