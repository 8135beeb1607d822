"""Markdown derivation: headings, a table of the given values, and the steps with $$ math.

Text from formula files, presets and the question (titles, sources, values as written,
messages) is escaped with :func:`md_escape`; the math is built from whitelisted symbols
(``symcalc.library.texcheck``) and sympy's printer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symcalc.escape import md_escape
from symcalc.render.common import (
    has_arrays,
    latex_values,
    step_value_latex,
    unknown_views,
    value_latex,
)
from symcalc.library.printing import latex
from symcalc.render.latex import result_equation
from symcalc.render.text import headline

if TYPE_CHECKING:   # pragma: no cover
    from symcalc.query.results import Result



def _code(text: str) -> str:
    """``text`` as inline code: a name, an option; backticks inside would end the span."""
    return f"`{str(text).replace('`', chr(39))}`"


def render_markdown(result: Result) -> str:
    lib = result.library
    numbers = None if has_arrays(result) else latex_values(result)
    out = [f"# {md_escape(result.target)}", "", f"**{md_escape(headline(result))}**", "",
           f"$$ {result_equation(result)} $$", ""]
    out += ["## Given", "", "| quantity | value |", "|---|---|"]
    out += [f"| {_code(name)} | {md_escape(g.text)} |" for name, g in result.given.items()]
    out.append("")
    if result.options:
        out += ["## Options", "", ", ".join(_code(f"{k}={v}") for k, v in result.options.items()), ""]
    if result.defaults_used:
        out += ["## Defaults used", "", "| quantity | default | source |", "|---|---|---|"]
        out += [f"| {_code(name)} | {md_escape(d['value'])} | {md_escape(d['source'])} |"
                for name, d in result.defaults_used.items()]
        out.append("")
    out += ["## Derivation", ""]
    for step in result.steps:
        ids = ", ".join(_code(f.id) for f in step.formulas)
        title = step.formulas[0].title if len(step.formulas) == 1 else \
            f"{len(step.formulas)} equations solved together for {', '.join(step.solves_for)}"
        out += [f"### {step.number}. {md_escape(title)}", "",
                f"Formula {ids}; source: {md_escape(step.formulas[0].source)}", ""]
        for f in step.formulas:
            out += [f"$$ {f.latex} $$", ""]
        for name, kind in unknown_views(result, step):
            sym = lib.quantities[name].latex
            if kind == "numeric":
                out += [f"Solved numerically: ${sym} = {value_latex(result, name)}$", ""]
                continue
            if kind == "side":
                out += [f"Also ${sym} = {value_latex(result, name)}$", ""]
                continue
            expr = step.solution[name]
            parts = [sym] + ([expr.latex] if step.method.rearranges else [])
            if numbers is not None:
                parts.append(latex(expr.expr, numbers, numbers=True))
            parts.extend(step_value_latex(result, name))
            out += [f"$$ {' = '.join(parts)} $$", ""]
    if result.violations:
        out += ["## Out of bounds", ""] + [f"- {md_escape(v)}" for v in result.violations] + [""]
    return "\n".join(out)
