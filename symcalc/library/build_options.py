"""Reading ``[options.NAME]`` tables into OptionSpec records: each value's description,
settings and links to other options, the conditions that imply a value (``implied_by``) or that
a value requires (``requires``), and the check of those links once every option is read.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

import sympy

from symcalc.errors import LibraryError, did_you_mean
from symcalc.library.build_fields import (
    NAME_RE,
    _check_keys,
    _check_texts,
    _check_value_dimension,
    _require_table,
)
from symcalc.library.compiling import compile_expr
from symcalc.library.exprparse import ParseError, parse_condition
from symcalc.library.records import Condition, OptionFallback, OptionSpec, QuantitySpec, Requirement
from symcalc.library.registry import _option_text
from symcalc.units import describe_dimension as show
from symcalc.units.dims import DimensionMismatch, dimension_of

OPTION_VALUE_RE = re.compile(r"^[A-Za-z0-9_.+-]{1,40}$")
OPTION_KEYS = {"description", "default", "values", "implied_by", "main_input", "searched", "fallback", "only_with",
               "offered", "combinable", "aliases"}
FALLBACK_KEYS = {"value", "summary", "reason"}
OPTION_VALUE_KEYS = {"description", "sets", "source", "compute_dtype", "hardware_dtype", "options", "supports",
                     "requires"}


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
    aliases = {str(k): str(v) for k, v in _require_table(table.get("aliases", {}), f"{where}: aliases").items()}
    for alias, value in aliases.items():
        if value not in values or alias in values:
            raise LibraryError(f"{where}: alias '{alias}' names '{value}', not one of its values, or is a value itself")
    pieces = _combine(table.get("combinable", []), values, sets, sources, where)
    if any(option_defaults.get(p) or supports.get(p) or requires.get(p) for p in pieces):
        raise LibraryError(f"{where}: a combinable value sets or restricts no other option")
    default = str(table.get("default", ""))
    if default not in values:
        raise LibraryError(f"{where}: default '{default}' is not one of its values {list(values)}")
    main_input, searched = table.get("main_input", False), table.get("searched", False)
    by_defaults = main_input == "defaults"      # said first only where a default it sets is used
    main_input = True if by_defaults else main_input
    if not isinstance(main_input, bool) or not isinstance(searched, bool):
        raise LibraryError(f"{where}: 'main_input' is true, false or \"defaults\"; 'searched' true or false")
    offered = table.get("offered", False)
    if not isinstance(offered, bool):
        raise LibraryError(f"{where}: 'offered' is true or false")
    return OptionSpec(name=name, description=str(table.get("description", "")).strip(), default=default,
                      values=values, sets=sets, sources=sources, file=file, compute_dtype=dtypes, hardware_dtype=needs,
                      implied_by=_implications(table.get("implied_by", []), values, where, quantities),
                      main_input=main_input, main_input_by_defaults=by_defaults, searched=searched, option_defaults=option_defaults, supports=supports,
                      requires=requires, fallback=_fallback(table.get("fallback"), values, default, where),
                      only_with=_only_with(table.get("only_with", {}), where), offered=offered, pieces=pieces,
                      aliases=aliases)


def _combine(pieces, values: dict[str, str], sets: dict[str, dict[str, str]], sources: dict[str, str],
             where: str) -> tuple[str, ...]:
    """``combinable = ["layernorm", "moe_act", ...]``: values that are pieces of a set, as
    Megatron-Core's ``recompute_modules`` lists several modules. Every set of two or more becomes a
    value named by its pieces in the declared order joined by "+", setting what its pieces set (a
    flag set to 1 by any piece is 1: the largest number wins). Fills ``values``, ``sets`` and
    ``sources`` in place; returns the pieces. O(2^pieces), so a dozen at most."""
    if not (isinstance(pieces, list) and all(isinstance(p, str) for p in pieces)) or len(pieces) > 12:
        raise LibraryError(f"{where}: combinable is a list of at most 12 of its values")
    for p in pieces:
        if p not in values or "+" in p:
            raise LibraryError(f"{where}: combinable names '{p}', not one of its values {list(values)}")
    for r in range(2, len(pieces) + 1):
        for group in itertools.combinations(pieces, r):
            name = "+".join(group)
            merged: dict[str, str] = {}
            for p in group:
                for qname, text in sets.get(p, {}).items():
                    try:
                        merged[qname] = text if qname not in merged or float(text) > float(merged[qname]) else merged[qname]
                    except ValueError:
                        raise LibraryError(f"{where}: combinable value '{p}' sets {qname} = {text}, "
                                           "not a number the combination can take the largest of") from None
            values[name] = "together: " + "; ".join(values[p] for p in group)
            sets[name] = merged
            sources[name] = "; ".join(dict.fromkeys(sources[p] for p in group if sources.get(p)))
    return tuple(pieces)


def _admit_combinations(options: dict[str, OptionSpec]) -> None:
    """Every list of an option's values that other options' values give (``supports``,
    ``requires with``, ``only_with``) also admits the combinations of the pieces it names: a
    stack that runs layernorm and moe_act runs them together. In place; called once every option
    is read."""
    def admit(links: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        return {name: options[name].admitted(vals) if name in options else vals for name, vals in links.items()}
    for opt in options.values():
        opt.supports = {value: admit(links) for value, links in opt.supports.items()}
        opt.only_with = admit(opt.only_with)
        opt.requires = {value: tuple(Requirement(r.condition, r.why, admit(r.under)) for r in reqs)
                        for value, reqs in opt.requires.items()}


def _only_with(table, where: str) -> dict[str, tuple[str, ...]]:
    """``only_with = { precision = ["fp8", "fp4"] }``: the other options' values under which the
    option means anything (an FP8 recipe without FP8 GEMMs changes nothing); a question that
    gives it outside them is told so. Names and values are checked with the other links
    (:func:`_check_option_links`)."""
    out: dict[str, tuple[str, ...]] = {}
    for name, allowed in _require_table(table, f"{where}: only_with").items():
        if not (isinstance(allowed, list) and allowed and all(isinstance(v, (str, int, bool)) for v in allowed)):
            raise LibraryError(f"{where}: only_with.{name} is a list of its values, like [\"fp8\", \"fp4\"]")
        out[name] = tuple(map(_option_text, allowed))
    return out


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
            linked: list[tuple[str, Mapping[str, str | tuple[str, ...]]]] = [
                ("options", opt.option_defaults.get(value, {})), ("supports", opt.supports.get(value, {})),
                *(("requires with", r.under) for r in opt.requires.get(value, ())), ("only_with", opt.only_with)]
            for key, links in linked:
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
        if not (isinstance(entry, dict) and {"when", "why"} <= set(entry) <= {"when", "why", "with"}
                and isinstance(entry["why"], str) and entry["why"].strip()):
            raise LibraryError(f"{where}: each requires entry is {{ when = \"tp == 1\", why = \"the reason\" }}, "
                               "optionally with = { zero_stage = [\"2\", \"3\"] } (the other options' values it holds under)")
        _check_texts(entry, ("why",), f"{where}: requires")
        under: dict[str, tuple[str, ...]] = {}
        for name, vals in _require_table(entry.get("with", {}), f"{where}: requires with").items():
            if not (isinstance(vals, list) and vals and all(isinstance(v, (str, int, bool)) for v in vals)):
                raise LibraryError(f"{where}: requires with.{name} is a list of its values, like [\"2\", \"3\"]")
            under[name] = tuple(map(_option_text, vals))
        out.append(Requirement(_condition(entry["when"], f"{where}: requires", quantities), entry["why"].strip(),
                               under))
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
