"""One given value against what the other given values make of it: the record that
``symcalc check`` lists and an overdetermined ``solve`` reports as a conflict."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from symcalc.findings import Finding
from symcalc.query.results import Result
from symcalc.units.format import fmt, with_unit


@dataclass
class Relation:
    """One given value against what the other given values make of it."""

    quantity: str
    claimed: float            # base units
    computed: float | None    # base units; None when no value satisfies the equations
    rel_error: float          # |computed - claimed| / |claimed| (inf when there is no value)
    agrees: bool
    inputs: list[str]         # the given values the derivation used
    formulas: list[str]       # formula ids, in order
    defaults: dict[str, str]  # defaults the derivation leaned on: name -> value text
    unit: str
    factor: float
    result: Result | None = None
    message: str = ""         # why there is no computed value
    presets: tuple[str, ...] = ()   # the presets' values the derivation used (evidence as much as given ones)

    @property
    def members(self) -> frozenset:
        return frozenset([self.quantity, *self.inputs])

    def line(self) -> str:
        claimed = with_unit(self.claimed / self.factor, self.unit)
        if self.computed is None:
            return f"{self.quantity} = {claimed} claimed; {self.message}"
        computed = with_unit(self.computed / self.factor, self.unit)
        verdict = "agrees" if self.agrees else "DISAGREES"
        presets = f"the presets' {', '.join(self.presets)}" if self.presets else ""
        source = ", ".join(x for x in (", ".join(self.inputs), presets) if x) or "the defaults"
        return (f"{self.quantity} = {claimed} claimed, {computed} from {source}: "
                f"{verdict} ({_percent(self.rel_error)} off)")

    def conflict(self, rtol: float) -> dict:
        """This disagreement as an overdetermined solve reports it (``result.conflicts``), with
        the record of its warning under "finding" (which the solver takes out)."""
        assert self.computed is not None    # a disagreement has a computed value (relation() made it)
        via = ", ".join(self.inputs)
        assumed = sorted(self.result.defaults_used) if self.result is not None else []
        presets = sorted(g for g in self.result.derivation.route.given if self.result.given[g].origin) \
            if self.result is not None else []
        leaning = [(k, self.defaults[k]) for k in assumed + presets if k in self.defaults]
        return {"quantity": self.quantity, "given": self.claimed / self.factor,
                "computed": self.computed / self.factor, "unit": self.unit,
                "rel_error": self.rel_error if np.isfinite(self.rel_error) else None, "from": via,
                "formulas": list(self.formulas), "assumed": assumed, "presets": presets,
                "finding": Finding("conflict", self.quantity,
                                   {"given": self.claimed / self.factor, "computed": self.computed / self.factor,
                                    "unit": self.unit, "rel_error": self.rel_error, "rtol": rtol,
                                    "from": list(self.inputs), "leaning": leaning},
                                   related=tuple(self.inputs), formulas=tuple(self.formulas))}

    def as_dict(self) -> dict:
        return {"quantity": self.quantity, "claimed": self.claimed / self.factor,
                "computed": None if self.computed is None else self.computed / self.factor,
                "unit": self.unit, "rel_error": None if not np.isfinite(self.rel_error) else self.rel_error,
                "agrees": self.agrees, "inputs": list(self.inputs), "presets": list(self.presets),
                "formulas": list(self.formulas),
                "defaults": dict(self.defaults), "message": self.message,
                # an option's fallback the answer took (query.question.pose), as solve's JSON carries it
                "assumptions": [a for a in (self.result.assumptions if self.result is not None else [])
                                if a["kind"] == "fallback"]}


def relation(r: Result, name: str, claimed: float, rtol: float) -> Relation:
    """``claimed`` (base units) against ``r``, the same quantity solved from other values;
    whole numbers compared as rounded."""
    computed = float(r.rounded_base)
    scale = max(abs(claimed), abs(computed), 1e-300)
    error = abs(computed - claimed) / scale if np.isfinite(computed) else np.inf
    inputs = [g for g in r.derivation.route.given if not r.given[g].origin]
    presets = [g for g in r.derivation.route.given if r.given[g].origin]
    formulas = [f.id for s in r.steps for f in s.formulas]
    defaults = {k: d["value"] for k, d in r.defaults_used.items()}
    defaults.update({k: f"{r.given[k].text} ({r.given[k].origin})" for k in presets})
    return Relation(quantity=name, claimed=claimed, computed=computed, rel_error=error,
                    agrees=bool(error <= rtol * (1 + 1e-12)), inputs=inputs, formulas=formulas,
                    defaults=defaults, unit=r.unit, factor=r.factor, result=r,
                    presets=tuple(presets) if not inputs else ())


def _percent(x: float) -> str:
    return "no value" if not np.isfinite(x) else f"{fmt(100 * x, 3)} %"
