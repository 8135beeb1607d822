"""benchmarks/published_setups.py (issue 36's ten setups): the published range of a setup and
the layout it poses, against the sources. No plan is run here (the script does that)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import published_setups as S  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    return S.all_runs()


def test_bloom_range_is_its_seven_scored_runs_at_their_6n_mfu(runs):
    """BLOOM-176B's range: the seven scored rows of calibration/held_out/bloom.toml (the eighth,
    pp 72, is unscored there), nothing of another model or stack. The 48-node run printed 104.70 s
    an iteration of 2048 x 2048 tokens on 384 A100s (312 TFLOP/s bf16); its parameters by hand:
    70 layers of 12 d^2 + 13 d (weights, biases, two LayerNorms), the tied 250,880 x d embedding
    and two more LayerNorms, d = 14,336: 176,247,271,424; MFU = 6 N x 2048 x 2048 /
    (104.70 x 384 x 312e12) = 35.36 %."""
    rng = S.published_range(runs["bloom176b_48n_tp4pp12_mb2"], runs)
    assert sorted(rng) == sorted(["bloom176b_48n_tp4pp12_mb2", "bloom176b_24n_tp4pp12_mb2",
                                  "bloom176b_24n_tp4pp12_mb1", "bloom176b_24n_tp4pp24_mb1",
                                  "bloom176b_24n_tp2pp24_mb1", "bloom176b_36n_tp4pp36_mb1",
                                  "bloom176b_36n_tp2pp36_mb1"])
    n = 70 * (12 * 14336**2 + 13 * 14336) + 250880 * 14336 + 4 * 14336
    assert rng["bloom176b_48n_tp4pp12_mb2"] == pytest.approx(6 * n * 2048 * 2048 / (104.70 * 384 * 312e12), rel=1e-4)


def test_qwen3_setup_poses_nvidias_recipe(runs):
    """Setup 5 poses NVIDIA's Qwen3-235B H100 recipe as Megatron-Bridge publishes it (tp 2, pp 8,
    vp 4, ep 32, micro-batch 1 on 256 GPUs: dp = 256 / 16 = 16; global batch 8192 of 4096 tokens),
    with the shapes as values (94 layers, 128 routed experts) and the options the planner does
    not search fixed (fp8 among them); ZeRO-1 without recompute is the layout's own."""
    setup = S.SETUPS[4]
    q = S.pose(setup, runs[setup.run])
    assert q["layout"] == dict(tp=2, pp=8, cp=1, dp=16, ep=32, micro_batch_size=1, virtual_stages=4)
    assert (q["n_gpus"], q["global_batch_size"], q["seq_len"]) == (256, 8192, 4096)
    assert q["values"]["n_layers"] == 94 and q["values"]["n_routed_experts"] == 128
    assert q["options"]["precision"] == "fp8" and "zero_stage" not in q["options"]
    assert q["searched"] == {"zero_stage": "1", "recompute": "none", "sequence_parallel": "true"}


def test_inside_means_within_ten_percent_of_the_published_span():
    """The rule the summary counts: 17.57 % published (DeepSeek-V3's one run) allows 15.81 % to
    19.33 %."""
    assert S.inside(0.159, {"a": 0.1757}) and S.inside(0.193, {"a": 0.1757})
    assert not S.inside(0.157, {"a": 0.1757}) and not S.inside(0.194, {"a": 0.1757})
