"""MoE layouts as they were trained (issue 36, items 1 and 3): DeepSeek-V3's published layout
(pp16 ep64, no TP, 2,048 H800s) and NVIDIA's Qwen3-235B H100 recipe (tp2 pp8 ep32 etp1) are
representable, accepted by solve's rules and by the planner's; expert-tensor parallelism is a
degree of its own; DualPipe's bubble and the all-to-all on dedicated SMs follow the DeepSeek-V3
report, and turning the overlap off costs what the exposed all-to-all is.
"""

from __future__ import annotations

import numpy as np
import pytest

import symcalc
from symcalc.planner.space import Shape, enumerate_space
from symcalc.query.layout_rules import given_breaks, pp_splits_layers

# DeepSeek-V3 report, section 3.1-3.2 and 4: 2,048 H800s, 16-way PP, 64-way EP over 8 nodes, ZeRO-1
# DP, no TP; batch 15,360 sequences of 4K tokens after the ramp; FP8 training.
DSV3 = dict(tp=1, pp=16, cp=1, dp=128, n_gpus=2048, micro_batch_size=1, global_batch_size=15360,
            seq_len="4096 token", ep=64)
DSV3_OPTIONS = {"zero_stage": "1", "recompute": "selective", "precision": "fp8", "stack": "hai-llm"}


def _solve(**options: str) -> float:
    r = symcalc.solve("step_time", dict(DSV3), model="deepseek-v3", hardware="h800",
                      options={**DSV3_OPTIONS, **options})
    return float(r.base_value)


def test_megatron_expert_grid_rule_accepts_qwen3_recipe_and_refuses_a_too_large_group():
    """Megatron-Core raises unless etp x ep x pp divides the world size (parallel_state.py), i.e.
    ep x etp divides tp x cp x dp. NVIDIA's Qwen3-235B H100 recipe (Megatron-Bridge
    qwen3_moe_perf.py): tp2 pp8 ep32 on 256 GPUs, dp16, etp1: 32 divides 2 x 16 = 32, accepted
    though ep (32) does not divide dp (16). With etp2, 64 does not divide 32: refused."""
    base = dict(n_gpus=256, tp=2, pp=8, dp=16, cp=1, ep=32, n_layers=94, n_experts=128, n_heads=64,
                n_kv_heads=4, gpus_per_node=8)
    assert not [rule.name for rule, _ in given_breaks({**base, "etp": 1}, "refuse")]
    assert [rule.name for rule, _ in given_breaks({**base, "etp": 2}, "refuse")] == ["ep_model_group"]


def test_deepseek_v3_61_layers_split_over_16_stages():
    """61 layers over pp16: 64 slots, 3 empty, beyond the 2-slot slack; with the embedding and the
    loss counted as a layer each (Megatron-Core account_for_embedding/loss_in_pipeline_split),
    63 over 64, one empty: the split DeepSeek ran is searched. pp32 leaves 64 - 63 = 1 too; pp13
    over 61 (65 slots, 4 empty) or 63 (65, 2 empty) is admitted only the second way."""
    s = Shape(n_gpus=2048, gpus_per_node=8, n_heads=128, n_kv_heads=128, n_layers=61, seq_len=4096,
              global_batch_size=15360, n_experts=256)
    assert pp_splits_layers({"pp": np.array([16, 32, 13, 17])}, s).tolist() == [True, True, True, False]


def test_deepseek_v3_published_layout_is_in_the_planners_space():
    """The planner's space for DeepSeek-V3 on 2,048 GPUs with pp16 ep64 tp1 cp1 fixed holds the
    published layout: dp = 2048 / 16 = 128, ep = 64 over the 256 routed experts (not 257 with the
    shared one), etp 1 (etp divides tp = 1)."""
    s = Shape(n_gpus=2048, gpus_per_node=8, n_heads=128, n_kv_heads=128, n_layers=61, seq_len=4096,
              global_batch_size=15360, n_experts=256)
    space = enumerate_space(s, fixed={"tp": [1], "pp": [16], "cp": [1], "ep": [64], "micro_batch_size": [1],
                                      "virtual_stages": [1]}, options={"zero_stage": ("1",)})
    assert space.size > 0
    assert set(space.columns["dp"].tolist()) == {128} and set(space.columns["etp"].tolist()) == {1}


def test_dualpipe_bubble_is_the_reports_table_2():
    """DeepSeek-V3 report, Table 2: DualPipe's bubble is (PP/2 - 1)(F&B + B - 3W). In linear passes
    (no recomputation: F = 1, B = 2, W = 1, F&B = F + B = 3) that is 7 x 2 = 14 passes at pp16,
    against 1F1B's (PP - 1)(F + B) = 15 x 3 = 45: the bubble shrinks 45/14 = 3.21-fold for the same
    micro-batch time. Checked through the library's formulas at micro_step_time 3 s."""
    given = {"pp": 16, "micro_step_time": "3 s"}
    dual = symcalc.solve("pipeline_bubble_time", given, options={"recompute": "selective", "pipeline_schedule": "dualpipe"})
    one = symcalc.solve("pipeline_bubble_time", given, options={"recompute": "selective", "pipeline_schedule": "1f1b"})
    assert float(dual.base_value) == pytest.approx(14.0, rel=1e-12)
    assert float(one.base_value) == pytest.approx(45.0, rel=1e-12)


def test_deepseek_v3_step_time_against_the_measured_one():
    """The report: 180K H800 GPU-hours per trillion tokens on 2,048 H800s, i.e. 180,000 / 2,048 h =
    316,406 s per 1e12 tokens; a step of 15,360 x 4,096 = 62,914,560 tokens takes 19.91 s. The
    published layout under DualPipe with the all-to-all on 20 SMs is within 15 % of it. Turning
    the overlap off (ep_comm_overlap = false) puts every all-to-all on the critical path, so it is
    slower, and so is 1F1B for DualPipe."""
    measured = 180_000 * 3600 / 2048 * 15360 * 4096 / 1e12
    assert measured == pytest.approx(19.907, rel=1e-4)
    planned = _solve()
    assert planned == pytest.approx(measured, rel=0.15)
    assert _solve(ep_comm_overlap="false") > planned * 1.2
    assert _solve(pipeline_schedule="1f1b") > planned


def test_qwen3_recipe_is_in_the_planners_space():
    """NVIDIA's Qwen3-235B H100 recipe (Megatron-Bridge qwen3_moe_perf.py, 256 H100s: tp2 pp8 vp4
    ep32, mbs1, global batch 8,192): the planner with those degrees fixed counts it valid (dp =
    256 / 16 = 16; ep32 x etp1 divides tp x dp = 32; 94 layers over pp8: 12 slots a stage, 96 in
    all, 2 empty or none with the embedding and the loss; vp4 divides the 12): one layout
    searched, one valid, no rule rejecting it. (Whether it fits is the activation model's
    question, the one rejection memory's if any: the closest layout named is this one.)"""
    p = symcalc.plan("qwen3-235b", "h100", 256, global_batch_size=8192, top=3, tp=2, pp=8, cp=1, ep=32,
                     virtual_stages=4, micro_batch_size=1,
                     options={"zero_stage": "1", "recompute": "none", "sequence_parallel": "true"})
    assert (p.searched, p.valid) == (1, 1)
    assert set(k for k, v in p.rejected.items() if v) <= {
        "does not fit in gpu_memory", "fits gpu_memory but not the memory_headroom kept free (tight: --headroom 0GB "
        "ranks them)"}
    row = (p.rows or p.closest)[0]
    assert (row.layout["dp"], row.layout["ep"], row.layout["etp"], row.layout["virtual_stages"]) == (16, 32, 1, 4)


def test_expert_ranks_of_a_node_follow_the_expert_grid():
    """Megatron-Core orders the expert ranks tp-ep-dp-pp with tp = etp: an EP group's ranks in a
    node are every etp-th GPU, 8 / etp of them (at most ep). tp2 etp1 ep32: 8; etp left to its
    default (tp = 2): 4."""
    given = {"ep": 32, "tp": 2, "cp": 1, "gpus_per_node": 8}
    assert float(symcalc.solve("ep_ranks_per_node", {**given, "etp": 1}).base_value) == 8
    assert float(symcalc.solve("ep_ranks_per_node", given).base_value) == 4


def test_the_planner_runs_the_stacks_one_chunk_schedule():
    """Under hai-llm (DeepSeek's DualPipe) a one-chunk layout is asked as DualPipe, and its
    re-check says so; the stack runs no interleaved schedule, so none is searched."""
    p = symcalc.plan("deepseek-v3", "h800", 2048, global_batch_size=15360, top=2, tp=1, pp=16, ep=64,
                     micro_batch_size=1, options={"stack": "hai-llm", "precision": "fp8", "zero_stage": "1",
                                                   "recompute": "full", "sequence_parallel": "false"})
    assert p.rows and all(r.options["pipeline_schedule"] == "dualpipe" for r in p.rows)
    assert all(r.layout["virtual_stages"] == 1 for r in p.rows)
    assert "pipeline_schedule=dualpipe" in p.rows[0].command


def test_a_tp_rank_dispatches_its_sequence_shard():
    """Megatron-Core runs EP with TP only under sequence parallelism: a TP rank's MoE input is its
    1/tp of the micro-batch's tokens, so at the same EP group layout (etp 1: 8 ranks a node
    either way) the all-to-all of one layer takes half as long at tp2 as at tp1."""
    given = {"ep": 32, "etp": 1, "cp": 1, "gpus_per_node": 8, "micro_batch_size": 1, "seq_len": "4096 token",
             "d_model": 4096, "n_experts": 128, "n_experts_activated": 8, "nic_bandwidth": "50 GB/s",
             "nvlink_bandwidth": "450 GB/s"}
    opts = {"architecture": "moe", "recompute": "none", "ep_dispatcher": "all_to_all"}
    one = symcalc.solve("ep_comm_time_per_layer", {**given, "tp": 1}, options=opts, hardware="h100")
    two = symcalc.solve("ep_comm_time_per_layer", {**given, "tp": 2}, options=opts, hardware="h100")
    assert float(two.base_value) == pytest.approx(float(one.base_value) / 2, rel=1e-12)


def test_dualpipe_keeps_the_parameters_twice():
    """DeepSeek-V3 report 3.2.1 and the DualPipe README: each GPU keeps two copies of its
    parameters (Table: 2x for DualPipe, 1x for 1F1B). The published layout's model states under
    DualPipe are 1F1B's plus one more copy of the weights and their gradients (ZeRO-1 shards
    neither): (bytes_per_param + gradient bytes) x params_per_gpu; the optimizer is kept once."""
    common = dict(model="deepseek-v3", hardware="h800")
    dual = symcalc.solve("model_state_memory", dict(DSV3), options=dict(DSV3_OPTIONS), **common)
    one = symcalc.solve("model_state_memory", dict(DSV3), options={**DSV3_OPTIONS, "pipeline_schedule": "1f1b"},
                        **common)
    v = dual.values
    copy = (v["bytes_per_param"] + v["grad_memory_bytes_per_param"]) * v["params_per_gpu"]
    assert float(dual.base_value) - float(one.base_value) == pytest.approx(copy, rel=1e-9)
    # the report's storage (3.3): FP8 weights cast from the FP32 master, FP32 gradients
    assert v["bytes_per_param"] == 1 and v["grad_memory_bytes_per_param"] == 4
    # at ep 64 and pp 16 a GPU holds (N - 63/64 of the routed experts) / 16 ~ 1.7e9 parameters:
    # 5 bytes each, 8.5 GB
    assert 7e9 < copy < 1e10
