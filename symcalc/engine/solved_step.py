"""A route step solved: its candidate closed forms, compiled, and what numeric root finding of
it compiles on first use (:class:`SolvedStep`, and the compiled residuals, block reductions and
tearings it keeps).

The record a derivation is made of, apart from the derivation (symcalc.engine.derivation) and
from the walk that evaluates it (symcalc.engine.step_values), which both read it. Like them it
imports no sympy at the top: a step read from the on-disk cache runs on numpy alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc.compiled import CompiledFunction
from symcalc.engine.method import Method
from symcalc.engine.route import Step
from symcalc.lazy import LazyField, LazyFields, freeze
from symcalc.library.printed import Printed
from symcalc.library.records import FormulaSpec, Interval

if TYPE_CHECKING:   # pragma: no cover
    import sympy

    from symcalc.engine.tearing import Tearing


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
        which a residual of 1e30 next to one of 1e-3 does not drown; a step with several
        closed-form roots checks each against them (step_values)."""
        if self._terms_fn is None and self.residuals:
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
