"""The project's unit registry and the parsing of user-written values and units.

One pint registry per process, built from ``units.txt`` next to this module (a registry of our
own: FLOP, byte, bit, token and USD are real units, ``Gb`` is a gigabit). Parsing is kept apart
from arithmetic: this module turns text into pint quantities and units, and answers questions
about dimensions; the engine itself computes with plain floats in base units.
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from pathlib import Path

import pint

from symcalc.errors import AmbiguousUnitError, MalformedValueError
from symcalc.units import pintcache

DEFINITIONS = Path(__file__).with_name("units.txt")

# Base unit of each base dimension, in the order dimensions are spelled in messages.
BASE_UNITS = {
    "[compute]": "FLOP",
    "[information]": "byte",
    "[text]": "token",
    "[currency]": "USD",
    "[power]": "W",
    "[time]": "s",
}

FLOPS_WORD = _FLOPS_SPELLING = re.compile(r"(?<![A-Za-z_])([A-Za-zµμ]{0,2})(FLOPS|FLOPs|flops|Flops)(?![A-Za-z_])")
_ALLOWED_CHARS = re.compile(r"^[\w\s.+\-*/^()%$µμ]*$")


@lru_cache(maxsize=1)
def registry() -> pint.UnitRegistry:
    """The process-wide unit registry (built once: ~15 ms parsing units.txt, a third of that
    when pint's parsed definitions come from symcalc's cache, authenticated like its every
    entry, see symcalc.units.pintcache; a start-up cost every command pays)."""
    ureg = pintcache.build(str(DEFINITIONS), autoconvert_offset_to_baseunit=False)
    ureg.formatter.default_format = "~P"
    return ureg


def Q(value, unit: str = "") -> pint.Quantity:
    """A quantity in the symcalc registry: ``Q(989, "TFLOP/s")``, ``Q(np.arange(8, 65), "")``."""
    ureg = registry()
    return ureg.Quantity(value, parse_unit(unit) if unit else ureg.dimensionless)


def _normalise(text: str) -> str:
    """Rewrite spellings pint would misread, and reject those with two readings."""
    m = _FLOPS_SPELLING.search(text)
    if m:
        word = m.group(0)
        prefix = m.group(1)
        # "tflops" means tera, not a "t" prefix; milli/mega (m/M) stay as written
        prefix = prefix.upper() if prefix in ("t", "g", "p", "e") else prefix
        raise AmbiguousUnitError(
            f"'{word}' is ambiguous: write '{prefix}FLOP' for an amount of compute "
            f"or '{prefix}FLOP/s' for a rate"
        )
    # "$" is not a pint identifier character: "$2/hour" would silently lose the dollar.
    text = text.replace("$", " USD ")
    text = text.replace("\u2212", "-")  # unicode minus
    return text.strip()


_NUMBER = r"[+-]?(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
# a number, optionally as a fraction of two plain numbers ("8/3"), then the unit
_VALUE = re.compile(rf"^({_NUMBER})(?:\s*/\s*(\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)(?![\w.]))?\s*(.*)$")
_DOLLAR_FIRST = re.compile(rf"^USD\s*({_NUMBER})\s*(.*)$")
# A unit is names joined by *, / or spaces, each with at most one one-digit power: enough for
# "TFLOP/s", "USD/hour", "s^-1", and too little for pint to be asked to compute 9**9**9.
# One level of brackets is allowed: "USD/(TB/s*hour)".
_ATOM = r"[A-Za-zµμ_%]+(?:\s*(?:\^|\*\*)\s*-?\d)?"
_PRODUCT = rf"{_ATOM}(?:\s*[*/]\s*{_ATOM}|\s+{_ATOM})*"
_TERM = rf"(?:{_ATOM}|\(\s*{_PRODUCT}\s*\))"
_UNIT_GRAMMAR = re.compile(rf"^(?:1\s*/\s*)?{_TERM}(?:\s*[*/]\s*{_TERM}|\s+{_TERM})*$")
MAX_UNIT_TEXT = 60


def parse_quantity(text: str, what: str = "value") -> pint.Quantity:
    """Read ``"1979 TFLOP/s"``, ``"24h"``, ``"45 %"``, ``"$2/hour"`` or ``"7e9"``.

    A value is a number followed by an optional unit; nothing is evaluated (``24h*2`` and
    ``9**9**9 h`` are refused, not computed).

    Returns
    -------
    pint.Quantity
        In the symcalc registry.

    Raises
    ------
    MalformedValueError
        The text is not a number with an optional known unit; the message names ``what``.
    """
    if not isinstance(text, str):
        raise MalformedValueError(f"{what}: expected text like '80 GB', got {type(text).__name__}")
    raw = text.strip()
    if not raw:
        raise MalformedValueError(f"{what}: the value is empty (write e.g. {what}=80GB)")
    if len(raw) > 100 or not _ALLOWED_CHARS.match(raw):
        raise MalformedValueError(f"{what}: '{raw[:40]}' contains characters that cannot be part of a value")
    norm = _normalise(raw)
    m = _DOLLAR_FIRST.match(norm)
    if m:  # "$2/hour" -> 2 USD/hour
        number, denominator, unit_text = m.group(1), None, "USD" + m.group(2)
    else:
        m = _VALUE.match(norm)
        if not m:
            if re.match(r"^[+\-]?(nan|inf|infinity)\b", norm, re.I):
                raise MalformedValueError(f"{what}: '{raw}' is not a finite number")
            raise MalformedValueError(f"{what}: '{raw}' does not start with a number (write e.g. '80 GB' or '7e9')")
        number, denominator, unit_text = m.group(1), m.group(2), m.group(3).strip()
    try:
        magnitude = float(number)
        divisor = None if denominator is None else float(denominator)
    except ValueError:      # what the pattern lets through but float() does not: '0_', '1__0'
        raise MalformedValueError(f"{what}: '{raw}' is not a number (write e.g. '80 GB' or '7e9')") from None
    if divisor is not None:
        if divisor == 0:
            raise MalformedValueError(f"{what}: '{raw}' divides by zero")
        magnitude /= divisor
    if not math.isfinite(magnitude):
        raise MalformedValueError(f"{what}: '{raw}' is not a finite number")
    ureg = registry()
    if not unit_text:
        return ureg.Quantity(magnitude, ureg.dimensionless)
    return ureg.Quantity(magnitude, parse_unit(unit_text, what, value_text=raw))


def parse_unit(text: str, what: str = "unit", value_text: str | None = None) -> pint.Unit:
    """Read a unit expression (``"GiB"``, ``"TFLOP/s"``, ``"%"``); '' is dimensionless.

    Units may be multiplied, divided and raised to one-digit powers; any other arithmetic
    (numbers, chained powers) is refused before pint sees it.

    Returns
    -------
    pint.Unit
        In the symcalc registry.

    Raises
    ------
    MalformedValueError
        The text is not a unit expression (or is a number); the message names ``what``.
    """
    ureg = registry()
    if text is None or not str(text).strip() or str(text).strip() in {"1", "count"}:
        return ureg.dimensionless
    raw = str(text).strip()
    known = _UNITS_READ.get((id(ureg), raw))
    if known is not None:       # read before: a planner reads each preset's units per question
        return known
    unit = _read_unit(raw, what, value_text)
    if len(_UNITS_READ) < 4096:
        _UNITS_READ[(id(ureg), raw)] = unit
    return unit


_UNITS_READ: dict = {}


def _read_unit(raw: str, what: str, value_text: str | None) -> pint.Unit:
    ureg = registry()
    shown = value_text or raw
    if len(raw) > MAX_UNIT_TEXT or not _ALLOWED_CHARS.match(raw):
        raise MalformedValueError(f"{what}: '{shown[:40]}' is not a unit")
    norm = _normalise(raw)
    if not _UNIT_GRAMMAR.match(norm):
        if value_text is None:      # a unit alone was asked for (--to, a pair's unit)
            raise MalformedValueError(f"{what}: '{shown}' is not a unit: give a unit alone, e.g. 'GB', 'day' "
                                      "or 'TFLOP/s'")
        raise MalformedValueError(f"{what}: '{shown}' must be a number followed by a unit, without arithmetic "
                                  "(write e.g. '48 hour', not '24h*2')")
    if norm.startswith("1"):  # "1/s"
        return 1 / parse_unit(norm.split("/", 1)[1], what, value_text)
    q = _parse(norm, shown, what, "a unit")
    if isinstance(q, pint.Quantity):
        if q.magnitude != 1:
            raise MalformedValueError(f"{what}: '{shown}' is not a unit")
        # pint's stubs call a quantity's units a PlainUnit (the base class); at run time it is a Unit
        return q.units  # type: ignore[return-value]
    if q == 1:
        return ureg.dimensionless
    raise MalformedValueError(f"{what}: '{shown}' is a number, not a unit")


def _parse(norm: str, raw: str, what: str, expected: str):
    """pint's parser (no eval), with its errors turned into one readable sentence."""
    try:
        return registry().parse_expression(norm)
    except pint.errors.UndefinedUnitError as e:
        unit = getattr(e, "unit_names", None) or e.args
        name = unit[0] if isinstance(unit, (list, tuple)) and unit else str(unit)
        raise MalformedValueError(f"{what}: unknown unit '{name}' in '{raw}'{_unit_hint(str(name))}") from None
    except Exception:
        raise MalformedValueError(f"{what}: cannot read '{raw}' as {expected}") from None


# "32k" for a context length usually means 32 x 1024 tokens; for anything else 32 x 1000
_THOUSANDS = "e3 (a '32k' context is usually 32768 token, 32 x 1024: write the number out)"


# a month is not one length of time: the answer would depend on which
_MONTH = "30 day (a month is not one length: write the days, or 730 hour for a twelfth of a year)"


# ISO 4217 codes of the currencies GPU time is priced in besides the dollar
_CURRENCIES = frozenset("EUR GBP JPY CNY RMB CHF CAD AUD INR KRW SGD HKD SEK NOK DKK TWD BRL".split())


def _unit_hint(name: str) -> str:
    known = {
        "tokens_per_second": "token/s", "month": _MONTH, "months": _MONTH,
        "trillion": "e12 (write 15e12)", "billion": "e9 (write 7e9)", "million": "e6 (write 2e6)",
        "hours": "hour", "days": "day", "gb": "GB (gigabyte) or Gb (gigabit)",
        "tflop": "TFLOP", "flop": "FLOP", "T": "e12 (write 7e12, not 7T)",
        "K": _THOUSANDS, "k": _THOUSANDS, "M": "e6 (a '1M' context is usually 1048576 token, 2^20)", "bn": "e9", "gib": "GiB", "mib": "MiB", "tib": "TiB",
    }
    if name in known:
        return f"; did you mean {known[name]}?"
    if name.upper() in _CURRENCIES:
        return ("; money is counted in one currency, USD (no exchange rates here): give the price in "
                "USD, or write your currency's amounts as USD and read the costs in it")
    try:        # the same letters in another case: Day, HOUR, Tflop
        found = registry().parse_unit_name(name, case_sensitive=False)
        symbols = list(dict.fromkeys(registry().get_symbol(prefix + unit) if prefix else unit
                                     for prefix, unit, _ in found))
    except Exception:
        return ""
    return f"; did you mean {' or '.join(symbols)}?" if symbols else ""


# the unit strings a long-lived process meets (a server's users write them) are without end:
# the memos keep the most recent, far more than the library's ~100 units
UNIT_MEMO = 4096


@lru_cache(maxsize=UNIT_MEMO)
def dimensionality(unit: str):
    """The dimensionality (a pint UnitsContainer) of a unit string; cached."""
    return registry().get_dimensionality(parse_unit(unit))


@lru_cache(maxsize=UNIT_MEMO)
def to_base_factor(unit: str) -> float:
    """How many base units one ``unit`` is (GB -> 1e9, hour -> 3600, % -> 0.01)."""
    u = parse_unit(unit)
    return float(registry().Quantity(1.0, u).to_base_units().magnitude)


def describe_dimension(dim) -> str:
    """A dimensionality in base units people read: ``FLOP/s``, ``byte``, ``count``."""
    if not dim:
        return "count"
    num: list[str] = []
    den: list[str] = []
    for name, exp in sorted(dim.items(), key=lambda kv: list(BASE_UNITS).index(kv[0]) if kv[0] in BASE_UNITS else 99):
        unit = BASE_UNITS.get(name, name)
        e = abs(exp)
        text = unit if e == 1 else f"{unit}^{_fmt_exp(e)}"
        (num if exp > 0 else den).append(text)
    out = "*".join(num) if num else "1"
    if den:
        out += "/" + ("/".join(den))
    return out


def _fmt_exp(e) -> str:
    f = float(e)
    return str(int(f)) if f.is_integer() else str(e)


_LATEX_ESCAPES = {"%": r"\%", "$": r"\$", "_": r"\_", "µ": r"\mu ", "μ": r"\mu ", "#": r"\#", "&": r"\&"}


def unit_to_latex(unit: str) -> str:
    """Render a unit as written (``"TFLOP/s"``) to LaTeX (``\\mathrm{TFLOP/s}``); '' -> ''."""
    if not unit or unit in {"count", "1", "dimensionless"}:
        return ""
    if unit.strip() in {"%", "percent"}:
        return r"\%"
    out = []
    for ch in unit:
        out.append(_LATEX_ESCAPES.get(ch, ch))
    body = "".join(out).replace("**", "^").replace("*", r"\cdot ")
    body = re.sub(r"\^(\-?\d+)", r"^{\1}", body)
    return r"\mathrm{" + body + "}"
