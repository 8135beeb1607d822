"""A sweep as text for the terminal: a table for one axis, a matrix for two, a summary beyond.

Large sweeps are sampled (first, last, evenly between, and the points where feasibility
changes); the whole grid goes to --csv or --json.
"""

from __future__ import annotations

import csv
import io
import math
from typing import TYPE_CHECKING, BinaryIO

import numpy as np

from symcalc.outfile import write_file
from symcalc.units.format import fmt

if TYPE_CHECKING:
    from os import PathLike

    from symcalc.query.sweep import Sweep

MAX_ROWS = 25
MAX_COLUMNS = 10
MARK = "*"


def sweep_text(sweep: Sweep) -> str:
    """The sweep's headline, its values (sampled when large), and why points are marked."""
    axes = " x ".join(f"{a.name} ({len(a.base)}{', log' if a.log else ''})" for a in sweep.axes)
    unit = f" [{sweep.unit}]" if sweep.unit else ""
    lines = [f"{sweep.target}{unit} over {axes}: {sweep.values.size} points, "
             f"{int(sweep.feasible.sum())} feasible"]
    # the range of what can be run: an infeasible point's value (a micro-batch rounded to 0)
    # is shown in the table with its mark, not in the headline
    finite = sweep.values[np.isfinite(sweep.values) & np.asarray(sweep.feasible, dtype=bool)]
    if finite.size:
        lines.append(f"range {fmt(finite.min())} to {fmt(finite.max())}{' ' + sweep.unit if sweep.unit else ''}"
                     f"{' (feasible points)' if not sweep.feasible.all() else ''}")
    lines += [f"assuming {a['name']} = {a['value']} ({a['source']})" for a in sweep.assumptions]
    if sweep.capacity:
        lines.append(f"must fit in {sweep.capacity[0]} = {fmt(sweep.capacity[1])} {sweep.unit}".rstrip())
    lines.append("")
    if len(sweep.axes) == 1:
        lines += _table(sweep)
    elif len(sweep.axes) == 2:
        lines += _matrix(sweep)
    if not sweep.feasible.all():
        lines += ["", f"{MARK} infeasible: " + "; ".join(sweep.reasons)]
    return "\n".join(lines)


def _sample(n: int, keep: np.ndarray | None = None, limit: int = MAX_ROWS) -> list[int]:
    """Indices to show out of n: all when few, else evenly spaced plus the ``keep`` ones."""
    if n <= limit:
        return list(range(n))
    idx = set(np.linspace(0, n - 1, limit - 4).round().astype(int).tolist())
    if keep is not None:
        idx |= set(np.nonzero(keep)[0].tolist()[:4])
    return sorted(idx)


def _cell(value: float, ok: bool) -> str:
    return ("-" if not np.isfinite(value) else fmt(value)) + (MARK if not ok else "")


def _table(sweep: Sweep) -> list[str]:
    axis = sweep.axes[0]
    x, y, ok = axis.values, sweep.values, sweep.feasible
    changes = np.zeros(len(x), dtype=bool)
    changes[1:] = ok[1:] != ok[:-1]
    changes[:-1] |= changes[1:]
    rows = [(fmt(x[i]), _cell(y[i], ok[i])) for i in _sample(len(x), changes)]
    head = (f"{axis.name}{' [' + axis.unit + ']' if axis.unit else ''}",
            f"{sweep.target}{' [' + sweep.unit + ']' if sweep.unit else ''}")
    w0 = max(len(head[0]), *(len(r[0]) for r in rows))
    w1 = max(len(head[1]), *(len(r[1]) for r in rows))
    return [f"{head[0]:>{w0}}  {head[1]:>{w1}}"] + [f"{a:>{w0}}  {b:>{w1}}" for a, b in rows]


def _matrix(sweep: Sweep) -> list[str]:
    ax0, ax1 = sweep.axes
    r_idx = _sample(len(ax0.base))
    c_idx = _sample(len(ax1.base), limit=MAX_COLUMNS)
    corner = f"{ax0.name} \\ {ax1.name}"
    cols = [fmt(ax1.values[j]) for j in c_idx]
    body = [[fmt(ax0.values[i])] + [_cell(sweep.values[i, j], sweep.feasible[i, j]) for j in c_idx] for i in r_idx]
    widths = [max(len(corner), *(len(r[0]) for r in body))]
    widths += [max(len(cols[k]), *(len(r[k + 1]) for r in body)) for k in range(len(cols))]
    out = ["  ".join(f"{t:>{w}}" for t, w in zip([corner] + cols, widths))]
    out += ["  ".join(f"{t:>{w}}" for t, w in zip(r, widths)) for r in body]
    units = [f"{a.name} in {a.unit}" for a in sweep.axes if a.unit] + ([f"values in {sweep.unit}"] if sweep.unit else [])
    if len(r_idx) < len(ax0.base) or len(c_idx) < len(ax1.base):
        units.append("sampled: --csv or --json for every point")
    if units:
        out.append("(" + "; ".join(units) + ")")
    return out


def sweep_csv(sweep: Sweep, path: str | PathLike[str]) -> None:
    """``sweep`` in long format, one row per grid point, units in the header, written
    atomically (symcalc.outfile): an existing file is replaced only by a complete one."""
    def column(name: str, unit: str) -> str:
        return f"{name} [{unit}]" if unit else name
    head = [column(a.name, a.unit) for a in sweep.axes] + [column(sweep.target, sweep.unit), "feasible"]

    def rows(fh: BinaryIO) -> None:
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        w = csv.writer(text)
        w.writerow(head)
        for *xs, y, ok in sweep.rows():
            w.writerow([repr(x) if not x.is_integer() else int(x) for x in xs]
                       + ["" if not math.isfinite(y) else repr(y), int(ok)])
        text.flush()
        text.detach()
    write_file(path, rows, "--csv")
