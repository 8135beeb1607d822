"""Input that used to be accepted wrongly or to end in "internal error ... please report it":
each is now one clear line naming the field or value (or, where it is meaningful, an answer)."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

import symcalc
from symcalc.errors import DomainError, MalformedValueError

TRAIN = dict(n_params=7e9, n_tokens="1e12 token", mfu="40%", peak_flops="989 TFLOP/s")


@pytest.mark.parametrize("gpus", [1e-12, 1e-300, 0.4, 0.5, 2.5, 1e-9, 64.001])
def test_a_count_that_is_not_whole_is_refused_at_every_magnitude(gpus):
    with pytest.raises(DomainError, match=r"n_gpus is a whole number \(got "):
        symcalc.solve("train_time", n_gpus=gpus, **TRAIN)


def test_a_count_off_by_float_noise_is_whole():
    # 0.1 * 3 * 10 = 3.0000000000000004: noise of the last bit, not a third of a GPU
    days = symcalc.solve("train_time", n_gpus=0.1 * 3 * 10, **TRAIN).value
    assert days == pytest.approx(6 * 7e9 * 1e12 / (0.4 * 989e12 * 3) / 86400, rel=1e-12)


@pytest.mark.parametrize("array, message", [
    (np.array([True, True]), "an array of booleans"),          # True would have counted as 1 GPU
    (np.array([64 + 1j, 128]), "an array of complex numbers"),  # the imaginary part was dropped with a warning
    (np.array(["64", "128"]), "an array of text"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "an array of numpy dates"),    # read as 18,262 once
])
def test_an_array_that_is_not_of_numbers_is_refused_naming_what_it_is(array, message):
    with pytest.raises(MalformedValueError, match=f"n_gpus: expected numbers, got {message}"):
        symcalc.solve("train_time", n_gpus=array, **TRAIN)


@pytest.mark.parametrize("value, message", [
    (10 ** 400, "a number of 401 digits is beyond floating point's range"),    # an internal OverflowError once
    ([10 ** 400, 64], "a number beyond floating point's range"),
    (np.timedelta64(30, "D"), "a numpy date or duration is not a value"),       # a timedelta64 is an np.integer
    (np.datetime64("2020-01-01"), "a numpy date or duration is not a value"),
])
def test_numbers_python_or_numpy_cannot_hold_as_floats_are_refused(value, message):
    with pytest.raises(MalformedValueError, match=message):
        symcalc.solve("train_time", n_gpus=value, **TRAIN)


def test_an_array_with_one_count_below_one_is_refused():
    with pytest.raises(DomainError, match=r"n_gpus is a whole number \(got 1e-12\)"):
        symcalc.solve("train_time", n_gpus=np.array([64.0, 1e-12]), **TRAIN)



def test_an_array_with_a_degree_above_the_gpus_names_one_point_of_it():
    # the largest tp (8) and the largest n_gpus (1024) come from different points; the message
    # shows the first point where tp > n_gpus, both values taken there
    with pytest.raises(DomainError, match=r"tp = 8 is more than n_gpus = 4 at 2 of 3 points: tp can never exceed"):
        symcalc.solve("params_per_gpu", n_params=7e9, tp=np.array([8, 8, 4]), pp=1, n_gpus=np.array([1024, 4, 2]))

# ---- config.json ---------------------------------------------------------------------------------

LLAMA = {"num_hidden_layers": 32, "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
         "intermediate_size": 14336, "vocab_size": 128256}


def config(tmp_path, text: str):
    path = tmp_path / "config.json"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize("text, message", [
    ('{"num_hidden_layers": 32, "x": ' + "[" * 100_000 + "]" * 100_000 + "}",
     "nested too deeply to be a model's settings"),
    (json.dumps({**LLAMA, "padding": "x" * (2 << 20)}), "larger than 1 MB; a model's config.json is a few kB"),
    (json.dumps({**LLAMA, "num_local_experts": "8"}), "'num_local_experts' must be a non-negative number, got '8'"),
    (json.dumps({**LLAMA, "num_local_experts": 8, "n_shared_experts": "2"}),
     "'n_shared_experts' must be a non-negative number, got '2'"),
    (json.dumps({**LLAMA, "num_local_experts": 8, "num_experts_per_tok": [2]}),
     "'num_experts_per_tok' must be a non-negative number, got [2]"),
    (json.dumps({**LLAMA, "num_key_value_heads": 64}),
     "num_key_value_heads = 64 must divide num_attention_heads = 32"),
    (json.dumps({**LLAMA, "num_key_value_heads": 5}), "num_key_value_heads = 5 must divide num_attention_heads = 32"),
    (json.dumps({**LLAMA, "num_attention_heads": 1e400}).replace("Infinity", "1e400"),
     "'num_attention_heads' must be a positive number, got inf"),
])
def test_a_hostile_config_json_is_one_clear_line(cli, tmp_path, text, message):
    r = cli("solve", "n_params", "--model", config(tmp_path, text))
    assert r.code == 2 and r.err.count("\n") == 1 and message in r.err, r.err
    assert "internal error" not in r.err


def test_a_name_no_file_can_have_is_an_unknown_model(cli):
    r = cli("solve", "n_params", "--model", "a" * 300)
    assert r.code == 2 and r.err.startswith("error: unknown model 'aaaa") and r.err.count("\n") == 1


def test_a_model_name_from_a_config_is_fit_to_print(tmp_path):
    path = config(tmp_path, json.dumps({**LLAMA, "_name_or_path": "\x1b[31mevil\nname" + "x" * 200}))
    r = symcalc.solve("n_params", model=path)
    assert r.presets["model"] == "[31mevil name" + "x" * 64 + "..."


def test_a_config_that_is_not_a_regular_file_is_refused(tmp_path):
    fifo = tmp_path / "config.json"
    os.mkfifo(fifo)           # reading it would wait for ever
    with pytest.raises(MalformedValueError, match="config.json '.*config.json': not a file"):
        symcalc.solve("n_params", model=str(fifo))


# ---- evaluation ----------------------------------------------------------------------------------

def test_an_overflow_in_evaluation_is_a_clear_refusal(cli):
    # 2^(2^64) as a Python float raised OverflowError from inside a compiled formula
    r = cli("solve", "mantissa_bits", "exponent_bits=64", "max_normal=64")
    assert r.code == 2 and r.err.count("\n") == 1 and "internal error" not in r.err
    assert r.err.startswith("error: no value of mantissa_bits in [0, inf) satisfies max_normal = ")


def test_a_value_beyond_floating_point_in_evaluation_names_the_step(cli):
    r = cli("solve", "max_normal", "exponent_bits=1e6", "mantissa_bits=3")
    assert r.err == ("error: exponent_bias cannot be computed (float_exponent_bias): the values are beyond the range "
                     "of floating point (about 1e-308 to 1e308); check their units and exponents\n")


def test_the_same_formulas_still_answer_in_range(cli):
    # IEEE double: 11 exponent bits, 52 fraction bits -> 1.798e308
    assert cli("solve", "max_normal", "exponent_bits=11", "mantissa_bits=52", "--brief").out == "max_normal = 1.798e308\n"


# ---- formula files -------------------------------------------------------------------------------

@pytest.mark.parametrize("text, message", [
    ("x = " + "[" * 100_000 + "]" * 100_000 + "\n", "deep.toml: nested too deeply to be a formula file"),
    ("[meta]\nx = " + "{a = " * 5000 + "1" + "}" * 5000 + "\n", "deep.toml: nested too deeply to be a formula file"),
    ("# " + "x" * (9 << 20) + "\n", "deep.toml: larger than 8 MB; not a formula file"),
])
def test_a_formula_file_nested_or_oversized_is_one_clear_line(cli, tmp_path, text, message):
    (tmp_path / "deep.toml").write_text(text)
    r = cli("solve", "n_gpus", "dp=8", "--formulas", str(tmp_path / "deep.toml"))
    assert (r.code, r.err) == (2, f"error: {message}\n")


def test_a_formula_path_that_is_not_a_file(cli):
    assert cli("solve", "n_gpus", "dp=8", "--formulas", "/dev/zero").err == (
        "error: /dev/zero is not a formula file (not a regular file or a directory)\n")
    r = cli("solve", "n_gpus", "dp=8", "--formulas", "a" * 300)
    assert r.code == 2 and r.err.startswith("error: cannot read formula file aaa") and r.err.endswith(
        ": File name too long\n")


@pytest.mark.parametrize("option", ["--model", "--hardware", "--to", "--formulas"])
def test_an_option_given_empty_is_refused_not_ignored(cli, tmp_path, monkeypatch, option):
    # --formulas "" used to load every *.toml of the current directory; --model "" answered without it
    monkeypatch.chdir(tmp_path)
    (tmp_path / "stray.toml").write_text("not = [a formula file")
    r = cli("solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64",
            "peak_flops=1979 TFLOP/s", option, "")
    assert (r.code, r.err) == (2, f"error: Invalid value for '{option}': needs a value (got an empty one)\n")


def test_symbolic_work_that_recurses_too_deep_is_refused_and_clears_sympys_caches(monkeypatch, cli):
    # a RecursionError inside sympy can leave its caches half-written; a long-lived process
    # (serve, a notebook, the random-question benchmark) then failed its next questions with
    # internal errors. The question is refused in one line, the caches cleared, and the next
    # question answered as a fresh process would (6 x 7e9 = 4.2e10 FLOP a token)
    import sympy.core.cache

    from symcalc.query import solve as solving
    cleared = []
    monkeypatch.setattr(sympy.core.cache, "clear_cache", lambda: cleared.append(True))

    def too_deep(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded in comparison")
    real = solving._solve_question
    monkeypatch.setattr(solving, "_solve_question", too_deep)
    with pytest.raises(symcalc.SymcalcError) as e:
        symcalc.solve("flops_per_token", n_params=7e9)
    assert e.value.kind == "too_complex" and cleared == [True]
    run = cli("solve", "flops_per_token", "n_params=7e9", "--json")
    assert run.code == 2 and run.json()["error"]["kind"] == "too_complex"
    monkeypatch.setattr(solving, "_solve_question", real)
    assert symcalc.solve("flops_per_token", n_params=7e9).value == pytest.approx(4.2e10)


def test_an_option_given_as_a_value_says_it_is_an_option(cli):
    # a new user writes zero_stage=3 beside the values: the closest quantity name (layers_per_stage)
    # was suggested; it is an option, set with --option, and the answer says so in one line
    r = cli("solve", "model_state_memory", "n_params=7e9", "dp=64", "zero_stage=3")
    assert r.code == 2    # a usage error, as an unknown name is
    assert r.err.strip() == ("error: zero_stage is an option, not a quantity: set it with --option zero_stage=... "
                                "(one of 0, 1, 2, 3; options={'zero_stage': ...} in Python)")
    with pytest.raises(symcalc.SymcalcError, match="zero_stage is an option"):
        symcalc.solve("model_state_memory", {"n_params": 7e9, "dp": 64, "zero_stage": 3})
    # a sweep varies quantities: an option's values are compared, or searched by plan
    r = cli("sweep", "model_state_memory", "n_params=7e9", "dp=64", "--vary", "zero_stage=0,1,2,3", "--json")
    assert r.code != 0
    assert "a sweep varies quantities" in json.loads(r.out)["error"]["message"]


def test_an_impossible_mfu_says_what_the_given_values_would_have_to_be(cli):
    # Llama 3 70B on its 15T tokens in 30 days on 1,024 H100s: 6 x 70.55e9 x 15e12 FLOP over
    # 1,024 x 989.4 TFLOP/s x 2,592,000 s is an MFU of 241.8 %; "what must change" is said at the
    # bound: 6.3498e24 FLOP / (989.4 TFLOP/s x 2,592,000 s) = 2,476.02 GPUs, 2,477 whole (rounded
    # up, away from the 1,024 given), or 30 x 2.418 = 72.54 days
    r = cli("solve", "mfu", "--model", "llama3-70b", "--hardware", "h100", "n_gpus=1024", "train_time=30 day")
    assert r.code != 0 and r.err.startswith("error: mfu = 241.8 % is outside its bounds (0 %, 100 %]")
    assert r.err.rstrip().endswith("; at mfu = 100 % it would take n_gpus = 2477 (not 1024), or "
                                   "train_time = 72.54 day (not 30 day)")
