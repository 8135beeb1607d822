"""The run a question is about, declared once: its workload, stack, hardware, model and parallel
groups, each group with its degree and the links its collectives run over.

Like torchtitan's ``ParallelDims``, but wider: the run is read from the question once
(:func:`declare`, called by :func:`symcalc.query.question.pose` for solve, sweep, compare and
the API; by check for its values; by the planner for its search) and every command reads the
record it gives: the fit verdict reads its workloads (:mod:`symcalc.query.fit`), the
renderers say it in one line and in the JSON (``"run"``). The rules it is made by are the ones
each part already has, read from the data and nowhere else:

- the workload: the workload option's value when the question settles it, else the workloads
  whose own quantities the question reaches (:func:`symcalc.query.fit.decide`);
- the stack: the setting options in force (:mod:`symcalc.query.stacks`: given, or the default
  stack of a question about a run), else none (the formulas' own, textbook defaults);
- the groups: ``[groups]`` in ``formulas/planner/space.toml``, their degrees from the known
  values (given, a preset's) or the defaults the answer took (tp = 1).

A record holds data only: it never calls the solver, and it pickles and compares as its values.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from symcalc.errors import BadOptionValueError
from symcalc.query import fit
from symcalc.query.layout_rules import space_data


@dataclass(frozen=True)
class Group:
    """One parallel group of the run.

    ``degree`` is None when the question neither gives it nor takes a default for it (a plan,
    which searches it); ``origin`` says where it came from: ``given``, the preset's key, or
    ``default``. ``links`` are the quantities its collectives' links are (the data's
    ``[groups.X]``); ``per_node`` the quantity that says how many of its ranks share a node."""

    name: str
    degree: float | None
    origin: str
    links: tuple[str, ...]
    per_node: str | None
    link_from: tuple[tuple[str, str], ...] = ()     # (link, given | a preset | the quantity a rule took)

    def spans(self, values: Mapping[str, Any]) -> str | None:
        """``inside a node`` or ``across nodes`` where ``values`` (an answer's, base units) hold
        the group's ranks per node and its degree is known; else None."""
        per = values.get(self.per_node) if self.per_node else None
        if self.degree is None or per is None or isinstance(per, str) or np.ndim(per):
            return None
        return "inside a node" if float(per) >= self.degree * (1 - 1e-9) else "across nodes"


@dataclass(frozen=True)
class Run:
    """What a question is about: one record every command reads (see the module's docstring)."""

    workloads: tuple[fit.Workload, ...]     # the workloads whose fit the answer is judged by
    workload_given: bool                    # the question settles the workload option
    stack: tuple[tuple[str, str], ...]      # (option, value) of each setting option in force
    stack_why: str                          # given | default-run | default-formula | none
    hardware: str | None                    # the presets' keys
    model: str | None
    groups: tuple[Group, ...]

    @property
    def workload(self) -> str | None:
        """The workload's name (training, serving), ``a or b`` when the question reaches two,
        None when it reaches none (a parameter count)."""
        return " or ".join(w.value for w in self.workloads) or None

    def group(self, name: str) -> Group | None:
        return next((g for g in self.groups if g.name == name), None)

    def as_dict(self, values: Mapping[str, Any] | None = None, library=None, answer: str | None = None) -> dict:
        """The record as JSON-ready data; with an answer's ``values`` (base units) and its
        library, each group's links as the answer took them (display units) and its span; the
        degree the question asked for (``answer``) is said to be the answer."""
        values = values or {}
        groups = []
        for g in self.groups:
            degree, origin = g.degree, g.origin
            seen = values.get(g.name)
            if degree is None and isinstance(seen, (int, float)):      # follows from the others (dp)
                degree = float(seen)
                origin = ("the answer" if g.name == answer else "derived" if abs(degree - round(degree)) < 1e-9
                          else "derived from the unrounded answer")
            entry: dict = {"name": g.name, "degree": degree, "origin": origin}
            sources = dict(g.link_from)
            links: dict = {}
            for name in g.links if degree and degree > 1 else ():   # the links the answer took
                v = values.get(name)
                if library is not None and v is not None and not isinstance(v, str) and np.ndim(v) == 0:
                    q = library.quantities[name]
                    links[name] = {"value": float(v) / q.factor, "unit": q.display_unit,
                                   "from": sources.get(name, "derived")}
            if links:
                entry["links"] = links
            span = Group(g.name, degree, origin, g.links, g.per_node).spans(values)
            if span:
                entry["spans"] = span
            groups.append(entry)
        return {"workload": self.workload, "workload_given": self.workload_given,
                "stack": dict(self.stack), "stack_why": self.stack_why,
                "hardware": self.hardware, "model": self.model, "groups": groups}


def declared_groups(library) -> tuple[tuple[str, tuple[str, ...], str | None], ...]:
    """(name, links, per_node) of each group ``[groups]`` declares whose degree the library
    knows, with the links and the ranks-per-node quantity it knows (a small library of a few
    formulas has no links). Read once per library; tests/test_run.py checks that the default
    library knows every name declared (a misspelt one would show no link)."""
    found = library.__dict__.get("_run_groups")
    if found is not None:
        return found
    known = library.quantities
    out = []
    for name, spec in space_data().get("groups", {}).items():
        if name in known:
            per_node = spec.get("per_node")
            out.append((name, tuple(n for n in spec.get("links", ()) if n in known),
                        per_node if per_node in known else None))
    library.__dict__["_run_groups"] = tuple(out)
    return library.__dict__["_run_groups"]


def declare(library, *, options: Mapping[str, str], settled: Iterable[str], footprint: Iterable[str],
            in_force: Iterable[str] = (), stack_why: str = "none", presets: Iterable = (),
            knowns: Mapping[str, Any] | None = None, defaults: Mapping[str, dict] | None = None) -> Run:
    """The run of a question.

    Parameters
    ----------
    options : every option's value (the question's, its presets', implied, the stack's)
    settled : the options the question itself settles (given, a preset's, implied, used)
    footprint : the quantities the question reaches (its derivation's, or the given names)
    in_force : the setting options (stacks) in force
    stack_why : why they are (:func:`stack_reason`)
    presets : the hardware and model presets named
    knowns : the known values (name -> :class:`~symcalc.query.values.GivenValue`)
    defaults : the defaults the answer took (name -> {"value", ...})

    Complexity: one pass over the workloads (cached per library) and the declared groups.
    """
    knowns, defaults = knowns or {}, defaults or {}
    presets = tuple(presets)
    check_hardware_dtypes(library, options, presets)
    # the layout is every workload's: what decides one is the rest of what the question reaches
    shared = set(space_data()["question"].get("shared", ()))
    chosen = fit.decide(library, options, settled, set(footprint) - shared)
    given = any(w.option in set(settled) for w in chosen)
    named = {p.kind: p.key for p in presets}
    groups = tuple(Group(name, *_degree(name, knowns, defaults), links, per_node,
                         _link_from(links, knowns, defaults))
                   for name, links, per_node in declared_groups(library))
    stack = tuple((name, options[name]) for name in sorted(in_force))
    return Run(tuple(chosen), given, stack, stack_why if stack else "none", named.get("hardware"),
               named.get("model"), groups)


def check_hardware_dtypes(library, options: Mapping[str, str], presets: Iterable) -> None:
    """Refuse an option value that needs a number format the named hardware lacks
    (``hardware_dtype`` in the option data: FP8 training or an FP8 KV cache on an A100), naming
    both: the run cannot exist, so no command may answer for it.

    Raises BadOptionValueError. Complexity: one pass over the options.
    """
    hardware = [p for p in presets if p.kind == "hardware" and p.peak_flops]
    for name, opt in library.options.items():
        value = options.get(name, opt.default)
        need = opt.hardware_dtype.get(value)
        for p in hardware if need else ():
            if need not in p.peak_flops:
                raise BadOptionValueError(f"--option {name}={value} needs {need.upper()} support, which {p.label} "
                                          f"lacks (it computes in {', '.join(sorted(p.peak_flops))})")


def stack_reason(in_force: Iterable[str], settled: Iterable[str], about_run: bool) -> str:
    """Why the stacks in force are: ``given`` (by the question, a preset or its values),
    ``default-run`` (the default stack of a question about a run: a model or hardware named),
    ``default-formula`` (a formula the answer uses depends on it), ``none`` (no stack: the
    formulas' own defaults, the source documents' textbook physics)."""
    in_force = set(in_force)
    if not in_force:
        return "none"
    if in_force <= set(settled):
        return "given"
    return "default-run" if about_run else "default-formula"


def _degree(name: str, knowns: Mapping[str, Any], defaults: Mapping[str, dict]) -> tuple[float | None, str]:
    """A group's degree and where it came from: a known value (its first point on a grid), a
    default the answer took, else (None, "")."""
    gv = knowns.get(name)
    if gv is not None and not isinstance(gv.magnitude, str):
        first = np.ravel(np.asarray(gv.magnitude, dtype=float))[0]
        return float(first), gv.origin.split(":", 1)[0] if gv.origin else "given"
    d = defaults.get(name)
    if d is not None and isinstance(d.get("magnitude"), (int, float)):
        return float(d["magnitude"]), "default"
    return None, ""


def _link_from(links: tuple[str, ...], knowns: Mapping[str, Any], defaults: Mapping[str, dict]
               ) -> tuple[tuple[str, str], ...]:
    """(link, where its value came from) for each link the question fixed: ``given`` (or the
    preset's key), or the quantity a default rule took it from (tp_bus_bandwidth)."""
    out = []
    for name in links:
        gv = knowns.get(name)
        if gv is not None:
            out.append((name, gv.origin.split(":", 1)[0] if gv.origin else "given"))
        elif name in defaults:
            out.append((name, str(defaults[name]["value"])))
    return tuple(out)
