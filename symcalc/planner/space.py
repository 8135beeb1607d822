"""The layout space of a run and its validity rules, read from ``formulas/planner/space.toml``.

A layout is tp x pp x cp x dp = n_gpus (every ordered way to write the GPU count as such a
product is a candidate), an expert-parallel degree ep (MoE models), a micro-batch size, a
pipeline schedule (1F1B, or interleaved with virtual_stages chunks a GPU) and a value of each
option the library marks ``searched = true`` (formulas/options.toml: the ZeRO stage, the
recompute mode, sequence parallelism). The space is built in stages, each crossed with the
candidates of the next; a candidate that breaks a rule is counted under the first rule it
breaks, times the candidates of the later stages it takes with it, so the counts add up to the
whole space ("1,204 layouts: tp does not divide n_kv_heads").

The data file declares how each dimension's candidates are formed, the rules (a name, the
reason in words, the stage it applies at and its predicate, written declaratively: ``divides``,
``at_most``, ``greater``, ``equals``, ``differs``, limited by ``when``), the search's stated
defaults and the metrics; the interpreter of the rules is :mod:`symcalc.query.layout_rules`, shared with the
questions that check given values against the same rules; this module builds the space and
applies them over numpy columns.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field

import numpy as np

from symcalc.planner import dims
from symcalc.query.layout_rules import (  # noqa: F401 - the rules' names, read from here by the planner and tests
    CHECKS,
    FACTS,
    MAX_MICRO_BATCH,
    MAX_VIRTUAL_STAGES,
    RULES,
    STAGES,
    UNEVEN_PP_SLACK,
    Rule,
    Shape,
    SpaceDataError,
    pp_splits_layers,
    searched_options,
    space_data,
)


def __getattr__(name: str) -> dict[str, tuple[str, ...]]:
    """``SEARCHED_OPTIONS``: the default library's searched options (read when first asked)."""
    if name == "SEARCHED_OPTIONS":
        return searched_options()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _rows(cols: dict) -> int:
    """The number of layouts in columns of equal length."""
    return len(next(iter(cols.values())))


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
        return _rows(self.columns)

    def reasons(self) -> dict[str, int]:
        """Rejection counts by reason in words (rules that rejected nothing left out)."""
        by_name = {r.name: r.reason for r in RULES}
        return {by_name.get(k, k): v for k, v in self.rejected.items() if v}


def _dimension(spec: dict, s: Shape) -> list[int]:
    """One dimension's candidates as the data file forms them (divisors of a fact, 1 when the run
    has none; a range), at most a fact's value."""
    if "needs" in spec and not getattr(s, spec["needs"]):
        return [spec.get("default", 1)]      # a dimension of MoE runs, in a dense one (ep, etp)
    if "divisors_of" in spec:
        n = getattr(s, spec["divisors_of"])
        out = divisors(n) if n else [1]
    else:
        lo, hi = (getattr(s, x) if isinstance(x, str) else x for x in spec["range"])
        out = list(range(lo, hi + 1))
    if "at_most" in spec:
        out = [d for d in out if d <= getattr(s, spec["at_most"])]
    return out


def candidates(s: Shape, fixed: dict[str, list[int]] | None = None,
               options: dict[str, tuple[str, ...]] | None = None) -> dict[str, list]:
    """Each dimension's candidate values before any rule (formulas/planner/space.toml: tp, pp, cp
    every divisor of n_gpus; ep every divisor of n_experts, 1 for dense models; micro_batch_size
    every divisor of the global batch up to max_micro_batch; virtual_stages 1 (1F1B) to
    max_virtual_stages); the searched options every value, as indices into their values.
    ``fixed`` narrows a dimension to given values, ``options`` an option to given values."""
    out = {name: _dimension(spec, s) for name, spec in space_data()["dimensions"].items()
           if "rest_of" not in spec}
    for name, counts in (fixed or {}).items():
        out[name] = sorted(set(counts))
    values = s.option_values()
    opts = {k: tuple(range(len(v))) for k, v in values.items()}
    for name, chosen in (options or {}).items():
        opts[name] = tuple(values[name].index(v) for v in chosen)
    out.update({k: list(v) for k, v in opts.items()})
    return out


def _stage_dims(s: Shape) -> dict[str, list[str]]:
    """The columns each stage crosses in, in order (the searched options at the options stage)."""
    data = space_data()
    out: dict[str, list[str]] = {stage: [] for stage in STAGES}
    for name, spec in data["dimensions"].items():
        out[spec["stage"]].append(name)
    out[data["search"]["options_stage"]] += list(s.option_values())
    return out


def _gpu_rows(s: Shape, cand: dict, layout_dims: list[str]) -> tuple[list[str], np.ndarray]:
    """The first stage: every ordered product of the gpus dimensions that makes n_gpus (the one
    with ``rest_of`` follows from the others), crossed with the stage's other dimensions."""
    dims = space_data()["dimensions"]
    gpus = space_data()["search"]["gpus"]
    free = [d for d in gpus if "rest_of" not in dims[d]]
    rest = [d for d in gpus if "rest_of" in dims[d]]
    others = [d for d in layout_dims if d not in gpus]
    # the factorings in Python, crossed with the others by numpy, in the order itertools.product
    # would give (each factoring, then the others' values): row by row in Python this was most
    # of an inverse plan's search of which counts have layouts
    found, products = _factorings(s.n_gpus, [cand[d] for d in free])
    left = np.array([(*f, *(s.n_gpus // p for _ in rest)) for f, p in zip(found, products)],
                    dtype=np.int64).reshape(-1, len(free) + len(rest))
    right = np.array(list(itertools.product(*(cand[d] for d in others))), dtype=np.int64).reshape(-1, len(others))
    rows = np.concatenate([np.repeat(left, len(right), axis=0), np.tile(right, (len(left), 1))], axis=1)
    return free + rest + others, rows


def _factorings(n: int, lists: list[list[int]]) -> tuple[list[tuple], list[int]]:
    """Every tuple of one value from each list, in order, whose product divides ``n``, and those
    products, in itertools.product's order. A prefix whose product does not divide ``n`` is not
    extended (no extension of it could divide ``n``): O(factorings), where the whole product of
    the lists is up to 64^3 tuples for a count with many divisors."""
    found: list[tuple] = [()]
    products = [1]
    for values in lists:
        longer, longer_products = [], []
        for f, p in zip(found, products):
            for v in values:
                if n % (p * v) == 0:
                    longer.append((*f, v))
                    longer_products.append(p * v)
        found, products = longer, longer_products
    return found, products


def enumerate_space(s: Shape, fixed: dict[str, list[int]] | None = None,
                    options: dict[str, tuple[str, ...]] | None = None, dp_fixed: list[int] | None = None) -> Space:
    """Every valid layout of ``s`` (``fixed`` values for tp, pp, cp, ep, micro_batch_size,
    virtual_stages; ``options`` values of the searched options; ``dp_fixed`` for dp)."""
    cand = candidates(s, fixed, options)
    stage_dims = _stage_dims(s)
    first, *later_stages = STAGES
    sizes = {st: math.prod(len(cand[d]) for d in stage_dims[st]) for st in later_stages}
    later = {st: math.prod(sizes[x] for x in STAGES[i + 1:]) for i, st in enumerate(STAGES)}
    names, a = _gpu_rows(s, cand, stage_dims[first])
    if dp_fixed is not None:
        a = a[np.isin(a[:, names.index(dims.rest().name)], dp_fixed)]
    cols = {k: a[:, i] for i, k in enumerate(names)}
    total = len(a) * later[first]
    rejected: dict[str, int] = {}
    cols = _apply(cols, s, first, rejected, later[first])
    for stage in later_stages:
        for name in stage_dims[stage]:
            cols = _cross(cols, name, cand[name])
        cols = _apply(cols, s, stage, rejected, later[stage])
    cols["n_gpus"] = np.full(_rows(cols), s.n_gpus, dtype=np.int64)
    cols = _apply_requires(cols, s, rejected)
    return Space(columns=cols, total=total, rejected=rejected)


def _apply_requires(cols: dict, s: Shape, rejected: dict) -> dict:
    """Keep the layouts that satisfy the stack's conditions (``Shape.requires``), each counted
    under its reason; a condition scoped to searched options' values (DeepSpeed's pp == 1 under
    ZeRO-2 and ZeRO-3) binds only the layouts with those values; a condition over a quantity the
    layout does not hold is left to the solver, which checks given values."""
    facts = {"seq_len": s.seq_len, "global_batch_size": s.global_batch_size, "n_heads": s.n_heads,
             "n_kv_heads": s.n_kv_heads, "n_layers": s.n_layers, "gpus_per_node": s.gpus_per_node,
             **({"n_experts": s.n_experts} if s.n_experts else {})}
    layout = [*space_data()["dimensions"], "n_gpus"]
    values = s.option_values()
    for reason, condition, scope in s.requires:
        holds = condition.holds_where({**facts, **{k: cols[k] for k in layout}})
        if holds is None:
            continue
        keep = np.broadcast_to(np.asarray(holds, dtype=bool), (_rows(cols),))
        for option, allowed in scope:     # it binds only the layouts with these values
            if option in cols:
                inside = [i for i, v in enumerate(values.get(option, ())) if v in allowed]
                keep = keep | ~np.isin(cols[option], inside)
        rejected[reason] = rejected.get(reason, 0) + int(np.count_nonzero(~keep))
        cols = {c: v[keep] for c, v in cols.items()}
    return cols


def _cross(cols: dict, name: str, values: list) -> dict:
    n, k = _rows(cols), len(values)
    out = {c: np.repeat(v, k) for c, v in cols.items()}
    out[name] = np.tile(np.asarray(values, dtype=np.int64), n)
    return out


def _apply(cols: dict, s: Shape, stage: str, rejected: dict, weight: int) -> dict:
    keep = np.ones(_rows(cols), dtype=bool)
    for rule in RULES:
        if rule.stage != stage:
            continue
        ok = np.broadcast_to(np.asarray(rule.valid(cols, s), dtype=bool), keep.shape)
        rejected[rule.name] = rejected.get(rule.name, 0) + int(np.count_nonzero(keep & ~ok)) * weight
        keep &= ok
    return {c: v[keep] for c, v in cols.items()}
