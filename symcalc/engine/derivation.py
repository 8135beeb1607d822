"""Derivations: a route made concrete. Each step inverted by sympy, compiled once, evaluated fast.

A :class:`Derivation` holds, for every route step, its candidate closed forms (one per root
sympy could not rule out), each compiled to a numpy function of the step's inputs, plus the
composed closed form of the target in the knowns. Evaluation works on base-unit magnitudes
(floats or arrays; "units at the boundary, floats inside") and walks the steps in order, so
each intermediate value is available to the renderers without recomputation.

Design note (departs from DESIGN.md on purpose): the design composes the chain into one
expression and compiles that. Here each step is compiled on its own and the composed
expression is kept for display. The cost per evaluation is the same array work, and it buys
three things: (1) the per-step numbers the derivation display shows, (2) per-element root
selection when a step has several roots, and (3) numeric fallback exactly where a closed form
is singular (e.g. an inverse with a latency term of 0), instead of NaN in a sweep.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import reduce

import numpy as np
import sympy
from sympy.printing.numpy import NumPyPrinter, SciPyPrinter

from symcalc import budget, units
from symcalc.budget import bounded
from symcalc.engine import numeric
from symcalc.engine.invert import (
    dependent_equation,
    reduce_block,
    solve_block,
    solve_for,
)
from symcalc.engine.method import Method
from symcalc.engine.routing import Route, Step
from symcalc.engine.tearing import TEAR_FROM, Tearing, tear_block
from symcalc.errors import NoSolutionError
from symcalc.findings import Finding
from symcalc.library.algorithms import REGISTRY
from symcalc.library.exprparse import UnitSymbol
from symcalc.library.records import FormulaSpec, Interval


def floor_tol(x):
    """floor() that does not fall through an integer by float noise: 3/(3*0.1) = 9.999999999999998
    is 10. The slack is relative (1e-12) and capped (1e-3), as for rounding answers."""
    x = np.asarray(x, dtype=float)
    out = np.floor(x + np.minimum(1e-12 * np.abs(x), 1e-3))
    return float(out) if out.ndim == 0 else out


def ceil_tol(x):
    """ceiling() with the same guard: 1120.0000000002 is 1120."""
    x = np.asarray(x, dtype=float)
    out = np.ceil(x - np.minimum(1e-12 * np.abs(x), 1e-3))
    return float(out) if out.ndim == 0 else out


# a step (its inversions, each with a limit of its own, substitutions and compiling) may take this
# many times the symbolic limit
STEP_LIMITS = 3

# A composed expression of more nodes than this is not substituted into further: nobody reads a
# closed form that long, and sympy's substitution through nested Max/Min slows with size (the
# step-time model's 60 steps composed took 11 s, and ran into the time limit on a busy machine,
# which made the derivation too uncertain to keep on disk). A size, not a time: the same on
# every machine.
CLOSED_FORM_NODES = 400


def _small(expr: sympy.Expr, limit: int = CLOSED_FORM_NODES) -> bool:
    """At most ``limit`` nodes (stops counting there: O(limit))."""
    for i, _ in enumerate(sympy.preorder_traversal(expr)):
        if i >= limit:
            return False
    return True


class SingularBlock(Exception):
    """A block of equations that are not independent: ``formula`` is implied by the others."""

    def __init__(self, formula: str, block: tuple[str, ...]):
        super().__init__(formula)
        self.formula = formula
        self.block = block


class _BroadcastMinMax:
    """Min/Max that broadcast scalars against arrays (sympy#21611 prints amin over a tuple), and
    floor/ceiling guarded against float noise."""

    def _print_floor(self, expr):
        return f"floor_tol({self._print(expr.args[0])})"

    def _print_ceiling(self, expr):
        return f"ceil_tol({self._print(expr.args[0])})"

    def _print_Min(self, expr):
        args = [self._print(a) for a in expr.args]
        return reduce(lambda a, b: f"{self._module_format('numpy.minimum')}({a}, {b})", args)

    def _print_Max(self, expr):
        args = [self._print(a) for a in expr.args]
        return reduce(lambda a, b: f"{self._module_format('numpy.maximum')}({a}, {b})", args)


class _NumpyPrinter(_BroadcastMinMax, NumPyPrinter):
    pass


class _ScipyPrinter(_BroadcastMinMax, SciPyPrinter):
    """For roots with special functions (LambertW); scipy is imported only then."""


def unit_factors(expr: sympy.Expr) -> dict:
    """UnitSymbol -> its size in base units, for every unit written in ``expr``."""
    return {s: sympy.Float(units.to_base_factor(s.unit)) for s in expr.free_symbols
            if isinstance(s, UnitSymbol)}


def compile_expr(expr: sympy.Expr, args: list[sympy.Symbol]) -> Callable:
    """``expr`` as a numpy function of ``args`` (units replaced by base-unit factors), compiled
    once per process: derivations of one question under different options (a planner's ZeRO
    stages, recompute modes, schedules) share most of their steps, and compiling a step (cse,
    lambdify) is most of the time a cached derivation takes to bind."""
    key = (expr, tuple(args))
    fn = _COMPILED.get(key)
    if fn is None:
        if len(_COMPILED) >= _COMPILED_MAX:
            _COMPILED.clear()
        fn = _COMPILED[key] = _compile_expr(expr, args)
    return fn


_COMPILED: dict = {}
_COMPILED_MAX = 8192


def _compile_expr(expr: sympy.Expr, args: list[sympy.Symbol]) -> Callable:
    """``expr`` as a numpy function of ``args`` (units replaced by base-unit factors).

    The namespace is numpy itself plus the guards, not lambdify's "numpy" module string: that
    runs ``from numpy import *``, which imports numpy.ma, numpy.f2py, numpy.testing and
    numpy.random (0.13 s, a sixth of start-up) for names the printer never writes: it imports
    each function it prints by name."""
    numeric_expr = expr.subs(unit_factors(expr))
    special = numeric_expr.has(sympy.LambertW)
    guards = {"floor_tol": floor_tol, "ceil_tol": ceil_tol}
    if special:
        return sympy.lambdify(args, numeric_expr, modules=[guards, "scipy", "numpy"], cse=True,
                              printer=_ScipyPrinter, docstring_limit=0)
    return sympy.lambdify(args, numeric_expr, modules=[guards, {"numpy": np}], cse=True,
                          printer=_NumpyPrinter, docstring_limit=0)


@dataclass
class SolvedStep:
    """One route step with its symbolic solution(s) and compiled functions.

    The symbolic part is plain data (it is what the on-disk cache keeps); the compiled
    functions are rebuilt from it by :meth:`compile`, and the residuals used only by numeric
    root finding are compiled on first use.
    """

    step: Step
    formulas: tuple[FormulaSpec, ...]
    method: Method
    candidates: tuple[dict, ...]                  # {quantity name: expression in the inputs}
    domains: tuple[Interval, ...] = ()
    arg_symbols: tuple[sympy.Symbol, ...] = ()    # symbols of the inputs, in step.inputs order
    unknown_symbols: tuple[sympy.Symbol, ...] = ()
    residuals: tuple[sympy.Expr, ...] = ()        # lhs - rhs of each equation, for numeric roots
    reduced: object = None                        # the block reduced to one equation (invert.Reduction)
    tearing: Tearing | None = None                # a large block as one guessed unknown and a chain
    functions: list[dict] = field(default_factory=list, compare=False, repr=False)
    _residual_fn: Callable | None = field(default=None, init=False, compare=False, repr=False)
    _reduction_fn: tuple | None = field(default=None, init=False, compare=False, repr=False)
    _tearing_fn: tuple | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def unknowns(self) -> tuple[str, ...]:
        return self.step.solves_for

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.step.inputs

    def compile(self) -> None:
        """Compile each candidate to numpy functions of the step's inputs."""
        if self.method == Method.ALGORITHM:    # evaluated in Python (symcalc.library.algorithms)
            return
        args = list(self.arg_symbols)
        self.functions = [{u: compile_expr(c[u], args) for u in self.unknowns} for c in self.candidates]

    @property
    def residual_function(self) -> Callable | None:
        """residual(unknowns..., inputs...), compiled on first use (only numeric roots need it)."""
        if self._residual_fn is None and self.residuals:
            xs = list(self.unknown_symbols) + list(self.arg_symbols)
            if len(self.residuals) == 1:
                self._residual_fn = compile_expr(self.residuals[0], xs)
            else:
                fns = [compile_expr(r, xs) for r in self.residuals]
                self._residual_fn = lambda *a: np.array([fn(*a) for fn in fns], dtype=float)
        return self._residual_fn

    @property
    def reduction(self) -> tuple | None:
        """The compiled block reduction: (last, residual fn, [(name, fn, later names)])."""
        if self._reduction_fn is None and self.reduced is not None:
            self._reduction_fn = _compile_reduction(self.reduced, list(self.arg_symbols))
        return self._reduction_fn

    @property
    def torn(self) -> tuple | None:
        """The compiled tearing: (tear name, residual(tear, inputs...), chain(tear, inputs...) ->
        {unknown: value}), compiled on first use."""
        if self._tearing_fn is None and self.tearing is not None:
            where = dict(zip(self.unknowns, self.domains))
            self._tearing_fn = _compile_tearing(self.tearing, list(self.arg_symbols),
                                                [where[name] for name, _, _ in self.tearing.chain])
        return self._tearing_fn

    def __getstate__(self) -> dict:
        # compiled functions are not picklable and are rebuilt by compile(); formulas are
        # restored from the library by Derivation.bind
        state = dict(self.__dict__)
        state.update(functions=[], _residual_fn=None, _reduction_fn=None, _tearing_fn=None,
                     formulas=tuple(f.id for f in self.formulas))
        return state


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
    """The solved, compiled route from a set of known quantities to a target."""

    def __init__(self, library, route: Route, options: dict[str, str], constants: dict[str, float]):
        self.library = library
        self.route = route
        self.target = route.target
        self.options = dict(options)
        self.constants = dict(constants)   # defaults fixed at 0: their terms are dropped
        zero = {library.quantities[q].symbol: sympy.Integer(0) for q, v in constants.items() if v == 0}
        # solved quantity -> its closed form in the knowns (first root); None once composing it
        # took too long (blocks are then tested for independence in their own inputs)
        self._in_knowns: dict | None = {}
        self.steps = []
        before = budget.expirations
        for step in route.steps:
            solved = self._solve_step(step, zero)
            self.steps.append(solved)
            if solved.candidates and solved.method != Method.ALGORITHM and self._in_knowns is not None:
                with bounded(budget.DEFAULT_SYMBOLIC_LIMIT) as limit:
                    for name, expr in solved.candidates[0].items():
                        composed = expr.subs(self._in_knowns)
                        if _small(composed):    # else it stays an intermediate for what follows
                            self._in_knowns[self._sym(name)] = composed
                if limit.expired:
                    self._in_knowns = None
        self._closed: dict[tuple, sympy.Expr] = {}
        # a closed form given up for time depends on how busy the machine was: such a
        # derivation is used, but not kept on disk for other processes (see __getstate__)
        self.degraded = budget.expirations != before

    # -- building -------------------------------------------------------------------------
    def _sym(self, name: str) -> sympy.Symbol:
        return self.library.quantities[name].symbol

    def _solve_step(self, step: Step, zero: dict) -> SolvedStep:
        """The step inverted and compiled; numeric when that takes longer than the symbolic limit
        (each inversion has a limit of its own, in symcalc.engine.invert; this one also bounds the
        substitutions and compiling around them)."""
        with bounded(STEP_LIMITS * budget.DEFAULT_SYMBOLIC_LIMIT):
            return self._invert_step(step, zero, symbolic=True)
        return self._invert_step(step, zero, symbolic=False)

    def _invert_step(self, step: Step, zero: dict, symbolic: bool) -> SolvedStep:
        formulas = tuple(self.library.formulas[fid] for fid in step.formulas)
        domains = tuple(self.library.quantities[u].domain for u in step.solves_for)

        def clean(e):
            if not zero:
                return e
            out = e.subs(zero)
            return e if out.has(sympy.zoo, sympy.nan, sympy.oo) else out

        candidates: tuple[dict, ...] = ()
        tearing = None
        if len(formulas) >= TEAR_FROM:
            # a forward model run backwards: one unknown guessed, the rest a chain from it
            # (before any block-wide symbolic work, which grows without bound on such blocks)
            people_give = [u for u in step.solves_for if self.library.quantities[u].input]
            tearing = tear_block(formulas, step.solves_for, self._sym, clean,
                                 prefer=[self.target, *people_give])
        if len(formulas) == 1 and formulas[0].algorithm:
            # a registered procedure: its "solution" is the call itself, evaluated in Python
            solved = SolvedStep(step=step, formulas=formulas, method=Method.ALGORITHM,
                                candidates=({step.solves_for[0]: formulas[0].rhs},), domains=domains)
            return solved
        if not symbolic:
            method = Method.NUMERIC
        elif len(formulas) == 1:
            f, name = formulas[0], step.solves_for[0]
            x = self._sym(name)
            how = f.solvability[name]
            if how == "explicit":
                expr = f.rhs if f.lhs == x else f.lhs
                candidates, method = ({name: clean(expr)},), Method.EXPLICIT
            else:
                roots = solve_for(clean(f.lhs - f.rhs), x) if how == "symbolic" else None
                if roots:
                    candidates, method = tuple({name: r} for r in roots), Method.REARRANGED
                else:
                    method = Method.NUMERIC
        elif tearing is not None:
            method = Method.NUMERIC
        else:
            xs = tuple(self._sym(u) for u in step.solves_for)
            equations = tuple((clean(f.lhs), clean(f.rhs)) for f in formulas)
            # Test independence in the knowns themselves: an input derived earlier (R = D/T) can
            # make the block singular (C = fpt D, A = fpt R, C = A T) though it looks regular.
            known = self._in_knowns or {}
            in_knowns = tuple((lhs.subs(known), rhs.subs(known)) for lhs, rhs in equations)
            dependent = dependent_equation(in_knowns, xs)
            if dependent is not None:
                raise SingularBlock(formulas[dependent].id, tuple(f.id for f in formulas))
            sols = solve_block(equations, xs)
            if sols:
                names = {self._sym(u): u for u in step.solves_for}
                candidates = tuple({names[s]: e for s, e in sol.items()} for sol in sols)
                method = Method.BLOCK
            else:
                method = Method.NUMERIC
        residuals: tuple = ()
        reduced = None
        if method != Method.EXPLICIT:
            residuals = tuple(clean(f.lhs - f.rhs) for f in formulas)
            if len(residuals) > 1 and symbolic and tearing is None:
                reduced = reduce_block(tuple((clean(f.lhs), clean(f.rhs)) for f in formulas),
                                       tuple(self._sym(u) for u in step.solves_for))
                if reduced is not None and reduced.last is None:
                    reduced = None      # reduced to no unknown (dependent in these inputs): no chain to evaluate
        solved = SolvedStep(step=step, formulas=formulas, method=method, candidates=candidates,
                            domains=domains, arg_symbols=tuple(self._sym(q) for q in step.inputs),
                            unknown_symbols=tuple(self._sym(u) for u in step.solves_for),
                            residuals=residuals, reduced=reduced, tearing=tearing)
        solved.compile()
        return solved

    # -- the on-disk cache ----------------------------------------------------------------
    def __getstate__(self) -> dict:
        # the library is re-attached by bind(); _in_knowns only serves construction
        if getattr(self, "degraded", False):
            raise TypeError("a derivation with a closed form given up for time is not kept")
        state = dict(self.__dict__)
        state.update(library=None, _in_knowns={})
        return state

    def bind(self, library) -> Derivation:
        """Attach a derivation read from the cache to its library and compile its steps.

        Compiling is a few milliseconds a step; inverting the equations with sympy, which the
        cache saves, is 10-100 times that."""
        self.library = library
        for s in self.steps:
            s.formulas = tuple(library.formulas[fid] for fid in s.formulas)
            s.compile()
        return self

    def usual_choices(self) -> dict[int, int]:
        """The root choices of an evaluation that takes every step's first candidate."""
        return {i: (-1 if s.method == Method.NUMERIC else 0) for i, s in enumerate(self.steps)}

    # -- closed form ----------------------------------------------------------------------
    def closed_form(self, choices: dict[int, int] | None = None) -> sympy.Expr:
        """The target as one expression in the knowns (numeric steps stay as their symbol).

        Composed from the last step back; should that take longer than the symbolic limit (each
        substitution can multiply the expression's size), or the expression grow beyond
        CLOSED_FORM_NODES, it stops there: the expression is still the target, in terms of the
        intermediate quantities not yet substituted."""
        key = tuple(sorted((choices or {}).items()))
        if key not in self._closed:
            expr = self._sym(self.target)
            with bounded(budget.DEFAULT_SYMBOLIC_LIMIT) as limit:
                for i in range(len(self.steps) - 1, -1, -1):
                    s = self.steps[i]
                    if not s.candidates:
                        continue
                    k = (choices or {}).get(i, 0)
                    cand = s.candidates[k if 0 <= k < len(s.candidates) else 0]
                    composed = expr.subs({self._sym(u): cand[u] for u in s.unknowns})
                    if not _small(composed):
                        break           # long enough to read: the rest stay intermediates
                    expr = composed
            if limit.expired:
                self.degraded = True
            self._closed[key] = expr
        return self._closed[key]

    # -- evaluation -----------------------------------------------------------------------
    def evaluate(self, values: dict[str, object]) -> Evaluation:
        """Run the steps on base-unit magnitudes (floats or arrays, broadcast together).

        ``values`` holds the knowns (given and defaults). Returns every quantity's value.
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
                try:
                    out, choice, used_numeric = self._evaluate_step(s, args, findings, undetermined)
                except (OverflowError, ZeroDivisionError) as e:
                    raise NoSolutionError(f"{', '.join(s.unknowns)} cannot be computed "
                                          f"({', '.join(f.id for f in s.formulas)}): the values are beyond the "
                                          f"range of floating point ({e.__class__.__name__}); check their units "
                                          "and exponents") from None
                env.update(out)
                choices[i] = choice
                if used_numeric:
                    numeric_steps.add(i)
        return Evaluation(values=env, choices=choices, numeric_steps=numeric_steps, findings=findings,
                          undetermined=undetermined)

    def _evaluate_step(self, s: SolvedStep, args: list, findings: list[Finding], undetermined: dict):
        """Values of one step's unknowns. Per element: the first root inside the unknowns'
        domains; else the first finite root (the bounds check reports it); else a numeric root."""
        names = s.unknowns
        if s.method == Method.ALGORITHM:
            return {names[0]: self._algorithm(s, args)}, 0, False
        if s.method == Method.NUMERIC:
            return self._numeric(s, args, None, undetermined), -1, True
        results = [{u: _real(fn(*args)) for u, fn in fns.items()} for fns in s.functions]
        if s.method == Method.EXPLICIT:
            return results[0], 0, False
        if len(results) == 1 and all(_all_finite(results[0][u]) for u in names):
            return results[0], 0, False
        finite = [_finite(r, names) for r in results]
        inside = [f & _inside(r, names, s.domains) for f, r in zip(finite, results)]
        shape = np.broadcast(*[np.asarray(v) for r in results for v in r.values()]).shape
        chosen = {u: np.full(shape, np.nan) for u in names}
        taken = np.zeros(shape, dtype=bool)
        first_used = None
        for masks in (inside, finite):
            for k, (r, mask) in enumerate(zip(results, masks)):
                mask = np.broadcast_to(mask, shape) & ~taken
                if np.any(mask):
                    first_used = k if first_used is None else first_used
                    for u in names:
                        chosen[u] = np.where(mask, np.broadcast_to(r[u], shape), chosen[u])
                    taken |= mask
        if len(results) > 1:
            several = sum(np.broadcast_to(m, shape).astype(int) for m in inside) > 1
            if np.any(several):
                findings.append(Finding("several_roots", names[0], related=tuple(names),
                                        formulas=(s.formulas[0].id,), mask=several if several.ndim else None))
        used_numeric = False
        if not np.all(taken):
            used_numeric = True
            fallback = self._numeric(s, args, ~taken, undetermined)
            for u in names:
                chosen[u] = np.where(taken, chosen[u], np.broadcast_to(fallback[u], shape))
        out = {u: (float(v) if v.ndim == 0 else v) for u, v in chosen.items()}
        return out, (first_used if first_used is not None else -1), used_numeric

    def _algorithm(self, s: SolvedStep, args: list):
        """Apply a registered algorithm, element by element over any arrays among its inputs."""
        fn = REGISTRY[s.formulas[0].algorithm]
        text_out = self.library.quantities[s.unknowns[0]].kind == "text"
        if all(np.ndim(a) == 0 for a in args):
            return fn(*args)
        out = np.vectorize(fn, otypes=[object])(*args)
        return out if text_out else out.astype(float)

    def _numeric(self, s: SolvedStep, args: list, where, undetermined: dict) -> dict:
        """Numeric roots of the step's equations, for the elements selected by ``where``;
        where the equations are flat in an unknown, ``undetermined[unknown]`` marks it."""
        names = s.unknowns
        if s.residual_function is None:
            raise NoSolutionError(f"cannot solve {s.formulas[0].id} for {names[0]}")
        shape = np.broadcast(*[np.asarray(a) for a in args]).shape if args else ()
        if where is not None:
            shape = np.broadcast_shapes(shape, np.shape(where))
            mask = np.broadcast_to(where, shape)
            sub = [np.broadcast_to(np.asarray(a, dtype=float), shape)[mask] for a in args]
        else:
            mask, sub = None, args
        flat = None
        if len(names) == 1:
            root, flat = numeric.solve_scalar(s.residual_function, sub, s.domains[0], with_status=True)
            roots = [root]
        elif s.tearing is not None:
            roots, flat = self._numeric_torn(s, sub)
        elif s.reduction is not None:
            roots, flat = self._numeric_reduced(s, sub)
        else:
            roots = list(numeric.solve_system(s.residual_function, sub, list(s.domains), len(names)))
        out = {}
        for u, r in zip(names, roots):
            if mask is not None:
                full = np.full(shape, np.nan)
                full[mask] = r
                r = full
            out[u] = float(r) if np.ndim(r) == 0 else r
        if flat is not None and np.any(flat):
            if mask is not None:
                full_flat = np.zeros(shape, dtype=bool)
                full_flat[mask] = flat
                flat = full_flat
            for u in names:
                undetermined[u] = flat
        return out


    def _numeric_torn(self, s: SolvedStep, args: list) -> tuple[list, object]:
        """A torn block: the tear's root of the leftover equation, then the chain from it.
        Returns (the unknowns' values, where the leftover equation is flat in the tear)."""
        tear, residual, residual_inside, chain, inside = s.torn
        domain = self.library.quantities[tear].domain
        root, flat = numeric.solve_scalar(residual, args, domain, with_status=True)
        with np.errstate(all="ignore"):
            found = chain(root, *args)
            wrong = ~np.asarray(inside(found)) & ~np.asarray(flat)
            if np.any(wrong):
                # a root whose chain leaves a domain (a negative time): look again, inside only
                again, _ = numeric.solve_scalar(residual_inside, args, domain, with_status=True)
                root = np.where(wrong, again, root)
                root = float(root) if np.ndim(root) == 0 else root
                found = chain(root, *args)
        return [found[u] for u in s.unknowns], flat

    def _numeric_reduced(self, s: SolvedStep, args: list) -> tuple[list, object]:
        """A block's reduced equation solved numerically, then its substitutions evaluated.
        Returns (the unknowns' values, where the reduced equation is flat)."""
        last, residual, chain = s.reduction
        root, flat = numeric.solve_scalar(residual, args, self.library.quantities[last].domain, with_status=True)
        found = {last: root}
        for name, fn, later in reversed(chain):
            found[name] = _real(fn(*[found[x] for x in later], *args))
        return [found[u] for u in s.unknowns], flat


def _compile_tearing(tearing: Tearing, args: list, domains: list[Interval]) -> tuple:
    """Compile a Tearing: each chain expression as a function of the tear, the unknowns before
    it and the step's inputs; the residual the same way, through the whole chain. ``domains``
    are the chain unknowns' (in chain order): a tear value that takes one of them outside its
    domain (a negative time) is no root, so the second residual returned is NaN there (which
    also hides a sign change next to such a region: it is the fallback, not the first try).
    Returns (tear name, residual, residual inside the domains, chain -> {name: value},
    inside(found) -> where every chain value lies in its domain)."""
    names = [tearing.tear] + [name for name, _, _ in tearing.chain]
    symbols = list(tearing.symbols)
    steps = [compile_expr(expr, symbols[:i + 1] + args) for i, (_, _, expr) in enumerate(tearing.chain)]
    residual = compile_expr(tearing.residual, symbols + args)

    def chain(t, *inputs) -> list:
        found = [t]
        for fn in steps:
            found.append(_real(fn(*found, *inputs)))
        return found

    def inside(found: list):
        ok = np.bool_(True)
        for v, d in zip(found[1:], domains):
            ok = ok & d.contains(np.asarray(v, dtype=float))
        return ok

    def residual_of(t, *inputs):
        return residual(*chain(t, *inputs), *inputs)

    def residual_inside(t, *inputs):
        found = chain(t, *inputs)
        return np.where(inside(found), np.asarray(residual(*found, *inputs), dtype=float), np.nan)

    return (tearing.tear, residual_of, residual_inside, lambda t, *inputs: dict(zip(names, chain(t, *inputs))),
            lambda found: inside([found[n] for n in names]))


def _compile_reduction(red, args: list) -> tuple:
    """Compile a Reduction: residual(last, inputs) and each eliminated unknown as a function of
    the unknowns eliminated after it (and last) plus the inputs. (A quantity's symbol is named
    after it.)"""
    last = red.last.name
    residual = compile_expr(red.residual, [red.last] + args)
    chain = []
    for i, (u, expr) in enumerate(red.eliminated):
        later = [red.eliminated[j][0] for j in range(i + 1, len(red.eliminated))] + [red.last]
        used = [x for x in later if x in expr.free_symbols]
        chain.append((u.name, compile_expr(expr, used + args), [x.name for x in used]))
    return last, residual, chain


def _real(v):
    v = np.asarray(v)
    if np.iscomplexobj(v):
        small = np.abs(v.imag) <= 1e-9 * np.maximum(np.abs(v.real), 1e-300)
        v = np.where(small, v.real, np.nan)
    v = v.astype(float, copy=False)
    return float(v) if v.ndim == 0 else v


def _all_finite(v) -> bool:
    """No inf or NaN: a minimum and a maximum, not an elementwise mask."""
    if isinstance(v, float):
        return math.isfinite(v)
    a = np.asarray(v, dtype=float)
    return a.size == 0 or (math.isfinite(np.minimum.reduce(a, axis=None)) and math.isfinite(np.maximum.reduce(a, axis=None)))


def _finite(result: dict, names: tuple[str, ...]):
    mask = True
    for u in names:
        mask = mask & np.isfinite(np.asarray(result[u], dtype=float))
    return mask


def _inside(result: dict, names: tuple[str, ...], domains: tuple[Interval, ...]):
    mask = True
    for u, d in zip(names, domains):
        mask = mask & d.contains(np.asarray(result[u], dtype=float))
    return mask
