"""The checks every table of a formula file shares: a table, known keys, safe text, names.

The loaders of quantities, options and formulas (:mod:`symcalc.library.build_quantities`,
:mod:`~symcalc.library.build_options`, :mod:`~symcalc.library.build_formulas`) each read their
own fields; what they check alike lives here once, so a message reads the same wherever the
mistake is.
"""

from __future__ import annotations

import re

from symcalc import units
from symcalc.errors import LibraryError, did_you_mean
from symcalc.library.texcheck import UnsafeTeX, check_latex, check_text
from symcalc.units import describe_dimension as show

NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


def _check_latex(text: str, where: str) -> None:
    """A quantity's symbol goes into LaTeX as math, unescaped: only the whitelist may pass."""
    try:
        check_latex(text)
    except UnsafeTeX as e:
        raise LibraryError(f"{where}: 'latex' {e}") from None


def _check_texts(table: dict, keys: tuple[str, ...], where: str) -> None:
    """Text fields are escaped wherever they are written; they must hold no control characters."""
    for key in keys:
        value = table.get(key)
        if isinstance(value, str):
            try:
                check_text(value)
            except UnsafeTeX as e:
                raise LibraryError(f"{where}: '{key}' {e}") from None


def _require_table(obj, what: str) -> dict:
    if not isinstance(obj, dict):
        raise LibraryError(f"{what} must be a table")
    return obj


def _check_keys(table: dict, allowed: set[str], what: str) -> None:
    unknown = set(table) - allowed
    if unknown:
        key = sorted(unknown)[0]
        raise LibraryError(f"{what}: unknown key '{key}'.{did_you_mean(key, allowed)}")


def _is_unit_name(name: str) -> bool:
    try:
        units.parse_unit(name)
        return True
    except Exception:
        return False


def _check_value_dimension(text: str, dim, where: str) -> None:
    try:
        q = units.parse_quantity(text, where)
    except Exception as e:
        raise LibraryError(f"{where}: {e}") from None
    got = units.registry().get_dimensionality(q.units)
    if got != dim:
        raise LibraryError(f"{where}: '{text}' is {show(got)}, expected {show(dim)}")
    base = abs(float(q.to_base_units().magnitude))
    if not (base == 0 or 1e-300 <= base <= 1e300):
        raise LibraryError(f"{where}: '{text}' is beyond the range of floating point in base units")
