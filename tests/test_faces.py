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
