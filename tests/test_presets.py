"""Presets: real hardware and real models fill in known values; config.json files are read."""

import json

import pytest

import symcalc
from helpers import DATA
from symcalc.errors import DomainError, MalformedValueError, UnknownNameError
from symcalc.library.presets import all_presets, find_preset, model_from_hf_config
from symcalc.query.values import read_value

HF = DATA / "hf"


def test_every_preset_value_has_a_source_and_a_known_name_and_unit():
    lib = symcalc.default_library()
    for table in all_presets().values():
        for p in table.values():
            assert p.source, p.key
            entries = [*p.values.items(), *(("peak_flops", v) for v in p.peak_flops.values())]
            for name, (value, source) in entries:
                assert source, (p.key, name)
                q = lib.quantity(name)
                read_value(q, value)        # parses, with the right dimension


def test_required_presets_exist():
    hw = {find_preset("hardware", n).key for n in ["a100-40gb", "a100", "h100", "h800", "h200", "b200", "mi300x", "l4"]}
    assert len(hw) == 8
    models = ["gpt3", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
              "mixtral-8x7b", "deepseek-v3"]
    assert len({find_preset("model", n).key for n in models}) == 9


def test_h100_dense_bf16_peak_is_989_not_1979():
    h100 = find_preset("hardware", "H100")
    assert h100.peak_flops["bf16"][0] == "989.4 TFLOP/s"
    assert "sparsity" in h100.peak_flops["bf16"][1]


def test_hardware_preset_fills_peak_by_precision_and_user_values_win():
    kw = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64)
    r = symcalc.solve("mfu", hardware="h100", **kw)
    # 6 * 7e9 * 150e3 / (64 * 989.4e12) = 9.95 % (seed 000 says 4.97 % against the sparse 1979)
    assert r.value == pytest.approx(100 * 6.3e15 / (64 * 989.4e12), rel=1e-9)
    assert r.given["peak_flops"].origin.startswith("hardware h100_sxm")
    fp8 = symcalc.solve("mfu", hardware="h100", options={"precision": "fp8"}, **kw)
    assert fp8.value == pytest.approx(100 * 6.3e15 / (64 * 1978.9e12), rel=1e-9)
    mine = symcalc.solve("mfu", hardware="h100", peak_flops="1979 TFLOP/s", **kw)
    assert mine.value == pytest.approx(4.9741, rel=1e-4) and not mine.given["peak_flops"].origin


def test_a_preset_never_supplies_the_target():
    # Llama 3 8B from its shapes: 32 x (2 d^2 (1 + 8/32) + 3 d 14336 + 2 d) + 2 x 128256 x d + d,
    # d = 4096 (norms = rmsnorm: 2 RMSNorms per layer and a final one), not its published n_params
    d = 4096
    shapes = 32 * (2 * d * d * (1 + 8 / 32) + 3 * d * 14336 + 2 * d) + 2 * 128256 * d + d
    r = symcalc.solve("n_params", model="llama3-8b")
    assert r.value == pytest.approx(shapes, rel=1e-12)
    # which is the published count to the parameter
    assert r.value == 8030261248


def test_model_preset_options_and_training_time():
    r = symcalc.solve("train_time", model="llama3-405b", n_gpus=16384, mfu=0.4, peak_flops="989 TFLOP/s")
    # seed 001: 6 x 405e9 x 15.6e12 / (16384 x 989e12 x 0.4) = 67.7 days; with 405.85e9 params 67.9
    assert r.value == pytest.approx(6 * 405853388800 * 15.6e12 / (16384 * 989e12 * 0.4) / 86400, rel=1e-9)
    assert r.presets == {"model": "llama3_405b"}


# (config.json, options read from it, parameter count from the shapes, with the reason)
HF_DENSE = [
    # Llama 3 8B: the published 8,030,261,248, 2 RMSNorms per layer and a final one (rms_norm_eps)
    # included: 65 x 4096 = 266,240 of them
    ("llama3-8b-config.json", {"attention": "gqa", "ffn": "swiglu", "tied_embeddings": "false", "norms": "rmsnorm"},
     8030261248),
    # Gemma 7B: 16 heads of 256 on d_model 3072 (16 x 256 = 4096), gated GELU, tied embeddings.
    # 28 x (2 x 3072 x 256 x 32 + 3 x 3072 x 24576) + 256000 x 3072 = 8,537,505,792, and the RMSNorms,
    # 57 x 3072 = 175,104: the published 8,537,680,896.
    ("gemma-7b-config.json", {"attention": "gqa_head_dim", "ffn": "swiglu", "tied_embeddings": "true",
                              "norms": "rmsnorm"},
     8537505792 + 57 * 3072),
]


@pytest.mark.parametrize("file,options,n_params", HF_DENSE)
def test_hugging_face_config_of_a_dense_model(file, options, n_params):
    assert model_from_hf_config(HF / file).options == options
    r = symcalc.solve("n_params", model=str(HF / file))
    assert r.value == pytest.approx(n_params, rel=1e-12)


def test_hugging_face_config_of_gpt2():
    # GPT-2 small: 12 x 12 x 768^2 + 50257 x 768 (tied) = 123,532,032, and 25 LayerNorms (2 a layer and
    # a final one: layer_norm_epsilon) of a weight and a bias, 25 x 2 x 768 = 38,400; the published
    # 124,439,808 adds 1024 x 768 position embeddings and the biases (0.7 %)
    r = symcalc.solve("n_params", model=str(HF / "gpt2-config.json"))
    assert r.value == pytest.approx(12 * 12 * 768 ** 2 + 50257 * 768 + 25 * 2 * 768, rel=1e-12)
    assert r.value == pytest.approx(124439808, rel=0.01)


@pytest.mark.parametrize("content,needle", [
    ('{"num_hidden_layers": 32, "hidden_size": 40', "not valid JSON"),
    ('{"num_hidden_layers": 32}', "missing"),
    ('[1, 2, 3]', "JSON object"),
    ('{"num_hidden_layers": -2, "hidden_size": 4096, "num_attention_heads": 32}', "positive"),
])
def test_broken_config_json_is_a_clear_error(tmp_path, content, needle):
    path = tmp_path / "config.json"
    path.write_text(content)
    with pytest.raises(MalformedValueError) as e:
        symcalc.solve("n_params", model=str(path))
    assert needle in e.value.message


def test_unknown_preset_names_suggest(cli):
    with pytest.raises(UnknownNameError) as e:
        find_preset("hardware", "h10")
    assert "h100" in e.value.message
    run = cli("solve", "mfu", "n_params=7e9", "--hardware", "h1000")
    assert run.code == 2 and "unknown hardware" in run.err


def test_cli_presets_and_lists(cli):
    run = cli("solve", "n_gpus", "--model", "llama3-8b", "--hardware", "h100", "train_time=30 day", "mfu=40%",
              "--json")
    d = run.json()
    # 6 x 8.03e9 x 15e12 / (0.4 x 989.4e12 x 2.592e6 s) = 704.5 -> 705 GPUs
    assert d["exact"] == pytest.approx(6 * 8030261248 * 15e12 / (0.4 * 989.4e12 * 2.592e6), rel=1e-9)
    hw = json.loads(cli("list", "hardware", "--json").out)["hardware"]
    assert {h["name"] for h in hw} >= {"h100_sxm", "l4", "mi300x"}
    assert all(h["sources"] for h in hw)
    assert "llama3_8b" in cli("list", "models").out


def test_the_opening_question_of_seed_000_with_presets():
    # "A 30B model on 128 H100s: memory per GPU, time per step, tokens per second", with seed
    # 000's own settings (1M-token batch, 45 % MFU) but the H100's dense BF16 peak (989.4 TFLOP/s)
    common = dict(n_params=30e9, n_gpus=128, hardware="h100")
    # model states fully sharded (ZeRO-3 over 128): 16 B x 30e9 / 128 = 3.75 GB
    mem = symcalc.solve("model_state_memory", dp=128, options={"zero_stage": 3}, **common)
    assert mem.value == pytest.approx(16 * 30e9 / 128 / 1e9, rel=1e-12)
    # 6 x 30e9 x 1e6 FLOP / (0.45 x 989.4e12 FLOP/s x 128) = 3.158 s per step
    step = symcalc.solve("step_time", global_batch_tokens="1e6 token", mfu="45%", **common)
    assert step.value == pytest.approx(6 * 30e9 * 1e6 / (0.45 * 989.4e12 * 128), rel=1e-12)
    tps = symcalc.solve("tokens_per_second", global_batch_tokens="1e6 token", mfu="45%", **common)
    assert tps.value == pytest.approx(1e6 / step.value, rel=1e-12)          # 316,627 token/s
    # it fits: 3.75 GB of model states in the preset's 80 GB leaves room for activations
    assert mem.value * 1e9 < symcalc.query.values.read_value(symcalc.default_library().quantity("gpu_memory"),
                                                       "80 GB").magnitude


def test_hugging_face_config_of_mixtral_is_a_mixture_of_experts():
    p = model_from_hf_config(HF / "mixtral-8x7b-config.json")
    assert p.options["architecture"] == "moe" and p.values["d_ffn_expert"][0] == "14336"
    assert p.options["shared_experts"] == "none" and p.options["moe_layers"] == "all"
    # per layer: GQA attention 2 x 4096^2 x (1 + 8/32) = 41,943,040; 8 experts x 3 x 4096 x 14336
    # = 1,409,286,144; the router 4096 x 8 = 32,768. x 32 layers + 2 x 32000 x 4096 = 46,702,526,464,
    # and the RMSNorms (65 x 4096 = 266,240): the published 46,702,792,704.
    attention, expert, router = 2 * 4096**2 * (1 + 8 / 32), 3 * 4096 * 14336, 4096 * 8
    total = 32 * (attention + 8 * expert + router) + 2 * 32000 * 4096 + 65 * 4096
    r = symcalc.solve("n_params", model=str(HF / "mixtral-8x7b-config.json"))
    assert r.value == pytest.approx(total, rel=1e-12) and total == 46702792704
    # a token: attention, 2 experts, the router: 32 x 394,297,344 + 262,144,000 = 12,879,659,008,
    # and the same norms: the published 12,879,925,248
    active = symcalc.solve("n_active_params", model=str(HF / "mixtral-8x7b-config.json"))
    hand = 32 * (attention + 2 * expert + router) + 2 * 32000 * 4096 + 65 * 4096
    assert active.value == pytest.approx(hand, rel=1e-12) and hand == 12879925248


def test_moe_presets_count_active_parameters_for_compute():
    # DeepSeek-V3 trains on its active parameters, counted from the shapes: 37,551,276,032 (the
    # report's 37B): 6 x 37,551,276,032 x 14.8e12 / (2048 x 989.4e12 x 0.4) s = 47.6 days
    r = symcalc.solve("train_time", model="deepseek-v3", hardware="h100", n_gpus=2048, mfu=0.4)
    assert r.value == pytest.approx(6 * 37551276032 * 14.8e12 / (2048 * 989.4e12 * 0.4) / 86400, rel=1e-9)
    # asked for, the total is counted from the shapes (MLA, dense first layers, shared experts):
    # 671,025,397,760 (tests/test_domain_moe.py has the hand count), no published value kept
    n = symcalc.solve("n_params", model="deepseek-v3")
    assert n.value == pytest.approx(671025397760, rel=1e-12) and not n.warnings


def test_fp32_training_runs_its_matmuls_on_tf32_tensor_cores():
    # fp32_adam: frameworks enable TF32 for fp32 matmuls, so the peak is the H100's dense TF32 494.7 TFLOP/s
    kw = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64)
    r = symcalc.solve("mfu", hardware="h100", options={"precision": "fp32_adam"}, **kw)
    assert r.given["peak_flops"].text == "494.7 TFLOP/s"
    assert r.value == pytest.approx(100 * 6.3e15 / (64 * 494.7e12), rel=1e-9)


def test_preset_values_are_reported_with_their_source(cli):
    args = ("solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64", "--hardware", "h100")
    d = cli(*args, "--json").json()
    # typed values and preset values are kept apart; the preset's peak says where it comes from
    assert set(d["given"]) == {"n_params", "tokens_per_second", "n_gpus"}
    assert d["presets"] == {"hardware": "h100_sxm"}
    assert d["from_presets"]["peak_flops"]["value"] == "989.4 TFLOP/s"
    assert "datasheet" in d["from_presets"]["peak_flops"]["source"]
    # presets that the route does not need (HBM size, link bandwidth) are not reported as used
    assert not {"gpu_memory", "hbm_bandwidth", "gpu_power"} & set(d["from_presets"])
    text = cli(*args).out
    assert "From presets" in text and "peak_flops = 989.4 TFLOP/s" in text


def test_llama_3_1_is_llama_3_with_a_128k_context():
    # Llama 3.1 and 3.3 keep Llama 3's shapes (config.json: the same layers, widths, heads and
    # vocabulary) and extend max_position_embeddings from 8192 to 131072: a 32k prompt is a
    # Llama 3.1 question, and beyond Llama 3's own context
    old, new = find_preset("model", "llama3-70b"), find_preset("model", "llama-3.1-70b")
    assert new.key != old.key and find_preset("model", "llama-3.3-70b").key == new.key
    assert {k: v[0] for k, v in old.values.items() if k != "max_position_embeddings"} == \
        {k: v[0] for k, v in new.values.items() if k != "max_position_embeddings"}
    assert new.values["max_position_embeddings"][0] == "131072 token"
    long = {"tp": 8, "batch_size": 1, "prompt_len": "32000 token"}
    assert symcalc.solve("prefill_time", long, model="llama3.1-70b", hardware="h100").base_value > 0
    with pytest.raises(DomainError, match="more than max_position_embeddings = 8192 token"):
        symcalc.solve("prefill_time", long, model="llama3-70b", hardware="h100")
