"""One request type per question (solve, sweep, compare, check, plan), built by the command line from click's
parameters and by the server from a JSON object, validated here once.

Both faces used to read the same question in two ways (NAME=VALUE pairs, --stack against
--option stack=, an empty value, the number of layouts to show) and so refused the same mistake
with different words, or not at all (an unknown stack reached the server's solver unchecked).
Now each face only turns its own syntax into a request (:meth:`SolveRequest.from_cli`,
:meth:`SolveRequest.from_json`) and the checks, and their messages, are these. A message names
a field as the face spells it (:class:`Face`: ``--top`` on the command line, ``"top"`` in JSON),
so that a reader is told what to change where they wrote it; the rest of it is the same text.

A request holds data only: the query functions take its :meth:`~SolveRequest.arguments`
(``symcalc.solve(*args, **kwargs)``), so this module sits below the planner and the server.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any

from symcalc.errors import BadOptionValueError, SymcalcError, did_you_mean

STACK_OPTION = "stack"      # the option --stack NAME gives (formulas/stacks.toml declares it)
ROUNDING = ("up", "down", "nearest")
PLAN_BY = ("time", "days", "gpu_hours", "cost", "memory")


class RequestError(SymcalcError):
    """A request that is not a question (a missing target, a value with no name, a key no
    question has, two spellings of the stack that disagree)."""

    kind = "usage"


@dataclass(frozen=True)
class Face:
    """How a face spells the fields of a request in its messages."""

    name: str
    spell: dict[str, str]

    def __call__(self, key: str) -> str:
        return self.spell.get(key, key)


CLI = Face("cli", {"stack": "--stack", "options": "--option", "top": "--top", "by": "--by", "round": "--round",
                   "values": "a value", "vary": "--vary", "to": "--to", "vs": "--vs", "rtol": "--rtol", "model": "--model",
                   "model_config": "--model config.json", "hardware": "--hardware"})
JSON = Face("json", {k: f'"{k}"' for k in ("stack", "options", "top", "by", "round", "values", "vary", "to", "vs", "rtol",
                                           "target", "model", "model_config", "hardware", "gpus")})


def cli_pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    """The command line's NAME=VALUE arguments as a mapping (checked by :func:`given_pairs`)."""
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise RequestError(f"expected {what} as NAME=VALUE, got '{item}'")
        name, value = item.split("=", 1)
        if not name.strip():
            raise RequestError(f"'{item}': the name before '=' is missing")
        if not value.strip():
            raise RequestError(f"{name.strip()}= has no value (write e.g. {name.strip()}=64)")
        if name.strip() in out:
            raise RequestError(f"{name.strip()} is given twice")
        out[name.strip()] = value.strip()
    return given_pairs(out, CLI, what)


def given_pairs(value: Any, face: Face, key: str) -> dict[str, Any]:
    """NAME -> VALUE (text such as "150000 token/s", or a number): every name a name, every
    value present. The one check of both faces' given values, options and axes."""
    if not isinstance(value, dict):
        raise RequestError(f'{face(key)} is an object of NAME: VALUE, e.g. {{"n_gpus": "64"}}; got {value!r}')
    out: dict[str, Any] = {}
    for name, v in value.items():
        if not isinstance(name, str) or not name.strip() or "=" in name:
            raise RequestError(f"{face(key)}: {name!r} is not a name")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)) or (isinstance(v, float) and not math.isfinite(v)):
            raise RequestError(f"{face(key)}: {name} is a string or a number; got {v!r}")
        if isinstance(v, str) and not v.strip():
            raise RequestError(f"{name}= has no value (write e.g. {name}=64)")
        out[name.strip()] = v.strip() if isinstance(v, str) else v
    return out


def with_stack(lib, options: dict[str, Any], stack: str | None, face: Face) -> dict[str, str]:
    """The options as text, with the stack named on its own as ``stack=NAME``: the two given
    with different values is an error, and so is a stack with a library that has no option
    stack, or a name that is none of its values (the closest names are suggested)."""
    out = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in options.items()}
    if stack is None:
        return out
    if STACK_OPTION not in lib.options:
        raise RequestError(f"{face('stack')}: the formula library has no option '{STACK_OPTION}' (training stacks "
                           "are declared as its values; see `symcalc list options`)")
    if out.get(STACK_OPTION, stack) != stack:
        raise RequestError(f"{face('stack')} {stack} and {face('options')} {STACK_OPTION}={out[STACK_OPTION]} "
                           "disagree; give one")
    known = lib.options[STACK_OPTION].values
    if stack not in known:
        raise BadOptionValueError(f"unknown stack '{stack}'.{did_you_mean(stack, known)} Stacks: "
                                  f"{', '.join(known)} (see `symcalc show {STACK_OPTION}`)")
    return {**out, STACK_OPTION: stack}


def _text(obj: dict, key: str, face: Face) -> str | None:
    value = obj.get(key)
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise RequestError(f"{face(key)} is a non-empty string; got {value!r}")
    return value.strip() if value is not None else None


def _scalar(obj: dict, key: str, face: Face):
    """A value the query reads with its own parser: text ("2 USD/hour") or a number."""
    value = obj.get(key)
    if value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)):
        return value
    return _text(obj, key, face)


def _flag(obj: dict, key: str, default: bool, face: Face) -> bool:
    value = obj.get(key, default)
    if not isinstance(value, bool):
        raise RequestError(f"{face(key)} is true or false; got {value!r}")
    return value


def json_object(request: Any, cls: type, face: Face = JSON) -> dict:
    """The request's JSON object, every key one of ``cls``'s fields (a mistyped key suggests
    the close ones); keys whose value is null are left out."""
    what = f"a {cls.kind} request"     # type: ignore[attr-defined]
    keys = tuple(f.name for f in fields(cls))
    if not isinstance(request, dict):
        raise RequestError(f"{what} is a JSON object, e.g. {{\"target\": \"mfu\", \"values\": {{...}}}}")
    for key in request:
        if key not in keys:
            raise RequestError(f"{what} has no key '{key}'.{did_you_mean(str(key), keys)} Keys: {', '.join(keys)}")
    return {k: v for k, v in request.items() if v is not None}


@dataclass(frozen=True)
class _Run:
    """What every question names besides its own fields: the run's presets and its options."""

    values: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    stack: str | None = None
    hardware: str | None = None
    model: str | None = None
    model_config: str | None = None      # a config.json's text (the server writes it to a file for --model)

    def _checked_run(self, face: Face) -> None:
        if self.model is not None and self.model_config is not None:
            raise RequestError(f"give {face('model')} (a preset) or {face('model_config')} (a config.json), not both")

    def run_options(self, lib, face: Face) -> dict[str, str]:
        return with_stack(lib, self.options, self.stack, face)


def _target_of(obj: dict) -> str:
    """A JSON request's ``target``, stripped ('' when missing or not text: refused by the request)."""
    target = obj.get("target")
    return target.strip() if isinstance(target, str) else ""


def _require_target(request: Any, what: str, example: str) -> None:
    """Refuse a request of one quantity (solve, sweep, compare) that names none."""
    if not isinstance(request.target, str) or not request.target.strip():
        raise RequestError(f'a {request.kind} request needs "target": the name of the quantity {what}, e.g. "{example}"')


def _run_fields(obj: dict, face: Face) -> dict[str, Any]:
    config = obj.get("model_config")
    if isinstance(config, dict):
        import json  # on use: a config given as an object only
        config = json.dumps(config)
    if config is not None and (not isinstance(config, str) or not config.strip()):
        raise RequestError(f"{face('model_config')} is the text of a Hugging Face config.json (or its object)")
    return {"values": given_pairs(obj.get("values", {}), face, "values"),
            "options": given_pairs(obj.get("options", {}), face, "options"),
            "stack": _text(obj, "stack", face), "hardware": _text(obj, "hardware", face),
            "model": _text(obj, "model", face), "model_config": config}


@dataclass(frozen=True)
class SolveRequest(_Run):
    """``symcalc solve TARGET NAME=VALUE ...`` and ``POST /api/solve``."""

    kind = "solve"
    target: str = ""
    to: str | None = None
    round: str | None = None
    allow_conflicts: bool = False
    sensitivity: bool = False
    layout: dict = field(default_factory=dict)   # the run's layout (the page's Layout fields): solve's layout

    def __post_init__(self) -> None:
        _require_target(self, "to solve for", "mfu")

    @classmethod
    def from_json(cls, request: Any) -> SolveRequest:
        obj = json_object(request, cls)
        return cls(target=_target_of(obj), to=_text(obj, "to", JSON),
                   round=_text(obj, "round", JSON), allow_conflicts=_flag(obj, "allow_conflicts", False, JSON),
                   sensitivity=_flag(obj, "sensitivity", False, JSON),
                   layout=given_pairs(obj.get("layout", {}), JSON, "layout"), **_run_fields(obj, JSON))

    def arguments(self, lib, face: Face) -> tuple[tuple, dict[str, Any]]:
        """``symcalc.solve``'s arguments for this request, checked against ``lib``."""
        self._checked_run(face)
        if self.round not in (None, *ROUNDING):
            raise RequestError(f"{face('round')} is one of {', '.join(ROUNDING)}; got {self.round!r}")
        return (self.target, self.values), dict(
            options=self.run_options(lib, face), to=self.to, library=lib, hardware=self.hardware, model=self.model,
            rounding=self.round, conflicts="warn" if self.allow_conflicts else True, sensitivity=self.sensitivity,
            layout=self.layout or None)


@dataclass(frozen=True)
class SweepRequest(_Run):
    """``symcalc sweep TARGET ... --vary NAME=AXIS`` and ``POST /api/sweep``."""

    kind = "sweep"
    target: str = ""
    vary: dict = field(default_factory=dict)
    to: str | None = None

    def __post_init__(self) -> None:
        _require_target(self, "to sweep", "train_time")

    @classmethod
    def from_json(cls, request: Any) -> SweepRequest:
        obj = json_object(request, cls)
        return cls(target=_target_of(obj), to=_text(obj, "to", JSON),
                   vary=given_pairs(obj.get("vary", {}), JSON, "vary"), **_run_fields(obj, JSON))

    def arguments(self, lib, face: Face) -> tuple[tuple, dict[str, Any]]:
        """``symcalc.sweep``'s arguments for this request, checked against ``lib``."""
        self._checked_run(face)
        if not self.vary:
            raise RequestError(f"give at least one {face('vary')} NAME=START:STOP[:COUNT][:log]")
        return (self.target, self.values), dict(vary=self.vary, options=self.run_options(lib, face), to=self.to,
                                                library=lib, hardware=self.hardware, model=self.model)


@dataclass(frozen=True)
class CompareRequest(_Run):
    """``symcalc compare TARGET ... --vs NAME=VALUE`` and ``POST /api/compare``: side A the run,
    side B the same with every ``vs`` change (an option, a value, hardware= or model=)."""

    kind = "compare"
    target: str = ""
    vs: dict = field(default_factory=dict)
    to: str | None = None

    def __post_init__(self) -> None:
        _require_target(self, "to compare", "mfu")

    @classmethod
    def from_json(cls, request: Any) -> CompareRequest:
        obj = json_object(request, cls)
        return cls(target=_target_of(obj), to=_text(obj, "to", JSON),
                   vs=given_pairs(obj.get("vs", {}), JSON, "vs"), **_run_fields(obj, JSON))

    def arguments(self, lib, face: Face) -> tuple[tuple, dict[str, Any]]:
        """``symcalc.compare``'s arguments for this request, checked against ``lib``."""
        from symcalc.query.compare import split_vs  # on use: the command line starts without it (start-up, Ctrl-C)
        self._checked_run(face)
        if not self.vs:
            raise RequestError(f"say what side B changes with at least one {face('vs')} NAME=VALUE "
                               "(e.g. zero_stage=3, \"mfu=45%\", hardware=h100)")
        vs = split_vs(lib, self.vs)
        return (self.target, self.values), dict(
            options=self.run_options(lib, face), vs=vs.given, vs_options=vs.options, hardware=self.hardware,
            model=self.model, vs_hardware=vs.hardware, vs_model=vs.model, to=self.to, library=lib)


@dataclass(frozen=True)
class CheckRequest(_Run):
    """``symcalc check NAME=VALUE ...`` and ``POST /api/check``: claimed numbers against each other."""

    kind = "check"
    rtol: Any = 0.02

    @classmethod
    def from_json(cls, request: Any) -> CheckRequest:
        obj = json_object(request, cls)
        return cls(rtol=obj.get("rtol", 0.02), **_run_fields(obj, JSON))

    def arguments(self, lib, face: Face) -> tuple[tuple, dict[str, Any]]:
        """``symcalc.check``'s arguments for this request, checked against ``lib``."""
        self._checked_run(face)
        rtol = self.rtol
        if isinstance(rtol, bool) or not isinstance(rtol, (int, float)) or not 0 <= rtol < 1:
            raise RequestError(f"{face('rtol')} is a fraction from 0 to below 1 (0.02 is 2 %); got {rtol!r}")
        return (self.values,), dict(options=self.run_options(lib, face), rtol=rtol, library=lib,
                                    hardware=self.hardware, model=self.model)


PLAN_SCALARS = ("tokens", "global_batch_size", "seq_len", "gpus_per_node", "memory_headroom", "gpu_hour_price",
                "deadline", "budget", "throughput")


@dataclass(frozen=True)
class PlanRequest(_Run):
    """``symcalc plan ...`` and ``POST /api/plan``: the run, the GPU counts, the goals and how
    to rank; ``top`` at most ``most_top`` (a face's own bound: the server's is smaller)."""

    kind = "plan"
    gpus: Any = None
    tokens: Any = None
    global_batch_size: Any = None
    seq_len: Any = None
    gpus_per_node: Any = None
    memory_headroom: Any = None
    gpu_hour_price: Any = None
    deadline: Any = None
    budget: Any = None
    throughput: Any = None
    by: str = "time"
    top: Any = 10
    tp_across_nodes: bool = False
    uneven_pp: bool = True
    frontier: bool = True

    @classmethod
    def from_json(cls, request: Any) -> PlanRequest:
        obj = json_object(request, cls)
        gpus = obj.get("gpus")
        if isinstance(gpus, list):
            if not gpus or not all(isinstance(v, int) and not isinstance(v, bool) for v in gpus):
                raise RequestError(f'"gpus" is a count, a range "A:B" or a list of counts; got {gpus!r}')
        else:
            gpus = _scalar(obj, "gpus", JSON)
        flags: dict[str, Any] = {k: _flag(obj, k, d, JSON) for k, d in (("tp_across_nodes", False),
                                                                        ("uneven_pp", True), ("frontier", True))}
        return cls(gpus=gpus, by=obj.get("by", "time"), top=obj.get("top", 10), **flags,
                   **{k: _scalar(obj, k, JSON) for k in PLAN_SCALARS}, **_run_fields(obj, JSON))

    def checked(self, face: Face, most_top: int | None = None) -> None:
        """The refusals of the request itself (before any library is read). ``most_top``: the
        face's own bound on ``top``, if any (the planner's, a thousand, is checked by the planner)."""
        self._checked_run(face)
        top = self.top
        if isinstance(top, bool) or not isinstance(top, int) or top < 1 or (most_top is not None and top > most_top):
            bound = "at least 1" if most_top is None else f"1 to {most_top}"
            raise RequestError(f"{face('top')} is the number of layouts to show, {bound}; got {top!r}")
        if self.by not in PLAN_BY:
            raise RequestError(f"{face('by')} is one of {', '.join(PLAN_BY)}; got {self.by!r}")

    def arguments(self, lib, face: Face, most_top: int | None = None) -> tuple[tuple, dict[str, Any]]:
        """``symcalc.plan``'s arguments for this request, checked against ``lib``."""
        self.checked(face, most_top)
        return (self.model, self.hardware, self.gpus), dict(
            options=self.run_options(lib, face), by=self.by, top=self.top, library=lib, values=self.values,
            tp_across_nodes=self.tp_across_nodes, uneven_pp=self.uneven_pp, frontier=self.frontier,
            **{k: getattr(self, k) for k in PLAN_SCALARS})


#: the request type of each question a face may ask
REQUESTS: dict[str, type[SolveRequest] | type[SweepRequest] | type[CompareRequest] | type[CheckRequest]
               | type[PlanRequest]] = {"solve": SolveRequest, "sweep": SweepRequest, "compare": CompareRequest,
                                       "check": CheckRequest, "plan": PlanRequest}
