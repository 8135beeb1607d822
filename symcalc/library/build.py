"""Parsing and validating formula files into a Library (what the on-disk cache saves).

Loading is strict: every name is checked, every formula is parsed by the whitelist parser and
checked for dimensional consistency, and the first problem fails the load with the file, the
formula id and what is wrong. Each formula is also printed once (its LaTeX as cited) and each
option's conditions compiled, so that the records serve questions without sympy.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import sympy
from sympy.core.parameters import evaluate as sympy_evaluate

from symcalc import units
from symcalc.errors import (
    LibraryError,
    did_you_mean,
)
from symcalc.library.algorithms import REGISTRY
from symcalc.library.compiling import compile_expr
from symcalc.library.exprparse import (
    RESERVED,
    ParseError,
    UnitSymbol,
    parse_condition,
    parse_equation,
    unit_symbol,
)
from symcalc.library.exprsize import TooComplex, check_equation
from symcalc.library.printing import latex
from symcalc.library.records import (
    Condition,
    FormulaSpec,
    Interval,
    OptionFallback,
    OptionSpec,
    QuantitySpec,
    Requirement,
)
from symcalc.library.registry import Library, _option_text
from symcalc.library.solvability import classify_all
from symcalc.library.texcheck import UnsafeTeX, check_latex, check_text
from symcalc.units import describe_dimension as show
from symcalc.units.dims import DimensionMismatch, dimension_of

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
ALIAS_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
OPTION_VALUE_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,40}$")
ROUNDING = ("up", "down", "nearest")
QUANTITY_KEYS = {"unit", "display_unit", "latex", "description", "aliases", "domain", "whole",
                 "default", "default_source", "source", "limit", "limit_meaning", "fits_in", "exposed_part_of",
                 "given_is", "limit_priority", "input", "main_input", "plausible", "not_above", "warn_above", "usual",
                 "source_error"}
GIVEN_IS = ("at_most", "at_least")
OPTION_KEYS = {"description", "default", "values", "implied_by", "main_input", "searched", "fallback"}
FALLBACK_KEYS = {"value", "summary", "reason"}
OPTION_VALUE_KEYS = {"description", "sets", "source", "compute_dtype", "hardware_dtype", "options", "supports",
                     "requires"}
FORMULA_KEYS = {"id", "title", "equation", "source", "when", "notes", "default", "forward_only", "from_given",
                "consequence", "approximate", "solved_for", "breakdown", "reports"}
ALGORITHM_KEYS = {"id", "title", "function", "inputs", "output", "source", "when", "notes"}
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


def _check_latex(text: str, where: str) -> None:
    """A quantity's symbol goes into LaTeX as math, unescaped: only the whitelist may pass."""
    try:
        check_latex(text)
    except UnsafeTeX as e:
        raise LibraryError(f"{where}: 'latex' {e}") from None


def _check_texts(table: dict, keys: tuple[str, ...], where: str) -> None:
    """Text fields are escaped wherever they are written; they must hold no control characters."""
    for key in keys:
        value = table.get(key)
        if isinstance(value, str):
            try:
                check_text(value)
            except UnsafeTeX as e:
                raise LibraryError(f"{where}: '{key}' {e}") from None


def _require_table(obj, what: str) -> dict:
    if not isinstance(obj, dict):
        raise LibraryError(f"{what} must be a table")
    return obj


def _check_keys(table: dict, allowed: set[str], what: str) -> None:
    unknown = set(table) - allowed
    if unknown:
        key = sorted(unknown)[0]
        raise LibraryError(f"{what}: unknown key '{key}'.{did_you_mean(key, allowed)}")


def _is_unit_name(name: str) -> bool:
    try:
        units.parse_unit(name)
        return True
    except Exception:
        return False


def _load_quantity(name: str, table, file: str) -> QuantitySpec:
    where = f"{file}: quantity '{name}'"
    table = _require_table(table, where)
    _check_keys(table, QUANTITY_KEYS, where)
    if not NAME_RE.match(name):
        raise LibraryError(f"{where}: names are snake_case (lowercase letters, digits, _)")
    if name in RESERVED or _is_unit_name(name):
        raise LibraryError(f"{where}: the name collides with a function or unit name")
    for key in ("unit", "description", "latex"):
        if not isinstance(table.get(key), str):
            raise LibraryError(f"{where}: '{key}' (text) is required")
    _check_latex(table["latex"], where)
    _check_texts(table, ("description", "source", "default_source", "limit_meaning", "usual"), where)
    unit = table["unit"].strip()
    if unit == "text":
        if table.get("default") is not None or "domain" in table or table.get("whole"):
            raise LibraryError(f"{where}: a text quantity has no default, domain or rounding")
        return QuantitySpec(name=name, unit="", display_unit="", latex=table["latex"],
                            description=table["description"].strip(), file=file,
                            aliases=tuple(table.get("aliases", [])), source=str(table.get("source", "")),
                            kind="text", dim=None, factor=1.0, symbol=sympy.Symbol(name))
    try:
        dim = units.dimensionality(unit)
        display = str(table.get("display_unit", unit)).strip()
        if units.dimensionality(display) != dim:
            raise LibraryError(f"{where}: display_unit '{display}' is {show(units.dimensionality(display))}, "
                               f"but the unit '{unit}' is {show(dim)}")
        factor = units.to_base_factor(display)
    except LibraryError:
        raise
    except Exception as e:
        raise LibraryError(f"{where}: {e}") from None
    try:
        domain = Interval.parse(table.get("domain", "(0, inf)"))
    except ValueError as e:
        raise LibraryError(f"{where}: {e}") from None
    whole = table.get("whole")
    if whole is not None and whole not in ROUNDING:
        raise LibraryError(f"{where}: whole must be one of {ROUNDING}")
    aliases = table.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) and ALIAS_RE.match(a) for a in aliases):
        raise LibraryError(f"{where}: aliases must be a list of names (letters, digits and _)")
    default = table.get("default")
    if default is not None:
        default = str(default)
        _check_value_dimension(default, dim, f"{where}: default")
    limit = table.get("limit")
    if limit is not None:
        limit = str(limit)
        _check_value_dimension(limit, dim, f"{where}: limit")
        if not isinstance(table.get("limit_meaning"), str):
            raise LibraryError(f"{where}: a limit needs 'limit_meaning' (what the value at the limit asks)")
    given_is = table.get("given_is")
    if given_is is not None and given_is not in GIVEN_IS:
        raise LibraryError(f"{where}: given_is must be one of {GIVEN_IS} (a given value is a limit from above "
                           "or from below)")
    priority = table.get("limit_priority", 1)
    if not isinstance(priority, int) or isinstance(priority, bool) or given_is is None and "limit_priority" in table:
        raise LibraryError(f"{where}: limit_priority is a whole number, for a quantity with given_is")
    flags = {key: table.get(key, False) for key in ("input", "main_input", "source_error")}
    if not all(isinstance(v, bool) for v in flags.values()):
        raise LibraryError(f"{where}: 'input', 'main_input' and 'source_error' must be true or false")
    plausible = _plausible_range(table.get("plausible"), dim, where)
    if domain.positive:
        symbol = sympy.Symbol(name, positive=True)
    elif domain.nonnegative:
        symbol = sympy.Symbol(name, nonnegative=True)
    else:
        symbol = sympy.Symbol(name, real=True)
    return QuantitySpec(
        name=name, unit=unit if unit != "count" else "", display_unit=display if display != "count" else "",
        latex=table["latex"], description=table["description"].strip(), file=file,
        aliases=tuple(aliases), domain=domain, whole=whole, default=default,
        default_source=str(table.get("default_source", "")), source=str(table.get("source", "")),
        limit=limit, limit_meaning=str(table.get("limit_meaning", "")).strip(), fits_in=table.get("fits_in"),
        exposed_part_of=table.get("exposed_part_of"),
        given_is=given_is, limit_priority=priority, input=flags["input"], main_input=flags["main_input"], source_error=flags["source_error"], plausible=plausible,
        not_above=_names(table.get("not_above", []), where, "not_above"),
        warn_above=_names(table.get("warn_above", []), where, "warn_above"), usual=str(table.get("usual", "")).strip(),
        dim=dim, factor=factor, symbol=symbol)


def _names(spec, where: str, key: str) -> tuple[str, ...]:
    """A list of quantity names (checked against the library once every quantity is read)."""
    spec = [spec] if isinstance(spec, str) else spec
    if not isinstance(spec, list) or not all(isinstance(x, str) and NAME_RE.match(x) for x in spec):
        raise LibraryError(f"{where}: {key} is a quantity name or a list of them")
    return tuple(spec)


def _plausible_range(spec, dim, where: str) -> tuple[float, float] | None:
    """``plausible = ["1 GB/s", "200 GB/s"]``: (low, high) in base units, or None."""
    if spec is None:
        return None
    if not (isinstance(spec, list) and len(spec) == 2 and all(isinstance(x, (str, int, float)) for x in spec)):
        raise LibraryError(f"{where}: plausible is a pair of values like [\"1 GB/s\", \"200 GB/s\"]")
    bounds = []
    for text in spec:
        _check_value_dimension(str(text), dim, f"{where}: plausible")
        bounds.append(float(units.parse_quantity(str(text), where).to_base_units().magnitude))
    if not 0 < bounds[0] < bounds[1]:
        raise LibraryError(f"{where}: plausible must be two positive values, the lower first")
    return bounds[0], bounds[1]


def _check_capacities(quantities: dict[str, QuantitySpec]) -> None:
    """``fits_in`` names a declared quantity of the same dimension (memory fits in memory), and
    so do every name in ``not_above`` and ``exposed_part_of`` (the total an exposed time is part of)."""
    for q in quantities.values():
        total = q.exposed_part_of
        if total is not None and (not isinstance(total, str) or total not in quantities
                                  or quantities[total].dim != q.dim):
            raise LibraryError(f"{q.file}: quantity '{q.name}': exposed_part_of names {total!r}, which is not a "
                               "declared quantity of the same dimension")
        for other in (*q.not_above, *q.warn_above):
            if other not in quantities or quantities[other].dim != q.dim:
                raise LibraryError(f"{q.file}: quantity '{q.name}': not_above names {other!r}, which is not a "
                                   "declared quantity of the same dimension")
        if q.fits_in is None:
            continue
        cap = quantities.get(q.fits_in) if isinstance(q.fits_in, str) else None
        if cap is None:
            raise LibraryError(f"{q.file}: quantity '{q.name}': fits_in names {q.fits_in!r}, which is not a "
                               "declared quantity")
        if cap.dim != q.dim:
            raise LibraryError(f"{q.file}: quantity '{q.name}' is {show(q.dim)} but fits_in {cap.name} is "
                               f"{show(cap.dim)}")


def _check_value_dimension(text: str, dim, where: str) -> None:
    try:
        q = units.parse_quantity(text, where)
    except Exception as e:
        raise LibraryError(f"{where}: {e}") from None
    got = units.registry().get_dimensionality(q.units)
    if got != dim:
        raise LibraryError(f"{where}: '{text}' is {show(got)}, expected {show(dim)}")
    base = abs(float(q.to_base_units().magnitude))
    if not (base == 0 or 1e-300 <= base <= 1e300):
        raise LibraryError(f"{where}: '{text}' is beyond the range of floating point in base units")


def _check_aliases(quantities: dict[str, QuantitySpec]) -> None:
    seen: dict[str, str] = {}
    for q in quantities.values():
        for a in q.aliases:
            if a in quantities:
                raise LibraryError(f"{q.file}: alias '{a}' of '{q.name}' is the name of another quantity")
            if a in seen:
                raise LibraryError(f"{q.file}: alias '{a}' is used by both '{seen[a]}' and '{q.name}'")
            seen[a] = q.name


def _load_option(name: str, table, file: str, quantities: dict[str, QuantitySpec]) -> OptionSpec:
    where = f"{file}: option '{name}'"
    table = _require_table(table, where)
    _check_keys(table, OPTION_KEYS, where)
    _check_texts(table, ("description",), where)
    if not NAME_RE.match(name):
        raise LibraryError(f"{where}: names are snake_case")
    values_table = _require_table(table.get("values"), f"{where}: values")
    if not values_table:
        raise LibraryError(f"{where}: needs at least one value")
    values: dict[str, str] = {}
    sets: dict[str, dict[str, str]] = {}
    sources: dict[str, str] = {}
    dtypes: dict[str, str] = {}
    needs: dict[str, str] = {}
    option_defaults: dict[str, dict[str, str]] = {}
    supports: dict[str, dict[str, tuple[str, ...]]] = {}
    requires: dict[str, tuple[Requirement, ...]] = {}
    for value, spec in values_table.items():
        vwhere = f"{where} value '{value}'"
        if not OPTION_VALUE_RE.match(value):
            raise LibraryError(f"{where}: value {value[:40]!r} is not a name (letters, digits, _ . + -; at most 40)")
        _check_texts({"description": spec} if isinstance(spec, str) else _require_table(spec, vwhere),
                     ("description", "source"), vwhere)
        if isinstance(spec, str):
            values[value] = spec
            continue
        spec = _require_table(spec, vwhere)
        _check_keys(spec, OPTION_VALUE_KEYS, vwhere)
        values[value] = str(spec.get("description", ""))
        sources[value] = str(spec.get("source", ""))
        if "compute_dtype" in spec:
            dtypes[value] = str(spec["compute_dtype"])
        if "hardware_dtype" in spec:
            needs[value] = str(spec["hardware_dtype"])
        links = _option_links(spec, vwhere, quantities)
        if links[0]:
            option_defaults[value] = links[0]
        if links[1]:
            supports[value] = links[1]
        if links[2]:
            requires[value] = links[2]
        sets[value] = {}
        for qname, text in _require_table(spec.get("sets", {}), f"{vwhere}: sets").items():
            if qname not in quantities:
                raise LibraryError(f"{vwhere}: sets unknown quantity '{qname}'."
                                   f"{did_you_mean(qname, quantities)}")
            _check_value_dimension(str(text), quantities[qname].dim, f"{vwhere}: {qname}")
            sets[value][qname] = str(text)
    default = str(table.get("default", ""))
    if default not in values:
        raise LibraryError(f"{where}: default '{default}' is not one of its values {list(values)}")
    main_input, searched = table.get("main_input", False), table.get("searched", False)
    if not isinstance(main_input, bool) or not isinstance(searched, bool):
        raise LibraryError(f"{where}: 'main_input' and 'searched' must be true or false")
    return OptionSpec(name=name, description=str(table.get("description", "")).strip(), default=default,
                      values=values, sets=sets, sources=sources, file=file, compute_dtype=dtypes, hardware_dtype=needs,
                      implied_by=_implications(table.get("implied_by", []), values, where, quantities),
                      main_input=main_input, searched=searched, option_defaults=option_defaults, supports=supports,
                      requires=requires, fallback=_fallback(table.get("fallback"), values, default, where))


def _fallback(table, values: dict[str, str], default: str, where: str) -> OptionFallback | None:
    """``fallback = { value = "textbook", summary = "...", reason = "..." }``: the value a question
    the default cannot answer takes (see :class:`OptionFallback`); another value than the default,
    with both texts, since the answer says them."""
    if table is None:
        return None
    table = _require_table(table, f"{where}: fallback")
    _check_keys(table, FALLBACK_KEYS, f"{where}: fallback")
    _check_texts(table, ("summary", "reason"), f"{where}: fallback")
    value, summary, reason = (str(table.get(k, "")).strip() for k in ("value", "summary", "reason"))
    if value not in values or value == default:
        raise LibraryError(f"{where}: fallback '{value}' is not one of its values other than the default {default!r}")
    if not summary or not reason:
        raise LibraryError(f"{where}: fallback needs a summary (what '{value}' means) and a reason (what the "
                           "default counts besides, and what to give to get it)")
    return OptionFallback(value, summary, reason)


def _option_links(spec: dict, where: str, quantities: dict[str, QuantitySpec]
                  ) -> tuple[dict[str, str], dict[str, tuple[str, ...]], tuple[Requirement, ...]]:
    """An option value's ``options`` (defaults it sets for other options), ``supports`` (the
    values of other options it runs with) and ``requires`` (conditions on given values), read;
    the option names in the first two are checked once every option is loaded
    (:func:`_check_option_links`)."""
    raw = _require_table(spec.get("options", {}), f"{where}: options")
    if not all(isinstance(v, (str, int, bool)) for v in raw.values()):
        raise LibraryError(f"{where}: options sets one value per option, like {{ attention_kernel = \"flash\" }}")
    defaults = {name: _option_text(v) for name, v in raw.items()}
    supports: dict[str, tuple[str, ...]] = {}
    for name, allowed in _require_table(spec.get("supports", {}), f"{where}: supports").items():
        if not (isinstance(allowed, list) and allowed and all(isinstance(v, (str, int, bool)) for v in allowed)):
            raise LibraryError(f"{where}: supports.{name} is a list of its values, like [\"1f1b\", \"interleaved\"]")
        supports[name] = tuple(map(_option_text, allowed))
    return defaults, supports, _requirements(spec.get("requires", []), where, quantities)


def _check_option_links(options: dict[str, OptionSpec]) -> None:
    """What option values say about other options names real ones: ``options`` and
    ``supports`` name declared options (not their own) and values they have; an option whose
    values set other options' defaults is not itself set by another (no chains), and an option
    is set by at most one other (no precedence between two); and the default an option takes
    under a value is one that value supports (a stack's defaults are never refused by itself)."""
    setter: dict[str, str] = {}
    for opt in options.values():
        for value in opt.values:
            where = f"{opt.file}: option '{opt.name}' value '{value}'"
            for key, links in (("options", opt.option_defaults.get(value, {})),
                               ("supports", opt.supports.get(value, {}))):
                for name, vals in links.items():
                    if name == opt.name:
                        raise LibraryError(f"{where}: {key} names its own option '{name}'")
                    if name not in options:
                        raise LibraryError(f"{where}: {key} names unknown option '{name}'."
                                           f"{did_you_mean(name, options)}")
                    for v in (vals,) if isinstance(vals, str) else vals:
                        if v not in options[name].values:
                            raise LibraryError(f"{where}: {key}: option {name} has no value '{v}' "
                                               f"(values: {list(options[name].values)})")
            for name in opt.option_defaults.get(value, {}):
                if setter.setdefault(name, opt.name) != opt.name:
                    raise LibraryError(f"{where}: option {name} is already set by option {setter[name]}; "
                                       "one option sets another's default")
            for name, allowed in opt.supports.get(value, {}).items():
                default = opt.option_defaults.get(value, {}).get(name, options[name].default)
                if default not in allowed:
                    raise LibraryError(f"{where}: supports {name} = {list(allowed)}, but {name} defaults to "
                                       f"'{default}' under it; set it in options = {{ {name} = \"...\" }}")
    for name, by in setter.items():
        if options[name].sets_options:
            raise LibraryError(f"{options[name].file}: option '{name}' sets other options' defaults and is set by "
                               f"option {by}: one level only")


def _implications(entries, values: dict[str, str], where: str, quantities: dict[str, QuantitySpec]) -> tuple:
    """``implied_by = [{ value = "gqa", when = "n_kv_heads < n_heads" }, ...]``: the option values
    that given quantities imply, as (value, Condition) pairs in order."""
    if not isinstance(entries, list):
        raise LibraryError(f"{where}: implied_by is a list of {{ value = ..., when = ... }} tables")
    out = []
    for entry in entries:
        if not isinstance(entry, dict) or not {"value", "when"} <= set(entry) <= {"value", "when", "compatible"}:
            raise LibraryError(f"{where}: each implied_by entry is {{ value = \"...\", when = \"a < b\" }} "
                               "(and optionally compatible = [values that also hold])")
        value = _option_text(entry["value"])
        compatible = entry.get("compatible", [])
        if not isinstance(compatible, list):
            raise LibraryError(f"{where}: implied_by '{value}': compatible is a list of option values")
        for v in [value, *map(_option_text, compatible)]:
            if v not in values:
                raise LibraryError(f"{where}: implied_by names value '{v}', not one of {list(values)}")
        out.append((value, _condition(entry["when"], f"{where}: implied_by '{value}'", quantities,
                                      tuple(map(_option_text, compatible)))))
    return tuple(out)


def _requirements(entries, where: str, quantities: dict[str, QuantitySpec]) -> tuple[Requirement, ...]:
    """``requires = [{ when = "tp == 1", why = "..." }, ...]``: conditions given values must
    satisfy under an option value, each with its reason."""
    if not isinstance(entries, list):
        raise LibraryError(f"{where}: requires is a list of {{ when = \"tp == 1\", why = \"...\" }} tables")
    out = []
    for entry in entries:
        if not (isinstance(entry, dict) and set(entry) == {"when", "why"} and isinstance(entry["why"], str)
                and entry["why"].strip()):
            raise LibraryError(f"{where}: each requires entry is {{ when = \"tp == 1\", why = \"the reason\" }}")
        _check_texts(entry, ("why",), f"{where}: requires")
        out.append(Requirement(_condition(entry["when"], f"{where}: requires", quantities), entry["why"].strip()))
    return tuple(out)


def _condition(text, where: str, quantities: dict[str, QuantitySpec], compatible: tuple[str, ...] = ()) -> Condition:
    """``lhs op rhs`` over quantities (``n_kv_heads < n_heads``, ``tp == 1``), parsed by the
    whitelist parser, checked for dimensions and compiled (an implication's or a requirement's)."""
    if not isinstance(text, str):
        raise LibraryError(f"{where}: 'when' is a condition in text, like \"tp == 1\"")

    def resolve(name: str) -> sympy.Expr:
        if name in quantities and quantities[name].kind != "text":
            return quantities[name].symbol
        raise ParseError(f"unknown quantity '{name}'.{did_you_mean(name, quantities)}")
    try:
        lhs, op, rhs = parse_condition(text, resolve)
    except ParseError as e:
        raise LibraryError(f"{where}: {e}") from None
    try:
        left, right = (dimension_of(x, lambda s: quantities[s.name].dim) for x in (lhs, rhs))
    except DimensionMismatch as e:
        raise LibraryError(f"{where}: {e}") from None
    if left != right and not (lhs.is_number or rhs.is_number):
        raise LibraryError(f"{where}: the two sides of '{text}' differ in dimension ({show(left)} vs {show(right)})")
    read = sorted({s.name for s in (lhs - rhs).free_symbols})
    args = [quantities[n].symbol for n in read]
    return Condition(text=text.strip(), lhs=lhs, op=op, rhs=rhs, compatible=compatible, names=tuple(read),
                     sides=(compile_expr(lhs, args), compile_expr(rhs, args)))


def _load_when(table: dict, where: str, options: dict[str, OptionSpec]) -> dict[str, tuple[str, ...]]:
    when: dict[str, tuple[str, ...]] = {}
    for key, allowed in _require_table(table.get("when", {}), f"{where}: when").items():
        if key not in options:
            raise LibraryError(f"{where}: 'when' names unknown option '{key}'.{did_you_mean(key, options)}")
        vals = tuple(_option_text(v) for v in (allowed if isinstance(allowed, list) else [allowed]))
        for v in vals:
            if v not in options[key].values:
                raise LibraryError(f"{where}: option {key} has no value '{v}' (values: {list(options[key].values)})")
        when[key] = vals
    return when


def _entry(table, file: str, kind: str, allowed: set[str], required: tuple[str, ...]) -> tuple[dict, str, str]:
    """Common checks of a [[formulas]] or [[algorithms]] entry: a table, a snake_case id, only
    known keys, the required text fields. Returns (table, id, where-prefix for messages)."""
    table = _require_table(table, f"{file}: a [[{kind}s]] entry")
    fid = table.get("id")
    if not isinstance(fid, str) or not NAME_RE.match(fid):
        raise LibraryError(f"{file}: every {kind} needs an id in snake_case (got {fid!r})")
    where = f"{file}: {kind} '{fid}'"
    _check_keys(table, allowed, where)
    for key in required:
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise LibraryError(f"{where}: '{key}' (text) is required")
    _check_texts(table, ("title", "source", "notes"), where)
    return table, fid, where


def _load_algorithm(table, file: str, quantities: dict[str, QuantitySpec],
                    options: dict[str, OptionSpec]) -> FormulaSpec:
    """An [[algorithms]] entry: a registered procedure from named inputs to one output.

    It joins the graph like a formula that can only be solved for its output.
    """
    table, fid, where = _entry(table, file, "algorithm", ALGORITHM_KEYS, ("title", "source", "function", "output"))
    function = table["function"]
    if function not in REGISTRY:
        raise LibraryError(f"{where}: unknown function '{function}'.{did_you_mean(function, REGISTRY)} "
                           f"Available: {', '.join(sorted(REGISTRY))}")
    inputs = table.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise LibraryError(f"{where}: 'inputs' must be a list of quantity names")
    output = table["output"]
    for name in [*inputs, output]:
        if name not in quantities:
            raise LibraryError(f"{where}: unknown quantity '{name}'.{did_you_mean(name, quantities)}")
    if output in inputs or len(set(inputs)) != len(inputs):
        raise LibraryError(f"{where}: inputs must be distinct and not include the output")
    lhs = quantities[output].symbol
    rhs = sympy.Function(function)(*[quantities[i].symbol for i in inputs])
    return FormulaSpec(id=fid, title=table["title"].strip(), source=table["source"].strip(), file=file,
                       equation=f"{output} = {function}({', '.join(inputs)})",
                       when=_load_when(table, where, options), notes=str(table.get("notes", "")).strip(),
                       algorithm=function, lhs=lhs, rhs=rhs, display_lhs=lhs, display_rhs=rhs,
                       latex=_latex_as_cited(lhs, rhs, quantities), lhs_name=output,
                       quantities=tuple(inputs) + (output,),
                       solvability={**{i: "none" for i in inputs}, output: "explicit"})


# a formula's two sides, parsed
_Sides = tuple[sympy.Expr, sympy.Expr]


def _resolver(quantities: dict[str, QuantitySpec]):
    """The names a formula may use: quantities (not text ones) and units."""
    def resolve(name: str) -> sympy.Expr:
        if name in quantities:
            if quantities[name].kind == "text":
                raise ParseError(f"'{name}' is text, not a number: only an algorithm can use it")
            return quantities[name].symbol
        if _is_unit_name(name):
            return unit_symbol(name)
        raise ParseError(f"unknown name '{name}' (not a declared quantity or a unit)."
                         f"{did_you_mean(name, quantities)}")
    return resolve


def _display_forms(entries: list, quantities: dict[str, QuantitySpec]) -> dict[int, _Sides | Exception]:
    """Each formula's sides as written (unevaluated, for display), by its position in
    ``entries``: parsed together, with sympy's evaluation switched off once. Switching it off
    and on again clears sympy's whole cache, and doing so around each formula made the
    evaluated parse of the next start cold (Min and Max compare their arguments through the
    assumptions system, a fifth of loading the library). What fails to parse is kept as its
    exception, raised where the formula is loaded."""
    resolve = _resolver(quantities)
    out: dict[int, _Sides | Exception] = {}
    with sympy_evaluate(False):
        for i, table in enumerate(entries):
            equation = table.get("equation") if isinstance(table, dict) else None
            if isinstance(equation, str):
                try:
                    out[i] = parse_equation(equation, resolve, evaluate=False)
                except Exception as e:      # raised again in order, by _load_formula
                    out[i] = e
    return out


def _load_formula(table, file: str, quantities: dict[str, QuantitySpec], options: dict[str, OptionSpec],
                  symbols: dict[sympy.Symbol, QuantitySpec], shown: _Sides | Exception | None = None) -> FormulaSpec:
    """One [[formulas]] entry; ``shown``: its sides as written, parsed already (or the
    exception parsing them raised), else None (parsed here)."""
    table, fid, where = _entry(table, file, "formula", FORMULA_KEYS, ("equation", "title", "source"))
    when = _load_when(table, where, options)
    equation = table["equation"]
    lhs, rhs, dlhs, drhs = _parse_formula(equation, quantities, shown, where)
    _check_dimensions(lhs, rhs, symbols, equation, where)
    names = [symbols[s].name for s in sorted((lhs - rhs).free_symbols | lhs.free_symbols | rhs.free_symbols,
                                                  key=lambda s: s.name)
             if not isinstance(s, UnitSymbol)]
    if not names:
        raise LibraryError(f"{where}: the equation relates no quantities")
    solvability = dict(zip(names, classify_all(lhs, rhs, [quantities[n].symbol for n in names])))
    rule, forward, consequence, approximate, from_given = _formula_flags(table, where)
    solvability = _directed(table, lhs, names, solvability, rule, forward, from_given, quantities, symbols, where)
    parts = _breakdown_parts(table, lhs, drhs, symbols, where)
    reports = table.get("reports", [])
    if not isinstance(reports, list) or not all(isinstance(x, str) and x in quantities for x in reports):
        raise LibraryError(f"{where}: 'reports' is a list of quantity names the answer states beside it")
    return FormulaSpec(id=fid, title=table["title"].strip(), equation=equation.strip(),
                       source=table["source"].strip(), file=file, when=when, default_rule=rule,
                       from_given=tuple(from_given), forward_only=forward, consequence=consequence, approximate=approximate,
                       breakdown=tuple(symbols[t].name for t in parts), reports=tuple(reports), notes=str(table.get("notes", "")).strip(), lhs=lhs, rhs=rhs,
                       display_lhs=dlhs, display_rhs=drhs, quantities=tuple(names),
                       solvability=solvability, latex=_latex_as_cited(dlhs, drhs, quantities),
                       lhs_name=symbols[lhs].name if lhs in symbols else None)


def _parse_formula(equation: str, quantities: dict[str, QuantitySpec], shown: _Sides | Exception | None,
                   where: str) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]:
    """The equation's sides evaluated (for solving) and as written (for display, ``shown`` when
    parsed already); an equation too large to solve is refused here."""
    resolve = _resolver(quantities)
    try:
        lhs, rhs = parse_equation(equation, resolve)
        if isinstance(shown, Exception):
            raise shown
        dlhs, drhs = shown if shown is not None else parse_equation(equation, resolve, evaluate=False)
    except ParseError as e:
        raise LibraryError(f"{where}: {e}") from None
    try:
        check_equation(lhs, rhs)
    except TooComplex as e:
        raise LibraryError(f"{where}: too large to solve: {e}") from None
    return lhs, rhs, dlhs, drhs


def _check_dimensions(lhs: sympy.Expr, rhs: sympy.Expr, symbols: dict[sympy.Symbol, QuantitySpec],
                      equation: str, where: str) -> None:
    """Both sides have one dimension, the same (a right side of 0 has every dimension)."""
    def dim_of(sym: sympy.Symbol):
        if isinstance(sym, UnitSymbol):
            return units.dimensionality(sym.unit)
        return symbols[sym].dim

    try:
        left = dimension_of(lhs, dim_of)
        right = dimension_of(rhs, dim_of)
    except DimensionMismatch as e:
        raise LibraryError(f"{where}: dimension error: {e}") from None
    if left != right and rhs != 0:      # zero has every dimension ("no time": 0 * second)
        raise LibraryError(f"{where}: the two sides differ in dimension: left is {show(left)}, "
                           f"right is {show(right)} ('{equation.strip()}')")


def _formula_flags(table, where: str) -> tuple[bool, bool, bool, bool, list]:
    """The entry's (default, forward_only, consequence, approximate, from_given), checked
    against each other: a default rule is no consequence, only a consequence is approximate,
    only a default rule reads from given values."""
    rule = table.get("default", False)
    forward = table.get("forward_only", False)
    from_given = table.get("from_given", [])
    consequence = table.get("consequence", False)
    if not all(isinstance(x, bool) for x in (rule, forward, consequence)):
        raise LibraryError(f"{where}: 'default', 'forward_only' and 'consequence' must be true or false")
    if consequence and rule:
        raise LibraryError(f"{where}: a default rule is an assumption, not a consequence of other laws")
    approximate = table.get("approximate", False)
    if not isinstance(approximate, bool) or (approximate and not consequence):
        raise LibraryError(f"{where}: 'approximate' (true or false) marks a consequence that holds only roughly")
    if not isinstance(from_given, list) or not all(isinstance(x, str) for x in from_given):
        raise LibraryError(f"{where}: 'from_given' is a list of the rule's inputs that must be given values")
    if from_given and not rule:
        raise LibraryError(f"{where}: 'from_given' applies to default rules only")
    return rule, forward, consequence, approximate, from_given


def _directed(table, lhs: sympy.Expr, names: list[str], solvability: dict[str, str], rule: bool, forward: bool,
              from_given: list, quantities: dict[str, QuantitySpec], symbols: dict[sympy.Symbol, QuantitySpec],
              where: str) -> dict[str, str]:
    """The solvability of a default rule or forward_only law: its left side only (and the inputs
    ``solved_for`` names); a law's is unchanged. ``from_given`` must name the rule's inputs."""
    backwards = table.get("solved_for", [])
    if not isinstance(backwards, list) or not all(isinstance(x, str) and x in names and quantities[x].symbol != lhs
                                                  for x in backwards) or (backwards and not forward):
        raise LibraryError(f"{where}: 'solved_for' names inputs a forward_only law may still be solved for")
    if rule or forward:
        # A default rule ("d_ffn = 4 d_model unless given"), or a law that is ill-posed backwards
        # (min(pp, m) = pp holds for every m >= pp), only ever delivers its left side.
        if not isinstance(lhs, sympy.Symbol) or lhs not in symbols or solvability[symbols[lhs].name] != "explicit":
            raise LibraryError(f"{where}: a default rule or forward_only formula must read 'quantity = expression'")
        solvability = {n: (solvability[n] if n in backwards else "explicit" if quantities[n].symbol == lhs
                           else "none") for n in names}
    unknown = [q for q in from_given if q not in names or quantities[q].symbol == lhs]
    if unknown:
        raise LibraryError(f"{where}: from_given names {unknown}, which are not inputs of the rule")
    return solvability


def _breakdown_parts(table, lhs: sympy.Expr, drhs: sympy.Expr, symbols: dict[sympy.Symbol, QuantitySpec],
                     where: str) -> list:
    """A breakdown's parts as written ('quantity = part + part + ...', each part a quantity),
    or none when the entry is not a breakdown."""
    breakdown = table.get("breakdown", False)
    if not isinstance(breakdown, bool):
        raise LibraryError(f"{where}: 'breakdown' must be true or false")
    parts = _terms(drhs) if breakdown else []
    if breakdown and not (lhs in symbols and len(parts) > 1 and all(t in symbols for t in parts)):
        raise LibraryError(f"{where}: a breakdown reads 'quantity = part + part + ...', each part a quantity")
    return parts


def _latex_as_cited(lhs: sympy.Expr, rhs: sympy.Expr, quantities: dict[str, QuantitySpec]) -> str:
    """The formula as written, in LaTeX with the quantities' symbols (renderers read it). (A
    quantity's symbol is named after it: only the symbols it reads are looked up, not all 500.)"""
    free = lhs.free_symbols | rhs.free_symbols
    names = {s: quantities[s.name].latex for s in free
             if s.name in quantities and quantities[s.name].symbol == s}
    return f"{latex(lhs, names, as_written=True)} = {latex(rhs, names, as_written=True)}"


def _terms(expr: sympy.Expr) -> list:
    """The terms of a sum as written, left to right (an unevaluated a + b + c nests as (a + b) + c)."""
    if not isinstance(expr, sympy.Add):
        return [expr]
    return [t for a in expr.args for t in _terms(a)]
