"""The layout space of a run and its validity rules, each declared once and counted.

A layout is tp x pp x cp x dp = n_gpus (every ordered way to write the GPU count as such a
product is a candidate), an expert-parallel degree ep (MoE models), a micro-batch size, a
pipeline schedule (1F1B, or interleaved with virtual_stages chunks a GPU), a ZeRO stage, a
recompute mode and sequence parallelism. The space is built in four stages, each crossed
with the candidates of the next; a candidate that breaks a rule is counted under the first
rule it breaks, times the candidates of the later stages it takes with it, so the counts add
up to the whole space ("1,204 layouts: tp does not divide n_kv_heads").

Every rule is a :class:`Rule`: a name, the reason in words, the stage it applies at and one
small vectorised predicate over the columns of that stage (True where the layout is valid).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

ZERO_STAGES = ("0", "1", "2", "3")
RECOMPUTE = ("none", "selective", "full")
SEQUENCE_PARALLEL = ("false", "true")
# the option dimensions the planner searches, in the order a layout names them
SEARCHED_OPTIONS = {"zero_stage": ZERO_STAGES, "recompute": RECOMPUTE, "sequence_parallel": SEQUENCE_PARALLEL}

# stated defaults of the search (planner keyword arguments and CLI flags override them)
MAX_MICRO_BATCH = 32          # micro-batch sizes searched: the divisors of the global batch up to this
MAX_VIRTUAL_STAGES = 8        # interleaved chunks a GPU searched: 2 ... this (1 is 1F1B)
UNEVEN_PP_SLACK = 2           # an uneven pipeline may leave this many layer slots empty (see pp_splits_layers)


@dataclass(frozen=True)
class Shape:
    """What the rules read: the run's fixed facts."""

    n_gpus: int
    gpus_per_node: int
    n_heads: int
    n_kv_heads: int
    n_layers: int
    seq_len: int                      # tokens per sequence
    global_batch_size: int            # sequences per optimizer step
    n_experts: int | None = None      # MoE models only
    tp_across_nodes: bool = False
    uneven_pp: bool = True
    max_micro_batch: int = MAX_MICRO_BATCH
    max_virtual_stages: int = MAX_VIRTUAL_STAGES
    # conditions a training stack puts on the layout: (the reason in words, a
    # symcalc.library.records.Condition over layout quantities), e.g. FSDP's tp == 1
    requires: tuple = ()


@dataclass(frozen=True)
class Rule:
    name: str
    reason: str                                   # why a layout is rejected, in words
    stage: str                                    # "layout", "micro_batch", "schedule" or "options"
    valid: Callable[[dict, Shape], np.ndarray]    # columns, shape -> True where valid


def _divides(a, b) -> np.ndarray:
    return np.asarray((np.asarray(b) % np.asarray(a)) == 0)


def tp_within_node(c: dict, s: Shape) -> np.ndarray:
    """tp within one node (tp <= gpus_per_node and dividing it), unless tp_across_nodes."""
    within = (c["tp"] <= s.gpus_per_node) & _divides(c["tp"], s.gpus_per_node)
    return np.ones(len(c["tp"]), bool) if s.tp_across_nodes else within


def pp_splits_layers(c: dict, s: Shape) -> np.ndarray:
    """pp divides n_layers; or, with uneven_pp, pp <= n_layers and pp x ceil(n_layers / pp)
    leaves at most UNEVEN_PP_SLACK layer slots empty (Llama 3 405B: 126 layers over 16 stages
    of 8, the first and the last stage one layer short, as they also hold the embedding and the
    LM head). The step-time and memory formulas then take the library's layers_per_stage =
    n_layers / pp (pipeline.toml), the mean over the stages."""
    pp = c["pp"]
    even = _divides(pp, s.n_layers)
    if not s.uneven_pp:
        return even
    slots = pp * -(-s.n_layers // pp)
    return even | ((pp <= s.n_layers) & (slots - s.n_layers <= UNEVEN_PP_SLACK))


def _stage_slots(c: dict, s: Shape) -> np.ndarray:
    return -(-s.n_layers // c["pp"])      # layers on the fullest stage, ceil(n_layers / pp)


RULES: tuple[Rule, ...] = (
    Rule("tp_heads", "tp does not divide n_heads", "layout", lambda c, s: _divides(c["tp"], s.n_heads)),
    Rule("tp_kv_heads", "tp does not divide n_kv_heads", "layout", lambda c, s: _divides(c["tp"], s.n_kv_heads)),
    Rule("tp_node", "tp spans more than one node (gpus_per_node)", "layout", tp_within_node),
    Rule("pp_layers", "pp does not split n_layers (evenly, or with at most "
         f"{UNEVEN_PP_SLACK} layer slots empty)", "layout", pp_splits_layers),
    Rule("cp_seq", "cp does not divide seq_len", "layout", lambda c, s: _divides(c["cp"], s.seq_len)),
    Rule("ep_experts", "ep does not divide n_experts", "layout",
         lambda c, s: np.ones(len(c["ep"]), bool) if s.n_experts is None else _divides(c["ep"], s.n_experts)),
    Rule("ep_dp", "ep does not divide dp (experts are spread over data-parallel ranks)", "layout",
         lambda c, s: _divides(c["ep"], c["dp"])),
    Rule("dp_batch", "dp does not divide global_batch_size", "layout",
         lambda c, s: _divides(c["dp"], s.global_batch_size)),
    Rule("mbs_replica", "micro_batch_size does not divide the per-replica batch (global_batch_size / dp)",
         "micro_batch", lambda c, s: _divides(c["micro_batch_size"], s.global_batch_size // c["dp"])),
    Rule("interleaved_pp", "interleaved schedule (virtual_stages > 1) needs pp > 1", "schedule",
         lambda c, s: (c["virtual_stages"] == 1) | (c["pp"] > 1)),
    Rule("interleaved_layers", "virtual_stages does not divide the layers of a stage (ceil(n_layers / pp))",
         "schedule", lambda c, s: _divides(c["virtual_stages"], _stage_slots(c, s))),
    Rule("interleaved_microbatches", "interleaved schedule needs n_microbatches to be a multiple of pp",
         "schedule", lambda c, s: (c["virtual_stages"] == 1)
         | _divides(c["pp"], s.global_batch_size // (c["dp"] * c["micro_batch_size"]))),
    Rule("sp_tp", "sequence parallelism needs tp > 1", "options",
         lambda c, s: (c["sequence_parallel"] == 0) | (c["tp"] > 1)),
    Rule("zero_dp", "ZeRO needs a data-parallel group (dp x cp > 1): stage 0 is the same layout", "options",
         lambda c, s: (c["zero_stage"] == 0) | (c["dp"] * c["cp"] > 1)),
)

STAGES = ("layout", "micro_batch", "schedule", "options")


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


@dataclass
class Space:
    """The valid layouts as columns (numpy int64 arrays of equal length), one row a layout, and
    what was rejected: ``rejected[rule name]`` layouts (of the whole space) by the first rule
    they break, ``total`` the size of the whole space."""

    columns: dict[str, np.ndarray]
    total: int
    rejected: dict[str, int] = field(default_factory=dict)

    @property
    def size(self) -> int:
        return len(self.columns["tp"])

    def reasons(self) -> dict[str, int]:
        """Rejection counts by reason in words (rules that rejected nothing left out)."""
        by_name = {r.name: r.reason for r in RULES}
        return {by_name.get(k, k): v for k, v in self.rejected.items() if v}


def candidates(s: Shape, fixed: dict[str, list[int]] | None = None,
               options: dict[str, tuple[str, ...]] | None = None) -> dict[str, list]:
    """Each dimension's candidate values before any rule: tp, pp, cp every divisor of n_gpus;
    ep every divisor of n_experts (1 for dense models); micro_batch_size every divisor of the
    global batch up to max_micro_batch; virtual_stages 1 (1F1B) to max_virtual_stages; the
    searched options every value. ``fixed`` narrows a dimension to given values."""
    gpus = divisors(s.n_gpus)
    out = {
        "tp": gpus, "pp": gpus, "cp": gpus,
        "ep": divisors(s.n_experts) if s.n_experts else [1],
        "micro_batch_size": [d for d in divisors(s.global_batch_size) if d <= s.max_micro_batch],
        "virtual_stages": list(range(1, s.max_virtual_stages + 1)),
    }
    for name, counts in (fixed or {}).items():
        out[name] = sorted(set(counts))
    opts = {k: tuple(range(len(v))) for k, v in SEARCHED_OPTIONS.items()}
    for name, chosen in (options or {}).items():
        opts[name] = tuple(SEARCHED_OPTIONS[name].index(v) for v in chosen)
    out.update({k: list(v) for k, v in opts.items()})
    return out


def enumerate_space(s: Shape, fixed: dict[str, list[int]] | None = None,
                    options: dict[str, tuple[str, ...]] | None = None, dp_fixed: list[int] | None = None) -> Space:
    """Every valid layout of ``s`` (``fixed`` values for tp, pp, cp, ep, micro_batch_size,
    virtual_stages; ``options`` values of the searched options; ``dp_fixed`` for dp)."""
    cand = candidates(s, fixed, options)
    n_opts = len(cand["zero_stage"]) * len(cand["recompute"]) * len(cand["sequence_parallel"])
    later = {"layout": len(cand["micro_batch_size"]) * len(cand["virtual_stages"]) * n_opts,
             "micro_batch": len(cand["virtual_stages"]) * n_opts, "schedule": n_opts, "options": 1}
    # stage 1: every ordered tp x pp x cp x dp = n_gpus (dp follows), crossed with ep
    rows = [(tp, pp, cp, s.n_gpus // (tp * pp * cp), ep)
            for tp, pp, cp in itertools.product(cand["tp"], cand["pp"], cand["cp"])
            if s.n_gpus % (tp * pp * cp) == 0 for ep in cand["ep"]]
    if dp_fixed is not None:
        rows = [r for r in rows if r[3] in dp_fixed]
    a = np.array(rows, dtype=np.int64).reshape(-1, 5)
    cols = {k: a[:, i] for i, k in enumerate(("tp", "pp", "cp", "dp", "ep"))}
    total = len(a) * later["layout"]
    rejected: dict[str, int] = {}
    cols = _apply(cols, s, "layout", rejected, later["layout"])
    cols = _cross(cols, "micro_batch_size", cand["micro_batch_size"])
    cols = _apply(cols, s, "micro_batch", rejected, later["micro_batch"])
    cols = _cross(cols, "virtual_stages", cand["virtual_stages"])
    cols = _apply(cols, s, "schedule", rejected, later["schedule"])
    for name in SEARCHED_OPTIONS:
        cols = _cross(cols, name, cand[name])
    cols = _apply(cols, s, "options", rejected, 1)
    cols["n_gpus"] = np.full(len(cols["tp"]), s.n_gpus, dtype=np.int64)
    cols = _apply_requires(cols, s, rejected)
    return Space(columns=cols, total=total, rejected=rejected)


def _apply_requires(cols: dict, s: Shape, rejected: dict) -> dict:
    """Keep the layouts that satisfy the stack's conditions (``Shape.requires``), each counted
    under its reason; a condition over a quantity the layout does not hold is left to the
    solver, which checks given values."""
    facts = {"seq_len": s.seq_len, "global_batch_size": s.global_batch_size, "n_heads": s.n_heads,
             "n_kv_heads": s.n_kv_heads, "n_layers": s.n_layers, "gpus_per_node": s.gpus_per_node,
             **({"n_experts": s.n_experts} if s.n_experts else {})}
    layout = ("tp", "pp", "cp", "dp", "ep", "micro_batch_size", "virtual_stages", "n_gpus")
    for reason, condition in s.requires:
        holds = condition.holds_where({**facts, **{k: cols[k] for k in layout}})
        if holds is None:
            continue
        keep = np.broadcast_to(np.asarray(holds, dtype=bool), cols["tp"].shape)
        rejected[reason] = rejected.get(reason, 0) + int(np.count_nonzero(~keep))
        cols = {c: v[keep] for c, v in cols.items()}
    return cols


def _cross(cols: dict, name: str, values: list) -> dict:
    n, k = len(cols["tp"]), len(values)
    out = {c: np.repeat(v, k) for c, v in cols.items()}
    out[name] = np.tile(np.asarray(values, dtype=np.int64), n)
    return out


def _apply(cols: dict, s: Shape, stage: str, rejected: dict, weight: int) -> dict:
    keep = np.ones(len(cols["tp"]), dtype=bool)
    for rule in RULES:
        if rule.stage != stage:
            continue
        ok = np.broadcast_to(np.asarray(rule.valid(cols, s), dtype=bool), keep.shape)
        rejected[rule.name] = rejected.get(rule.name, 0) + int(np.count_nonzero(keep & ~ok)) * weight
        keep &= ok
    return {c: v[keep] for c, v in cols.items()}
