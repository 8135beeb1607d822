"""Reading a plan's question: the given values, the run's fixed facts, what is fixed and searched.

:func:`symcalc.planner.search.plan` reads its arguments here into a :class:`_Setup` that every
GPU count of the plan shares (:mod:`symcalc.planner.onecount` searches one count,
:mod:`symcalc.planner.goals` plans backwards over several).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from symcalc.errors import QueryError, SymcalcError, UnderdeterminedError
from symcalc.library.presets import find_preset
from symcalc.planner.evaluate import Question
from symcalc.planner.validation import Evidence, evidence
from symcalc.planner.space import MAX_VIRTUAL_STAGES, space_data
from symcalc.query import fit, run
from symcalc.query.fit import default_margin
from symcalc.query.presetvalues import presets_of
from symcalc.query.layout_rules import FACT_SOURCES
from symcalc.query.values import read_value
from symcalc.query.requests import PLAN_BY
from symcalc.planner import dims

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.registry import Library

# the planner's memory is what the stack counts (every real stack sets memory_figure = device,
# nvidia-smi's figure: the tensors, the caching allocator's fitted reserve, the CUDA context and
# NCCL's buffers, formulas/stacks.toml), as solve counts it for the same run; the headroom left
# free on each GPU unless memory_headroom is given is for what that does not count: allocator
# spikes beyond the fitted reserve, workspaces of kernels and CUDA graphs, pipeline stages that
# hold more than the average (stated in the help and the README)
# the global batch when none is given: about 4M tokens (GPT-3's 3.2M, Llama 2's 4M), as a power of
# two of sequences; said in the plan's notes
DEFAULT_BATCH_TOKENS = 4 * 2**20
LAYOUT_DIMS = dims.names()      # the declared dimensions (formulas/planner/space.toml)
BY = PLAN_BY       # the ranks a plan may be asked by (shared with the requests of both faces)
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
    requires: tuple          # a stack's conditions on the layout: (reason, Condition, scope) (planner.stacks)
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
    #: this setup with one fixed option searched over all its values again (None: it was not
    #: narrowed), so that a "would fit with ..." hint is a search, never a guess
    freed: Callable[[str], _Setup | None] | None = None



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
    """The options as text, with the stack (the default one unless
    given: the step time runs under a stack, and the memory of the same layout is counted under
    it, its attention kernel, its loss), and whether the stack was given."""
    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in (options or {}).items()}
    search = space_data()["search"]
    # the workload as given (a value it does not have is refused with the other options, later)
    workload = out.get("workload")
    if "workload" in lib.options and workload in lib.options["workload"].values and workload not in search["workloads"]:
        raise QueryError(f"symcalc plan searches the layouts of {' and '.join(search['workloads'])} runs, not "
                         f"workload={workload}: {search['elsewhere'].get(workload, 'ask symcalc solve instead')}")
    stack_given = "stack" in out
    if "stack" in lib.options:
        out.setdefault("stack", lib.options["stack"].default)
    return out, stack_given


def plan_run(lib: Library, options: Mapping[str, str], stack_given: bool, model: str | None,
             hardware: str) -> run.Run:
    """The run a plan is about (symcalc.query.run), declared as every question's is: the
    workload its options say (training unless given), the stack it runs under and why (a plan
    is always about a run), its presets; the groups' degrees are what it searches."""
    settled = {w.option for w in fit.workloads(lib)}
    in_force = [name for name in lib.stacks if name in options]
    return run.declare(lib, options=lib.option_values(options), settled=settled, footprint=(), in_force=in_force,
                       stack_why=run.stack_reason(in_force, options if stack_given else (), True),
                       presets=presets_of(hardware, model))


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


def _counts(gpus: GpuCounts | None, values: dict, facts: _Facts, goal: list[dict], by: str) -> list[int]:
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
    sched = dims.schedule()         # virtual_stages: 1 is 1F1B, above 1 the interleaved schedule
    schedule = options.pop(sched.schedule_option, None)
    if schedule is not None:
        if schedule == "1f1b":
            fixed[sched.name] = [1]
        elif schedule == "interleaved":
            fixed[sched.name] = [v for v in fixed.get(sched.name, range(2, MAX_VIRTUAL_STAGES + 1)) if v > 1]
        else:       # another one-chunk schedule (dualpipe): the question's, its value checked there
            fixed[sched.name] = [1]
            options[sched.schedule_option] = schedule
    return fixed, searched


def _read(lib: Library, name: str, raw: RawValue) -> float:
    return float(read_value(lib.quantity(name), raw).magnitude)


def _preset_value(q: Question, name: str, lib: Library) -> RawValue | None:
    """``name``'s value as the question's presets state it under its options (their raw text;
    the hardware's first, as a question reads them: query.presetvalues), or None when none
    states it: a preset's value is what a question solving for it answers."""
    opts = dict(q.options)
    dtype = lib.compute_dtype(opts)
    for preset in presets_of(q.hardware, q.model):
        stated = preset.resolve(opts, dtype).get(name)
        if stated is not None:
            return stated[0]
    return None


def _facts(q: Question, values: dict, lib: Library) -> _Facts:
    """The run's fixed facts in base units: from the given values, else the presets."""
    found: dict[str, float | None] = {}
    for fact in ("n_heads", "n_kv_heads", "n_layers", "seq_len", "gpus_per_node", "gpu_memory", "n_experts",
                 "global_batch_size"):
        found[fact] = None
        # ep divides the routed experts: n_routed_experts, else n_experts (query.layout_rules.FACT_SOURCES)
        for name in FACT_SOURCES.get(fact, (fact,)):
            if name in values:
                found[fact] = _read(lib, name, values[name])
                break
            preset = _preset_value(q, name, lib)
            if preset is not None:          # what solving it would give, without a solve (~50 ms each)
                found[fact] = _read(lib, name, preset)
                break
            try:
                r = q.solve(name, {}, {})
                found[fact] = float(r.value) * r.factor
                break
            except UnderdeterminedError:       # the presets do not give it (any other error is the user's to see)
                continue
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
    return evidence(options.get("stack", ""), find_preset("hardware", hardware).key, precision, params, moe=q.moe)


def _headroom(values: dict, facts: _Facts, lib: Library) -> float:
    if values.get("memory_headroom") is not None:
        headroom = _read(lib, "memory_headroom", values["memory_headroom"])
        if headroom >= facts.gpu_memory:
            raise QueryError(f"memory_headroom = {values['memory_headroom']} leaves nothing of the GPU's "
                             f"{facts.gpu_memory / 1e9:.4g} GB to plan with; give less than gpu_memory")
        return headroom
    return default_margin(lib, facts.gpu_memory)     # the one margin: solve's fit verdict says it too
