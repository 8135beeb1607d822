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
defaults and the metrics; this module interprets it over numpy columns. The one rule that is a
procedure (:func:`pp_splits_layers`) is named from the data and registered in :data:`CHECKS`.
"""

from __future__ import annotations

import functools
import itertools
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc.library.loading import default_library, formula_dir

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.records import Condition
    from symcalc.library.registry import Library

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SPACE_FILE = ("planner", "space.toml")        # under the formula directory
PREDICATES = ("divides", "at_most", "greater", "equals", "differs")
RULE_KEYS = {"name", "reason", "stage", "when", "check", *PREDICATES}
DIMENSION_KEYS = {"stage", "divisors_of", "rest_of", "range", "at_most"}


class SpaceDataError(ValueError):
    """The planner's data file is malformed (an unknown key, stage, check or name)."""


@functools.cache
def space_data() -> dict:
    """``formulas/planner/space.toml``, read once a process and checked."""
    path = formula_dir().joinpath(*SPACE_FILE)
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    stages = data["search"]["stages"]
    for name, spec in data["dimensions"].items():
        _check(set(spec) - DIMENSION_KEYS, f"dimension {name}: unknown keys")
        _check({spec["stage"]} - set(stages), f"dimension {name}: unknown stage")
    for spec in data["rules"]:
        _check(set(spec) - RULE_KEYS, f"rule {spec.get('name')}: unknown keys")
        _check(set(spec.get("when", {})) - set(PREDICATES), f"rule {spec.get('name')}: unknown predicates in when")
        _check({spec["stage"]} - set(stages), f"rule {spec['name']}: unknown stage")
    return data


def _check(unknown: set, what: str) -> None:
    if unknown:
        raise SpaceDataError(f"{'/'.join(SPACE_FILE)}: {what}: {', '.join(sorted(map(str, unknown)))}")


def searched_options(library: Library | None = None) -> dict[str, tuple[str, ...]]:
    """The options the planner searches (``searched = true`` in the library), each with its values
    in their declared order, in the order the library declares the options."""
    if library is None:
        library = default_library()
    return {name: tuple(spec.values) for name, spec in library.options.items() if spec.searched}


def __getattr__(name: str) -> dict[str, tuple[str, ...]]:
    """``SEARCHED_OPTIONS``: the default library's searched options (read when first asked)."""
    if name == "SEARCHED_OPTIONS":
        return searched_options()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# stated defaults of the search (planner keyword arguments and CLI flags override the first two)
MAX_MICRO_BATCH: int = space_data()["defaults"]["max_micro_batch"]
MAX_VIRTUAL_STAGES: int = space_data()["defaults"]["max_virtual_stages"]
UNEVEN_PP_SLACK: int = space_data()["defaults"]["uneven_pp_slack"]
STAGES: tuple[str, ...] = tuple(space_data()["search"]["stages"])


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
    requires: tuple[tuple[str, Condition], ...] = ()
    # the searched options with all their values, ((name, values), ...); empty: the default library's
    searched: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def option_values(self) -> dict[str, tuple[str, ...]]:
        return dict(self.searched) if self.searched else searched_options()


FACTS = frozenset(f.name for f in fields(Shape)) - {"requires", "searched"}


@dataclass(frozen=True)
class Rule:
    name: str
    reason: str                                   # why a layout is rejected, in words
    stage: str                                    # one of STAGES
    valid: Callable[[dict, Shape], np.ndarray | bool]    # columns, shape -> True where valid (True: all)


def _divides(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return np.asarray((np.asarray(b) % np.asarray(a)) == 0)


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


#: the rules that are procedures, by the name the data file's ``check`` gives them
CHECKS: dict[str, Callable[[dict, Shape], np.ndarray]] = {"pp_splits_layers": pp_splits_layers}


# -- the interpreter of the data file's predicates ---------------------------------------------

def _value(x: object, c: dict, s: Shape) -> Any:
    """An operand: a number or true/false as it is; a name, the layout's column, the derived
    column of that name or the run's fact (None when the run has none: n_experts of a dense model)."""
    if not isinstance(x, str):
        return x
    if x in c:
        return c[x]
    derived = space_data()["derived"]
    if x in derived:
        (op, args), = derived[x].items()
        a, *rest = (_value(y, c, s) for y in args)
        if any(v is None for v in (a, *rest)):
            return None
        if op == "product":
            return a * math.prod(rest)
        if op == "quotient":
            return a // math.prod(rest)
        if op == "ceil_quotient":
            return -(-a // math.prod(rest))
        raise SpaceDataError(f"derived column {x}: unknown operation {op}")
    if x in FACTS:
        return getattr(s, x)
    raise SpaceDataError(f"{'/'.join(SPACE_FILE)}: unknown name {x!r}")


def _holds(kind: str, args: list, c: dict, s: Shape) -> np.ndarray | bool:
    """One predicate over the columns (True where it holds; True everywhere over a missing fact)."""
    x, y = args
    if kind in ("equals", "differs") and isinstance(y, str) and x in s.option_values():
        y = s.option_values()[x].index(y)      # a searched option's column holds indices into its values
    a, b = _value(x, c, s), _value(y, c, s)
    if a is None or b is None:
        return True
    if kind == "divides":
        return _divides(a, b)
    if kind == "at_most":
        return np.asarray(a) <= b
    if kind == "greater":
        return np.asarray(a) > b
    return (np.asarray(a) == b) if kind == "equals" else (np.asarray(a) != b)


def _all_hold(preds: list, c: dict, s: Shape) -> np.ndarray | bool:
    ok: np.ndarray | bool = True
    for kind, args in preds:
        ok = np.logical_and(ok, _holds(kind, args, c, s))
    return ok


def _rule(spec: dict) -> Rule:
    """A rule of the data file as a predicate over columns: True where its ``when`` fails or
    every predicate (and its ``check``) holds."""
    preds = [(k, spec[k]) for k in PREDICATES if k in spec]
    when = [(k, v) for k, v in spec.get("when", {}).items()]
    _check({spec.get("check", "pp_splits_layers")} - set(CHECKS), f"rule {spec['name']}: unknown check")
    check = CHECKS[spec["check"]] if "check" in spec else None

    def valid(c: dict, s: Shape) -> np.ndarray | bool:
        ok = _all_hold(preds, c, s)
        if check is not None:
            ok = np.logical_and(ok, check(c, s))
        return np.logical_or(np.logical_not(_all_hold(when, c, s)), ok) if when else ok
    return Rule(spec["name"], spec["reason"].format(**space_data()["defaults"]), spec["stage"], valid)


RULES: tuple[Rule, ...] = tuple(_rule(spec) for spec in space_data()["rules"])


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


def _dimension(spec: dict, s: Shape) -> list[int]:
    """One dimension's candidates as the data file forms them (divisors of a fact, 1 when the run
    has none; a range), at most a fact's value."""
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
    rows = [(*f, *(s.n_gpus // math.prod(f) for _ in rest), *o)
            for f in itertools.product(*(cand[d] for d in free)) if s.n_gpus % math.prod(f) == 0
            for o in itertools.product(*(cand[d] for d in others))]
    names = free + rest + others
    return names, np.array(rows, dtype=np.int64).reshape(-1, len(names))


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
        a = a[np.isin(a[:, names.index("dp")], dp_fixed)]
    cols = {k: a[:, i] for i, k in enumerate(names)}
    total = len(a) * later[first]
    rejected: dict[str, int] = {}
    cols = _apply(cols, s, first, rejected, later[first])
    for stage in later_stages:
        for name in stage_dims[stage]:
            cols = _cross(cols, name, cand[name])
        cols = _apply(cols, s, stage, rejected, later[stage])
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
    layout = [*space_data()["dimensions"], "n_gpus"]
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
