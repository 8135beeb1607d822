"""What ``symcalc list`` and ``symcalc show`` say about the library, as plain data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from symcalc.errors import UnknownNameError, closest_names
from symcalc.library.presets import Preset, all_presets, builtin_preset

if TYPE_CHECKING:
    from symcalc.library.records import FormulaSpec, OptionSpec
    from symcalc.library.registry import Library


def _match(term: str | None, *texts: str) -> bool:
    if not term:
        return True
    words = term.lower().split()
    hay = " ".join(t.lower() for t in texts if t)
    return all(w in hay for w in words)


def formula_kind(f: FormulaSpec) -> str:
    """law, default rule (gives its left side unless known), consequence (of other laws),
    forward-only law, or algorithm."""
    if f.algorithm:
        return "algorithm"
    if f.default_rule:
        return "default rule"
    if f.consequence:
        return "consequence"
    return "forward only" if f.forward_only else "law"


def catalog(lib: Library, kind: str | None = None, term: str | None = None) -> dict[str, list[dict]]:
    """Quantities, formulas and options (or one kind), filtered by every word of ``term``."""
    out: dict[str, list[dict]] = {}
    if kind in (None, "quantities"):
        out["quantities"] = [
            {"name": q.name, "unit": "text" if q.kind == "text" else q.display_unit or "count",
             "description": q.description,
             "aliases": list(q.aliases), "default": q.default}
            for q in sorted(lib.quantities.values(), key=lambda q: q.name)
            if _match(term, q.name, q.description, " ".join(q.aliases), q.unit, q.display_unit)]
    if kind in (None, "formulas"):
        out["formulas"] = [
            {"id": f.id, "equation": f.equation, "title": f.title, "source": f.source,
             "when": {k: list(v) for k, v in lib.said_values(f.when).items()}, "file": f.file, "kind": formula_kind(f)}
            for f in sorted(lib.formulas.values(), key=lambda f: (f.file, f.id))
            if _match(term, f.id, f.title, f.equation, f.notes, f.source)]
    if kind in (None, "options"):
        out["options"] = [
            {"name": o.name, "default": o.default, "values": list(o.said), "description": o.description}
            for o in sorted(lib.options.values(), key=lambda o: o.name)
            if _match(term, o.name, o.description, " ".join(o.declared), " ".join(o.declared.values()))]
    return out


def describe(lib: Library, name: str) -> dict[str, Any]:
    """Everything about one quantity (or alias), formula, option or built-in preset.

    Returns
    -------
    dict
        Its fields for ``symcalc show``, with ``kind`` saying which of the three it is.

    Raises
    ------
    UnknownNameError
        ``name`` is none of them (the closest names are suggested).
    """
    # an option's own name before a quantity's alias (shared_experts is both)
    if name in lib.quantities or (name in lib.aliases and name not in lib.options):
        q = lib.quantity(name)
        used_in = [f.id for f in lib.formulas.values() if q.name in f.quantities]
        text = q.kind == "text"
        info: dict[str, Any] = {"kind": "quantity", "name": q.name, "description": q.description,
                "unit": "text" if text else q.unit or "count",
                "display_unit": "text" if text else q.display_unit or "count",
                "latex": q.latex, "domain": None if text else str(q.domain), "aliases": list(q.aliases),
                "whole_number": q.whole, "default": q.default, "default_source": q.default_source,
                "source": q.source, "file": q.file, "formulas": used_in}
        if q.limit:
            info["at_the_limit"] = f"{q.limit} {q.limit_meaning}"
        if q.usual:
            info["usual_value"] = q.usual
        # a domain file that holds a model of this quantity explains it ([meta] explains/model)
        models = [m for m in lib.meta.values() if q.name in m.get("explains", ()) and m.get("model")]
        if models:
            info["model"] = "\n\n".join(f"{m.get('title', '')}:\n{m['model'].strip()}" for m in models)
        set_by = {f"{o.name}={v}": sets[q.name] for o in lib.options.values()
                  for v, sets in o.sets.items() if q.name in sets}
        if set_by:
            info["defaults_by_option"] = set_by
        if name in lib.formulas:
            info["also_a_formula"] = name
        return info
    if name in lib.formulas:
        f = lib.formulas[name]
        variants = [g.id for g in lib.formulas.values()
                    if g.id != f.id and g.lhs == f.lhs and (g.when or f.when)]
        return {"kind": "formula", "id": f.id, "title": f.title, "equation": f.equation, "formula_kind": formula_kind(f),
                "latex": f.latex,
                "source": f.source, "notes": f.notes, "when": {k: list(v) for k, v in lib.said_values(f.when).items()},
                "default_rule": f.default_rule, "quantities": list(f.quantities),
                "solvable_for": {k: v for k, v in f.solvability.items()}, "variants": variants,
                "file": f.file}
    if name in lib.options:
        o = lib.options[name]
        info = {"kind": "option", "name": o.name, "description": o.description, "default": o.default,
                "values": {v: _option_value(o, v, d, lib) for v, d in o.declared.items()},
                "formulas": [f.id for f in lib.formulas.values() if o.name in f.when], "file": o.file}
        set_by = {f"{other.name}={v}": defaults[o.name] for other in lib.options.values()
                  for v, defaults in other.option_defaults.items() if o.name in defaults}
        if set_by:
            info["defaults_by_option"] = set_by
        return info
    for kind in ("hardware", "model"):
        try:
            return _preset(builtin_preset(kind, name))
        except UnknownNameError:
            pass
    presets = [n for k in ("hardware", "model") for p in all_presets()[k].values() for n in (p.key, *p.aliases)]
    pool = list(lib.quantities) + list(lib.aliases) + list(lib.formulas) + list(lib.options) + presets
    near = closest_names(name, pool)
    hint = f" Did you mean: {', '.join(near)}?" if near else " Try `symcalc list`."
    raise UnknownNameError(f"'{name}' is not a quantity, formula, option or preset.{hint}", near)


def _preset(p: Preset) -> dict[str, Any]:
    """A hardware or model preset for ``symcalc show``: each value with how it is known
    (measured, datasheet, derived, fitted) and its source."""
    def entry(value: str, source: str, basis: str | None) -> str:
        return f"{value}" + (f" [{basis}]" if basis else "") + (f" ({source})" if source else "")
    values = {k: entry(v, src, p.basis.get(k)) for k, (v, src) in p.values.items()}
    values.update({f"peak_flops_{k}": entry(v, src, p.peak_basis.get(k)) for k, (v, src) in p.peak_flops.items()})
    return {"kind": p.kind, "name": p.key, "title": p.title, "aliases": list(p.aliases), "source": p.source,
            "notes": p.notes, "values": values, "options": dict(p.options)}


def _option_value(o: OptionSpec, value: str, description: str, lib: Library) -> dict[str, Any]:
    """One value of an option for ``show``: what it means and sets, and, for a value that sets
    other options (a training stack), their defaults under it, the values of others it runs
    with and the conditions it puts on given values."""
    out: dict[str, Any] = {"description": description, "sets": o.sets.get(value, {}), "source": o.sources.get(value, "")}
    if o.option_defaults.get(value):
        out["options"] = dict(o.option_defaults[value])
    if o.supports.get(value):
        out["supports"] = {k: list(v) for k, v in lib.said_values(o.supports[value]).items()}
    if o.requires.get(value):
        out["requires"] = [{"when": r.condition.text, "why": r.why, **({"with": {k: list(v) for k, v in r.under.items()}}
                                                                     if r.under else {})}
                           for r in o.requires[value]]
    return out


def preset_catalog(kind: str, term: str | None = None) -> list[dict]:
    """Built-in hardware or model presets, filtered by every word of ``term``."""
    out = []
    for p in all_presets()[kind].values():
        text = " ".join([p.key, p.title, *p.aliases, p.source])
        if not _match(term, text):
            continue
        values = {k: v for k, (v, _) in p.values.items()}
        values.update({f"peak_flops_{k}": v for k, (v, _) in p.peak_flops.items()})
        out.append({"name": p.key, "title": p.title, "aliases": list(p.aliases), "values": values,
                    "options": dict(p.options), "source": p.source,
                    "sources": {k: s for k, (_, s) in {**p.values, **{f"peak_flops_{k}": x for k, x in p.peak_flops.items()}}.items()}})
    return out
