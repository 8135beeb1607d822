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

from symcalc.errors import one_line
from symcalc.query.calibfit import REACH
from symcalc.query.calibrate import value_text
from symcalc.units.format import fmt

if TYPE_CHECKING:
    from symcalc.query.calibfit import Coefficient
    from symcalc.query.calibrate import Calibration


def _seconds(x: float) -> str:
    return f"{fmt(x)} s" if math.isfinite(x) else "-"


def _percent(e: float, sign: bool = True) -> str:
    if not math.isfinite(e):
        return "-"
    return f"{100 * e:+.1f} %" if sign else f"{100 * e:.1f} %"


def _moved(cal: Calibration) -> set[tuple[str, str]]:
    return {(c.name, c.key) for c, _ in cal.fit.moved()}


def held_notes(cal: Calibration) -> list[str]:
    """One sentence per coefficient the fit held at an end of its range: which end, that the
    runs pull beyond it, and why the fit stops there (the quantity's domain, what --hardware
    accepts; or the fit's reach, where the misfit is the model's rather than a coefficient's)."""
    out = []
    for h in cal.fit.held:
        c = cal.fit.coefficients[h.index]
        more = "more" if h.side == "upper" else "less"
        where = f" ({c.scope} {c.key})" if len(cal.fit.coefficients) > len({x.name for x in cal.fit.coefficients}) \
            else ""
        if h.by == "domain":
            why = (f"its domain is {c.domain}, the values a profile may hold, so the runs are "
                   f"{_faster_or_slower(cal, c)} than the model "
                   "reaches with it")
            head = f"{c.name}{where} held at its bound {value_text(c.name, h.bound)}"
        else:
            why = (f"the fit moves a coefficient at most {fmt(REACH)} spreads from its prior "
                   f"({value_text(c.name, c.prior)}); what the runs ask beyond is the model's misfit, not a coefficient's")
            head = f"{c.name}{where} held at {value_text(c.name, h.bound)}, the end of the fit's reach"
        out.append(f"{head}: the measurements ask for {more}; {why}. Check the step times (units, whole cluster or "
                   "per GPU) and the layout and options given, or fit other coefficients (--fit).")
    return out


def _faster_or_slower(cal: Calibration, c: Coefficient) -> str:
    """How the runs a coefficient applies to differ from the fitted model: "faster" where it
    still predicts longer steps than measured (its mean error is positive), else "slower"."""
    errors = [e for r, e in zip(cal.fit.runs, cal.fit.after) if c.applies(r) and math.isfinite(e)]
    return "faster" if errors and sum(errors) > 0 else "slower"


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
    moved, held = _moved(cal), {h.index for h in fit.held}
    coef_rows = [[c.name, f"{c.scope} {c.key}", value_text(c.name, c.prior), "->", value_text(c.name, v),
                  "held at its bound" if k in held else "moved" if (c.name, c.key) in moved else "kept its prior"]
                 for k, (c, v) in enumerate(zip(fit.coefficients, fit.values))]
    out += ["  " + line for line in _columns(["", "", "", "", "", ""], coef_rows, right={2})[1:]]
    notes = held_notes(cal)
    if notes:
        out.append("")
        out += notes
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
    # every line through one_line: a name, an id or a path with a terminal's escape sequence
    # (refused in the runs file, but --output is the user's) is shown escaped, never obeyed
    return "\n".join(one_line(line) for line in out).rstrip("\n")


def _number(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def calibration_dict(cal: Calibration) -> dict[str, Any]:
    fit = cal.fit
    moved = _moved(cal)
    held = {h.index: {"side": h.side, "bound": h.bound, "bound_text": value_text(fit.coefficients[h.index].name, h.bound),
                      "by": h.by} for h in fit.held}
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
                          "moved": (c.name, c.key) in moved, "domain": str(c.domain), "held": held.get(k)}
                         for k, (c, v) in enumerate(zip(fit.coefficients, fit.values))],
        "notes": held_notes(cal),
        "measured": [{"quantity": q, "value": v, "value_text": value_text(q, v), "source": how}
                     for q, (v, how) in cal.measured.items()],
        "profile": cal.profile_path,
    }
