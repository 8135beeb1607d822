"""The record of a plan (a :class:`Route` of :class:`Step` records) and how one is read off a propagation.

Apart from the search (symcalc.engine.propagation) and its callers (symcalc.engine.routing,
symcalc.engine.diagnosis) because all of them, and the derivations built on routes, use these
records: the records sit below every module that makes or reads them.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any


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


def asked_inverses(steps: Iterable[tuple[Iterable[Any], Iterable[str]]]) -> set[str]:
    """The quantities ``steps`` (pairs of a step's formulas and what it solves for) solve for
    through an inverse a formula keeps for when that quantity is the question
    (``asked_backwards``: the GPUs a job MTBF allows). A route through one answers that question,
    not another: a hint or a check does not offer it for another. O(steps)."""
    steps = [(tuple(formulas), tuple(solves)) for formulas, solves in steps]
    return {q for formulas, solves in steps for f in formulas for q in solves if q in f.asked_backwards}


@dataclass
class _Settled:
    cost: dict
    producer: dict
    order: dict


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
