"""A user's runs file (`symcalc calibrate RUNS.toml`): measured steps, read and checked before
any fit, each error one line that names the run and the field.
"""

from __future__ import annotations

import math
import re
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
    hardware = text_field(doc, "hardware", where) if hardware is None else hardware
    if not hardware:
        raise MalformedValueError(f"{where}: 'hardware' (the preset the runs ran on, e.g. \"h100\") is required "
                                  "(or give --hardware NAME)")
    fit_names = _fit_names(doc, fit, where)
    measured = _measured_numbers(doc, where)
    base_options = _table(doc.get("options", {}), f"{where}: options")
    base_given = _table(doc.get("given", {}), f"{where}: given")
    default_stack = text_field(doc, "stack", where) or (library.options["stack"].default if "stack" in library.options
                                                   else "")
    rows = doc.get("runs")
    if not isinstance(rows, list) or not rows:
        raise MalformedValueError(f"{where}: no [[runs]]: each run gives its layout (given), options and step_time")
    out = [_read_run(n, row, doc, where, library, hardware, fit_names, base_given, base_options, default_stack)
           for n, row in enumerate(rows, 1)]
    ids = [r.id for r in out]
    twice = next((i for i in ids if ids.count(i) > 1), None)
    if twice is not None:
        raise MalformedValueError(f"{where}: two [[runs]] have id '{twice}'; each run's id names it in the table "
                                  "of errors")
    name = text_field(doc, "name", where) or p.stem
    return RunsFile(name=name, hardware=hardware, runs=out, fit=list(fit_names), measured=dict(measured),
                    title=text_field(doc, "title", where))


# control characters (a terminal's escape sequences among them) have no place in a name or a title
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def text_field(table: dict, key: str, where: str, numbers: bool = False) -> str:
    """A text field (name, title, hardware, stack, model, a run's id), or "" where absent: text
    (or a whole number where ``numbers``, an id like 3), one line, no control characters."""
    value = table.get(key)
    if value is None:
        return ""
    if numbers and isinstance(value, int) and not isinstance(value, bool) and abs(value) < 10 ** 18:
        return str(value)
    if not isinstance(value, str):
        raise MalformedValueError(f"{where}: {key} is text, got {shown(value)}")
    if _CONTROL.search(value):
        raise MalformedValueError(f"{where}: {key} = {shown(value)} holds a control character; "
                                  "a name or a title is printable text")
    return value.strip()


def shown(value, limit: int = 40) -> str:
    """A value as an error message echoes it: its repr, cut to ``limit`` characters (a
    400-digit number is not repeated whole)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 12]}... ({len(text)} characters)"


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
    except RecursionError:
        raise MalformedValueError(f"{where}: nested too deeply to be a runs file") from None
    if not doc:
        raise MalformedValueError(f"{where}: empty; a runs file names its hardware and lists [[runs]], each with "
                                  "given values, options and a step_time (see calibration/examples/h100_fsdp_runs.toml)")
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
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v < math.inf or abs(v) > 1e300:
            raise MalformedValueError(f"{where}: [measured] {k} must be a positive finite number, got {shown(v)}")
    return measured


def _read_run(n: int, row, doc: dict, where: str, library, hardware: str, fit_names: list, base_given: dict,
              base_options: dict, default_stack: str) -> Measured:
    """The ``n``-th [[runs]] table: its given values and options over the file's, its stack,
    and its measured step time."""
    if not isinstance(row, dict):
        raise MalformedValueError(f"{where}: [[runs]] 'run {n}': a run is a table")
    rid = text_field(row, "id", f"{where}: [[runs]] 'run {n}'", numbers=True) or f"run {n}"
    rwhere = f"{where}: [[runs]] '{rid}'"
    wrong = unknown_key(row, RUN_KEYS, "A run has:")
    if wrong:
        raise MalformedValueError(f"{rwhere}: {wrong}")
    given = {**base_given, **_table(row.get("given", {}), f"{rwhere}: given")}
    options = {**base_options, **_table(row.get("options", {}), f"{rwhere}: options")}
    stack = text_field(row, "stack", rwhere) or text_field(options, "stack", f"{rwhere}: options") or default_stack
    if "stack" in library.options:
        options["stack"] = stack
    _given_numbers(given, library, fit_names, rwhere)
    try:
        library.option_values(options)
    except UnknownOptionError as e:
        raise UnknownOptionError(f"{rwhere}: {e}", e.suggestions) from None
    except BadOptionValueError as e:
        raise BadOptionValueError(f"{rwhere}: {e}") from None
    options = {k: _optiontext_field(v) for k, v in options.items()}
    step = _step_time(row, given, rwhere)
    model = text_field(row, "model", rwhere) or text_field(doc, "model", where)
    return Measured(id=rid, given=given, options=options, hardware=hardware, step_time=step,
                    group=rid, stack=stack, model=model or None,
                    measured_as="step_time" if "step_time" in row else "tokens_per_second")


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


def _optiontext_field(value) -> str:
    """An option's value as the library names it (TOML's true and 3 as "true" and "3")."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value).strip()


def _number(value, q, where: str):
    """A given value as a number, or a (number, canonical unit) pair for a value with a unit;
    finite (a 400-digit integer, inf or nan named as such)."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise MalformedValueError(f"{where}: {q.name} = {shown(value)} is not a number or a value with a unit")
    expected = f"a number or a value in {q.unit}" if q.unit else "a number"
    out: float | tuple[float, str]
    try:
        if isinstance(value, (int, float)):
            number = out = float(value)
        else:
            parsed = units.parse_quantity(value, q.name)
            number = float(parsed.to(q.unit or "").magnitude)
            out = (number, q.unit) if q.unit else number
    except OverflowError:
        raise MalformedValueError(f"{where}: {q.name} = {shown(value)} is too large to be a number") from None
    except Exception:
        raise MalformedValueError(f"{where}: {q.name} = {shown(value)}: expected {expected}") from None
    if not math.isfinite(number):
        raise MalformedValueError(f"{where}: {q.name} = {shown(value)} is not a finite number")
    return out


def _measure(row: dict, key: str, unit: str, like: str, where: str) -> float:
    """A run's measured ``key`` in ``unit``: a positive finite number (a zero rate, a negative
    time, inf and a 400-digit integer each named)."""
    raw = row[key]
    try:
        value = float(units.parse_quantity(str(raw), key).to(unit).magnitude)
    except OverflowError:
        raise MalformedValueError(f"{where}: {key} = {shown(raw)} is too large to be a number") from None
    except Exception:
        raise MalformedValueError(f"{where}: {key} = {shown(raw)} is not {like}") from None
    if not 0 < value < math.inf:
        raise MalformedValueError(f"{where}: {key} = {shown(raw)} must be positive and finite")
    return value


def _table(obj, where: str) -> dict:
    if not isinstance(obj, dict):
        raise MalformedValueError(f"{where} must be a table")
    return {str(k): (str(v).lower() if isinstance(v, bool) else v) for k, v in obj.items()}


def _step_time(row: dict, given: dict, where: str) -> float:
    """The measured step time in s: given as `step_time = "3.2 s"`, or from `tokens_per_second`
    (whole cluster) with the run's global batch and sequence length."""
    if "step_time" in row:
        value = _measure(row, "step_time", "s", "a time like \"3.2 s\"", where)
    elif "tokens_per_second" in row:
        missing = [n for n in ("global_batch_size", "seq_len") if n not in given]
        if missing:
            raise MalformedValueError(f"{where}: tokens_per_second needs given {missing[0]} to give a step time")
        tps = _measure(row, "tokens_per_second", "token/s", "a rate like \"150000 token/s\"", where)
        gbs, seq = (float(v[0] if isinstance(v, tuple) else v) for v in (given["global_batch_size"], given["seq_len"]))
        value = gbs * seq / tps
    else:
        raise MalformedValueError(f"{where}: no step_time (e.g. step_time = \"3.2 s\") or tokens_per_second")
    if not 0 < value < math.inf:
        raise MalformedValueError(f"{where}: the step time must be a positive finite time (got {value:g} s)")
    return value
