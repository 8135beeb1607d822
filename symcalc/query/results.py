"""The answer to one query: the value with its unit, the derivation behind it, and renderers.

A :class:`Result` is a finished, plain record: renderers read it and never recompute the
answer (what only showing it needs, the closed form and each step's solution printed, is made
on first read: :class:`Deferred`). It holds data only, no callables into the solver, so it
pickles and compares as its values. It keeps the compiled derivation, so the answer can be
evaluated again for new values at numpy speed: that is the work of plain functions
(:mod:`symcalc.query.reuse`), which the Result that :func:`symcalc.solve` returns
(:class:`symcalc.query.solve.Solved`) offers as ``.function(...)`` and ``.points(...)``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
import pint

from symcalc import units
from symcalc.engine.derivation import Derivation
from symcalc.engine.method import Method
from symcalc.findings import Finding
from symcalc.formats import Rendered, render
from symcalc.library.printed import Printed
from symcalc.library.records import FormulaSpec, QuantitySpec
from symcalc.query.run import Run
from symcalc.query.values import GivenValue
from symcalc.units.format import with_unit

if TYPE_CHECKING:   # pragma: no cover - for type checkers only
    from symcalc.library.loading import Library

T = TypeVar("T")


class Later:
    """A field's value not made yet: ``make()`` gives it, on first read (see :class:`Deferred`)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]):
        self.make = make


def later(make: Callable[[], T]) -> T:
    """What ``make()`` will give, for a :class:`Deferred` field: made when first read."""
    return Later(make)  # type: ignore[return-value]  # a Deferred field reads it as the value


class Deferred:
    """A dataclass field that may be given as :class:`Later`: made on first read, then kept.

    Why: what only a renderer reads (the closed form, each step's solution, printed) costs
    sympy's work, often more than the answer itself; a planner that evaluates a hundred
    derivations reads none of it. The field has no default (reading it on the class raises
    AttributeError, which is how dataclasses tell a descriptor without one); writing it
    stores the value given."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.slot = "_deferred_" + name

    def __get__(self, obj: Any, objtype: type | None = None) -> Any:
        if obj is None:
            raise AttributeError(self.slot)
        value = obj.__dict__[self.slot]
        if type(value) is Later:
            value = obj.__dict__[self.slot] = value.make()
        return value

    def __set__(self, obj: Any, value: Any) -> None:
        obj.__dict__[self.slot] = value


@dataclass
class StepView:
    """One step as shown: which formulas, solved for what, how, and the rearranged form."""

    number: int
    formulas: list[FormulaSpec]
    method: Method                   # how the step was solved
    solves_for: list[str]
    inputs: list[str]
    if TYPE_CHECKING:       # a field without a default, as type checkers see it
        solution: dict[str, Printed]
    else:
        solution: dict[str, Printed] = Deferred()
    # (the root used, per unknown, printed; empty if found numerically)
    numeric: bool                    # numeric root finding was used for some values


@dataclass
class Elasticity:
    """How much an answer moves with one given value (symcalc.query.sensitivity)."""

    name: str
    given: str              # the value as given
    elasticity: float       # d ln target / d ln input at the answer; nan where not finite
    method: str             # "symbolic" (from the closed form) or "numeric" (a central difference)


@dataclass
class Result(Rendered):
    """The value of ``target`` with its unit, how it was derived, and what it leaned on."""

    # the library and the derivation it was made with: the means, not what the record says (a
    # copy, pickled and read back, holds other objects of the same content), so not compared
    library: Library = field(compare=False)
    target: str
    quantity: QuantitySpec
    unit: str                              # unit of ``value`` (--to, or the display unit)
    factor: float                          # base units per ``unit``
    base_value: Any                        # exact value in base units (float or array)
    rounded_base: Any                      # rounded for whole-number quantities, else base_value
    given: dict[str, GivenValue]
    presets: dict[str, str]                # kind -> preset key that supplied values
    options: dict[str, str]                # options that shaped this derivation
    all_options: dict[str, str]
    defaults_used: dict[str, dict]
    values: dict[str, Any]                 # every quantity of the derivation, base units
    steps: list[StepView]
    derivation: Derivation = field(compare=False)
    if TYPE_CHECKING:
        closed_form: Printed
    else:
        closed_form: Printed = Deferred()     # the target in the knowns, printed
    unused: list[str] = field(default_factory=list)
    # what to tell the reader, as records (symcalc.findings): warnings and bound violations,
    # in the order found; .warnings and .violations are their sentences
    findings: list[Finding] = field(default_factory=list)
    conflicts: list[dict] = field(default_factory=list)
    rounding: str | None = None            # how a whole-number answer was rounded: up | down | nearest (| mixed)
    # why it rounded that way, when a given limit decided: {direction, limit, other (the whole
    # number on the other side, display units), value_there, given, unit, given_is}
    rounding_reason: dict | None = None
    # defaults that stand in for a main input (token count, utilization, precision): said first
    assumptions: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)     # options the given values implied, ...
    looked_up: str | None = None           # the preset the answer was looked up in (nothing derives it)
    on_bounds: str = "raise"
    preset_args: dict = field(default_factory=dict)   # hardware=/model= as given to solve
    # the setting options (training stacks) in force -> whether the question gave them (their
    # values are in all_options): new values for the same question meet their ``requires``
    stacks: dict[str, bool] = field(default_factory=dict)
    # other quantities found from this answer's values (a collective's whole time beside its
    # exposed part in the breakdown: symcalc.query.reuse.companion), name -> value, kept once found
    companions: dict = field(default_factory=dict, repr=False, compare=False)
    # the elasticity to each given value, largest first (solve(..., sensitivity=True)), else None
    elasticities: list[Elasticity] | None = None
    # the run the question is about (symcalc.query.run): workload, stack, presets, groups
    run: Run | None = None

    def run_dict(self) -> dict | None:
        """The run the question is about (symcalc.query.run) as JSON-ready data, with the links
        and degrees as this answer took them (a degree it solved for, as rounded); None when
        the answer has no run (a record made before runs were declared)."""
        if self.run is None:
            return None
        return self.run.as_dict({**self.values, self.target: self.rounded_base}, self.library, answer=self.target)

    # -- findings -------------------------------------------------------------------------
    @property
    def sensitivity(self) -> dict[str, float]:
        """name -> d ln target / d ln input for each given value, largest magnitude first
        ({} unless solved with ``sensitivity=True``; nan where it is not finite)."""
        return {e.name: e.elasticity for e in self.elasticities or ()}

    @property
    def warnings(self) -> list[str]:
        """The warnings as sentences (the findings that are not bound violations or reports)."""
        return sentences(f for f in self.findings if not f.violation and f.kind not in ("reported", "fit", "rescoped"))

    @property
    def fit(self) -> list[str]:
        """Whether the run fits: its workload's memory at this answer's values against the GPU's
        (symcalc.query.fit), as sentences; [] when the question reaches no workload's memory."""
        return sentences(f for f in self.findings if f.kind == "fit")

    @property
    def readings(self) -> list[str]:
        """Given values read as their counterpart (a replica's rate as the deployment's), the
        only reading that answers (symcalc.query.rescope.rescoped), as sentences: said first."""
        return sentences(f for f in self.findings if f.kind == "rescoped")

    @property
    def reported(self) -> list[str]:
        """What the derivation's data asks to be stated beside the answer (which pipeline stage a
        memory figure is that of), as sentences."""
        return sentences(f for f in self.findings if f.kind == "reported")

    @property
    def violations(self) -> list[str]:
        """Computed values outside their bounds, as sentences (on_bounds="flag")."""
        return sentences(f for f in self.findings if f.violation)

    # -- the value ----------------------------------------------------------------------
    @property
    def value(self):
        """The answer in ``unit`` (rounded the quantity's way if it is a whole number)."""
        return _scale(self.rounded_base, self.factor)

    @property
    def exact(self):
        """The unrounded answer in ``unit`` for whole-number quantities, else None."""
        return _scale(self.base_value, self.factor) if self.quantity.whole else None

    @property
    def quantity_value(self):
        """The answer as a pint quantity of symcalc's registry (text answers stay text)."""
        if self.quantity.kind == "text":
            return self.value
        return units.Q(self.value, self.unit) if self.unit else units.Q(self.value)

    def to(self, unit: str) -> pint.Quantity:
        """The answer converted to another unit of the same dimension."""
        return self.quantity_value.to(units.parse_unit(unit))

    def __float__(self) -> float:
        if np.ndim(self.value) > 0:
            raise TypeError("the result is an array; use .value")
        return float(self.value)

    def display(self, name: str) -> tuple[object, str]:
        """Value and unit to show for any quantity of this derivation."""
        if name == self.target:
            return self.value, self.unit
        q = self.library.quantities[name]
        return _scale(self.values[name], q.factor), q.display_unit

    @property
    def breakdown(self) -> dict | None:
        """:meth:`breakdown_of` with the collectives' whole times."""
        return self.breakdown_of(wholes=True)

    def breakdown_of(self, wholes: bool = True) -> dict | None:
        """The parts of a total the derivation adds up from named quantities (a formula marked
        ``breakdown``: step_time = compute + exposed TP + ... + optimizer), or None.

        ``{"of": total's name, "unit": its display unit, "total": its value, "parts": [{"name",
        "value", "share"}, ...]}``, in the order the formula writes them; values in the total's
        unit, shares as fractions of it (arrays for a sweep). A part that is itself a sum in the
        derivation carries its own ``parts`` (compute by kind); a part that is the exposed share
        of a whole (``exposed_part_of`` in the data: a collective's exposed time) carries
        ``whole`` and ``hidden``, the time it runs in all and what compute hides of it (each one
        more solving step: ``wholes=False`` leaves them out, for a caller that reads the parts
        only)."""
        sums = {}
        for step in self.steps:
            f = step.formulas[0]
            if len(step.formulas) == 1 and f.breakdown and f.lhs_name and list(step.solves_for) == [f.lhs_name]:
                sums[f.lhs_name] = f
        top = next((name for name in reversed([s.formulas[0].lhs_name for s in self.steps])
                    if name in sums), None)
        if top is None:
            return None
        unit = self.unit if top == self.target else self.library.quantities[top].display_unit
        factor = self.factor if top == self.target else self.library.quantities[top].factor
        whole = self.values[top]
        return {"of": top, "unit": unit, "total": _scale(whole, factor),
                "parts": self._parts(sums[top], sums, factor, whole, wholes)}

    def _parts(self, formula, sums: dict, factor: float, whole, wholes: bool) -> list[dict]:
        parts = []
        for name in formula.breakdown:
            v = self.values[name]
            with np.errstate(invalid="ignore", divide="ignore"):
                share = np.asarray(v, dtype=float) / np.asarray(whole, dtype=float)
            part: dict = {"name": name, "value": _scale(v, factor), "share": float(share) if share.ndim == 0 else share}
            if name in sums:
                part["parts"] = self._parts(sums[name], sums, factor, whole, wholes)
            total_name = self.library.quantities[name].exposed_part_of
            if wholes and total_name and np.ndim(v) == 0:
                total = self.companion_value(total_name)
                if isinstance(total, float):
                    part["whole"] = _scale(total, factor)
                    hidden = total - float(v)
                    hidden = 0.0 if hidden <= 1e-9 * abs(total) else hidden      # round-off, not time
                    part["hidden"] = _scale(hidden, factor)
                    part["whole_of"] = total_name
            parts.append(part)
        return parts

    def companion_value(self, name: str) -> float | str | None:
        """``name``'s value from the quantities this answer computed (a collective's whole time
        beside its exposed part), or one found from them before (``companions``); None where
        the record has none. The record asks no solver: the Result solve() returns
        (:class:`symcalc.query.solve.Solved`) finds the value it lacks, one more step of the
        same derivation's values, and keeps it here."""
        if name in self.values and isinstance(self.values[name], str):
            return self.values[name]
        if name in self.values and np.ndim(self.values[name]) == 0:
            return float(self.values[name])
        return self.companions.get(name)

    def __setstate__(self, state: dict) -> None:
        # a pickled derivation leaves its library out (symcalc.engine.derivation: it is cached on
        # disk apart from it); the copy is bound to the library pickled with the record
        self.__dict__.update(state)
        if self.derivation.library is None:
            self.derivation.bind(self.library)

    @property
    def numeric_symbols(self) -> list[str]:
        """Quantities in the closed form that have no closed form themselves (found numerically)."""
        numeric = {n for s in self.steps if not s.solution for n in s.solves_for}
        return sorted(numeric & self.closed_form.names)

    @property
    def has_closed_form(self) -> bool:
        """False when the target itself could only be found numerically (or was given)."""
        return bool(self.steps) and self.closed_form.symbol_of != self.target

    # -- renderers ----------------------------------------------------------------------
    def latex(self, standalone: bool = False) -> str:
        return render("latex", self, standalone=standalone)

    def markdown(self) -> str:
        return render("markdown", self)


    def _repr_latex_(self) -> str:
        return "$$" + render("latex_equation", self) + "$$"

    def _repr_html_(self) -> str:
        """Jupyter: the answer, its derivation and its assumptions."""
        return render("result_html", self)

    def __str__(self) -> str:
        return f"{self.target} = {with_unit(self.value, self.unit)}"

    def __repr__(self) -> str:
        return f"<Result {self}>"


def sentences(findings) -> list[str]:
    """Findings as sentences, through the render registry (the query layer writes no words)."""
    return [render("finding", f) for f in findings]


def _scale(base, factor: float):
    if isinstance(base, str) or (isinstance(base, np.ndarray) and base.dtype == object):
        return base     # text: a word or a description, nothing to scale
    if np.ndim(base) > 0:
        return np.asarray(base, dtype=float) / factor
    return float(base) / factor
