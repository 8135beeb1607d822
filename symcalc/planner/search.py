"""Plan a run: enumerate the layouts, evaluate them over arrays, keep those that fit, rank.

:func:`plan` is ``symcalc.plan``: one GPU count gives the top layouts there; a list or range
of counts with a goal (``deadline``, ``budget``, ``throughput``) plans backwards: the best
layout at each count, and the count that meets the goal (the fewest GPUs for a deadline or a
throughput, the fastest plan within a budget). Every number comes from the library's
formulas: the step time and memory derivations of :mod:`symcalc.planner.evaluate`, and the
metrics (days, GPU-hours, cost, MFU) solved from the step time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
import shlex
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from symcalc.errors import QueryError, SymcalcError, UnderdeterminedError
from symcalc.library.loading import default_library
from symcalc.library.presets import find_preset
from symcalc.planner.evaluate import MEMORY, STEP_TIME, Evaluation, Question, evaluate, metrics
from symcalc.planner.evaluate import row_given, row_options
from symcalc.planner.result import GpuScan, PlanResult, PlanRow
from symcalc.planner.stacks import narrow
from symcalc.planner.validation import Evidence, comm_ratio, evidence, judge, regime_ok
from symcalc.planner.space import (
    MAX_MICRO_BATCH,
    MAX_VIRTUAL_STAGES,
    Shape,
    Space,
    enumerate_space,
    searched_options,
    space_data,
)
from symcalc.query.values import read_value

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.registry import Library

# the planner's memory is nvidia-smi's figure (memory_figure = device: the tensors, the caching
# allocator's fitted reserve, the CUDA context and NCCL's buffers, formulas/peak_memory.toml)
# unless the options say otherwise; the headroom left free on each GPU unless memory_headroom is
# given is for what that does not count: allocator spikes beyond the fitted reserve, workspaces
# of kernels and CUDA graphs, pipeline stages that hold more than the average (stated in the help
# and the README)
PLAN_MEMORY_FIGURE = "device"
DEFAULT_HEADROOM_FRACTION = 0.05
# the global batch when none is given: about 4M tokens (GPT-3's 3.2M, Llama 2's 4M), as a power of
# two of sequences; said in the plan's notes
DEFAULT_BATCH_TOKENS = 4 * 2**20
LAYOUT_DIMS = tuple(space_data()["dimensions"])     # tp, pp, cp, dp, ep, micro_batch_size, virtual_stages
BY = ("time", "days", "gpu_hours", "cost", "memory")
# planner-only values: not part of the layout question
GOAL_VALUES = ("n_tokens", "gpu_hour_price", "memory_headroom", "global_batch_tokens", "tokens_per_second",
               "train_time", "total_cost")


# a given value as the caller writes it ("8", 8, 8.0, "90 day"), and the GPU counts of a plan:
# one such value (a count, "512,1024", "256:16384") or a list of counts
RawValue = str | int | float
GpuCounts = str | int | float | list[RawValue] | tuple[RawValue, ...]


class PlanError(SymcalcError):
    """Nothing to plan: no layout fits, or the question cannot be planned."""

    kind = "plan"


@dataclass(frozen=True)
class _Facts:
    """The run's fixed facts the rules and the memory limit read (from given values or presets)."""

    n_heads: int
    n_kv_heads: int
    n_layers: int
    seq_len: int            # tokens
    gpus_per_node: int
    gpu_memory: float       # bytes
    global_batch_size: int  # sequences
    n_experts: int | None
    batch_assumed: bool = False     # the global batch was not given: DEFAULT_BATCH_TOKENS


@dataclass(frozen=True)
class _Setup:
    """What every GPU count of one plan shares: the question, the facts, what is fixed, the
    memory headroom and the search's limits."""

    q: Question
    facts: _Facts
    fixed: dict[str, list[int]]
    searched_opts: dict[str, tuple[str, ...]]
    requires: tuple          # a stack's conditions on the layout: (reason, Condition) (planner.stacks)
    headroom: float          # bytes
    tp_across_nodes: bool
    uneven_pp: bool
    max_micro_batch: int
    max_virtual_stages: int
    by: str
    progress: Callable[[str], None] | None = None    # hears what the search is doing (a progress line)
    evidence: Evidence | None = None                 # the published runs layouts are judged by (planner.validation)
    frontier: bool = True                            # rank hypotheses no faster than the published frontier
    given_dims: tuple[str, ...] = ()                 # the layout dimensions the user fixed (tp=8, ...)


@dataclass
class _Search:
    shape: Shape
    space: Space
    ev: Evaluation
    order: np.ndarray       # indices of fitting layouts, best first
    fitting: np.ndarray     # mask over space rows
    seconds: float
    planned: np.ndarray | None = None    # step time a layout is ranked by (s): the model's, or the frontier's
    frontier_time: float | None = None   # step time at the frontier MFU (s), None without a frontier
    unsure: np.ndarray | None = None     # mask: no published regime covers the layout (judged per shown row too)


#: the largest GPU count a plan reads: beyond any cluster built (a typo of exponent, or inf)
MAX_GPUS = 10_000_000
LIMITS: dict[str, int] = space_data()["limits"]     # formulas/planner/space.toml


def whole_number(raw: RawValue, what: str, least: int = 1, most: int | None = None) -> int:
    """``raw`` as a whole number of at least ``least`` (and at most ``most``): an int, an
    integral float or its text. True/False, 8.5, inf, NaN and text that is not a number are
    refused with a QueryError naming ``what``, never truncated (8.5 GPUs is not 8)."""
    bad = QueryError(f"{what} is a whole number of at least {least}"
                     + (f" and at most {most:,}" if most is not None else "")
                     + f"; got '{str(raw)[:40]}{'...' if len(str(raw)) > 40 else ''}'")
    if isinstance(raw, (bool, np.bool_)):
        raise bad
    try:
        x = float(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError, OverflowError):        # OverflowError: an int of 400 digits
        raise bad from None
    if not math.isfinite(x) or x != int(x) or x < least or (most is not None and x > most):
        raise bad
    return int(x)


def parse_gpus(gpus: GpuCounts, gpus_per_node: int | None = None) -> list[int]:
    """GPU counts from an int, a list, "512,1024,2048" or a range "A:B": A, then every 2^k and
    3 x 2^k multiple of the node size (or of A) up to B. Raises QueryError for anything else,
    a count below 1 included."""
    counts = _gpu_counts(gpus, gpus_per_node)
    if not counts or min(counts) < 1:
        raise QueryError(f"--gpus: GPU counts are whole numbers of at least 1; got '{gpus}'")
    return counts


def _gpu_counts(gpus: GpuCounts, gpus_per_node: int | None) -> list[int]:
    def count(x: RawValue) -> int:
        try:
            return whole_number(x, "a GPU count", most=MAX_GPUS)
        except QueryError:
            raise QueryError(f"--gpus: GPU counts are whole numbers of at least 1 and at most {MAX_GPUS:,}; "
                             f"got '{x}'") from None
    if isinstance(gpus, (list, tuple)):
        return sorted({count(g) for g in gpus})
    if not isinstance(gpus, str):
        return [count(gpus)]
    text = gpus.strip()
    try:
        if ":" in text:
            lo, hi = (count(x) for x in text.split(":", 1))
            if hi < lo:
                raise ValueError
            unit = gpus_per_node or 1
            out = {lo, hi}
            for base in (1, 3):
                n = base * unit
                while n <= hi:
                    if n >= lo:
                        out.add(n)
                    n *= 2
            return sorted(out)
        return sorted({count(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise QueryError(f"--gpus: expected a count, a list (512,1024,2048) or a range (256:16384); got '{gpus}'") from None


def plan(model: str | None = None, hardware: str | None = None, gpus: GpuCounts | None = None, /, *,
         tokens: RawValue | None = None, global_batch_size: RawValue | None = None, seq_len: RawValue | None = None,
         gpus_per_node: RawValue | None = None, options: dict | None = None,
         by: str = "time", top: int = 10, memory_headroom: RawValue | None = None,
         gpu_hour_price: RawValue | None = None, deadline: RawValue | None = None,
         budget: RawValue | None = None, throughput: RawValue | None = None, tp_across_nodes: bool = False,
         uneven_pp: bool = True, max_micro_batch: int = MAX_MICRO_BATCH, max_virtual_stages: int = MAX_VIRTUAL_STAGES,
         library: Library | None = None, values: dict | None = None, progress: Callable[[str], None] | None = None,
         frontier: bool = True, **named: object) -> PlanResult:
    """Search every valid parallel layout of ``model`` on ``gpus`` x ``hardware`` and rank those
    that fit.

    ``gpus``: a count, or (with ``deadline``, ``budget`` or ``throughput``) a list or a range
    "A:B". ``tokens``: the training tokens (for days, GPU-hours and cost; default the model
    preset's n_tokens). ``global_batch_size`` in sequences (or ``global_batch_tokens=`` in
    ``values``), ``seq_len`` (default the model's). ``options``: fixed options
    (``zero_stage="3"`` fixes what is otherwise searched; ``attention_kernel``, ``precision``
    ... as in solve). ``values`` (a dict, e.g. the command line's NAME=VALUE pairs, whose names
    may be anything) and ``named`` (keywords): other given values; a layout quantity (tp, pp,
    cp, dp, ep, micro_batch_size, virtual_stages) fixes that dimension (an int or a list of
    ints).
    ``memory_headroom``: memory each GPU keeps free beyond the counted memory (default 5 % of gpu_memory; the memory is memory_figure = device unless the options say). ``by``: time,
    days, gpu_hours, cost (needs ``gpu_hour_price``) or memory. ``progress``: a function that is
    told, in a short line, what the search is doing (the command line shows it after a second).
    ``frontier``: rank a layout no published regime validates no faster than the best MFU
    published for its hardware, precision and size class (symcalc.planner.validation); False
    ranks every layout by the model's own step time (each row still says what validates it).
    """
    t0 = time.perf_counter()
    lib = library or default_library()
    top, max_micro_batch, max_virtual_stages = _checked_arguments(hardware, by, options, values, top, max_micro_batch,
                                                                  max_virtual_stages)
    assert hardware is not None       # refused above: narrows the type
    options, stack_given = _plan_options(options, lib)
    values = _given_values(lib, values, named, {
        "n_tokens": tokens, "gpu_hour_price": gpu_hour_price, "memory_headroom": memory_headroom, "seq_len": seq_len,
        "global_batch_size": global_batch_size, "gpus_per_node": gpus_per_node, "train_time": deadline,
        "total_cost": budget, "tokens_per_second": throughput})
    given_dims = tuple(k for k in LAYOUT_DIMS if k in values)
    fixed, searched_opts = _fixed_dims(values, options, searched_options(lib))
    requires = narrow(lib, options, fixed, searched_opts, max_virtual_stages)
    find_preset("hardware", hardware)     # unknown names first, with the closest names

    tokens_note = None
    if model is not None:
        preset = find_preset("model", model)
        if values.get("n_tokens") is None and "n_tokens" in preset.values:
            # the training tokens the model was published with (days, GPU-hours, cost and a
            # deadline are then known), said in the plan's notes
            values["n_tokens"], source = preset.values["n_tokens"]
            tokens_note = (f"n_tokens = {values['n_tokens']} from model {preset.key} ({source}); "
                           "--tokens to change")
    q0 = Question(model=model, hardware=hardware, values={}, options=options, library=lib)
    facts = _facts(q0, values, lib)
    moe = bool(facts.n_experts and facts.n_experts > 1)
    # given values the layout question takes as they are (shapes, gpus_per_node, buffer_memory, ...);
    # the planner gives seq_len, global_batch_size and n_gpus itself
    extra = {k: v for k, v in values.items() if k not in GOAL_VALUES and k not in fixed
             and k not in ("n_gpus", "seq_len", "global_batch_size")}
    q = Question(model=model, hardware=hardware, values=extra, options=options, moe=moe, library=lib)
    goal = _goal(values, lib)
    counts = _counts(gpus, values, facts, goal, by)
    headroom = _headroom(values, facts, lib)
    common = _Setup(q=q, facts=facts, fixed=fixed, searched_opts=searched_opts, requires=requires, headroom=headroom,
                    tp_across_nodes=tp_across_nodes, uneven_pp=uneven_pp, max_micro_batch=max_micro_batch,
                    max_virtual_stages=max_virtual_stages, by=by, progress=progress,
                    evidence=_evidence(q, lib, options, hardware), frontier=bool(frontier), given_dims=given_dims)
    if goal:
        span = isinstance(gpus, str) and ":" in gpus
        res = _backwards(counts, goal, values, top, t0, model, hardware, options, common, span=span)
    else:
        res = _result(_search(counts[0], common), values, top, t0, model, hardware, options, common)
    res.stack, res.stack_given = options.get("stack", ""), stack_given
    if tokens_note:
        res.notes.append(tokens_note)
    return res


# -- reading the question ----------------------------------------------------------------------

def _checked_arguments(hardware: str | None, by: object, options: object, values: object, top: RawValue,
                       max_micro_batch: RawValue, max_virtual_stages: RawValue) -> tuple[int, int, int]:
    """The whole-number arguments as ints, after refusing what cannot be planned at all."""
    top = whole_number(top, "top (the layouts to show)", most=LIMITS["max_top"])
    max_micro_batch = whole_number(max_micro_batch, "max_micro_batch", most=LIMITS["max_micro_batch"])
    max_virtual_stages = whole_number(max_virtual_stages, "max_virtual_stages", most=LIMITS["max_virtual_stages"])
    if not isinstance(by, str) or by not in BY:
        raise QueryError(f"--by must be one of {', '.join(BY)}; got '{by}'")
    if hardware is None:
        raise QueryError("a plan needs --hardware (see `symcalc list hardware`) and a model: --model (see "
                         "`symcalc list models`) or its shapes as values (d_model=..., n_layers=..., n_heads=...)")
    if options is not None and not isinstance(options, Mapping):
        raise QueryError(f"options is a mapping of option names to values (e.g. {{'zero_stage': '3'}}); "
                         f"got {type(options).__name__}")
    if values is not None and not isinstance(values, Mapping):
        raise QueryError(f"values is a mapping of quantity names to values; got {type(values).__name__}")
    return top, max_micro_batch, max_virtual_stages


def _plan_options(options: Mapping | None, lib: Library) -> tuple[dict[str, str], bool]:
    """The options as text, with the plan's memory figure and the stack (the default one unless
    given: the step time runs under a stack, and the memory of the same layout is counted under
    it, its attention kernel, its loss), and whether the stack was given."""
    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (options or {}).items()}
    out.setdefault("memory_figure", PLAN_MEMORY_FIGURE)
    stack_given = "stack" in out
    if "stack" in lib.options:
        out.setdefault("stack", lib.options["stack"].default)
    return out, stack_given


def _given_values(lib: Library, values: Mapping | None, named: Mapping[str, object],
                  keywords: Mapping[str, object]) -> dict:
    """Every given value by its quantity's name (aliases resolved): ``values``, the keyword
    arguments ``named`` and the plan's own keywords (``keywords``: quantity -> value or None).
    A value given twice is refused."""
    twice = sorted(set(values or {}) & set(named))
    if twice:
        raise QueryError(f"{twice[0]} is given twice")
    out = {**(values or {}), **named}
    for key, val in keywords.items():
        if val is not None:
            if key in out:
                raise QueryError(f"{key} is given twice")
            out[key] = val
    # aliases; UnknownNameError with suggestions
    named_values = {lib.quantity(raw).name: val for raw, val in out.items()}
    for name, val in named_values.items():
        # units and bounds, even of a value the plan may not use (a layout dimension is read as
        # whole numbers, or lists of them, by _fixed_dims)
        if name not in space_data()["dimensions"]:
            read_value(lib.quantities[name], val)
    return named_values


def _counts(gpus: GpuCounts | None, values: dict, facts: _Facts, goal: dict, by: str) -> list[int]:
    """The GPU counts to plan at, after refusing what the goal and ``by`` cannot answer."""
    counts = parse_gpus(gpus if gpus is not None else values["n_gpus"], facts.gpus_per_node) \
        if (gpus is not None or "n_gpus" in values) else None
    if not counts:
        raise QueryError("give the GPU count: --gpus N (or a list/range with --deadline, --budget or a throughput)")
    if len(counts) > 1 and not goal:
        raise QueryError("several GPU counts need a goal: --deadline, --budget or a throughput target "
                         "(tokens_per_second=...)")
    if by == "cost" and values.get("gpu_hour_price") is None:
        raise QueryError("--by cost needs a GPU-hour price: gpu_hour_price=\"2 USD/hour\"")
    if by in ("days", "gpu_hours") and values.get("n_tokens") is None:
        raise QueryError(f"--by {by} needs the training tokens: --tokens (the model has none published)")
    return counts


def _fixed_dims(values: dict, options: dict, all_searched: dict[str, tuple[str, ...]]) -> tuple[dict, dict]:
    fixed = {}
    for name in LAYOUT_DIMS:
        if name in values:
            raw = values.pop(name)
            items = raw if isinstance(raw, (list, tuple)) else str(raw).split(",") if isinstance(raw, str) else [raw]
            fixed[name] = [whole_number(x, f"{name} (or each of a list of them)", most=MAX_GPUS) for x in items]
    searched = {}
    for name, allowed in all_searched.items():
        if name in options:
            value = options.pop(name)
            chosen = tuple(dict.fromkeys(v.strip() for v in value.split(",")))    # a list restricts the search
            wrong = [v for v in chosen if v not in allowed]
            if wrong or not chosen:
                raise QueryError(f"option {name}={value}: expected one of {', '.join(allowed)} "
                                 "(or a list of them: 0,2)")
            searched[name] = chosen
    schedule = options.pop("pipeline_schedule", None)
    if schedule is not None:
        if schedule == "1f1b":
            fixed["virtual_stages"] = [1]
        elif schedule == "interleaved":
            fixed["virtual_stages"] = [v for v in fixed.get("virtual_stages", range(2, MAX_VIRTUAL_STAGES + 1)) if v > 1]
        else:
            raise QueryError(f"option pipeline_schedule={schedule}: the planner searches 1f1b and interleaved")
    return fixed, searched


def _read(lib: Library, name: str, raw: RawValue) -> float:
    return float(read_value(lib.quantity(name), raw).magnitude)


def _facts(q: Question, values: dict, lib: Library) -> _Facts:
    """The run's fixed facts in base units: from the given values, else the presets."""
    found: dict[str, float | None] = {}
    for name in ("n_heads", "n_kv_heads", "n_layers", "seq_len", "gpus_per_node", "gpu_memory", "n_experts",
                 "global_batch_size"):
        if name in values:
            found[name] = _read(lib, name, values[name])
            continue
        try:
            r = q.solve(name, {}, {})
            found[name] = float(r.value) * r.factor
        except UnderdeterminedError:       # the presets do not give it (any other error is the user's to see)
            found[name] = None
    seq_len = found["seq_len"]
    if "global_batch_tokens" in values and found["global_batch_size"] is None and seq_len:
        tokens = _read(lib, "global_batch_tokens", values["global_batch_tokens"])
        gbs = tokens / seq_len
        if abs(gbs - round(gbs)) > 1e-9:
            raise QueryError(f"global_batch_tokens = {tokens:g} token is not a whole number of "
                             f"{seq_len:g}-token sequences")
        found["global_batch_size"] = float(round(gbs))
    assumed = found["global_batch_size"] is None and bool(seq_len)
    if assumed and seq_len:
        found["global_batch_size"] = float(2 ** max(0, round(math.log2(DEFAULT_BATCH_TOKENS / seq_len))))
    if found["n_kv_heads"] is None:
        found["n_kv_heads"] = found["n_heads"]
    need = {"n_heads": "--model", "n_layers": "--model", "seq_len": "--seq-len", "gpus_per_node": "--gpus-per-node",
            "gpu_memory": "--hardware", "global_batch_size": "--global-batch-size"}
    missing = [f"{k} ({v})" for k, v in need.items() if found.get(k) is None]
    if missing:
        raise QueryError(f"cannot plan without {', '.join(missing)}")
    for name in ("seq_len", "global_batch_size"):
        size = found[name]
        if size is not None and size > LIMITS[name]:
            spec = lib.quantities[name]
            raise QueryError(f"{name} = {size / spec.factor:g}{' ' + spec.display_unit if spec.display_unit else ''} "
                             f"is beyond what a plan searches (at most {LIMITS[name]:,})")
    whole = {k: int(round(v)) for k, v in found.items() if v is not None and k != "gpu_memory"}
    return _Facts(n_heads=whole["n_heads"], n_kv_heads=whole["n_kv_heads"], n_layers=whole["n_layers"],
                  seq_len=whole["seq_len"], gpus_per_node=whole["gpus_per_node"],
                  gpu_memory=float(found["gpu_memory"] or 0.0), global_batch_size=whole["global_batch_size"],
                  n_experts=whole.get("n_experts"), batch_assumed=assumed)


def _evidence(q: Question, lib: Library, options: dict, hardware: str) -> Evidence:
    """The published runs this plan's layouts are judged by (planner.validation): its stack,
    hardware and precision, and the size class of its model (its parameters, when known)."""
    precision = options.get("precision", lib.options["precision"].default if "precision" in lib.options else "")
    try:
        r = q.solve("n_params", {}, {})
        params: float | None = float(r.value) * r.factor / 1e9
    except SymcalcError:
        params = None
    return evidence(options.get("stack", ""), find_preset("hardware", hardware).key, precision, params)


def _headroom(values: dict, facts: _Facts, lib: Library) -> float:
    if values.get("memory_headroom") is not None:
        headroom = _read(lib, "memory_headroom", values["memory_headroom"])
        if headroom >= facts.gpu_memory:
            raise QueryError(f"memory_headroom = {values['memory_headroom']} leaves nothing of the GPU's "
                             f"{facts.gpu_memory / 1e9:g} GB to plan with; give less than gpu_memory")
        return headroom
    return DEFAULT_HEADROOM_FRACTION * facts.gpu_memory


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


# -- one GPU count --------------------------------------------------------------------------------

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
    dims = {k: v for k, v in fixed.items() if k != "dp"}
    return shape, enumerate_space(shape, dims, setup.searched_opts, dp_fixed=fixed.get("dp"))


def _search(n_gpus: int, setup: _Setup) -> _Search:
    t = time.perf_counter()
    q, facts = setup.q, setup.facts
    shape, space = _space(n_gpus, setup)
    if setup.progress is not None:
        setup.progress(f"{n_gpus:,} GPUs: {space.size:,} valid layouts")
    ev = evaluate(space, q, shape.global_batch_size, shape.seq_len, setup.progress) if space.size else \
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
    """Mark the layouts no published regime covers (``s.unsure``) and rank those the model puts
    beyond the frontier (the best MFU published for the hardware, precision and size class) at
    the frontier's step time: a layout no one has run is not planned faster than anyone has.
    The MFU is the model FLOPs of a step over n_gpus x peak x step time, so the frontier's step
    time is one layout's MFU x its step time / the frontier (one solve). O(layouts x regimes)."""
    ev = setup.evidence
    idx = np.flatnonzero(s.fitting)
    if ev is None or len(idx) == 0 or setup.by == "memory":
        return
    s.unsure = ~regime_ok(ev, s.space.columns)
    if ev.frontier is None or not setup.frontier:
        return
    first = int(idx[0])
    got = metrics(setup.q, s.ev.step_time[first:first + 1], np.array([s.shape.n_gpus]),
                  s.shape.global_batch_size, s.shape.seq_len, {})
    if "mfu" not in got or not np.isfinite(got["mfu"][0]):
        return
    s.frontier_time = float(got["mfu"][0]) * float(s.ev.step_time[first]) / ev.frontier
    _cap(s, np.flatnonzero(s.unsure))


def _cap(s: _Search, rows: np.ndarray) -> None:
    """Rank ``rows`` no faster than the frontier."""
    if s.frontier_time is not None and s.planned is not None and len(rows):
        s.planned[rows] = np.maximum(s.ev.step_time[rows], s.frontier_time)


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
    band = np.floor(np.log(t / t.min()) / np.log1p(TIE_BAND) + 1e-9).astype(np.int64)
    ep = c["ep"][idx]
    dims = sum((c[d][idx] > 1).astype(np.int64) for d in ("tp", "pp", "cp")) + (ep > 1) + (c["zero_stage"][idx] == 3)
    return idx[np.lexsort((mem, s.ev.step_time[idx], t, c["sequence_parallel"][idx], c["virtual_stages"][idx], c["recompute"][idx],
                           c["zero_stage"][idx], ep, c["cp"][idx], dims, band))]


def _band(s: _Search, i: int) -> int:
    t = s.planned if s.planned is not None else s.ev.step_time
    best = float(t[s.order[0]])
    return int(math.floor(math.log(float(t[i]) / best) / math.log1p(TIE_BAND) + 1e-9))


def _row(s: _Search, i: int, rank: int, q: Question, extra_metrics: dict, detail: bool) -> PlanRow:
    c = s.space.columns
    layout = {k: int(c[k][i]) for k in (*LAYOUT_DIMS, "n_gpus")}
    if not q.moe:
        layout.pop("ep")
    opts = row_options(c, i, searched_options(q.library))
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
        for i in (int(x) for x in s.order):
            key = (_band(s, i),) + tuple(int(s.space.columns[d][i]) for d in ("tp", "pp", "cp", "dp", "ep", "virtual_stages"))
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
        flipped = []
        for row in rows:
            i = row.index
            row.verdict = judge(ev, row.layout, int(row.options["zero_stage"]),
                                comm_ratio(row.breakdown_parts)).as_dict()
            if not row.verdict["validated"] and not s.unsure[i]:
                s.unsure[i] = True
                flipped.append(i)
        capped = [i for i in flipped if s.frontier_time is not None and s.ev.step_time[i] < s.frontier_time]
        _cap(s, np.array(flipped, dtype=np.int64))
        if not capped or round_ == SETTLE_ROUNDS:
            break
        s.order = _order(s, "time")
    for row in rows:
        row.planned_time = float(s.planned[row.index]) if s.planned is not None else row.step_time
        row.equivalents = [_difference(row.label(), e) for e in row.equivalents]
    return rows


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
            "capped": sum(1 for r in rows if r.capped),
            "frontier_applied": s.frontier_time is not None}


def _base(s: _Search, rows: list[PlanRow], model: str | None, hardware: str, options: dict[str, str], common: _Setup,
          values: dict) -> PlanResult:
    facts = common.facts
    ok = int(np.count_nonzero(s.ev.inside))
    rejected = dict(s.space.reasons())
    out_of_bounds = s.space.size - ok
    if out_of_bounds:
        rejected["the model's values leave their bounds (e.g. a negative time or memory)"] = out_of_bounds
    too_big = ok - int(np.count_nonzero(s.fitting))
    if too_big:
        rejected["does not fit in gpu_memory - memory_headroom"] = too_big
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
                      searched_options=searched, combos=s.ev.combos)


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
    msg = (f"nothing fits on {s.shape.n_gpus} GPUs: memory limit {limit / 1e9:.4g} GB a GPU "
           f"(gpu_memory {facts.gpu_memory / 1e9:.4g} GB - memory_headroom {common.headroom / 1e9:.4g} GB); "
           f"the closest layout, {c0.label()}, needs {c0.memory / 1e9:.4g} GB ({(c0.memory - limit) / 1e9:.4g} GB over"
           + (f"; the largest part is {part[0]} = {part[1] / 1e9:.4g} GB" if part else "") + ")")
    hints = []
    fixed_opts = common.searched_opts
    if "3" not in fixed_opts.get("zero_stage", ("3",)):
        hints.append("ZeRO-3 (--option zero_stage=3 is excluded by the fixed zero_stage)")
    if "full" not in fixed_opts.get("recompute", ("full",)):
        hints.append("full recomputation (excluded by the fixed recompute)")
    if common.fixed.get("micro_batch_size") and min(common.fixed["micro_batch_size"]) > 1:
        hints.append("a micro-batch of 1 (excluded by the fixed micro_batch_size)")
    # more GPUs: the same search at 2x, 4x, ... the count, until something fits
    n = s.shape.n_gpus
    for factor in (2, 4, 8, 16, 32, 64):
        more = _search(n * factor, common)
        if len(more.order):
            r = _row(more, int(more.order[0]), 1, q, values, detail=False)
            hints.append(f"{n * factor} GPUs (best there: {r.label()}, {r.memory / 1e9:.4g} GB, step {r.step_time:.4g} s)")
            break
    if hints:
        msg += ". It would fit with " + "; or ".join(hints)
    else:
        msg += ". Nothing fits up to 64x the GPUs either: a larger GPU (--hardware) or a smaller memory_headroom"
    return closest, msg


# -- planning backwards -------------------------------------------------------------------------

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
