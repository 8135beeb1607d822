"""Given parallel degrees are held to the planner's structure rules (issue 34: solve accepted
tp = 1e9, 3 or 128 on a 64-head model without a word).

One rule set, formulas/planner/space.toml read by symcalc.query.layout_rules: the planner
enumerates layouts by it, and a question checks its given degrees by it (refusing or warning as
each rule's ``given`` says) and rounds a degree it solves for to a value that keeps it.
Llama 3 70B: 64 heads, 8 KV heads, 80 layers (its config.json); DeepSeek-V3: 256 routed experts
and 1 shared (n_experts 257).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

import symcalc
from symcalc.errors import DomainError
from symcalc.planner.space import Shape, enumerate_space
from symcalc.query.layout_rules import check_given, given_breaks


@pytest.mark.parametrize("tp", ["1e9", "3", "128"])
def test_a_tp_that_does_not_divide_the_heads_is_refused_in_one_line_naming_the_rule(cli, tp):
    """64 % 3 = 4, 64 % 128 = 64, 64 % 1e9 = 64: none divides the 64 heads."""
    run = cli("solve", "weight_memory", "--model", "llama3-70b", f"tp={tp}")
    assert run.code == 2 and run.out == ""
    [line] = run.err.strip().splitlines()
    assert line.startswith("error: tp does not divide n_heads: tp = ") and "n_heads = 64 (rule tp_heads" in line
    out = json.loads(cli("solve", "weight_memory", "--model", "llama3-70b", f"tp={tp}", "--json").out)
    assert out["error"]["kind"] == "out_of_domain" and "rule tp_heads" in out["error"]["message"]
    with pytest.raises(DomainError, match="rule tp_heads"):
        symcalc.solve("weight_memory", model="llama3-70b", tp=float(tp))


def test_the_server_refuses_the_same_way():
    """The server's worker answers with the command line's JSON error object."""
    from symcalc.serve.worker import answer
    out = json.loads(answer("solve", {"target": "weight_memory", "model": "llama3-70b", "values": {"tp": "3"}}, 60))
    assert out["error"]["kind"] == "out_of_domain" and "rule tp_heads" in out["error"]["message"]


def test_a_rule_that_only_warns_answers_and_says_which_rule():
    """tp = 16 divides 64 heads but not 8 KV heads (each is then replicated over 2 ranks, as
    vLLM serves them; Megatron-Core's training refuses it): answered, 141.1 GB / 16 of
    weights (2 bytes x 70,553,706,496 parameters / 16 = 8.819 GB), with the rule named; tp = 8
    keeps every rule and says nothing."""
    r = symcalc.solve("weight_memory", model="llama3-70b", tp=16)
    assert r.base_value == pytest.approx(2 * 70_553_706_496 / 16, rel=1e-12)
    [f] = [f for f in r.findings if f.kind == "layout_rule"]
    assert f.values["rule"] == "tp_kv_heads" and f.values["shown"] == "tp = 16, n_kv_heads = 8"
    assert not [f for f in symcalc.solve("weight_memory", model="llama3-70b", tp=8).findings
                if f.kind == "layout_rule"]


def test_pp_must_split_the_layers_and_ep_the_routed_experts():
    """80 layers over 7 stages: ceil(80 / 7) = 12 on the fullest stage (80 = 6 x 12 + 8): a
    warning that the split is uneven, naming the fullest stage; over 3: ceil(80 / 3) = 27 (27 + 27
    + 26), said too (issue 35: pp covers the layers evenly or with a stated uneven split), and
    nothing said once the question states the split (layers_per_stage_max = 27); over 4 (20 each)
    nothing; over 81, more stages than layers, refused. DeepSeek-V3's ep divides its 256 routed
    experts (64 does; 3 does not), not the 257 with the shared one, which only 1 and 257 divide."""
    [f] = [f for f in symcalc.solve("weight_memory", model="llama3-70b", pp=7).findings if f.kind == "layout_rule"]
    assert f.values["rule"] == "pp_layers_even"
    assert f.values["shown"] == "pp = 7, n_layers = 80, fullest_stage_layers = 12"
    [f] = [f for f in symcalc.solve("weight_memory", model="llama3-70b", pp=3).findings if f.kind == "layout_rule"]
    assert f.values["shown"] == "pp = 3, n_layers = 80, fullest_stage_layers = 27"
    for quiet in (dict(pp=3, layers_per_stage_max=27), dict(pp=4)):
        assert not [f for f in symcalc.solve("weight_memory", model="llama3-70b", **quiet).findings
                    if f.kind == "layout_rule"]
    with pytest.raises(DomainError, match="pp can never exceed n_layers"):
        symcalc.solve("weight_memory", model="llama3-70b", pp=81)
    with pytest.raises(DomainError, match="ep = 3, n_routed_experts = 256 \\(rule ep_experts"):
        symcalc.solve("weight_memory", model="deepseek-v3", ep=3)
    assert symcalc.solve("weight_memory", model="deepseek-v3", ep=64).base_value > 0


def test_a_solved_degree_rounds_to_the_nearest_value_the_rules_allow():
    """tp for 30 GB of weights: 2 x 70,553,706,496 / 30e9 = 4.70; the memory limit rounds it up
    (5 would fit), but 5, 6 and 7 do not divide 64 heads: 8, said why. For 12 GB: 11.76, up to
    12, which does not divide them; 16 does (it replicates the 8 KV heads, a rule that only
    warns), so 16, saying that it still breaks that rule."""
    r = symcalc.solve("tp", model="llama3-70b", weight_memory="30 GB")
    assert r.value == 8
    [f] = [f for f in r.findings if f.kind == "rounded_to_rule"]
    assert f.values["was"] == 5 and f.values["value"] == pytest.approx(2 * 70_553_706_496 / 30e9, rel=1e-9)
    assert f.values["rules"] == ["tp_heads"] and not f.values["still"]
    r = symcalc.solve("tp", model="llama3-70b", weight_memory="12 GB")
    [f] = [f for f in r.findings if f.kind == "rounded_to_rule"]
    # 16 ranks over Llama 3 70B's 8 KV heads: each KV head held twice, said
    assert r.value == 16 and f.values["was"] == 12 and len(f.values["still"]) == 1
    assert f.values["still"][0].startswith("tp does not divide n_kv_heads: the KV heads replicate")
    # 8 already keeps every rule: rounded as before, nothing said
    r = symcalc.solve("tp", model="llama3-70b", weight_memory=f"{2 * 70_553_706_496 / 8} byte")
    assert r.value == 8 and not [f for f in r.findings if f.kind == "rounded_to_rule"]


def test_the_planner_and_a_question_keep_one_rule_set():
    """Every layout the planner finds valid for 64 GPUs of a 6-head, 2-KV-head, 6-layer model
    passes the question's check; every tp in 1..64 breaking a rule for the question is absent from the
    planner's valid layouts (1, 2, 3, 6 divide 6 heads; 1, 2 divide 2 KV heads: only those)."""
    s = Shape(n_gpus=64, gpus_per_node=64, n_heads=6, n_kv_heads=2, n_layers=6, seq_len=64, global_batch_size=64)
    space = enumerate_space(s)
    facts = {"n_heads": 6.0, "n_kv_heads": 2.0, "n_layers": 6.0, "seq_len": 64.0, "global_batch_size": 64.0,
             "gpus_per_node": 64.0}
    c = space.columns
    cols = {k: c[k].astype(float) for k in ("tp", "pp", "cp", "dp", "micro_batch_size")}
    check_given({**facts, **cols})          # raises on any layout that breaks a refusing rule
    # nor a warning one, under the planner's assumption of an uneven pipeline (uneven_pp, its
    # default); a question assumes an even one unless it states otherwise, and says so of the
    # planner's uneven layouts only: pp = 4 on 6 layers (2 a stage, 8 slots, 2 empty: within the
    # planner's slack of 2; the other pp it takes, 1, 2, 3 and 6, divide 6)
    assert not list(given_breaks({**facts, **cols, "uneven_pp": True}))
    [(rule, bad)] = list(given_breaks({**facts, **cols}))
    assert rule.name == "pp_layers_even" and set(np.unique(cols["pp"][bad]).tolist()) == {4.0}
    tp = np.arange(1, 65, dtype=float)
    broken = {int(t) for rule, bad in given_breaks({**facts, "tp": tp}) for t in tp[bad]}
    assert set(np.unique(c["tp"]).tolist()) == {1, 2} and broken == set(range(3, 65))


def test_an_absurd_degree_without_a_model_is_refused():
    """With no heads known the heads' rule cannot speak, but tp = 1e9 is above the million GPUs
    no group has (rule degree_absurd, issue 35): refused in one line naming the value, as cp =
    2e6 is; tp = 8 answers 2 x 70e9 bytes / 8 = 17.5 GB."""
    with pytest.raises(DomainError, match=r"above 1,000,000 .*: tp = 1e9 \(rule degree_absurd"):
        symcalc.solve("weight_memory", n_params=70e9, bytes_per_param="2 byte", tp=1e9)
    with pytest.raises(DomainError, match=r"cp = 2000000 \(rule degree_absurd"):
        symcalc.solve("weight_memory", n_params=70e9, bytes_per_param="2 byte", cp=2e6)
    ok = symcalc.solve("weight_memory", n_params=70e9, bytes_per_param="2 byte", tp=8)
    assert ok.base_value == pytest.approx(17.5e9, rel=1e-12)


def test_a_sweep_marks_the_points_whose_layout_solve_refuses():
    # solve refuses tp = 3 on Llama 3 70B's 64 heads (rule tp_heads); a sweep over tp = 1, 3, 8
    # answers every point (the weights split over tp: 141.1 GB / 3 = 47.04 GB) but marks tp = 3
    # infeasible with that rule, as it marks a micro-batch above the global batch
    s = symcalc.sweep("weight_memory", {}, vary={"tp": "1,3,8"}, model="llama3-70b")
    assert s.feasible.tolist() == [True, False, True]
    [why] = [f for f in s.infeasible if f.values.get("why") == "rule"]
    assert why.values["rule"] == "tp_heads" and why.values["points"] == 1
    assert abs(s.values[1] * 3 - s.values[0]) < 1e-9 * s.values[0]


def test_a_count_rounds_to_the_rules_alike_asked_once_or_over_a_grid():
    from symcalc.query.layout_rules import nearest_valid
    # pp = 3: a GPU count is a multiple of 3; 4.7 is 1.3 from 6 and 1.7 from 3, so 6, asked once
    # or as one point of a grid
    assert nearest_valid("n_gpus", 4.7, 5.0, "nearest", {"pp": 3})[0] == 6
    assert list(nearest_valid("n_gpus", np.array([4.7, 7.2]), np.array([5.0, 7.0]), "nearest", {"pp": 3})[0]) == [6, 6]
    # tp 8 x pp 3: a multiple of 24, however far above the 4.6 GPUs solved (up: at least as many)
    value, found = nearest_valid("n_gpus", 4.6, 5.0, "up", {"tp": 8, "pp": 3})
    assert value == 24 and found.values["was"] == 5
