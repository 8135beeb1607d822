"""Feasibility per workload (issue 35, item 4): every answer states whether the memory of its
workload fits, at its own values; a serving answer's workload is serving (serving_memory_per_gpu
against gpu_memory, memory_headroom its margin), sweeps mark the points that do not fit, and
check tests only that fit. Every figure is a hand computation from Llama 3 70B's config.json
(80 layers, d_model 8192, 64 heads, 8 KV heads of 128, d_ffn 28672; 70,553,706,496 parameters)
on an H100 (nvidia-smi's 81559 MiB = 85.52 GB)."""

import pytest

import symcalc
from symcalc.errors import BadOptionValueError

N = 70_553_706_496
KV_TOKEN = 2 * 80 * 8 * 128 * 2             # 327,680 bytes a token in bf16 (320 KiB)
CONTEXT = 8192                              # the preset's seq_len
GPU = 81559 * 2**20          # bytes (formulas/presets/hardware.toml)


def workspace(tp: int) -> float:
    """A prefill chunk of 8192 tokens: the hidden state and the gated FFN's two inner tensors of d_ffn / tp, bf16."""
    return 8192 * (8192 + 2 * 28672 / tp) * 2


EMBEDDINGS = 2 * 128256 * 8192             # the input embedding and the untied LM head


def serving_memory(batch: int, tp: int, weight_bytes: float = 2) -> float:
    """Weights over tp (the layers at weight_bytes, the embeddings and LM head at 2 bytes) + the GPU's
    share of the KV cache (8 KV heads split over tp <= 8) + the workspace."""
    weights = weight_bytes * (N - EMBEDDINGS) + 2 * EMBEDDINGS
    return weights / tp + batch * CONTEXT * KV_TOKEN / tp + workspace(tp)


def fit_of(r):
    [f] = [f for f in r.findings if f.kind == "fit"]
    return f


def test_a_decode_rate_on_one_gpu_says_it_does_not_fit():
    # the question: batch 512 at tp = 1 (the default). Weights 141.1 GB + KV 512 x 8192 x
    # 320 KiB = 1374.4 GB + workspace 8192 x 65536 x 2 = 1.07 GB: 1516.6 GB of 85.52
    r = symcalc.solve("decode_tokens_per_second", model="llama3-70b", hardware="h100", batch_size=512)
    f = fit_of(r)
    assert f.quantity == "serving_memory_per_gpu" and f.values["workload"] == "serving"
    assert not f.values["fits"]
    assert f.values["value"] == pytest.approx(serving_memory(512, 1) / 1e9, rel=1e-9)     # GB
    assert f.values["value"] == pytest.approx(1516.57, rel=1e-4)
    assert f.values["excess"] == pytest.approx(serving_memory(512, 1) / 1e9 - GPU / 1e9, rel=1e-9)
    assert f.values["largest"][0] == "kv_cache_memory_per_gpu"
    assert f.values["defaults"]["tp"] == "1"              # the layout the answer used, said
    assert r.fit and r.fit[0].startswith("DOES NOT FIT: serving_memory_per_gpu = 1517 GB exceeds gpu_memory = 85.52 GB")
    assert not any("serving_memory_per_gpu" in w for w in r.warnings)      # said once, as the fit


def test_the_fit_is_at_the_answers_layout_and_fits_at_tp8():
    # tp 8, batch 32: 17.64 + 32 x 8192 x 320 KiB / 8 = 10.74 + 0.25 = 28.63 GB, 56.89 GB free
    for target in ("decode_step_time", "decode_tokens_per_second", "cost_per_output_token", "prefill_time"):
        r = symcalc.solve(target, model="llama3-70b", hardware="h100", tp=8, batch_size=32, gpu_hour_price="2 USD/hour")
        f = fit_of(r)
        assert f.values["fits"], target
        assert f.values["value"] == pytest.approx(serving_memory(32, 8) / 1e9, rel=1e-9), target
        assert f.values["free"] == pytest.approx(GPU / 1e9 - serving_memory(32, 8) / 1e9, rel=1e-9), target


def test_a_serving_answer_says_the_served_weights_not_the_training_recipe(cli):
    run = cli("solve", "decode_tokens_per_second", "--model", "llama3-70b", "--hardware", "h100", "batch_size=512")
    assert run.code == 0
    lines = run.out.splitlines()
    # 139.0 GB of weights read (141.1 GB less the input embedding's 128,256 x 8,192 table, of
    # which a step looks up rows) at 1.905 TB/s (73.0 ms) + 1374.4 GB of KV cache at 2.97 TB/s
    # (462.8 ms) + 512 x 2 x 70.55e9 FLOPs and the attention's at the GEMM rate (109.1 ms) + 512
    # tokens' activation traffic (2 x 80 x (10 x 8192 + 3 x 28672 + 2 x 9216) + 327,680 bytes
    # each, 15.4 GB at 2.97 TB/s: 5.2 ms): 650.0 ms a step
    assert lines[0] == "decode_tokens_per_second = 787.6 token/s"
    assert "Adam" not in "\n".join(lines[:4]) and lines[1].startswith("  assuming weight_dtype = bf16")
    assert any(line.startswith("  DOES NOT FIT: serving_memory_per_gpu = 1517 GB") for line in lines[:5])
    d = cli("solve", "decode_tokens_per_second", "--model", "llama3-70b", "--hardware", "h100", "batch_size=512",
            "--json").json()
    assert [a["name"] for a in d["assumptions"]] == ["weight_dtype"]
    [f] = d["fit"]
    assert (f["quantity"], f["values"]["fits"], f["related"][0]) == ("serving_memory_per_gpu", False, "gpu_memory")
    assert f["values"]["value"] == pytest.approx(serving_memory(512, 1) / 1e9, rel=1e-9)


def test_fp8_weights_halve_the_weights_and_need_fp8_hardware():
    # the layers' 68.45e9 weights at 1 byte and the two 128,256 x 8,192 embeddings (2.10e9) kept in
    # bf16, as vLLM's FP8 W8A8 keeps lm_head: 72.65 GB / 8 = 9.08 GB of weights instead of 17.64
    r = symcalc.solve("serving_memory_per_gpu", model="llama3-70b", hardware="h100", tp=8, batch_size=32,
                      options={"weight_dtype": "fp8"})
    assert r.base_value == pytest.approx(serving_memory(32, 8, weight_bytes=1), rel=1e-9)
    assert r.values["serving_weight_memory"] == pytest.approx((N + EMBEDDINGS) / 8, rel=1e-9)
    with pytest.raises(BadOptionValueError, match="weight_dtype=fp8 needs FP8"):
        symcalc.solve("serving_memory_per_gpu", model="llama3-70b", hardware="a100", tp=8, batch_size=32,
                      options={"weight_dtype": "fp8"})


def test_a_4_bit_checkpoint_fits_a_70b_model_on_one_80_gb_gpu():
    # AWQ's groups of 128: 4 bits, an fp16 scale and a 4-bit zero point a group, 0.5195 byte a
    # weight; the embeddings and LM head stay 16-bit: 0.5195 x 68.45e9 + 2 x 2.10e9 = 39.77 GB, and
    # no FP8 hardware is needed (an A100)
    r = symcalc.solve("serving_weight_memory", model="llama3-70b", hardware="a100", tp=1,
                      options={"weight_dtype": "int4"})
    assert r.base_value == pytest.approx((0.5 + 2.5 / 128) * (N - EMBEDDINGS) + 2 * EMBEDDINGS, rel=1e-9)
    # without the model's vocabulary, every weight at the quantized size, and said
    bare = symcalc.solve("serving_weight_memory", n_params=7e9, options={"weight_dtype": "int4"})
    assert bare.base_value == pytest.approx(7e9 * 0.51953125, rel=1e-9)
    assert "served_bytes_all_quantized" in {d.get("rule") for d in bare.defaults_used.values()}


@pytest.mark.parametrize("headroom,expected", [("0GB", 201), ("5GB", 186)])
def test_the_largest_batch_that_fits_is_asked_with_memory_headroom(headroom, expected):
    # (85.52 GB - headroom - 17.638 GB weights - 0.2517 GB workspace) / (8192 x 320 KiB / 8 = 335.5 MB a
    # sequence): 201.55 with no headroom, 186.6 with 5 GB
    per_seq = CONTEXT * KV_TOKEN / 8
    margin = float(headroom[:-2]) * 1e9
    exact = (GPU - margin - 2 * N / 8 - workspace(8)) / per_seq
    assert int(exact) == expected
    r = symcalc.solve("batch_size", model="llama3-70b", hardware="h100", tp=8, memory_headroom=headroom)
    assert r.value == expected and r.exact == pytest.approx(exact, rel=1e-9)
    assert [a["value"] for a in r.assumptions if a["name"] == "workload"] == ["serving"]     # said first
    f = fit_of(r)
    assert f.values["fits"] and f.values["limit"] == pytest.approx((GPU - margin) / 1e9)
    assert f.values["value"] == pytest.approx(serving_memory(expected, 8) / 1e9, rel=1e-9)
    named = symcalc.solve("batch_size", model="llama3-70b", hardware="h100", tp=8, memory_headroom=headroom,
                          options={"workload": "serving"})
    assert named.value == expected


def test_a_sweep_marks_the_batches_that_do_not_fit(cli):
    # tp 8: weights 141.1 GB / 8 = 17.64 GB; the KV cache splits over kv_cache_shards = tp /
    # kv_head_replication = 8 / max(1, 8 / 8) = 8 GPUs (one of the 8 KV heads each), so a sequence
    # of 8192 tokens takes 8192 x 320 KiB / 8 = 0.3355 GB a GPU; workspace 0.25 GB.
    # 17.64 + 0.25 + b x 0.3355 GB: 18.23 GB at 1, 39.36 at 64, 189.7 at 512; the boundary is
    # (85.52 - 17.89) / 0.3355 = 201.6 sequences, so 512 does not fit and 64 does
    assert [serving_memory(b, 8) / 1e9 for b in (1, 64, 512)] == pytest.approx([18.225, 39.364, 189.70], rel=1e-4)
    s = symcalc.sweep("decode_tokens_per_second", model="llama3-70b", hardware="h100", tp=8,
                      vary={"batch_size": "1,64,512"})
    assert s.feasible.tolist() == [True, True, False]
    [why] = s.infeasible
    assert (why.quantity, why.values["why"], why.values["points"]) == ("serving_memory_per_gpu", "over_capacity", 1)
    assert s.reasons == ["serving_memory_per_gpu exceeds gpu_memory = 85.52 GB at 1 point"]
    assert not [f for f in s.findings if f.kind == "fit"]
    d = cli("sweep", "decode_tokens_per_second", "--model", "llama3-70b", "--hardware", "h100", "tp=8",
            "--vary", "batch_size=1,64,512", "--json").json()
    assert d["feasible"] == [True, True, False] and d["n_feasible"] == 2


def test_a_sweep_over_tp_names_the_first_value_that_breaks_not_what_follows_from_it():
    # Llama 3 70B: 141.1 GB of bf16 weights do not fit one 85.52 GB H100, so at tp = 1 the KV
    # cache left is negative and everything derived from it (the batch, the step times) is out of
    # bounds too: the point is told once, by the KV cache; tp = 2, 4, 8 fit
    s = symcalc.sweep("n_gpus", {"memory_headroom": "0 GB", "cluster_requests_per_second": "20 req/s",
                                 "prompt_len": "1000 token", "output_len": "300 token"},
                      model="llama3-70b", hardware="h100", options={"workload": "serving"},
                      vary={"tp": "1,2,4,8"})
    assert s.feasible.tolist() == [False, True, True, True]
    assert s.reasons == ["kv_cache_memory_per_gpu leaves its bounds [0, inf) at 1 point"]


def test_an_array_answer_carries_the_fit_with_its_mask():
    r = symcalc.solve("decode_step_time", model="llama3-70b", hardware="h100", tp=8, batch_size=[1, 64, 512])
    f = fit_of(r)
    assert f.mask.tolist() == [False, False, True] and (f.values["points"], f.values["of"]) == (1, 3)
    assert f.values["value"] == pytest.approx(serving_memory(512, 8) / 1e9, rel=1e-9)       # the largest


def test_check_tests_a_serving_setup_against_serving_memory_only(cli):
    # the setup: 28.63 GB of 80 fits; before, optimizer_memory (12 x 70.55e9 / 8 = 105.8 GB) failed it
    run = cli("check", "--model", "llama3-70b", "--hardware", "h100", "tp=8", "batch_size=32",
              "serving_memory_per_gpu=28.6GB", "--json")
    assert run.code == 0
    d = run.json()
    assert [(f["quantity"], f["workload"]) for f in d["fits"]] == [("serving_memory_per_gpu", "serving")]
    assert d["fits"][0]["fits"] and d["fits"][0]["value"] == pytest.approx(serving_memory(32, 8) / 1e9, rel=1e-9)


def test_check_counts_the_models_shapes_as_evidence_for_a_kv_claim(cli):
    # 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 327,680 bytes = 320 KiB a token: a claim of 300 is 6.25 % off
    bad = cli("check", "--model", "llama3-70b", "kv_cache_per_token=300KiB/token", "--brief")
    assert bad.code == 1
    assert "kv_cache_per_token = 300 KiB/token claimed, 320 KiB/token from the presets' d_model, n_heads, " \
           "n_kv_heads, n_layers: DISAGREES (6.25 % off)" in bad.out
    good = cli("check", "--model", "llama3-70b", "kv_cache_per_token=320KiB/token", "--json")
    assert good.code == 0
    [rel] = good.json()["relations"]
    assert rel["computed"] == pytest.approx(KV_TOKEN / 1024) and rel["presets"] == ["d_model", "n_heads", "n_kv_heads",
                                                                                    "n_layers"]
    alone = cli("check", "kv_cache_per_token=320KiB/token")
    assert alone.code == 2 and "at least two values" in alone.err


def test_a_training_answer_carries_the_training_peak_at_its_layout():
    # the same layout asked for its peak directly is the fit's figure: one question, one answer
    given = dict(model="llama3-8b", hardware="h100", n_gpus=8, global_batch_size=64, micro_batch_size=1,
                 seq_len="8192 token")
    r = symcalc.solve("step_time", **given)
    f = fit_of(r)
    assert (f.quantity, f.values["workload"]) == ("total_memory_per_gpu", "training")
    peak = symcalc.solve("total_memory_per_gpu", options=r.all_options, **given)
    assert f.values["value"] == pytest.approx(peak.value, rel=1e-9)
    assert f.values["fits"] == (peak.base_value <= 80e9)


def test_a_question_that_reaches_no_workload_has_no_fit():
    r = symcalc.solve("kv_cache_per_token", model="llama3-70b", hardware="h100")
    assert not [f for f in r.findings if f.kind == "fit"]       # the answer is per token: no batch, no verdict
    r = symcalc.solve("n_params", n_layers=32, d_model=4096, vocab_size=32000)
    assert r.fit == []


def test_the_largest_serving_batch_without_a_margin_is_told_to_give_the_margin(cli):
    # issue 38: "a refusal suggests micro_batch_size (or decode_compute_time) for serving
    # headroom". A serving batch is written in serving memory's terms only, so the refusal is
    # diagnosed under workload = serving and names that workload's margin first, never a training
    # quantity (a micro-batch) or an intermediate; following it gives the
    # README's 201 sequences (85.52 GB - 17.64 GB of weights a GPU, over 8192 x 40 KiB of KV
    # cache a sequence a GPU, less the workspace)
    run = cli("solve", "batch_size", "--model", "llama3-70b", "--hardware", "h100", "tp=8", "seq_len=8192 token")
    assert run.code == 2
    # (a latency target settles a batch too: the largest that meets it)
    asked = run.err.strip().split("also give ", 1)[1].removeprefix("one of: ").split(" | ")
    assert asked[0] == "memory_headroom (0 GB for the largest value that fits in gpu_memory)"
    assert not any("micro_batch_size" in a or "decode_compute_time" in a for a in asked)
    run = cli("solve", "batch_size", "--model", "llama3-70b", "--hardware", "h100", "tp=8", "seq_len=8192 token",
              "memory_headroom=0GB", "--brief")
    assert run.code == 0 and run.out.startswith("batch_size = 201 ")


def test_a_serving_question_is_told_what_serving_lacks(cli):
    # issue 38: replicas (or GPUs) for a batch on tp = 8 need the deployment's load; they had been
    # told micro_batch_size, which reaches the answer only through training's formulas (a
    # gradient AllReduce's message), and memory_headroom. A micro-batch is training memory's own
    # quantity, so a serving question does not ask for it
    for target in ("replicas", "n_gpus"):
        run = cli("solve", target, "--model", "llama3-70b", "--hardware", "h100", "tp=8", "batch_size=64")
        assert run.code == 2
        assert run.err.strip().endswith("also give cluster_decode_tokens_per_second"), run.err
