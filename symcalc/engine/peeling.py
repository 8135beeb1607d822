"""The formulas of a stalled propagation that can belong to a simultaneous block (see
:class:`_Peeling`): the one part of the block analysis kept from one stall to the next, in a
module of its own because its bookkeeping is independent of the search that calls it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable
from itertools import chain

from symcalc.library.records import FormulaSpec


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
        self.members = set(members)                 # the members left (see core)
        holders: defaultdict[str, set[str]] = defaultdict(set)
        for fid in self.members:
            for q in unsettled[fid]:
                holders[q].add(fid)
        self.holders = dict(holders)                # quantity -> the members it is unsettled in
        self.order: list[tuple[str, str]] = []      # the last peeling: (formula, witness)

    def settled(self, q: str) -> None:
        """``q`` is settled: it lets no formula go any more."""
        self.holders.pop(q, None)

    def leave(self, fid: str) -> None:
        """Formula ``fid`` is no longer a member (call after its settled quantities left it)."""
        self.members.discard(fid)
        for q in self.unsettled[fid]:
            held = self.holders.get(q)
            if held is not None:
                held.discard(fid)

    def core(self, formulas: list[FormulaSpec]) -> list[FormulaSpec]:
        """Of the members ``formulas``, those no peeling removes (in their order)."""
        unsettled, holders = self.unsettled, self.holders
        # every member asked about (the usual case, ``formulas`` are members): a holder is gone
        # only when removed, and the members are the formulas alive
        everyone = len(formulas) == len(self.members)
        alive = self.members if everyone else {f.id for f in formulas}
        removed: set[str] = set()
        order: list[tuple[str, str]] = []

        def lonely(fid: str, q: str) -> bool:
            held = holders[q]
            if len(held) == 1:
                return True
            for g in held:      # (a loop, not all(): this is the routing's innermost test)
                if g != fid and g not in removed and (everyone or g in alive):
                    return False
            return True

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
        unsettled, holders = self.unsettled, self.holders
        # (counted in C; who else holds a quantity is the members' holders, those still left)
        counts = Counter(chain.from_iterable(unsettled[fid] for fid in left))
        here = set(left)
        work = []
        for fid in left:
            for q in unsettled[fid]:
                if counts[q] == 1:
                    work.append((fid, q))
                    break
        while work:
            fid, witness = work.pop()
            if fid in removed:
                continue
            removed.add(fid)
            order.append((fid, witness))
            for q in unsettled[fid]:
                counts[q] -= 1
                if counts[q] == 1:     # one left holds it now: it may go (the others have)
                    work.extend((g, q) for g in holders[q] if g in here and g not in removed)
