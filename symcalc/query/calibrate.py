"""Fitting a few coefficients of the step-time model to measured steps.

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
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from symcalc import units
from symcalc.errors import (
    BadOptionValueError,
    MalformedValueError,
    QueryError,
    SymcalcError,
    UnknownNameError,
    UnknownOptionError,
    closest_names,
    did_you_mean,
    unknown_key,
)
from symcalc.escape import toml_string
from symcalc.library.presets import read_bounded
from symcalc.render.formats import Rendered
from symcalc.units.format import fmt

# how far a run's relative step-time error is trusted (log units): the fit's noise scale
RUN_NOISE = 0.05


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

    def value(self, x: float) -> float:
        if self.share:
            return float(min(1.0, max(0.0, self.prior + self.spread * x)))
        return float(self.prior * math.exp(self.spread * x))

    def applies(self, run: Measured) -> bool:
        return (run.hardware if self.scope == "hardware" else run.stack) == self.key


@dataclass
class Fit:
    """What a fit found: coefficient values, and the runs' errors before and after."""

    coefficients: list[Coefficient]
    values: list[float]
    runs: list[Measured]
    before: np.ndarray           # relative errors with the priors (predicted / measured - 1)
    after: np.ndarray
    unanswered: dict[str, str] = field(default_factory=dict)   # run id -> why no prediction

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
                pts = g["result"].points(**given)
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
    from scipy.optimize import least_squares   # imported when used: scipy is a cold import

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
    spread = np.ones(len(x0))

    def residuals_many(xs: np.ndarray) -> np.ndarray:
        pred = model.predict(xs, base)
        r = np.log(np.where(ok, pred, 1.0) / np.where(ok, measured, 1.0)) / noise
        r = np.where(np.isfinite(r), r, 1e3)
        return np.concatenate([r, xs / spread], axis=1)

    def fun(x):
        return residuals_many(x[None, :])[0]

    def jac(x):
        h = 1e-4
        xs = np.vstack([x] + [x + h * np.eye(len(x))[k] for k in range(len(x))])
        r = residuals_many(xs)
        return (r[1:] - r[0]).T / h

    sol = least_squares(fun, x0, jac=jac, method="trf", bounds=(-6, 6), xtol=1e-6, ftol=1e-8, max_nfev=200)
    x = sol.x
    after = model.predict(x, base) / measured - 1
    return Fit(coefficients=model.coefficients, values=[c.value(v) for c, v in zip(model.coefficients, x)],
               runs=model.runs, before=before, after=after, unanswered=dict(model.unanswered))


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
            out.append(Coefficient(name=name, scope=scope, key=key, prior=default if p is None else p,
                                   spread=spread, share=share, unit=library.quantities[name].unit))
    return out


# -- a user's runs file (`symcalc calibrate RUNS.toml`) ------------------------------------------------

RUNS_KEYS = {"hardware", "stack", "fit", "options", "given", "model", "runs", "measured", "name", "title"}
RUN_KEYS = {"id", "model", "given", "options", "stack", "step_time", "tokens_per_second"}
# what a runs file may say it measured on its cluster -> (quantity, unit of the number, how it maps)
MEASURED = {
    "gemm_bf16_tflops": ("bf16_gemm_efficiency", "TFLOP/s", "peak_flops_bf16"),
    "gemm_fp8_tflops": ("fp8_gemm_efficiency", "TFLOP/s", "peak_flops_fp8"),
    "allreduce_busbw_GBps": ("intra_node_bus_bandwidth", "GB/s", None),
    "allgather_busbw_GBps": ("intra_node_ring_bus_bandwidth", "GB/s", None),
    "reducescatter_busbw_GBps": ("intra_node_ring_bus_bandwidth", "GB/s", None),
    "nic_busbw_GBps": ("network_efficiency", "GB/s", "nic_bandwidth"),
    "hbm_TBps": ("achievable_hbm_bandwidth", "TB/s", None),
}
# the coefficients a fit may move, and how: quantity -> (scope, spread of the prior, a share)
FITTABLE = {
    "sustained_clock_fraction": ("hardware", 0.15, False),
    "comm_contention": ("hardware", 0.15, True),
    "layer_pass_overhead": ("stack", 1.0, False),
    "elementwise_traffic_factor": ("stack", 0.5, False),
}
MAX_RUNS_BYTES = 1 << 20


@dataclass
class RunsFile:
    """A parsed runs file: the measured steps and what to fit."""

    name: str
    hardware: str
    runs: list[Measured]
    fit: list[str]
    measured: dict[str, float]          # MEASURED key -> number
    title: str = ""


def read_runs(path, library, hardware: str | None = None, fit: Sequence[str] | None = None) -> RunsFile:
    """Read a runs file (TOML): base hardware, default stack and options, and [[runs]] tables of
    given values with a measured step time (or token throughput).

    ``hardware`` and ``fit`` (the command's --hardware and --fit) replace the file's own.

    Raises
    ------
    MalformedValueError
        Missing or unreadable file, not TOML, unknown keys, no hardware, a run without a step
        time, a run giving a value of a coefficient being fitted.
    UnknownNameError
        A given value of a quantity the library does not know, or a coefficient calibrate cannot
        fit (close names suggested).
    UnknownOptionError, BadOptionValueError
        An option, or a value of one (the stack among them), the library does not know.
    """
    p = Path(path)
    where = f"runs file '{p}'"
    doc = _runs_document(p, where)
    hardware = doc.get("hardware") if hardware is None else hardware
    if not isinstance(hardware, str) or not hardware:
        raise MalformedValueError(f"{where}: 'hardware' (the preset the runs ran on, e.g. \"h100\") is required "
                                  "(or give --hardware NAME)")
    fit_names = _fit_names(doc, fit, where)
    measured = _measured_numbers(doc, where)
    base_options = _table(doc.get("options", {}), f"{where}: options")
    base_given = _table(doc.get("given", {}), f"{where}: given")
    default_stack = str(doc.get("stack", library.options["stack"].default if "stack" in library.options else ""))
    rows = doc.get("runs")
    if not isinstance(rows, list) or not rows:
        raise MalformedValueError(f"{where}: no [[runs]]: each run gives its layout (given), options and step_time")
    out = [_read_run(n, row, doc, where, library, hardware, fit_names, base_given, base_options, default_stack)
           for n, row in enumerate(rows, 1)]
    name = str(doc.get("name", p.stem))
    return RunsFile(name=name, hardware=hardware, runs=out, fit=list(fit_names), measured=dict(measured),
                    title=str(doc.get("title", "")))


def _runs_document(p: Path, where: str) -> dict:
    """The runs file's TOML document, with only the keys a runs file has; a one-line error for
    anything else."""
    if sys.version_info >= (3, 11):   # start-up: tomllib is imported when a runs file is read
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    data = read_bounded(p, where, MAX_RUNS_BYTES, "a runs file lists a few dozen runs")
    try:
        doc = tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise MalformedValueError(f"{where}: not valid TOML ({e})") from None
    wrong = unknown_key(doc, RUNS_KEYS, "A runs file has:")
    if wrong:
        raise MalformedValueError(f"{where}: {wrong}")
    return doc


def _fit_names(doc: dict, fit: Sequence[str] | None, where: str) -> list:
    """The coefficients to fit: --fit's, else the file's, else all FITTABLE; each one calibrate
    can fit, none twice."""
    if fit is not None:
        fit_names, fit_where = list(fit), "--fit"
    else:
        fit_names, fit_where = doc.get("fit", list(FITTABLE)), f"{where}: fit"
    if not isinstance(fit_names, list) or not fit_names:
        raise MalformedValueError(f"{fit_where} is a list of coefficients, some of: {', '.join(FITTABLE)}")
    for coef in fit_names:
        if coef not in FITTABLE:
            raise UnknownNameError(f"{fit_where} names '{coef}', not a coefficient calibrate can fit."
                                   f"{did_you_mean(str(coef), FITTABLE)} Fittable: {', '.join(FITTABLE)}",
                                   closest_names(str(coef), FITTABLE))
    if len(set(fit_names)) < len(fit_names):
        raise MalformedValueError(f"{fit_where} names a coefficient twice")
    return fit_names


def _measured_numbers(doc: dict, where: str) -> dict:
    """The file's [measured] table: MEASURED keys only, each a positive number."""
    measured = doc.get("measured", {})
    if not isinstance(measured, dict):
        raise MalformedValueError(f"{where}: [measured] is a table of numbers ({', '.join(MEASURED)})")
    for k, v in measured.items():
        if k not in MEASURED:
            raise MalformedValueError(f"{where}: [measured] {k} is not a measurement calibrate reads.{did_you_mean(k, MEASURED)}"
                                      f" It reads: {', '.join(MEASURED)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise MalformedValueError(f"{where}: [measured] {k} must be a positive number, got {v!r}")
    return measured


def _read_run(n: int, row, doc: dict, where: str, library, hardware: str, fit_names: list, base_given: dict,
              base_options: dict, default_stack: str) -> Measured:
    """The ``n``-th [[runs]] table: its given values and options over the file's, its stack,
    and its measured step time."""
    rid = str(row.get("id", f"run {n}")) if isinstance(row, dict) else f"run {n}"
    rwhere = f"{where}: [[runs]] '{rid}'"
    if not isinstance(row, dict):
        raise MalformedValueError(f"{rwhere}: a run is a table")
    wrong = unknown_key(row, RUN_KEYS, "A run has:")
    if wrong:
        raise MalformedValueError(f"{rwhere}: {wrong}")
    given = {**base_given, **_table(row.get("given", {}), f"{rwhere}: given")}
    options = {**base_options, **_table(row.get("options", {}), f"{rwhere}: options")}
    stack = str(row.get("stack", options.get("stack", default_stack)))
    if "stack" in library.options:
        options["stack"] = stack
    _given_numbers(given, library, fit_names, rwhere)
    try:
        library.option_values(options)
    except UnknownOptionError as e:
        raise UnknownOptionError(f"{rwhere}: {e}", e.suggestions) from None
    except BadOptionValueError as e:
        raise BadOptionValueError(f"{rwhere}: {e}") from None
    options = {k: _option_text(v) for k, v in options.items()}
    step = _step_time(row, given, rwhere)
    model = row.get("model", doc.get("model"))
    return Measured(id=rid, given=given, options=options, hardware=hardware, step_time=step,
                    group=rid, stack=stack, model=str(model) if model else None)


def _given_numbers(given: dict, library, fit_names: list, rwhere: str) -> None:
    """A run's given values, in place: under their quantities' names, as numbers (or (number,
    unit) pairs); none of a coefficient being fitted."""
    for name in list(given):
        try:
            q = library.quantity(name)
        except UnknownNameError as e:
            raise UnknownNameError(f"{rwhere}: given: {e}", e.suggestions) from None
        if q.name in fit_names:
            raise MalformedValueError(f"{rwhere}: given {q.name}, a coefficient being fitted; leave it out, "
                                      "or fit without it (fit, --fit)")
        given[q.name] = _number(given.pop(name), q, rwhere)


def _option_text(value) -> str:
    """An option's value as the library names it (TOML's true and 3 as "true" and "3")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _number(value, q, where: str):
    """A given value as a number, or a (number, canonical unit) pair for a value with a unit."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise MalformedValueError(f"{where}: {q.name} = {value!r} is not a number or a value with a unit")
    if isinstance(value, (int, float)):
        return float(value)
    try:
        parsed = units.parse_quantity(value, q.name)
        if q.unit:
            return (float(parsed.to(q.unit).magnitude), q.unit)
        return float(parsed.to("").magnitude)
    except Exception:
        raise MalformedValueError(f"{where}: {q.name} = {value!r}: expected a value in {q.unit or 'a number'}") from None


def _table(obj, where: str) -> dict:
    if not isinstance(obj, dict):
        raise MalformedValueError(f"{where} must be a table")
    return {str(k): (str(v).lower() if isinstance(v, bool) else v) for k, v in obj.items()}


def _step_time(row: dict, given: dict, where: str) -> float:
    """The measured step time in s: given as `step_time = "3.2 s"`, or from `tokens_per_second`
    (whole cluster) with the run's global batch and sequence length."""
    if "step_time" in row:
        try:
            q = units.parse_quantity(str(row["step_time"]), "step_time")
            value = float(q.to("s").magnitude)
        except Exception:
            raise MalformedValueError(f"{where}: step_time = {row['step_time']!r} is not a time like \"3.2 s\"") from None
    elif "tokens_per_second" in row:
        try:
            tps = float(units.parse_quantity(str(row["tokens_per_second"]), "tokens_per_second").to("token/s").magnitude)
            gbs = float(given["global_batch_size"])
            seq_given = given["seq_len"]
            seq = float(seq_given[0] if isinstance(seq_given, tuple) else seq_given)
        except KeyError as e:
            raise MalformedValueError(f"{where}: tokens_per_second needs given {e.args[0]} to give a step time") from None
        except Exception:
            raise MalformedValueError(f"{where}: tokens_per_second = {row['tokens_per_second']!r} is not a rate like "
                                      "\"150000 token/s\"") from None
        value = gbs * seq / tps
    else:
        raise MalformedValueError(f"{where}: no step_time (e.g. step_time = \"3.2 s\") or tokens_per_second")
    if not value > 0:
        raise MalformedValueError(f"{where}: the step time must be positive")
    return value


@dataclass
class Calibration(Rendered):
    """What `symcalc calibrate` found: the fit, the measured hardware values, and the profile
    (rendered through the registry: ``.text()``, ``.as_dict()``, ``.json()``)."""

    TEXT_FORMAT = "calibration_text"
    JSON_FORMAT = "calibration_json"

    runs_file: RunsFile
    base: str                                   # the base hardware preset's key
    fit: Fit
    measured: dict[str, tuple[float, str]]      # quantity -> (value in base units, where from)
    profile_path: str | None = None             # where the profile was written (by whoever wrote it)

    @property
    def stacks(self) -> list[str]:
        return sorted({r.stack for r in self.fit.runs})

    def predicted(self, which: str) -> np.ndarray:
        """Each run's predicted step time (s) with the priors (``"before"``) or the fit (``"after"``)."""
        errors = self.fit.before if which == "before" else self.fit.after
        return np.array([r.step_time for r in self.fit.runs]) * (1 + errors)

    def profile_values(self) -> dict[str, tuple[str, str, str]]:
        """quantity -> (value text, source, basis) for the profile file."""
        out = {}
        for name, (value, how) in self.measured.items():
            out[name] = (value_text(name, value), how, "measured")
        n = len([e for e in self.fit.after if np.isfinite(e)])
        for c, v in zip(self.fit.coefficients, self.fit.values):
            out[c.name] = (value_text(c.name, v), f"fitted by symcalc calibrate on {n} measured steps of "
                           f"{self.runs_file.name} (prior {value_text(c.name, c.prior)})", "fitted")
        return out

    def profile(self) -> str:
        """The profile as TOML: one hardware table that names its base preset."""
        title = self.runs_file.title or self.runs_file.name
        lines = [f"# A hardware profile written by `symcalc calibrate` from {toml_string(self.runs_file.name)}.",
                 "# Use it as --hardware THIS_FILE (solve, sweep, plan); values not listed come from the base preset.",
                 f"[{_key(self.runs_file.name)}]",
                 f"title = {toml_string(title + ' (calibrated on ' + self.base + ')')}",
                 f"base = {toml_string(self.base)}",
                 f"source = {toml_string('symcalc calibrate: ' + str(len(self.runs_file.runs)) + ' measured steps')}"]
        for name, (text, source, basis) in self.profile_values().items():
            lines.append(f"values.{name} = {{ value = {toml_string(text)}, source = {toml_string(source)}, "
                         f"basis = {toml_string(basis)} }}")
        return "\n".join(lines) + "\n"


# the unit a value is written in, where its base unit would read badly (0.002877 s)
TEXT_UNITS = {"layer_pass_overhead": ("us", 1e-6), "intra_node_bus_bandwidth": ("GB/s", 1e9),
              "intra_node_ring_bus_bandwidth": ("GB/s", 1e9), "achievable_hbm_bandwidth": ("TB/s", 1e12)}


def value_text(name: str, value: float) -> str:
    """A coefficient's or measured value (base units) as the profile writes it, with its unit."""
    if name in TEXT_UNITS:
        unit, f = TEXT_UNITS[name]
        return f"{fmt(value / f)} {unit}"
    return fmt(value)


def _key(name: str) -> str:
    key = re.sub(r"[^A-Za-z0-9_-]+", "_", name).strip("_") or "profile"
    return key[:60]


def library_prior(library, base) -> Callable[[str, str, str], float | None]:
    """The ``prior_of`` of a user's calibration on the hardware preset ``base``: a coefficient's
    value as a question would use it without the fit: the preset's (a preset's value is preferred
    to the stack's), else the stack's (formulas/stacks.toml), else None (the quantity's default)."""
    sets = library.options["stack"].sets if "stack" in library.options else {}

    def prior_of(name: str, scope: str, key: str) -> float | None:
        text = base.values[name][0] if name in base.values else None
        if text is None and scope == "stack":
            text = sets.get(key, {}).get(name)
        if text is None:
            return None
        return float(units.parse_quantity(str(text), name).to_base_units().magnitude)
    return prior_of


def calibrate(path, library, solve: Callable, find_preset: Callable, prior_of: Callable | None = None, *,
              hardware: str | None = None, fit_names: Sequence[str] | None = None,
              name: str | None = None) -> Calibration:
    """Fit a hardware-and-stack profile to the measured steps of a runs file.

    Parameters
    ----------
    path : the runs file (TOML; see calibration/examples/h100_fsdp_runs.toml)
    library : the formula library
    solve, find_preset : symcalc.solve and symcalc.library.presets.find_preset
    prior_of : (quantity, scope, key) -> prior value in base units, or None for the quantity's
        default; by default :func:`library_prior` (the base preset's value, else the stack's)
    hardware, fit_names : the base preset and the coefficients to fit, instead of the file's
    name : the profile's name, instead of the file's (or its file name's)

    Raises
    ------
    MalformedValueError, UnknownNameError, UnknownOptionError, BadOptionValueError
        The file is not a runs file, or names what the library does not know (see :func:`read_runs`).
    QueryError
        A base that is a profile file, a run the model cannot express (named, with why), runs of
        several stacks asked to fit a stack coefficient, or too few runs for the coefficients asked.
    """
    rf = read_runs(path, library, hardware=hardware, fit=fit_names)
    if name is not None:
        rf = replace(rf, name=name)
    base = _base_preset(rf, find_preset)
    prior_of = prior_of or library_prior(library, base)
    measured = _measured_values(rf, base)
    stacks = _one_stack(rf)
    runs = _on_base(rf.runs, measured, library, base.key)
    coefficients = _fit_coefficients(rf, library, base.key, stacks, prior_of)
    model = Model(runs, coefficients, solve)
    if model.unanswered:
        rid, why = next(iter(model.unanswered.items()))
        why = _why_not(next(r for r in runs if r.id == rid), coefficients, solve) or why
        raise QueryError(f"run '{rid}' cannot be predicted: {why}")
    result = fit(runs, coefficients, solve, model=model)
    lost = [r.id for r, e in zip(result.runs, result.before) if not np.isfinite(e)]
    if lost:
        raise QueryError(f"run '{lost[0]}' cannot be predicted: the step time has no finite value at its given "
                         "values and options (check them with `symcalc solve step_time ...`)")
    return Calibration(runs_file=replace(rf, runs=runs), base=base.key, fit=result, measured=measured)


def _base_preset(rf: RunsFile, find_preset: Callable):
    """The built-in hardware preset the runs ran on (a profile file cannot be a base: the
    profile calibrate writes names its base)."""
    try:
        base = find_preset("hardware", rf.hardware)
    except UnknownNameError as e:
        raise UnknownNameError(f"unknown hardware '{rf.hardware}'.{did_you_mean(rf.hardware, e.suggestions)} "
                               "calibrate starts from a built-in preset: see `symcalc list hardware`",
                               e.suggestions) from None
    if base.file:
        raise QueryError(f"hardware '{rf.hardware}' is a profile file: calibrate starts from a built-in preset, "
                         "which the profile it writes names as its base (give --hardware NAME, see "
                         "`symcalc list hardware`)")
    return base


def _measured_values(rf: RunsFile, base) -> dict[str, tuple[float, str]]:
    """The runs file's [measured] numbers as quantities in base units (an efficiency over the
    preset's peak where MEASURED says so), each with where it came from."""
    measured: dict[str, tuple[float, str]] = {}
    for key, number in rf.measured.items():
        quantity, unit, per = MEASURED[key]
        value = float(units.Q(number, unit).to_base_units().magnitude)
        how = f"measured: {key} = {number} ({rf.name})"
        if per:
            known = base.resolve({}, None)      # its values and each dtype's peak (peak_flops_DTYPE)
            if per not in known:
                raise QueryError(f"[measured] {key} needs {per} of hardware {base.key}, which the preset does not give")
            ref = float(units.parse_quantity(known[per][0], per).to_base_units().magnitude)
            value = value / ref
            how += f" over the preset's {per}"
        measured[quantity] = (value, how)
    return measured


def _one_stack(rf: RunsFile) -> list[str]:
    """The runs' stacks, sorted: only one when a stack coefficient is fitted (a profile holds
    one value of each)."""
    stacks = sorted({r.stack for r in rf.runs})
    if len(stacks) > 1 and any(FITTABLE[n][0] == "stack" for n in rf.fit):
        asked = [n for n in rf.fit if FITTABLE[n][0] == "stack"]
        hardware_only = [n for n in rf.fit if FITTABLE[n][0] == "hardware"] or \
            [n for n in FITTABLE if FITTABLE[n][0] == "hardware"]
        raise QueryError(f"the runs use {len(stacks)} stacks ({', '.join(stacks)}) and the fit asks for stack "
                         f"coefficients ({', '.join(asked)}): a profile holds one value of each; calibrate the runs "
                         f"of one stack, or fit hardware coefficients only (--fit {' --fit '.join(hardware_only)})")
    return stacks


def _on_base(runs: list[Measured], measured: dict[str, tuple[float, str]], library,
             hardware_key: str) -> list[Measured]:
    """The runs on the base preset, each given the measured values it does not give itself."""
    out = []
    for r in runs:
        given = dict(r.given)
        for q, (value, _) in measured.items():
            if q not in given:
                qs = library.quantities[q]
                given[q] = (value, qs.unit) if qs.unit else value
        out.append(Measured(id=r.id, given=given, options=r.options, hardware=hardware_key, step_time=r.step_time,
                            group=r.group, stack=r.stack, model=r.model))
    return out


def _fit_coefficients(rf: RunsFile, library, hardware_key: str, stacks: list[str],
                      prior_of: Callable) -> list[Coefficient]:
    """The coefficients the runs file fits, each starting from its prior (``prior_of``'s, else
    the quantity's default, else 0.15 for a share and 1 otherwise)."""
    coefficients = []
    for coef in rf.fit:
        scope, spread, share = FITTABLE[coef]
        key = hardware_key if scope == "hardware" else stacks[0]
        p = prior_of(coef, scope, key)
        default = library.quantities[coef].default
        if p is None:
            p = float(units.parse_quantity(default, coef).to_base_units().magnitude) if default else \
                (0.15 if share else 1.0)
        coefficients.append(Coefficient(name=coef, scope=scope, key=key, prior=p, spread=spread, share=share,
                                        unit=library.quantities[coef].unit))
    return coefficients


def _why_not(run: Measured, coefficients: Sequence[Coefficient], solve: Callable) -> str | None:
    """Why the model cannot answer ``run``, as the solver says it when asked to find out (what
    else to give); the fit's own questions do not ask, to stay fast."""
    given = {**run.given, **{c.name: ((c.prior, c.unit) if c.unit else c.prior) for c in coefficients}}
    try:
        solve("step_time", given, options=run.options, hardware=run.hardware, model=run.model, conflicts=False,
              on_bounds="flag")
    except SymcalcError as e:
        return str(e)
    return None
