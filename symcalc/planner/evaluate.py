"""The step time and the memory per GPU of every layout: solved once, evaluated over arrays.

For each combination of the discrete options a layout sets (ZeRO stage, recompute mode,
sequence parallelism, pipeline schedule) the planner asks :func:`symcalc.solve` for
``step_time`` and for ``total_memory_per_gpu`` once, for one layout of that combination, with
the layout's quantities (tp, pp, cp, dp, n_gpus, micro_batch_size, global_batch_size,
seq_len, virtual_stages, ep) given; one call of the evaluator
(:func:`symcalc.query.reuse.together`) then runs both compiled derivations over the arrays of
every layout of the combination at once, steps they share once, with one mask of where every
value stays inside its bounds. No Python loop runs per layout.

The metrics that follow from the step time (tokens_per_second, mfu, train_time, gpu_hours,
total_cost) are the library's formulas too: each is solved once with step_time given, and
all of them are evaluated in one call over the arrays of the layouts shown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc import budget, cache
from symcalc.planner import dims, prewarm
from symcalc.planner.space import Space, searched_options, space_data
from symcalc.planner.stacks import one_chunk_schedule
from symcalc.query.derivations import store_derivation
from symcalc.query.reuse import together
from symcalc.query.solve import solve_unshown

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.registry import Library
    from symcalc.query.results import Result

STEP_TIME: str = space_data()["evaluate"]["step_time"]
MEMORY: str = space_data()["evaluate"]["memory"]
# the compute part of a step (the frontier caps it, the rest of the step stays as modelled)
COMPUTE: str = space_data()["evaluate"]["compute"]
# what follows from the step time, and the values each needs besides it (formulas/planner/space.toml)
METRICS: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in space_data()["metrics"].items()}
# the pipeline schedule of a layout: 1F1B with one virtual stage, interleaved with more
SCHEDULES = ("1f1b", "interleaved")


@dataclass(frozen=True)
class Question:
    """What every layout of a search shares: presets, fixed values and options."""

    model: str | None
    hardware: str | None
    values: dict            # values given besides the layout (e.g. buffer_memory), as solve reads them
    options: dict           # options given (attention_kernel, precision, ...) besides the searched ones
    moe: bool = False
    library: Library | None = None
    # the answers every GPU count of one plan shares (an option combination's step time and
    # memory, the metrics' questions), solved once: their derivations depend on the names given
    # and the options, not on the layout's values, which the evaluator is given afresh
    solved: dict = field(default_factory=dict, compare=False, repr=False)

    def solve_once(self, key: tuple, make: Callable[[], object]) -> Any:
        """The answer kept under ``key``, made by ``make`` the first time."""
        if key not in self.solved:
            self.solved[key] = make()
        return self.solved[key]

    def solve(self, target: str, given: Mapping[str, object], options: Mapping[str, str],
              on_bounds: str = "raise") -> Result:
        """The answer to one of the plan's questions, unshown (symcalc.query.solve.solve_unshown):
        its value, derivation, steps and bound violations, without the findings a reader of one
        answer needs (``symcalc plan --explain`` asks symcalc.solve itself)."""
        return solve_unshown(target, {**self.values, **given}, options={**self.options, **options},
                             library=self.library, hardware=self.hardware, model=self.model, on_bounds=on_bounds)


def layout_names(has: tuple[str, ...], layout: Mapping[str, int]) -> tuple[str, ...]:
    """The layout quantities given to the step-time and memory questions (space.toml's
    ``[layout] given``): ``has`` the dimensions the run has, ``layout`` the layout's values."""
    return dims.given_names(set(has), layout)


def options_of(indices: dict[str, int], interleaved: bool, searched: dict[str, tuple[str, ...]],
               single: str = SCHEDULES[0]) -> dict[str, str]:
    """The options of one combination: ``indices`` into each searched option's values; the
    schedule interleaved, or ``single``, the run's one-chunk schedule (1F1B, or the stack's DualPipe)."""
    return {**{k: searched[k][int(indices[k])] for k in searched},
            "pipeline_schedule": SCHEDULES[1] if interleaved else single}


def row_given(columns: dict, i: int, moe: bool, shape_batch: int, seq_len: int) -> dict:
    """The layout of row ``i`` as given values (what `symcalc solve` is given for it)."""
    out: dict[str, int | str] = {}
    for name in layout_names(dims.present(moe), {k: int(columns[k][i]) for k in dims.names()}):
        if name == "global_batch_size":
            out[name] = shape_batch
        elif name == "seq_len":
            out[name] = f"{seq_len} token"
        else:
            out[name] = int(columns[name][i])
    return out


def row_options(columns: dict, i: int, searched: dict[str, tuple[str, ...]], single: str = SCHEDULES[0]) -> dict[str, str]:
    return options_of({k: columns[k][i] for k in searched}, bool(dims.interleaved(columns, i)), searched, single)


def combination_key(columns: dict, radices: dict[str, int]) -> np.ndarray:
    """Each layout's option combination as one integer: its columns' values (each below its count
    in ``radices``) as the digits of a mixed-radix number, the first the most significant. Distinct
    combinations get distinct keys whatever the counts, so a value added to an option in the data
    needs no code here."""
    key = np.zeros(len(next(iter(columns.values()))), dtype=np.int64)
    for name, count in radices.items():
        key = key * count + columns[name]
    return key


def option_key(columns: dict, searched: dict[str, tuple[str, ...]]) -> np.ndarray:
    """The option combination of every layout: the searched options' value indices and the schedule."""
    digits = {**{k: columns[k] for k in searched}, "interleaved": dims.interleaved(columns).astype(np.int64)}
    return combination_key(digits, {**{k: len(v) for k, v in searched.items()}, "interleaved": len(SCHEDULES)})


@dataclass
class Evaluation:
    """Per layout (the rows of ``space.columns``): step time in s, memory per GPU in bytes,
    and whether the model's values stay inside their bounds (``inside``)."""

    step_time: np.ndarray
    memory: np.ndarray
    inside: np.ndarray
    compute: np.ndarray | None = None     # s: the compute part of each step (NaN where not derived)
    combos: int = 0                       # option combinations solved
    templates: dict[int, tuple[Result, Result]] = field(default_factory=dict)   # combination -> (step, memory)


def evaluate(space: Space, q: Question, global_batch_size: int, seq_len: int,
             progress: Callable[[str], None] | None = None) -> Evaluation:
    """Every layout of ``space`` timed and sized, one solve per option combination (``progress``,
    if given, hears of each: the cold ones take seconds)."""
    c = space.columns
    n = space.size
    step = np.full(n, np.nan)
    mem = np.full(n, np.nan)
    inside = np.zeros(n, dtype=bool)
    compute = np.full(n, np.nan)
    key = option_key(c, searched_options(q.library))
    templates = {}
    combos = np.unique(key)
    firsts = {int(k): int(np.flatnonzero(key == k)[0]) for k in combos}
    # a cold plan: the second half of the combinations derived on a second core meanwhile
    later = [int(k) for k in combos[len(combos) // 2:]]
    lib = q.library
    child = None if lib is None else prewarm.start(
        lib, [partial(_templates, c, firsts[k], q, global_batch_size, seq_len) for k in later], budget.remaining())
    with cache.collector_paused():      # ~100 answers that live until the plan ends
        for done, k in enumerate(combos, 1):
            if child is not None and lib is not None and int(k) == later[0]:
                child.join(lib, lambda key_, value: store_derivation(lib, key_, *value))
                child = None
            if progress is not None:
                progress(f"solving option combination {done}/{len(combos)} on {space.total:,} layouts")
            rows = np.flatnonzero(key == k)
            t, m = templates[int(k)] = q.solve_once(("layout", int(k), global_batch_size, seq_len),
                                                    partial(_templates, c, int(rows[0]), q, global_batch_size, seq_len))
            arrays = _layout_arrays(c, rows, q.moe, global_batch_size, seq_len)
            got, ok = together((t, m), {**q.values, **arrays}, also=(COMPUTE,))
            step[rows] = got[t.target] * t.factor
            if COMPUTE in got:
                compute[rows] = got[COMPUTE]
            mem[rows] = got[m.target] * m.factor
            inside[rows] = ok
    return Evaluation(step_time=step, memory=mem, inside=inside, compute=compute, combos=len(templates),
                      templates=templates)


def _templates(columns: dict, first: int, q: Question, global_batch_size: int,
               seq_len: int) -> tuple[Result, Result]:
    """(step time Result, memory Result) of the layout in row ``first``: the derivations every
    layout of its option combination is evaluated through."""
    opts = row_options(columns, first, searched_options(q.library), one_chunk_schedule(q.library, q.options))
    given = row_given(columns, first, q.moe, global_batch_size, seq_len)
    return q.solve(STEP_TIME, given, opts, on_bounds="flag"), q.solve(MEMORY, given, opts, on_bounds="flag")


def _layout_arrays(columns: dict, rows: np.ndarray, moe: bool, global_batch_size: int, seq_len: int) -> dict:
    """The layout quantities of ``rows`` as arrays (one option combination's layouts)."""
    arrays = {}
    for name in layout_names(dims.present(moe), {k: int(columns[k][rows[0]]) for k in dims.names()}):
        if name == "global_batch_size":
            arrays[name] = np.full(len(rows), global_batch_size, dtype=np.int64)
        elif name == "seq_len":
            arrays[name] = np.full(len(rows), seq_len, dtype=np.int64)
        else:
            arrays[name] = np.ascontiguousarray(columns[name][rows])
    return arrays


def metrics(q: Question, step_time: np.ndarray, n_gpus: np.ndarray, global_batch_size: int, seq_len: int,
            extra: dict) -> dict[str, np.ndarray]:
    """tokens_per_second, mfu, train_time (s), gpu_hours (s of GPU time) and total_cost (USD)
    of layouts with these step times, by the library's formulas (those whose values are
    given: train_time and gpu_hours need n_tokens, total_cost also gpu_hour_price), in base
    units."""
    out: dict[str, np.ndarray] = {}
    if len(step_time) == 0:
        return out
    asked = [(target, needs) for target, needs in METRICS.items() if all(extra.get(x) is not None for x in needs)]
    if not asked:
        return out
    scalar = {STEP_TIME: f"{float(step_time[0])} s", "n_gpus": int(n_gpus[0]),
              "global_batch_size": global_batch_size, "seq_len": f"{seq_len} token"}
    results = q.solve_once(("metrics", tuple(t for t, _ in asked), global_batch_size, seq_len), lambda: [
        q.solve(target, {**scalar, **{x: extra[x] for x in needs}}, {}, on_bounds="flag") for target, needs in asked])
    arrays = {**q.values, **{x: extra[x] for _, needs in asked for x in needs},
              STEP_TIME: (np.asarray(step_time, dtype=float), "s"),
              "n_gpus": np.asarray(n_gpus, dtype=np.int64),
              "global_batch_size": np.full(len(step_time), global_batch_size, dtype=np.int64),
              "seq_len": np.full(len(step_time), seq_len, dtype=np.int64)}
    got, _ = together(results, arrays)
    return {r.target: got[r.target] * r.factor for r in results}
