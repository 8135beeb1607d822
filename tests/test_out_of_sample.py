"""Out of sample: published runs the calibration never saw, predicted from their configuration.

calibration/out_of_sample.toml holds the runs and their sources; calibration/out_of_sample.py
predicts them (``--quick``: the Korthikanti et al. 2022 rows, what this test checks). The bar of
issue 11 is a mean |error| of at most 5 % and none above 12 %.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "calibration" / "out_of_sample.py"


@pytest.fixture(scope="module")
def oos():
    spec = importlib.util.spec_from_file_location("out_of_sample", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_korthikanti_2022_within_the_bar(oos):
    """The eight rows of Korthikanti et al. 2022, Table 5 (A100; full recomputation, and sequence
    parallelism with selective recomputation; TP 8, PP up to 64, interleaving), plus its 530B run
    at 8-way data parallelism: each within 12 %, the mean within 5 %."""
    qs = oos.questions(oos.load(), oos.QUICK_GROUPS)
    assert len(qs) == 9
    err = oos.scored_errors(qs, oos.predict(qs))
    assert np.abs(err).max() < 0.12, dict(zip((q["id"] for q in qs), err))
    assert np.abs(err).mean() < 0.05
    # the model leans slow on these (the 2022 code is about 6 % faster per layer than the 2021
    # code it is calibrated on: calibration/out_of_sample.toml, end); the one fast row is the 22B
    # with sequence parallelism, -3.0 %.
    assert err.min() > -0.05


def test_rows_have_sources(oos):
    data = oos.load()
    for run in data["runs"]:
        group = data["groups"][run["group"]]
        assert group["source"] and run["printed"] and run["derived"], run["id"]
        assert ("published_step_time_s" in run) != ("published_tflops_per_gpu" in run), run["id"]
        if "published_tflops_per_gpu" in run:
            assert group["flops"] in oos.FLOPS, run["id"]
        if not run.get("scored", True):
            assert run["why_not_scored"], run["id"]
