"""Input that used to be accepted wrongly or to end in "internal error ... please report it":
each is now one clear line naming the field or value (or, where it is meaningful, an answer)."""

from __future__ import annotations

import numpy as np
import pytest

import symcalc
from symcalc.errors import DomainError

TRAIN = dict(n_params=7e9, n_tokens="1e12 token", mfu="40%", peak_flops="989 TFLOP/s")


@pytest.mark.parametrize("gpus", [1e-12, 1e-300, 0.4, 0.5, 2.5, 1e-9, 64.001])
def test_a_count_that_is_not_whole_is_refused_at_every_magnitude(gpus):
    with pytest.raises(DomainError, match=r"n_gpus is a whole number \(got "):
        symcalc.solve("train_time", n_gpus=gpus, **TRAIN)


def test_a_count_off_by_float_noise_is_whole():
    # 0.1 * 3 * 10 = 3.0000000000000004: noise of the last bit, not a third of a GPU
    days = symcalc.solve("train_time", n_gpus=0.1 * 3 * 10, **TRAIN).value
    assert days == pytest.approx(6 * 7e9 * 1e12 / (0.4 * 989e12 * 3) / 86400, rel=1e-12)


def test_an_array_with_one_count_below_one_is_refused():
    with pytest.raises(DomainError, match=r"n_gpus is a whole number \(got 1e-12\)"):
        symcalc.solve("train_time", n_gpus=np.array([64.0, 1e-12]), **TRAIN)
