"""Diagnosis of an underdetermined question: the sets of extra quantities that would settle
the target, best first, and the error that names them.

Its own module because it is a search of its own (many trial propagations under a budget of trials)
that only a question routing cannot answer reaches; symcalc.engine.routing calls it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache

from symcalc import budget
from symcalc.budget import DEFAULT_DIAGNOSIS_LIMIT, DEFAULT_DIAGNOSIS_TRIALS, bounded
from symcalc.engine.propagation import _index, propagate
from symcalc.engine.route import Route, _extract, asked_inverses
from symcalc.errors import UnderdeterminedError
from symcalc.library.records import FormulaSpec

MAX_SETS = 6
POOL = {1: None, 2: 20, 3: 10}     # candidates (nearest first) whose pairs / triples are tried


@dataclass(frozen=True)
class DiagnosisHints:
    """What the search for missing values may know beyond the formulas.

    ``known``: quantities people have at hand (inputs, preset fields, coefficients): sets of
    these are offered before sets that need an intermediate. ``verify(extra, route)``: whether
    the given values plus ``extra`` really settle the target along ``route`` (a structurally
    sound block can be dependent, which only the algebra shows); called for routes through
    blocks only.
    ``trials``: the trial propagations (and checks through a block) the search may run: its
    bound, so that what it finds is the same on a quiet and a busy machine. ``seconds``: a time
    guard beside it, for a machine far slower than usual.
    """

    known: frozenset = frozenset()
    verify: Callable[[list[str], Route], bool] | None = None
    seconds: float = DEFAULT_DIAGNOSIS_LIMIT
    trials: int = DEFAULT_DIAGNOSIS_TRIALS
    # defaults standing in for a main input of the question (n_tokens = 20 N, a utilization):
    # routes that need none of them are offered first
    assumptions: frozenset = frozenset()
    avoid: frozenset = frozenset()        # never suggested (a capacity's slack for its own total)
    # quantities with a usual value (the micro-batch): a set of these is what a person would
    # give first, and the message says the usual value
    usual: frozenset = frozenset()
    inputs: frozenset = frozenset()       # quantities people choose (layout, shapes): their defaults count
    # quantity -> its unit: a single quantity of the target's unit that gives it through single
    # formulas and known factors only (dp or n_nodes for n_gpus) restates the answer, and is
    # offered only when nothing else settles the target
    units: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Diagnosis:
    """The sets of extra quantities that would settle a target, best first, whether the search
    ran to its end (False: its trials or its time guard cut it short), and the trials it ran."""

    sets: list[list[str]]
    complete: bool
    trials: int = 0


class _OutOfTrials(Exception):
    """The search has run its budget of trials (DiagnosisHints.trials)."""


class _Trials:
    """Counts the search's trials in ``spent[0]``; calling it spends one, and past ``limit``
    raises :class:`_OutOfTrials`."""

    def __init__(self, spent: list[int], limit: int) -> None:
        self.spent, self.limit = spent, limit

    def __call__(self) -> None:
        self.spent[0] += 1
        if self.spent[0] > self.limit:
            raise _OutOfTrials


def missing_sets(formulas: list[FormulaSpec], target: str, given: set[str], defaults: set[str],
                 zero: Iterable[str] = frozenset(), preferred: Iterable[str] = (),
                 hints: DiagnosisHints | None = None) -> Diagnosis:
    """Sets of extra quantities that would determine ``target``, best first.

    Sets made only of quantities people know (``hints.known``, and the ``preferred`` slacks
    such as memory_headroom) come first, whatever their size: "mfu from n_params" wants
    tokens_per_second, n_gpus and peak_flops, not the intermediate hfu. Within that tier,
    singles, then pairs among the nearest POOL[2], then triples among the nearest POOL[3]
    candidates; if none of those settles the target, a greedy search adds the known quantity
    that settles the most until the target is reached and then drops what is not needed, so
    that a set is found whenever one exists. Only when no set of known quantities exists are
    intermediates tried the same way. A route that solves a formula backwards through a default
    of 0 is not offered (it would divide by 0), and one that reads none of the question's values
    through an inverse kept for when it is the question (a job MTBF gives a GPU count alone:
    another question) only when nothing else settles the target; a route through a block is
    offered only if
    ``hints.verify`` accepts it.

    The search works on the system left after propagating the given values (settled
    quantities count as known), so each trial is a fraction of a full plan. It stops after
    ``hints.trials`` trials (or at its time guard, ``hints.seconds``) with what it has
    (``complete=False``): counted in trials, what it finds does not depend on how busy the
    machine is. O(candidates^3) trials at worst (a pool of 20 pairs and 10 triples a tier).
    """
    hints = hints or DiagnosisHints()
    found: list[tuple] = []
    # the search's own budget ends it quietly with what it found; a question's limit that runs
    # out meanwhile still ends the question
    restated: list[tuple] = []
    unchecked: list[tuple] = []
    spent = [0]
    out_of_trials = False
    with bounded(hints.seconds) as limit:
        try:
            _search(formulas, target, set(given), set(defaults), set(zero), list(preferred), hints, found, restated,
                    unchecked, spent)
        except _OutOfTrials:
            out_of_trials = True
    cut_short = out_of_trials or limit.expired
    # cut short before any set was checked through its block: the sets that settle the target
    # by the structure of the equations are still the right thing to ask for (a memory margin
    # for a micro-batch), rather than nothing
    found = found or restated or (unchecked if cut_short else [])
    found.sort(key=lambda t: t[:6])
    return Diagnosis([f[6] for f in found[:MAX_SETS]], not cut_short, spent[0])


def _search(formulas, target, given, defaults, zero, preferred, hints, found, restated, unchecked,
            spent: list[int]) -> None:
    """The search of :func:`missing_sets`, appending (tier, size, not-usual, not-preferred, defaults,
    rank, set) records to ``found`` as it goes (so that a limit keeps what was found), to
    ``restated`` those that only restate the answer, to ``unchecked`` those through a block;
    ``spent[0]`` counts the trials (:class:`_Trials`)."""
    trial = _Trials(spent, hints.trials)
    by_id = {f.id: f for f in formulas}
    # tiers: known quantities without the main-input assumptions, known ones with them, any
    plain = [f for f in formulas if not (f.default_rule and _lhs(f) in hints.assumptions)]
    systems = []
    for fs, soft in ((plain, defaults - hints.assumptions), (formulas, defaults)):
        settled = set(propagate(fs, given, soft).cost)
        systems.append((settled, [f for f in fs if any(q not in settled for q in f.quantities)]))
    settled_by_given = _settled_by(formulas, given, defaults)
    near = [q for q in _candidates(systems[1][1], target, systems[1][0]) if q not in hints.avoid]
    # the slacks (memory_headroom for the largest value) first, wherever they sit in the graph
    slack = [q for q in preferred if q not in systems[1][0] and q != target and q not in hints.avoid]
    ranked = slack + [q for q in near if q not in slack]
    rank = {q: i for i, q in enumerate(ranked)}
    known = [q for q in ranked if q in hints.known or q in slack]
    tiers = [(known, systems[0]), (known, systems[1]), ([q for q in ranked if q not in hints.known], systems[1])]
    preferred_set = set(preferred)
    verified: dict[frozenset, bool] = {}
    indexes = [_index(live) for _, live in systems]
    system = systems[0]

    def settles(extra) -> Route | None:
        trial()
        settled, live = system
        s = propagate(live, settled | set(extra), (), stop_at=target, index=indexes[systems.index(system)],
                      given=given | set(extra))
        if target not in s.cost:
            return None
        return _extract(s, target, settled | set(extra), set())

    def consider(combo: tuple, tier: int) -> bool:
        if any(set(f[6]) <= set(combo) for f in (*found, *restated)):
            return False
        plan = settles(combo)
        if plan is None or _divides_by_zero(plan, by_id, zero):
            return False
        if given and asked_inverses(((by_id[f] for f in st.formulas), st.solves_for) for st in plan.steps) \
                and not set(plan.given) & settled_by_given():
            # answers another question (an inverse kept for when it is the question: the GPUs of
            # a job MTBF) from the extra alone, none of this one's values: offered only when
            # nothing else settles the target (like a restatement)
            restated.append((tier, len(combo), True, True, 0, sum(rank[q] for q in combo), list(combo)))
            return False
        if len(combo) == 1 and _restates(plan, combo[0], target, system[0], hints.units, by_id):
            restated.append((tier, 1, True, True, 0, rank[combo[0]], list(combo)))
            return False
        if any(step.is_block for step in plan.steps) and hints.verify is not None:
            key = frozenset(combo)
            unchecked.append((tier, len(combo), 0, not set(combo) <= preferred_set, 0, 0, list(combo)))
            if key not in verified:
                trial()
                verified[key] = bool(hints.verify(list(combo), plan))
            if not verified[key]:
                return False
        # the defaults the route leans on, on the whole question (not calibrated coefficients: a
        # forward model's dozen constants make it no less the natural route)
        trial()
        leaning = _leaning(formulas, target, given | set(combo), defaults, hints)
        found.append((tier, len(combo), not set(combo) <= hints.usual, not set(combo) <= preferred_set, leaning,
                      sum(rank[q] for q in combo), list(combo)))
        return True

    for tier, (pool, system) in enumerate(tiers):
        for size in (1, 2, 3):
            limit = POOL[size]
            for combo in itertools.combinations(pool if limit is None else pool[:limit], size):
                consider(combo, tier)
            if any(f[0] == tier for f in found):
                return
        cheapest = _cheapest(pool, target, system, indexes[systems.index(system)], settles, given)
        if cheapest is not None:
            consider(tuple(cheapest), tier)
            if any(f[0] == tier for f in found):
                return


def _leaning(formulas, target: str, known: set[str], defaults: set[str], hints: DiagnosisHints) -> int:
    """How many defaults the whole question's route from ``known`` leans on: default rules and
    defaults of what people choose or assume; 0 when no route reaches the target. One propagation."""
    whole = propagate(formulas, known, defaults, stop_at=target)
    if target not in whole.cost:
        return 0
    route = _extract(whole, target, known, defaults)
    return len(route.default_rules) + sum(q in hints.assumptions or q in hints.inputs for q in route.defaults)


def _settled_by(formulas, given: set[str], defaults: set[str]) -> Callable[[], set[str]]:
    """What the question's own values settle: with the defaults, less what the defaults settle
    alone. Two propagations, run when first asked (only a route through an inverse kept for
    its own question needs them), then kept."""
    found: list[set[str]] = []

    def settled() -> set[str]:
        if not found:
            found.append(set(propagate(formulas, given, defaults).cost) - set(propagate(formulas, set(), defaults).cost))
        return found[0]
    return settled


def _restates(plan: Route, extra: str, target: str, settled: set[str], units: Mapping[str, str],
              by_id: Mapping[str, FormulaSpec]) -> bool:
    """Whether ``extra`` gives the target only as a known multiple of itself: every step that
    reads it (or what follows from it) is a single formula, proportional in the two (a = c b,
    c made of quantities settled without it), between quantities of the target's unit. dp for
    n_gpus (n_gpus = dp tp pp cp, tp pp cp known) or n_nodes for dp, through n_gpus: asking
    for it asks for the answer. A route through a block, through another unit (mfu for
    achieved FLOP/s) or an inverse relation (virtual stages for the bubble ratio) is a real
    route. O(steps)."""
    if not units or units.get(extra) != units.get(target):
        return False
    follows = {extra}
    for step in plan.steps:
        read = follows & set(step.inputs)
        if not read:
            continue
        if step.is_block or len(read) > 1 or any(units.get(q) != units.get(target) for q in step.solves_for):
            return False
        if any(q not in follows and q not in settled for q in step.inputs):
            return False
        if not _proportional(by_id[step.formulas[0]], next(iter(read)), step.solves_for[0]):
            return False
        follows |= set(step.solves_for)
    return target in follows


def _proportional(f: FormulaSpec, a: str, b: str) -> bool:
    """Whether ``f`` reads one of ``a``, ``b`` = (something free of the other) x the other."""
    return _proportional_in(f.lhs, f.rhs, a, b) if f.lhs is not None and f.rhs is not None else False


@lru_cache(maxsize=4096)
def _proportional_in(lhs, rhs, a: str, b: str) -> bool:
    import sympy  # start-up: only a diagnosis gets here
    names = {s.name: s for s in (lhs - rhs).free_symbols}
    for x, y in ((a, b), (b, a)):
        if lhs == names.get(x) and y in names:
            return names[y] not in sympy.Mul(rhs, 1 / names[y]).free_symbols
    return False


def _lhs(f: FormulaSpec) -> str | None:
    """The quantity a default rule (or forward-only law) delivers."""
    return next((q for q, how in f.solvability.items() if how == "explicit"), None)


def _cheapest(pool: list[str], target: str, system, index, settles, given: set[str]) -> list[str] | None:
    """A set from ``pool`` that settles the target, or None if even all of it does not.

    The same shortest-derivation search as planning (:func:`propagate`), with every candidate
    in ``pool`` offered as a default: the derivation of least cost leans on the fewest of
    them, and those it leans on are the set. Then every member whose removal still settles
    the target is dropped. One propagation plus one trial per member."""
    settled, live = system
    s = propagate(live, settled, set(pool), stop_at=target, index=index, given=given)
    if target not in s.cost:
        return None
    chosen = list(_extract(s, target, settled, set(pool)).defaults)
    for q in list(chosen):
        rest = [x for x in chosen if x != q]
        if rest and settles(rest) is not None:
            chosen = rest
    return chosen if settles(chosen) is not None else None


def _divides_by_zero(plan: Route, by_id: dict, zero: set[str]) -> bool:
    """True if a step solves a formula backwards through a zero-valued default: with the zero
    substituted, the formula no longer holds the quantity it is solved for (latency = steps x 0
    says nothing of the steps) or divides by zero. A zero term of a sum is harmless."""
    for step in plan.steps:
        zeros = set(step.inputs) & zero
        if not zeros:
            continue
        for fid in step.formulas:
            f = by_id[fid]
            solved = [v for v in step.solves_for if v in f.quantities]
            if (f.quantities and zeros & set(f.quantities) and solved
                    and any(f.solvability[v] != "explicit" for v in solved)
                    and _degenerate(f.lhs - f.rhs, frozenset(zeros), tuple(solved))):
                return True
    return False


@lru_cache(maxsize=4096)
def _degenerate(expr, zeros: frozenset, unknowns: tuple) -> bool:
    """Whether ``expr`` = 0 with the ``zeros`` set to 0 loses every unknown (or divides by 0)."""
    import sympy  # start-up: only a route through a default of 0 gets here (a cached answer does not route)
    symbols = {s.name: s for s in expr.free_symbols}
    with budget.bounded(budget.DEFAULT_SYMBOLIC_LIMIT) as limit:
        reduced = expr.subs({symbols[z]: 0 for z in zeros if z in symbols})
    if limit.expired or reduced.has(sympy.zoo, sympy.nan, sympy.oo):
        return True     # (a route that cannot be checked in time is not offered)
    return not any(symbols[v] in reduced.free_symbols for v in unknowns if v in symbols)


def _candidates(formulas: list[FormulaSpec], target: str, settled: set[str]) -> list[str]:
    """Unsettled quantities connected to the target through unsettled quantities, nearest first."""
    by_quantity = _index(formulas)
    dist = {target: 0}
    queue = deque([target])
    while queue:
        q = queue.popleft()
        for f in by_quantity.get(q, ()):
            for x in f.quantities:
                if x not in dist and x not in settled:
                    dist[x] = dist[q] + 1
                    queue.append(x)
    ranked = sorted((d, q) for q, d in dist.items() if q != target)
    return [q for _, q in ranked]


def _underdetermined(formulas: list[FormulaSpec], target: str, given: set[str],
                     defaults: set[str], zero: set[str], limits: dict[str, str],
                     hints: DiagnosisHints | None = None) -> UnderdeterminedError:
    if not any(target in f.quantities for f in formulas):
        return UnderdeterminedError(
            f"no formula in force determines {target} (none exists in the library, or only "
            "under other option values: see `symcalc show " + target + "`)")
    found = missing_sets(formulas, target, given, defaults, zero, preferred=[q for q in limits if q not in given],
                         hints=hints)
    return underdetermined_error(target, given, found.sets, limits, complete=found.complete)


def underdetermined_error(target: str, given: set[str], sets: list[list[str]],
                          limits: Mapping[str, str] | None = None, complete: bool = True) -> UnderdeterminedError:
    """The error for a target the given names do not determine, and the sets that would;
    a slack in ``limits`` is shown with its value at the limit. ``complete=False``: the search
    for sets was cut short (and says so rather than claim there is none)."""
    known = (", ".join(sorted(given)) if len(given) <= 8 else
             f"the {len(given)} values known (given, or from the presets)") or "nothing"
    if not sets:
        if not complete:
            return UnderdeterminedError(f"cannot determine {target} from {known}; the search for what else to "
                                        "give was cut short, its budget of trials spent (`symcalc show " + target + "` lists "
                                        "the formulas that give it)", [])
        return UnderdeterminedError(f"cannot determine {target} from {known}: no combination of other values "
                                    f"settles it; give {target} itself", [])
    limits, said = limits or {}, set()

    def named(q: str) -> str:       # what is said beside a quantity, at its first mention only
        if q in limits and q not in said:
            said.add(q)
            return f"{q} ({limits[q]})"
        return q
    options = " | ".join(", ".join(named(q) for q in s) for s in sets)
    return UnderdeterminedError(
        f"cannot determine {target} from {known}: also give {'one of: ' if len(sets) > 1 else ''}{options}",
        sets)
