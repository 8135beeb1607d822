"""Plain text made safe for LaTeX and Markdown: whatever a formula file, a preset or a question
says is escaped where it is written, so no text can start a TeX command or a Markdown construct.
Pure string functions, below every layer that writes text."""

from __future__ import annotations

import re

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


def toml_string(text: str) -> str:
    """``text`` as a TOML basic string: quoted, with quotes, backslashes and control characters
    escaped (JSON's string escapes are TOML's)."""
    import json
    return json.dumps(str(text), ensure_ascii=False)
