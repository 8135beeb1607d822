"""The library's data: quantities, options and formulas as plain records.

These hold what the TOML files say plus what loading derived from it (dimensions, sympy
symbols, parsed sides). They carry no algorithms: planning, solving and rendering are
functions elsewhere that read them. Their sympy fields are lazy (symcalc.lazy): a cached
library is read, and most questions answered, without importing sympy.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from typing import TYPE_CHECKING

import numpy as np

from symcalc.compiled import CompiledFunction
from symcalc.lazy import LazyField, LazyFields

if TYPE_CHECKING:   # pragma: no cover
    import sympy


@dataclass(frozen=True)
class Interval:
    """A quantity's admissible values, written like ``(0, 1]`` or ``[0, inf)``."""

    lo: float = 0.0
    hi: float = math.inf
    lo_open: bool = True
    hi_open: bool = True

    @classmethod
    def parse(cls, text: str) -> Interval:
        m = re.fullmatch(r"\s*([\[(])\s*([^,\s]+)\s*,\s*([^,\s]+)\s*([\])])\s*", text or "")
        if not m:
            raise ValueError(f"domain '{text}' is not an interval like '(0, inf)' or '(0, 1]'")
        lo, hi = float(m.group(2)), float(m.group(3))
        if not lo < hi:
            raise ValueError(f"domain '{text}' is empty")
        return cls(lo, hi, m.group(1) == "(", m.group(4) == ")")

    def contains(self, x):
        """Elementwise membership (works on floats and numpy arrays; NaN is never inside)."""
        x = np.asarray(x, dtype=float)
        above = x > self.lo if self.lo_open else x >= self.lo
        below = x < self.hi if self.hi_open else x <= self.hi
        return above & below

    def holds(self, x: float) -> bool:
        """contains() for one float, without numpy: a scalar question checks a dozen values,
        and numpy's per-call cost is most of a cached solve's time."""
        return (x > self.lo if self.lo_open else x >= self.lo) and (x < self.hi if self.hi_open else x <= self.hi)

    @property
    def positive(self) -> bool:
        return self.lo >= 0 and self.lo_open or self.lo > 0

    @property
    def nonnegative(self) -> bool:
        return self.lo >= 0

    def __str__(self) -> str:
        def num(v: float) -> str:
            if math.isinf(v):
                return "inf" if v > 0 else "-inf"
            return f"{v:g}"
        return f"{'(' if self.lo_open else '['}{num(self.lo)}, {num(self.hi)}{')' if self.hi_open else ']'}"


@dataclass
class QuantitySpec(LazyFields):
    """A named quantity of the public vocabulary (``n_params``, ``peak_flops``...)."""

    name: str
    unit: str                  # canonical unit as declared; '' for a pure number
    display_unit: str          # unit results are shown in unless the user asks otherwise
    latex: str
    description: str
    file: str
    aliases: tuple[str, ...] = ()
    domain: Interval = field(default_factory=Interval)
    whole: str | None = None   # "up", "down" or "nearest": a whole number, rounded that way
    default: str | None = None  # value text of a coefficient's default, e.g. "6 FLOP/token"
    default_source: str = ""
    source: str = ""
    kind: str = "number"       # "number", or "text" (a word or a pattern, for algorithms only)
    # a slack whose value at a limit turns a forward question into "the largest that fits":
    # memory_headroom = 0 GB. Never used unless given; the diagnosis offers it first.
    limit: str | None = None
    limit_meaning: str = ""
    # a capacity this quantity must not exceed when it is known: per-GPU memory fits in
    # gpu_memory. Sweeps mark (and plots draw) it; a single answer above it is warned about.
    fits_in: str | None = None
    # the total this quantity is the exposed (not hidden) part of: a collective's exposed time
    # beside its whole time (step_tp_comm_time of step_tp_comm_total_time); breakdowns show both
    exposed_part_of: str | None = None
    # the quantity that sums this one over a deployment's units (one replica's decode rate: all
    # replicas'): a refusal says when the other of the pair would settle the question
    total: str | None = None
    # the quantity whose name people ask this one by: the most parameters a decode rate allows
    # (for n_params), a trained run's tokens a parameter (for Chinchilla's tokens_per_param). A
    # refusal of that quantity whose values settle this one names it as the question to ask
    answers_for: str | None = None
    # a given value of this quantity is a limit the answer must keep: "at_most" (a budget, a
    # deadline, a bubble target, memory) or "at_least" (free memory, a throughput target).
    # A whole-number answer rounds the way that keeps it (see symcalc.query.limits).
    given_is: str | None = None
    # which limit wins when two pull a whole-number answer opposite ways: a budget or a memory
    # capacity (2) over a deadline or a target (1)
    limit_priority: int = 1
    # a value people know and give (model shapes, hardware figures, layout, prices, targets),
    # as opposed to an intermediate: suggestions for underdetermined questions name these first
    input: bool = False
    # a default standing in for it changes the question (the token count, a utilization):
    # the answer says so in its first lines
    main_input: bool = False
    # (low, high) in base units: values outside are possible but far from any real hardware or
    # model, and are warned about with the likely slip (Gb vs GB, a prefix off by 1000)
    plausible: tuple[float, float] | None = None
    # quantities this one can never exceed when both are given (n_kv_heads <= n_heads, tp <= n_gpus)
    not_above: tuple[str, ...] = ()
    warn_above: tuple[str, ...] = ()      # quantities a value above is warned against, not refused
    # quantities of the same dimension that decide it when given (decode's HBM rate is the
    # achievable rate measured for one case; a request's output sets its mean context): a
    # preset's figure of it yields to a given value of any of them
    yields_to: tuple[str, ...] = ()
    # (figure, datasheet figure): this fraction is a preset's measured figure over its datasheet
    # figure (the decode HBM rate over hbm_bandwidth), known where a given datasheet value makes
    # the preset's figure yield (yields_to), so that a formula scales it to the given value
    ratio_of: tuple[str, ...] = ()
    # the value most questions take for it ("1" for the micro-batch of a large model), said when
    # a question leaves it out: sets of such quantities are suggested first
    usual: str = ""
    # kept only to reproduce a source's wrong number (seed errors): never suggested as an input
    source_error: bool = False
    # derived at load
    dim: Any = None            # pint UnitsContainer
    factor: float = 1.0        # size of one display unit in base units
    symbol: sympy.Symbol | None = LazyField()  # type: ignore[assignment]


@dataclass(frozen=True)
class OptionFallback:
    """The option value a question takes when the user did not choose the option and its
    default leaves the question open while this value answers it (memory_figure: the textbook
    sum of the parts given, where the measured peak needs the model's shapes); said first in the
    answer, with ``reason``: what the default would count besides, and what to give to get it."""

    value: str
    summary: str        # what the value means, in a few words ("the parts given, summed")
    reason: str         # what the default counts besides, and how to get it


@dataclass
class OptionSpec:
    """A discrete assumption (``zero_stage``, ``precision``) selecting formulas and defaults."""

    name: str
    description: str
    default: str
    values: dict[str, str]                      # value -> what it means
    sets: dict[str, dict[str, str]]             # value -> {coefficient quantity: value text}
    sources: dict[str, str]                     # value -> citation for what it sets
    file: str
    compute_dtype: dict[str, str] = field(default_factory=dict)  # value -> dtype of the math (presets' peak)
    hardware_dtype: dict[str, str] = field(default_factory=dict)  # value -> a dtype the hardware must support
    # values that given quantities imply: [(option value, Condition)], first match wins
    implied_by: tuple = ()
    main_input: bool = False     # its default value changes the question: said first when it shapes one
    # said first only when the answer uses a default it sets (main_input = "defaults" in the data:
    # precision's bytes, not the GEMM efficiency a serving answer also reads from it)
    main_input_by_defaults: bool = False
    searched: bool = False       # `symcalc plan` searches its values (in their declared order)
    # value -> {other option: its default under this value} (a training stack sets the kernels
    # and overlaps it runs); below presets and implications, above the other option's own default
    option_defaults: dict[str, dict[str, str]] = field(default_factory=dict)
    # value -> {other option: the values this value runs with}
    supports: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)
    # value -> conditions given values must satisfy under it (PyTorch FSDP alone: tp == 1)
    requires: dict[str, tuple[Requirement, ...]] = field(default_factory=dict)
    fallback: OptionFallback | None = None       # taken where the default cannot answer (query.question)
    # other option -> the values under which this one means anything (fp8_recipe: precision fp8/fp4)
    only_with: dict[str, tuple[str, ...]] = field(default_factory=dict)
    # a refusal offers its other values that would answer: it only picks what a formula reads (the
    # group a generic collective runs over), so naming it is the whole fix
    offered: bool = False
    # values that combine (``combinable`` in the data: Megatron-Core's recompute_modules): every
    # set of two or more is a value of its own, named by its pieces in this order joined by "+"
    pieces: tuple[str, ...] = ()
    # other names of its values (``aliases`` in the data): Megatron-Core's core_attn is attention_core
    aliases: dict[str, str] = field(default_factory=dict)

    @property
    def declared(self) -> dict[str, str]:
        """The values as the data declares them, without the combinations of its pieces (what a
        listing shows: the combinations are said as "several of ... joined by +")."""
        return {v: t for v, t in self.values.items() if v in self.pieces or "+" not in v}

    def listed(self, allowed: Sequence[str]) -> tuple[str, ...]:
        """``allowed`` as said to a reader: the declared values, and the combinations of its pieces
        it admits said once ("their combinations joined by +"), not one by one."""
        shown = tuple(v for v in allowed if v in self.declared)
        return shown + (("their combinations joined by +",) if len(shown) < len(allowed) else ())

    @property
    def said(self) -> tuple[str, ...]:
        """Every value as said to a reader (:meth:`listed` of all of them)."""
        return self.listed(tuple(self.values))

    def admitted(self, allowed: Sequence[str]) -> tuple[str, ...]:
        """``allowed`` with every combination all of whose pieces it names: a formula for
        "layernorm or moe_act" holds for "layernorm+moe_act" too. O(values)."""
        named = set(allowed)
        extra = [v for v in self.values if v not in named and "+" in v and set(v.split("+")) <= named]
        return (*allowed, *extra)

    def canonical(self, text: str) -> str:
        """A value as given, with a combination's pieces put in the declared order and repeats
        dropped: "moe_act, layernorm", "[moe_act, layernorm]" and "layernorm+moe_act" are one value.
        A text that is not a combination of pieces comes back as given (checked by the caller)."""
        if text in self.values or not (self.pieces or self.aliases):
            return text         # (the common case, read on every question: no parsing)
        parts = [self.aliases.get(p, p) for p in re.split(r"[+,\s\[\]'\"]+", text) if p]
        if len(parts) == 1 and parts[0] in self.values:
            return parts[0]
        if not parts or not self.pieces or not set(parts) <= set(self.pieces):
            return text
        chosen = [p for p in self.pieces if p in parts]
        return "+".join(chosen) if len(chosen) > 1 else chosen[0]

    @property
    def sets_options(self) -> bool:
        """Whether some value of it sets other options' defaults (a training stack)."""
        return any(self.option_defaults.values())

    @property
    def links_options(self) -> bool:
        """Whether some value of it sets or restricts other options (``options``, ``supports``;
        its values may also require conditions of given values): a training stack, in force only
        where a question reaches it. An option whose only link is a value's ``requires``
        (optimizer_step = in_backward requires no gradient accumulation) is no stack:
        :attr:`only_requires`."""
        return self.sets_options or any(self.supports.values())

    @property
    def only_requires(self) -> bool:
        """Its values set and restrict nothing and some require conditions: an ordinary option
        whose requirements hold wherever its value does (checked for every question that gives
        it or uses it), not a stack."""
        return not self.sets_options and not any(self.supports.values()) and any(self.requires.values())


@dataclass(frozen=True)
class Condition(LazyFields):
    """``lhs op rhs`` over quantities (sympy expressions), e.g. ``n_kv_heads < n_heads``.

    ``names`` are the quantities it reads and ``sides`` its two sides compiled (functions of
    ``names`` in that order), so that checking it needs no sympy."""

    text: str
    op: str
    lhs: sympy.Expr = LazyField()  # type: ignore[assignment]
    rhs: sympy.Expr = LazyField()  # type: ignore[assignment]
    compatible: tuple[str, ...] = ()    # option values that also hold when it does (implied_by)
    names: tuple[str, ...] = ()
    sides: tuple[CompiledFunction, ...] = ()

    def holds_where(self, values: Mapping[str, object]) -> np.ndarray | None:
        """Where it holds, elementwise over arrays of base-unit values (broadcast together);
        None if a quantity in it is missing. NaN never satisfies it."""
        if not set(self.names) <= set(values):
            return None
        args = [np.asarray(values[n], dtype=float) for n in self.names]
        with np.errstate(all="ignore"):
            a, b = (np.broadcast_to(np.asarray(side(*args), dtype=float), np.broadcast_shapes(*(x.shape for x in args)))
                    for side in self.sides)
            tol = 1e-9 * np.maximum(np.maximum(np.abs(a), np.abs(b)), 1e-300)
            return {"<": a < b - tol, "<=": a <= b + tol, ">": a > b + tol, ">=": a >= b - tol,
                    "==": np.abs(a - b) <= tol, "!=": np.abs(a - b) > tol}[self.op]

    def holds(self, values: dict[str, float]) -> bool | None:
        """Whether it holds for these base-unit values; None if a quantity in it is missing."""
        if not set(self.names) <= set(values):
            return None
        args = [values[n] for n in self.names]
        a, b = (float(side(*args)) for side in self.sides)
        tol = 1e-9 * max(abs(a), abs(b), 1e-300)
        return {"<": a < b - tol, "<=": a <= b + tol, ">": a > b + tol, ">=": a >= b - tol,
                "==": abs(a - b) <= tol, "!=": abs(a - b) > tol}[self.op]


@dataclass(frozen=True)
class Requirement:
    """A condition an option value puts on given values, and why (``requires`` in the data):
    ``stack = fsdp`` requires ``tp == 1`` because PyTorch FSDP alone is data parallel only.
    ``under`` scopes it to other options' values: ``stack = deepspeed`` requires ``pp == 1``
    under ``zero_stage`` 2 or 3 (its pipeline engine refuses ZeRO-2 and ZeRO-3); empty, always."""

    condition: Condition
    why: str
    under: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def applies(self, options: Mapping[str, str]) -> bool:
        """Whether the options' values (every option's effective value) put it in force."""
        return all(options.get(name) in values for name, values in self.under.items())

    @property
    def text(self) -> str:
        """The condition as said: ``pp == 1 with zero_stage = 2 or 3``."""
        return said_with(self.condition.text, self.under)


def said_with(condition: str, under: Mapping[str, Sequence[str]]) -> str:
    """A requirement's condition with the option values it holds under, in words: ``pp == 1 with
    zero_stage = 2 or 3`` (the condition alone when it always holds)."""
    scope = "; ".join(f"{name} = {' or '.join(values)}" for name, values in under.items())
    return condition + (f" with {scope}" if scope else "")


@dataclass
class FormulaSpec(LazyFields):
    """An equation between quantities, with where it comes from and when it applies."""

    id: str
    title: str
    equation: str
    source: str
    file: str
    when: dict[str, tuple[str, ...]] = field(default_factory=dict)
    notes: str = ""
    default_rule: bool = False  # a default, not a law: gives its left side only when not known
    algorithm: str | None = None  # name in symcalc.library.algorithms.REGISTRY: a procedure, not an equation
    from_given: tuple[str, ...] = ()   # inputs a rule or bridge may only take from given values; other names: conditions
    forward_only: bool = False         # a law never solved for its right-hand side
    # inputs a law is solved for from a given left side only when the question asks for them:
    # Young's optimal interval gives the MTBF that makes a given interval optimal when asked,
    # but a given interval is the user's choice, not evidence of the MTBF inside a goodput
    # question (a derived interval is the optimal one by definition: solved any way)
    asked_backwards: tuple[str, ...] = ()
    consequence: bool = False          # follows from other laws: a single step, only when they fall short
    approximate: bool = False          # a consequence that holds only roughly: never run into a law of its left side
    breakdown: tuple[str, ...] = ()    # lhs = the sum of these named parts, shown with their shares when derived
    reports: tuple[str, ...] = ()      # quantities an answer derived through this formula states beside it
    # derived at load
    lhs: sympy.Expr | None = LazyField()  # type: ignore[assignment]
    rhs: sympy.Expr | None = LazyField()  # type: ignore[assignment]
    display_lhs: sympy.Expr | None = LazyField()  # type: ignore[assignment]  # as written, for "the formula as cited"
    display_rhs: sympy.Expr | None = LazyField()  # type: ignore[assignment]
    latex: str = ""                          # the formula as cited, in LaTeX
    lhs_name: str | None = None              # the quantity the left side is, when it is one
    quantities: tuple[str, ...] = ()
    solvability: dict[str, str] = field(default_factory=dict)  # quantity -> explicit|symbolic|numeric|none

    def active(self, options: Mapping[str, str]) -> bool:
        return all(options.get(k) in allowed for k, allowed in self.when.items())
