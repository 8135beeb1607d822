"""Findings (symcalc.findings.Finding) as sentences, and as plain data for JSON.

The one place the words of a warning or a bound violation are written: :func:`sentence`
dispatches on the finding's kind. Records reach it through the ``finding`` format of
:mod:`symcalc.formats` (``Result.warnings``, ``Result.violations``, ``Sweep.warnings``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from symcalc.findings import Finding
from symcalc.units.format import fmt, with_unit


def sentence(f: Finding) -> str:
    """``f`` in one English sentence."""
    return _SENTENCES[f.kind](f, f.values)


def finding_dict(f: Finding) -> dict[str, Any]:
    """``f`` in plain types: {kind, quantity, values, related, formulas, mask}; NaN and inf
    become null, a mask a nested list of booleans (None when it has none)."""
    return {"kind": f.kind, "quantity": f.quantity, "values": _plain(f.values), "related": list(f.related),
            "formulas": list(f.formulas),
            "mask": None if f.mask is None else np.asarray(f.mask, dtype=bool).tolist()}


def _plain(v: object) -> object:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, np.integer)):
        return int(v)
    if isinstance(v, (float, np.floating)):
        return float(v) if math.isfinite(v) else None
    return v


def _bounds(b: dict[str, Any]) -> str:
    """[0, inf), (0 %, 100 %]: an interval in display terms."""
    unit = " %" if b["percent"] else ""
    return (f"{'(' if b['lo_open'] else '['}{b['lo']:g}{unit}, {b['hi']:g}{unit}"
            f"{')' if b['hi_open'] else ']'}")


def _where(v: dict[str, Any]) -> str:
    return f" at {v['points']} of {v['of']} points" if v.get("of") else ""


def _several_roots(f: Finding, v: dict[str, Any]) -> str:
    return (f"{', '.join(f.related)}: more than one root lies in the admissible range ({f.formulas[0]}); "
            "the first was taken")


def _not_whole(f: Finding, v: dict[str, Any]) -> str:
    return f"{f.quantity} = {fmt(v['value'], 6)} is not a whole number"


def _rounded_nearest(f: Finding, v: dict[str, Any]) -> str:
    return (f"{f.quantity} = {fmt(v['value'], 6)} is not a whole number; rounded to the nearest: the given "
            "values do not fit whole numbers exactly (round up or down to choose: --round, or rounding= in Python)")


def _over_capacity(f: Finding, v: dict[str, Any]) -> str:
    u = v["unit"]
    largest = f"; the largest part is {v['largest'][0]} = {with_unit(v['largest'][1], u)}" if v.get("largest") else ""
    return (f"{f.quantity} = {with_unit(v['value'], u)} exceeds {f.related[0]} = {with_unit(v['capacity'], u)}"
            f"{_where(v)} by {with_unit(v['excess'], u)}: it does not fit{largest}")


def _option_idle(f: Finding, v: dict[str, Any]) -> str:
    return (f"option {v['option']}={v['value']} changes nothing here: it applies only with {v['needs']} = "
            f"{' or '.join(v['allowed'])} ({v['needs']} = {v['actual']})")


def _not_used(f: Finding, v: dict[str, Any]) -> str:
    where = []
    for name, users in v.get("used_by", {}).items():
        if users.get("quantities"):
            where.append(f"{name} gives {', '.join(users['quantities'])}, not asked for here")
        elif users.get("options"):
            where.append(f"{name} counts under --option {' or '.join(users['options'])}")
    said = f"; {'; '.join(where)}" if where else ""
    together = v.get("with_target", {})
    if together:
        ask = ", ".join(f"{q} (with {', '.join(g)})" for q, g in together.items())
        return (f"not used by this derivation: {', '.join(f.related)}; with {v['target']} "
                f"{'they give' if len(f.related) > 1 else 'it gives'} {ask}: ask for "
                f"{'those' if len(together) > 1 else 'that'} to count them")
    return (f"not used by this derivation: {', '.join(f.related)} "
            f"(no formula on the route needs it{said}; check the options if it should matter)")


def _found_numerically(f: Finding, v: dict[str, Any]) -> str:
    if v.get("torn"):
        return (f"{f.quantity} found numerically: a block of {v['equations']} equations solved by searching "
                f"it (the other {v['follow']} follow from it)")
    return f"{', '.join(f.related)} found numerically ({', '.join(f.formulas)})"


def _conflict(f: Finding, v: dict[str, Any]) -> str:
    u = v["unit"]
    leaning = ", ".join(f"{k} = {x}" for k, x in v["leaning"])
    return (f"conflict: {f.quantity} = {with_unit(v['given'], u)} is given, but {', '.join(v['from'])}"
            f"{f' (with {leaning})' if leaning else ''} give {with_unit(v['computed'], u)} "
            f"({fmt(100 * v['rel_error'], 3)} % off, beyond {fmt(100 * v['rtol'], 3)} %); "
            f"the answer does not use the given {f.quantity}")


def _unused_disagrees(f: Finding, v: dict[str, Any]) -> str:
    u = v["unit"]
    leaning = ", ".join(f"{k} = {x}" for k, x in v["leaning"])
    also = [q for q in f.related if q != f.quantity]
    return (f"the given {', '.join(f.related)} {'are' if also else 'is'} not used, and {'do' if also else 'does'} not agree with the answer "
            f"and the defaults: from the others, {f.quantity} would be {with_unit(v['computed'], u)}, not the "
            f"given {with_unit(v['given'], u)} ({fmt(100 * v['rel_error'], 3)} % off){f', with {leaning}' if leaning else ''}; "
            f"give what differs from those defaults (or the quantity this answer takes by default) to use them")


def _preset(f: Finding, v: dict[str, Any]) -> str:
    if v["what"] == "latent_attention":
        return (f"{v['file']}: multi-head latent attention (kv_lora_rank) is not modelled: attention "
                "parameters and counts from the shapes are approximate")
    return (f"{v['file']}: the first {v['layers']} layers are dense, which the uniform MoE formulas do not "
            "model: counts from the shapes are approximate")


def _implausible(f: Finding, v: dict[str, Any]) -> str:
    u = v["unit"]
    slips = [f"{with_unit(x, u)} (a unit prefix off by 1000)" if written is None else f"{written} ({with_unit(x, u)})"
             for written, x in v["slips"]]
    hint = f": did you mean {' or '.join(slips)}?" if slips else \
        ": check the units and exponents of the values given" if v.get("answer") else ": check the unit and the exponent"
    return (f"{f.quantity} = {with_unit(v['value'], u)} is far {v['side']} {with_unit(v['limit'], u)}, the range "
            f"of real hardware and models{hint}")


def _limits_clash(f: Finding, v: dict[str, Any]) -> str:
    return (f"the given limits pull {f.quantity} both up and down; rounded {v['rounded']} "
            "(no whole value may keep them all)")


def _above_limit(f: Finding, v: dict[str, Any]) -> str:
    where = f" ({v['origin']})" if v.get("origin") else ""
    solved = f", as solved{_where(v)}," if v.get("solved") else ""
    return (f"{f.quantity} = {with_unit(fmt(v['value']), v['unit'])}{solved} is above {v['limit']} = "
            f"{with_unit(fmt(v['limit_value']), v['limit_unit'])}{where}; answered all the same, but "
            f"{v['limit']} is {v['description'].split(':')[0]}")


def _layout_rule(f: Finding, v: dict[str, Any]) -> str:
    plan = v.get("plan") or "symcalc plan does not search such a layout"
    return f"{v['reason']}: {v['shown']}{_where(v)} (rule {v['rule']}); answered all the same, but {plan}"


def _rounded_to_rule(f: Finding, v: dict[str, Any]) -> str:
    way = {"up": "the nearest above", "down": "the nearest below"}.get(v["how"], "the nearest")
    at = f" (and {v['points'] - 1} more of the {v['of']} points)" if v.get("points", 1) > 1 else ""
    return (f"{f.quantity} = {fmt(v['value'], 6)} rounds to {fmt(v['rounded'])}{at}, {way} that keeps the layout rules: "
            f"{fmt(v['was'])} is refused: {'; '.join(f'{r} (rule {n})' for r, n in zip(v['reasons'], v['rules']))}"
            + (f" (no value near keeps every rule: {fmt(v['rounded'])} still breaks {'; '.join(v['still'])}, "
               "which is allowed with a warning)" if v.get("still") else ""))


def _reported(f: Finding, v: dict[str, Any]) -> str:
    shown = v["value"] if isinstance(v["value"], str) else with_unit(fmt(v["value"]), v["unit"])
    return f"{f.quantity} = {shown}: {v['description']}"


def _published(f: Finding, v: dict[str, Any]) -> str:
    return f"{f.quantity} is the published value from the preset ({v['origin']})"


def _looked_up(f: Finding, v: dict[str, Any]) -> str:
    return f"{f.quantity} is looked up, not derived: nothing given determines it ({v['origin']})"


def _rescoped(f: Finding, v: dict[str, Any]) -> str:
    if "asked" in v:
        return (f"the values given do not settle {v['asked']}; they settle {f.quantity} ({v['meaning']}), "
                f"answered for it")
    read, other = (("the deployment's total", "one replica's or one GPU's figure") if v["total"]
                   else ("one replica's or one GPU's figure", "the deployment's total"))
    return (f"{v['given']} = {v['text']} is read as {f.quantity} ({read}): as {other} it cannot settle "
            f"{v['target']}; give {f.quantity}=... to say so")


def _given_target(f: Finding, v: dict[str, Any]) -> str:
    return f"{f.quantity} is given: the answer is that value converted"


def _unmeasured(f: Finding, v: dict[str, Any]) -> str:
    return f"{f.quantity} = {v['value']} from {v['preset']} is {v['basis']}, not measured: {v['source']}"


def _out_of_bounds(f: Finding, v: dict[str, Any]) -> str:
    shown = with_unit(v["value"], v["unit"]) if v["value"] is not None else "undefined (NaN)"
    names = list(f.related)
    # a total of many parts rests on dozens of values: the first few, and how many more
    listed = ", ".join(names) if len(names) <= 6 else f"{', '.join(names[:5])} and {len(names) - 5} more"
    return (f"{f.quantity} = {shown}{_where(v)} is outside its bounds {_bounds(v['bounds'])}: the values of "
            f"{listed} are inconsistent, or outside the range of {', '.join(f.formulas)}")


def _rounds_outside(f: Finding, v: dict[str, Any]) -> str:
    u = v["unit"]
    why = ("no whole value keeps the limit the question gives: the smallest already breaks it"
           if v["how"] == "down" else "a whole number this small makes no sense here")
    return (f"{f.quantity} = {with_unit(v['value'], u)} rounds {v['how']} to {with_unit(v['rounded'], u)}, "
            f"outside {_bounds(v['bounds'])}: {why}")


def _infeasible_points(f: Finding, v: dict[str, Any]) -> str:
    n = v["points"]
    at = f"{n} point{'' if n == 1 else 's'}"
    if v["why"] == "no_solution":
        return f"{at} {'has' if n == 1 else 'have'} no solution"
    if v["why"] == "rule":        # a structure rule of the layout (query.layout_rules), as solve refuses
        return f"{v['reason']} at {at} (rule {v['rule']})"
    if v["why"] == "above":
        return f"{f.quantity} is more than {v['other']} at {at}: it can never exceed it"
    if v["why"] == "over_capacity":
        return f"{f.quantity} exceeds {v['capacity']} = {with_unit(v['value'], v['unit'])} at {at}"
    verb = "leaves its bounds" if v["why"] == "out_of_bounds" else "rounds outside its bounds"
    return f"{f.quantity} {verb} {v['domain']} at {at}"


def _fit(f: Finding, v: dict[str, Any]) -> str:
    """'fits: serving_memory_per_gpu = 28.63 GB of gpu_memory = 80 GB (51.37 GB free; workload = serving)', or
    'DOES NOT FIT: ... exceeds ... by ...; the largest part is ...'."""
    u = v["unit"]
    room = (f"{f.related[0]} = {with_unit(v['capacity'], u)}" if v.get("margin") is None else
            f"{f.related[0]} {with_unit(v['capacity'], u)} - {f.related[1]} {with_unit(v['margin'], u)} = "
            f"{with_unit(v['limit'], u)}")
    at = ", ".join(f"{n} = {t}" for n, t in v.get("defaults", {}).items())
    said = f"workload = {v['workload']}" + (f"; {at} by default" if at else "")
    if v["fits"]:
        every = f" at all {v['of']} points" if v.get("of") else ""
        most = "at most " if v.get("of") else ""
        if v.get("tight"):
            return (f"fits, but tight{every}: {f.quantity} = {most}{with_unit(v['value'], u)} of {room} leaves "
                    f"{with_unit(v['free'], u)} free, under the {with_unit(v['advised'], u)} a run keeps by default "
                    f"(memory_margin_fraction of {f.related[0]}): symcalc plan would not propose it; give "
                    f"{f.related[1]} to set the margin ({said})")
        return f"fits{every}: {f.quantity} = {most}{with_unit(v['value'], u)} of {room} ({with_unit(v['free'], u)} free; {said})"
    largest = f"; the largest part is {v['largest'][0]} = {with_unit(v['largest'][1], u)}" if v.get("largest") else ""
    most = "up to " if v.get("of") else ""
    return (f"DOES NOT FIT{_where(v)}: {f.quantity} = {most}{with_unit(v['value'], u)} exceeds {room} by "
            f"{with_unit(v['excess'], u)}{largest} ({said})")


_SENTENCES: dict[str, Callable[[Finding, dict[str, Any]], str]] = {
    "infeasible_points": _infeasible_points, "fit": _fit,
    "several_roots": _several_roots, "not_whole": _not_whole, "rounded_nearest": _rounded_nearest,
    "over_capacity": _over_capacity, "not_used": _not_used, "option_idle": _option_idle, "found_numerically": _found_numerically,
    "conflict": _conflict, "unused_disagrees": _unused_disagrees, "preset": _preset, "implausible": _implausible,
    "limits_clash": _limits_clash,
    "published": _published, "reported": _reported, "above_limit": _above_limit, "looked_up": _looked_up, "given_target": _given_target, "rescoped": _rescoped, "unmeasured": _unmeasured,
    "layout_rule": _layout_rule, "rounded_to_rule": _rounded_to_rule,
    "out_of_bounds": _out_of_bounds, "rounds_outside": _rounds_outside,
}
