"""The planner's dimensions as the run declares them (``formulas/planner/space.toml``): what a
layout's label, its CSV and JSON columns, the questions a row asks, the grouping of equivalent
rows, the simplest-first order and the match against published regimes read of each one.

No code names a dimension: a new one (expert-tensor parallelism, say) is a ``[dimensions.X]``
table there, its place in the ``[layout]`` lists, and the one formula or rule that gives it a
meaning; the search, the rows, the label, the CSV, the JSON and the validation follow.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from symcalc.query.layout_rules import space_data


@dataclass(frozen=True)
class Dimension:
    """One declared dimension (see space.toml's comment above ``[dimensions.tp]``)."""

    name: str
    kind: str                      # degree, schedule or batch
    label: str                     # its part of a layout's label
    label_when: str = "always"     # or "above_one"
    column: str = ""               # its CSV column (its name unless declared)
    default: int | None = None     # its value where the run has none
    needs: str | None = None       # a fact the run must have for the dimension to exist (n_experts)
    validation: str | None = None  # its key among the published runs' degrees
    given_when: str = "always"     # or "above_one"
    rest: bool = False             # follows from the others (dp: n_gpus over the rest)
    schedule_option: str | None = None

    def shown(self, value: int) -> bool:
        return self.label_when != "above_one" or value > 1


@functools.cache
def dimensions() -> tuple[Dimension, ...]:
    """The declared dimensions, in the order they are crossed."""
    out = []
    for name, spec in space_data()["dimensions"].items():
        out.append(Dimension(name=name, kind=spec["kind"], label=spec["label"],
                             label_when=spec.get("label_when", "always"), column=spec.get("column", name),
                             default=spec.get("default"), needs=spec.get("needs"),
                             validation=spec.get("validation"), given_when=spec.get("given_when", "always"),
                             rest="rest_of" in spec, schedule_option=spec.get("schedule_option")))
    return tuple(out)


def dimension(name: str) -> Dimension:
    return next(d for d in dimensions() if d.name == name)


def names() -> tuple[str, ...]:
    return tuple(d.name for d in dimensions())


def schedule() -> Dimension:
    """The dimension whose value above 1 is the interleaved pipeline schedule (virtual_stages)."""
    return next(d for d in dimensions() if d.kind == "schedule")


def rest() -> Dimension:
    """The dimension that follows from the others (dp: n_gpus over their product)."""
    return next(d for d in dimensions() if d.rest)


def batch() -> Dimension:
    """The micro-batch dimension (kind batch)."""
    return next(d for d in dimensions() if d.kind == "batch")


def grouped() -> tuple[str, ...]:
    """The columns of a row's group: layouts the same in these within a band are one row."""
    return tuple(d.name for d in dimensions() if d.kind in ("degree", "schedule"))


def parallel() -> tuple[str, ...]:
    """The degrees counted as a parallel dimension when above 1 (dp, the rest, is not)."""
    return tuple(d.name for d in dimensions() if d.kind == "degree" and not d.rest)


def validated() -> dict[str, str]:
    """Dimension -> its key among the published runs' degrees, for those matched on."""
    return {d.name: d.validation for d in dimensions() if d.validation}


def layout_table() -> dict:
    return space_data()["layout"]


def present(moe: bool) -> tuple[str, ...]:
    """The dimensions a run has: one that ``needs`` a fact (n_experts, the one such fact so far:
    a run with experts is ``Question.moe``) exists in a run with experts only."""
    return tuple(d.name for d in dimensions() if d.needs is None or moe)


def interleaved(columns: Mapping, i: int | slice = slice(None)) -> Any:
    """Whether the schedule dimension's value is above 1 (the second schedule), per layout or at ``i``."""
    return columns[schedule().name][i] > 1


def given_names(has: set[str], layout: Mapping[str, int]) -> tuple[str, ...]:
    """The layout quantities given to a row's questions, in the declared order: ``has`` the
    dimensions the run has, ``layout`` the row (a dimension given only above 1 left out at 1)."""
    dims = {d.name: d for d in dimensions()}
    out = []
    for name in layout_table()["given"]:
        d = dims.get(name)
        if d is not None and (name not in has or (d.given_when == "above_one" and int(layout[name]) <= 1)):
            continue
        out.append(name)
    return tuple(out)


def label(layout: Mapping[str, int], options: Mapping[str, str]) -> str:
    """A layout's label (tp8 pp2 v2 cp1 dp4 mbs1 zero1 selective sp), as ``[layout]`` declares it."""
    dims = {d.name: d for d in dimensions()}
    spell = layout_table()["option_labels"]
    parts = []
    for name in layout_table()["label"]:
        if name in dims:
            d = dims[name]
            value = layout.get(name, d.default)
            if value is not None and d.shown(int(value)):
                parts.append(f"{d.label}{value}")
        elif name in options:
            how = spell[name]
            part = how.format(options[name]) if isinstance(how, str) else how[str(options[name])]
            if part:
                parts.append(part)
    return " ".join(parts)


def simplest_order(columns: Mapping, searched: Mapping[str, tuple[str, ...]]) -> tuple:
    """The simplest-first keys of ``columns`` (most significant first): how many parallel
    dimensions a layout uses (ZeRO-3 counting as one), then the ``simplest`` columns (a
    searched option's column holds the index of its value in ``searched``)."""
    table = layout_table()
    count = sum((columns[d] > 1).astype("int64") for d in parallel())
    for option, value in table.get("parallel_option", {}).items():
        if option in searched and value in searched[option]:
            count = count + (columns[option] == searched[option].index(value))
    return (count, *(columns[c] for c in table["simplest"]))


def csv_columns() -> tuple[Dimension, ...]:
    """The dimensions as CSV columns, in the declared order."""
    return dimensions()
