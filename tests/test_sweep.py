"""What-if sweeps: one derivation over a range or a grid, with infeasible points marked.

Expectations are hand computations written next to them.
"""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest

import symcalc
from symcalc.errors import OutOfBoundsError, QueryError, UnknownNameError
from symcalc.query.sweep import read_axis, sweep

DAY = 86400.0

# Llama 2 7B on H100s, dp = 8, ZeRO-1, full recomputation (the README's largest-micro-batch job).
# Model states: 2 + 2 + 12/8 = 5.5 bytes x 6,738,415,616 parameters = 37,061,285,888 bytes.
# Activations under full recomputation keep each layer's input, 2 s b h = 2 x 4096 x 4096 = 33,554,432
# bytes per sequence, x 32 layers = 1,073,741,824 bytes per sequence of the micro-batch; pp = 1; the
# layer being recomputed holds its activations, counted from the architecture (norms 4 d, Q, K, V
# and the attention output 4 d, SwiGLU 3 x 11008, in 2 bytes, and flash's fp32 statistics 4 x 32)
# = 539,492,352 bytes per sequence; the logits and cross-entropy take 4096 x 32000 x 12 =
# 1,572,864,000: 3,186,098,176 in all. The total asked for is the tensors' peak (memory_figure =
# allocated: no fitted allocator reserve in these expectations).
MEMORY_JOB = dict(model="llama2-7b", hardware="h100", dp=8,
                  options={"zero_stage": "1", "recompute": "full", "attention_kernel": "flash",
                           "memory_figure": "allocated", "stack": "textbook"})   # the formulas' own count
STATES, PER_SEQUENCE = 6_738_415_616 * 5.5, 1_073_741_824 + 539_492_352 + 1_572_864_000


# The optimizer step comes after backward has freed the activations: PyTorch's default foreach
# AdamW allocates the square root of the second moment of its whole shard at once, 4 bytes x
# 6,738,415,616 / 8 = 3,369,207,808 bytes, more than one sequence's 3,186,098,176: at b = 1 the
# step is the peak.
STEP_TEMPORARY = 4 * 6_738_415_616 / 8


def memory_gb(b):
    return (STATES + np.maximum(PER_SEQUENCE * np.asarray(b, dtype=float), STEP_TEMPORARY)) / 1e9


def train_days(n_gpus, mfu):
    # 6 N D / (G x MFU x peak): 70B on 2T tokens at 989 TFLOP/s
    return 6 * 70e9 * 2e12 / (np.asarray(n_gpus) * np.asarray(mfu) * 989e12) / DAY


def test_memory_over_micro_batch_size_marks_what_does_not_fit():
    s = sweep("total_memory_per_gpu", vary={"micro_batch_size": "1:64"}, **MEMORY_JOB)
    b = np.arange(1, 65)
    assert s.axes[0].values.tolist() == b.tolist()          # whole numbers, every one of them
    assert s.unit == "GB" and s.values == pytest.approx(memory_gb(b), rel=1e-12)
    # 37.06 + 3.186 b <= 85.52 GB (an H100's 81559 MiB)  <=>  b <= 15.21: 1..15 fit
    assert s.capacity == ("gpu_memory", pytest.approx(81559 * 2**20 / 1e9))
    assert s.feasible.tolist() == (b <= 15).tolist()
    assert any("exceeds gpu_memory" in r for r in s.reasons)


def test_two_axes_make_a_grid_first_axis_down():
    s = sweep("train_time", n_params=70e9, n_tokens="2e12 token", peak_flops="989 TFLOP/s",
              vary={"n_gpus": "64:4096:13:log", "mfu": "30%:60%:7"})
    n = s.axes[0].values
    # 64 x 2^(k/2), rounded to whole GPUs: 90.5 -> 91, 181.0 -> 181, 362.0 -> 362 ...
    assert n.tolist() == [64, 91, 128, 181, 256, 362, 512, 724, 1024, 1448, 2048, 2896, 4096]
    assert s.axes[0].log and not s.axes[1].log
    assert s.axes[1].values == pytest.approx([30, 35, 40, 45, 50, 55, 60])
    assert s.shape == (13, 7) and s.unit == "day"
    assert s.values == pytest.approx(train_days(n[:, None], np.linspace(0.3, 0.6, 7)[None, :]), rel=1e-12)
    assert s.values[0, 0] == pytest.approx(512.0, rel=1e-3)     # 64 GPUs at 30 %: 512 days
    assert s.to("hour").magnitude[0, 0] == pytest.approx(512.0 * 24, rel=1e-3)   # an array with its unit
    assert s.feasible.all() and s.capacity is None


def test_results_leaving_their_bounds_are_marked_not_dropped():
    # MFU = 6 x 7e9 x R / (64 x 1979e12) passes 100 % at R = 3.0158e6 token/s
    s = sweep("mfu", n_params=7e9, n_gpus=64, peak_flops="1979 TFLOP/s",
              vary={"tokens_per_second": "1e5 token/s:1e7 token/s:9:log"})
    r = s.axes[0].base
    assert s.values == pytest.approx(100 * 6 * 7e9 * r / (64 * 1979e12), rel=1e-12)
    assert s.feasible.tolist() == (6 * 7e9 * r / (64 * 1979e12) <= 1).tolist()
    # 1e5 x 10^(k/4): 3.16e6, 5.62e6 and 1e7 token/s pass 100 %
    assert (~s.feasible).sum() == 3 and any("mfu leaves its bounds" in x for x in s.reasons)


def test_axes_from_arrays_ranges_lists_and_unit_pairs():
    a = sweep("train_time", n_params=70e9, n_tokens="2e12 token", peak_flops="989 TFLOP/s", mfu=0.4,
              vary={"n_gpus": range(64, 257, 64)})
    assert a.axes[0].values.tolist() == [64, 128, 192, 256]
    assert a.values == pytest.approx(train_days([64, 128, 192, 256], 0.4), rel=1e-12)
    b = sweep("model_state_memory", n_params=7e9, vary={"dp": np.array([8, 64])}, options={"zero_stage": "3"})
    assert b.values == pytest.approx([16 * 7e9 / 8 / 1e9, 16 * 7e9 / 64 / 1e9])   # 14 and 1.75 GB
    c = sweep("n_params", vary={"model_state_memory": ([40, 80], "GB")}, dp=8, options={"zero_stage": "3"})
    assert c.values == pytest.approx([40e9 * 8 / 16, 80e9 * 8 / 16])          # 20e9 and 40e9
    d = sweep("checkpoint_interval", mtbf="24h", vary={"checkpoint_write_time": "30 s,98 s,5 min"})
    assert d.unit == "min" and d.values == pytest.approx(np.sqrt(2 * np.array([30, 98, 300]) * 86400) / 60)


@pytest.mark.parametrize("spec,expected", [
    ("3:6", [3, 4, 5, 6]),                 # every whole number in the range
    ("8:1", [8, 7, 6, 5, 4, 3, 2, 1]),     # a falling range stays in the order asked
    ("1:64:8:log", [1, 2, 3, 6, 11, 20, 35, 64]),   # 2^(6k/7) rounded; no repeats
    ("1:1000:4", [1, 334, 667, 1000]),
])
def test_whole_number_axes_take_whole_values(spec, expected):
    lib = symcalc.default_library()
    assert read_axis(lib.quantities["n_gpus"], spec).values.tolist() == expected


def test_continuous_axes_default_to_fifty_points_and_read_units():
    lib = symcalc.default_library()
    a = read_axis(lib.quantities["link_bandwidth"], "100 Gb/s:400 Gb/s")
    assert a.base.size == 50 and a.base[0] == pytest.approx(12.5e9) and a.base[-1] == pytest.approx(50e9)
    assert a.unit == "GB/s" and a.values[-1] == pytest.approx(50.0)
    pct = read_axis(lib.quantities["mfu"], "30%:60%::log")
    assert pct.log and pct.base.size == 50 and pct.base[0] == pytest.approx(0.3) and pct.base[-1] == pytest.approx(0.6)


@pytest.mark.parametrize("vary,given,needle", [
    ({"n_gpus": "1-64"}, {}, "START:STOP"),
    ({"n_gpus": "1:64:x"}, {}, "COUNT must be a whole number"),
    ({"n_gpus": "1:64:1"}, {}, "at least 2"),
    ({"link_latency": "0 s:5 us::log"}, {}, "positive"),
    ({"mfu": "40%:40%"}, {}, "same value"),
    ({"n_gpus": "8:64"}, {"n_gpus": 16}, "both varied and given"),
    ({"train_time": "1 day:9 day"}, {}, "is the target"),
    ({"n_gpus": "1:4000:4000", "mfu": "1%:99%:4000"}, {}, "more than"),
    ({}, {}, "at least one"),
])
def test_bad_axes_are_explained(vary, given, needle):
    base = dict(n_params=70e9, n_tokens="2e12 token", peak_flops="989 TFLOP/s", mfu=0.4, n_gpus=64)
    for k in list(vary) + list(given):
        base.pop(k, None)
    with pytest.raises(QueryError) as e:
        sweep("train_time", vary=vary, **{**base, **given})
    assert needle in e.value.message


def test_an_unknown_axis_name_gets_suggestions():
    with pytest.raises(UnknownNameError) as e:
        sweep("train_time", n_params=70e9, vary={"n_gpu": "8:64"})
    assert "n_gpus" in e.value.message


def test_an_axis_with_the_wrong_dimension_is_rejected():
    with pytest.raises(symcalc.DimensionError) as e:
        sweep("train_time", n_params=70e9, n_tokens="2e12 token", peak_flops="989 TFLOP/s", mfu=0.4,
              vary={"n_gpus": "8 GB:64 GB"})
    assert "n_gpus" in e.value.message


# ---- command line ---------------------------------------------------------------------------

MEMORY_ARGS = ("sweep", "total_memory_per_gpu", "--model", "llama2-7b", "--hardware", "h100", "dp=8",
               "--option", "zero_stage=1", "--option", "recompute=full", "--option", "attention_kernel=flash",
               "--option", "memory_figure=allocated", "--stack", "textbook", "--vary", "micro_batch_size=1:64")


def test_cli_sweep_prints_a_table_and_writes_csv(cli, tmp_path):
    out = tmp_path / "memory.csv"
    run = cli(*MEMORY_ARGS, "--csv", str(out))
    assert run.code == 0
    lines = run.out.splitlines()
    assert lines[0] == "total_memory_per_gpu [GB] over micro_batch_size (64): 64 points, 15 feasible"
    assert "must fit in gpu_memory = 85.52 GB" in run.out
    # the rows where it stops fitting are shown: b = 15 (37.06 + 15 x 3.186 = 84.85 GB) fits, b = 16
    # (88.04 GB) does not
    assert any(line.split() == ["15", "84.85"] for line in lines)
    assert any(line.split() == ["16", "88.04*"] for line in lines)
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["micro_batch_size", "total_memory_per_gpu [GB]", "feasible"]
    assert len(rows) == 65 and rows[1][0] == "1" and float(rows[1][1]) == pytest.approx(memory_gb(1), rel=1e-12)
    assert rows[16] == ["16", rows[16][1], "0"] and rows[15][2] == "1"


def test_cli_sweep_json_has_every_point(cli):
    run = cli("sweep", "train_time", "n_params=70e9", "n_tokens=2e12 token", "peak_flops=989 TFLOP/s",
              "--vary", "n_gpus=64:256:3", "--vary", "mfu=40%,50%", "--json")
    d = run.json()
    assert d["axes"][0]["values"] == [64, 160, 256] and d["axes"][1]["values"] == [40, 50]
    assert d["unit"] == "day" and d["n_points"] == 6 and d["n_feasible"] == 6
    assert np.array(d["values"]) == pytest.approx(train_days(np.array([[64], [160], [256]]), np.array([0.4, 0.5])),
                                                  rel=1e-12)


def test_cli_sweep_errors_are_one_line(cli):
    run = cli("sweep", "train_time", "n_params=70e9", "--vary", "n_gpus=8")
    assert run.code == 2 and run.err.count("\n") == 1 and "START:STOP" in run.err
    run = cli("sweep", "train_time", "n_params=70e9")
    assert run.code == 2 and "--vary" in run.err
    run = cli("sweep", "train_time", "n_params=70e9", "--vary", "n_gpus=8:64", "--json")
    assert run.code == 2 and "error" in json.loads(run.out)


def test_cli_sweep_text_of_a_large_grid_is_sampled(cli):
    run = cli("sweep", "train_time", "n_params=70e9", "n_tokens=2e12 token", "peak_flops=989 TFLOP/s",
              "--vary", "n_gpus=64:4096:40:log", "--vary", "mfu=20%:70%:30")
    assert run.code == 0 and "1200 points" in run.out and "sampled" in run.out


def test_a_large_grid_takes_the_compiled_sweep_path_with_the_same_answers(monkeypatch):
    # 1000 x 1000 points: the values come from the chunked kernel (every bound checked
    # at once, chunk by chunk); they equal the hand formula, and a grid with infeasible points
    # takes the same path (masked, never refused) and still marks them
    from symcalc.engine import chunked
    taken = []
    real = chunked.run
    monkeypatch.setattr(chunked, "run", lambda *a: taken.append((out := real(*a)) is not None) or out)
    s = sweep("train_time", n_params=70e9, n_tokens="2e12 token", peak_flops="989 TFLOP/s",
              vary={"n_gpus": "64:4096:1000", "mfu": "20%:70%:1000"})
    n, m = s.axes[0].values[:, None], s.axes[1].values[None, :] / 100
    assert s.shape == (1000, 1000) and s.feasible.all() and taken == [True]
    np.testing.assert_allclose(s.values, train_days(n, m), rtol=1e-12)    # (pytest.approx: 7 s a million)
    over = sweep("mfu", n_params=7e9, n_gpus=64, peak_flops="1979 TFLOP/s",
                 vary={"tokens_per_second": "1e5 token/s:1e7 token/s:100000"})
    r = over.axes[0].base
    assert over.feasible.tolist() == (6 * 7e9 * r / (64 * 1979e12) <= 1).tolist()
    assert any("mfu leaves its bounds" in x for x in over.reasons) and taken == [True, True]


def test_a_whole_number_that_rounds_outside_its_bounds_is_not_feasible():
    # the largest micro-batch that fits Llama 3 8B (ZeRO-3 over 8, full recomputation) falls
    # below 1 at long sequences: solve refuses it there (it rounds down to 0), and the sweep
    # agrees point by point
    job = dict(model="llama3-8b", hardware="h100", dp=8, memory_headroom="0 GB",
               options={"zero_stage": "3", "recompute": "full", "stack": "textbook"})
    lengths = [8192, 16384, 32768, 131072]
    s = sweep("micro_batch_size", vary={"seq_len": ",".join(map(str, lengths))}, **job)
    for seq, feasible in zip(lengths, s.feasible.tolist()):
        try:
            symcalc.solve("micro_batch_size", seq_len=f"{seq} token", **job)
            refused = False
        except OutOfBoundsError:
            refused = True
        assert feasible == (not refused), seq
    assert s.feasible.tolist() == [True, True, False, False]
    assert any("rounds outside its bounds" in r for r in s.reasons)
