"""Serving (formulas/serving.toml): the KV cache, serving memory, prefill and decode by the
roofline, and what tokens cost. Every expectation is a hand computation written beside it, from
published model shapes (config.json) and round hardware figures given in the question."""

import json

import pytest

import symcalc
from symcalc.errors import BadOptionValueError, DomainError
from symcalc.render.findings import sentence

# Llama 3 70B: 80 layers, 64 heads, 8 KV heads of 128 (config.json)
KV_70B = 2 * 80 * 8 * 128 * 2              # 327,680 bytes a token in bf16

# a 7B-like model, given whole, at tp = 1 on a GPU given by two round figures
SMALL = dict(n_params=7e9, n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, d_ffn=14336,
             decode_hbm_bandwidth="3 TB/s", achievable_hbm_bandwidth="3 TB/s", linear_gemm_rate="700 TFLOP/s",
             tp=1)
SMALL_KV_TOKEN = 2 * 32 * (8 * 128) * 2     # 131,072 bytes a token
WEIGHTS = 2 * 7e9                           # bf16
# what a step reads of them: all but the input embedding's table (a lookup of one row a sequence).
# The 7e9 parameters less the 32 layers' 2 x 4096^2 x 1.25 + 2 x 4096 x 14336 leave two untied
# 4096-wide embeddings of 231,900 rows each; one of them, the input's, is not read
READ_WEIGHTS = WEIGHTS - 2 * (7e9 - 32 * (2 * 4096**2 * 1.25 + 2 * 4096 * 14336)) / 2
# what a token's forward moves besides the weights, in bf16 over 32 layers: 2 norms and 2 residual
# adds (10 d_model elements read and written), the GELU of the library's default FFN (2 d_ffn; no
# rotary by default), then its keys and values written to the cache: 4.59 MB
SMALL_ACT_TOKEN = 2 * 32 * (10 * 4096 + 2 * 14336) + SMALL_KV_TOKEN


def test_llama3_70b_kv_cache_at_batch_32_and_8k():
    # the figure: 86 GB of KV cache on top of 141 GB of weights
    per_token = symcalc.solve("kv_cache_per_token", model="llama3-70b")
    assert per_token.base_value == pytest.approx(KV_70B, rel=1e-12)
    r = symcalc.solve("kv_cache_memory", model="llama3-70b", batch_size=32, seq_len="8192 token")
    assert r.base_value == pytest.approx(32 * 8192 * KV_70B, rel=1e-12)     # 85.9 GB
    assert r.base_value == pytest.approx(85.9e9, rel=1e-3)


def test_fp8_kv_cache_halves_it_and_is_a_storage_format_an_a100_keeps_too():
    r = symcalc.solve("kv_cache_per_token", model="llama3-70b", options={"kv_cache_dtype": "fp8"})
    assert r.base_value == pytest.approx(KV_70B / 2, rel=1e-12)
    # vLLM stores an FP8 KV cache on Ampere (pull 2279, benchmarked on an A100): no FP8 math needed
    a100 = symcalc.solve("kv_cache_memory", model="llama3-70b", hardware="a100", batch_size=32, seq_len="8192 token",
                         options={"kv_cache_dtype": "fp8"})
    assert a100.base_value == pytest.approx(32 * 8192 * KV_70B / 2, rel=1e-12)
    # FP8 weights are still refused there: the served FP8 GEMMs need FP8 tensor cores
    with pytest.raises(BadOptionValueError, match=r"weight_dtype=fp8 needs FP8.*a100"):
        symcalc.solve("serving_weight_memory", model="llama3-70b", hardware="a100", options={"weight_dtype": "fp8"})


def test_deepseek_v3_caches_its_latent_not_its_heads():
    # MLA: 61 layers x (kv_lora_rank 512 + RoPE key 64) x 2 bytes = 70,272 bytes a token
    r = symcalc.solve("kv_cache_per_token", model="deepseek-v3")
    assert r.base_value == pytest.approx(61 * 576 * 2, rel=1e-12)


def test_kv_cache_from_a_real_config_json_and_a_context_above_its_limit(tmp_path):
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
           "intermediate_size": 28672, "max_position_embeddings": 131072, "num_attention_heads": 64,
           "num_hidden_layers": 80, "num_key_value_heads": 8, "rms_norm_eps": 1e-5, "vocab_size": 128256,
           "hidden_act": "silu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    r = symcalc.solve("kv_cache_memory", model=str(path), batch_size=4, seq_len="200000 token")
    assert r.base_value == pytest.approx(4 * 200000 * KV_70B, rel=1e-12)
    [f] = [f for f in r.findings if f.kind == "above_limit"]
    assert f.quantity == "seq_len" and f.values["limit"] == "max_position_embeddings"
    assert "131072" in sentence(f)
    ok = symcalc.solve("kv_cache_memory", model=str(path), batch_size=4, seq_len="8192 token")
    assert not [f for f in ok.findings if f.kind == "above_limit"]


def test_a_moe_servers_workspace_is_its_routed_copies_through_the_experts():
    # Mixtral 8x7B at tp 2, one prefill chunk of 8192 tokens (the default), bf16: each token's 2
    # routed copies through the experts' two gated inner tensors of 14336 / 2, beside the hidden
    # state: 8192 x (4096 + 2 x 2 x 14336 / 2) x 2 bytes = 536,870,912 (vLLM's fused_moe
    # intermediate cache); not a dense FFN width Mixtral does not have (no d_ffn is derived)
    r = symcalc.solve("serving_workspace_memory", {"tp": 2}, model="mixtral")
    assert r.base_value == 8192 * (4096 + 2 * 2 * 14336 / 2) * 2 == 536_870_912
    assert "d_ffn" not in r.values and not any("d_ffn" in w for w in r.warnings)


def test_a_batch_of_zero_is_refused_naming_it():
    with pytest.raises(DomainError, match="batch_size"):
        symcalc.solve("kv_cache_memory", model="llama3-70b", batch_size=0, seq_len="8192 token")


def test_decode_step_is_memory_bound_at_small_batch():
    # weights read 12.1 GB (14 GB less the input embedding) + KV 8 x 4096 x 131,072 = 4.295 GB + 8 tokens' activation traffic (36.7 MB),
    # over 3 TB/s (here both bandwidths): 5.477 ms; the FLOPs, 8 x (2 x 7e9 + 2 x 32 x 32 x 256 x
    # 4096) = 1.292e11 at 700 TFLOP/s, add 0.185 ms (a kernel's math and its reads add, as the
    # training model's GEMMs do): 5.662 ms
    kv = 8 * 4096 * SMALL_KV_TOKEN
    flops = 8 * (2 * 7e9 + 2 * 32 * 32 * 256 * 4096)
    step = (READ_WEIGHTS + kv + 8 * SMALL_ACT_TOKEN) / 3e12 + flops / 700e12
    r = symcalc.solve("decode_step_time", batch_size=8, seq_len="4096 token", **SMALL)
    assert r.base_value == pytest.approx(step, rel=1e-9)
    [bound] = [f for f in r.findings if f.kind == "reported"]
    assert (bound.quantity, bound.values["value"]) == ("decode_bound", "memory")
    # tokens per second and their cost: 8 / 5.662 ms = 1,413 token/s; $2 an hour on one GPU
    rate = symcalc.solve("decode_tokens_per_second", batch_size=8, seq_len="4096 token", **SMALL)
    assert rate.base_value == pytest.approx(8 / step, rel=1e-9)
    cost = symcalc.solve("cost_per_output_token", batch_size=8, seq_len="4096 token", gpu_hour_price="2 USD/hour",
                         **SMALL)
    assert cost.base_value == pytest.approx(2 / 3600 / rate.base_value, rel=1e-9)


def test_decode_turns_compute_bound_at_a_large_batch():
    # at batch 2048 and 128 tokens: FLOPs 2048 x (1.4e10 + 2 x 32 x 32 x 256 x 128) = 2.896e13
    # at 700 TFLOP/s = 41.4 ms; reads 14 GB + 2048 x 128 x 131,072 = 48.4 GB and 2048 tokens'
    # activation traffic, 9.4 GB, over 3 TB/s = 19.3 ms; near the ridge the two add: 60.7 ms,
    # compute the larger part
    flops = 2048 * (2 * 7e9 + 2 * 32 * 32 * 256 * 128)
    reads = READ_WEIGHTS + 2048 * 128 * SMALL_KV_TOKEN + 2048 * SMALL_ACT_TOKEN
    r = symcalc.solve("decode_step_time", batch_size=2048, seq_len="128 token", **SMALL)
    assert r.base_value == pytest.approx(flops / 700e12 + reads / 3e12, rel=1e-9)
    [bound] = [f for f in r.findings if f.kind == "reported"]
    assert bound.values["value"] == "compute"


def test_prefill_is_compute_bound_with_causal_attention():
    # 2048 tokens x (2 x 7e9 + 32 layers x 32 heads x 256 x 2048 (causal: half of 2 s d)) FLOPs
    # at 700 TFLOP/s (42.5 ms), plus the 14 GB of bf16 weights read once and the prompt's 9.4 GB of
    # activation traffic at 3 TB/s (7.8 ms), added as the training model adds a GEMM's math and its
    # reads: 50.3 ms, compute-bound
    flops = 2048 * (2 * 7e9 + 32 * 32 * 256 * 2048)
    r = symcalc.solve("prefill_time", batch_size=1, prompt_len="2048 token", **SMALL)
    assert r.base_value == pytest.approx(flops / 700e12 + (READ_WEIGHTS + 2048 * SMALL_ACT_TOKEN) / 3e12, rel=1e-9)
    [bound] = [f for f in r.findings if f.kind == "reported"]
    assert bound.values["value"] == "compute"


def test_the_largest_batch_that_fits_in_serving_memory():
    # 80 GB = 14 GB weights + b x 4096 x 131,072 (KV) + 8192 x (4096 + 2 x 14336) x 2 (workspace)
    workspace = 8192 * (4096 + 2 * 14336) * 2
    exact = (80e9 - WEIGHTS - workspace) / (4096 * SMALL_KV_TOKEN)        # 121.9
    r = symcalc.solve("batch_size", seq_len="4096 token", serving_memory_per_gpu="80 GB", **SMALL)
    assert r.value == int(exact) == 121


def test_training_cost_per_token():
    # 6 x 70e9 FLOPs at 40 % of 989.4 TFLOP/s: 1.0612e-3 GPU-seconds, at $2 an hour 5.896e-7 $
    r = symcalc.solve("cost_per_token", n_params=70e9, mfu=0.4, peak_flops="989.4 TFLOP/s",
                      gpu_hour_price="2 USD/hour")
    assert r.base_value == pytest.approx(6 * 70e9 / (0.4 * 989.4e12) * 2 / 3600, rel=1e-9)
    assert r.unit == "USD/Mtoken" and r.value == pytest.approx(0.5896, rel=1e-3)


def test_decode_from_datasheet_figures_alone_says_what_it_assumed():
    # Llama 3 70B shapes at tp 8, batch 32 x 8192: (140 GB + 85.9 GB) / 8 over 3.35 TB/s = 8.43 ms,
    # plus 32 x (2 x 70e9 + 2 x 80 x 64 x 256 x 8192) FLOPs / 8 at the 989 TFLOP/s peak = 0.70 ms;
    # with no measured bandwidth, GEMM rate or collective figures the answer says it took the
    # datasheet's bandwidth, the peak, and no AllReduce time
    kv = 32 * 8192 * KV_70B
    flops = 32 * (2 * 70e9 + 2 * 80 * 64 * 256 * 8192)
    r = symcalc.solve("decode_step_time", n_params=70e9, n_layers=80, d_model=8192, n_heads=64, n_kv_heads=8, tp=8,
                      batch_size=32, seq_len="8192 token", hbm_bandwidth="3.35 TB/s", peak_flops="989 TFLOP/s")
    assert r.base_value == pytest.approx((2 * 70e9 + kv) / 8 / 3.35e12 + flops / 8 / 989e12, rel=1e-9)
    assert {"achievable_hbm_bandwidth", "decode_hbm_bandwidth", "linear_gemm_rate",
            "decode_tp_comm_time"} <= set(r.defaults_used)


def test_tensor_parallel_allreduces_count_on_real_hardware():
    # on an H100 node the one-shot AllReduce costs a hop (7.88 us) plus 32 x 8192 x 2 bytes x 7/8
    # over 476 GB/s, twice a layer: 160 x (7.88 us + 0.964 us) = 1.415 ms on top of the reads:
    # the weights but the input embedding's table (17.37 GB) at the 1.905 TB/s a batch-1 decode reaches on an H100 (torchao),
    # 9.12 ms, and the KV cache (10.7 GB) at the 2.97 TB/s a streaming kernel reaches, 3.62 ms,
    # with the 32 tokens' activation traffic (norms and residuals of 8192 in full on each rank,
    # SwiGLU's 3 x 28672 and rotary's 2 x (8192 + 1024) split 8 ways, over 80 layers in bf16, and
    # each token's keys and values, a KV head a GPU: 14.0 MB in all), 0.16 ms; the math (0.7 ms)
    # is read from the answer, it is counted elsewhere
    kv = 32 * 8192 * KV_70B
    weights = 2 * (70553706496 - 128256 * 8192)   # the preset's shapes, bf16, less the input embedding
    act = 2 * 80 * (10 * 8192 + (3 * 28672 + 2 * (8192 + 1024)) / 8) + KV_70B / 8
    r = symcalc.solve("decode_step_time", model="llama3-70b", hardware="h100", tp=8, batch_size=32,
                      seq_len="8192 token")
    comm = 160 * (7.88e-6 + 7 / 8 * 32 * 8192 * 2 / 476e9)
    reads = weights / 8 / 1.905e12 + (kv / 8 + 32 * act) / 2.97e12
    assert r.values["decode_memory_time"] == pytest.approx(reads, rel=1e-3)
    assert r.base_value == pytest.approx(reads + r.values["decode_compute_time"] + comm, rel=1e-9)


def test_cli_json_carries_the_bound(cli):
    d = cli("solve", "decode_step_time", "--model", "llama3-70b", "--hardware", "h100", "tp=8", "batch_size=32",
            "seq_len=8192", "--json").json()
    assert d["target"] == "decode_step_time" and d["unit"] == "ms"
    [bound] = [f for f in d["findings"] if f["kind"] == "reported"]
    assert bound["quantity"] == "decode_bound" and bound["values"]["value"] == "memory"


def test_moe_decode_reads_the_experts_its_batch_routes_to():
    # Mixtral 8x7B: 32 layers x 8 experts x 3 x 4096 x 14336 = 45,097,156,608 routed parameters.
    # One sequence reads 2 of 8 experts a layer: n_params - 0.75 x that = 12,879,925,248, the
    # published active count; 32 sequences leave 0.75^32 of them unread. A step reads none of the
    # input embedding's 32,000 x 4096 table but the rows of its tokens
    routed = 32 * 8 * 3 * 4096 * 14336
    table = 32000 * 4096
    one = symcalc.solve("decode_weight_bytes", model="mixtral-8x7b", batch_size=1)
    assert one.base_value == pytest.approx(2 * (12_879_925_248 - table), rel=1e-9)
    many = symcalc.solve("decode_weight_bytes", model="mixtral-8x7b", batch_size=32)
    assert many.base_value == pytest.approx(2 * (46_702_792_704 - routed * 0.75 ** 32 - table), rel=1e-9)


def test_cost_per_token_from_a_run_and_back():
    # $1M for 1e12 tokens is $1 a million; and a 70B run of 2e12 tokens at the 0.5896 $/M above: $1.179M
    r = symcalc.solve("cost_per_token", total_cost="1e6 USD", n_tokens="1e12 token")
    assert r.base_value == pytest.approx(1e-6, rel=1e-12)
    cost = symcalc.solve("total_cost", n_params=70e9, mfu=0.4, n_tokens="2e12 token", peak_flops="989.4 TFLOP/s",
                         gpu_hour_price="2 USD/hour")
    assert cost.base_value == pytest.approx(2e12 * 6 * 70e9 / (0.4 * 989.4e12) * 2 / 3600, rel=1e-9)


def test_the_largest_model_a_decode_rate_allows_bounds_a_real_one():
    # issue 38's glue: 100 token/s for one sequence on an H100, whose batch-1 decodes read
    # 1.905 TB/s (torchao): each step reads every bf16 weight once, 1.905e12 / (2 x 100) = 9.525e9
    r = symcalc.solve("largest_servable_params", {"batch_size": 1, "decode_tokens_per_second": "100 token/s"},
                      hardware="h100")
    assert r.base_value == pytest.approx(1.905e12 / (2 * 100), rel=1e-9)
    # and backwards: the rate at which the weights a step reads of Llama 3 8B (8.03e9 parameters
    # less the input embedding's 128,256 x 4,096 table, which a step only looks rows up in:
    # 7.505e9) can be read at most, 1.905e12 / (2 x 7.505e9) = 126.9 token/s, which its
    # modelled decode (KV cache and math added) stays under
    read = 8030261248 - 128256 * 4096
    bound = symcalc.solve("decode_tokens_per_second", {"batch_size": 1, "largest_servable_params": read},
                          hardware="h100").base_value
    assert bound == pytest.approx(1.905e12 / (2 * read), rel=1e-9)
    real = symcalc.solve("decode_tokens_per_second", {"batch_size": 1, "seq_len": "512 token"},
                         model="llama3-8b", hardware="h100").base_value
    assert 0.95 * bound < real < bound


def test_a_continuously_batched_step_carries_its_share_of_the_prompts():
    # issue 38: continuous batching with chunked prefill (Orca, Sarathi-Serve, vLLM). 8 sequences
    # with 1024-token prompts and 512-token outputs: each step decodes 8 tokens at the mean context
    # 1024 + 256 = 1280 and carries 8 x 1024 / 512 = 16 prompt tokens, whose math and activation
    # traffic add (the weights are read once a step already; no AllReduce at tp 1)
    decode = ((READ_WEIGHTS + 8 * 1280 * SMALL_KV_TOKEN + 8 * SMALL_ACT_TOKEN) / 3e12
              + 8 * (2 * 7e9 + 2 * 32 * 32 * 256 * 1280) / 700e12)
    prompts = (8 * 1024 * (2 * 7e9 + 32 * 32 * 256 * 1024) / 700e12 + 8 * 1024 * SMALL_ACT_TOKEN / 3e12) / 512
    given = dict(batch_size=8, prompt_len="1024 token", output_len="512 token", **SMALL)
    r = symcalc.solve("continuous_step_time", **given)
    assert r.values["decode_step_time"] == pytest.approx(decode, rel=1e-9)
    assert r.base_value == pytest.approx(decode + prompts, rel=1e-9)
    assert symcalc.solve("continuous_tokens_per_second", **given).base_value == pytest.approx(8 / (decode + prompts),
                                                                                                rel=1e-9)


def test_model_bandwidth_utilization_of_a_measured_step():
    # Databricks' MBU: (parameter bytes + KV cache bytes) / TPOT over the peak bandwidth. Llama 3
    # 70B at tp 8 on H100s, batch 32 at 8,192 tokens, 15 ms a step measured: the step reads
    # 2 x (70,553,706,496 - 128,256 x 8,192) bytes of weights (all but the input embedding's
    # table) and 32 x 8,192 x 327,680 bytes of KV cache, over 15 ms x 8 x 3.35 TB/s
    weights = 2 * (70_553_706_496 - 128_256 * 8192)
    kv = 32 * 8192 * 327_680
    r = symcalc.solve("mbu", model="llama3-70b", hardware="h100", tp=8, batch_size=32, seq_len="8192 token",
                      tpot="15 ms")
    assert r.base_value == pytest.approx((weights + kv) / (15e-3 * 8 * 3.35e12), rel=1e-9)
    # as people type it
    assert symcalc.solve("MBU", model="llama3-70b", hardware="h100", tp=8, batch_size=32, seq_len="8192 token",
                         tpot="15 ms").base_value == r.base_value


def test_a_given_datasheet_hbm_rate_takes_the_presets_measured_rates_with_it():
    # "the H100 with 2.5 TB/s of HBM": the preset's measured decode rate (1.905 of its 3.35 TB/s,
    # torchao) and STREAM rate (2.97 of 3.35) are fractions of the datasheet rate, taken to the
    # given one: 1.905 x 2.5 / 3.35 = 1.4216 TB/s and 2.97 x 2.5 / 3.35 = 2.2164 TB/s
    h100 = {"hardware": "h100", "hbm_bandwidth": "2.5 TB/s"}
    assert symcalc.solve("decode_hbm_bandwidth", **h100).base_value == pytest.approx(1.905e12 * 2.5 / 3.35, rel=1e-9)
    assert symcalc.solve("achievable_hbm_bandwidth", **h100).base_value == pytest.approx(2.97e12 * 2.5 / 3.35,
                                                                                         rel=1e-9)
    # a measured figure given beside it is the user's and stands as given
    own = symcalc.solve("decode_hbm_bandwidth", decode_hbm_bandwidth="2 TB/s", **h100)
    assert own.base_value == pytest.approx(2e12)
    # a sweep of the datasheet rate moves the decode step with it, as solve does at each point
    run, presets = {"batch_size": 1, "seq_len": "1000 token"}, {"model": "llama3-8b", "hardware": "h100"}
    swept = symcalc.sweep("decode_step_time", run, vary={"hbm_bandwidth": "2TB/s:4TB/s:3"}, **presets)
    for bw, value in zip((2, 3, 4), swept.values):
        one = symcalc.solve("decode_step_time", {**run, "hbm_bandwidth": f"{bw} TB/s"}, **presets)
        assert value == pytest.approx(one.value, rel=1e-9)
    assert swept.values[0] == pytest.approx(1.5 * swept.values[1], rel=0.02)   # memory-bound: 1/bandwidth
