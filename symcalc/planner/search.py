"""Plan a run: enumerate the layouts, evaluate them over arrays, keep those that fit, rank.

:func:`plan` is ``symcalc.plan``: one GPU count gives the top layouts there; a list or range
of counts with goals (``deadline``, ``budget``, ``throughput``, any of them together) plans
backwards: the best layout at each count, and the count that meets every goal (the fewest GPUs
when a deadline or a throughput is among them, the fastest plan within a budget alone), with
the goals that bind there (:mod:`symcalc.planner.goals`). Every number comes from the library's
formulas: the step time and memory derivations of :mod:`symcalc.planner.evaluate`, and the
metrics (days, GPU-hours, cost, MFU) solved from the step time.
"""

from __future__ import annotations

import functools
import time
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ParamSpec
from collections.abc import Callable, Mapping

from symcalc import cache
from symcalc.library.loading import default_library
from symcalc.library.presets import find_preset
from symcalc.planner.evaluate import Question
from symcalc.planner.goals import _backwards, _goal
from symcalc.planner.onecount import _result, _search, command_line
from symcalc.planner.result import PlanResult
from symcalc.planner.setup import (
    GOAL_VALUES,
    LAYOUT_DIMS,
    MAX_GPUS,
    GpuCounts,
    PlanError,
    RawValue,
    _checked_arguments,
    _counts,
    _evidence,
    _facts,
    _fixed_dims,
    _given_values,
    _headroom,
    _plan_options,
    _Setup,
    parse_gpus,
    plan_run,
    whole_number,
)
from symcalc.planner.space import MAX_MICRO_BATCH, MAX_VIRTUAL_STAGES, searched_options
from symcalc.planner.stacks import narrow

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.registry import Library

__all__ = ["MAX_GPUS", "GpuCounts", "PlanError", "RawValue", "command_line", "parse_gpus", "plan", "whole_number"]

_P = ParamSpec("_P")


def _freed(common: _Setup, name: str, lib: Library, options: dict, max_virtual_stages: int) -> _Setup | None:
    """``common`` with the option ``name`` searched over every value the stack runs instead of
    the values the question fixed, or None when it was not narrowed (or the stack runs no other).
    O(1): the search itself is the caller's."""
    every = searched_options(lib).get(name)
    if every is None or set(common.searched_opts.get(name, every)) >= set(every):
        return None
    searched = {**common.searched_opts, name: every}
    fixed = {k: list(v) for k, v in common.fixed.items()}
    requires = narrow(lib, options, fixed, searched, max_virtual_stages)
    if set(searched[name]) <= set(common.searched_opts[name]):
        return None
    return replace(common, fixed=fixed, searched_opts=searched, requires=requires, freed=None)


def _bundled(search: Callable[_P, PlanResult]) -> Callable[_P, PlanResult]:
    """``search`` with the derivations it reads and makes kept as one cache entry
    (symcalc.cache.bundled): a plan's ~120 derivations share most of their steps. The bundle
    is the library's and the run's (model, hardware, options): plans of one run share it, and
    each entry in it is keyed by its own question, whatever the bundle's key."""
    @functools.wraps(search)
    def bundled_search(*args: _P.args, **kwargs: _P.kwargs) -> PlanResult:
        first = [*args, None, None]
        lib: Any = kwargs.get("library") or default_library()
        options: Any = kwargs.get("options") or {}
        fingerprint = getattr(lib, "fingerprint", None)
        # (arguments of the wrong type are the search's to refuse: then no bundle)
        key = None if fingerprint is None or not isinstance(options, Mapping) else cache.key_of(
            fingerprint, "plan", str(kwargs.get("model", first[0])), str(kwargs.get("hardware", first[1])),
            *sorted(f"{k}={v}" for k, v in options.items()))
        # the collector paused for the whole search (it was for the evaluation alone): the
        # routing, derivations and answers it builds live until it ends, and the passes over
        # them (0.25 s of a cold 405B plan, three full collections) freed nothing; after, one
        # young collection looks at what it made (symcalc.cache.collector_paused)
        with cache.collector_paused(), cache.bundled(key):
            return search(*args, **kwargs)
    return bundled_search


@_bundled
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

    ``gpus``: a count, or (with ``deadline``, ``budget`` or ``throughput``, one or several: the
    plan meets them all and says which binds) a list or a range "A:B". ``tokens``: the training tokens (for days, GPU-hours and cost; default the model
    preset's n_tokens). ``global_batch_size`` in sequences (or ``global_batch_tokens=`` in
    ``values``), ``seq_len`` (default the model's). ``options``: fixed options
    (``zero_stage="3"`` fixes what is otherwise searched; ``attention_kernel``, ``precision``
    ... as in solve). ``values`` (a dict, e.g. the command line's NAME=VALUE pairs, whose names
    may be anything) and ``named`` (keywords): other given values; a layout quantity (tp, pp,
    cp, dp, ep, micro_batch_size, virtual_stages) fixes that dimension (an int or a list of
    ints).
    ``memory_headroom``: memory each GPU keeps free beyond the counted memory (default 5 % of gpu_memory; the memory is the stack's memory_figure, device for every real stack, unless the options say). ``by``: time,
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
    common = replace(common, freed=lambda name: _freed(common, name, lib, options, max_virtual_stages))
    if goal:
        span = isinstance(gpus, str) and ":" in gpus
        res = _backwards(counts, goal, values, top, t0, model, hardware, options, common, span=span)
    else:
        res = _result(_search(counts[0], common), values, top, t0, model, hardware, options, common)
    res.stack, res.stack_given = options.get("stack", ""), stack_given
    res.run = plan_run(lib, options, stack_given, model, hardware)
    if tokens_note:
        res.notes.append(tokens_note)
    return res
