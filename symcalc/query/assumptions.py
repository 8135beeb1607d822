"""What an answer says it assumed, in its first lines: the defaults that stand in for a main
input, a stack in force the question did not name, an option's fallback, and the options a
stack set. Plain functions of the posed question and its derivation, read by the solver's
record (symcalc.query.solve)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from symcalc.engine.derivation import Derivation
from symcalc.query import stacks
from symcalc.query.question import Posed
from symcalc.units.format import with_unit


def assumptions(lib, defaults_used: dict, values: dict, relevant: dict, posed: Posed) -> list[dict]:
    """Defaults that stand in for a main input of the question (the token count, a utilization,
    the precision), a training stack in force that the question did not give, and the options
    such a stack set that the derivation uses, an option's fallback taken where its default
    leaves the question open: each said in the answer's first lines, not only among the defaults."""
    out = [_fallback_assumption(lib.options[name], value) for name, value in posed.fallback.items()]
    unnamed = posed.in_force - posed.settled
    for name in sorted(unnamed):
        # the stack the question did not name, in force: said first, with why (a run's default)
        out.append({"name": name, "value": posed.resolved.values[name], "kind": "stack",
                    "source": f"the default {name}: the question {_why_in_force(posed)}; --{name} NAME to "
                              f"change, --{name} textbook for the source documents' physics"})
    for name, d in defaults_used.items():
        if lib.quantities[name].main_input:
            entry = {"name": name, "value": d["value"], "source": d["source"], "kind": "rule" if "rule" in d else "default"}
            if "rule" in d and name in values and np.ndim(values[name]) == 0:
                q = lib.quantities[name]
                entry["computed"] = with_unit(float(values[name]) / q.factor, q.display_unit)
            out.append(entry)
    setting = {d.get("option") for d in defaults_used.values()}
    for name, value in relevant.items():
        opt = lib.options[name]
        main = opt.main_input and (name in setting or not opt.main_input_by_defaults)
        if name not in posed.settled | unnamed and name not in posed.resolved.set_by and main:
            out.append({"name": name, "value": value, "source": f"the default of option {name}: {opt.values[value]}",
                        "kind": "option"})
    for name, value in relevant.items():
        if name in posed.resolved.set_by:
            by, by_value = posed.resolved.set_by[name]
            out.append({"name": name, "value": value, "source": f"set by {by}={by_value}", "kind": "set_by_option",
                        "option": by, "option_value": by_value})
    return out


def _why_in_force(posed: Posed) -> str:
    """Why a stack the question did not name is in force: it is about a run (a model or a
    hardware preset named), or its derivation depends on what only a stack sets."""
    if posed.about_run:
        return "names a model or hardware, so it is answered as that software runs it"
    return "depends on what a stack sets"


def _fallback_assumption(opt, value: str) -> dict:
    """The assumption an option's fallback makes (:func:`symcalc.query.question.pose`): its
    value, what it means, and what the default would count besides and how to get it."""
    fb = opt.fallback
    return {"name": opt.name, "value": value, "kind": "fallback", "default": opt.default,
            "summary": fb.summary, "reason": fb.reason,
            "source": f"{fb.summary}: the default, {opt.name} = {opt.default}, cannot answer this question; {fb.reason}"}


def relevant_options(derivation: Derivation, defaults_used: dict, explicit: Mapping, opts: dict) -> dict:
    """The options that shaped this derivation (selected a formula or set a default used),
    plus any given explicitly."""
    names = set(explicit) | stacks.options_used(derivation, defaults_used)
    return {k: opts[k] for k in sorted(names)}
