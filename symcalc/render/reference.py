"""The whole library as one LaTeX reference document (``symcalc formulas --latex FILE``).

A visitor over the loaded library: one section per formula file (its formulas with their
equation as written, the quantities it can be solved for, when it applies, source and notes),
then the quantities, options, and presets. Uses only packages of texlive-latex-base.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symcalc.escape import tex_escape
from symcalc.render.catalog import formula_kind
from symcalc.render.latex import display_math

if TYPE_CHECKING:
    from symcalc.library.presets import Preset
    from symcalc.library.records import FormulaSpec, OptionSpec, QuantitySpec
    from symcalc.library.registry import Library

PREAMBLE = r"""\documentclass[10pt]{article}
\usepackage[margin=2cm]{geometry}
\usepackage{amsmath,amssymb}
\usepackage{graphicx}
\usepackage{longtable}
\setlength{\parindent}{0pt}
\setlength{\parskip}{3pt}
\sloppy
\title{symcalc: the formula library}
\date{}
"""


def _unit(q: QuantitySpec) -> str:
    return tex_escape(q.display_unit or q.unit or ("text" if q.kind == "text" else "count"))


def render_reference(library: Library, presets: dict[str, dict[str, Preset]] | None = None) -> str:
    """The library reference as a standalone LaTeX document."""
    out = [PREAMBLE, r"\begin{document}", r"\maketitle"]
    out.append(f"{len(library.formulas)} formulas and algorithms, {len(library.quantities)} quantities and "
               f"{len(library.options)} options. Every equation is a law in every direction: symcalc solves it for "
               "whichever quantity a question needs, and checks its dimensions when the library loads.")
    out.append(r"\tableofcontents")
    by_file: dict[str, list[FormulaSpec]] = {}
    for f in library.formulas.values():
        by_file.setdefault(f.file, []).append(f)
    for file in sorted(by_file):
        meta = library.meta.get(file.rsplit(".", 1)[0], {})
        out.append(f"\\section{{{tex_escape(meta.get('title', file))}}}")
        if meta.get("description"):
            out.append(tex_escape(meta["description"]) + f" (\\texttt{{{tex_escape(file)}}})")
        for f in by_file[file]:
            out.extend(_formula(f, library))
    out.append(r"\section{Quantities}")
    out.append(r"\begin{longtable}{p{0.26\linewidth}p{0.14\linewidth}p{0.12\linewidth}p{0.4\linewidth}}")
    out.append(r"\textbf{name} & \textbf{symbol} & \textbf{unit} & \textbf{meaning} \\ \hline \endhead")
    for q in sorted(library.quantities.values(), key=lambda q: q.name):
        meaning = tex_escape(q.description)
        if q.default is not None:
            meaning += f" Default {tex_escape(q.default)}" + (f" ({tex_escape(q.default_source)})" if q.default_source else "") + "."
        out.append(f"\\texttt{{{tex_escape(q.name)}}} & ${q.latex}$ & {_unit(q)} & {meaning} \\\\")
    out.append(r"\end{longtable}")
    out.append(r"\section{Options}")
    for o in sorted(library.options.values(), key=lambda o: o.name):
        out.append(f"\\paragraph{{\\texttt{{{tex_escape(o.name)}}}}} {tex_escape(o.description)} "
                   f"Default: \\texttt{{{tex_escape(o.default)}}}.")
        out.append(r"\begin{itemize}")
        for value, text in o.declared.items():
            sets = o.sets.get(value, {})
            extra = (" Sets " + ", ".join(f"{tex_escape(k)} = {tex_escape(v)}" for k, v in sets.items()) + ".") if sets else ""
            extra += _option_links(o, value, library)
            out.append(f"  \\item \\texttt{{{tex_escape(value)}}}: {tex_escape(text)}{extra}")
        out.append(r"\end{itemize}")
    if presets:
        out.extend(_presets(presets))
    out.append(r"\end{document}")
    return "\n".join(out) + "\n"


def _option_links(o: OptionSpec, value: str, library: Library) -> str:
    """What a value says of other options (a training stack's defaults, what it runs with) and
    of given values, as sentences for the reference."""
    out = ""
    if o.option_defaults.get(value):
        out += " Options: " + ", ".join(f"{tex_escape(k)}={tex_escape(v)}" for k, v in o.option_defaults[value].items()) + "."
    if o.supports.get(value):
        out += " Supports " + "; ".join(f"{tex_escape(k)} {tex_escape(', '.join(v))}"
                                        for k, v in library.said_values(o.supports[value]).items()) + "."
    for r in o.requires.get(value, ()):
        out += f" Requires {tex_escape(r.text)} ({tex_escape(r.why)})."
    return out


def _formula(f: FormulaSpec, library: Library) -> list[str]:
    kind = {"law": "formula", "forward only": "formula, forward only"}.get(formula_kind(f), formula_kind(f))
    out = [f"\\subsection*{{{tex_escape(f.title)}}}",
           f"\\texttt{{{tex_escape(f.id)}}} ({kind})"]
    out.append(display_math(f.latex))
    solvable = [q for q, how in f.solvability.items() if how != "none"]
    facts = [f"Solvable for: {', '.join(tex_escape(q) for q in solvable)}."]
    if f.when:
        facts.append("Applies when " + ", ".join(f"{tex_escape(k)} = {tex_escape('|'.join(v))}"
                                                   for k, v in library.said_values(f.when).items()) + ".")
    facts.append(f"Source: {tex_escape(f.source)}.")
    if f.notes:
        facts.append(f"Notes: {tex_escape(f.notes)}")
    out.append(" ".join(facts))
    return out


def _presets(presets: dict[str, dict[str, Preset]]) -> list[str]:
    out = [r"\section{Presets}"]
    for kind, table in presets.items():
        out.append(f"\\subsection*{{{'Hardware' if kind == 'hardware' else 'Models'}}}")
        for p in table.values():
            out.append(f"\\paragraph{{{tex_escape(p.title)}}} \\texttt{{{tex_escape(p.key)}}}"
                       + (f" (also {', '.join(tex_escape(a) for a in p.aliases)})" if p.aliases else "")
                       + f". {tex_escape(p.source)}." + (f" {tex_escape(p.notes)}" if p.notes else ""))
            out.append(r"\begin{itemize}")
            for name, (value, source) in {**p.values, **{f'peak_flops ({k}, dense)': v for k, v in p.peak_flops.items()}}.items():
                out.append(f"  \\item \\texttt{{{tex_escape(name)}}} = {tex_escape(value)} --- {tex_escape(source)}")
            if p.options:
                out.append("  \\item options: " + ", ".join(f"{tex_escape(k)}={tex_escape(v)}" for k, v in p.options.items()))
            out.append(r"\end{itemize}")
    return out
