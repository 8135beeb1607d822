"""How sure a plan is: each layout against the published runs the step-time model was judged on.

The evidence is data, ``formulas/evidence/published_runs.toml`` (written by
calibration/regimes.py): every scored published run symcalc answers, with its regime, the MFU
it measured and the model's error on it. A layout's *regime* is its stack, hardware, precision
class and the shape of its parallelism: ZeRO class (0 and 1 keep whole weights; 2; 3), and
which of tp, pp, cp and ep are used. A layout is **validated** when published runs of the same
regime exist, the model's mean error on them is within MAX_REGIME_ERROR, its data-parallel
degree is within SCALE_FACTOR of theirs, and its network time over compute within
COMM_SLACK of theirs; otherwise it is a **hypothesis**, with the first of these that fails in
words.

A validated layout's runs also share its recompute, sequence parallelism and pipeline
schedule (``formulas/evidence/regimes.toml`` [validation]); otherwise the verdict names the first
choice that differs.

The **frontier** of a layout is the best MFU published in its own regime: its stack, silicon,
precision class, dense or MoE, and ZeRO class (``formulas/evidence/regimes.toml``), among the runs of
the same model there when it has some (parameters within SAME_MODEL: what is known of that very
model is the most specific evidence), else of models of its size class (parameters within
SIZE_FACTOR), else of every size of the regime. A
regime with no published run is said, and the nearest regime's best is used, named (the distance:
the weights of the keys that differ). The planner first takes the model's error out of every
layout's step where the model is too fast on the runs nearest the planned model
(:attr:`Evidence.bias`: the stack's runs on this hardware and precision, dense or MoE as the
model is, of this very model, else of its size class, else all; a validated layout's own runs
read the same way), then slows the compute of a layout still beyond the frontier by as much as
its MFU is above it, and says so.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from symcalc import cache
from symcalc.library.loading import formula_dir
from symcalc.planner import dims

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

MAX_REGIME_ERROR = 0.15   # a regime whose runs the model misses by more (mean |error|) validates nothing
SCALE_FACTOR = 2          # data-parallel ranks up to this many times the most a regime's runs had
COMM_SLACK = (1.25, 0.05)  # network / compute up to 1.25 x the most a regime's runs had, + 0.05
SIZE_FACTOR = 3           # the size class: parameters within this factor either way
SAME_MODEL = 0.03         # the same model: parameters within 3 % (counting conventions: tied or padded embeddings)
ZERO_LABEL = {1: "ZeRO-0/1", 2: "ZeRO-2", 3: "ZeRO-3"}     # ZeRO class (0 and 1 keep whole weights) -> words
DIMS = tuple(dims.validated())      # the degrees a regime is matched on (space.toml's `validation`: tp, pp, cp, ep)


@dataclass(frozen=True)
class PublishedRun:
    id: str
    source: str
    fitted: bool
    stack: str
    hardware: str
    precision: str
    zero_stage: int
    tp: int
    pp: int
    cp: int
    ep: int
    dp: int
    n_gpus: int
    params_b: float
    mfu: float
    error: float
    comm_ratio: float
    moe: bool = False               # the regime keys and the choices validation matches (regimes.toml)
    recompute: str = "none"
    sequence_parallel: bool = False
    schedule: str = "1f1b"

    @property
    def shape(self) -> tuple:
        # a degree the runs file does not give is 1 (a new dimension no published run has used)
        return regime_shape(self.zero_stage, {d: getattr(self, dims.validated()[d], 1) for d in DIMS})


@dataclass(frozen=True)
class Verdict:
    """What validates one layout (or why nothing does)."""

    validated: bool
    text: str                        # one line: "validated by ..." or "hypothesis: ..."
    runs: tuple[str, ...] = ()       # ids of the runs of its regime
    sources: tuple[str, ...] = ()
    error: float | None = None       # the model's mean |error| on them
    bias: float | None = None        # mean signed error (+ too slow)
    in_sample: bool = False          # every one of those runs shaped the model

    def as_dict(self) -> dict:
        return {"validated": self.validated, "text": self.text, "runs": list(self.runs),
                "sources": list(self.sources), "mean_abs_error": self.error, "bias": self.bias,
                "in_sample": self.in_sample}


def comm_ratio(parts: list[dict]) -> float:
    """Network time over compute time from a step-time breakdown's parts (``Result.breakdown``):
    every collective whole, before overlap (a part's ``whole`` where it has one), point-to-point
    included. O(parts)."""
    compute = next((float(p["value"]) for p in parts if p["name"] == "step_compute_time"), 0.0)
    network = sum(float(p.get("whole", p["value"])) for p in parts
                  if "whole" in p or "comm" in p["name"] or "p2p" in p["name"])
    return network / compute if compute > 0 else float("inf")


def precision_class(precision: str) -> str:
    """bf16, fp8 or fp4: what sets the peak a run's MFU is measured against."""
    p = str(precision).lower()
    return "fp4" if "fp4" in p else "fp8" if "fp8" in p else "bf16"


def family(hardware_key: str) -> str:
    """The silicon of a hardware preset (a100_40gb and a100_80gb: a100)."""
    return hardware_key.split("_")[0]


def regime_shape(zero: int, degrees: Mapping[str, int]) -> tuple:
    """(ZeRO class, whether each matched degree is above 1): what a published regime is."""
    return (max(int(zero), 1), *(degrees.get(d, dims.dimension(d).default or 1) > 1 for d in DIMS))


def describe_shape(shape: tuple) -> str:
    used = [d for d, on in zip(DIMS, shape[1:]) if on]
    return ZERO_LABEL.get(shape[0], f"ZeRO-{shape[0]}") + (f" with {', '.join(used)}" if used else " (data parallel only)")


@functools.lru_cache(maxsize=1)
def published_runs() -> tuple[PublishedRun, ...]:
    """The evidence file's runs (read once a process; parsed once per content of the file and
    of symcalc's code, then read back from the on-disk cache: tomllib takes ~40 ms over its
    ~600 runs, a tenth of a warm plan's search)."""
    path = formula_dir() / "evidence" / "published_runs.toml"
    if not path.exists():
        return ()
    raw = path.read_bytes()
    key = cache.key_of(cache.code_fingerprint(), "published_runs", raw)
    hit = cache.load("evidence", key)
    if isinstance(hit, tuple) and all(isinstance(r, PublishedRun) for r in hit):
        return hit
    runs = tuple(PublishedRun(**r) for r in tomllib.loads(raw.decode("utf-8")).get("runs", []))
    cache.store("evidence", key, runs)
    return runs


@dataclass(frozen=True)
class Frontier:
    """The best MFU published in one regime (the layouts of one ZeRO class of a plan)."""

    mfu: float
    run: str            # the run that reached it
    regime: str         # the regime it was published in, in words
    own: bool           # that regime is the layout's own (else the nearest, named in ``note``)
    note: str = ""      # "no published run of ...: capped at the nearest regime's best, ..."

    def as_dict(self) -> dict:
        return {"mfu": self.mfu, "run": self.run, "regime": self.regime, "own": self.own, "note": self.note}


@dataclass(frozen=True)
class Evidence:
    """The published runs a plan's layouts are judged against: those of its stack, hardware and
    precision (``runs``), and the frontier of each ZeRO class in its regime (``frontiers``)."""

    stack: str
    hardware: str
    precision: str
    runs: tuple[PublishedRun, ...]
    frontier: float | None          # the lowest of ``frontiers`` (the tightest cap; None without any)
    frontier_run: str = ""
    frontier_class: str = ""
    frontiers: Mapping[int, Frontier] = field(default_factory=dict)     # ZeRO class (1, 2, 3) -> its frontier
    params_b: float | None = None   # the planned model's parameters (billions): which runs are nearest
    moe: bool = False               # the planned model is a mixture of experts (its nearest runs are too)

    @property
    def bias(self) -> float | None:
        """The model's mean signed error (predicted / published step time - 1) on the runs of
        this stack, hardware and precision nearest the planned model (:func:`nearest_runs`: this
        model's, else its size class's, else all); None without any."""
        near = self.bias_runs
        return float(np.mean([r.error for r in near])) if near else None

    @property
    def bias_runs(self) -> Sequence[PublishedRun]:
        """The runs :attr:`bias` is read from: the dense or MoE runs as the model is (all of them
        when there are none), the nearest of those (:func:`nearest_runs`)."""
        return nearest_runs(self._kind, self.params_b)

    @property
    def bias_class(self) -> str:
        """Which runs those are, in words ("dense, this model's runs (70.6B parameters)")."""
        kind = ("MoE" if self.moe else "dense") if self._kind is not self.runs else "dense and MoE"
        return kind + _which(self._kind, self.params_b)

    @property
    def _kind(self) -> Sequence[PublishedRun]:
        """The runs dense or MoE as the planned model is; all of them (the same object) when none is."""
        return [r for r in self.runs if r.moe == self.moe] or self.runs

    def groups(self) -> dict[tuple, list[PublishedRun]]:
        out: dict[tuple, list[PublishedRun]] = {}
        for r in self.runs:
            out.setdefault(r.shape, []).append(r)
        return out


def evidence(stack: str, hardware_key: str, precision: str, params_b: float | None, moe: bool = False) -> Evidence:
    """The evidence for a plan (O(runs))."""
    runs = published_runs()
    precision = precision_class(precision)
    mine = tuple(r for r in runs if r.stack == stack and r.hardware == hardware_key and r.precision == precision)
    fronts = {z: f for z in ZERO_LABEL
              for f in [frontier_of(_key(stack, hardware_key, precision, moe, z), params_b)] if f is not None}
    low = min(fronts.values(), key=lambda f: f.mfu, default=None)
    return Evidence(stack=stack, hardware=hardware_key, precision=precision, runs=mine,
                    frontier=low.mfu if low else None, frontier_run=low.run if low else "",
                    frontier_class=low.regime if low else "", frontiers=fronts, params_b=params_b, moe=bool(moe))


def nearest_runs(runs: Sequence[PublishedRun], params_b: float | None) -> Sequence[PublishedRun]:
    """The runs that say most about a model of ``params_b`` billion parameters: those of that very
    model (parameters within SAME_MODEL), else of its size class (within SIZE_FACTOR either way),
    else all of them. What is known of the model itself is the most specific evidence: the
    frontier and the model's error (the bias a plan corrects by) are read from the same runs.
    O(runs)."""
    return _nearest(runs, params_b)[0]


def _which(pool: Sequence[PublishedRun], params_b: float | None) -> str:
    """Which runs of ``pool`` :func:`nearest_runs` takes, in words (", this model's runs (6.74B parameters)")."""
    return _nearest(pool, params_b)[1]


def _nearest(runs: Sequence[PublishedRun], params_b: float | None) -> tuple[Sequence[PublishedRun], str]:
    """:func:`nearest_runs` and :func:`_which` at once: the runs, and which they are in words."""
    if params_b:
        ratio = [r.params_b / params_b if r.params_b else 0.0 for r in runs]
        same = [r for r, x in zip(runs, ratio) if abs(x - 1) <= SAME_MODEL]
        if same:
            return same, f", this model's runs ({params_b:.3g}B parameters)"
        sized = [r for r, x in zip(runs, ratio) if 1 / SIZE_FACTOR <= x <= SIZE_FACTOR]
        if sized:
            return sized, f", {params_b / SIZE_FACTOR:.3g}B-{params_b * SIZE_FACTOR:.3g}B parameters"
    return runs, ", every size"


@functools.lru_cache(maxsize=1)
def regime_data() -> dict:
    """formulas/evidence/regimes.toml: the regime keys, their distances, what validation matches."""
    path = formula_dir() / "evidence" / "regimes.toml"
    return tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else \
        {"keys": [], "distance": {}, "validation": {"match": []}}


def _key(stack: str, hardware_key: str, precision: str, moe: bool, zero: int) -> dict:
    return {"stack": stack, "hardware": family(hardware_key), "precision": precision, "moe": bool(moe),
            "zero": max(int(zero), 1)}


def _run_key(r: PublishedRun) -> dict:
    return _key(r.stack, r.hardware, r.precision, r.moe, r.zero_stage)


def describe_regime(key: Mapping) -> str:
    """'deepspeed on a100, bf16, dense, ZeRO-0/1'."""
    zero = ZERO_LABEL.get(key["zero"], f"ZeRO-{key['zero']}")
    return f"{key['stack']} on {key['hardware']}, {key['precision']}, {'MoE' if key['moe'] else 'dense'}, {zero}"


def frontier_of(key: Mapping, params_b: float | None) -> Frontier | None:
    """The best MFU published in regime ``key`` (its size class when it has one), or, when the
    regime has no run, in the nearest regime (regimes.toml's distance; a tie: the lower best).
    O(runs)."""
    data = regime_data()
    keys, weights = data["keys"], data["distance"]
    groups: dict[tuple, list[PublishedRun]] = {}
    for r in published_runs():
        rk = _run_key(r)
        groups.setdefault(tuple(rk[k] for k in keys), []).append(r)
    mine = tuple(key[k] for k in keys)
    if not groups:
        return None

    def distance(g: tuple) -> tuple[float, float]:
        return (sum(weights.get(k, 1) for k, a, b in zip(keys, g, mine) if a != b),
                max(r.mfu for r in groups[g]))
    near = mine if mine in groups else min(groups, key=distance)
    pool = groups[near]
    chosen, which = _nearest(pool, params_b)
    best = max(chosen, key=lambda r: r.mfu)
    where = dict(zip(keys, near))
    words = describe_regime(where) + which
    note = "" if near == mine else (
        f"no published run of {describe_regime(key)}: capped at the nearest regime's best, {words} "
        f"(differs in {', '.join(k for k, a, b in zip(keys, near, mine) if a != b)})")
    return Frontier(mfu=best.mfu, run=best.id, regime=words, own=near == mine, note=note)


def choice(run: PublishedRun, name: str) -> str:
    """A run's value of a choice validation matches (regimes.toml [validation] match), as text."""
    value = getattr(run, name)
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def matched() -> tuple[str, ...]:
    """The choices a validating run shares with a layout besides its shape (regimes.toml)."""
    return tuple(regime_data()["validation"]["match"])


def regime_ok(ev: Evidence, columns: dict, option_values: Mapping[str, tuple[str, ...]] | None = None) -> np.ndarray:
    """Per layout (columns of tp, pp, cp, ep, dp, zero_stage, and the searched options as indices
    into ``option_values``): whether a published regime of the same shape and the same choices
    (recompute, sequence parallelism, schedule), with the model's error there within
    MAX_REGIME_ERROR, covers its data-parallel degree. Network time is judged per shown row
    (:func:`judge`). O(layouts x regimes)."""
    n = len(next(iter(columns.values())))
    ok = np.zeros(n, dtype=bool)
    zero = np.asarray(columns["zero_stage"])
    zclass = np.where(zero <= 1, 1, zero)
    rest = dims.rest().name     # dp: the data-parallel degree a regime's runs reach
    mine = _choice_columns(columns, option_values or {}, n)
    for shape, all_runs in ev.groups().items():
        by_choice: dict[tuple, list[PublishedRun]] = {}
        for r in all_runs:
            by_choice.setdefault(tuple(choice(r, c) for c in mine), []).append(r)
        for chosen, runs in by_choice.items():
            if np.mean([abs(r.error) for r in runs]) > MAX_REGIME_ERROR:
                continue
            match = (zclass == shape[0])
            for d, on in zip(DIMS, shape[1:]):
                col = np.asarray(columns[d]) if d in columns else np.full(n, dims.dimension(d).default or 1)
                match &= (col > 1) == on
            for col, value in zip(mine.values(), chosen):
                match &= col == value
            match &= np.asarray(columns[rest]) <= SCALE_FACTOR * max(r.dp for r in runs)
            ok |= match
    return ok


def _choice_columns(columns: dict, option_values: Mapping[str, tuple[str, ...]], n: int) -> dict[str, np.ndarray]:
    """Each matched choice of every layout as text: a searched option's index read through its
    values; the schedule from the schedule dimension. A choice the columns lack is not matched."""
    out = {}
    for c in matched():
        if c in columns and c in option_values:
            out[c] = np.asarray(option_values[c], dtype=object)[np.asarray(columns[c])]
        elif c == "schedule" and dims.schedule().name in columns:
            out[c] = np.where(dims.interleaved(columns), "interleaved", "1f1b").astype(object)
    return out


def judge(ev: Evidence, layout: dict, zero_stage: int, comm: float, choices: Mapping[str, str] | None = None) -> Verdict:
    """One layout's verdict, in words. ``layout``: tp, pp, cp, dp (ep); ``comm``: its network
    time over compute (:func:`comm_ratio`); ``choices``: its recompute, sequence_parallel and
    schedule (as text; one not given is not matched)."""
    shape = regime_shape(zero_stage, layout)
    where = f"{ev.stack} on {ev.hardware} ({ev.precision})"
    if not ev.runs:
        return Verdict(False, f"hypothesis: no published {where} run to judge it by")
    runs = ev.groups().get(shape)
    what = describe_shape(shape)
    if not runs:
        return Verdict(False, f"hypothesis: no published {where} run with {what}")
    for c in matched():
        mine = (choices or {}).get(c)
        if mine is None:
            continue
        same = [r for r in runs if choice(r, c) == str(mine)]
        if not same:
            theirs = ", ".join(sorted({choice(r, c) for r in runs}))
            return Verdict(False, f"hypothesis: the {len(runs)} published {where} run{'s' if len(runs) > 1 else ''} "
                                  f"with {what} ran {c}={theirs}; this layout {c}={mine}",
                           runs=tuple(r.id for r in runs), sources=tuple(sorted({r.source for r in runs})))
        runs, what = same, f"{what}, {c}={mine}"
    ids, sources = tuple(r.id for r in runs), tuple(sorted({r.source for r in runs}))
    errors = np.array([r.error for r in runs])
    near, which = _nearest(runs, ev.params_b)    # the bias is read where the model is nearest: its own runs first
    err, bias = float(np.mean(np.abs(errors))), float(np.mean([r.error for r in near]))
    on = "" if len(near) == len(runs) else f" on {which.lstrip(', ')}: {len(near)}"
    in_sample = all(r.fitted for r in runs)

    def verdict(validated: bool, text: str) -> Verdict:
        return Verdict(validated, text, runs=ids, sources=sources, error=err, bias=bias, in_sample=in_sample)
    most_dp = max(r.dp for r in runs)
    ranks = layout[dims.rest().name]
    if ranks > SCALE_FACTOR * most_dp:
        return verdict(False, f"hypothesis: {what} over {ranks} data-parallel ranks: the published "
                              f"{where} runs of it reach {most_dp} data-parallel ranks")
    most_comm = max(r.comm_ratio for r in runs)
    if comm > COMM_SLACK[0] * most_comm + COMM_SLACK[1]:
        return verdict(False, f"hypothesis: {what} with network time at {comm:.0%} of compute: the published "
                              f"{where} runs of it reach {most_comm:.0%}")
    if err > MAX_REGIME_ERROR:
        return verdict(False, f"hypothesis: the model misses the {len(runs)} published {where} runs with {what} "
                              f"by {err:.0%} on average")
    sample = " (in-sample: they shaped the model)" if in_sample else ""
    return verdict(True, f"validated: {len(runs)} published {where} run{'s' if len(runs) > 1 else ''} with {what} "
                         f"({', '.join(sources)}){sample}; model error there {err:.0%} (bias {bias:+.0%}{on})")
