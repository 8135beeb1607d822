"""Plain helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import math
from pathlib import Path

from symcalc import units

DATA = Path(__file__).parent / "data"


def base(text: str) -> float:
    """Magnitude of '68.5857 min' (or '47') in base units."""
    return float(units.parse_quantity(text).to_base_units().magnitude)


def close(got: float, expected: float, rel: float) -> bool:
    return math.isclose(got, expected, rel_tol=rel, abs_tol=0.0)
