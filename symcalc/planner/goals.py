"""Planning backwards: the best layout at each of several GPU counts, and the count that meets
the plan's goals (a deadline, a budget, a throughput target)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import numpy as np

from symcalc.errors import QueryError
from symcalc.planner.onecount import _result, _row, _search, _fill_metrics, _space, _Search
from symcalc.planner.result import GpuScan, PlanResult, PlanRow
from symcalc.planner.setup import _read, _Setup

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.registry import Library


def _goal(values: dict, lib: Library) -> dict:
    if values.get("train_time") is not None:
        if values.get("n_tokens") is None:
            raise QueryError("--deadline needs the training tokens: --tokens (the model has none published)")
        return {"kind": "deadline", "value": _read(lib, "train_time", values["train_time"]), "raw": str(values["train_time"])}
    if values.get("total_cost") is not None:
        if values.get("gpu_hour_price") is None or values.get("n_tokens") is None:
            raise QueryError("--budget needs a GPU-hour price (gpu_hour_price=\"2 USD/hour\") and --tokens")
        return {"kind": "budget", "value": _read(lib, "total_cost", values["total_cost"]), "raw": str(values["total_cost"])}
    if values.get("tokens_per_second") is not None:
        return {"kind": "throughput", "value": _read(lib, "tokens_per_second", values["tokens_per_second"]),
                "raw": str(values["tokens_per_second"])}
    return {}



def _scan(n: int, goal: dict, values: dict, common: _Setup, searches: dict) -> GpuScan:
    """The best layout at ``n`` GPUs, its metrics, and whether it meets ``goal``."""
    q = common.q
    s = _search(n, common)
    searches[n] = s
    best = _row(s, int(s.order[0]), 1, q, values, detail=False) if len(s.order) else None
    if best is not None:
        _fill_metrics([best], q, s.shape, values)
    sc = GpuScan(n_gpus=n, best=best, searched=s.space.total, fitting=len(s.order))
    kind, target = goal["kind"], goal["value"]
    m = best.metrics if best is not None else {}
    if best is None:
        sc.meets = False
    elif kind == "deadline":
        sc.meets = m.get("train_time", np.inf) <= target
    elif kind == "budget":
        sc.meets = m.get("total_cost", np.inf) <= target
    else:
        sc.meets = m.get("tokens_per_second", 0) >= target
    return sc


DENSE_SCAN = 12     # at most this many valid counts between two coarse ones are all searched; more are bisected


def _refine(scans: list[GpuScan], goal: dict, values: dict, common: _Setup, searches: dict) -> list[GpuScan]:
    """Every node multiple between the coarse counts of a range where the goal flips: the best
    time falls as GPUs are added, so the fewest GPUs that meet a deadline (or a throughput) lie
    between the last coarse count that misses and the first that meets; the most GPUs a budget
    pays for (the fastest plan within it) between the last that meets and the first that misses.
    Counts with no valid layout (dp must divide the batch, tp the heads, ...) are dropped before
    any evaluation; the rest are all searched when there are at most DENSE_SCAN of them, else
    bisected, O(log k) searches for k candidates. Returns the scans it added."""
    meets = [bool(sc.meets) for sc in scans]
    if goal["kind"] == "budget":
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
    candidates = [n for n in range((lo // step + 1) * step, hi, step) if _has_layouts(n, common)]
    if len(candidates) <= DENSE_SCAN:      # few: try them all (the best time is not monotone in
        return [_scan(n, goal, values, common, searches) for n in candidates]   # odd factorings)
    added: list[GpuScan] = []
    while candidates:
        mid = len(candidates) // 2
        sc = _scan(candidates[mid], goal, values, common, searches)
        added.append(sc)
        # the boundary lies above a count on the low side's answer, below one on the other's
        candidates = candidates[mid + 1:] if bool(sc.meets) == low_side_meets else candidates[:mid]
    return added


def _goal_missed(scans: list[GpuScan], found: list[tuple[GpuScan, PlanRow]], goal: dict, values: dict, top: int,
                 t0: float, model: str | None, hardware: str, options: dict[str, str], common: _Setup,
                 searches: dict[int, _Search]) -> PlanResult:
    """No count tried meets the goal: an answer, not an error (the command exits 1). The plan of
    the count that comes closest (the fastest for a deadline, the cheapest for a budget, the most
    token/s for a throughput), its best layouts as ``closest``, and what it lacks in ``message``."""
    tried = ", ".join(str(sc.n_gpus) for sc in scans)
    kind = goal["kind"]
    if not found:
        res = _result(searches[scans[-1].n_gpus], values, top, t0, model, hardware, options, common)
        res.message = f"no layout fits at any of the GPU counts tried ({tried}); " + res.message
    else:
        if kind == "deadline":
            sc, row = min(found, key=lambda f: f[1].metrics["train_time"])
            lacks = (f"no GPU count tried ({tried}) trains in {goal['raw']}: the fastest, {sc.n_gpus} GPUs "
                     f"({row.label()}), takes {row.metrics['train_time'] / 86400:.4g} day "
                     f"({row.metrics['train_time'] / goal['value']:.3g}x the deadline); give a larger range "
                     "(--gpus A:B) or more time")
        elif kind == "budget":
            sc, row = min(found, key=lambda f: f[1].metrics["total_cost"])
            lacks = (f"no GPU count tried ({tried}) stays within {goal['raw']}: the cheapest, {sc.n_gpus} GPUs "
                     f"({row.label()}), costs {row.metrics['total_cost']:,.0f} USD "
                     f"({row.metrics['total_cost'] - goal['value']:,.0f} USD over)")
        else:
            sc, row = max(found, key=lambda f: f[1].metrics["tokens_per_second"])
            lacks = (f"no GPU count tried ({tried}) reaches {goal['raw']}: the most, {sc.n_gpus} GPUs "
                     f"({row.label()}), reaches {row.metrics['tokens_per_second']:,.0f} token/s "
                     f"({row.metrics['tokens_per_second'] / goal['value']:.3g}x the target)")
        res = _result(searches[sc.n_gpus], values, top, t0, model, hardware, options, common)
        res.closest, res.rows, res.message = res.rows, [], lacks
    res.scan, res.goal = scans, {**goal, "chosen_gpus": None, "met": False}
    res.seconds = time.perf_counter() - t0
    return res


def _has_layouts(n: int, common: _Setup) -> bool:
    """Whether any valid layout of ``n`` GPUs exists (the rules alone, nothing evaluated)."""
    return _space(n, common)[1].size > 0


def _backwards(counts: list[int], goal: dict, values: dict, top: int, t0: float, model: str | None, hardware: str,
               options: dict[str, str], common: _Setup, span: bool = False) -> PlanResult:
    searches: dict[int, _Search] = {}
    scans = [_scan(n, goal, values, common, searches) for n in counts]
    kind = goal["kind"]
    if span:
        scans = sorted(scans + _refine(scans, goal, values, common, searches), key=lambda sc: sc.n_gpus)
    found = [(sc, sc.best) for sc in scans if sc.best is not None]     # (count, its best layout)
    meeting = [(sc, row) for sc, row in found if sc.meets]
    if not meeting:
        return _goal_missed(scans, found, goal, values, top, t0, model, hardware, options, common, searches)
    if kind == "budget":
        chosen = min(meeting, key=lambda f: f[1].metrics["train_time"])[0]
    else:
        chosen = min(meeting, key=lambda f: f[0].n_gpus)[0]
    res = _result(searches[chosen.n_gpus], values, top, t0, model, hardware, options, common)
    res.scan, res.goal = scans, {**goal, "chosen_gpus": chosen.n_gpus}
    res.seconds = time.perf_counter() - t0
    return res
