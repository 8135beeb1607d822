"""The Python API: one call from a question to an answer with its derivation.

    >>> import symcalc
    >>> r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s",
    ...                   n_gpus=64, peak_flops="1979 TFLOP/s")
    >>> print(r)
    mfu = 4.974 %

The CLI is a thin layer over :func:`solve`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache, partial

import numpy as np

from symcalc import cache, units
from symcalc.budget import diagnosis_limit
from symcalc.engine.derivation import Derivation, SingularBlock
from symcalc.engine.rounding import round_whole
from symcalc.engine.routing import DiagnosisHints, Route, alternatives, find_route
from symcalc.errors import (
    BadOptionValueError,
    ConflictError,
    DimensionError,
    DomainError,
    NoSolutionError,
    NotDeterminedError,
    OutOfBoundsError,
    QueryError,
    SymcalcError,
    UnderdeterminedError,
)
from symcalc.findings import Finding
from symcalc.library.loading import Library, default_library
from symcalc.library.printed import Printed
from symcalc.library.presets import all_presets
from symcalc.query import stacks, unused
from symcalc.query.implied import Resolved, resolve_options
from symcalc.query.limits import limit_rounding, round_with
from symcalc.query.parts import parts_of, sum_parts
from symcalc.query.presetvalues import check_profile, unmeasured
from symcalc.query.presetvalues import preset_values as _preset_values
from symcalc.query.presetvalues import presets_of as _presets
from symcalc.query.relation import relation
from symcalc.query.results import Result, StepView, later, sentences
from symcalc.query.sensitivity import sensitivity_of
from symcalc.query.values import GivenValue, implausible, read_value
from symcalc.units import describe_dimension as show
from symcalc.units.format import with_unit


def read_given(library: Library, values) -> dict[str, GivenValue]:
    """Resolve names (aliases allowed) and read every value; a name given twice is an error.

    ``values`` is a mapping or an iterable of (name, value) pairs.
    """
    out: dict[str, GivenValue] = {}
    items = values.items() if isinstance(values, Mapping) else values
    for raw_name, raw in items:
        if not isinstance(raw_name, str):
            raise QueryError(f"quantity names are text, got {raw_name!r}")
        q = library.quantity(raw_name)
        if q.name in out:
            raise QueryError(f"{q.name} is given twice (as {out[q.name].name!r} and {raw_name!r})"
                             if raw_name != q.name else f"{q.name} is given twice")
        out[q.name] = read_value(q, raw)
    return out


def _again(result: Result, values: dict, masked: bool = False, also: tuple[str, ...] = (), outside: bool = False):
    """Result.function (and, ``masked``, Result.points): the record's derivation for new values
    (symcalc.query.reuse), with this module's solve() for what the sweep path leaves to it."""
    from symcalc.query import reuse  # start-up: only a record evaluated again needs it
    if masked:
        return reuse.points(result, values, also, outside)
    return reuse.function(result, values, solve)


def _companion(result: Result, name: str) -> float | str | None:
    """Result.companion_value: ``name`` from the scalar values ``result`` computed, given as
    known (so its derivation is the one step that combines them), under the same options."""
    lib = result.library
    known = {}
    for k, v in result.values.items():
        q = lib.quantities.get(k)
        if q is None or q.kind == "text" or isinstance(v, str) or np.ndim(v) != 0 or not np.isfinite(v):
            continue
        if not np.all(q.domain.contains(v)):    # a part that came out 0 where a given one must be positive
            continue
        known[k] = (float(v), q.unit) if q.unit else float(v)
    try:
        r = _solve_again(name, known, options=result.all_options, library=lib)
    except SymcalcError:
        return None
    if isinstance(r.base_value, str):       # a text answer (which bound binds)
        return r.base_value
    return float(r.base_value) if np.ndim(r.base_value) == 0 else None


MAX_SETTLING_OPTIONS = 3


def _settling_options(library: Library, target: str, known: frozenset, options: dict[str, str]) -> list[str]:
    """Option values that would settle an underdetermined question by what they set: the
    textbook memory sum (memory_figure=textbook sets the logits and ZeRO-3 buffers to 0) answers
    `total_memory_per_gpu model_state_memory=60GB activation_memory=20GB`, which the counted
    parts cannot. Only values that set a coefficient are tried, each by routing alone (no
    derivation is built). An option value can only open a route by setting a quantity that
    nothing in force gives a value (a coefficient with a default is already admitted), and
    only by leaving a part of the target's own sum out (setting it to 0): an option that sets a
    rate (an attention kernel's) may open some route through a forward model to a GPU count,
    but naming a kernel to someone who asked how many GPUs answers nothing. O(such values x
    routing), at most MAX_SETTLING_OPTIONS named."""
    found: list[str] = []
    in_force = library.coefficient_defaults(options)
    parts = _parts_of_sum(library, target)
    if not parts:
        return found
    for name, opt in library.options.items():
        for value, sets in opt.sets.items():
            if value == options.get(name) or opt.links_options or all(q in in_force for q in sets):
                continue
            if not any(q in parts and _is_zero(text, q) for q, text in sets.items()):
                continue
            trial = {**options, name: value}
            defaults = {k: v for k, v in library.coefficient_defaults(trial).items() if k not in known}
            try:
                find_route(library.active_formulas(trial), target, known, defaults, diagnose=False)
            except SymcalcError:
                continue
            found.append(f"{name}={value}")
            if len(found) == MAX_SETTLING_OPTIONS:
                return found
    return found


@lru_cache(maxsize=4096)
def _is_zero(text: str, name: str) -> bool:
    """Whether a default's value (as the library or an option writes it) is 0: its terms drop
    out. Read once per process: each question derived anew reads all ~100 defaults, and a plan
    derives a hundred questions."""
    return units.parse_quantity(text, name).magnitude == 0


@lru_cache(maxsize=4096)
def _base_magnitude(text: str, name: str) -> float:
    """A default's value in base units, read once per process (see _is_zero)."""
    return float(units.parse_quantity(text, name).to_base_units().magnitude)


def _parts_of_sum(library: Library, target: str) -> set[str]:
    """The parts the target adds up, at any depth (formulas marked ``breakdown``, under any
    option): what an option can leave out of it. O(formulas)."""
    sums: dict[str, set[str]] = {}
    for f in library.formulas.values():
        if f.breakdown and f.lhs_name:
            sums.setdefault(f.lhs_name, set()).update(f.breakdown)
    parts: set[str] = set()
    pending = [target]
    while pending:
        for part in sums.get(pending.pop(), ()):
            if part not in parts:
                parts.add(part)
                pending.append(part)
    return parts


def _derivation(library: Library, target: str, known: frozenset, options: dict[str, str],
                diagnose: bool = True, exclude: frozenset = frozenset()):
    """The cached derivation for (target, known names, options), built on first use.

    ``exclude`` names defaults and default rules the route must not use (an alternative that
    uses given values instead, see :func:`symcalc.engine.routing.alternatives`).
    ``diagnose=False`` skips the search for what is missing when the knowns do not suffice.
    """
    key = (target, known, tuple(sorted(options.items())), frozenset(exclude))
    failed = library.derivation_cache.get(("underdetermined", diagnose, key))
    if failed is not None:          # the same question found no route before: the same answer
        raise copy.copy(failed)
    hit = library.derivation_cache.get(key) or _cached_derivation(library, key)
    if hit is not None:
        library.derivation_cache[key] = hit
        return hit
    unrouted = _cached_failure(library, key) if not diagnose else None
    if unrouted is not None:                    # found no route in an earlier process
        library.derivation_cache[("underdetermined", False, key)] = unrouted
        raise copy.copy(unrouted)
    defaults = {name: spec for name, spec in library.coefficient_defaults(options).items() if name not in known}
    zero = {name for name, (text, _) in defaults.items() if _is_zero(text, name)}
    formulas = library.active_formulas(options)
    for attempt in range(len(formulas)):
        try:
            plan = find_route(formulas, target, known, defaults, zero, diagnose=diagnose,
                             limits=_limits(library) if not library.quantities[target].fits_in else {},
                             exclude=exclude, hints=_hints(library, target, known, options) if diagnose else None,
                             memo=library.route_cache)
        except UnderdeterminedError as e:
            library.derivation_cache[("underdetermined", diagnose, key)] = e
            if not diagnose:
                if attempt == 0:    # routing alone decided it (no block found dependent first)
                    _store_failure(library, key, e)
                raise
            own = library.quantities[target]
            setter = library.set_by_option(options).get(target)
            if setter is not None:
                text = library.coefficient_defaults(options)[target][0]
                e.message += (f". ({target} is {text} under {setter}={options.get(setter, library.options[setter].default)}: that option value "
                              f"sets it in place of its formulas; choose another {setter} to compute it)")
                e.args = (e.message,)
            elif own.default is not None:
                e.message += (f". ({target} has a default, {own.default}, but it is only used as an input; "
                              "give it to use it)")
                e.args = (e.message,)
            settle = _settling_options(library, target, known, options)
            if settle:
                e.message += f"; or --option {' | --option '.join(settle)}"
                e.args = (e.message,)
            raise e from None
        used = _defaults_used(library, plan, defaults, options)
        from symcalc.engine.derive import derive  # start-up: a cached derivation is not built again (sympy)
        try:
            derivation = derive(library, plan, options,
                                {k: d["magnitude"] for k, d in used.items() if "magnitude" in d})
            break
        except SingularBlock as singular:
            # The block's equations share a fact (C = 6ND, F = 6NR, T = D/R, C = FT): one of them
            # adds nothing for this question. Plan again without it.
            formulas = [f for f in formulas if f.id != singular.formula]
    else:  # pragma: no cover - every round removes a formula, so find_route fails first
        raise NoSolutionError(f"the equations for {target} are not independent")
    derivation.cache_key = key
    library.derivation_cache[key] = (derivation, used)
    _store_derivation(library, key, derivation, used)
    return derivation, used


def _disk_key(library: Library, key: tuple) -> str | None:
    """The on-disk cache key of a derivation: the library's content hash and the question's
    shape (target, known names, options); None for a library built in memory."""
    if library.fingerprint is None:
        return None
    target, known, options, exclude = key
    return cache.key_of(library.fingerprint, target, *sorted(known), "|", *(f"{k}={v}" for k, v in options),
                        "|", *sorted(exclude))


def _cached_derivation(library: Library, key: tuple):
    """(derivation, defaults used) from the on-disk cache, compiled for this process, or None."""
    disk_key = _disk_key(library, key)
    hit = cache.load("derivation", disk_key) if disk_key else None
    if not (isinstance(hit, tuple) and len(hit) == 2 and isinstance(hit[0], Derivation)):
        return None
    try:
        derivation = hit[0].bind(library)
    except Exception:   # an entry that does not fit this library after all: rebuild it
        return None
    derivation.cache_key = key
    return derivation, hit[1]


def _store_failure(library: Library, key: tuple, error: UnderdeterminedError) -> None:
    """Keep on disk that no route answers a question, as routing without a diagnosis words it
    (routing is structural: the same library gives the same verdict), so that the next process
    does not search every stage again: the planner asks a preset's fields (seq_len,
    gpu_memory) that only a lookup gives, ~50 ms each."""
    disk_key = _disk_key(library, key)
    if disk_key:
        cache.store("unrouted", disk_key, error.message)


def _cached_failure(library: Library, key: tuple) -> UnderdeterminedError | None:
    """The error of a question an earlier process found no route for (_store_failure), or None."""
    disk_key = _disk_key(library, key)
    message = cache.load("unrouted", disk_key) if disk_key else None
    return UnderdeterminedError(message) if isinstance(message, str) else None


def _store_derivation(library: Library, key: tuple, derivation: Derivation, used: dict) -> None:
    """Keep a new derivation on disk (never an error: the answer does not depend on it)."""
    disk_key = _disk_key(library, key)
    if not disk_key:
        return
    cache.store("derivation", disk_key, (derivation, used))


def closed_form(derivation: Derivation, choices: dict[int, int]) -> Printed:
    """The derivation's closed form for these root choices, printed: as cached with it, else
    composed now (with sympy, and the derivation kept on disk again with it)."""
    _shown(derivation, choices)
    hit = derivation.printed_closed_form(choices)
    assert hit is not None      # display() composed it
    return hit


def _shown(derivation: Derivation, choices: dict[int, int]) -> None:
    """Make sure the derivation's steps are printed and its closed form for these root choices
    composed (symcalc.engine.derive.display: only an answer shown needs them); what is made
    now is kept on disk with the derivation, so that the next process shows it without
    sympy."""
    if derivation.printed_closed_form(choices) is not None and all(s.printed is not None for s in derivation.steps):
        return
    from symcalc.engine.derive import display  # start-up: a derivation shown before is cached printed
    if display(derivation, choices):
        _store_again(derivation)


def _store_again(derivation: Derivation) -> None:
    """Keep a derivation on disk again (now printed), under the question it was made for."""
    lib, key = derivation.library, derivation.cache_key
    if key is None or derivation.degraded:
        return
    entry = lib.derivation_cache.get(key)
    if entry is not None and entry[0] is derivation:
        _store_derivation(lib, key, derivation, entry[1])


class _Display:
    """What showing an answer reads of its derivation (the closed form, each step's solution),
    made on first read: a planner's answers are never shown, and for the step-time model
    composing and printing them costs more than the derivation itself."""

    def __init__(self, derivation: Derivation, choices: dict[int, int]):
        self.derivation, self.choices = derivation, choices

    def closed_form(self) -> Printed:
        return closed_form(self.derivation, self.choices)

    def solution(self, i: int) -> dict[str, Printed]:
        """Step ``i``'s solution for the root it took, printed ({} when found numerically)."""
        choice = self.choices.get(i, -1)
        if choice < 0 or not self.derivation.steps[i].n_candidates:
            return {}
        _shown(self.derivation, self.choices)
        printed = self.derivation.steps[i].printed
        return printed[choice] if printed else {}


def _hints(library: Library, target: str, known: frozenset, options: dict[str, str]) -> DiagnosisHints:
    """What the search for missing values needs beyond the formulas: the quantities people
    know, and a check that a suggested set really settles the target.

    The suggestions come from the structure of the equations; a block of equations that is
    structurally sound can still be dependent (C = 6ND, F = 6NR, T = D/R and C = FT share one
    fact), and following such a suggestion would end in another error. So a suggestion whose
    route goes through a block is tried (and its derivation cached for the next question)."""
    zero = frozenset(name for name, (text, _) in library.coefficient_defaults(options).items()
                     if name not in known and _is_zero(text, name))

    def verify(extra: list[str], route: Route) -> bool:
        # first the numeric test of each block (milliseconds); only where it cannot tell, the
        # whole derivation (seconds for the step-time model's blocks)
        from symcalc.engine.independence import block_determined  # start-up: sympy, only when diagnosing
        verdicts = [block_determined([(library.formula(f).lhs, library.formula(f).rhs) for f in step.formulas],
                                     [library.quantities[u].symbol for u in step.solves_for], zero)
                    for step in route.steps if step.is_block]
        if False in verdicts:   # a dependent block: this route settles nothing (a detour might)
            return False
        if all(verdicts):
            return True
        try:
            _derivation(library, target, known | set(extra), options, diagnose=False)
        except SymcalcError:
            return False
        return True
    tq = library.quantities[target]
    # a per-GPU total is not settled by its capacity and the memory left free: that is circular
    avoid = frozenset(q.name for q in library.quantities.values() if q.limit or q.name == tq.fits_in) \
        if tq.fits_in else frozenset()
    # quantities kept only to reproduce a source's wrong number are never a useful suggestion
    avoid |= frozenset(q.name for q in library.quantities.values() if q.source_error)
    return DiagnosisHints(known=people_know(library), verify=verify, seconds=diagnosis_limit(),
                          assumptions=frozenset(q.name for q in library.quantities.values() if q.main_input),
                          avoid=avoid, usual=frozenset(q.name for q in library.quantities.values() if q.usual),
                          inputs=frozenset(q.name for q in library.quantities.values() if q.input),
                          units={q.name: q.unit for q in library.quantities.values()})


def people_know(library: Library) -> frozenset:
    """Quantities a person has at hand: inputs (model shapes, hardware figures, layout, prices,
    targets), coefficients with a default, slacks with a limit, and every preset field."""
    cached = getattr(library, "_people_know", None)
    if cached is None:
        fields = {name for kind in all_presets().values() for p in kind.values()
                  for name in [*p.values, *(["peak_flops"] if p.peak_flops else [])]}
        cached = frozenset(q.name for q in library.quantities.values()
                           if q.input or q.default is not None or q.limit or q.name in fields)
        library._people_know = cached  # type: ignore[attr-defined]  # a cache kept on the instance
    return cached


def _limits(library: Library) -> dict[str, str]:
    """What to say beside a quantity a question could give: for a slack, what its value at the
    limit asks ("0 GB for the largest ..."); for a quantity with a usual value, that value."""
    said = {q.name: f"usually {q.usual}" for q in library.quantities.values() if q.usual}
    said.update({q.name: f"{q.limit} {q.limit_meaning}".strip() for q in library.quantities.values() if q.limit})
    return said


def _defaults_used(library: Library, plan, defaults: dict, options: Mapping[str, str]) -> dict[str, dict]:
    """What the plan takes from defaults: coefficient values and default rules, with sources
    (and ``option``: the option whose value set a default, when one did)."""
    used: dict[str, dict] = {}
    set_by = library.set_by_option(options)
    for name in plan.defaults:
        text, source = defaults[name]
        magnitude = _base_magnitude(text, name)
        used[name] = {"value": text, "source": source, "magnitude": magnitude}
        if name in set_by:
            used[name]["option"] = set_by[name]
    for fid in plan.default_rules:
        f = library.formulas[fid]
        lhs = f.lhs_name
        assert lhs is not None      # a default rule reads 'quantity = expression' (library.build checks it)
        used[lhs] = {"value": f.equation.split("=", 1)[1].strip(), "source": f"default rule {fid}: {f.source}",
                     "rule": fid}
    return used


@dataclass
class _Posed:
    """A question with its options, known values and derivation (or why it has none)."""

    resolved: Resolved
    knowns: dict[str, GivenValue]
    settled: set[str]                           # options the question itself settles (stacks.decided)
    derivation: Derivation | None = None        # None: the target is given, or ``error``
    defaults_used: dict = field(default_factory=dict)
    error: SymcalcError | None = None
    diagnosed: bool = True                      # ``error`` carries the search for what is missing
    in_force: set[str] = field(default_factory=set)     # setting options (stacks) in force
    quiet: set[str] = field(default_factory=set)        # setting options not in force

    @property
    def used(self) -> set[str]:
        """The options the derivation depends on."""
        return stacks.options_used(self.derivation, self.defaults_used) if self.derivation else set()

    @property
    def options(self) -> dict[str, str]:
        """The options that decide this question, for asking it again (Result.all_options): every
        option's value, less the stacks not in force (their defaults did not apply, so giving
        them would apply their defaults and conditions to the question asked again)."""
        return {k: v for k, v in self.resolved.values.items() if k not in self.quiet}


def _pose(lib: Library, tq, typed: dict[str, GivenValue], explicit: dict, presets: list, diagnose: bool) -> _Posed:
    """The question's options, known values and derivation, and the training stacks in force.

    A setting option the question does not settle applies its ``options`` defaults only when
    the derivation depends on it (see :mod:`symcalc.query.stacks`): the question is resolved
    and derived with the defaults; if the derivation does not depend on the option, it is
    resolved again without them and that resolution is taken, with the first derivation when it
    uses none of the options that changed and the known values are the same, else derived again
    (and kept unless it depends on the option after all, or only the first one exists). The checks of :func:`symcalc.query.stacks.check_supports` and ``check_requires``
    run for the stacks the question settles before any derivation, for the others once they
    are known to be in force.
    """
    preset_options = {k: v for p in presets for k, v in p.options.items()}
    resolved, knowns = _setting(lib, tq.name, typed, explicit, presets, preset_options)
    settled = stacks.decided(explicit, preset_options, resolved.implied)
    linked = set(lib.stacks)
    stacks.check_supports(lib, resolved.values, linked & settled, explicit)
    stacks.check_requires(lib, resolved.values, linked & settled, knowns, settled)
    idle = frozenset(linked - settled)
    posed = _derive(lib, tq, _Posed(resolved, knowns, settled), diagnose and not idle)
    dropped = idle - posed.used
    if dropped:
        resolved2, knowns2 = _setting(lib, tq.name, typed, explicit, presets, preset_options, without=dropped)
        again = _Posed(resolved2, knowns2, settled, posed.derivation, posed.defaults_used, posed.error,
                       posed.diagnosed)
        changed = {k for k, v in resolved2.values.items() if resolved.values.get(k) != v}
        if changed and (posed.error or changed & posed.used or _differ(knowns2, knowns)):
            # a derivation that uses none of the changed options, from the same known values,
            # holds without the stack's defaults too: it is kept (half the cold work of a
            # question the stack does not reach)
            again = _derive(lib, tq, _Posed(resolved2, knowns2, settled), diagnose=False)
        if (again.error is None and not again.used & dropped) or (again.error and posed.error):
            posed = again
    posed.in_force = (linked & settled) | (idle & posed.used)
    posed.quiet = linked - posed.in_force
    stacks.check_supports(lib, posed.resolved.values, posed.in_force, set(explicit) | posed.used)
    stacks.check_requires(lib, posed.resolved.values, posed.in_force - settled, posed.knowns, settled)
    return posed


def _differ(a: Mapping[str, GivenValue], b: Mapping[str, GivenValue]) -> bool:
    """Whether two sets of known values differ in a name or a value."""
    return a.keys() != b.keys() or any(a[k] is not b[k] and (a[k].text, a[k].origin) != (b[k].text, b[k].origin)
                                       for k in a)


def _setting(lib: Library, target: str, typed: dict[str, GivenValue], explicit: Mapping, presets: list,
             preset_options: Mapping[str, str], without: frozenset = frozenset()
             ) -> tuple[Resolved, dict[str, GivenValue]]:
    """Every option's value and the known values (typed, then the presets' under those options)."""
    first = lib.option_values({**preset_options, **explicit})
    from_presets = _preset_values(lib, presets, first, target, typed)
    resolved = resolve_options(lib, explicit, preset_options, {**typed, **from_presets}, without=without)
    if resolved.values != first:      # the dense peak follows the precision
        from_presets = _preset_values(lib, presets, resolved.values, target, typed)
    knowns = {**typed, **from_presets}
    _check_orders(lib, knowns)
    return resolved, knowns


def _derive(lib: Library, tq, posed: _Posed, diagnose: bool) -> _Posed:
    """``posed`` with its derivation, or the error that says why there is none (the target
    given: neither)."""
    if tq.name in posed.knowns:
        return posed
    try:
        posed.derivation, posed.defaults_used = _derivation(lib, tq.name, frozenset(posed.knowns),
                                                            posed.resolved.values, diagnose=diagnose)
    except (UnderdeterminedError, NoSolutionError) as e:
        posed.error, posed.diagnosed = e, diagnose
    return posed


def solve(target: str, given: Mapping[str, object] | None = None, /, *,
          options: Mapping[str, object] | None = None, to: str | None = None,
          library: Library | None = None, on_bounds: str = "raise",
          hardware: str | None = None, model: str | None = None, diagnose: bool = True,
          conflicts: bool | str = True, rtol: float = 0.02, rounding: str | None = None,
          sensitivity: bool = False, **values) -> Result:
    """Solve for ``target`` from known values, under ``options``.

    ``given`` (a mapping) and keyword arguments name known quantities (aliases allowed); each
    value may be text with a unit (``"1979 TFLOP/s"``, ``"24h"``), a number (for counts,
    tokens, FLOP and USD), a ``(value, "unit")`` pair, a quantity from :func:`symcalc.Q`, or
    a numpy array (the answer broadcasts). ``to`` picks the unit of the answer.
    ``on_bounds="raise"`` raises OutOfBoundsError when a computed value leaves its quantity's
    bounds (MFU above 1, negative memory); ``"flag"`` records it in ``result.violations``.
    ``hardware`` and ``model`` name presets (``symcalc list hardware``, ``symcalc list models``;
    a model may also be the path of a Hugging Face config.json): they fill in known values and
    options, below anything given explicitly; they supply the target itself only when nothing
    else can (the answer says it was looked up). ``hardware`` may also be the path of a
    hardware profile (a .toml file: :func:`symcalc.library.presets.hardware_from_file`).
    Given values imply options where the option data says so (n_kv_heads < n_heads:
    grouped-query attention). A training stack (``options={"stack": "fsdp"}``: an option whose
    values set other options' defaults, restrict their values and require conditions of given
    values) applies when given, or when the derivation depends on it (see
    :mod:`symcalc.query.stacks`); the answer's assumptions say what it set.
    With more values than the shortest derivation needs, each one it leaves out is solved for
    from the others and compared. A disagreement beyond ``rtol`` is refused with a
    ConflictError (``conflicts=True``), or only reported in ``result.conflicts`` and the
    warnings (``conflicts="warn"``); ``conflicts=False`` skips the comparison. When the
    disagreement is with a default (tp = 1 where the given values fix tp), a derivation that
    uses the given values instead is taken. ``diagnose=False`` makes an underdetermined
    question fail at once, without the (slower) search for what would settle it.
    A whole-number answer rounds the way that keeps the given limits on its route (a budget,
    a deadline, 0 GB of headroom: see :mod:`symcalc.query.limits`), else its quantity's own way;
    ``rounding`` ("up", "down" or "nearest") overrides both.
    ``sensitivity=True`` adds the elasticity d ln(target) / d ln(input) to each given value
    at the answer (``result.sensitivity``, see :mod:`symcalc.query.sensitivity`).

    Raises UnknownNameError, DimensionError, DomainError, MalformedValueError (bad input),
    BadOptionValueError (an option value not allowed, not supported by the stack in force, or
    whose stack requires what the given values break),
    UnderdeterminedError (the values do not settle the target), NoSolutionError (no value
    satisfies the equations; NotDeterminedError: a whole range does), ConflictError and
    OutOfBoundsError.
    """
    result = _solve(target, given, values, options=options, to=to, library=library, on_bounds=on_bounds,
                    hardware=hardware, model=model, diagnose=diagnose, conflicts=conflicts, rtol=rtol,
                    rounding=rounding, brief=False)
    if sensitivity:
        result.elasticities = sensitivity_of(result)
    return result


def solve_unshown(target: str, given: Mapping[str, object] | None = None, /, *,
                  options: Mapping[str, object] | None = None, library: Library | None = None,
                  on_bounds: str = "raise", hardware: str | None = None, model: str | None = None) -> Result:
    """:func:`solve` for a caller that reads an answer's numbers and never shows its text (the
    planner's 100-odd questions a plan): the same value, derivation, steps, rounding, bound
    violations and errors, without the findings only a reader needs (what a given value not
    used would count for, the quantities a formula reports beside the answer, notes on the
    presets' values and on implausible inputs), which cost more than the answer itself once
    its derivation is cached. Given values are not cross-checked and an underdetermined
    question is not diagnosed (``conflicts=False, diagnose=False``)."""
    return _solve(target, given, {}, options=options, to=None, library=library, on_bounds=on_bounds,
                  hardware=hardware, model=model, diagnose=False, conflicts=False, rtol=0.02, rounding=None,
                  brief=True)


def _solve(target, given, values: Mapping[str, object], *, options, to, library, on_bounds: str, hardware, model,
           diagnose: bool, conflicts, rtol: float, rounding, brief: bool) -> Result:
    """:func:`solve`'s work; ``brief``: :func:`solve_unshown`'s (the findings for a reader left out)."""
    if on_bounds not in ("raise", "flag"):
        raise QueryError(f"on_bounds must be 'raise' or 'flag'; got {on_bounds!r}")
    on_conflict = {True: "raise", False: "off", "raise": "raise", "warn": "warn", "off": "off"}.get(conflicts)
    if on_conflict is None:
        raise ValueError("conflicts must be True ('raise'), 'warn' or False ('off')")
    lib = library or default_library()
    if not isinstance(target, str):
        raise QueryError(f"the target is a quantity name, got {target!r}")
    tq = lib.quantity(target)
    if rounding is not None and rounding not in ("up", "down", "nearest"):
        raise QueryError(f"rounding is up, down or nearest, got {rounding!r}")
    if rounding is not None and not tq.whole:
        raise QueryError(f"{tq.name} is not a whole number: there is nothing to round")
    if given is not None and not isinstance(given, Mapping):
        raise QueryError("given values must be a mapping of name -> value")
    typed = read_given(lib, [*(given or {}).items(), *values.items()])
    explicit_options = dict(_option_mapping(options) or {})
    presets = _presets(hardware, model)
    for p in presets:
        if p.file:
            check_profile(lib, p)
    posed = _pose(lib, tq, typed, explicit_options, presets, diagnose)
    opts, implied, knowns = posed.resolved.values, posed.resolved.implied, posed.knowns
    _check_hardware_dtypes(lib, opts, presets)
    derivation, defaults_used = posed.derivation, posed.defaults_used
    notes = [f"option {imp.reason()}" for imp in implied]
    if derivation is None and posed.error is None:      # the target is given (or published)
        result = _conversion(lib, tq, knowns, posed.options, to)
        if knowns[tq.name].origin:
            result.findings[:] = [Finding("published", tq.name, {"origin": knowns[tq.name].origin}),
                                  *unmeasured(lib, presets, opts, knowns, [tq.name])]
        return result
    if posed.error is not None:
        try:
            if posed.diagnosed or not diagnose:
                raise posed.error
            _derivation(lib, tq.name, frozenset(knowns), opts, diagnose=True)    # raises, with the diagnosis
            raise posed.error       # pragma: no cover - the same question fails the same way
        except UnderdeterminedError:
            looked_up = _preset_values(lib, presets, opts, None, knowns).get(tq.name)
            if looked_up is None:
                raise
            result = _conversion(lib, tq, {**knowns, tq.name: looked_up}, posed.options, to)
            result.findings[:] = [Finding("looked_up", tq.name, {"origin": looked_up.origin}),
                                  *unmeasured(lib, presets, opts, {tq.name: looked_up}, [tq.name])]
            result.looked_up = looked_up.origin
            return result
    assert derivation is not None   # a posed question has a derivation, or an error, or its target given
    ev = _evaluate(derivation, knowns, defaults_used)
    found: list[dict] = []
    checked: set[str] = set()
    if on_conflict != "off":
        check_options = {**{imp.option: imp.value for imp in implied}, **explicit_options}
        found, checked = cross_check(lib, derivation.route.unused, knowns, options=check_options, rtol=rtol,
                                     hardware=hardware, model=model)
        if found and (derivation.route.defaults or derivation.route.default_rules):
            better = _without_contradicted_defaults(lib, tq.name, knowns, opts, derivation, defaults_used, found,
                                                    check_options, rtol, hardware, model)
            if better is not None:
                derivation, defaults_used, ev, found, checked = better
        assumed = _assumed(derivation, defaults_used, knowns)
        # a disagreement that leans on defaults the answer does not use is no objection (given
        # values win over defaults), but the given value is then not used, and that is said
        dismissed = [c for c in found if not _contradicts(c, assumed)]
        found = [c for c in found if _contradicts(c, assumed)]
        checked -= {c["quantity"] for c in dismissed}
        if dismissed:
            # said only of a given value the answer feeds (d_ffn into an activation memory); one
            # the answer has nothing to do with (an MTBF beside train_time) is only not used
            fed = unused.downstream(lib, tq.name, derivation.options)
            dismissed = [c for c in dismissed if c["quantity"] in fed]
        if found and on_conflict == "raise":
            raise ConflictError("; ".join(sentences(c["finding"] for c in found))
                                + " (check these values; conflicts='warn' answers anyway)",
                                [{k: v for k, v in c.items() if k != "finding"} for c in found])

    unit, factor = _output_unit(tq, to)
    exact = ev.values[tq.name]
    _check_displayable(lib, derivation, ev.values, tq.name, unit, factor)
    how, reason = rounding or tq.whole, None
    if tq.whole and rounding is None:
        rounded, how, reason = _round_to_limits(lib, derivation, ev, knowns, defaults_used, exact, posed.options,
                                                hardware, model)
    else:
        rounded = round_whole(exact, how)
    findings = _findings(lib, derivation, ev, tq, exact, rounded, knowns, checked, how, brief=brief)
    findings += [c["finding"] for c in found]
    if on_conflict != "off":
        findings += [_unused_disagreement(dismissed, assumed)] if dismissed else []
    if not brief:
        findings += [f for p in presets for f in p.findings]
        findings += unmeasured(lib, presets, opts, knowns, derivation.route.given)
        findings += [f for f in (implausible(lib.quantities[k], g) for k, g in knowns.items() if not g.origin) if f]
        findings += _above_limits(lib, knowns)
    if reason and reason.get("clash"):
        findings.append(reason["clash"])
    violations = [f for f in findings if f.violation]
    if violations and on_bounds == "raise":
        raise OutOfBoundsError(sentences(violations[:1])[0]
                               + ("" if len(violations) == 1 else f" (and {len(violations) - 1} more)"))

    shown = _Display(derivation, ev.choices)
    steps = [StepView(number=i + 1, formulas=list(s.formulas), method=s.method,
                      solves_for=list(s.unknowns), inputs=list(s.inputs),
                      solution=later(partial(shown.solution, i)), numeric=i in ev.numeric_steps)
             for i, s in enumerate(derivation.steps)]
    relevant = _relevant_options(derivation, defaults_used, explicit_options, opts)
    result = Result(again=_again, companion=_companion, library=lib, target=tq.name, quantity=tq, unit=unit, factor=factor,
                  base_value=exact, rounded_base=rounded, given=knowns, presets={p.kind: p.key for p in presets},
                  preset_args={"hardware": hardware, "model": model},
                  options=relevant, all_options=posed.options,
                  defaults_used={k: dict(v) for k, v in defaults_used.items()},
                  values=ev.values, steps=steps, on_bounds=on_bounds,
                  derivation=derivation, closed_form=later(shown.closed_form), rounding=how,
                  rounding_reason={k: v for k, v in (reason or {}).items() if k != "clash"} or None,
                  assumptions=_assumptions(lib, defaults_used, ev.values, relevant, posed),
                  stacks={name: name in posed.settled for name in sorted(posed.in_force)},
                  notes=notes,
                  unused=[u for u in derivation.route.unused if u != tq.fits_in],
                  findings=[f for f in findings if not f.violation] + violations,
                  conflicts=[{k: v for k, v in c.items() if k != "finding"} for c in found])
    if not brief:
        result.findings[:0] = _reported(lib, result)
    return result


def _reported(lib, result: Result) -> list[Finding]:
    """The quantities the formulas of the derivation ask to be stated beside the answer
    (``reports`` in the data: which pipeline stage a memory figure is that of), each one more
    step from the answer's values; left out where it cannot be had or is not one number."""
    out = []
    names = dict.fromkeys(n for step in result.derivation.steps for f in step.formulas for n in f.reports)
    for name in names:
        if name == result.target or np.ndim(result.base_value) != 0:
            continue
        value = result.companion_value(name)
        q = lib.quantities[name]
        if isinstance(value, str):
            out.append(Finding("reported", name, {"value": value, "unit": "", "description": q.description}))
            continue
        if value is None or not np.isfinite(value):
            continue
        out.append(Finding("reported", name, {"value": value / q.factor, "unit": q.display_unit,
                                              "description": q.description}))
    return out


def _contradicts(conflict: dict, assumed: set[str]) -> bool:
    """Whether a disagreement found by cross_check speaks against the answer: the check leaned
    on nothing the answer does not lean on itself (``assumed``: its defaults and preset values).
    Given values that contradict each other are an objection; so is a given value against a
    default the answer uses. A given value that disagrees only with an assumption the answer
    does not make (flops_per_token given as 7.2 N, checked against n_params with the default
    6 FLOP/token; a generic AllReduce checked as if it were the TP one) is none: given values
    win over defaults."""
    return (set(conflict.get("assumed", ())) | set(conflict.get("presets", ()))) <= assumed


def _unused_disagreement(dismissed: list[dict], assumed: set[str]) -> Finding:
    """Given values the answer does not use, which the other values give otherwise only with
    defaults the answer does not lean on: said once (with the first of them as the example and
    those defaults), never dropped silently. related: every such given value."""
    first = dismissed[0]
    f = first["finding"]
    others = sorted((set(first.get("assumed", ())) | set(first.get("presets", ()))) - assumed)
    leaning = [[k, x] for k, x in f.values["leaning"] if k in others]
    return Finding("unused_disagrees", f.quantity, {**f.values, "leaning": leaning},
                   related=tuple(c["quantity"] for c in dismissed), formulas=f.formulas)


def _assumed(derivation: Derivation, defaults_used: Mapping, knowns: Mapping[str, GivenValue]) -> set[str]:
    """What an answer leans on besides the values typed: its defaults and the preset values it uses."""
    return set(defaults_used) | {g for g in derivation.route.given if knowns[g].origin}


def _solve_again(target: str, given: Mapping[str, object], *, options: Mapping[str, object], library: Library
                 ) -> Result:
    """The questions an answer asks of itself (what the limit would be at the other whole
    number, a collective's whole time beside its exposed part): only their value is read, so
    they are asked unshown (no findings, flagged bounds). Not through the public entry, so that
    a test that patches it out (to prove that Result.function never falls back to it) does not
    catch these."""
    return solve_unshown(target, given, options=options, library=library, on_bounds="flag")


def _check_hardware_dtypes(lib: Library, opts: Mapping[str, str], presets) -> None:
    """An option value that needs a number format the named hardware lacks (``hardware_dtype``
    in the option data: an FP8 KV cache on an A100) is refused, naming both."""
    for name, opt in lib.options.items():
        value = opts.get(name, opt.default)
        need = opt.hardware_dtype.get(value)
        for p in presets:
            if need and p.kind == "hardware" and p.peak_flops and need not in p.peak_flops:
                raise BadOptionValueError(f"--option {name}={value} needs {need.upper()} support, which {p.label} "
                                          f"lacks (it computes in {', '.join(sorted(p.peak_flops))})")


def _above_limits(lib: Library, knowns: Mapping[str, GivenValue]) -> list[Finding]:
    """Warnings for known values above a limit they may exceed at a cost (``warn_above`` in the
    data: a context longer than the model's max_position_embeddings)."""
    out = []
    for name, gv in knowns.items():
        for other in lib.quantities[name].warn_above:
            if other in knowns and not isinstance(gv.magnitude, str):
                a, b = (np.asarray(x.magnitude, dtype=float) for x in (gv, knowns[other]))
                if np.any(a > b * (1 + 1e-12)):
                    q, o = lib.quantities[name], lib.quantities[other]
                    out.append(Finding("above_limit", name, {
                        "value": float(np.max(a)) / q.factor, "unit": q.display_unit, "limit": other,
                        "limit_value": float(np.min(b)) / o.factor, "limit_unit": o.display_unit,
                        "description": o.description, "origin": knowns[other].origin or ""}))
    return out


def _check_orders(lib: Library, knowns: Mapping[str, GivenValue]) -> None:
    """Known values that cannot stand together: one above a quantity it can never exceed
    (``not_above`` in the data: more KV heads than heads, a TP degree above the GPUs)."""
    for name, gv in knowns.items():
        q = lib.quantities[name]
        for other in q.not_above:
            if other in knowns and not isinstance(gv.magnitude, str):
                a, b = np.asarray(gv.magnitude, dtype=float), np.asarray(knowns[other].magnitude, dtype=float)
                over = a > b * (1 + 1e-12)
                if np.any(over):
                    # arrays: the first point where it happens, both values taken there (the
                    # largest of each could come from different points: tp = 8 above 24576 GPUs)
                    first = np.unravel_index(np.argmax(over), over.shape) if over.ndim else ()
                    a, b = (np.broadcast_to(x, over.shape)[first] for x in (a, b))
                    shown = [with_unit(float(x) / lib.quantities[n].factor, lib.quantities[n].display_unit)
                             for x, n in ((a, name), (b, other))]
                    where = " (from a preset)" if gv.origin or knowns[other].origin else ""
                    points = f" at {int(over.sum())} of {over.size} points" if over.ndim else ""
                    raise DomainError(f"{name} = {shown[0]} is more than {other} = {shown[1]}{where}{points}: "
                                      f"{name} can never exceed {other}")


def _evaluate(derivation: Derivation, knowns: dict[str, GivenValue], defaults_used: dict):
    """The derivation evaluated on the known values and the defaults it uses."""
    env = {k: v.magnitude for k, v in knowns.items()}
    env.update({k: d["magnitude"] for k, d in defaults_used.items() if "magnitude" in d})
    return derivation.evaluate(env)


def _without_contradicted_defaults(lib, target: str, knowns: dict, opts: dict, derivation: Derivation,
                                   defaults_used: dict, found: list, check_options: dict, rtol: float,
                                   hardware, model):
    """A derivation that uses the given values where ``derivation``'s defaults contradict them,
    as (derivation, defaults used, evaluation, conflicts, checked), or None if there is none.

    Defaults are only for what the given values leave open: tp_y from tp = tp_x tp_y must not
    take tp = 1 when the given layer_params_per_gpu fixes tp = 4. The alternatives (each drops
    some of the defaults, see :func:`symcalc.engine.routing.alternatives`) are evaluated; those whose own
    left-out values agree are kept. If they give different answers, the given values leave the
    answer open (n_gpus and dp fix tp x pp x cp but not each): UnderdeterminedError names the
    defaults to give instead.
    """
    typed = {k for k, v in knowns.items() if not v.origin}
    defaults = {name for name in lib.coefficient_defaults(opts) if name not in knowns}
    candidates = alternatives(lib.active_formulas(opts), derivation.route, knowns, defaults, typed)
    kept = []
    for excluded, _ in candidates[:MAX_ALTERNATIVE_DERIVATIONS]:
        try:
            d, used = _derivation(lib, target, frozenset(knowns), opts, diagnose=False, exclude=excluded)
            ev = _evaluate(d, knowns, used)
            conflicts, checked = cross_check(lib, d.route.unused, knowns, options=check_options, rtol=rtol,
                                             hardware=hardware, model=model)
        except SymcalcError:
            continue
        conflicts = [c for c in conflicts if _contradicts(c, _assumed(d, used, knowns))]
        if not conflicts and np.all(np.isfinite(np.asarray(ev.values[target], dtype=float))):
            kept.append((excluded, (d, used, ev, conflicts, checked)))
    if not kept:
        return None
    fewest = min(sum(q in typed for q in k[1][0].route.unused) for k in kept)
    kept = [k for k in kept if sum(q in typed for q in k[1][0].route.unused) == fewest]
    answers = [np.asarray(k[1][2].values[target], dtype=float) for k in kept]
    if any(not np.allclose(a, answers[0], rtol=1e-9) for a in answers[1:]):
        q = lib.quantities[target]
        open_defaults = sorted({x for excluded, _ in kept for x in excluded if x in defaults})
        claims = ", ".join(f"{c['quantity']} = {with_unit(c['given'], c['unit'])}" for c in found)
        shown = " vs ".join(dict.fromkeys(with_unit(float(np.min(a)) / q.factor, q.display_unit) for a in answers))
        contradicted = ", ".join(f"{d} = {defaults_used[d]['value']}" for d in open_defaults if d in defaults_used)
        raise UnderdeterminedError(
            f"cannot determine {target}: the given {claims} {'contradicts' if len(found) == 1 else 'contradict'} "
            f"the defaults {contradicted}, and which of {', '.join(open_defaults)} takes the rest changes the "
            f"answer ({shown}): also give one of: {' | '.join(open_defaults)}", [[d] for d in open_defaults])
    return kept[0][1]


MAX_ALTERNATIVE_DERIVATIONS = 4


def _round_to_limits(lib, derivation: Derivation, ev, knowns: dict, defaults_used: dict, exact, opts: dict,
                     hardware, model):
    """(rounded answer, how it rounded, why) for a whole-number target whose route passes given
    limits (see :mod:`symcalc.query.limits`); the quantity's own rounding where no limit decides.

    ``why`` says, for a single answer, what the whole number on the other side would do to the
    limit that decided: "16 would give memory_headroom = -1.29 GB".
    """
    tq = lib.quantities[derivation.target]
    env = {k: v.magnitude for k, v in knowns.items()}
    env.update({k: d["magnitude"] for k, d in defaults_used.items() if "magnitude" in d})
    decided = limit_rounding(lib, derivation, env, exact)
    rounded = round_with(exact, decided, lambda x: round_whole(x, tq.whole))
    direction = decided.direction
    reason: dict = {}
    if np.any(decided.clash):
        reason["clash"] = Finding("limits_clash", tq.name, {"rounded": tq.whole},
                                  mask=decided.clash if np.ndim(decided.clash) else None)
    if direction is None:
        return rounded, tq.whole, reason or None
    if direction == "mixed":
        return rounded, "mixed", reason or None
    reason.update(direction=direction, limit=decided.limit)
    if np.ndim(exact) == 0 and not _is_whole(exact):
        other = rounded - 1 if direction == "up" else rounded + 1
        reason["other"] = other / tq.factor
        # a direction comes with the limit that decided it
        there = _limit_at(lib, tq, decided.limit, other, knowns, opts, hardware, model)  # type: ignore[arg-type]
        if there is not None:
            q = lib.quantities[decided.limit]
            reason.update(value_there=there / q.factor, given=float(knowns[decided.limit].magnitude) / q.factor,
                          unit=q.display_unit, given_is=q.given_is)
    return rounded, direction, reason


def _is_whole(x) -> bool:
    return abs(float(x) - round(float(x))) <= 1e-9 * max(abs(float(x)), 1)


def _limit_at(lib, tq, limit: str, value: float, knowns: dict, opts: dict, hardware, model) -> float | None:
    """The limit quantity's value (base units) when the target is ``value``: the same question
    asked forwards. None when it cannot be asked (the value is outside the target's domain)."""
    if not tq.domain.holds(value):
        return None
    others = {k: (float(v.magnitude) / lib.quantities[k].factor, lib.quantities[k].display_unit)
              for k, v in knowns.items() if k != limit and not isinstance(v.magnitude, str)}
    others[tq.name] = (value / tq.factor, tq.display_unit)
    try:
        r = _solve_again(limit, others, options=opts, library=lib)
    except SymcalcError:
        return None
    return float(r.base_value)


def _assumptions(lib, defaults_used: dict, values: dict, relevant: dict, posed: _Posed) -> list[dict]:
    """Defaults that stand in for a main input of the question (the token count, a utilization,
    the precision), a training stack in force that the question did not give, and the options
    such a stack set that the derivation uses: each said in the answer's first lines, not only
    among the defaults."""
    out = []
    for name, d in defaults_used.items():
        if lib.quantities[name].main_input:
            entry = {"name": name, "value": d["value"], "source": d["source"], "kind": "rule" if "rule" in d else "default"}
            if "rule" in d and name in values and np.ndim(values[name]) == 0:
                q = lib.quantities[name]
                entry["computed"] = with_unit(float(values[name]) / q.factor, q.display_unit)
            out.append(entry)
    for name, value in relevant.items():
        opt = lib.options[name]
        if name not in posed.settled and (opt.main_input or name in posed.in_force):
            out.append({"name": name, "value": value, "source": f"the default of option {name}: {opt.values[value]}",
                        "kind": "option"})
    for name, value in relevant.items():
        if name in posed.resolved.set_by:
            by, by_value = posed.resolved.set_by[name]
            out.append({"name": name, "value": value, "source": f"set by {by}={by_value}", "kind": "set_by_option",
                        "option": by, "option_value": by_value})
    return out


def cross_check(lib, names, knowns: dict, *, options: dict, rtol: float, hardware=None, model=None
                ) -> tuple[list[dict], set[str]]:
    """Each of ``names`` (given values a derivation left out) solved for from the other given
    values and compared with its given value. Returns (the disagreements beyond ``rtol``, the
    names that could be checked at all). Preset values and arrays are not checked."""
    conflicts: list[dict] = []
    checked: set[str] = set()
    if any(np.ndim(v.magnitude) for v in knowns.values()):
        return conflicts, checked
    typed = {k: v for k, v in knowns.items() if not v.origin}
    for name in names:
        if name not in typed:
            continue
        others = {k: (float(v.magnitude) / lib.quantities[k].factor, lib.quantities[k].display_unit)
                  for k, v in typed.items() if k != name}
        try:
            r = solve(name, others, options=options, library=lib, hardware=hardware, model=model,
                      on_bounds="flag", diagnose=False, conflicts=False)
        except SymcalcError:
            continue
        if r.looked_up:            # a preset's figure is not what the other values say
            continue
        checked.add(name)
        found = relation(r, name, float(typed[name].magnitude), rtol)
        if not found.agrees:
            conflicts.append(found.conflict(rtol))
    return conflicts, checked


def _findings(lib, derivation: Derivation, ev, tq, exact, rounded, given: dict,
              checked: set | frozenset = frozenset(), how: str | None = None, brief: bool = False) -> list[Finding]:
    """What to tell the user about an evaluated derivation: bound violations, then warnings
    (``brief``: the violations only).

    Raises NoSolutionError when a step has no finite value at all.
    """
    _check_solvable(lib, derivation, ev)
    findings = _violations(lib, derivation, ev.values)
    if tq.whole and not findings and not np.all(tq.domain.contains(rounded)):
        findings.append(Finding("rounds_outside", tq.name,
                                {"value": np.min(exact) / tq.factor, "rounded": np.min(rounded) / tq.factor,
                                 "unit": tq.display_unit, "how": how, "bounds": _bounds(tq)}))
    if brief:
        return findings
    findings += list(ev.findings)
    # a rounded whole-number answer already says its exact value: the counts it was derived
    # through are as far from whole as it is (dp = 16.85 from data_parallel_group_size = 16.85),
    # and rounding it settles them too; otherwise a count the chain makes fractional is said
    if not (tq.whole and _far_from_whole(exact)):
        findings += _whole_number_notes(lib, derivation, ev.values)
    if how == "nearest" and _far_from_whole(exact):
        findings.append(Finding("rounded_nearest", tq.name, {"value": np.min(exact) / tq.factor}))
    capacity = over_capacity(lib, tq, exact, given)
    if capacity is not None:
        name, cap, over = capacity
        if np.any(over):
            worst = float(np.max(np.asarray(exact, dtype=float)))
            split = parts_of(lib, derivation, ev.values, tq.name) if np.ndim(over) == 0 else None
            largest = (split.largest[0], split.largest[1] / tq.factor) if split and split.largest else None
            findings.append(Finding(
                "over_capacity", tq.name,
                {"value": worst / tq.factor, "capacity": float(np.min(cap)) / tq.factor,
                 "excess": (worst - float(np.min(cap))) / tq.factor, "unit": tq.display_unit,
                 "points": None if np.ndim(over) == 0 else int(np.sum(over)),
                 "of": None if np.ndim(over) == 0 else int(np.size(over)), "largest": largest},
                related=(name,), mask=over if np.ndim(over) else None))
    typed = [q for q in derivation.route.unused
             if (q not in given or not given[q].origin) and not (capacity and q == capacity[0])
             and q not in checked]
    if typed:
        users = {q: u for q in typed if (u := unused.users(lib, q, derivation.options))}
        values: dict = {"used_by": users} if users else {}
        if together := unused.combined_with(lib, derivation.route.target, typed, derivation.options):
            values["with_target"] = together
            values["target"] = derivation.route.target
        findings.append(Finding("not_used", related=tuple(typed), values=values))
    for i in sorted(ev.numeric_steps):
        s = derivation.steps[i]
        if s.tearing is not None:     # a forward model run backwards: one search, the rest follows
            findings.append(Finding("found_numerically", s.tearing.tear,
                                    {"torn": True, "equations": len(s.formulas), "follow": len(s.unknowns) - 1},
                                    related=tuple(s.unknowns), formulas=tuple(f.id for f in s.formulas)))
        else:
            findings.append(Finding("found_numerically", s.unknowns[0], {"torn": False},
                                    related=tuple(s.unknowns), formulas=tuple(f.id for f in s.formulas)))
    return findings


def over_capacity(lib, q, value, given: Mapping) -> tuple[str, np.ndarray | float, np.ndarray | bool] | None:
    """(capacity name, its value, where ``value`` exceeds it) when ``q`` must fit in a known
    capacity (``fits_in``: per-GPU memory in gpu_memory), else None. Base units throughout."""
    if not q.fits_in or q.fits_in not in given:
        return None
    cap = given[q.fits_in].magnitude
    with np.errstate(invalid="ignore"):
        return q.fits_in, cap, np.asarray(value, dtype=float) > np.asarray(cap, dtype=float)


def _option_mapping(options) -> Mapping | None:
    if options is None or isinstance(options, Mapping):
        return options
    try:
        pairs = dict(options)
    except (TypeError, ValueError):
        raise QueryError("options must be a mapping like {'zero_stage': 3}") from None
    return pairs


def _conversion(lib: Library, q, knowns: dict[str, GivenValue], opts: dict, to: str | None) -> Result:
    """The target is itself given: the answer is that value, in the unit asked for."""
    unit, factor = _output_unit(q, to)
    value = knowns[q.name].magnitude
    plan = Route(target=q.name, steps=(), given=(q.name,), defaults=(), unused=tuple(sorted(set(knowns) - {q.name})))
    derivation = Derivation(lib, plan, opts, {}, steps=[])
    return Result(again=_again, library=lib, target=q.name, quantity=q, unit=unit, factor=factor, base_value=value,
                  rounded_base=round_whole(value, q.whole), rounding=q.whole, given=knowns, presets={}, options={}, all_options=opts,
                  defaults_used={}, values={k: v.magnitude for k, v in knowns.items()}, steps=[],
                  derivation=derivation, closed_form=Printed.of_quantity(q.name, q.latex), unused=list(plan.unused),
                  findings=[Finding("given_target", q.name)])


def _output_unit(q, to: str | None) -> tuple[str, float]:
    if not to:
        return q.display_unit, q.factor
    unit = units.parse_unit(to, "--to")
    dim = units.registry().get_dimensionality(unit)
    if to.strip() in ("%", "percent") and q.display_unit != "%" and q.domain.hi > 1:
        raise DimensionError(f"cannot show {q.name} in %: it is a count, not a fraction")
    if dim != q.dim:
        raise DimensionError(f"cannot show {q.name} in {to}: {q.name} is measured in {show(q.dim)}, "
                             f"{to} in {show(dim)}")
    return to.strip(), units.to_base_factor(to.strip())


def _check_solvable(lib, derivation: Derivation, ev) -> None:
    """A step with no finite value anywhere is an error, not a NaN answer: either the numbers
    left floating point's range (1e300 x 1e300), or the equations hold for a whole range of
    the unknown (not determined), or they have no admissible root."""
    values = ev.values
    for s in derivation.steps:
        for name in s.unknowns:
            q = lib.quantities[name]
            if q.kind == "text" or (isinstance(values[name], float) and math.isfinite(values[name])):
                continue
            v = np.asarray(values[name], dtype=float)
            if (v.size and np.isfinite(v.flat[0])) or np.any(np.isfinite(v)) or np.any(q.domain.contains(v)):
                continue      # (0, inf] admits inf
            ids = ", ".join(f.id for f in s.formulas)
            inputs = [np.asarray(values[x], dtype=float) for x in s.inputs]
            if np.any(np.isinf(v)) or any(np.any(np.abs(x) > 1e250) or np.any((x != 0) & (np.abs(x) < 1e-250))
                                          for x in inputs):
                raise NoSolutionError(f"{name} cannot be computed ({ids}): the values are beyond the range of "
                                      "floating point (about 1e-308 to 1e308); check their units and exponents")
            shown = derivation.target if derivation.target in s.unknowns else name
            q = lib.quantities[shown]
            if np.any(ev.undetermined.get(name, False)):
                raise NotDeterminedError(
                    f"{shown} is not determined by these values: {_equations_text(s)} hold for a whole "
                    f"range of {name}, not one value; give {shown} itself, or a value that pins it down")
            cause = _out_of_range_input(lib, derivation, s, values)
            if cause:
                # the question's own quantity is what does not fit, whichever step of its
                # derivation found out (an intermediate's name would only puzzle)
                target = lib.quantities[derivation.target]
                within = f" in {target.domain}" if shown == derivation.target else ""
                raise NoSolutionError(f"no value of {derivation.target}{within} fits: {cause}")
            raise NoSolutionError(f"no value of {shown} in {q.domain} satisfies {_equations_text(s)} with these values")


def _check_displayable(lib, derivation: Derivation, values: dict, target: str, unit: str, factor: float) -> None:
    """A value finite in base units may overflow in the unit it is shown in (1e308 s is 1e311
    ms): an answer of inf with exit status 0 is an error instead, naming the quantity. Checks
    the target in its output unit and every quantity the derivation computed in its display
    unit. O(steps)."""
    def overflows(v, f: float) -> bool:
        if isinstance(v, float):        # one value (numpy's float64 too): no array to build
            return math.isfinite(v) and not math.isfinite(float(v) / f)
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.asarray(v, dtype=float)
            return bool(np.any(np.isfinite(a) & ~np.isfinite(a / f)))
    checks = [(target, unit, factor)] + [(n, lib.quantities[n].display_unit, lib.quantities[n].factor)
                                         for s in derivation.steps for n in s.unknowns
                                         if n != target and lib.quantities[n].kind != "text"]
    for name, shown, f in checks:
        v = values.get(name)
        if v is not None and not isinstance(v, str) and overflows(v, f):
            raise NoSolutionError(f"{name} overflows in {shown or 'its unit'}: its value is beyond the range of "
                                  "floating point (about 1e308) there; check the given values' units and exponents")


def _equations_text(step) -> str:
    """A step's equations for a message: the text of up to two, else their ids."""
    ids = ", ".join(f.id for f in step.formulas)
    if len(step.formulas) <= 2:
        return f"{'; '.join(f.equation for f in step.formulas)} ({ids})"
    return f"the equations {ids}"


def _out_of_range_input(lib, derivation: Derivation, step, values: dict) -> str | None:
    """Why a step has no root, when the reason lies upstream: an earlier step gave a value
    outside its quantity's bounds (the classic case: everything else already needs more than
    gpu_memory, so the activation memory left over is negative). The first such value is the
    cause; when it is what a total leaves for one of its parts, the message names the other
    parts, largest first: they are what does not fit."""
    before = derivation.steps[:derivation.steps.index(step)]
    for earlier, name, q, sample, _, _, _ in out_of_bounds(lib, before, values):
        shown = with_unit(sample / q.factor, q.display_unit)
        split = sum_parts(lib, earlier.formulas[0], values, leave_out=name) if len(earlier.formulas) == 1 else None
        if split is not None and split.parts and sample < q.domain.lo:
            others = [(n, v) for n, v in split.parts if v != 0]
            return _exceeds(lib, derivation, split, others, sum(v for _, v in others), values,
                            f"leaving {name} = {shown}", others[0][0] if others else name)
        ids = ", ".join(f.id for f in earlier.formulas)
        return f"it would need {name} = {shown} ({ids}), outside {_bounds_text(q)}"
    return _known_parts_overflow(lib, derivation, step, values)


def _known_parts_overflow(lib, derivation: Derivation, step, values: dict) -> str | None:
    """Why a block with a sum in it has no root: the parts known before the block already
    exceed the total, even with the parts the block solves for at their least (a memory part
    at 0). The unknown (a micro-batch, say) then sits in several parts at once, so no earlier
    step leaves a negative remainder to point at (_out_of_range_input). O(size of the block)."""
    for f in step.formulas:
        if not f.breakdown or f.lhs_name in step.unknowns:
            continue
        least = {n: lib.quantities[n].domain.lo for n in f.breakdown if n in step.unknowns}
        if any(not math.isfinite(v) for v in least.values()):
            continue
        split = sum_parts(lib, f, {**values, **least})
        if split is None:
            continue
        known = [(n, v) for n, v in split.parts if n not in least and v != 0]
        need = sum(v for _, v in known) + sum(least.values())
        if not known or need <= split.total_value:
            continue
        return _exceeds(lib, derivation, split, known, need, values, f"with nothing left for {' or '.join(least)}",
                        known[0][0])
    return None


def _exceeds(lib, derivation: Derivation, split, parts: list, need: float, values: dict, left: str,
             largest: str) -> str:
    """'a = 1129 GB alone already exceeds total = 80 GB (from ...), <left>; the largest part is
    <largest>': the sentence both overflow diagnoses end in."""
    t = lib.quantities[split.total]
    listed = " + ".join(f"{n} = {with_unit(v / t.factor, t.display_unit)}" for n, v in parts) or "nothing"
    alone = " alone" if len(parts) == 1 else f" (together {with_unit(need / t.factor, t.display_unit)})"
    return (f"{listed}{alone} already exceed{'s' if len(parts) == 1 else ''} {split.total} = "
            f"{with_unit(split.total_value / t.factor, t.display_unit)}{_origin(lib, derivation, split.total, values)}, "
            f"{left}; the largest part is {largest}")


def _origin(lib, derivation: Derivation, name: str, values: dict) -> str:
    """' (gpu_memory 80 GB - memory_headroom 0 GB)': where a computed total came from, when it
    came straight from given values; '' otherwise."""
    for s in derivation.steps:
        if name in s.unknowns:
            if all(x in derivation.route.given for x in s.inputs) and len(s.inputs) <= 3:
                shown = ", ".join(f"{x} = {with_unit(float(np.asarray(values[x]).flat[0]) / lib.quantities[x].factor, lib.quantities[x].display_unit)}"
                                  for x in s.inputs)
                return f" (from {shown})"
            return ""
    return ""


def out_of_bounds(lib, steps: list, values: dict):
    """(step, name, quantity, a bad value, how many are bad, of how many, where) for every
    numeric value the steps computed outside its quantity's bounds, in step order."""
    for s in steps:
        for name in s.unknowns:
            q = lib.quantities[name]
            if q.kind == "text" or (isinstance(values[name], float) and q.domain.holds(values[name])):
                continue
            v = np.asarray(values[name], dtype=float)
            if q.domain.holds_all(v):
                continue
            bad = ~q.domain.contains(v)
            if np.any(bad):
                sample = float(v[bad].flat[0]) if v.ndim else float(v)
                yield s, name, q, sample, int(bad.sum()), (v.size if v.ndim else 0), bad


def _violations(lib, derivation: Derivation, values: dict) -> list[Finding]:
    """Computed values outside their quantity's bounds, one finding each."""
    out = []
    for s, name, q, sample, n_bad, size, bad in out_of_bounds(lib, derivation.steps, values):
        out.append(Finding("out_of_bounds", name,
                           {"value": sample / q.factor if np.isfinite(sample) else None, "unit": q.display_unit,
                            "points": n_bad if size else None, "of": size or None, "bounds": _bounds(q)},
                           related=tuple(_given_ancestors(derivation, s)), formulas=tuple(f.id for f in s.formulas),
                           mask=bad if size else None))
    return out


def _given_ancestors(derivation: Derivation, step) -> list[str]:
    """The known quantities (given or defaults) a step's result depends on, through the plan."""
    producer = {u: s for s in derivation.steps for u in s.unknowns}
    seen, out, todo = set(), set(), list(step.inputs)
    while todo:
        q = todo.pop()
        if q in seen:
            continue
        seen.add(q)
        if q in producer:
            todo.extend(producer[q].inputs)
        else:
            out.add(q)
    return sorted(out)


def _bounds(q) -> dict:
    """A quantity's bounds in display terms, for a finding (x 100 for a percentage)."""
    d, percent = q.domain, q.display_unit == "%"
    scale = 100 if percent else 1
    return {"lo": d.lo * scale, "hi": d.hi * scale, "lo_open": d.lo_open, "hi_open": d.hi_open, "percent": percent}


def _bounds_text(q) -> str:
    d = q.domain
    if q.display_unit == "%":
        return f"{'(' if d.lo_open else '['}{d.lo * 100:g} %, {d.hi * 100:g} %{')' if d.hi_open else ']'}"
    return str(d)


def _far_from_whole(value) -> bool:
    v = np.asarray(value, dtype=float)
    if not np.not_equal(np.round(v), v).any():
        return False      # exactly whole: the usual case, in three passes instead of six
    return bool(np.any(np.abs(v - np.round(v)) > 1e-6 * np.maximum(np.abs(v), 1)))


def _whole_number_notes(lib, derivation: Derivation, values: dict) -> list[Finding]:
    notes = []
    for s in derivation.steps:
        for name in s.unknowns:
            q = lib.quantities[name]
            if q.whole is None or name == derivation.target:
                continue
            v = np.asarray(values[name], dtype=float)
            if _far_from_whole(v):
                sample = float(v.flat[0]) if v.ndim else float(v)
                notes.append(Finding("not_whole", name, {"value": sample}))   # base units, as computed
    return notes


def _relevant_options(derivation: Derivation, defaults_used: dict, explicit: Mapping, opts: dict) -> dict:
    """The options that shaped this derivation (selected a formula or set a default used),
    plus any given explicitly."""
    names = set(explicit) | stacks.options_used(derivation, defaults_used)
    return {k: opts[k] for k in sorted(names)}
