"""One GPU count of a plan: every valid layout evaluated over arrays, those that fit ranked,
the top rows detailed and judged against the published runs, and the PlanResult of that count."""

from __future__ import annotations

import math
import shlex
import time
from dataclasses import dataclass

import numpy as np

from symcalc.library.loading import default_library
from symcalc.planner import dims
from symcalc.planner.evaluate import MEMORY, STEP_TIME, Evaluation, Question, evaluate, metrics
from symcalc.planner.evaluate import row_given, row_options
from symcalc.planner.result import PlanResult, PlanRow
from symcalc.planner.setup import DEFAULT_BATCH_TOKENS, _Setup
from symcalc.planner.space import Shape, Space, enumerate_space, searched_options
from symcalc.planner.stacks import one_chunk_schedule
from symcalc.planner.validation import Evidence, comm_ratio, judge, regime_ok


@dataclass
class _Search:
    shape: Shape
    space: Space
    ev: Evaluation
    order: np.ndarray       # indices of fitting layouts, best first
    fitting: np.ndarray     # mask over space rows
    seconds: float
    planned: np.ndarray | None = None    # step time a layout is ranked by (s): the model's, or the frontier's
    frontier_time: np.ndarray | None = None   # per layout: compute time at its regime's frontier MFU (s)
    unsure: np.ndarray | None = None     # mask: no published regime covers the layout (judged per shown row too)
    biased: np.ndarray | None = None     # per layout: the model's step over 1 + its error on the nearest runs (s)


#: the largest GPU count a plan reads: beyond any cluster built (a typo of exponent, or inf)

def _space(n_gpus: int, setup: _Setup) -> tuple[Shape, Space]:
    """The run's shape at ``n_gpus`` and every valid layout of it (the rules alone)."""
    facts, fixed = setup.facts, setup.fixed
    shape = Shape(n_gpus=n_gpus, gpus_per_node=facts.gpus_per_node, n_heads=facts.n_heads,
                  n_kv_heads=facts.n_kv_heads, n_layers=facts.n_layers, seq_len=facts.seq_len,
                  global_batch_size=facts.global_batch_size,
                  n_experts=facts.n_experts if setup.q.moe else None, tp_across_nodes=setup.tp_across_nodes,
                  uneven_pp=setup.uneven_pp, max_micro_batch=setup.max_micro_batch,
                  max_virtual_stages=setup.max_virtual_stages, requires=setup.requires,
                  searched=tuple(searched_options(setup.q.library).items()))
    rest = dims.rest().name     # dp: follows from the others, narrowed after them
    narrowed = {k: v for k, v in fixed.items() if k != rest}
    return shape, enumerate_space(shape, narrowed, setup.searched_opts, dp_fixed=fixed.get(rest))


def _search(n_gpus: int, setup: _Setup) -> _Search:
    t = time.perf_counter()
    q, facts = setup.q, setup.facts
    shape, space = _space(n_gpus, setup)
    told = setup.progress
    # every line names the count searched (an inverse plan searches several, one after another)
    progress = None if told is None else (lambda text: told(f"{n_gpus:,} GPUs: {text}"))
    if progress is not None:
        progress(f"{space.size:,} valid layouts")
    ev = evaluate(space, q, shape.global_batch_size, shape.seq_len, progress) if space.size else \
        Evaluation(np.zeros(0), np.zeros(0), np.zeros(0, bool))
    limit = facts.gpu_memory - setup.headroom
    fitting = ev.inside & (ev.memory <= limit)
    s = _Search(shape, space, ev, np.zeros(0, dtype=np.int64), fitting, 0.0, planned=ev.step_time.copy())
    _judge_all(s, setup)
    s.order = _order(s, setup.by)
    s.seconds = time.perf_counter() - t
    return s


#: the model's resolution: layouts whose planned step times lie in the same band of this width
#: (relative, counted from the best) rank by simplicity, not by time
TIE_BAND = 0.01


def _judge_all(s: _Search, setup: _Setup) -> None:
    """Mark the layouts no published regime covers (``s.unsure``) and hold every fitting layout,
    a validated one included, to what was measured: its compute no faster than its frontier
    allows (the best MFU published in its regime: stack, silicon, precision, dense or MoE, ZeRO
    class; :func:`_cap`), and its step no faster than the model's error on the stack's runs
    shows (:func:`_as_its_runs`). The MFU is the model FLOPs of a step over n_gpus x peak x step
    time, so the time at a frontier is one layout's MFU x its step time / the frontier (one
    solve). O(layouts x regimes)."""
    ev = setup.evidence
    idx = np.flatnonzero(s.fitting)
    if ev is None or len(idx) == 0 or setup.by == "memory":
        return
    s.unsure = ~regime_ok(ev, s.space.columns, searched_options(setup.q.library))
    if not ev.frontiers or not setup.frontier:
        return
    first = int(idx[0])
    got = metrics(setup.q, s.ev.step_time[first:first + 1], np.array([s.shape.n_gpus]),
                  s.shape.global_batch_size, s.shape.seq_len, {})
    if "mfu" not in got or not np.isfinite(got["mfu"][0]):
        return
    work = float(got["mfu"][0]) * float(s.ev.step_time[first])      # MFU x step time: the same for every layout
    zero = np.asarray(s.space.columns["zero_stage"])
    front = np.full(len(zero), np.nan)
    for z, f in ev.frontiers.items():
        front[np.where(zero <= 1, 1, zero) == z] = work / f.mfu
    s.frontier_time = front
    _as_its_runs(s, idx, ev.bias)
    _cap(s, idx)


def _cap(s: _Search, rows: np.ndarray) -> None:
    """Plan ``rows`` no faster than their frontier: a layout planned (the model's step, already
    corrected by the model's error on the nearest runs: :func:`_as_its_runs`) at an MFU m above
    the frontier's f has the compute part of its step slowed by m / f (the model's kernels are as
    much too fast as its MFU is too high), the rest (exposed communication, the bubble, the
    optimizer) as planned, so planned times (and costs) still differ as the model's do across
    layouts and GPU counts, and a layout at the frontier is planned as the model has it. m / f is
    the frontier's time for the whole step (``frontier_time``) over the planned one. A layout
    whose compute part is not derived is planned at the frontier's time."""
    if s.frontier_time is None or s.planned is None or not len(rows):
        return
    base = s.biased[rows] if s.biased is not None else s.ev.step_time[rows]
    front = s.frontier_time[rows]
    compute = (s.ev.compute[rows] * base / s.ev.step_time[rows] if s.ev.compute is not None
               else np.full(len(rows), np.nan))
    over = np.maximum(front / base, 1.0)            # m / f, at least 1
    floor = np.where(np.isfinite(compute), base + compute * (over - 1), front)
    s.planned[rows] = np.where(np.isfinite(front), np.maximum(base, floor), base)


def _order(s: _Search, by: str) -> np.ndarray:
    """The fitting layouts, best first. By memory: memory, then step time. Otherwise by the
    planned step time in bands of TIE_BAND from the best, and within a band the simplest first:
    fewer parallel dimensions (tp, pp, cp, ep beyond 1, and ZeRO-3's sharding of the weights, a
    dimension of its own: FSDP), smaller cp and ep, lower ZeRO stage,
    less recompute, fewer virtual stages, no sequence parallelism; then the planned time, the
    model's time (among layouts ranked at the frontier: the one the model puts fastest) and memory.
    O(n log n)."""
    idx = np.flatnonzero(s.fitting)
    if len(idx) == 0:
        return idx
    mem = s.ev.memory[idx]
    if by == "memory":
        return idx[np.lexsort((s.ev.step_time[idx], mem))]
    c = s.space.columns
    t = (s.planned if s.planned is not None else s.ev.step_time)[idx]
    band = _bands(t, float(t.min()))
    # the simplest first, as space.toml's [layout] declares it (np.lexsort: the last key the most significant)
    simplest = dims.simplest_order({k: v[idx] for k, v in c.items()}, s.shape.option_values())
    return idx[np.lexsort((mem, s.ev.step_time[idx], t, *reversed(simplest), band))]


def _fastest(s: _Search) -> float:
    """The shortest planned step time of the fitting layouts (s): where the bands start. O(n)."""
    t = s.planned if s.planned is not None else s.ev.step_time
    return float(t[s.order].min()) if len(s.order) else math.inf


def _bands(t: np.ndarray, fastest: float) -> np.ndarray:
    """The band of TIE_BAND each planned step time ``t`` lies in, counted from ``fastest``
    (0: within 1 % of it): the rank key, for :func:`_order` and the rows alike. O(len(t))."""
    return np.floor(np.log(t / fastest) / np.log1p(TIE_BAND) + 1e-9).astype(np.int64)


def _band(s: _Search, i: int, fastest: float) -> int:
    """Layout ``i``'s band (:func:`_bands`). O(1)."""
    t = s.planned if s.planned is not None else s.ev.step_time
    return int(_bands(np.asarray(t[i]), fastest))


def _row(s: _Search, i: int, rank: int, q: Question, extra_metrics: dict, detail: bool) -> PlanRow:
    c = s.space.columns
    layout = {k: int(c[k][i]) for k in (*dims.present(q.moe), "n_gpus")}
    opts = row_options(c, i, searched_options(q.library), one_chunk_schedule(q.library, q.options))
    row = PlanRow(rank=rank, layout=layout, options=opts, step_time=float(s.ev.step_time[i]),
                  memory=float(s.ev.memory[i]), fits=bool(s.fitting[i]), index=i,
                  planned_time=float(s.planned[i]) if s.planned is not None else float(s.ev.step_time[i]))
    given = row_given(c, i, q.moe, s.shape.global_batch_size, s.shape.seq_len)
    row.command = command_line(q, given, opts)
    if detail:
        t = q.solve(STEP_TIME, given, opts, on_bounds="flag")
        m = q.solve(MEMORY, given, opts, on_bounds="flag")
        bd = t.breakdown_of(wholes=False)
        if bd:
            row.step_parts = {p["name"]: float(p["value"]) * t.factor for p in bd["parts"]}
        whole = t.breakdown
        row.breakdown_parts = whole["parts"] if whole else []
        mbd = m.breakdown_of(wholes=False)
        if mbd:
            row.memory_parts = _leaves(mbd["parts"], m.factor)
    return row


def _leaves(parts: list[dict], factor: float) -> dict[str, float]:
    """The innermost parts of a breakdown (memory: the tensors' parts, the allocator's reserve,
    the device's share), in base units: whatever the derivation's sums are made of."""
    out: dict[str, float] = {}
    for p in parts:
        if "parts" in p:
            out.update(_leaves(p["parts"], factor))
        else:
            out[p["name"]] = float(p["value"]) * factor
    return out


def command_line(q: Question, given: dict, opts: dict) -> str:
    """The `symcalc solve step_time ...` that gives this layout's step time (and, with the
    target changed, its memory): the same question the planner asked."""
    parts = ["symcalc", "solve", STEP_TIME] + (["--model", q.model] if q.model else []) + ["--hardware", q.hardware]
    parts += [f"{k}={v}" for k, v in {**q.values, **given}.items()]
    for k, v in {**q.options, **opts}.items():
        if k == "pipeline_schedule" and v == "interleaved":
            continue    # virtual_stages > 1 implies it
        parts += ["--option", f"{k}={v}"]
    return " ".join(shlex.quote(str(p)) for p in parts)


def _fill_metrics(rows: list[PlanRow], q: Question, shape: Shape, values: dict) -> None:
    if not rows:
        return
    got = metrics(q, np.array([r.planned_time or r.step_time for r in rows]), np.array([r.layout["n_gpus"] for r in rows]),
                  shape.global_batch_size, shape.seq_len,
                  {"n_tokens": values.get("n_tokens"), "gpu_hour_price": values.get("gpu_hour_price")})
    for j, r in enumerate(rows):
        r.metrics = {k: float(v[j]) for k, v in got.items()}
        if "mfu" in r.metrics:      # the model's own MFU (MFU goes as 1 / step time)
            r.metrics["model_mfu"] = r.metrics["mfu"] * (r.planned_time or r.step_time) / r.step_time


FAILURE_INPUTS = ("gpu_mtbf", "checkpoint_write_bandwidth", "n_writers", "recovery_time")


def _failure_note(q: Question, n_gpus: int) -> str:
    """What the days and cost with failures assume: each failure input as given, else the
    library's default (Llama 3's interruption rate, its storage), and the job MTBF it makes."""
    lib = q.library or default_library()
    said = []
    for name in FAILURE_INPUTS:
        text = q.values.get(name)
        said.append(f"{name} = {text if text is not None else lib.quantities[name].default}"
                    f"{'' if text is not None else ' (default)'}")
    mtbf = q.solve("mtbf", {"n_gpus": n_gpus}, {})
    return ("days_wall and cost_wall_USD count failures: " + ", ".join(said)
            + f", so a job MTBF of {mtbf.value:.4g} {mtbf.unit} on {n_gpus} GPUs; checkpoints of the model states at "
            "Young's interval; give these values (gpu_mtbf=..., recovery_time=...) to change them")


def _result(s: _Search, values: dict, top: int, t0: float, model: str | None, hardware: str, options: dict[str, str],
            common: _Setup) -> PlanResult:
    q = common.q
    rows = _top_rows(s, q, values, top, common.evidence)
    if common.by == "memory":       # ranked by memory, not in step-time bands
        for row in rows:
            row.band = None
    _fill_metrics(rows, q, s.shape, values)
    res = _base(s, rows, model, hardware, options, common, values)
    if any("wall_clock_time" in r.metrics for r in rows):
        res.notes.append(_failure_note(q, s.shape.n_gpus))
    if common.facts.batch_assumed:
        res.notes.append(f"global_batch_size was not given: {s.shape.global_batch_size} sequences of {s.shape.seq_len} "
                         f"tokens assumed (about {DEFAULT_BATCH_TOKENS / 2**20:g}M tokens, as GPT-3's 3.2M and Llama 2's "
                         "4M); --global-batch-size to set it")
    if not rows:
        res.closest, res.message = _nothing_fits(s, common, values)
    res.evidence = _evidence_summary(s, rows, common.evidence)
    res.seconds = time.perf_counter() - t0
    res.layouts_per_second = s.space.size / s.seconds if s.seconds else 0.0
    res.pareto = _pareto_arrays(s)
    return res


SETTLE_ROUNDS = 4     # re-rankings after a shown row's network time leaves its regime (each caps rows for good)


def _top_rows(s: _Search, q: Question, values: dict, top: int, ev: Evidence | None) -> list[PlanRow]:
    """The ``top`` best distinct layouts, each with its breakdown and its verdict. Layouts of one
    band with the same parallel degrees (tp, pp, cp, dp, ep, virtual stages) are one row, the
    simplest, that names the others (``equivalents``). A shown row whose network time puts it
    outside every published regime is capped like the rest and the layouts ranked again (at most
    SETTLE_ROUNDS times: each round only ever caps). O(top) solves a round."""
    detailed: dict[int, PlanRow] = {}
    rows: list[PlanRow] = []
    for round_ in range(SETTLE_ROUNDS + 1):
        rows = []
        groups: dict[tuple, PlanRow] = {}
        fastest = _fastest(s)
        for i in (int(x) for x in s.order):
            key = (_band(s, i, fastest),) + tuple(int(s.space.columns[d][i]) for d in dims.grouped())
            if key in groups:
                groups[key].equivalents.append(_row(s, i, 0, q, values, detail=False).label())
                continue
            if len(rows) == top:
                break
            row = detailed.get(i) or _row(s, i, len(rows) + 1, q, values, detail=True)
            detailed[i] = row
            row.rank, row.equivalents = len(rows) + 1, []
            groups[key] = row
            rows.append(row)
        if ev is None or s.unsure is None:
            break
        flipped, shown = [], np.array([row.index for row in rows], dtype=np.int64)
        before = s.planned[shown].copy() if s.planned is not None else None
        for row in rows:
            i = row.index
            row.verdict = judge(ev, row.layout, int(row.options["zero_stage"]), comm_ratio(row.breakdown_parts),
                                _choices(row)).as_dict()
            if not row.verdict["validated"] and not s.unsure[i]:
                s.unsure[i] = True
                flipped.append(i)
            elif row.verdict["validated"] and s.planned is not None and s.frontier_time is not None:
                # its own runs, not the whole stack's, say how far off the model is for it (only
                # where published runs adjust the plan at all: frontier=False ranks as modelled)
                s.planned[i] = s.ev.step_time[i]
                _as_its_runs(s, np.array([i]), row.verdict.get("bias"))
                _cap(s, np.array([i]))
        _cap(s, np.array(flipped, dtype=np.int64))
        changed = before is not None and s.planned is not None and np.any(s.planned[shown] != before)
        if not changed or round_ == SETTLE_ROUNDS:
            break
        s.order = _order(s, "time")
    fastest = _fastest(s)
    for row in rows:
        row.planned_time = float(s.planned[row.index]) if s.planned is not None else row.step_time
        row.band = _band(s, row.index, fastest)
        row.equivalents = [_difference(row.label(), e) for e in row.equivalents]
    return rows


def _as_its_runs(s: _Search, rows: np.ndarray, bias: float | None) -> None:
    """Plan ``rows`` no faster than published runs show the model to be: where the model is too
    fast on them (mean error ``bias`` < 0, predicted / published - 1), the step time over
    1 + bias (kept in ``biased``: the frontier's cap starts from it, :func:`_cap`). The runs are
    the stack's on this hardware and precision for every layout, and a validated layout's own
    runs for it (:func:`_top_rows`), the planned model's own first (validation.nearest_runs).
    Only ever slower: a model too slow there keeps its own time. O(rows)."""
    if s.planned is None or not len(rows):
        return
    step = s.ev.step_time[rows]
    if s.biased is None:
        s.biased = s.ev.step_time.copy()
    b = float("nan") if bias is None else float(bias)
    s.biased[rows] = step / (1 + b) if -1 < b < 0 else step      # (NaN compares false: no bias)
    s.planned[rows] = np.maximum(s.planned[rows], s.biased[rows])


def _choices(row: PlanRow) -> dict[str, str]:
    """The choices validation matches besides the shape (regimes.toml), as the row has them
    (one the row does not have is left out: not matched)."""
    opts = row.options
    found = {"recompute": opts.get("recompute"), "sequence_parallel": opts.get("sequence_parallel"),
             "schedule": opts.get("pipeline_schedule")}
    return {k: v for k, v in found.items() if v is not None}


def _difference(label: str, other: str) -> str:
    """What ``other``'s label says that ``label``'s does not ("mbs2 zero2")."""
    mine = set(label.split())
    return " ".join(w for w in other.split() if w not in mine) or other


def _evidence_summary(s: _Search, rows: list[PlanRow], ev: Evidence | None) -> dict:
    """What the plan's verdicts rest on, for the renderers."""
    if ev is None:
        return {}
    return {"validated": sum(1 for r in rows if r.verdict.get("validated")), "shown": len(rows),
            "published_runs": len(ev.runs), "stack": ev.stack, "hardware": ev.hardware, "precision": ev.precision,
            "frontier_mfu": ev.frontier, "frontier_run": ev.frontier_run, "frontier_class": ev.frontier_class,
            "bias": ev.bias, "bias_runs": [r.id for r in ev.bias_runs], "bias_class": ev.bias_class,
            **_shown_frontier(ev, rows),
            "frontiers": {str(z): f.as_dict() for z, f in ev.frontiers.items()},
            "capped": sum(1 for r in rows if r.capped),
            "frontier_applied": s.frontier_time is not None}


def _shown_frontier(ev: Evidence, rows: list[PlanRow]) -> dict:
    """The frontier of the first row's ZeRO class (the one its cap would be), as the summary's
    frontier_mfu, frontier_run, frontier_class and frontier_note."""
    if not rows or not ev.frontiers:
        return {}
    z = max(int(rows[0].options.get("zero_stage", 1)), 1)
    f = ev.frontiers.get(z)
    return {"frontier_mfu": f.mfu, "frontier_run": f.run, "frontier_class": f.regime, "frontier_note": f.note} if f else {}


def _base(s: _Search, rows: list[PlanRow], model: str | None, hardware: str, options: dict[str, str], common: _Setup,
          values: dict) -> PlanResult:
    facts = common.facts
    ok = int(np.count_nonzero(s.ev.inside))
    rejected = dict(s.space.reasons())
    out_of_bounds = s.space.size - ok
    if out_of_bounds:
        rejected["the model's values leave their bounds (e.g. a negative time or memory)"] = out_of_bounds
    rejected.update(_memory_reasons(s, facts.gpu_memory))
    searched = {k: list(v) for k, v in searched_options(common.q.library).items()}
    searched.update({k: list(v) for k, v in common.searched_opts.items()})
    return PlanResult(model=model, hardware=hardware, n_gpus=s.shape.n_gpus, by=common.by, rows=rows,
                      searched=s.space.total, valid=s.space.size, evaluated_ok=ok,
                      fitting=int(np.count_nonzero(s.fitting)), rejected=rejected,
                      memory_limit=facts.gpu_memory - common.headroom, gpu_memory=facts.gpu_memory,
                      memory_headroom=common.headroom, global_batch_size=s.shape.global_batch_size,
                      seq_len=s.shape.seq_len,
                      given={"values": {k: str(v) for k, v in values.items()}, "options": dict(options),
                             "extra": dict(common.q.values),
                             "fixed": {k: list(v) for k, v in common.fixed.items()}},
                      searched_options=searched, combos=s.ev.combos,
                      tie_band=0.0 if common.by == "memory" else TIE_BAND)


def _memory_reasons(s: _Search, gpu_memory: float) -> dict[str, int]:
    """The layouts memory rejects, in two kinds: those over the GPU's memory, and those that fit
    it but not its margin (solve's fit verdict calls such a run tight: it fits, leaving less than
    the margin), so that a plan and a solve of one layout read its memory alike. O(layouts)."""
    within = s.ev.inside & ~s.fitting
    over = int(np.count_nonzero(within & (s.ev.memory > gpu_memory)))
    tight = int(np.count_nonzero(within)) - over
    out = {}
    if tight:
        out["fits gpu_memory but not the memory_headroom kept free (tight: --headroom 0GB ranks them)"] = tight
    if over:
        out["does not fit in gpu_memory"] = over
    return out


def _pareto_arrays(s: _Search) -> dict:
    """Every fitting layout as columns (layout quantities, option indices into the searched
    options' values, step_time and planned_time in s, memory in bytes, rank in the planner's
    order), in the order searched."""
    idx = np.flatnonzero(s.fitting)
    out = {k: v[idx] for k, v in s.space.columns.items()}
    out.update(step_time=s.ev.step_time[idx], memory=s.ev.memory[idx])
    planned = s.planned if s.planned is not None else s.ev.step_time
    position = np.zeros(len(s.fitting), dtype=np.int64)
    position[s.order] = np.arange(1, len(s.order) + 1)
    out.update(planned_time=planned[idx], rank=position[idx])     # rank: 1 = the planner's first
    return out


def _nothing_fits(s: _Search, common: _Setup, values: dict) -> tuple[list[PlanRow], str]:
    q, facts = common.q, common.facts
    limit = facts.gpu_memory - common.headroom
    if s.space.size == 0:
        reasons = sorted(s.space.reasons().items(), key=lambda kv: -kv[1])[:3]
        why = "; ".join(f"{n:,} layouts: {r}" for r, n in reasons)
        if not why:     # the fixed values left no candidate to count a layout against
            given = ", ".join(f"{k}={'|'.join(map(str, common.fixed[k]))}" for k in common.given_dims)
            why = (f"the values fixed ({given}) leave no candidate: each degree divides the GPU count "
                   f"({s.shape.n_gpus:,}), a micro-batch the global batch ({s.shape.global_batch_size:,})")
        return [], (f"no valid layout of {s.shape.n_gpus} GPUs: {why}. Try another GPU count "
                    "(a multiple of the node size and of what the batch allows), or fix fewer dimensions")
    ok = np.flatnonzero(s.ev.inside)
    if len(ok) == 0:
        return [], "every valid layout leaves the model's bounds"
    best = ok[np.argsort(s.ev.memory[ok])[:3]]
    closest = [_row(s, int(i), k + 1, q, values, detail=True) for k, i in enumerate(best)]
    c0 = closest[0]
    part = c0.largest_memory_part
    msg = (f"nothing fits on {s.shape.n_gpus} GPU{'s' if s.shape.n_gpus != 1 else ''}: memory limit {limit / 1e9:.4g} GB a GPU "
           f"(gpu_memory {facts.gpu_memory / 1e9:.4g} GB - memory_headroom {common.headroom / 1e9:.4g} GB); "
           f"the closest layout, {c0.label()}, needs {c0.memory / 1e9:.4g} GB ({(c0.memory - limit) / 1e9:.4g} GB over"
           + (f"; the largest part is {part[0]} = {part[1] / 1e9:.4g} GB" if part else "") + ")")
    hints = []
    if c0.memory <= facts.gpu_memory:
        hints.append(f"a smaller memory_headroom (it fits the GPU's {facts.gpu_memory / 1e9:.4g} GB, leaving "
                     f"{(facts.gpu_memory - c0.memory) / 1e9:.3g} GB: --headroom 0GB plans it)")
    n = s.shape.n_gpus
    for name in ("zero_stage", "recompute"):    # a fixed option searched again: a hint only if it fits
        freed = common.freed(name) if common.freed is not None else None
        more = _search(n, freed) if freed is not None else None
        if more is not None and len(more.order):
            r = _row(more, int(more.order[0]), 1, q, values, detail=False)
            hints.append(f"{name} searched, not fixed (best: {r.label()}, {r.memory / 1e9:.4g} GB, "
                         f"step {r.step_time:.4g} s)")
    mbs = dims.batch().name
    if common.fixed.get(mbs) and min(common.fixed[mbs]) > 1:
        hints.append(f"a micro-batch of 1 (excluded by the fixed {mbs})")
    # more GPUs: the same search at 2x, 4x, ... the count, until something fits
    for factor in (2, 4, 8, 16, 32, 64):
        more = _search(n * factor, common)
        if len(more.order):
            r = _row(more, int(more.order[0]), 1, q, values, detail=False)
            hints.append(f"{n * factor} GPUs (best there: {r.label()}, {r.memory / 1e9:.4g} GB, step {r.step_time:.4g} s)")
            break
    if hints:
        msg += ". It would fit with " + "; or ".join(hints)
    else:
        msg += (". Nothing fits up to 64x the GPUs either: a GPU with more memory (--hardware; the closest "
                f"layout needs {c0.memory / 1e9:.4g} GB), a shorter sequence or a smaller model")
    return closest, msg
