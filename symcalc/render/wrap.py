"""Text output wrapped to the terminal's width, never splitting a number from its unit.

A `solve` answer runs to hundreds of lines, some of them (an option's note, a closed form, a
run sentence) hundreds of characters long; a terminal cuts or folds them mid-word. Each line
longer than the width is broken at spaces, its continuation indented under the line's own
indent plus four, so a reader sees where a line goes on. A number stays next to its unit
(``362 GB/s``, ``8,192 token``) and a word is never split, but for a closed form with no
spaces longer than the width, which is broken after an operator or a comma that is not part of
a number (``*``, ``/``, ``(``, ``,`` not between digits, ``+``/``-`` not in an exponent).
"""

from __future__ import annotations

import os
import re
import shutil
import sys
import textwrap

DEFAULT_WIDTH = 80
MIN_WIDTH = 40
HANG = 4
_GLUE = "\x00"          # stands for a space that must not break, while textwrap works
# a number, then a space, then a unit-like word (letters, %, /, ^, digits after the first letter)
_NUMBER_UNIT = re.compile(r"(?<![\w.])([-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?) (?=[A-Za-z%µ°][\w/^%·*.-]*)")


def width() -> int | None:
    """Columns to wrap at: COLUMNS when set (as a shell exports it), else the terminal's own
    width when standard output is one; None (no wrapping) when it is a pipe or a file, whose
    reader (grep, a script, a test) wants each line whole; never fewer than MIN_WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit():
        return max(MIN_WIDTH, int(columns))
    if not sys.stdout.isatty():
        return None
    return max(MIN_WIDTH, shutil.get_terminal_size((DEFAULT_WIDTH, 24)).columns)


def wrap_text(text: str, columns: int | None = None) -> str:
    """``text`` with every line longer than ``columns`` (default :func:`width`) broken at
    spaces with a hanging indent; shorter lines are unchanged."""
    limit = columns or width()
    if limit is None:
        return text
    out: list[str] = []
    for line in text.split("\n"):
        if len(line) <= limit:
            out.append(line)
            continue
        indent = line[:len(line) - len(line.lstrip(" "))]
        glued = _NUMBER_UNIT.sub(lambda m: m.group(1) + _GLUE, line.strip(" "))
        pieces = textwrap.wrap(glued, width=limit, initial_indent=indent, subsequent_indent=indent + " " * HANG,
                               break_long_words=False, break_on_hyphens=False)
        hang = indent + " " * HANG
        for k, piece in enumerate(pieces or [line]):
            out += _split_long(piece.replace(_GLUE, " "), limit, hang if k else indent, hang)
    return "\n".join(out)


# where a closed form may break: after an operator or a comma, never inside a number
_BREAK = re.compile(r"(?:[*/(]|,(?!\d)|(?<![eE])[+-](?!\d*\.?\d*[eE]))")


def _split_long(piece: str, limit: int, first: str, hang: str) -> list[str]:
    """``piece`` (already indented by ``first``) cut into lines of at most ``limit`` at the
    last break point of _BREAK before the limit; a piece with no break point stays whole."""
    lines: list[str] = []
    while len(piece) > limit:
        start = len(first) if not lines else len(hang)
        cut = max((m.end() for m in _BREAK.finditer(piece, start + 1, limit)), default=None)
        if cut is None or cut >= len(piece):
            break
        lines.append(piece[:cut].rstrip())
        piece = hang + piece[cut:].lstrip()
    return lines + [piece]
