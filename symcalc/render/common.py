"""What every renderer needs from a Result: symbol maps and the equations of each step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import re

import numpy as np

from symcalc.units.format import fmt, fmt_latex, with_unit, with_unit_latex

if TYPE_CHECKING:   # pragma: no cover
    from symcalc.query.results import Result, StepView
    from symcalc.library.registry import Library



_PLAIN_NUMBER = re.compile(r"^\d+(\.\d+)?(e-?\d+)?$")


def wrap(value_text: str, latex_mode: bool) -> str:
    """Parenthesise a substituted value that is more than a plain number (a unit, a sign, a
    power of ten in LaTeX), so that products and powers read unambiguously."""
    if _PLAIN_NUMBER.match(value_text):
        return value_text
    return f"\\left({value_text}\\right)" if latex_mode else f"({value_text})"


def plot_text(text: str) -> str:
    """Text for a matplotlib title or label as it is written: a '$' (a file name, a model path)
    would start mathtext, which fails on unbalanced or odd input after the whole search."""
    return text.replace("$", r"\$")


def latex_symbols(library: Library) -> dict:
    """Quantity symbol -> its LaTeX (for printing a sympy expression anew)."""
    return {q.symbol: q.latex for q in library.quantities.values()}


def _values(result: Result, latex_mode: bool) -> dict:
    out = {}
    lib = result.library
    for name in result.values:
        if name not in lib.quantities:
            continue
        value, unit = result.display(name)
        if np.ndim(value) > 0:  # type: ignore[arg-type]  # a float or an array: display's two shapes
            continue
        digits = 10 if name in result.given else 4   # given values as written, derived ones rounded
        shown = with_unit_latex(value, unit, digits) if latex_mode else with_unit(value, unit, digits)
        out[name] = wrap(shown, latex_mode)
    return out


def latex_values(result: Result) -> dict:
    """Quantity symbol -> its value with unit in LaTeX (scalars only), for printing a sympy
    expression with numbers."""
    quantities = result.library.quantities
    return {quantities[name].symbol: v for name, v in _values(result, True).items()}


def text_values(result: Result) -> dict:
    """Quantity name -> its value with unit (scalars only), to fill a Printed text."""
    return _values(result, False)


def has_arrays(result: Result) -> bool:
    return any(np.ndim(v) > 0 for v in result.values.values())


def needed_downstream(result: Result, step: StepView) -> set[str]:
    """Unknowns of ``step`` that the target is, or that a later step uses."""
    later = {q for s in result.steps if s.number > step.number for q in s.inputs}
    return {u for u in step.solves_for if u == result.target or u in later}


def unknown_views(result: Result, step: StepView) -> Any:
    """How each unknown of a step is shown: (name, "numeric") when no closed form was used,
    (name, "side") for a block's by-product nothing later needs (value only), else
    (name, "solved") with the full rearranged form and numbers."""
    needed = needed_downstream(result, step)
    views = [(name, "numeric" if name not in step.solution else "solved" if name in needed else "side")
             for name in step.solves_for]
    yield from sorted(views, key=lambda v: v[1] == "side")   # the values that matter first


def was_rounded(result: Result) -> bool:
    """True when a whole-number answer differs visibly from its exact value."""
    if result.exact is None:
        return False
    exact = np.asarray(result.exact, dtype=float)
    return bool(np.any(np.abs(exact - np.asarray(result.value)) > 1e-6 * np.maximum(np.abs(exact), 1)))


def step_value_latex(result: Result, name: str) -> list[str]:
    """The value(s) closing a step's chain of equalities: the exact value and then the
    rounded one for a rounded whole-number target, else just the value."""
    if name == result.target and was_rounded(result):
        return [with_unit_latex(result.exact, result.unit, digits=6),
                value_latex(result, name) + r"\ \text{(rounded " + str(result.rounding) + ")}"]
    return [value_latex(result, name)]


def value_text(result: Result, name: str) -> str:
    v, unit = result.display(name)
    return with_unit(v, unit)


def value_latex(result: Result, name: str, digits: int = 4) -> str:
    v, unit = result.display(name)
    return with_unit_latex(v, unit, digits)


__all__ = ["latex_symbols", "wrap", "latex_values", "text_values", "has_arrays",
           "value_text", "value_latex", "was_rounded", "fmt", "fmt_latex"]


STACK_WHY = {"given": "given", "default-run": "the default for a question about a run",
             "default-formula": "the default: the answer depends on what it sets"}


def run_sentence(run: dict) -> str | None:
    """The run an answer is about, in one line (from :meth:`symcalc.query.run.Run.as_dict`):
    its workload, model and hardware, stack and why, and each group with a degree, where it came
    from, whether it stays in a node and the links the answer took. None for a question about
    no run (no preset named, no degree known)."""
    groups = [g for g in run["groups"] if g["degree"] is not None]
    if not (run["workload"] and (run["model"] or run["hardware"]) or any(g["origin"] != "default" for g in groups)):
        return None
    what = run["workload"] or "a run"
    if run["model"]:
        what += f" of {run['model']}"
    if run["hardware"]:
        what += f" on {run['hardware']}"
    if run["stack"]:
        stack = ", ".join(f"{k} = {v}" for k, v in run["stack"].items())
        what += f", {stack} ({STACK_WHY.get(run['stack_why'], run['stack_why'])})"
    else:
        what += ", no stack (the formulas' own defaults)"
    parts = []
    for g in groups:
        said = [g["origin"]] if g["origin"] else []
        if g.get("spans") and g["degree"] > 1:
            said.append(g["spans"])
        # the first link the answer took (the data lists a group's bandwidth first); JSON has all
        said += [f"{name} = {with_unit(link['value'], link['unit'])}"
                 + (f" from {link['from']}" if link["from"] != "derived" else "")
                 for name, link in list(g.get("links", {}).items())[:1]]
        parts.append(f"{g['name']} = {fmt(g['degree'])}" + (f" ({'; '.join(said)})" if said else ""))
    return f"run: {what}" + (f"; {', '.join(parts)}" if parts else "")
