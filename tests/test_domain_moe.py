"""Mixture-of-experts shapes: multi-head latent attention, dense first layers, shared experts and
the router, counted from the shapes (DeepSeek-V3, Kimi K2, Qwen3-MoE, Mixtral), the per-layer
quantities the step-time model reads, and Hugging Face config.json files of these models."""

import json

import pytest

import symcalc
from symcalc.library.presets import model_from_hf_config

# DeepSeek-V3 (deepseek-ai/DeepSeek-V3 config.json; report section 4.2)
D, H, V = 7168, 128, 129280
Q_LORA, KV_LORA, NOPE, ROPE, V_HEAD = 1536, 512, 128, 64, 128
DSV3_SHAPES = dict(n_layers=61, n_dense_layers=3, d_model=D, n_heads=H, q_lora_rank=Q_LORA,
                   kv_lora_rank=KV_LORA, qk_nope_head_dim=NOPE, qk_rope_head_dim=ROPE, v_head_dim=V_HEAD,
                   vocab_size=V, n_routed_experts=256, n_shared_experts=1, n_experts_activated=9,
                   d_ffn_expert=2048, d_ffn=18432)
SWIGLU = {"ffn": "swiglu"}

# MLA per layer: W^DQ d x 1536 = 11,010,048; W^UQ 1536 x 128 x (128 + 64) = 37,748,736;
# W^DKV and W^KR d x (512 + 64) = 4,128,768; W^UK and W^UV 512 x 128 x (128 + 128) = 16,777,216;
# W^O 128 x 128 x d = 117,440,512: 187,105,280
MLA = D * Q_LORA + Q_LORA * H * (NOPE + ROPE) + D * (KV_LORA + ROPE) + KV_LORA * H * (NOPE + V_HEAD) + H * V_HEAD * D
EXPERT = 3 * D * 2048                  # 44,040,192 (SwiGLU: gate, up, down)
DENSE_FFN = 3 * D * 18432              # 396,361,728
ROUTER = D * 256                       # 1,835,008
EMBEDDINGS = 2 * V * D                 # 1,853,358,080 (untied: input embedding and LM head)


def test_deepseek_v3_total_parameters_from_the_shapes():
    """DeepSeek-V3, 671B by the report, counted by hand:
    attention (MLA) 187,105,280 per layer, in all 61 layers;
    3 dense layers: 187,105,280 + 3 x 7168 x 18432 = 583,467,008 each -> 1,750,401,024;
    58 MoE layers: 187,105,280 + 256 routed x 44,040,192 + 1 shared x 44,040,192 + router 7168 x 256
      = 187,105,280 + 11,274,289,152 + 44,040,192 + 1,835,008 = 11,507,269,632 each -> 667,421,638,656;
    embeddings 2 x 129280 x 7168 = 1,853,358,080.
    Total 671,025,397,760: 0.004 % above 671e9. (Norms, 1.0M, and the gate's per-expert bias,
    14,848, are not counted; the MTP module of the released weights is not part of the 671B.)"""
    assert MLA == 187105280
    moe_layer = MLA + 256 * EXPERT + EXPERT + ROUTER
    hand = 3 * (MLA + DENSE_FFN) + 58 * moe_layer + EMBEDDINGS
    assert moe_layer == 11507269632 and hand == 671025397760
    preset = symcalc.solve("n_params", model="deepseek-v3")
    assert preset.value == pytest.approx(hand, rel=1e-12) and not preset.warnings
    assert preset.value == pytest.approx(671e9, rel=0.01)
    typed = symcalc.solve("n_params", DSV3_SHAPES, options=SWIGLU)
    assert typed.value == pytest.approx(hand, rel=1e-12)
    assert typed.options["attention"] == "mla" and typed.options["moe_layers"] == "mixed"
    assert typed.options["shared_experts"] == "some" and typed.options["architecture"] == "moe"


def test_deepseek_v3_active_parameters_from_the_shapes():
    """A token goes through attention in every layer, the dense FFN in 3 layers, and in 58 MoE
    layers the router, the shared expert and 8 routed ones:
    3 x 583,467,008 + 58 x (187,105,280 + 9 x 44,040,192 + 1,835,008) + 1,853,358,080
    = 1,750,401,024 + 58 x 585,302,016 + 1,853,358,080 = 37,551,276,032.
    The report says 37B: this is 1.5 % above it, counting both embedding matrices as Mixtral's
    published 12.88B does. Without the input embedding (a lookup, no multiply) it is
    36,624,596,992, 1.0 % below (README_WEIGHTS.md's 36.7B claims to include both embeddings but
    the shapes do not reproduce it). Published active counts round down (Kimi K2, Qwen3 below)."""
    moe_active = MLA + 9 * EXPERT + ROUTER
    hand = 3 * (MLA + DENSE_FFN) + 58 * moe_active + EMBEDDINGS
    assert moe_active == 585302016 and hand == 37551276032
    r = symcalc.solve("n_active_params", model="deepseek-v3")
    assert r.value == pytest.approx(hand, rel=1e-12)
    assert abs(r.value / 37e9 - 1) < 0.015
    assert hand - V * D == 36624596992 and abs((hand - V * D) / 37e9 - 1) < 0.011
    assert symcalc.solve("moe_active_params_per_layer", model="deepseek-v3").value == moe_active


def test_per_layer_quantities_the_step_time_model_reads():
    """Averages over the 61 layers, so that n_params = L N_layer + embeddings and likewise for the
    active parameters. DeepSeek-V3:
    active_params_per_layer = (3 x 583,467,008 + 58 x 585,302,016) / 61 = 585,211,769.70;
    expert_params_per_layer (routed only) = 58 x 256 x 44,040,192 / 61 = 10,719,815,915.02;
    params_per_layer = (671,025,397,760 - 1,853,358,080) / 61 = 10,970,033,437.38.
    Mixtral 8x7B (every layer MoE, no shared expert, norms = rmsnorm): 41,943,040 + 2 x 176,160,768
    + 32,768 + 2 x 4096 (its two RMSNorms) = 394,305,536 active, 8 x 176,160,768 = 1,409,286,144 in
    experts.
    Llama 3 8B (dense): active = every parameter of the layer, 0 in experts; 4096 / 32 = 128-wide
    query/key and value heads. DeepSeek-V3: 128 + 64 = 192 and 128."""
    def ds(q):
        return symcalc.solve(q, DSV3_SHAPES, options=SWIGLU).value
    assert ds("active_params_per_layer") == pytest.approx((3 * (MLA + DENSE_FFN) + 58 * (MLA + 9 * EXPERT + ROUTER)) / 61,
                                                          rel=1e-12)
    assert ds("expert_params_per_layer") == pytest.approx(58 * 256 * EXPERT / 61, rel=1e-12)
    assert ds("params_per_layer") == pytest.approx((671025397760 - EMBEDDINGS) / 61, rel=1e-12)
    assert (ds("qk_head_dim"), ds("v_head_dim"), ds("n_moe_layers")) == (192, 128, 58)
    mixtral = {q: symcalc.solve(q, model="mixtral").value
               for q in ("active_params_per_layer", "expert_params_per_layer", "moe_active_params_per_layer")}
    assert mixtral == {"active_params_per_layer": 394305536, "expert_params_per_layer": 1409286144,
                       "moe_active_params_per_layer": 394305536}
    llama = {q: symcalc.solve(q, model="llama3-8b") for q in ("active_params_per_layer", "params_per_layer",
                                                               "expert_params_per_layer", "qk_head_dim", "v_head_dim")}
    assert llama["active_params_per_layer"].value == llama["params_per_layer"].value
    assert llama["expert_params_per_layer"].value == 0
    assert llama["qk_head_dim"].value == llama["v_head_dim"].value == 128


def test_a_kv_latent_implies_multi_head_latent_attention():
    # kv_lora_rank is only MLA's; it outranks the head counts an MLA config also carries
    # (num_key_value_heads 128 = num_attention_heads would say mha)
    r = symcalc.solve("attention_params_per_layer", {**DSV3_SHAPES, "n_kv_heads": 128}, options=SWIGLU)
    assert r.value == MLA and r.options["attention"] == "mla"
    assert any("attention=mla" in n and "kv_lora_rank > 0" in n for n in r.notes)
    # an explicit mla with the head counts alone is not contradicted (MLA has as many K/V heads)
    r = symcalc.solve("qk_head_dim", n_heads=128, n_kv_heads=128, qk_nope_head_dim=128, qk_rope_head_dim=64,
                      options={"attention": "mla"})
    assert r.value == 192


def test_backwards_through_mla_and_dense_layers():
    """The shapes' equation solved for one of them: d_model from the total (a quadratic in d with
    the MLA and expert terms) gives 7168 back; the number of dense layers from the total, each
    dense layer being 11,507,269,632 - 583,467,008 = 10,923,802,624 smaller than an MoE layer:
    61 MoE layers would be 701,956,447,552 + 1,853,358,080; 3 dense ones take 32,771,407,872 off."""
    shapes = {k: v for k, v in DSV3_SHAPES.items() if k != "d_model"}
    r = symcalc.solve("d_model", {**shapes, "n_params": 671025397760}, options=SWIGLU)
    assert r.value == 7168
    shapes = {k: v for k, v in DSV3_SHAPES.items() if k != "n_dense_layers"}
    r = symcalc.solve("n_dense_layers", {**shapes, "n_params": 671025397760},
                      options={**SWIGLU, "moe_layers": "mixed", "shared_experts": "some"})
    assert r.value == 3


def test_kimi_k2_counted_from_the_shapes():
    """Kimi K2: DeepSeek-V3's shapes with 64 heads, 384 routed experts, 1 dense layer, vocab 163840.
    MLA: 7168 x 1536 + 1536 x 64 x 192 + 7168 x 576 + 512 x 64 x 256 + 64 x 128 x 7168 = 101,122,048;
    dense layer 101,122,048 + 396,361,728 = 497,483,776;
    MoE layer 101,122,048 + 385 x 44,040,192 + 7168 x 384 = 17,059,348,480, x 60 = 1,023,560,908,800;
    embeddings 2 x 163840 x 7168 = 2,348,810,240: 1,026,407,202,816 in all (README: 1T; the report's
    1.04T is 1.3 % more). Active: 497,483,776 + 60 x (101,122,048 + 9 x 44,040,192 + 2,752,512)
    + 2,348,810,240 = 32,860,471,296 (README: 32B)."""
    mla = D * 1536 + 1536 * 64 * 192 + D * 576 + 512 * 64 * 256 + 64 * 128 * D
    dense, router, emb = mla + DENSE_FFN, D * 384, 2 * 163840 * D
    total = dense + 60 * (mla + 385 * EXPERT + router) + emb
    active = dense + 60 * (mla + 9 * EXPERT + router) + emb
    assert mla == 101122048 and total == 1026407202816 and active == 32860471296
    assert symcalc.solve("n_params", model="kimi-k2").value == pytest.approx(total, rel=1e-12)
    assert symcalc.solve("n_active_params", model="kimi-k2").value == pytest.approx(active, rel=1e-12)
    assert abs(total / 1.04e12 - 1) < 0.015 and abs(active / 32e9 - 1) < 0.03


@pytest.mark.parametrize("model,layers,d,heads,width,vocab,total,active", [
    # Qwen3-30B-A3B: attention 2 x 2048 x 128 x (32 + 4) = 18,874,368; experts 3 x 2048 x 768 =
    # 4,718,592 each; router 2048 x 128 = 262,144. Layer 18,874,368 + 128 x 4,718,592 + 262,144 =
    # 623,116,288, x 48 + 2 x 151936 x 2048 = 30,531,911,680 (model card 30.5B); active 18,874,368 +
    # 8 x 4,718,592 + 262,144 = 56,885,248, x 48 + 622,329,856 = 3,352,821,760 (model card 3.3B)
    ("qwen3-30b-a3b", 48, 2048, 32, 768, 151936, 30531911680, 3352821760),
    # Qwen3-235B-A22B: attention 2 x 4096 x 128 x 68 = 71,303,168; experts 3 x 4096 x 1536 =
    # 18,874,368; router 524,288. Layer 2,487,746,560, x 94 + 1,244,659,712 = 235,092,836,352 (235B);
    # active 222,822,400 x 94 + 1,244,659,712 = 22,189,965,312 (22B)
    ("qwen3-235b-a22b", 94, 4096, 64, 1536, 151936, 235092836352, 22189965312),
])
def test_qwen3_moe_presets(model, layers, d, heads, width, vocab, total, active):
    attention, expert, router = 2 * d * 128 * (heads + 4), 3 * d * width, d * 128
    assert layers * (attention + 128 * expert + router) + 2 * vocab * d == total
    assert layers * (attention + 8 * expert + router) + 2 * vocab * d == active
    r = symcalc.solve("n_params", model=model)
    assert r.value == pytest.approx(total, rel=1e-12) and r.options["attention"] == "gqa_head_dim"
    assert symcalc.solve("n_active_params", model=model).value == pytest.approx(active, rel=1e-12)


def test_mixtral_counts_its_router():
    """Mixtral 8x7B from the preset's shapes: 32 x (41,943,040 + 8 x 176,160,768 + 32,768) +
    262,144,000 = 46,702,526,464 and 32 x (41,943,040 + 2 x 176,160,768 + 32,768) + 262,144,000 =
    12,879,659,008; with the RMSNorms (norms = rmsnorm: 2 a layer and a final one, 65 x 4096 =
    266,240) the published 46,702,792,704 and 12,879,925,248 exactly."""
    assert symcalc.solve("n_params", model="mixtral").value == 46702526464 + 65 * 4096 == 46702792704
    assert symcalc.solve("n_active_params", model="mixtral").value == 12879659008 + 65 * 4096 == 12879925248


# deepseek-ai/DeepSeek-V3 config.json (the keys that bear on the shapes, as published)
DSV3_CONFIG = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
    "max_position_embeddings": 163840, "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_group": 8,
    "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True, "num_attention_heads": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "num_nextn_predict_layers": 1, "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False, "topk_group": 4,
    "topk_method": "noaux_tc", "v_head_dim": 128, "vocab_size": 129280,
}
# Qwen/Qwen3-30B-A3B config.json
QWEN3_CONFIG = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "decoder_sparse_step": 1,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "mlp_only_layers": [], "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "tie_word_embeddings": False, "vocab_size": 151936,
}


def _write(tmp_path, cfg):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_hugging_face_config_of_deepseek_v3(tmp_path):
    # MLA widths, 3 dense layers, 1 shared expert as wide as the routed ones: the same counts as
    # the preset (671,025,397,760 and 37,551,276,032); the MTP module is noted, not counted
    path = _write(tmp_path, DSV3_CONFIG)
    p = model_from_hf_config(path)
    assert p.options == {"attention": "mla", "ffn": "swiglu", "architecture": "moe", "shared_experts": "some",
                         "moe_layers": "mixed", "tied_embeddings": "false"}
    got = {k: v[0] for k, v in p.values.items()}
    assert {k: got[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                "v_head_dim", "n_dense_layers", "n_routed_experts", "n_shared_experts",
                                "n_experts", "n_experts_activated", "d_ffn_expert", "d_ffn_shared")} == {
        "q_lora_rank": "1536", "kv_lora_rank": "512", "qk_nope_head_dim": "128", "qk_rope_head_dim": "64",
        "v_head_dim": "128", "n_dense_layers": "3", "n_routed_experts": "256", "n_shared_experts": "1",
        "n_experts": "257", "n_experts_activated": "9", "d_ffn_expert": "2048", "d_ffn_shared": "2048"}
    assert "first_k_dense_replace = 3" in p.values["n_dense_layers"][1] and not p.findings
    assert "num_nextn_predict_layers = 1" in p.notes
    r = symcalc.solve("n_params", model=str(path))
    assert r.value == pytest.approx(671025397760, rel=1e-12) and not r.warnings
    assert symcalc.solve("n_active_params", model=str(path)).value == pytest.approx(37551276032, rel=1e-12)
    # a newer config's head_dim (the RoPE part in DeepseekV3Config) is not taken for the head width
    p = model_from_hf_config(_write(tmp_path, {**DSV3_CONFIG, "head_dim": 64}))
    assert p.options["attention"] == "mla" and "head_dim" not in p.values


def test_hugging_face_config_of_qwen3_moe(tmp_path):
    # 128 experts in every layer, no shared expert, 32 heads of 128 on a 2048-wide model
    path = _write(tmp_path, QWEN3_CONFIG)
    p = model_from_hf_config(path)
    assert p.options == {"attention": "gqa_head_dim", "ffn": "swiglu", "architecture": "moe",
                         "shared_experts": "none", "moe_layers": "all", "tied_embeddings": "false"}
    assert "n_dense_layers" not in p.values and "n_shared_experts" not in p.values
    assert symcalc.solve("n_params", model=str(path)).value == pytest.approx(30531911680, rel=1e-12)
    assert symcalc.solve("n_active_params", model=str(path)).value == pytest.approx(3352821760, rel=1e-12)
    # every other layer sparse (decoder_sparse_step 2: layers 1, 3, ..., 47): 24 dense layers of
    # 18,874,368 + 3 x 2048 x 6144 = 56,623,104 and 24 MoE layers of 623,116,288:
    # 24 x (56,623,104 + 623,116,288) + 622,329,856 = 16,936,095,232
    p = model_from_hf_config(_write(tmp_path, {**QWEN3_CONFIG, "decoder_sparse_step": 2}))
    assert p.values["n_dense_layers"][0] == "24" and p.options["moe_layers"] == "mixed"
    r = symcalc.solve("n_params", model=str(tmp_path / "config.json"))
    assert r.value == pytest.approx(24 * (18874368 + 3 * 2048 * 6144 + 623116288) + 622329856, rel=1e-12)


def test_hugging_face_config_with_one_wide_shared_expert(tmp_path):
    """Qwen2-MoE keys (Qwen1.5-MoE-A2.7B's shapes): 60 experts of 1408, top-4, one shared expert of
    shared_expert_intermediate_size 5632, 24 layers of 2048, 16 heads. Per layer: attention
    4 x 2048^2 = 16,777,216; 60 x 3 x 2048 x 1408 = 519,045,120; shared 3 x 2048 x 5632 =
    34,603,008; router 2048 x 60 = 122,880: 570,548,224, x 24 + 2 x 151936 x 2048 = 14,315,487,232
    (model card: 14.3B). Active: 16,777,216 + 4 x 8,650,752 + 34,603,008 + 122,880 = 86,106,112,
    x 24 + 622,329,856 = 2,688,876,544 (2.7B)."""
    cfg = {"model_type": "qwen2_moe", "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 5632,
           "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632, "num_experts": 60,
           "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_attention_heads": 16, "num_key_value_heads": 16,
           "vocab_size": 151936, "decoder_sparse_step": 1, "tie_word_embeddings": False}
    path = _write(tmp_path, cfg)
    p = model_from_hf_config(path)
    assert p.options["shared_experts"] == "some" and p.values["d_ffn_shared"][0] == "5632"
    assert p.values["n_experts_activated"][0] == "5"        # 4 routed + the shared one
    assert symcalc.solve("n_params", model=str(path)).value == pytest.approx(14315487232, rel=1e-12)
    assert symcalc.solve("n_active_params", model=str(path)).value == pytest.approx(2688876544, rel=1e-12)


def test_latent_attention_without_a_query_latent_counts_its_direct_query(tmp_path):
    # DeepSeek-V2-Lite (deepseek-ai/DeepSeek-V2-Lite config.json): the queries skip the latent
    # (q_lora_rank null), so the attention is 2048 x 16 x 192 (query) + 2048 x 576 (KV latent and
    # RoPE key) + 512 x 16 x 256 (K and V up) + 16 x 128 x 2048 (output) = 13,762,560 a layer.
    # With 2 x 102,400 x 2,048 embeddings, one dense layer of 3 x 2048 x 10944 and 26 MoE layers
    # of 64 routed + 2 shared experts of 3 x 2048 x 1408 and a 2048 x 64 router, plus the RMSNorm
    # weights (2 x 2048 a layer and the final 2048): 15,706,470,400, the paper's "15.7B total
    # parameters" (DeepSeek-AI 2024, DeepSeek-V2, Appendix B)
    cfg = {**DSV3_CONFIG, "q_lora_rank": None, "hidden_size": 2048, "intermediate_size": 10944,
           "moe_intermediate_size": 1408, "n_routed_experts": 64, "n_shared_experts": 2, "num_attention_heads": 16,
           "num_key_value_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27, "first_k_dense_replace": 1,
           "vocab_size": 102400, "rms_norm_eps": 1e-6}
    cfg.pop("num_nextn_predict_layers")
    path = _write(tmp_path, cfg)
    p = model_from_hf_config(path)
    assert p.options["attention"] == "mla" and p.values["q_lora_rank"][0] == "0"
    per_layer = 2048 * 16 * 192 + 2048 * 576 + 512 * 16 * 256 + 16 * 128 * 2048
    assert per_layer == 13_762_560
    r = symcalc.solve("n_params", model=str(path))
    assert r.value == 2 * 102400 * 2048 + 27 * per_layer + 3 * 2048 * 10944 \
        + 26 * (66 * 3 * 2048 * 1408 + 2048 * 64) + 27 * 2 * 2048 + 2048 == 15_706_470_400
    assert "mla_query=direct" in " ".join(r.notes) and not any("latent attention" in w for w in r.warnings)


def test_a_moe_memory_counts_the_embeddings_when_the_model_is_known():
    # Qwen3-30B-A3B from its shapes: per layer attention 2 x 2048 x 128 x (32 + 4) = 18,874,368,
    # experts 128 x 3 x 2048 x 768 = 603,979,776, router 2048 x 128 = 262,144: 623,116,288 x 48
    # layers + 2 x 151,936 x 2048 embeddings = 30,531,911,680 parameters, over tp x pp = 4 GPUs
    r = symcalc.solve("model_state_memory", model="qwen3-30b-a3b", tp=2, pp=2, dp=4,
                      options={"zero_stage": "1"})
    ids = {f.id for s in r.steps for f in s.formulas}
    assert "model_parallel_shard_moe" in ids and "params_per_gpu_layers_only" not in ids
    assert r.values["params_per_gpu"] == pytest.approx(30_531_911_680 / 4, rel=1e-12)
    # and so the memory solves back to the layout it came from (it had come back as tp = 2.006:
    # forwards the layers alone, backwards with the embeddings)
    given = {q: r.values[q] for q in ("n_layers", "d_model", "n_heads", "n_kv_heads", "head_dim", "d_ffn_expert",
                                      "n_experts", "vocab_size")}
    back = symcalc.solve("tp", {**given, "pp": 2, "dp": 4, "model_state_memory": (r.base_value, "byte")},
                         options={"zero_stage": "1", "architecture": "moe", "attention": "gqa_head_dim",
                                  "moe_layers": "all", "shared_experts": "none"})
    assert back.value == pytest.approx(2, rel=1e-6)


def test_expert_parallelism_splits_only_the_routed_experts_of_the_moe_layers():
    # DeepSeek-V3 over ep = 64, pp = 16: its 58 MoE layers (3 of 61 are dense) hold 256 routed
    # experts of 3 x 7168 x 2048 = 44,040,192 parameters: 653,908,770,816 in all, of which a rank
    # keeps 1/64. The rest (attention, dense FFNs, shared experts, embeddings) is split by pp:
    # (671,025,397,760 - 653,908,770,816 x 63/64) / 16 = 1,708,371,968. Counting every layer's
    # experts had made the shard negative (-5.4e8).
    r = symcalc.solve("params_per_gpu", model="deepseek-v3", tp=1, pp=16, ep=64)
    assert r.value == pytest.approx((671_025_397_760 - 653_908_770_816 * 63 / 64) / 16, rel=1e-9)


def test_a_shard_gives_the_total_back_and_the_shapes_take_it_from_there():
    # The MoE shard law runs forward only (a layer count from it would divide by 1 - 1/ep = 0),
    # except for n_params: DeepSeek-V3 on tp = 2, pp = 8 holds 671,025,397,760 / 16 =
    # 41,939,087,360 parameters a GPU, and from that shard the shapes give its dense layers'
    # d_ffn = 18432 again (not the SwiGLU estimate 8/3 x 7168 = 19115).
    shard = symcalc.solve("params_per_gpu", model="deepseek-v3", tp=2, pp=8)
    assert shard.value == pytest.approx(671_025_397_760 / 16, rel=1e-12)
    back = symcalc.solve("d_ffn", {"params_per_gpu": shard.value, "tp": 2, "pp": 8}, model="deepseek-v3")
    assert back.value == pytest.approx(18432, rel=1e-9)
