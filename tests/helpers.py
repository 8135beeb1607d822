"""Plain helpers shared by the tests (fixtures live in conftest.py)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

from symcalc import units

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

DATA = Path(__file__).parent / "data"


def seed_examples() -> tuple[list[dict], dict[str, dict]]:
    """(every worked example, the errata by id), the errata applied: where an example's given
    names or options were only a seed's way of saying something the library says with an
    option, data/seed_examples_errata.toml says so and why."""
    examples = tomllib.loads((DATA / "seed_examples.toml").read_text())["example"]
    errata = {e["id"]: e for e in tomllib.loads((DATA / "seed_examples_errata.toml").read_text())["erratum"]}
    for e in examples:
        fix = errata.get(e["id"])
        if fix:
            e["options"] = {**e.get("options", {}), **fix.get("set_options", {})}
            e["given"] = {**e["given"], **fix.get("set_given", {})}
    return examples, errata


def base(text: str) -> float:
    """Magnitude of '68.5857 min' (or '47') in base units."""
    return float(units.parse_quantity(text).to_base_units().magnitude)


def close(got: float, expected: float, rel: float) -> bool:
    return math.isclose(got, expected, rel_tol=rel, abs_tol=0.0)
