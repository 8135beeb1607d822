"""The notebook faces of issue 40: every result type displays as HTML (not a dataclass dump),
an error shows its one useful line (the traceback behind SYMCALC_TRACEBACK=1), and calibration
is a Python call that agrees with the command line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

import symcalc

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "calibration" / "examples" / "h100_fsdp_runs.toml"


def _cells(html: str) -> list[str]:
    return [re.sub("<[^>]+>", "", c) for c in re.findall(r"<td[^>]*>(.*?)</td>", html)]


def test_a_check_shows_as_a_table_of_its_relations_with_the_ring_figure():
    # the seed document's claim: a 70B gradient AllReduce over 128 GPUs at 50 GB/s in 2.8 s; a
    # ring moves 2 (N-1)/N x 140 GB (bf16 gradients) per GPU: 2 x 127/128 x 140e9 / 50e9 = 5.556 s
    c = symcalc.check(dict(n_params=70e9, n_gpus=128, allreduce_time="2.8 s", link_bandwidth="50 GB/s"))
    html = c._repr_html_()
    cells = _cells(html)
    assert cells[:5] == ["FAIL", "allreduce_time", "2800 ms", "5556 ms", "+49.6%"]   # 1 - 2.8/5.556
    assert "1 relation checked: 1 disagrees" in html
    assert len(repr(c)) < 100 and "1 disagreeing" in repr(c)      # not the 5 kB dataclass dump


def test_calibrate_is_a_python_call_that_agrees_with_the_command_line_and_writes_only_when_asked(cli, tmp_path):
    cal = symcalc.calibrate(RUNS)
    assert cal.profile_path is None and not list(tmp_path.iterdir())
    run = cli("calibrate", str(RUNS), "-o", str(tmp_path / "cli.toml"), "--json")
    assert run.code == 0
    from_cli = json.loads(run.out)
    ours = cal.as_dict()
    assert [r["predicted_after_s"] for r in ours["runs"]] == [r["predicted_after_s"] for r in from_cli["runs"]]
    assert ours["mean_abs_error"] == from_cli["mean_abs_error"]
    # the notebook's table: one row a run (7 in the example file) and the mean row
    html = cal._repr_html_()
    rows = re.findall(r"<tr>(.*?)</tr>", html)
    assert sum("mpt" in r or "llama" in r or "mean |error|" in r for r in rows) == len(ours["runs"]) + 1
    assert f"{ours['mean_abs_error']['after']:.1%}" in html
    written = symcalc.calibrate(RUNS, output=tmp_path / "ours.toml")
    assert (tmp_path / "ours.toml").read_text() == (tmp_path / "cli.toml").read_text()
    assert written.profile_path == str(tmp_path / "ours.toml")


def test_calibrate_never_writes_over_its_runs_file(tmp_path):
    runs = tmp_path / "runs.toml"
    runs.write_text(RUNS.read_text())
    with pytest.raises(symcalc.SymcalcError, match="never writes over its measurements"):
        symcalc.calibrate(runs, output=runs)
    assert runs.read_text() == RUNS.read_text()


def test_an_error_renders_as_its_one_line_in_ipython_and_the_traceback_behind_a_flag(monkeypatch):
    monkeypatch.delenv("SYMCALC_TRACEBACK", raising=False)
    with pytest.raises(symcalc.UnknownNameError) as info:
        symcalc.solve("step_tme", n_params=7e9)
    shown = info.value._render_traceback_()
    assert len(shown) == 1 and shown[0].startswith("UnknownNameError: ") and "step_time" in shown[0]
    monkeypatch.setenv("SYMCALC_TRACEBACK", "1")
    full = info.value._render_traceback_()
    assert full[0] == "Traceback (most recent call last):" and full[-1].endswith(shown[0]) and len(full) > 3


LINE = ("symcalc.sweep('train_time', dict(n_params=8e9, n_tokens='1e12 token', mfu=0.4, peak_flops='989 TFLOP/s'), "
        "vary={'n_gpus': [64, 128, 256]})")


def test_a_sweep_plot_with_no_path_draws_on_pyplots_current_figure_and_writes_nothing(tmp_path, monkeypatch):
    import matplotlib
    import matplotlib.pyplot as plt
    monkeypatch.chdir(tmp_path)
    backend = matplotlib.get_backend()
    plt.close("all")
    sweep = eval(LINE, {"symcalc": symcalc})
    fig = sweep.plot()
    try:
        assert fig is plt.gcf() and not list(tmp_path.iterdir()) and matplotlib.get_backend() == backend
        x, y = fig.axes[0].lines[0].get_data()
        # train_time = 6 N D / (n_gpus x mfu x peak): 6 x 8e9 x 1e12 / (64 x 0.4 x 989e12) s = 21.94 days
        assert list(x) == [64, 128, 256]
        assert y[0] * {"s": 1, "h": 3600, "day": 86400}[sweep.unit] / 86400 == pytest.approx(6 * 8e9 * 1e12 / (64 * 0.4 * 989e12) / 86400, rel=1e-3)
        again = sweep.plot()        # the current figure holds a drawing: a new one, not drawn over
        assert again is not fig and again is plt.gcf() and len(fig.axes[0].lines) == len(again.axes[0].lines)
        written = sweep.plot(tmp_path / "s.png")       # a path still writes, on a figure of its own
        assert (tmp_path / "s.png").stat().st_size > 5_000 and written is not plt.gcf()
    finally:
        plt.close("all")


def test_a_comparison_plot_with_no_path_draws_on_the_current_figure(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt
    monkeypatch.chdir(tmp_path)
    plt.close("all")
    # A on 64 GPUs, B on 128: the same work, so B takes half as long (bars 2:1)
    c = symcalc.compare("train_time", dict(n_params=8e9, n_tokens="1e12 token", mfu=0.4, peak_flops="989 TFLOP/s",
                                           n_gpus=64), vs={"n_gpus": 128})
    try:
        fig = c.plot()
        assert fig is plt.gcf() and not list(tmp_path.iterdir())
        widths = sorted(p.get_width() for p in fig.axes[0].patches)
        assert widths[1] == pytest.approx(2 * widths[0])
    finally:
        plt.close("all")


def test_in_a_notebook_a_sweep_plot_shows_one_inline_image_and_an_error_its_one_line(tmp_path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("PYTHONPATH", str(ROOT))        # the kernel imports this checkout's symcalc
    monkeypatch.delenv("SYMCALC_TRACEBACK", raising=False)
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(s) for s in (
        "import matplotlib, symcalc\nbefore = matplotlib.get_backend()",
        f"{LINE}.plot()",
        "print(before == matplotlib.get_backend(), before)",
        "symcalc.solve('step_tme', n_params=7e9)")]
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    images = [o for o in nb.cells[1].outputs if "image/png" in o.get("data", {})]
    assert len(images) == 1 and len(images[0].data["image/png"]) > 5_000      # inline, once
    assert nb.cells[2].outputs[0].text.startswith("True module://matplotlib_inline")
    assert not list(tmp_path.iterdir())                                        # no file written
    (error,) = nb.cells[3].outputs
    assert error.output_type == "error" and len(error.traceback) == 1
    assert error.traceback[0].startswith("UnknownNameError: unknown quantity 'step_tme'")


def test_a_plan_plot_with_no_path_returns_its_figure_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    plan = symcalc.plan("llama3-8b", "h100", 64, global_batch_size=512, options={"stack": "fsdp"}, top=3)
    fig = plan.plot()
    assert not list(tmp_path.iterdir())
    # the three panels: step time against memory, and the top rows' memory and step-time breakdowns
    assert [ax.get_title() for ax in fig.axes[:3]] == ["step time against memory", "memory per GPU of the top layouts",
                                                       "step time of the top layouts"]
    assert len(fig.axes[1].get_yticklabels()) == len(plan.rows)


def test_the_plan_json_gpu_hours_holds_hours():
    # a row's GPU-hours are its training time (s) x its GPUs / 3,600: the JSON field says hours
    import symcalc
    p = symcalc.plan("llama3-8b", "h100", 8, top=1)
    row = json.loads(p.json())["rows"][0]
    m = row["metrics"]
    assert m["gpu_hours"] == pytest.approx(m["train_time"] * row["layout"]["n_gpus"] / 3600, rel=1e-9)


def test_plan_ranks_read_as_ranks_in_the_terminal_and_the_json(cli, monkeypatch):
    """Llama 3 70B on 64 H100s (the issue's plan): the rows are ordered by one stated key, the
    planned step time's band of 1 % counted from the fastest, shown as the step_band column once
    per band; each row's band, recomputed here from its planned step time (floor(log(t / t_min) /
    log 1.01)), is the one shown, the bands never go down, and no two rows are alike."""
    import json
    import math
    run = cli("plan", "--model", "llama3-70b", "--hardware", "h100", "--gpus", "64", "--json")
    assert run.code == 0, run.err
    out = json.loads(run.out)
    rows, width = out["rows"], out["tie_band"]
    assert width == 0.01 and len(rows) == 10
    fastest = min(r["planned_step_time_s"] for r in rows)
    for r in rows:
        assert r["step_band"] == math.floor(math.log(r["planned_step_time_s"] / fastest) / math.log1p(width) + 1e-9)
    bands = [r["step_band"] for r in rows]
    assert bands == sorted(bands) and bands[0] == 0
    assert len({r["label"] for r in rows}) == len(rows)
    monkeypatch.delenv("COLUMNS", raising=False)        # not a terminal: the table whole
    text = cli("plan", "--model", "llama3-70b", "--hardware", "h100", "--gpus", "64")
    lines = text.out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("rank  step_band"))
    shown = [line[6:17].strip() for line in lines[head + 1:head + 11]]
    said = [f"+{b}-{b + 1} %" if k == 0 or bands[k - 1] != b else "" for k, b in enumerate(bands)]
    assert shown == said
    assert "Ranked by the planned step time (step_time_s) in bands of 1 % from the fastest" in text.out
