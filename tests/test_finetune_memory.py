"""Fine-tuning memory (formulas/finetune.toml): the optimizer step inside the backward, states
offloaded to the CPU with their PCIe traffic, activations offloaded, LoRA and QLoRA, each counted
by hand from its source; and the published fine-tuning peaks of calibration/memory/ they score.

Llama 3.2 3B throughout (torchtune llama3_2_3b: 28 layers, d 3072, 24 heads, 8 KV heads of 128,
SwiGLU 8192, vocabulary 128256, tied embeddings), batch 2 x 4096 tokens on one GPU. Per layer the
linear weights are Q and O 3072 x 3072 and K, V 3072 x 1024 (25,165,824) plus three FFN matrices
of 3072 x 8192 (75,497,472): 100,663,296; 28 layers make 2,818,572,288, and the one (tied)
embedding 128256 x 3072 = 394,002,432 (the library counts no norm weights here).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import symcalc

ROOT = Path(__file__).resolve().parents[1]
LAYER_LINEAR = 2 * 3072 * (3072 + 1024) + 3 * 3072 * 8192     # 100,663,296
EMBEDDING = 128256 * 3072                                       # 394,002,432
JOB = dict(n_layers=28, d_model=3072, n_heads=24, n_kv_heads=8, vocab_size=128256, d_ffn=8192,
           tp=1, pp=1, dp=1, n_gpus=1, micro_batch_size=2, seq_len="4096 token")
OPTIONS = dict(stack="textbook", ffn="swiglu", tied_embeddings="true", zero_stage="0")


def solve(target, options=None, **given):
    return symcalc.solve(target, {**JOB, **given}, options={**OPTIONS, **(options or {})})


def test_lora_rank_8_on_q_and_v_of_llama_3_2_3b():
    # per layer r (d_in + d_out) for Wq (3072 -> 3072) and Wv (3072 -> 1024): 8 x 10,240 = 81,920;
    # x 28 layers = 2,293,760 trainable parameters
    got = solve("lora_adapter_params_per_gpu", {"finetune": "lora", "lora_targets": "qv"}, lora_rank=8)
    assert got.value == 2_293_760


def test_torchtune_lora_targets_at_rank_64():
    # q, v, output_proj and the three FFN matrices: 6144 + 4096 + 6144 + 3 x 11,264 = 50,176 a layer;
    # x 64 x 28 = 89,915,392 (torchtune 3B_lora_single_device.yaml: rank 64, apply_lora_to_mlp)
    got = solve("lora_adapter_params_per_gpu", {"finetune": "lora", "lora_targets": "qvo_mlp"}, lora_rank=64)
    assert got.value == 89_915_392


def test_qlora_stores_the_layer_linears_in_nf4_and_the_embedding_in_bf16():
    # NF4: 4 bits + an 8-bit absmax per 64 + an fp32 constant per 64 x 256 (QLoRA section 3)
    nf4 = 0.5 + 1 / 64 + 4 / (64 * 256)
    want = 28 * LAYER_LINEAR * nf4 + 2 * EMBEDDING            # 1,454,014,464 + 788,004,864 bytes
    got = solve("frozen_weight_memory", {"finetune": "qlora", "lora_targets": "qvo_mlp"}, lora_rank=64)
    assert got.to("byte").magnitude == pytest.approx(want, rel=1e-9)
    lora = solve("frozen_weight_memory", {"finetune": "lora", "lora_targets": "qvo_mlp"}, lora_rank=64)
    assert lora.to("byte").magnitude == pytest.approx(2 * (28 * LAYER_LINEAR + EMBEDDING), rel=1e-9)


def test_lora_model_states_are_the_frozen_base_and_the_adapters_states():
    # pure bf16 (torchtune): adapters 2 (weight) + 2 (gradient) + 4 (AdamW m, v in bf16) bytes each
    given = {"lora_rank": 64, "master_weight_bytes_per_param": "0 byte", "optimizer_state_bytes_per_param": "4 byte"}
    got = solve("model_state_memory", {"finetune": "lora", "lora_targets": "qvo_mlp"}, **given)
    want = 2 * (28 * LAYER_LINEAR + EMBEDDING) + 8 * 89_915_392
    assert got.to("byte").magnitude == pytest.approx(want, rel=1e-9)


def test_optimizer_in_backward_holds_one_layer_and_the_lm_head_of_gradients():
    # the LM head's gradient (V d) at the start of backward and one layer's: (100,663,296 +
    # 394,002,432) x 2 bytes = 989,331,456, against 2 x 3,212,574,720 = 6.4 GB for all of them
    got = solve("gradient_memory", {"optimizer_step": "in_backward"})
    assert got.to("byte").magnitude == pytest.approx(2 * (LAYER_LINEAR + EMBEDDING), rel=1e-9)
    full = solve("gradient_memory")
    assert full.to("byte").magnitude == pytest.approx(2 * (28 * LAYER_LINEAR + EMBEDDING), rel=1e-9)


@pytest.mark.parametrize("zero,dp,want_gb", [("0", 1, 14.0), ("3", 4, 3.5)])
def test_zero_offload_keeps_only_the_16_bit_weights_on_the_gpu(zero, dp, want_gb):
    # ZeRO-Offload (Ren et al. 2021): fp16 parameters 2M bytes on the GPU; 7B -> 14 GB, over 4 ranks 3.5 GB
    got = symcalc.solve("model_state_memory", {"n_params": 7e9, "dp": dp},
                        options={"stack": "textbook", "offload": "optimizer", "zero_stage": zero})
    assert got.to("GB").magnitude == pytest.approx(want_gb, rel=1e-9)


def test_zero_offload_moves_gradients_out_and_weights_back_each_step():
    # 7B in bf16: 2 bytes of gradient out + 2 bytes of weight back a parameter = 28 GB a step;
    # at the default 25 GB/s one way, 1.12 s (before overlap)
    got = symcalc.solve("offload_transfer_time", {"n_params": 7e9, "dp": 1},
                        options={"stack": "textbook", "offload": "optimizer"})
    assert got.to("s").magnitude == pytest.approx(28e9 / 25e9, rel=1e-9)


def test_fsdp_cpu_offload_leaves_no_resident_model_state():
    got = symcalc.solve("model_state_memory", {"n_params": 70e9, "dp": 8},
                        options={"stack": "textbook", "offload": "all", "zero_stage": "3"})
    assert got.value == 0


def test_activation_offloading_keeps_two_checkpointed_inputs():
    # a layer's input is 2 x 4096 x 3072 x 2 bytes = 50,331,648; two stay on the GPU, not 28
    opts = {"recompute": "full", "activation_offload": "cpu", "attention_kernel": "flash"}
    got = solve("activation_memory", opts)
    assert got.to("byte").magnitude == pytest.approx(2 * 50_331_648, rel=1e-9)
    kept = solve("activation_memory", {"recompute": "full", "attention_kernel": "flash"})
    assert kept.to("byte").magnitude == pytest.approx(28 * 50_331_648, rel=1e-9)


def test_an_unknown_offload_value_is_one_line_naming_the_values():
    with pytest.raises(symcalc.SymcalcError) as e:
        solve("model_state_memory", {"offload": "cpu"})
    text = str(e.value)
    assert "offload" in text and "optimizer" in text and len(text.splitlines()) == 1


# ---- published fine-tuning peaks -------------------------------------------------------------------

FINETUNE_OPTIONS = ("optimizer_step", "offload", "activation_offload", "finetune", "optimizer_paging")


@pytest.fixture(scope="module")
def finetune_rows():
    sys.path.insert(0, str(ROOT / "calibration"))
    import memory as M
    runs = [M.translate(src, row) for src, row in M.load_rows()]
    runs = [r for r in runs if not r.why_not and any(k in r.options for k in FINETUNE_OPTIONS)]
    predicted, failures = M.predict(runs)
    return {r.id: (r, p) for r, p in zip(runs, predicted)}, failures


def test_every_fine_tuning_row_is_answered(finetune_rows):
    rows, failures = finetune_rows
    assert not failures and len(rows) == 14


@pytest.mark.parametrize("rid,bound", [
    ("ttune_l32_3b_full_a100_5_optinbwd", 0.05),     # measured 23.1 GiB active; predicted 22.3 (-3.6 %)
    ("ttune_l32_3b_full_a100_6_actoffload", 0.05),   # measured 21.8; predicted 21.1 (-3.4 %)
    ("ds_qwen3_4b_zero3off_sp4_96k", 0.10),          # measured 66.0; predicted 60.4 (-8.5 %)
])
def test_fine_tuning_peaks_within_their_recorded_error(finetune_rows, rid, bound):
    rows, _ = finetune_rows
    r, p = rows[rid]
    assert abs(p / r.measured - 1) < bound, (rid, p / 2**30)


def test_chunking_a_compiled_loss_saves_what_torchtunes_ladder_measured():
    # torchtune README (Nov 2024), Llama 3.2 3B, batch 2 x 4096 on an A100, active bytes: 51.0 GiB with
    # torch.compile, 42.9 GiB once CEWithChunkedOutputLoss is added (the next row of the cumulative table).
    # The two rows differ only in the loss: 2 x 4096 x 128,256 logits at 10 - 2.25 = 7.75 bytes each
    # is 8.14e9 bytes (7.58 GiB), within 10 % of the 8.1 GiB published.
    sys.path.insert(0, str(ROOT / "calibration"))
    import memory as M
    rows = {row["id"]: (src, row) for src, row in M.load_rows()}
    runs = [M.translate(*rows[i]) for i in ("ttune_l32_3b_full_a100_2_compile", "ttune_l32_3b_full_a100_3_chunkedce")]
    assert [r.options["loss_kernel"] for r in runs] == ["fp32_logits_compiled", "chunked_compiled"]
    (whole, chunked), failures = M.predict(runs)
    assert not failures
    assert (whole - chunked) == pytest.approx(2 * 4096 * 128_256 * 7.75, rel=1e-6)
    assert (whole - chunked) / 2**30 == pytest.approx(51.0 - 42.9, rel=0.10)


@pytest.mark.parametrize("optimizer,state_bytes", [
    ("adamw_8bit_torchao", 2 * (1 + 4 / 256)),     # two moments: a byte each + an fp32 scale per 256
    ("adamw_4bit_torchao", 2 * (0.5 + 4 / 128)),   # two moments: half a byte each + an fp32 scale per 128
])
def test_low_bit_optimizer_states_count_their_block_scales(optimizer, state_bytes):
    # pure bf16 (no master copy), 7e9 parameters, no ZeRO
    got = symcalc.solve("optimizer_memory", {"n_params": 7e9, "master_weight_bytes_per_param": "0 byte"},
                        options={"stack": "textbook", "optimizer": optimizer})
    assert got.to("byte").magnitude == pytest.approx(state_bytes * 7e9, rel=1e-9)


def test_the_step_in_the_backward_refuses_gradient_accumulation_in_one_line():
    # torchtune full_finetune_single_device raises RuntimeError for optimizer_in_bwd with
    # gradient_accumulation_steps > 1: 8 sequences of 2 a step on one GPU accumulate 4 micro-batches
    with pytest.raises(symcalc.SymcalcError) as e:
        solve("gradient_memory", {"optimizer_step": "in_backward"}, global_batch_size=8)
    text = str(e.value)
    assert "optimizer_step=in_backward" in text and "global_batch_size" in text and len(text.splitlines()) == 1


def test_lora_on_q_k_and_v_of_llama_3_1_70b_at_rank_16():
    # torchtune 70B_lora.yaml: q (8192 -> 8192), k and v (8192 -> 1024): 4 x 8192 + 2 x 1024 = 34,816
    # a layer; x 16 x 80 layers = 44,564,480 adapter parameters
    got = symcalc.solve("lora_adapter_params_per_gpu", {"n_layers": 80, "d_model": 8192, "n_heads": 64, "n_kv_heads": 8,
                                                        "lora_rank": 16},
                        options={"stack": "textbook", "finetune": "lora", "lora_targets": "qkv"})
    assert got.value == 44_564_480


def test_paged_optimizer_states_leave_pytorchs_counters_and_are_reported_apart():
    # bitsandbytes PagedAdamW8bit: 7e9 parameters x 2 bytes (two 1-byte moments) = 14 GB in unified
    # memory; PyTorch's counters see only the fp32 master copy of mixed precision, 4 bytes a parameter
    opts = {"stack": "textbook", "optimizer": "adam_8bit", "optimizer_paging": "unified"}
    paged = symcalc.solve("paged_optimizer_memory", {"n_params": 7e9, "dp": 1}, options=opts)
    assert paged.to("GB").magnitude == pytest.approx(14.0, rel=1e-9)
    states = symcalc.solve("model_state_memory", {"n_params": 7e9, "dp": 1}, options=opts)
    assert states.to("GB").magnitude == pytest.approx((2 + 2 + 4) * 7.0, rel=1e-9)


def test_activation_offloading_moves_every_checkpointed_input_out_and_back():
    # 28 layer inputs of 50,331,648 bytes, out in the forward and back in the backward, one
    # micro-batch: 2.82 GB a step, 0.113 s at the default 25 GB/s
    opts = {"recompute": "full", "activation_offload": "cpu", "attention_kernel": "flash"}
    got = solve("offload_transfer_time", opts, global_batch_size=2)
    assert got.to("s").magnitude == pytest.approx(2 * 28 * 50_331_648 / 25e9, rel=1e-9)
    both = solve("offload_transfer_bytes", {**opts, "offload": "optimizer"}, global_batch_size=2)
    # plus the gradients out and the weights back: 2 + 2 bytes for each of 3,212,574,720 parameters
    want = 2 * 28 * 50_331_648 + 4 * (28 * LAYER_LINEAR + EMBEDDING)
    assert both.to("byte").magnitude == pytest.approx(want, rel=1e-9)


def _llama2_states(optimizer=None):
    """Model states of Llama-2-7B in full bf16 (no master copy) under an optimizer value; the
    fused PyTorch AdamW keeps its two moments in the weights' bf16, 4 bytes."""
    given = {"master_weight_bytes_per_param": "0 byte"}
    if optimizer is None:
        given["optimizer_state_bytes_per_param"] = "4 byte"
    opts = {"stack": "textbook", **({"optimizer": optimizer} if optimizer else {})}
    return symcalc.solve("model_state_memory", given, options=opts, model="llama2-7b").to("GiB").magnitude


@pytest.mark.parametrize("rid,optimizer,bound", [
    ("torchao_l2_7b_adamw_ao8bit", "adamw_8bit_torchao", 0.02),   # 12.36 GiB predicted, 12.5 published
    ("torchao_l2_7b_adamw_ao4bit", "adamw_4bit_torchao", 0.02),   # 18.43 predicted, 18.4 published
    ("torchao_l2_7b_adamw_bnb8bit", "adam_8bit", 0.03),           # 12.55 predicted, 12.3 published
])
def test_low_bit_adamw_saves_what_torchaos_llama2_table_measured(rid, optimizer, bound):
    # torchao/optim/README.md: the same Llama-2-7B fine-tune (torchtune, full BF16, fixed seed) with
    # fused AdamW and with low-bit states; the activations are the same, so the difference of the
    # measured peaks is the states' difference (calibration/memory/torchao_low_bit_optim.toml)
    sys.path.insert(0, str(ROOT / "calibration"))
    import memory as M
    measured = {row["id"]: row["measured_gib"] for _, row in M.load_rows()}
    published = measured["torchao_l2_7b_adamw_fused"] - measured[rid]
    predicted = _llama2_states() - _llama2_states(optimizer)
    assert abs(predicted / published - 1) < bound, (predicted, published)


@pytest.mark.parametrize("targets,freed_width", [("qv", 3072 + 8192), ("qkv", 3072 + 8192), ("qvo_mlp", 0)])
def test_lora_keeps_no_input_a_frozen_gemm_alone_reads(targets, freed_width):
    # PyTorch's autograd saves a linear layer's input only for its weight's gradient: with the FFN
    # frozen (q and v adapted), the FFN norm's output (3072) and the down projection's input
    # (8192) are not kept, 2 bytes each a token; the attention norm's output stays (the q and v
    # adapters read it), and so does everything the attention's and SwiGLU's own backward read.
    # 2 x 4096 tokens a layer: 8192 x 11264 x 2 = 184.5 MB less than full fine-tuning
    opts = {"recompute": "none"}
    full = solve("activation_memory_per_layer", opts)
    lora = solve("activation_memory_per_layer", {**opts, "finetune": "lora", "lora_targets": targets}, lora_rank=8)
    assert full.to("byte").magnitude - lora.to("byte").magnitude == pytest.approx(2 * 4096 * freed_width * 2)


# ---- the torchtune stack ----------------------------------------------------------------------------

def test_torchtune_trains_in_pure_bf16_with_bf16_adam_moments():
    # torchtune's configs (dtype: bf16, torch.optim.AdamW): weights 2 + gradients 2 + the two moments
    # in the parameters' dtype 2 + 2 bytes, no fp32 master: 8 bytes a parameter, 64.24 GB for
    # Llama 3 8B's 8.03e9; the same adapter under QLoRA keeps its 0.16e9 parameters at 8 bytes
    full = symcalc.solve("model_state_memory", options={"stack": "torchtune"}, model="llama3-8b")
    assert full.to("byte").magnitude == pytest.approx(8 * 8_030_261_248, rel=1e-9)
    assert full.options["precision"] == "bf16_pure" and full.options["optimizer"] == "adam_bf16_moments"


def test_torchtune_on_more_than_one_gpu_asks_for_its_fsdp_recipes_in_one_line(cli):
    run = cli("solve", "total_memory_per_gpu", "--model", "llama3-8b", "--hardware", "h100", "--stack", "torchtune",
              "dp=8", "micro_batch_size=2", "seq_len=2048 token")
    assert run.code == 2 and len(run.err.strip().splitlines()) == 1
    assert "stack=torchtune requires dp == 1 with zero_stage = 0" in run.err and "--option zero_stage=3" in run.err
    ok = cli("solve", "total_memory_per_gpu", "--model", "llama3-8b", "--hardware", "h100", "--stack", "torchtune",
             "dp=8", "micro_batch_size=2", "seq_len=2048 token", "--option", "zero_stage=3")
    assert ok.code == 0 and ok.out.startswith("total_memory_per_gpu = ")
    tp = cli("solve", "total_memory_per_gpu", "--model", "llama3-8b", "--stack", "torchtune", "tp=2")
    assert tp.code == 2 and "stack=torchtune requires tp == 1" in tp.err


def test_the_torchtune_rows_are_asked_under_the_torchtune_stack(finetune_rows):
    # the published torchtune rows are translated with the stack they name: its defaults (pure
    # bf16, bf16 AdamW moments) stand in for the byte counts the rows were once given by hand
    rows, _ = finetune_rows
    tune = [r for r, _ in rows.values() if r.id.startswith("ttune_")]
    assert len(tune) == 9 and all(r.options["stack"] == "torchtune" for r in tune)
    assert not any("master_weight_bytes_per_param" in r.given for r in tune)


def test_a_shared_embeddings_second_gradient_sits_beside_all_the_others():
    # Llama 3.2 3B ties its 128,256 x 3,072 embedding to the LM head: the embedding's dense bf16
    # gradient (788,021,248 bytes) exists on its own at the end of the backward, before it is added
    # into the head's; none with separate matrices, across pipeline stages, frozen, or stepped at once
    shapes = {"n_layers": 28, "d_model": 3072, "n_heads": 24, "n_kv_heads": 8, "d_ffn": 8192, "vocab_size": 128256}
    tied = {"stack": "textbook", "tied_embeddings": "true"}
    got = symcalc.solve("tied_embedding_grad_memory", shapes, options=tied)
    assert got.to("byte").magnitude == 128256 * 3072 * 2
    for extra, given in (({"tied_embeddings": "false"}, {}), ({}, {"pp": 2}), ({"finetune": "lora"}, {}),
                         ({"optimizer_step": "in_backward"}, {})):
        none = symcalc.solve("tied_embedding_grad_memory", {**shapes, **given}, options={**tied, **extra})
        assert none.to("byte").magnitude == 0, (extra, given)


def test_torchtunes_checkpointed_3b_row_peaks_at_the_end_of_the_backward(finetune_rows):
    # the README ladder's row with checkpointing and fused AdamW (24.9 GiB active): the states,
    # 3.21e9 x 8 bytes = 23.9 GiB, and the shared embedding's second gradient, 0.73 GiB, at the end
    # of the backward; -0.9 % (it was -3.9 % without the second gradient)
    sys.path.insert(0, str(ROOT / "calibration"))
    import memory as M
    rows = {row["id"]: (src, row) for src, row in M.load_rows()}
    run = M.translate(*rows["ttune_l32_3b_full_a100_4_ac"])
    (p,), failures = M.predict([run])
    assert not failures and abs(p / run.measured - 1) < 0.02, p / 2**30


def test_a_torchtune_plan_on_eight_gpus_shards_with_fsdp2():
    # torchtune on one GPU runs without FSDP (zero_stage 0), which needs dp = 1: on 8 GPUs every
    # layout the plan keeps is its FSDP2 recipe, zero_stage 3, with or without the stage given
    for opts in ({"stack": "torchtune"}, {"stack": "torchtune", "zero_stage": "3"}):
        p = symcalc.plan("llama3-8b", "h100", 8, options=opts, top=3)
        assert p.rows and all(r.options["zero_stage"] == "3" for r in p.rows), opts
