"""Plots of sweeps, drawn with matplotlib's non-interactive Agg backend (works headless).

A plot with a path is drawn on a Figure of its own (never pyplot's) and written; with no path it
is drawn on pyplot's current figure and returned, the pandas habit: shown inline in a notebook,
and the session's backend is left as it was (see :func:`new_figure`).

One axis: a line of the target over the axis, log scales where the sweep is log, a horizontal
line at the capacity the target must fit in (the GPU's memory), infeasible points drawn apart
in red. Two axes: a heatmap with a labelled colour bar, the infeasible region hatched and its
border drawn. Labels are the quantities' symbols and units.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from symcalc.errors import QueryError
from symcalc.outfile import check_target, write_file
from symcalc.render.common import plot_text
from symcalc.units.format import fmt

if TYPE_CHECKING:
    from os import PathLike

    from collections.abc import Callable

    from matplotlib.axes import Axes
    from matplotlib.axis import Axis as MplAxis
    from matplotlib.figure import Figure

    from symcalc.library.registry import Library
    from symcalc.query.sweep import Axis, Sweep

FORMATS = (".png", ".svg", ".pdf")
INFEASIBLE = "#d62728"
CAPACITY = "#444444"


def plot_sweep(sweep: Sweep, path: str | PathLike[str] | None = None, *, title: str | None = None,
               dpi: int = 120) -> Figure:
    """Draw ``sweep`` (one or two axes) into ``path``; the format follows the extension. The
    file is written atomically (symcalc.outfile): a failed plot leaves an existing file as it was.
    Returns the matplotlib Figure, drawn without pyplot: the session's backend is unchanged.
    With no ``path``, nothing is written: the sweep is drawn on pyplot's current figure (see
    :func:`new_figure`), which is returned.

    Raises
    ------
    QueryError
        The extension is not an image format, or the sweep has more than two axes.
    OutputError
        The file cannot be written.
    """
    target = plot_target(path)
    if len(sweep.axes) not in (1, 2):
        raise QueryError(f"a plot shows one or two varied quantities; this sweep has {len(sweep.axes)}")
    import matplotlib  # on use: matplotlib only when a sweep is drawn

    fig = sweep_figure(sweep, title=title, fig=new_figure(target, SWEEP_SIZE))
    with matplotlib.rc_context({"svg.fonttype": "none"}):   # SVG text stays text: searchable, selectable
        save_figure(fig, target, dpi)
    return fig


SWEEP_SIZE = (7.5, 4.8)     # inches


def new_figure(path: Path | None, size: tuple[float, float]) -> Figure:
    """The figure a plot is drawn on. For a file, a Figure of its own, made without pyplot (the
    session's backend and figures are untouched). With no path (``.plot()`` in a notebook),
    pyplot's current figure, as pandas draws: it shows inline, ``plt.savefig`` and
    ``plt.title`` reach it, and when the current figure already holds a drawing a new one is
    made rather than drawing over it. pyplot is imported then, which keeps the backend the
    session has (Jupyter's inline backend; MPLBACKEND; else matplotlib's own choice)."""
    if path is not None:
        from matplotlib.figure import Figure  # on use: matplotlib only when something is drawn
        return Figure(figsize=size, layout="constrained")
    import matplotlib.pyplot as plt  # on use: only for a figure drawn with no file

    fig = plt.gcf()
    if fig.axes or fig.texts or fig.images:
        fig = plt.figure(figsize=size, layout="constrained")
    else:
        fig.set_size_inches(size)
        fig.set_layout_engine("constrained")
    fig._symcalc_pyplot = True      # type: ignore[attr-defined]  # see _shown_once
    _shown_once()
    return fig


def _shown_once() -> None:
    """In IPython, a symcalc figure that pyplot holds is shown once: Jupyter's inline backend
    draws every open pyplot figure after the cell, so a figure shown as the cell's value
    (``sweep.plot()`` as its last line) is let go from pyplot as it is shown, and not drawn a
    second time; one drawn earlier in the cell is shown by the backend, as pandas' ``.plot()``
    is. Every other Figure is shown by the formatter that was there."""
    import sys
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None     # type: ignore[attr-defined]
    if shell is None:
        return
    from matplotlib.figure import Figure  # on use: matplotlib only when something is drawn

    png = shell.display_formatter.formatters["image/png"]
    try:
        previous = png.lookup_by_type(Figure)
    except KeyError:
        return
    if getattr(previous, "symcalc_shown_once", False):
        return

    def show(fig: Figure) -> Any:
        shown = previous(fig)
        if getattr(fig, "_symcalc_pyplot", False):
            import matplotlib.pyplot as plt  # on use: a figure drawn with no file has imported it
            plt.close(fig)
        return shown
    show.symcalc_shown_once = True      # type: ignore[attr-defined]
    png.for_type(Figure, show)


@overload
def plot_target(path: str | PathLike[str]) -> Path: ...
@overload
def plot_target(path: None) -> None: ...
def plot_target(path: str | PathLike[str] | None) -> Path | None:
    """The file a figure is drawn into, checked (symcalc.outfile.check_target) and refused
    unless its extension is an image format of FORMATS; None (draw, write nothing) for None."""
    if path is None:
        return None
    target = check_target(path, "--plot")
    if target.suffix.lower() not in FORMATS:
        raise QueryError(f"cannot plot to {target.name}: the file must end in {', '.join(FORMATS)}")
    return target


def save_figure(fig: Figure, target: str | PathLike[str] | None, dpi: int) -> None:
    """Write ``fig`` into ``target`` (from plot_target) atomically, in the format its extension
    names; nothing for None (a plot drawn with no path)."""
    if target is None:
        return
    target = Path(target)
    write_file(target, lambda fh: fig.savefig(fh, dpi=dpi, format=target.suffix.lower()[1:]), "--plot")


def inline_figures() -> None:
    """In IPython or Jupyter, show a returned matplotlib Figure as a PNG (the formatter
    ``%matplotlib inline`` would register), without selecting a backend or importing pyplot:
    a symcalc plot shows inline, and the user's own figures are as they were. Elsewhere, or
    when a PNG formatter for Figures is already there, nothing is done."""
    import sys
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None     # type: ignore[attr-defined]
    if shell is None:
        return
    png = shell.display_formatter.formatters["image/png"]
    if png.lookup_by_type is None or _has_figure_formatter(png):
        return
    from IPython.core.pylabtools import print_figure  # on use: only inside IPython
    png.for_type_by_name("matplotlib.figure", "Figure", lambda fig: print_figure(fig, "png"))


def _has_figure_formatter(formatter: Any) -> bool:
    try:
        from matplotlib.figure import Figure  # on use: matplotlib only when a sweep is drawn
        formatter.lookup_by_type(Figure)
        return True
    except KeyError:
        return False


def sweep_figure(sweep: Sweep, *, title: str | None = None, fig: Figure | None = None) -> Figure:
    """The sweep drawn on ``fig``, by default a Figure of its own (one axis: a line; two: a
    heatmap); nothing written, the session's backend left as it was."""
    if len(sweep.axes) not in (1, 2):
        raise QueryError(f"a plot shows one or two varied quantities; this sweep has {len(sweep.axes)}")
    from matplotlib.figure import Figure   # on use: matplotlib only when a sweep is drawn

    inline_figures()
    fig = fig if fig is not None else Figure(figsize=SWEEP_SIZE, layout="constrained")
    ax = fig.add_subplot()
    if len(sweep.axes) == 1:
        _line(ax, sweep)
    else:
        _heatmap(fig, ax, sweep)
    ax.set_title(plot_text(title or _title(sweep)), fontsize=11)
    return fig


def label(library: Library, name: str, unit: str) -> str:
    """'$M_{total}$ total_memory_per_gpu [GB]': the symbol (when mathtext can draw it), the
    name, the unit."""
    q = library.quantities[name]
    symbol = f"${q.latex}$ " if _drawable(q.latex) else ""
    return f"{symbol}{name}" + (f" [{unit}]" if unit else "")


def _drawable(tex: str) -> bool:
    from matplotlib.mathtext import MathTextParser
    try:
        MathTextParser("path").parse(f"${tex}$")
    except (ValueError, RuntimeError):
        return False
    return True


TITLE_GIVEN = 5     # the user's own fixed values named in a title, at most


def _title(sweep: Sweep) -> str:
    """What the plot varies, and what it holds fixed: the presets, the options off their
    defaults, and the values the user gave (not those a preset filled in), so that a figure
    pasted into a design doc says what it is of."""
    names = " and ".join(a.name for a in sweep.axes)
    presets = ", ".join(sweep.result.presets[k] for k in ("model", "hardware") if k in sweep.result.presets)
    lib = sweep.result.library
    options = ", ".join(f"{k}={v}" for k, v in sweep.result.options.items()
                        if k in lib.options and lib.options[k].default != v)
    varied = {a.name for a in sweep.axes}
    own = [f"{k} = {_short_numbers(g.text.strip())}" for k, g in sweep.result.given.items()
           if not g.origin and k not in varied]
    fixed = ", ".join(own[:TITLE_GIVEN]) + (f", +{len(own) - TITLE_GIVEN} more" if len(own) > TITLE_GIVEN else "")
    context = "; ".join(x for x in (presets, options, fixed) if x)
    return textwrap.fill(f"{sweep.target} over {names}" + (f" ({context})" if context else ""), 80)


_LONG_NUMBER = re.compile(r"(?<![\w.])\d+\.\d{5,}(?:[eE][+-]?\d+)?")


def _short_numbers(text: str) -> str:
    """A given value as a title shows it: a number typed (or computed) with many digits,
    36.500116100837694 %, written to 4 significant figures, 36.5 %; the rest as typed."""
    return _LONG_NUMBER.sub(lambda m: f"{float(m.group()):.4g}", text)


def _whole_ticks(axis: Axis, x: np.ndarray, set_ticks: Callable[[np.ndarray], object],
                 formatter_axis: MplAxis) -> None:
    """On a log axis of whole numbers (GPU counts), ticks at the values swept (up to 12) or at
    powers of two, written 1,024 rather than 10^3."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
    if not (axis.log and axis.whole):
        return
    if x.size <= 12:
        set_ticks(x)
    else:
        formatter_axis.set_major_locator(LogLocator(base=2))
    formatter_axis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    formatter_axis.set_minor_formatter(NullFormatter())


def _line(ax: Axes, sweep: Sweep) -> None:
    lib = sweep.result.library
    axis = sweep.axes[0]
    x, y, ok = axis.values, sweep.values, sweep.feasible
    marker = "o" if axis.whole and x.size <= 64 else None
    ax.plot(x, np.where(ok, y, np.nan), color="#1f77b4", marker=marker, markersize=3.5, linewidth=1.6,
            label=sweep.target)
    if not ok.all():
        ax.plot(x, np.where(ok, np.nan, y), color=INFEASIBLE, marker=marker or ".", markersize=3.5,
                linewidth=1.0, linestyle="--", label="infeasible: " + "; ".join(sweep.reasons)[:80])
    if sweep.capacity:
        name, value = sweep.capacity
        ax.axhline(value, color=CAPACITY, linestyle=":", linewidth=1.4,
                   label=f"{name} = {_num(value)} {sweep.unit}".strip())
    ax.set_xlabel(label(lib, axis.name, axis.unit))
    ax.set_ylabel(label(lib, sweep.target, sweep.unit))
    if axis.log:
        ax.set_xscale("log")
        _whole_ticks(axis, x, ax.set_xticks, ax.xaxis)
    finite = y[np.isfinite(y)]
    if axis.log and finite.size and finite.min() > 0 and finite.max() / finite.min() > 100:
        ax.set_yscale("log")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="best")


def _heatmap(fig: Figure, ax: Axes, sweep: Sweep) -> None:
    from matplotlib.colors import LogNorm
    lib = sweep.result.library
    ax0, ax1 = sweep.axes
    x, y = ax1.values, ax0.values          # first axis on the vertical: rows of the grid
    z = np.ma.masked_invalid(sweep.values)
    positive = z.count() and z.min() > 0
    norm = LogNorm() if positive and z.max() / z.min() > 100 else None
    mesh = ax.pcolormesh(_edges(x, ax1.log), _edges(y, ax0.log), z, shading="flat", cmap="viridis", norm=norm)
    bar = fig.colorbar(mesh, ax=ax)
    bar.set_label(label(lib, sweep.target, sweep.unit))
    if min(z.shape) >= 3 and z.count() > 8:
        # a few labelled iso-lines: reading "where is it 30 days?" off a colour is guesswork
        from matplotlib.ticker import LogLocator, MaxNLocator
        lo, hi = float(z.min()), float(z.max())
        locator = LogLocator(subs=(1, 2, 5)) if norm is not None else MaxNLocator(6)
        levels = [v for v in locator.tick_values(lo, hi) if lo < v < hi]
        if levels:
            iso = ax.contour(x, y, z.filled(np.nan), levels=levels, colors="white", linewidths=0.7, alpha=0.8)
            ax.clabel(iso, fmt=lambda v: _num(v), fontsize=7)
        bar.ax.tick_params(labelsize=8)
    if not sweep.feasible.all():
        bad = (~sweep.feasible).astype(float)
        ax.pcolor(_edges(x, ax1.log), _edges(y, ax0.log), np.ma.masked_equal(bad, 0), hatch="///",
                  facecolor="none", edgecolor=INFEASIBLE, linewidth=0, alpha=0.9)
        if min(z.shape) >= 2:
            ax.contour(x, y, sweep.feasible.astype(float), levels=[0.5], colors=INFEASIBLE, linewidths=1.5)
        ax.plot([], [], color=INFEASIBLE, label="infeasible (hatched): " + "; ".join(sweep.reasons)[:70])
        ax.legend(fontsize=8, loc="upper right")
    if sweep.capacity and min(z.shape) >= 2 and np.isfinite(z.filled(np.nan)).any():
        cs = ax.contour(x, y, z.filled(np.nan), levels=[sweep.capacity[1]], colors="black", linewidths=1.6,
                        linestyles="--")
        ax.clabel(cs, fmt=f"{sweep.capacity[0]} %.4g", fontsize=7)
    ax.set_xlabel(label(lib, ax1.name, ax1.unit))
    ax.set_ylabel(label(lib, ax0.name, ax0.unit))
    if ax1.log:
        ax.set_xscale("log")
        _whole_ticks(ax1, x, ax.set_xticks, ax.xaxis)
    if ax0.log:
        ax.set_yscale("log")
        _whole_ticks(ax0, y, ax.set_yticks, ax.yaxis)


def _edges(v: np.ndarray, log: bool) -> np.ndarray:
    """Cell edges around centres ``v`` (midpoints; geometric midpoints on a log axis)."""
    v = np.asarray(v, dtype=float)
    if v.size == 1:
        return np.array([v[0] * 0.9, v[0] * 1.1]) if log else np.array([v[0] - 0.5, v[0] + 0.5])
    if log:
        lv = np.log(v)
        mid = (lv[1:] + lv[:-1]) / 2
        return np.exp(np.concatenate([[2 * lv[0] - mid[0]], mid, [2 * lv[-1] - mid[-1]]]))
    mid = (v[1:] + v[:-1]) / 2
    return np.concatenate([[2 * v[0] - mid[0]], mid, [2 * v[-1] - mid[-1]]])


def _num(x: float) -> str:
    return fmt(x)
