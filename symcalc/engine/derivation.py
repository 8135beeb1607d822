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
"""

from __future__ import annotations

from collections.abc import Iterable

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc.compiled import CompiledFunction, ceil_tol, floor_tol
from symcalc.engine import numeric
from symcalc.engine.method import Method
from symcalc.engine.routing import Route, Step
from symcalc.errors import NoSolutionError
from symcalc.findings import Finding
from symcalc.lazy import LazyField, LazyFields, freeze
from symcalc.library.algorithms import REGISTRY
from symcalc.library.printed import Printed
from symcalc.library.records import FormulaSpec, Interval

if TYPE_CHECKING:   # pragma: no cover
    import sympy

    from symcalc.engine.tearing import Tearing

__all__ = ["Derivation", "Evaluation", "SingularBlock", "SolvedStep", "ceil_tol", "floor_tol"]


class SingularBlock(Exception):
    """A block of equations that are not independent: ``formula`` is implied by the others."""

    def __init__(self, formula: str, block: tuple[str, ...]):
        super().__init__(formula)
        self.formula = formula
        self.block = block


def _compile(expr, args: list) -> CompiledFunction:
    """symcalc.library.compiling.compile_expr, imported on first use (it imports sympy)."""
    from symcalc.library.compiling import compile_expr  # start-up: only numeric root finding gets here
    return compile_expr(expr, args)


@dataclass
class SolvedStep(LazyFields):
    """One route step with its symbolic solution(s), compiled functions, and printed.

    The sympy fields are lazy (read from the cache only when a new compilation or printing
    needs them); ``functions`` and ``printed`` are what evaluating and showing the step use.
    ``printed`` is None until the step is first shown (symcalc.engine.derive.display).
    The residuals used only by numeric root finding are compiled on first use.
    """

    step: Step
    formulas: tuple[FormulaSpec, ...]
    method: Method
    candidates: tuple[dict, ...] = LazyField(())  # type: ignore[assignment]  # {quantity: expression in the inputs}
    domains: tuple[Interval, ...] = ()
    arg_symbols: tuple[sympy.Symbol, ...] = LazyField(())  # type: ignore[assignment]  # the inputs' symbols, in step.inputs order
    unknown_symbols: tuple[sympy.Symbol, ...] = LazyField(())  # type: ignore[assignment]
    residuals: tuple[sympy.Expr, ...] = LazyField(())  # type: ignore[assignment]  # lhs - rhs of each equation
    reduced: Any = LazyField()                    # the block reduced to one equation (invert.Reduction)
    tearing: Tearing | None = LazyField()  # type: ignore[assignment]  # a large block as one guessed unknown and a chain
    functions: list[dict] = field(default_factory=list, compare=False, repr=False)
    printed: tuple[dict[str, Printed], ...] | None = field(default=None, compare=False, repr=False)  # per candidate
    n_candidates: int = 0
    # what the step depends on besides the library (symcalc.engine.derive): steps with the same
    # key are the same step, shared by every derivation of the library that has it; None for
    # a step whose inversion ran out of time
    memo_key: tuple | None = field(default=None, compare=False, repr=False)
    _residual_fn: Callable | None = field(default=None, init=False, compare=False, repr=False)
    _terms_fn: Callable | None = field(default=None, init=False, compare=False, repr=False)
    _reduction_fn: tuple | None = field(default=None, init=False, compare=False, repr=False)
    _tearing_fn: TornChain | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def unknowns(self) -> tuple[str, ...]:
        return self.step.solves_for

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.step.inputs

    @property
    def residual_function(self) -> Callable | None:
        """residual(unknowns..., inputs...), compiled on first use (only numeric roots need it)."""
        if self._residual_fn is None and self.residuals:
            xs = list(self.unknown_symbols) + list(self.arg_symbols)
            if len(self.residuals) == 1:
                self._residual_fn = _compile(self.residuals[0], xs)
            else:
                self._residual_fn = Stacked(tuple(_compile(r, xs) for r in self.residuals))
        return self._residual_fn

    @property
    def terms_function(self) -> Callable | None:
        """Each equation's addends (of lhs - rhs), as a list of tuples, compiled on first use:
        a block solved numerically compares their positive and negative parts on a log scale,
        which a residual of 1e30 next to one of 1e-3 does not drown."""
        if self._terms_fn is None and len(self.residuals) > 1:
            import sympy  # start-up: only numeric root finding of a block gets here
            xs = list(self.unknown_symbols) + list(self.arg_symbols)
            self._terms_fn = Terms(tuple(_compile(sympy.Tuple(*sympy.Add.make_args(r)), xs) for r in self.residuals))
        return self._terms_fn

    @property
    def reduction(self) -> tuple | None:
        """The compiled block reduction: (last, residual fn, [(name, fn, later names)])."""
        if self._reduction_fn is None and self.reduced is not None:
            self._reduction_fn = _compile_reduction(self.reduced, list(self.arg_symbols))
        return self._reduction_fn

    @property
    def torn(self) -> TornChain | None:
        """The compiled tearing (see :class:`TornChain`), compiled on first use."""
        if self._tearing_fn is None and self.tearing is not None:
            where = dict(zip(self.unknowns, self.domains))
            self._tearing_fn = _compile_tearing(self.tearing, list(self.arg_symbols),
                                                [where[name] for name, _, _ in self.tearing.chain])
        return self._tearing_fn

    def compile_numeric(self) -> None:
        """Compile now what numeric root finding uses (for a step solved only numerically, so
        that the cached derivation keeps it)."""
        _ = self.residual_function, self.terms_function, self.reduction, self.torn

    def __getstate__(self) -> dict:
        # formulas are restored from the library by Derivation.bind; compiled functions keep
        # their code objects (symcalc.compiled). The sympy fields are frozen (symcalc.lazy)
        # once per value: a step shared by many derivations (the planner's, see
        # symcalc.engine.derive) is pickled with each of them.
        state = {k: v for k, v in self.__dict__.items() if k != "_frozen"}
        kept = self.__dict__.setdefault("_frozen", {})
        for key, value in state.items():
            if key.startswith("_lazy_"):
                hit = kept.get(key)
                if hit is None or hit[0] is not value:
                    hit = kept[key] = (value, freeze(value))
                state[key] = hit[1]
        state["formulas"] = tuple(f.id for f in self.formulas)
        return state


class Stacked:
    """Several compiled residuals as one function returning their values stacked."""

    def __init__(self, functions: tuple[CompiledFunction, ...]):
        self.functions = functions

    def __call__(self, *args):
        return np.array([fn(*args) for fn in self.functions], dtype=float)


class Terms:
    """Several compiled equations' addends: a list of one tuple of values per equation."""

    def __init__(self, functions: tuple[CompiledFunction, ...]):
        self.functions = functions

    def __call__(self, *args) -> list:
        return [fn(*args) for fn in self.functions]


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
            s.formulas = tuple(library.formulas[fid] for fid in s.formulas)
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
        """Values of one step's unknowns. Per element: the first root inside the unknowns'
        domains; else the first finite root (the bounds check reports it); else a numeric root."""
        names = s.unknowns
        if s.method == Method.ALGORITHM:
            return {names[0]: self._algorithm(s, args)}, 0, False
        if s.method == Method.NUMERIC:
            return self._numeric(s, args, None, undetermined, findings), -1, True
        results = [{u: _real(fn(*args)) for u, fn in fns.items()} for fns in s.functions]
        if s.method == Method.EXPLICIT:
            return results[0], 0, False
        if len(results) == 1 and all(_all_finite(results[0][u]) for u in names):
            return results[0], 0, False
        finite = [_finite(r, names) for r in results]
        inside = [f & _inside(r, names, s.domains) for f, r in zip(finite, results)]
        shape = np.broadcast_shapes(*[np.shape(v) for r in results for v in r.values()])
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
                                        formulas=(s.formulas[0].id,), mask=several if np.ndim(several) else None))
        used_numeric = False
        if not np.all(taken):
            used_numeric = True
            fallback = self._numeric(s, args, ~taken, undetermined, findings)
            for u in names:
                chosen[u] = np.where(taken, chosen[u], np.broadcast_to(fallback[u], shape))
        out = {u: (float(v) if v.ndim == 0 else v) for u, v in chosen.items()}
        return out, (first_used if first_used is not None else -1), used_numeric

    def _algorithm(self, s: SolvedStep, args: list):
        """Apply a registered algorithm, element by element over any arrays among its inputs."""
        fn = REGISTRY[s.formulas[0].algorithm]  # type: ignore[index]  # an algorithm step names one
        text_out = self.library.quantities[s.unknowns[0]].kind == "text"
        if all(np.ndim(a) == 0 for a in args):
            return fn(*args)
        out = np.vectorize(fn, otypes=[object])(*args)
        return out if text_out else out.astype(float)

    def _numeric(self, s: SolvedStep, args: list, where, undetermined: dict, findings: list[Finding]) -> dict:
        """Numeric roots of the step's equations, for the elements selected by ``where``;
        where the equations are flat in an unknown, ``undetermined[unknown]`` marks it; where
        another root lies beyond the one taken, a several_roots finding says so."""
        names = s.unknowns
        if s.residual_function is None:
            raise NoSolutionError(f"cannot solve {s.formulas[0].id} for {names[0]}")
        shape = np.broadcast_shapes(*[np.shape(a) for a in args]) if args else ()
        if where is not None:
            shape = np.broadcast_shapes(shape, np.shape(where))
            mask = np.broadcast_to(where, shape)
            sub = [np.broadcast_to(np.asarray(a, dtype=float), shape)[mask] for a in args]
        else:
            mask, sub = None, args
        flat = several = None
        if len(names) == 1:
            root, flat, several = numeric.solve_scalar(s.residual_function, sub, s.domains[0], with_status=True)
            roots = [root]
        elif s.tearing is not None:
            roots, flat, several = self._numeric_torn(s, sub)
        elif s.reduction is not None:
            roots, flat, several = self._numeric_reduced(s, sub)
        else:
            solved, flat = numeric.solve_system(s.residual_function, sub, list(s.domains), len(names),
                                                terms=s.terms_function, with_status=True)
            roots = list(solved)
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
        if several is not None and np.any(several):
            if mask is not None:
                full_several = np.zeros(shape, dtype=bool)
                full_several[mask] = several
                several = full_several
            findings.append(Finding("several_roots", names[0], related=tuple(names), formulas=(s.formulas[0].id,),
                                    mask=several if np.ndim(several) else None))
        return out


    def _numeric_torn(self, s: SolvedStep, args: list) -> tuple[list, Any, Any]:
        """A torn block: the tear's root of the leftover equation, then the chain from it.
        Returns (the unknowns' values, where the leftover equation is flat in the tear, where it
        has another root)."""
        torn = s.torn
        assert torn is not None       # a step is torn only with a tearing
        domain = self.library.quantities[torn.tear].domain
        root, flat, several = numeric.solve_scalar(torn.residual_of, args, domain, with_status=True)
        with np.errstate(all="ignore"):
            found = torn.values(root, *args)
            wrong = ~np.asarray(torn.inside([found[n] for n in torn.names])) & ~np.asarray(flat)
            if np.any(wrong):
                # a root whose chain leaves a domain (a negative time): look again, inside only
                again, _, _ = numeric.solve_scalar(torn.residual_inside, args, domain, with_status=True)
                root = np.where(wrong, again, root)
                root = float(root) if np.ndim(root) == 0 else root
                found = torn.values(root, *args)
        return [found[u] for u in s.unknowns], flat, several

    def _numeric_reduced(self, s: SolvedStep, args: list) -> tuple[list, Any, Any]:
        """A block's reduced equation solved numerically, then its substitutions evaluated.
        Returns (the unknowns' values, where the reduced equation is flat, where it has another
        root)."""
        last, residual, chain = s.reduction  # type: ignore[misc]  # a reduced step's
        root, flat, several = numeric.solve_scalar(residual, args, self.library.quantities[last].domain,
                                                   with_status=True)
        found = {last: root}
        for name, fn, later in reversed(chain):
            found[name] = _real(fn(*[found[x] for x in later], *args))
        return [found[u] for u in s.unknowns], flat, several



def _memo_key(s: SolvedStep, args: list) -> tuple:
    """A step with these inputs: the step's formulas, unknowns and inputs, and each input's
    value (a scalar) or array (by identity: the arrays live as long as the evaluation)."""
    return (s.step, tuple(float(a) if np.ndim(a) == 0 else id(a) for a in args))


def closed_key(derivation: Derivation, choices: dict[int, int] | None) -> tuple:
    """What the closed form depends on: the candidate taken at each step that has several."""
    steps = derivation.steps
    return tuple(sorted((i, k if 0 <= k < steps[i].n_candidates else 0) for i, k in (choices or {}).items()
                        if steps[i].n_candidates > 1))


class TornChain:
    """A compiled Tearing: each chain expression as a function of the tear, the unknowns before
    it and the step's inputs; the residual the same way, through the whole chain. ``domains``
    are the chain unknowns' (in chain order): a tear value that takes one of them outside its
    domain (a negative time) is no root, so :meth:`residual_inside` is NaN there (which also
    hides a sign change next to such a region: it is the fallback, not the first try)."""

    def __init__(self, tear: str, names: list[str], steps: list[CompiledFunction], residual: CompiledFunction,
                 domains: list[Interval]):
        self.tear, self.names, self.steps, self.residual, self.domains = tear, names, steps, residual, domains

    def chain(self, t, *inputs) -> list:
        found = [t]
        for fn in self.steps:
            found.append(_real(fn(*found, *inputs)))
        return found

    def inside(self, found: list):
        ok = np.bool_(True)
        for v, d in zip(found[1:], self.domains):
            ok = ok & d.contains(np.asarray(v, dtype=float))
        return ok

    def residual_of(self, t, *inputs):
        return self.residual(*self.chain(t, *inputs), *inputs)

    def residual_inside(self, t, *inputs):
        found = self.chain(t, *inputs)
        return np.where(self.inside(found), np.asarray(self.residual(*found, *inputs), dtype=float), np.nan)

    def values(self, t, *inputs) -> dict:
        return dict(zip(self.names, self.chain(t, *inputs)))


def _compile_tearing(tearing: Tearing, args: list, domains: list[Interval]) -> TornChain:
    """Compile a Tearing into a :class:`TornChain`."""
    names = [tearing.tear] + [name for name, _, _ in tearing.chain]
    symbols = list(tearing.symbols)
    steps = [_compile(expr, symbols[:i + 1] + args) for i, (_, _, expr) in enumerate(tearing.chain)]
    return TornChain(tearing.tear, names, steps, _compile(tearing.residual, symbols + args), domains)


def _compile_reduction(red, args: list) -> tuple:
    """Compile a Reduction: residual(last, inputs) and each eliminated unknown as a function of
    the unknowns eliminated after it (and last) plus the inputs. (A quantity's symbol is named
    after it.)"""
    last = red.last.name
    residual = _compile(red.residual, [red.last] + args)
    chain = []
    for i, (u, expr) in enumerate(red.eliminated):
        later = [red.eliminated[j][0] for j in range(i + 1, len(red.eliminated))] + [red.last]
        used = [x for x in later if x in expr.free_symbols]
        chain.append((u.name, _compile(expr, used + args), [x.name for x in used]))
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
