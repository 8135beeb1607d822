"""Parsing and validating formula files into a Library (what the on-disk cache saves).

Loading is strict: every name is checked, every formula is parsed by the whitelist parser and
checked for dimensional consistency, and the first problem fails the load with the file, the
formula id and what is wrong. Each formula is also printed once (its LaTeX as cited) and each
option's conditions compiled, so that the records serve questions without sympy.

This module reads the files and puts the library together in order (quantities, then options,
then formulas, each checked against what came before); each kind of table is read by its own
module: :mod:`symcalc.library.build_quantities`, :mod:`~symcalc.library.build_options`,
:mod:`~symcalc.library.build_formulas`, with the checks they share in
:mod:`~symcalc.library.build_fields`.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from symcalc.errors import LibraryError
from symcalc.library.build_fields import _check_texts, _require_table
from symcalc.library.build_formulas import _display_forms, _load_algorithm, _load_formula
from symcalc.library.build_options import _admit_combinations, _check_option_links, _load_option
from symcalc.library.build_quantities import _check_aliases, _check_capacities, _load_quantity
from symcalc.library.records import FormulaSpec, OptionSpec, QuantitySpec
from symcalc.library.registry import Library

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FILE_KEYS = {"meta", "quantities", "options", "formulas", "algorithms"}


def build(files: list[Path]) -> Library:
    """Parse and validate ``files`` into a Library (the uncached part of load_library)."""
    docs = [(path, _read_toml(path)) for path in files]
    quantities: dict[str, QuantitySpec] = {}
    options: dict[str, OptionSpec] = {}
    meta: dict[str, dict] = {}
    for path, doc in docs:
        meta[path.stem] = _require_table(doc.get("meta", {}), f"{path.name}: [meta]")
        _check_texts(meta[path.stem], tuple(meta[path.stem]), f"{path.name}: [meta]")
        explains = meta[path.stem].get("explains", [])
        if not (isinstance(explains, list) and all(isinstance(x, str) for x in explains)) or \
                not isinstance(meta[path.stem].get("model", ""), str):
            raise LibraryError(f"{path.name}: [meta] 'explains' is a list of quantity names and 'model' a text")
        for name, table in doc.get("quantities", {}).items():
            if name in quantities:
                raise LibraryError(f"{path.name}: quantity '{name}' is already declared in "
                                   f"{quantities[name].file}")
            quantities[name] = _load_quantity(name, table, path.name)
    _check_aliases(quantities)
    _check_capacities(quantities)
    for stem, m in meta.items():
        unknown = [x for x in m.get("explains", ()) if x not in quantities]
        if unknown:
            raise LibraryError(f"{stem}.toml: [meta] explains {', '.join(map(repr, unknown))}, not declared quantities")
    for path, doc in docs:
        for name, table in doc.get("options", {}).items():
            if name in options:
                raise LibraryError(f"{path.name}: option '{name}' is already declared in {options[name].file}")
            options[name] = _load_option(name, table, path.name, quantities)
    _admit_combinations(options)
    _check_option_links(options)
    formulas: dict[str, FormulaSpec] = {}
    symbols = {q.symbol: q for q in quantities.values()}
    for path, doc in docs:
        entries = doc.get("formulas", [])
        if not isinstance(entries, list):
            raise LibraryError(f"{path.name}: 'formulas' must be an array of tables ([[formulas]])")
        algorithms = doc.get("algorithms", [])
        if not isinstance(algorithms, list):
            raise LibraryError(f"{path.name}: 'algorithms' must be an array of tables ([[algorithms]])")
        memo = _memo_key(path, doc, docs)
        loaded = _LOADED.get(memo) if memo else None
        if loaded is None:
            shown = _display_forms(entries, quantities)
            loaded = [_load_formula(t, path.name, quantities, options, symbols, shown.get(i))
                      for i, t in enumerate(entries)]
            loaded += [_load_algorithm(t, path.name, quantities, options) for t in algorithms]
            if memo:
                _LOADED[memo] = loaded
        for f in loaded:
            if f.id in formulas:
                raise LibraryError(f"{path.name}: formula id '{f.id}' is already used in {formulas[f.id].file}")
            formulas[f.id] = f
    return Library(quantities, options, formulas, files, meta)


# A file's formulas, parsed and checked, by what they depend on (see _memo_key): a library
# built again with one more file (a user's --formulas, a test's) parses only the new file.
_LOADED: dict[tuple, list] = {}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _memo_key(path: Path, doc: dict, docs: list[tuple[Path, dict]]) -> tuple | None:
    """What a file's formulas depend on: the file's own tables, and the declarations (as
    written) of every quantity and option they name. The same key gives the same formulas
    whatever other files are loaded beside it. None when the file is not plain data."""
    try:
        text = repr((doc.get("formulas", []), doc.get("algorithms", [])))
    except Exception:
        return None
    names = set(_IDENTIFIER.findall(text))
    declared: list = []
    for other, d in docs:
        for kind in ("quantities", "options"):
            table = d.get(kind, {})
            if isinstance(table, dict):
                declared += [(kind, n, other.name, repr(table[n])) for n in sorted(names & set(table))]
    return (path.name, text, tuple(declared))


MAX_FILE_BYTES = 8 << 20      # the built-in files are tens of kB


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise LibraryError(f"{path.name}: larger than {MAX_FILE_BYTES >> 20} MB; not a formula file")
        doc = tomllib.loads(data.decode("utf-8"))
    except tomllib.TOMLDecodeError as e:
        raise LibraryError(f"{path.name}: not valid TOML: {e}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise LibraryError(f"{path.name}: cannot be read: {e}") from None
    except RecursionError:
        raise LibraryError(f"{path.name}: nested too deeply to be a formula file") from None
    unknown = set(doc) - FILE_KEYS
    if unknown:
        raise LibraryError(f"{path.name}: unknown top-level table(s) {sorted(unknown)}; "
                           f"a formula file holds {sorted(FILE_KEYS)}")
    return doc
