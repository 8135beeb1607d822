"""Planning: which formula determines which quantity, in what order, for one query.

Purely structural (no sympy): a plan costs about a millisecond, so diagnosing an
underdetermined query can afford to try many candidate sets.

Algorithm (see shared/notes/engine-notes.md section 3):

1. **Propagation** is Knuth's generalisation of Dijkstra's algorithm to AND-OR graphs
   (Knuth 1977): a formula whose quantities are all settled but one, and which can be
   solved for that one, settles it at cost 1 + the sum of its inputs' costs. Given values
   cost 0 and coefficient defaults cost ``DEFAULT_COST``, so the cheapest derivation is the
   shortest one that leans on the fewest defaults. A default rule (an estimate such as
   d_ffn = 8/3 d_model) costs ``RULE_COST``, more than any route of laws and coefficient
   defaults: a GPU's shard from the shapes' total (with the convention ep = 1) beats the
   layers-only estimate, whatever the number of conventions it takes.
2. When propagation stalls, the remaining equations are partitioned (Dulmage-Mendelsohn)
   and their determined part ordered into blocks (block triangular form); a block of k
   equations settles its k unknowns together. Then propagation resumes.
   Before an estimate is taken, the blocks ready by then are settled: laws that hold together
   go before an estimate of one of their unknowns.
3. Defaults are only admitted when the given values alone cannot reach the target.
4. The plan keeps only the steps the target needs, in the order they were settled.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache


from symcalc import budget
from symcalc.budget import DEFAULT_DIAGNOSIS_LIMIT, bounded
from symcalc.engine.structure import (
    block_triangular_order,
    dulmage_mendelsohn,
    maximum_matching,
)
from symcalc.errors import UnderdeterminedError
from symcalc.library.records import FormulaSpec

DEFAULT_COST = 1000
RULE_COST = 100 * DEFAULT_COST    # an estimate: dearer than any number of conventions


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
class Route:
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


def propagate(formulas: list[FormulaSpec], hard: set[str], soft: Iterable[str] = frozenset(),
              stop_at: str | None = None, index: dict[str, list[FormulaSpec]] | None = None,
              given: set[str] | None = None) -> _Settled:
    """Settle every quantity the formulas determine from ``hard`` (cost 0) and ``soft`` knowns.

    ``given``: the values the user gave, which bridges (``from_given``) may read; ``hard`` when
    None. A search that counts settled quantities as hard passes the given ones here, so that
    a bridge never reads a derived value.

    Returns costs, the producing Step of each derived quantity (None for knowns) and the order
    of settlement. Stops early once ``stop_at`` is settled. O((F + Q) log(F + Q)) per round of
    propagation, plus one block analysis per stall.
    """
    return _Propagation(formulas, hard, soft, index, given).run(stop_at)


class _Propagation:
    """The state of one :func:`propagate`: the heap of offers, what is settled, and what the
    block analysis at each stall reads, kept as quantities settle (the steps share all of it,
    hence one object rather than functions passing a dozen locals around)."""

    __slots__ = ("by_quantity", "bridged", "remaining", "cost", "producer", "order", "tie", "heap",
                 "estimates", "unsettled", "open_to_blocks", "peeling", "by_lhs", "with_rules",
                 "law_defines", "blocks_changed")

    def __init__(self, formulas: list[FormulaSpec], hard: set[str], soft: Iterable[str],
                 index: dict[str, list[FormulaSpec]] | None, given: set[str] | None):
        self.by_quantity = _index(formulas) if index is None else index  # the caller's, when it plans often
        self.bridged = set(hard if given is None else given)
        self.remaining = {f.id: len(f.quantities) for f in formulas}
        self.cost: dict[str, float] = {}
        self.producer: dict[str, Step | None] = {}
        self.order: dict[str, int] = {}
        self.tie = itertools.count()
        self.heap: list = []
        self._seed(hard, soft)
        self.estimates = {f.id for f in formulas if f.approximate}
        self._track_blocks(formulas)
        for f in formulas:   # constant definitions ("x = 6 FLOP/token") need no trigger
            if len(f.quantities) == 1:
                self.offer(f)

    def _seed(self, hard: set[str], soft: Iterable[str]) -> None:
        """Offer the knowns: given values at cost 0, coefficient defaults at DEFAULT_COST."""
        heap, tie = self.heap, self.tie
        # sorted: the same question gives the same derivation, in the same order, in every process
        for q in sorted(hard):
            heapq.heappush(heap, (0, next(tie), q, None))
        for q in sorted(soft):
            if q not in hard:
                heapq.heappush(heap, (DEFAULT_COST, next(tie), q, None))

    def _track_blocks(self, formulas: list[FormulaSpec]) -> None:
        """Start what the block analysis at each stall reads, kept from then on as quantities
        settle, so that a stall need not go over every formula again."""
        # Kept as propagation goes, for the block analysis at each stall (which ran over every
        # formula each time: half of a cold plan's routing): each formula's unsettled quantities,
        # and the formulas a block may draw on, in the formulas' order (see settle_blocks).
        bridged = self.bridged
        self.unsettled = {f.id: list(f.quantities) for f in formulas}
        self.open_to_blocks = open_to_blocks = {
            f.id: f for f in formulas if len(f.quantities) >= 2 and not f.consequence
            and set(f.from_given) <= bridged}
        self.peeling = _Peeling(self.unsettled, open_to_blocks)
        by_lhs: dict[str, list[str]] = {}
        for f in open_to_blocks.values():
            if f.lhs_name:
                by_lhs.setdefault(f.lhs_name, []).append(f.id)
        self.by_lhs = by_lhs
        self.with_rules = any(f.default_rule for f in open_to_blocks.values())
        # for the default rules among them: how many laws among them give each quantity explicitly
        # (a rule whose left side a law defines joins no block: see shadowed)
        self.law_defines = Counter(q for f in open_to_blocks.values() if not f.default_rule
                                   for q, how in f.solvability.items() if how == "explicit")
        # whether those formulas changed since the block analysis last found nothing to settle (it
        # reads nothing else: unchanged, it would find nothing again)
        self.blocks_changed = True

    def leave(self, fid: str) -> None:
        """Formula ``fid`` can no longer join a block."""
        f = self.open_to_blocks.pop(fid)
        self.peeling.leave(fid)
        self.blocks_changed = True
        if not f.default_rule:
            law_defines = self.law_defines
            for q, how in f.solvability.items():
                if how == "explicit":
                    law_defines[q] -= 1

    def shadowed(self, f: FormulaSpec) -> bool:
        """A default rule whose left side a law that may join a block defines: it joins none.

        A default rule only stands in for its left side where nothing else gives it: d_ffn =
        4 d joins the block that finds d from a parameter count, since no law says what d_ffn
        is. But "a generic AllReduce is the TP ring" must not join a block in which the ring's
        own law gives allreduce_time: together they would tie the data-parallel group to the
        default tp = 1 and answer a question the given values leave open."""
        law_defines = self.law_defines
        return any(how == "explicit" and law_defines[q] > 0 for q, how in f.solvability.items())

    def estimated(self, q: str) -> bool:
        """Whether q was settled by an approximate consequence (a rule of thumb the laws imply
        only roughly) with q on its left."""
        step = self.producer.get(q)
        return step is not None and len(step.formulas) == 1 and step.formulas[0] in self.estimates

    def offer(self, f: FormulaSpec) -> None:
        """f has one unsettled quantity left: offer it, if f can be solved for it.

        A rule of thumb and an exact law of the same quantity never meet: a law is not solved
        backwards from a left side a rule of thumb gave (hfu = 4/3 mfu run into hfu = executed
        FLOPs / (time n peak) would turn an MFU of 6 N into a step time of the executed FLOPs,
        attention included, that no definition holds), and a rule of thumb is solved backwards
        only from a given left side (HFU 60 % and MFU 50 % measure gamma = 1.2; an HFU counted
        exactly would make gamma the ratio of two different FLOP counts)."""
        v = self.unsettled[f.id][0]        # the one left
        if f.lhs_name not in (None, v) and (self.estimated(f.lhs_name) if f.id not in self.estimates
                                            else self.producer.get(f.lhs_name) is not None):
            return
        if f.solvability[v] != "none":
            inputs = tuple(x for x in f.quantities if x != v)
            if not set(f.from_given) <= self.bridged:
                return   # a bridge that reads these inputs from given values only, never derived ones
            penalty = RULE_COST if f.default_rule else 0
            cost = self.cost
            heapq.heappush(self.heap, (1 + penalty + sum(cost[x] for x in inputs), next(self.tie), v,
                                       Step((f.id,), (v,), inputs)))

    def settle(self, q: str, c: float, step: Step | None) -> None:
        """Settle ``q`` at cost ``c``, and offer the formulas it leaves one quantity short."""
        self.cost[q] = c
        self.producer[q] = step
        order = self.order
        order[q] = len(order)
        self.peeling.settled(q)
        open_to_blocks = self.open_to_blocks
        if self.estimated(q):        # no law joins a block backwards from it
            for fid in self.by_lhs.get(q, ()):
                if fid in open_to_blocks:
                    self.leave(fid)
        remaining, unsettled = self.remaining, self.unsettled
        for f in self.by_quantity.get(q, ()):
            remaining[f.id] -= 1
            unsettled[f.id].remove(q)
            if f.id in open_to_blocks:
                self.blocks_changed = True
                if remaining[f.id] < 2:
                    self.leave(f.id)
            if remaining[f.id] == 1:
                self.offer(f)

    def settle_blocks(self) -> bool:
        """Settle the blocks of laws the settled quantities make solvable; whether any was."""
        # the formulas with two or more quantities unsettled; a consequence of other laws
        # never joins a block: with its premises it would make a structurally sound but
        # dependent system; nor does a bridge from given values whose inputs were not given (in
        # a block they would be unknowns, that is, derived) (and, as in offer, no law joins one
        # backwards from a left side a rule of thumb gave): open_to_blocks, kept by settle
        if not self.blocks_changed:
            return False
        self.blocks_changed = False
        candidates = list(self.open_to_blocks.values())
        if self.with_rules:      # the laws, and the default rules no law among them shadows
            candidates = [f for f in candidates if not f.default_rule or not self.shadowed(f)]
        cost = self.cost
        blocks = _ready_blocks(self.peeling.core(candidates), cost)
        settled_any = False
        for rows, cols in blocks:
            if any(c in cost for c in cols):
                continue
            inputs = tuple(sorted({q for f in rows for q in f.quantities} - set(cols)))
            step = Step(tuple(f.id for f in rows), tuple(cols), inputs)
            c = len(rows) + sum(cost[x] for x in inputs) + RULE_COST * sum(f.default_rule for f in rows)
            for col in cols:
                self.settle(col, c, step)
            settled_any = True
        return settled_any

    def run(self, stop_at: str | None) -> _Settled:
        """Settle the cheapest offer, or at a stall the ready blocks, until nothing is left (or
        ``stop_at`` is settled)."""
        heap, cost, settle = self.heap, self.cost, self.settle
        blocks_tried = False     # since the last quantity was settled
        while True:
            while heap:
                if heap[0][0] >= RULE_COST and not blocks_tried:
                    # an estimate (a default rule) is next: first let the laws settle together what
                    # they can, so that d_ffn solved from a given activation memory is not replaced
                    # by d_ffn = 8/3 d_model just because a block is only looked for at a stall
                    blocks_tried = True
                    if self.settle_blocks():
                        if stop_at in cost:
                            return self.settled()
                        continue
                c, _, q, step = heapq.heappop(heap)
                if q in cost:
                    continue
                settle(q, c, step)
                blocks_tried = False
                if q == stop_at:
                    return self.settled()
            if not self.settle_blocks() or stop_at in cost:
                break
            blocks_tried = False
        return self.settled()

    def settled(self) -> _Settled:
        """What propagation settled, as the callers read it."""
        return _Settled(self.cost, self.producer, self.order)


class _Peeling:
    """The formulas that can belong to a simultaneous block, at each stall of one propagation:
    repeatedly leave out every formula with an unsettled quantity that no other remaining
    formula mentions. Such a formula can only deliver that quantity once its others are
    settled, which propagation does on its own; without the dangling chains the decomposition
    works on a few dozen formulas instead of every unsettled one.

    Peeled from scratch at every stall, this was half of a cold plan's routing; it is kept from
    one stall to the next instead. Between two stalls the formulas a block may draw on only lose members and unsettled
    quantities, so the last peeling mostly holds again: each formula it left out is tried
    first with the quantity that let it go then (its witness: a quantity no other formula
    still in play mentions), else with another such quantity, and only those none lets go are
    peeled anew, with counts. A formula goes only when it has such a quantity at that moment,
    and what is left has none: the same formulas as a peeling from scratch (the formulas no
    peeling removes do not depend on the order). O(formulas) for a stall like the last,
    with the quantities' holders kept as quantities settle and formulas leave."""

    def __init__(self, unsettled: dict[str, list[str]], members: Iterable[str]):
        self.unsettled = unsettled                  # the propagation's, kept by it
        self.holders: dict[str, set[str]] = {}      # quantity -> the members it is unsettled in
        for fid in members:
            for q in unsettled[fid]:
                self.holders.setdefault(q, set()).add(fid)
        self.order: list[tuple[str, str]] = []      # the last peeling: (formula, witness)

    def settled(self, q: str) -> None:
        """``q`` is settled: it lets no formula go any more."""
        self.holders.pop(q, None)

    def leave(self, fid: str) -> None:
        """Formula ``fid`` is no longer a member (call after its settled quantities left it)."""
        for q in self.unsettled[fid]:
            held = self.holders.get(q)
            if held is not None:
                held.discard(fid)

    def core(self, formulas: list[FormulaSpec]) -> list[FormulaSpec]:
        """Of the members ``formulas``, those no peeling removes (in their order)."""
        unsettled, holders = self.unsettled, self.holders
        alive = {f.id for f in formulas}
        removed: set[str] = set()
        order: list[tuple[str, str]] = []

        def lonely(fid: str, q: str) -> bool:
            held = holders[q]
            return len(held) == 1 or all(g == fid or g in removed or g not in alive for g in held)

        left, tried = [], set()
        for fid, witness in self.order:
            if fid not in alive:
                continue
            tried.add(fid)
            qs = unsettled[fid]
            if witness not in qs or not lonely(fid, witness):
                witness = next((q for q in qs if lonely(fid, q)), "")
            if witness:
                removed.add(fid)
                order.append((fid, witness))
            else:
                left.append(fid)
        left += [f.id for f in formulas if f.id not in tried]
        if left:
            self._peel(left, removed, order)
        self.order = order
        return [f for f in formulas if f.id not in removed]

    def _peel(self, left: list[str], removed: set[str], order: list[tuple[str, str]]) -> None:
        """Peel the formulas ``left`` (the members not removed) from scratch, with counts and
        a work list (O(their size)), adding to ``removed`` and ``order``."""
        counts: dict[str, int] = {}
        held: dict[str, list[str]] = {}
        for fid in left:
            for q in self.unsettled[fid]:
                counts[q] = counts.get(q, 0) + 1
                held.setdefault(q, []).append(fid)
        work = []
        for fid in left:
            witness = next((q for q in self.unsettled[fid] if counts[q] == 1), "")
            if witness:
                work.append((fid, witness))
        while work:
            fid, witness = work.pop()
            if fid in removed:
                continue
            removed.add(fid)
            order.append((fid, witness))
            for q in self.unsettled[fid]:
                counts[q] -= 1
                if counts[q] == 1:
                    work.extend((g, q) for g in held[q] if g not in removed)


def _ready_blocks(candidates: list[FormulaSpec], settled: dict) -> list[tuple[list[FormulaSpec], list[str]]]:
    """Blocks of the stalled system that the settled quantities make solvable, in order.

    ``candidates``: the formulas that may join a block, the dangling ones left out
    (:meth:`_Peeling.core`). The matching may only pair a formula with a quantity it can be
    solved for; the order of blocks follows every unsettled quantity a formula mentions. A
    formula that needs a quantity nothing here can determine (a default rule whose input is
    unknown) cannot fire in this round; it is dropped and the decomposition redone, so that it
    cannot take a quantity that a real block needs in the matching.
    """
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


def find_route(formulas: list[FormulaSpec], target: str, given: Iterable[str],
              defaults: Iterable[str] = (), zero: Iterable[str] = (), diagnose: bool = True,
              limits: Mapping[str, str] | None = None, exclude: Iterable[str] = (),
              hints: DiagnosisHints | None = None, memo: dict | None = None) -> Route:
    """Route the derivation of ``target`` from ``given`` (and, only if needed, ``defaults``).

    Coefficient defaults are admitted only when the given values alone cannot reach the
    target, and default rules among ``formulas`` (``d_ffn = 4 d_model`` unless given) only when
    the coefficient defaults are not enough either. ``exclude`` names defaults and default
    rules not to use (see :func:`alternatives`).
    ``zero`` names defaults whose value is 0 (a term that vanishes): the diagnosis never
    proposes a route that would have to divide by one.
    ``limits`` maps slack quantities to what their value at the limit asks (memory_headroom:
    "0 GB for the largest value that fits"): the diagnosis offers them first.
    ``memo``: the caller's store of propagations, for many questions over the same formulas
    (one library's; see :func:`_propagated`).

    Returns
    -------
    Route
        The steps from the knowns to ``target``, and the given values and defaults they use.

    Raises
    ------
    UnderdeterminedError
        ``target`` cannot be reached: it names the smallest sets of extra quantities that
        would do (with ``diagnose=False``, a bare one: the search for those sets is the
        costly part).
    """
    given = set(given)
    exclude = set(exclude)
    formulas = [f for f in formulas if f.id not in exclude]
    # the target's own default is never an answer: `solve pp n_gpus=64 dp=8 tp=2` is 4, not 1
    defaults = set(defaults) - given - {target} - exclude
    stages = _stages(formulas, target)
    for stage_formulas, soft in ((fs, defaults if soft else set()) for fs, soft in stages):
        settled = _propagated(stage_formulas, given, soft, target, memo)
        if target in settled.cost:
            break
    if target not in settled.cost:
        if not diagnose:
            raise UnderdeterminedError(f"cannot determine {target}")
        raise _underdetermined(formulas, target, given, defaults, set(zero), dict(limits or {}), hints)
    return _extract(settled, target, given, defaults, {f.id for f in formulas if f.default_rule})


def _propagated(formulas: list[FormulaSpec], given: set[str], soft: set[str], target: str,
                memo: dict | None) -> _Settled:
    """``propagate(formulas, given, soft, stop_at=target)``; with a ``memo`` (formula ids
    identify formulas in it: one library's), the propagation run to the end and kept, for the
    next question over the same formulas and knowns (a planner asks the step time and the
    memory of one layout, each failing the same stages first). The route to the target is the
    same either way: every quantity is settled once, and what settles after the target
    changes nothing settled before it. O(1) for a question asked before."""
    if memo is None:
        return propagate(formulas, given, soft, stop_at=target)
    ids = tuple(f.id for f in formulas)
    key = (ids, frozenset(given), frozenset(soft))
    hit = _recall(memo, key)
    if hit is None:
        index = _recall(memo, ("index", ids))   # the same formulas under other knowns
        if index is None:
            index = _keep(memo, ("index", ids), _index(formulas))
        hit = _keep(memo, key, propagate(formulas, given, soft, index=index))
    return hit


# propagations (and formula indexes) a memo keeps, the most recently used: enough for the
# questions asked together (a plan's option combination: two targets over the same formulas,
# each failing the same stages: at most ~12 entries), not the ~300 of a whole plan (each
# ~1,000 entries, which the collector would walk until the process ends). Three plans run no
# more propagations with 16 than with no bound.
MEMO_SIZE = 16


def _recall(memo: dict, key: tuple):
    """``memo[key]`` (now the most recently used), or None."""
    hit = memo.pop(key, None)
    if hit is not None:
        memo[key] = hit
    return hit


def _keep(memo: dict, key: tuple, value):
    """Keep ``value`` under ``key``, forgetting the least recently used beyond MEMO_SIZE."""
    memo[key] = value
    while len(memo) > MEMO_SIZE:
        del memo[next(iter(memo))]
    return value


def _stages(formulas: list[FormulaSpec], target: str) -> list[tuple[list[FormulaSpec], bool]]:
    """The formula sets tried in turn, each with whether coefficient defaults are admitted.

    Laws alone; then with coefficient defaults; then default rules ("d_ffn = 4 d unless
    given"), which assume a relation nobody stated; and only last a default rule for the target
    itself (Chinchilla's n_tokens = 20 N when nothing else gives n_tokens). Each stage is tried
    first without, then with the consequences of the laws (GPU-hours = C / (MFU P), which needs
    no GPU count), so that a question the laws answer keeps its derivation from first principles.
    """
    consequences = [f for f in formulas if f.consequence]
    premises = [f for f in formulas if not f.consequence]
    laws = [f for f in premises if not f.default_rule]
    own_rules = {f.id for f in premises if f.default_rule and f.solvability.get(target) == "explicit"}
    others = [f for f in premises if f.id not in own_rules]
    return [(stage + extra, soft) for stage, soft in ((laws, False), (laws, True), (others, True), (premises, True))
            for extra in ([], consequences) if not extra or consequences]


MAX_ALTERNATIVES = 24


def alternatives(formulas: list[FormulaSpec], plan: Route, given: Iterable[str], defaults: Iterable[str],
                 typed: Iterable[str]) -> list[tuple[frozenset, Route]]:
    """Derivations that use given values where ``plan`` uses defaults: (excluded defaults and
    rules, plan) pairs, those leaving the fewest ``typed`` values unused first, then those with
    the fewest defaults. Empty when ``plan`` leaves no typed value unused or none does better.

    A default (coefficient or rule) may stand where a given value would do: `tp_y` from
    `tp = tp_x tp_y` with the default tp = 1 ignores a given layer_params_per_gpu that fixes
    tp. The defaults the plan uses are taken away, one more at a time (breadth first, at most
    MAX_ALTERNATIVES plans). Whether an alternative is better is a question of numbers (do the
    defaults contradict the unused values?), which the caller answers. O(MAX_ALTERNATIVES)
    propagations.
    """
    given, typed = set(given), set(typed)
    defaults = set(defaults) - given - {plan.target}

    def unused(p: Route) -> int:
        return sum(q in typed for q in p.unused)

    if unused(plan) == 0:
        return []
    queue = deque([frozenset([x]) for x in (*plan.defaults, *plan.default_rules)])
    seen = set(queue)
    found: dict[tuple, tuple[frozenset, Route]] = {}
    tried = 0
    while queue and tried < MAX_ALTERNATIVES:
        excluded = queue.popleft()
        tried += 1
        try:
            p = find_route(formulas, plan.target, given, defaults, diagnose=False, exclude=excluded)
        except UnderdeterminedError:
            continue
        if unused(p) < unused(plan):
            found.setdefault((p.steps, p.defaults), (excluded, p))
        for x in (*p.defaults, *p.default_rules):
            more = excluded | {x}
            if more not in seen:
                seen.add(more)
                queue.append(more)
    return sorted(found.values(), key=lambda e: (unused(e[1]), len(e[1].defaults) + len(e[1].default_rules)))


def _extract(settled: _Settled, target: str, given: set, defaults: set, rules: Collection[str] = frozenset()) -> Route:
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
    ordered = tuple(sorted(steps, key=steps.__getitem__))
    used_given = tuple(sorted(q for q in needed if q in given))
    used_defaults = tuple(sorted(q for q in needed if q in defaults and settled.producer.get(q) is None))
    unused = tuple(sorted(given - needed))
    used_rules = tuple(fid for s in ordered for fid in s.formulas if fid in rules)
    return Route(target=target, steps=ordered, given=used_given, defaults=used_defaults, unused=unused,
                default_rules=used_rules)


# -- diagnosis ---------------------------------------------------------------------------------

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
    ``seconds``: the time budget of the whole search.
    """

    known: frozenset = frozenset()
    verify: Callable[[list[str], Route], bool] | None = None
    seconds: float = DEFAULT_DIAGNOSIS_LIMIT
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
    """The sets of extra quantities that would settle a target, best first, and whether the
    search ran to its end (False: the time budget cut it short)."""

    sets: list[list[str]]
    complete: bool


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
    of 0 is not offered (it would divide by 0); a route through a block is offered only if
    ``hints.verify`` accepts it.

    The search works on the system left after propagating the given values (settled
    quantities count as known), so each trial is a fraction of a full plan; it stops at
    ``hints.seconds`` with what it has (``complete=False``). O(candidates^3) trials at worst.
    """
    hints = hints or DiagnosisHints()
    found: list[tuple] = []
    # the search's own budget ends it quietly with what it found; a question's limit that runs
    # out meanwhile still ends the question
    restated: list[tuple] = []
    with bounded(hints.seconds) as limit:
        _search(formulas, target, set(given), set(defaults), set(zero), list(preferred), hints, found, restated)
    found = found or restated
    found.sort(key=lambda t: t[:6])
    return Diagnosis([f[6] for f in found[:MAX_SETS]], not limit.expired)


def _search(formulas, target, given, defaults, zero, preferred, hints, found, restated) -> None:
    """The search of :func:`missing_sets`, appending (tier, size, not-usual, not-preferred, defaults,
    rank, set) records to ``found`` as it goes (so that a time limit keeps what was found), and
    those of sets that only restate the answer to ``restated``."""
    by_id = {f.id: f for f in formulas}
    # tiers: known quantities without the main-input assumptions, known ones with them, any
    plain = [f for f in formulas if not (f.default_rule and _lhs(f) in hints.assumptions)]
    systems = []
    for fs, soft in ((plain, defaults - hints.assumptions), (formulas, defaults)):
        settled = set(propagate(fs, given, soft).cost)
        systems.append((settled, [f for f in fs if any(q not in settled for q in f.quantities)]))
    near = [q for q in _candidates(systems[1][1], target, systems[1][0]) if q not in hints.avoid]
    slack = [q for q in preferred if q not in systems[1][0] and q != target and q not in near]
    ranked = slack + near
    rank = {q: i for i, q in enumerate(ranked)}
    known = [q for q in ranked if q in hints.known or q in slack]
    tiers = [(known, systems[0]), (known, systems[1]), ([q for q in ranked if q not in hints.known], systems[1])]
    preferred_set = set(preferred)
    verified: dict[frozenset, bool] = {}
    indexes = [_index(live) for _, live in systems]
    system = systems[0]

    def settles(extra) -> Route | None:
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
        if len(combo) == 1 and _restates(plan, combo[0], target, system[0], hints.units, by_id):
            restated.append((tier, 1, True, True, 0, rank[combo[0]], list(combo)))
            return False
        if any(step.is_block for step in plan.steps) and hints.verify is not None:
            key = frozenset(combo)
            if key not in verified:
                verified[key] = bool(hints.verify(list(combo), plan))
            if not verified[key]:
                return False
        # how many defaults the route leans on, counted on the whole question: default rules and
        # defaults of what people choose (tp = 1, a token count), not calibrated coefficients (a
        # forward model's dozen constants make it no less the natural route)
        whole = propagate(formulas, given | set(combo), defaults, stop_at=target)
        leaning = 0
        if target in whole.cost:
            route = _extract(whole, target, given | set(combo), defaults)
            leaning = len(route.default_rules) + sum(q in hints.assumptions or q in hints.inputs
                                                     for q in route.defaults)
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
    for sets ran out of time (and says so rather than claim there is none)."""
    known = (", ".join(sorted(given)) if len(given) <= 8 else
             f"the {len(given)} values known (given, or from the presets)") or "nothing"
    if not sets:
        if not complete:
            return UnderdeterminedError(f"cannot determine {target} from {known}; the search for what else to "
                                        "give ran out of its time budget (`symcalc show " + target + "` lists "
                                        "the formulas that give it)", [])
        return UnderdeterminedError(f"cannot determine {target} from {known}: no combination of other values "
                                    f"settles it; give {target} itself", [])
    limits = limits or {}
    options = " | ".join(", ".join(f"{q} ({limits[q]})" if q in limits else q for q in s) for s in sets)
    return UnderdeterminedError(
        f"cannot determine {target} from {known}: also give {'one of: ' if len(sets) > 1 else ''}{options}",
        sets)
