"""A calibration (symcalc.query.calibrate.Calibration) as text (what ``symcalc calibrate``
prints) and as a JSON-ready dict.

The record is read, never recomputed: the fit found every number. Step times are in seconds,
errors relative (predicted / measured - 1, shown in per cent), coefficient values in base units
in the dict and in the units the profile writes in the text.
"""

from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from symcalc.query.calibrate import value_text
from symcalc.units.format import fmt

if TYPE_CHECKING:
    from symcalc.query.calibrate import Calibration


def _seconds(x: float) -> str:
    return f"{fmt(x)} s" if math.isfinite(x) else "-"


def _percent(e: float, sign: bool = True) -> str:
    if not math.isfinite(e):
        return "-"
    return f"{100 * e:+.1f} %" if sign else f"{100 * e:.1f} %"


def _moved(cal: Calibration) -> set[tuple[str, str]]:
    return {(c.name, c.key) for c, _ in cal.fit.moved()}


def _columns(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    return ["  ".join((cell.rjust(w) if i in right else cell.ljust(w)) for i, (cell, w) in enumerate(zip(r, widths)))
            .rstrip() for r in [header, *rows]]


def calibration_text(cal: Calibration) -> str:
    fit = cal.fit
    stacks = cal.stacks
    out = [f"Calibration of {cal.runs_file.name}: {len(fit.runs)} measured steps on {cal.base}, "
           f"stack{'s' if len(stacks) > 1 else ''} {', '.join(stacks)}", ""]
    before, after = cal.predicted("before"), cal.predicted("after")
    rows = [[r.id, _seconds(r.step_time), _seconds(b), _seconds(a), _percent(eb), _percent(ea)]
            for r, b, a, eb, ea in zip(fit.runs, before, after, fit.before, fit.after)]
    rows.append(["mean |error|", "", "", "", _percent(fit.mean_error("before"), sign=False),
                 _percent(fit.mean_error("after"), sign=False)])
    header = ["run", "measured", "predicted before", "after", "error before", "after"]
    out += _columns(header, rows, right={1, 2, 3, 4, 5})
    out.append("")
    out.append("Coefficients (prior -> fitted):")
    moved = _moved(cal)
    coef_rows = [[c.name, f"{c.scope} {c.key}", value_text(c.name, c.prior), "->", value_text(c.name, v),
                  "moved" if (c.name, c.key) in moved else "kept its prior"]
                 for c, v in zip(fit.coefficients, fit.values)]
    out += ["  " + line for line in _columns(["", "", "", "", "", ""], coef_rows, right={2})[1:]]
    if cal.measured:
        out.append("")
        out.append("Measured hardware values (from [measured]):")
        for quantity, (value, how) in cal.measured.items():
            out.append(f"  {quantity} = {value_text(quantity, value)}  ({how})")
    out.append("")
    if not fit.improved():
        was, now = _percent(fit.mean_error("before"), sign=False), _percent(fit.mean_error("after"), sign=False)
        out.append(f"The fit did not improve the mean |error| ({was} before, {now} after): the profile holds "
                   "the fitted values all the same, which the priors pull close to the base preset's.")
    if cal.profile_path:
        out.append(f"wrote {cal.profile_path}: use it as --hardware {shlex.quote(cal.profile_path)} "
                   "(solve, sweep, plan)")
    return "\n".join(out).rstrip("\n")


def _number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def calibration_dict(cal: Calibration) -> dict[str, Any]:
    fit = cal.fit
    moved = _moved(cal)
    before, after = cal.predicted("before"), cal.predicted("after")
    return {
        "name": cal.runs_file.name,
        "title": cal.runs_file.title,
        "base_hardware": cal.base,
        "stacks": cal.stacks,
        "runs": [{"id": r.id, "stack": r.stack, "measured_step_time_s": r.step_time,
                  "predicted_before_s": _number(b), "predicted_after_s": _number(a),
                  "error_before": _number(eb), "error_after": _number(ea)}
                 for r, b, a, eb, ea in zip(fit.runs, before, after, fit.before, fit.after)],
        "mean_abs_error": {"before": _number(fit.mean_error("before")), "after": _number(fit.mean_error("after"))},
        "improved": fit.improved(),
        "coefficients": [{"name": c.name, "scope": c.scope, "key": c.key, "unit": c.unit, "prior": c.prior,
                          "fitted": v, "prior_text": value_text(c.name, c.prior), "fitted_text": value_text(c.name, v),
                          "moved": (c.name, c.key) in moved}
                         for c, v in zip(fit.coefficients, fit.values)],
        "measured": [{"quantity": q, "value": v, "value_text": value_text(q, v), "source": how}
                     for q, (v, how) in cal.measured.items()],
        "profile": cal.profile_path,
    }
