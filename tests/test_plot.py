"""Plots of sweeps, rendered headless and opened again: the files are real images with the
labels, limit line and feasible region the sweep asks for."""

from __future__ import annotations

import subprocess
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from symcalc.errors import QueryError
from symcalc.query.sweep import sweep

MEMORY_JOB = dict(model="llama2-7b", hardware="h100", dp=8,
                  options={"zero_stage": "1", "recompute": "full", "attention_kernel": "flash",
                           "memory_figure": "allocated", "stack": "textbook"})   # the formulas' own count
TRAIN = dict(n_params=70e9, n_tokens="2e12 token", peak_flops="989 TFLOP/s")


def svg_texts(path) -> list[str]:
    """Every text element of an SVG (symcalc writes text as text, not paths). Mathtext labels
    come one glyph per line, with no-break spaces between words: joined back here."""
    root = ET.parse(path).getroot()
    texts = ["".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text")]
    return ["".join(line.strip(" \t") for line in t.split("\n")).replace("\xa0", " ") for t in texts]


def png(path) -> np.ndarray:
    import matplotlib.image
    return matplotlib.image.imread(str(path))


def share_of_colour(img: np.ndarray, rgb: tuple[int, int, int], tol: float = 0.08) -> float:
    target = np.array(rgb) / 255
    return float(np.mean(np.all(np.abs(img[..., :3] - target) < tol, axis=-1)))


def test_memory_line_plot_has_labels_limit_line_and_marked_points(tmp_path):
    s = sweep("total_memory_per_gpu", vary={"micro_batch_size": "1:30"}, **MEMORY_JOB)
    svg = tmp_path / "memory.svg"
    s.plot(svg)
    texts = svg_texts(svg)
    assert any("micro_batch_size" in t for t in texts)                  # x label: symbol + name
    assert any("total_memory_per_gpu [GB]" in t for t in texts)         # y label with the unit
    assert "gpu_memory = 85.52 GB" in texts                              # the H100's 81559 MiB line
    assert any(t.startswith("infeasible: total_memory_per_gpu exceeds gpu_memory") for t in texts)
    image = tmp_path / "memory.png"
    s.plot(image)
    img = png(image)
    assert img.shape[:2] == (576, 900)                                  # 7.5 x 4.8 in at 120 dpi
    # the limit line is drawn across the plot at 85.52 GB (81559 MiB): its height from the y ticks
    # in the SVG, two of them for the scale (points; 120 dpi / 72 = 5/3 pixels per point); look
    # for the grey dots there
    ns = "{http://www.w3.org/2000/svg}text"
    ticks = {float("".join(t.itertext()).strip()): float(t.get("y")) for t in ET.parse(svg).getroot().iter(ns)
             if "text-anchor: end" in t.get("style", "") and "".join(t.itertext()).strip().isdigit()}
    (v0, y0), (v1, y1) = sorted(ticks.items())[:2]
    row = round((y0 + (81559 * 2**20 / 1e9 - v0) * (y1 - y0) / (v1 - v0)) * 5 / 3)
    def dotted(rows):
        grey = np.all(np.abs(img[rows, 120:850, :3] - 0x44 / 255) < 0.1, axis=-1)
        return grey.mean(axis=1).max()
    assert dotted(slice(row - 8, row + 4)) > 0.2                         # one row of dots across the plot
    assert dotted(slice(row + 30, row + 60)) < 0.2                       # and not elsewhere
    # b = 1..15 fit and 16..30 do not (tests/test_sweep.py): a dozen points of each colour, or near
    assert share_of_colour(img, (31, 119, 180)) > 0.001                  # the feasible line (blue)
    assert share_of_colour(img, (214, 39, 40)) > 0.001                   # the points that do not fit (red)


def test_training_days_heatmap_has_a_colour_bar_and_log_axis(tmp_path):
    s = sweep("train_time", vary={"n_gpus": "64:4096:13:log", "mfu": "20%:70%:11"}, **TRAIN)
    svg = tmp_path / "days.svg"
    s.plot(svg)
    texts = svg_texts(svg)
    assert any("train_time [day]" in t for t in texts)                  # the colour bar's label
    assert any("n_gpus" in t for t in texts) and any("mfu [%]" in t for t in texts)
    assert "1,024" in texts and "4,096" in texts                        # the log n_gpus axis, in powers of two
    assert "G n_gpus" in texts and "MFU mfu [%]" in texts               # symbol, name, unit
    img = png(_png(s, tmp_path / "days.png"))
    # viridis spans dark purple (long runs) to yellow (short ones) across the grid
    assert share_of_colour(img, (253, 231, 37), tol=0.12) > 0.001
    assert share_of_colour(img, (68, 1, 84), tol=0.12) > 0.001


def test_heatmap_marks_the_region_that_does_not_fit(tmp_path):
    s = sweep("total_memory_per_gpu", vary={"micro_batch_size": "1:64:16", "dp": "1:64:7:log"},
              model="llama2-7b", hardware="h100", options={"zero_stage": "1", "recompute": "full"})
    assert 0 < s.feasible.sum() < s.feasible.size
    # dp = 1 keeps all 16 bytes per parameter (107.8 GB): nothing fits; dp = 64 at b = 1 fits
    assert not s.feasible[:, 0].any() and s.feasible[0, -1]
    svg = tmp_path / "fit.svg"
    s.plot(svg)
    texts = svg_texts(svg)
    assert any(t.startswith("infeasible (hatched)") for t in texts)
    assert any("gpu_memory 85.52" in t for t in texts)                  # the 85.52 GB contour is labelled
    img = png(_png(s, tmp_path / "fit.png"))
    assert share_of_colour(img, (214, 39, 40)) > 0.002                   # red hatching


def test_plot_needs_a_known_format_and_at_most_two_axes(tmp_path):
    s = sweep("train_time", vary={"n_gpus": "64:128:2"}, mfu=0.4, **TRAIN)
    with pytest.raises(QueryError) as e:
        s.plot(tmp_path / "x.gif")
    assert ".png" in e.value.message
    three = sweep("train_time", vary={"n_gpus": "64:128:2", "mfu": "30%,40%", "peak_flops": "989 TFLOP/s,1979 TFLOP/s"},
                  n_params=70e9, n_tokens="2e12 token")
    with pytest.raises(QueryError) as e:
        three.plot(tmp_path / "x.png")
    assert "one or two" in e.value.message


def test_cli_plot_works_headless_in_a_new_process(tmp_path):
    # no DISPLAY, a fresh interpreter: the Agg backend is chosen by symcalc itself
    out = tmp_path / "memory.png"
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "MPLBACKEND": ""}
    run = subprocess.run([sys.executable, "-m", "symcalc", "sweep", "total_memory_per_gpu", "--model", "llama2-7b",
                          "--hardware", "h100", "dp=8", "--option", "zero_stage=1", "--option", "recompute=full",
                          "--vary", "micro_batch_size=1:64", "--plot", str(out)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert run.returncode == 0, run.stderr
    assert f"wrote {out}" in run.stdout
    assert png(out).shape[:2] == (576, 900)


def _png(s, path):
    s.plot(path)
    return path


def test_plots_leave_the_session_backend_alone(tmp_path):
    """A user's notebook backend survives symcalc's plots (issue 25): the plan figure and the
    sweep plot are drawn on Figures of their own, never through matplotlib.use or pyplot."""
    import matplotlib

    import symcalc
    before = matplotlib.get_backend()
    p = symcalc.plan("llama2-7b", "h100", 8, global_batch_size=16, top=3)
    fig = p.plot(str(tmp_path / "plan.png"))
    assert fig.get_size_inches()[0] * fig.dpi <= 1200
    sweep = symcalc.sweep("mfu", {"n_params": "7e9", "tokens_per_second": "1.5e5 token/s",
                                  "peak_flops": "989 TFLOP/s"}, vary={"n_gpus": [8, 16, 32]})
    sweep.plot(str(tmp_path / "sweep.png"))
    assert matplotlib.get_backend() == before
    assert (tmp_path / "plan.png").stat().st_size > 10_000 and (tmp_path / "sweep.png").stat().st_size > 5_000


def test_a_sweep_plot_says_what_it_holds_fixed_and_labels_gpu_counts(tmp_path):
    """A figure for a design doc: the title names the presets and the values the user fixed (not
    the ones a preset filled in), and a log axis of GPU counts is ticked at the counts swept,
    written as numbers (1,024), not powers of ten. The image is 900 x 576 px (7.5 x 4.8 in at
    120 dpi)."""
    import symcalc
    s = symcalc.sweep("train_time", {"n_tokens": "15e12 token", "mfu": "40%"}, vary={"n_gpus": "256:4096:5:log"},
                      model="llama3-8b", hardware="h100")
    fig = s.plot(str(tmp_path / "t.png"))
    ax = fig.axes[0]
    title = ax.get_title()
    assert "llama3_8b, h100_sxm" in title and "n_tokens = 15e12 token" in title and "mfu = 40%" in title
    assert "gpu_memory" not in title                       # a preset's value, not the user's
    fig.canvas.draw()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["256", "512", "1,024", "2,048", "4,096"]
    img = png(tmp_path / "t.png")
    assert img.shape[:2] == (576, 900)


def test_a_title_writes_a_long_number_to_four_figures():
    # an MFU carried over from another answer (f"{mfu.value} %": 36.500116100837694 %) reads
    # 36.5 % in the title; values typed short stay as typed (15e12 token)
    import symcalc
    s = symcalc.sweep("train_time", {"n_tokens": "15e12 token", "mfu": "36.500116100837694 %"},
                      vary={"n_gpus": "256:1024:3:log"}, model="llama3-8b", hardware="h100")
    title = _sweep_title(s)
    assert "mfu = 36.5 %" in title and "n_tokens = 15e12 token" in title and "36.50011" not in title


def _sweep_title(s) -> str:
    from symcalc.render.plot import sweep_figure
    return " ".join(sweep_figure(s).axes[0].get_title().split())     # the title wraps at 80 columns


def test_a_comparison_plot_splits_both_sides_by_part(tmp_path):
    """ZeRO-1 against ZeRO-3 for Llama 2 7B on 8 H100s: each side one bar split into the memory's
    parts (model states shrink from 16 to 4 + 12/8 bytes a parameter under ZeRO-3's sharding),
    the change in the title, A on top; 900 x 384 px at 120 dpi."""
    import symcalc
    c = symcalc.compare("total_memory_per_gpu", {"tp": 1, "pp": 1, "dp": 8, "n_gpus": 8, "micro_batch_size": 1,
                                                 "global_batch_size": 64, "seq_len": "4096 token"},
                        model="llama2-7b", hardware="h100", options={"zero_stage": "1", "recompute": "full"},
                        vs_options={"zero_stage": "3"})
    fig = c.plot(str(tmp_path / "c.png"))
    ax = fig.axes[0]
    assert ax.get_title() == "total_memory_per_gpu: A zero_stage=1 against B zero_stage=3"
    assert [t.get_text() for t in ax.get_yticklabels()] == ["zero_stage=3", "zero_stage=1"]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "model_state_memory" in legend and "zero3_gather_memory" in legend and "float8_buffer_memory" not in legend
    widths = {}
    for patch, name in zip(ax.patches, [n for n in legend for _ in range(2)]):
        widths.setdefault(name, []).append(patch.get_width())
    b3, a1 = widths["model_state_memory"]                 # bars drawn B (y=0) then A (y=1)
    assert a1 == pytest.approx(c.a.values["model_state_memory"] / 1e9, rel=1e-6) and b3 < a1 / 2
    assert png(tmp_path / "c.png").shape[:2] == (384, 900)


def test_the_plan_figure_marks_where_a_hypothesis_is_planned(tmp_path):
    """A row held to the published runs (their frontier, or the model's bias on them) shows the model's step-time parts as its bar and
    a black mark at the step time it is planned at (planned_time, beyond the bar's end)."""
    import symcalc
    p = symcalc.plan("llama2-7b", "h100", 8, global_batch_size=16, top=5)
    capped = [r for r in p.rows if r.capped]
    assert capped, "this plan has rows ranked at the frontier"
    fig = p.plot(str(tmp_path / "plan.png"))
    ax = fig.axes[2]
    assert "planned (held to the published runs)" in [t.get_text() for t in ax.get_legend().get_texts()]
    marks = [c for c in ax.collections if c.get_label() == "planned (held to the published runs)"][0]
    assert sorted(float(x) for x, _ in marks.get_offsets()) == sorted(r.planned_time for r in capped)
    assert all(r.planned_time > r.step_time for r in capped)
