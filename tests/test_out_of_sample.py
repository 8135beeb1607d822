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
    by_id = dict(zip((q["id"] for q in qs), err))
    assert np.abs(err).max() < 0.12, by_id
    assert np.abs(err).mean() < 0.05, by_id
    # What the data show: under full recomputation the model is slow on every row (the 2022 code
    # is faster per layer than the 2021 code it is calibrated on: calibration/out_of_sample.toml,
    # end), +2 to +8 %. With sequence parallelism and selective recomputation it is fast where the
    # model is small: the model's saving over full recomputation (4 GEMM passes to 3, the norms
    # and dropouts split tp ways) is larger than the paper's at every size (22B: the paper's
    # 1.42 -> 1.10 s saves 22.5 %, the model 28.7 %; 175B to 1T: 23-24 % against 25.5-27.7 %),
    # most at 22B, whose row comes out about 6 % fast (-6.1 % at the time of writing); the
    # larger SP + selective rows stay within 2 % below to 7 % above.
    full = [e for q, e in zip(qs, err) if q["options"]["recompute"] == "full"]
    assert len(full) == 4 and min(full) > 0, by_id
    assert -0.08 < by_id["k22_22B_sp_sel"] < -0.04, by_id
    assert min(e for i, e in by_id.items() if i != "k22_22B_sp_sel") > -0.03, by_id
    for size in ("22B", "175B", "530B", "1T"):
        # the model's full -> SP + selective saving beats the paper's: sp_sel leans faster than full
        assert by_id[f"k22_{size}_sp_sel"] < by_id[f"k22_{size}_full"], by_id


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
