"""Planning: the right formulas in the right order, defaults only when needed, clear diagnoses."""

import json

import numpy as np
import pytest

import symcalc
from symcalc.errors import UnderdeterminedError
from symcalc.engine.routing import DiagnosisHints, find_route


def plan(target, given, options=None):
    lib = symcalc.default_library()
    opts = lib.option_values(options)
    defaults = {k for k in lib.coefficient_defaults(opts) if k not in given}
    return find_route(lib.active_formulas(opts), target, set(given), defaults, {"link_latency"},
                      hints=DiagnosisHints())


def test_mfu_from_throughput_is_three_steps_with_the_6_flop_default():
    p = plan("mfu", {"tokens_per_second", "n_params", "n_gpus", "peak_flops"})
    # a dense model uses every parameter; model FLOPs per token; achieved FLOP/s; MFU
    assert [s.formulas for s in p.steps] == [("all_params_active",), ("flops_per_token_train",),
                                             ("achieved_flops_from_throughput",), ("mfu_definition",)]
    assert p.defaults == ("flops_per_param_per_token",)


def test_defaults_are_used_only_when_needed():
    p = plan("mfu", {"flops_per_token", "tokens_per_second", "n_gpus", "peak_flops"})
    assert p.defaults == ()
    p = plan("mfu", {"flops_per_param_per_token", "n_params", "tokens_per_second", "n_gpus", "peak_flops"})
    assert p.defaults == ()


def test_dp_comes_from_n_gpus_only_through_the_parallel_degree_defaults():
    p = plan("model_state_memory", {"n_params", "n_gpus"}, {"zero_stage": "1"})
    assert {"tp", "pp", "cp"} <= set(p.defaults)
    p = plan("model_state_memory", {"n_params", "n_gpus", "dp"}, {"zero_stage": "1"})
    # ZeRO shards over dp x cp (cp = 1 by default); n_gpus is not needed once dp is given
    assert "cp" in p.defaults and p.unused == ("n_gpus",)


def test_hidden_size_from_parameter_count_is_one_simultaneous_block():
    p = plan("d_model", {"n_params", "n_layers", "vocab_size"})
    assert len(p.steps) == 1 and p.steps[0].is_block
    assert set(p.steps[0].solves_for) == {"d_model", "d_ffn", "params_per_layer",
                                          "attention_params_per_layer", "ffn_params_per_layer"}
    assert p.default_rules == ("d_ffn_from_expansion",)


def test_a_default_rule_is_never_run_backwards():
    # d_ffn = ffn_expansion * d_model holds only when d_ffn is not given; with d_ffn given,
    # d_model must come from the parameter count, not from d_ffn / (8/3).
    p = plan("d_model", {"n_params", "n_layers", "vocab_size", "n_heads", "n_kv_heads", "d_ffn"},
             {"ffn": "swiglu", "attention": "gqa"})
    assert all("d_ffn_from_expansion" not in s.formulas for s in p.steps)
    r = symcalc.solve("d_model", n_params=8.03e9, n_layers=32, vocab_size=128256, n_heads=32, n_kv_heads=8,
                      d_ffn=14336, options={"ffn": "swiglu", "attention": "gqa"})
    assert r.value == 4096        # Llama 3 8B (config.json: hidden_size 4096)


def test_underdetermined_query_names_what_would_settle_it():
    with pytest.raises(UnderdeterminedError) as e:
        plan("n_gpus", {"n_params", "n_tokens", "train_time", "mfu"})
    assert ["peak_flops"] in e.value.missing
    # never a route that divides by the 0 s latency default
    assert ["allreduce_latency_time"] not in e.value.missing
    assert "peak_flops" in e.value.message


QUESTIONS_SHORT_OF_VALUES = [
    ("mfu", dict(n_params=7e9, n_gpus=64)),
    ("mfu", dict(n_params=7e9, n_gpus=64, peak_flops="989 TFLOP/s")),
    ("n_gpus", dict(n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu=0.45)),
    ("train_time", dict(n_params=7e9, n_gpus=64, peak_flops="989 TFLOP/s")),
    ("checkpoint_interval", dict(mtbf="24 h")),
]


@pytest.mark.parametrize("target,given", QUESTIONS_SHORT_OF_VALUES)
def test_every_suggested_set_really_settles_the_target(target, given):
    lib = symcalc.default_library()
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve(target, **given)
    assert e.value.missing
    for extra in e.value.missing:
        values = {**given, **{q: (1.0, lib.quantities[q].unit) for q in extra}}
        r = symcalc.solve(target, values, on_bounds="flag")
        assert np.isfinite(r.base_value), (extra, r)


def test_a_dependent_block_is_not_suggested():
    # n_params, n_gpus and peak_flops leave the throughput open: total FLOPs C = 6ND, the rate
    # F = 6NR, T = D/R and C = FT have one fact too few for R whatever the peak. The structure
    # alone would suggest peak_flops; it is not offered. What a person has at hand is offered
    # (the peak and the measured throughput), not an intermediate such as hfu.
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("mfu", n_params=7e9, n_gpus=64)
    assert ["peak_flops"] not in e.value.missing and ["hfu"] not in e.value.missing
    assert ["peak_flops", "tokens_per_second"] in e.value.missing


def test_two_givens_that_fix_the_same_product_do_not_settle_its_factors():
    # GPU energy E = n P_w T and the compute C = 6 N D = mfu P n T both fix n T (the GPU-hours):
    # together they cannot give n. Substitution leaves R (6 N - mfu P E / (P_w D)) = 0, a power of
    # an unknown times a constant, which is recognised as a dependent equation, so the question is
    # underdetermined (not "no value satisfies") and the energy is not suggested.
    kw = dict(n_params=7e9, n_tokens="2e12 token", mfu=0.4, peak_flops="989.4 TFLOP/s", gpu_power="700 W")
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("n_gpus", cluster_gpu_energy="100 MWh", **kw)
    assert ["train_time"] in e.value.missing
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("n_gpus", **kw)
    assert ["cluster_gpu_energy"] not in e.value.missing and ["train_time"] in e.value.missing


def test_a_consequence_waits_until_its_premises_fall_short():
    # gpu_hours_from_compute (C = mfu P GPU-hours) follows from mfu_definition, compute_throughput_time
    # and gpu_hours_def. MFU from throughput keeps the derivation from those laws; GPU-hours from the
    # compute budget, which they cannot reach without a GPU count, use the consequence as one step.
    def ids(r):
        return [[f.id for f in s.formulas] for s in r.steps]
    mfu = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                        peak_flops="989.4 TFLOP/s")
    assert ids(mfu)[-2:] == [["achieved_flops_from_throughput"], ["mfu_definition"]]
    hours = symcalc.solve("gpu_hours", n_params=7e9, n_tokens="2e12 token", mfu=0.4, peak_flops="989.4 TFLOP/s")
    assert ids(hours) == [["all_params_active"], ["flops_per_token_train"], ["total_flops_train"],
                          ["gpu_hours_from_compute"]]


def test_two_missing_quantities_are_named_together():
    # the cluster's price an hour is its GPUs at a GPU's price: neither alone settles it
    with pytest.raises(UnderdeterminedError) as e:
        plan("cluster_cost_per_hour", {"n_params"})
    assert ["gpu_hour_price", "n_gpus"] in [sorted(s) for s in e.value.missing]
    # a run's cost from a model size alone: a price per token settles it by itself (the tokens
    # default to Chinchilla's 20 a parameter), so no pair is named
    with pytest.raises(UnderdeterminedError) as e:
        plan("total_cost", {"n_params"})
    assert ["cost_per_token"] in e.value.missing


def test_no_formula_at_all(tmp_path):
    path = tmp_path / "orphan.toml"
    path.write_text('[quantities.orphan_quantity]\nunit = "s"\nlatex = "o"\ndescription = "in no formula"\n')
    lib = symcalc.load_library(extra=[path])
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("orphan_quantity", n_params=7e9, library=lib)
    assert "no formula" in e.value.message


def test_a_quantity_with_a_default_is_still_solved_for():
    # asking for pp must not answer with pp's own default of 1
    assert symcalc.solve("pp", n_gpus=64, dp=8, tp=2).value == 4
    assert symcalc.solve("tp", n_gpus=64, dp=8).value == 8          # pp = cp = 1 by default
    r = symcalc.solve("link_latency", allreduce_time="70.07 ms", message_size="2 GB", n_gpus=8,
                      link_bandwidth="50 GB/s")
    assert r.to("us").magnitude == pytest.approx(5, rel=1e-9)        # (70.07 - 70) ms / 14 steps


def test_a_default_rule_that_cannot_fire_does_not_break_a_block(tmp_path):
    # A default rule whose input (n_active_params) is unknowable used to take model_flops_per_token
    # in the block matching, leaving the ZeRO-3 block unmatched, depending on the hash seed.
    import os
    import subprocess
    import sys
    rule = tmp_path / "rule.toml"
    rule.write_text('[[formulas]]\nid = "stray_rule"\ntitle = "t"\nsource = "test"\ndefault = true\n'
                    'equation = "model_flops_per_token = flops_per_param_per_token * n_active_params"\n')
    for seed in ("0", "1", "2", "3"):
        run = subprocess.run([sys.executable, "-m", "symcalc", "solve", "n_params", "model_state_memory=80 GB",
                              "dp=8", "--option", "zero_stage=3", "--formulas", str(rule), "--json"],
                             capture_output=True, text=True, env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert run.returncode == 0, run.stderr
        assert json.loads(run.stdout)["value"] == pytest.approx(80e9 * 8 / 16, rel=1e-12)   # 16 B/param over 8


def test_dependent_laws_never_give_garbage():
    # total_flops = 6 N D, achieved = 6 N R, total_flops = achieved T and T = D / R share one fact.
    # Structurally square blocks of them are singular; the engine leaves one law out per question.
    # 2e12 tokens at 272,000 token/s: 7.35e6 s = 85.10 days (no n_params needed)
    r = symcalc.solve("train_time", n_tokens="2e12 token", tokens_per_second="272000 token/s")
    assert r.value == pytest.approx(2e12 / 272000 / 86400, rel=1e-12)
    # seed 000: 6 x 70e9 x 2e12 / (0.45 x 1979e12 x 128) = 7.369e6 s = 85.29 days
    r = symcalc.solve("train_time", n_params=70e9, n_tokens="2e12 token", n_gpus=128, mfu=0.45,
                      peak_flops="1979 TFLOP/s")
    assert r.value == pytest.approx(6 * 70e9 * 2e12 / (0.45 * 1979e12 * 128) / 86400, rel=1e-12)
    assert not any("numerically" in w for w in r.warnings)


def test_a_dependent_equation_in_a_block_is_found():
    import sympy
    from symcalc.engine.invert import dependent_equation
    C, F, fpt, R, D, T, K = sympy.symbols("C F fpt R D T K", positive=True)
    # C = fpt D, F = fpt R, C = F T: eliminating C and F leaves fpt (D - R T) = 0, which says
    # nothing about fpt (> 0): either no solution or every fpt. Dependent whatever R is.
    block = ((C, fpt * D), (F, fpt * R), (C, F * T))
    assert dependent_equation(block, (C, F, fpt)) == 2
    substituted = tuple((lhs, rhs.subs(R, D / T)) for lhs, rhs in block)
    assert dependent_equation(substituted, (C, F, fpt)) == 2
    # with an offset the last equation fixes fpt = K / (D - R T): independent
    offset = ((C, fpt * D), (F, fpt * R), (C, F * T + K))
    assert dependent_equation(offset, (C, F, fpt)) is None


def test_sums_of_memory_terms_solve_backwards_whatever_the_hash_seed(tmp_path):
    import os
    import subprocess
    import sys
    extra = tmp_path / "wo.toml"
    extra.write_text('[quantities.wo_memory]\nunit = "byte"\nlatex = "M_{wo}"\ndescription = "w + o"\n'
                     '[[formulas]]\nid = "wo_memory_sum"\ntitle = "t"\nsource = "test"\n'
                     'equation = "wo_memory = weight_memory + optimizer_memory"\n')
    for seed in ("0", "1", "2", "6"):
        run = subprocess.run([sys.executable, "-m", "symcalc", "solve", "n_params", "wo_memory=182 GB",
                              "--formulas", str(extra), "--json"], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert run.returncode == 0, run.stderr
        # weights 2 + optimizer 12 bytes per parameter: 182 GB / 14 B = 13e9
        assert json.loads(run.stdout)["value"] == pytest.approx(13e9, rel=1e-12)


def test_laws_come_before_a_default_rule_for_the_target():
    # block checkpointing keeps L/k layers' activations: 40/k x 8.13695 GB = 60 GB -> k = 5.425
    r = symcalc.solve("checkpoint_every_k_layers", n_layers=40, activation_memory_per_layer="8.13695 GB",
                      activation_memory="60 GB", options={"checkpoint_model": "block"})
    assert r.value == pytest.approx(40 * 8.13695 / 60, rel=1e-9)


def test_missing_inputs_are_underdetermined_not_garbage_in_any_hash_seed():
    # Rules and laws used to form square but singular blocks: -8e31 ms, or 0 ms, depending on the
    # hash seed. The ring needs the group size; the TP time needs d_model.
    import os
    import subprocess
    import sys
    code = ("import symcalc\n"
            "for target, given in [('allreduce_time', dict(message_size='2 GB', link_bandwidth='50 GB/s')),\n"
            "    ('tp_comm_time_per_step', dict(n_layers=80, link_bandwidth='600 GB/s', micro_batch_size=1,\n"
            "                                   seq_len='4096 token'))]:\n"
            "    try:\n"
            "        print(symcalc.solve(target, **given))\n"
            "    except symcalc.UnderdeterminedError:\n"
            "        print('underdetermined')\n"
            "print(symcalc.solve('allreduce_time', message_size='2 GB', dp=8, link_bandwidth='50 GB/s',\n"
            "                    link_latency='5 us').value)\n")
    for seed in ("0", "1", "2", "3"):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        lines = run.stdout.split()
        assert run.returncode == 0, run.stderr
        assert lines[:2] == ["underdetermined", "underdetermined"]
        # dp = 8 is the ring (tp = pp = cp = 1): 2 x 2 GB x 7/8 / 50 GB/s + 14 x 5 us = 70.07 ms
        assert float(lines[2]) == pytest.approx(70.07, rel=1e-9)


def test_the_same_question_gives_the_same_derivation_in_every_process():
    # set iteration order follows PYTHONHASHSEED; the derivation's steps and their order must not
    import os
    import subprocess
    import sys
    code = ("import symcalc\n"
            "r = symcalc.solve('n_gpus', n_params=30e9, n_tokens='600e9 token', train_time='30 day', mfu=0.45,\n"
            "                  peak_flops='989 TFLOP/s')\n"
            "s = symcalc.solve('micro_batch_size', n_params=7e9, n_layers=32, d_model=4096, n_heads=32,\n"
            "                  seq_len='4096 token', gpu_memory='80 GB', memory_headroom='0 GB', dp=8,\n"
            "                  options={'zero_stage': '1', 'recompute': 'full', 'memory_figure': 'allocated'})\n"
            "print(r.text()); print(s.text())\n")
    outputs = set()
    for seed in ("0", "1", "7"):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, timeout=120)
        assert run.returncode == 0, run.stderr
        outputs.add(run.stdout)
    assert len(outputs) == 1
    out = outputs.pop()
    # the tensors' peak: (80e9 - 7e9 x 5.5) / (32 x 2 x 4096^2 stored inputs + the recomputed layer's
    # 34 x 4096^2 and 5 x 32 x 4096^2 eager scores + the logits, 4096 x V x 12 bytes, with the
    # vocabulary V = (7e9 - 32 x 12 x 4096^2) / (2 x 4096) = 68,060 that n_params leaves for the
    # embeddings) = 41.5e9 / 7.674e9 = 5.41 -> 5
    assert "n_gpus = 94" in out and "micro_batch_size = 5  (exact 5.40" in out


ZERO3_70B = dict(model="llama3-70b", hardware="h100", options={"zero_stage": "3"})


def test_how_many_gpus_to_fit_names_the_missing_activation_input():
    # "how many GPUs to fit Llama 3 70B with ZeRO-3": the model state shards over the GPUs, the
    # activations do not, and they need the micro-batch (the preset gives the sequence length).
    # dp and n_nodes would settle it too, but only as the answer restated (n_gpus = dp with
    # tp = pp = cp = 1; n_nodes x 8): they are not offered.
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("n_gpus", memory_headroom="0 GB", **ZERO3_70B)
    assert e.value.missing == [["micro_batch_size"]]
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("dp", memory_headroom="0 GB", **ZERO3_70B)
    assert e.value.missing == [["micro_batch_size"]]
    # and with it, the answer: the smallest GPU count whose memory holds the shards
    r = symcalc.solve("n_gpus", memory_headroom="0 GB", micro_batch_size=1, seq_len="2048 token",
                      model="llama3-70b", hardware="h100", options={"zero_stage": "3", "recompute": "full"})
    assert r.value >= 1 and float(r.value).is_integer()


def test_a_restatement_is_offered_only_when_nothing_else_settles_it():
    # with nothing given, the node count is the GPU count over the GPUs per node: that is all
    # there is to say
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("n_nodes")
    assert ["gpus_per_node", "n_gpus"] in e.value.missing
    # an inverse relation is a real route, not a restatement: the interleaved bubble ratio
    # (p - 1) / (v m) needs the virtual stages
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("bubble_ratio", pp=4, n_microbatches=12, options={"pipeline_schedule": "interleaved"})
    assert ["virtual_stages"] in e.value.missing


def test_suggestions_with_presets_really_settle_the_target():
    # a bridge that reads only given values (tp_comm_bytes_from_generic reads a given AllReduce)
    # must not read a value the search derived: it had offered checkpoint_interval for a step time
    lib = symcalc.default_library()
    where = dict(model="llama3-8b", hardware="h100", options={"zero_stage": "3"})
    with pytest.raises(UnderdeterminedError) as e:
        symcalc.solve("step_time", n_gpus=64, global_batch_size=512, **where)
    assert ["checkpoint_interval"] not in e.value.missing and ["micro_batch_size"] in e.value.missing
    for extra in e.value.missing:
        values = {"n_gpus": 64, "global_batch_size": 512, **{q: (1.0, lib.quantities[q].unit) for q in extra}}
        r = symcalc.solve("step_time", values, on_bounds="flag", **where)
        assert r.base_value > 0, extra


def test_the_numeric_independence_test_tells_dependent_blocks_from_sound_ones():
    import sympy
    from symcalc.engine.independence import block_determined
    C, N, D, F, R, T, x, y, a, b = sympy.symbols("C N D F R T x y a b", positive=True)
    # C = 6 N D, F = 6 N R, T = D / R and C = F T share one fact (C - F T = 6 N D - 6 N R D / R):
    # square in structure, singular on its whole solution set
    assert block_determined([(C, 6 * N * D), (F, 6 * N * R), (T, D / R), (C, F * T)], [C, D, F, R]) is False
    # a + b and a b fix x and y (the roots of z^2 - a z + b): full rank
    assert block_determined([(a, x + y), (b, x * y)], [x, y]) is True
    # with Max, a branch where y drops out is no proof of dependence: another start finds one
    # where both count, or the test leaves it to the algebra (None), never "dependent"
    assert block_determined([(a, sympy.Max(x, y) + y), (b, x * y)], [x, y]) is not False


def _peeled_from_scratch(members: dict[str, list[str]]) -> set[str]:
    """The members no peeling removes: repeatedly drop one with a quantity no other holds."""
    alive = dict(members)
    while True:
        lonely = [f for f, qs in alive.items()
                  if any(all(q not in alive[g] for g in alive if g != f) for q in qs)]
        if not lonely:
            return set(alive)
        del alive[lonely[0]]


@pytest.mark.parametrize("seed", range(40))
def test_a_peeling_kept_across_stalls_leaves_what_one_from_scratch_leaves(seed):
    # propagate keeps its block analysis's first cut from one stall to the next (_Peeling):
    # quantities settle and formulas leave in between, and at every stall what is left must be
    # what peeling the formulas still in play from scratch leaves
    from types import SimpleNamespace

    from symcalc.engine.peeling import _Peeling
    rng = np.random.default_rng(seed)
    quantities = [f"q{i}" for i in range(int(rng.integers(4, 14)))]
    members = {f"f{i}": list(rng.choice(quantities, size=int(rng.integers(2, 5)), replace=False))
               for i in range(int(rng.integers(3, 16)))}
    unsettled = {f: list(qs) for f, qs in members.items()}
    peeling = _Peeling(unsettled, list(members))
    live = set(members)
    for _ in range(12):
        in_play = [SimpleNamespace(id=f) for f in members if f in live and rng.random() < 0.9]
        got = {f.id for f in peeling.core(in_play)}
        assert got == _peeled_from_scratch({f.id: unsettled[f.id] for f in in_play})
        q = str(rng.choice(quantities))         # a quantity settles: it leaves every formula
        peeling.settled(q)
        for f in live.copy():
            if q in unsettled[f]:
                unsettled[f].remove(q)
                if len(unsettled[f]) < 2:       # too few unknowns left to join a block
                    live.discard(f)
                    peeling.leave(f)


def _diagnose(target, given, **budget):
    # as a refusal searches: the quantities people know, the library's checks, with ``budget``
    import dataclasses
    from symcalc.engine.diagnosis import missing_sets
    from symcalc.query.derivations import _hints
    lib = symcalc.default_library()
    opts = lib.option_values({})
    defaults = {k for k in lib.coefficient_defaults(opts) if k not in given}
    hints = dataclasses.replace(_hints(lib, target, frozenset(given), opts), **budget)
    return missing_sets(lib.active_formulas(opts), target, set(given), defaults, {"link_latency"}, hints=hints)


def test_the_search_for_what_to_give_is_bounded_by_trials_not_by_the_clock():
    # issue 38: "mfu from n_params" said "also give n_gpus, peak_flops, tokens_per_second" on a
    # quiet machine and "ran out of its time budget" on a busy one. Bounded by a count of trial
    # propagations, the same question finds the same sets with a 10 s guard and with none, and
    # spends the same trials each time
    guarded = _diagnose("mfu", {"n_params"})
    unguarded = _diagnose("mfu", {"n_params"}, seconds=float("inf"))
    assert guarded.complete and unguarded.complete
    assert guarded.sets == unguarded.sets and guarded.sets[0] == ["n_gpus", "peak_flops", "tokens_per_second"]
    assert 0 < guarded.trials == unguarded.trials == _diagnose("mfu", {"n_params"}).trials


def test_a_search_that_spends_its_trials_says_it_was_cut_short():
    # five trials cannot reach the three-value set (singles are tried first, one trial each)
    short = _diagnose("mfu", {"n_params"}, trials=5)
    assert not short.complete and short.trials == 6 and short.sets == []    # the sixth is the one refused
    from symcalc.engine.diagnosis import underdetermined_error
    message = underdetermined_error("mfu", {"n_params"}, short.sets, complete=short.complete).message
    assert "was cut short" in message and "no combination" not in message


def test_a_replicas_rate_is_not_told_to_give_all_replicas_rate(cli):
    # the deployment's rate over its replicas restates one replica's rate: a refusal of
    # decode_tokens_per_second from a parameter count had offered "cluster_decode_tokens_per_second,
    # dp". The other half of a per-unit/total pair (the quantities' total key) is never suggested
    # for its partner; the shapes, the bandwidth and a batch (here: the largest that fits) are
    run = cli("solve", "decode_tokens_per_second", "n_params=7e9")
    assert run.code == 2
    asked = run.err.strip().split("also give ", 1)[1]
    assert "cluster_decode_tokens_per_second" not in asked
    assert {"n_layers", "seq_len", "achievable_hbm_bandwidth"} <= set(asked.replace(",", " ").split())
