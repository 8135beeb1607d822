"""Memory domain (formulas/memory.toml, activations.toml, parallelism.toml): inverse questions
and edge cases. Every expectation is a seed's answer or a hand computation written next to it.
"""

from __future__ import annotations

import pytest

import symcalc
from symcalc.errors import OutOfBoundsError, UnderdeterminedError

GB = 1e9


@pytest.fixture(scope="module")
def lib():
    return symcalc.default_library()


def solve(lib, target, options=None, **given):
    return symcalc.solve(target, given, options=options or {}, library=lib)


# ---- Exercise-1-like job: 13B over TP=4 x ZeRO-3 DP=8, s = 4096, h = 5120, a = 40, L = 40 --------

EX1 = dict(n_params=13e9, tp=4, dp=8, seq_len="4096 token", d_model=5120, n_layers=40, n_heads=40,
           buffer_memory="5 GB", gpu_memory="80 GB")
# The seed's figures add model states, activations and buffers: memory_figure = textbook
# (formulas/peak_memory.toml), without the logits, ZeRO-3 buffers and allocator reserve the
# library's total counts by default
TEXTBOOK = {"memory_figure": "textbook"}
EX1_OPTIONS = {"zero_stage": "3", "sequence_parallel": "true", **TEXTBOOK}


def test_largest_micro_batch_that_fits_rounds_down(lib):
    # model states 16 x 13e9 / 32 = 6.5 GB (seed 000 Exercise 1), buffers 5 GB.
    # Selective recomputation with SP: 34 s b h / t per layer = 34 x 4096 x 5120 / 4 = 178,257,920 B per
    # sequence, x 40 layers = 7.1303168 GB per sequence. 6.5 + 5 + 7.1303168 b = 80 -> b = 9.6069 -> 9.
    r = solve(lib, "micro_batch_size", {**EX1_OPTIONS, "recompute": "selective"}, **EX1, memory_headroom="0 GB")
    assert r.base_value == pytest.approx(68.5 / 7.1303168, rel=1e-6)
    assert r.rounded_base == 9
    # forwards: b = 9 leaves 80 - (11.5 + 64.17) = 4.33 GB; b = 10 (82.8 GB) does not fit
    ok = solve(lib, "memory_headroom", {**EX1_OPTIONS, "recompute": "selective"}, **EX1, micro_batch_size=9)
    assert ok.base_value == pytest.approx(80e9 - 11.5e9 - 9 * 7.1303168e9, rel=1e-9)
    with pytest.raises(OutOfBoundsError):
        solve(lib, "memory_headroom", {**EX1_OPTIONS, "recompute": "selective"}, **EX1, micro_batch_size=10)


def test_no_micro_batch_fits_when_model_states_alone_overflow(lib):
    # Without ZeRO, 13B x 16 bytes = 208 GB of model states: 80 - 208 - 5 = -133 GB is left for
    # activations, so no micro-batch fits; the error names that value instead of dumping equations.
    given = {k: v for k, v in EX1.items() if k not in ("dp",)}
    with pytest.raises(symcalc.NoSolutionError) as e:
        solve(lib, "micro_batch_size", {"zero_stage": "0", "sequence_parallel": "true", "recompute": "selective",
                                        **TEXTBOOK},
              **{**given, "tp": 1}, memory_headroom="0 GB")
    assert "activation_memory" in e.value.message and "-133 GB" in e.value.message


def test_an_answer_over_the_gpu_memory_is_warned_about(lib):
    # 13B x 16 bytes without ZeRO = 208 GB of model states, on an 80 GB GPU
    r = solve(lib, "model_state_memory", {}, n_params=13e9, gpu_memory="80 GB")
    assert r.value == pytest.approx(208.0)
    assert any("exceeds gpu_memory = 80 GB" in w and "does not fit" in w for w in r.warnings)
    assert "gpu_memory" not in r.unused                  # it was used: for the check
    ok = solve(lib, "model_state_memory", {"zero_stage": "3"}, n_params=13e9, dp=8, gpu_memory="80 GB")
    assert ok.value == pytest.approx(26.0) and not any("exceeds" in w for w in ok.warnings)


def test_longest_sequence_that_fits(lib):
    # No recomputation, SP, b = 1: per layer 34 s h / 4 + 5 a s^2 / 4 = 43,520 s + 50 s^2 bytes (s in tokens);
    # 40 layers: 1,740,800 s + 2,000 s^2 = 80 - 11.5 = 68.5 GB -> s = 5433.31 (seq_len rounds to nearest).
    r = solve(lib, "seq_len", EX1_OPTIONS, **{k: v for k, v in EX1.items() if k != "seq_len"},
              micro_batch_size=1, memory_headroom="0 GB")
    s = (-1_740_800 + (1_740_800 ** 2 + 4 * 2000 * 68.5e9) ** 0.5) / (2 * 2000)
    assert r.base_value == pytest.approx(s, rel=1e-6)
    assert s == pytest.approx(5433.31, abs=0.01)


def test_smallest_tp_for_model_states_in_80gb():
    # 16 bytes/param x 30e9 = 480 GB (seed 000's opening question) over tp GPUs = 80 GB -> tp = 6
    r = symcalc.solve("tp", n_params=30e9, model_state_memory="80 GB")
    assert r.rounded_base == 6 and r.base_value == pytest.approx(6, rel=1e-12)


def test_smallest_dp_under_zero3_for_model_states_in_80gb():
    # ZeRO-3: 16 x 70e9 / dp = 80 GB -> dp = 14 (seed 000's 1.12 TB over 80 GB GPUs: 14 H100s)
    r = symcalc.solve("dp", n_params=70e9, model_state_memory="80 GB", options={"zero_stage": "3"})
    assert r.rounded_base == 14


def test_dp_from_zero1_model_states():
    # seed 001: 4 x 7e9 + 12 x 7e9 / dp = 29.3125 GB -> 12 x 7e9 / dp = 1.3125 GB -> dp = 64
    r = symcalc.solve("dp", n_params=7e9, model_state_memory="29.3125 GB", options={"zero_stage": "1"})
    assert r.base_value == pytest.approx(64, rel=1e-9)


def test_largest_model_that_fits_under_zero3():
    # 80 GB - 20 GB activations = 60 GB of model states = 16 n / 64 -> n = 240e9
    # (seed 001's 30B on 8 GPUs: 16 x 30e9 / 8 = 60 GB, the same 60 + 20 = 80 GB)
    r = symcalc.solve("n_params", dp=64, activation_memory="20 GB", gpu_memory="80 GB", memory_headroom="0 GB",
                      options={"zero_stage": "3", **TEXTBOOK})
    assert r.base_value == pytest.approx(240e9, rel=1e-12)


def test_largest_model_for_inference_on_one_gpu():
    # seed 002: inference memory = 1.2 x weights; fp16: 1.2 x 2 B x n = 80 GB -> n = 33.3e9
    r = symcalc.solve("n_params", inference_memory="80 GB", bytes_per_param="2 byte")
    assert r.base_value == pytest.approx(80e9 / 2.4, rel=1e-12)


def test_model_size_from_checkpoint_size():
    # seed 001: 14 bytes/param x n + 8 B = 980 GB -> n = (980e9 - 8) / 14 = 70e9 - 4/7
    r = symcalc.solve("n_params", checkpoint_size="980 GB")
    assert r.base_value == pytest.approx((980e9 - 8) / 14, rel=1e-15)


def test_checkpoint_every_k_that_fits_block_model(lib):
    # seed 000's block model: (40 / k) x 8.13695 GB = 60 GB -> k = 325.478 / 60 = 5.4246 (k = 6 fits: 54.2 GB)
    r = solve(lib, "checkpoint_every_k_layers", {"checkpoint_model": "block"}, n_layers=40, pp=1,
              activation_memory_per_layer="8.13695 GB", activation_memory="60 GB")
    assert r.base_value == pytest.approx(40 * 8.13695 / 60, rel=1e-9)


def test_checkpoint_every_k_that_fits_segment_model(lib):
    # segment model, Exercise 1 layer with SP: M_in = 2 s b h / t = 83.886 MB, M_layer = 8.13695 GB.
    # (40/k) M_in + k M_layer = 60 GB -> 8.13695 k^2 - 60 k + 3.355443 = 0 -> largest root k = 7.3174
    r = solve(lib, "checkpoint_every_k_layers", {"sequence_parallel": "true"}, n_layers=40, pp=1,
              micro_batch_size=8, seq_len="4096 token", d_model=5120, n_heads=40, tp=4, activation_memory="60 GB")
    a, b, c = 8.13694976, -60.0, 40 * 0.0838860800
    assert r.base_value == pytest.approx((-b + (b * b - 4 * a * c) ** 0.5) / (2 * a), rel=1e-6)


def test_checkpoint_every_k_that_minimises_memory(lib):
    # minimum of (L/k) M_in + k M_layer at k* = sqrt(L M_in / M_layer); selective + SP: M_in / M_layer = 2/34,
    # L = 80 -> k* = sqrt(80 x 2 / 34) = 2.1693
    r = solve(lib, "checkpoint_every_k_layers_optimal", {"sequence_parallel": "true", "recompute": "selective"},
              n_layers=80, pp=1, micro_batch_size=1, seq_len="4096 token", d_model=8192, tp=8)
    assert r.base_value == pytest.approx((80 * 2 / 34) ** 0.5, rel=1e-9)


def test_tp_from_activation_per_layer_without_sp():
    # seed 002: s b h (10 + 24/t + 5 a s / (h t)) = 9.39524 GB with s b h = 167,772,160:
    # 56.0 = 10 + 184 / t -> t = 4
    r = symcalc.solve("tp", micro_batch_size=8, seq_len="4096 token", d_model=5120, n_heads=40,
                      activation_memory_per_layer="9.39524 GB", options={"sequence_parallel": "false"})
    assert r.rounded_base == 4 and r.base_value == pytest.approx(4, rel=1e-5)


def test_micro_batch_from_boundary_tensor_activations(lib):
    # seed 001: 2 x b x 4096 x 8192 x 80 x 2 B = 42.9497 GB -> b = 4
    r = solve(lib, "micro_batch_size", {"activation_model": "boundary_tensors"}, seq_len="4096 token", n_layers=80,
              d_model=8192, n_boundary_tensors=2, bytes_per_activation="2 byte", activation_memory="42.9497 GB")
    assert r.rounded_base == 4


# ---- Edge cases --------------------------------------------------------------------------------

LAYER = dict(micro_batch_size=8, seq_len="4096 token", d_model=5120, n_heads=40, tp=4, n_layers=40)


def test_no_checkpointing_unless_k_is_given(lib):
    # default options: k defaults to the stage's layers, i.e. L x M_layer: 40 x 9.39524 GB (TP=4, no SP)
    r = solve(lib, "activation_memory", {}, **LAYER)
    assert r.base_value == pytest.approx(40 * 167772160 * 56, rel=1e-12)


def test_block_k1_is_no_recompute_and_segment_k1_is_full_recompute_plus_one_layer(lib):
    sp = {"sequence_parallel": "true"}
    # block model, k = 1: every layer keeps its activations, 40 x 8.13695 GB = 325.478 GB
    block = solve(lib, "activation_memory", {**sp, "checkpoint_model": "block"}, **LAYER, checkpoint_every_k_layers=1)
    assert block.base_value == pytest.approx(40 * 167772160 * 194 / 4, rel=1e-12)
    # segment model, k = 1: 40 stored inputs (3.355 GB) + one layer's working set (8.137 GB) = 11.49 GB
    seg = solve(lib, "activation_memory", {**sp, "checkpoint_model": "segment"}, **LAYER, checkpoint_every_k_layers=1)
    assert seg.base_value == pytest.approx(40 * 2 * 167772160 / 4 + 167772160 * 194 / 4, rel=1e-12)
    # full recomputation: the stored inputs alone, 3.355 GB (seed 000 Exercise 1 with SP)
    full = solve(lib, "activation_memory", {**sp, "recompute": "full"}, **LAYER)
    assert full.base_value == pytest.approx(40 * 2 * 167772160 / 4, rel=1e-12)


def test_segment_with_one_segment_is_no_checkpointing(lib):
    # k = L would store the stage input and recompute everything (more than no checkpointing): the Min
    # gives L x M_layer = 325.478 GB
    r = solve(lib, "activation_memory", {"sequence_parallel": "true"}, **LAYER, checkpoint_every_k_layers=40)
    assert r.base_value == pytest.approx(40 * 167772160 * 194 / 4, rel=1e-12)


def test_1f1b_activation_memory_does_not_depend_on_pp(lib):
    # Korthikanti et al. 2022: the first 1F1B stage holds pp micro-batches of L/pp layers = L layers' worth.
    # s b h = 4096 x 8192 = 33,554,432 (b = 1); per layer with TP=8, no SP: s b h (10 + 3 + 5 x 64 x 4096 /
    # (8192 x 8)) = s b h x 33 = 1.10730 GB; 80 layers: 88.584 GB for pp = 1 and pp = 4
    layer = dict(n_layers=80, micro_batch_size=1, seq_len="4096 token", d_model=8192, n_heads=64, tp=8)
    for pp in (1, 4):
        r = solve(lib, "activation_memory", {}, **layer, pp=pp)
        assert r.base_value == pytest.approx(80 * 33554432 * 33, rel=1e-12)


def test_embeddings_are_counted_when_the_vocabulary_is_known(lib):
    # layers only (seed 001): 80 x 12 x 8192^2 / 8 x 2 B = 16.1061 GB; with V = 32000 the even split of
    # n_params = 64,424,509,440 + 2 x 32000 x 8192 = 64,948,797,440 gives 16.2372 GB
    given = dict(d_model=8192, n_layers=80, tp=8, bytes_per_param="2 byte")
    layers = solve(lib, "weight_memory", {}, **given)
    assert layers.base_value == pytest.approx(80 * 12 * 8192 ** 2 / 8 * 2, rel=1e-12)
    assert layers.defaults_used["params_per_gpu"]["rule"] == "params_per_gpu_layers_only"
    r = solve(lib, "weight_memory", {}, **given, vocab_size=32000)
    assert r.base_value == pytest.approx((80 * 12 * 8192 ** 2 + 2 * 32000 * 8192) / 8 * 2, rel=1e-12)
    assert "params_per_gpu" not in r.defaults_used
    # a first pipeline stage: its layers plus the input embedding V d / tp
    first = solve(lib, "weight_memory", {}, **given, embedding_params_per_gpu=32000 * 8192 / 8)
    assert first.base_value == pytest.approx((80 * 12 * 8192 ** 2 + 32000 * 8192) / 8 * 2, rel=1e-12)


def test_even_share_of_embeddings_per_gpu(lib):
    # n_params = 70e9 over tp = 8; layers 80 x 805,306,368 = 64.4245e9 -> (70e9 - 64.4245e9) / 8 = 0.69694e9
    r = solve(lib, "embedding_params_per_gpu", {}, n_params=70e9, n_layers=80, params_per_layer=805306368, tp=8)
    assert r.base_value == pytest.approx((70e9 - 80 * 805306368) / 8, rel=1e-12)


def test_mixed_precision_vs_fp32_without_gradients():
    # seed 001: 13e9 x (2 + 4 + 8) = 182 GB vs 13e9 x (4 + 8) = 156 GB, ratio 1.17
    mixed = symcalc.solve("model_state_memory_no_grads", n_params=13e9)
    fp32 = symcalc.solve("model_state_memory_no_grads", n_params=13e9, options={"precision": "fp32_adam"})
    assert mixed.base_value == pytest.approx(182e9) and fp32.base_value == pytest.approx(156e9)
    # backwards: 182 GB of weights and optimizer states at 14 bytes/param -> 13e9
    assert symcalc.solve("n_params", model_state_memory_no_grads="182 GB").base_value == pytest.approx(13e9)


def test_optimistic_model_states_seed003():
    # seed 003 comment: (2 + 2 + 8) Psi unsharded; FSDP: 12 n / group = 12 x 7e9 / 8 = 10.5 GB
    assert symcalc.solve("model_state_memory_optimistic", n_params=7e9).base_value == pytest.approx(84e9)
    r = symcalc.solve("model_state_memory_optimistic_per_gpu", n_params=7e9, dp=8)
    assert r.base_value == pytest.approx(10.5e9)
    # and backwards: 10.5 GB per GPU over 8 -> 7e9 parameters
    assert symcalc.solve("n_params", model_state_memory_optimistic_per_gpu="10.5 GB", dp=8).base_value == \
        pytest.approx(7e9)


def test_model_does_not_fit_is_out_of_bounds():
    # 70B unsharded: 1120 GB of model states + 10 GB activations on one 80 GB GPU
    with pytest.raises(OutOfBoundsError):
        symcalc.solve("memory_headroom", n_params=70e9, activation_memory="10 GB", gpu_memory="80 GB",
                      options=TEXTBOOK)


def test_seed_errors_are_kept_under_their_own_names():
    # seed 003's M_act without the seq factor: 167,772,160 x (34 + 5 x 40 / 5120) = 5.7108 GB (not 32.55)
    r = symcalc.solve("activation_memory_seed003", seq_len="4096 token", micro_batch_size=8, d_model=5120,
                      n_heads=40, n_layers=1)
    assert r.base_value == pytest.approx(167772160 * (34 + 200 / 5120), rel=1e-12)
    # seed 003's maximal activation b (s/N_sp)(h/N_tp) = 4096 x 8192 / 64 = 524,288; correct b s h / tp = 4,194,304
    given = dict(micro_batch_size=1, seq_len="4096 token", d_model=8192, tp=8)
    assert symcalc.solve("max_activation_elements_seed003", **given).base_value == 524288
    assert symcalc.solve("max_activation_elements", options={"sequence_parallel": "true"}, **given).base_value == 4194304


def test_fp8_activation_saving(lib):
    # seed 001: 2 x 4 x 4096 x 8192 x 80 x (2 - 1) B = 21.4748 GB saved (the seed's 172 GB is 8x too large)
    r = solve(lib, "activation_memory_saved", {"activation_model": "boundary_tensors"}, seq_len="4096 token",
              micro_batch_size=4, n_layers=80, d_model=8192, n_boundary_tensors=2,
              bytes_per_activation_baseline="2 byte", bytes_per_activation="1 byte")
    assert r.base_value == pytest.approx(2 * 4 * 4096 * 8192 * 80, rel=1e-12)


def test_3d_zero1_total_with_partitioned_activations():
    # seed 002 (gradient term corrected): 8.75 + 13.125 + 40/4 + 8.75 = 40.625 GB; solved backwards for the
    # activation memory before the TP split: (40.625 - 30.625) x 4 = 40 GB
    r = symcalc.solve("activation_memory_unsplit", n_params=70e9, n_gpus=64, pp=4, tp=4,
                      total_memory_per_gpu="40.625 GB", options={"zero_stage": "1", **TEXTBOOK})
    assert r.base_value == pytest.approx(40e9, rel=1e-12)


def test_context_parallelism_splits_activations_and_joins_the_zero_group():
    import symcalc
    # activations follow the local tokens: s / cp (the hidden terms halve at cp = 2; eager scores
    # are local queries x all keys, so they halve too)
    kw = dict(n_layers=80, d_model=8192, n_heads=64, seq_len="8192 token", micro_batch_size=1, tp=8, pp=4)
    one = symcalc.solve("activation_memory", **kw).value
    two = symcalc.solve("activation_memory", cp=2, **kw).value
    assert two == pytest.approx(one / 2, rel=1e-12)
    # ZeRO-1 shards the optimizer over dp x cp: 12 B x 70e9 / (tp 8 x pp 4) / (dp 16 x cp 2)
    r = symcalc.solve("optimizer_memory", n_params=70e9, tp=8, pp=4, dp=16, cp=2, options={"zero_stage": 1})
    assert r.value == pytest.approx(12 * 70e9 / 32 / 32 / 1e9, rel=1e-12)


def test_flash_attention_drops_the_score_term():
    import symcalc
    # Korthikanti per layer, s = 4096, b = 1, h = 8192, a = 64, no TP: 34 s b h + 5 a s^2 b bytes;
    # FlashAttention keeps the 34 s b h part and one fp32 log-sum-exp per head and token
    # (Dao et al. 2022, Algorithm 2): 4 a s b bytes
    kw = dict(d_model=8192, n_heads=64, seq_len="4096 token", micro_batch_size=1)
    eager = symcalc.solve("activation_memory_per_layer", **kw).to("byte").magnitude
    flash = symcalc.solve("activation_memory_per_layer", options={"attention_kernel": "flash"}, **kw)
    assert eager == pytest.approx(34 * 4096 * 8192 + 5 * 64 * 4096**2, rel=1e-12)
    assert flash.to("byte").magnitude == pytest.approx(34 * 4096 * 8192 + 4 * 64 * 4096, rel=1e-12)


def test_a_fit_question_without_the_headroom_is_told_to_give_it(lib):
    # "largest micro-batch that fits" is memory_headroom = 0: the diagnosis offers it first,
    # with what 0 GB asks, and following the advice gives Exercise 1's 9 (above)
    with pytest.raises(UnderdeterminedError) as e:
        solve(lib, "micro_batch_size", {**EX1_OPTIONS, "recompute": "selective"}, **EX1)
    assert e.value.missing[0] == ["memory_headroom"]
    assert "memory_headroom (0 GB for the largest value that fits in gpu_memory)" in e.value.message
    r = solve(lib, "micro_batch_size", {**EX1_OPTIONS, "recompute": "selective"}, **EX1, memory_headroom="0 GB")
    assert r.rounded_base == 9


def test_the_headroom_asked_is_not_read_as_its_own_margin():
    # Llama 3 70B on 8 H100s, ZeRO-0 (no sharding of 16 bytes a parameter): 1,326 GB a GPU, so the
    # headroom is 85.52 - 1,326 = -1,240 GB. Asked (bounds flagged), the fit line had read that
    # answer as the margin to keep ("of gpu_memory 85.52 GB - memory_headroom -1240 GB = 1326 GB,
    # 0 GB free": it fits); it is the whole capacity against the peak: it does not fit
    r = symcalc.solve("memory_headroom", {"n_gpus": 8, "dp": 8, "micro_batch_size": 1}, model="llama3-70b",
                      hardware="h100", on_bounds="flag")
    assert r.value == pytest.approx(85.52 - 1326, abs=1.5)
    [fit] = [f for f in r.findings if f.kind == "fit"]
    assert fit.values["fits"] is False
    assert "DOES NOT FIT: total_memory_per_gpu = 1326 GB exceeds gpu_memory = 85.52 GB by 1240 GB" in r.text()
