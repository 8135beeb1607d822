"""Sliding-window attention: a windowed layer caches and attends over its window only (Mistral 7B
v0.1, Gemma 2 and 3, GPT-OSS), read from the model's config.json as the Hugging Face configs
state it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import symcalc
from symcalc.errors import SymcalcError

GEMMA2_9B = {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "head_dim": 256,
             "hidden_activation": "gelu_pytorch_tanh", "hidden_size": 3584, "intermediate_size": 14336,
             "max_position_embeddings": 8192, "num_attention_heads": 16, "num_hidden_layers": 42,
             "num_key_value_heads": 8, "sliding_window": 4096, "vocab_size": 256000, "rms_norm_eps": 1e-6}
MISTRAL_7B_V01 = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
                  "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                  "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 32768,
                  "sliding_window": 4096, "rms_norm_eps": 1e-5, "hidden_act": "silu"}
GPT_OSS_20B = {"architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "hidden_size": 2880,
               "intermediate_size": 2880, "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
               "num_hidden_layers": 24, "num_local_experts": 32, "num_experts_per_tok": 4, "vocab_size": 201088,
               "max_position_embeddings": 131072, "sliding_window": 128, "rms_norm_eps": 1e-5,
               "layer_types": ["sliding_attention", "full_attention"] * 12}


def config(tmp_path, cfg: dict, name: str = "config.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(cfg))
    return str(path)


def test_gemma2_keeps_its_window_in_half_the_layers(tmp_path):
    # Gemma 2 9B: 42 layers x 8 KV heads x 256 wide x key and value x 2 bytes = 344,064 bytes a
    # token; local and global layers alternate (transformers' Gemma2Config), the local ones
    # keeping 4,096 tokens: at 8,192 tokens a layer holds 0.5 x 8,192 + 0.5 x 4,096 = 6,144 on
    # average, 6,144 x 344,064 = 2.114e9 bytes, not the 2.819e9 of full attention
    r = symcalc.solve("kv_cache_memory", batch_size=1, seq_len="8192 token", model=config(tmp_path, GEMMA2_9B))
    assert r.base_value == pytest.approx(6144 * 344_064, rel=1e-12)
    assert r.values["windowed_layer_fraction"] == 0.5 and r.values["sliding_window"] == 4096


def test_mistral_v01_caches_its_window_whatever_the_context():
    # its published config.json: every layer windowed at 4,096 (Jiang et al. 2023: a rolling cache
    # of W tokens): 32 layers x 8 x 128 x 2 x 2 = 131,072 bytes a token, 4,096 of them a sequence
    # at 8k and at 32k alike
    path = str(Path(__file__).parent / "data" / "hf" / "mistral-7b-v0.1-config.json")
    for context in ("8192 token", "32768 token"):
        r = symcalc.solve("kv_cache_memory", batch_size=1, seq_len=context, model=path)
        assert r.base_value == pytest.approx(4096 * 131_072, rel=1e-12)
    # and a decoded token attends over its window: 2 x 4,096 keys and values x 32 heads x 128 x
    # 32 layers of attention FLOPs beside 2 N, the same at 32k as at 4k
    at_4k = symcalc.solve("serving_flops_per_token", seq_len="4096 token", model=path).base_value
    at_32k = symcalc.solve("serving_flops_per_token", seq_len="32768 token", model=path).base_value
    assert at_4k == pytest.approx(at_32k, rel=1e-12)


def test_gpt_oss_reads_its_layer_types(tmp_path):
    # GPT-OSS 20B: layer_types alternate sliding (128 tokens) and full over 24 layers: 24 x 8 x 64
    # x 2 x 2 = 49,152 bytes a token; at 8,192 tokens 0.5 x 8,192 + 0.5 x 128 = 4,160 a layer
    r = symcalc.solve("kv_cache_memory", batch_size=1, seq_len="8192 token", model=config(tmp_path, GPT_OSS_20B))
    assert r.base_value == pytest.approx(4160 * 49_152, rel=1e-12)


def test_a_windowed_prefill_attends_over_less_than_the_prompt():
    # causal, every layer windowed at w = 4,096 over an s = 8,192-token prompt: token i attends
    # over min(i, w) keys, w - w^2 / (2 s) = 3,072 on average against the full layers' s / 2 =
    # 4,096. Per token, 2 x 1e9 FLOPs of weights plus 32 layers x 32 heads x 256 x 2 x 3,072
    shapes = dict(n_params=1e9, n_layers=32, d_model=4096, n_heads=32, n_kv_heads=8, batch_size=1,
                  prompt_len="8192 token")
    r = symcalc.solve("prefill_flops", sliding_window="4096 token", windowed_layer_fraction=1, **shapes)
    assert r.base_value == pytest.approx(8192 * (2e9 + 32 * 32 * 256 * 2 * 3072), rel=1e-12)
    full = symcalc.solve("prefill_flops", **shapes)
    assert full.base_value == pytest.approx(8192 * (2e9 + 32 * 32 * 256 * 8192), rel=1e-12)


@pytest.mark.parametrize("extra, windowed", [
    ({"use_sliding_window": False}, None),                 # Qwen2's switch: no window at all
    ({"use_sliding_window": True, "max_window_layers": 28, "num_hidden_layers": 32}, 4 / 32),
    ({"sliding_window_pattern": 6, "num_hidden_layers": 48}, 40 / 48),     # Gemma 3: one in six global
])
def test_the_configs_other_ways_of_saying_which_layers(tmp_path, extra, windowed):
    cfg = {**MISTRAL_7B_V01, "model_type": "qwen2", **extra}
    r = symcalc.solve("kv_cache_memory", batch_size=1, seq_len="8192 token", model=config(tmp_path, cfg))
    if windowed is None:
        assert "windowed_layer_fraction" not in r.values and r.base_value == pytest.approx(
            8192 * 2 * cfg["num_hidden_layers"] * 1024 * 2, rel=1e-12)
    else:
        assert r.values["windowed_layer_fraction"] == pytest.approx(windowed, rel=1e-12)


def test_layer_types_that_do_not_match_the_layers_are_one_line(cli, tmp_path):
    path = config(tmp_path, {**GPT_OSS_20B, "layer_types": ["sliding_attention"] * 3})
    run = cli("solve", "kv_cache_memory", "--model", path, "batch_size=1", "seq_len=8192")
    assert run.code == 2 and len(run.err.strip().splitlines()) == 1
    assert "'layer_types' must list one attention type a layer (24)" in run.err
    with pytest.raises(SymcalcError, match="layer_types"):
        symcalc.solve("kv_cache_memory", batch_size=1, seq_len="8192 token", model=path)


def test_a_windowed_layer_trains_on_its_window_under_a_flash_kernel(tmp_path):
    # GPT-OSS 20B at 8,192 tokens: a full layer's causal scores are 2 x 8,192 x 8,192 x 64 heads x
    # 64 wide = 549.8 GFLOP a micro-batch; a windowed one's queries see w - w^2 / (2 s) = 127 keys on
    # average, written against s / 2 as 2 x 128 - 128^2 / 8,192 = 254: half the layers each way,
    # 2 x 8,192 x (4,096 + 127) x 4,096 = 283.4 GFLOP
    path = config(tmp_path, GPT_OSS_20B)
    given = dict(micro_batch_size=1, seq_len="8192 token", tp=1, model=path)
    flash = symcalc.solve("layer_score_flops", options={"attention_kernel": "flash"}, **given)
    assert flash.base_value == pytest.approx(2 * 8192 * (4096 + 127) * 64 * 64, rel=1e-12)
    # eager attention computes every score and masks it afterwards: no saving
    eager = symcalc.solve("layer_score_flops", options={"attention_kernel": "eager"}, **given)
    assert eager.base_value == pytest.approx(4 * 8192 * 8192 * 64 * 64, rel=1e-12)


def test_gpt_oss_120b_fits_one_80_gb_gpu_in_its_mxfp4_checkpoint():
    # the model card: MoE weights in MXFP4 (4.25 bits: 0.53125 byte), "so gpt-oss-120b runs on a
    # single 80 GB GPU". Routed experts 36 x 128 x 3 x 2,880^2 = 114.6e9 parameters at 0.53125
    # byte, the other 2.2e9 (attention, router-free embeddings, LM head) in bf16: 65.2 GB, the
    # published checkpoint's 60.8 GiB; in bf16 throughout 233.6 GB
    experts = 36 * 128 * 3 * 2880**2
    total = symcalc.solve("n_params", model="gpt-oss-120b").base_value
    assert total == pytest.approx(116.83e9, rel=2e-3)         # the model card's count
    r = symcalc.solve("serving_weight_memory", tp=1, model="gpt-oss-120b", options={"weight_dtype": "mxfp4"})
    assert r.base_value == pytest.approx(experts * 0.53125 + (total - experts) * 2, rel=1e-9)
    assert symcalc.solve("serving_weight_memory", tp=1, model="gpt-oss-120b").base_value == pytest.approx(2 * total)
    # a batch-1 decode reads the bf16 rest but the input embedding's table, and 4 of 128 experts
    # a layer at 0.53125 byte: (2.2e9 - 201,088 x 2,880) x 2 + 4/128 x 114.6e9 x 0.53125 = 5.0 GB
    d = symcalc.solve("decode_weight_bytes", batch_size=1, model="gpt-oss-120b", options={"weight_dtype": "mxfp4"})
    assert d.base_value == pytest.approx((total - experts - 201088 * 2880) * 2 + experts * 4 / 128 * 0.53125,
                                         rel=1e-9)


def test_a_windowed_layers_kernel_runs_at_the_rate_of_its_window():
    # flash kernels saturate with the keys a query block sees (s / (s + s_1/2)); one length for
    # all the layers gives their time when each share of the score FLOPs runs at its own length:
    # GPT-OSS 20B at 8,192 tokens, half the layers windowed at 128, shares 4,096 and 127 (in the
    # units layer_score_flops writes), lengths 8,192 and 128: (4,096 + 127) / (4,096 / 8,192 +
    # 127 / 128) = 2,830 tokens; without windows (Llama 3 8B) at cp 2, 8,192 / 2
    r = symcalc.solve("attention_kernel_sequence", seq_len="8192 token", cp=1, model="gpt-oss-20b")
    windowed = 0.5 * (2 * 128 - 128**2 / 8192)          # 127
    assert r.base_value == pytest.approx((4096 + windowed) / (4096 / 8192 + windowed / 128), rel=1e-12)
    assert r.base_value == pytest.approx((4096 + 127) / (4096 / 8192 + 127 / 128), rel=1e-12)
    full = symcalc.solve("attention_kernel_sequence", seq_len="8192 token", cp=2, model="llama3-8b")
    assert full.base_value == 4096
