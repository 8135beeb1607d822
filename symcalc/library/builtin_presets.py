"""Built-in presets: the ``Preset`` record, the tables of ``formulas/presets`` it is read from,
and lookup by key or alias.

``formulas/presets/hardware.toml`` and ``models.toml`` hold known values of real hardware and
real models, each with its source. Each value may say how it is known (``basis``: measured,
datasheet, derived or assumed). Files a user names (a hardware profile, a config.json) are read
by :mod:`symcalc.library.profiles` and :mod:`symcalc.library.hfconfig` into the same record;
:func:`symcalc.library.presets.find_preset` decides which an argument is.
"""

from __future__ import annotations

import re

import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from symcalc.errors import (
    LibraryError,
    MalformedValueError,
    UnknownNameError,
    closest_names,
    did_you_mean,
    unknown_key,
)
from symcalc.findings import Finding
from symcalc.library.loading import formula_dir

# a preset kind -> the name of its data file under formulas/presets (and of `symcalc list ...`)
KINDS = {"hardware": "hardware", "model": "models"}
PRESET_KEYS = {"title", "aliases", "source", "notes", "options", "values", "peak_flops", "published"}
VALUE_KEYS = {"value", "source", "basis"}
# how a preset value is known (optional ``basis`` beside value and source; "fitted": by calibration on
# measured runs, calibration/fit.py or `symcalc calibrate`): an answer that uses a
# derived or assumed one says so (finding "unmeasured")
BASES = ("measured", "datasheet", "fitted", "derived", "assumed")
UNMEASURED = ("derived", "assumed")
# a hardware's dense peaks are one table, ``peak_flops.DTYPE``: they reach a question as
# ``peak_flops`` (the precision's compute dtype) and ``peak_flops_DTYPE`` (every dtype), never
# as ``values``, so one entry is the one value of the fact under each name (Preset.resolve)
PEAK = "peak_flops"


@dataclass
class Preset:
    """One piece of hardware or one model: values (with sources) and implied options."""

    kind: str                                     # "hardware" or "model" (a key of KINDS)
    key: str
    title: str
    source: str
    aliases: tuple[str, ...] = ()
    notes: str = ""
    values: dict[str, tuple[str, str]] = field(default_factory=dict)      # quantity -> (value, source)
    peak_flops: dict[str, tuple[str, str]] = field(default_factory=dict)  # compute dtype -> (value, source)
    options: dict[str, str] = field(default_factory=dict)
    published: tuple[str, ...] = ()     # values kept even when asked for (the shapes do not model them)
    findings: tuple[Finding, ...] = ()  # what a reader of this preset should know (config.json caveats)
    basis: dict[str, str] = field(default_factory=dict)       # quantity -> how its value is known (BASES)
    peak_basis: dict[str, str] = field(default_factory=dict)  # compute dtype -> how its peak is known
    file: str = ""                      # the profile file it was read from ("" for a built-in preset)

    @property
    def label(self) -> str:
        """How answers name it: ``hardware h100_sxm``."""
        return f"{self.kind} {self.key}"

    def basis_of(self, name: str, compute_dtype: str | None) -> str | None:
        """How the value this preset gives for ``name`` is known (``basis`` in the data), or None
        when unstated; ``peak_flops`` is the dense peak of ``compute_dtype``, ``peak_flops_DTYPE``
        that of DTYPE (:meth:`resolve`)."""
        dtype = peak_dtype(name, compute_dtype)
        return self.peak_basis.get(dtype) if dtype is not None else self.basis.get(name)

    def resolve(self, options: dict[str, str], compute_dtype: str | None) -> dict[str, tuple[str, str]]:
        """Values this preset gives under ``options``: its values, each dense peak of its
        ``peak_flops`` table as ``peak_flops_DTYPE``, and the peak of the compute dtype the
        precision option implies (its ``compute_dtype`` in the option data) as ``peak_flops``,
        the one MFU and the step time read (a precision that names none gets no peak_flops from
        a preset: nothing is guessed). One entry, ``peak_flops.bf16``, is thus the one value of
        the fact under every name a formula reads it by."""
        out = dict(self.values)
        out.update({PEAK + "_" + dtype: entry for dtype, entry in self.peak_flops.items()})
        if compute_dtype in self.peak_flops:
            out[PEAK] = self.peak_flops[compute_dtype]
        return out

    @property
    def fields(self) -> list[str]:
        """The names of the values this preset may give (:meth:`resolve`, under any options)."""
        return [*self.values, *([PEAK] if self.peak_flops else []), *(PEAK + "_" + d for d in self.peak_flops)]


def peak_dtype(name: str, compute_dtype: str | None) -> str | None:
    """The dtype whose dense peak ``name`` is: ``compute_dtype`` for ``peak_flops``, DTYPE for
    ``peak_flops_DTYPE``; None for any other name."""
    if name == PEAK:
        return compute_dtype or ""
    return name[len(PEAK) + 1:] if name.startswith(PEAK + "_") else None


def presets_dir() -> Path:
    return formula_dir() / "presets"


@lru_cache(maxsize=1)
def all_presets() -> dict[str, dict[str, Preset]]:
    """Every built-in preset, by kind and key (loaded once).

    Returns
    -------
    ``{kind: {key: Preset}}`` for the kinds of :data:`KINDS`.

    Raises
    ------
    LibraryError
        A preset file cannot be read, or a preset in it has unknown or incomplete keys.
    """
    if sys.version_info >= (3, 11):   # start-up: a question without presets never reads them
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    out: dict[str, dict[str, Preset]] = {}
    for kind, stem in KINDS.items():
        path = presets_dir() / f"{stem}.toml"
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise LibraryError(f"presets/{path.name}: cannot be read: {e}") from None
        out[kind] = {key: load_table(kind, key, table, path.name) for key, table in doc.items()}
    return out


def load_table(kind: str, key: str, table: dict, file: str) -> Preset:
    where = f"presets/{file}: [{key}]"
    unknown = set(table) - PRESET_KEYS
    if unknown:
        raise LibraryError(f"{where}: unknown key(s) {sorted(unknown)}")
    values, basis, peaks, peak_basis = value_tables(table, where, LibraryError)
    return Preset(kind=kind, key=key, title=str(table.get("title", key)), source=str(table.get("source", "")),
                  aliases=tuple(table.get("aliases", [])), notes=str(table.get("notes", "")),
                  values=values, peak_flops=peaks, basis=basis, peak_basis=peak_basis,
                  options={k: str(v).lower() if isinstance(v, bool) else str(v)
                           for k, v in table.get("options", {}).items()},
                  published=tuple(table.get("published", [])))


def value_tables(table: dict, where: str, error: type[Exception]) -> tuple[dict, dict, dict, dict]:
    """A preset's or profile's ``values`` and ``peak_flops`` (with their bases); a malformed
    entry raises ``error`` naming ``where``."""
    try:
        values, basis = _pairs(table, "values")
        peak = next((name for name in values if peak_dtype(name, None) is not None), None)
        if peak is not None:
            dtype = peak_dtype(peak, None) or "bf16"
            raise ValueError(f"values.{peak}: a dense peak is written peak_flops.{dtype} = {{ value = ..., source = ... }} "
                             "(one entry a dtype: it gives peak_flops and peak_flops_DTYPE alike)")
        return (values, basis, *_pairs(table, "peak_flops"))
    except ValueError as e:
        raise error(f"{where}: {e}") from None


def _pairs(table: dict, section: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """``section.NAME = { value, source, basis }`` entries: (name -> (value, source), name -> basis).

    Raises ValueError (the caller adds where) for an entry that is not such a table, lacks a
    value or a source, has another key, or an unknown basis."""
    entries = table.get(section, {})
    if not isinstance(entries, dict):
        raise ValueError(f"{section} is a table of {{ value = ..., source = ... }} entries")
    out, basis = {}, {}
    for name, spec in entries.items():
        if not isinstance(spec, dict):
            raise ValueError(f"{section}.{name} is {{ value = ..., source = \"where it comes from\" }}")
        wrong = unknown_key(spec, VALUE_KEYS, "A value holds")
        if wrong:
            raise ValueError(f"{section}.{name}: {wrong}")
        if "value" not in spec or isinstance(spec["value"], (bool, dict, list)):
            raise ValueError(f"{section}.{name} needs a value (a number, or text with a unit)")
        if not isinstance(spec.get("source"), str) or not spec["source"].strip():
            raise ValueError(f"{section}.{name} needs a source (where the value comes from)")
        if "basis" in spec:
            if spec["basis"] not in BASES:
                raise ValueError(f"{section}.{name}: basis is one of {', '.join(BASES)}; got {spec['basis']!r:.40}")
            basis[name] = spec["basis"]
        out[name] = (str(spec["value"]), spec["source"])
    return out, basis


def builtin_preset(kind: str, name: str, files: bool = False) -> Preset:
    """A built-in preset by key or alias (case-insensitive), never a file (what a server takes
    from its clients). Raises UnknownNameError with the closest names; ``files``: the message
    also says a file may be given."""
    found = _lookup(kind, name)
    if found is not None:
        return found
    pool = [n for p in all_presets()[kind].values() for n in (p.key, *p.aliases)]
    near = closest_names(name, pool)
    hint = f" Did you mean: {', '.join(near)}?" if near else ""
    file = " (or the path of a Hugging Face config.json: config.json, ./NAME)" if kind == "model" else \
        " (or the path of a hardware profile: ours.toml, ./NAME)"
    raise UnknownNameError(f"unknown {kind} '{name}'.{hint} See `symcalc list {KINDS[kind]}`{file if files else ''}",
                           near)


def _lookup(kind: str, name: str) -> Preset | None:
    """The built-in preset of ``kind`` with this key or alias (case, ``-``, ``_`` and spaces
    aside: 'H100 SXM' is h100_sxm), or None."""
    def plain(n: str) -> str:
        return re.sub(r"[\s_-]+", "-", n.strip().lower())
    wanted = plain(name)
    for p in all_presets()[kind].values():
        if wanted in {plain(n) for n in (p.key, *p.aliases)}:
            return p
    return None


def builtin_named(kind: str, name: str, where: str) -> Preset:
    """A built-in preset by key or alias, for a profile's ``base`` (never a file)."""
    found = _lookup(kind, name)
    if found is None:
        pool = [n for p in all_presets()[kind].values() for n in (p.key, *p.aliases)]
        raise UnknownNameError(f"{where} = '{name}' is not a built-in {kind} preset.{did_you_mean(name, pool)} "
                               f"See `symcalc list {KINDS[kind]}`", closest_names(name, pool))
    return found


def read_bounded(p: Path, where: str, limit: int, usual: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or a one-line error."""
    try:
        if not p.is_file():
            raise MalformedValueError(f"{where}: not a file" if p.exists() else f"{where}: no such file")
        with open(p, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        raise MalformedValueError(f"{where}: cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise MalformedValueError(f"{where}: larger than {limit >> 20} MB; {usual}")
    return data


def read_document(p: Path, where: str, limit: int, usual: str, parse, invalid, nested: str):
    """A user's file (a config.json, a hardware profile) parsed by ``parse`` (text -> object),
    or a one-line error: not a regular file, larger than ``limit``, not text, ``invalid(e)``
    for the parser's ValueError (JSON's and TOML's errors are ValueErrors), or nested
    beyond reason (``nested``: what such a file is)."""
    data = read_bounded(p, where, limit, usual)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise MalformedValueError(f"{where}: not a text file") from None
    try:
        return parse(text)
    except RecursionError:
        raise MalformedValueError(f"{where}: nested too deeply to be {nested}") from None
    except ValueError as e:
        raise MalformedValueError(f"{where}: {invalid(e)}") from None


def label(raw: object) -> str:
    """A model's name from its config, fit to print: printable characters, at most 80."""
    text = "".join(c if c.isprintable() else " " for c in str(raw)).strip()
    return text if len(text) <= 80 else text[:77] + "..."

