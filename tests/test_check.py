"""Consistency checks (symcalc check) and overdetermined solves: claimed numbers against each
other. The source documents' own wrong numbers are caught; their correct values pass."""

from __future__ import annotations

import pytest

import symcalc
from symcalc.errors import ConflictError
from helpers import seed_examples
from symcalc.query.check import check
from symcalc.errors import QueryError

BY_ID = {e["id"]: e for e in seed_examples()[0]}

# What each source printed where seed_examples.toml marks a SEED ERROR / INCONSISTENCY / GARBLED
# (its `seed_states`, as a value; the two marked * are worked out from the note).
SEED_WRONG = {
    "s000_70b_dp_allreduce_time": "2.8 s",                # one ring phase counted, not two
    "s000_ex1_activation_full_recompute": "16.2 GB",      # 2 x 8.1 GB
    "s001_1f1b_inflight_activation_memory": "6 GB",       # p - 1 = 3 micro-batches in flight, not p
    "s001_bubble_code_exercise": "0.0588",                # 3/51: bubble_fraction, not bubble_ratio
    "s001_min_microbatches_pp8_v2": "70",                 # 7/140 = 5 % is not below 5 %
    "s001_tp_allreduce_bytes_per_gpu": "56 MB",           # one phase, in MiB
    "s002_3d_zero1_total_memory": "66.875 GB",            # * gradients over pp only: 8.75+13.125+10+35
    "s003_moe_total_params_claim": "2e12",                # '~2T' does not follow from its rule
    "s003_sp_max_activation_size": "524288",              # b s h / 64: split along both axes
    "s004_net_rate_corrected_h100": "45714 token/s",      # bytes per token per GPU missing (dp - 1)
    "s001_fp8_activation_saving_70b": "172 GB",           # * 8x too large
}


def test_every_noted_seed_error_is_in_the_table():
    import re
    noted = {i for i, e in BY_ID.items() if re.search(r"SEED ERROR|INCONSISTENCY|GARBLED", e.get("notes", ""))}
    assert noted == set(SEED_WRONG)


@pytest.mark.parametrize("eid", sorted(SEED_WRONG))
def test_a_seeds_wrong_number_is_caught_and_the_right_one_passes(eid):
    e = BY_ID[eid]
    rtol = e["tolerance"]           # as tight as the example's own inputs allow (0: whole numbers exactly)
    # asked as the seed asks it: a memory total of the parts it gives is their sum (memory_figure's
    # fallback), with no option of the test's own
    options = e.get("options", {})
    wrong = check({**e["given"], e["find"]: SEED_WRONG[eid]}, options=options, rtol=rtol)
    assert not wrong.ok and [r.quantity for r in wrong.disagreements] == [e["find"]]
    right = check({**e["given"], e["find"]: e["expected"]}, options=options, rtol=rtol)
    assert right.ok and right.relations


def test_the_70b_allreduce_claim_reports_the_ring_time_and_its_derivation():
    c = check(n_params=70e9, n_gpus=128, link_bandwidth="50 GB/s", allreduce_time="2.8 s")
    (r,) = c.relations
    # ring: 2 x 140 GB x 127/128 / 50 GB/s = 5.55625 s; 2.8 is 49.6 % below it
    assert r.quantity == "allreduce_time" and r.computed == pytest.approx(5.55625, rel=1e-12)
    assert r.rel_error == pytest.approx((5.55625 - 2.8) / 5.55625, rel=1e-9)
    assert r.inputs == ["link_bandwidth", "n_gpus", "n_params"]
    assert "ring_allreduce_bandwidth_time" in r.formulas and r.defaults["bytes_per_grad"] == "2 byte"
    assert "Derivation of allreduce_time" in c.text() and "5556 ms" in c.text()


def test_several_relations_are_each_reported_once_and_unrelated_values_named():
    # 30B, 600B tokens, 94 GPUs at 45 % of 989 TFLOP/s: 6 x 30e9 x 600e9 / (94 x 0.45 x 989e12) s = 29.88 days
    # (shown in the direction that runs every formula forwards; 30 days claimed: 0.41 % off). And Young's
    # interval for 98 s and 24 h: sqrt(2 x 98 x 86400) = 4115.1 s = 68.59 min (claimed 60: 12.5 % off).
    c = check(n_params=30e9, n_tokens="600e9 token", train_time="30 day", mfu="45%", peak_flops="989 TFLOP/s",
              n_gpus=94, checkpoint_write_time="98 s", mtbf="24 h", checkpoint_interval="60 min", vocab_size=32000)
    assert [r.quantity for r in c.relations] == ["train_time", "checkpoint_interval"]
    days, young = c.relations
    assert days.agrees and days.computed == pytest.approx(1.08e23 / (94 * 0.45 * 989e12), rel=1e-12)
    assert set(days.inputs) == {"n_params", "n_tokens", "mfu", "peak_flops", "n_gpus"}
    assert not young.agrees and young.computed == pytest.approx((2 * 98 * 86400) ** 0.5, rel=1e-12)
    assert c.unrelated == ["vocab_size"]
    assert not c.ok and len(c.disagreements) == 1


def test_nothing_to_check_is_said_plainly():
    c = check(n_params=7e9, vocab_size=32000)
    assert c.relations == [] and c.unrelated == ["n_params", "vocab_size"] and c.ok
    assert c.text().startswith("nothing to check")


@pytest.mark.parametrize("kw,needle", [
    (dict(n_params=7e9), "at least two"),
    (dict(n_params=7e9, n_gpus=8, rtol=1.5), "between 0 and 1"),
    (dict(n_params=7e9, n_gpus=8, rtol="x"), "relative tolerance"),
])
def test_bad_checks_are_explained(kw, needle):
    with pytest.raises(QueryError) as e:
        check(**kw)
    assert needle in e.value.message


def test_cli_check_exit_status_says_whether_the_numbers_agree(cli):
    args = ("check", "n_params=70e9", "n_gpus=128", "link_bandwidth=50 GB/s")
    bad = cli(*args, "allreduce_time=2.8 s")
    assert bad.code == 1 and "FAIL allreduce_time = 2800 ms claimed, 5556 ms" in bad.out
    good = cli(*args, "allreduce_time=5.556 s", "--brief")
    assert good.code == 0 and "ok   allreduce_time" in good.out and "Derivation" not in good.out
    loose = cli(*args, "allreduce_time=5 s", "--rtol", "0.15")      # 10 % off, within 15 %
    assert loose.code == 0
    js = cli(*args, "allreduce_time=2.8 s", "--json").json()
    assert js["ok"] is False and js["disagreements"] == 1
    assert js["relations"][0]["computed"] == pytest.approx(5556.25) and js["relations"][0]["unit"] == "ms"
    err = cli("check", "n_params=70e9", "n_gpu=128")
    assert err.code == 2 and "n_gpus" in err.err and err.err.count("\n") == 1


# ---- overdetermined solves ------------------------------------------------------------------

MFU_QUESTION = dict(n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")


def test_extra_values_that_agree_are_checked_silently():
    # 1.296e10 tokens/day x 30 days = 3.888e11 tokens: consistent with 150,000 token/s
    r = symcalc.solve("mfu", train_time="30 day", n_tokens="3.888e11 token", **MFU_QUESTION)
    assert r.value == pytest.approx(4.974, rel=1e-3)
    assert r.conflicts == [] and not any("not used" in w for w in r.warnings)


def test_extra_values_that_disagree_are_refused_not_silently_dropped(cli):
    # 1e12 tokens in 30 days is 385,802 token/s, not the 150,000 the answer would use: 61.1 % apart
    with pytest.raises(ConflictError) as e:
        symcalc.solve("mfu", train_time="30 day", n_tokens="1e12 token", **MFU_QUESTION)
    assert {c["quantity"] for c in e.value.conflicts} == {"n_tokens", "train_time"}
    assert "conflict: n_tokens = 1e12 token is given" in e.value.message
    # conflicts="warn" answers from the shortest route and reports each disagreement
    r = symcalc.solve("mfu", train_time="30 day", n_tokens="1e12 token", conflicts="warn", **MFU_QUESTION)
    assert r.value == pytest.approx(100 * 6 * 7e9 * 150e3 / (64 * 1979e12), rel=1e-12)   # the shortest route
    names = {c["quantity"] for c in r.conflicts}
    assert names == {"n_tokens", "train_time"}
    tokens = next(c for c in r.conflicts if c["quantity"] == "n_tokens")
    assert tokens["computed"] == pytest.approx(150000 * 30 * 86400) and tokens["rel_error"] == pytest.approx(1 - 0.3888)
    assert any(w.startswith("conflict: n_tokens = 1e12 token is given") for w in r.warnings)
    args = ("solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64",
            "peak_flops=1979 TFLOP/s", "train_time=30 day", "n_tokens=1e12 token")
    run = cli(*args, "--json")
    assert run.code == 2 and {c["quantity"] for c in run.json()["error"]["conflicts"]} == {"n_tokens", "train_time"}
    assert run.json()["error"]["kind"] == "conflict"
    text = cli(*args)
    assert text.code == 2 and text.err.startswith("error: conflict: ") and text.err.count("\n") == 1
    text = cli(*args, "--allow-conflicts")
    assert text.code == 0 and "warning: conflict: n_tokens" in text.err


def test_a_presets_values_are_named_by_their_preset_and_their_sources_kept_for_json():
    # a decode step of Llama 3 8B at batch 1 on an H100 (7.947 ms, within 2 % of a claimed 8 ms):
    # the text line says where each preset value comes from in a word, the record keeps its source
    c = check({"batch_size": 1, "seq_len": "1000 token", "decode_step_time": "8 ms"}, model="llama3-8b",
              hardware="h100")
    assert c.ok and len(c.relations) == 1
    via = next(line for line in c.text().splitlines() if line.lstrip().startswith("via "))
    assert "decode_hbm_bandwidth=1.905 TB/s (hardware h100_sxm)," in via and "measured:" not in via
    assert c.relations[0].defaults["decode_hbm_bandwidth"].startswith("1.905 TB/s (hardware h100_sxm: measured: ")


def test_a_relation_through_the_step_time_model_is_said_in_one_readable_line():
    # an MFU claim is checked through the whole step-time model (over a hundred formulas and
    # some forty defaults): the via line said every one of them (3,000 characters); it names how
    # many formulas and the last few, the coefficients assumed, and counts the presets' figures
    import re
    c = check({"tp": 8, "pp": 4, "dp": 32, "n_gpus": 1024, "micro_batch_size": 1, "global_batch_size": 1024,
               "mfu": "55%"}, model="llama3-70b", hardware="h100")
    [mfu] = [r for r in c.relations if r.quantity == "mfu"]
    assert not mfu.agrees and len(mfu.formulas) > 100
    via = [line for line in c.text(derivations=False).splitlines() if line.lstrip().startswith("via ")][-1]
    assert re.search(r"via \d+ formulas, the last .*, mfu_definition; defaults: ", via)
    assert re.search(r"and \d+ more, \d+ of hardware h100_sxm, \d+ of model llama3_70b$", via)
    assert len(via) < 1000
