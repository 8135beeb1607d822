"""LaTeX derivations: a fragment to paste, or a standalone document that pdflatex compiles.

Only packages of Debian's texlive-latex-base are used (amsmath, amssymb, geometry, graphicx),
so the document compiles on a minimal TeX installation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symcalc.engine.method import Method
from symcalc.escape import tex_escape
from symcalc.render.common import (
    has_arrays,
    latex_values,
    step_value_latex,
    unknown_views,
    value_latex,
)
from symcalc.library.printing import latex
from symcalc.units.format import with_unit_latex
from symcalc.render.text import was_rounded

if TYPE_CHECKING:   # pragma: no cover
    from symcalc.query.results import Result, StepView
    from symcalc.library.registry import Library


LONG = 140  # characters of LaTeX after which an equation is scaled to the line width

PREAMBLE = r"""\documentclass[11pt]{article}
\usepackage[margin=2.2cm]{geometry}
\usepackage{amsmath,amssymb}
\usepackage{graphicx}
\setlength{\parindent}{0pt}
\setlength{\parskip}{4pt}
"""


def _fit(body: str) -> str:
    """Math that is scaled down only if it is wider than the line."""
    return ("\\resizebox{\\ifdim\\width>\\linewidth\\linewidth\\else\\width\\fi}{!}"
            f"{{$\\displaystyle {body}$}}")


def display_math(body: str) -> str:
    """A displayed equation; one too long for the line is scaled down rather than overflowing."""
    if len(body) > LONG:
        return f"\\begin{{center}}{_fit(body)}\\end{{center}}"
    return f"\\[ {body} \\]"


def display_chain(parts: list[str]) -> str:
    """``a = b = c = d`` on one line if it fits, else one ``= ...`` per line, aligned."""
    if sum(len(p) for p in parts) <= LONG:
        return display_math(" = ".join(parts))
    lines = [f"{parts[0]} &= {parts[1] if len(parts[1]) <= LONG else _fit(parts[1])}"]
    for p in parts[2:]:
        lines.append(f"&= {p if len(p) <= LONG else _fit(p)}")
    return "\\begin{align*}\n" + " \\\\\n".join(lines) + "\n\\end{align*}"


def result_equation(result: Result) -> str:
    """``target = closed form = value``: the one-line summary (Jupyter shows this)."""
    lhs = result.quantity.latex
    if not result.has_closed_form:
        return f"{lhs} = {value_latex(result, result.target)}"
    return f"{lhs} = {result.closed_form.latex} = {value_latex(result, result.target)}"


def render_latex(result: Result, standalone: bool = False) -> str:
    """The derivation as LaTeX: given values, defaults, each step, the closed form, the answer."""
    lib = result.library
    numbers = None if has_arrays(result) else latex_values(result)
    q = result.quantity
    out: list[str] = []
    out.append(f"\\subsection*{{{tex_escape(q.description[:1].upper() + q.description[1:])}: "
               f"${q.latex}$ (\\texttt{{{tex_escape(result.target)}}})}}")
    out.append(display_math(f"{q.latex} = {value_latex(result, result.target)}"))
    if was_rounded(result):
        out.append(f"Rounded {tex_escape(q.whole or '')} from "
                   f"${step_value_latex(result, result.target)[0]}$ ({tex_escape(result.target)} is a whole number).")
    out.extend(_breakdown(result))
    out.append("\\paragraph{Given.}")
    out.append("\\begin{itemize}")
    for name, _gv in result.given.items():
        sym = lib.quantities[name].latex
        out.append(f"  \\item ${sym}$ (\\texttt{{{tex_escape(name)}}}) $= {value_latex(result, name, digits=10)}$")
    out.append("\\end{itemize}")
    if result.options:
        opts = ", ".join(f"\\texttt{{{tex_escape(k)}={tex_escape(v)}}}" for k, v in result.options.items())
        out.append(f"\\paragraph{{Options.}} {opts}.")
    if result.defaults_used:
        out.append("\\paragraph{Defaults used.}")
        out.append("\\begin{itemize}")
        for name, d in result.defaults_used.items():
            sym = lib.quantities[name].latex
            if "magnitude" in d:
                item = f"${sym}$ (\\texttt{{{tex_escape(name)}}}) $= {value_latex(result, name)}$"
            else:
                item = (f"${sym}$ (\\texttt{{{tex_escape(name)}}}) by the rule "
                        f"\\texttt{{{tex_escape(name)} = {tex_escape(d['value'])}}}")
            out.append(f"  \\item {item} --- {tex_escape(d['source'])}")
        out.append("\\end{itemize}")
    out.append("\\subsection*{Derivation}")
    for step in result.steps:
        out.extend(_step(step, lib, numbers, result))
    out.append("\\subsection*{Closed form}")
    if result.has_closed_form:
        out.append(display_math(f"{q.latex} = {result.closed_form.latex}"))
        if result.numeric_symbols:
            out.append(f"where {', '.join(tex_escape(n) for n in result.numeric_symbols)} is found numerically.")
    else:
        out.append(f"None: {tex_escape(result.target)} is found numerically.")
    if result.violations:
        out.append("\\paragraph{Out of bounds.} " + " ".join(tex_escape(v) for v in result.violations))
    body = "\n".join(out)
    if not standalone:
        return body
    title = f"symcalc: {tex_escape(result.target)}"
    return (PREAMBLE + f"\\title{{{title}}}\n\\date{{}}\n\\begin{{document}}\n\\maketitle\n"
            + body + "\n\\end{document}\n")




def _step(step: StepView, lib: Library, numbers: dict | None, result: Result) -> list[str]:
    out = []
    f0 = step.formulas[0]
    if len(step.formulas) == 1:
        out.append(f"\\paragraph{{Step {step.number}: {tex_escape(f0.title)}.}} "
                   f"Formula \\texttt{{{tex_escape(f0.id)}}}; {tex_escape(f0.source)}.")
    else:
        ids = ", ".join(f"\\texttt{{{tex_escape(f.id)}}}" for f in step.formulas)
        unknowns = ", ".join(f"${lib.quantities[n].latex}$" for n in step.solves_for)
        out.append(f"\\paragraph{{Step {step.number}: {len(step.formulas)} equations solved together for "
                   f"{unknowns}.}} Formulas {ids}.")
    for f in step.formulas:
        out.append(display_math(f.latex))
    for name, kind in unknown_views(result, step):
        sym = lib.quantities[name].latex
        if kind == "numeric":
            out.append(f"Solved numerically: ${sym} = {value_latex(result, name)}$.")
            continue
        if kind == "side":
            out.append(f"Also: ${sym} = {value_latex(result, name)}$.")
            continue
        expr = step.solution[name]
        parts = [sym]
        if step.method.rearranges:
            parts.append(expr.latex)
        if numbers is not None:
            parts.append(latex(expr.expr, numbers, numbers=True))
        parts.extend(step_value_latex(result, name))
        if step.method == Method.REARRANGED:
            out.append(f"Rearranged for ${sym}$ and evaluated:")
        elif step.method == Method.BLOCK:
            out.append(f"Solution for ${sym}$:")
        out.append(display_chain(parts))
        if step.numeric:
            out.append("(The closed form is singular at these values; the value was found numerically.)")
    return out


def _breakdown(result: Result) -> list[str]:
    """The parts of a derived total, one row each with its share, sub-parts indented under
    their part and a collective's exposed time beside its whole (nothing for a sweep)."""
    b = result.breakdown
    if b is None or has_arrays(result):
        return []
    lib = result.library
    rows: list[str] = []

    def add(parts: list[dict], depth: int) -> None:
        for p in parts:
            if p["value"] == 0 and not p.get("whole"):
                continue    # a part this layout does not have
            indent = "\\quad " * depth
            note = ""
            if "whole" in p:
                note = (f"of ${with_unit_latex(p['whole'], b['unit'])}$ "
                        f"(${with_unit_latex(p['hidden'], b['unit'])}$ hidden)")
            rows.append(f"  {indent}${lib.quantities[p['name']].latex}$ & \\texttt{{{tex_escape(p['name'])}}} & "
                        f"${value_latex(result, p['name'])}$ & {p['share'] * 100:.1f}\\,\\% & {note} \\\\")
            add(p.get("parts", []), depth + 1)

    add(b["parts"], 0)
    out = ["\\paragraph{Breakdown.} " + f"${lib.quantities[b['of']].latex}$ is the sum of:",
           "\\begin{center}\\begin{tabular}{llrrl}", *rows, "\\end{tabular}\\end{center}"]
    by: dict[str, list[str]] = {}
    for a in result.assumptions:
        if a.get("kind") == "set_by_option":
            by.setdefault(f"{a['option']}={a['option_value']}", []).append(f"{a['name']}={a['value']}")
    for setter, names in by.items():
        out.append(f"Set by \\texttt{{{tex_escape(setter)}}}: "
                   + ", ".join(f"\\texttt{{{tex_escape(n)}}}" for n in names) + ".")
    return out
