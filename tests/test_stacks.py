"""Training stacks: option values that set other options' defaults (options), restrict their
values (supports) and require conditions of the given values (requires).

The library here is tests/data/stacks/toy_library.toml alone: a `stack` option like the one
formulas/stacks.toml declares, and Korthikanti et al.'s activation memory per layer, 34 s b h
bytes under FlashAttention plus 5 a s^2 b under eager attention (s = 4096 tokens, b = 8,
h = 5120, a = 40: the seed examples' question, 32.5478 GB eager, 5.70425 GB flash).
"""

from __future__ import annotations


import numpy as np
import pytest

import symcalc
from helpers import DATA
from symcalc import cache
from symcalc.errors import BadOptionValueError, LibraryError
from symcalc.library.loading import load_library
from symcalc.query.implied import resolve_options
from symcalc.query.values import GivenValue

STACKS = DATA / "stacks"
TOY = STACKS / "toy_library.toml"
LIB = load_library([TOY])
GIVEN = dict(micro_batch_size=8, seq_len="4096 token", d_model=5120, n_heads=40)
FLASH = 4096 * 8 * 5120 * 34                                # bytes: 5.70425 GB
EAGER = 4096 * 8 * 5120 * (34 + 5 * 40 * 4096 / 5120)      # bytes: 32.5478 GB


def solve(target, options=None, library=LIB, **values):
    return symcalc.solve(target, library=library, options=options or {}, **{**GIVEN, **values})


def toy_variant(tmp_path, old: str = "", new: str = "", append: str = ""):
    """The toy library with one edit (``old`` must occur in it once) or more text at its end."""
    text = TOY.read_text()
    assert text.count(old) == 1 or not old
    path = tmp_path / "toy_variant.toml"
    path.write_text((text.replace(old, new) if old else text) + append)
    return load_library([path], use_cache=False)


# -- when a stack's defaults apply -------------------------------------------------------------

def test_a_question_that_never_reaches_the_stack_keeps_the_library_defaults():
    # the seed examples' activation memory per layer uses the textbook eager-attention formula:
    # the default stack sets attention_kernel = flash, but nothing in this question depends on
    # the stack, so the library's own default (eager) holds and the stack is not mentioned
    r = solve("activation_memory_per_layer")
    assert r.value * 1e9 == pytest.approx(EAGER, rel=1e-12) and r.value == pytest.approx(32.5478, rel=1e-6)
    assert r.options == {"attention_kernel": "eager"} and r.assumptions == [] and r.stacks == {}
    assert "stack" not in r.all_options and r.all_options["zero_stage"] == "0"


def test_a_given_stack_applies_its_defaults_and_says_which_ones_the_answer_used():
    r = solve("activation_memory_per_layer", {"stack": "megatron-core"})
    assert r.value * 1e9 == pytest.approx(FLASH, rel=1e-12)          # 34 s b h: no s x s scores
    assert r.options == {"attention_kernel": "flash", "stack": "megatron-core"}
    assert r.stacks == {"stack": True}
    # the stack also sets zero_stage = 1 and overlap_style = layerwise, which this answer does not use
    assert r.assumptions == [{"name": "attention_kernel", "value": "flash", "source": "set by stack=megatron-core",
                              "kind": "set_by_option", "option": "stack", "option_value": "megatron-core"}]


def test_a_question_that_depends_on_the_stack_takes_its_defaults_and_says_so(cli, monkeypatch):
    # stack_activation_memory holds only under a stack (its formula's when): the default stack,
    # megatron-core, is in force, with its attention_kernel = flash and stack_memory_factor = 0.5
    r = solve("stack_activation_memory")
    assert r.value * 1e9 == pytest.approx(0.5 * FLASH, rel=1e-12)
    assert [(a["name"], a["value"], a["kind"]) for a in r.assumptions] == [
        ("stack", "megatron-core", "stack"), ("attention_kernel", "flash", "set_by_option")]
    assert r.stacks == {"stack": False}
    assert r.defaults_used["stack_memory_factor"]["option"] == "stack"
    monkeypatch.setattr("symcalc.commands.shared.library", lambda files: LIB)
    args = ("solve", "stack_activation_memory", "micro_batch_size=8", "seq_len=4096 token", "d_model=5120",
            "n_heads=40")
    lines = cli(*args).out.splitlines()
    assert lines[:3] == [
        "stack_activation_memory = 2.852 GB",
        "  assuming stack = megatron-core (the default stack: the question depends on what a stack sets; "
        "--stack NAME to change, --stack textbook for the source documents' physics)",
        "  assuming attention_kernel = flash (set by stack=megatron-core; --option attention_kernel=... to change)"]
    d = cli(*args, "--json").json()
    assert [a["name"] for a in d["assumptions"]] == ["stack", "attention_kernel"]
    assert d["assumptions"][1]["option"] == "stack" and d["options"]["stack"] == "megatron-core"


def test_another_stack_brings_its_own_defaults():
    # Megatron-LM 2021 ran eager attention and sets no memory factor (the quantity's default, 1)
    r = solve("stack_activation_memory", {"stack": "megatron-lm-2021"})
    assert r.value * 1e9 == pytest.approx(EAGER, rel=1e-12)
    assert [a["name"] for a in r.assumptions] == ["attention_kernel"]


def test_an_option_given_explicitly_wins_over_the_stacks_default():
    r = solve("stack_activation_memory", {"attention_kernel": "eager"})
    assert r.value * 1e9 == pytest.approx(0.5 * EAGER, rel=1e-12)      # the stack's factor, eager attention
    assert [a["name"] for a in r.assumptions] == ["stack"]               # attention_kernel was given


def given(name: str, value: float, origin: str = "") -> GivenValue:
    return GivenValue(name, str(value), float(value), origin)


def test_the_precedence_of_an_options_value():
    # explicit > implied by the user's values > a preset's options > implied by a preset's values
    # > the default a stack's value sets > the option's own default
    def style(explicit=None, presets=None, knowns=None, without=frozenset()):
        r = resolve_options(LIB, explicit or {}, presets or {}, knowns or {}, without=without)
        return r.values["overlap_style"], r.set_by.get("overlap_style")

    assert style() == ("layerwise", ("stack", "megatron-core"))                  # the default stack's
    assert style(without=frozenset({"stack"})) == ("none", None)                  # the option's own
    assert style({"stack": "megatron-lm-2021"}) == ("none", ("stack", "megatron-lm-2021"))
    assert style(knowns={"bucket_count": given("bucket_count", 4, "hardware box: test")}) == ("bucketed", None)
    assert style(presets={"overlap_style": "none"}, knowns={}) == ("none", None)
    assert style(presets={"overlap_style": "none"}, knowns={"bucket_count": given("bucket_count", 4)}) \
        == ("bucketed", None)
    assert style({"overlap_style": "layerwise", "stack": "megatron-lm-2021"}) == ("layerwise", None)


# -- what a stack supports -----------------------------------------------------------------------

@pytest.mark.parametrize("options,message", [
    ({"stack": "fsdp", "pipeline_schedule": "interleaved"},
     "option pipeline_schedule=interleaved is not supported by stack=fsdp (it runs: 1f1b)"),
    ({"stack": "fsdp", "zero_stage": "0"}, "option zero_stage=0 is not supported by stack=fsdp (it runs: 2, 3)"),
])
def test_an_option_value_the_stack_does_not_run_is_refused_in_one_line(options, message):
    with pytest.raises(BadOptionValueError) as e:
        solve("activation_memory_per_layer", options)
    # the refusal, then the stacks that do run the value (test_a_refusal_names_the_stacks_that_run_it)
    assert e.value.message.split("; ")[0] == message


def test_supports_checks_only_the_options_that_matter():
    # virtual_stages = 2 implies the interleaved schedule, which FSDP does not run; but this
    # question does not use the schedule, and the user did not give it: nothing to refuse
    r = solve("stack_activation_memory", {"stack": "fsdp"}, virtual_stages=2)
    assert r.value * 1e9 == pytest.approx(FLASH, rel=1e-12)            # fsdp sets no memory factor: 1
    assert r.all_options["pipeline_schedule"] == "interleaved"
    # ZeRO-3 is FSDP's own default, and it runs it
    assert solve("activation_memory_per_layer", {"stack": "fsdp", "zero_stage": "3"}).value * 1e9 \
        == pytest.approx(FLASH, rel=1e-12)


# -- what a stack requires -------------------------------------------------------------------------

def test_given_values_that_break_a_stacks_requirement_are_refused_in_one_line():
    with pytest.raises(BadOptionValueError) as e:
        solve("activation_memory_per_layer", {"stack": "fsdp"}, tp=2)
    assert e.value.message == ("stack=fsdp requires tp == 1 (PyTorch FSDP alone is data parallel only): "
                               "tp = 2 was given")
    # tp = 1 keeps it; without tp the condition cannot be checked and does not fail
    assert solve("activation_memory_per_layer", {"stack": "fsdp"}, tp=1).value * 1e9 == pytest.approx(FLASH)
    assert solve("activation_memory_per_layer", {"stack": "fsdp"}).value * 1e9 == pytest.approx(FLASH)


def test_any_point_of_an_array_that_breaks_a_requirement_is_refused():
    with pytest.raises(BadOptionValueError) as e:
        solve("activation_memory_per_layer", {"stack": "fsdp"}, tp=np.array([1, 2, 4]))
    assert e.value.message.endswith("tp = 2 at 2 of 3 points was given")


def test_a_preset_value_that_breaks_a_requirement_is_named_with_its_preset(tmp_path):
    profile = tmp_path / "box.toml"
    profile.write_text('[box]\ntitle = "a box that runs tp 2"\nsource = "test"\n'
                       'values.tp = { value = "2", source = "the box wires two GPUs per tensor group" }\n')
    with pytest.raises(BadOptionValueError) as e:
        solve("activation_memory_per_layer", {"stack": "fsdp"}, hardware=str(profile))
    assert e.value.message.endswith("tp = 2 (from hardware box) was given")


def test_a_stack_in_force_by_default_is_checked_only_where_the_question_reaches_it(tmp_path):
    lib = toy_variant(tmp_path, 'default = "megatron-core"', 'default = "fsdp"')
    # activation memory per layer does not reach the stack: tp = 2 and interleaving stand
    r = solve("activation_memory_per_layer", {"pipeline_schedule": "interleaved"}, library=lib, tp=2)
    assert r.value * 1e9 == pytest.approx(EAGER, rel=1e-12)
    with pytest.raises(BadOptionValueError) as e:
        solve("stack_activation_memory", library=lib, tp=2)
    assert e.value.message == ("stack=fsdp (the default of option stack) requires tp == 1 (PyTorch FSDP alone is "
                               "data parallel only): tp = 2 was given")


def test_sweeps_and_new_values_meet_the_stacks_requirements():
    with pytest.raises(BadOptionValueError) as e:
        symcalc.sweep("stack_activation_memory", GIVEN, vary={"tp": "1,2"}, options={"stack": "fsdp"}, library=LIB)
    assert "requires tp == 1" in e.value.message and "at 1 of 2 points" in e.value.message
    # the compiled derivation for new values (its chunked kernel for large arrays) checks them too
    r = solve("stack_activation_memory", {"stack": "fsdp"}, tp=1)
    values = {**GIVEN, "tp": np.ones(1 << 15, dtype=np.int64)}
    assert np.allclose(r.function(**values).magnitude * 1e9, FLASH)
    values["tp"][-1] = 2
    with pytest.raises(BadOptionValueError):
        r.function(**values)


def test_compare_two_stacks():
    c = symcalc.compare("stack_activation_memory", GIVEN, vs_options={"stack": "megatron-lm-2021"}, library=LIB)
    # megatron-core (the default): flash attention, half kept; Megatron-LM 2021: eager, all kept
    assert c.a.value * 1e9 == pytest.approx(0.5 * FLASH, rel=1e-12)
    assert c.b.value * 1e9 == pytest.approx(EAGER, rel=1e-12)


# -- the on-disk cache ---------------------------------------------------------------------------------

def test_the_two_passes_never_serve_a_stale_derivation_from_the_disk_cache(tmp_path, monkeypatch):
    monkeypatch.setenv(cache.ENV_DIR, str(tmp_path / "cache"))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    questions = [("activation_memory_per_layer", {}, EAGER), ("activation_memory_per_layer", {"stack": "megatron-core"},
                                                               FLASH), ("stack_activation_memory", {}, 0.5 * FLASH)]
    cold = load_library([TOY])
    for target, options, expected in questions:
        assert solve(target, options, library=cold).value * 1e9 == pytest.approx(expected, rel=1e-12)
    # the first question derived twice (with the stack's defaults, then without): its two
    # derivations are kept under their own options; the second question is the first pass's
    stored = sorted((tmp_path / "cache").glob("derivation-*.pickle"))
    assert len(stored) == 3
    warm = load_library([TOY])                # read from the cache, no derivation in memory
    assert warm is not cold and not warm.derivation_cache
    for target, options, expected in reversed(questions):
        r = solve(target, options, library=warm)
        assert r.value * 1e9 == pytest.approx(expected, rel=1e-12)
    assert sorted((tmp_path / "cache").glob("derivation-*.pickle")) == stored
    assert [s.formulas[0].id for s in solve("activation_memory_per_layer", library=warm).steps] == ["act_layer_eager"]


# -- the command line ---------------------------------------------------------------------------------

@pytest.fixture
def toy_cli(cli, monkeypatch):
    monkeypatch.setattr("symcalc.commands.shared.library", lambda files: LIB)
    return cli


ARGS = ("solve", "activation_memory_per_layer", "micro_batch_size=8", "seq_len=4096 token", "d_model=5120",
        "n_heads=40")


def test_stack_on_the_command_line_is_option_stack(toy_cli):
    by_flag = toy_cli(*ARGS, "--stack", "fsdp", "--json").json()
    by_option = toy_cli(*ARGS, "--option", "stack=fsdp", "--json").json()
    assert by_flag["value"] * 1e9 == pytest.approx(FLASH, rel=1e-12) and by_flag == by_option
    assert toy_cli(*ARGS, "--stack", "fsdp", "--option", "stack=fsdp").code == 0


@pytest.mark.parametrize("extra,kind,message", [
    (("--stack", "megatorn"), "bad_option_value",
     "unknown stack 'megatorn'. Did you mean: megatron-core? Stacks: megatron-core, fsdp, megatron-lm-2021 "
     "(see `symcalc show stack`)"),
    (("--stack", "fsdp", "--option", "stack=megatron-core"), "usage",
     "--stack fsdp and --option stack=megatron-core disagree; give one"),
    (("--stack", "fsdp", "tp=2"), "bad_option_value",
     "stack=fsdp requires tp == 1 (PyTorch FSDP alone is data parallel only): tp = 2 was given"),
    (("--stack", "fsdp", "--option", "pipeline_schedule=interleaved"), "bad_option_value",
     "option pipeline_schedule=interleaved is not supported by stack=fsdp (it runs: 1f1b); --stack megatron-core "
     "or --stack megatron-lm-2021 run it"),
])
def test_bad_stacks_are_one_line_and_exit_2(toy_cli, extra, kind, message):
    run = toy_cli(*ARGS, *extra)
    assert run.code == 2 and run.err == f"error: {message}\n" and "Traceback" not in run.out + run.err
    run = toy_cli(*ARGS, *extra, "--json")
    assert run.code == 2 and run.json() == {"error": {"kind": kind, "message": message}}


def test_stack_with_a_library_without_the_option_is_one_line(cli, monkeypatch):
    monkeypatch.setattr("symcalc.commands.shared.library", lambda files: LIB)
    monkeypatch.setattr("symcalc.query.requests.STACK_OPTION", "runtime")   # read where both faces check the stack
    run = cli(*ARGS, "--stack", "fsdp")
    assert run.code == 2 and run.err == ("error: --stack: the formula library has no option 'runtime' (training "
                                         "stacks are declared as its values; see `symcalc list options`)\n")


@pytest.mark.parametrize("command", [
    ("sweep", "stack_activation_memory", "micro_batch_size=8", "seq_len=4096 token", "d_model=5120",
     "--vary", "n_heads=32,40"),
    ("compare", "stack_activation_memory", "micro_batch_size=8", "seq_len=4096 token", "d_model=5120",
     "n_heads=40", "--vs", "attention_kernel=eager"),
    ("check", "micro_batch_size=8", "seq_len=4096 token", "d_model=5120", "n_heads=40",
     "stack_activation_memory=5.70425344 GB"),
])
def test_every_command_with_options_takes_stack(toy_cli, command):
    run = toy_cli(*command, "--stack", "fsdp", "--json")
    assert run.code == 0, run.out + run.err
    unknown = toy_cli(*command, "--stack", "fsdpp")
    assert unknown.code == 2 and "Did you mean: fsdp?" in unknown.err


def test_show_stack_lists_what_each_value_sets_supports_and_requires(toy_cli):
    d = toy_cli("show", "stack", "--json").json()
    fsdp = d["values"]["fsdp"]
    assert fsdp["options"] == {"attention_kernel": "flash", "zero_stage": "3"}
    assert fsdp["supports"] == {"pipeline_schedule": ["1f1b"], "zero_stage": ["2", "3"]}
    assert fsdp["requires"] == [{"when": "tp == 1", "why": "PyTorch FSDP alone is data parallel only"}]
    assert d["values"]["megatron-core"]["sets"] == {"stack_memory_factor": "0.5"}
    text = toy_cli("show", "stack").out
    assert "options: attention_kernel=flash, zero_stage=3" in text and "supports: pipeline_schedule 1f1b" in text
    assert "requires: tp == 1" in text
    # the options a stack sets say so
    kernel = toy_cli("show", "attention_kernel", "--json").json()
    assert kernel["defaults_by_option"] == {"stack=megatron-core": "flash", "stack=fsdp": "flash",
                                           "stack=megatron-lm-2021": "eager"}


# -- the data is checked when it is loaded -------------------------------------------------------------

@pytest.mark.parametrize("old,new,message", [
    ('options = { attention_kernel = "flash", zero_stage = "3" }', 'options = { atention_kernel = "flash" }',
     "value 'fsdp': options names unknown option 'atention_kernel'. Did you mean: attention_kernel?"),
    ('options = { attention_kernel = "flash", zero_stage = "3" }', 'options = { attention_kernel = "fast" }',
     "value 'fsdp': options: option attention_kernel has no value 'fast' (values: ['eager', 'flash'])"),
    ('options = { attention_kernel = "flash", zero_stage = "3" }', 'options = { stack = "megatron-core" }',
     "value 'fsdp': options names its own option 'stack'"),
    ('supports = { pipeline_schedule = ["1f1b"], zero_stage = ["2", "3"] }', 'supports = { zero_stage = ["2"] }',
     "value 'fsdp': supports zero_stage = ['2'], but zero_stage defaults to '3' under it; set it in options"),
    ('supports = { pipeline_schedule = ["1f1b"], zero_stage = ["2", "3"] }', 'supports = { zero_stage = [] }',
     "value 'fsdp': supports.zero_stage is a list of its values"),
    ('requires = [{ when = "tp == 1", why = "PyTorch FSDP alone is data parallel only" }]',
     'requires = [{ when = "tp == 1" }]', "each requires entry is { when = \"tp == 1\", why = \"the reason\" }"),
    ('requires = [{ when = "tp == 1", why = "PyTorch FSDP alone is data parallel only" }]',
     'requires = [{ when = "tpp == 1", why = "x" }]', "unknown quantity 'tpp'. Did you mean: tp?"),
    ('requires = [{ when = "tp == 1", why = "PyTorch FSDP alone is data parallel only" }]',
     'requires = [{ when = "tp == seq_len", why = "x" }]', "the two sides of 'tp == seq_len' differ in dimension"),
    # a requirement scoped to other options' values names real ones
    ('requires = [{ when = "tp == 1", why = "PyTorch FSDP alone is data parallel only" }]',
     'requires = [{ when = "tp == 1", with = { zero_stag = ["3"] }, why = "x" }]',
     "requires with names unknown option 'zero_stag'. Did you mean: zero_stage?"),
    ('requires = [{ when = "tp == 1", why = "PyTorch FSDP alone is data parallel only" }]',
     'requires = [{ when = "tp == 1", with = { zero_stage = ["4"] }, why = "x" }]',
     "requires with: option zero_stage has no value '4'"),
    ('requires = [{ when = "tp == 1", why = "PyTorch FSDP alone is data parallel only" }]',
     'requires = [{ when = "tp == 1", with = { zero_stage = "3" }, why = "x" }]',
     "requires with.zero_stage is a list of its values"),
])
def test_malformed_stack_data_fails_the_load_with_where_and_why(tmp_path, old, new, message):
    with pytest.raises(LibraryError) as e:
        toy_variant(tmp_path, old, new)
    assert e.value.message.startswith("toy_variant.toml: option 'stack' value 'fsdp'") and message in e.value.message


def test_a_stack_is_set_by_no_other_option_and_each_option_by_one_stack(tmp_path):
    second = ('\n[options.runtime]\ndescription = "another stack"\ndefault = "a"\n'
              '[options.runtime.values.a]\ndescription = "a"\noptions = { {} }\n')
    with pytest.raises(LibraryError) as e:
        toy_variant(tmp_path, append=second.replace("{ {} }", '{ attention_kernel = "flash" }'))
    assert "option attention_kernel is already set by option stack; one option sets another's default" \
        in e.value.message
    with pytest.raises(LibraryError) as e:
        toy_variant(tmp_path, append=second.replace("{ {} }", '{ stack = "fsdp" }'))
    assert "option 'stack' sets other options' defaults and is set by option runtime: one level only" \
        in e.value.message


# -- the planner searches what the stack runs ------------------------------------------------------------

RUNTIME = STACKS / "runtime.toml"


def test_the_planner_searches_only_what_the_stack_runs():
    lib = load_library(extra=[RUNTIME])
    plan = symcalc.plan("llama3-8b", "h100", 64, global_batch_size=512, options={"runtime": "data-parallel-only"},
                        library=lib, top=20)
    assert plan.rows
    for row in plan.rows:
        assert row.layout["tp"] == 1 and row.layout["virtual_stages"] == 1
        assert row.options["sequence_parallel"] == "false" and row.options["pipeline_schedule"] == "1f1b"
    assert plan.searched_options["sequence_parallel"] == ["false"]
    reason = "runtime=data-parallel-only requires tp == 1 (it shards over data-parallel ranks only)"
    assert plan.rejected[reason] > 0
    with pytest.raises(BadOptionValueError) as e:
        symcalc.plan("llama3-8b", "h100", 64, global_batch_size=512, library=lib,
                     options={"runtime": "data-parallel-only", "pipeline_schedule": "interleaved"})
    assert e.value.message.split("; ")[0] == ("option pipeline_schedule=interleaved is not supported by "
                                              "runtime=data-parallel-only (it runs: 1f1b)")


def test_the_attention_kernel_an_answer_assumes_is_said_first_and_once():
    # In the real library a question about a run (a model or hardware named) is answered as the
    # default stack runs it, memory and step time alike: cuDNN attention, said once, as set by
    # the stack, after the stack itself (the answer's first line says which, and why)
    layout = dict(tp=1, pp=1, dp=8, n_gpus=8, global_batch_size=64, micro_batch_size=1, seq_len="8192 token")
    for target in ("activation_memory_per_layer", "step_time"):
        r = symcalc.solve(target, layout, model="llama3-8b", hardware="h100")
        assert r.assumptions[0]["name"] == "stack" and r.assumptions[0]["value"] == "megatron-core"
        assert r.assumptions[0]["kind"] == "stack" and "names a model or hardware" in r.assumptions[0]["source"]
        kernel = [a for a in r.assumptions if a["name"] == "attention_kernel"]
        assert kernel == [{"name": "attention_kernel", "value": "cudnn", "source": "set by stack=megatron-core",
                           "kind": "set_by_option", "option": "stack", "option_value": "megatron-core"}]
        assert "attention_score_memory_per_layer" not in r.values     # no s x s scores are kept
    # the seeds' question of the formula's own inputs keeps their eager attention (Korthikanti's
    # s b h (34 + 5 a s / h) = 8192 x 4096 x (34 + 5 x 32 x 8192 / 4096) = 11.88 GB), no stack said
    bare = symcalc.solve("activation_memory_per_layer", seq_len="8192 token", micro_batch_size=1, d_model=4096,
                         n_heads=32)
    assert bare.base_value == pytest.approx(8192 * 4096 * (34 + 5 * 32 * 8192 / 4096), rel=1e-12)
    # of which the scores, their softmax and its dropout mask: 5 a s^2 b = 5 x 32 x 8192^2 bytes
    assert bare.values["attention_score_memory_per_layer"] == pytest.approx(5 * 32 * 8192 ** 2, rel=1e-12)
    assert not [a for a in bare.assumptions if a["name"] == "stack"]
    # naming the textbook stack asks a run as the seeds would: eager attention again (Llama 3 has
    # no dropout: the scores and their softmax, 2 x 32 x 8192^2 bytes = 4.295 GB a layer)
    text = symcalc.solve("activation_memory_per_layer", layout, model="llama3-8b", hardware="h100",
                         options={"stack": "textbook"})
    assert text.values["attention_score_memory_per_layer"] == pytest.approx(2 * 32 * 8192 ** 2, rel=1e-12)


def test_an_fp8_recipe_the_stack_lacks_is_one_line_naming_both(cli):
    """torchtitan's FP8 is torchao's (tensorwise, rowwise) or MX (mxfp8): DeepSeek's blockwise
    recipe is refused naming the stack and what it runs; Megatron-Core runs it (its --fp8-recipe
    blockwise) and answers."""
    args = ("solve", "step_time", "--model", "llama3-8b", "--hardware", "h100", "dp=8", "global_batch_size=64",
            "micro_batch_size=1", "--option", "precision=fp8", "--option", "fp8_recipe=blockwise")
    run = cli(*args, "--stack", "torchtitan")
    # and names the stacks whose recipes list it
    assert run.code == 2 and run.err.strip() == (
        "error: option fp8_recipe=blockwise is not supported by stack=torchtitan (it runs: tensorwise, rowwise, mxfp8); "
        "--stack megatron-core or --stack hai-llm run it")
    assert cli(*args, "--stack", "megatron-core", "--brief").code == 0


def test_show_stack_says_a_scoped_requirement_with_its_scope(cli):
    """DeepSpeed's pp == 1 binds only under ZeRO-2 and ZeRO-3 (its PipelineEngine asserts a
    stage below 2): `show stack` says the scope in text and JSON, so a reader does not take it
    for a rule of every DeepSpeed layout."""
    d = cli("show", "stack", "--json").json()
    req = d["values"]["deepspeed"]["requires"]
    assert req == [{"when": "pp == 1", "why": req[0]["why"], "with": {"zero_stage": ["2", "3"]}}]
    assert "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism" in req[0]["why"]
    text = " ".join(cli("show", "stack").out.split())
    assert "requires: pp == 1 with zero_stage = 2 or 3 (DeepSpeed's" in text.replace("│ ", "").replace(" │", "")


@pytest.mark.parametrize("stack,option,value,runs", [
    ("megatron-core", "optimizer_step", "in_backward", "after_backward"),
    ("megatron-core", "finetune", "qlora", "full, lora"),
    ("torchtitan", "offload", "optimizer", "none, all"),
    ("megatron-lm-2021", "activation_offload", "cpu", "none"),
])
def test_a_fine_tuning_option_the_stack_lacks_is_one_line_naming_both(cli, stack, option, value, runs):
    """Megatron-Core never steps the optimizer inside the backward nor trains QLoRA (its PEFT is
    LoRA), torchtitan offloads all of FSDP2's states or none, Megatron-LM of 2021 offloads
    nothing: each refused in one line naming the option, the stack and what the stack runs."""
    run = cli("solve", "total_memory_per_gpu", "--model", "llama3-8b", "--hardware", "h100", "tp=1", "pp=1",
              "dp=8", "n_gpus=8", "micro_batch_size=1", "global_batch_size=8",
              "--option", f"stack={stack}", "--option", f"{option}={value}")
    assert run.code == 2 and run.err.count("\n") == 1
    assert run.err.strip().split("; ")[0] == \
        f"error: option {option}={value} is not supported by stack={stack} (it runs: {runs})"


def test_a_refusal_names_the_stacks_that_run_it(cli):
    # QLoRA is listed by no stack's supports; the stacks that leave finetune free run it (PyTorch
    # FSDP, torchtune, the textbook physics); Megatron-Core's PEFT is LoRA only
    run = cli("solve", "total_memory_per_gpu", "--model", "llama3-70b", "--hardware", "a100", "micro_batch_size=1",
              "--option", "finetune=qlora")
    assert run.code == 2 and run.err.strip() == (
        "error: option finetune=qlora is not supported by stack=megatron-core (it runs: full, lora); "
        "--stack fsdp or --stack torchtune or --stack textbook run it")
    # and the one named answers
    ok = cli("solve", "total_memory_per_gpu", "--model", "llama3-70b", "--hardware", "a100", "micro_batch_size=1",
             "--option", "finetune=qlora", "--stack", "torchtune", "--json")
    assert ok.code == 0 and ok.json()["value"] < 80     # a 4-bit 70B base: about 35 GB of weights
