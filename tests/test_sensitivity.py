"""solve(..., sensitivity=True) and `symcalc solve --sensitivity`: the elasticity
d ln(target) / d ln(input) of the answer to each given value, against expectations by hand."""

from __future__ import annotations

import math

import pytest

import symcalc
from symcalc.query.sensitivity import LOG_STEP

SIX_ND = dict(n_params=70e9, n_tokens="2e12 token", n_gpus=1024, mfu="40%", peak_flops="989 TFLOP/s")
SIX_ND_CLI = ["train_time", "n_params=70e9", "n_tokens=2e12 token", "n_gpus=1024", "mfu=40%",
              "peak_flops=989 TFLOP/s", "--sensitivity"]

GPT3 = dict(d_model=12288, n_layers=96, n_heads=96, vocab_size=51200, seq_len="2048 token", tp=8, pp=8, dp=16,
            n_gpus=1024, global_batch_size=1536, micro_batch_size=1)
GPT3_OPTIONS = {"stack": "megatron-lm-2021", "recompute": "full"}


def test_six_nd_elasticities_are_the_exponents_exactly():
    """train_time = 6 N D / (n_gpus mfu peak_flops): a power law, whose elasticities are its
    exponents, found from the closed form, exactly."""
    r = symcalc.solve("train_time", SIX_ND, sensitivity=True)
    assert r.sensitivity == {"n_params": 1.0, "n_tokens": 1.0, "n_gpus": -1.0, "mfu": -1.0, "peak_flops": -1.0}
    assert [e.method for e in r.elasticities] == ["symbolic"] * 5
    assert r.sensitivity["n_gpus"] == -1 and r.sensitivity["n_params"] == 1    # exactly, not approximately


def test_not_asked_means_no_sensitivity():
    r = symcalc.solve("train_time", SIX_ND)
    assert r.elasticities is None and r.sensitivity == {}
    assert '"sensitivity"' not in r.json()
    assert "Sensitivity" not in r.text()


def test_a_sum_by_hand():
    """bubble_fraction = (p - 1) / (m + p - 1): d ln / d ln p = p/(p-1) - p/(m+p-1) = 4/3 - 4/11,
    d ln / d ln m = -m/(m+p-1) = -8/11; sorted by magnitude."""
    r = symcalc.solve("bubble_fraction", pp=4, n_microbatches=8, sensitivity=True)
    assert list(r.sensitivity) == ["pp", "n_microbatches"]
    assert r.sensitivity["pp"] == pytest.approx(4 / 3 - 4 / 11, rel=1e-12)
    assert r.sensitivity["n_microbatches"] == pytest.approx(-8 / 11, rel=1e-12)


def test_step_time_global_batch_size_by_hand():
    """The GPT-3 step (tests/test_step_time.py): compute, TP collectives and p2p sends are
    n_microbatches = global_batch_size / (dp x micro_batch_size) micro-batch times, the bubble, the
    gradient AllReduce and the optimizer step do not depend on the batch. So d ln step_time /
    d ln global_batch_size = (compute + TP + p2p) / step_time, by hand from the breakdown; found
    numerically (the step-time model's closed form keeps its intermediates), to the accuracy of
    a central difference with step LOG_STEP."""
    r = symcalc.solve("step_time", GPT3, hardware="a100-80gb", options=GPT3_OPTIONS, sensitivity=True)
    v = r.values
    share = (v["step_compute_time"] + v["step_tp_comm_time"] + v["step_p2p_time"]) / v["step_time"]
    e = {x.name: x for x in r.elasticities}
    assert e["global_batch_size"].elasticity == pytest.approx(share, rel=1e-6)
    assert e["global_batch_size"].method == "numeric"
    assert set(e) == set(GPT3)          # only the values given, not the preset's
    mags = [abs(x.elasticity) for x in r.elasticities]
    assert mags == sorted(mags, reverse=True)
    assert LOG_STEP == 1e-4


def test_a_value_not_used_gets_zero():
    """dp does not enter the memory of one GPU here (the answer says it is not used)."""
    r = symcalc.solve("model_state_memory", n_params=7e9, dp=64, tp=2, sensitivity=True)
    assert r.sensitivity["dp"] == 0
    assert r.sensitivity["n_params"] == 1


def test_a_given_target_is_its_own_elasticity():
    r = symcalc.solve("n_gpus", n_gpus=8, sensitivity=True)
    assert r.sensitivity == {"n_gpus": 1.0}


def test_a_non_finite_elasticity_is_reported_not_raised(cli):
    """pp = 1: no bubble, bubble_fraction = 0, and its logarithm has no derivative."""
    r = symcalc.solve("bubble_fraction", pp=1, n_microbatches=8, sensitivity=True)
    assert all(math.isnan(x) for x in r.sensitivity.values())
    run = cli("solve", "bubble_fraction", "pp=1", "n_microbatches=8", "--sensitivity")
    assert run.code == 0, run.err
    assert "pp not finite" in run.out
    run = cli("solve", "bubble_fraction", "pp=1", "n_microbatches=8", "--sensitivity", "--json")
    assert run.json()["sensitivity"][0]["elasticity"] is None


def test_arrays_are_refused_clearly():
    with pytest.raises(symcalc.errors.QueryError, match="single values"):
        symcalc.solve("train_time", {**SIX_ND, "n_gpus": [512, 1024]}, sensitivity=True)


def test_json_field(cli):
    run = cli("solve", *SIX_ND_CLI, "--json")
    assert run.code == 0, run.err
    got = run.json()["sensitivity"]
    assert got == [
        {"name": "n_params", "given": "70e9", "elasticity": 1.0, "method": "symbolic"},
        {"name": "n_tokens", "given": "2e12 token", "elasticity": 1.0, "method": "symbolic"},
        {"name": "n_gpus", "given": "1024", "elasticity": -1.0, "method": "symbolic"},
        {"name": "mfu", "given": "40%", "elasticity": -1.0, "method": "symbolic"},
        {"name": "peak_flops", "given": "989 TFLOP/s", "elasticity": -1.0, "method": "symbolic"},
    ]


def test_cli_flag_text(cli):
    run = cli("solve", *SIX_ND_CLI)
    assert run.code == 0, run.err
    assert ("Sensitivity (elasticity d ln target / d ln input): n_params +1, n_tokens +1, n_gpus -1, mfu -1, "
            "peak_flops -1") in run.out.splitlines()
    numeric = cli("solve", "step_time", "--hardware", "a100-80gb", "d_model=12288", "n_layers=96", "n_heads=96",
                  "vocab_size=51200", "seq_len=2048 token", "tp=8", "pp=8", "dp=16", "n_gpus=1024",
                  "global_batch_size=1536", "micro_batch_size=1", "--stack", "megatron-lm-2021",
                  "--option", "recompute=full", "--sensitivity")
    assert numeric.code == 0, numeric.err
    line = next(x for x in numeric.out.splitlines() if x.startswith("Sensitivity"))
    assert "global_batch_size ~+0.91" in line and "(~: numeric" in line
