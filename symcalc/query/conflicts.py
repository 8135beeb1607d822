"""Given values against each other: each one a derivation leaves out, solved for from the
others and compared (:func:`cross_check`); which disagreements speak against the answer; and a
derivation that uses the given values where its defaults contradict them. The solver is passed
in (``ask``): it is what asks this module."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from symcalc.engine.derivation import Derivation
from symcalc.engine.routing import alternatives
from symcalc.errors import SymcalcError, UnderdeterminedError
from symcalc.findings import Finding
from symcalc.query.derivations import derivation_for, evaluate_on
from symcalc.query.relation import relation
from symcalc.query.results import Result
from symcalc.query.values import GivenValue
from symcalc.units.format import with_unit


def cross_check(lib, names, knowns: dict, *, options: dict, rtol: float, ask: Callable[..., Result],
                hardware=None, model=None) -> tuple[list[dict], set[str]]:
    """Each of ``names`` (given values a derivation left out) solved for from the other given
    values (by ``ask``: symcalc.query.solve.solve) and compared with its given value. Returns (the disagreements beyond ``rtol``, the
    names that could be checked at all). Preset values and arrays are not checked."""
    conflicts: list[dict] = []
    checked: set[str] = set()
    if any(np.ndim(v.magnitude) for v in knowns.values()):
        return conflicts, checked
    typed = {k: v for k, v in knowns.items() if not v.origin}
    for name in names:
        # a slack given at a limit (memory_headroom: the margin to keep) is a requirement the
        # answer's fit verdict tests, not a measurement the other values must reproduce
        if name not in typed or lib.quantities[name].limit:
            continue
        others = {k: (float(v.magnitude) / lib.quantities[k].factor, lib.quantities[k].display_unit)
                  for k, v in typed.items() if k != name}
        try:
            r = ask(name, others, options=options, library=lib, hardware=hardware, model=model,
                      on_bounds="flag", diagnose=False, conflicts=False)
        except SymcalcError:
            continue
        if r.looked_up:            # a preset's figure is not what the other values say
            continue
        checked.add(name)
        found = relation(r, name, float(typed[name].magnitude), rtol)
        if not found.agrees:
            conflicts.append(found.conflict(rtol))
    return conflicts, checked


def contradicts(conflict: dict, assumed: set[str]) -> bool:
    """Whether a disagreement found by cross_check speaks against the answer: the check leaned
    on nothing the answer does not lean on itself (``assumed``: its defaults and preset values).
    Given values that contradict each other are an objection; so is a given value against a
    default the answer uses. A given value that disagrees only with an assumption the answer
    does not make (flops_per_token given as 7.2 N, checked against n_params with the default
    6 FLOP/token; a generic AllReduce checked as if it were the TP one) is none: given values
    win over defaults."""
    return (set(conflict.get("assumed", ())) | set(conflict.get("presets", ()))) <= assumed


def assumed_by(derivation: Derivation, defaults_used: Mapping, knowns: Mapping[str, GivenValue]) -> set[str]:
    """What an answer leans on besides the values typed: its defaults and the preset values it uses."""
    return set(defaults_used) | {g for g in derivation.route.given if knowns[g].origin}


def unused_disagreement(dismissed: list[dict], assumed: set[str]) -> Finding:
    """Given values the answer does not use, which the other values give otherwise only with
    defaults the answer does not lean on: said once (with the first of them as the example and
    those defaults), never dropped silently. related: every such given value."""
    first = dismissed[0]
    f = first["finding"]
    others = sorted((set(first.get("assumed", ())) | set(first.get("presets", ()))) - assumed)
    leaning = [[k, x] for k, x in f.values["leaning"] if k in others]
    return Finding("unused_disagrees", f.quantity, {**f.values, "leaning": leaning},
                   related=tuple(c["quantity"] for c in dismissed), formulas=f.formulas)


def without_contradicted_defaults(lib, target: str, knowns: dict, opts: dict, derivation: Derivation,
                                  defaults_used: dict, found: list, check_options: dict, rtol: float,
                                  hardware, model, ask: Callable[..., Result]):
    """A derivation that uses the given values where ``derivation``'s defaults contradict them,
    as (derivation, defaults used, evaluation, conflicts, checked), or None if there is none.

    Defaults are only for what the given values leave open: tp_y from tp = tp_x tp_y must not
    take tp = 1 when the given layer_params_per_gpu fixes tp = 4. The alternatives (each drops
    some of the defaults, see :func:`symcalc.engine.routing.alternatives`) are evaluated; those whose own
    left-out values agree are kept. If they give different answers, the given values leave the
    answer open (n_gpus and dp fix tp x pp x cp but not each): UnderdeterminedError names the
    defaults to give instead.
    """
    typed = {k for k, v in knowns.items() if not v.origin}
    defaults = {name for name in lib.coefficient_defaults(opts) if name not in knowns}
    candidates = alternatives(lib.active_formulas(opts), derivation.route, knowns, defaults, typed)
    kept = []
    for excluded, _ in candidates[:MAX_ALTERNATIVE_DERIVATIONS]:
        try:
            d, used = derivation_for(lib, target, frozenset(knowns), opts, diagnose=False, exclude=excluded)
            ev = evaluate_on(d, knowns, used)
            conflicts, checked = cross_check(lib, d.route.unused, knowns, options=check_options, rtol=rtol,
                                             ask=ask, hardware=hardware, model=model)
        except SymcalcError:
            continue
        conflicts = [c for c in conflicts if contradicts(c, assumed_by(d, used, knowns))]
        if not conflicts and np.all(np.isfinite(np.asarray(ev.values[target], dtype=float))):
            kept.append((excluded, (d, used, ev, conflicts, checked)))
    if not kept:
        return None
    fewest = min(sum(q in typed for q in k[1][0].route.unused) for k in kept)
    kept = [k for k in kept if sum(q in typed for q in k[1][0].route.unused) == fewest]
    answers = [np.asarray(k[1][2].values[target], dtype=float) for k in kept]
    if any(not np.allclose(a, answers[0], rtol=1e-9) for a in answers[1:]):
        q = lib.quantities[target]
        open_defaults = sorted({x for excluded, _ in kept for x in excluded if x in defaults})
        claims = ", ".join(f"{c['quantity']} = {with_unit(c['given'], c['unit'])}" for c in found)
        shown = " vs ".join(dict.fromkeys(with_unit(float(np.min(a)) / q.factor, q.display_unit) for a in answers))
        contradicted = ", ".join(f"{d} = {defaults_used[d]['value']}" for d in open_defaults if d in defaults_used)
        raise UnderdeterminedError(
            f"cannot determine {target}: the given {claims} {'contradicts' if len(found) == 1 else 'contradict'} "
            f"the defaults {contradicted}, and which of {', '.join(open_defaults)} takes the rest changes the "
            f"answer ({shown}): also give one of: {' | '.join(open_defaults)}", [[d] for d in open_defaults])
    return kept[0][1]


MAX_ALTERNATIVE_DERIVATIONS = 4
