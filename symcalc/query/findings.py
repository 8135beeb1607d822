"""The checks of an evaluated derivation that become the answer's findings (symcalc.findings):
values outside their bounds, counts far from whole, an answer over its capacity, given values
not used, steps found numerically, known values above a limit, the quantities a formula
reports beside the answer; and the errors for a step with no finite value anywhere or an
answer that overflows the unit it is shown in."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from symcalc.engine.bounds import outside_of
from symcalc.engine.derivation import Derivation
from symcalc.errors import NoFitError, NoSolutionError, NotDeterminedError
from symcalc.findings import Finding
from symcalc.library.loading import Library
from symcalc.query import unused
from symcalc.query.layout_rules import given_warnings
from symcalc.query.parts import Parts, parts_of, sum_parts
from symcalc.query.results import Result
from symcalc.query.values import GivenValue, implausible
from symcalc.units.format import with_unit


def answer_findings(lib, derivation: Derivation, ev, tq, exact, rounded, given: dict,
              checked: set | frozenset = frozenset(), how: str | None = None, brief: bool = False) -> list[Finding]:
    """What to tell the user about an evaluated derivation: bound violations, then warnings
    (``brief``: the violations only).

    Raises NoSolutionError when a step has no finite value at all.
    """
    _check_solvable(lib, derivation, ev)
    findings = _violations(lib, derivation, ev.values)
    _check_fits(lib, derivation, ev.values, findings)
    if tq.whole and not findings and not np.all(tq.domain.contains(rounded)):
        findings.append(Finding("rounds_outside", tq.name,
                                {"value": np.min(exact) / tq.factor, "rounded": np.min(rounded) / tq.factor,
                                 "unit": tq.display_unit, "how": how, "bounds": _bounds(tq)}))
    if brief:
        return findings
    findings += list(ev.findings)
    # a rounded whole-number answer already says its exact value: the counts it was derived
    # through are as far from whole as it is (dp = 16.85 from data_parallel_group_size = 16.85),
    # and rounding it settles them too; otherwise a count the chain makes fractional is said
    if not (tq.whole and _far_from_whole(exact)):
        findings += _whole_number_notes(lib, derivation, ev.values)
    # an answer far outside real hardware from given values each plausible (one that is not, or a
    # value outside its bounds, already says what is wrong)
    odd = None if any(f.violation for f in findings) or any(
        implausible(lib.quantities[k], g) for k, g in given.items() if not g.origin) else _implausible_answer(tq, rounded)
    if odd is not None:
        findings.append(odd)
    findings += solved_above_limits(lib, derivation, ev.values, rounded, given)
    findings += given_warnings({k: g.magnitude for k, g in given.items()})
    if how == "nearest" and _far_from_whole(exact):
        findings.append(Finding("rounded_nearest", tq.name, {"value": np.min(exact) / tq.factor}))
    capacity = over_capacity(lib, tq, exact, given)
    if capacity is not None:
        name, cap, over = capacity
        if np.any(over):
            worst = float(np.max(np.asarray(exact, dtype=float)))
            split = parts_of(lib, derivation, ev.values, tq.name) if np.ndim(over) == 0 else None
            largest = (split.largest[0], split.largest[1] / tq.factor) if split and split.largest else None
            findings.append(Finding(
                "over_capacity", tq.name,
                {"value": worst / tq.factor, "capacity": float(np.min(cap)) / tq.factor,
                 "excess": (worst - float(np.min(cap))) / tq.factor, "unit": tq.display_unit,
                 "points": None if np.ndim(over) == 0 else int(np.sum(over)),
                 "of": None if np.ndim(over) == 0 else int(np.size(over)), "largest": largest},
                related=(name,), mask=over if np.ndim(over) else None))
    typed = [q for q in derivation.route.unused
             if (q not in given or not given[q].origin) and not (capacity and q == capacity[0])
             and q not in checked]
    if typed:
        findings.append(not_used_finding(lib, derivation.route.target, typed, derivation.options))
    for i in sorted(ev.numeric_steps):
        s = derivation.steps[i]
        if s.tearing is not None:     # a forward model run backwards: one search, the rest follows
            findings.append(Finding("found_numerically", s.tearing.tear,
                                    {"torn": True, "equations": len(s.formulas), "follow": len(s.unknowns) - 1},
                                    related=tuple(s.unknowns), formulas=tuple(f.id for f in s.formulas)))
        else:
            findings.append(Finding("found_numerically", s.unknowns[0], {"torn": False},
                                    related=tuple(s.unknowns), formulas=tuple(f.id for f in s.formulas)))
    return findings


def not_used_finding(lib, target: str, typed: list[str], options: Mapping[str, str], derived: bool = True
                     ) -> Finding:
    """The finding that the given values ``typed`` were not used for ``target``, with what each
    gives instead (a quantity not asked for, or a count under another option) and, for a
    ``derived`` target, what they give together with it."""
    users = {q: u for q in typed if (u := unused.users(lib, q, options))}
    values: dict = {"used_by": users} if users else {}
    if derived and (together := unused.combined_with(lib, target, typed, options)):
        values["with_target"] = together
        values["target"] = target
    return Finding("not_used", related=tuple(typed), values=values)


def _implausible_answer(tq, exact) -> Finding | None:
    """The answer far outside what real hardware and models have (``plausible`` in its data, as
    for a given value): 2.4e17 GPUs from a deadline of a nanosecond. None when it is plausible."""
    if tq.plausible is None or isinstance(exact, str):
        return None
    arr = np.asarray(exact, dtype=float)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        return None
    lo, hi = tq.plausible
    value = float(np.max(arr)) if float(np.max(arr)) > hi else float(np.min(arr))
    if lo <= value <= hi:
        return None
    return Finding("implausible", tq.name, {"value": value / tq.factor, "unit": tq.display_unit,
                                            "side": "above" if value > hi else "below",
                                            "limit": (hi if value > hi else lo) / tq.factor, "slips": [],
                                            "answer": True})


def _check_solvable(lib, derivation: Derivation, ev) -> None:
    """A step with no finite value anywhere is an error, not a NaN answer: either the numbers
    left floating point's range (1e300 x 1e300), or the equations hold for a whole range of
    the unknown (not determined), or they have no admissible root."""
    values = ev.values
    for s in derivation.steps:
        for name in s.unknowns:
            q = lib.quantities[name]
            if q.kind == "text" or (isinstance(values[name], float) and math.isfinite(values[name])):
                continue
            v = np.asarray(values[name], dtype=float)
            if (v.size and np.isfinite(v.flat[0])) or np.any(np.isfinite(v)) or np.any(q.domain.contains(v)):
                continue      # (0, inf] admits inf
            ids = ", ".join(f.id for f in s.formulas)
            inputs = [np.asarray(values[x], dtype=float) for x in s.inputs]
            if np.any(np.isinf(v)) or any(np.any(np.abs(x) > 1e250) or np.any((x != 0) & (np.abs(x) < 1e-250))
                                          for x in inputs):
                raise NoSolutionError(f"{name} cannot be computed ({ids}): the values are beyond the range of "
                                      "floating point (about 1e-308 to 1e308); check their units and exponents")
            shown = derivation.target if derivation.target in s.unknowns else name
            q = lib.quantities[shown]
            if np.any(ev.undetermined.get(name, False)):
                raise NotDeterminedError(
                    f"{shown} is not determined by these values: {_equations_text(s)} hold for a whole "
                    f"range of {name}, not one value; give {shown} itself, or a value that pins it down")
            cause = _out_of_range_input(lib, derivation, s, values)
            if cause:
                # the question's own quantity is what does not fit, whichever step of its
                # derivation found out (an intermediate's name would only puzzle)
                target = lib.quantities[derivation.target]
                within = f" in {target.domain}" if shown == derivation.target else ""
                raise NoFitError(f"no value of {derivation.target}{within} fits: {cause}")
            raise NoSolutionError(f"no value of {shown} in {q.domain} satisfies {_equations_text(s)} with these values")


def _check_fits(lib, derivation: Derivation, values: dict, violations: list[Finding]) -> None:
    """An inverse question (fewest GPUs, largest batch) whose chain solves a part of a sum below
    its bounds, on the way to the question's own quantity, has no value that fits: the parts
    known before that step already exceed the total. Said as _check_solvable says it when the
    step has no root at all (the same sentence, whichever memory figure the chain runs through),
    not as a bound violation of an intermediate. One value only (a sweep flags its points).

    Raises NoSolutionError ``no value of n_gpus fits: activation_memory = ... already exceed ...``.
    """
    first = next((f for f in violations if f.kind == "out_of_bounds" and f.mask is None), None)
    if first is None:
        return
    at = next(i for i, s in enumerate(derivation.steps) if first.quantity in s.unknowns)
    if not any(derivation.target in s.unknowns for s in derivation.steps[at:]):
        return
    cause = _out_of_range_input(lib, derivation, derivation.steps[at], values)
    if not cause and at + 1 < len(derivation.steps):
        # else the violating step's own remainder: the KV cache a serving replica's memory
        # leaves once its weights are in (a step that solves one part of a sum as what the
        # others leave), read as the next step would see it
        cause = _out_of_range_input(lib, derivation, derivation.steps[at + 1], values, remainders_only=True)
    if cause:
        raise NoFitError(f"no value of {derivation.target} fits: {cause}")


def check_displayable(lib, derivation: Derivation, values: dict, target: str, unit: str, factor: float) -> None:
    """A value finite in base units may overflow in the unit it is shown in (1e308 s is 1e311
    ms): an answer of inf with exit status 0 is an error instead, naming the quantity. Checks
    the target in its output unit and every quantity the derivation computed in its display
    unit. O(steps)."""
    def overflows(v, f: float) -> bool:
        if isinstance(v, float):        # one value (numpy's float64 too): no array to build
            return math.isfinite(v) and not math.isfinite(float(v) / f)
        with np.errstate(over="ignore", invalid="ignore"):
            a = np.asarray(v, dtype=float)
            return bool(np.any(np.isfinite(a) & ~np.isfinite(a / f)))
    checks = [(target, unit, factor)] + [(n, lib.quantities[n].display_unit, lib.quantities[n].factor)
                                         for s in derivation.steps for n in s.unknowns
                                         if n != target and lib.quantities[n].kind != "text"]
    for name, shown, f in checks:
        v = values.get(name)
        if v is not None and not isinstance(v, str) and overflows(v, f):
            raise NoSolutionError(f"{name} overflows in {shown or 'its unit'}: its value is beyond the range of "
                                  "floating point (about 1e308) there; check the given values' units and exponents")


def _equations_text(step) -> str:
    """A step's equations for a message: the text of up to two, else their ids."""
    ids = ", ".join(f.id for f in step.formulas)
    if len(step.formulas) <= 2:
        return f"{'; '.join(f.equation for f in step.formulas)} ({ids})"
    return f"the equations {ids}"


def _out_of_range_input(lib, derivation: Derivation, step, values: dict, remainders_only: bool = False) -> str | None:
    """Why a step has no root, when the reason lies upstream: an earlier step gave a value
    outside its quantity's bounds (the classic case: everything else already needs more than
    gpu_memory, so the activation memory left over is negative). The first such value is the
    cause; when it is what a total leaves for one of its parts, the message names the other
    parts, largest first: they are what does not fit. ``remainders_only``: only that case."""
    before = derivation.steps[:derivation.steps.index(step)]
    for earlier, name, q, sample, _, _, _ in out_of_bounds(lib, before, values):
        shown = with_unit(sample / q.factor, q.display_unit)
        split = sum_parts(lib, earlier.formulas[0], values, leave_out=name) if len(earlier.formulas) == 1 else None
        if split is not None and split.parts and sample < q.domain.lo:
            others = [(n, v) for n, v in split.parts if v != 0]
            return _exceeds(lib, derivation, split, others, sum(v for _, v in others), values,
                            f"leaving {name} = {shown}", others[0][0] if others else name)
        if remainders_only:
            return None
        ids = ", ".join(f.id for f in earlier.formulas)
        return f"it would need {name} = {shown} ({ids}), outside {bounds_text(q)}"
    return None if remainders_only else _known_parts_overflow(lib, derivation, step, values)


def _known_parts_overflow(lib, derivation: Derivation, step, values: dict) -> str | None:
    """Why a block with a sum in it has no root: the parts known before the block already
    exceed the total, even with the parts the block solves for at their least (a memory part
    at 0). The unknown (a micro-batch, say) then sits in several parts at once, so no earlier
    step leaves a negative remainder to point at (_out_of_range_input). An unknown part that is
    itself a sum in the block (the tensors' peak inside the device's total) is read through its
    own known parts. O(size of the block)."""
    sums = {f.lhs_name: f for f in step.formulas if f.breakdown and f.lhs_name in step.unknowns}
    for f in step.formulas:
        if not f.breakdown or f.lhs_name in step.unknowns or f.lhs_name not in values:
            continue
        known: list[tuple[str, float]] = []
        least: dict[str, float] = {}
        _split_known(lib, f, sums, set(step.unknowns), values, known, least)
        if any(not math.isfinite(v) for v in least.values()):
            continue
        known = sorted(((n, v) for n, v in known if v != 0), key=lambda p: -p[1])
        need = sum(v for _, v in known) + sum(least.values())
        total = float(np.asarray(values[f.lhs_name], dtype=float).flat[0])
        if not known or need <= total:
            continue
        split = Parts(f.lhs_name, total, tuple(known))
        return _exceeds(lib, derivation, split, known, need, values, f"with nothing left for {' or '.join(least)}",
                        known[0][0])
    return None


def _split_known(lib, formula, sums: dict, unknowns: set, values: dict, known: list, least: dict) -> None:
    """The parts of a breakdown ``formula`` known before its block (into ``known``, with their
    values) and those it solves for at their least (into ``least``), reading an unknown part
    that is itself a sum in the block through its own parts."""
    for n in formula.breakdown:
        if n not in unknowns:
            known.append((n, float(np.asarray(values[n], dtype=float).flat[0])))
        elif n in sums and sums[n] is not formula:
            _split_known(lib, sums[n], sums, unknowns, values, known, least)
        else:
            least[n] = lib.quantities[n].domain.lo


def _exceeds(lib, derivation: Derivation, split, parts: list, need: float, values: dict, left: str,
             largest: str) -> str:
    """'a = 1129 GB alone already exceeds total = 80 GB (from ...), <left>; the largest part is
    <largest>': the sentence both overflow diagnoses end in."""
    t = lib.quantities[split.total]
    listed = " + ".join(f"{n} = {with_unit(v / t.factor, t.display_unit)}" for n, v in parts) or "nothing"
    alone = " alone" if len(parts) == 1 else f" (together {with_unit(need / t.factor, t.display_unit)})"
    return (f"{listed}{alone} already exceed{'s' if len(parts) == 1 else ''} {split.total} = "
            f"{with_unit(split.total_value / t.factor, t.display_unit)}{_origin(lib, derivation, split.total, values)}, "
            f"{left}; the largest part is {largest}")


def _origin(lib, derivation: Derivation, name: str, values: dict) -> str:
    """' (gpu_memory 80 GB - memory_headroom 0 GB)': where a computed total came from, when it
    came straight from given values; '' otherwise."""
    for s in derivation.steps:
        if name in s.unknowns:
            if all(x in derivation.route.given for x in s.inputs) and len(s.inputs) <= 3:
                shown = ", ".join(f"{x} = {with_unit(float(np.asarray(values[x]).flat[0]) / lib.quantities[x].factor, lib.quantities[x].display_unit)}"
                                  for x in s.inputs)
                return f" (from {shown})"
            return ""
    return ""


def out_of_bounds(lib, steps: list, values: dict):
    """(step, name, quantity, a bad value, how many are bad, of how many, where) for every
    numeric value the steps computed outside its quantity's bounds (or not finite), in step
    order: the evaluator's bounds test (symcalc.engine.bounds)."""
    for s in steps:
        for name, v, bad in outside_of(lib.quantities, s.unknowns, values):
            q = lib.quantities[name]
            sample = float(v[bad].flat[0]) if v.ndim else float(v)
            yield s, name, q, sample, int(bad.sum()), (v.size if v.ndim else 0), bad


def _violations(lib, derivation: Derivation, values: dict) -> list[Finding]:
    """Computed values outside their quantity's bounds, one finding each."""
    out = []
    for s, name, q, sample, n_bad, size, bad in out_of_bounds(lib, derivation.steps, values):
        out.append(Finding("out_of_bounds", name,
                           {"value": sample / q.factor if np.isfinite(sample) else None, "unit": q.display_unit,
                            "points": n_bad if size else None, "of": size or None, "bounds": _bounds(q)},
                           related=tuple(_given_ancestors(derivation, s)), formulas=tuple(f.id for f in s.formulas),
                           mask=bad if size else None))
    return out


def _given_ancestors(derivation: Derivation, step) -> list[str]:
    """The known quantities (given or defaults) a step's result depends on, through the plan."""
    produced = derivation.computed
    return sorted(q for q in derivation.upstream(step.inputs) if q not in produced)


def _bounds(q) -> dict:
    """A quantity's bounds in display terms, for a finding (x 100 for a percentage)."""
    d, percent = q.domain, q.display_unit == "%"
    scale = 100 if percent else 1
    return {"lo": d.lo * scale, "hi": d.hi * scale, "lo_open": d.lo_open, "hi_open": d.hi_open, "percent": percent}


def bounds_text(q) -> str:
    d = q.domain
    if q.display_unit == "%":
        return f"{'(' if d.lo_open else '['}{d.lo * 100:g} %, {d.hi * 100:g} %{')' if d.hi_open else ']'}"
    return str(d)


def _far_from_whole(value) -> bool:
    v = np.asarray(value, dtype=float)
    if not np.not_equal(np.round(v), v).any():
        return False      # exactly whole: the usual case, in three passes instead of six
    return bool(np.any(np.abs(v - np.round(v)) > 1e-6 * np.maximum(np.abs(v), 1)))


def _whole_number_notes(lib, derivation: Derivation, values: dict) -> list[Finding]:
    notes = []
    for s in derivation.steps:
        for name in s.unknowns:
            q = lib.quantities[name]
            if q.whole is None or name == derivation.target:
                continue
            v = np.asarray(values[name], dtype=float)
            if _far_from_whole(v):
                sample = float(v.flat[0]) if v.ndim else float(v)
                notes.append(Finding("not_whole", name, {"value": sample}))   # base units, as computed
    return notes


def over_capacity(lib, q, value, given: Mapping) -> tuple[str, np.ndarray | float, np.ndarray | bool] | None:
    """(capacity name, its value, where ``value`` exceeds it) when ``q`` must fit in a known
    capacity (``fits_in``: per-GPU memory in gpu_memory), else None. Base units throughout."""
    if not q.fits_in or q.fits_in not in given:
        return None
    cap = given[q.fits_in].magnitude
    with np.errstate(invalid="ignore"):
        return q.fits_in, cap, np.asarray(value, dtype=float) > np.asarray(cap, dtype=float)


def above_limits(lib: Library, knowns: Mapping[str, GivenValue], solved: Mapping[str, object] | None = None
                 ) -> list[Finding]:
    """Warnings for values above a limit they may exceed at a cost (``warn_above`` in the data: a
    context longer than the model's max_position_embeddings): each known value, and each value
    ``solved`` (name -> base magnitude: what a derivation computed, its answer rounded) against a
    limit known or solved. A solved value's finding says so (``solved``) and, for an array, where
    (``mask``). O(values x limits)."""
    out = []
    for name, value, origin in [*((k, g.magnitude, None) for k, g in knowns.items()),
                                *((k, v, True) for k, v in (solved or {}).items())]:
        for other in lib.quantities[name].warn_above:
            limit = knowns[other].magnitude if other in knowns else (solved or {}).get(other)
            if limit is None or isinstance(value, str) or isinstance(limit, str):
                continue
            a, b = np.asarray(value, dtype=float), np.asarray(limit, dtype=float)
            with np.errstate(invalid="ignore"):
                over = a > b * (1 + 1e-12)
            if not np.any(over):
                continue
            q, o = lib.quantities[name], lib.quantities[other]
            said = {"value": float(np.max(a[over] if a.ndim else a)) / q.factor, "unit": q.display_unit,
                    "limit": other, "limit_value": float(np.min(b)) / o.factor, "limit_unit": o.display_unit,
                    "description": o.description, "origin": knowns[other].origin or "" if other in knowns else "",
                    "solved": bool(origin)}
            if origin and np.ndim(over):
                said.update(points=int(np.sum(over)), of=int(np.size(over)))
            out.append(Finding("above_limit", name, said, mask=over if origin and np.ndim(over) else None))
    return out


def solved_above_limits(lib: Library, derivation: Derivation, values: Mapping[str, object], rounded,
                        knowns: Mapping[str, GivenValue]) -> list[Finding]:
    """:func:`above_limits` for the values a derivation computed (its answer as rounded): a
    context solved from a memory budget can run far past the model's max_position_embeddings,
    which a given one would be warned of."""
    solved = {n: (rounded if n == derivation.target else values[n]) for s in derivation.steps for n in s.unknowns
              if n in values and lib.quantities[n].warn_above}
    if not solved:
        return []
    return [f for f in above_limits(lib, knowns, solved) if f.values["solved"]]


def reported_findings(lib, result: Result) -> list[Finding]:
    """The quantities the formulas of the derivation ask to be stated beside the answer
    (``reports`` in the data: which pipeline stage a memory figure is that of), each one more
    step from the answer's values; left out where it cannot be had or is not one number."""
    out = []
    names = dict.fromkeys(n for step in result.derivation.steps for f in step.formulas for n in f.reports)
    for name in names:
        if name == result.target or np.ndim(result.base_value) != 0:
            continue
        value = result.companion_value(name)
        q = lib.quantities[name]
        if isinstance(value, str):
            out.append(Finding("reported", name, {"value": value, "unit": "", "description": q.description}))
            continue
        if value is None or not np.isfinite(value):
            continue
        out.append(Finding("reported", name, {"value": value / q.factor, "unit": q.display_unit,
                                              "description": q.description}))
    return out
