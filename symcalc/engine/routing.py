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

The search itself is symcalc.engine.propagation (the block analysis's peeling,
symcalc.engine.peeling); the records it yields, symcalc.engine.route; what is missing when no
route exists, symcalc.engine.diagnosis. This module is the question's side: the stages tried in
turn, the memo of propagations, and the alternatives to a route that leans on defaults. The
records and the diagnosis are importable from here as before.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping

from symcalc.engine.diagnosis import (
    Diagnosis,
    DiagnosisHints,
    _underdetermined,
    missing_sets,
    underdetermined_error,
)
from symcalc.engine.propagation import DEFAULT_COST, RULE_COST, _index, propagate
from symcalc.engine.route import Route, Step, _extract, _Settled
from symcalc.errors import UnderdeterminedError
from symcalc.library.records import FormulaSpec

__all__ = ["DEFAULT_COST", "RULE_COST", "Diagnosis", "DiagnosisHints", "Route", "Step", "alternatives", "find_route",
           "missing_sets", "propagate", "underdetermined_error"]


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
    # a target a bridge names (see _Propagation.bridge_open: solved for it, or its condition)
    # opens it: the propagation is that target's own; any other target shares the one for these knowns
    asked = target if any(target in f.from_given or target in f.asked_backwards
                          or (f.from_given and target in f.quantities) for f in formulas) else None
    key = (ids, frozenset(given), frozenset(soft), asked)
    hit = _recall(memo, key)
    if hit is None:
        index = _recall(memo, ("index", ids))   # the same formulas under other knowns
        if index is None:
            index = _keep(memo, ("index", ids), _index(formulas))
        hit = _keep(memo, key, propagate(formulas, given, soft, index=index, asked=asked))
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
        # fewer given values left out; or others, through a block of equations solved together,
        # which its derivation may find singular (equations that share a fact) and plan again
        # without one: only evaluating tells what that route leaves out
        if unused(p) < unused(plan) or (set(p.unused) != set(plan.unused)
                                        and any(len(s.formulas) > 1 for s in p.steps)):
            found.setdefault((p.steps, p.defaults), (excluded, p))
        for x in (*p.defaults, *p.default_rules):
            more = excluded | {x}
            if more not in seen:
                seen.add(more)
                queue.append(more)
    return sorted(found.values(), key=lambda e: (unused(e[1]), len(e[1].defaults) + len(e[1].default_rules)))
