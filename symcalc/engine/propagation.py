"""Propagation: the shortest-derivation search that settles quantities from the knowns.

Knuth's generalisation of Dijkstra's algorithm to AND-OR graphs (Knuth 1977): a formula whose
quantities are all settled but one, and which can be solved for that one, settles it at cost
1 + the sum of its inputs' costs; given values cost 0, coefficient defaults ``DEFAULT_COST``,
a default rule (an estimate) ``RULE_COST``. When it stalls, the blocks of laws the settled
quantities make solvable settle together (Dulmage-Mendelsohn, block triangular order). See
symcalc.engine.routing for the stages a question goes through, and
shared/notes/engine-notes.md section 3.

Purely structural (no sympy). Its own module because routing a question and diagnosing an
underdetermined one (symcalc.engine.diagnosis) both run it.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterable

from symcalc.engine.peeling import _Peeling
from symcalc.engine.route import Step, _Settled
from symcalc.engine.structure import (
    block_triangular_order,
    dulmage_mendelsohn,
    maximum_matching,
)
from symcalc.library.records import FormulaSpec

DEFAULT_COST = 1000
RULE_COST = 100 * DEFAULT_COST    # an estimate: dearer than any number of conventions


def _index(formulas: Iterable[FormulaSpec]) -> dict[str, list[FormulaSpec]]:
    by_quantity: dict[str, list[FormulaSpec]] = {}
    for f in formulas:
        for q in f.quantities:
            by_quantity.setdefault(q, []).append(f)
    return by_quantity


def propagate(formulas: list[FormulaSpec], hard: set[str], soft: Iterable[str] = frozenset(),
              stop_at: str | None = None, index: dict[str, list[FormulaSpec]] | None = None,
              given: set[str] | None = None, asked: str | None = None) -> _Settled:
    """Settle every quantity the formulas determine from ``hard`` (cost 0) and ``soft`` knowns.

    ``given``: the values the user gave, which bridges (``from_given``) may read; ``hard`` when
    None. A search that counts settled quantities as hard passes the given ones here, so that
    a bridge never reads a derived value. ``asked`` (``stop_at`` when None): the question's
    target, which meets a bridge's condition as a given value would (see
    :meth:`_Propagation.bridge_open`).

    Returns costs, the producing Step of each derived quantity (None for knowns) and the order
    of settlement. Stops early once ``stop_at`` is settled. O((F + Q) log(F + Q)) per round of
    propagation, plus one block analysis per stall.
    """
    return _Propagation(formulas, hard, soft, index, given, stop_at if asked is None else asked).run(stop_at)


class _Propagation:
    """The state of one :func:`propagate`: the heap of offers, what is settled, and what the
    block analysis at each stall reads, kept as quantities settle (the steps share all of it,
    hence one object rather than functions passing a dozen locals around)."""

    __slots__ = ("by_quantity", "bridged", "asked", "remaining", "cost", "producer", "order", "tie", "heap",
                 "estimates", "unsettled", "open_to_blocks", "peeling", "by_lhs", "with_rules",
                 "law_defines", "blocks_changed")

    def __init__(self, formulas: list[FormulaSpec], hard: set[str], soft: Iterable[str],
                 index: dict[str, list[FormulaSpec]] | None, given: set[str] | None, asked: str | None = None):
        self.by_quantity = _index(formulas) if index is None else index  # the caller's, when it plans often
        self.bridged = set(hard if given is None else given)
        self.asked = asked
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
        self.unsettled = {f.id: list(f.quantities) for f in formulas}
        self.open_to_blocks = open_to_blocks = {
            f.id: f for f in formulas if len(f.quantities) >= 2 and not f.consequence
            and self.bridge_open(f, None)}
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

    def bridge_open(self, f: FormulaSpec, solved_for: str | None) -> bool:
        """Whether ``f`` may be used, solved for ``solved_for`` (None: in a block), by its
        ``from_given``: an input named there must be a given value, never a derived one; it is
        solved for an input only when the question asks for that one (a bridge `tp_link_bandwidth =
        link_bandwidth` gives the link_bandwidth asked for, never one for the other groups'
        bridges to read); a name the equation does not hold is a condition, met by a given value
        or by the question's target (the latency of a link the user gives, or asks for, is its
        own link_latency, not the hardware's)."""
        bridged, asked = self.bridged, self.asked
        if f.from_given and solved_for not in (None, f.lhs_name, asked):
            return False        # backwards, a bridge gives only the quantity asked for
        for x in f.from_given:
            if x in bridged or (x == asked and (x == solved_for or x not in f.quantities)):
                continue
            return False
        return True

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
        if v in f.asked_backwards and v != self.asked and f.lhs_name in self.bridged:
            return      # from a given left side, solved for this input only when the question asks for it
        if f.solvability[v] != "none":
            inputs = tuple(x for x in f.quantities if x != v)
            if not self.bridge_open(f, v):
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
        # (estimated(q), of the step just taken: this runs for every quantity settled)
        if step is not None and len(step.formulas) == 1 and step.formulas[0] in self.estimates:
            for fid in self.by_lhs.get(q, ()):      # no law joins a block backwards from it
                if fid in open_to_blocks:
                    self.leave(fid)
        remaining, unsettled = self.remaining, self.unsettled
        for f in self.by_quantity.get(q, ()):
            fid = f.id
            left = remaining[fid] = remaining[fid] - 1
            unsettled[fid].remove(q)
            if fid in open_to_blocks:
                self.blocks_changed = True
                if left < 2:
                    self.leave(fid)
            if left == 1:
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
