"""How much an answer moves with each given value: the elasticity d ln(target) / d ln(input).

An elasticity of -1 (train_time to n_gpus) says that 1 % more of the input gives 1 % less of
the answer; 0 that the answer does not depend on it. Each is found symbolically where the
derivation's closed form (:func:`symcalc.engine.derive.composed`) holds the input, within the
symbolic time limit (symcalc.budget): x * d(target)/dx / target, evaluated at the answer;
otherwise (the input reaches the target through a step found numerically, or through an
intermediate the closed form keeps) numerically, by a central difference in log space on the
compiled derivation (two evaluations per input). Only the values the user gave are varied: a
preset's figure or a default is an assumption of the question, not one of its inputs (give it
to see its elasticity).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from symcalc import budget
from symcalc.engine.derivation import Derivation
from symcalc.errors import QueryError, SymcalcError
from symcalc.query.results import Elasticity, Result
from symcalc.query.values import GivenValue

#: The relative step of the numeric central difference (in log space: x e^h and x e^-h).
LOG_STEP = 1e-4


def sensitivity_of(result: Result) -> list[Elasticity]:
    """The elasticities of ``result``'s answer to its given values (:func:`elasticities`), its
    derivation evaluated again on its known values and defaults for the roots it takes."""
    env = {k: g.magnitude for k, g in result.given.items()}
    env.update({k: d["magnitude"] for k, d in result.defaults_used.items() if "magnitude" in d})
    ev = result.derivation.evaluate(env)
    return elasticities(result.derivation, result.given, env, ev.values, ev.choices)


def elasticities(derivation: Derivation, knowns: Mapping[str, GivenValue], env: Mapping[str, Any],
                 values: Mapping[str, Any], choices: dict[int, int]) -> list[Elasticity]:
    """The elasticity of ``derivation``'s target to each given value (not a preset's), largest
    magnitude first (ties in the order given; a non-finite one last).

    ``env``: the knowns and defaults the derivation was evaluated on (base units); ``values``:
    every value it computed; ``choices``: the root taken at each step. O(inputs) symbolic
    derivatives under the symbolic limit, plus 2 evaluations per input found numerically.
    """
    target = derivation.target
    y = values[target]
    if isinstance(y, str) or np.ndim(y) != 0 or any(np.ndim(env[k]) for k in env if not isinstance(env[k], str)):
        raise QueryError("sensitivity needs one answer: give single values, not arrays")
    inputs = [k for k, g in knowns.items() if not g.origin]
    used = derivation.upstream({target})
    found = []
    symbolic = _symbolic(derivation, [k for k in inputs if k in used], values, choices)
    for name in inputs:
        if name not in used:
            e, how = 0.0, "symbolic"       # nothing on the route reads it
        elif name in symbolic:
            e, how = symbolic[name], "symbolic"
        else:
            e, how = _numeric(derivation, dict(env), name, float(y)), "numeric"
        found.append(Elasticity(name=name, given=knowns[name].text, elasticity=e, method=how))
    return sorted(found, key=lambda x: (not math.isfinite(x.elasticity), -abs(x.elasticity)))


def _symbolic(derivation: Derivation, names: list[str], values: Mapping[str, Any],
              choices: dict[int, int]) -> dict[str, float]:
    """The elasticities that the closed form gives, for those of ``names`` it holds entirely:
    an input that also reaches the target through an intermediate the closed form keeps (a
    step found numerically, an expression too long to compose) is left to :func:`_numeric`.
    {} when composing or differentiating runs out of the symbolic limit."""
    if not names:
        return {}
    from symcalc.engine.derive import composed  # start-up: sympy, only when sensitivity is asked
    lib = derivation.library
    try:
        expr, expired = composed(derivation, choices)
    except SymcalcError:
        return {}
    if expired:
        return {}
    by_symbol = {lib.quantities[n].symbol: n for n in derivation.upstream({derivation.target})}
    free = {by_symbol[s] for s in expr.free_symbols if s in by_symbol}
    computed = derivation.computed
    kept = free & computed      # intermediates (or the target itself) the closed form did not substitute
    through_kept = derivation.upstream(kept)
    at = {lib.quantities[n].symbol: float(values[n]) for n in free if not isinstance(values[n], str)}
    out: dict[str, float] = {}
    with budget.bounded(budget.DEFAULT_SYMBOLIC_LIMIT):
        try:
            for name in names:
                if name in through_kept:
                    continue
                x = lib.quantities[name].symbol
                if x not in expr.free_symbols:
                    out[name] = 0.0
                    continue
                e = x * expr.diff(x) / expr      # (x / y) dy/dx: sympy cancels a power law to its exponent
                out[name] = _number(e.subs(at) if e.free_symbols else e)
        except Exception:   # sympy cannot differentiate or evaluate it (a Piecewise, a Min): numbers instead
            pass
    return out      # what the limit left undone goes to _numeric


def _number(e) -> float:
    """A sympy value as a float; nan where it is not a finite real."""
    try:
        v = complex(e)
    except (TypeError, ValueError):
        return math.nan
    return v.real if abs(v.imag) <= 1e-12 * max(abs(v.real), 1.0) and math.isfinite(v.real) else math.nan


def _numeric(derivation: Derivation, env: dict, name: str, y: float) -> float:
    """(ln y(x e^h) - ln y(x e^-h)) / 2h on the compiled derivation, h = LOG_STEP; nan where
    the answer is 0, changes sign or cannot be computed there. 0 for an input at 0 (x dy/dx)."""
    x = float(env[name])        # type: ignore[arg-type]  # a given number, checked one value above
    if x == 0:
        return 0.0
    if y == 0 or not math.isfinite(y):
        return math.nan
    ys = []
    for h in (LOG_STEP, -LOG_STEP):
        try:
            v = derivation.evaluate({**env, name: x * math.exp(h)}).values[derivation.target]
        except SymcalcError:
            return math.nan
        ys.append(float(v))     # type: ignore[arg-type]
    if not all(math.isfinite(v) and v != 0 and (v > 0) == (y > 0) for v in ys):
        return math.nan
    return (math.log(abs(ys[0])) - math.log(abs(ys[1]))) / (2 * LOG_STEP)
