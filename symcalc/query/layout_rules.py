"""The structure rules of a run's layout, one set for the planner and for given values.

``formulas/planner/space.toml`` declares the rules of a valid layout (a name, the reason in
words, the stage it applies at and its predicate, written declaratively: ``divides``,
``at_most``, ``greater``, ``equals``, ``differs``, limited by ``when``): tp divides the heads,
pp splits the layers, ep divides the experts. The planner (:mod:`symcalc.planner.space`)
reads them over numpy columns of every candidate layout; a question (solve, check, sweep,
compare, the API and the server) reads the same rules over its given values
(:func:`given_breaks`), refusing the rules the data marks ``given = "refuse"`` and warning of
those marked ``"warn"``, and rounds a whole-number degree it solves for to the nearest value
that keeps them (:func:`nearest_valid`). It sits in the query layer so that both can import
it. The one rule that is a procedure (:func:`pp_splits_layers`) is named from the data and
registered in :data:`CHECKS`.
"""

from __future__ import annotations

import functools
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc.errors import DomainError
from symcalc.findings import Finding
from symcalc.library.loading import default_library, formula_dir
from symcalc.units.format import fmt

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.records import Condition
    from symcalc.library.registry import Library

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

SPACE_FILE = ("planner", "space.toml")        # under the formula directory
PREDICATES = ("divides", "at_most", "greater", "equals", "differs")
RULE_KEYS = {"name", "reason", "stage", "when", "check", "given", "shows", "plan", *PREDICATES}
GROUP_KEYS = {"links", "per_node"}                # a run's parallel group (symcalc.query.run)
GIVEN = ("refuse", "warn")     # what a rule does to given values (absent: nothing)
DIMENSION_KEYS = {"stage", "divisors_of", "rest_of", "range", "at_most",      # how its candidates are formed
                  "kind", "label", "label_when", "column", "default", "needs", "validation", "given_when",
                  "schedule_option"}                                        # what the planner says of it (planner/dims.py)


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
    for name, spec in data.get("groups", {}).items():
        _check(set(spec) - GROUP_KEYS, f"group {name}: unknown keys")
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


# stated defaults of the search (planner keyword arguments and CLI flags override the first two)
MAX_MICRO_BATCH: int = space_data()["defaults"]["max_micro_batch"]
MAX_VIRTUAL_STAGES: int = space_data()["defaults"]["max_virtual_stages"]
UNEVEN_PP_SLACK: int = space_data()["defaults"]["uneven_pp_slack"]
EMBEDDING_LOSS_SLOTS: int = space_data()["defaults"]["embedding_loss_slots"]
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
    # symcalc.library.records.Condition over layout quantities, the searched options' values it binds
    # under: (option, values) pairs, empty for always), e.g. FSDP's tp == 1
    requires: tuple[tuple[str, Condition, tuple[tuple[str, tuple[str, ...]], ...]], ...] = ()   # (reason, condition, scope)
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
    given: str = ""                               # what it does to given values: refuse, warn or "" (nothing)
    names: tuple[str, ...] = ()                   # the names its predicates read, to show their values
    plan: str = ""                                # what symcalc plan does with such a layout, when not "not searched"


def _divides(a: np.ndarray | int, b: np.ndarray | int) -> np.ndarray:
    return np.asarray((np.asarray(b) % np.asarray(a)) == 0)


def pp_splits_layers(c: dict, s: Shape) -> np.ndarray:
    """pp divides n_layers; or, with uneven_pp, pp <= n_layers and pp x ceil(n_layers / pp)
    leaves at most UNEVEN_PP_SLACK layer slots empty (Llama 3 405B: 126 layers over 16 stages
    of 8, the first and the last stage one layer short, as they also hold the embedding and the
    LM head). The step-time and memory formulas then take the library's layers_per_stage =
    n_layers / pp (pipeline.toml), the mean over the stages. The layers may also be split with the
    embedding and the loss counted as one layer each (EMBEDDING_LOSS_SLOTS), on the first and the
    last stage, as Megatron-Core's account_for_embedding_in_pipeline_split and
    account_for_loss_in_pipeline_split do: DeepSeek-V3's 61 layers over 16 stages is 63 over 64
    slots (the 4-layer stages with the first one short of the embedding's slot, the last of the
    loss's), one slot empty."""
    pp = c.get("pp")
    if pp is None or s.n_layers is None:      # a question that gives no pp, or knows no layers
        return np.asarray(True)
    even = _divides(pp, s.n_layers)
    if not s.uneven_pp:
        return even
    out = even
    for extra in (0, EMBEDDING_LOSS_SLOTS):
        work = s.n_layers + extra
        slots = pp * -(-work // pp)
        out = out | ((pp <= s.n_layers) & (slots - work <= UNEVEN_PP_SLACK))
    return out


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
        if op in KNOWN_OPS:       # over the operands known (a question's given degrees); None if none is
            known = [v for v in (_value(y, c, s) for y in args) if v is not None]
            return KNOWN_OPS[op](known) if known else None
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
    if x in space_data()["dimensions"]:
        return None         # a layout degree a question does not give: the rule holds
    raise SpaceDataError(f"{'/'.join(SPACE_FILE)}: unknown name {x!r}")


def _largest(values: list) -> Any:
    out = values[0]
    for v in values[1:]:
        out = np.maximum(out, v)
    return out


#: derived operations over the operands that are known, the rest left out (``product_of_known``:
#: the given degrees' product, which divides n_gpus whichever degree is left to derive)
KNOWN_OPS: dict[str, Callable[[list], Any]] = {"product_of_known": math.prod, "max_of_known": _largest}


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
    _check({spec.get("given", "refuse")} - set(GIVEN), f"rule {spec['name']}: given is one of {', '.join(GIVEN)}")
    derived = space_data()["derived"]
    read = [x for _, args in preds for x in args if isinstance(x, str)]
    # a derived column is shown by the values it is made of (tp, pp, ... for their product)
    names = tuple(dict.fromkeys(y for x in read for y in (next(iter(derived[x].values())) if x in derived else [x])))
    names += ("pp", "n_layers") if check is not None else ()
    names += tuple(spec.get("shows", ()))
    return Rule(spec["name"], spec["reason"].format(**space_data()["defaults"]), spec["stage"], valid,
                spec.get("given", ""), names, spec.get("plan", ""))


RULES: tuple[Rule, ...] = tuple(_rule(spec) for spec in space_data()["rules"])



# -- the same rules over a question's given values ----------------------------------------------

# the facts a question knows by another name (ep divides the routed experts: n_routed_experts, else
# n_experts), what it assumes of the run where it says nothing, and the facts it states by giving a
# quantity (an uneven pipeline, by its fullest stage's layers): formulas/planner/space.toml [question]
FACT_SOURCES: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in space_data()["question"]["fact_sources"].items()}
QUESTION_DEFAULTS: dict[str, bool] = dict(space_data()["question"]["defaults"])
STATED_BY: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in space_data()["question"]["stated_by"].items()}


class GivenFacts:
    """The run's facts as a question knows them (base magnitudes), for the rules: a fact it
    does not know reads None, and a predicate over it holds."""

    def __init__(self, values: Mapping[str, Any]):
        self._values = values

    def __getattr__(self, name: str) -> object:
        if name.startswith("_"):
            raise AttributeError(name)
        for source in FACT_SOURCES.get(name, (name,)):
            if self._values.get(source) is not None:
                return self._values[source]
        if any(self._values.get(q) is not None for q in STATED_BY.get(name, ())):
            return True
        return QUESTION_DEFAULTS.get(name)

    def option_values(self) -> dict[str, tuple[str, ...]]:
        return {}       # a question's options are not columns: the option rules are the planner's


def _columns(values: Mapping[str, Any]) -> dict[str, object]:
    """The layout degrees among ``values`` (numbers or arrays, not text)."""
    return {d: values[d] for d in space_data()["dimensions"] if d in values and not isinstance(values[d], str)}


def given_breaks(values: Mapping[str, Any], level: str | None = None):
    """(rule, where it breaks: a bool or a mask over the values' grid) for every rule the data
    applies to given values (``given``; only those of ``level`` when named) that the given layout
    degrees break, over the facts known (``values``: name -> base magnitude). O(rules)."""
    cols = _columns(values)
    if not cols:
        return
    facts = GivenFacts(values)
    for rule in RULES:
        if not rule.given or (level is not None and rule.given != level):
            continue
        if not any(n in cols for n in rule.names):
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            ok = np.asarray(rule.valid(cols, facts), dtype=bool)     # type: ignore[arg-type]
        if not np.all(ok):
            yield rule, ~ok


def _shown(rule: Rule, values: Mapping[str, Any], bad: np.ndarray) -> str:
    """'tp = 3, n_heads = 64': the values a rule reads, at the first point where it breaks."""
    first = np.unravel_index(np.argmax(bad), bad.shape) if bad.ndim else ()
    facts = GivenFacts(values)
    out = []
    derived = space_data()["derived"]
    for n in rule.names:
        if n in derived:
            with np.errstate(invalid="ignore", divide="ignore"):
                v = _value(n, _columns(values), facts)      # type: ignore[arg-type]
        else:
            v = values.get(n) if n in space_data()["dimensions"] else getattr(facts, n, None)
        if v is None or isinstance(v, (str, bool)):
            continue
        n = next((x for x in FACT_SOURCES.get(n, ()) if values.get(x) is not None), n)    # the name it came by
        x = float(np.broadcast_to(np.asarray(v, dtype=float), bad.shape)[first]) if np.ndim(v) else float(v)
        out.append(f"{n} = {fmt(x)}")
    return ", ".join(out)


def check_given(values: Mapping[str, Any]) -> None:
    """Refuse given layout degrees that break a rule marked ``given = "refuse"`` (tp = 3 on 64
    heads, tp = 1e9, pp over more stages than layers): one DomainError naming the rule, the
    reason and the values, as the planner would reject that layout."""
    for rule, bad in given_breaks(values, "refuse"):
        points = f" at {int(bad.sum())} of {bad.size} points" if bad.ndim else ""
        raise DomainError(f"{rule.reason}: {_shown(rule, values, bad)}{points} (rule {rule.name}, "
                          f"formulas/{'/'.join(SPACE_FILE)}; symcalc plan searches only layouts that keep it)")


def given_warnings(values: Mapping[str, Any]) -> list[Finding]:
    """A warning for each rule marked ``given = "warn"`` the given degrees break (tp beyond a
    node, KV heads replicated over tp, a batch dp does not divide): answered all the same."""
    out = []
    for rule, bad in given_breaks(values, "warn"):
        said: dict = {"rule": rule.name, "reason": rule.reason, "shown": _shown(rule, values, bad)}
        if rule.plan:
            said["plan"] = rule.plan
        if bad.ndim:
            said.update(points=int(bad.sum()), of=int(bad.size))
        out.append(Finding("layout_rule", None, said, mask=bad if bad.ndim else None))
    return out


def answer_breaks(name: str, answer: Any, values: Mapping[str, Any]) -> list[Finding]:
    """A warning for each rule the data refuses given values for that an answer breaks with the
    given degrees (n_gpus = 25 solved from a throughput beside a given dp = 8: the degrees must
    divide the GPU count) and the given values alone keep: answered all the same, since what
    the answer is (the GPUs a throughput needs) is not a layout, but said. Empty for arrays."""
    if np.ndim(answer) or isinstance(answer, str) or name in space_data()["search"]["degrees"]:
        return []
    with_answer = {**values, name: float(answer)}
    before = {r.name for r, _ in given_breaks(values, "refuse")}
    out = []
    for rule, _ in given_breaks(with_answer, "refuse"):
        if rule.name not in before:
            out.append(Finding("layout_rule", name, {
                "rule": rule.name, "reason": rule.reason, "shown": _shown(rule, with_answer, np.asarray(True)),
                "plan": f"no layout of the given degrees has {name} = {fmt(float(answer))}"}))
    return out


def rounds_to_rules(target: str, derivation) -> bool:
    """Whether a whole answer rounds to the layout rules: a parallel degree, or any whole answer
    whose derivation solves one on the way (a GPU count from replicas of tp 8: 103 is 104). One
    that solves none (seed 004's GPU count from a per-GPU rate, beside a given dp) is a count,
    not a layout: a rule it breaks is said instead."""
    degrees = space_data()["search"]["degrees"]
    return target in degrees or any(n in degrees for s in derivation.steps for n in s.unknowns)


MAX_CANDIDATES = 1_000_000      # twice the largest value rounded to the rules (beyond it, left as solved)


def nearest_valid(name: str, exact: Any, rounded: Any, how: object, values: Mapping[str, Any]
                  ) -> tuple[Any, Finding | None]:
    """A whole-number parallel degree, or GPU count, solved for (one value), rounded to the
    nearest whole value that keeps every rule the data refuses given values for (a GPU count
    from a throughput a multiple of the given tp: 103 GPUs for replicas of tp 8 is 104)
    (the way ``how`` says: up keeps a limit that needs at least it, down one that needs at most),
    with a finding that says why and which warning rules it still breaks;
    ``rounded`` unchanged, and None, when it already keeps them, is not a degree, or no value
    within MAX_STEPS of it does. One point of :func:`_nearest_valid_points`, the grid's search, so
    that a question and a sweep through it round alike."""
    if np.ndim(exact) or np.ndim(rounded):
        return _nearest_valid_points(name, exact, rounded, how, values)
    x = float(exact)
    if not np.isfinite(x) or x > MAX_CANDIDATES / 2:
        return rounded, None
    moved, found = _nearest_valid_points(name, np.array([x]), np.array([float(rounded)]), how, values)
    return (rounded, None) if found is None else (float(moved[0]), found)


def _rounded_to_rule(name: str, x: float, best: float, was: float, how: object, values: Mapping[str, Any],
                     broken: list, **extra) -> Finding:
    """The finding of a value ``x`` that rounded to ``was``, which the ``broken`` rules refuse,
    and moved to ``best`` (with the warning rules ``best`` still breaks at ``values``)."""
    return Finding("rounded_to_rule", name, {"value": x, "rounded": best, "was": was,
                                             "rules": [r.name for r in broken], "reasons": [r.reason for r in broken],
                                             "how": how, **extra,
                                             "still": [r.reason for r, _ in given_breaks({**values, name: best})]})


MAX_STEPS = 4096        # whole values tried on each side of a point of a grid


def _nearest_valid_points(name: str, exact: Any, rounded: Any, how: object, values: Mapping[str, Any]
                          ) -> tuple[Any, Finding | None]:
    """:func:`nearest_valid` over a grid (a sweep of the same question): every point whose
    rounded value a rule refuses moves to the nearest whole value on the side ``how`` says that
    keeps every rule there, as one question at that point would; the finding is the first moved
    point's, with how many moved. Candidates are tried in order of distance, all the points
    still open at once: O(distance x open points x rules)."""
    arrays = {k: v for k, v in values.items() if np.ndim(v)}
    shape = np.broadcast_shapes(np.shape(exact), np.shape(rounded), *(np.shape(v) for v in arrays.values()))
    x = np.broadcast_to(np.asarray(exact, dtype=float), shape).ravel()
    out = np.array(np.broadcast_to(np.asarray(rounded, dtype=float), shape)).ravel()
    was = out.copy()
    flat = {k: np.broadcast_to(v, shape).ravel() for k, v in arrays.items()}

    def at(i) -> dict:
        return {**values, **{k: v[i] for k, v in flat.items()}}

    def refused(cand: np.ndarray, i: np.ndarray) -> np.ndarray:
        bad = np.zeros(cand.shape, bool)
        for _, b in given_breaks({**at(i), name: cand}, "refuse"):
            bad |= np.broadcast_to(b, cand.shape)
        return bad

    every = np.arange(out.size)
    todo = every[refused(out, every) & np.isfinite(x)]
    if todo.size == 0:
        return rounded, None
    xt = x[todo]
    lo, hi = np.floor(xt + 1e-9), np.ceil(xt - 1e-9)
    open_ = np.ones(todo.size, bool)
    for step in range(MAX_STEPS):
        sides = [hi + step] if how == "up" else [lo - step] if how == "down" else [lo - step, hi + step]
        best = np.full(todo.size, np.nan)
        for cand in sides:          # below first: of two as near, the smaller
            ok = open_ & (cand >= 1)
            ok[ok] = ~refused(cand[ok], todo[ok])
            nearer = ok & (np.isnan(best) | (np.abs(cand - xt) < np.abs(best - xt)))
            best[nearer] = cand[nearer]
        hit = ~np.isnan(best)
        out[todo[hit]] = best[hit]
        open_ &= ~hit
        if not open_.any():
            break
    moved = todo[~open_]
    if moved.size == 0:
        return rounded, None
    i = int(moved[0])
    broken = [r for r, _ in given_breaks({**at(i), name: float(was[i])}, "refuse")]
    grid = dict(points=int(moved.size), of=int(out.size)) if out.size > 1 else {}    # one question: one point
    return out.reshape(shape), _rounded_to_rule(name, float(x[i]), float(out[i]), float(was[i]), how, at(i), broken,
                                                **grid)
