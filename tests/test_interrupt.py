"""Ctrl-C at any moment of a ``symcalc`` run: status 130, one line, no traceback, no partial file.

The first second and a half of a run is spent importing sympy, numpy and pint; an interrupt
there used to print a traceback from the middle of an import."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")


def interrupted_run(tmp_path, delay: float, *args: str) -> subprocess.CompletedProcess:
    """Start ``python -m symcalc ARGS`` and press Ctrl-C after ``delay`` seconds."""
    env = dict(os.environ, SYMCALC_CACHE_DIR=str(tmp_path / "cache"))     # a cold start: the longest
    proc = subprocess.Popen([sys.executable, "-m", "symcalc", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(delay)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize("delay", [0.35, 0.6, 0.9, 1.4])
def test_ctrl_c_during_start_up_is_one_line_and_status_130(tmp_path, delay):
    r = interrupted_run(tmp_path, delay, "solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s",
                        "n_gpus=64", "peak_flops=1979 TFLOP/s", "--latex", "out.tex")
    if r.returncode == 0:       # a fast machine answered first: then the file is whole
        assert (tmp_path / "out.tex").read_text().rstrip().endswith("\\end{document}")
        return
    assert (r.returncode, r.stdout, r.stderr) == (130, "", "error: interrupted\n")
    assert not [p for p in os.listdir(tmp_path) if p != "cache"]       # no file, not even a temporary one


def test_ctrl_c_under_json_is_a_json_error(tmp_path):
    # a question with an answer, so that "answered before the Ctrl-C" (status 0, a whole JSON
    # answer; a fast machine with a cold cache can finish within the 0.5 s) is told apart from
    # the interrupt (an underdetermined question's refusal, status 2, could not be)
    r = interrupted_run(tmp_path, 0.5, "solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s",
                        "n_gpus=64", "peak_flops=1979 TFLOP/s", "--json")
    if r.returncode == 0:
        assert json.loads(r.stdout)["target"] == "mfu"
        return
    assert r.returncode == 130 and r.stderr == ""
    assert r.stdout == '{"error": {"kind": "interrupted", "message": "interrupted"}}\n'
