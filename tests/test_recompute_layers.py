"""Which layers full recomputation checkpoints, as the stacks say it (recompute_method with
recompute_num_layers): Megatron's uniform groups and block method, torchtitan's every n-th block,
FMS-FSDP's share of the blocks. Each figure is counted by hand below.

The memory cases use seed 000's Exercise 1 layer: b = 8, s = 4096, h = 5120, a = 40, L = 40,
TP = 4 with sequence parallelism, eager attention (Korthikanti et al. 2022):
  one layer's input  2 s b h / t               = 2 x 4096 x 8 x 5120 / 4 = 83,886,080 B
  one layer in full  s b h (34 / t + 5 a s / (h t)) = 167,772,160 x (8.5 + 40) = 8,136,949,760 B
"""

from __future__ import annotations

import pytest

import symcalc
from symcalc.errors import BadOptionValueError

INPUT = 2 * 4096 * 8 * 5120 // 4                   # 83,886,080 B
FULL = 4096 * 8 * 5120 * 97 // 2                    # 167,772,160 x 48.5 = 8,136,949,760 B
SEED000 = dict(micro_batch_size=8, seq_len="4096 token", d_model=5120, n_layers=40, n_heads=40, tp=4)
SP_FULL = dict(recompute="full", sequence_parallel="true")


def seed_layer(target: str, method: str, n: int):
    return symcalc.solve(target, {**SEED000, "recompute_num_layers": n},
                         options={**SP_FULL, "recompute_method": method})


def test_every_layer_checkpointed_is_still_seed_000s_answer():
    # the default (uniform, groups of one): 40 inputs, 3.36 GB, as the seed example asks
    got = symcalc.solve("activation_memory_per_microbatch", SEED000, options=SP_FULL)
    assert got.base_value == pytest.approx(40 * INPUT, rel=1e-9)


def test_megatron_block_method_keeps_the_unwrapped_layers_whole():
    # block with 10 of 40 layers: 10 inputs + 30 full layers = 838,860,800 + 244,108,492,800 B
    got = seed_layer("activation_memory_per_microbatch", "block", 10)
    assert got.base_value == pytest.approx(10 * INPUT + 30 * FULL, rel=1e-9)
    assert got.base_value == pytest.approx(244.947e9, rel=1e-5)


def test_megatron_uniform_groups_store_one_input_a_group_and_rerun_a_group_at_a_time():
    # groups of 4: 10 stored inputs (0.84 GB); the group rerun holds 4 full layers (32.55 GB):
    # the 33.4 GB of seed 000's segment model for k = 4, by another road
    stored = seed_layer("activation_memory_per_microbatch", "uniform", 4)
    working = seed_layer("recompute_working_set", "uniform", 4)
    assert stored.base_value == pytest.approx(10 * INPUT, rel=1e-9)
    assert working.base_value == pytest.approx(4 * FULL, rel=1e-9)
    assert (stored.base_value + working.base_value) / 1e9 == pytest.approx(33.39, abs=0.01)


@pytest.mark.parametrize("n,share", [(2, 0.5), (5, 1.0)])
def test_block_counts_layers_per_model_chunk(n, share):
    # 32 layers, pp 4, two chunks a GPU: 8 layers a stage, 4 a chunk; block checkpoints the first
    # n of each chunk: 2 x 2 of 8 = 0.5; 5 is more than a chunk holds: all of them
    got = symcalc.solve("recomputed_layer_share", {"n_layers": 32, "pp": 4, "virtual_stages": 2,
                                                   "recompute_num_layers": n},
                        options={"recompute": "full", "recompute_method": "block",
                                 "pipeline_schedule": "interleaved"})
    assert got.value == pytest.approx(share)


def test_torchtitan_every_second_block_reruns_half_the_layers():
    # every 2nd block: the matmuls run 3 + 1/2 passes, a flash kernel's scores 3.5 + 1/2, the
    # memory-bound work 2.5 + 1/2, and the executed FLOPs are 1 + (1/2)/3 = 7/6 of the model's
    opts = {"stack": "torchtitan", "recompute": "full", "recompute_method": "every_nth"}
    given = {"recompute_num_layers": 2}
    assert symcalc.solve("linear_passes", given, options=opts).value == pytest.approx(3.5)
    assert symcalc.solve("score_passes", given, options=opts).value == pytest.approx(4.0)
    assert symcalc.solve("elementwise_passes", given, options=opts).value == pytest.approx(3.0)
    assert symcalc.solve("recompute_multiplier", given, options=opts).value == pytest.approx(7 / 6)


def test_fms_fsdp_share_of_blocks_is_given_as_a_share():
    # FMS-FSDP's selective_checkpointing = 1/3: a third of the blocks rerun, 3 + 1/3 passes
    got = symcalc.solve("linear_passes", {"recomputed_layer_share": 1 / 3},
                        options={"stack": "fsdp", "recompute": "full", "recompute_method": "share"})
    assert got.value == pytest.approx(10 / 3)


def test_megatron_block_on_llama3_8b_runs_fewer_passes_and_keeps_more():
    # Megatron-Bridge's H100 Llama 3 8B recipe: full, block, 5 layers of 32 on one stage:
    # 3 + 5/32 = 3.15625 matmul passes, and more activation memory than every layer checkpointed
    job = dict(tp=1, pp=1, dp=8, n_gpus=8, micro_batch_size=1, global_batch_size=128)
    opts = {"recompute": "full", "zero_stage": "1"}
    block = symcalc.solve("linear_passes", {**job, "recompute_num_layers": 5}, model="llama3-8b",
                          hardware="h100", options={**opts, "recompute_method": "block"})
    assert block.value == pytest.approx(3 + 5 / 32)
    mem = {m: symcalc.solve("activation_memory", {**job, "recompute_num_layers": 5}, model="llama3-8b",
                            hardware="h100", options={**opts, "recompute_method": m}).base_value
           for m in ("uniform", "block")}
    assert mem["block"] > 5 * mem["uniform"]


def test_a_method_the_stack_lacks_is_refused_naming_both(cli):
    with pytest.raises(BadOptionValueError) as e:
        symcalc.solve("linear_passes", {"recompute_num_layers": 2},
                      options={"stack": "torchtitan", "recompute": "full", "recompute_method": "block"})
    assert e.value.message.split("; ")[0] == ("option recompute_method=block is not supported by stack=torchtitan "
                                              "(it runs: uniform, every_nth)")
    assert e.value.message.endswith("; --stack megatron-core or --stack megatron-lm-2021 or --stack deepspeed run it")
    run = cli("solve", "step_time", "--model", "llama3-8b", "--hardware", "h100", "dp=8", "global_batch_size=64",
              "micro_batch_size=1", "recompute_num_layers=2", "--option", "recompute=full",
              "--option", "recompute_method=every_nth", "--stack", "megatron-core")
    assert run.code == 2 and run.err.strip() == (
        "error: option recompute_method=every_nth is not supported by stack=megatron-core (it runs: uniform, block); "
        "--stack fsdp or --stack torchtitan run it")


def test_the_cli_answers_megatrons_block_recompute(cli):
    run = cli("solve", "linear_passes", "--option", "recompute=full", "--option", "recompute_method=block",
              "n_layers=32", "pp=1", "recompute_num_layers=8", "--brief")
    assert run.code == 0 and run.out.split()[:3] == ["linear_passes", "=", "3.25"]


def test_automodel_wraps_four_modules_a_layer_each_keeping_its_input():
    # NeMo Automodel checkpoints input_layernorm, self_attn, post_attention_layernorm and mlp
    # apart: four h-wide inputs a layer, 4 x 83,886,080 B, where the whole layer keeps one
    got = symcalc.solve("activation_memory_per_layer", SEED000,
                        options={**SP_FULL, "checkpoint_unit": "modules"})
    assert got.base_value == pytest.approx(4 * INPUT, rel=1e-9)
    with pytest.raises(BadOptionValueError) as e:
        symcalc.solve("activation_memory_per_layer", SEED000,
                      options={**SP_FULL, "checkpoint_unit": "modules", "stack": "torchtitan"})
    assert e.value.message.split("; ")[0] == \
        "option checkpoint_unit=modules is not supported by stack=torchtitan (it runs: layer)"


def test_the_share_method_asks_for_the_share(cli):
    # FMS-FSDP's fraction has no formula: the refusal names the one value that settles it
    run = cli("solve", "linear_passes", "--option", "recompute=full", "--option", "recompute_method=share")
    assert run.code == 2
    assert run.err.strip() == "error: cannot determine linear_passes from nothing: also give recomputed_layer_share"


def test_a_layer_count_without_full_recomputation_says_what_it_needs(cli):
    # recompute = none reruns nothing: the count is unused, and the warning names the one
    # option value under which it would count (recompute = full), not each method beside it
    run = cli("solve", "linear_passes", "--option", "recompute=none", "--option", "recompute_method=block",
              "n_layers=32", "recompute_num_layers=4", "--brief")
    assert run.code == 0 and run.out.split()[:3] == ["linear_passes", "=", "3"]
    assert "recompute_num_layers counts under --option recompute=full;" in run.err
