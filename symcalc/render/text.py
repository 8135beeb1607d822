"""Plain-text derivation, as the CLI prints it."""

from __future__ import annotations

import numpy as np

from .common import has_arrays, text_symbols, text_values, unknown_views, value_text
from .expressions import text
from .numbers import with_unit


def render_text(result) -> str:
    """The answer, then each step: formula as cited, rearranged form, numbers, result."""
    lib = result.library
    names = text_symbols(lib)
    numbers = None if has_arrays(result) else text_values(result)
    lines = [headline(result), ""]
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
            if step.method in ("rearranged", "block"):
                lines.append(f"     -> {name} = {text(expr, names)}")
            shown = step_value_text(result, name)
            substituted = text(expr, numbers) if numbers is not None else shown
            # an identity (n_active_params = n_params) shows its value once
            lines.append(f"     = {substituted} = {shown}" if substituted != shown else f"     = {shown}")
        if step.numeric and step.method != "numeric":
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
    lines.append(closed_form_line(result, names))
    if result.unused:
        lines.append(f"Not needed: {', '.join(result.unused)}")
    for w in result.violations:
        lines.append(f"OUT OF BOUNDS: {w}")
    return "\n".join(lines)


def breakdown_lines(result) -> list[str]:
    """The parts of a total the derivation adds up (step_time's compute, communication, bubble...)
    with their shares; nothing for a sweep or a derivation without such a sum."""
    b = result.breakdown
    if b is None or np.ndim(b["total"]):
        return []
    width = max(len(p["name"]) for p in b["parts"])
    lines = [f"Breakdown of {b['of']} = {with_unit(b['total'], b['unit'])}:"]
    for p in b["parts"]:
        if p["value"] == 0:
            continue    # a part this layout does not have (no context or expert parallelism)
        desc = result.library.quantities[p["name"]].description
        lines.append(f"  {p['name']:<{width}}  {with_unit(p['value'], b['unit']):>12}  {p['share'] * 100:5.1f} %  "
                     f"{desc[:72] + ('...' if len(desc) > 72 else '')}")
    return lines + [""]


def closed_form_line(result, names) -> str:
    if not result.steps:
        return f"{result.target} is given (no derivation)"
    if not result.has_closed_form:
        return f"Closed form: none ({result.target} is found numerically)"
    line = f"Closed form: {result.target} = {text(result.closed_form, names)}"
    if result.numeric_symbols:
        line += f"  (where {', '.join(result.numeric_symbols)} is found numerically)"
    return line


def was_rounded(result) -> bool:
    """True when a whole-number answer differs visibly from its exact value."""
    if result.exact is None:
        return False
    exact = np.asarray(result.exact, dtype=float)
    return bool(np.any(np.abs(exact - np.asarray(result.value)) > 1e-6 * np.maximum(np.abs(exact), 1)))


def headline(result) -> str:
    line = f"{result.target} = {with_unit(result.value, result.unit)}"
    if was_rounded(result):
        line += f"  (exact {with_unit(result.exact, result.unit, digits=6)}, rounded {result.rounding})"
    return line


def step_value_text(result, name: str) -> str:
    """A step's value; for a rounded target, the exact value and then the rounding."""
    if name == result.target and was_rounded(result):
        return (f"{with_unit(result.exact, result.unit, digits=6)}, rounded {result.rounding} "
                f"to {with_unit(result.value, result.unit)}")
    return value_text(result, name)
