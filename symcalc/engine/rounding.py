"""Rounding a whole-number value one way: the one rule every path shares (solve, the sweep
path, limit-aware rounding), with its guard against float noise."""

from __future__ import annotations

import numpy as np


def round_whole(value, how: str | None):
    """``value`` (float or array) rounded ``how``: "up", "down", "nearest" (half up), or None
    for as it is."""
    if how is None:
        return value
    v = np.asarray(value, dtype=float)
    # Float noise, not a real excess: 1120.0000000002 GPUs is 1120, not 1121. Relative (4.7e-21
    # GPUs still rounds up to 1) and capped (3000000000.4 GPUs rounds up to 3000000001).
    slack = np.minimum(1e-12 * np.abs(v), 1e-3)
    if how == "up":
        out = np.ceil(v - slack)
    elif how == "down":
        out = np.floor(v + slack)
    else:
        out = np.floor(v + 0.5)     # half up, not numpy's half-to-even
    return float(out) if out.ndim == 0 else out
