"""What-if sweeps: one derivation evaluated over a grid of values.

A sweep is :func:`symcalc.solve` with some givens replaced by axes. The derivation is planned
and compiled once; numpy broadcasting does the rest, so a grid of a million points costs about
what the same formula written by hand in numpy costs. Axes combine into a grid (the first axis
varies along the first dimension). Points where the answer leaves its bounds (MFU above 1,
negative memory, no solution) or does not fit its capacity (per-GPU memory over gpu_memory,
when that is known) are marked infeasible, never silently dropped.

Axis specifications (text, as on the command line):

    START:STOP            50 points, evenly spaced ("1:64", "40%:60%", "16 GB:80 GB")
    START:STOP:COUNT      COUNT points
    START:STOP:COUNT:log  geometrically spaced (also START:STOP::log, 50 points)
    V1,V2,V3              these values

A whole-number quantity (GPUs, micro-batches, accumulation steps) takes whole values only:
without COUNT, every whole number from START to STOP (up to 1000 of them); with COUNT, the
spaced values rounded and deduplicated.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from symcalc.errors import QueryError, SymcalcError
from symcalc.findings import Finding
from symcalc.formats import render
from symcalc.library.loading import Library, default_library
from symcalc.library.records import QuantitySpec
from symcalc.query import reuse
from symcalc.query.findings import bounds_text, out_of_bounds, over_capacity
from symcalc.query.layout_rules import given_breaks, nearest_valid, rounds_to_rules
from symcalc.query.question import order_breaks
from symcalc.query import fit
from symcalc.query.results import Result, sentences
from symcalc.query.solve import solve, solve_unshown
from symcalc.query.stacks import check_new_values
from symcalc.query.values import read_value
from symcalc.units import Q, parse_unit

DEFAULT_COUNT = 50
MAX_WHOLE_RANGE = 1000      # every whole number of a range up to this many, else COUNT spaced ones
MAX_POINTS = 10_000_000     # a grid beyond this is a typo, not a question (80 MB per array)


@dataclass
class Axis:
    """One varied quantity: its values in base units and in its display unit."""

    name: str
    base: np.ndarray
    unit: str
    factor: float
    log: bool = False
    whole: bool = False

    @property
    def values(self) -> np.ndarray:
        """The values in the display unit."""
        return self.base / self.factor


@dataclass
class Sweep:
    """The target over a grid of the axes: values, feasibility, and the solve behind them."""

    target: str
    quantity: QuantitySpec
    unit: str
    axes: list[Axis]
    values: np.ndarray            # target in ``unit``, shape = one dimension per axis
    exact: np.ndarray | None      # unrounded, for whole-number targets
    feasible: np.ndarray          # bool, same shape
    infeasible: list[Finding]     # why points are infeasible: findings of kind infeasible_points
    capacity: tuple[str, float] | None   # (quantity, value in ``unit``) the target must not exceed
    result: Result                # the question at the first point (or over the arrays, when it has no answer there)
    # the solve's warnings as records (symcalc.findings), less what ``capacity`` already says
    findings: list[Finding] = field(default_factory=list)

    @property
    def warnings(self) -> list[str]:
        """The findings as sentences."""
        return sentences(self.findings)

    @property
    def assumptions(self) -> list[dict]:
        """The option fallbacks the question took (its default could not answer it: see
        :func:`symcalc.query.question.pose`), as the answer's assumptions carry them."""
        return [a for a in self.result.assumptions if a["kind"] == "fallback"]

    @property
    def reasons(self) -> list[str]:
        """Why points are infeasible, one sentence each (the ``infeasible`` findings, rendered)."""
        return sentences(self.infeasible)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.values.shape

    @property
    def quantity_values(self):
        """The values as a pint array quantity in ``unit``."""
        return Q(self.values, self.unit) if self.unit else Q(self.values)

    def to(self, unit: str):
        """The values converted to another unit of the same dimension (a pint quantity)."""
        return self.quantity_values.to(parse_unit(unit))

    def rows(self):
        """(axis values..., target value, feasible) for every grid point, first axis slowest."""
        grids = np.meshgrid(*[a.values for a in self.axes], indexing="ij")
        for idx in np.ndindex(self.shape):
            yield (*[float(g[idx]) for g in grids], float(self.values[idx]), bool(self.feasible[idx]))

    def to_csv(self, path) -> None:
        """Long format: one row per grid point; units in the header. Written atomically
        (symcalc.outfile): an existing file is replaced only by a complete one."""
        render("sweep_csv", self, path)

    def as_dict(self) -> dict:
        def clean(a):
            a = np.asarray(a, dtype=float)
            return np.where(np.isfinite(a), a, np.nan).tolist() if a.ndim else float(a)
        out = {
            "target": self.target, "unit": self.unit,
            "axes": [{"name": a.name, "unit": a.unit, "log": a.log, "values": a.values.tolist()} for a in self.axes],
            "values": _nulls(clean(self.values)), "feasible": self.feasible.tolist(),
            "n_points": int(self.values.size), "n_feasible": int(self.feasible.sum()),
            "capacity": ({"name": self.capacity[0], "value": self.capacity[1], "unit": self.unit}
                         if self.capacity else None),
            "options": dict(self.result.options), "assumptions": self.assumptions,
            "presets": dict(self.result.presets),
            "reasons": list(self.reasons), "warnings": list(self.warnings),
            "infeasible": [render("finding_json", f) for f in self.infeasible],
            "findings": [render("finding_json", f) for f in self.findings],
        }
        if self.exact is not None:
            out["exact"] = _nulls(clean(self.exact))
        return out

    def json(self, indent: int | None = None) -> str:
        return json.dumps(self.as_dict(), indent=indent)

    def plot(self, path=None, **kw):
        """Write a line plot (one axis) or heatmap (two) to ``path`` (.png, .svg or .pdf) and
        return the matplotlib Figure (the session's backend is left as it was). With no path,
        drawn on pyplot's current figure (inline in a notebook, as pandas draws) and written nowhere."""
        return render("sweep_plot", self, path, **kw)

    def _repr_html_(self) -> str:
        """Jupyter: a table of the points and the plot, inline (not the dataclass's fields)."""
        return render("sweep_html", self)

    def __repr__(self) -> str:
        return f"<Sweep {self.target} over {', '.join(a.name for a in self.axes)}: {self.values.size} points>"


def sweep(target: str, given: Mapping[str, object] | None = None, /, *, vary: Mapping[str, object],
          options: Mapping[str, object] | None = None, to: str | None = None,
          library: Library | None = None, hardware: str | None = None, model: str | None = None,
          **values) -> Sweep:
    """Solve ``target`` over the grid of ``vary`` ({name: axis}) with the other values fixed.

    An axis is a spec string (see the module docstring), or an array, list or range of values
    (numbers, or a ``(values, "unit")`` pair).

    Returns
    -------
    Sweep

    Raises
    ------
    QueryError
        No axis, an axis that is the target or also given, an unreadable axis, or a grid of
        more than ``MAX_POINTS`` points.
    SymcalcError
        The errors of :func:`symcalc.solve` for bad names, values and questions.
    """
    lib = library or default_library()
    fixed = {**(given or {}), **values}
    axes = _axes(lib, target, vary, fixed)
    tq = lib.quantity(target)
    shape = tuple(len(a.base) for a in axes)
    kw: dict[str, Any] = dict(options=options, to=to, library=lib, hardware=hardware, model=model)
    r, vals, exact, outside, capacity_values, over = _evaluated(lib, tq, fixed, axes, shape, kw)
    vals, ruled = _to_layout_rules(tq, r, axes, vals, exact)
    feasible, infeasible, capacity = _feasible(lib, tq, r, vals, outside, capacity_values, over)
    feasible, infeasible = _ordered(lib, r, axes, feasible, infeasible)
    feasible, infeasible = _workload_fit(lib, tq, r, axes, fixed, vals, feasible, infeasible, kw)
    # the capacity mask and its reason say where the target does not fit: not also a warning
    # (a report, such as the busiest pipeline stage, is the first point's: it may differ across
    # the grid; so is the first point's fit, which the grid's own mask replaces)
    findings = [f for f in r.findings if not f.violation and f.kind not in ("reported", "fit")
                and not (capacity and f.kind == "over_capacity") and not (ruled and f.kind == "rounded_to_rule")]
    findings += [ruled] if ruled else []
    return Sweep(target=tq.name, quantity=tq, unit=r.unit, axes=axes, values=vals, exact=exact,
                 feasible=feasible, infeasible=infeasible, capacity=capacity, result=r, findings=findings)


def _to_layout_rules(tq, r: Result, axes: list[Axis], vals: np.ndarray, exact) -> tuple[np.ndarray, Finding | None]:
    """The grid's answer with every point rounded to a value the layout rules allow, as
    :func:`symcalc.solve` rounds one point (a GPU count for replicas of tp 8 a multiple of 8;
    layout_rules.rounds_to_rules says which answers do), and the finding that says so, or None.
    The grid branch evaluates the first point's derivation and rounds only to whole numbers."""
    if exact is None or not rounds_to_rules(tq.name, r.derivation):
        return vals, None
    knowns = {k: g.magnitude for k, g in r.given.items()}
    knowns.update({a.name: a.base.reshape([-1 if j == i else 1 for j in range(len(axes))]) for i, a in enumerate(axes)})
    how = r.rounding if r.rounding in ("up", "down") else "nearest"
    rounded, ruled = nearest_valid(tq.name, exact * r.factor, vals * r.factor, how, knowns)
    return np.asarray(rounded, dtype=float) / r.factor, ruled


def _axes(lib: Library, target: str, vary, fixed: dict) -> list[Axis]:
    """The axes of ``vary``, read, or the error that says what is wrong with them (none, the
    target varied, a quantity both varied and given, a grid of more than MAX_POINTS)."""
    if not vary:
        raise QueryError("a sweep needs at least one varied quantity (vary={name: 'START:STOP'})")
    if not isinstance(vary, Mapping):
        raise QueryError(f"vary is a mapping of quantity names to axes (vary={{name: 'START:STOP'}}); "
                         f"got {type(vary).__name__}")
    target = lib.quantity(target).name
    fixed_names = {lib.quantity(k).name for k in fixed}
    axes: list[Axis] = []
    for raw_name, spec in vary.items():
        if isinstance(raw_name, str) and raw_name in lib.options and raw_name not in lib.all_names():
            raise QueryError(f"{raw_name} is an option, not a quantity: a sweep varies quantities; set it with "
                             f"--option {raw_name}=... and compare two of its values with "
                             f"symcalc compare ... --vs {raw_name}=VALUE (symcalc plan searches layouts)")
        q = lib.quantity(raw_name)
        if q.name == target:
            raise QueryError(f"{q.name} is the target; it cannot also be varied")
        if q.name in fixed_names or any(a.name == q.name for a in axes):
            raise QueryError(f"{q.name} is both varied and given; give it once")
        axes.append(read_axis(q, spec))
    size = math.prod(len(a.base) for a in axes)
    if size > MAX_POINTS:
        raise QueryError(f"the grid has {size:,} points, more than {MAX_POINTS:,}; use fewer or coarser axes")
    return axes


def _evaluated(lib: Library, tq, fixed: dict, axes: list[Axis], shape: tuple, kw: dict):
    """(the Result behind the sweep, the answer on the grid, its exact value for a whole number,
    where each computed quantity leaves its bounds, the capacity on the grid, where the answer
    is over it)."""
    grid = {}
    for i, a in enumerate(axes):
        dims = [1] * len(axes)
        dims[i] = -1
        grid[a.name] = (a.values.reshape(dims), a.unit)
    template = _template(tq.name, fixed, axes, kw)
    if template is not None and template.quantity.kind != "text":
        # the first point's derivation over the whole grid, masked (symcalc.query.reuse.points: the
        # evaluator's chunked kernel for large grids, its step walker for small ones; never refused)
        r = template
        check_new_values(r, {a.name: a.base.reshape([-1 if j == i else 1 for j in range(len(axes))])
                             for i, a in enumerate(axes)})
        p = reuse.points(r, {**fixed, **grid}, also=(tq.name,) if tq.whole else (), outside=True)
        vals = np.array(np.broadcast_to(p.value, shape), dtype=float)
        exact = np.array(np.broadcast_to(p.also[tq.name][0], shape), dtype=float) if tq.whole else None
        outside = {name: np.broadcast_to(bad, shape) for name, bad in (p.outside or {}).items()}
        capacity_values = None if p.capacity is None else np.broadcast_to(p.capacity, shape)
        over = None if p.capacity is None else np.broadcast_to(~p.fits & np.isfinite(vals), shape)
        return r, vals, exact, outside, capacity_values, over
    # no first point to take the derivation from (it has no solution there, or a text
    # answer): solve() over the arrays says what holds where
    r = solve(tq.name, {**fixed, **grid}, on_bounds="flag", **kw)
    vals = np.broadcast_to(np.asarray(r.value, dtype=float), shape).copy()
    exact = np.broadcast_to(np.asarray(r.exact, dtype=float), shape).copy() if tq.whole else None
    outside = {name: np.broadcast_to(bad & np.isfinite(np.asarray(r.values[name], dtype=float)), shape)
               for _, name, _, _, _, _, bad in out_of_bounds(lib, r.derivation.steps, r.values)}
    cap = over_capacity(lib, tq, vals * r.factor, r.given)
    capacity_values = None if cap is None else np.broadcast_to(np.asarray(cap[1], dtype=float) / r.factor, shape)
    over = None if cap is None else np.broadcast_to(cap[2], shape)
    return r, vals, exact, outside, capacity_values, over


def _feasible(lib: Library, tq, r: Result, vals, outside: dict, capacity_values, over):
    """(where the answer is feasible, why points are not (infeasible_points findings), the
    capacity (name, value) or None):
    a point is not feasible with no solution, a computed value outside its bounds, a whole
    number rounded outside its bounds, or an answer over its capacity."""
    feasible = np.isfinite(vals)
    found: list[Finding] = []

    def infeasible(quantity: str, why: str, points: int, **values) -> None:
        found.append(Finding("infeasible_points", quantity, {"why": why, "points": points, **values}))
    if not feasible.all():
        infeasible(tq.name, "no_solution", int((~feasible).sum()))
    for name, bad in outside.items():
        # points with no value at all are counted above, not as leaving a bound; in the order of
        # the derivation, a point is told by the first value out of bounds (a negative KV cache),
        # not again by those derived from it (the batch, the step times)
        bad = bad & feasible
        if bad.any():
            infeasible(name, "out_of_bounds", int(bad.sum()), domain=bounds_text(lib.quantities[name]))
            feasible &= ~bad
    if tq.whole:
        # a whole number rounded outside its bounds (a micro-batch of 0: the smallest already
        # breaks the limit) is refused by solve (rounds_outside): not a feasible point here either
        with np.errstate(invalid="ignore"):
            rounded_out = feasible & ~np.asarray(tq.domain.contains(vals * r.factor), dtype=bool)
        if rounded_out.any():
            infeasible(tq.name, "rounds_outside", int(rounded_out.sum()), domain=bounds_text(tq))
            feasible &= ~rounded_out
    capacity = None
    if capacity_values is not None and over is not None and tq.fits_in:
        capacity = (tq.fits_in, float(np.min(capacity_values)))
        if over.any():
            infeasible(tq.name, "over_capacity", int(over.sum()), capacity=tq.fits_in, value=capacity[1], unit=r.unit)
            feasible &= ~over
    return feasible, found, capacity


def _ordered(lib: Library, r: Result, axes: list[Axis], feasible: np.ndarray, found: list[Finding]
             ) -> tuple[np.ndarray, list[Finding]]:
    """The points where a known value exceeds one it never can (``not_above``: a micro-batch
    above the global batch), or where the layout breaks a structure rule solve refuses
    (query.layout_rules: tp = 3 on 64 heads), are not feasible either."""
    knowns: dict[str, object] = {n: g.magnitude for n, g in r.given.items()}
    for i, a in enumerate(axes):
        knowns[a.name] = a.base.reshape([-1 if j == i else 1 for j in range(len(axes))])
    for name, other, over in order_breaks(lib, knowns):
        bad = feasible & np.broadcast_to(over, feasible.shape)
        if bad.any():
            found.append(Finding("infeasible_points", name, {"why": "above", "other": other, "points": int(bad.sum())}))
            feasible = feasible & ~bad
    for rule, broken in given_breaks(knowns, "refuse"):     # a layout solve refuses (tp = 3 on 64 heads)
        bad = feasible & np.broadcast_to(broken, feasible.shape)
        if bad.any():
            found.append(Finding("infeasible_points", rule.names[0], {"why": "rule", "rule": rule.name,
                                                                      "reason": rule.reason, "points": int(bad.sum())}))
            feasible = feasible & ~bad
    return feasible, found


def _workload_fit(lib: Library, tq, r: Result, axes: list[Axis], fixed: dict, vals: np.ndarray,
                  feasible: np.ndarray, found: list[Finding], kw: dict) -> tuple[np.ndarray, list[Finding]]:
    """The points where the memory of the sweep's workload does not fit (symcalc.query.fit, as
    every answer states it: the same workloads as the first point's answer, its amount solved
    over the grid from the fixed values, the axes and the answer) are not feasible either."""
    workloads = {f.quantity for f in r.findings if f.kind == "fit"}
    known: dict[str, object] = {k: g.magnitude for k, g in r.given.items() if not g.origin}
    for i, a in enumerate(axes):
        known[a.name] = a.base.reshape([-1 if j == i else 1 for j in range(len(axes))])
    if tq.kind != "text":
        known[tq.name] = vals * r.factor
    for w in fit.workloads(lib):
        if w.amount not in workloads:
            continue
        at = fit.fit_at(lib, w, known, r.all_options, solve_unshown, kw.get("hardware"), kw.get("model"))
        if at is None:
            continue
        bad = feasible & np.broadcast_to(np.asarray(at.over, dtype=bool), feasible.shape)
        if bad.any():
            q = lib.quantities[w.amount]
            found.append(Finding("infeasible_points", w.amount,
                                 {"why": "over_capacity", "points": int(bad.sum()), "capacity": w.capacity,
                                  "value": float(np.min(at.limit)) / q.factor, "unit": q.display_unit}))
            feasible = feasible & ~bad
    return feasible, found


def _template(target: str, fixed: dict, axes: list[Axis], kw: dict) -> Result | None:
    """The question at the grid's first point (its derivation is the sweep's), or None when
    that point has no answer to take it from."""
    try:
        return solve(target, {**fixed, **{a.name: (a.values[0], a.unit) for a in axes}}, on_bounds="flag", **kw)
    except SymcalcError:
        return None


def read_axis(q: QuantitySpec, spec: object) -> Axis:
    """The values of one axis, from a spec string or an array-like of values.

    Returns
    -------
    Axis

    Raises
    ------
    QueryError
        The spec cannot be read, or gives no values.
    """
    if isinstance(spec, str) and ":" in spec:
        base, log = _range(q, spec)
    elif isinstance(spec, str) and "," in spec:
        base = np.array([_one(q, part, spec) for part in _shared_unit(spec.split(","))], dtype=float)
        log = False
    elif isinstance(spec, str):
        raise QueryError(f"cannot read the axis {q.name}={spec!r}: write START:STOP[:COUNT][:log] or V1,V2,...")
    else:
        if isinstance(spec, range):
            spec = np.arange(spec.start, spec.stop, spec.step)
        base = np.asarray(read_value(q, spec).magnitude, dtype=float).reshape(-1)
        log = False
    if base.size == 0:
        raise QueryError(f"the axis {q.name} has no values")
    if q.whole:
        base = _whole(q, base)
    return Axis(name=q.name, base=base, unit=q.display_unit, factor=q.factor, log=log, whole=bool(q.whole))


_NUMBER_THEN_UNIT = re.compile(r"^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*(\S.*)?$")


def _shared_unit(parts: list[str]) -> list[str]:
    """An axis written with its unit once ('1e5,3e6,1e7 token/s', '1e5:1e7 token/s'): when
    exactly one value has a unit and the others are bare numbers, that unit is theirs too."""
    units = [m.group(1) if m else None for m in (_NUMBER_THEN_UNIT.match(p) for p in parts)]
    matched = [_NUMBER_THEN_UNIT.match(p) is not None for p in parts]
    with_unit = [u for u in units if u]
    if all(matched) and len(with_unit) == 1 and len(parts) > 1:
        return [p if u else f"{p.strip()} {with_unit[0]}" for p, u in zip(parts, units)]
    return parts


def _range(q: QuantitySpec, spec: str) -> tuple[np.ndarray, bool]:
    parts = [p.strip() for p in spec.split(":")]
    log = bool(parts) and parts[-1].lower() in ("log", "lin")
    scale = parts.pop().lower() if log else "lin"
    log = scale == "log"
    if len(parts) not in (2, 3) or not parts[0] or not parts[1]:
        raise QueryError(f"cannot read the axis {q.name}={spec!r}: write START:STOP[:COUNT][:log]")
    first, last = _shared_unit(parts[:2])
    start, stop = _one(q, first, spec), _one(q, last, spec)
    count = None
    if len(parts) == 3 and parts[2]:
        try:
            count = int(parts[2])
        except ValueError:
            raise QueryError(f"the axis {q.name}={spec!r}: COUNT must be a whole number, got {parts[2]!r}") from None
        if count < 2:
            raise QueryError(f"the axis {q.name}={spec!r}: COUNT must be at least 2")
        if count > MAX_POINTS:
            raise QueryError(f"the axis {q.name}={spec!r}: {count:,} points is more than {MAX_POINTS:,}")
    if start == stop:
        raise QueryError(f"the axis {q.name}={spec!r} starts and stops at the same value")
    if log and (start <= 0 or stop <= 0):
        raise QueryError(f"the axis {q.name}={spec!r}: a log axis needs positive START and STOP")
    if count is None and q.whole and abs(stop - start) <= MAX_WHOLE_RANGE and not log:
        lo, hi = sorted((start, stop))
        values = np.arange(math.ceil(lo - 1e-9), math.floor(hi + 1e-9) + 1, dtype=float)
        return (values if start < stop else values[::-1]), False
    count = count or DEFAULT_COUNT
    values = np.geomspace(start, stop, count) if log else np.linspace(start, stop, count)
    return values, log


def _one(q: QuantitySpec, text: str, spec: str) -> float:
    if not text.strip():
        raise QueryError(f"the axis {q.name}={spec!r} has an empty value")
    return float(read_value(q, text.strip()).magnitude)


def _whole(q: QuantitySpec, base: np.ndarray) -> np.ndarray:
    """Whole values only, in order, without repeats (geometric spacing repeats small ones)."""
    rounded = np.round(base)
    _, first = np.unique(rounded, return_index=True)
    out = rounded[np.sort(first)]
    if not np.all(q.domain.contains(out)):
        bad = out[~q.domain.contains(out)][0]
        raise QueryError(f"the axis {q.name} reaches {bad:g}, outside {q.domain}")
    return out


def _nulls(x):
    """NaN -> None, recursively, so that the JSON is valid."""
    if isinstance(x, list):
        return [_nulls(v) for v in x]
    return None if isinstance(x, float) and not math.isfinite(x) else x
