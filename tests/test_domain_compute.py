"""Model size, compute, energy and money (formulas/model.toml, compute.toml, cost.toml,
energy.toml, moe.toml): inverse questions and edge cases. Every expectation is a seed's answer
or a hand computation written next to it."""

import math

import pytest

import symcalc
from symcalc.errors import UnderdeterminedError

DAY = 86400.0


def solve(target, options=None, **given):
    return symcalc.solve(target, given, options=options or {})


# ---- inverse questions --------------------------------------------------------------------------

def test_the_mfu_a_deadline_requires():
    # seed 000 Exercise 3 summary: 30B on 2T tokens, 512 H100s at 1979 TFLOP/s, 30 days.
    # 6 * 30e9 * 2e12 = 3.6e23 FLOP; / 2.592e6 s = 1.3889e17 FLOP/s; / (512 * 1979e12) = 0.137073
    r = solve("mfu", n_params=30e9, n_tokens="2e12 token", n_gpus=512, peak_flops="1979 TFLOP/s",
              train_time="30 day")
    assert r.to("").magnitude == pytest.approx(3.6e23 / 2.592e6 / (512 * 1979e12), rel=1e-12)
    assert r.to("").magnitude == pytest.approx(0.137073, rel=1e-5)


def test_the_gpu_hour_price_a_budget_allows():
    # seed 001: 16,384 GPUs x 77 days x 24 h x $2 = $60,555,264, read backwards
    r = solve("gpu_hour_price", total_cost="60555264 USD", n_gpus=16384, train_time="77 day")
    assert r.to("USD/hour").magnitude == pytest.approx(60555264 / (16384 * 77 * 24), rel=1e-12)
    assert r.to("USD/hour").magnitude == pytest.approx(2.0, rel=1e-12)


def test_gpu_hours_and_cost_need_no_gpu_count():
    # C = 6 N D = 6 x 7e9 x 2e12 = 8.4e22 FLOP; at 40 % of 989.4 TFLOP/s one GPU delivers 3.9576e14 FLOP/s,
    # so the run takes 8.4e22 / 3.9576e14 / 3600 = 58,958.6 GPU-hours whatever the cluster size; at $2 that
    # is $117,917 (seed 002: 1,000 GPUs for 1 hour cost what 1 GPU for 1,000 hours costs).
    kw = dict(n_params=7e9, n_tokens="2e12 token", mfu=0.4, peak_flops="989.4 TFLOP/s")
    hours = 8.4e22 / (0.4 * 989.4e12) / 3600
    assert solve("gpu_hours", **kw).to("hour").magnitude == pytest.approx(hours, rel=1e-12)
    cost = solve("total_cost", gpu_hour_price="2 USD/hour", **kw)
    assert cost.to("USD").magnitude == pytest.approx(2 * hours, rel=1e-12)
    assert cost.to("USD").magnitude == pytest.approx(117917, rel=1e-5)


def test_the_mfu_behind_deepseek_v3s_published_gpu_hours():
    # DeepSeek-V3 report: pre-training on 14.8T tokens took 2,664K H800 GPU-hours. The active
    # parameters come from the preset's shapes: 37,551,276,032 (tests/test_domain_moe.py counts them;
    # the report rounds to 37B). 6 x 37,551,276,032 x 14.8e12 = 3.3346e24 FLOP over 2.664e6 h x
    # 3600 s x 989.4e12 FLOP/s (dense BF16) = 35.14 % (34.63 % with the rounded 37B, given).
    r = symcalc.solve("mfu", model="deepseek-v3", hardware="h800", gpu_hours="2.664e6 hour")
    flops = 6 * 37551276032 * 14.8e12
    assert r.to("").magnitude == pytest.approx(flops / (2.664e6 * 3600 * 989.4e12), rel=1e-12)
    assert r.to("").magnitude == pytest.approx(0.3514, abs=5e-5)
    published = symcalc.solve("mfu", model="deepseek-v3", hardware="h800", gpu_hours="2.664e6 hour",
                              n_active_params=37e9)
    assert published.to("").magnitude == pytest.approx(0.3463, abs=5e-5)


def test_n_layers_from_the_parameter_count_with_gqa_and_swiglu():
    # Llama 3.1 405B: per layer 2 d^2 (1 + 8/128) + 3 d d_ffn = 570,425,344 + 2,617,245,696
    # = 3,187,671,040; embeddings 2 x 128256 x 16384 = 4,202,692,608;
    # (405.849e9 - 4.2027e9) / 3.18767e9 = 126.0
    per_layer = 2 * 16384**2 * (1 + 8 / 128) + 3 * 16384 * 53248
    n_params = 126 * per_layer + 2 * 128256 * 16384
    r = solve("n_layers", {"ffn": "swiglu", "attention": "gqa"}, n_params=n_params, d_model=16384,
              n_heads=128, n_kv_heads=8, d_ffn=53248, vocab_size=128256)
    assert r.value == 126 and r.exact == pytest.approx(126, rel=1e-12)


def test_d_model_from_the_parameter_count_with_gqa_and_the_swiglu_default_width():
    # d = 4096, L = 32, 32 heads / 8 KV heads, d_ffn = 8/3 d (default): per layer
    # 2 d^2 (1 + 1/4) + 3 d (8/3 d) = 10.5 d^2 = 176,160,768; x 32 = 5,637,144,576;
    # + 2 x 32000 x 4096 = 262,144,000 -> 5,899,288,576
    r = solve("d_model", {"ffn": "swiglu", "attention": "gqa"}, n_params=5899288576, n_layers=32,
              vocab_size=32000, n_heads=32, n_kv_heads=8)
    assert r.value == 4096 and r.exact == pytest.approx(4096, rel=1e-9)
    assert "d_ffn_from_expansion" in {d.get("rule") for d in r.defaults_used.values()}


def test_tokens_trainable_in_a_time_on_a_cluster():
    # 70B on 128 GPUs at 45 % of 1979 TFLOP/s for 30 days:
    # 0.45 * 1979e12 * 128 = 1.139904e17 FLOP/s; x 2.592e6 s = 2.95463e23 FLOP; / (6 * 70e9) = 7.0348e11
    r = solve("n_tokens", n_params=70e9, train_time="30 day", n_gpus=128, mfu=0.45,
              peak_flops="1979 TFLOP/s")
    assert r.to("token").magnitude == pytest.approx(0.45 * 1979e12 * 128 * 30 * DAY / (6 * 70e9), rel=1e-12)
    assert "n_tokens" not in r.defaults_used          # the Chinchilla default rule is not needed here


def test_the_electricity_price_a_budget_allows():
    # seed 001: 16,384 x 0.7 kW x 77 x 24 h = 21,194,342.4 kWh; $1,059,717.12 / that = $0.05/kWh
    kwh = 16384 * 0.7 * 77 * 24
    r = solve("electricity_price", electricity_cost=f"{kwh * 0.05} USD", n_gpus=16384, gpu_power="700 W",
              train_time="77 day")
    assert r.to("USD/kWh").magnitude == pytest.approx(0.05, rel=1e-12)
    assert r.defaults_used["pue"]["value"] == "1"                  # GPUs only unless PUE is given
    # and the answer says so first: a bill at PUE 1 counts no cooling
    assert [a["name"] for a in r.assumptions if a["kind"] == "default"] == ["pue"]
    # with PUE 1.4 the same price makes $1,483,603.97
    r = solve("electricity_price", electricity_cost=f"{kwh * 0.05 * 1.4} USD", n_gpus=16384,
              gpu_power="700 W", train_time="77 day", pue=1.4)
    assert r.to("USD/kWh").magnitude == pytest.approx(0.05, rel=1e-12)


def test_the_pue_behind_two_electricity_bills():
    # seed 001: $1,483,604 with PUE against $1,059,717 without -> 1.4
    kwh = 16384 * 0.7 * 77 * 24
    r = solve("pue", electricity_cost=f"{kwh * 0.05 * 1.4} USD", n_gpus=16384, gpu_power="700 W",
              train_time="77 day", electricity_price="0.05 USD/kWh")
    assert r.to("").magnitude == pytest.approx(1.4, rel=1e-12)


def test_the_compute_optimal_model_for_a_compute_budget():
    # No token count given: the Chinchilla default rule n_tokens = 20 N closes the system,
    # C = 6 N (20 N) -> N = sqrt(C / 120); C = 1.08e23 -> N = 3e10 (seed 000 Exercise 3's 30B, 600B tokens)
    r = solve("n_params", total_flops="1.08e23 FLOP")
    assert r.value == pytest.approx(math.sqrt(1.08e23 / 120), rel=1e-9)
    assert r.defaults_used["n_tokens"]["rule"] == "n_tokens_chinchilla_default"
    assert r.defaults_used["tokens_per_param"]["value"] == "20 token"


def test_the_mfu_gain_behind_a_saving():
    # seed 001: $60,555,264 x (1 - 1/1.01) = $599,557.07 -> a 1 % RELATIVE gain
    saving = 60555264 * (1 - 1 / 1.01)
    r = solve("mfu_relative_gain", total_cost="60555264 USD", mfu_cost_saving=f"{saving} USD")
    assert r.to("").magnitude == pytest.approx(0.01, rel=1e-9)
    # one percentage point, 40 % -> 41 %, is a relative gain of 1/40: $60.56M x (1 - 40/41) = $1,476,957.66
    r = solve("mfu_cost_saving", total_cost="60555264 USD", mfu_relative_gain=1 / 40)
    assert r.to("USD").magnitude == pytest.approx(60555264 * (1 - 40 / 41), rel=1e-12)


def test_the_exposed_communication_behind_an_effective_mfu():
    # seed 001: 50 % x 242 / (242 + 350) = 20.44 %; backwards: 242 ms x (0.5 / 0.2044 - 1) = 350 ms
    eff = 0.5 * 242 / 592
    r = solve("exposed_comm_time", mfu=0.5, effective_mfu=eff, compute_time="242 ms")
    assert r.to("ms").magnitude == pytest.approx(350, rel=1e-9)


def test_the_sequence_length_behind_a_layer_flop_count():
    # 6 x (805,306,368 + s x 8192) = 5,033,164,800 -> s = 4096 (causal count)
    r = solve("seq_len", {"attention_flops": "causal"}, d_model=8192, params_per_layer=805306368,
              flops_per_token_per_layer="5033164800 FLOP/token")
    assert r.to("token").magnitude == pytest.approx(4096, rel=1e-12)


def test_tensor_parallel_degree_from_the_shard_width():
    # seed 001: a [8192, 8192] weight split into [8192, 1024] column shards -> TP = 8
    assert solve("tp", tp_shard_columns=1024, d_model=8192).value == 8


def test_active_parameters_from_an_moe_total():
    # seed 003's rule backwards: 5.184e12 / (2 x 32 / 5) = 405e9
    r = solve("n_active_params", {"architecture": "moe"}, n_params=5.184e12, n_routed_experts=32,
              n_experts_activated=2)
    assert r.value == pytest.approx(405e9, rel=1e-12)


# ---- edge cases -----------------------------------------------------------------------------------

def test_max_gpus_for_a_budget_rounds_down_and_gpus_needed_round_up():
    # seed 000 Exercise 3: $2M / $4 = 500,000 GPU-hours over 720 h = 694.4
    r = solve("n_gpus_max_budget", total_cost="2000000 USD", gpu_hour_price="4 USD/hour", train_time="30 day")
    assert r.value == 694
    # n_gpus from the same budget: the budget is a limit (at most $2M), so 694 (695 would cost
    # 695 x 720 h x $4 = $2,001,600); it outranks the run time, which would pull it up
    r = solve("n_gpus", total_cost="2000000 USD", gpu_hour_price="4 USD/hour", train_time="30 day")
    assert r.value == 694 and r.rounding == "down" and r.rounding_reason["limit"] == "total_cost"
    assert r.rounding_reason["value_there"] == pytest.approx(695 * 720 * 4)
    # the minimum for the compute, at 45 % MFU of 1979 TFLOP/s: 1.08e23 / (0.45 * 1979e12 * 2.592e6) = 46.79 -> 47
    r = solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu=0.45,
              peak_flops="1979 TFLOP/s")
    assert r.value == 47


def test_min_gpus_for_static_memory_rounds_up():
    # seed 000: 16 bytes x 70e9 = 1.12 TB over 80 GB = 14 exactly; 71e9 -> 14.2 -> 15
    assert solve("n_gpus_min_memory", n_params=70e9, gpu_memory="80 GB").value == 14
    assert solve("n_gpus_min_memory", n_params=71e9, gpu_memory="80 GB").value == 15


def test_fewest_gpus_for_the_states_keep_the_headroom_given():
    # a headroom a question keeps free is not memory for the states: Llama 3 405B's 16 bytes x
    # 405,853,388,800 = 6.494 TB over an H100's 81559 MiB = 85.52 GB less 8 GB = 77.52 GB is
    # 83.77 -> 84 GPUs (over all 85.52 GB: 75.93 -> 76)
    usable = 81559 * 2**20 - 8e9
    kept = symcalc.solve("n_gpus_min_memory", memory_headroom="8 GB", model="llama3-405b", hardware="h100")
    assert kept.values["usable_gpu_memory"] == pytest.approx(usable) and kept.value == 84
    assert math.ceil(16 * 405_853_388_800 / usable) == 84
    assert not any(f.kind == "not_used" for f in kept.findings)
    whole = symcalc.solve("n_gpus_min_memory", model="llama3-405b", hardware="h100")
    assert whole.value == 76


def test_executed_flops_follow_the_recompute_option_and_mfu_does_not():
    # no recomputation: flops_per_token = 6 N = 4.2e10 for 7B (seed 000 Exercise 2)
    r = solve("flops_per_token", n_params=7e9)
    assert r.value == pytest.approx(4.2e10, rel=1e-12)
    assert r.defaults_used["recompute_multiplier"]["rule"] == "recompute_multiplier_none"
    # selective recomputation is counted as no extra FLOPs
    assert solve("flops_per_token", {"recompute": "selective"}, n_params=7e9).value == pytest.approx(4.2e10)
    # full recomputation: one extra forward, (1 + 2 + 1)/(1 + 2) = 4/3 -> 5.6e10
    r = solve("flops_per_token", {"recompute": "full"}, n_params=7e9)
    assert r.value == pytest.approx(4.2e10 * 4 / 3, rel=1e-12)
    # a given multiplier wins over the option's default (seed 004: gamma = 1.2, 70B -> 5.04e11)
    r = solve("flops_per_token", {"recompute": "full"}, n_params=70e9, recompute_multiplier=1.2)
    assert r.value == pytest.approx(5.04e11, rel=1e-12)
    # MFU counts model FLOPs whatever the recomputation: seed 000 Exercise 2 stays at 4.974 %
    kw = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
    mfu = 6 * 7e9 * 150e3 / (64 * 1979e12)
    assert solve("mfu", {"recompute": "full"}, **kw).to("").magnitude == pytest.approx(mfu, rel=1e-12)
    # ... while HFU counts the recomputed forward: 4/3 x 4.974 % = 6.632 %
    assert solve("hfu", {"recompute": "full"}, **kw).to("").magnitude == pytest.approx(mfu * 4 / 3, rel=1e-12)


def test_a_given_mfu_gives_the_token_rate_of_its_own_definition_whatever_the_shapes():
    # MFU is 6 N tokens/s over the cluster's peak (mfu_definition): Llama 3 8B at 48.2 % on 2048
    # V100s (125 TFLOP/s) is 0.482 x 125e12 x 2048 / (6 x 8,030,261,248) = 2,560,979 token/s. With the
    # shapes given too, the rule of thumb HFU = 1 x MFU must not carry the MFU into the executed
    # FLOPs (attention scores and the LM head included), which gave 2,557,306 and made every shape
    # look contradictory.
    kw = dict(n_params=8030261248, mfu="48.2 %", peak_flops="125 TFLOP/s", dp=64, tp=8, pp=4,
              micro_batch_size=4, n_microbatches=4, seq_len="2048 token")
    shapes = dict(d_model=4096, n_heads=32, n_layers=32, vocab_size=128256)
    want = 0.482 * 125e12 * 2048 / (6 * 8030261248)
    assert solve("tokens_per_second", **kw).base_value == pytest.approx(want, rel=1e-12)
    r = solve("tokens_per_second", {"attention": "gqa", "ffn": "swiglu"}, **kw, **shapes)
    assert r.base_value == pytest.approx(want, rel=1e-12)
    assert not [w for w in r.warnings if "do not agree" in w or "contradict" in w]


def test_executed_flops_per_token_with_a_layout_and_an_mfu_are_still_gamma_times_6n():
    # Qwen3-30B-A3B, no recomputation: 6 x 3,352,821,760 active parameters = 20,116,930,560 FLOP a
    # token (gamma = 1). With a layout and an MFU given, HFU is counted exactly (attention scores,
    # LM head) and HFU = gamma MFU, a rule of thumb, must not be solved backwards from it: gamma
    # would become the ratio of two FLOP counts (1.23) and its head size would not come back.
    # (the route is the point, not the cross-check of the given values: conflicts=False spares
    # the eight extra solves that check them, most of this test's time)
    layout = dict(dp=2, tp=4, pp=4, micro_batch_size=1, n_microbatches=32, seq_len="2048 token",
                  mfu="49.3 %", peak_flops="989.4 TFLOP/s")
    r = symcalc.solve("flops_per_token", layout, model="qwen3-30b-a3b", conflicts=False)
    assert r.base_value == pytest.approx(6 * 3_352_821_760, rel=1e-12)
    back = symcalc.solve("head_dim", {**layout, "flops_per_token": (r.base_value, "FLOP/token")},
                         model="qwen3-30b-a3b", conflicts=False)
    assert back.base_value == pytest.approx(128, rel=1e-9)


def test_the_recompute_multiplier_measured_from_hfu_and_mfu():
    # HFU 60 % against MFU 50 % -> gamma = 1.2
    assert solve("recompute_multiplier", hfu=0.6, mfu=0.5).value == pytest.approx(1.2, rel=1e-12)


def test_forward_and_backward_flops_split_two_to_four():
    # 7B: forward 2 N = 1.4e10, backward 4 N = 2.8e10
    assert solve("flops_per_token_forward", n_params=7e9).value == pytest.approx(1.4e10, rel=1e-12)
    assert solve("flops_per_token_backward", n_params=7e9).value == pytest.approx(2.8e10, rel=1e-12)


def test_noncausal_attention_counts_twice_the_score_flops():
    # Megatron count: 6 x (805,306,368 + 2 x 4096 x 8192) = 5,234,491,392 FLOP/token
    r = solve("flops_per_token_per_layer", {"attention_flops": "noncausal"}, d_model=8192,
              seq_len="4096 token", params_per_layer=805306368)
    assert r.value == pytest.approx(6 * (805306368 + 2 * 4096 * 8192), rel=1e-12)
    # per sequence: x 4096 tokens
    r = solve("flops_per_sequence_per_layer", d_model=8192, seq_len="4096 token", params_per_layer=805306368)
    assert r.to("FLOP").magnitude == pytest.approx(4096 * 6 * (805306368 + 4096 * 8192), rel=1e-12)


def test_chinchilla_tokens_never_override_a_given_token_count():
    # 30B for 2T tokens: 6 * 30e9 * 2e12 = 3.6e23 (not the 1.08e23 of 600B compute-optimal tokens)
    r = solve("total_flops", n_params=30e9, n_tokens="2e12 token")
    assert r.to("FLOP").magnitude == pytest.approx(3.6e23, rel=1e-12) and "n_tokens" not in r.defaults_used
    # asked for directly, chinchilla_tokens is 20 N = 6e11
    assert solve("chinchilla_tokens", n_params=30e9).to("token").magnitude == pytest.approx(6e11)


def test_train_time_from_tokens_and_throughput():
    # T = D / R: 2e12 tokens at 400,000 token/s = 5e6 s = 57.87 days (through C = 6 N D and C = F T)
    r = solve("train_time", n_params=70e9, n_tokens="2e12 token", tokens_per_second="400000 token/s")
    assert r.to("s").magnitude == pytest.approx(5e6, rel=1e-12)


def test_the_moe_rule_is_an_estimate_that_is_never_run_backwards():
    # the ratio 2E/5 is a default rule: it gives the ratio, but a ratio does not give E
    with pytest.raises(UnderdeterminedError):
        solve("n_routed_experts", n_params=5.184e12, n_active_params=405e9, n_experts_activated=2)


def test_moe_layer_of_the_405b_shapes_with_five_active_experts():
    # inventory (seed 003 '~2T'): k = 5 experts of d_ffn/5 each, 1 shared + 32 routed, and the
    # router 16384 x 32 = 524,288: 570,425,344 + 33 x 3 x 16384 x 53248/5 + 524,288
    # = 570,425,344 + 17,273,821,593.6 + 524,288 = 17,844,771,225.6 per layer;
    # x 126 + 2 x 128256 x 16384 = 2.2526e12
    opts = {"ffn": "swiglu", "attention": "gqa", "architecture": "moe"}
    shapes = dict(d_model=16384, n_heads=128, n_kv_heads=8, d_ffn=53248, n_shared_experts=1,
                  n_routed_experts=32, n_experts_activated=5)
    router = 16384 * 32
    layer = 2 * 16384**2 * (1 + 8 / 128) + 33 * 3 * 16384 * 53248 / 5 + router
    r = solve("params_per_layer", opts, **shapes)
    assert r.value == pytest.approx(layer, rel=1e-12)
    r = solve("n_params", opts, n_layers=126, vocab_size=128256, **shapes)
    assert r.value == pytest.approx(126 * layer + 2 * 128256 * 16384, rel=1e-12)   # 2.2526e12
    # with d_ffn / k experts the active experts equal the dense layer's FFN: 3,187,671,040, + the router
    r = solve("moe_active_params_per_layer", opts, **shapes)
    assert r.value == pytest.approx(2 * 16384**2 * (1 + 8 / 128) + 3 * 16384 * 53248 + router, rel=1e-12)


def test_moe_flops_follow_the_active_parameters():
    # seed 004 section 10: 6 x 405e9 = 2.43e12 FLOP/token for the 5.18T-parameter MoE
    r = solve("model_flops_per_token", {"architecture": "moe"}, n_active_params=405e9, n_params=5.184e12)
    assert r.value == pytest.approx(2.43e12)
    # per layer, d_ffn / k experts cost what the dense layer costs, plus the router's 8192 x 32:
    # 6 x 12 x 8192^2 + 6 x 8192 x 32 + 6 x 4096 x 8192 = 5,034,737,664 FLOP/token
    r = solve("flops_per_token_per_moe_layer", d_model=8192, seq_len="4096 token", d_ffn=32768,
              n_shared_experts=1, n_routed_experts=32, n_experts_activated=2)
    assert r.value == pytest.approx(6 * 12 * 8192**2 + 6 * 8192 * 32 + 6 * 4096 * 8192, rel=1e-12)


def test_cluster_peak_and_per_gpu_rates():
    # seed 000 Exercise 2: 64 x 1979 = 126,656 TFLOP/s
    assert solve("cluster_peak_flops", n_gpus=64, peak_flops="1979 TFLOP/s").to("TFLOP/s").magnitude == \
        pytest.approx(126656, rel=1e-12)
    # seed 002: 150 TFLOP/s per A100 on 128 GPUs -> 19.2 PFLOP/s; MFU against 312 TFLOP/s = 48.08 %
    r = solve("achieved_flops_cluster", n_gpus=128, achieved_flops_per_gpu="150 TFLOP/s")
    assert r.to("PFLOP/s").magnitude == pytest.approx(19.2, rel=1e-12)
    r = solve("mfu", n_gpus=128, achieved_flops_per_gpu="150 TFLOP/s", peak_flops="312 TFLOP/s")
    assert r.to("").magnitude == pytest.approx(150 / 312, rel=1e-12)


def test_pf_days_of_the_405b_run():
    # seed 001: 6 x 405e9 x 15.6e12 = 3.7908e25 FLOP / 8.64e19 = 438,750 PF-days
    r = symcalc.solve("total_flops", n_params=405e9, n_tokens="15.6e12 token", to="PF_day")
    assert r.value == pytest.approx(438750, rel=1e-9)


def test_cluster_cost_per_hour_and_back():
    # seed 004: 150 x $3.93 = $589.50 per hour; backwards 589.5 / 3.93 = 150 GPUs
    assert solve("cluster_cost_per_hour", n_gpus=150, gpu_hour_price="3.93 USD/hour").value == \
        pytest.approx(589.5, rel=1e-12)
    assert solve("n_gpus", cluster_cost_per_hour="589.5 USD/hour", gpu_hour_price="3.93 USD/hour").value == 150


def test_palm_style_mfu_counts_attention_flops():
    # 70B at 4k context: 6 N = 4.2e11 FLOP/token; causal attention scores add 6 s d per layer per token,
    # 80 x 6 x 4096 x 8192 = 1.6106e10 (3.8 %). The same throughput is then a higher MFU.
    kw = dict(n_params=70e9, n_layers=80, d_model=8192, seq_len="4096 token")
    r = solve("model_flops_per_token", {"mfu_flops": "with_attention"}, **kw)
    assert r.value == pytest.approx(6 * 70e9 + 80 * 6 * 4096 * 8192, rel=1e-12)
    base = solve("mfu", {}, tokens_per_second="400000 token/s", n_gpus=1024, peak_flops="989 TFLOP/s", **kw)
    palm = solve("mfu", {"mfu_flops": "with_attention"}, tokens_per_second="400000 token/s", n_gpus=1024,
                 peak_flops="989 TFLOP/s", **kw)
    assert palm.value / base.value == pytest.approx(1 + 80 * 6 * 4096 * 8192 / (6 * 70e9), rel=1e-12)


def test_per_gpu_rates_need_no_gpu_count():
    # seed 002: MFU = actual FLOPs per GPU / peak. 45 % of an A100's 312 TFLOP/s = 140.4 TFLOP/s,
    # and 150 TFLOP/s is 150 / 312 = 48.08 % -- on any number of GPUs
    r = symcalc.solve("achieved_flops_per_gpu", mfu="45%", hardware="a100-80gb")
    assert r.to("TFLOP/s").magnitude == pytest.approx(0.45 * 312)
    r = symcalc.solve("mfu", achieved_flops_per_gpu="150 TFLOP/s", hardware="a100-80gb")
    assert r.value == pytest.approx(100 * 150 / 312)


def test_per_gpu_token_rate_from_mfu_and_back():
    # One GPU at 40 % MFU on an H100 (989.4 TFLOP/s dense BF16) with a 7B model doing 6 N = 42e9
    # FLOP per token: 0.4 x 989.4e12 / 42e9 = 9,422.9 token/s, whatever the GPU count
    r = symcalc.solve("tokens_per_second_per_gpu", n_params=7e9, mfu="40%", hardware="h100")
    assert r.to("token/s").magnitude == pytest.approx(0.4 * 989.4e12 / 42e9, rel=1e-9)
    # and back: 3,000 token/s measured per GPU is 3000 x 42e9 / 989.4e12 = 12.73 % MFU
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second_per_gpu="3000 token/s", hardware="h100")
    assert r.value == pytest.approx(100 * 3000 * 42e9 / 989.4e12, rel=1e-9)
    # 64 such GPUs process 64 x 3000 = 192,000 token/s
    r = symcalc.solve("tokens_per_second", n_params=7e9, n_gpus=64, tokens_per_second_per_gpu="3000 token/s",
                      hardware="h100")
    assert r.to("token/s").magnitude == pytest.approx(192000, rel=1e-9)


def test_gpus_for_a_throughput_at_a_measured_rate_per_gpu_round_up_without_a_clash():
    # 2,000,000 token/s at 3,000 token/s a GPU: 666.67 GPUs, 667 to reach the target; the per-GPU
    # rate is what each GPU holds, not a second goal pulling the count down (no clash said)
    r = symcalc.solve("n_gpus", tokens_per_second="2e6 token/s", tokens_per_second_per_gpu="3000 token/s")
    assert r.value == 667 and r.rounding_reason["limit"] == "tokens_per_second"
    assert not any("pull" in w for w in r.warnings)


def test_roofline_rate_never_runs_backwards_into_a_step_time():
    # seed 004's roofline estimates a GPU's rate with utilization's default 0.75; it answers the
    # per-GPU rate where nothing better is known, but must not become a route to the MFU (and
    # from there to every step time): without an MFU or a layout, mfu stays underdetermined
    with pytest.raises(symcalc.UnderdeterminedError):
        symcalc.solve("mfu", n_params=70e9, n_layers=80, d_model=8192, global_batch_tokens="512000 token",
                      dp=8, hardware="h100")


def test_a_trained_models_tokens_per_parameter_every_way():
    # issue 38's glue: Llama 3 8B (8,030,261,248 parameters, config.json) trained on 15.6T tokens
    # (Dubey et al. 2024): 15.6e12 / 8.030e9 = 1,942.6 tokens a parameter
    r = symcalc.solve("training_tokens_per_param", {"n_tokens": "15.6e12 token"}, model="llama3-8b")
    assert r.base_value == pytest.approx(15.6e12 / 8030261248, rel=1e-9)
    # backwards: a 15T-token budget at 1,000 tokens a parameter trains a 15B model
    assert symcalc.solve("n_params", {"training_tokens_per_param": "1000 token", "n_tokens": "15e12 token"}
                         ).base_value == pytest.approx(1.5e10, rel=1e-12)
    # without a token count the Chinchilla default rule gives 20, and the answer says it assumed it
    r = symcalc.solve("training_tokens_per_param", {"n_params": 7e9})
    assert r.base_value == pytest.approx(20, rel=1e-12)
    assert "n_tokens_chinchilla_default" in r.derivation.route.default_rules
