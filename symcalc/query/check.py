"""Consistency checks: do these numbers hang together?

Given more values than any one question needs (a sizing sheet, a blog's worked example), each
given value is solved for from all the others, by the same shortest derivation ``solve`` would
use, and compared with what was claimed. Every relation among the given values is reported
once: the seed document's 2.8 s for a 70B gradient AllReduce over 128 GPUs at 50 GB/s is
checked against the ring's 5.56 s and disagrees by 50 %.

A relation found from several of its members (allreduce_time from n_params, or n_params from
allreduce_time) is one relation; it is shown in the direction that runs its formulas forwards
(fewest equations solved backwards), which is how its source would have computed it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import numpy as np

from symcalc.engine.method import Method
from symcalc.engine.route import asked_inverses
from symcalc.errors import (
    NoSolutionError,
    OutOfBoundsError,
    QueryError,
    SymcalcError,
    UnderdeterminedError,
)
from symcalc.library.loading import Library, default_library
from symcalc.query.parts import parts_of
from symcalc.query.relation import Relation, _percent, relation
from symcalc.query.question import read_given
from symcalc.query import fit
from symcalc.query.question import option_mapping
from symcalc.query.presetvalues import presets_of
from symcalc.query.run import Run, declare, stack_reason
from symcalc.query.stacks import is_run
from symcalc.query.implied import idle_options
from symcalc.query.results import sentences
from symcalc.query.solve import solve, solve_unshown
from symcalc.units.format import with_unit

DEFAULT_RTOL = 0.02


@dataclass
class Fit:
    """Does it fit? A per-GPU amount the given values determine, against its capacity."""

    quantity: str
    value: float              # base units
    capacity: str             # the capacity's name (gpu_memory)
    limit: float              # base units
    unit: str
    factor: float
    parts: tuple = ()         # (part, value) of the amount, largest first
    workload: str | None = None   # the workload whose memory it is (symcalc.query.fit), None for a part
    advised: float = 0.0      # base units: the margin a run keeps when none is given (solve's and plan's)
    tight: bool = False       # fits, but under that margin (symcalc.query.fit.Fit.tight: the one test)

    @property
    def fits(self) -> bool:
        return self.value <= self.limit * (1 + 1e-12)

    def line(self) -> str:
        def show(v: float) -> str:
            return with_unit(v / self.factor, self.unit)
        if self.fits:
            tight = (f", under the {show(self.advised)} a run keeps by default: tight, symcalc plan would not "
                     "propose it" if self.tight else "")
            return (f"{self.quantity} = {show(self.value)} fits in {self.capacity} = {show(self.limit)} "
                    f"({show(self.limit - self.value)} free{tight})")
        largest = f"; the largest part is {self.parts[0][0]} = {show(self.parts[0][1])}" if self.parts else ""
        return (f"{self.quantity} = {show(self.value)} DOES NOT FIT in {self.capacity} = {show(self.limit)}: "
                f"{show(self.value - self.limit)} over{largest}")

    def as_dict(self) -> dict:
        return {"quantity": self.quantity, "value": self.value / self.factor, "capacity": self.capacity,
                "limit": self.limit / self.factor, "unit": self.unit, "fits": self.fits,
                "over": max(self.value - self.limit, 0.0) / self.factor,
                "parts": [{"name": n, "value": v / self.factor} for n, v in self.parts], "workload": self.workload,
                "tight": self.tight}


@dataclass
class Check:
    """Every relation found among the given values, the values nothing relates, and whether
    what they determine fits its capacity (memory per GPU in gpu_memory)."""

    relations: list[Relation]
    unrelated: list[str]
    rtol: float
    options: dict[str, str] = field(default_factory=dict)
    fits: list[Fit] = field(default_factory=list)
    run: Run | None = None          # the run the values are about (symcalc.query.run)
    warnings: list[str] = field(default_factory=list)   # options given that change nothing here (as solve says)

    @property
    def ok(self) -> bool:
        """True when every relation agrees within ``rtol`` and everything fits."""
        return all(r.agrees for r in self.relations) and all(f.fits for f in self.fits)

    @property
    def disagreements(self) -> list[Relation]:
        return [r for r in self.relations if not r.agrees]

    def text(self, derivations: bool = True) -> str:
        fit_lines = [("  ok   " if f.fits else "  FAIL ") + f.line() for f in self.fits]
        if not self.relations:
            if fit_lines:
                return "\n".join(["Does it fit?", *fit_lines])
            return ("nothing to check: no formula relates these values to each other "
                    f"({', '.join(self.unrelated)}); give values that overdetermine something")
        bad = self.disagreements
        head = (f"{len(self.relations)} relation{'s' if len(self.relations) != 1 else ''} checked, "
                f"{len(bad)} disagree{'s' if len(bad) == 1 else ''} beyond {_percent(self.rtol)}")
        lines = [head, ""] + ([*fit_lines, ""] if fit_lines else [])
        for r in self.relations:
            lines.append(("  ok   " if r.agrees else "  FAIL ") + r.line())
            lines.append(f"       via {_via(r.formulas)}"
                         + (f"; defaults: {_defaults_said(r.defaults)}"
                            if r.defaults else ""))
            # an option's fallback the answer took (query.question.pose): said as solve says it
            lines += [f"       assuming {a['name']} = {a['value']} ({a['source']})"
                      for a in (r.result.assumptions if r.result is not None else []) if a["kind"] == "fallback"]
        if self.unrelated:
            lines += ["", f"Not related to the others by any formula: {', '.join(self.unrelated)}"]
        lines += [f"warning: {w}" for w in self.warnings]
        if derivations:
            for r in bad:
                if r.result is not None:
                    lines += ["", f"Derivation of {r.quantity} from the other values:", "",
                              r.result.text()]
        return "\n".join(lines).rstrip()

    def as_dict(self) -> dict:
        return {"ok": self.ok, "rtol": self.rtol, "checked": len(self.relations),
                "fits": [f.as_dict() for f in self.fits],
                "disagreements": len(self.disagreements),
                "relations": [r.as_dict() for r in self.relations], "unrelated": list(self.unrelated),
                "options": dict(self.options), "run": self.run.as_dict() if self.run else None,
                "warnings": list(self.warnings)}

    def json(self, indent: int | None = 2) -> str:
        return json.dumps(self.as_dict(), indent=indent)

    def __str__(self) -> str:
        return self.text(derivations=False)

    def __repr__(self) -> str:
        """One line, not the dataclass's dump of every relation and its derivation (5 kB)."""
        return f"<Check: {len(self.relations)} checked, {len(self.disagreements)} disagreeing, ok={self.ok}>"

    def _repr_html_(self) -> str:
        """Jupyter: the verdict and one table row a relation (not the dataclass's raw dump)."""
        from symcalc.formats import render  # on use: a renderer only when a check is shown
        return render("check_html", self)


def check(given: Mapping[str, object] | None = None, /, *, options: Mapping[str, object] | None = None,
          rtol: float = DEFAULT_RTOL, library: Library | None = None, hardware: str | None = None,
          model: str | None = None, **values) -> Check:
    """Check the given values against each other: every relation the library finds among them.

    Each given value is solved for from all the others (presets fill in below them, as in
    :func:`symcalc.solve`); a value no formula relates to the others is listed as unrelated.
    ``rtol`` is the relative tolerance (0.02: within 2 %); whole numbers are compared as
    rounded (the 70 micro-batches a source claims against the 71 a bubble target needs).

    Returns
    -------
    Check
        The relations found, and the values no formula relates to the others.

    Raises
    ------
    QueryError
        ``rtol`` is not between 0 and 1, fewer than two values are given, or one is an array.
    SymcalcError
        Names, values, options and presets are read as :func:`symcalc.solve` reads them, with
        its errors.
    """
    lib = library or default_library()
    try:
        rtol = float(rtol)
    except (TypeError, ValueError):
        raise QueryError(f"rtol is a relative tolerance such as 0.02, got {rtol!r}") from None
    if not (0 <= rtol < 1):
        raise QueryError(f"rtol is a relative tolerance between 0 and 1 (0.02 is 2 %), got {rtol:g}")
    items = [*(given or {}).items(), *values.items()]
    knowns = read_given(lib, items)        # names and values checked once, up front
    # a preset's values are evidence too: one claim checks against the model's shapes
    if len(knowns) < (1 if hardware or model else 2):
        raise QueryError("a check needs at least two values to compare with each other "
                         "(or one, with --model or --hardware to compare it with)")
    raw = {lib.quantity(k).name: v for k, v in items}
    found: list[Relation] = []
    for name, gv in knowns.items():
        if np.ndim(gv.magnitude) != 0:
            raise QueryError(f"{name}: a check compares single values, not arrays")
        others = {k: v for k, v in raw.items() if k != name}
        try:
            r = solve(name, others, options=options, library=lib, hardware=hardware, model=model,
                      on_bounds="flag", diagnose=False, conflicts=False)
        except UnderdeterminedError:
            continue
        except (NoSolutionError, OutOfBoundsError) as e:
            q = lib.quantities[name]
            found.append(Relation(quantity=name, claimed=float(gv.magnitude), computed=None, rel_error=np.inf,
                                  agrees=False, inputs=sorted(others), formulas=[], defaults={},
                                  unit=q.display_unit, factor=q.factor, message=e.message))
            continue
        if r.looked_up:            # a preset's figure, not something the other values determine
            continue
        if name in asked_inverses((s.formulas, s.solves_for) for s in r.steps):
            continue    # an inverse kept for when it is the question (the GPUs a job MTBF allows): no claim's check
        found.append(relation(r, name, float(gv.magnitude), rtol))
    relations = _one_per_relation(found, list(knowns))
    related = set().union(*(r.members for r in relations)) if relations else set()
    unrelated = [n for n in knowns if n not in related]
    opts = {} if not relations or relations[0].result is None else dict(relations[0].result.options)
    run = _run(lib, raw, knowns, relations, options, hardware, model)
    fits, solved_as = _fits(lib, run, raw, {k: g.magnitude for k, g in knowns.items()}, options, hardware, model)
    if solved_as is not None and not any(r.result is not None and r.result.run for r in relations):
        # no relation answered: the run is as the fit was solved (its stack in force, and why)
        run = replace(run, stack=solved_as.stack, stack_why=solved_as.stack_why)
    if fits:
        related |= {f.quantity for f in fits}
        unrelated = [n for n in unrelated if n not in related]
    explicit = option_mapping(options) or {}
    idle = sentences(idle_options(lib, {**lib.option_values(explicit), **opts}, explicit))
    return Check(relations=relations, unrelated=unrelated, rtol=rtol, options=opts, fits=fits, run=run,
                 warnings=list(idle))


def _run(lib: Library, raw: Mapping[str, object], knowns: Mapping, relations: list[Relation], options, hardware,
         model) -> Run:
    """The run the values are about, declared as every answer's is (symcalc.query.run): the
    workload the options settle or the given values reach, and the stack the relations were
    answered under (the first one's), else the one the options name."""
    given = set(option_mapping(options) or {})
    first = next((r.result.run for r in relations if r.result is not None and r.result.run), None)
    in_force = [name for name, _ in first.stack] if first else sorted(given & set(lib.stacks))
    why = first.stack_why if first else stack_reason(in_force, given, is_run(presets_of(hardware, model)))
    return declare(lib, options=lib.option_values(option_mapping(options)), settled=given, footprint=set(raw),
                   in_force=in_force, stack_why=why, presets=presets_of(hardware, model), knowns=knowns)


def _fits(lib: Library, run: Run, raw: Mapping[str, object], magnitudes: Mapping[str, object], options, hardware,
          model) -> tuple[list[Fit], Run | None]:
    """Whether what the values determine fits: the memory of the workload they are about
    (symcalc.query.fit: the workload option given, else the workload whose own quantities the
    given values reach: a batch_size or a kv_cache_per_token is serving's, a micro_batch_size
    training's), solved from them; a serving setup is never tested against optimizer states.
    When that memory is not determined, the per-GPU amounts it is written in terms of that are;
    with no workload reached, every per-GPU amount the values determine (the outermost, a total
    with its parts, when it is determined). Empty when no capacity is known."""
    capacities = {q.fits_in for q in lib.quantities.values() if q.fits_in}
    if not hardware and not capacities & {lib.quantity(k).name for k in raw}:
        return [], None         # no capacity known (no GPU named, no gpu_memory given): nothing to fit in
    every = lib.option_values(option_mapping(options))
    workloads = run.workloads
    out: list[Fit] = []
    solved_as = None
    for w in workloads:
        found = fit.fit_at(lib, w, magnitudes, option_mapping(options) or {}, solve_unshown, hardware, model)
        if found is not None:
            solved_as = solved_as or found.run
            q = lib.quantities[w.amount]
            out.append(Fit(w.amount, float(found.value), w.capacity, float(found.limit), q.display_unit, q.factor,
                           found.parts, w.value, float(found.advised), found.tight))
    if out:
        return out, solved_as
    own = set().union(*(fit.written_in(lib, w.amount, {**every, w.option: w.value}) for w in workloads))
    for q in lib.quantities.values():
        if not q.fits_in or q.name in raw or (workloads and q.name not in own):
            continue
        try:
            r = solve_unshown(q.name, dict(raw), options=options, library=lib, hardware=hardware, model=model,
                              on_bounds="flag")
        except SymcalcError:
            continue
        if q.fits_in not in r.given or np.ndim(r.base_value) != 0:
            continue
        split = parts_of(lib, r.derivation, r.values, q.name)
        out.append(Fit(q.name, float(r.base_value), q.fits_in, float(r.given[q.fits_in].magnitude),
                       q.display_unit, q.factor, split.parts if split else ()))
    # the total (what the capacity less the free memory is) answers the question for all its
    # parts; without it, every amount that must fit is listed
    totals = [f for f in out if _is_total(lib, f.quantity)]
    return totals or out, None


def _is_total(lib: Library, name: str) -> bool:
    """Whether ``name`` is the whole of what must fit: some workload's amount (symcalc.query.fit:
    a formula relates it to its capacity and to a slack with a limit)."""
    return any(w.amount == name for w in fit.workloads(lib))


def _one_per_relation(found: list[Relation], order: list[str]) -> list[Relation]:
    """One entry per set of related values: the direction with the fewest equations solved
    backwards, then the value given last (a claim usually comes after its inputs)."""
    def backwards(r: Relation) -> int:
        if r.result is None:
            return 10**6
        return sum(not Method(s.method).runs_forward for s in r.result.steps)
    best: dict[frozenset, Relation] = {}
    for r in found:
        key = r.members
        cur = best.get(key)
        if cur is None or (backwards(r), -order.index(r.quantity)) < (backwards(cur), -order.index(cur.quantity)):
            best[key] = r
    return sorted(best.values(), key=lambda r: order.index(r.quantity))


def _via(formulas: list[str]) -> str:
    """The formulas a relation was checked through, as a line can say them: all of a short
    route; of a long one (the step-time model's hundred), how many and the last few, nearest the
    quantity checked (the derivation printed below, and --json, list every one)."""
    if not formulas:
        return "the given values"
    if len(formulas) <= 8:
        return ", ".join(formulas)
    return f"{len(formulas)} formulas, the last {', '.join(formulas[-4:])}"


def _defaults_said(defaults: dict, limit: int = 30) -> str:
    """The values a relation leaned on besides the given ones, as a line can say them: each with
    its value when they are few; when many, the coefficients assumed (ten of them) and
    the presets' figures counted by preset ("14 of hardware h100_sxm"): --json and the
    derivation list every one."""
    said = {k: _short(v) for k, v in defaults.items()}
    if len(said) <= limit:
        return ", ".join(f"{k}={v}" for k, v in said.items())
    by_preset: dict[str, int] = {}
    assumed = []
    for k, v in said.items():
        preset = re.search(r" \(((?:hardware|model) [^()]*)\)$", v)
        if preset:
            by_preset[preset.group(1)] = by_preset.get(preset.group(1), 0) + 1
        else:
            assumed.append(f"{k}={v}")
    shown = assumed[:10]
    rest = [f"{len(assumed) - len(shown)} more"] if len(assumed) > len(shown) else []
    rest += [f"{n} of {p}" for p, n in by_preset.items()]
    return ", ".join(shown) + (f" and {', '.join(rest)}" if rest else "")


def _short(value: object) -> str:
    """A default as the text line shows it: a preset's value with the preset's name, its source
    left to --json ('2.97 TB/s (hardware h100_sxm: measured: ...)' -> '2.97 TB/s (hardware h100_sxm)')."""
    return re.sub(r" \(([^:()]*):.*\)$", r" (\1)", str(value), flags=re.S)
