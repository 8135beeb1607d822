"""Planning backwards: the best layout at each of several GPU counts, and the count that meets
the plan's goals (a deadline, a budget, a throughput target)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from symcalc.errors import QueryError
from symcalc.library.loading import default_library
from symcalc.planner.onecount import _result, _row, _search, _fill_metrics, _space, _Search
from symcalc.planner.result import GpuScan, PlanResult, PlanRow
from symcalc.planner.setup import _read, _Setup
from symcalc.planner.space import space_data
from symcalc.units.format import with_unit

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.registry import Library


GOALS: dict[str, dict] = space_data()["goals"]      # formulas/planner/space.toml


def _goal(values: dict, lib: Library) -> list[dict]:
    """Every goal given (formulas/planner/space.toml [goals]), in the data's order: {kind, value
    (base units), raw (as given), metric (what a layout's value is judged on: a deadline the
    wall-clock time with failures), keep, helps}. Empty: no goal. A goal whose metric needs a
    value not given is refused with the data's words for it."""
    out = []
    for kind, spec in GOALS.items():
        raw = values.get(spec["value"])
        if raw is None:
            continue
        if any(values.get(n) is None for n in spec["needs"]):
            raise QueryError(spec["missing"])
        out.append({"kind": kind, "value": _read(lib, spec["value"], raw), "raw": str(raw), "metric": spec.get("metric", spec["value"]),
                    "keep": spec["keep"], "helps": bool(spec["more_gpus_help"])})
    return out


def _met(goal: dict, row: PlanRow | None) -> bool:
    """Whether ``row`` (the best layout at a count, with its metrics) meets ``goal``."""
    if row is None:
        return False
    if goal["keep"] == "at_most":
        return bool(row.metrics.get(goal["metric"], np.inf) <= goal["value"])
    return bool(row.metrics.get(goal["metric"], 0.0) >= goal["value"])


def _scan(n: int, goals: list[dict], values: dict, common: _Setup, searches: dict) -> GpuScan:
    """The best layout at ``n`` GPUs, its metrics, and whether it meets every goal."""
    q = common.q
    s = _search(n, common)
    searches[n] = s
    best = _row(s, int(s.order[0]), 1, q, values, detail=False) if len(s.order) else None
    if best is not None:
        _fill_metrics([best], q, s.shape, values)
    sc = GpuScan(n_gpus=n, best=best, searched=s.space.total, fitting=len(s.order))
    sc.meets = all(_met(g, best) for g in goals)
    return sc


DENSE_SCAN = 12     # at most this many valid counts between two coarse ones are all searched; more are bisected


def _refine(scans: list[GpuScan], goal: dict, goals: list[dict], values: dict, common: _Setup,
            searches: dict) -> list[GpuScan]:
    """Every node multiple between the coarse counts of a range where ``goal`` flips: the best
    time falls as GPUs are added, so the fewest GPUs that meet a deadline (or a throughput) lie
    between the last coarse count that misses and the first that meets; the most GPUs a budget
    pays for (the fastest plan within it) between the last that meets and the first that misses.
    Counts with no valid layout (dp must divide the batch, tp the heads, ...) are dropped before
    any evaluation; the rest are all searched when there are at most DENSE_SCAN of them, else
    bisected, O(log k) searches for k candidates. Each scan added says whether it meets all of
    ``goals``. Returns the scans it added."""
    meets = [_met(goal, sc.best) for sc in scans]
    if not goal["helps"]:
        last = max((i for i, m in enumerate(meets) if m), default=None)
        if last is None or last == len(scans) - 1:
            return []
        lo, hi, low_side_meets = scans[last].n_gpus, scans[last + 1].n_gpus, True
    else:
        first = next((i for i, m in enumerate(meets) if m), None)
        if first is None or first == 0:
            return []
        lo, hi, low_side_meets = scans[first - 1].n_gpus, scans[first].n_gpus, False
    step = common.facts.gpus_per_node or 1
    candidates = [n for n in range((lo // step + 1) * step, hi, step) if n not in searches and _has_layouts(n, common)]
    if len(candidates) <= DENSE_SCAN:      # few: try them all (the best time is not monotone in
        return [_scan(n, goals, values, common, searches) for n in candidates]   # odd factorings)
    added: list[GpuScan] = []
    while candidates:
        mid = len(candidates) // 2
        sc = _scan(candidates[mid], goals, values, common, searches)
        added.append(sc)
        # the boundary lies above a count on the low side's answer, below one on the other's
        candidates = candidates[mid + 1:] if _met(goal, sc.best) == low_side_meets else candidates[:mid]
    return added


def _lacks(goal: dict, found: list[tuple[GpuScan, PlanRow]], tried: str) -> tuple[GpuScan, str]:
    """The count that comes closest to ``goal`` (the fastest on the wall clock for a deadline,
    the cheapest for a budget, the most token/s for a throughput) and what it lacks, in words."""
    kind, metric = goal["kind"], goal["metric"]
    if kind == "deadline":
        sc, row = min(found, key=lambda f: f[1].metrics[metric])
        return sc, (f"no GPU count tried ({tried}) trains in {goal['raw']} on the wall clock: the fastest, "
                    f"{sc.n_gpus} GPUs ({row.label()}), takes {row.metrics[metric] / 86400:.4g} day with failures "
                    f"({row.metrics[metric] / goal['value']:.3g}x the deadline); give a larger range "
                    "(--gpus A:B) or more time")
    if kind == "budget":
        sc, row = min(found, key=lambda f: f[1].metrics[metric])
        return sc, (f"no GPU count tried ({tried}) stays within {goal['raw']}: the cheapest, {sc.n_gpus} GPUs "
                    f"({row.label()}), costs {row.metrics[metric]:,.0f} USD with failures "
                    f"({row.metrics[metric] - goal['value']:,.0f} USD over)")
    sc, row = max(found, key=lambda f: f[1].metrics[metric])
    return sc, (f"no GPU count tried ({tried}) reaches {goal['raw']}: the most, {sc.n_gpus} GPUs "
                f"({row.label()}), reaches {row.metrics[metric]:,.0f} token/s "
                f"({row.metrics[metric] / goal['value']:.3g}x the target)")


def _apart(goals: list[dict], found: list[tuple[GpuScan, PlanRow]], tried: str) -> tuple[GpuScan, str]:
    """Each goal is met at some count tried, never all at one: where each is met, and the plan of
    the fewest GPUs that meet the goals more GPUs help (what the others then cost)."""
    where = []
    for g in goals:
        counts = [sc.n_gpus for sc, row in found if _met(g, row)]
        span = f"from {min(counts)} GPUs" if g["helps"] else f"up to {max(counts)} GPUs"
        where.append(f"the {g['kind']} {g['raw']} is met {span}")
    helps = [g for g in goals if g["helps"]]
    pick = [f for f in found if all(_met(g, f[1]) for g in helps)] or found
    sc = min(pick, key=lambda f: f[0].n_gpus)[0]
    return sc, (f"no GPU count tried ({tried}) meets every goal at once: {'; '.join(where)}; relax one of them "
                f"(shown: {sc.n_gpus} GPUs, the fewest that meet "
                f"{'the ' + ' and the '.join(g['kind'] for g in helps) if helps else 'any'})")


def _goal_missed(scans: list[GpuScan], found: list[tuple[GpuScan, PlanRow]], goals: list[dict], values: dict,
                 top: int, t0: float, model: str | None, hardware: str, options: dict[str, str], common: _Setup,
                 searches: dict[int, _Search]) -> PlanResult:
    """No count tried meets every goal: an answer, not an error (the command exits 1). With a
    goal no count meets, the plan of the count that comes closest to it (:func:`_lacks`); with
    goals each met somewhere but never together, where each is met (:func:`_apart`). Its best
    layouts as ``closest``, and what it lacks in ``message``."""
    tried = ", ".join(str(sc.n_gpus) for sc in scans)
    if not found:
        res = _result(searches[scans[-1].n_gpus], values, top, t0, model, hardware, options, common)
        res.message = f"no layout fits at any of the GPU counts tried ({tried}); " + res.message
    else:
        nowhere = [g for g in goals if not any(_met(g, row) for _, row in found)]
        sc, lacks = _lacks(nowhere[0], found, tried) if nowhere else _apart(goals, found, tried)
        res = _result(searches[sc.n_gpus], values, top, t0, model, hardware, options, common)
        res.closest, res.rows, res.message = res.rows, [], lacks
    res.scan, res.goal = scans, {**_summary(goals), "chosen_gpus": None, "met": False}
    res.seconds = time.perf_counter() - t0
    return res


def _has_layouts(n: int, common: _Setup) -> bool:
    """Whether any valid layout of ``n`` GPUs exists (the rules alone, nothing evaluated)."""
    return _space(n, common)[1].size > 0


def _summary(goals: list[dict]) -> dict:
    """The plan's goal record: one goal's own {kind, value, raw, ...}; several: kind "goals", raw
    naming each ("deadline 90 day, budget 2e7 USD"), and each under "goals"."""
    if len(goals) == 1:
        return {**goals[0], "goals": [dict(goals[0])]}
    return {"kind": "goals", "raw": ", ".join(f"{g['kind']} {g['raw']}" for g in goals), "value": None,
            "goals": [dict(g) for g in goals]}


def _backwards(counts: list[int], goals: list[dict], values: dict, top: int, t0: float, model: str | None,
               hardware: str, options: dict[str, str], common: _Setup, span: bool = False) -> PlanResult:
    """The best layout at each count (and, over a range, at the counts where a goal flips), and
    the plan at the count that meets every goal: the fewest GPUs when a goal is met by more of
    them (a deadline, a throughput), else the fastest (a budget alone); the goals that decide
    that count are said to bind."""
    searches: dict[int, _Search] = {}
    scans = [_scan(n, goals, values, common, searches) for n in counts]
    if span:
        for g in goals:
            scans = sorted(scans + _refine(scans, g, goals, values, common, searches), key=lambda sc: sc.n_gpus)
    found = [(sc, sc.best) for sc in scans if sc.best is not None]     # (count, its best layout)
    meeting = [(sc, row) for sc, row in found if sc.meets]
    if not meeting:
        return _goal_missed(scans, found, goals, values, top, t0, model, hardware, options, common, searches)
    fewest = any(g["helps"] for g in goals)
    if fewest:
        chosen = min(meeting, key=lambda f: f[0].n_gpus)[0]
    else:
        chosen = max(meeting, key=lambda f: f[1].metrics["tokens_per_second"])[0]
    res = _result(searches[chosen.n_gpus], values, top, t0, model, hardware, options, common)
    res.scan = scans
    res.goal = {**_summary(goals), "chosen_gpus": chosen.n_gpus,
                **_binding(goals, found, chosen, fewest, common)}
    if len(goals) > 1:
        res.notes.insert(0, res.goal["verdict"])
    res.seconds = time.perf_counter() - t0
    return res


def _binding(goals: list[dict], found: list[tuple[GpuScan, PlanRow]], chosen: GpuScan, fewest: bool,
             common: _Setup) -> dict:
    """Which goals bind at ``chosen``: those the next count tried on the far side misses (fewer
    GPUs when the plan is the fewest that meet the goals, more when it is the fastest within
    them); each goal's margin there; and the counts tried that meet every goal. A verdict in
    words for the plan's notes."""
    lib = common.q.library or default_library()
    side = [f for f in found if (f[0].n_gpus < chosen.n_gpus if fewest else f[0].n_gpus > chosen.n_gpus)]
    nxt = (max(side, key=lambda f: f[0].n_gpus) if fewest else min(side, key=lambda f: f[0].n_gpus)) if side else None
    binds = [g["kind"] for g in goals if nxt is not None and not _met(g, nxt[1])]
    row = chosen.best
    assert row is not None       # a count that meets the goals has a best layout
    margins, said = {}, []
    for g in goals:
        q = lib.quantities[g["metric"]]
        got = row.metrics[g["metric"]]
        margins[g["kind"]] = got / g["value"]
        said.append(f"{g['metric']} {with_unit(got / q.factor, q.display_unit)} "
                    f"({'within' if g['keep'] == 'at_most' else 'at least'} the {g['kind']} {g['raw']}, "
                    f"{100 * got / g['value']:.3g} % of it)")
    meeting = [sc.n_gpus for sc, _ in found if sc.meets]
    if binds and nxt is not None:
        why = (f"the {' and the '.join(binds)} bind{'s' if len(binds) == 1 else ''}: {nxt[0].n_gpus} GPUs "
               f"{'(fewer)' if fewest else '(more)'} miss{'es' if len(binds) == 1 else ''} "
               f"{'it' if len(binds) == 1 else 'them'}")
    else:
        why = (f"no goal binds within the counts tried: {chosen.n_gpus} GPUs is the "
               f"{'fewest' if fewest else 'most'} tried")
    verdict = (f"goals: {why}; at {chosen.n_gpus} GPUs the best layout has {'; '.join(said)}; the counts tried "
               f"that meet every goal: {', '.join(map(str, meeting))}")
    return {"binding": binds, "margins": margins, "meeting_gpus": meeting, "verdict": verdict}
