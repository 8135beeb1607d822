"""A plan (symcalc.planner.result.PlanResult) as text, JSON, CSV, HTML and plots.

The record is read, never recomputed: every number here was computed by the planner from the
library's formulas. Values are kept in base units in the record (s, bytes, USD) and shown in
the units a reader expects (s, GB, days, GPU-hours).
"""

from __future__ import annotations

import csv
import html
import io
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc.outfile import check_target, write_file
from symcalc.planner import dims
from symcalc.render.common import plot_text

if TYPE_CHECKING:
    from os import PathLike

    from matplotlib.figure import Figure

    from symcalc.planner.result import PlanResult, PlanRow

DAY, HOUR, GB = 86400.0, 3600.0, 1e9
PLOT_WIDTH_PX = 1200       # the plan figure's width at its dpi: a design doc's page
PLOT_ROWS = 10             # layouts in the breakdown panels
COLUMNS = ("rank", "step_band", "layout", "mem_GB", "largest_part", "step_time_s", "model_step_s", "largest_step_part", "mfu_%",
           "tokens_per_s", "days", "days_wall", "gpu_hours", "cost_USD", "cost_wall_USD", "evidence")
VERDICTS_SHOWN = 3         # rows whose verdict is spelled out under the table (JSON has every row's)


def _band_cell(r: PlanRow, above: PlanRow | None, tie_band: float) -> str:
    """The rank key's band, said once: "+0-1 %" on the first row of a band of the planned step
    time (counted from the fastest), blank on the rows that tie with the row above."""
    if r.band is None or (above is not None and above.band == r.band):
        return ""
    width = 100 * tie_band
    return f"+{r.band * width:.0f}-{(r.band + 1) * width:.0f} %"


def _cells(r: PlanRow) -> dict[str, str]:
    part = r.largest_memory_part
    step_part = max(r.step_parts.items(), key=lambda kv: kv[1]) if r.step_parts else None
    m = r.metrics
    return {
        "rank": str(r.rank), "layout": r.label(), "mem_GB": f"{r.memory / GB:.1f}",
        "largest_part": f"{part[0]} {part[1] / GB:.1f}" if part else "",
        # the step time it is ranked by (the days and cost follow it); the model's own is in its verdict
        "step_time_s": f"{(r.planned_time or r.step_time):.4g}",
        # beside it, the model's own step where the published runs hold the row slower (capped, *)
        "model_step_s": f"{r.step_time:.4g}" if r.capped else "",
        "largest_step_part": f"{step_part[0]} {100 * step_part[1] / r.step_time:.0f}%" if step_part else "",
        "mfu_%": f"{100 * m['mfu']:.1f}" if "mfu" in m else "",
        "tokens_per_s": f"{m['tokens_per_second']:,.0f}" if "tokens_per_second" in m else "",
        "days": f"{m['train_time'] / DAY:.1f}" if "train_time" in m else "",
        "gpu_hours": f"{m['gpu_hours'] / HOUR:,.0f}" if "gpu_hours" in m else "",
        "cost_USD": f"{m['total_cost']:,.0f}" if "total_cost" in m else "",
        # with failures (checkpoints, lost work, restarts): the note under the table says what it assumes
        "days_wall": f"{m['wall_clock_time'] / DAY:.1f}" if "wall_clock_time" in m else "",
        "cost_wall_USD": f"{m['total_cost_with_failures']:,.0f}" if "total_cost_with_failures" in m else "",
        # the metrics follow the planned step time: a capped row's are the frontier's (marked *)
        "evidence": (("validated" if r.verdict.get("validated") else "hypothesis") + ("*" if r.capped else "")
                     if r.verdict else ""),
    }


# the columns a narrow terminal loses first (rank, layout, memory, step time and MFU stay)
DROP_FIRST = ("largest_step_part", "largest_part", "model_step_s", "cost_wall_USD", "days_wall", "gpu_hours", "tokens_per_s",
              "cost_USD", "days", "evidence", "step_band")


def _all_cells(rows: Sequence[PlanRow], tie_band: float) -> list[dict[str, str]]:
    """Every row's cells, the rank key's band said once per band (:func:`_band_cell`)."""
    return [{**_cells(r), "step_band": _band_cell(r, rows[k - 1] if k else None, tie_band)}
            for k, r in enumerate(rows)]


def _key_line(rows: Sequence[PlanRow], tie_band: float) -> str:
    """The rank key in words, once under the table (empty when the rows are not in bands)."""
    if not tie_band or not any(r.band is not None for r in rows):
        return ""
    return (f"Ranked by the planned step time (step_time_s) in bands of {100 * tie_band:.0f} % from the fastest "
            "(step_band: the model's resolution), the simplest layout first within a band; a blank step_band "
            "ties with the row above" + ("; model_step_s: the model's own step where the published runs hold a "
                                         "row slower (*)" if any(r.capped for r in rows) else ""))


def _table(rows: Sequence[PlanRow], width: int | None = None, tie_band: float = 0.0) -> str:
    """The rows as aligned columns, the rank key said under them; with ``width``, columns of
    DROP_FIRST are left out, in that order, until the table fits, and a line under it names them."""
    cells = _all_cells(rows, tie_band)
    cols = [c for c in COLUMNS if any(x[c] for x in cells)]
    widths = {c: max(len(c), *(len(x[c]) for x in cells)) for c in cols}
    dropped = []
    for c in DROP_FIRST:
        if width is None or sum(widths[k] + 2 for k in cols) - 2 <= width:
            break
        if c in cols:
            cols.remove(c)
            dropped.append(c)
    lines = ["  ".join(c.ljust(widths[c]) for c in cols).rstrip()]
    lines += ["  ".join(x[c].ljust(widths[c]) for c in cols).rstrip() for x in cells]
    key = _key_line(rows, tie_band)
    if key:
        lines += textwrap.wrap(key, width) if width else [key]
    if dropped:
        lines.append(f"(left out to fit {width} columns: {', '.join(dropped)}; --json, --csv or a wider "
                     "terminal shows them)")
    return "\n".join(lines)


def plan_text(p: PlanResult, width: int | None = None) -> str:
    stack = f", stack {p.stack}{'' if p.stack_given else ' (the default; --stack to change)'}" if p.stack else ""
    model = p.model or "the model of the given shapes"
    out = [f"Plan: {model} on {p.n_gpus} x {p.hardware}, global batch {p.global_batch_size} x {p.seq_len} tokens, "
           f"ranked by {p.by}{stack}"]
    out.append(f"  {p.searched:,} layouts searched, {p.valid:,} valid, {p.fitting:,} fit in "
               f"{p.memory_limit / GB:.4g} GB a GPU (gpu_memory {p.gpu_memory / GB:.4g} GB - memory_headroom "
               f"{p.memory_headroom / GB:.4g} GB); {p.combos} option combinations solved, {p.seconds:.2f} s")
    if p.scan:
        g = p.goal
        out.append("")
        goal = g["raw"] if g["kind"] == "goals" else f"{g['kind']} {g['raw']}"    # several: 'deadline 90day, budget 2e7 USD'
        out.append(f"Planning backwards ({goal}): the best layout at each GPU count")
        for sc in p.scan:
            if sc.best is None:
                out.append(f"  {sc.n_gpus:>7}  nothing fits")
                continue
            m = sc.best.metrics
            # the wall clock and its cost (failures, checkpoints, restarts): what a deadline and a budget are judged on
            days = (f"{m['wall_clock_time'] / DAY:8.1f} day wall" if "wall_clock_time" in m else
                    f"{m['train_time'] / DAY:8.1f} day" if "train_time" in m else "")
            cost = (f"{m['total_cost_with_failures']:>14,.0f} USD wall" if "total_cost_with_failures" in m else
                    f"{m['total_cost']:>14,.0f} USD" if "total_cost" in m else "")
            tps = f"{m.get('tokens_per_second', 0):>12,.0f} token/s"
            mark = "  <- chosen" if sc.n_gpus == g.get("chosen_gpus") else ("  meets" if sc.meets else "")
            out.append(f"  {sc.n_gpus:>7}  {sc.best.label():<48} {sc.best.planned_time or sc.best.step_time:8.4g} s "
                       f"{tps} {days} {cost}{mark}")
    out.append("")
    if p.rows:
        out.append(_table(p.rows, width, p.tie_band))
        out += _evidence_lines(p)
        best = p.rows[0]
        if best.step_parts:
            out.append("")
            out.append(f"Step time of #1 ({best.step_time:.4g} s):  " + ", ".join(
                f"{k} {v:.3g} s" for k, v in best.step_parts.items() if v > 0))
            out.append(f"Memory of #1 ({best.memory / GB:.4g} GB):  " + ", ".join(
                f"{k} {v / GB:.3g} GB" for k, v in best.memory_parts.items()))
        out.append("")
        out += _command_lines("Re-check #1: ", best.command, width)
    else:
        out.append(p.message)
        if p.closest:
            out.append("")
            out.append(f"The best layouts at {p.n_gpus} GPUs, the closest count:" if p.scan
                       else "Closest layouts (by memory):")
            out.append(_table(p.closest, width))
    if p.rejected:
        out.append("")
        out.append("Rejected:")
        for reason, n in sorted(p.rejected.items(), key=lambda kv: -kv[1]):
            out.append(f"  {n:>12,} layouts: {reason}")
    for note in p.notes:
        out.append(f"note: {note}")
    return "\n".join(out)


def _command_lines(head: str, command: str, width: int | None) -> list[str]:
    """``head`` and a shell command, as one line, or, when that is wider than ``width``, over
    lines joined by the shell's continuation (`` \\``) at word boundaries, so the lines still
    paste into a shell as the one command (a quoted word, 'seq_len=8192 token', stays whole)."""
    import shlex
    line = head + command
    if width is None or len(line) <= width:
        return [line]
    out, cur = [], head.rstrip()
    for word in (shlex.quote(w) for w in shlex.split(command)):
        if cur.strip() and len(cur) + 1 + len(word) + 2 > width:
            out.append(cur + " \\")
            cur = "    " + word
        else:
            cur = f"{cur} {word}" if cur.strip() else cur + word
    return out + [cur]


def _evidence_lines(p: PlanResult) -> list[str]:
    """What the rows rest on: how many are validated, the frontier hypotheses are held to, the
    first rows' verdicts and the layouts grouped under them."""
    e = p.evidence
    out = [""]
    if e:
        out.append(f"Evidence: {e['validated']} of the top {e['shown']} validated by published runs "
                   f"({e['published_runs']} published {e['stack']} runs on {e['hardware']} {e['precision']})"
                   + (f"; a layout's compute is ranked no faster than the best MFU published in its regime, "
                      f"for #1 {e['frontier_class']}: {100 * e['frontier_mfu']:.1f} % ({e['frontier_run']}), the rest "
                      "of its step as modelled" + _bias_words(e) + "; * = ranked so"
                      if e.get("frontier_applied") else
                      f"; ranked by the model alone (the best MFU published for {e['frontier_class']} is "
                      f"{100 * e['frontier_mfu']:.1f} %, {e['frontier_run']})" if e.get("frontier_mfu") else
                      "; no published run of this hardware and precision to bound it"))
        if e.get("frontier_note"):
            out.append(f"  frontier: {e['frontier_note']}")
    for r in p.rows[:VERDICTS_SHOWN]:
        if r.verdict:
            said = f"  #{r.rank} {r.verdict['text']}"
            if r.capped and "model_mfu" in r.metrics:
                said += (f"; the model says {100 * r.metrics['model_mfu']:.1f} % MFU ({r.step_time:.4g} s a step), "
                         f"ranked at {100 * r.metrics['mfu']:.1f} % ({r.planned_time:.4g} s)")
            out.append(said)
        if r.equivalents:
            more = len(r.equivalents) - 4
            out.append(f"  #{r.rank} stands for {len(r.equivalents)} more of its step time band and degrees: "
                       + "; ".join(r.equivalents[:4]) + (f"; +{more} more" if more > 0 else ""))
    return out if len(out) > 1 else []


def _bias_words(e: dict) -> str:
    """How the model's error on the published runs slows the ranking, when it does."""
    bias = e.get("bias")
    if bias is None or bias >= 0:
        return ""
    runs = len(e.get("bias_runs") or ())
    return (f", after the model's error on the {runs} published {e['stack']} runs on {e['hardware']} "
            f"{e['precision']} nearest this model ({e.get('bias_class') or 'every size'}) is taken out "
            f"(it is {-100 * bias:.1f} % fast on them; a validated layout: on its own runs)")


def _row_dict(r: PlanRow) -> dict[str, Any]:
    return {"rank": r.rank, "label": r.label(), "layout": r.layout, "options": r.options,
            "step_time_s": r.step_time, "memory_per_gpu_bytes": r.memory, "fits": r.fits,
            "memory_parts_bytes": r.memory_parts, "step_parts_s": r.step_parts,
            "largest_memory_part": r.largest_memory_part[0] if r.largest_memory_part else None,
            # base units (seconds, bytes, USD) but for gpu_hours, in hours as its name says
            "metrics": {**{k: v for k, v in r.metrics.items() if k != "gpu_hours"},
                        **({"gpu_hours": r.metrics["gpu_hours"] / HOUR} if "gpu_hours" in r.metrics else {}),
                        **({"train_days": r.metrics["train_time"] / DAY} if "train_time" in r.metrics else {}),
                        **({"wall_clock_days": r.metrics["wall_clock_time"] / DAY}
                           if "wall_clock_time" in r.metrics else {})},
            "planned_step_time_s": r.planned_time, "capped_at_frontier": r.capped, "step_band": r.band,
            "verdict": r.verdict or None, "equivalents": r.equivalents,
            "command": r.command}


def plan_dict(p: PlanResult) -> dict[str, Any]:
    return {
        "model": p.model, "hardware": p.hardware, "n_gpus": p.n_gpus, "by": p.by, "tie_band": p.tie_band,
        "stack": p.stack, "stack_given": p.stack_given, "run": p.run.as_dict() if p.run else None,
        "global_batch_size": p.global_batch_size, "seq_len": p.seq_len,
        "counts": {"searched": p.searched, "valid": p.valid, "inside_bounds": p.evaluated_ok, "fitting": p.fitting},
        "rejected": p.rejected, "memory_limit_bytes": p.memory_limit, "gpu_memory_bytes": p.gpu_memory,
        "memory_headroom_bytes": p.memory_headroom, "option_combinations": p.combos, "seconds": p.seconds,
        "given": p.given, "searched_options": p.searched_options,
        "rows": [_row_dict(r) for r in p.rows], "message": p.message, "evidence": p.evidence,
        "closest": [_row_dict(r) for r in p.closest],
        "goal": p.goal,
        "scan": [{"n_gpus": sc.n_gpus, "fitting": sc.fitting, "searched": sc.searched, "meets": sc.meets,
                  "best": _row_dict(sc.best) if sc.best else None} for sc in p.scan],
    }


def plan_csv(p: PlanResult, path: str | PathLike[str]) -> None:
    path = check_target(path, "--csv")
    buf = io.StringIO()
    w = csv.writer(buf)
    # the layout's columns as space.toml declares its dimensions, the options as the plan searched them
    layout_cols = [*dims.csv_columns()]
    option_cols = list(p.rows[0].options) if p.rows else []    # the searched options and the schedule, in order
    header = ["rank", *(d.column for d in layout_cols), "n_gpus", *option_cols,
              "step_time [s]", "total_memory_per_gpu [GB]",
              "largest_memory_part", "tokens_per_second [token/s]", "mfu [%]", "train_time [day]",
              "gpu_hours [hour]", "total_cost [USD]", "wall_clock_time [day]", "total_cost_with_failures [USD]",
              "planned_step_time [s]", "validated", "model_mfu [%]"]
    w.writerow(header)
    for r in p.rows:
        m, lay, o = r.metrics, r.layout, r.options
        part = r.largest_memory_part
        w.writerow([r.rank, *(lay.get(d.name, d.default) for d in layout_cols), lay["n_gpus"],
                    *(o[k] for k in option_cols),
                    f"{r.step_time:.9g}", f"{r.memory / GB:.9g}", part[0] if part else "",
                    _g(m.get("tokens_per_second")), _g(m.get("mfu"), 100), _g(m.get("train_time"), 1 / DAY),
                    _g(m.get("gpu_hours"), 1 / HOUR), _g(m.get("total_cost")), _g(m.get("wall_clock_time"), 1 / DAY),
                    _g(m.get("total_cost_with_failures")), f"{r.planned_time:.9g}",
                    "" if not r.verdict else str(bool(r.verdict.get("validated"))).lower(),
                    _g(m.get("model_mfu"), 100)])
    write_file(path, buf.getvalue(), "--csv")


def _g(v: float | None, scale: float = 1.0) -> str:
    return "" if v is None else f"{v * scale:.9g}"


def plan_html(p: PlanResult) -> str:
    cells = _all_cells(p.rows or p.closest, p.tie_band)
    cols = [c for c in COLUMNS if any(x[c] for x in cells)]
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(x[c])}</td>" for c in cols) + "</tr>" for x in cells)
    caption = html.escape(f"{p.model} on {p.n_gpus} x {p.hardware}: {p.searched:,} searched, {p.valid:,} valid, "
                          f"{p.fitting:,} fit")
    msg = "".join(f"<p>{html.escape(t)}</p>" for t in (_key_line(p.rows, p.tie_band), p.message) if t)
    return f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{msg}"


def plan_plot(p: PlanResult, path: str | PathLike[str] | None = None, dpi: int = 110) -> Figure:
    """Three panels: the fitting layouts' step time against memory per GPU with the Pareto
    front (fastest for its memory), the top layouts' memory breakdown and their step-time
    breakdown as stacked bars. Returns the matplotlib Figure: to a file, drawn without pyplot
    (the session's backend and figures are left as they were); with no path, on pyplot's
    current figure, shown inline in a notebook."""
    from symcalc.render.plot import inline_figures, new_figure, plot_target, save_figure  # on use: when drawn
    path = plot_target(path)
    import matplotlib
    # at most 1200 px wide (a design doc's page): the front on top, the two breakdowns below it,
    # one horizontal bar a layout, labelled with the layout itself
    inline_figures()
    # to a file, a figure of its own (the session's backend left as it was); with no path,
    # pyplot's current figure, as Sweep.plot() draws (render/plot.py)
    fig = new_figure(path, (PLOT_WIDTH_PX / dpi, 8.2))
    grid = fig.add_gridspec(2, 2, height_ratios=(1, 1.25))
    axes = [fig.add_subplot(grid[0, :]), fig.add_subplot(grid[1, 0]), fig.add_subplot(grid[1, 1])]
    ax = axes[0]
    st, mem = np.asarray(p.pareto.get("step_time", [])), np.asarray(p.pareto.get("memory", [])) / GB
    if len(st):
        ax.scatter(mem, st, s=4, alpha=0.3, color="#7f7f7f", label=f"{len(st):,} fitting layouts")
        order = np.argsort(mem, kind="stable")
        front = np.minimum.accumulate(st[order])
        keep = np.r_[True, front[1:] < front[:-1]]
        ax.step(mem[order][keep], front[keep], where="post", color="#d62728", label="Pareto front")
        ax.axvline(p.memory_limit / GB, color="#444444", ls="--", lw=1, label="memory limit")
        ax.set_yscale("log")
        ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)   # beside, not over
    ax.set_xlabel("total_memory_per_gpu [GB]")
    ax.set_ylabel("step_time [s]")
    ax.set_title("step time against memory")
    rows = (p.rows or p.closest)[:PLOT_ROWS]
    labels = [f"#{r.rank} {r.label()}" for r in rows]
    y = np.arange(len(rows))[::-1]          # #1 on top
    for ax, attr, scale, unit, title in ((axes[1], "memory_parts", GB, "GB", "memory per GPU"),
                                         (axes[2], "step_parts", 1.0, "s", "step time")):
        left = np.zeros(len(rows))
        names = []
        for r in rows:
            # a part that is 0 in every layout shown (no CP, no FP8) has no bar: not in the legend
            names += [n for n, v in getattr(r, attr).items() if n not in names and v != 0]
        # one colour per part (the default cycle repeats after ten: two parts would look alike)
        colours = matplotlib.colormaps["tab20"](np.arange(len(names)) % 20)
        for n, colour in zip(names, colours):
            vals = np.array([getattr(r, attr).get(n, 0.0) / scale for r in rows])
            ax.barh(y, vals, left=left, label=n, color=colour)
            left += vals
        if attr == "memory_parts":
            ax.axvline(p.memory_limit / GB, color="#444444", ls="--", lw=1, label="memory limit")
        capped = [i for i, r in enumerate(rows) if r.capped]
        if attr == "step_parts" and capped:     # the step time a row is ranked by: held to the frontier and the bias of the published runs
            ax.scatter([rows[i].planned_time for i in capped], y[capped], marker="|", s=260, color="black",
                       zorder=3, label="planned (held to the published runs)")
        ax.set_yticks(y, labels if attr == "memory_parts" else [f"#{r.rank}" for r in rows], fontsize=7)
        ax.set_xlabel(unit)
        ax.set_title(f"{title} of the top layouts", fontsize=10)
        if names:       # below the bars, not over them
            ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, frameon=False)
    fig.suptitle(plot_text(f"{p.model or 'the model of the given shapes'} on {p.n_gpus} x {p.hardware}"),
                 fontsize=11)
    save_figure(fig, path, dpi)
    return fig
