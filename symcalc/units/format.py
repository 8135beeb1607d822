"""How numbers and values with units are written, in plain text and in LaTeX.

One place decides the significant digits and when to switch to powers of ten, so the CLI
line, the derivation steps and the LaTeX page agree digit for digit.
"""

from __future__ import annotations

import math

import numpy as np

from symcalc.escape import tex_escape
from symcalc.units import unit_to_latex

DIGITS = 4


def _split(x: float, digits: int) -> tuple[str, int | None]:
    """Mantissa text and exponent (None when the number reads better without one)."""
    if x == 0 or not math.isfinite(x):
        return (str(x) if not math.isfinite(x) else "0"), None
    a = abs(x)
    if float(x).is_integer() and a < 1e7:
        return str(int(x)), None
    if 1e-3 <= a < 1e7:
        text = f"{x:.{digits}g}"
        if "e" not in text:
            return text, None
        return f"{x:.{max(digits - 1 - int(math.floor(math.log10(a))), 0)}f}", None
    # Python's own exponent formatting: carries 9.9999e5 to 1e6 and handles subnormals
    # (5e-324, where 10 ** exp underflows to 0)
    mant, exp = f"{x:.{digits - 1}e}".split("e")
    return mant.rstrip("0").rstrip("."), int(exp)


def _finite_range(x) -> tuple[int, float, float] | None:
    """(size, min, max) of the finite values of an array; None if there are none."""
    arr = np.asarray(x, dtype=float)
    finite = arr[np.isfinite(arr)]
    return None if finite.size == 0 else (arr.size, float(finite.min()), float(finite.max()))


def fmt(x, digits: int = DIGITS) -> str:
    """``150000``, ``4.974``, ``4.2e10``, ``1.75``; arrays as ``[min .. max] (n values)``."""
    if isinstance(x, str):
        return x
    if isinstance(x, np.ndarray) and x.dtype == object:
        return ", ".join(sorted(set(map(str, x.ravel()))))
    if np.ndim(x) > 0:
        rng = _finite_range(x)
        if rng is None:
            return f"[{np.size(x)} values, none finite]"
        return f"[{fmt(rng[1], digits)} .. {fmt(rng[2], digits)}] ({rng[0]} values)"
    m, e = _split(float(x), digits)
    return m if e is None else f"{m}e{e}"


def fmt_latex(x, digits: int = DIGITS) -> str:
    """``4.2 \\times 10^{10}``; arrays as their range."""
    if isinstance(x, str) or (isinstance(x, np.ndarray) and x.dtype == object):
        return r"\text{" + tex_escape(fmt(x)) + "}"
    if np.ndim(x) > 0:
        rng = _finite_range(x)
        if rng is None:
            return r"\mathrm{NaN}"
        return fmt_latex(rng[1], digits) + r" \ldots " + fmt_latex(rng[2], digits)
    m, e = _split(float(x), digits)
    if e is None:
        return m
    return (f"{m} \\times 10^{{{e}}}") if m not in {"1", "-1"} else f"{'-' if m == '-1' else ''}10^{{{e}}}"


def with_unit(x, unit: str, digits: int = DIGITS) -> str:
    """A value and its unit as text: ``4.974 %``, ``80 GB``, ``64``."""
    return fmt(x, digits) if not unit else f"{fmt(x, digits)} {unit}"


def with_unit_latex(x, unit: str, digits: int = DIGITS) -> str:
    u = unit_to_latex(unit)
    return fmt_latex(x, digits) if not u else f"{fmt_latex(x, digits)}\\,{u}"
