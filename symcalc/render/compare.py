"""A scenario comparison as text (what ``symcalc compare`` prints) and as a JSON-ready dict."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np

from symcalc.render.common import plot_text, was_rounded
from symcalc.render.findings import finding_dict
from symcalc.render.jsonout import _plain, result_dict
from symcalc.render.plot import inline_figures, new_figure, plot_target, save_figure
from symcalc.units.format import fmt, with_unit

if TYPE_CHECKING:
    from os import PathLike

    from matplotlib.figure import Figure

    from symcalc.query.compare import Comparison
    from symcalc.query.results import Result


def _value(result: Result) -> str:
    """One side's answer as shown by solve: ``94  (exact 93.62, rounded up)`` for whole numbers."""
    line = with_unit(result.value, result.unit)
    if was_rounded(result):
        line += f"  (exact {with_unit(result.exact, result.unit, digits=6)}, rounded {result.rounding})"
    return line


def _signed(x: float | np.ndarray, unit: str = "") -> str:
    """``+13.78 GB`` / ``-13.78 GB``: a change reads better with its sign."""
    text = with_unit(x, unit)
    return f"+{text}" if np.ndim(x) == 0 and float(x) > 0 else text


def headline(cmp: Comparison) -> str:
    """``model_state_memory: 15.53 GB (zero_stage=2) vs 1.75 GB (zero_stage=3)``."""
    return (f"{cmp.target}: {with_unit(cmp.a.value, cmp.unit)} ({cmp.label_a}) "
            f"vs {with_unit(cmp.b.value, cmp.unit)} ({cmp.label_b})")


def comparison_text(cmp: Comparison) -> str:
    """Headline, both sides with their labels, B - A, B / A with the change in per cent, what
    the sides share, notes and out-of-bounds values (warnings are the caller's to print)."""
    rows = [("A", _value(cmp.a), cmp.label_a), ("B", _value(cmp.b), cmp.label_b)]
    width = max(len(value) for _, value, _ in rows)
    lines = [headline(cmp), ""]
    lines += [f"  {side}: {cmp.target} = {value:<{width}}  [{label}]" for side, value, label in rows]
    if cmp.difference is not None:
        lines.append(f"  difference B - A: {_signed(cmp.difference.magnitude, cmp.unit)}")
    if cmp.ratio is not None:
        # a number or an array whenever the ratio is defined (Comparison.percent_change)
        change = cast("float | np.ndarray", cmp.percent_change)
        shown = f"{_signed(change)} %" if np.ndim(change) == 0 else f"{fmt(change)} %"
        lines.append(f"  ratio B / A: {fmt(cmp.ratio.magnitude)}  (change {shown})")
    for note in cmp.notes:
        lines.append(f"  {note}")
    lines += _fallback_lines(cmp)
    # a given value read as its counterpart (symcalc.query.rescope), said once with its sides
    read = [cmp.a.readings, cmp.b.readings]
    for said in dict.fromkeys([*read[0], *read[1]]):
        sides = "both sides" if all(said in r for r in read) else "side A only" if said in read[0] else "side B only"
        lines.append(f"  reading ({sides}): {said}")
    for d in cmp.preset_values:
        lines.append(f"  from presets: {d.shown('a')} (A), {d.shown('b')} (B)")
    if cmp.same:
        lines.append("")
        lines.append("Same on both sides: " + ", ".join(f"{k}={v}" for k, v in cmp.same.items()))
    for side, v in cmp.violations:
        lines.append(f"OUT OF BOUNDS ({side}): {v}")
    return "\n".join(lines)


def _fallback_lines(cmp: Comparison) -> list[str]:
    """The option fallbacks the sides took (their default could not answer: query.question.pose),
    each once, saying which sides: a fallback on one side only compares two figures."""
    taken = [{a["name"]: a for a in r.assumptions if a["kind"] == "fallback"} for r in (cmp.a, cmp.b)]
    out = []
    for name in dict.fromkeys([*taken[0], *taken[1]]):
        a = taken[0].get(name) or taken[1][name]
        sides = "both sides" if all(name in t for t in taken) else "side A only" if name in taken[0] else "side B only"
        out.append(f"  assuming {a['name']} = {a['value']} on {sides} ({a['source']})")
    return out


def comparison_dict(cmp: Comparison) -> dict[str, Any]:
    """target, unit, a/b (label, value, exact, result), difference, ratio, percent_change,
    differs, same, notes, warnings, out_of_bounds, findings (the records behind both): plain types only."""
    def side(result: Result, label: str) -> dict[str, Any]:
        return {"label": label, "value": _plain(result.value),
                "exact": _plain(result.exact) if result.exact is not None else None,
                "result": result_dict(result)}
    diff, ratio, change = cmp.difference, cmp.ratio, cmp.percent_change
    return {
        "target": cmp.target,
        "unit": cmp.unit,
        "a": side(cmp.a, cmp.label_a),
        "b": side(cmp.b, cmp.label_b),
        "difference": None if diff is None else _plain(diff.magnitude),
        "ratio": None if ratio is None else _plain(ratio.magnitude),
        "percent_change": None if change is None else _plain(change),
        "differs": [{"name": d.name, "kind": d.kind, "a": d.a, "b": d.b} for d in cmp.differences],
        "same": dict(cmp.same),
        "preset_values": [{"name": d.name, "a": d.a, "b": d.b} for d in cmp.preset_values],
        "notes": list(cmp.notes),
        "warnings": {"a": list(cmp.a.warnings), "b": list(cmp.b.warnings)},
        "readings": {"a": list(cmp.a.readings), "b": list(cmp.b.readings)},
        "out_of_bounds": {"a": list(cmp.a.violations), "b": list(cmp.b.violations)},
        "findings": {"a": [finding_dict(f) for f in cmp.a.findings], "b": [finding_dict(f) for f in cmp.b.findings]},
    }


def comparison_plot(c: Comparison, path: str | PathLike[str] | None = None, dpi: int = 120) -> Figure:
    """The two sides as horizontal bars, each split into the target's breakdown when it has
    one (memory by part, step time by part), the change in the title; returns the Figure
    (drawn without pyplot: the session's backend is left as it was). With no ``path``, drawn
    on pyplot's current figure and written nowhere (symcalc.render.plot.new_figure)."""
    target = plot_target(path)
    inline_figures()
    fig = new_figure(target, (7.5, 3.2))
    ax = fig.add_subplot()
    sides = [("B", c.b), ("A", c.a)]          # A on top
    parts = [_parts(r) for _, r in sides]
    names = list(dict.fromkeys(n for p in parts for n, v in p.items() if v))    # a part 0 on both sides: no bar
    if names:
        import matplotlib  # on use: matplotlib only when a comparison is drawn
        colours = matplotlib.colormaps["tab20"](np.arange(len(names)) % 20)
        left = np.zeros(2)
        for name, colour in zip(names, colours):
            vals = np.array([p.get(name, 0.0) for p in parts])
            ax.barh([0, 1], vals, left=left, color=colour, label=name)
            left += vals
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, frameon=False)
    else:
        ax.barh([0, 1], [float(np.asarray(r.value, dtype=float).ravel()[0]) for _, r in sides], color="#1f77b4")
    ax.set_yticks([0, 1], [plot_text(c.label("b")), plot_text(c.label("a"))], fontsize=8)
    ax.set_xlabel(plot_text(f"{c.target} [{c.a.unit}]" if c.a.unit else c.target))
    ax.set_title(plot_text(f"{c.target}: A {c.label('a')} against B {c.label('b')}"), fontsize=10)
    save_figure(fig, target, dpi)
    return fig


def _parts(r: Result) -> dict[str, float]:
    """The breakdown's innermost parts in the answer's unit ({} when it has none)."""
    bd = r.breakdown
    out: dict[str, float] = {}

    def walk(parts: list[dict[str, Any]]) -> None:
        for p in parts:
            if p.get("parts"):
                walk(p["parts"])
            else:
                out[p["name"]] = float(p["value"])
    if bd and bd.get("parts"):
        walk(bd["parts"])
    return out
