"""`symcalc calibrate`: a user's runs file -> a fit -> a hardware profile that --hardware reads.

Three modules, one job each: symcalc.query.calibruns reads and checks the runs file,
symcalc.query.calibfit fits the coefficients (the same fit calibration/fit.py uses on the
published runs), and this one ties them together (the base preset, the [measured] values, the
sanity of each measured step) and writes the profile. Its names are re-exported here, where
calibration/fit.py and the tests import them.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from symcalc import units
from symcalc.errors import OutputError, QueryError, SymcalcError, UnknownNameError, did_you_mean
from symcalc.escape import toml_string
from symcalc.formats import Rendered, render
from symcalc.query.calibfit import RUN_NOISE as RUN_NOISE
from symcalc.query.calibfit import Coefficient as Coefficient
from symcalc.query.calibfit import Fit as Fit
from symcalc.query.calibfit import Measured as Measured
from symcalc.query.calibfit import Model as Model
from symcalc.query.calibfit import coefficients_for as coefficients_for
from symcalc.query.calibfit import fit as fit
from symcalc.query.calibruns import FITTABLE as FITTABLE
from symcalc.query.calibruns import MEASURED as MEASURED
from symcalc.query.calibruns import RunsFile as RunsFile
from symcalc.query.calibruns import read_runs as read_runs
from symcalc.query.calibruns import text_field
from symcalc.units.format import fmt


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
            out[c.name] = (_text_inside(c, v), f"fitted by symcalc calibrate on {n} measured steps of "
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

    def _repr_html_(self) -> str:
        """Jupyter: the runs before and after the fit and the coefficients, as tables."""
        return render("calibration_html", self)

    def __str__(self) -> str:
        return self.text()

    def __repr__(self) -> str:
        """One line, not the dataclass's dump of the runs file and the fit."""
        return (f"<Calibration of {self.runs_file.name}: {len(self.fit.runs)} runs on {self.base}, "
                f"mean |error| {self.fit.mean_error('before'):.1%} -> {self.fit.mean_error('after'):.1%}>")


# a measured step more than this factor off the model's prediction (the library's coefficients
# predict the published runs of calibration/published_runs.toml within tens of per cent) is a unit
# slip or a wrong layout, not something a coefficient's fit can explain
PLAUSIBLE = 10.0

# the unit a value is written in, where its base unit would read badly (0.002877 s)
TEXT_UNITS = {"layer_pass_overhead": ("us", 1e-6), "intra_node_bus_bandwidth": ("GB/s", 1e9),
              "intra_node_ring_bus_bandwidth": ("GB/s", 1e9), "achievable_hbm_bandwidth": ("TB/s", 1e12)}


def value_text(name: str, value: float, digits: int | None = None) -> str:
    """A coefficient's or measured value (base units) as the profile writes it, with its unit."""
    more = {} if digits is None else {"digits": digits}
    if name in TEXT_UNITS:
        unit, f = TEXT_UNITS[name]
        return f"{fmt(value / f, **more)} {unit}"
    return fmt(value, **more)


def _text_inside(c: Coefficient, value: float) -> str:
    """A fitted value's text that reads back inside the coefficient's domain: the profile's few
    digits, or more where rounding would cross an open end (0.99996 of (0, 1) is not "1")."""
    for digits in (None, 8, 15):
        text = value_text(c.name, value, digits)
        if c.domain.holds(float(units.parse_quantity(text, c.name).to_base_units().magnitude)):
            break
    return text


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
        several stacks asked to fit a stack coefficient, too few runs for the coefficients asked, a
        [measured] value outside its quantity's domain, or a measured step no cluster can take
        (an MFU outside mfu's domain, or more than PLAUSIBLE times off the model's prediction).

    The fitted coefficients stay in their quantities' domains; those held at an end are in
    ``Fit.held`` (the output says so).
    """
    rf = read_runs(path, library, hardware=hardware, fit=fit_names)
    if name is not None:
        rf = replace(rf, name=text_field({"name": name}, "name", "--name") or rf.name)
    base = _base_preset(rf, find_preset)
    prior_of = prior_of or library_prior(library, base)
    measured = _measured_values(rf, base, library)
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
    _check_steps(result, library, solve)
    return Calibration(runs_file=replace(rf, runs=runs), base=base.key, fit=result, measured=measured)


def _check_steps(result: Fit, library, solve: Callable) -> None:
    """Refuse a measured step no cluster can have taken (a unit slip: ms for s, one GPU's tokens/s
    for the whole cluster's): one that implies an MFU outside the library's domain of mfu (above
    100 %: faster than the GPUs' peak), or one more than PLAUSIBLE times off the model's
    prediction with the base preset's coefficients, which no coefficient's fit can explain."""
    mfu = library.quantities["mfu"] if "mfu" in library.quantities else None
    for run, error in zip(result.runs, result.before):
        field = f"run '{run.id}': {run.measured_as}"
        step = f"a step of {fmt(run.step_time)} s"
        if mfu is not None:
            try:
                answer = solve("mfu", {**run.given, "step_time": (run.step_time, "s")}, options=run.options,
                               hardware=run.hardware, model=run.model, conflicts=False, on_bounds="flag",
                               diagnose=False)
                implied = float(answer.value) * float(answer.factor)
            except (SymcalcError, TypeError, ValueError):
                implied = None              # a layout the MFU is not defined for: the ratio below still applies
            if implied is not None and not mfu.domain.holds(implied):
                raise QueryError(f"{field} gives {step}, which implies an MFU of {fmt(100 * implied)} % on "
                                 f"{run.hardware} (model FLOPs / (step time x GPUs x peak)); an MFU lies in {mfu.domain}, so "
                                 "no such step is possible: check its unit (ms or s; tokens/s of the whole cluster, not one GPU) "
                                 "and the layout given")
        ratio = 1 + float(error)
        if not 1 / PLAUSIBLE <= ratio <= PLAUSIBLE:
            how = f"{fmt(ratio)} times faster" if ratio > 1 else f"{fmt(1 / ratio)} times slower"
            raise QueryError(f"{field} gives {step}, {how} than the model predicts on {run.hardware} "
                             f"({fmt(run.step_time * ratio)} s), beyond the factor of {fmt(PLAUSIBLE)} a fitted "
                             "coefficient may explain: check its unit (ms or s; tokens/s of the whole cluster, not "
                             "one GPU) and the layout and options given")


def check_not_input(runs_file: str, output: str) -> None:
    """Refuse an --output that is the runs file itself: the same path, a symbolic link to it or
    a hard link of it (os.path.samefile: one device and inode), so that calibrate never writes
    its profile over the measurements it read.

    Raises
    ------
    OutputError
        ``output`` names the runs file.
    """
    if output == "-":
        return
    try:
        same = os.path.samefile(runs_file, output)
    except (OSError, ValueError):      # either does not exist (yet): not the same file
        same = os.path.abspath(runs_file) == os.path.abspath(output)
    if same:
        how = "" if os.path.abspath(runs_file) == os.path.abspath(output) else " (the same file under another name)"
        raise OutputError(f"--output {output} is the runs file {runs_file}{how}: calibrate never writes over its "
                          "measurements; give the profile another name")


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


def _measured_values(rf: RunsFile, base, library) -> dict[str, tuple[float, str]]:
    """The runs file's [measured] numbers as quantities in base units (an efficiency over the
    preset's peak where MEASURED says so), each with where it came from; each inside its
    quantity's domain (a GEMM rate above the preset's peak is refused here, naming the field)."""
    measured: dict[str, tuple[float, str]] = {}
    known = base.resolve({}, None)      # its values and each dtype's peak (peak_flops_DTYPE)
    for key, number in rf.measured.items():
        quantity, unit, per = MEASURED[key]
        value = float(units.Q(number, unit).to_base_units().magnitude)
        how = f"measured: {key} = {number} ({rf.name})"
        if per:
            if per not in known:
                raise QueryError(f"[measured] {key} needs {per} of hardware {base.key}, which the preset does not give")
            ref = float(units.parse_quantity(known[per][0], per).to_base_units().magnitude)
            value = value / ref
            how += f" over the preset's {per}"
        q = library.quantities[quantity]
        if not q.domain.holds(value):
            over = f", {fmt(100 * value)} % of {base.key}'s {per} ({known[per][0]})" if per else ""
            raise QueryError(f"[measured] {key} = {fmt(number)} {unit}{over}: {quantity} lies in {q.domain}; "
                             f"check the number and its unit ({unit})")
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
        out.append(replace(r, given=given, hardware=hardware_key))
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
        q = library.quantities[coef]
        coefficients.append(Coefficient(name=coef, scope=scope, key=key, prior=p, spread=spread, share=share,
                                        unit=q.unit, domain=q.domain))
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
