"""Every question ends in bounded time: a whole-question limit on every command and in the
API, and symbolic work past its own limit falls back to numbers (symcalc.budget)."""

from __future__ import annotations

import math

import pytest

import symcalc
from symcalc import budget, cache
from symcalc.errors import TimeLimitError
from symcalc.library.compiling import unit_factors
from symcalc.library.loading import load_library

MFU = ("solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64", "peak_flops=1979 TFLOP/s")
QUADRATIC = """
[quantities.{x}]
unit = ""
latex = "x"
description = "the unknown"

[quantities.{y}]
unit = ""
latex = "y"
description = "the known"

[[formulas]]
id = "{fid}"
title = "A quadratic"
equation = "{y} = 3 * {x}^2 + 5 * {x}"
source = "test"
"""


def quadratic_library(tmp_path, tag: str):
    """A library with y = 3x^2 + 5x under names of its own (no other test has solved it, so
    no memo holds its closed form)."""
    path = tmp_path / f"quadratic_{tag}.toml"
    path.write_text(QUADRATIC.format(x=f"x_{tag}", y=f"y_{tag}", fid=f"quadratic_{tag}"))
    return load_library(extra=[path])


def test_symbolic_work_past_its_limit_falls_back_to_numbers(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    lib = quadratic_library(tmp_path, "slow")
    monkeypatch.setattr(budget, "DEFAULT_SYMBOLIC_LIMIT", 1e-6)     # no inversion can finish
    errors = cache.stats["errors"]
    r = symcalc.solve("x_slow", y_slow=100, library=lib)
    assert r.value == pytest.approx((-5 + math.sqrt(25 + 12 * 100)) / 6, rel=1e-9)       # the positive root
    assert r.steps[0].method == "numeric" and "x_slow found numerically (quadratic_slow)" in r.warnings
    # answered, but not kept: another process with more time finds the closed form
    assert cache.stats["errors"] == errors + 1
    assert not list((tmp_path / "cache").glob("derivation-*"))


def test_with_time_the_same_question_has_its_closed_form(tmp_path):
    r = symcalc.solve("x_fast", y_fast=100, library=quadratic_library(tmp_path, "fast"))
    assert r.value == pytest.approx((-5 + math.sqrt(25 + 12 * 100)) / 6, rel=1e-12)
    assert r.steps[0].method == "rearranged" and r.has_closed_form


def test_a_python_question_past_its_time_limit_is_refused():
    with pytest.raises(TimeLimitError) as e:
        symcalc.sweep("train_time", n_params=70e9, n_tokens="2e12 token", peak_flops="989 TFLOP/s", mfu="40%",
                      vary={"n_gpus": "64:4096:2000000"}, time_limit=1e-3)
    assert e.value.message == ("no answer within the time limit of 0.001 s; to allow more, give "
                               "time_limit=SECONDS or SYMCALC_TIME_LIMIT")
    assert symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                         peak_flops="1979 TFLOP/s", time_limit=None).value == pytest.approx(4.974, rel=1e-3)


def test_a_command_past_its_time_limit_is_one_line(cli):
    r = cli("sweep", "train_time", "n_params=70e9", "n_tokens=2e12 token", "peak_flops=989 TFLOP/s", "mfu=40%",
            "--vary", "n_gpus=64:4096:2000000", "--time-limit", "0.001")
    assert (r.code, r.out) == (2, "")
    assert r.err == ("error: no answer within the time limit of 0.001 s; to allow more, give --time-limit "
                     "SECONDS or SYMCALC_TIME_LIMIT\n")


def test_the_environment_sets_the_limit_of_every_command(cli, monkeypatch):
    monkeypatch.setenv("SYMCALC_TIME_LIMIT", "0.001")
    r = cli("formulas", "--latex", "-")
    assert r.code == 2 and "time limit of 0.001 s" in r.err
    monkeypatch.setenv("SYMCALC_TIME_LIMIT", "60")
    assert cli(*MFU, "--brief").out == "mfu = 4.974 %\n"


@pytest.mark.parametrize("where, value", [("--time-limit", "0"), ("--time-limit", "-5"), ("--time-limit", "nan"),
                                          ("--time-limit", "soon"), ("SYMCALC_TIME_LIMIT", "soon")])
def test_a_malformed_limit_is_refused(cli, monkeypatch, where, value):
    if where == "SYMCALC_TIME_LIMIT":
        monkeypatch.setenv(where, value)
        r = cli(*MFU)
    else:
        r = cli(*MFU, where, value)
    assert r.code == 2
    assert r.err == (f"error: {where} is a positive number of seconds (or inf for no limit), got '{value}'\n")


def test_a_question_that_used_to_run_for_ten_minutes_ends_within_its_limit(cli):
    # the search for "also give one of" ran sympy without a limit (1.7 GB, ten minutes)
    import time
    start = time.monotonic()
    r = cli("solve", "mfu", "achieved_flops_cluster=6.3 PFLOP/s", "micro_batch_size=64", "gpu_hours=24 hour",
            "layer_input_memory=80 GB", "--time-limit", "8")
    assert time.monotonic() - start < 12
    assert r.code == 2 and r.err.count("\n") == 1
    assert r.err.startswith(("error: cannot determine mfu", "error: no answer within the time limit of 8 s"))


def test_a_closed_form_too_large_to_compose_in_time_stops_where_it_got(monkeypatch):
    r = symcalc.solve("train_time", n_params=7e9, n_tokens="1e12 token", n_gpus=64, mfu="40%",
                      peak_flops="989 TFLOP/s", library=load_library(use_cache=False))
    derivation = r.derivation
    derivation.closed.clear()
    monkeypatch.setattr(budget, "DEFAULT_SYMBOLIC_LIMIT", 1e-6)
    # each composing substitution made slow, so that the limit surely runs out during it (a
    # five-step chain composes faster than a timer of 1e-6 s can be relied on to fire)
    import time

    from symcalc.engine import derive
    real_small = derive._small
    monkeypatch.setattr(derive, "_small", lambda expr: time.sleep(0.05) or real_small(expr))
    partial = derive.closed_form(derivation, derivation.usual_choices()).expr
    assert derivation.degraded
    # whatever it got to, it is still the target: in the values the steps found, the same number
    lib = r.library
    env = {lib.quantities[n].symbol: v for n, v in r.values.items() if n in lib.quantities}
    assert float(partial.subs(unit_factors(partial)).subs(env)) == pytest.approx(r.base_value, rel=1e-12)


def test_a_closed_form_in_terms_of_derived_quantities_says_so():
    r = symcalc.solve("train_time", n_params=7e9, n_tokens="1e12 token", n_gpus=64, mfu="40%",
                      peak_flops="989 TFLOP/s")
    last = r.steps[-1]
    assert last.solves_for == ["train_time"] and "tokens_per_second" in last.inputs
    r.closed_form = last.solution["train_time"]         # composed no further than the last step
    assert r.text().splitlines()[-1] == (
        "Closed form: train_time = n_tokens/tokens_per_second  (in terms of tokens_per_second: composing them in "
        "took longer than the symbolic limit)")
