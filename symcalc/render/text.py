"""Plain-text derivation, as the CLI prints it."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc.engine.method import Method
from symcalc.render.common import (
    has_arrays,
    run_sentence,
    text_values,
    unknown_views,
    value_text,
    was_rounded,
)
from symcalc.units.format import fmt, with_unit

if TYPE_CHECKING:   # pragma: no cover
    from symcalc.query.results import Result



def render_text(result: Result) -> str:
    """The answer, then each step: formula as cited, rearranged form, numbers, result."""
    numbers = None if has_arrays(result) else text_values(result)
    lines = [headline(result)]
    lines += [f"  {line}" for line in first_lines(result)]
    lines.append("")
    lines += breakdown_lines(result)
    lines.append(f"Derivation ({len(result.steps)} step{'s' if len(result.steps) != 1 else ''}):")
    for step in result.steps:
        f0 = step.formulas[0]
        ids = ", ".join(f.id for f in step.formulas)
        if len(step.formulas) == 1:
            lines.append(f"  {step.number}. {f0.title}  [{ids}]")
            lines.append(f"     {f0.equation}")
        else:
            lines.append(f"  {step.number}. solved together for {', '.join(step.solves_for)}  [{ids}]")
            for f in step.formulas:
                lines.append(f"     {f.equation}")
        for name, kind in unknown_views(result, step):
            if kind == "numeric":
                lines.append(f"     {name} found numerically = {value_text(result, name)}")
                continue
            if kind == "side":
                lines.append(f"     also {name} = {value_text(result, name)}")
                continue
            expr = step.solution[name]
            if step.method.rearranges:
                lines.append(f"     -> {name} = {expr.text()}")
            shown = step_value_text(result, name)
            substituted = expr.text(numbers) if numbers is not None else shown
            # an identity (n_active_params = n_params) shows its value once
            lines.append(f"     = {substituted} = {shown}" if substituted != shown else f"     = {shown}")
        if step.numeric and step.method != Method.NUMERIC:
            lines.append("     (closed form singular here: found numerically)")
    preset = [(n, g) for n, g in result.given.items() if g.origin and n not in result.unused]
    if preset:
        lines.append("")
        lines.append("From presets (give a value to override):")
        for name, g in preset:
            lines.append(f"  {name} = {g.text}  ({g.origin})")
    if result.defaults_used:
        lines.append("")
        lines.append("Defaults used (give a value to override):")
        for name, d in result.defaults_used.items():
            lines.append(f"  {name} = {d['value']}  ({d['source']})")
    lines.append("")
    lines.append(closed_form_line(result))
    if result.unused:
        lines.append(f"Not needed: {', '.join(result.unused)}")
    if result.elasticities is not None:
        lines.append(sensitivity_line(result))
    for w in result.violations:
        lines.append(f"OUT OF BOUNDS: {w}")
    return "\n".join(lines)


def sensitivity_line(result: Result) -> str:
    """'Sensitivity (elasticity d ln target / d ln input): n_params +1, n_gpus -1, ...': each
    given value's elasticity, largest first; '~' marks one found numerically (a central
    difference), 'not finite' one that has no finite value at the answer."""
    def one(e: Any) -> str:
        if not np.isfinite(e.elasticity):
            return f"{e.name} not finite"
        shown = "0" if e.elasticity == 0 else f"{e.elasticity:+.4g}"
        return f"{e.name} {'~' if e.method == 'numeric' else ''}{shown}"
    entries = ", ".join(one(e) for e in result.elasticities or []) or "no given values"
    numeric = any(e.method == "numeric" for e in result.elasticities or [])
    return (f"Sensitivity (elasticity d ln target / d ln input): {entries}"
            + ("  (~: numeric, a central difference in log space)" if numeric else ""))


def breakdown_lines(result: Result) -> list[str]:
    """The parts of a total the derivation adds up (step_time's compute, communication, bubble...)
    with their shares, a sum's own parts indented under it (compute by kind), and beside each
    collective's exposed time the time it runs in all; nothing for a sweep or a derivation
    without such a sum."""
    b = result.breakdown
    if b is None or np.ndim(b["total"]):
        return []
    lines = [f"Breakdown of {b['of']} = {with_unit(b['total'], b['unit'])}:"]

    def walk(parts: list[dict], depth: int) -> None:
        width = max(len(p["name"]) for p in parts) + 2 * (1 - depth)
        for p in parts:
            if p["value"] == 0 and not p.get("whole"):
                continue    # a part this layout does not have (no context or expert parallelism)
            name = "  " * depth + p["name"]
            desc = result.library.quantities[p["name"]].description
            if "whole" in p:
                desc = (f"exposed {with_unit(p['value'], b['unit'])} of {with_unit(p['whole'], b['unit'])} in all "
                        f"({with_unit(p['hidden'], b['unit'])} hidden behind compute)")
            lines.append(f"  {name:<{width + 2 * depth}}  {with_unit(p['value'], b['unit']):>12}  "
                         f"{p['share'] * 100:5.1f} %  {desc[:78] + ('...' if len(desc) > 78 else '')}")
            if "parts" in p:
                walk(p["parts"], depth + 1)
    walk(b["parts"], 0)
    return lines + [""]


def closed_form_line(result: Result) -> str:
    if not result.steps:
        return f"{result.target} is given (no derivation)"
    if not result.has_closed_form:
        return f"Closed form: none ({result.target} is found numerically)"
    line = f"Closed form: {result.target} = {result.closed_form.text()}"
    if result.numeric_symbols:
        line += f"  (where {', '.join(result.numeric_symbols)} is found numerically)"
    partial = intermediates(result)
    if partial:
        line += f"  (in terms of {', '.join(partial)}: composing them in took longer than the symbolic limit)"
    return line


def intermediates(result: Result) -> list[str]:
    """Quantities a step derived that the closed form still holds: it was composed only so far
    (symcalc.engine.derivation.Derivation.closed_form stops at the symbolic time limit)."""
    solved = {n for s in result.steps if s.solution for n in s.solution}
    return sorted(n for n in result.closed_form.names if n in solved and n != result.target)


def headline(result: Result) -> str:
    line = f"{result.target} = {with_unit(result.value, result.unit)}"
    if was_rounded(result):
        exact = float(np.min(result.exact)) if np.ndim(result.exact) else float(result.exact)
        whole_digits = len(str(int(abs(exact)))) if math.isfinite(exact) else 1
        # two decimals past the whole part (134816.4, not 134816: that is what it rounded from)
        line += f"  (exact {with_unit(result.exact, result.unit, digits=max(6, whole_digits + 2))}, rounded {result.rounding}"
        why = rounding_why(result)
        ruled = next((f.values for f in result.findings if f.kind == "rounded_to_rule"), None)
        if ruled:       # the nearest whole value breaks a layout rule: which, in the first line
            why = "; ".join(w for w in (why, f"{fmt(ruled['was'])} is refused: "
                                        + "; ".join(f"{r} ({n})" for r, n in zip(ruled["reasons"], ruled["rules"])))
                            if w)
        line += f": {why})" if why else ")"
    if result.looked_up:
        line += "  (looked up)"
    return line


def rounding_why(result: Result) -> str:
    """Why a whole-number answer rounded the way it did, when a given limit decided:
    '16 would give memory_headroom = -1.29 GB, below the given 0 GB'."""
    r = result.rounding_reason
    if not r or "value_there" not in r:
        return f"to keep the given {r['limit']}" if r and r.get("limit") else ""
    q = result.quantity
    other = with_unit(r["other"] * result.factor / q.factor, "")
    side = "above" if r["given_is"] == "at_most" else "below"
    # as many digits as it takes to show the two apart (30.0048 day above 30 day, not 30 above 30)
    digits = next((d for d in range(4, 13) if fmt(r["value_there"], d) != fmt(r["given"], d)), 12)
    return (f"{other} would give {r['limit']} = {with_unit(r['value_there'], r['unit'], digits)}, {side} the given "
            f"{with_unit(r['given'], r['unit'], digits)}")


def first_lines(result: Result) -> list[str]:
    """What the reader must know before the derivation: assumptions that stand in for a main
    input of the question, and options the given values implied."""
    # a given value read as its counterpart changes what was asked: said before anything else
    out = [f"reading: {s}" for s in result.readings]
    for a in result.assumptions:
        if a["kind"] in ("fallback", "stack"):
            out.append(f"assuming {a['name']} = {a['value']} ({a['source']})")
        elif a["kind"] in ("option", "set_by_option"):
            out.append(f"assuming {a['name']} = {a['value']} ({a['source']}; --option {a['name']}=... to change)")
        else:
            shown = f"{a['value']} = {a['computed']}" if a.get("computed") else a["value"]
            out.append(f"assuming {a['name']} = {shown} ({a['source']}; give {a['name']} to change)")
    out += [f"note: {n}" for n in result.notes]
    run = result.run_dict()
    said = run_sentence(run) if run else None
    out += [said] if said else []
    out += list(result.reported)
    out += list(result.fit)
    return out


def step_value_text(result: Result, name: str) -> str:
    """A step's value; for a rounded target, the exact value and then the rounding."""
    if name == result.target and was_rounded(result):
        return (f"{with_unit(result.exact, result.unit, digits=6)}, rounded {result.rounding} "
                f"to {with_unit(result.value, result.unit)}")
    return value_text(result, name)
