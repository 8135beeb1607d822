"""Activation memory of published layouts (issue 36, item 2): the micro-batches a schedule keeps
in flight, what an MoE layer keeps for backward, and output-discarding recomputation. Each
expected value is counted by hand from the source the formula cites, or is the source's figure.

Shapes (formulas/presets/models.toml):
- Llama 3 405B: 126 layers, d 16384, 128 heads of 128, 8 KV heads (kv_width 1024), SwiGLU d_ffn
  53248, no dropout.
- Qwen3-235B-A22B: 94 layers, d 4096, 64 heads of 128, 4 KV heads (kv_width 512), 128 experts,
  top-8 of d_ffn_expert 1536, no shared expert.
- DeepSeek-V3: 61 layers (3 dense of d_ffn 18432, 58 MoE), d 7168, MLA with 128 heads (qk 192,
  v 128), q_lora_rank 1536, kv_lora_rank 512, rope 64; 8 routed + 1 shared expert of 2048.
"""

from __future__ import annotations

import pytest

import symcalc

# Llama 3 405B as Meta ran it at 16,384 GPUs (Llama 3 paper, Table 4): tp 8, pp 16, dp 128,
# 16 sequences a data-parallel group (2048 in all), micro-batch 1, seq 8192, v 8.
LLAMA_405B = dict(tp=8, pp=16, cp=1, dp=128, micro_batch_size=1, virtual_stages=8, seq_len="8192 token",
                  global_batch_size=2048)
LLAMA_OPTS = {"zero_stage": "1", "recompute": "none", "sequence_parallel": "true"}

# Bytes a Llama 3 405B layer keeps a token, before tp (Megatron-Core, flash/cuDNN attention, no
# dropout): the two norms' inputs and outputs 4 x 2 d, Q and the attention output 2 x 2 d, K and V
# 2 x 2 x 1024, SwiGLU's gate, up and product 3 x 2 x 53248, the fp32 log-sum-exp 4 x 128.
LLAMA_LAYER_BYTES = 8 * 16384 + 4 * 16384 + 4 * 1024 + 6 * 53248 + 4 * 128


def run(target, given, options, model, hardware="h100"):
    return symcalc.solve(target, given, options=options, model=model, hardware=hardware)


def test_interleaving_holds_no_more_micro_batches_than_the_step_has():
    # Megatron's interleaved schedule runs every forward before the first backward when
    # m == pp (schedules.py: all_warmup_microbatches): 16 sequences over pp 16 keep 16
    # micro-batches of 126 / 16 layers each, i.e. all 126 layers once, not 16 + 15/8 = 17.875.
    r = run("total_memory_per_gpu", LLAMA_405B, LLAMA_OPTS, "llama3-405b")
    assert r.values["n_microbatches"] == 16
    assert r.values["inflight_microbatches"] == pytest.approx(16)
    per_layer = 8192 * LLAMA_LAYER_BYTES / 8
    assert r.values["activation_memory"] == pytest.approx(126 * per_layer, rel=1e-9)
    assert r.values["activation_memory"] / 1e9 == pytest.approx(67.18, abs=0.01)


def test_interleaving_with_more_micro_batches_keeps_korthikanti_count():
    # twice the batch: 32 micro-batches > 17.875, so the first stage's warm-up decides:
    # 2 (p - 1) + (v - 1) p + 1 = 143 chunks of 1/8 stage = 17.875 (Korthikanti et al. 2022, 4.2.3)
    r = run("inflight_microbatches", {**LLAMA_405B, "global_batch_size": 4096}, LLAMA_OPTS, "llama3-405b")
    assert r.value == pytest.approx(17.875)


def test_interleaving_without_a_batch_assumes_a_full_warm_up():
    r = symcalc.solve("inflight_microbatches", {"pp": 16, "virtual_stages": 8},
                      options={"pipeline_schedule": "interleaved", "stack": "textbook"})
    assert r.value == pytest.approx(17.875)


def test_dualpipe_holds_pp_plus_one_on_either_end():
    # DualPipe README: activation per device PP + 1 (1F1B: PP); the schedule is symmetric, so the
    # last rank holds as many as the first
    for target in ("inflight_microbatches", "last_stage_inflight_microbatches"):
        r = symcalc.solve(target, {"pp": 16}, options={"pipeline_schedule": "dualpipe", "stack": "textbook"})
        assert r.value == 17
    # either end rank ends one direction and feeds the other: the loss of a micro-batch comes
    # on top of its PP + 1 (DeepSeek-V3 report 3.2.3: embedding and output head on one rank)
    r = symcalc.solve("total_memory_per_gpu", dict(tp=1, pp=4, dp=2, micro_batch_size=1, seq_len="4096 token"),
                      options={"pipeline_schedule": "dualpipe", "stack": "textbook", "memory_figure": "allocated",
                               "attention_kernel": "flash"}, model="llama3-8b")
    assert r.values["inflight_microbatches"] == 5
    assert r.values["loss_memory_excess"] == pytest.approx(r.values["loss_memory"])


QWEN = dict(tp=2, pp=8, virtual_stages=4, ep=32, dp=16, micro_batch_size=1, seq_len="4096 token",
            global_batch_size=2048)
QWEN_OPTS = {"sequence_parallel": "true", "zero_stage": "1", "recompute": "none"}


def test_an_moe_layer_keeps_its_routed_copies_and_their_activations_only():
    # NVIDIA's Qwen3-235B H100 recipe (Megatron-Bridge qwen3_workload_base_configs: tp 2, pp 8,
    # v 4, ep 32, etp 1, 256 GPUs). Per token, each of the 8 routed copies keeps the grouped GEMM's
    # input (4096) and SwiGLU's gate, up and product (3 x 1536): 8 x 8704 = 69,632 elements.
    r = run("total_memory_per_gpu", QWEN, QWEN_OPTS, "qwen3-235b")
    assert r.values["ffn_saved_width"] == 69632
    # the layer: norms 4 x 2 x 4096; Q 64 x 128, K and V 2 x 512, output 64 x 128 (17,408
    # elements), the FFN's 69,632, at 2 bytes, and the log-sum-exp 4 x 64; all split by tp 2
    # under sequence parallelism; 4096 tokens
    per_token = (4 * 2 * 4096 + 2 * (17408 + 69632) + 4 * 64) / 2
    assert r.values["layer_hidden_activation_memory"] == pytest.approx(4096 * per_token, rel=1e-9)
    # interleaved with 128 micro-batches: 8 + 7/4 = 9.75 of 94/8 layers
    assert r.values["activation_memory"] == pytest.approx(9.75 * 94 / 8 * 4096 * per_token, rel=1e-9)


DSV3 = dict(tp=1, pp=16, ep=64, dp=128, micro_batch_size=1, seq_len="4096 token", global_batch_size=15360)


def test_shared_experts_and_dense_layers_average_into_the_saved_width():
    # 3 dense layers keep 3 x 18,432; 58 MoE layers 8 x (7168 + 3 x 2048) + 3 x 2048 (the shared
    # expert is not permuted): (3 x 55,296 + 58 x 112,640) / 61
    r = run("ffn_saved_width", {}, {}, "deepseek-v3", hardware="h800")
    assert r.value == pytest.approx((3 * 55296 + 58 * 112640) / 61)


def test_output_discarding_frees_norm_outputs_up_projections_and_expert_activations():
    # DeepSeek-V3 report 3.2.3 / Megatron-Core --recompute-modules layernorm mla_up_proj moe_act.
    base = run("activation_memory_per_layer", DSV3, {"zero_stage": "1", "recompute": "none"}, "deepseek-v3", "h800")
    r = run("activation_memory_per_layer", DSV3,
            {"zero_stage": "1", "recompute": "selective", "selective_recompute": "output_discarding"},
            "deepseek-v3", "h800")
    # freed a token at tp 1: the two norms' outputs (2 x 7168), MLA's Q, K, V (128 x 192 +
    # 128 x 192 + 128 x 128) less the latents (1536 + 512 + 64), and the routed experts'
    # activation outputs (58 of 61 layers x 8 x 2048), at 2 bytes
    freed = 2 * (2 * 7168 + (24576 + 24576 + 16384 - 2112) + 58 * 8 * 2048 / 61)
    key = "activation_memory_per_layer"
    assert base.values[key] - r.values[key] == pytest.approx(4096 * freed, rel=1e-9)
    # what stays: norms' inputs 2 x 2 x 7168, the latents and the attention output 2 x (2112 +
    # 16384), the experts' inputs and gates 2 x saved width less the activation outputs, the lse
    kept = 4 * 7168 + 2 * (2112 + 16384) + 2 * ((3 * 55296 + 58 * 112640) / 61 - 58 * 8 * 2048 / 61) + 4 * 128
    assert r.values[key] == pytest.approx(4096 * kept, rel=1e-9)


@pytest.mark.parametrize("modules, freed", [
    ("moe_act", 58 * 8 * 2048 / 61),                                  # the experts' activation outputs
    ("mla_up_proj", 24576 + 24576 + 16384 - 2112),                     # Q, K, V less the latents
    ("layernorm", 2 * 7168),                                          # the two norms' outputs
    ("layernorm+moe_act", 2 * 7168 + 58 * 8 * 2048 / 61),
    ("moe_act, layernorm", 2 * 7168 + 58 * 8 * 2048 / 61),           # as Megatron lists them: one value
    ("core_attn", 0),                                                 # a flash kernel keeps no scores
    # the 3 dense layers' whole MLP (3 x 18,432 a token: gate, up and their product)
    ("mlp", 3 * 3 * 18432 / 61),
    # the shared expert's MLP (3 x 2,048) in the 58 MoE layers
    ("shared_experts", 58 * 3 * 2048 / 61),
    # the whole MoE FFN of 58 layers: 8 routed copies and their 3 x 2,048 each, the shared expert;
    # moe_act's piece is inside it, not freed twice
    ("moe+moe_act", 58 * 112640 / 61),
    ("moe+shared_experts", 58 * 112640 / 61),
])
def test_each_recompute_module_frees_its_own_piece(modules, freed):
    # Megatron-Core's recompute_modules named apart (Megatron-Bridge recipes use ["moe_act"],
    # ["layernorm", "moe_act"] and ["mla_up_proj", "mlp"]): each output-discarding piece frees its
    # part of output_discarding's total (the test above), each checkpointed module (mlp, moe,
    # shared_experts) its inner tensors, its input kept; at 2 bytes an element, 4096 tokens,
    # DeepSeek-V3 at tp 1
    base = run("activation_memory_per_layer", DSV3, {"zero_stage": "1", "recompute": "none"}, "deepseek-v3", "h800")
    r = run("activation_memory_per_layer", DSV3,
            {"zero_stage": "1", "recompute": "selective", "selective_recompute": modules}, "deepseek-v3", "h800")
    key = "activation_memory_per_layer"
    assert base.values[key] - r.values[key] == pytest.approx(4096 * 2 * freed, rel=1e-9)


def test_output_discarding_without_latents_or_experts_frees_the_norm_outputs_only():
    # Llama 3 8B, tp 1, one sequence of 4096: 2 x 4096 elements of 2 bytes a token
    given = dict(tp=1, pp=1, dp=8, micro_batch_size=1, seq_len="4096 token")
    none = run("activation_memory_per_layer", given, {"recompute": "none"}, "llama3-8b")
    od = run("activation_memory_per_layer", given,
             {"recompute": "selective", "selective_recompute": "output_discarding"}, "llama3-8b")
    key = "activation_memory_per_layer"
    assert none.values[key] - od.values[key] == pytest.approx(4096 * 2 * 2 * 4096)


def test_output_discarding_reruns_the_memory_bound_work():
    # the norms, rotary and activations run again in backward (elementwise passes 3.5, not 2.5):
    # the step is slower than without recomputation, the attention core is not rerun
    given = dict(tp=1, pp=1, dp=8, micro_batch_size=1, seq_len="4096 token", global_batch_size=64)
    none = run("step_time", given, {"recompute": "none"}, "llama3-8b")
    od = run("step_time", given, {"recompute": "selective", "selective_recompute": "output_discarding"}, "llama3-8b")
    assert od.values["elementwise_passes"] == 3.5 and none.values["elementwise_passes"] == 2.5
    assert od.values["score_passes"] == none.values["score_passes"]
    assert od.value > none.value


def test_a_checkpointed_mlp_reruns_its_gemms_and_core_attn_its_attention():
    # Llama 3 8B, tp 1: the MLP holds 3 x 4096 x 14336 of the layer's 218.1 M parameters (attention
    # 2 x 4096 x 128 x (32 + 8) = 41.9 M, two norms 8,192): its forward runs again, linear passes
    # 3 + 176.2 / 218.1 (Megatron-Bridge: "mlp ... replays the complete dense MLP"); core_attn
    # reruns the attention core's forward (score passes 3.5 + 1 under a flash kernel)
    given = dict(tp=1, pp=1, dp=8, micro_batch_size=1, seq_len="4096 token", global_batch_size=64)
    opts = {"recompute": "selective", "stack": "megatron-core"}
    mlp = run("step_time", given, {**opts, "selective_recompute": "mlp"}, "llama3-8b")
    both = run("step_time", given, {**opts, "selective_recompute": "mlp+core_attn"}, "llama3-8b")
    ffn, attn = 3 * 4096 * 14336, 2 * 4096 * 128 * (32 + 8)
    assert mlp.values["linear_passes"] == pytest.approx(3 + ffn / (ffn + attn + 2 * 4096), rel=1e-9)
    assert (mlp.values["score_passes"], both.values["score_passes"]) == (3.5, 4.5)
    assert both.values["linear_passes"] == mlp.values["linear_passes"]


def test_a_recompute_module_the_stack_lacks_names_both():
    # torchtitan's selective checkpointing is per operation: Megatron-Core's modules are not its
    given = dict(tp=1, pp=1, dp=8, micro_batch_size=1, seq_len="4096 token")
    with pytest.raises(symcalc.SymcalcError, match=r"(?s)selective_recompute.*mlp.*torchtitan|torchtitan.*mlp"):
        run("activation_memory_per_layer", given,
            {"recompute": "selective", "stack": "torchtitan", "selective_recompute": "mlp"}, "llama3-8b")


def test_fp8_keeps_gemm_only_inputs_in_one_byte_under_transformer_engine_not_torchao():
    # Transformer Engine's Linear keeps its FP8-cast input for the weight gradient; torchao's
    # Float8Linear keeps the bf16 input and casts again. Llama 3 8B at tp 1, 4096 tokens: the two
    # norms' outputs (2 x 4096) and SwiGLU's product (14336) drop from 2 bytes to 1 a token.
    given = dict(tp=1, pp=1, dp=8, micro_batch_size=1, seq_len="4096 token")
    key = "activation_memory_per_layer"
    # asked under the textbook stack, which runs every recipe, so that only the recipe differs
    # (Megatron-Core runs no torchao recipe, torchtitan no Transformer Engine one)
    one = {"recompute": "none", "stack": "textbook", "attention_kernel": "flash"}
    bf16 = run(key, given, one, "llama3-8b").values[key]
    te = run(key, given, {**one, "precision": "fp8", "fp8_recipe": "delayed"}, "llama3-8b").values[key]
    ao = run(key, given, {**one, "precision": "fp8", "fp8_recipe": "tensorwise"}, "llama3-8b").values[key]
    assert bf16 - te == pytest.approx(4096 * (2 * 4096 + 14336))
    assert ao == pytest.approx(bf16)


def test_deepseek_v3_as_its_report_runs_it_keeps_under_half_the_bf16_layer():
    # DeepSeek-V3 report: RMSNorm and MLA up-projections recomputed (3.2.3), the experts'
    # activation recomputed from its cached input (3.3.2), Linear inputs cached in FP8 (3.3.2),
    # SwiGLU's inputs cached in FP8 and the attention output in E5M6, 1.5 bytes (3.3.3).
    # Per token at tp 1, averaged over the 61 layers (3 dense):
    saved = (3 * 55296 + 58 * 112640) / 61                      # ffn_saved_width
    gemm = (3 * 18432 + 58 * (8 * (2048 + 7168) + 2048)) / 61   # of it, GEMM-only inputs (1 byte)
    moe_act = 58 * 8 * 2048 / 61                                # experts' activation outputs, freed
    kept = (2 * 2 * 7168                                        # norms' inputs, bf16 (outputs freed)
            + 2 * (81920 - 63424 - 16384) + 1.5 * 16384         # latents bf16, attention output E5M6
            + 1 * (saved - gemm) + (gemm - moe_act)             # SwiGLU inputs and GEMM inputs, FP8
            + 4 * 128)                                          # lse
    opts = {"stack": "hai-llm", "pipeline_schedule": "1f1b", "zero_stage": "1", "recompute": "selective",
            "selective_recompute": "output_discarding", "precision": "fp8", "fp8_recipe": "blockwise"}
    r = run("total_memory_per_gpu", DSV3, opts, "deepseek-v3", "h800")
    assert r.values["activation_memory_per_layer"] == pytest.approx(4096 * kept, rel=1e-9)
    # 1F1B over pp 16: 16 micro-batches of 61/16 layers
    assert r.values["activation_memory"] == pytest.approx(16 * 61 / 16 * 4096 * kept, rel=1e-9)
    # without any of it (bf16, nothing recomputed): norms 4 x 2 x 7168, attention 2 x 81,920,
    # the FFN 2 x saved, the lse: 441,335 bytes a token against 197,280
    bf16 = run("activation_memory_per_layer", DSV3, {"zero_stage": "1", "recompute": "none"}, "deepseek-v3", "h800")
    whole = 4 * 2 * 7168 + 2 * (81920 + saved) + 4 * 128
    assert bf16.values["activation_memory_per_layer"] == pytest.approx(4096 * whole, rel=1e-9)
    assert kept / whole < 0.45


def test_an_empty_list_of_modules_points_to_no_recomputation():
    # Megatron-Bridge's control row is recompute_granularity selective with recompute_modules []:
    # nothing is recomputed, which symcalc says as recompute = none
    given = dict(tp=1, pp=1, dp=8, micro_batch_size=1, seq_len="4096 token")
    with pytest.raises(symcalc.SymcalcError, match=r"empty list of modules recomputes nothing .*recompute=none"):
        run("activation_memory_per_layer", given,
            {"recompute": "selective", "stack": "megatron-core", "selective_recompute": "[]"}, "llama3-8b")
