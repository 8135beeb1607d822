"""Fitting a few coefficients of the step-time model to measured steps (the numerical part of
calibration: symcalc.query.calibrate reads a user's runs and writes the profile around it).

The same fit serves the project's calibration (calibration/fit.py, on the published runs of
shared/calibration) and users (``symcalc calibrate RUNS.toml``, on their own cluster's steps).
A coefficient is a library quantity with one value per *scope*: per hardware preset
(``sustained_clock_fraction``, ``comm_contention``) or per training stack
(``layer_pass_overhead``, ``elementwise_traffic_factor``). Each starts from its prior (what a
question would use without the fit: the preset's or the stack's value) and moves only as far as
the runs pull it: the fit minimises the relative errors of the step times (in log space, a few
per cent of noise per run) plus each coefficient's distance from its prior (in log space for
positive ones, linearly for shares), so that a coefficient no run constrains stays at its prior.

Every run is asked once (``symcalc.solve``) with the coefficients among its given values; the
fit then evaluates the compiled derivations for new coefficient values, all trial vectors of one
iteration in one array pass. Cost: O(groups x iterations) compiled evaluations.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from symcalc.errors import QueryError, SymcalcError
from symcalc.library.records import Interval
from symcalc.query import reuse

# how far a run's relative step-time error is trusted (log units): the fit's noise scale
RUN_NOISE = 0.05
# how far the fit may move a coefficient, in spreads of its prior: beyond, the prior term alone
# costs REACH^2 = 36 runs' worth of noise, and what the runs ask is another model, not a coefficient
REACH = 6.0
# how far inside an open end of a domain a fitted value stays (relative), so that its text reads inside
OPEN_MARGIN = 1e-3


@dataclass
class Measured:
    """One measured step: the question that predicts it and what was measured."""

    id: str
    given: dict                  # quantity -> value (numbers, or (value, unit) pairs)
    options: dict
    hardware: str | None
    step_time: float             # s
    group: str = ""              # the source it came from (leave-one-group-out)
    stack: str = ""              # the training stack (a coefficient scope)
    model: str | None = None     # a model preset (or config.json) the given values complete
    measured_as: str = "step_time"   # the field the step time was read from (step_time, tokens_per_second)


@dataclass(frozen=True)
class Coefficient:
    """A fitted quantity in one scope: ``name`` for the runs of ``scope`` = ``key``."""

    name: str
    scope: str                   # "hardware" or "stack"
    key: str                     # the preset or stack it belongs to
    prior: float                 # base units
    spread: float                # prior's uncertainty: log units (positive) or absolute (share)
    share: bool = False          # a share in [0, 1]: fitted linearly, clipped to its domain
    unit: str = ""               # the quantity's canonical unit (its values are given in it)
    domain: Interval = field(default_factory=Interval)   # the quantity's (what a profile may hold)

    def value(self, x: float) -> float:
        if self.share:
            return float(min(self.domain.hi, max(self.domain.lo, self.prior + self.spread * x)))
        return float(self.prior * math.exp(self.spread * x))

    def applies(self, run: Measured) -> bool:
        return (run.hardware if self.scope == "hardware" else run.stack) == self.key

    def x_bounds(self) -> tuple[tuple[float, str], tuple[float, str]]:
        """The fit's parameter range, each end with what sets it: the quantity's domain (so the
        profile holds a value --hardware accepts), or the fit's reach (REACH spreads from the
        prior, or from the domain's end nearest a prior outside it)."""
        lo, hi = self._x_end(self.domain.lo, self.domain.lo_open, -1), self._x_end(self.domain.hi, self.domain.hi_open, 1)
        start = min(max(0.0, lo), hi)
        return ((lo, "domain") if lo > start - REACH else (start - REACH, "reach"),
                (hi, "domain") if hi < start + REACH else (start + REACH, "reach"))

    def _x_end(self, end: float, open_end: bool, side: int) -> float:
        """One end of the domain (``side`` -1: lower, 1: upper) as a parameter value."""
        if self.share:
            if open_end:                         # an open end is approached, never held
                end -= side * OPEN_MARGIN * max(abs(end), 1.0)
            return (end - self.prior) / self.spread
        if 0 < end < math.inf:
            return math.log(end * (1 - side * OPEN_MARGIN if open_end else 1) / self.prior) / self.spread
        return side * math.inf                   # 0 or infinity: no log reaches it


@dataclass(frozen=True)
class Held:
    """A coefficient the fit left at an end of its range, where the runs pull it beyond."""

    index: int                   # into Fit.coefficients
    side: str                    # "upper" (the runs ask for more) or "lower" (for less)
    bound: float                 # the value held, base units
    by: str                      # "domain" (the quantity's, what a profile may hold) or "reach" (the fit's)


@dataclass
class Fit:
    """What a fit found: coefficient values, and the runs' errors before and after."""

    coefficients: list[Coefficient]
    values: list[float]
    runs: list[Measured]
    before: np.ndarray           # relative errors with the priors (predicted / measured - 1)
    after: np.ndarray
    unanswered: dict[str, str] = field(default_factory=dict)   # run id -> why no prediction
    held: list[Held] = field(default_factory=list)             # coefficients at an end of their range

    def moved(self, tolerance: float = 0.005) -> list[tuple[Coefficient, float]]:
        """Coefficients whose value moved more than ``tolerance`` (relative) from the prior."""
        out = []
        for c, v in zip(self.coefficients, self.values):
            ref = abs(c.prior) if c.prior else 1.0
            if abs(v - c.prior) > tolerance * ref:
                out.append((c, v))
        return out

    def mean_error(self, which: str) -> float:
        """Mean |relative error| of the runs predicted both before and after (``which``: either)."""
        ok = np.isfinite(self.before) & np.isfinite(self.after)
        errors = self.before if which == "before" else self.after
        return float(np.mean(np.abs(errors[ok]))) if ok.any() else float("nan")

    def improved(self) -> bool:
        """Whether the fit lowered the mean |error| by more than half a per cent of itself."""
        before, after = self.mean_error("before"), self.mean_error("after")
        return bool(np.isfinite(before) and after < before * 0.995)


class Model:
    """The runs' step times as a function of the coefficients: one solve per group of runs that
    share hardware, options and given names, then their compiled derivations.

    Parameters
    ----------
    runs : the measured steps
    coefficients : what may move
    solve : :func:`symcalc.solve` (passed in: this module never imports the solver)
    """

    def __init__(self, runs: Sequence[Measured], coefficients: Sequence[Coefficient], solve: Callable):
        self.runs = list(runs)
        self.coefficients = list(coefficients)
        self.names = sorted({c.name for c in self.coefficients})
        self.unanswered: dict[str, str] = {}
        self.groups: list[dict] = []
        by_key: dict = {}
        for i, r in enumerate(self.runs):
            key = (r.hardware, r.model, tuple(sorted(r.options.items())), tuple(sorted(r.given)))
            by_key.setdefault(key, []).append(i)
        for (hardware, model, options, names), idx in by_key.items():
            given = {n: _stack_values([self.runs[i].given[n] for i in idx]) for n in names}
            coef = {n: self._given(n, np.ones(len(idx))) for n in self.names}
            try:
                result = solve("step_time", {**given, **coef}, options=dict(options), hardware=hardware, model=model,
                               conflicts=False, on_bounds="flag", diagnose=False)
            except SymcalcError as e:
                for i in idx:
                    self.unanswered[self.runs[i].id] = str(e)
                continue
            used = [n for n in self.names if n in result.derivation.route.given]
            self.groups.append(dict(idx=np.array(idx), given=given, result=result, used=used))
        # which coefficient applies to each run, per coefficient name
        self.index = {n: np.full(len(self.runs), -1) for n in self.names}
        for k, c in enumerate(self.coefficients):
            for i, r in enumerate(self.runs):
                if c.applies(r):
                    self.index[c.name][i] = k

    def _given(self, name: str, values: np.ndarray):
        """Coefficient values as solve() reads them: with the quantity's unit where it has one."""
        unit = next((c.unit for c in self.coefficients if c.name == name), "")
        return (values, unit) if unit else values

    def defaults(self) -> dict[str, np.ndarray]:
        """Each run's value of each coefficient when no fitted one applies: what the question
        would use (its preset's or stack's value, or the library default)."""
        out = {n: np.full(len(self.runs), np.nan) for n in self.names}
        for g in self.groups:
            r = g["result"]
            for n in self.names:
                d = r.defaults_used.get(n) or {}
                mag = d.get("magnitude")
                out[n][g["idx"]] = float(mag) if mag is not None else np.nan
        return out

    def predict(self, x: np.ndarray, base: dict[str, np.ndarray]) -> np.ndarray:
        """Step times (s) of every run for parameter vectors ``x`` (shape (k,) or (m, k)):
        shape (n_runs,) or (m, n_runs); NaN where a run has no answer."""
        xs = np.atleast_2d(x)
        m = xs.shape[0]
        values = {n: np.repeat(base[n][None, :], m, axis=0) for n in self.names}
        for k, c in enumerate(self.coefficients):
            col = np.array([c.value(v) for v in xs[:, k]])
            sel = self.index[c.name] == k
            values[c.name][:, sel] = col[:, None]
        out = np.full((m, len(self.runs)), np.nan)
        for g in self.groups:
            idx = g["idx"]
            given = {n: _tile(v, m) for n, v in g["given"].items()}
            for n in self.names:
                given[n] = self._given(n, values[n][:, idx].reshape(-1))
            try:
                pts = reuse.points(g["result"], given)
            except SymcalcError:
                continue
            out[:, idx] = np.asarray(pts.value, dtype=float).reshape(m, len(idx)) * _to_seconds(g["result"])
        return out if np.ndim(x) == 2 else out[0]


def _to_seconds(result) -> float:
    """Seconds per unit of a step-time answer."""
    return float(result.factor)


def _stack_values(values: list):
    """A list of given values as one array (numbers), or one (array, unit) pair."""
    first = values[0]
    if isinstance(first, tuple):
        return (np.array([float(v[0]) for v in values]), first[1])
    return np.array([float(v) for v in values])


def _tile(v, m: int):
    if isinstance(v, tuple):
        return (np.tile(v[0], m), v[1])
    return np.tile(v, m)


def fit(runs: Sequence[Measured], coefficients: Sequence[Coefficient], solve: Callable,
        noise: float = RUN_NOISE, model: Model | None = None) -> Fit:
    """Fit ``coefficients`` to ``runs`` (least squares on log errors plus the priors).

    Returns
    -------
    Fit
        The fitted values and each run's relative error before and after.

    Raises
    ------
    QueryError
        No run could be predicted, or fewer runs than coefficients the runs constrain.
    """
    model = model or Model(runs, coefficients, solve)
    measured = np.array([r.step_time for r in model.runs], dtype=float)
    base = model.defaults()
    for n, col in base.items():
        for k, c in enumerate(model.coefficients):
            if c.name == n:
                col[model.index[n] == k] = c.prior
    x0 = np.zeros(len(model.coefficients))
    before = model.predict(x0, base) / measured - 1
    ok = np.isfinite(before)
    if not ok.any():
        raise QueryError("none of the runs could be predicted: " + "; ".join(
            f"{k}: {v}" for k, v in list(model.unanswered.items())[:3]))
    constrained = [k for k, c in enumerate(model.coefficients)
                   if any(c.applies(r) for r, good in zip(model.runs, ok) if good)]
    if len(constrained) > int(ok.sum()):
        raise QueryError(f"{int(ok.sum())} run(s) cannot fit {len(constrained)} coefficients "
                         f"({', '.join(sorted({model.coefficients[k].name for k in constrained}))}): give at least "
                         "as many runs as coefficients, or fit fewer (--fit NAME for each, e.g. "
                         "--fit sustained_clock_fraction)")
    x, held = _solve_bounded(model, base, measured, ok, noise)
    after = model.predict(x, base) / measured - 1
    return Fit(coefficients=model.coefficients, values=[c.value(v) for c, v in zip(model.coefficients, x)],
               runs=model.runs, before=before, after=after, unanswered=dict(model.unanswered), held=held)


def _solve_bounded(model: Model, base: dict[str, np.ndarray], measured: np.ndarray, ok: np.ndarray,
                   noise: float) -> tuple[np.ndarray, list[Held]]:
    """The least-squares parameters within each coefficient's range (its domain, the fit's reach),
    and the coefficients held at an end of it: those the bound stops (scipy's active set), set
    exactly on the bound so that the profile holds the bound's value."""
    from scipy.optimize import least_squares   # imported when used: scipy is a cold import

    ends = [c.x_bounds() for c in model.coefficients]
    lo, hi = np.array([e[0][0] for e in ends]), np.array([e[1][0] for e in ends])
    x0 = np.clip(np.zeros(len(ends)), lo, hi)   # a prior outside the domain starts at its end

    def residuals_many(xs: np.ndarray) -> np.ndarray:
        pred = model.predict(xs, base)
        r = np.log(np.where(ok, pred, 1.0) / np.where(ok, measured, 1.0)) / noise
        r = np.where(np.isfinite(r), r, 1e3)
        return np.concatenate([r, xs], axis=1)

    def fun(x):
        return residuals_many(x[None, :])[0]

    def jac(x):
        h = 1e-4 * np.where(x + 1e-4 > hi, -1.0, 1.0)   # a step that stays inside the range
        xs = np.vstack([x] + [x + h[k] * np.eye(len(x))[k] for k in range(len(x))])
        r = residuals_many(xs)
        return (r[1:] - r[0]).T / h[None, :]

    sol = least_squares(fun, x0, jac=jac, method="trf", bounds=(lo, hi), xtol=1e-6, ftol=1e-8, max_nfev=200)
    x, held = sol.x.copy(), []
    for k, (c, active) in enumerate(zip(model.coefficients, sol.active_mask)):
        if active:
            side = 0 if active < 0 else 1
            x[k] = (lo, hi)[side][k]
            held.append(Held(index=k, side=("lower", "upper")[side], bound=c.value(x[k]), by=ends[k][side][1]))
    return x, held


def coefficients_for(runs: Sequence[Measured], spec: Mapping[str, tuple[str, float, float, bool]],
                     prior: Callable[[str, str, str], float | None], library) -> list[Coefficient]:
    """One Coefficient per (name, scope value) the runs have: ``spec`` maps a quantity to
    (scope, spread, default prior, share); ``prior(name, scope, key)`` gives the starting value
    (the preset's or stack's), or None for the default."""
    out = []
    for name, (scope, spread, default, share) in spec.items():
        keys = sorted({(r.hardware if scope == "hardware" else r.stack) or "" for r in runs})
        for key in keys:
            p = prior(name, scope, key)
            q = library.quantities[name]
            out.append(Coefficient(name=name, scope=scope, key=key, prior=default if p is None else p,
                                   spread=spread, share=share, unit=q.unit, domain=q.domain))
    return out
