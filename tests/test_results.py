"""A Result is a plain record (issue 35): data only, no callable into the solver, so it pickles
and compares as its values, and a copy read back from a pickle is asked again (``.function``,
``.points``, a breakdown's whole times) through the public path like the original."""

from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pytest

import symcalc

# MFU = 6 N * tokens/s / (n_gpus * peak): 6 * 7e9 * 1.5e5 / (64 * 1979e12) = 6.3e15 / 1.26656e17
MFU = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
MFU_PERCENT = 100 * 6.3e15 / 1.26656e17          # 4.9741 %


@pytest.fixture(scope="module")
def mfu():
    return symcalc.solve("mfu", **MFU)


def test_a_result_holds_no_callable(mfu):
    # the solver's re-evaluation used to ride in the record (again=, companion=): a record that
    # holds a function is not data, and a copy of it would call into whatever process made it
    fields = {f.name for f in dataclasses.fields(mfu)}
    assert not {"again", "companion"} & fields
    assert [name for name, value in vars(mfu).items() if callable(value)] == []


def test_a_pickled_result_is_equal_and_answers_the_same(mfu):
    copy = pickle.loads(pickle.dumps(mfu))
    assert copy.value == pytest.approx(MFU_PERCENT, rel=1e-9) and copy.unit == "%"
    assert copy.value == mfu.value
    assert copy.steps == mfu.steps
    assert copy == mfu
    assert isinstance(copy, symcalc.Result)
    # another question is another record: the data tells them apart
    assert symcalc.solve("mfu", **{**MFU, "n_gpus": 128}) != mfu


def test_a_pickled_result_is_evaluated_again_through_the_public_path(mfu):
    copy = pickle.loads(pickle.dumps(mfu))
    # twice the parameters, the rest the same: twice the MFU
    again = copy.function(n_params=14e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
    assert again.to("percent").magnitude == pytest.approx(2 * MFU_PERCENT, rel=1e-9)
    # 2e6 and 9e6 token/s: 6 * 7e9 * 2e6 / 1.26656e17 = 66.32 %, and 298.4 %, above 100 %: not ok
    p = copy.points(n_params=np.full(3, 7e9), tokens_per_second=(np.array([1.5e5, 2e6, 9e6]), "token/s"),
                    n_gpus=np.full(3, 64), peak_flops=(np.full(3, 1979e12), "FLOP/s"))
    np.testing.assert_allclose(p.value, [MFU_PERCENT, 100 * 8.4e16 / 1.26656e17, 100 * 3.78e17 / 1.26656e17],
                               rtol=1e-9)
    assert p.ok.tolist() == [True, True, False]


def test_a_pickled_results_breakdown_finds_a_collectives_whole_time_again():
    """The whole TP AllReduce time beside its exposed part is one more step from the answer's
    values (Result.companion_value): a copy made before it was read finds it from its own data,
    and it is what the same layout gives when the whole time is asked for directly."""
    question = dict(model="llama3-8b", hardware="h100", tp=2, n_gpus=8, micro_batch_size=1,
                    seq_len="8192 token", global_batch_size=64)
    step = symcalc.solve("step_time", **question)
    copy = pickle.loads(pickle.dumps(step))
    assert "step_tp_comm_total_time" not in copy.companions
    tp = next(p for p in copy.breakdown["parts"] if p["name"] == "step_tp_comm_time")
    direct = symcalc.solve("step_tp_comm_total_time", **question).to(copy.breakdown["unit"]).magnitude
    assert tp["whole_of"] == "step_tp_comm_total_time"
    assert tp["whole"] == pytest.approx(direct, rel=1e-9)
    assert tp["hidden"] == pytest.approx(direct - tp["value"], rel=1e-9, abs=1e-12)
