"""Planning: which formula determines which quantity, in what order, for one query.

Purely structural (no sympy): a plan costs about a millisecond, so diagnosing an
underdetermined query can afford to try many candidate sets.

Algorithm (see shared/notes/engine-notes.md section 3):

1. **Propagation** is Knuth's generalisation of Dijkstra's algorithm to AND-OR graphs
   (Knuth 1977): a formula whose quantities are all settled but one, and which can be
   solved for that one, settles it at cost 1 + the sum of its inputs' costs. Given values
   cost 0 and coefficient defaults cost ``DEFAULT_COST``, so the cheapest derivation is the
   shortest one that leans on the fewest defaults.
2. When propagation stalls, the remaining equations are partitioned (Dulmage-Mendelsohn)
   and their determined part ordered into blocks (block triangular form); a block of k
   equations settles its k unknowns together. Then propagation resumes.
3. Defaults are only admitted when the given values alone cannot reach the target.
4. The plan keeps only the steps the target needs, in the order they were settled.
"""

from __future__ import annotations

import heapq
import itertools
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from .errors import UnderdeterminedError
from .model import FormulaSpec

DEFAULT_COST = 1000


@dataclass(frozen=True)
class Step:
    """One step of a plan: formulas that together determine ``solves_for`` from ``inputs``."""

    formulas: tuple[str, ...]
    solves_for: tuple[str, ...]
    inputs: tuple[str, ...]

    @property
    def is_block(self) -> bool:
        return len(self.formulas) > 1


@dataclass(frozen=True)
class Plan:
    """The steps that take the knowns to the target, and which knowns they use."""

    target: str
    steps: tuple[Step, ...]
    given: tuple[str, ...]       # given quantities the steps use
    defaults: tuple[str, ...]    # coefficient defaults the steps use
    unused: tuple[str, ...]      # given quantities nothing here needed
    default_rules: tuple[str, ...] = ()  # default-rule formulas the steps use


@dataclass
class _Settled:
    cost: dict
    producer: dict
    order: dict


def _index(formulas: Iterable[FormulaSpec]) -> dict[str, list[FormulaSpec]]:
    by_quantity: dict[str, list[FormulaSpec]] = {}
    for f in formulas:
        for q in f.quantities:
            by_quantity.setdefault(q, []).append(f)
    return by_quantity


def propagate(formulas: list[FormulaSpec], hard: set[str], soft: set[str] = frozenset(),
              stop_at: str | None = None) -> _Settled:
    """Settle every quantity the formulas determine from ``hard`` (cost 0) and ``soft`` knowns.

    Returns costs, the producing Step of each derived quantity (None for knowns) and the order
    of settlement. Stops early once ``stop_at`` is settled. O((F + Q) log(F + Q)) per round of
    propagation, plus one block analysis per stall.
    """
    by_quantity = _index(formulas)
    remaining = {f.id: len(f.quantities) for f in formulas}
    cost: dict[str, float] = {}
    producer: dict[str, Step | None] = {}
    order: dict[str, int] = {}
    tie = itertools.count()
    heap: list = []
    # sorted: the same question gives the same derivation, in the same order, in every process
    for q in sorted(hard):
        heapq.heappush(heap, (0, next(tie), q, None))
    for q in sorted(soft):
        if q not in hard:
            heapq.heappush(heap, (DEFAULT_COST, next(tie), q, None))

    def offer(f: FormulaSpec) -> None:
        """f has one unsettled quantity left: offer it, if f can be solved for it."""
        v = next(x for x in f.quantities if x not in cost)
        if f.solvability[v] != "none":
            inputs = tuple(x for x in f.quantities if x != v)
            if not set(f.from_given) <= set(hard):
                return   # a bridge that reads these inputs from given values only, never derived ones
            penalty = DEFAULT_COST if f.default_rule else 0
            heapq.heappush(heap, (1 + penalty + sum(cost[x] for x in inputs), next(tie), v,
                                  Step((f.id,), (v,), inputs)))

    def settle(q: str, c: float, step: Step | None) -> None:
        cost[q] = c
        producer[q] = step
        order[q] = len(order)
        for f in by_quantity.get(q, ()):
            remaining[f.id] -= 1
            if remaining[f.id] == 1:
                offer(f)

    for f in formulas:   # constant definitions ("x = 6 FLOP/token") need no trigger
        if len(f.quantities) == 1:
            offer(f)

    while True:
        while heap:
            c, _, q, step = heapq.heappop(heap)
            if q in cost:
                continue
            settle(q, c, step)
            if q == stop_at:
                return _Settled(cost, producer, order)
        # a consequence of other laws never joins a block: with its premises it would make a
        # structurally sound but dependent system
        blocks = _ready_blocks([f for f in formulas if remaining[f.id] >= 2 and not f.consequence], cost)
        if not blocks:
            break
        for rows, cols in blocks:
            if any(c in cost for c in cols):
                continue
            inputs = tuple(sorted({q for f in rows for q in f.quantities} - set(cols)))
            step = Step(tuple(f.id for f in rows), tuple(cols), inputs)
            c = len(rows) + sum(cost[x] for x in inputs) + DEFAULT_COST * sum(f.default_rule for f in rows)
            for col in cols:
                settle(col, c, step)
        if stop_at in cost:
            break
    return _Settled(cost, producer, order)


def _ready_blocks(formulas: list[FormulaSpec], settled: dict) -> list[tuple[list[FormulaSpec], list[str]]]:
    """Blocks of the stalled system that the settled quantities make solvable, in order.

    The matching may only pair a formula with a quantity it can be solved for; the order of
    blocks follows every unsettled quantity a formula mentions. A formula that needs a quantity
    nothing here can determine (a default rule whose input is unknown) cannot fire in this
    round; it is dropped and the decomposition redone, so that it cannot take a quantity that a
    real block needs in the matching.
    """
    # imported here: networkx is a tenth of start-up, and a question whose derivation is
    # cached (see symcalc.cache) never plans
    from .structure import block_triangular_order, dulmage_mendelsohn, maximum_matching
    candidates = list(formulas)
    while candidates:
        unsettled = {f.id: {q for q in f.quantities if q not in settled} for f in candidates}
        rows = {f.id: {q for q in unsettled[f.id] if f.solvability[q] != "none"} for f in candidates}
        by_id = {f.id: f for f in candidates}
        dm = dulmage_mendelsohn(rows, maximum_matching(rows))
        determined = dm["square_rows"] | dm["over_rows"]
        match = {r: c for r, c in dm["match"].items() if r in determined}
        reachable = set(match.values())
        hopeless = {r for r in unsettled if not unsettled[r] <= reachable}
        available = set(settled)
        out = []
        usable = {r: c for r, c in match.items() if r not in hopeless}
        for block in block_triangular_order({r: unsettled[r] for r in usable}, usable):
            cols = [usable[r] for r in block]
            needs = {q for r in block for q in by_id[r].quantities}
            if needs <= available | set(cols):
                out.append(([by_id[r] for r in block], cols))
                available |= set(cols)
        if out or not (hopeless & set(match)):
            return out
        candidates = [f for f in candidates if f.id not in hopeless]
    return []


def make_plan(formulas: list[FormulaSpec], target: str, given: Iterable[str],
              defaults: Iterable[str] = (), zero: Iterable[str] = (), diagnose: bool = True,
              limits: Mapping[str, str] | None = None) -> Plan:
    """Plan the derivation of ``target`` from ``given`` (and, only if needed, ``defaults``).

    Coefficient defaults are admitted only when the given values alone cannot reach the
    target, and default rules among ``formulas`` (``d_ffn = 4 d_model`` unless given) only when
    the coefficient defaults are not enough either.
    ``zero`` names defaults whose value is 0 (a term that vanishes): the diagnosis never
    proposes a route that would have to divide by one.
    Raises UnderdeterminedError naming the smallest sets of extra quantities that would do
    (with ``diagnose=False``, a bare one: the search for those sets is the costly part).
    ``limits`` maps slack quantities to what their value at the limit asks (memory_headroom:
    "0 GB for the largest value that fits"): the diagnosis offers them first.
    """
    given = set(given)
    # the target's own default is never an answer: `solve pp n_gpus=64 dp=8 tp=2` is 4, not 1
    defaults = set(defaults) - given - {target}
    consequences = [f for f in formulas if f.consequence]
    premises = [f for f in formulas if not f.consequence]
    laws = [f for f in premises if not f.default_rule]
    own_rules = {f.id for f in premises if f.default_rule and f.solvability.get(target) == "explicit"}
    others = [f for f in premises if f.id not in own_rules]
    # Stages: laws alone; then with coefficient defaults; then default rules ("d_ffn = 4 d unless
    # given"), which assume a relation nobody stated; and only last a default rule for the target
    # itself (Chinchilla's n_tokens = 20 N when nothing else gives n_tokens). Each stage is tried
    # first without, then with the consequences of the laws (GPU-hours = C / (MFU P), which needs
    # no GPU count), so that a question the laws answer keeps its derivation from first principles.
    stages = [(stage + extra, soft) for stage, soft in ((laws, set()), (laws, defaults), (others, defaults),
                                                         (premises, defaults))
              for extra in ([], consequences) if not extra or consequences]
    for stage_formulas, soft in stages:
        settled = propagate(stage_formulas, given, soft, stop_at=target)
        if target in settled.cost:
            break
    if target not in settled.cost:
        if not diagnose:
            raise UnderdeterminedError(f"cannot determine {target}")
        raise _underdetermined(formulas, target, given, defaults, set(zero), dict(limits or {}))
    return _extract(settled, target, given, defaults, {f.id for f in formulas if f.default_rule})


def _extract(settled: _Settled, target: str, given: set, defaults: set, rules: set = frozenset()) -> Plan:
    needed: set[str] = set()
    steps: dict[Step, int] = {}
    queue = deque([target])
    while queue:
        q = queue.popleft()
        if q in needed:
            continue
        needed.add(q)
        step = settled.producer.get(q)
        if step is not None and step not in steps:
            steps[step] = max(settled.order[c] for c in step.solves_for)
            queue.extend(step.inputs)
    ordered = tuple(sorted(steps, key=steps.get))
    used_given = tuple(sorted(q for q in needed if q in given))
    used_defaults = tuple(sorted(q for q in needed if q in defaults and settled.producer.get(q) is None))
    unused = tuple(sorted(given - needed))
    used_rules = tuple(fid for s in ordered for fid in s.formulas if fid in rules)
    return Plan(target=target, steps=ordered, given=used_given, defaults=used_defaults, unused=unused,
                default_rules=used_rules)


# -- diagnosis ---------------------------------------------------------------------------------

MAX_TRIALS = 600
MAX_SETS = 6


def missing_sets(formulas: list[FormulaSpec], target: str, given: set[str], defaults: set[str],
                 zero: set[str] = frozenset(), preferred: Iterable[str] = ()) -> list[list[str]]:
    """Smallest sets of extra quantities that would determine ``target``, best first.

    Tries single quantities, then pairs, then triples among the unknown quantities connected
    to the target, nearest first, within a budget of MAX_TRIALS plans. Among sets of one
    size, those of ``preferred`` quantities (slacks such as memory_headroom, whose value at a
    limit a user knows, however far from the target they are), then those leaning on fewer
    defaults, then those nearer the target, come first. A route that solves a formula backwards
    through a default of 0 is not offered (it would divide by 0).
    """
    base = propagate(formulas, given, defaults)
    near = _candidates(formulas, target, set(base.cost))
    slack = [q for q in preferred if q not in base.cost and q != target and q not in near]
    candidates = slack + near
    rank = {q: i for i, q in enumerate(candidates)}
    preferred = set(preferred)
    by_id = {f.id: f for f in formulas}
    found: list[tuple[int, int, int, list[str]]] = []
    trials = 0
    for size in (1, 2, 3):
        for combo in itertools.combinations(candidates, size):
            if any(set(f[4]) <= set(combo) for f in found):
                continue
            trials += 1
            if trials > MAX_TRIALS:
                break
            s = propagate(formulas, given | set(combo), defaults, stop_at=target)
            if target in s.cost:
                plan = _extract(s, target, given | set(combo), defaults)
                if _divides_by_zero(plan, by_id, zero):
                    continue
                found.append((size, not set(combo) <= preferred, len(plan.defaults),
                              sum(rank[q] for q in combo), list(combo)))
        if found or trials > MAX_TRIALS:
            break
    found.sort(key=lambda t: t[:4])
    return [f[4] for f in found[:MAX_SETS]]


def _divides_by_zero(plan: Plan, by_id: dict, zero: set[str]) -> bool:
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
                    and _degenerate(f, zeros, solved)):
                return True
    return False


def _degenerate(f: FormulaSpec, zeros: set[str], unknowns: list[str]) -> bool:
    import sympy

    from . import budget
    expr = f.lhs - f.rhs
    symbols = {s.name: s for s in expr.free_symbols}
    with budget.bounded(budget.DEFAULT_SYMBOLIC_LIMIT) as limit:
        reduced = expr.subs({symbols[z]: 0 for z in zeros if z in symbols})
    if limit.expired or reduced.has(sympy.zoo, sympy.nan, sympy.oo):
        return True     # (a route that cannot be checked in time is not offered)
    return not any(symbols[v] in reduced.free_symbols for v in unknowns if v in symbols)


def _candidates(formulas: list[FormulaSpec], target: str, settled: set[str], limit: int = 40) -> list[str]:
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
    # quantities kept only to reproduce a source's wrong number are never a useful suggestion
    ranked = sorted((d, q) for q, d in dist.items() if q != target and "_seed0" not in q)
    return [q for _, q in ranked[:limit]]


def _underdetermined(formulas: list[FormulaSpec], target: str, given: set[str],
                     defaults: set[str], zero: set[str], limits: dict[str, str]) -> UnderdeterminedError:
    if not any(target in f.quantities for f in formulas):
        return UnderdeterminedError(
            f"no formula in force determines {target} (none exists in the library, or only "
            "under other option values: see `symcalc show " + target + "`)")
    sets = missing_sets(formulas, target, given, defaults, zero, preferred=[q for q in limits if q not in given])
    return underdetermined_error(target, given, sets, limits)


def underdetermined_error(target: str, given: set[str], sets: list[list[str]],
                          limits: Mapping[str, str] | None = None) -> UnderdeterminedError:
    """The error for a target the given names do not determine, and the sets that would;
    a slack in ``limits`` is shown with its value at the limit."""
    known = (", ".join(sorted(given)) if len(given) <= 8 else f"the {len(given)} values given") or "nothing"
    if not sets:
        return UnderdeterminedError(f"cannot determine {target} from {known}, and no set of up to "
                                    "three more quantities would", [])
    limits = limits or {}
    options = " | ".join(", ".join(f"{q} ({limits[q]})" if q in limits else q for q in s) for s in sets)
    return UnderdeterminedError(
        f"cannot determine {target} from {known}: also give {'one of: ' if len(sets) > 1 else ''}{options}",
        sets)
