"""Errors a user can cause, each with a machine-readable ``kind``.

Every error that reaches the CLI becomes one line of text (or ``{"error": {"kind", "message"}}``
under ``--json``) and exit status 2. The message must say what was wrong, with what, and what to
do instead; the kind lets scripts branch without parsing English.
"""

from __future__ import annotations

import difflib
import os
import re
import traceback
from collections.abc import Iterable

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
MAX_MESSAGE = 600


def one_line(text: str) -> str:
    """``text`` safe to print as one line: control characters (a newline inside a value a user
    typed) shown escaped, and very long echoes of user text cut in the middle."""
    text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], str(text))
    if len(text) > MAX_MESSAGE:
        text = text[:MAX_MESSAGE - 60] + " ... " + text[-55:]
    return text


class SymcalcError(Exception):
    """Base class of every error symcalc raises on purpose. The message is always one line."""

    kind = "error"

    def __init__(self, message: str):
        message = one_line(message)
        super().__init__(message)
        self.message = message

    def to_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message}

    def _render_traceback_(self) -> list[str]:
        """IPython and Jupyter show what this returns instead of the traceback: the one line
        that says what was wrong (the frames are symcalc's internals, not the user's code).
        SYMCALC_TRACEBACK=1 shows the whole traceback, for a bug report."""
        if os.environ.get("SYMCALC_TRACEBACK", "").strip() not in ("", "0"):
            return "".join(traceback.format_exception(type(self), self, self.__traceback__)).rstrip("\n").split("\n")
        return [f"{type(self).__name__}: {self.message}"]


class LibraryError(SymcalcError):
    """A formula, quantity or option file is malformed or dimensionally inconsistent."""

    kind = "library"


class UnknownNameError(SymcalcError):
    """A quantity, option or formula name that the library does not define."""

    kind = "unknown_name"

    def __init__(self, message: str, suggestions: Iterable[str] = ()):
        self.suggestions = list(suggestions)
        super().__init__(message)


class UnknownOptionError(UnknownNameError):
    kind = "unknown_option"


class BadOptionValueError(SymcalcError):
    kind = "bad_option_value"


class MalformedValueError(SymcalcError):
    """A value that cannot be read as a number with a unit."""

    kind = "malformed_value"


class AmbiguousUnitError(MalformedValueError):
    """A unit spelling with two plausible readings (``TFLOPs``: a count or a rate?)."""

    kind = "ambiguous_unit"


class DimensionError(SymcalcError):
    """A value whose unit has the wrong dimension for its quantity."""

    kind = "dimension"


class DomainError(SymcalcError):
    """A given value outside its quantity's domain (negative GPUs, MFU above 1, NaN)."""

    kind = "out_of_domain"


class UnderdeterminedError(SymcalcError):
    """The knowns do not determine the target; ``missing`` lists sets that would."""

    kind = "underdetermined"

    def __init__(self, message: str, missing: list[list[str]] | None = None):
        self.missing = missing or []
        # [given, instead]: a value given whose counterpart (a replica's rate, all replicas')
        # would settle the target in its place (symcalc.query.rescope)
        self.rescopings: list[list[str]] = []
        # quantities that answer what the target is often asked for and that the knowns settle
        # (the most parameters a decode rate allows, for n_params): questions the user may mean
        self.related: list[str] = []
        # the one of them whose route reads every given value the others read: answered instead
        # by solve (symcalc.query.rescope.answered_instead), None when there is no one such
        self.answer_instead: str | None = None
        super().__init__(message)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["missing"] = self.missing
        if self.rescopings:
            d["instead"] = self.rescopings
        if self.related:
            d["related"] = self.related
        return d


class OutOfBoundsError(SymcalcError):
    """A computed value outside its quantity's bounds (MFU > 1, negative memory)."""

    kind = "out_of_bounds"


class QueryError(SymcalcError):
    """A malformed query (a quantity given twice, a bad sweep axis)."""

    kind = "bad_query"


class NoSolutionError(SymcalcError):
    """The equations have no admissible solution for the given values."""

    kind = "no_solution"


class NoFitError(NoSolutionError):
    """An inverse question (the largest batch, the fewest GPUs) whose memory parts already
    exceed the capacity at any value: nothing fits. A solve says which options would fit."""


class NotDeterminedError(NoSolutionError):
    """The equations hold for a whole range of the unknown (a plateau of Min/Max, a term a
    zero default removes): these values do not pin it down. Not "no value satisfies"."""

    kind = "not_determined"


class ConflictError(SymcalcError):
    """Given values that contradict each other: the answer would have to ignore one of them.
    ``conflicts`` holds one record per disagreement (as in ``Result.conflicts``)."""

    kind = "conflict"

    def __init__(self, message: str, conflicts: list[dict] | None = None):
        self.conflicts = conflicts or []
        super().__init__(message)

    def to_dict(self) -> dict:
        d = super().to_dict()
        d["conflicts"] = self.conflicts
        return d


class OutputError(SymcalcError):
    """An output file that cannot be written (no name, no such directory, a full disk)."""

    kind = "output"


class TimeLimitError(SymcalcError):
    """A question that did not end within its time limit (symcalc.budget)."""

    kind = "time_limit"


class TooComplexError(SymcalcError):
    """A question whose symbolic work nested deeper than Python's stack allows: refused in one
    line, and sympy's caches, which the interrupted work may have left half-written, cleared so
    that a long-lived process answers its next questions as a fresh one would."""

    kind = "too_complex"


def closest_names(word: str, candidates: Iterable[str], n: int = 3) -> list[str]:
    """The candidates most similar to ``word`` (for "did you mean" hints), best first.

    Case-insensitive; a candidate that contains the word, or is contained in it, counts as
    close even when difflib's ratio is low (``gpus`` -> ``n_gpus``).
    """
    pool = list(dict.fromkeys(candidates))
    lowered = {c.lower(): c for c in pool}
    w = str(word).lower()           # a key of the wrong type (options={5: 2}) is still named
    hits = difflib.get_close_matches(w, list(lowered), n=n, cutoff=0.6)
    result = [lowered[h] for h in hits]
    if len(result) < n and len(w) >= 3:
        for c in pool:
            cl = c.lower()
            if c not in result and (w in cl or (len(cl) >= 3 and cl in w)):
                result.append(c)
            if len(result) >= n:
                break
    # one spelling of a name, not each of them (MFU and mfu, a100-80gb and a100_80gb): the one in
    # lower case, the way names are written, where there is one
    chosen: dict[str, str] = {}
    for c in result:
        key = c.lower().replace("-", "_")
        if key not in chosen or (c == c.lower() and chosen[key] != chosen[key].lower()):
            chosen[key] = c
    return list(chosen.values())[:n]


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """" Did you mean: a, b?" or "" when nothing is close."""
    near = closest_names(word, candidates)
    return f" Did you mean: {', '.join(near)}?" if near else ""


def unknown_key(keys: Iterable[str], allowed: Iterable[str], holds: str) -> str | None:
    """The sentence for the first key of ``keys`` not in ``allowed`` ("unknown key 'x'. Did you
    mean: y? A run has: ..."), with ``holds`` before the allowed keys; None when all are known."""
    allowed = sorted(allowed)
    unknown = sorted(set(keys) - set(allowed))
    if not unknown:
        return None
    return f"unknown key '{unknown[0]}'.{did_you_mean(unknown[0], allowed)} {holds} {', '.join(allowed)}"
