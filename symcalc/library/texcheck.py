"""Which LaTeX a formula file may contain, and which text: checked at load, field by field.

A quantity's ``latex`` symbol is copied into every LaTeX document and Markdown page symcalc
writes (it is math, so it cannot be escaped). TeX is a programming language: ``\\input{FILE}``
pulls any readable file into the PDF, ``\\write18{...}`` runs a command where shell escape is
on, ``\\catcode`` and ``^^5c`` rewrite what the rest of the document means. A blacklist of such
primitives is never complete, so this is a whitelist: a symbol is letters, digits, a little
punctuation, balanced braces, and the control sequences of mathematical notation below (Greek
letters, fonts, accents, operators); anything else is refused with the field named.

Text fields (titles, descriptions, sources, notes) are escaped wherever they are written
(``symcalc.render.common``); here they only have to be text: no control characters (a
terminal escape sequence, a bidirectional override that makes text read other than it is).
"""

from __future__ import annotations

import re
import unicodedata

MAX_LATEX = 200

GREEK = {"alpha", "beta", "gamma", "delta", "epsilon", "varepsilon", "zeta", "eta", "theta", "vartheta", "iota",
         "kappa", "lambda", "mu", "nu", "xi", "pi", "varpi", "rho", "varrho", "sigma", "varsigma", "tau",
         "upsilon", "phi", "varphi", "chi", "psi", "omega",
         "Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Upsilon", "Phi", "Psi", "Omega"}
MACROS = GREEK | {
    # fonts and text inside math
    "mathrm", "mathit", "mathbf", "mathsf", "mathtt", "mathcal", "text", "textrm", "textit", "operatorname",
    # accents
    "hat", "bar", "tilde", "vec", "dot", "ddot", "check", "breve", "overline", "underline", "widehat", "widetilde",
    # symbols and operators
    "prime", "ell", "infty", "partial", "nabla", "hbar", "dagger", "ddagger", "star", "ast", "circ", "bullet",
    "times", "cdot", "div", "pm", "mp", "le", "ge", "leq", "geq", "ne", "neq", "approx", "sim", "simeq", "propto",
    "equiv", "to", "rightarrow", "leftarrow", "mid", "parallel", "perp", "ldots", "cdots", "dots",
    "log", "ln", "exp", "min", "max", "sup", "inf", "lim", "sum", "prod", "frac", "dfrac", "tfrac", "sqrt",
    "left", "right", "big", "Big", "langle", "rangle", "lfloor", "rfloor", "lceil", "rceil", "lbrace", "rbrace",
    "quad", "qquad",
}
CONTROL_SYMBOLS = set(",;!: {}_%$#&|")      # \, \; \! thin spaces; \{ \} \_ \% \$ \# \& \| the characters
PLAIN = re.compile(r"[A-Za-z0-9 _^{}()\[\]+\-*/=,.;:'|!<>]")
_MACRO = re.compile(r"\\([A-Za-z]+|.)", re.DOTALL)


class UnsafeTeX(ValueError):
    """LaTeX outside the whitelist; the message says what was found."""


def check_latex(text: str) -> None:
    """Raise UnsafeTeX unless ``text`` is a math-mode symbol within the whitelist."""
    if len(text) > MAX_LATEX:
        raise UnsafeTeX(f"is longer than {MAX_LATEX} characters")
    if "^^" in text:
        raise UnsafeTeX("contains '^^', TeX's notation for any character by its code")
    depth = 0
    pos = 0
    while pos < len(text):
        ch = text[pos]
        if ch == "\\":
            m = _MACRO.match(text, pos)
            name = m.group(1) if m else ""
            if len(name) == 1 and not name.isalpha():
                if name not in CONTROL_SYMBOLS:
                    raise UnsafeTeX(f"contains '\\{_show(name)}', which is not allowed")
            elif name not in MACROS:
                raise UnsafeTeX(f"uses '\\{name}', which is not among the allowed macros (Greek letters, "
                                "\\mathrm, \\text, accents, \\frac, \\sqrt, operators; nothing that reads, "
                                "writes, runs or redefines)")
            pos += 1 + max(len(name), 1)
            continue
        if not PLAIN.match(ch):
            raise UnsafeTeX(f"contains {_show(ch)!r}, which is not allowed in a symbol "
                            "(letters, digits, _ ^ { } ( ) [ ] + - * / = , . ; : ' | ! < > and macros)")
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if depth < 0:
            raise UnsafeTeX("closes a brace '}' that was never opened")
        pos += 1
    if depth:
        raise UnsafeTeX("leaves a brace '{' open")
    lefts, rights = len(re.findall(r"\\left(?![A-Za-z])", text)), len(re.findall(r"\\right(?![A-Za-z])", text))
    if lefts != rights:
        raise UnsafeTeX(f"has {lefts} \\left but {rights} \\right")


def check_text(text: str) -> None:
    """Raise UnsafeTeX if ``text`` holds a control or format character (other than newline
    and tab): invisible in a document, they make it print or read other than it is."""
    for ch in text:
        if ch in "\n\t":
            continue
        if unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Cn"):
            raise UnsafeTeX(f"contains the control character {_show(ch)}")


def _show(ch: str) -> str:
    return ch if ch.isprintable() else f"U+{ord(ch):04X}"
