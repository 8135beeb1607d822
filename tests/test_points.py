"""Result.points: the derivation over a grid some of whose points leave their bounds (what a
layout planner or a what-if grid produces), every point kept and marked, never refused."""

from __future__ import annotations

import numpy as np
import pytest

import symcalc
from symcalc.errors import QueryError

DAY = 86400.0


def test_a_fifth_of_the_points_out_of_bounds_are_marked_not_refused():
    # train_time = 6 N D / (n x mfu x peak): MFU above 100 % is outside mfu's bounds (0, 1]
    r = symcalc.solve("train_time", n_params=7e9, n_tokens="1e12 token", n_gpus=64, mfu=0.4,
                      peak_flops="989 TFLOP/s")
    rng = np.random.default_rng(0)
    n = 50_000
    gpus = rng.integers(8, 4097, n).astype(float)
    mfu = rng.uniform(0.2, 0.6, n)
    bad = rng.random(n) < 0.2
    mfu[bad] = rng.uniform(1.0001, 1.5, bad.sum())
    p = r.points(n_params=np.full(n, 7e9), n_tokens=(np.full(n, 1e12), "token"), n_gpus=gpus, mfu=mfu,
                 peak_flops=(np.full(n, 989e12), "FLOP/s"))
    assert p.unit == "day"
    np.testing.assert_allclose(p.value, 6 * 7e9 * 1e12 / (gpus * mfu * 989e12) / DAY, rtol=1e-12)
    assert (p.inside == ~bad).all() and (p.ok == ~bad).all() and p.fits.all()


def test_memory_points_say_where_the_answer_does_not_fit_its_capacity():
    # Llama 2 7B, H100 (81559 MiB = 85.52 GB), ZeRO-1 over 8, full recomputation with flash attention:
    # 37.06 GB of states + 2.924 GB per sequence (32 stored layer inputs of 2 x 4096^2 bytes, the
    # recomputed layer's 4096 x 2 x (8 x 4096 + 3 x 11008) + 4 x 32 x 4096 and the logits' 4096 x
    # 32000 x 12), the tensors' peak (memory_figure = allocated): 37.06 + 3.186 b <= 85.52 for b <= 15
    r = symcalc.solve("total_memory_per_gpu", micro_batch_size=1, dp=8, model="llama2-7b", hardware="h100",
                      options={"zero_stage": "1", "recompute": "full", "attention_kernel": "flash",
                               "memory_figure": "allocated", "stack": "textbook"})
    b = np.arange(1, 65)
    p = r.points(micro_batch_size=b, dp=np.full(64, 8))
    per_sequence = 32 * 2 * 4096 ** 2 + 4096 * 2 * (8 * 4096 + 3 * 11008) + 4 * 32 * 4096 + 4096 * 32000 * 12
    # at b = 1 the optimizer step is the peak: foreach AdamW's square root of the second moment
    # of the ZeRO-1 shard, 4 x 6,738,415,616 / 8 bytes, is more than one sequence's activations
    expected = (6_738_415_616 * 5.5 + np.maximum(b * per_sequence, 4 * 6_738_415_616 / 8)) / 1e9
    np.testing.assert_allclose(p.value, expected, rtol=1e-9)
    assert p.inside.all() and (p.fits == (b <= 15)).all() and (p.ok == (b <= 15)).all()


def test_a_whole_number_answer_and_a_known_outside_its_bounds():
    # n_gpus for a 30-day deadline rounds up (the deadline is a limit): 6 x 30e9 x 600e9 /
    # (0.45 x 989e12 x 30 days) = 93.6 -> 94; a negative token count is outside its bounds
    r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu=0.45,
                      peak_flops="989 TFLOP/s")
    tokens = np.array([600e9, 1200e9, -1.0])
    p = r.points(n_params=np.full(3, 30e9), n_tokens=(tokens, "token"), train_time=(np.full(3, 30.0), "day"),
                 mfu=np.full(3, 0.45), peak_flops=(np.full(3, 989e12), "FLOP/s"))
    exact = 6 * 30e9 * tokens[:2] / (0.45 * 989e12 * 30 * DAY)
    assert p.value[:2].tolist() == np.ceil(exact).tolist() == [94.0, 188.0]
    assert p.inside.tolist() == [True, True, False]


def test_arrays_that_do_not_make_one_grid_are_refused_naming_them():
    r = symcalc.solve("train_time", n_params=7e9, n_tokens="1e12 token", n_gpus=64, mfu=0.4,
                      peak_flops="989 TFLOP/s")
    with pytest.raises(QueryError) as e:
        r.points(n_params=np.full(3, 7e9), n_tokens=(np.full(4, 1e12), "token"), n_gpus=64, mfu=0.4,
                 peak_flops=(989e12, "FLOP/s"))
    assert "n_params (3,)" in str(e.value) and "n_tokens (4,)" in str(e.value)


def test_several_quantities_of_one_question_come_from_one_pass():
    # mfu from observed throughput: mfu = 6 N R / (n x peak), with the cluster's achieved FLOP/s
    # = 6 N R on the way; asking for it too gives it from the same evaluation, in PFLOP/s
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                      peak_flops="1979 TFLOP/s")
    rate = np.array([1e5, 2e5, 4e5])
    p = r.points(also=("achieved_flops_cluster", "mfu"), n_params=np.full(3, 7e9),
                 tokens_per_second=(rate, "token/s"), n_gpus=np.full(3, 64), peak_flops=(np.full(3, 1979e12), "FLOP/s"))
    flops, unit = p.also["achieved_flops_cluster"]
    assert unit == "PFLOP/s"
    np.testing.assert_allclose(flops, 6 * 7e9 * rate / 1e15, rtol=1e-12)
    np.testing.assert_allclose(p.also["mfu"][0], p.value, rtol=1e-12)       # mfu's own unit: %
    np.testing.assert_allclose(p.value, 6 * 7e9 * rate / (64 * 1979e12) * 100, rtol=1e-12)
    with pytest.raises(QueryError, match="not computed by this derivation"):
        r.points(also=("gpu_memory",), n_params=7e9, tokens_per_second=(rate, "token/s"), n_gpus=64,
                 peak_flops=(1979e12, "FLOP/s"))


@pytest.mark.parametrize("size", [10, 200_000])
def test_each_quantity_leaving_its_bounds_is_named_where_it_does(size):
    # the same grid through the step walker (small) and the chunked kernel (large): mfu above
    # 100 % at the points where 6 N R > n x peak, i.e. R > 64 x 1979e12 / 4.2e10 = 3.0156e6 token/s
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                      peak_flops="1979 TFLOP/s")
    rate = np.linspace(1e6, 5e6, size)
    p = r.points(n_params=np.full(size, 7e9), tokens_per_second=(rate, "token/s"), n_gpus=np.full(size, 64),
                 peak_flops=(np.full(size, 1979e12), "FLOP/s"), outside=True)
    over = rate > 64 * 1979e12 / (6 * 7e9)
    assert 0 < over.sum() < size
    assert set(p.outside) == {"mfu"} and (p.outside["mfu"] == over).all() and (p.inside == ~over).all()
