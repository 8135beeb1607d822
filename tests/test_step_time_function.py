"""Result.function of the step-time derivation over many parallel layouts (issue 11, point 7).

GPT-3 175B (d = 12288, 96 layers, 96 heads, V = 51200, s = 2048) on A100 80GB, full
recomputation, eager attention, global batch 1536: solved once, then evaluated for ~1000
layouts at once. Two of them are computed by hand below, from the 65 steps `symcalc solve
step_time ...` shows; the others must equal the general path (symcalc.solve with arrays).

Units: seconds, bytes, FLOP. Hardware a100-80gb: GEMM rate 0.822 x 312e12 = 256.464e12 FLOP/s,
achievable HBM 1.68e12 B/s, NVLink bus 232.1e9 B/s with 9.69 us a ring step, NICs 25e9 B/s at
94 % = 23.5e9 B/s with 10 us a hop, 8 GPUs a node. Defaults: 2-byte activations and gradients,
293 us per layer and pass, memory-bound traffic 5.37 x (1 + 0.45) of the stored activations,
16 optimizer bytes per parameter. Full recomputation: 4 passes of every matrix multiply.
"""

from __future__ import annotations

import numpy as np
import pytest

import symcalc
import symcalc.query.solve
from symcalc.engine import fastpath

QUESTION = dict(d_model=12288, n_layers=96, n_heads=96, vocab_size=51200, seq_len="2048 token", tp=8, pp=8,
                dp=16, n_gpus=1024, global_batch_size=1536, micro_batch_size=1)
# tp_comm_overlap=false: Megatron-LM as of the 2021 GPT-3 run, every TP collective on the critical path
# (the hand version below writes that model; the default overlaps the backward's input-gradient collective)
PRESETS = dict(hardware="a100-80gb", options={"recompute": "full", "attention_kernel": "eager", "tp_comm_overlap": "false"})

# Parameters: a layer 4 d^2 (attention) + 2 d (4 d) (GELU FFN) = 12 d^2 = 1,811,939,328; the
# model 96 x that + 2 V d (embeddings, untied) = 173,946,175,488 + 1,258,291,200 = 175,204,466,688.

# Layout A: tp = pp = 1, dp = 8 on one node (cp = 8 / 8 = 1). No TP, CP or pipeline terms
# (each has a factor tp - 1, cp - 1 or pp - 1); 1536 / 8 = 192 micro-batches of 2048 tokens.
#   matrix multiplies, a pass: 2 x 2048 x 1,811,939,328 = 7.4217e12 FLOP / 256.464e12
#       + 2 B x (2048 x (4 x 12288 + 12 x 12288) + 1,811,939,328) = 4,429,185,024 B / 1.68e12
#       = 0.028938 + 0.002636 = 0.0315750 s
#   attention scores, a pass: 4 x 2048 x 2048 x 12288 FLOP / 256.464e12
#       + 2 x 2 B x 96 x 2048 x 2048 / 1.68e12 = 0.000804 + 0.000959 = 0.00176255 s
#   memory-bound: 5.37 x 1.45 x (2048 x 12288 x (10 + 24) + 5 x 96 x 2048^2) B / 1.68e12
#       = 5.37 x 1.45 x 2,868,903,936 / 1.68e12 = 0.0132969 s
#   a layer: 4 x (0.0315750 + 0.000293) + 4 x 0.00176255 + 0.0132969 = 0.147819 s
#   LM head: 3 x (2 x 2048 x 51200 x 12288 / 256.464e12 + 2 x (2048 x (12288 + 51200)
#       + 51200 x 12288) / 1.68e12 + 0.000293) + 5.37 x 4 x 2048 x 51200 / 1.68e12 = 0.0350753 s
#   a micro-batch: 96 x 0.147819 + 0.0350753 = 14.225703 s; x 192 = 2731.3350 s
#   DP AllReduce in the node (8 x 23.5e9 + 232.1e9 > 232.1e9: NVLink's 232.1e9 B/s):
#       2 x 7/8 x 2 B x 175,204,466,688 / 232.1e9 + 2 x 7 x 9.69e-6 = 2.642168 s
#   optimizer: 16 B x 175,204,466,688 / 1.68e12 = 1.668614 s
#   step: 2731.3350 + 2.642168 + 1.668614 = 2735.645760 s
LAYOUT_A = dict(tp=1, pp=1, dp=8, micro_batch_size=1, n_gpus=8)
STEP_A = 2735.645760128991

# Layout B: the GPT-3 paper's tp = 8, pp = 8, dp = 16 on 1024 GPUs, micro-batch 1: 96
# micro-batches, 12 layers a stage, TP inside a node, PP and DP across nodes.
#   matrix multiplies, a pass: 927,712,935,936 FLOP / 256.464e12 + 729,808,896 B / 1.68e12
#       (2 B x (2048 x (49152 + 12 d^2 / (d x 8)) + 12 d^2 / 8)) = 0.00405173 s
#   attention scores, a pass: an eighth of A's: 0.000220318 s
#   memory-bound: 5.37 x 1.45 x (2048 x 12288 x (10 + 24/8) + 5 x 96 x 2048^2 / 8) / 1.68e12
#       = 5.37 x 1.45 x 578,813,952 / 1.68e12 = 0.00268270 s
#   a layer: 4 x (0.00405173 + 0.000293) + 4 x 0.000220318 + 0.00268270 = 0.0209429 s
#   LM head (V / 8 a GPU): 0.00523219 s; a stage's compute: 12 x 0.0209429 + 0.00523219 = 0.256547 s
#   TP: 2 AllReduces x 3 passes x (2 x 7/8 x 50,331,648 B / 232.1e9 + 2 x 7 x 9.69e-6)
#       = 0.00309092 s a layer, x 12 = 0.0370910 s a stage (2048 x 12288 x 2 B a message)
#   PP sends: 2 x (2048 x 12288 x 2 B / 8 / 23.5e9 + 10e-6) = 0.000555443 s (one stage a node)
#   a micro-batch on the slowest stage: 0.256547 + 0.0370910 + 0.000555443 = 0.294193 s
#   96 micro-batches: 24.628513 + 3.560739 + 0.053323 s; bubble 7 x 0.294193 = 2.059354 s
#   DP AllReduce of 175,204,466,688 / 64 = 2,737,569,792 parameters over 16 nodes' NICs:
#       2 x 15/16 x 2 B x 2,737,569,792 / 23.5e9 + 2 x 15 x 10e-6 = 0.437146 s
#   optimizer: 16 B x 2,737,569,792 / 1.68e12 = 0.0260721 s
#   step: 24.628513 + 3.560739 + 0.053323 + 2.059354 + 0.437146 + 0.026072 = 30.765148 s
LAYOUT_B = dict(tp=8, pp=8, dp=16, micro_batch_size=1, n_gpus=1024)
STEP_B = 30.765147984668708


def layouts(n: int, seed: int = 3) -> dict[str, np.ndarray]:
    """n random valid layouts (tp within a node, pp dividing 96, dp dividing 1536, cp 1-4,
    micro-batches that divide 1536 / dp), A first and B second."""
    rng = np.random.default_rng(seed)
    tp, pp = rng.choice([1, 2, 4, 8], n), rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 96], n)
    dp, cp = rng.choice([1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64], n), rng.choice([1, 2, 4], n)
    out = dict(tp=tp, pp=pp, dp=dp, micro_batch_size=rng.choice([1, 2, 4, 8], n), n_gpus=tp * pp * cp * dp)
    for i, layout in enumerate((LAYOUT_A, LAYOUT_B)):
        for k, v in layout.items():
            out[k][i] = v
    return out


@pytest.fixture(scope="module")
def result():
    r = symcalc.solve("step_time", QUESTION, **PRESETS)
    assert r.unit == "s" and r.value == pytest.approx(STEP_B, rel=1e-12)
    return r


def test_the_hand_computed_layouts_alone(result):
    for layout, expected in ((LAYOUT_A, STEP_A), (LAYOUT_B, STEP_B)):
        assert symcalc.solve("step_time", {**QUESTION, **layout}, **PRESETS).value == pytest.approx(expected, rel=1e-12)


def test_function_over_a_thousand_layouts_is_the_general_paths(result, monkeypatch):
    x = layouts(1000)
    general = symcalc.solve("step_time", {**QUESTION, **x}, **PRESETS).value
    assert general[:2] == pytest.approx([STEP_A, STEP_B], rel=1e-12)
    # small arrays go to the general path; 33 copies (33,000 layouts) take the sweep path,
    # which must answer without falling back to solve()
    assert not fastpath.program(result.derivation).fused_expr      # steps that subtract: step by step
    many = {k: np.tile(v, 33) for k, v in x.items()}
    assert many["tp"].size >= fastpath.MIN_SIZE

    def refuse(*args, **kwargs):
        raise AssertionError("the sweep path declined")
    monkeypatch.setattr(symcalc.query.solve, "solve", refuse)
    got = result.function(**QUESTION | many)
    assert got.units == symcalc.Q(1, "s").units
    assert got.magnitude[:2] == pytest.approx([STEP_A, STEP_B], rel=1e-12)
    np.testing.assert_array_equal(got.magnitude, np.tile(general, 33))     # the same step functions


def test_an_infeasible_layout_is_refused_as_by_solve(result):
    x = layouts(40_000)
    # layout 5: tp 8, pp 8, dp 16 on 512 GPUs, half what they need: cp = 0.5, and the ring
    # attention's time, 4 x (cp - 1) x ..., comes out negative
    for k, v in dict(tp=8, pp=8, dp=16, n_gpus=512).items():
        x[k][5] = v
    with pytest.raises(symcalc.OutOfBoundsError):
        result.function(**QUESTION | x)
