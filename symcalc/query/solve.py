"""The Python API: one call from a question to an answer with its derivation.

    >>> import symcalc
    >>> r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s",
    ...                   n_gpus=64, peak_flops="1979 TFLOP/s")
    >>> print(r)
    mfu = 4.974 %

The CLI is a thin layer over :func:`solve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import pint

from symcalc.engine.derivation import Derivation, Evaluation
from symcalc.engine.rounding import round_whole
from symcalc.engine.routing import Route
from symcalc.errors import ConflictError, NoFitError, OutOfBoundsError, QueryError, TooComplexError, UnderdeterminedError
from symcalc.findings import Finding
from symcalc.library.loading import Library, default_library
from symcalc.library.printed import Printed
from symcalc.query import fit, unused
from symcalc.query.assumptions import assumptions, relevant_options
from symcalc.query.implied import idle_options
from symcalc.query.nofit import with_fitting_options
from symcalc.query.conflicts import assumed_by, contradicts, cross_check, unused_disagreement, without_contradicted_defaults
from symcalc.query.derivations import Display, derivation_for, evaluate_on
from symcalc.query.findings import (above_limits, answer_findings, check_displayable, not_used_finding,
                                    reported_findings)
from symcalc.query.layout_rules import answer_breaks, nearest_valid, rounds_to_rules
from symcalc.query.limits import round_to_limits, unreachable_limit, what_would_reach
from symcalc.query.rescope import answered_instead, refusal, rescoped
from symcalc.query.runlayout import solve_in_layout
from symcalc.query.presetvalues import check_profile, preset_values, presets_of, unmeasured, yielded
from symcalc.query.question import Posed, option_mapping, output_unit, pose, read_given
from symcalc.query.results import Result, StepView, later, sentences
from symcalc.query.sensitivity import sensitivity_of
from symcalc.query.values import GivenValue, implausible

if TYPE_CHECKING:   # pragma: no cover - for type checkers only
    from symcalc.query.reuse import Points

__all__ = ["Solved", "read_given", "solve", "solve_unshown"]


class Solved(Result):
    """The Result :func:`solve` returns: the plain record (every field data, no callable: it
    pickles and compares as its values), and what a user asks of it again, each a plain
    function of :mod:`symcalc.query.reuse` handed this module's solver.

    Why the methods are here, not on Result: ``function`` and ``companion_value`` need the
    solver, and the solver makes Results, so a Result that imported it would close an import
    cycle (tests/test_layers.py). The class solve() makes is the solver's to define; the record
    stores no callback, and a copy read back from a pickle is asked again the same way."""

    def function(self, **values) -> pint.Quantity:
        """The same derivation for new values of the same knowns: the answer in ``unit``.

        Values are read like :func:`solve`'s (units, arrays). It goes through the same checks
        (bounds, no-solution, rounding) and reuses the cached compiled derivation, so nothing is
        re-planned or re-solved. Large arrays take the evaluator's chunked kernel
        (:mod:`symcalc.engine.evaluate`): the same values and checks at about the speed of the
        formula written in numpy by hand. The work is :func:`symcalc.query.reuse.function`'s."""
        from symcalc.query import reuse  # start-up: only a record evaluated again needs it
        return reuse.function(self, values, solve)

    def points(self, also: tuple[str, ...] = (), outside: bool = False, **values) -> Points:
        """The same derivation over a grid that may leave the bounds (a planner's layouts, a
        mixed feasible/infeasible sweep): a :class:`symcalc.query.reuse.Points` record of the
        values in ``unit`` and masks ``inside`` (every value of the point within its bounds),
        ``fits`` (within its capacity) and ``ok``, per-quantity ``outside`` masks (when asked
        for), and the values of the other quantities named in ``also`` from the same pass;
        nothing is refused for the points outside (:func:`symcalc.query.reuse.points`)."""
        from symcalc.query import reuse  # start-up: only a record evaluated again needs it
        also = (also,) if isinstance(also, str) else tuple(also)     # one name, or several
        return reuse.points(self, values, also, outside)

    def companion_value(self, name: str) -> float | str | None:
        """``name``'s value from the quantities this answer computed (a collective's whole time
        beside its exposed part): the record's own, else one more step of the same
        derivation's values, asked of the solver (:func:`symcalc.query.reuse.companion`) and
        kept in the record's ``companions``; None where it cannot be had."""
        known = super().companion_value(name)
        if known is None and name not in self.companions:
            from symcalc.query import reuse  # start-up: only a breakdown or a reported value needs it
            known = self.companions[name] = reuse.companion(self, name, _solve_again)
        return known


def solve(target: str, given: Mapping[str, object] | None = None, /, *,
          options: Mapping[str, object] | None = None, to: str | None = None,
          library: Library | None = None, on_bounds: str = "raise",
          hardware: str | None = None, model: str | None = None, diagnose: bool = True,
          conflicts: bool | str = True, rtol: float = 0.02, rounding: str | None = None,
          sensitivity: bool = False, layout: Mapping[str, object] | None = None, **values) -> Solved:
    """Solve for ``target`` from known values, under ``options``.

    ``given`` (a mapping) and keyword arguments name known quantities (aliases allowed); each
    value may be text with a unit (``"1979 TFLOP/s"``, ``"24h"``), a number (for counts,
    tokens, FLOP and USD), a ``(value, "unit")`` pair, a quantity from :func:`symcalc.Q`, or
    a numpy array (the answer broadcasts). ``to`` picks the unit of the answer.
    ``on_bounds="raise"`` raises OutOfBoundsError when a computed value leaves its quantity's
    bounds (MFU above 1, negative memory); ``"flag"`` records it in ``result.violations``.
    ``hardware`` and ``model`` name presets (``symcalc list hardware``, ``symcalc list models``;
    a model may also be the path of a Hugging Face config.json): they fill in known values and
    options, below anything given explicitly; they supply the target itself only when nothing
    else can (the answer says it was looked up). ``hardware`` may also be the path of a
    hardware profile (a .toml file: :func:`symcalc.library.presets.hardware_from_file`).
    Given values imply options where the option data says so (n_kv_heads < n_heads:
    grouped-query attention). A training stack (``options={"stack": "fsdp"}``: an option whose
    values set other options' defaults, restrict their values and require conditions of given
    values) applies when given, or when the derivation depends on it (see
    :mod:`symcalc.query.stacks`); the answer's assumptions say what it set.
    With more values than the shortest derivation needs, each one it leaves out is solved for
    from the others and compared. A disagreement beyond ``rtol`` is refused with a
    ConflictError (``conflicts=True``), or only reported in ``result.conflicts`` and the
    warnings (``conflicts="warn"``); ``conflicts=False`` skips the comparison. When the
    disagreement is with a default (tp = 1 where the given values fix tp), a derivation that
    uses the given values instead is taken. ``diagnose=False`` makes an underdetermined
    question fail at once, without the (slower) search for what would settle it. Where the
    values settle the question only read otherwise (one replica's rate as the deployment's, or
    a related quantity answered for the target: symcalc.query.rescope), it is answered so and
    ``result.readings`` says how; not with ``diagnose=False`` (check reads every value as given).
    A whole-number answer rounds the way that keeps the given limits on its route (a budget,
    a deadline, 0 GB of headroom: see :mod:`symcalc.query.limits`), else its quantity's own way;
    ``rounding`` ("up", "down" or "nearest") overrides both.
    ``sensitivity=True`` adds the elasticity d ln(target) / d ln(input) to each given value
    at the answer (``result.sensitivity``, see :mod:`symcalc.query.sensitivity`).
    ``layout`` (the page's Layout fields) is the run's, read where the values leave it open.

    Raises UnknownNameError, DimensionError, DomainError, MalformedValueError (bad input),
    BadOptionValueError (an option value not allowed, not supported by the stack in force, or
    whose stack requires what the given values break),
    UnderdeterminedError (the values do not settle the target), NoSolutionError (no value
    satisfies the equations; NotDeterminedError: a whole range does), ConflictError and
    OutOfBoundsError.
    """
    def ask(admitted: dict) -> Solved:     # with the run's layout values admitted (symcalc.query.runlayout)
        return _solve(target, given, values, options=options, to=to, library=library, on_bounds=on_bounds,
                      hardware=hardware, model=model, diagnose=diagnose, conflicts=conflicts, rtol=rtol,
                      rounding=rounding, brief=False, layout=admitted)
    try:
        result = ask({}) if not layout else solve_in_layout(ask, library or default_library(), target,
                                                            {*(given or {}), *values}, layout)
    except NoFitError as e:     # nothing fits: which option the planner searches would make it fit
        raise with_fitting_options(e, library or default_library(), target, {**(given or {}), **values},
                                   option_mapping(options), solve_unshown, hardware=hardware, model=model) from None
    if sensitivity:
        result.elasticities = sensitivity_of(result)
    return result


def solve_unshown(target: str, given: Mapping[str, object] | None = None, /, *,
                  options: Mapping[str, object] | None = None, library: Library | None = None,
                  on_bounds: str = "raise", hardware: str | None = None, model: str | None = None) -> Solved:
    """:func:`solve` for a caller that reads an answer's numbers and never shows its text (the
    planner's 100-odd questions a plan): the same value, derivation, steps, rounding, bound
    violations and errors, without the findings only a reader needs (what a given value not
    used would count for, the quantities a formula reports beside the answer, notes on the
    presets' values and on implausible inputs), which cost more than the answer itself once
    its derivation is cached. Given values are not cross-checked and an underdetermined
    question is not diagnosed (``conflicts=False, diagnose=False``)."""
    return _solve(target, given, {}, options=options, to=None, library=library, on_bounds=on_bounds,
                  hardware=hardware, model=model, diagnose=False, conflicts=False, rtol=0.02, rounding=None,
                  brief=True, layout=None)


def _solve(target, given, values: Mapping[str, object], **kw) -> Solved:
    """:func:`_solve_question`, with symbolic work that recursed past Python's stack refused in
    one line (TooComplexError) and sympy's caches cleared after it: a RecursionError inside sympy
    can leave its caches half-written, and a long-lived process (symcalc serve, a notebook)
    would carry that into its next questions."""
    try:
        return _solve_question(target, given, values, **kw)
    except RecursionError:
        from sympy.core.cache import clear_cache  # start-up: only such a question gets here
        clear_cache()
        raise TooComplexError(f"{target}: the symbolic work for this question nested too deep to finish; give "
                              "more of the quantities it depends on as numbers, or ask for one nearer to them") from None


def _solve_question(target, given, values: Mapping[str, object], *, options, to, library, on_bounds: str, hardware,
                    model, diagnose: bool, conflicts, rtol: float, rounding, brief: bool, layout) -> Solved:
    """:func:`solve`'s work; ``brief``: :func:`solve_unshown`'s (the findings for a reader left out)."""
    lib, tq, on_conflict = _checked_arguments(target, given, library, on_bounds, conflicts, rounding, rtol)
    typed = read_given(lib, [*(given or {}).items(), *values.items()])
    explicit_options = dict(option_mapping(options) or {})
    presets = presets_of(hardware, model, layout)
    for p in presets:
        if p.file:
            check_profile(lib, p)
    posed, own = _posed(lib, tq, typed, explicit_options, presets, diagnose)
    said = None
    if posed.derivation is None or own is not None:
        try:
            return _without_derivation(lib, tq, posed, presets, to, diagnose, own)
        except UnderdeterminedError as e:
            if brief or not diagnose:       # rereading is part of the search for what settles it
                raise
            again = rescoped(lib, e, typed, tq.name)
            if again is None:       # the one related quantity the values settle (answers_for), or none
                return _answered_instead(e, lib, tq.name, given, values, options=options, to=to, library=library,
                                         on_bounds=on_bounds, hardware=hardware, model=model, diagnose=diagnose,
                                         conflicts=conflicts, rtol=rtol, rounding=rounding, brief=brief, layout=layout)
            # one given value settles it read as its counterpart (a replica's rate as the
            # deployment's): answered so, and said first (symcalc.query.rescope)
            typed, said = again
            posed, own = _posed(lib, tq, typed, explicit_options, presets, diagnose)
            if posed.derivation is None or own is not None:
                raise e from None
    derivation, defaults_used, knowns = posed.derivation, posed.defaults_used, posed.knowns
    ev = evaluate_on(derivation, knowns, defaults_used)
    disagree = _Disagreements(derivation, defaults_used, ev)
    if on_conflict != "off":
        check_options = {**{imp.option: imp.value for imp in posed.resolved.implied}, **explicit_options}
        disagree = _disagreements(lib, tq, posed, derivation, defaults_used, ev, check_options, rtol,
                                  hardware, model)
        derivation, defaults_used, ev = disagree.derivation, disagree.defaults_used, disagree.ev
        if disagree.found and on_conflict == "raise":
            raise ConflictError("; ".join(sentences(c["finding"] for c in disagree.found))
                                + " (check these values; conflicts='warn' answers anyway)",
                                [{k: v for k, v in c.items() if k != "finding"} for c in disagree.found])
    unit, factor = output_unit(tq, to)
    exact = ev.values[tq.name]
    check_displayable(lib, derivation, ev.values, tq.name, unit, factor)
    rounded, how, reason, ruled = _whole(lib, tq, derivation, ev, knowns, defaults_used, exact, posed, rounding)
    # a value that decided an option (q_lora_rank = 0: queries without a latent) was used by it
    deciding = {n for imp in posed.resolved.implied for n in imp.names}
    findings = answer_findings(lib, derivation, ev, tq, exact, rounded, knowns, set(disagree.checked) | deciding, how,
                               brief=brief)
    findings += [c["finding"] for c in disagree.found] + idle_options(lib, posed.resolved.values, explicit_options)
    findings += [unused_disagreement(disagree.dismissed, disagree.assumed)] if disagree.dismissed else []
    if not brief:
        findings += _reader_findings(lib, presets, posed.resolved.values, knowns, derivation.route.given)
    findings += ruled
    if reason and reason.get("clash"):
        findings.append(reason["clash"])
    violations = [f for f in findings if f.violation]
    if violations and on_bounds == "raise":
        # a target below its least value because a given limit cannot be met: said with the limit
        why = unreachable_limit(lib, derivation, ev, knowns, defaults_used, exact, posed.options, _solve_again)
        reach = None if why or violations[0].quantity != tq.name else \
            what_would_reach(lib, derivation, exact, knowns, posed.options, _solve_again)
        raise OutOfBoundsError(f"no value of {tq.name} in {tq.domain} meets the given limits: {why}" if why else
                               sentences(violations[:1])[0]
                               + ("" if len(violations) == 1 else f" (and {len(violations) - 1} more)")
                               + (f"; {reach}" if reach else ""))
    result = _record(lib, tq, posed, derivation, defaults_used, ev, explicit_options, unit, factor, rounded, how,
                     reason, findings, violations, disagree.found, on_bounds, presets, hardware, model)
    if not brief:
        result.findings[:0] = reported_findings(lib, result)
        fits = _fit_findings(lib, tq, posed, result, hardware, model, presets)
        result.findings += fits
        # what the fit verdict read (gpu_memory, a given memory_headroom) is needed after all
        read = {name for f in fits for name in f.related}
        result.unused = [u for u in result.unused if u not in read]
        result.findings[:0] = [said] if said else []
    return result


def _whole(lib: Library, tq, derivation: Derivation, ev, knowns: dict[str, GivenValue], defaults_used: dict, exact,
           posed: Posed, rounding: str | None) -> tuple:
    """(rounded, how, why: the limit that decided, the findings of the layout rules): a
    whole-number answer rounded the way that keeps the given limits on its route, then to a
    degree the planner's structure rules allow (tp = 5.3 on 64 heads: 4); ``rounding`` given,
    or a quantity not whole, rounds its own way."""
    how = rounding or tq.whole
    if not (tq.whole and rounding is None):
        return round_whole(exact, how), how, None, []
    rounded, how, reason = round_to_limits(lib, derivation, ev, knowns, defaults_used, exact, posed.options,
                                           _solve_again)
    magnitudes = {k: g.magnitude for k, g in knowns.items()}
    ruled = None
    if rounds_to_rules(tq.name, derivation):
        rounded, ruled = nearest_valid(tq.name, exact, rounded, how, magnitudes)
    return rounded, how, reason, [*([ruled] if ruled is not None else []), *answer_breaks(tq.name, rounded, magnitudes)]


def _answered_instead(error: UnderdeterminedError, lib: Library, asked: str, given, values, **kw) -> Solved:
    """The question asked of the one quantity declared to answer for ``asked`` that the values
    settle (symcalc.query.rescope.answered_instead), saying so first; else ``error`` raised."""
    other = answered_instead(error)
    if other is None:
        raise error
    result = _solve_question(other, given, values, **kw)
    meaning = lib.quantities[other].description.split(":")[0]
    result.findings.insert(0, Finding("rescoped", other, {"asked": asked, "meaning": meaning}))
    return result


def _posed(lib: Library, tq, typed: dict[str, GivenValue], explicit_options: dict, presets: list, diagnose: bool
           ) -> tuple[Posed, GivenValue | None]:
    """The question posed (:func:`symcalc.query.question.pose`), and the preset's own value of
    the target where that beats the derivation."""
    posed = pose(lib, tq, typed, explicit_options, presets, diagnose)
    # an option's fallback, taken where its default leaves the question open, is asked for from
    # here on: the given values are cross-checked under it, and the answer says it first
    explicit_options.update(posed.fallback)
    # the target reached only through its own default rule (achievable = the datasheet's, taken
    # only when no measured value is known) is read off a preset's value of it, which beats it
    own = preset_values(lib, presets, posed.resolved.values, None, posed.knowns).get(tq.name) \
        if tq.name in posed.defaults_used else None
    return posed, own


def _fit_findings(lib: Library, tq, posed: Posed, result: Result, hardware, model, presets: list) -> list[Finding]:
    """Whether the run fits (symcalc.query.fit): the memory of each workload of the question's
    run (symcalc.query.run: the one it settles, else those whose own quantities its derivation
    reaches), solved at the answer's values: the values typed, the run's layout values the
    answer read (the page's tp 8 is the replica's), the presets and options, and the answer."""
    laid = {n for p in presets if p.kind == "layout" for n in p.values}
    known: dict[str, object] = {k: g.magnitude for k, g in posed.knowns.items() if not g.origin or k in laid}
    if tq.kind != "text":
        known[tq.name] = result.rounded_base
    out = []
    for w in posed.run.workloads if posed.run else ():
        if w.capacity not in posed.knowns:
            continue        # nothing to fit in (no GPU named, no gpu_memory given): no fit to say
        # the answer is the amount itself: its own values, not a second solve (unless a margin
        # was given, which the answer may have gone through: asked again without it)
        own = w.amount == tq.name and w.margin not in known
        # the answer is the margin (memory_headroom asked): the fit is the amount against the whole
        # capacity, not against the capacity less the answer's own margin
        at = {k: v for k, v in known.items() if k != w.margin} if tq.name == w.margin else known
        found = (fit.fit_of(lib, w, result) if own else
                 fit.fit_at(lib, w, at, result.all_options, solve_unshown, hardware, model))
        # the answer is the amount and over its capacity: its over_capacity finding says it
        if found is not None and not (w.amount == tq.name and not found.fits):
            out.append(found.finding(lib))
    return out


def _checked_arguments(target, given, library: Library | None, on_bounds: str, conflicts, rounding, rtol):
    """(library, target quantity, what to do on a conflict: raise | warn | off) for solve's
    arguments, or the error that says which one is wrong."""
    if on_bounds not in ("raise", "flag"):
        raise QueryError(f"on_bounds must be 'raise' or 'flag'; got {on_bounds!r}")
    on_conflict = {True: "raise", False: "off", "raise": "raise", "warn": "warn", "off": "off"}.get(conflicts) \
        if isinstance(conflicts, (bool, str)) else None
    if on_conflict is None:
        raise QueryError(f"conflicts must be True ('raise'), 'warn' or False ('off'); got {conflicts!r}")
    if isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 < rtol < 1:
        raise QueryError(f"rtol is a relative tolerance between 0 and 1 (0.02 is 2 %); got {rtol!r}")
    lib = library or default_library()
    if not isinstance(target, str):
        raise QueryError(f"the target is a quantity name, got {target!r}")
    if target.strip() in lib.options and target.strip() not in lib.quantities:
        opt = lib.options[target.strip()]
        raise QueryError(f"{target.strip()} is an option, not a quantity to solve for: set it (--option "
                         f"{target.strip()}=..., one of {', '.join(opt.said)}) and ask for a quantity")
    tq = lib.quantity(target)
    if rounding is not None and rounding not in ("up", "down", "nearest"):
        raise QueryError(f"rounding is up, down or nearest, got {rounding!r}")
    if rounding is not None and not tq.whole:
        raise QueryError(f"{tq.name} is not a whole number: there is nothing to round")
    if given is not None and not isinstance(given, Mapping):
        raise QueryError("given values must be a mapping of name -> value")
    return lib, tq, on_conflict


def _without_derivation(lib: Library, tq, posed: Posed, presets: list, to: str | None, diagnose: bool,
                        own: GivenValue | None) -> Solved:
    """The answer to a question with no derivation: the target given (or published), or looked
    up in a preset (``own``, or when nothing derives it); else the error that says why (diagnosed)."""
    opts, knowns, looked_up = posed.resolved.values, posed.knowns, own
    if posed.error is None and own is None:      # the target is given (or published)
        result = _conversion(lib, tq, knowns, posed.options, to)
        result.run = posed.run
        if knowns[tq.name].origin:
            result.findings[:] = [Finding("published", tq.name, {"origin": knowns[tq.name].origin}),
                                  *unmeasured(lib, presets, opts, knowns, [tq.name])]
        return result
    if looked_up is None:
        assert posed.error is not None
        try:
            if not posed.diagnosed and diagnose:
                derivation_for(lib, tq.name, frozenset(knowns), opts, diagnose=True)    # raises, with the diagnosis
            raise posed.error       # the same question fails the same way
        except UnderdeterminedError as e:
            looked_up = preset_values(lib, presets, opts, None, knowns).get(tq.name)
            if looked_up is None:
                raise refusal(e, lib, tq.name, knowns, opts) from None
    result = _conversion(lib, tq, {**knowns, tq.name: looked_up}, posed.options, to)
    result.run = posed.run
    typed = [q for q, g in knowns.items() if not g.origin and q != tq.name]
    result.findings[:] = [Finding("looked_up", tq.name, {"origin": looked_up.origin}),
                          *unmeasured(lib, presets, opts, {tq.name: looked_up}, [tq.name]),
                          *([not_used_finding(lib, tq.name, typed, opts, derived=False)] if typed else [])]
    result.looked_up = looked_up.origin
    return result


@dataclass
class _Disagreements:
    """What cross-checking the given values found, and the derivation that stands after it."""

    derivation: Derivation
    defaults_used: dict
    ev: Evaluation
    found: list[dict] = field(default_factory=list)         # disagreements that speak against the answer
    checked: set[str] = field(default_factory=set)          # given values that could be checked
    dismissed: list[dict] = field(default_factory=list)     # disagreements only with defaults not used
    assumed: set[str] = field(default_factory=set)          # what the answer leans on besides typed values


def _disagreements(lib: Library, tq, posed: Posed, derivation: Derivation, defaults_used: dict, ev,
                   check_options: dict, rtol: float, hardware, model) -> _Disagreements:
    """The given values the derivation leaves out, checked against the others
    (:func:`symcalc.query.conflicts.cross_check`); where they contradict a default, the
    derivation that uses them instead."""
    knowns, opts = posed.knowns, posed.resolved.values
    found, checked = cross_check(lib, derivation.route.unused, knowns, options=check_options, rtol=rtol,
                                 ask=solve, hardware=hardware, model=model)
    if found and (derivation.route.defaults or derivation.route.default_rules):
        better = without_contradicted_defaults(lib, tq.name, knowns, opts, derivation, defaults_used, found,
                                               check_options, rtol, hardware, model, ask=solve)
        if better is not None:
            derivation, defaults_used, ev, found, checked = better
    assumed = assumed_by(derivation, defaults_used, knowns)
    # a disagreement that leans on defaults the answer does not use is no objection (given
    # values win over defaults), but the given value is then not used, and that is said
    dismissed = [c for c in found if not contradicts(c, assumed)]
    found = [c for c in found if contradicts(c, assumed)]
    checked -= {c["quantity"] for c in dismissed}
    if dismissed:
        # said only of a given value the answer feeds (d_ffn into an activation memory); one
        # the answer has nothing to do with (an MTBF beside train_time) is only not used
        fed = unused.downstream(lib, tq.name, derivation.options)
        dismissed = [c for c in dismissed if c["quantity"] in fed]
    return _Disagreements(derivation, defaults_used, ev, found, checked, dismissed, assumed)


def _reader_findings(lib: Library, presets: list, opts: dict, knowns: dict[str, GivenValue], given: tuple) -> list:
    """The findings only a reader needs (solve_unshown leaves them out): the presets' notes,
    their unmeasured values the answer uses, implausible given values, values above a limit."""
    findings = [f for p in presets for f in p.findings]
    findings += unmeasured(lib, presets, opts, knowns, given)
    findings += [f for f in (implausible(lib.quantities[k], g) for k, g in knowns.items() if not g.origin) if f]
    findings += above_limits(lib, knowns)
    return findings


def _record(lib: Library, tq, posed: Posed, derivation: Derivation, defaults_used: dict, ev, explicit_options: dict,
            unit: str, factor: float, rounded, how, reason, findings: list, violations: list, found: list,
            on_bounds: str, presets: list, hardware, model) -> Solved:
    """The Result of an evaluated derivation (its display made on first read)."""
    shown = Display(derivation, ev.choices)
    steps = [StepView(number=i + 1, formulas=list(s.formulas), method=s.method,
                      solves_for=list(s.unknowns), inputs=list(s.inputs),
                      solution=later(partial(shown.solution, i)), numeric=i in ev.numeric_steps)
             for i, s in enumerate(derivation.steps)]
    opts = posed.resolved.values
    relevant = relevant_options(derivation, defaults_used, explicit_options, opts)
    return Solved(library=lib, target=tq.name, quantity=tq, unit=unit,
                  factor=factor, base_value=ev.values[tq.name], rounded_base=rounded, given=posed.knowns,
                  presets={p.kind: p.key for p in presets}, preset_args={"hardware": hardware, "model": model},
                  options=relevant, all_options=posed.options,
                  defaults_used={k: dict(v) for k, v in defaults_used.items()},
                  values=ev.values, steps=steps, on_bounds=on_bounds,
                  derivation=derivation, closed_form=later(shown.closed_form), rounding=how,
                  rounding_reason={k: v for k, v in (reason or {}).items() if k != "clash"} or None,
                  assumptions=assumptions(lib, defaults_used, ev.values, relevant, posed),
                  stacks={name: name in posed.settled for name in sorted(posed.in_force)}, run=posed.run,
                  notes=[f"option {imp.reason()}" for imp in posed.resolved.implied]
                  + yielded(lib, presets, opts, posed.knowns, ev.values),
                  unused=[u for u in derivation.route.unused if u != tq.fits_in],
                  findings=[f for f in findings if not f.violation] + violations,
                  conflicts=[{k: v for k, v in c.items() if k != "finding"} for c in found])


def _conversion(lib: Library, q, knowns: dict[str, GivenValue], opts: dict, to: str | None) -> Solved:
    """The target is itself given: the answer is that value, in the unit asked for."""
    unit, factor = output_unit(q, to)
    value = knowns[q.name].magnitude
    plan = Route(target=q.name, steps=(), given=(q.name,), defaults=(), unused=tuple(sorted(set(knowns) - {q.name})))
    derivation = Derivation(lib, plan, opts, {}, steps=[])
    return Solved(library=lib, target=q.name, quantity=q, unit=unit, factor=factor, base_value=value,
                  rounded_base=round_whole(value, q.whole), rounding=q.whole, given=knowns, presets={}, options={}, all_options=opts,
                  defaults_used={}, values={k: v.magnitude for k, v in knowns.items()}, steps=[],
                  derivation=derivation, closed_form=Printed.of_quantity(q.name, q.latex), unused=list(plan.unused),
                  findings=[Finding("given_target", q.name)])


def _solve_again(target: str, given: Mapping[str, object], *, options: Mapping[str, object], library: Library
                 ) -> Solved:
    """The questions an answer asks of itself (what the limit would be at the other whole
    number, a collective's whole time beside its exposed part): only their value is read, so
    they are asked unshown (no findings, flagged bounds). Not through the public entry, so that
    a test that patches it out (to prove that Solved.function never falls back to it) does not
    catch these."""
    return solve_unshown(target, given, options=options, library=library, on_bounds="flag")
