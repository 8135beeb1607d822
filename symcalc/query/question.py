"""The question resolved: its given values read, its options (given, from presets, implied by
the values, set by a training stack in force) and its known values, with the derivation that
answers it (:func:`pose`), or why there is none."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from symcalc import units
from symcalc.engine.derivation import Derivation
from symcalc.errors import (
    DimensionError,
    DomainError,
    NoSolutionError,
    QueryError,
    SymcalcError,
    UnderdeterminedError,
)
from symcalc.library.loading import Library
from symcalc.query import fit, stacks
from symcalc.query.run import Run, declare, stack_reason
from symcalc.query.derivations import derivation_for
from symcalc.query.implied import Resolved, resolve_options
from symcalc.query.layout_rules import check_given
from symcalc.query.presetvalues import preset_values
from symcalc.query.values import GivenValue, read_value
from symcalc.units import describe_dimension as show
from symcalc.units.format import with_unit


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
    _one_grid(out)
    return out


MAX_DIMS = 32       # numpy's own limit on an array's dimensions


def _one_grid(given: dict[str, GivenValue]) -> None:
    """The given arrays broadcast to one grid of at most MAX_DIMS dimensions, or the QueryError
    that names their shapes (else numpy's own error would come out of the first formula)."""
    shapes = {name: np.shape(g.magnitude) for name, g in given.items() if np.ndim(g.magnitude)}
    deep = [name for name, shape in shapes.items() if len(shape) > MAX_DIMS]
    if deep:
        raise QueryError(f"{deep[0]}: an array of {len(shapes[deep[0]])} dimensions (at most {MAX_DIMS})")
    try:
        np.broadcast_shapes(*shapes.values())
    except ValueError:
        listed = ", ".join(f"{name} {shape}" for name, shape in shapes.items())
        raise QueryError(f"the arrays do not broadcast to one grid: {listed}") from None


def option_mapping(options) -> Mapping | None:
    if options is None or isinstance(options, Mapping):
        return options
    try:
        pairs = dict(options)
    except (TypeError, ValueError):
        raise QueryError("options must be a mapping like {'zero_stage': 3}") from None
    return pairs


def output_unit(q, to: str | None) -> tuple[str, float]:
    if not to:
        return q.display_unit, q.factor
    unit = units.parse_unit(to, "--to")
    dim = units.registry().get_dimensionality(unit)
    if to.strip() in ("%", "percent") and q.display_unit != "%" and q.domain.hi > 1 and dim == q.dim:
        raise DimensionError(f"cannot show {q.name} in %: it is a count, not a fraction")
    if dim != q.dim:
        raise DimensionError(f"cannot show {q.name} in {to}: {q.name} is measured in {show(q.dim)}, "
                             f"{to} in {show(dim)}")
    return to.strip(), units.to_base_factor(to.strip())


@dataclass
class Posed:
    """A question with its options, known values and derivation (or why it has none)."""

    resolved: Resolved
    knowns: dict[str, GivenValue]
    settled: set[str]                           # options the question itself settles (stacks.decided)
    derivation: Derivation | None = None        # None: the target is given, or ``error``
    defaults_used: dict = field(default_factory=dict)
    error: SymcalcError | None = None
    diagnosed: bool = True                      # ``error`` carries the search for what is missing
    in_force: set[str] = field(default_factory=set)     # setting options (stacks) in force
    quiet: set[str] = field(default_factory=set)        # setting options not in force
    fallback: dict[str, str] = field(default_factory=dict)  # option -> its fallback value, taken (see pose)
    about_run: bool = False                             # a model or hardware named (stacks.is_run)
    run: Run | None = None                              # the run, declared once (symcalc.query.run)

    @property
    def used(self) -> set[str]:
        """The options the derivation depends on."""
        return stacks.options_used(self.derivation, self.defaults_used) if self.derivation else set()

    @property
    def options(self) -> dict[str, str]:
        """The options that decide this question, for asking it again (Result.all_options): every
        option's value, less the stacks not in force (their defaults did not apply, so giving
        them would apply their defaults and conditions to the question asked again)."""
        return {k: v for k, v in self.resolved.values.items() if k not in self.quiet}


def pose(lib: Library, tq, typed: dict[str, GivenValue], explicit: dict, presets: list, diagnose: bool) -> Posed:
    """The question's options, known values and derivation (:func:`_pose`), with an option's
    fallback value where its default leaves the question open.

    An option may declare a fallback (``fallback = { value = ..., summary = ..., reason = ... }``
    in the option data: memory_figure's textbook sum, where the measured peak needs the model's
    shapes). When the user did not choose the option (not given, not a preset's, not implied by
    the values, not set by a stack) and the question is underdetermined under the default, it
    is posed again with the fallback value; if that derivation answers and depends on the
    option, it is the answer, with ``fallback`` saying so (the answer's first lines and its
    assumptions). A question the default answers is never changed; one neither answers keeps
    the default's error (diagnosed later, by the caller, as before). One pose more, by routing
    alone, for an underdetermined question under each such option.
    """
    preset_options = {k for p in presets for k in p.options}
    choosable = [(name, opt.fallback.value) for name, opt in lib.options.items()
                 if opt.fallback is not None and name not in explicit and name not in preset_options]
    if not choosable:
        return _declared(lib, tq, _pose(lib, tq, typed, explicit, presets, diagnose), presets)
    posed = _pose(lib, tq, typed, explicit, presets, diagnose=False)
    if not isinstance(posed.error, UnderdeterminedError):
        return _declared(lib, tq, posed, presets)
    implied = {imp.option for imp in posed.resolved.implied}
    free = [(name, value) for name, value in choosable
            if posed.resolved.values.get(name) == lib.options[name].default
            and name not in implied | set(posed.resolved.set_by)]
    tried = []
    for name, value in free:
        try:
            again = _pose(lib, tq, typed, {**explicit, name: value}, presets, diagnose=False)
        except SymcalcError:        # the value is refused here (a stack in force does not run it)
            continue
        if again.derivation is not None and name in again.used:
            again.fallback = {name: value}
            return _declared(lib, tq, again, presets)
        tried.append((name, value, again))
    # neither answers: a question (its target or its values) that reaches only the fallback
    # workload's own quantities (a serving batch) is diagnosed under that workload, so that the
    # refusal names what it lacks there (the margin, for the largest batch that fits), not the
    # default's formulas
    for name, value, again in tried:
        if isinstance(again.error, UnderdeterminedError) and _reaches_only(lib, tq.name, typed, posed.options,
                                                                           name, value):
            return _declared(lib, tq, again, presets)
    return _declared(lib, tq, posed, presets)


def _reaches_only(lib: Library, target: str, typed: Mapping, options: Mapping[str, str], name: str,
                  value: str) -> bool:
    """Whether the question reaches the own quantities of option ``name``'s workload ``value``
    and of no other (symcalc.query.fit.decide): by what it names, else by all its target is
    written in (a deployment's rate reaches a batch), else by all its given values are written
    in (a request rate reaches a serving batch's KV cache, whatever the target)."""
    footprints = (lambda: {target, *typed}, lambda: {*fit.written_in(lib, target, options), *typed},
                  lambda: {target, *set().union(*(fit.written_in(lib, q, options) for q in typed))})
    return any([w.value for w in fit.decide(lib, options, (), footprint()) if w.option == name] == [value]
               for footprint in footprints)


def _declared(lib: Library, tq, posed: Posed, presets: list) -> Posed:
    """``posed`` with its run (:func:`symcalc.query.run.declare`): the workloads the question
    settles or reaches through its derivation, the stacks in force and why, the presets, and
    each parallel group's degree and links as the question fixes them."""
    d = posed.derivation
    footprint = {tq.name} | ({*d.route.given, *posed.defaults_used, *(n for s in d.steps for n in s.unknowns)}
                             if d is not None else set())
    posed.run = declare(lib, options=posed.options, settled=posed.settled | set(posed.fallback) | posed.used,
                        footprint=footprint, in_force=posed.in_force,
                        stack_why=stack_reason(posed.in_force, posed.settled, posed.about_run),
                        presets=presets, knowns=posed.knowns, defaults=posed.defaults_used)
    return posed


def _pose(lib: Library, tq, typed: dict[str, GivenValue], explicit: dict, presets: list, diagnose: bool) -> Posed:
    """The question's options, known values and derivation, and the training stacks in force.

    A setting option the question does not settle applies its ``options`` defaults only when
    the derivation depends on it (see :mod:`symcalc.query.stacks`): the question is resolved
    and derived with the defaults; if the derivation does not depend on the option, it is
    resolved again without them and that resolution is taken, with the first derivation when it
    uses none of the options that changed and the known values are the same, else derived again
    (and kept unless it depends on the option after all, or only the first one exists). The checks of :func:`symcalc.query.stacks.check_supports` and ``check_requires``
    run for the stacks the question settles before any derivation, for the others once they
    are known to be in force.
    """
    preset_options = {k: v for p in presets for k, v in p.options.items()}
    resolved, knowns = _setting(lib, tq.name, typed, explicit, presets, preset_options)
    settled = stacks.decided(explicit, preset_options, resolved.implied)
    linked = set(lib.stacks)
    stacks.check_supports(lib, resolved.values, linked & settled, explicit)
    stacks.check_requires(lib, resolved.values, linked & settled, knowns, settled)
    idle = frozenset(linked - settled)
    posed = _derive(lib, tq, Posed(resolved, knowns, settled), diagnose and not idle)
    about_run = stacks.is_run(presets)
    dropped = idle - stacks.held(posed.used, posed.resolved.set_by, about_run)
    if dropped:
        resolved2, knowns2 = _setting(lib, tq.name, typed, explicit, presets, preset_options, without=dropped)
        again = Posed(resolved2, knowns2, settled, posed.derivation, posed.defaults_used, posed.error,
                       posed.diagnosed)
        changed = {k for k, v in resolved2.values.items() if resolved.values.get(k) != v}
        if changed and (posed.error or changed & posed.used or _differ(knowns2, knowns)):
            # a derivation that uses none of the changed options, from the same known values,
            # holds without the stack's defaults too: it is kept (half the cold work of a
            # question the stack does not reach)
            again = _derive(lib, tq, Posed(resolved2, knowns2, settled), diagnose=False)
        if (again.error is None and not again.used & dropped) or (again.error and posed.error):
            posed = again
    posed.about_run = about_run
    posed.in_force = (linked & settled) | (idle & stacks.held(posed.used, posed.resolved.set_by, about_run))
    posed.quiet = linked - posed.in_force
    stacks.check_supports(lib, posed.resolved.values, posed.in_force, set(explicit) | posed.used)
    stacks.check_requires(lib, posed.resolved.values, posed.in_force - settled, posed.knowns, settled)
    # an ordinary option whose value requires conditions: wherever the question gives it or uses it
    stacks.check_requires(lib, posed.resolved.values, set(lib.requiring) & (set(explicit) | posed.used),
                          posed.knowns, settled)
    return posed


def _differ(a: Mapping[str, GivenValue], b: Mapping[str, GivenValue]) -> bool:
    """Whether two sets of known values differ in a name or a value."""
    return a.keys() != b.keys() or any(a[k] is not b[k] and (a[k].text, a[k].origin) != (b[k].text, b[k].origin)
                                       for k in a)


def _setting(lib: Library, target: str, typed: dict[str, GivenValue], explicit: Mapping, presets: list,
             preset_options: Mapping[str, str], without: frozenset = frozenset()
             ) -> tuple[Resolved, dict[str, GivenValue]]:
    """Every option's value and the known values (typed, then the presets' under those options)."""
    first = lib.option_values({**preset_options, **explicit})
    from_presets = preset_values(lib, presets, first, target, typed)
    resolved = resolve_options(lib, explicit, preset_options, {**typed, **from_presets}, without=without)
    if resolved.values != first:      # the dense peak follows the precision
        from_presets = preset_values(lib, presets, resolved.values, target, typed)
    knowns = {**typed, **from_presets}
    _check_orders(lib, knowns)
    # the planner's structure rules over the given degrees (tp divides the heads, ...): one rule set
    check_given({name: gv.magnitude for name, gv in knowns.items()})
    return resolved, knowns


def _derive(lib: Library, tq, posed: Posed, diagnose: bool) -> Posed:
    """``posed`` with its derivation, or the error that says why there is none (the target
    given: neither)."""
    if tq.name in posed.knowns:
        return posed
    try:
        posed.derivation, posed.defaults_used = derivation_for(lib, tq.name, frozenset(posed.knowns),
                                                            posed.resolved.values, diagnose=diagnose)
    except (UnderdeterminedError, NoSolutionError) as e:
        # without its traceback, whose frames point back at posed: kept, it made every plan's
        # answers cyclic garbage that only a full collection frees
        posed.error, posed.diagnosed = e.with_traceback(None), diagnose
    return posed


def _check_orders(lib: Library, knowns: Mapping[str, GivenValue]) -> None:
    """Known values that cannot stand together: one above a quantity it can never exceed
    (``not_above`` in the data: more KV heads than heads, a TP degree above the GPUs)."""
    magnitudes = {name: gv.magnitude for name, gv in knowns.items()}
    for name, other, over in order_breaks(lib, magnitudes):
        gv = knowns[name]
        # arrays: the first point where it happens, both values taken there (the largest of
        # each could come from different points: tp = 8 above 24576 GPUs)
        first = np.unravel_index(np.argmax(over), over.shape) if over.ndim else ()
        a, b = (np.broadcast_to(np.asarray(x, dtype=float), over.shape)[first]
                for x in (gv.magnitude, knowns[other].magnitude))
        shown = [with_unit(float(x) / lib.quantities[n].factor, lib.quantities[n].display_unit)
                 for x, n in ((a, name), (b, other))]
        where = " (from a preset)" if gv.origin or knowns[other].origin else ""
        points = f" at {int(over.sum())} of {over.size} points" if over.ndim else ""
        raise DomainError(f"{name} = {shown[0]} is more than {other} = {shown[1]}{where}{points}: "
                          f"{name} can never exceed {other}")


def order_breaks(lib: Library, magnitudes: Mapping[str, object]):
    """(name, the quantity it exceeds, where) for each pair of known values of which one is above
    a quantity it can never exceed (``not_above``); ``where`` is a mask over the values' grid."""
    for name, value in magnitudes.items():
        if isinstance(value, str):
            continue
        for other in lib.quantities[name].not_above:
            if other in magnitudes and not isinstance(magnitudes[other], str):
                a, b = np.asarray(value, dtype=float), np.asarray(magnitudes[other], dtype=float)
                over = a > b * (1 + 1e-12)
                if np.any(over):
                    yield name, other, over
