"""The evaluator's path for large grids: a derivation run chunk by chunk at numpy speed.

Used only by :func:`symcalc.engine.evaluate.evaluate` (the one evaluator), for grids of at
least its ``MIN_SIZE`` points. Why a second kernel beside the step walker
(:meth:`Derivation.evaluate`): walking the steps over whole arrays, then scanning every
computed array for its bounds, costs 5-10x the formula written in numpy by hand on a 1e6-point
grid (each scan is a pass over memory). Here the same values and checks cost about the hand
formula's:

* Inputs are checked in chunks of ``CHUNK`` elements (a minimum and a maximum per chunk, and
  floor(x) == x for whole numbers: :func:`symcalc.engine.bounds.within`), and the formula
  runs on the chunk while it is still in the CPU cache.
* numpy's floating-point error reporting is on in the strict mode. From finite inputs, an
  infinite or NaN value can only come from an overflow, a division by zero or an invalid
  operation, all of which numpy reports: when none is, every value is finite.
* A step whose bounds follow from its formula's structure (:func:`symcalc.engine.signs.sign`:
  a sum, product or quotient of positive values is positive) is not scanned for them.

When every step is of that kind and only the target is asked for, the derivation runs
*fused*: one compiled expression of the knowns, with common subexpressions shared and the
defaults folded in, which does the work of the hand-written formula and no more. It equals
the step walker's answer to within rounding (no step subtracts), and
:func:`symcalc.engine.signs.interval` shows over the inputs' actual ranges that no step would
overflow or underflow either; an answer within 1e-12 of a finite bound is left to the walker.
Otherwise (several outputs, a whole-number answer, a step that subtracts) it runs the step
walker's own compiled functions, bitwise the same numbers, scanning the steps not proven.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from weakref import WeakKeyDictionary

import numpy as np
import sympy

from symcalc import budget
from symcalc.budget import bounded
from symcalc.engine.bounds import both as _and
from symcalc.engine.bounds import within as _inside
from symcalc.engine.derivation import Derivation
from symcalc.library.compiling import compile_expr, unit_factors
from symcalc.engine.method import Method
from symcalc.engine.rounding import round_whole
from symcalc.engine.signs import NONNEG, POS, domain_sign, interval, sign
from symcalc.library.records import Interval

CHUNK = 1 << 14          # elements per chunk: a chunk's inputs and temporaries stay in L2 cache
EDGE = 1e-12             # a fused answer this close (relatively) to a finite bound is left to solve()


@dataclass
class Program:
    """A derivation prepared for sweeping (built once per derivation and process)."""

    target: str
    knowns: tuple[str, ...]                                   # given names the steps read
    constants: dict[str, np.float64]                          # defaults the steps read
    steps: tuple[tuple[Callable, tuple[str, ...], str], ...]  # (function, input names, output)
    checked: tuple[str, ...]                                  # steps whose bounds are scanned
    # when every step is proven: each step's formula in its inputs, for the range check, and
    # the target as one expression of the knowns (compiled per display factor on first use)
    exprs: tuple[tuple[sympy.Symbol, sympy.Expr], ...] | None
    fused_expr: sympy.Expr | None
    symbols: dict[str, sympy.Symbol]
    _fused: dict[float, Callable] = field(default_factory=dict)

    def fused(self, factor: float) -> Callable:
        """The target in units of ``factor`` base units, as one function of the knowns."""
        if factor not in self._fused:
            # common factors pulled out of sums (72 d^2 L + 12 d V -> 12 d (6 d L + V)): fewer
            # array operations, and with every term positive no cancellation is introduced;
            # an expression too large to factor in time is compiled as it is
            expr = self.fused_expr / sympy.Rational(factor)
            with bounded(budget.DEFAULT_SYMBOLIC_LIMIT):
                expr = sympy.factor_terms(expr)
            self._fused[factor] = compile_expr(expr, [self.symbols[k] for k in self.knowns])
        return self._fused[factor]


_programs: WeakKeyDictionary = WeakKeyDictionary()


def program(derivation: Derivation) -> Program | None:
    """The sweep program of a derivation, or None if it cannot be swept here: no steps (the
    answer was given), a step with several candidate roots, a numeric or algorithmic step,
    or a text quantity."""
    if derivation not in _programs:
        built = None
        with bounded(budget.DEFAULT_SYMBOLIC_LIMIT):    # too large to prepare in time: the step walker
            built = _build(derivation)
        _programs[derivation] = built
    return _programs[derivation]


def _build(derivation: Derivation) -> Program | None:
    if not derivation.steps:
        return None
    lib = derivation.library
    symbols = {name: lib.quantities[name].symbol for name in [*derivation.route.given, *derivation.constants]}
    facts: dict[sympy.Symbol, str] = {}
    for name in derivation.route.given:
        fact = domain_sign(lib.quantities[name].domain)     # inputs are checked against it
        if fact:
            facts[symbols[name]] = fact
    # exact rationals, not sympy Floats: a Float is printed with 15 digits, which is not
    # always the same double (1/86400 would come back 3e-16 off)
    constants = {symbols[k]: sympy.Rational(v) for k, v in derivation.constants.items()}
    for sym, value in constants.items():
        if value >= 0:
            facts[sym] = POS if value > 0 else NONNEG
    steps, checked, exprs = [], [], []
    in_knowns: dict[sympy.Symbol, sympy.Expr] = {}
    all_proven = True
    for s in derivation.steps:
        if s.method in (Method.NUMERIC, Method.ALGORITHM) or len(s.candidates) != 1 or len(s.functions) != 1:
            return None
        for name in s.unknowns:
            q = lib.quantities[name]
            if q.kind == "text":
                return None
            symbols[name] = q.symbol
            expr = s.candidates[0][name]
            expr = expr.xreplace({u: sympy.Rational(float(f)) for u, f in unit_factors(expr).items()})
            expr = expr.xreplace(constants)
            got = sign(expr, facts)
            proven = got is not None and _bounds_follow(q.domain, got)
            all_proven = all_proven and got is not None and (proven or name == derivation.target)
            if not proven:
                checked.append(name)
            fact = got if proven else domain_sign(q.domain)
            if fact:
                facts[q.symbol] = fact
            steps.append((s.functions[0][name], tuple(s.inputs), name))
            exprs.append((q.symbol, expr))
            in_knowns[q.symbol] = expr.xreplace(in_knowns)
    fused = all_proven and lib.quantities[derivation.target].whole is None
    return Program(target=derivation.target, knowns=tuple(derivation.route.given),
                   constants={k: np.float64(v) for k, v in derivation.constants.items()},
                   steps=tuple(steps), checked=tuple(checked),
                   exprs=tuple(exprs) if fused else None,
                   fused_expr=in_knowns[symbols[derivation.target]] if fused else None, symbols=symbols)


def _bounds_follow(d: Interval, got: str) -> bool:
    """Whether a value of that sign, finite, is inside ``d`` for sure."""
    if math.isinf(d.lo) and d.lo_open and math.isinf(d.hi) and d.hi_open:
        return True
    if not (math.isinf(d.hi) and d.hi_open):
        return False
    need = domain_sign(d)
    return need is not None and (got == POS or need == NONNEG)


# one output of a run: (quantity, base units per display unit, how a whole number rounds or None)
Output = tuple[str, float, "str | None"]


def run(derivation: Derivation, values: Mapping[str, object], outputs: tuple[Output, ...],
        integral: frozenset[str] | set[str] = frozenset(), strict: bool = False
        ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray] | None:
    """``outputs`` of ``derivation`` over the broadcast grid of ``values`` (base-unit
    magnitudes of its knowns: arrays or floats), chunk by chunk.

    Returns (values per output in its display unit, rounded where asked; the unrounded values
    of the rounded outputs; the ``inside`` mask), or None when the derivation cannot run here
    (no steps, a numeric or algorithmic step, several roots, a text quantity, a known missing,
    an output it does not compute).

    A point is inside when every known lies in its quantity's bounds (exactly whole where the
    quantity is whole, unless it came as an integer array: ``integral``), every step whose
    bounds are not proven from its formula's structure does too, and the target (rounded when
    asked) is finite and inside its bounds; the values at the other points are what the
    formulas give there (NaN where undefined).

    ``strict`` (Result.function): None as soon as anything is out of the ordinary, so that the
    step walker answers with its exact messages: a point outside, a floating-point error, a
    float array that is not float64, a given value the steps do not read outside its bounds, a
    fused answer within EDGE of a finite bound or inputs whose ranges could overflow a step
    (signs.interval), an answer that would not broadcast like the walker's.

    O(points x steps); memory flat in the number of points beyond the outputs.
    """
    prog = program(derivation)
    if prog is None or any(name not in values for name in prog.knowns):
        return None
    computed = {name for _, _, name in prog.steps}
    if any(name not in computed for name, _, _ in outputs):
        return None
    quantities = derivation.library.quantities
    arrays = [np.asarray(values[n]) for n in prog.knowns]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    if not shape:
        return None
    if strict and not _ordinary_inputs(prog, values, arrays, quantities):
        return None
    return _Chunks(prog, quantities, arrays, shape, outputs, integral, strict).run()


def _ordinary_inputs(prog: Program, values: Mapping[str, object], arrays: list[np.ndarray],
                     quantities: Mapping) -> bool:
    """The strict mode's checks before any chunk: float64 or integer arrays, and the given
    values the steps do not read inside their bounds (else the step walker answers)."""
    if any(a.dtype != np.float64 and a.dtype.kind not in "iu" for a in arrays):
        return False
    for name, v in values.items():     # given but not used by the steps: checked all the same
        q = quantities[name]
        if name not in prog.knowns and _inside(v, q.domain, q.whole is not None) is not True:
            return False
    return True


class _FloatingPointErrors:
    """numpy's error callback: counts overflows, underflows, divisions by zero and invalid
    operations while a strict run goes."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, kind: str, flag: int) -> None:
        self.count += 1


class _Chunks:
    """One :func:`run`, chunk by chunk: what every chunk reads (the knowns and their checks,
    the fused expression or the steps, the answer's bounds) is worked out once here, and each
    chunk's values are written into the outputs."""

    def __init__(self, prog: Program, quantities: Mapping, arrays: list[np.ndarray], shape: tuple,
                 outputs: tuple[Output, ...], integral: frozenset[str] | set[str], strict: bool):
        self.prog, self.shape, self.outputs, self.strict = prog, shape, outputs, strict
        size = math.prod(shape)
        self.rows = max(1, CHUNK // max(1, size // shape[0]))
        self.knowns = [(name, a, quantities[name].domain,
                        quantities[name].whole is not None and name not in integral,
                        a.ndim == len(shape) and a.shape[0] == shape[0] > 1)
                       for name, a in zip(prog.knowns, arrays)]
        self.checked = [(name, quantities[name].domain) for name in prog.checked if name != prog.target]
        self.domains = {name: quantities[name].domain for name, _, _ in outputs}
        target_domain = quantities[prog.target].domain
        # every step proven from its formula's structure and the target alone asked for, not
        # rounded: one fused expression (in the display unit); only the knowns and the answer
        # are checked
        only = outputs[0] if len(outputs) == 1 and outputs[0][0] == prog.target and not outputs[0][2] else None
        factor = outputs[0][1]
        self.fused = fused = prog.fused(factor) if only is not None and prog.fused_expr is not None else None
        if fused is not None:
            target_domain = Interval(target_domain.lo / factor, target_domain.hi / factor,
                                     target_domain.lo_open, target_domain.hi_open)
        self.target_domain = target_domain
        # strict and fused: the answer is scanned only when its bounds are not proven, and kept
        # EDGE away from a finite bound; the inputs' ranges are kept for the overflow proof
        self.edge = EDGE if strict and fused is not None else 0.0
        self.scan_target = not (strict and fused is not None) or prog.target in prog.checked
        self.ranges: dict[str, list[float]] = {name: [math.inf, -math.inf] for name in prog.knowns}
        self.out = {name: np.empty(shape) for name, _, _ in outputs}
        self.exact = {name: np.empty(shape) for name, _, how in outputs if how}
        self.mask = np.empty(shape, dtype=bool)

    def run(self) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray] | None:
        """Every chunk in turn: (values, unrounded values, ``inside`` mask), or None in the
        strict mode at the first thing out of the ordinary."""
        shape, strict, fused, mask = self.shape, self.strict, self.fused, self.mask
        errors = _FloatingPointErrors()
        with np.errstate(all="call", call=errors) if strict else np.errstate(all="ignore"):
            for start in range(0, shape[0], self.rows):
                stop = min(start + self.rows, shape[0])
                piece = (stop - start, *shape[1:])
                got = self._inputs(start, stop)
                if got is None:
                    return None
                ok, args = got
                if fused is not None:
                    ok = self._fused_chunk(fused, args, piece, ok, self.out[self.prog.target][start:stop])
                else:
                    ok = self._stepwise_chunk(args, piece, ok, start, stop)
                if ok is None:
                    return None
                if strict:
                    if ok is not True or errors.count:
                        return None
                else:
                    mask[start:stop] = ok
        if strict and (errors.count or (fused is not None and not _in_range(self.prog, self.ranges))):
            return None
        return self.out, self.exact, mask

    def _inputs(self, start: int, stop: int) -> tuple[Any, list[np.ndarray]] | None:
        """The chunk's knowns as float64, and where they are inside their bounds (True for
        all); None in the strict mode at the first known that is not."""
        strict, ranges = self.strict, self.ranges
        ok: Any = True      # an array only once some value of the chunk fails
        args = []
        for name, a, domain, whole, sliced in self.knowns:
            v = (a[start:stop] if sliced else a).astype(np.float64, copy=False)
            ok = _and(ok, _inside(v, domain, whole, ranges[name] if strict else None))
            if strict and ok is not True:
                return None
            args.append(v)
        return ok, args

    def _fused_chunk(self, fused: Callable, args: list[np.ndarray], piece: tuple, ok: Any,
                     out: np.ndarray) -> Any:
        """The fused expression over the chunk, into ``out``: ``ok`` with the answer's bounds
        (when scanned), or None in the strict mode when it would not broadcast like the
        walker's."""
        value = fused(*args)
        if not _full(value, piece):
            if self.strict:
                return None
            value = np.broadcast_to(np.asarray(value, dtype=float), piece)
        if self.scan_target:
            ok = _and(ok, _inside(value, self.target_domain, False, edge=self.edge))
        out[...] = value
        return ok

    def _stepwise_chunk(self, args: list[np.ndarray], piece: tuple, ok: Any, start: int, stop: int) -> Any:
        """The walker's steps over the chunk, each output into its array (in its display unit,
        rounded where asked): ``ok`` with the scanned steps' and the target's bounds (the
        target's rounded value too, when it is rounded), or None in the strict mode when the
        target would not broadcast like the walker's."""
        prog, strict = self.prog, self.strict
        env: dict[str, Any] = dict(prog.constants)
        env.update(zip(prog.knowns, args))
        for fn, inputs, name in prog.steps:
            env[name] = fn(*[env[x] for x in inputs])
        for name, domain in self.checked:
            ok = _and(ok, _inside(env[name], domain, False))
        target = env[prog.target]
        if strict and not _full(target, piece):
            return None
        ok = _and(ok, _inside(target, self.target_domain, False))     # unrounded
        for name, factor, how in self.outputs:
            value = np.broadcast_to(np.asarray(env[name], dtype=float), piece)
            if how:
                np.divide(value, factor, out=self.exact[name][start:stop])
                value = _rounded(value, how)
                ok = _and(ok, _inside(value, self.domains[name], False))
            np.divide(value, factor, out=self.out[name][start:stop])
        return ok


def _full(value, piece: tuple) -> bool:
    """A float64 array of the chunk's full shape (else the answer would not broadcast like
    the walker's)."""
    return isinstance(value, np.ndarray) and value.dtype == np.float64 and value.shape == piece


def _in_range(prog: Program, ranges: dict[str, list[float]]) -> bool:
    """Whether, over the inputs' actual ranges, every step of the walker stays inside
    floating point's normal range (what the fused evaluation cannot see for itself)."""
    assert prog.exprs is not None      # set with fused_expr, which the caller checked
    box = {prog.symbols[k]: (float(lo), float(hi)) for k, (lo, hi) in ranges.items()}
    for sym, expr in prog.exprs:
        got = interval(expr, box)
        if got is None:
            return False
        box[sym] = got
    return True




def _rounded(value: np.ndarray, how: str) -> np.ndarray:
    return np.asarray(round_whole(value, how), dtype=float)
