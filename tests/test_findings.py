"""Warnings and bound violations are records (symcalc.findings.Finding); sentences are the renderers'.

Each test asserts a record's kind, quantity and values, and that its rendered sentence is the
text the solver has always given. Expectations are hand computations written next to them.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

import symcalc
from symcalc.errors import ConflictError, NoSolutionError
from symcalc.findings import KINDS, Finding
from symcalc.query.sweep import sweep
from symcalc.render.findings import _SENTENCES, finding_dict, sentence

# Llama 2 7B on H100s (80 GB), dp = 8, ZeRO-1, full recomputation, flash attention.
# Model states: (2 + 2 + 12/8) = 5.5 bytes x 6,738,415,616 parameters = 37,061,285,888 bytes.
# Per sequence of the micro-batch (formulas/activations.toml, peak_memory.toml): each layer's
# input, 32 x 2 x 4096 x 4096 = 1,073,741,824 bytes; the layer being recomputed, 4096 x 2 x
# (4 x 4096 norms + 4 x 4096 Q, K, V, output + 3 x 11008 SwiGLU) + 4 x 32 x 4096 flash statistics
# = 539,492,352 bytes; the logits and cross-entropy, 4096 x 32000 x 12 = 1,572,864,000 bytes:
# 3,186,098,176 bytes. The total asked for is the tensors' peak (memory_figure = allocated: no
# fitted allocator reserve in these expectations).
# micro_batch_size = 64: 37,061,285,888 + 64 x 3,186,098,176 = 240.97 GB, 160.97 GB over 80 GB; the
# largest part is the logits, loss_memory_excess = 64 x 1,572,864,000 = 100.66 GB.
MEMORY_JOB = dict(model="llama2-7b", hardware="h100", dp=8,
                  options={"zero_stage": "1", "recompute": "full", "attention_kernel": "flash",
                           "memory_figure": "allocated", "stack": "textbook"})   # the formulas' own count
STATES, PER_SEQUENCE = 6_738_415_616 * 5.5, 32 * 2 * 4096 * 4096 + 4096 * 2 * (8 * 4096 + 3 * 11008) + 4 * 32 * 4096 \
    + 4096 * 32000 * 12
H100_MEMORY = 81559 * 2**20 / 1e9      # GB: nvidia-smi's 81559 MiB (formulas/presets/hardware.toml)
MFU_QUESTION = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")


def test_every_kind_has_a_sentence():
    assert set(_SENTENCES) == set(KINDS)
    with pytest.raises(ValueError):
        Finding("exceeds")                 # kinds are declared, not made up on the way


def test_an_answer_over_the_gpu_memory_is_an_over_capacity_record():
    r = symcalc.solve("total_memory_per_gpu", micro_batch_size=64, **MEMORY_JOB)
    total = STATES + 64 * PER_SEQUENCE
    assert PER_SEQUENCE == 3_186_098_176
    assert r.base_value == pytest.approx(total, rel=1e-12)
    # beside the record: which pipeline stage the figure is that of (the only one, pp = 1)
    [stage, f] = r.findings
    assert (stage.kind, stage.quantity, stage.values["value"]) == ("reported", "busiest_pipeline_stage", 1)
    assert (f.kind, f.quantity, f.related, f.mask) == ("over_capacity", "total_memory_per_gpu", ("gpu_memory",), None)
    v = f.values
    assert v["unit"] == "GB" and v["capacity"] == pytest.approx(H100_MEMORY)
    assert v["value"] == pytest.approx(total / 1e9, rel=1e-12)
    assert v["excess"] == pytest.approx(total / 1e9 - H100_MEMORY, rel=1e-12)
    assert v["points"] is None and v["of"] is None
    assert v["largest"][0] == "loss_memory_excess" and v["largest"][1] == pytest.approx(64 * 1_572_864_000 / 1e9)
    assert sentence(f) == ("total_memory_per_gpu = 241 GB exceeds gpu_memory = 85.52 GB by 155.5 GB: it does not "
                           "fit; the largest part is loss_memory_excess = 100.7 GB")
    assert r.warnings == [sentence(f)] and r.violations == []


def test_over_capacity_on_an_array_carries_where_it_holds():
    # 37.06 + 3.186 b GB: b = 4 -> 49.81 GB fits; 16 -> 88.04 and 64 -> 241 do not
    r = symcalc.solve("total_memory_per_gpu", micro_batch_size=np.array([4, 16, 64]), **MEMORY_JOB)
    [f] = r.findings
    assert f.kind == "over_capacity" and f.mask.tolist() == [False, True, True]
    assert (f.values["points"], f.values["of"], f.values["largest"]) == (2, 3, None)
    assert sentence(f) == ("total_memory_per_gpu = 241 GB exceeds gpu_memory = 85.52 GB at 2 of 3 points by "
                           "155.5 GB: it does not fit")


def test_a_value_nothing_needs_is_a_not_used_record():
    r = symcalc.solve("mfu", mtbf="24h", **MFU_QUESTION)
    [f] = r.findings
    # and it says where mtbf would count: the checkpoint interval and the time lost to failures
    # (formulas/checkpointing.toml), which this question does not ask for
    users = {"mtbf": {"quantities": ["checkpoint_interval", "checkpoint_interval_daly", "checkpoint_waste_fraction"]}}
    assert (f.kind, f.quantity, f.related, f.values) == ("not_used", None, ("mtbf",), {"used_by": users})
    assert sentence(f) == ("not used by this derivation: mtbf (no formula on the route needs it; mtbf gives "
                           "checkpoint_interval, checkpoint_interval_daly, checkpoint_waste_fraction, not asked for "
                           "here; check the options if it should matter)")


def test_a_given_value_left_out_for_a_default_is_said_not_dropped():
    # d_ffn from an activation memory: the route through the activation laws does not close, so
    # d_ffn comes from its default rule, 8/3 x 4096 = 10,922.7. The given 12.08 GB (which d_ffn =
    # 14336 gives) disagrees with that default by more than the 2 % tolerance, but only through
    # other defaults the answer does not use (bytes per activation, ...), so it is no conflict:
    # it used to vanish without a word; now the answer says it is not used and what it disagrees with
    r = symcalc.solve("d_ffn", activation_memory="12.07959552 GB", d_model=4096, micro_batch_size=1, n_heads=32,
                      n_kv_heads=8, n_layers=32, n_microbatches=4, pp=1, seq_len="8192 token", tp=8,
                      options={"activation_model": "architecture", "attention": "gqa", "attention_kernel": "eager",
                               "ffn": "swiglu", "recompute": "selective", "selective_recompute": "attention_core"})
    assert r.value == 10923
    [f] = [f for f in r.findings if f.kind == "unused_disagrees"]
    assert f.quantity == "activation_memory" and "activation_memory" in f.related
    assert f.values["given"] == pytest.approx(12.07959552) and f.values["rel_error"] > 0.02
    # only the given value the answer feeds is said to disagree (n_heads, seq_len, ... feed no d_ffn)
    assert sentence(f).startswith("the given activation_memory is not used")


def test_a_conflict_is_a_record_with_both_values():
    # 150,000 token/s x 30 days x 86,400 s = 3.888e11 tokens, not the 1e12 given: 1 - 0.3888 = 61.12 % off
    r = symcalc.solve("mfu", train_time="30 day", n_tokens="1e12 token", conflicts="warn", **MFU_QUESTION)
    tokens, days = r.findings
    assert (tokens.kind, tokens.quantity, days.kind, days.quantity) == ("conflict", "n_tokens", "conflict", "train_time")
    v = tokens.values
    assert v["unit"] == "token" and v["given"] == 1e12 and v["computed"] == pytest.approx(3.888e11)
    assert v["rel_error"] == pytest.approx(0.6112) and v["rtol"] == 0.02
    assert v["from"] == ["tokens_per_second", "train_time"] and v["leaning"] == []
    assert sentence(tokens) == ("conflict: n_tokens = 1e12 token is given, but tokens_per_second, train_time give "
                                "3.888e11 token (61.1 % off, beyond 2 %); the answer does not use the given n_tokens")
    # 1e12 / 150,000 token/s = 6.667e6 s = 77.16 days, not 30
    assert days.values["computed"] == pytest.approx(1e12 / 150e3 / 86400)
    assert sentence(days) == ("conflict: train_time = 30 day is given, but n_tokens, tokens_per_second give "
                              "77.16 day (61.1 % off, beyond 2 %); the answer does not use the given train_time")
    # the conflict dicts stay as they were: no sentence, no record inside
    assert all("finding" not in c and "warning" not in c for c in r.conflicts)
    with pytest.raises(ConflictError) as e:
        symcalc.solve("mfu", train_time="30 day", n_tokens="1e12 token", **MFU_QUESTION)
    assert e.value.message.startswith(sentence(tokens) + "; ")


def test_a_value_outside_its_bounds_is_a_violation_record():
    # 6 x 7e9 x 150,000 / (2 x 1979e12) = 1.592: MFU 159.2 %, outside (0 %, 100 %]
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=2,
                      peak_flops="1979 TFLOP/s", on_bounds="flag")
    [f] = r.findings
    assert f.violation and (f.kind, f.quantity, f.formulas) == ("out_of_bounds", "mfu", ("mfu_definition",))
    assert f.values["value"] == pytest.approx(100 * 6 * 7e9 * 150e3 / (2 * 1979e12))
    assert f.values["bounds"] == {"lo": 0, "hi": 100, "lo_open": True, "hi_open": False, "percent": True}
    assert r.warnings == [] and r.violations == [sentence(f)] == [
        "mfu = 159.2 % is outside its bounds (0 %, 100 %]: the values of flops_per_param_per_token, n_gpus, "
        "n_params, peak_flops, tokens_per_second are inconsistent, or outside the range of mfu_definition"]


def test_an_implausible_value_records_the_likely_slip():
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 PFLOP/s")
    [f] = r.findings
    assert (f.kind, f.quantity) == ("implausible", "peak_flops")
    assert f.values == {"value": pytest.approx(1.979e6), "unit": "TFLOP/s", "side": "above",
                        "limit": pytest.approx(4e4), "slips": [(None, pytest.approx(1979.0))]}
    assert sentence(f) == ("peak_flops = 1979000 TFLOP/s is far above 40000 TFLOP/s, the range of real hardware "
                           "and models: did you mean 1979 TFLOP/s (a unit prefix off by 1000)?")


def test_json_carries_the_sentences_and_the_records():
    d = json.loads(symcalc.solve("total_memory_per_gpu", micro_batch_size=np.array([4, 16, 64]), **MEMORY_JOB).json())
    [f] = d["findings"]
    assert f["kind"] == "over_capacity" and f["quantity"] == "total_memory_per_gpu"
    assert f["related"] == ["gpu_memory"] and f["mask"] == [False, True, True]
    assert f["values"]["points"] == 2 and f["values"]["capacity"] == pytest.approx(H100_MEMORY)
    assert d["warnings"] == [sentence(Finding(f["kind"], f["quantity"], f["values"], tuple(f["related"])))]
    inf = finding_dict(Finding("out_of_bounds", "x", {"value": float("nan"), "bounds": {"hi": float("inf")}}))
    assert inf["values"] == {"value": None, "bounds": {"hi": None}}     # plain JSON: no NaN, no Infinity


def test_a_sweep_drops_the_over_capacity_warning_by_its_kind():
    # 37.06 + 3.186 b <= 85.52 GB  <=>  b <= 15.21: 49 of b = 1..64 do not fit, and the worst,
    # b = 64, is the 240.97 GB above. The capacity (mask and reason) says so; the warning would repeat it.
    # (the sweep takes its first point's derivation over the grid: that point fits, and the
    # grid's capacity mask is the sweep's own, not a finding of an array solve)
    s = sweep("total_memory_per_gpu", vary={"micro_batch_size": "1:64"}, **MEMORY_JOB)
    over = np.arange(1, 65) > 15
    assert s.values[-1] == pytest.approx(240.97, abs=0.01) and int(over.sum()) == 49
    assert s.capacity == ("gpu_memory", pytest.approx(H100_MEMORY)) and s.feasible.tolist() == (~over).tolist()
    assert not any(f.kind == "over_capacity" for f in s.findings) and s.warnings == []
    assert s.reasons == ["total_memory_per_gpu exceeds gpu_memory = 85.52 GB at 49 points"]
    assert s.as_dict()["findings"] == []


@pytest.mark.parametrize("target,given,shown", [
    # 1e308 s is finite, 1e311 ms is not
    ("tp_comm_time_per_step", {"allreduce_time": "1e308 s", "tp_allreduces_per_step": 1}, "ms"),
    # 1e9 USD/hour over 1e-300 byte/s = 2.8e305 USD/s per byte/s, times 1e12 x 3600 in USD/(TB/s)/hour
    ("cost_per_memory_bandwidth", {"gpu_hour_price": "1e9 USD/hour", "hbm_bandwidth": "1e-300 byte/s"},
     "USD/(TB/s)/hour"),
])
def test_an_answer_that_overflows_its_display_unit_is_an_error_naming_it(target, given, shown):
    with pytest.raises(NoSolutionError, match=f"{target} overflows in {re.escape(shown)}"):
        symcalc.solve(target, given)


def test_a_solved_context_above_the_models_limit_is_warned_as_a_given_one_is():
    """Issue 34: a context solved from a memory budget carried no warning. Llama 3 8B caches
    2 (K and V) x 32 layers x 8 KV heads x 128 x 2 bytes = 131,072 bytes a token, so 64 GiB of KV
    cache for one sequence is 2^36 / 2^17 = 524,288 tokens: 64 times its max_position_embeddings
    (8,192, the preset's config.json figure), warned as a given 524,288 would be; 0.5 GiB is
    4,096 tokens, within it, and says nothing. An array warns where it is above (2 of 3 points)."""
    r = symcalc.solve("seq_len", model="llama3-8b", batch_size=1, kv_cache_memory="64 GiB")
    assert r.value == 524288
    [f] = [f for f in r.findings if f.kind == "above_limit"]
    assert f.quantity == "seq_len" and f.values["solved"] is True
    assert f.values["value"] == 524288 and f.values["limit_value"] == 8192
    assert sentence(f).startswith("seq_len = 524288 token, as solved, is above max_position_embeddings = 8192 token")
    given = symcalc.solve("kv_cache_memory", model="llama3-8b", batch_size=1, seq_len="524288 token")
    [g] = [f for f in given.findings if f.kind == "above_limit"]
    assert g.values["value"] == f.values["value"] and not g.values.get("solved")
    within = symcalc.solve("seq_len", model="llama3-8b", batch_size=1, kv_cache_memory="0.5 GiB")
    assert within.value == 4096 and not [f for f in within.findings if f.kind == "above_limit"]
    arr = symcalc.solve("seq_len", model="llama3-8b", batch_size=1, kv_cache_memory=(np.array([0.5, 64, 128]), "GiB"))
    [a] = [f for f in arr.findings if f.kind == "above_limit"]
    assert a.values["points"] == 2 and a.values["of"] == 3 and a.mask.tolist() == [False, True, True]
    assert a.values["value"] == 2 * 524288
