"""The one registry of output formats: a format's name -> the function that renders a record.

Records (Result, Comparison, Sweep, PlanResult, Calibration) offer ``.text()``, ``.latex()``,
``.plot()`` ... for convenience; each goes through :func:`render`, so the query layer names a
format, never a renderer module, and a renderer is imported only when its format is first used
(matplotlib for a plot, nothing for a cached text answer). Adding a format is one line here.

It imports nothing of symcalc (the renderers are named by string), so it sits in the support
layer: a record of any layer (query's Result, the planner's PlanResult) uses it without an
import up the layers.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# format -> "module:function"; each function takes the record first
FORMATS = {
    "text": "symcalc.render.text:render_text",
    "latex": "symcalc.render.latex:render_latex",
    "latex_equation": "symcalc.render.latex:result_equation",
    "markdown": "symcalc.render.markdown:render_markdown",
    "json": "symcalc.render.jsonout:result_dict",
    "comparison_text": "symcalc.render.compare:comparison_text",
    "comparison_json": "symcalc.render.compare:comparison_dict",
    "comparison_headline": "symcalc.render.compare:headline",
    "sweep_plot": "symcalc.render.plot:plot_sweep",
    "sweep_csv": "symcalc.render.sweep_text:sweep_csv",
    "result_html": "symcalc.render.html:result_html",
    "sweep_html": "symcalc.render.html:sweep_html",
    "comparison_html": "symcalc.render.html:comparison_html",
    "check_html": "symcalc.render.html:check_html",
    "calibration_html": "symcalc.render.html:calibration_html",
    "comparison_plot": "symcalc.render.compare:comparison_plot",
    "finding": "symcalc.render.findings:sentence",
    "finding_json": "symcalc.render.findings:finding_dict",
    "plan_text": "symcalc.render.plan:plan_text",
    "plan_json": "symcalc.render.plan:plan_dict",
    "plan_csv": "symcalc.render.plan:plan_csv",
    "plan_html": "symcalc.render.plan:plan_html",
    "plan_plot": "symcalc.render.plan:plan_plot",
    "calibration_text": "symcalc.render.calibration:calibration_text",
    "calibration_json": "symcalc.render.calibration:calibration_dict",
}


@dataclass(frozen=True)
class OutputFlag:
    """A command-line flag that writes a record in one registered format to FILE: the commands
    read their file-output flags from OUTPUT_FLAGS, so a format gets its flag here, once."""

    flag: str                    # --latex
    dest: str                    # the command's parameter: latex_file
    format: str                  # a key of FORMATS
    help: str
    text: bool = True            # the format returns text the command writes ('-': stdout); else it writes FILE
    options: tuple[tuple[str, Any], ...] = ()     # keyword arguments of the format


# record kind -> its file outputs, in the order a command writes them
OUTPUT_FLAGS: dict[str, tuple[OutputFlag, ...]] = {
    "result": (
        OutputFlag("--latex", "latex_file", "latex", "Write the derivation as a LaTeX document ('-' for stdout).",
                   options=(("standalone", True),)),
        OutputFlag("--markdown", "markdown_file", "markdown", "Write the derivation as Markdown ('-' for stdout)."),
    ),
    "sweep": (
        OutputFlag("--csv", "csv_file", "sweep_csv", "Write every point as CSV (one row per point).", text=False),
        OutputFlag("--plot", "plot_file", "sweep_plot", "Draw the sweep to FILE (.png, .svg or .pdf).", text=False),
    ),
    "comparison": (
        OutputFlag("--plot", "plot_file", "comparison_plot", "Draw both sides as bars, split by the target's parts "
                   "when it has a breakdown (.png/.svg/.pdf).", text=False),
    ),
}


def renderer(name: str) -> Callable[..., Any]:
    """The function of format ``name`` (imported on first use). Raises KeyError for an unknown
    format."""
    module, _, function = FORMATS[name].partition(":")
    return getattr(importlib.import_module(module), function)


def render(name: str, record: object, *args: Any, **kwargs: Any) -> Any:
    """``record`` in format ``name``."""
    return renderer(name)(record, *args, **kwargs)


class Rendered:
    """``.text()``, ``.as_dict()`` and ``.json()`` of a record, through the registry: the record
    names its two formats (``TEXT_FORMAT``, ``JSON_FORMAT``) and holds no rendering code."""

    TEXT_FORMAT = "text"
    JSON_FORMAT = "json"

    def text(self) -> str:
        return render(self.TEXT_FORMAT, self)

    def as_dict(self) -> dict[str, Any]:
        return render(self.JSON_FORMAT, self)

    def json(self, indent: int | None = 2) -> str:
        return json.dumps(self.as_dict(), indent=indent)
