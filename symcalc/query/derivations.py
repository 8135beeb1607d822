"""The derivation of a question: looked up in memory and on disk (symcalc.cache), else routed
and built (symcalc.engine), or the error that says what is missing (with the values and option
values that would settle it); the defaults it uses; showing it (its closed form and steps
printed on first read, and kept on disk again with them)."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from functools import lru_cache

from symcalc import cache, units
from symcalc.budget import diagnosis_limit
from symcalc.engine.derivation import Derivation, SingularBlock
from symcalc.engine.routing import DiagnosisHints, Route, find_route
from symcalc.errors import NoSolutionError, SymcalcError, UnderdeterminedError
from symcalc.library.loading import Library
from symcalc.library.presets import all_presets
from symcalc.library.printed import Printed
from symcalc.query.fit import foreign
from symcalc.query.values import GivenValue


def derivation_for(library: Library, target: str, known: frozenset, options: dict[str, str],
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
    hit = library.derivation_cache.get(key) or cached_derivation(library, key)
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
            # a copy is kept (a copy carries no traceback): the raised error's frames would keep
            # the first failing question, a whole plan's, alive for as long as the library
            library.derivation_cache[("underdetermined", diagnose, key)] = copy.copy(e)
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
            library.derivation_cache[("underdetermined", diagnose, key)] = copy.copy(e)
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
    store_derivation(library, key, derivation, used)
    return derivation, used


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
    but naming a kernel to someone who asked how many GPUs answers nothing. The values of the
    options marked ``offered`` come first (:func:`_offered_values`). O(such values x routing),
    at most MAX_SETTLING_OPTIONS named."""
    found = _offered_values(library, target, known, options)
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
            if len(found) >= MAX_SETTLING_OPTIONS:
                return found
            if _route_under(library, target, known, {**options, name: value}) is not None:
                found.append(f"{name}={value}")
    return found[:MAX_SETTLING_OPTIONS]


def _route_under(library: Library, target: str, known: frozenset, trial: dict[str, str]):
    """(route, formulas in force) of ``target`` from ``known`` under the options ``trial``, by
    routing alone (no derivation built, no diagnosis), or None where it does not route."""
    formulas = library.active_formulas(trial)
    defaults = {k: v for k, v in library.coefficient_defaults(trial).items() if k not in known}
    try:
        return find_route(formulas, target, known, defaults, diagnose=False), formulas
    except SymcalcError:
        return None


def _offered_values(library: Library, target: str, known: frozenset, options: dict[str, str]) -> list[str]:
    """The values of the options marked ``offered`` (they only pick which group or figure a
    formula reads: collective_group) under which the question routes with what the value's own
    formulas read known, not defaulted, on the route: an AllToAll asked with ep given is offered
    collective_group=ep, not tp (which a default tp = 1 would also route), and a question whose
    route does not pass through them is offered none. O(such values x routing)."""
    found: list[str] = []
    for name, opt in library.options.items():
        if not opt.offered:
            continue
        for value in opt.values:
            if value == options.get(name, opt.default):
                continue
            routed = _route_under(library, target, known, {**options, name: value})
            if routed is None:
                continue
            route, formulas = routed
            own = {f.id for f in formulas if name in f.when}
            steps = [step for step in route.steps if own & set(step.formulas)]
            if not steps or any(set(step.inputs) & set(route.defaults) for step in steps):
                continue    # the value is not what routes it, or routes it only through a default
            found.append(f"{name}={value}")
    return found[:MAX_SETTLING_OPTIONS]


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


def _disk_key(library: Library, key: tuple) -> str | None:
    """The on-disk cache key of a derivation: the library's content hash and the question's
    shape (target, known names, options); None for a library built in memory."""
    if library.fingerprint is None:
        return None
    target, known, options, exclude = key
    return cache.key_of(library.fingerprint, target, *sorted(known), "|", *(f"{k}={v}" for k, v in options),
                        "|", *sorted(exclude))


def cached_derivation(library: Library, key: tuple):
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


def store_derivation(library: Library, key: tuple, derivation: Derivation, used: dict) -> None:
    """Keep a new derivation on disk (never an error: the answer does not depend on it)."""
    disk_key = _disk_key(library, key)
    if not disk_key:
        return
    cache.store("derivation", disk_key, (derivation, used))


def evaluate_on(derivation: Derivation, knowns: dict[str, GivenValue], defaults_used: dict):
    """The derivation evaluated on the known values and the defaults it uses."""
    env = {k: v.magnitude for k, v in knowns.items()}
    env.update({k: d["magnitude"] for k, d in defaults_used.items() if "magnitude" in d})
    return derivation.evaluate(env)


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
            derivation_for(library, target, known | set(extra), options, diagnose=False)
        except SymcalcError:
            return False
        return True
    tq = library.quantities[target]
    # a per-GPU total is not settled by its capacity and the memory left free: that is circular
    avoid = frozenset(q.name for q in library.quantities.values() if q.limit or q.name == tq.fits_in) \
        if tq.fits_in else frozenset()
    # quantities kept only to reproduce a source's wrong number are never a useful suggestion
    avoid |= frozenset(q.name for q in library.quantities.values() if q.source_error)
    # nor the quantities only another workload's memory is written in (a micro-batch for a
    # serving question: it reaches the answer only through training's formulas)
    avoid |= foreign(library, options) - known - {target}
    # nor the other half of the target's per-unit/total pair (all replicas' rate for one
    # replica's: asking for it restates the answer)
    avoid |= {q.name for q in library.quantities.values() if q.total == target} | ({tq.total} if tq.total else set())
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
        fields = {name for kind in all_presets().values() for p in kind.values() for name in p.fields}
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
        store_derivation(lib, key, derivation, entry[1])


class Display:
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
