"""Building a derivation: each route step inverted by sympy and compiled once; printed on demand.

:func:`derive` turns a Route into a :class:`~symcalc.engine.derivation.Derivation` (the record
that evaluates); :func:`display` prints its steps' solutions and composes and prints the target
in the knowns (:func:`closed_form`), only when an answer is shown: the planner evaluates 96
derivations and shows none, and composing the step-time model's closed form through its 60
steps costs more than inverting them. Everything
here is sympy's work, bounded by the symbolic time limits (symcalc.budget) with numbers as the
fallback; the results are kept on disk (symcalc.query.derivations) so that a new process does not
repeat it.
"""

from __future__ import annotations

import sympy

from symcalc import budget
from symcalc.budget import bounded
from symcalc.engine.derivation import Derivation, SingularBlock, SolvedStep, closed_key
from symcalc.engine.invert import (
    dependent_equation,
    reduce_block,
    solve_block,
    solve_for,
)
from symcalc.engine.method import Method
from symcalc.engine.routing import Route, Step
from symcalc.engine.tearing import TEAR_FROM, tear_block
from symcalc.library.compiling import compile_expr
from symcalc.library.printed import Printed
from symcalc.library.printing import printed

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


class _Builder:
    """The state of one derivation being built: the library, and each solved quantity's closed
    form in the knowns so far (for the independence test of later blocks)."""

    def __init__(self, library, route: Route, constants: dict[str, float]):
        self.library = library
        self.target = route.target
        zero = {library.quantities[q].symbol: sympy.Integer(0) for q, v in constants.items() if v == 0}
        self._zero_names = frozenset(q for q, v in constants.items() if v == 0)
        # solved quantity -> its closed form in the knowns (first root); None once composing it
        # took too long (blocks are then tested for independence in their own inputs). Composed
        # only when a block needs it (most routes have none, and composing through the step-time
        # model's 60 steps was three quarters of building its derivation)
        self._in_knowns: dict | None = {}
        self._to_compose: list[SolvedStep] = []
        self.steps: list[SolvedStep] = []
        before = budget.expirations
        for step in route.steps:
            solved = self._solve_step(step, zero)
            self.steps.append(solved)
            self._zero_through(solved, zero)
            if solved.candidates and solved.method != Method.ALGORITHM:
                self._to_compose.append(solved)
        self.degraded = budget.expirations != before

    def _zero_through(self, solved: SolvedStep, zero: dict) -> None:
        """A quantity a step sets to 0 from the defaults at 0 is one of them for the steps after
        it: a group's link latency bridged from link_latency's default 0 s drops the ring's
        latency term as link_latency itself would (else a block that inverts the ring for its
        ranks divides by it)."""
        if solved.method != Method.EXPLICIT or len(solved.candidates) != 1:
            return
        for name, expr in solved.candidates[0].items():
            if expr == 0:
                zero[self._sym(name)] = sympy.Integer(0)
                self._zero_names = self._zero_names | {name}

    def _knowns(self) -> dict:
        """Each quantity solved so far in terms of the knowns (as far as composing got in time)."""
        while self._to_compose and self._in_knowns is not None:
            solved = self._to_compose.pop(0)
            with bounded(budget.DEFAULT_SYMBOLIC_LIMIT) as limit:
                for name, expr in solved.candidates[0].items():
                    composed = expr.xreplace(self._in_knowns)
                    if _small(composed):    # else it stays an intermediate for what follows
                        self._in_knowns[self._sym(name)] = composed
            if limit.expired:
                self._in_knowns = None
        return self._in_knowns or {}

    # -- building -------------------------------------------------------------------------
    def _sym(self, name: str) -> sympy.Symbol:
        return self.library.quantities[name].symbol

    def _solve_step(self, step: Step, zero: dict) -> SolvedStep:
        """The step inverted and compiled; numeric when that takes longer than the symbolic limit
        (each inversion has a limit of its own, in symcalc.engine.invert; this one also bounds the
        substitutions and compiling around them).

        The same step (formulas, unknowns, inputs, the defaults at 0 among its quantities) is
        inverted once per library and process: the planner's 96 derivations (48 option
        combinations, step time and memory) share most of their 60 steps. A block is still
        tested for independence in this route's knowns (that depends on the steps before it).
        A step whose inversion ran out of time is not kept (it depends on how busy the machine
        was)."""
        key = self._step_key(step)
        hit = self.library.step_cache.get(key)
        if hit is not None:
            if hit.step.is_block and hit.tearing is None:
                self._check_independent(hit.formulas, step.solves_for, self._cleaner(zero))
            return hit
        before = budget.expirations
        with bounded(STEP_LIMITS * budget.DEFAULT_SYMBOLIC_LIMIT):
            solved = self._invert_step(step, zero, symbolic=True)
            if budget.expirations == before:
                solved.memo_key = key
                self.library.step_cache[key] = solved
            return solved
        return self._invert_step(step, zero, symbolic=False)

    def _step_key(self, step: Step) -> tuple:
        """What a step's inversion depends on besides the library: the step itself, the
        defaults at 0 among its quantities (their terms are dropped), and for a block large
        enough to tear, the target (torn towards it)."""
        formulas = [self.library.formulas[fid] for fid in step.formulas]
        zero = frozenset(q for f in formulas for q in f.quantities if q in self._zero_names)
        return step, zero, (self.target if len(formulas) >= TEAR_FROM else None)

    @staticmethod
    def _cleaner(zero: dict):
        """An equation side with the defaults at 0 dropped (unless that leaves it infinite or
        undefined); only the zeros it reads are substituted (the rest would not change it)."""
        def clean(e):
            present = {x: v for x, v in zero.items() if x in e.free_symbols} if zero else None
            if not present:
                return e
            out = e.subs(present)
            return e if out.has(sympy.zoo, sympy.nan, sympy.oo) else out
        return clean

    def _check_independent(self, formulas: tuple, solves_for: tuple[str, ...], clean) -> None:
        """Raise SingularBlock when the block's equations are not independent in the knowns
        themselves: an input derived earlier (R = D/T) can make the block singular (C = fpt D,
        A = fpt R, C = A T) though it looks regular."""
        xs = tuple(self._sym(u) for u in solves_for)
        equations = tuple((clean(f.lhs), clean(f.rhs)) for f in formulas)
        known = self._knowns()
        in_knowns = tuple((lhs.xreplace(known), rhs.xreplace(known)) for lhs, rhs in equations)
        dependent = dependent_equation(in_knowns, xs)
        if dependent is not None:
            raise SingularBlock(formulas[dependent].id, tuple(f.id for f in formulas))

    def _invert_step(self, step: Step, zero: dict, symbolic: bool) -> SolvedStep:
        formulas = tuple(self.library.formulas[fid] for fid in step.formulas)
        domains = tuple(self.library.quantities[u].domain for u in step.solves_for)
        clean = self._cleaner(zero)

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
            candidates = ({step.solves_for[0]: formulas[0].rhs},)
            return SolvedStep(step=step, formulas=formulas, method=Method.ALGORITHM, candidates=candidates,
                              domains=domains, n_candidates=1)
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
            self._check_independent(formulas, step.solves_for, clean)
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
                            residuals=residuals, reduced=reduced, tearing=tearing,
                            n_candidates=len(candidates))
        args = list(solved.arg_symbols)
        solved.functions = [{u: compile_expr(c[u], args) for u in solved.unknowns} for c in candidates]
        if method == Method.NUMERIC:    # compiled now, so that the cached derivation keeps them
            solved.compile_numeric()
        elif len(candidates) > 1:       # each root is checked against the equations' addends (step_values)
            _ = solved.terms_function
        return solved


def derive(library, route: Route, options: dict[str, str], constants: dict[str, float]) -> Derivation:
    """The Derivation of ``route``: every step inverted (symbolically within the time limits,
    else left to numeric root finding) and compiled; printed later, if shown (:func:`display`).

    Parameters
    ----------
    library : the Library the route's formulas come from.
    route : the route (symcalc.engine.routing.find_route).
    options : the option values the formulas were chosen under.
    constants : defaults the route uses -> their base-unit magnitude (those at 0 drop their terms).

    Returns
    -------
    The Derivation, evaluable; its printed steps and closed form are left to :func:`display`.

    Raises
    ------
    SingularBlock when a block's equations are not independent in the knowns (route again
    without the formula it names).
    """
    built = _Builder(library, route, constants)
    return Derivation(library, route, options, constants, built.steps, degraded=built.degraded)


def display(derivation: Derivation, choices: dict[int, int] | None = None) -> bool:
    """Print what showing ``derivation`` reads and it lacks: each step's solutions, and the
    closed form for these root choices. Returns whether anything was made now (so that the
    caller keeps the derivation on disk again, with it). O(steps x size of their solutions),
    plus composing the closed form (:func:`closed_form`)."""
    made = False
    for s in derivation.steps:
        if s.printed is None:
            s.printed = tuple({u: printed(e, derivation.library) for u, e in c.items()} for c in s.candidates)
            made = True
    if derivation.printed_closed_form(choices) is None:
        closed_form(derivation, choices)
        made = True
    return made


def _subs_outside_min_max(expr: sympy.Expr, subs: dict) -> sympy.Expr:
    """``expr.subs(subs)`` that leaves the arguments of Min and Max as they are.

    Substituting large expressions into a Min or Max makes sympy compare them (MinMaxBase's
    _is_connected factors their differences): seconds per substitution for the memory total,
    whose busiest-stage term is a Max of two sums. The arguments stay named quantities, as the
    closed form's numeric steps do. O(size of expr)."""
    nodes = [m for m in sympy.preorder_traversal(expr) if isinstance(m, (sympy.Min, sympy.Max))]
    if not nodes:
        return expr.subs(subs)
    hold = {m: sympy.Dummy() for m in nodes}
    back = {d: m for m, d in hold.items()}
    return expr.xreplace(hold).subs(subs).xreplace(back)


def composed(derivation: Derivation, choices: dict[int, int] | None = None) -> tuple[sympy.Expr, bool]:
    """(the target as one expression in the knowns, whether the symbolic limit ran out).

    Composed from the last step back; should that take longer than the symbolic limit (each
    substitution can multiply the expression's size), or the expression grow beyond
    CLOSED_FORM_NODES, it stops there: the expression is still the target, in terms of the
    intermediate quantities not yet substituted (numeric steps stay as their symbol too)."""
    quantities = derivation.library.quantities
    expr = quantities[derivation.target].symbol
    with bounded(budget.DEFAULT_SYMBOLIC_LIMIT) as limit:
        for i in range(len(derivation.steps) - 1, -1, -1):
            s = derivation.steps[i]
            if not s.candidates:
                continue
            k = (choices or {}).get(i, 0)
            cand = s.candidates[k if 0 <= k < len(s.candidates) else 0]
            step_form = _subs_outside_min_max(expr, {quantities[u].symbol: cand[u] for u in s.unknowns})
            if not _small(step_form):
                break           # long enough to read: the rest stay intermediates
            expr = step_form
    return expr, limit.expired


def closed_form(derivation: Derivation, choices: dict[int, int] | None = None) -> Printed:
    """The target as one expression in the knowns (numeric steps stay as their symbol),
    printed (:func:`composed`), kept with the derivation per root choice."""
    key = closed_key(derivation, choices)
    if key not in derivation.closed:
        expr, expired = composed(derivation, choices)
        if expired:
            derivation.degraded = True
        derivation.closed[key] = printed(expr, derivation.library)
    return derivation.closed[key]
