"""``Result.function`` over large arrays: the general path's answer and checks at numpy speed.

Why a second path: :func:`symcalc.solve` evaluates a derivation step by step over whole
arrays, then scans every computed array several times (finite? inside its bounds? whole?).
For a 1e6-point sweep each scan is a pass over memory, and together with the steps'
temporaries they cost 5-10x the formula written in numpy by hand. This path answers the
same questions with the same checks at about the hand-written formula's cost:

* Inputs are checked in chunks of ``CHUNK`` elements (a minimum and a maximum per chunk, and
  floor(x) == x for whole numbers), and the formula runs on the chunk while it is still in
  the CPU cache.
* numpy's floating-point error reporting is on. From finite inputs, an infinite or NaN value
  can only come from an overflow, a division by zero or an invalid operation, all of which
  numpy reports: when none is, every value is finite and nothing is scanned for it.
* A step whose bounds follow from its formula's structure (:func:`symcalc.engine.signs.sign`: a sum,
  product or quotient of positive values is positive) is not scanned for them.

When every step is of that kind the derivation runs *fused*: one compiled expression of the
knowns, with common subexpressions shared and the defaults folded in, which does the work of
the hand-written formula and no more. It then equals the general path's answer to within
rounding (no step subtracts, so the two orders of evaluation differ by a few units in the
last place), and :func:`symcalc.engine.signs.interval` shows over the inputs' actual ranges that no
step of the general path would overflow or underflow either; an answer within 1e-12 of a
finite bound goes to the general path. Otherwise (or for a whole-number answer, whose
rounding must match exactly) it runs the general path's own step functions, bitwise the
same numbers, scanning the steps not proven.

Whenever anything is out of the ordinary (an input outside its bounds or not exactly whole, a
computed value outside its bounds, a floating-point error, a step with several roots or
found numerically, small arrays) it returns None and the general path answers, with its
exact messages.
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
from symcalc.engine.derivation import SWEEP_MIN_SIZE, Derivation
from symcalc.library.compiling import compile_expr, unit_factors
from symcalc.engine.method import Method
from symcalc.engine.rounding import round_whole
from symcalc.engine.signs import NONNEG, POS, domain_sign, interval, sign
from symcalc.library.records import Interval

CHUNK = 1 << 14          # elements per chunk: a chunk's inputs and temporaries stay in L2 cache
MIN_SIZE = SWEEP_MIN_SIZE   # below this many points the general path costs about the same
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
        with bounded(budget.DEFAULT_SYMBOLIC_LIMIT):    # too large to prepare in time: the general path
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


class _FloatingPointErrors:
    """numpy's error callback: counts overflows, underflows, divisions by zero and invalid
    operations while a sweep runs."""

    def __init__(self):
        self.count = 0

    def __call__(self, kind: str, flag: int) -> None:
        self.count += 1


def sweep(derivation: Derivation, values: Mapping[str, object], target_whole: str | None,
          factor: float, integral: frozenset[str] | set[str] = frozenset()) -> np.ndarray | None:
    """The target of ``derivation`` in its display unit (``factor`` base units each) for the
    known ``values`` (base-unit magnitudes: arrays or floats), or None to leave the question
    to the general path (see the module docstring for when). ``integral`` names values that
    came as integer arrays: whole numbers without testing each element. The strict mode of
    :func:`evaluate`: the first point out of the ordinary ends it."""
    got = evaluate(derivation, values, target_whole, factor, integral, strict=True)
    return None if got is None else got[0]


def sweep_masked(derivation: Derivation, values: Mapping[str, object], target_whole: str | None,
                 factor: float, integral: frozenset[str] | set[str] = frozenset()
                 ) -> tuple[np.ndarray, np.ndarray] | None:
    """The target over a grid where some points leave their bounds: (values in the display
    unit, ``inside`` mask), or None when the derivation cannot be swept here. The masked mode
    of :func:`evaluate`."""
    return evaluate(derivation, values, target_whole, factor, integral, strict=False)


def evaluate(derivation: Derivation, values: Mapping[str, object], target_whole: str | None,
             factor: float, integral: frozenset[str] | set[str] = frozenset(), strict: bool = False
             ) -> tuple[np.ndarray, np.ndarray] | None:
    """The one chunked evaluator of the sweep path: (the target in the display unit over the
    broadcast grid of ``values``, the ``inside`` mask), or None when the derivation cannot be
    swept here (no steps, a numeric or algorithmic step, several roots).

    A point is inside when every known of it lies in its quantity's bounds (exactly whole
    where the quantity is whole, or it came as an integer array), every step whose bounds are
    not proven from its formula's structure does too, and the answer (rounded when whole) is
    finite and inside its bounds; the values at the other points are what the formulas give
    there (NaN where undefined). When every step's bounds follow from its formula, the fused
    expression runs (the general path's numbers to rounding) and only the knowns and the
    answer are checked; else the general path's own step functions run, bitwise its numbers.
    Chunk by chunk: a chunk whose values all pass costs two reductions per checked array (a
    minimum and a maximum), and only a chunk with points outside pays for elementwise masks.

    ``strict`` (Result.function): None as soon as anything is out of the ordinary, so that
    the general path answers with its exact messages: a point outside, a floating-point error
    (numpy reports every overflow, division by zero and invalid operation, so without one
    every value is finite), fewer than MIN_SIZE points, a known the steps do not read outside
    its bounds, a fused answer within EDGE of a finite bound or inputs whose ranges could
    overflow a step of the general path (signs.interval), an answer that would not broadcast
    like the general path's.

    O(points x steps), memory flat in the number of points beyond the two outputs.
    """
    prog = program(derivation)
    if prog is None or any(name not in values for name in prog.knowns):
        return None
    quantities = derivation.library.quantities
    arrays = [np.asarray(values[n]) for n in prog.knowns]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    if not shape:
        return None
    size = math.prod(shape)
    if strict and not _ordinary_inputs(prog, values, arrays, size, quantities):
        return None
    return _Chunks(prog, quantities, arrays, shape, size, factor, target_whole, integral, strict).run()


def _ordinary_inputs(prog: Program, values: Mapping[str, object], arrays: list[np.ndarray], size: int,
                     quantities: Mapping) -> bool:
    """The strict mode's checks before any chunk: enough points, float64 or integer arrays, and
    the given values the steps do not read inside their bounds (else the general path answers)."""
    if size < MIN_SIZE or any(a.dtype != np.float64 and a.dtype.kind not in "iu" for a in arrays):
        return False
    for name, v in values.items():     # given but not used by the steps: checked all the same
        q = quantities[name]
        if name not in prog.knowns and _inside(v, q.domain, q.whole is not None) is not True:
            return False
    return True


class _Chunks:
    """One :func:`evaluate`, chunk by chunk: what every chunk reads (the knowns and their
    checks, the fused expression or the steps, the answer's bounds) is worked out once here,
    and each chunk's values are written into the two outputs."""

    def __init__(self, prog: Program, quantities: Mapping, arrays: list[np.ndarray], shape: tuple,
                 size: int, factor: float, target_whole: str | None, integral: frozenset[str] | set[str],
                 strict: bool):
        self.prog, self.shape, self.factor, self.target_whole, self.strict = prog, shape, factor, target_whole, strict
        self.rows = max(1, CHUNK // max(1, size // shape[0]))
        self.knowns = [(name, a, quantities[name].domain,
                        quantities[name].whole is not None and name not in integral,
                        a.ndim == len(shape) and a.shape[0] == shape[0] > 1)
                       for name, a in zip(prog.knowns, arrays)]
        self.checked = [(name, quantities[name].domain) for name in prog.checked if name != prog.target]
        target_domain = quantities[prog.target].domain
        # every step proven from its formula's structure: one fused expression (in the display
        # unit), and only the knowns and the answer are checked
        self.fused = fused = prog.fused(factor) if prog.fused_expr is not None and not target_whole else None
        if fused is not None:
            target_domain = Interval(target_domain.lo / factor, target_domain.hi / factor,
                                     target_domain.lo_open, target_domain.hi_open)
        self.target_domain = target_domain
        # strict and fused: the answer is scanned only when its bounds are not proven, and kept
        # EDGE away from a finite bound; the inputs' ranges are kept for the overflow proof
        self.edge = EDGE if strict and fused is not None else 0.0
        self.scan_target = not (strict and fused is not None) or prog.target in prog.checked
        self.ranges: dict[str, list[float]] = {name: [math.inf, -math.inf] for name in prog.knowns}
        self.out = np.empty(shape)
        self.mask = np.empty(shape, dtype=bool)

    def run(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Every chunk in turn: (values, ``inside`` mask), or None in the strict mode at the
        first thing out of the ordinary."""
        shape, strict, fused, out, mask = self.shape, self.strict, self.fused, self.out, self.mask
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
                    ok = self._fused_chunk(fused, args, piece, ok, out[start:stop])
                else:
                    ok = self._stepwise_chunk(args, piece, ok, out[start:stop])
                if ok is None:
                    return None
                if strict:
                    if ok is not True or errors.count:
                        return None
                else:
                    mask[start:stop] = ok
        if strict and (errors.count or (fused is not None and not _in_range(self.prog, self.ranges))):
            return None
        return out, mask

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
        general path's."""
        value = fused(*args)
        if not _full(value, piece):
            if self.strict:
                return None
            value = np.broadcast_to(np.asarray(value, dtype=float), piece)
        if self.scan_target:
            ok = _and(ok, _inside(value, self.target_domain, False, edge=self.edge))
        out[...] = value
        return ok

    def _stepwise_chunk(self, args: list[np.ndarray], piece: tuple, ok: Any, out: np.ndarray) -> Any:
        """The general path's steps over the chunk, into ``out`` (in the display unit, rounded
        when whole): ``ok`` with the scanned steps' and the answer's bounds, or None in the
        strict mode when the answer would not broadcast like the general path's."""
        prog, strict, target_domain = self.prog, self.strict, self.target_domain
        env: dict[str, Any] = dict(prog.constants)
        env.update(zip(prog.knowns, args))
        for fn, inputs, name in prog.steps:
            env[name] = fn(*[env[x] for x in inputs])
        for name, domain in self.checked:
            ok = _and(ok, _inside(env[name], domain, False))
        value = env[prog.target]
        if strict:
            if not _full(value, piece):
                return None
            ok = _and(ok, _inside(value, target_domain, False))     # unrounded, too
        value = np.broadcast_to(np.asarray(value, dtype=float), piece)
        if self.target_whole:
            value = _rounded(value, self.target_whole)
        ok = _and(ok, _inside(value, target_domain, False))
        np.divide(value, self.factor, out=out)
        return ok


def _full(value, piece: tuple) -> bool:
    """A float64 array of the chunk's full shape (else the answer would not broadcast like
    the general path's)."""
    return isinstance(value, np.ndarray) and value.dtype == np.float64 and value.shape == piece


def _in_range(prog: Program, ranges: dict[str, list[float]]) -> bool:
    """Whether, over the inputs' actual ranges, every step of the general path stays inside
    floating point's normal range (what the fused evaluation cannot see for itself)."""
    assert prog.exprs is not None      # set with fused_expr, which the caller checked
    box = {prog.symbols[k]: (float(lo), float(hi)) for k, (lo, hi) in ranges.items()}
    for sym, expr in prog.exprs:
        got = interval(expr, box)
        if got is None:
            return False
        box[sym] = got
    return True


_MIN, _MAX, _NOT_EQUAL, _FLOOR = np.minimum.reduce, np.maximum.reduce, np.not_equal, np.floor
_INF, _NEG_INF = math.inf, -math.inf


def _rounded(value: np.ndarray, how: str) -> np.ndarray:
    return np.asarray(round_whole(value, how), dtype=float)


def _and(ok, more):
    """``ok & more`` where either may be True (all of the chunk) or a mask."""
    if more is True:
        return ok
    if ok is True:
        return more
    return np.logical_and(ok, more, out=ok) if np.shape(ok) == np.shape(more) else ok & more


def _inside(a, domain: Interval, whole: bool, seen: list[float] | None = None, edge: float = 0.0):
    """Where ``a`` is finite, inside ``domain`` and (``whole``) a whole number: True for all
    of it when one minimum and one maximum say so, else an elementwise mask. ``seen`` (a
    [min, max] pair) is widened to the values' range; ``edge`` also refuses, all of ``a``,
    when its values come that close (relatively) to a finite bound (the strict mode's test)."""
    if type(a) is not np.ndarray or a.dtype != np.float64:
        a = np.asarray(a, dtype=float)
    if a.size:
        lo, hi = _MIN(a, axis=None), _MAX(a, axis=None)
        if seen is not None:
            if lo < seen[0]:
                seen[0] = lo
            if hi > seen[1]:
                seen[1] = hi
        if ((lo > domain.lo if domain.lo_open else lo >= domain.lo)
                and (hi < domain.hi if domain.hi_open else hi <= domain.hi)
                and _NEG_INF < lo and hi < _INF and not (whole and _NOT_EQUAL(_FLOOR(a), a).any())):
            if edge and ((domain.lo != 0 and abs(lo - domain.lo) <= edge * abs(domain.lo))
                         or (math.isfinite(domain.hi) and abs(domain.hi - hi) <= edge * abs(domain.hi))):
                return np.zeros(a.shape, dtype=bool)
            return True
    # two comparisons (NaN fails both; an infinite bound is compared strictly, so inf fails)
    lower = a > domain.lo if domain.lo_open or not math.isfinite(domain.lo) else a >= domain.lo
    upper = a < domain.hi if domain.hi_open or not math.isfinite(domain.hi) else a <= domain.hi
    ok = np.logical_and(lower, upper, out=lower)
    if whole:
        ok &= _FLOOR(a) == a
    return ok
