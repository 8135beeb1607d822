"""Reading ``[quantities.NAME]`` tables into QuantitySpec records, and the checks across them
(aliases unique, capacities of the same dimension) once every file's quantities are read.
"""

from __future__ import annotations

import re

import sympy

from symcalc import units
from symcalc.errors import LibraryError
from symcalc.library.build_fields import (
    NAME_RE,
    _check_keys,
    _check_latex,
    _check_texts,
    _check_value_dimension,
    _is_unit_name,
    _require_table,
)
from symcalc.library.exprparse import RESERVED
from symcalc.library.records import Interval, QuantitySpec
from symcalc.units import describe_dimension as show

ALIAS_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
ROUNDING = ("up", "down", "nearest")
QUANTITY_KEYS = {"unit", "display_unit", "latex", "description", "aliases", "domain", "whole",
                 "default", "default_source", "source", "limit", "limit_meaning", "fits_in", "exposed_part_of",
                 "given_is", "limit_priority", "input", "main_input", "plausible", "not_above", "warn_above", "yields_to", "usual", "total", "answers_for", "ratio_of",
                 "source_error"}
GIVEN_IS = ("at_most", "at_least")


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
    names = {key: _names(table.get(key, []), where, key) for key in ("not_above", "yields_to", "warn_above", "ratio_of")}
    sign = "positive" if domain.positive else "nonnegative" if domain.nonnegative else "real"
    symbol = sympy.Symbol(name, **{sign: True})
    return QuantitySpec(
        name=name, unit=unit if unit != "count" else "", display_unit=display if display != "count" else "",
        latex=table["latex"], description=table["description"].strip(), file=file,
        aliases=tuple(aliases), domain=domain, whole=whole, default=default,
        default_source=str(table.get("default_source", "")), source=str(table.get("source", "")),
        limit=limit, limit_meaning=str(table.get("limit_meaning", "")).strip(), fits_in=table.get("fits_in"),
        exposed_part_of=table.get("exposed_part_of"), total=table.get("total"), answers_for=table.get("answers_for"),
        given_is=given_is, limit_priority=priority, input=flags["input"], main_input=flags["main_input"], source_error=flags["source_error"], plausible=plausible,
        not_above=names["not_above"], yields_to=names["yields_to"], warn_above=names["warn_above"],
        ratio_of=names["ratio_of"],
        usual=str(table.get("usual", "")).strip(),
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
        paired = (*q.not_above, *q.warn_above, *q.yields_to, *(o for o in (q.total, q.answers_for) if o is not None))
        for other in paired:
            if not isinstance(other, str) or other not in quantities or quantities[other].dim != q.dim:
                raise LibraryError(f"{q.file}: quantity '{q.name}': names {other!r} (not_above, warn_above, yields_to, "
                                   "total or answers_for), which is not a declared quantity of the same dimension")
        if q.answers_for is not None and quantities[q.answers_for].answers_for is not None:
            # a question answered for another is asked once (symcalc.query.solve): no chains, no cycles
            raise LibraryError(f"{q.file}: quantity '{q.name}': answers_for names {q.answers_for!r}, which itself "
                               "answers for another quantity; name the one asked for")
        if q.ratio_of and (len(q.ratio_of) != 2 or q.dim or any(n not in quantities for n in q.ratio_of)
                           or quantities[q.ratio_of[0]].dim != quantities[q.ratio_of[1]].dim):
            raise LibraryError(f"{q.file}: quantity '{q.name}': ratio_of names {list(q.ratio_of)}; it names two "
                               "declared quantities of one dimension (a figure and the datasheet figure it is a "
                               "fraction of), for a dimensionless quantity")
        if q.fits_in is None:
            continue
        cap = quantities.get(q.fits_in) if isinstance(q.fits_in, str) else None
        if cap is None:
            raise LibraryError(f"{q.file}: quantity '{q.name}': fits_in names {q.fits_in!r}, which is not a "
                               "declared quantity")
        if cap.dim != q.dim:
            raise LibraryError(f"{q.file}: quantity '{q.name}' is {show(q.dim)} but fits_in {cap.name} is "
                               f"{show(cap.dim)}")


def _check_aliases(quantities: dict[str, QuantitySpec]) -> None:
    seen: dict[str, str] = {}
    for q in quantities.values():
        for a in q.aliases:
            if a in quantities:
                raise LibraryError(f"{q.file}: alias '{a}' of '{q.name}' is the name of another quantity")
            if a in seen:
                raise LibraryError(f"{q.file}: alias '{a}' is used by both '{seen[a]}' and '{q.name}'")
            seen[a] = q.name
