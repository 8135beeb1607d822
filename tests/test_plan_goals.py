"""A plan with several goals meets them all, and says which binds (issue 34: `--deadline` with
`--budget` used to drop the budget without a word).

The run: Llama 2 7B on 8, 16 and 32 H100s, 16 sequences a step, 2T tokens at 2 USD a GPU-hour,
one option combination. A deadline and a budget are judged on the wall clock with failures
(wall_clock_time, total_cost_with_failures: checkpoints, redone work and restarts at the library's
defaults), so the figures below are those. Each count's best layout, its days, cost and token/s, come from a plan
with a budget no count reaches (1e12 USD: every count meets it, so the scan shows them all); the
goals below are set between those figures, so which counts meet which goal follows by hand.
"""

from __future__ import annotations

import json

import pytest

import symcalc
from symcalc.errors import QueryError

ONE = {"zero_stage": "1", "recompute": "full", "sequence_parallel": "false", "pipeline_schedule": "1f1b"}
KW = dict(global_batch_size=16, options=ONE, tokens="2e12 token", gpu_hour_price="2 USD/hour", top=1)
DAY = 86400


@pytest.fixture(scope="module")
def best():
    """{n_gpus: the best layout's metrics} at 8, 16 and 32 GPUs."""
    p = symcalc.plan("llama2-7b", "h100", "8,16,32", budget="1e12 USD", **KW)
    out = {sc.n_gpus: sc.best.metrics for sc in p.scan}
    # more GPUs: faster and dearer, which is what makes a deadline and a budget pull apart
    assert out[8]["wall_clock_time"] > out[16]["wall_clock_time"] > out[32]["wall_clock_time"]
    assert out[8]["total_cost_with_failures"] < out[16]["total_cost_with_failures"] < out[32]["total_cost_with_failures"]
    return out


def between(a: float, b: float) -> float:
    return (a + b) / 2


def test_deadline_and_budget_both_hold_and_the_deadline_binds(best):
    """A deadline between 8's and 16's days (8 misses it) and a budget between 16's and 32's cost
    (32 is over): 16 GPUs is the only count meeting both, the fewest that does, and the deadline
    binds (8 GPUs, one count fewer, miss it but not the budget). Before, the budget was dropped
    and 16 was chosen as well, so the budget is also tested where it changes the answer below."""
    deadline = between(best[8]["wall_clock_time"], best[16]["wall_clock_time"]) / DAY
    budget = between(best[16]["total_cost_with_failures"], best[32]["total_cost_with_failures"])
    p = symcalc.plan("llama2-7b", "h100", "8,16,32", deadline=f"{deadline} day", budget=f"{budget} USD", **KW)
    assert [sc.meets for sc in p.scan] == [False, True, False]
    assert p.goal["chosen_gpus"] == 16 and p.n_gpus == 16
    assert p.goal["kind"] == "goals" and [g["kind"] for g in p.goal["goals"]] == ["deadline", "budget"]
    assert p.goal["binding"] == ["deadline"] and p.goal["meeting_gpus"] == [16]
    m = p.rows[0].metrics
    assert m["wall_clock_time"] <= deadline * DAY and m["total_cost_with_failures"] <= budget
    # the margins: each metric over its goal, by hand
    assert p.goal["margins"]["deadline"] == pytest.approx(m["wall_clock_time"] / (deadline * DAY), rel=1e-12)
    assert p.goal["margins"]["budget"] == pytest.approx(m["total_cost_with_failures"] / budget, rel=1e-12)
    assert p.notes[0].startswith("goals: the deadline binds: 8 GPUs (fewer) misses it; at 16 GPUs")
    assert "Planning backwards (deadline" in p.text()


def test_a_budget_beside_a_deadline_changes_the_answer_when_it_binds(best):
    """A throughput target between 8's and 16's token/s (met from 16 GPUs up) and a budget 16
    GPUs keep but 32 do not: 16 is chosen and the throughput binds (8 GPUs miss it). A budget
    below 16's cost leaves no count meeting both, and the answer says where each is met."""
    tps = between(best[8]["tokens_per_second"], best[16]["tokens_per_second"])
    ok = symcalc.plan("llama2-7b", "h100", "8,16,32", tokens_per_second=f"{tps} token/s",
                      budget=f"{between(best[16]['total_cost_with_failures'], best[32]['total_cost_with_failures'])} USD", **KW)
    assert ok.goal["chosen_gpus"] == 16 and ok.goal["binding"] == ["throughput"]
    cap = between(best[8]["total_cost_with_failures"], best[16]["total_cost_with_failures"])
    miss = symcalc.plan("llama2-7b", "h100", "8,16,32", tokens_per_second=f"{tps} token/s", budget=f"{cap} USD", **KW)
    assert not miss.rows and miss.goal["met"] is False
    assert "meets every goal at once: the budget" in miss.message
    assert "is met up to 8 GPUs" in miss.message and "is met from 16 GPUs" in miss.message
    assert miss.n_gpus == 16       # shown: the fewest that meet the throughput, with what it costs
    assert miss.closest[0].metrics["total_cost_with_failures"] > cap


def test_a_goal_no_count_meets_is_named_among_several(best):
    """A deadline shorter than 32 GPUs' days and a budget every count keeps: the deadline is
    met nowhere, and the answer is the single deadline's (the fastest count and what it lacks)."""
    short = best[32]["wall_clock_time"] / 2 / DAY
    p = symcalc.plan("llama2-7b", "h100", "8,16,32", deadline=f"{short} day", budget="1e12 USD", **KW)
    assert not p.rows and p.n_gpus == 32 and p.message.startswith("no GPU count tried (8, 16, 32) trains in")


def test_the_command_line_and_json_honour_both_goals(cli, best):
    deadline = between(best[8]["wall_clock_time"], best[16]["wall_clock_time"]) / DAY
    budget = between(best[16]["total_cost_with_failures"], best[32]["total_cost_with_failures"])
    args = ["plan", "--model", "llama2-7b", "--hardware", "h100", "--gpus", "8,16,32", "--global-batch-size", "16",
            "--tokens", "2e12", "--price", "2 USD/hour", "--deadline", f"{deadline}day", "--budget", f"{budget}USD",
            "--top", "1"] + [x for k, v in ONE.items() for x in ("--option", f"{k}={v}")]
    run = cli(*args, "--json")
    out = json.loads(run.out)
    assert run.code == 0 and out["goal"]["chosen_gpus"] == 16 and out["goal"]["binding"] == ["deadline"]
    assert [s["meets"] for s in out["scan"]] == [False, True, False]


def test_a_second_goal_needs_its_values_as_the_first_does():
    with pytest.raises(QueryError, match="--budget needs a GPU-hour price"):
        symcalc.plan("llama2-7b", "h100", "8,16", deadline="90 day", budget="1e6 USD", tokens="2e12 token",
                     global_batch_size=16, options=ONE)


def test_the_server_honours_both_goals(best):
    """The server's worker runs the same plan (symcalc.serve.worker passes every goal through)."""
    from symcalc.serve.worker import answer
    deadline = between(best[8]["wall_clock_time"], best[16]["wall_clock_time"]) / DAY
    budget = between(best[16]["total_cost_with_failures"], best[32]["total_cost_with_failures"])
    out = json.loads(answer("plan", {"model": "llama2-7b", "hardware": "h100", "gpus": "8,16,32", "global_batch_size": 16,
                                     "tokens": "2e12", "gpu_hour_price": "2 USD/hour", "deadline": f"{deadline} day",
                                     "budget": f"{budget} USD", "options": ONE, "top": 1}, 120))
    assert out["goal"]["chosen_gpus"] == 16 and out["goal"]["binding"] == ["deadline"]
    assert [g["kind"] for g in out["goal"]["goals"]] == ["deadline", "budget"]
