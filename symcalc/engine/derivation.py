"""Derivations: a route made concrete, each step's solution compiled, evaluated on arrays.

A :class:`Derivation` holds, for every route step, its candidate closed forms (one per root
sympy could not rule out), each compiled to a numpy function of the step's inputs, and, once
it has been shown, their printed forms and the composed closed form of the target in the
knowns. Evaluation works on base-unit magnitudes (floats or arrays; "units at the boundary,
floats inside") and walks the steps in order, so each intermediate value is available to the
renderers without recomputation.

Building one (inverting the equations with sympy) is :func:`symcalc.engine.derive.derive`; this
module only holds and evaluates the result, and imports no sympy: a derivation read from the
on-disk cache runs on numpy alone (its expressions are lazy, symcalc.lazy; its functions keep
their code objects, symcalc.compiled). Numeric root finding compiles the residuals it needs on first
use, which does import sympy.

Design note (departs from DESIGN.md on purpose): the design composes the chain into one
expression and compiles that. Here each step is compiled on its own and the composed
expression is kept for display. The cost per evaluation is the same array work, and it buys
three things: (1) the per-step numbers the derivation display shows, (2) per-element root
selection when a step has several roots, and (3) numeric fallback exactly where a closed form
is singular (e.g. an inverse with a latency term of 0), instead of NaN in a sweep.

The solved steps are symcalc.engine.solved_step; the values of one step (the choice among its
roots, numeric fallback), symcalc.engine.step_values. The step records are importable from here
as before (pickles in an older cache name them here).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from symcalc.compiled import ceil_tol, floor_tol
from symcalc.engine.method import Method
from symcalc.engine.route import Route
from symcalc.engine.solved_step import SolvedStep, Stacked, Terms, TornChain
from symcalc.engine.step_values import step_values
from symcalc.errors import NoSolutionError
from symcalc.findings import Finding
from symcalc.library.printed import Printed

__all__ = ["Derivation", "Evaluation", "SingularBlock", "SolvedStep", "Stacked", "Terms", "TornChain", "ceil_tol",
           "floor_tol"]


class SingularBlock(Exception):
    """A block of equations that are not independent: ``formula`` is implied by the others."""

    def __init__(self, formula: str, block: tuple[str, ...]):
        super().__init__(formula)
        self.formula = formula
        self.block = block


@dataclass
class Evaluation:
    """Values of every quantity of a derivation (base-unit magnitudes) and how they were found."""

    values: dict[str, object]
    choices: dict[int, int]           # step index -> candidate used (-1: numeric)
    numeric_steps: set[int]
    findings: list[Finding]           # several admissible roots (the first taken)
    # quantity -> where numeric root finding found the equations flat (every value a root):
    # these values do not determine it (as opposed to: no value satisfies them)
    undetermined: dict[str, object] = field(default_factory=dict)


class Derivation:
    """The solved, compiled route from a set of known quantities to a target (built by
    :func:`symcalc.engine.derive.derive`)."""

    def __init__(self, library, route: Route, options: dict[str, str], constants: dict[str, float],
                 steps: list[SolvedStep], degraded: bool = False):
        self.library = library
        self.route = route
        self.target = route.target
        self.options = dict(options)
        self.constants = dict(constants)   # defaults fixed at 0: their terms are dropped
        self.steps = steps
        # the target in the knowns, printed, per root choice (symcalc.engine.derive.closed_form)
        self.closed: dict[tuple, Printed] = {}
        # a closed form given up for time depends on how busy the machine was: such a
        # derivation is used, but not kept on disk for other processes (see __getstate__)
        self.degraded = degraded
        # the question it answers, as the solver's caches key it (set by the solver, not
        # pickled): what it is kept on disk under again once it has been printed
        self.cache_key: tuple | None = None

    # -- the on-disk cache ----------------------------------------------------------------
    def __getstate__(self) -> dict:
        # the library is re-attached by bind()
        if getattr(self, "degraded", False):
            raise TypeError("a derivation with a closed form given up for time is not kept")
        state = dict(self.__dict__)
        state.update(library=None, cache_key=None)
        return state

    def bind(self, library) -> Derivation:
        """Attach a derivation read from the cache to its library (its steps' formulas are
        looked up again: the library's records are the ones in this process). A step the
        library already holds (another derivation read or built in this process has it) is
        that one: a plan reads ~100 derivations whose ~6,000 steps are ~200 distinct ones, and
        the copies' objects are freed, not kept for the collector to walk."""
        self.library = library
        for i, s in enumerate(self.steps):
            shared = library.step_cache.get(s.memo_key) if s.memo_key is not None else None
            if shared is not None:
                self.steps[i] = shared
                continue
            # (ids as pickled; records already when another derivation of one bundle bound it)
            s.formulas = tuple(library.formulas[f] if isinstance(f, str) else f for f in s.formulas)
            if s.memo_key is not None:
                library.step_cache[s.memo_key] = s
        # the route's steps are its solved steps' (equal, step for step): one copy of each
        steps = tuple(s.step for s in self.steps)
        if steps == self.route.steps:
            self.route = replace(self.route, steps=steps)
        return self

    @property
    def computed(self) -> frozenset[str]:
        """The quantities its steps compute (the target among them). O(steps)."""
        return frozenset(u for s in self.steps for u in s.unknowns)

    def upstream(self, names: Iterable[str]) -> set[str]:
        """``names`` and every quantity they are computed from through the steps (the knowns they
        rest on included). O(steps + quantities)."""
        producer = {u: s for s in self.steps for u in s.unknowns}
        seen: set[str] = set()
        todo = list(names)
        while todo:
            q = todo.pop()
            if q in seen:
                continue
            seen.add(q)
            if q in producer:
                todo.extend(producer[q].inputs)
        return seen

    def usual_choices(self) -> dict[int, int]:
        """The root choices of an evaluation that takes every step's first candidate."""
        return {i: (-1 if s.method == Method.NUMERIC else 0) for i, s in enumerate(self.steps)}

    def printed_closed_form(self, choices: dict[int, int] | None = None) -> Printed | None:
        """The closed form for these root choices if it was composed already, else None
        (compose it with symcalc.engine.derive.closed_form)."""
        return self.closed.get(closed_key(self, choices))

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self, values: dict[str, Any], memo: dict | None = None) -> Evaluation:
        """Run the steps on base-unit magnitudes (floats or arrays, broadcast together).

        ``values`` holds the knowns (given and defaults). Returns every quantity's value.
        ``memo`` (a dict the caller keeps across derivations that share knowns: the planner's
        step time and memory) holds each step's outputs by the step and its inputs, so a step
        two derivations share is evaluated once.
        Raises NoSolutionError when a step has no admissible value anywhere.
        """
        # numpy scalars, not Python floats: 1/0 must give inf (and a clear message later),
        # not a ZeroDivisionError from inside a compiled formula
        env = {k: (np.float64(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
               for k, v in values.items()}
        choices: dict[int, int] = {}
        numeric_steps: set[int] = set()
        findings: list[Finding] = []
        undetermined: dict[str, object] = {}
        with np.errstate(all="ignore"):
            for i, s in enumerate(self.steps):
                # numpy scalars here too: Python's own 2.0 ** 1e5 raises OverflowError where
                # numpy gives inf, which the checks after evaluation then word
                args = [np.float64(env[q]) if type(env[q]) is float else env[q] for q in s.inputs]
                key = _memo_key(s, args) if memo is not None else None
                hit = memo.get(key) if memo is not None else None
                if hit is None:
                    try:
                        hit = self._evaluate_step(s, args, findings, undetermined)
                    except (OverflowError, ZeroDivisionError) as e:
                        raise NoSolutionError(f"{', '.join(s.unknowns)} cannot be computed "
                                              f"({', '.join(f.id for f in s.formulas)}): the values are beyond the "
                                              f"range of floating point ({e.__class__.__name__}); check their units "
                                              "and exponents") from None
                    if memo is not None:
                        memo[key] = hit
                out, choice, used_numeric = hit
                env.update(out)
                choices[i] = choice
                if used_numeric:
                    numeric_steps.add(i)
        return Evaluation(values=env, choices=choices, numeric_steps=numeric_steps, findings=findings,
                          undetermined=undetermined)

    def _evaluate_step(self, s: SolvedStep, args: list, findings: list[Finding], undetermined: dict):
        """Values of one step's unknowns (symcalc.engine.step_values.step_values): a method, so that
        a test can count the steps an evaluation walks."""
        return step_values(self.library, s, args, findings, undetermined)


def _memo_key(s: SolvedStep, args: list) -> tuple:
    """A step with these inputs: the step's formulas, unknowns and inputs, and each input's
    value (a scalar) or array (by identity: the arrays live as long as the evaluation)."""
    return (s.step, tuple(float(a) if np.ndim(a) == 0 else id(a) for a in args))


def closed_key(derivation: Derivation, choices: dict[int, int] | None) -> tuple:
    """What the closed form depends on: the candidate taken at each step that has several."""
    steps = derivation.steps
    return tuple(sorted((i, k if 0 <= k < steps[i].n_candidates else 0) for i, k in (choices or {}).items()
                        if steps[i].n_candidates > 1))
