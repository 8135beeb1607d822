"""What every renderer needs from a Result: symbol maps and the equations of each step."""

from __future__ import annotations

import re

import numpy as np
from .expressions import wrap
from .numbers import fmt, fmt_latex, with_unit, with_unit_latex


def latex_symbols(library) -> dict:
    return {q.symbol: q.latex for q in library.quantities.values()}


def text_symbols(library) -> dict:
    return {q.symbol: q.name for q in library.quantities.values()}


def _values(result, latex_mode: bool) -> dict:
    out = {}
    lib = result.library
    for name in result.values:
        if name not in lib.quantities:
            continue
        value, unit = result.display(name)
        if np.ndim(value) > 0:
            continue
        digits = 10 if name in result.given else 4   # given values as written, derived ones rounded
        shown = with_unit_latex(value, unit, digits) if latex_mode else with_unit(value, unit, digits)
        out[lib.quantities[name].symbol] = wrap(shown, latex_mode)
    return out


def latex_values(result) -> dict:
    """Quantity symbol -> its value with unit in LaTeX (scalars only)."""
    return _values(result, True)


def text_values(result) -> dict:
    return _values(result, False)


def has_arrays(result) -> bool:
    return any(np.ndim(v) > 0 for v in result.values.values())


def needed_downstream(result, step) -> set[str]:
    """Unknowns of ``step`` that the target is, or that a later step uses."""
    later = {q for s in result.steps if s.number > step.number for q in s.inputs}
    return {u for u in step.solves_for if u == result.target or u in later}


def unknown_views(result, step):
    """How each unknown of a step is shown: (name, "numeric") when no closed form was used,
    (name, "side") for a block's by-product nothing later needs (value only), else
    (name, "solved") with the full rearranged form and numbers."""
    needed = needed_downstream(result, step)
    views = [(name, "numeric" if name not in step.solution else "solved" if name in needed else "side")
             for name in step.solves_for]
    yield from sorted(views, key=lambda v: v[1] == "side")   # the values that matter first


def step_value_latex(result, name: str) -> list[str]:
    """The value(s) closing a step's chain of equalities: the exact value and then the
    rounded one for a rounded whole-number target, else just the value."""
    from .text import was_rounded
    if name == result.target and was_rounded(result):
        return [with_unit_latex(result.exact, result.unit, digits=6),
                value_latex(result, name) + r"\ \text{(rounded " + result.rounding + ")}"]
    return [value_latex(result, name)]


def value_text(result, name: str) -> str:
    v, unit = result.display(name)
    return with_unit(v, unit)


def value_latex(result, name: str, digits: int = 4) -> str:
    v, unit = result.display(name)
    return with_unit_latex(v, unit, digits)


_TEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
                "_": r"\_\allowbreak{}", "{": r"\{", "}": r"\}", "~": r"$\sim$", "^": r"\^{}",
                "<": r"\textless{}", ">": r"\textgreater{}"}
_TEX_RE = re.compile("|".join(re.escape(k) for k in _TEX_SPECIAL))
_UNICODE = {"µ": r"$\mu$", "μ": r"$\mu$", "×": r"$\times$", "≈": r"$\approx$", "≤": r"$\le$",
            "≥": r"$\ge$", "→": r"$\to$", "–": "--", "—": "---", "’": "'", "‘": "`", "“": "``",
            "”": "''", "Ψ": r"$\Psi$", "ψ": r"$\psi$", "α": r"$\alpha$", "β": r"$\beta$",
            "γ": r"$\gamma$", "κ": r"$\kappa$", "τ": r"$\tau$", "δ": r"$\delta$", "·": r"$\cdot$",
            "²": r"$^2$", "√": r"$\surd$", "−": "-", "…": r"\ldots{}", "é": r"\'e", "ü": r'\"u'}


_CONTROL = re.compile(r"[\x00-\x1f\x7f]+")


def tex_escape(text: str) -> str:
    r"""Plain text -> LaTeX text mode, safe for pdflatex without extra packages.

    Every character TeX treats specially is escaped (so no text can start a command, such as
    ``\input`` reading a file), characters outside ASCII become their LaTeX spelling or '?',
    and line breaks and other control characters become a space (a blank line would end the
    paragraph, or the heading, it is written in)."""
    out = _TEX_RE.sub(lambda m: _TEX_SPECIAL[m.group(0)], _CONTROL.sub(" ", str(text)))
    for ch, rep in _UNICODE.items():
        out = out.replace(ch, rep)
    return "".join(c if ord(c) < 128 else "?" for c in out)


# '_' only where it can open or close emphasis: inside a word (n_gpus) CommonMark never does
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|$~&#]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md_escape(text: str) -> str:
    """Plain text -> Markdown text that renders as itself: no emphasis, links, images, raw HTML
    or math (and no raw TeX, which pandoc passes on to LaTeX) can start inside it; a line break
    (which would end a table row or start a new block) becomes a space."""
    return _MD_SPECIAL.sub(r"\\\1", _CONTROL.sub(" ", str(text)))


__all__ = ["latex_symbols", "text_symbols", "latex_values", "text_values", "has_arrays",
           "value_text", "value_latex", "tex_escape", "md_escape", "fmt", "fmt_latex"]
