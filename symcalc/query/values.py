"""Reading given values: text, numbers, arrays or pint quantities -> base-unit magnitudes.

This is the boundary where units are checked and stripped ("units at the boundary, floats
inside"). Every rejection names the quantity, what it expected and what it got.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pint

from symcalc import units
from symcalc.errors import DimensionError, DomainError, MalformedValueError
from symcalc.findings import Finding
from symcalc.library.records import QuantitySpec
from symcalc.units import describe_dimension as show
from symcalc.units.format import fmt, with_unit

# Dimensions where a bare number has more than one plausible reading (s or h? GB or GiB?).
_NEEDS_UNIT = {"[time]", "[information]", "[power]"}


@dataclass
class GivenValue:
    """One known value: what the user wrote and its magnitude in base units."""

    name: str
    text: str
    magnitude: Any         # float or numpy array, in base units
    origin: str = ""       # "" when the user gave it, else the preset it came from


_EXAMPLES = {"%": "45", "GB": "80", "TFLOP/s": "989", "PFLOP/s": "6.3", "hour": "24", "day": "30",
             "GB/s": "50", "TB/s": "3.35", "ms": "70", "us": "5", "min": "30", "s": "98",
             "USD/hour": "2", "USD": "2e6", "token/s": "150000", "token": "2e12", "FLOP": "1e23",
             "FLOP/token": "6", "byte": "2", "PFLOP": "1"}


def example_value(q: QuantitySpec) -> str:
    """A plausible value of ``q`` for error messages: '80 GB', '24 hour', '7e9'."""
    unit = q.display_unit
    return f"'{_EXAMPLES.get(unit, '1')} {unit}'" if unit else "7e9" if q.name == "n_params" else "64"


def read_value(q: QuantitySpec, raw: object, check_bounds: bool = True) -> GivenValue:
    """Validate ``raw`` for quantity ``q`` and convert it to base units.

    Accepts ``"1979 TFLOP/s"``, ``"24h"``, ``"45%"``, plain numbers (only for quantities whose
    unit cannot be misread: counts, tokens, FLOP, USD), numpy arrays and lists of numbers,
    ``(value, "unit")`` pairs and quantities made with :func:`symcalc.Q`. An array already in
    base units is not copied. ``check_bounds=False`` leaves the bounds, finiteness and
    whole-number checks to the caller (the evaluator's chunked kernel checks them chunk by chunk); units and
    dimensions are always checked.

    Returns
    -------
    GivenValue
        The text as written and the magnitude in base units.

    Raises
    ------
    MalformedValueError
        ``raw`` cannot be read as a value.
    DimensionError
        Its unit is of another dimension than ``q``'s, or it is missing where ambiguous.
    DomainError
        It is outside ``q``'s bounds, not finite, or not whole for a whole number (only with
        ``check_bounds``).
    """
    if isinstance(raw, (str, int, float)) and not isinstance(raw, bool):
        key = (id(q), type(raw), raw, check_bounds)
        hit = _READ.get(key)
        if hit is not None and hit[0] is q:         # (the same quantity record, not one reusing its id)
            return GivenValue(q.name, hit[1], hit[2])
        gv = _read(q, raw, check_bounds)
        if np.ndim(gv.magnitude) == 0:
            if len(_READ) >= READ_KEPT:
                _READ.clear()
            _READ[key] = (q, gv.text, gv.magnitude)
        return gv
    return _read(q, raw, check_bounds)


#: Scalar values read (text or a number), by quantity record, value and check: a plan reads the
#: same ~90 values (presets' and the layout's) in each of its ~140 questions, 12,000 readings
#: of ~9 us each (pint parses the text, the bounds are checked). Only values that were read
#: without an error are kept; each reading returns a new GivenValue (callers set its origin).
READ_KEPT = 4096
_READ: dict[tuple, tuple] = {}


def _read(q: QuantitySpec, raw: object, check_bounds: bool) -> GivenValue:
    """:func:`read_value`'s reading, kept or not."""
    ureg = units.registry()
    if q.kind == "text":
        if not isinstance(raw, str) or not raw.strip():
            raise MalformedValueError(f"{q.name} is text (e.g. {q.description}); got {raw!r:.40}")
        if len(raw) > 2000:
            raise MalformedValueError(f"{q.name}: the text is longer than 2000 characters")
        return GivenValue(q.name, raw.strip(), raw.strip())
    if isinstance(raw, str):
        text = raw.strip()
        magnitude, got = _parse_text(text, q)
        if got != q.dim:
            raise DimensionError(_dimension_message(q, text, got))
        if check_bounds:
            _check_domain(q, magnitude, text)
        return GivenValue(q.name, text, magnitude)
    _refuse_odd_number(q, raw)
    if isinstance(raw, (int, float, np.integer, np.floating)) and not isinstance(raw, bool):
        text = _text_of(raw)
        _require_unit_if_ambiguous(q, text)
        magnitude = float(raw) * units.to_base_factor(q.unit)
        if check_bounds:
            _check_domain(q, magnitude, text)
        return GivenValue(q.name, text, magnitude)
    if isinstance(raw, tuple) and len(raw) == 2 and isinstance(raw[1], str):
        number = _numbers(q, raw[0])
        parsed = ureg.Quantity(number, units.parse_unit(raw[1], f"{q.name} unit"))
        text = f"{_text_of(number)} {raw[1]}"
    elif isinstance(raw, pint.Quantity):
        if raw._REGISTRY is not ureg:
            raise MalformedValueError(f"{q.name}: quantities must come from symcalc's registry "
                                      "(use symcalc.Q(value, unit))")
        parsed, text = raw, f"{raw:~P}" if np.ndim(raw.magnitude) == 0 else f"array of {np.size(raw.magnitude)} {raw.units:~P}"
    elif isinstance(raw, bool) or raw is None:
        raise MalformedValueError(f"{q.name}: {raw!r} is not a value")
    else:
        arr = _numbers(q, raw)
        text = f"array of {np.size(arr)}"
        parsed = _bare(q, arr, "an array of numbers")

    got = ureg.get_dimensionality(parsed.units)
    if got != q.dim:
        raise DimensionError(_dimension_message(q, text, got))
    magnitude = _base_magnitude(parsed)
    if isinstance(magnitude, np.ndarray):
        magnitude = magnitude.astype(float, copy=False)
        if magnitude.ndim == 0:
            magnitude = float(magnitude)
    else:
        magnitude = float(magnitude)
    if check_bounds:
        _check_domain(q, magnitude, text)
    return GivenValue(q.name, text, magnitude)


def _base_magnitude(parsed: pint.Quantity):
    """The magnitude in base units. Arrays in a unit of size 1 (FLOP/s, token, a count) come
    back as they are: pint would multiply by 1.0, a pass over memory per 1e6 points."""
    m = parsed.magnitude
    if isinstance(m, np.ndarray) and _unit_factor(parsed.units) == 1.0:
        return m
    return parsed.to_base_units().magnitude


@lru_cache(maxsize=256)
def _unit_factor(unit) -> float | None:
    """Base units per ``unit``, or None for a unit with an offset (never 1 then)."""
    ureg = units.registry()
    try:
        one = ureg.Quantity(1.0, unit).to_base_units()
        zero = ureg.Quantity(0.0, unit).to_base_units()
    except Exception:
        return None
    return float(one.magnitude) if float(zero.magnitude) == 0.0 else None


def _refuse_odd_number(q: QuantitySpec, raw) -> None:
    """A number that is no magnitude: a numpy date or duration (a timedelta64 is also an
    np.integer, once read as a count of days), a Python int beyond floating point's range, or a
    tuple that is not a (value, "unit") pair ((1, "TFLOP/s", 3) was read as an array of text)."""
    if isinstance(raw, tuple) and len(raw) != 2 and any(isinstance(x, str) for x in raw):
        raise MalformedValueError(f"{q.name}: a value with its unit is a pair (value, 'unit'); got a tuple of "
                                  f"{len(raw)} items")
    if isinstance(raw, (np.datetime64, np.timedelta64)):
        raise MalformedValueError(f"{q.name}: a numpy date or duration is not a value; write it with its unit, "
                                  "e.g. '30 day'")
    if isinstance(raw, int) and not isinstance(raw, bool) and not -1e308 < raw < 1e308:
        raise MalformedValueError(f"{q.name}: a number of {len(str(abs(raw)))} digits is beyond floating "
                                  "point's range (about 1e308)")


def _numbers(q: QuantitySpec, raw):
    """A number or a non-empty array of numbers (not text, not bools), as floats."""
    if isinstance(raw, (str, bytes, bool)) or raw is None:
        raise MalformedValueError(f"{q.name}: expected a number or an array of numbers, got {raw!r:.40}")
    try:
        arr = np.asarray(raw)
        kind = arr.dtype.kind
        if kind in "bcUSVmM":    # booleans, complex numbers, text, bytes, durations, dates: not a magnitude
            what = {"b": "booleans", "c": "complex numbers", "m": "numpy durations", "M": "numpy dates"}.get(kind, "text")
            raise MalformedValueError(f"{q.name}: expected numbers, got an array of {what}"
                                      + (" (give numbers, and the unit as a pair: (array, 'GB'))" if what == "text" else ""))
        arr = arr.astype(float, copy=False)
    except OverflowError:
        raise MalformedValueError(f"{q.name}: a number beyond floating point's range (about 1e308)") from None
    except (TypeError, ValueError):
        raise MalformedValueError(f"{q.name}: cannot read {type(raw).__name__} as numbers") from None
    if arr.size == 0:
        raise MalformedValueError(f"{q.name}: the array is empty")
    return float(arr) if arr.ndim == 0 else arr


def _parse_text(text: str, q: QuantitySpec):
    """(magnitude in base units, dimensionality) of a value written as text. 'TFLOPS', a rate
    or an amount by who writes it, is read as the quantity it is given for is measured: a
    rate for peak_flops, an amount for total_flops (elsewhere it is refused as ambiguous)."""
    if _BARE.match(text):
        _require_unit_if_ambiguous(q, text)
        return float(text) * units.to_base_factor(q.unit), q.dim
    if q.dim and units.FLOPS_WORD.search(text):
        meant = {units.dimensionality("FLOP/s"): "FLOP/s", units.dimensionality("FLOP"): "FLOP"}.get(q.dim)
        if meant is not None:
            text = units.FLOPS_WORD.sub(lambda m: m.group(1).upper() + meant if m.group(1) in ("t", "g", "p", "e")
                                        else m.group(1) + meant, text)
    return _parse_cached(text, q.name)


@lru_cache(maxsize=4096)
def _parse_cached(text: str, what: str):
    """Parsing with units costs ~100 us in pint; the same text always means the same thing."""
    parsed = units.parse_quantity(text, what)
    got = units.registry().get_dimensionality(parsed.units)
    return float(parsed.to_base_units().magnitude), got


def _text_of(value) -> str:
    if np.ndim(value) > 0:
        return f"array of {np.size(value)}"
    return fmt(float(value), digits=12)


_BARE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _require_unit_if_ambiguous(q: QuantitySpec, text: str) -> None:
    """Counts, tokens, FLOP and USD have one obvious unit; times, bytes and power do not
    (seconds or hours? GB or GiB?), so for those a bare number is refused."""
    if q.dim and any(d in _NEEDS_UNIT for d in q.dim):
        raise DimensionError(f"{q.name} needs a unit (it is {show(q.dim)}; write e.g. {example_value(q)}): "
                             f"a bare number ({text}) could mean several units")


def _bare(q: QuantitySpec, magnitude, text: str) -> pint.Quantity:
    """A number written without a unit, read in the quantity's own unit where that is safe."""
    _require_unit_if_ambiguous(q, text)
    ureg = units.registry()
    return ureg.Quantity(magnitude, units.parse_unit(q.unit) if q.unit else ureg.dimensionless)


def _dimension_message(q: QuantitySpec, text: str, got) -> str:
    expected = f"a value in {show(q.dim)}" if q.dim else \
        "a pure number (a fraction)" if q.display_unit == "%" else "a pure number (a count)"
    data = dict(got) == {"[information]": 1}
    which = "an amount of data" if data else show(got) if got else "a pure number (a count or a fraction)"
    msg = f"{q.name} expects {expected}, e.g. {example_value(q)}; got '{text}', which is {which}"
    if not q.dim and data:
        letter = "b" if text.rstrip().endswith("b") else "B"
        unit = "bit" if letter == "b" else "byte"
        msg += f". '{letter}' is the {unit}: for a count in billions write e.g. 7e9"
    elif not q.dim and "[time]" in got:
        msg += ". A count has no unit"
    elif _per_token(dict(got), dict(q.dim or {})):
        # "20 ms/token" for a time per output token: a decode step gives each sequence one token
        msg += f". '/token' makes it a rate per token, and {q.name} is not one: write it without '/token'"
    return msg


def _per_token(got: dict, expected: dict) -> bool:
    """Whether ``got`` is the ``expected`` dimension divided by a token (and nothing else)."""
    over = dict(expected)
    over["[text]"] = over.get("[text]", 0) - 1
    return {k: v for k, v in got.items() if v} == {k: v for k, v in over.items() if v}


# A whole number may differ from the nearest integer by float noise (3.0000000000000004 GPUs),
# relative to its own size: a slack relative to max(|x|, 1) let 1e-12 GPUs pass as a whole 0.
WHOLE_RTOL = 1e-9


def _check_domain(q: QuantitySpec, magnitude, text: str) -> None:
    if isinstance(magnitude, float) and math.isfinite(magnitude) and q.domain.holds(magnitude) and \
            (q.whole is None or abs(magnitude - round(magnitude)) <= WHOLE_RTOL * abs(magnitude)):
        return      # a valid scalar, decided without numpy; anything else is worded below
    arr = np.asarray(magnitude, dtype=float)
    if arr.size:
        lo, hi = float(np.minimum.reduce(arr, axis=None)), float(np.maximum.reduce(arr, axis=None))
        if math.isfinite(lo) and math.isfinite(hi) and q.domain.holds(lo) and q.domain.holds(hi) and \
                (q.whole is None or not np.not_equal(np.floor(arr), arr).any()):
            return      # a valid array, decided by its min and max (and exact whole numbers)
    if not np.all(np.isfinite(arr)):
        if arr.ndim:
            where = np.unravel_index(np.argmin(np.isfinite(arr)), arr.shape)
            at = where[0] if len(where) == 1 else tuple(int(i) for i in where)
            raise MalformedValueError(f"{q.name}: element {at} of the array is {arr[where]} ("
                                      f"{int((~np.isfinite(arr)).sum())} of {arr.size} are not finite numbers)")
        raise MalformedValueError(f"{q.name}: '{text}' is not a finite number")
    inside = q.domain.contains(arr)
    if not np.all(inside):
        bad = float(arr[~inside].flat[0]) if arr.ndim else float(arr)
        hint = ""
        if q.display_unit == "%" and 1 < bad <= 100 and "%" not in text:
            hint = f"; did you mean {fmt(bad)}%?"
        raise DomainError(f"{q.name} must lie in {_domain_text(q)} (got {with_unit(bad / q.factor, q.display_unit)})"
                          f"{hint}")
    if q.whole is not None:
        off = np.abs(arr - np.round(arr)) > WHOLE_RTOL * np.abs(arr)
        if np.any(off):
            bad = float(arr[off].flat[0]) if arr.ndim else float(arr)
            raise DomainError(f"{q.name} is a whole number (got {fmt(bad, 10)})")


def _domain_text(q: QuantitySpec) -> str:
    d = q.domain
    if math.isinf(d.hi) and d.lo == 0:
        return "(0, inf): it must be positive" if d.lo_open else "[0, inf): it cannot be negative"
    if q.display_unit == "%":
        lo = f"{d.lo * 100:g} %"
        hi = f"{d.hi * 100:g} %"
        return f"{'(' if d.lo_open else '['}{lo}, {hi}{')' if d.hi_open else ']'}"
    return str(d)


def implausible(q: QuantitySpec, given: GivenValue) -> Finding | None:
    """A finding when a given value lies far outside what any real hardware or model has
    (``plausible`` in the quantity's data), naming the likely slip: bits for bytes (a NIC at
    400 GB/s is 400 Gb/s), or a unit prefix off by 1000. None when it is plausible."""
    if q.plausible is None or isinstance(given.magnitude, str):
        return None
    arr = np.asarray(given.magnitude, dtype=float)
    if arr.size == 0 or not np.all(np.isfinite(arr)):
        return None
    lo, hi = q.plausible
    value = float(np.max(arr)) if float(np.max(arr)) > hi else float(np.min(arr))
    if lo <= value <= hi:
        return None
    text = given.text
    unit = text.lstrip("+-.0123456789eE ")
    slips: list[tuple[str | None, float]] = []      # (the value as it was likely meant to be written, or None for a prefix; its value)
    if "B" in unit and lo <= value / 8 <= hi:
        slips.append((text.replace('B', 'b', 1), value / 8 / q.factor))
    elif "b" in unit and "byte" not in unit and lo <= value * 8 <= hi:
        slips.append((text.replace('b', 'B', 1), value * 8 / q.factor))
    for factor in (1e3, 1e-3):
        if not slips and lo <= value / factor <= hi:
            slips.append((None, value / factor / q.factor))
    return Finding("implausible", q.name, {"value": value / q.factor, "unit": q.display_unit,
                                           "side": "above" if value > hi else "below",
                                           "limit": (hi if value > hi else lo) / q.factor, "slips": slips})
