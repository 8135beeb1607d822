"""The Python API: one call from a question to an answer with its derivation.

    >>> import symcalc
    >>> r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s",
    ...                   n_gpus=64, peak_flops="1979 TFLOP/s")
    >>> print(r)
    mfu = 4.974 %

The CLI is a thin layer over :func:`solve`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np

from . import cache, units
from .derivation import Derivation, SingularBlock
from .errors import (DimensionError, LibraryError, NoSolutionError, OutOfBoundsError, QueryError, SymcalcError,
                     UnderdeterminedError)
from .library import Library, default_library
from .plan import make_plan, underdetermined_error
from .render.numbers import fmt, with_unit
from .result import Result, StepView
from .values import GivenValue, read_value


def read_given(library: Library, values) -> dict[str, GivenValue]:
    """Resolve names (aliases allowed) and read every value; a name given twice is an error.

    ``values`` is a mapping or an iterable of (name, value) pairs.
    """
    out: dict[str, GivenValue] = {}
    items = values.items() if isinstance(values, Mapping) else values
    for raw_name, raw in items:
        if not isinstance(raw_name, str):
            raise QueryError(f"quantity names are text, got {raw_name!r}")
        q = library.quantity(raw_name)
        if q.name in out:
            raise QueryError(f"{q.name} is given twice (as {out[q.name].name!r} and {raw_name!r})"
                             if raw_name != q.name else f"{q.name} is given twice")
        out[q.name] = read_value(q, raw)
    return out


def _derivation(library: Library, target: str, known: frozenset, options: dict[str, str],
                diagnose: bool = True):
    """The cached derivation for (target, known names, options), built on first use.

    ``diagnose=False`` skips the search for what is missing when the knowns do not suffice.
    """
    key = (target, known, tuple(sorted(options.items())))
    hit = library.derivation_cache.get(key) or _cached_derivation(library, key)
    if hit is not None:
        library.derivation_cache[key] = hit
        return hit
    defaults = {name: spec for name, spec in library.coefficient_defaults(options).items() if name not in known}
    zero = {name for name, (text, _) in defaults.items()
            if units.parse_quantity(text, name).magnitude == 0}
    formulas = library.active_formulas(options)
    for _ in range(len(formulas)):
        try:
            plan = make_plan(formulas, target, known, defaults, zero, diagnose=diagnose,
                             limits=_limits(library) if not library.quantities[target].fits_in else {})
        except UnderdeterminedError as e:
            if not diagnose:
                raise
            e = _only_workable_sets(library, target, known, options, e)
            own = library.quantities[target]
            if own.default is not None:
                e.message += (f". ({target} has a default, {own.default}, but it is only used as an input; "
                              "give it to use it)")
                e.args = (e.message,)
            raise e from None
        used = _defaults_used(library, plan, defaults)
        try:
            derivation = Derivation(library, plan, options,
                                    {k: d["magnitude"] for k, d in used.items() if "magnitude" in d})
            break
        except SingularBlock as singular:
            # The block's equations share a fact (C = 6ND, F = 6NR, T = D/R, C = FT): one of them
            # adds nothing for this question. Plan again without it.
            formulas = [f for f in formulas if f.id != singular.formula]
    else:  # pragma: no cover - every round removes a formula, so make_plan fails first
        raise NoSolutionError(f"the equations for {target} are not independent")
    library.derivation_cache[key] = (derivation, used)
    _store_derivation(library, key, derivation, used)
    return derivation, used


def _disk_key(library: Library, key: tuple) -> str | None:
    """The on-disk cache key of a derivation: the library's content hash and the question's
    shape (target, known names, options); None for a library built in memory."""
    if library.fingerprint is None:
        return None
    target, known, options = key
    return cache.key_of(library.fingerprint, target, *sorted(known), "|", *(f"{k}={v}" for k, v in options))


def _cached_derivation(library: Library, key: tuple):
    """(derivation, defaults used) from the on-disk cache, compiled for this process, or None."""
    disk_key = _disk_key(library, key)
    hit = cache.load("derivation", disk_key) if disk_key else None
    if not (isinstance(hit, tuple) and len(hit) == 2 and isinstance(hit[0], Derivation)):
        return None
    try:
        return hit[0].bind(library), hit[1]
    except Exception:   # an entry that does not fit this library after all: rebuild it
        return None


def _store_derivation(library: Library, key: tuple, derivation: Derivation, used: dict) -> None:
    """Keep a new derivation on disk (never an error: the answer does not depend on it)."""
    disk_key = _disk_key(library, key)
    if not disk_key:
        return
    try:
        derivation.closed_form(derivation.usual_choices())   # kept with it: sympy's subs is slow
    except Exception:
        return
    cache.store("derivation", disk_key, (derivation, used))


def _only_workable_sets(library: Library, target: str, known: frozenset, options: dict[str, str],
                        error: UnderdeterminedError) -> UnderdeterminedError:
    """The error with only the suggested sets that really settle the target.

    The suggestions come from the structure of the equations; a block of equations that is
    structurally sound can still be dependent (C = 6ND, F = 6NR, T = D/R and C = FT share one
    fact), and following such a suggestion would end in another error. Each suggestion whose
    route goes through a block is therefore tried (and its derivation cached for the next
    question); a suggestion without blocks is sound as it stands.
    """
    if not error.missing:
        return error
    workable = []
    for extra in error.missing:
        try:
            _derivation(library, target, known | set(extra), options, diagnose=False)
        except UnderdeterminedError:
            continue
        workable.append(extra)
    if workable == error.missing:
        return error
    return underdetermined_error(target, set(known), workable, _limits(library))


def _limits(library: Library) -> dict[str, str]:
    """Slack quantities and what their value at the limit asks ("0 GB for the largest ...")."""
    return {q.name: f"{q.limit} {q.limit_meaning}".strip() for q in library.quantities.values() if q.limit}


def _defaults_used(library: Library, plan, defaults: dict) -> dict[str, dict]:
    """What the plan takes from defaults: coefficient values and default rules, with sources."""
    used: dict[str, dict] = {}
    for name in plan.defaults:
        text, source = defaults[name]
        magnitude = float(units.parse_quantity(text, name).to_base_units().magnitude)
        used[name] = {"value": text, "source": source, "magnitude": magnitude}
    for fid in plan.default_rules:
        f = library.formulas[fid]
        lhs = library.symbols[f.lhs]
        used[lhs] = {"value": f.equation.split("=", 1)[1].strip(), "source": f"default rule {fid}: {f.source}",
                     "rule": fid}
    return used


def solve(target: str, given: Mapping[str, object] | None = None, /, *,
          options: Mapping[str, object] | None = None, to: str | None = None,
          library: Library | None = None, on_bounds: str = "raise",
          hardware: str | None = None, model: str | None = None, diagnose: bool = True,
          conflicts: bool = True, rtol: float = 0.02, rounding: str | None = None, **values) -> Result:
    """Solve for ``target`` from known values, under ``options``.

    ``given`` (a mapping) and keyword arguments name known quantities (aliases allowed); each
    value may be text with a unit (``"1979 TFLOP/s"``, ``"24h"``), a number (for counts,
    tokens, FLOP and USD), a ``(value, "unit")`` pair, a quantity from :func:`symcalc.Q`, or
    a numpy array (the answer broadcasts). ``to`` picks the unit of the answer.
    ``on_bounds="raise"`` raises OutOfBoundsError when a computed value leaves its quantity's
    bounds (MFU above 1, negative memory); ``"flag"`` records it in ``result.violations``.
    ``hardware`` and ``model`` name presets (``symcalc list hardware``, ``symcalc list models``;
    a model may also be the path of a Hugging Face config.json): they fill in known values and
    options, below anything given explicitly, and never the target itself.
    With more values than the shortest derivation needs, each one it leaves out is solved for
    from the others and compared (``conflicts=True``): a disagreement beyond ``rtol`` becomes a
    warning and an entry of ``result.conflicts``. ``diagnose=False`` makes an underdetermined
    question fail at once, without the (slower) search for what would settle it.
    ``rounding`` ("up", "down" or "nearest") overrides how a whole-number answer is rounded: the
    pp that keeps a bubble under a target rounds down, the GPUs a deadline needs round up.
    """
    if on_bounds not in ("raise", "flag"):
        raise ValueError("on_bounds must be 'raise' or 'flag'")
    lib = library or default_library()
    if not isinstance(target, str):
        raise QueryError(f"the target is a quantity name, got {target!r}")
    tq = lib.quantity(target)
    if rounding is not None and rounding not in ("up", "down", "nearest"):
        raise QueryError(f"rounding is up, down or nearest, got {rounding!r}")
    if rounding is not None and not tq.whole:
        raise QueryError(f"{tq.name} is not a whole number: there is nothing to round")
    how = rounding or tq.whole
    if given is not None and not isinstance(given, Mapping):
        raise QueryError("given values must be a mapping of name -> value")
    knowns = read_given(lib, [*(given or {}).items(), *values.items()])
    explicit_options = _option_mapping(options) or {}
    presets = _presets(hardware, model)
    preset_options = {k: v for p in presets for k, v in p.options.items()}
    opts = lib.option_values({**preset_options, **explicit_options})
    knowns.update(_preset_values(lib, presets, opts, tq.name, knowns))
    if tq.name in knowns:
        result = _conversion(lib, tq, knowns, opts, to)
        if knowns[tq.name].origin:
            result.warnings[:] = [f"{tq.name} is the published value from the preset ({knowns[tq.name].origin})"]
        return result
    derivation, defaults_used = _derivation(lib, tq.name, frozenset(knowns), opts, diagnose=diagnose)

    env = {k: v.magnitude for k, v in knowns.items()}
    env.update({k: d["magnitude"] for k, d in defaults_used.items() if "magnitude" in d})
    ev = derivation.evaluate(env)
    unit, factor = _output_unit(tq, to)
    exact = ev.values[tq.name]
    rounded = _round(exact, how)
    found, checked = [], set()
    if conflicts:
        found, checked = cross_check(lib, derivation.plan.unused, knowns, options=explicit_options, rtol=rtol,
                                     hardware=hardware, model=model)
    warnings, violations = _findings(lib, derivation, ev, tq, exact, rounded, knowns, checked, how)
    warnings += [c["warning"] for c in found]
    warnings += [w for p in presets for w in p.warnings]
    if violations and on_bounds == "raise":
        raise OutOfBoundsError(violations[0] + ("" if len(violations) == 1 else f" (and {len(violations) - 1} more)"))

    steps = [StepView(number=i + 1, formulas=list(s.formulas), method=s.method,
                      solves_for=list(s.unknowns), inputs=list(s.inputs),
                      solution=(s.candidates[ev.choices[i]] if s.candidates and ev.choices.get(i, -1) >= 0 else {}),
                      numeric=i in ev.numeric_steps)
             for i, s in enumerate(derivation.steps)]
    return Result(library=lib, target=tq.name, quantity=tq, unit=unit, factor=factor,
                  base_value=exact, rounded_base=rounded, given=knowns, presets={p.kind: p.key for p in presets},
                  preset_args={"hardware": hardware, "model": model},
                  options=_relevant_options(derivation, defaults_used, explicit_options, opts),
                  all_options=opts, defaults_used={k: dict(v) for k, v in defaults_used.items()},
                  values=ev.values, steps=steps, on_bounds=on_bounds,
                  derivation=derivation, closed_form=derivation.closed_form(ev.choices), rounding=how,
                  unused=[u for u in derivation.plan.unused if u != tq.fits_in], warnings=warnings,
                  violations=violations, conflicts=[{k: v for k, v in c.items() if k != "warning"} for c in found])


def cross_check(lib, names, knowns: dict, *, options: dict, rtol: float, hardware=None, model=None
                ) -> tuple[list[dict], set[str]]:
    """Each of ``names`` (given values a derivation left out) solved for from the other given
    values and compared with its given value. Returns (the disagreements beyond ``rtol``, the
    names that could be checked at all). Preset values and arrays are not checked."""
    from .check import relation
    conflicts, checked = [], set()
    if any(np.ndim(v.magnitude) for v in knowns.values()):
        return conflicts, checked
    typed = {k: v for k, v in knowns.items() if not v.origin}
    for name in names:
        if name not in typed:
            continue
        others = {k: (float(v.magnitude) / lib.quantities[k].factor, lib.quantities[k].display_unit)
                  for k, v in typed.items() if k != name}
        try:
            r = solve(name, others, options=options, library=lib, hardware=hardware, model=model,
                      on_bounds="flag", diagnose=False, conflicts=False)
        except SymcalcError:
            continue
        checked.add(name)
        found = relation(r, name, float(typed[name].magnitude), rtol)
        if not found.agrees:
            conflicts.append(found.conflict(rtol))
    return conflicts, checked


def _findings(lib, derivation: Derivation, ev, tq, exact, rounded, given: dict,
              checked: set = frozenset(), how: str | None = None) -> tuple[list[str], list[str]]:
    """What to tell the user about an evaluated derivation: (warnings, bound violations).

    Raises NoSolutionError when a step has no finite value at all.
    """
    _check_solvable(lib, derivation, ev.values)
    violations = _violations(lib, derivation, ev.values)
    if tq.whole and not violations and not np.all(tq.domain.contains(rounded)):
        violations.append(f"{tq.name} = {with_unit(np.min(exact) / tq.factor, tq.display_unit)} rounds "
                          f"{how} to {with_unit(np.min(rounded) / tq.factor, tq.display_unit)}, outside "
                          f"{_bounds_text(tq)}: a whole number this small makes no sense here")
    warnings = list(ev.warnings) + _whole_number_notes(lib, derivation, ev.values)
    if how == "nearest" and _far_from_whole(exact):
        warnings.append(f"{tq.name} = {fmt(np.min(exact) / tq.factor, 6)} is not a whole number; rounded to the "
                        "nearest: the given values do not fit whole numbers exactly (round up or down to choose: "
                        "--round, or rounding= in Python)")
    capacity = over_capacity(lib, tq, exact, given)
    if capacity is not None:
        name, cap, over = capacity
        if np.any(over):
            where = "" if np.ndim(over) == 0 else f" at {int(np.sum(over))} of {np.size(over)} points"
            worst = float(np.max(np.asarray(exact, dtype=float)))
            warnings.append(f"{tq.name} = {with_unit(worst / tq.factor, tq.display_unit)} exceeds {name} = "
                            f"{with_unit(float(np.min(cap)) / tq.factor, tq.display_unit)}{where}: it does not fit")
    typed = [q for q in derivation.plan.unused
             if (q not in given or not given[q].origin) and not (capacity and q == capacity[0])
             and q not in checked]
    if typed:
        warnings.append(f"not used by this derivation: {', '.join(typed)} "
                        "(no formula on the route needs it; check the options if it should matter)")
    for i in sorted(ev.numeric_steps):
        s = derivation.steps[i]
        warnings.append(f"{', '.join(s.unknowns)} found numerically ({', '.join(f.id for f in s.formulas)})")
    return warnings, violations


def over_capacity(lib, q, value, given: Mapping) -> tuple[str, object, object] | None:
    """(capacity name, its value, where ``value`` exceeds it) when ``q`` must fit in a known
    capacity (``fits_in``: per-GPU memory in gpu_memory), else None. Base units throughout."""
    if not q.fits_in or q.fits_in not in given:
        return None
    cap = given[q.fits_in].magnitude
    with np.errstate(invalid="ignore"):
        return q.fits_in, cap, np.asarray(value, dtype=float) > np.asarray(cap, dtype=float)


def _presets(hardware: str | None, model: str | None) -> list:
    from .presets import find_preset
    out = []
    if hardware:
        out.append(find_preset("hardware", str(hardware)))
    if model:
        out.append(find_preset("models", str(model)))
    return out


def _preset_values(lib: Library, presets: list, opts: dict, target: str, given: dict) -> dict[str, GivenValue]:
    """Known values from presets, below the user's own and never the target."""
    out: dict[str, GivenValue] = {}
    dtype = lib.compute_dtype(opts)
    for preset in presets:
        for name, (text, source) in preset.resolve(opts, dtype).items():
            if name not in lib.quantities:
                raise LibraryError(f"preset {preset.key} sets '{name}', which the formula library does not define")
            if (name == target and name not in preset.published) or name in given or name in out:
                continue
            gv = read_value(lib.quantities[name], text)
            gv.origin = f"{preset.kind[:-1] if preset.kind == 'models' else preset.kind} {preset.key}: {source}"
            out[name] = gv
    return out


def _option_mapping(options) -> Mapping | None:
    if options is None or isinstance(options, Mapping):
        return options
    try:
        pairs = dict(options)
    except (TypeError, ValueError):
        raise QueryError("options must be a mapping like {'zero_stage': 3}") from None
    return pairs


def _conversion(lib: Library, q, knowns: dict[str, GivenValue], opts: dict, to: str | None) -> Result:
    """The target is itself given: the answer is that value, in the unit asked for."""
    from .plan import Plan
    unit, factor = _output_unit(q, to)
    value = knowns[q.name].magnitude
    plan = Plan(target=q.name, steps=(), given=(q.name,), defaults=(), unused=tuple(sorted(set(knowns) - {q.name})))
    derivation = Derivation(lib, plan, opts, {})
    return Result(library=lib, target=q.name, quantity=q, unit=unit, factor=factor, base_value=value,
                  rounded_base=_round(value, q.whole), rounding=q.whole, given=knowns, presets={}, options={}, all_options=opts,
                  defaults_used={}, values={k: v.magnitude for k, v in knowns.items()}, steps=[],
                  derivation=derivation, closed_form=q.symbol, unused=list(plan.unused),
                  warnings=[f"{q.name} is given: the answer is that value converted"])


def _output_unit(q, to: str | None) -> tuple[str, float]:
    if not to:
        return q.display_unit, q.factor
    unit = units.parse_unit(to, "--to")
    dim = units.registry().get_dimensionality(unit)
    if to.strip() in ("%", "percent") and q.display_unit != "%" and q.domain.hi > 1:
        raise DimensionError(f"cannot show {q.name} in %: it is a count, not a fraction")
    if dim != q.dim:
        from .dims import show
        raise DimensionError(f"cannot show {q.name} in {to}: {q.name} is measured in {show(q.dim)}, "
                             f"{to} in {show(dim)}")
    return to.strip(), units.to_base_factor(to.strip())


def _round(value, how: str | None):
    if how is None:
        return value
    v = np.asarray(value, dtype=float)
    # Float noise, not a real excess: 1120.0000000002 GPUs is 1120, not 1121. Relative (4.7e-21
    # GPUs still rounds up to 1) and capped (3000000000.4 GPUs rounds up to 3000000001).
    slack = np.minimum(1e-12 * np.abs(v), 1e-3)
    if how == "up":
        out = np.ceil(v - slack)
    elif how == "down":
        out = np.floor(v + slack)
    else:
        out = np.floor(v + 0.5)     # half up, not numpy's half-to-even
    return float(out) if out.ndim == 0 else out


def _check_solvable(lib, derivation: Derivation, values: dict) -> None:
    """A step with no finite value anywhere is an error, not a NaN answer: either the numbers
    left floating point's range (1e300 x 1e300) or the equations have no admissible root."""
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
            cause = _out_of_range_input(lib, derivation, s, values)
            if cause:
                raise NoSolutionError(f"no value of {shown} in {q.domain} fits: {cause}")
            eqs = "; ".join(f.equation for f in s.formulas) if len(s.formulas) <= 2 else "its equations"
            raise NoSolutionError(f"no value of {shown} in {q.domain} satisfies {eqs} ({ids}) with these values")


def _out_of_range_input(lib, derivation: Derivation, step, values: dict) -> str | None:
    """Why a step has no root, when the reason lies upstream: an earlier step gave one of its
    inputs a value outside that quantity's bounds (the classic case: everything else already
    needs more than gpu_memory, so the activation memory left over is negative)."""
    before = derivation.steps[:derivation.steps.index(step)]
    for earlier, name, q, sample, _, _, _ in out_of_bounds(lib, before, values):
        if name in step.inputs:
            ids = ", ".join(f.id for f in earlier.formulas)
            return (f"it would need {name} = {with_unit(sample / q.factor, q.display_unit)} ({ids}), "
                    f"outside {_bounds_text(q)}")
    return None


def out_of_bounds(lib, steps: list, values: dict):
    """(step, name, quantity, a bad value, how many are bad, of how many, where) for every
    numeric value the steps computed outside its quantity's bounds, in step order."""
    for s in steps:
        for name in s.unknowns:
            q = lib.quantities[name]
            if q.kind == "text" or (isinstance(values[name], float) and q.domain.holds(values[name])):
                continue
            v = np.asarray(values[name], dtype=float)
            if q.domain.holds_all(v):
                continue
            bad = ~q.domain.contains(v)
            if np.any(bad):
                sample = float(v[bad].flat[0]) if v.ndim else float(v)
                yield s, name, q, sample, int(bad.sum()), (v.size if v.ndim else 0), bad


def _violations(lib, derivation: Derivation, values: dict) -> list[str]:
    """Computed values outside their quantity's bounds, each said in one sentence."""
    out = []
    for s, name, q, sample, n_bad, size, _ in out_of_bounds(lib, derivation.steps, values):
        shown = with_unit(sample / q.factor, q.display_unit) if np.isfinite(sample) else "undefined (NaN)"
        where = f" at {n_bad} of {size} points" if size else ""
        ids = ", ".join(f.id for f in s.formulas)
        sources = ", ".join(_given_ancestors(derivation, s))
        out.append(f"{name} = {shown}{where} is outside its bounds {_bounds_text(q)}: the values of "
                   f"{sources} are inconsistent, or outside the range of {ids}")
    return out


def _given_ancestors(derivation: Derivation, step) -> list[str]:
    """The known quantities (given or defaults) a step's result depends on, through the plan."""
    producer = {u: s for s in derivation.steps for u in s.unknowns}
    seen, out, todo = set(), set(), list(step.inputs)
    while todo:
        q = todo.pop()
        if q in seen:
            continue
        seen.add(q)
        if q in producer:
            todo.extend(producer[q].inputs)
        else:
            out.add(q)
    return sorted(out)


def _bounds_text(q) -> str:
    d = q.domain
    if q.display_unit == "%":
        return f"{'(' if d.lo_open else '['}{d.lo * 100:g} %, {d.hi * 100:g} %{')' if d.hi_open else ']'}"
    return str(d)


def _far_from_whole(value) -> bool:
    v = np.asarray(value, dtype=float)
    if not np.not_equal(np.round(v), v).any():
        return False      # exactly whole: the usual case, in three passes instead of six
    return bool(np.any(np.abs(v - np.round(v)) > 1e-6 * np.maximum(np.abs(v), 1)))


def _whole_number_notes(lib, derivation: Derivation, values: dict) -> list[str]:
    notes = []
    for s in derivation.steps:
        for name in s.unknowns:
            q = lib.quantities[name]
            if q.whole is None or name == derivation.target:
                continue
            v = np.asarray(values[name], dtype=float)
            if _far_from_whole(v):
                sample = float(v.flat[0]) if v.ndim else float(v)
                notes.append(f"{name} = {fmt(sample, 6)} is not a whole number")
    return notes


def _relevant_options(derivation: Derivation, defaults_used: dict, explicit: Mapping, opts: dict) -> dict:
    """The options that shaped this derivation (selected a formula or set a default used),
    plus any given explicitly."""
    names = set(explicit)
    for s in derivation.steps:
        for f in s.formulas:
            names |= set(f.when)
    for d in defaults_used.values():
        src = d.get("source", "")
        if src.startswith("option "):
            names.add(src[len("option "):].split("=", 1)[0])
    return {k: opts[k] for k in sorted(names)}
