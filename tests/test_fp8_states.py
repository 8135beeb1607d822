"""FP8 as the recipes keep it (issue 37, item 4): precision = fp8 says what the GEMMs compute in;
what is stored between steps (weights, gradients, master copy) is option fp8_states, set by the
stack. The expectations are the sources' own byte counts."""

import pytest

import symcalc
from symcalc.errors import SymcalcError

# Llama 3 70B at tp 8, dp 32 under the distributed optimizer (ZeRO-1): the example
LAYOUT = {"tp": 8, "pp": 1, "dp": 32, "n_gpus": 256}
MCORE = {"stack": "megatron-core", "precision": "fp8", "zero_stage": "1"}


def states(options, given=LAYOUT, model="llama3-70b", hardware="h100"):
    return symcalc.solve("model_state_memory", dict(given), options=options, model=model, hardware=hardware)


def test_megatron_keeps_bf16_weights_fp32_grads_and_master_as_its_table_says():
    # Megatron-LM docs, distributed optimizer: bf16 params and fp32 grads take 6 + 12/d bytes a
    # parameter (the fp32 master and Adam's two moments, 12 bytes, sharded over d = dp)
    r = states({**MCORE, "fp8_states": "bf16_weights"})
    n = r.values["params_per_gpu"]
    assert r.to("byte").magnitude == pytest.approx(n * (6 + 12 / 32))
    # 70.6e9 / 8 parameters a GPU: about 56 GB, the table's figure, not the 19.8 GB the seed's
    # 10-byte recipe gave
    assert 54e9 < r.to("byte").magnitude < 57e9


def test_fp8_param_gather_keeps_the_weights_in_one_byte():
    # Megatron-Bridge's delayed, current-scaling and MXFP8 recipes set fp8_param_gather: the
    # weights are FP8 (1 byte), the main gradients and master stay fp32: 5 + 12/d; it is
    # Megatron-Core's default here
    r = states(MCORE)
    n = r.values["params_per_gpu"]
    assert r.to("byte").magnitude == pytest.approx(n * (5 + 12 / 32))
    assert r.values["bytes_per_grad"] == 4      # what the gradient reduce-scatter moves, too


def test_megatron_core_keeps_what_bridges_recipe_keeps():
    # Megatron-Bridge sets fp8_param_gather in its delayed, current-scaling and MXFP8 recipes and
    # not in its blockwise and NVFP4 ones: 5 + 12/d bytes under the first, 6 + 12/d under the others
    for recipe, weights in (("delayed", 1), ("current", 1), ("mxfp8", 1), ("blockwise", 2), ("nvfp4", 2)):
        r = states({**MCORE, "fp8_recipe": recipe})
        n = r.values["params_per_gpu"]
        assert r.to("byte").magnitude == pytest.approx(n * (weights + 4 + 12 / 32)), recipe
        # and a layer's weights are cast once (kept in FP8: the transpose) or twice (kept in BF16)
        cast = symcalc.solve("fp8_cast_copies", dict(LAYOUT), options={**MCORE, "fp8_recipe": recipe},
                             model="llama3-70b", hardware="h100")
        assert cast.value == weights          # 1 copy for 1-byte (FP8) weights, 2 for 2-byte (BF16) ones


def test_seed_003s_recipe_is_the_library_default():
    # seed 003: 'some FP8 recipes aim to reduce total memory to around 10 Psi'
    r = symcalc.solve("model_state_memory", {"n_params": 7e9}, options={"precision": "fp8"})
    assert r.to("GB").magnitude == pytest.approx(70)


def test_torchao_float8_keeps_the_modules_weights():
    # torchao's Float8Linear swaps the GEMMs and keeps the weight: the model states of an FP8
    # torchtitan run are its BF16 run's (FSDP2: 16 bytes a parameter, sharded over dp)
    given = {"tp": 1, "pp": 1, "dp": 8, "n_gpus": 8}
    base = {"stack": "torchtitan", "zero_stage": "3"}
    fp8 = states({**base, "precision": "fp8"}, given, model="llama3-8b")
    bf16 = states(base, given, model="llama3-8b")
    assert fp8.to("byte").magnitude == pytest.approx(bf16.to("byte").magnitude)
    assert fp8.to("byte").magnitude == pytest.approx(16 * fp8.values["params_per_gpu"] / 8)


def test_deepseek_v3_keeps_fp32_master_and_gradients_and_bf16_moments():
    # DeepSeek-V3 report, 3.3.3: 'We adopt the BF16 data format instead of FP32 to track the first
    # and second moments in the AdamW optimizer ... the master weights and gradients are still
    # retained in FP32'; the GEMMs read the master cast to FP8 (Figure 6)
    given = {"tp": 1, "pp": 16, "dp": 128, "ep": 64, "n_gpus": 2048, "micro_batch_size": 1}
    r = symcalc.solve("optimizer_bytes_per_param", given, options={"stack": "hai-llm", "precision": "fp8"},
                      model="deepseek-v3", hardware="h800")
    assert r.to("byte").magnitude == 4 + 4
    for name, expected in (("bytes_per_param", 1), ("grad_memory_bytes_per_param", 4)):
        r = symcalc.solve(name, given, options={"stack": "hai-llm", "precision": "fp8"},
                          model="deepseek-v3", hardware="h800")
        assert r.to("byte").magnitude == expected


def test_the_published_deepseek_layout_still_fits_its_h800():
    # the report trains 16-way PP, 64-way EP, ZeRO-1 on 80 GB H800s without TP: with the states
    # above its peak must stay under the GPU
    given = {"tp": 1, "pp": 16, "dp": 128, "ep": 64, "n_gpus": 2048, "micro_batch_size": 1,
             "global_batch_size": 15360, "seq_len": "4096 token"}
    r = symcalc.solve("total_memory_per_gpu", given, options={"stack": "hai-llm", "precision": "fp8",
                                                              "zero_stage": "1", "recompute": "selective"},
                      model="deepseek-v3", hardware="h800")
    assert r.values["model_state_memory"] > 15e9          # FP32 gradients, twice under DualPipe
    assert r.to("byte").magnitude < r.values["gpu_memory"]


def test_a_recipe_or_state_the_stack_lacks_is_one_line_naming_both():
    with pytest.raises(SymcalcError, match=r"fp8_recipe=tensorwise.*megatron-core"):
        states({**MCORE, "fp8_recipe": "tensorwise"})
    with pytest.raises(SymcalcError, match=r"fp8_weights"):
        states({**MCORE, "fp8_states": "fp8_weight"})


def test_a_recipe_given_without_fp8_gemms_is_said_to_change_nothing():
    # fp8_states and fp8_recipe mean something only with precision = fp8 or fp4 (their only_with
    # in the data); given beside BF16 training they leave the answer as it was, and it says so
    plain = symcalc.solve("model_state_memory", {"n_params": 7e9})
    r = symcalc.solve("model_state_memory", {"n_params": 7e9}, options={"fp8_states": "fp8_weights"})
    assert r.base_value == plain.base_value == 16 * 7e9
    [idle] = [f for f in r.findings if f.kind == "option_idle"]
    assert idle.values["option"] == "fp8_states" and idle.values["actual"] == "mixed_fp16_adam"
    fp8 = symcalc.solve("model_state_memory", {"n_params": 7e9},
                        options={"fp8_states": "fp8_weights", "precision": "fp8"})
    assert not [f for f in fp8.findings if f.kind == "option_idle"]
    assert fp8.base_value == 17 * 7e9                     # 1 + 4 + 4 + Adam's 8


def test_check_says_it_too():
    # check reads the run as solve does: the same option given without FP8 GEMMs, the same warning
    r = symcalc.check({"dp": 8, "n_gpus": 8, "micro_batch_size": 1}, options={"stack": "torchtitan",
                                                                           "fp8_states": "mixed"},
                      model="llama3-8b", hardware="h100")
    assert r.warnings == ["option fp8_states=mixed changes nothing here: it applies only with precision = fp8 "
                          "or fp4 (precision = mixed_fp16_adam)"]
    r = symcalc.check({"dp": 8, "n_gpus": 8, "micro_batch_size": 1},
                      options={"stack": "torchtitan", "fp8_states": "mixed", "precision": "fp8"},
                      model="llama3-8b", hardware="h100")
    assert r.warnings == []


@pytest.mark.parametrize("command", [
    ["solve", "step_time", "micro_batch_size=1", "global_batch_size=8", "seq_len=8192 token", "n_gpus=8"],
    ["plan", "n_gpus=64", "seq_len=8192 token", "global_batch_size=512"],
    ["check", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64", "mfu=50%"],
])
def test_fp8_training_on_hardware_without_fp8_is_one_line_in_every_command(cli, command):
    # an A100 has no FP8 tensor cores (its datasheet lists BF16, FP16, TF32, FP32 tensor rates
    # only), so FP8 GEMMs cannot run there: every command refuses the run the same way, where
    # the planner said only 'cannot determine step_time' and solve asked for peak_flops
    r = cli(command[0], *command[1:], "--model", "llama3-8b", "--hardware", "a100", "--option", "precision=fp8")
    assert r.code == 2 and not r.out
    assert r.err.strip().splitlines() == [
        "error: --option precision=fp8 needs FP8 support, which hardware a100_80gb lacks "
        "(it computes in bf16, fp16, fp32, tf32)"]
