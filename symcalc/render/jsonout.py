"""The JSON form of a result (``symcalc solve --json``): one object, plain types only."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc.engine.method import Method
from symcalc.render.findings import finding_dict

if TYPE_CHECKING:   # pragma: no cover
    from symcalc.query.results import Result



def _plain(v: Any) -> Any:
    """Floats, or nested lists keeping an array's shape; NaN and inf become null; text stays text."""
    if isinstance(v, str):
        return v
    if isinstance(v, np.ndarray) and v.dtype == object:
        return v.tolist()
    if np.ndim(v) > 0:
        arr = np.asarray(v, dtype=float)
        # numpy's stubs refuse None as a fill value; it makes an object array, whose tolist() has None (JSON null)
        return np.where(np.isfinite(arr), arr, None).tolist()  # type: ignore[call-overload]
    v = float(v)
    return v if np.isfinite(v) else None


def result_dict(result: Result) -> dict:
    """target, value, unit, exact, given, options, defaults_used, steps, expression, latex, ..."""
    lib = result.library
    q = result.quantity
    steps = []
    for step in result.steps:
        values = {}
        for name in step.solves_for:
            v, unit = result.display(name)
            values[name] = {"value": _plain(v), "unit": unit}
        entry = {
            "formula": step.formulas[0].id if len(step.formulas) == 1 else [f.id for f in step.formulas],
            "title": step.formulas[0].title,
            "source": step.formulas[0].source,
            "equation": [f.equation for f in step.formulas] if len(step.formulas) > 1 else step.formulas[0].equation,
            "solves_for": step.solves_for[0] if len(step.solves_for) == 1 else step.solves_for,
            "method": str(Method.NUMERIC if step.numeric and step.method != Method.NUMERIC and not step.solution else step.method),
            "numeric_fallback": bool(step.numeric),
            "expression": {n: e.text() for n, e in step.solution.items()},
            "latex": "; ".join(f"{lib.quantities[n].latex} = {e.latex}" for n, e in step.solution.items())
            or "; ".join(f.latex for f in step.formulas),
            "values": values,
        }
        steps.append(entry)
    return {
        "target": result.target,
        "value": _plain(result.value),
        "unit": result.unit,
        "exact": _plain(result.exact) if result.exact is not None else None,
        "rounding": result.rounding,
        "rounding_reason": dict(result.rounding_reason) if result.rounding_reason else None,
        "assumptions": [dict(a, main=True) for a in result.assumptions],
        # given values read as their counterpart, the only reading that answers (said first)
        "readings": list(result.readings),
        "notes": list(result.notes),
        "looked_up": result.looked_up,
        "given": {name: g.text for name, g in result.given.items() if not g.origin},
        "presets": dict(result.presets),
        "from_presets": {name: {"value": g.text, "source": g.origin} for name, g in result.given.items()
                         if g.origin and name not in result.unused},
        "options": dict(result.options),
        "defaults_used": {name: {k: d[k] for k in ("value", "source") if k in d}
                          for name, d in result.defaults_used.items()},
        "steps": steps,
        "breakdown": _breakdown(result),
        "expression": result.closed_form.text() if result.has_closed_form else None,
        "latex": f"{q.latex} = {result.closed_form.latex}" if result.has_closed_form else None,
        "found_numerically": result.numeric_symbols or ([result.target] if result.steps and not result.has_closed_form else []),
        "unused": list(result.unused),
        "warnings": list(result.warnings),
        # quantities stated beside the answer (which pipeline stage a memory figure is that of)
        "reported": {f.quantity: f.values["value"] for f in result.findings if f.kind == "reported"},
        # whether the run fits: its workload's memory at this answer's values (symcalc.query.fit)
        "fit": [finding_dict(f) for f in result.findings if f.kind == "fit"],
        # the run the question is about (symcalc.query.run), with the links the answer took
        "run": result.run_dict(),
        "conflicts": [dict(c) for c in result.conflicts],
        "out_of_bounds": list(result.violations),
        # the records behind warnings and out_of_bounds: {kind, quantity, values, ...}
        "findings": [finding_dict(f) for f in result.findings],
        # only when asked (solve(..., sensitivity=True), --sensitivity): largest |elasticity| first
        **({"sensitivity": [{"name": e.name, "given": e.given, "elasticity": _plain(e.elasticity), "method": e.method}
                            for e in result.elasticities]} if result.elasticities is not None else {}),
    }


def _breakdown(result: Result) -> dict | None:
    """The parts of a derived total with their shares (Result.breakdown), in plain types: a part
    that is a sum keeps its own ``parts``; a collective's exposed part its ``whole`` (hidden or
    not, ``whole_of`` names it) and ``hidden``."""
    b = result.breakdown
    if b is None:
        return None

    def part(p: dict) -> dict:
        out = {"name": p["name"], "value": _plain(p["value"]), "share": _plain(p["share"])}
        for key in ("whole", "hidden"):
            if key in p:
                out[key] = _plain(p[key])
        if "whole_of" in p:
            out["whole_of"] = p["whole_of"]
        if "parts" in p:
            out["parts"] = [part(c) for c in p["parts"]]
        return out
    return {"of": b["of"], "unit": b["unit"], "total": _plain(b["total"]), "parts": [part(p) for p in b["parts"]]}