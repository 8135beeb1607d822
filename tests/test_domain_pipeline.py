"""Batch size, learning rate and pipeline parallelism (formulas/batch.toml, learning_rate.toml,
pipeline.toml): inverse questions and edge cases. Every expectation is a seed's answer or a hand
computation written next to it."""

import pytest

import symcalc
from symcalc.errors import OutOfBoundsError, UnderdeterminedError

INTERLEAVED = {"pipeline_schedule": "interleaved"}


# ---- micro-batches for a bubble target ---------------------------------------------------------

def test_microbatches_for_a_bubble_target_strict_and_not():
    # strict: (8-1)/m < 5 % -> m > 140 -> 141 (seed 001: "m = 140 gives exactly 5 %, you need m >= 141")
    strict = symcalc.solve("n_microbatches", pp=8, target_bubble_ratio=0.05)
    assert strict.rounded_base == 141
    assert "microbatches_from_bubble_target" in [f.id for s in strict.steps for f in s.formulas]
    # not strict: the bubble_ratio law backwards, (8-1)/0.05 = 140 exactly
    at_most = symcalc.solve("n_microbatches", pp=8, bubble_ratio=0.05)
    assert at_most.base_value == pytest.approx(140, rel=1e-12) and at_most.rounded_base == 140
    # not strict, not whole: 7/0.06 = 116.67 micro-batches, rounded up to 117
    r = symcalc.solve("n_microbatches", pp=8, bubble_ratio=0.06)
    assert r.base_value == pytest.approx(7 / 0.06, rel=1e-12) and r.rounded_base == 117


@pytest.mark.parametrize("v,expected,multiple", [(2, 71, 72), (4, 36, 40)])
def test_interleaved_minimum_and_the_multiple_of_pp(v, expected, multiple):
    # seed 001 says 70 and 35, where 7/(2*70) and 7/(4*35) are exactly 5 %: strictly below needs 71 and 36;
    # Megatron's interleaving needs a multiple of pp = 8: 72 and 40
    assert symcalc.solve("n_microbatches", pp=8, target_bubble_ratio=0.05, virtual_stages=v,
                         options=INTERLEAVED).rounded_base == expected
    assert symcalc.solve("min_microbatches_multiple_of_pp", pp=8, target_bubble_ratio=0.05, virtual_stages=v,
                         options=INTERLEAVED).rounded_base == multiple


def test_a_given_accumulation_count_wins_over_the_bubble_target_default():
    # n_microbatches = grad_accum_steps is a law; the bubble-target minimum is only a default
    r = symcalc.solve("n_microbatches", pp=8, target_bubble_ratio=0.05, grad_accum_steps=64)
    assert r.rounded_base == 64


def test_strict_minimum_at_an_exact_boundary_with_float_noise():
    # the engine's floor() is guarded: 3/(3*0.1) = 9.999999999999998 in floats is 10
    # (4-1)/(3*m) < 10 % -> m > 10 -> 11 (m = 10 gives exactly 10 %)
    assert symcalc.solve("min_microbatches_for_bubble", pp=4, virtual_stages=3, target_bubble_ratio=0.1,
                         options=INTERLEAVED).rounded_base == 11


# ---- bubble: inverse questions -----------------------------------------------------------------

def test_pipeline_depth_a_bubble_target_allows():
    # (pp-1)/140 = 5 % -> pp = 8; (pp-1)/12 = 25 % -> pp = 4 (seed 001's PP=4, m=12)
    assert symcalc.solve("pp", bubble_ratio=0.05, n_microbatches=140).rounded_base == 8
    assert symcalc.solve("pp", bubble_ratio=0.25, n_microbatches=12).rounded_base == 4
    # idle share of the step instead: 7/(32+7) = 17.95 % at m = 32 -> pp = 8 (seed 000)
    assert symcalc.solve("pp", bubble_fraction=7 / 39, n_microbatches=32).base_value == pytest.approx(8, rel=1e-9)


def test_virtual_stages_for_a_bubble_target():
    # 3/(12 v) = 6.25 % -> v = 4 (seed 001); 7/(35 v) = 5 % -> v = 4
    assert symcalc.solve("virtual_stages", pp=4, n_microbatches=12, bubble_ratio=0.0625,
                         options=INTERLEAVED).rounded_base == 4
    assert symcalc.solve("virtual_stages", pp=8, n_microbatches=35, bubble_ratio=0.05,
                         options=INTERLEAVED).rounded_base == 4


def test_microbatches_from_the_idle_share():
    # 3/(m + 3) = 20 % -> m = 12 (seed 001's PP=4 example as a share of the step)
    assert symcalc.solve("n_microbatches", pp=4, bubble_fraction=0.2).base_value == pytest.approx(12, rel=1e-12)


def test_gpipe_and_1f1b_have_the_same_bubble():
    # seed 001 claims the formula depends on the schedule; it does not: 3/12 both ways
    for schedule in ("1f1b", "gpipe"):
        r = symcalc.solve("bubble_ratio", pp=4, n_microbatches=12, options={"pipeline_schedule": schedule})
        assert r.base_value == pytest.approx(0.25, rel=1e-12)


def test_interleaved_questions_need_virtual_stages():
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("bubble_ratio", pp=4, n_microbatches=12, options=INTERLEAVED)
    assert "virtual_stages" in e.value.message


def test_forward_time_from_the_bubble_time():
    # t_bubble = (4-1)(t_f + 20 ms) = 90 ms -> t_f = 10 ms (seed 003's formula, derived example)
    r = symcalc.solve("forward_time_per_microbatch", pipeline_bubble_time="90 ms", pp=4,
                      backward_time_per_microbatch="20 ms")
    assert r.to("ms").magnitude == pytest.approx(10, rel=1e-12)


def test_step_time_includes_the_bubble_when_pipelined():
    # (12 + 3) x 30 ms + 50 ms AllReduce = 500 ms; with pp = 1 (default) seed 001's 64 x 120 + 50 = 7730 ms
    r = symcalc.solve("step_time", pp=4, grad_accum_steps=12, micro_step_time="30 ms", allreduce_time="50 ms")
    assert r.to("ms").magnitude == pytest.approx(500, rel=1e-12)
    r = symcalc.solve("step_time", grad_accum_steps=64, micro_step_time="120 ms", allreduce_time="50 ms")
    assert r.to("ms").magnitude == pytest.approx(7730, rel=1e-12)
    assert r.defaults_used["pp"]["value"] == "1"


def test_steady_state_needs_at_least_pp_minus_one_microbatches():
    # seed 001's 405B case: m = 4 < pp - 1 = 15 -> 4 - 15 = -11 steady-state micro-batches: no steady state
    with pytest.raises(OutOfBoundsError):
        symcalc.solve("steady_state_fraction", pp=16, n_microbatches=4)


# ---- activations, traffic, layers ---------------------------------------------------------------

def test_activation_per_microbatch_from_the_1f1b_peak():
    # first stage holds pp = 4 micro-batches: 8 GB / 4 = 2 GB (seed 001 says p - 1 = 3 in flight: wrong)
    r = symcalc.solve("activation_memory_per_microbatch", activation_memory="8 GB", pp=4)
    assert r.to("GB").magnitude == pytest.approx(2, rel=1e-12)
    # interleaved (Korthikanti et al. 2022): 2 GB x (4 + 3/4) = 9.5 GB
    r = symcalc.solve("activation_memory", activation_memory_per_microbatch="2 GB", pp=4, virtual_stages=4,
                      options=INTERLEAVED)
    assert r.to("GB").magnitude == pytest.approx(9.5, rel=1e-12)


def test_pipeline_depth_from_p2p_traffic():
    # (4 v - 1) x 12 x 2 x 0.5 GB = 180 GB at v = 4 -> 4 v - 1 = 15 -> pp = 4 (seed 001)
    r = symcalc.solve("pp", pp_p2p_bytes_per_step="180 GB", n_microbatches=12, virtual_stages=4,
                      boundary_activation_size="500 MB", options=INTERLEAVED)
    assert r.rounded_base == 4
    # serialized time is bytes over one link: 180 GB / 300 ms = 600 GB/s
    r = symcalc.solve("link_bandwidth", pp_p2p_bytes_per_step="180 GB", pp_p2p_time_serialized="300 ms")
    assert r.to("GB/s").magnitude == pytest.approx(600, rel=1e-12)


def test_boundary_activation_size_is_b_s_d_bytes():
    # 4 x 4096 x 8192 x 2 B = 268,435,456 B
    r = symcalc.solve("boundary_activation_size", micro_batch_size=4, seq_len="4096 token", d_model=8192)
    assert r.base_value == pytest.approx(4 * 4096 * 8192 * 2, rel=1e-12)


def test_layers_per_stage_and_its_inverse():
    assert symcalc.solve("n_layers", layers_per_stage=20, pp=4).rounded_base == 80   # seed 001: 80 / 4 = 20
    assert symcalc.solve("layers_per_stage_distribution", n_layers=80, pp=4).value == "4 stages x 20 layers"
    # 126 over 16: 7.875 on average, 8 on the fullest stage (seed 001)
    assert symcalc.solve("layers_per_stage", n_layers=126, pp=16).base_value == pytest.approx(7.875, rel=1e-12)
    assert symcalc.solve("layers_per_stage_max", n_layers=126, pp=16).rounded_base == 8


# ---- batch and accumulation --------------------------------------------------------------------

def test_accumulation_steps_round_up_and_report_the_exact_value():
    # seed 001: ceil(2048/(4*8)) = 64; a target of 2000: 62.5 -> 63 steps, which really process 4*8*63 = 2016
    assert symcalc.solve("grad_accum_steps", global_batch_size=2048, micro_batch_size=4, dp=8).rounded_base == 64
    r = symcalc.solve("grad_accum_steps", global_batch_size=2000, micro_batch_size=4, dp=8)
    assert r.base_value == pytest.approx(62.5, rel=1e-12) and r.rounded_base == 63
    r = symcalc.solve("realized_global_batch_size", global_batch_size=2000, micro_batch_size=4, dp=8)
    assert r.rounded_base == 2016


def test_micro_batch_size_that_reaches_a_global_batch():
    # 2048 / (64 x 8) = 4 (seed 001/003); 2000 / (16 x 8) = 15.625 -> a micro-batch of 15 fits (rounds down)
    assert symcalc.solve("micro_batch_size", global_batch_size=2048, grad_accum_steps=64, dp=8).rounded_base == 4
    r = symcalc.solve("micro_batch_size", global_batch_size=2000, grad_accum_steps=16, dp=8)
    assert r.base_value == pytest.approx(15.625, rel=1e-12) and r.rounded_base == 15


def test_micro_step_time_from_the_step_time():
    # 7730 ms = 64 t + 50 ms -> t = 120 ms (seed 001)
    r = symcalc.solve("micro_step_time", step_time="7730 ms", grad_accum_steps=64, allreduce_time="50 ms")
    assert r.to("ms").magnitude == pytest.approx(120, rel=1e-12)


def test_communication_share_with_and_without_accumulation():
    # with accumulation 64: 50 / (64 x 120 + 50) = 0.647 %; without (accum = 1): 50 / 170 = 29.4 % (seed 001)
    r = symcalc.solve("comm_fraction", grad_accum_steps=64, micro_step_time="120 ms", allreduce_time="50 ms")
    assert r.base_value == pytest.approx(50 / 7730, rel=1e-12)
    r = symcalc.solve("comm_fraction", grad_accum_steps=1, micro_step_time="120 ms", allreduce_time="50 ms")
    assert r.base_value == pytest.approx(50 / 170, rel=1e-12)
    # AllReduce time from the share: 0.5 % of a 7730 ms step = 38.65 ms
    r = symcalc.solve("allreduce_time", comm_fraction=0.005, step_time="7730 ms")
    assert r.to("ms").magnitude == pytest.approx(38.65, rel=1e-12)


def test_sequence_throughput():
    # 2048 / 7.73 s = 264.94 sequences/s (seed 001, implied)
    r = symcalc.solve("sequences_per_second", global_batch_size=2048, step_time="7730 ms")
    assert r.base_value == pytest.approx(2048 / 7.73, rel=1e-12)


# ---- learning rate -----------------------------------------------------------------------------

def test_base_learning_rate_from_a_scaled_one():
    # linear: 2.4e-3 / 8 = 3e-4; square root: 8.485e-4 / sqrt(8) = 3e-4 (seed 001)
    r = symcalc.solve("base_learning_rate", learning_rate=2.4e-3, base_batch_size=256, global_batch_size=2048)
    assert r.base_value == pytest.approx(3e-4, rel=1e-12)
    r = symcalc.solve("base_learning_rate", learning_rate=3e-4 * 8 ** 0.5, base_batch_size=256, global_batch_size=2048,
                      lr_batch_scaling_exponent=0.5)
    assert r.base_value == pytest.approx(3e-4, rel=1e-12)


def test_square_root_scaling_and_the_exponent_a_pair_of_rates_implies():
    # 3e-4 x sqrt(8) = 8.485e-4 (seed 001, 2.83x); and back: log(2.83)/log(8) = 0.5
    r = symcalc.solve("learning_rate", base_learning_rate=3e-4, base_batch_size=256, global_batch_size=2048,
                      lr_batch_scaling_exponent=0.5)
    assert r.base_value == pytest.approx(3e-4 * 8 ** 0.5, rel=1e-12)
    r = symcalc.solve("lr_batch_scaling_exponent", learning_rate=3e-4 * 8 ** 0.5, base_learning_rate=3e-4,
                      base_batch_size=256, global_batch_size=2048)
    assert r.base_value == pytest.approx(0.5, rel=1e-9)


def test_global_batch_a_learning_rate_implies():
    # linear: 2.4e-3 / 3e-4 = 8 x 256 = 2048
    r = symcalc.solve("global_batch_size", learning_rate=2.4e-3, base_learning_rate=3e-4, base_batch_size=256)
    assert r.rounded_base == 2048


def test_warmup_and_schedule_length_backwards():
    # 8000 warmup steps at 8x the batch -> 1000 at the base batch (seed 001's heuristic)
    assert symcalc.solve("warmup_steps_base", warmup_steps=8000, base_batch_size=256,
                         global_batch_size=2048).rounded_base == 1000
    # 50K steps at twice the batch came from a 100K-step plan (seed 001's cosine question)
    assert symcalc.solve("total_steps_base", total_steps=50000, base_batch_size=2048,
                         global_batch_size=4096).rounded_base == 100000
    # 8 % warmup of 100K steps = 8000 steps
    assert symcalc.solve("warmup_steps", warmup_fraction=0.08, total_steps=100000).rounded_base == 8000


def test_steps_for_a_token_budget():
    # 15.6e12 tokens / (4096 x 4096 tokens per step) = 929,832.5 -> 929,833 steps (rounded up)
    r = symcalc.solve("total_steps", n_tokens="15.6e12 token", global_batch_size=4096, seq_len="4096 token")
    assert r.base_value == pytest.approx(15.6e12 / 4096 ** 2, rel=1e-12) and r.rounded_base == 929833


def test_1f1b_never_holds_more_micro_batches_than_there_are():
    # seed 001's 405B case: pp = 16 but only m = 4 micro-batches: the first stage holds 4, like GPipe
    kw = dict(pp=16, activation_memory_per_microbatch="2 GB")
    assert symcalc.solve("activation_memory", n_microbatches=4, **kw).to("GB").magnitude == pytest.approx(8)
    gpipe = symcalc.solve("activation_memory", n_microbatches=4, options={"pipeline_schedule": "gpipe"}, **kw)
    assert gpipe.to("GB").magnitude == pytest.approx(8)
    # with m >= pp it holds pp: 16 x 2 GB
    assert symcalc.solve("activation_memory", n_microbatches=64, **kw).to("GB").magnitude == pytest.approx(32)


def test_the_micro_batch_count_is_not_inferred_from_a_min():
    # min(pp, m) = pp for every m >= pp: activation memory cannot tell how many micro-batches there are
    with pytest.raises(symcalc.UnderdeterminedError):
        symcalc.solve("n_microbatches", pp=4, activation_memory_per_microbatch="2 GB", activation_memory="8 GB")


# ---- where the last stage stands in the layer split ----------------------------------------------

def test_the_last_stage_as_each_split_lays_it_out():
    # Megatron-Bridge's DeepSeek-V3 layouts (recipes/deepseek/h100/deepseek_v3.py): 61 layers at
    # pp 16, 8 and 4 fill the first stages with 4, 8 and 16 and leave 1, 5 and 13 to the last,
    # beside the MTP layer and the loss: 61 - 15 x 4, 61 - 7 x 8, 61 - 3 x 16
    for pp, last in ((16, 1), (8, 5), (4, 13)):
        r = symcalc.solve("last_stage_layers", model="deepseek-v3", pp=pp, options={"pipeline_split": "remainder_last"})
        assert r.base_value == last
    # Megatron's --account-for-embedding/loss-in-pipeline-split (Bridge's Llama 3.1 405B recipe):
    # 126 layers + 2 places over 16 stages, 8 a stage, the last one 7 layers and the loss
    r = symcalc.solve("last_stage_layers", model="llama3-405b", pp=16, options={"pipeline_split": "account_for_ends"})
    assert r.base_value == 7
    assert symcalc.solve("other_stage_layers_max", model="llama3-405b", pp=16,
                         options={"pipeline_split": "account_for_ends"}).base_value == 8
    # split evenly, the last stage carries its share, 61 / 16 = 3.8125 layers (and the head with it)
    assert symcalc.solve("last_stage_layers", model="deepseek-v3", pp=16,
                         options={"pipeline_split": "even"}).base_value == pytest.approx(61 / 16)


def test_deepseek_v3_trains_its_mtp_module_on_a_light_last_stage():
    # the preset trains one MTP module (config.json num_nextn_predict_layers 1), and HAI-LLM's split
    # (a prior: as Megatron-Bridge lays DeepSeek-V3 out) leaves 1 layer on the last of 16 stages, so
    # the stage with the MTP layer and two passes through the 129,280-word head is not the slowest
    # by far: the preset and a translation that gives every shape and mtp_depth = 1 agree
    common = dict(hardware="h800", pp=16, ep=64, dp=128, n_gpus=2048, global_batch_size=15360, micro_batch_size=1)
    opts = {"stack": "hai-llm", "precision": "fp8", "zero_stage": "1", "recompute": "selective"}
    preset = symcalc.solve("step_time", model="deepseek-v3", options=opts, **common)
    assert preset.values["mtp_depth"] == 1 and preset.values["last_stage_layers"] == 1
    even = symcalc.solve("step_time", model="deepseek-v3", options={**opts, "pipeline_split": "even"}, **common)
    # the even split's last stage (3.8 layers, the MTP layer, two heads) paces the pipeline: slower
    assert even.base_value > 1.2 * preset.base_value
