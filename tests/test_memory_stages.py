"""Peak memory, second round (formulas/peak_memory.toml): which pipeline stage is the busiest
and the embeddings it holds, context parallelism's K/V buffers, the optimizer step's
temporaries, FP8's working copies and the allocator with and without expandable segments. Each
expected value is counted by hand from the source the formula cites.

Llama 3 8B (32 layers, d 4096, 8 KV heads of 128: kv_width 1024, vocabulary 128256, untied) and
Llama 3 70B (80 layers, d 8192, kv_width 1024) as in tests/test_memory_parts.py.
"""

from __future__ import annotations

import json

import pytest

import symcalc
from symcalc.errors import SymcalcError

N8B, V, D8, L8 = 8_030_261_248, 128256, 4096, 32
N70B, D70, L70 = 70_553_706_496, 8192, 80


def solve(target, given, options=None, model="llama3-8b"):
    """Counted as the formulas count it (the textbook stack), unless a test names another."""
    return symcalc.solve(target, given, options={"stack": "textbook", **(options or {})}, model=model)


# ---- pipeline stages ------------------------------------------------------------------------------

def test_interleaving_leaves_the_last_stage_fewer_micro_batches_but_not_one():
    # Megatron's interleaved schedule: the last rank warms up (v - 1) p chunk forwards and holds
    # one more, each chunk 1/v of the stage: ((8 - 1) 4 + 1) / 8 = 3.625 micro-batches (first: 4.375)
    last = solve("last_stage_inflight_microbatches", {"pp": 4, "virtual_stages": 8},
                 {"pipeline_schedule": "interleaved"})
    first = solve("inflight_microbatches", {"pp": 4, "virtual_stages": 8}, {"pipeline_schedule": "interleaved"})
    assert last.value == pytest.approx(3.625) and first.value == pytest.approx(4.375)


JOB_70B = dict(micro_batch_size=1, seq_len="8192 token", tp=8, pp=4, dp=4, n_gpus=128)


def test_the_answer_names_the_busiest_stage():
    # 70B, tp 8, pp 4, 1F1B. Full recomputation: a stage of 20 layers keeps 20 layer inputs of
    # 2 x 8192 x 8192 bytes / 8 (split: sequence parallelism off, but Megatron's full recompute
    # input is the layer input, counted whole) -- whatever that is, the first stage holds 4
    # micro-batches of it and the last one plus the loss, 8192 x 128256 x 12 / 8 = 1.576 GB.
    r = solve("total_memory_per_gpu", JOB_70B, {"recompute": "full", "attention_kernel": "flash"}, model="llama3-70b")
    per_mb, act = r.values["activation_memory_per_microbatch"], r.values["activation_memory"]
    loss = 8192 * V * 12 / 8
    assert r.values["loss_memory"] == pytest.approx(loss)
    assert act == pytest.approx(4 * per_mb)
    stage = 4 if per_mb + loss > act else 1
    assert [f.values["value"] for f in r.findings if f.kind == "reported"] == [stage]
    assert f"busiest_pipeline_stage = {stage}:" in r.text()
    assert json.loads(r.json())["reported"] == {"busiest_pipeline_stage": stage}
    # without recomputation the 4 micro-batches of the first stage outweigh the loss: stage 1
    r = solve("total_memory_per_gpu", JOB_70B, {"recompute": "none", "attention_kernel": "flash"}, model="llama3-70b")
    assert json.loads(r.json())["reported"] == {"busiest_pipeline_stage": 1}
    assert r.values["loss_memory_excess"] == 0


def test_the_first_and_last_stages_hold_a_whole_embedding_matrix():
    # untied: two V x d matrices spread over pp stages by params_per_gpu; the first and the last
    # each hold one whole, V d / tp: beyond the even share 2 V d / (tp pp) by V d / tp x (1 - 2/pp)
    for pp, share in ((1, 0.0), (2, 0.0), (4, 0.5), (8, 0.75)):
        r = solve("stage_embedding_params", {"tp": 8, "pp": pp}, model="llama3-70b")
        assert r.value == pytest.approx(V * D70 / 8 * share, abs=1e-3)
    # tied (one matrix, a copy on the last stage): V d / tp x (1 - 1/pp)
    r = solve("stage_embedding_params", {"tp": 1, "pp": 4, "vocab_size": V, "d_model": D8},
              {"tied_embeddings": "true"})
    assert r.value == pytest.approx(V * D8 * 0.75)
    # their model states: 16 bytes each without ZeRO (mixed precision Adam)
    r = solve("stage_embedding_memory", {"tp": 8, "pp": 4, "dp": 1}, {"zero_stage": "0"}, model="llama3-70b")
    assert r.to("byte").magnitude == pytest.approx(16 * V * D70 / 8 * 0.5)


# ---- context parallelism ----------------------------------------------------------------------------

@pytest.mark.parametrize("comm,expected", [
    # all-gather (torchtitan, Llama 3): the whole sequence's K and V, and in backward their
    # gradients: 4 x 262144 x 1024 x 2 bytes
    ("all_gather", 4 * 262144 * 1024 * 2),
    # ring: K and V of a chunk of 32768, double-buffered, and their gradients: 8 x 32768 x 1024 x 2
    ("ring", 8 * 32768 * 1024 * 2),
    # Ulysses: one more copy of Q, the output (d each) and K, V (1024 each) of the chunk
    ("all_to_all", 2 * 32768 * (4096 + 1024) * 2),
])
def test_context_parallel_buffers(comm, expected):
    r = solve("cp_attention_buffer_memory", {"micro_batch_size": 1, "seq_len": "262144 token", "cp": 8, "tp": 1},
              {"cp_comm": comm})
    assert r.to("byte").magnitude == pytest.approx(expected)
    none = solve("cp_attention_buffer_memory", {"micro_batch_size": 1, "seq_len": "8192 token", "cp": 1, "tp": 1},
                 {"cp_comm": comm})
    assert none.to("byte").magnitude == 0


# ---- the optimizer step -----------------------------------------------------------------------------

def test_a_foreach_adam_step_allocates_one_state_for_the_shard_and_a_fused_one_none():
    # torch.optim.AdamW's default: sqrt(exp_avg_sq) for every parameter of the shard at once, one
    # fp32 state: 4 bytes x 8.03e9 / 8 ranks (ZeRO-1)
    given = {"dp": 8, "tp": 1, "pp": 1}
    r = solve("optimizer_step_memory", given, {"zero_stage": "1", "optimizer_impl": "foreach"})
    assert r.to("byte").magnitude == pytest.approx(4 * N8B / 8)
    # fused: the option sets it to 0 (a value set by an option is an input, read from a total)
    r = solve("allocated_memory_per_gpu", {**given, "micro_batch_size": 1, "seq_len": "8192 token"},
              {"zero_stage": "1", "optimizer_impl": "fused"})
    assert r.values["optimizer_step_memory"] == 0 and r.values["optimizer_step_excess"] == 0


def test_the_optimizer_step_is_the_peak_only_when_it_outweighs_the_activations():
    # one GPU, no ZeRO, AdamW foreach: the step holds 16 N of states and 4 N of temporary; with
    # full recomputation of 8192 tokens the backward's side is smaller: the excess is the difference
    opts = {"zero_stage": "0", "optimizer_impl": "foreach", "recompute": "full", "attention_kernel": "flash",
            "memory_figure": "allocated"}
    r = solve("allocated_memory_per_gpu", {"micro_batch_size": 1, "seq_len": "8192 token", "tp": 1, "pp": 1, "dp": 1},
              opts)
    side = r.values["activation_side_memory"]
    assert r.values["optimizer_step_memory"] == pytest.approx(4 * N8B)
    assert r.values["optimizer_step_excess"] == pytest.approx(max(4 * N8B - side, 0))
    assert r.to("byte").magnitude == pytest.approx(16 * N8B + max(4 * N8B, side))


# ---- FP8 and the allocator ---------------------------------------------------------------------------

def test_fp8_working_copies_of_one_layer():
    # Weights kept in FP8 (the library's fp8_states = compact, seed 003's recipe; Megatron-Core's
    # --fp8-param-gather alike): one more FP8 copy of a layer's weights, the transposed one for
    # the input gradient, 1 byte a parameter of the layer's shard; and 3 fp32 amax
    # histories of 1025 entries (history + scale) per linear layer, 7 a block
    given = {"tp": 1, "pp": 1}
    r = solve("float8_buffer_memory", given, {"precision": "fp8"})
    layer = r.values["one_layer_params_per_gpu"]     # the dense layer's params_per_layer / tp
    assert layer == pytest.approx(r.values["params_per_layer"])
    assert r.to("byte").magnitude == pytest.approx(layer + 3 * 4 * 1025 * 7 * L8)
    # kept in BF16, a weight is cast twice: for the forward and, transposed, for the backward
    r = solve("float8_buffer_memory", given, {"precision": "fp8", "fp8_states": "bf16_weights"})
    assert r.to("byte").magnitude == pytest.approx(2 * layer + 3 * 4 * 1025 * 7 * L8)
    # and inside a total the formula, not a fallback, gives it: the peak holds the copies
    r = solve("allocated_memory_per_gpu", {**given, "micro_batch_size": 1, "seq_len": "8192 token", "dp": 8},
              {"precision": "fp8", "fp8_states": "bf16_weights"})
    assert r.values["float8_buffer_memory"] == pytest.approx(2 * layer + 3 * 4 * 1025 * 7 * L8)
    # without FP8 the precision sets it to 0
    r = solve("allocated_memory_per_gpu", {**given, "micro_batch_size": 1, "seq_len": "8192 token", "dp": 8},
              {"precision": "bf16_fp32_grads"})
    assert r.values["float8_buffer_memory"] == 0


@pytest.mark.parametrize("segments,fraction", [("fixed", 0.18), ("expandable", 0.043)])
def test_the_reserve_follows_the_allocators_segments(segments, fraction):
    # the reserve is the segments' fraction of the short-lived blocks at the peak: everything the
    # backward's peak holds besides the model states (activation_side_memory) and what the
    # optimizer step needs beyond it; the weights and states, allocated once, add none
    given = {"micro_batch_size": 1, "seq_len": "8192 token", "tp": 1, "pp": 1, "dp": 8, "n_gpus": 8}
    opts = {"zero_stage": "3", "recompute": "full", "attention_kernel": "flash", "allocator_segments": segments}
    r = solve("total_memory_per_gpu", given, opts)
    v = r.values
    transient = (v["activation_memory"] + v["recompute_working_set"] + v["loss_memory_excess"]
                 + v["zero3_gather_memory"] + v["cp_attention_buffer_memory"] + v["float8_buffer_memory"]
                 + v["optimizer_step_excess"])
    assert v["allocator_reserve_memory"] == pytest.approx(fraction * transient)
    assert v["allocator_reserve_memory"] < fraction * v["allocated_memory_per_gpu"]


def test_an_unknown_allocator_setting_is_refused_with_the_values_it_takes():
    with pytest.raises(SymcalcError, match="expandable"):
        solve("total_memory_per_gpu", {"micro_batch_size": 1}, {"allocator_segments": "expandible"})
