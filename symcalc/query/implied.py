"""Options that the given values imply: fewer KV heads than heads is grouped-query attention.

An option says which formulas hold (multi-head or grouped-query attention, dense or mixture of
experts); a given value may already say it. Counting Llama 3 405B's parameters from shapes
that include ``n_kv_heads = 8`` with the multi-head formula would silently give 469B instead of
405B, so the option data declares which values imply which option value
(``implied_by = [{ value = "gqa", when = "n_kv_heads < n_heads" }]`` in options.toml), and
this module applies it. Precedence, highest first: an option given explicitly, one the user's
own values imply, a preset's options, one the preset's values imply, a default another option's
value sets (a training stack's), the option's own default. An explicit option that the user's
own values contradict is an error naming both; an option given where another option makes it
mean nothing (its ``only_with``) is said, not refused.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from symcalc.errors import BadOptionValueError
from symcalc.findings import Finding
from symcalc.query.values import GivenValue
from symcalc.units.format import with_unit


@dataclass(frozen=True)
class Implication:
    """An option value implied by given values: which, and by what (for the answer's notes)."""

    option: str
    value: str
    condition: str                  # the declared condition, e.g. "n_kv_heads < n_heads"
    compatible: tuple[str, ...]     # other values that hold under it too
    values: tuple[str, ...]         # "n_kv_heads = 8", "n_heads = 128"
    from_preset: bool               # every value in the condition came from a preset
    names: tuple[str, ...] = ()     # the quantities the condition reads: used, by deciding it

    def reason(self) -> str:
        return f"{self.option}={self.value}, since {self.condition} ({', '.join(self.values)})"


def implied_options(library, knowns: Mapping[str, GivenValue]) -> list[Implication]:
    """The option values the known values imply, one per option (its first condition that
    holds), in the library's order. Conditions over arrays are not applied. O(conditions)."""
    scalars = {k: float(v.magnitude) for k, v in knowns.items()
               if not isinstance(v.magnitude, str) and np.ndim(v.magnitude) == 0}
    out = []
    for opt in library.options.values():
        for value, cond in opt.implied_by:
            if cond.holds(scalars):
                names = sorted(cond.names)
                shown = tuple(f"{n} = {with_unit(scalars[n] / library.quantities[n].factor, library.quantities[n].display_unit)}"
                              for n in names)
                out.append(Implication(opt.name, value, cond.text, cond.compatible, shown,
                                       from_preset=all(knowns[n].origin for n in names), names=tuple(names)))
                break
    return out


@dataclass(frozen=True)
class Resolved:
    """Every option's effective value, and what decided the values that are not given or defaults."""

    values: dict[str, str]
    implied: list[Implication]                  # the implications that decided a value
    set_by: dict[str, tuple[str, str]]          # option -> (option, value) whose ``options`` set it


def resolve_options(library, explicit: Mapping[str, object], preset_options: Mapping[str, str],
                    knowns: Mapping[str, GivenValue], *, without: frozenset = frozenset()) -> Resolved:
    """Every option's effective value, the implications that decided one, and the defaults that
    other options' values set.

    Precedence, highest first: an explicit option; one the user's own values imply; a preset's
    options; one the preset's values imply; the default another option's value sets
    (``options = {...}`` of a training stack's value); the option's own default (below which
    only its fallback stands, where the default cannot answer: :func:`symcalc.query.question.pose`). ``without``
    names options whose ``options`` defaults are not applied (a stack the question does not
    reach: see :mod:`symcalc.query.stacks`).

    Returns
    -------
    Resolved

    Raises
    ------
    BadOptionValueError
        An explicit option contradicts what the user's own given values imply
        (``--option attention=mha`` with ``n_kv_heads=8 n_heads=128``).
    """
    given = library.option_values(explicit)          # validates the explicit ones
    explicit_keys = set(explicit)
    chosen = dict(preset_options)
    before = library.option_values({**chosen, **dict(explicit)})
    before.update({k: v for k, (_, v) in _set_defaults(library, before, set(chosen) | explicit_keys,
                                                       without).items()})
    used = []
    for imp in implied_options(library, knowns):
        holds = (imp.value, *imp.compatible)
        if imp.option in explicit_keys:
            if given[imp.option] not in holds and not imp.from_preset:
                raise BadOptionValueError(
                    f"{imp.option}={given[imp.option]} was given, but {imp.condition} "
                    f"({', '.join(imp.values)}) means {imp.option}={imp.value}: drop the option or change "
                    "the values")
            continue
        if imp.from_preset and imp.option in preset_options:
            continue                                  # the preset says it itself
        if imp.option in chosen and chosen[imp.option] in imp.compatible:
            continue                                  # the preset's value holds under it too
        if before[imp.option] != imp.value:
            used.append(imp)
        chosen[imp.option] = imp.value
    values = library.option_values({**chosen, **dict(explicit)})
    set_defaults = _set_defaults(library, values, set(chosen) | explicit_keys, without)
    values.update({k: v for k, (_, v) in set_defaults.items()})
    return Resolved(values, used, {k: setter for k, (setter, _) in set_defaults.items()})


def _set_defaults(library, values: Mapping[str, str], decided: set, without: frozenset
                  ) -> dict[str, tuple[tuple[str, str], str]]:
    """option -> ((setting option, its value), the default it sets) for every option not in
    ``decided`` that an option value under ``values`` sets (``options = {...}`` in the data),
    leaving out the options in ``without``."""
    out = {}
    for name in library.stacks:
        if name in without:
            continue
        for other, value in library.options[name].option_defaults.get(values[name], {}).items():
            if other not in decided:
                out[other] = ((name, values[name]), value)
    return out


def idle_options(library, values: Mapping[str, str], explicit: Iterable[str]) -> list[Finding]:
    """A finding for each option the question gives that means nothing under the others: its
    ``only_with`` (data) names values of another option the question does not have (an FP8
    recipe or FP8 states without FP8 GEMMs, LoRA targets without LoRA). O(options given)."""
    out = []
    for name in explicit:
        opt = library.options.get(name)
        for other, allowed in (opt.only_with.items() if opt else ()):
            if values.get(other) not in allowed:
                out.append(Finding("option_idle", None, {"option": name, "value": values.get(name), "needs": other,
                                                          "allowed": list(allowed), "actual": values.get(other)}))
                break
    return out
