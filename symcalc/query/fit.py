"""Does the run fit? The memory of the question's workload against the GPU's.

Each workload says in the data what must fit and with which margin: a formula, active under one
value of an option, that relates a per-GPU amount (a quantity with ``fits_in``), its capacity and a
slack with a limit. ``memory_headroom = gpu_memory - total_memory_per_gpu`` under workload =
training, ``memory_headroom = gpu_memory - serving_memory_per_gpu`` under workload = serving
(formulas/memory.toml, formulas/serving.toml). A new workload is one more such formula.

Which workload an answer is about: the option's value when the question settles it (given, a
fallback taken, implied, or the derivation depends on it: ``solve batch_size memory_headroom=0GB``
under serving); otherwise each workload whose own quantities the question reaches, read from
the data: the quantities its amount is written in terms of, formula by formula down from the
amount, and that no other workload's amount is (a decode rate goes through the batch's KV
cache: serving; a step time through the micro-batch: training). A question that reaches none
(a parameter count) gets no verdict.

Its fit is that amount solved at the answer's own values: the same given values, presets and
options, and the answer itself (so the same layout: tp = 1 when the answer took tp = 1), against
the capacity less the margin when one is given. The solver is passed in (``ask``), so that this
module sits below the solver that attaches the verdict to every answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from symcalc.errors import SymcalcError
from symcalc.findings import Finding
from symcalc.library.loading import Library
from symcalc.query.parts import parts_of


@dataclass(frozen=True)
class Workload:
    """One workload's fit, as the data declares it (``formula``, active under ``option = value``)."""

    option: str         # the option that names the workload (workload)
    value: str          # its value (training, serving)
    amount: str         # what must fit (serving_memory_per_gpu)
    capacity: str       # what it must fit in (gpu_memory)
    margin: str         # the slack kept free, its limit the fit's edge (memory_headroom)
    formula: str


@dataclass
class Fit:
    """A workload's amount at an answer's values against its capacity less the margin given
    (base units; arrays for a grid)."""

    workload: Workload
    value: Any                  # float or array
    capacity: Any               # float or array (a grid over gpu_memory)
    margin: Any                 # 0 when none is given
    margin_given: bool
    defaults: dict              # whole-number inputs the amount took by default (tp = 1), as text
    parts: tuple = ()           # (part, value) of the amount at its first point, largest first
    advised: float = 0.0        # the margin a run keeps when none is given (memory_margin_fraction)
    run: Any = None             # the run the amount was solved as (symcalc.query.run.Run), when known

    @property
    def limit(self):
        """What the amount may take: the capacity less the margin (an array for a grid)."""
        return np.asarray(self.capacity, dtype=float) - np.asarray(self.margin, dtype=float)

    @property
    def over(self):
        """Where the amount exceeds the limit (a bool, or a mask for a grid)."""
        with np.errstate(invalid="ignore"):
            over = np.asarray(self.value, dtype=float) > self.limit * (1 + 1e-12)
        return over if over.ndim else bool(over)

    @property
    def fits(self) -> bool:
        """True when it fits everywhere."""
        return not np.any(self.over)

    @property
    def tight(self) -> bool:
        """Fits, but keeps less free than a run keeps by default (no margin given): what plan
        rejects, and solve and check call tight."""
        v = np.asarray(self.value, dtype=float)
        worst = float(np.nanmax(v)) if v.size and np.any(np.isfinite(v)) else float("nan")
        return bool(self.fits and not self.margin_given and float(np.min(self.limit)) - worst < self.advised)

    def finding(self, lib: Library) -> Finding:
        """The verdict as a record (kind ``fit``); numbers in the amount's display unit."""
        q = lib.quantities[self.workload.amount]
        v = np.asarray(self.value, dtype=float)
        worst = float(np.nanmax(v)) if v.size and np.any(np.isfinite(v)) else float("nan")
        limit = float(np.min(self.limit))
        over = self.over
        values = {"workload": self.workload.value, "option": self.workload.option, "fits": self.fits,
                  "value": worst / q.factor, "capacity": float(np.min(self.capacity)) / q.factor,
                  "margin": float(np.max(self.margin)) / q.factor if self.margin_given else None,
                  "limit": limit / q.factor, "unit": q.display_unit,
                  "excess": max(worst - limit, 0.0) / q.factor, "free": max(limit - worst, 0.0) / q.factor,
                  # fits, but keeps less free than a run keeps by default: what plan rejects
                  "tight": self.tight,
                  "advised": self.advised / q.factor,
                  "largest": [self.parts[0][0], self.parts[0][1] / q.factor] if self.parts else None,
                  "defaults": dict(self.defaults),
                  "points": int(np.sum(over)) if np.ndim(over) else None,
                  "of": int(np.size(over)) if np.ndim(over) else None}
        return Finding("fit", q.name, values, related=(self.workload.capacity, self.workload.margin),
                       formulas=(self.workload.formula,), mask=over if np.ndim(over) else None)


def workloads(lib: Library) -> tuple[Workload, ...]:
    """Every workload the data declares: a formula active under one option value that relates a
    per-GPU amount, its capacity and a slack with a limit. Found once per library."""
    found = lib.__dict__.get("_workloads")
    if found is not None:
        return found
    out = []
    for f in lib.formulas.values():
        names = set(f.quantities)
        margins = [n for n in names if lib.quantities[n].limit]
        amounts = [n for n in names if lib.quantities[n].fits_in in names]
        if len(f.when) == 1 and len(margins) == 1 and len(amounts) == 1:
            [(option, values)] = f.when.items()
            if len(values) == 1:
                amount = amounts[0]
                out.append(Workload(option, values[0], amount, str(lib.quantities[amount].fits_in), margins[0], f.id))
    lib.__dict__["_workloads"] = tuple(out)
    return lib.__dict__["_workloads"]


def written_in(lib: Library, name: str, options: Mapping[str, str]) -> frozenset:
    """``name`` and every quantity it is written in terms of, formula by formula as the data
    writes them (left side from right side) under ``options``; cached per library."""
    cache = lib.__dict__.setdefault("_fit_ancestry", {})
    key = (name, tuple(sorted(options.items())))
    if key not in cache:
        by_lhs: dict[str, list] = {}
        for f in lib.active_formulas(options):
            if f.lhs_name:
                by_lhs.setdefault(f.lhs_name, []).append(f)
        seen, pending = {name}, [name]
        while pending:
            for f in by_lhs.get(pending.pop(), ()):
                for n in f.quantities:
                    if n not in seen:
                        seen.add(n)
                        pending.append(n)
        cache[key] = frozenset(seen)
    return cache[key]


def foreign(lib: Library, options: Mapping[str, str]) -> frozenset:
    """The quantities of the workloads ``options`` do not choose that are theirs alone (in their
    amount's terms and not in the chosen one's): a training micro-batch under serving, a serving
    batch under training. What a refusal under one workload does not ask for. Cached."""
    cache = lib.__dict__.setdefault("_fit_foreign", {})
    key = tuple(sorted(options.items()))
    if key not in cache:
        every = workloads(lib)
        chosen = [w for w in every if options.get(w.option) == w.value]
        mine = set().union(*(written_in(lib, w.amount, options) for w in chosen))
        others = set().union(*(written_in(lib, w.amount, {**options, w.option: w.value})
                               for w in every if w not in chosen))
        cache[key] = frozenset(others - mine) if chosen else frozenset()
    return cache[key]


def decide(lib: Library, options: Mapping[str, str], settled: Iterable[str], footprint: Iterable[str]
           ) -> list[Workload]:
    """The workloads a question is about: the settled option's value, else those whose own
    quantities (in its amount's terms and no other workload's) ``footprint`` reaches."""
    every, settled, footprint = workloads(lib), set(settled), set(footprint)
    chosen = [w for w in every if w.option in settled and options.get(w.option) == w.value]
    free = [w for w in every if w.option not in settled]
    terms = {w: written_in(lib, w.amount, {**options, w.option: w.value}) for w in free}
    for w in free:
        others = set().union(*(t for v, t in terms.items() if v.amount != w.amount))
        if (terms[w] - others) & footprint:
            chosen.append(w)
    return chosen


def fit_at(lib: Library, w: Workload, known: Mapping[str, object], options: Mapping[str, str], ask: Callable,
           hardware=None, model=None) -> Fit | None:
    """``w``'s amount solved (by ``ask``, the solver) from ``known`` (name -> base magnitude,
    given values and the answer) under ``options`` with the workload's value, against the
    capacity (given, or the hardware preset's) less the margin when given; None when the amount
    or the capacity is not determined."""
    inputs = {}
    for k, v in known.items():
        q = lib.quantities[k]
        if k == w.amount or q.limit or isinstance(v, str):     # the slack would settle it circularly
            continue
        inputs[k] = (v, q.unit) if q.unit else v
    try:
        r = ask(w.amount, inputs, options={**options, w.option: w.value}, library=lib, on_bounds="flag",
                hardware=hardware, model=model)
    except SymcalcError:
        return None
    return fit_of(lib, w, r, known.get(w.margin))


def fit_of(lib: Library, w: Workload, r: Any, margin: Any = None) -> Fit | None:
    """``w``'s fit from a result ``r`` whose answer is its amount (the question's own, or the
    one :func:`fit_at` asked), against the capacity ``r`` knows less ``margin`` (None: none
    given); None when the capacity is not known."""
    cap = r.given.get(w.capacity)
    if cap is None or isinstance(r.base_value, str):
        return None
    defaults = {n: d["value"] for n, d in r.defaults_used.items()
                if lib.quantities[n].input and lib.quantities[n].whole}
    split = parts_of(lib, r.derivation, r.values, w.amount)
    return Fit(w, r.base_value, cap.magnitude, margin if margin is not None else 0.0, margin is not None, defaults,
               split.parts if split and np.ndim(r.base_value) == 0 else (),
               advised=default_margin(lib, float(np.min(cap.magnitude))), run=getattr(r, "run", None))


def default_margin(lib: Library, capacity: float) -> float:
    """The memory a run keeps free when the question gives no memory_headroom (base units): the
    library's memory_margin_fraction of ``capacity``. symcalc plan keeps it; the fit verdict of
    every other command says when an answer leaves less, so that one test decides a layout."""
    from symcalc.query.values import read_value   # the one reader of a value's text
    q = lib.quantities.get(MARGIN_FRACTION)
    if q is None or q.default is None:
        return 0.0
    return float(read_value(q, q.default).magnitude) * capacity


MARGIN_FRACTION = "memory_margin_fraction"
