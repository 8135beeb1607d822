"""A user's runs file (`symcalc calibrate RUNS.toml`): measured steps, read and checked before
any fit, each error one line that names the run and the field.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from symcalc import units
from symcalc.errors import (
    BadOptionValueError,
    MalformedValueError,
    UnknownNameError,
    UnknownOptionError,
    closest_names,
    did_you_mean,
    unknown_key,
)
from symcalc.library.presets import read_bounded
from symcalc.query.calibfit import Measured

RUNS_KEYS = {"hardware", "stack", "fit", "options", "given", "model", "runs", "measured", "name", "title"}
RUN_KEYS = {"id", "model", "given", "options", "stack", "step_time", "tokens_per_second"}
# what a runs file may say it measured on its cluster -> (quantity, unit of the number, how it maps)
MEASURED = {
    "gemm_bf16_tflops": ("bf16_gemm_efficiency", "TFLOP/s", "bf16_peak_flops"),
    "gemm_fp8_tflops": ("fp8_gemm_efficiency", "TFLOP/s", "fp8_peak_flops"),
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
