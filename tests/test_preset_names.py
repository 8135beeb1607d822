"""A preset name is a preset: an argument is read as a file only when it looks like a path (a
separator, a leading ``.`` or ``~``, an extension), as pip and git read theirs. A file in the
working folder named like a preset (``h100``, ``llama3-8b``) used to replace the built-in one
without a word; now it is ignored unless written ``./h100``, and an unknown name that is a file
here says so."""

from __future__ import annotations

import json

import pytest

import symcalc
from symcalc.errors import MalformedValueError, UnknownNameError
from symcalc.library.presets import all_presets, find_preset, looks_like_path

# a profile on the built-in h100 whose BF16 peak is half the datasheet's (989.4 -> 494.7)
HALF_PEAK = """[h100_half]
title = "H100 at half the BF16 peak"
source = "a test"
base = "h100"
peak_flops.bf16 = { value = "494.7 TFLOP/s", source = "half the datasheet's" }
"""


@pytest.mark.parametrize("name, path", [
    ("h100", False), ("llama3-8b", False), ("llama3.1-8b", False), ("mixtral-8x7b-v0.1", False),
    ("h100_sxm", False), ("./h100", True), ("~/gpus.toml", True), ("~h100", True), ("ours.toml", True),
    ("config.json", True), ("cfg/llama", True), ("cfg\\llama", True), (".hidden", True), ("../x", True),
])
def test_the_shape_of_an_argument_says_whether_it_is_a_file(name, path):
    # the rule reads the text only: no file system (the names above mostly exist nowhere)
    assert looks_like_path(name) is path


def test_no_built_in_name_looks_like_a_path():
    # else that preset could never be named: the rule and the data must agree
    names = [n for kind in all_presets().values() for p in kind.values() for n in (p.key, *p.aliases)]
    assert len(names) > 50
    assert [n for n in names if looks_like_path(n)] == []


def test_a_file_named_like_a_preset_does_not_replace_it(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h100").write_text(HALF_PEAK)
    (tmp_path / "llama3-8b").write_text(json.dumps({"num_hidden_layers": 2, "hidden_size": 64,
                                                    "num_attention_heads": 4, "vocab_size": 100}))
    assert find_preset("hardware", "h100").key == "h100_sxm"
    assert find_preset("model", "llama3-8b").key == "llama3_8b"
    # the built-in BF16 peak (datasheet 989.4 TFLOP/s), not the file's 494.7
    r = cli("solve", "peak_flops", "--hardware", "h100", "--json")
    assert r.code == 0 and json.loads(r.out)["value"] == pytest.approx(989.4)
    assert symcalc.solve("peak_flops", hardware="h100").base_value == pytest.approx(989.4e12)
    # written as a path, the file is read
    assert find_preset("hardware", "./h100").key == "h100_half"
    r = cli("solve", "peak_flops", "--hardware", "./h100", "--json")
    assert r.code == 0 and json.loads(r.out)["value"] == pytest.approx(494.7)
    assert find_preset("model", "./llama3-8b").file == ""     # a config.json: no profile file
    assert find_preset("model", "./llama3-8b").values["n_layers"][0] == "2"


def test_an_unknown_name_that_is_a_file_here_says_to_write_dot_slash(tmp_path, monkeypatch, cli):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h100x").write_text(HALF_PEAK)
    with pytest.raises(UnknownNameError) as e:
        find_preset("hardware", "h100x")
    assert "h100" in e.value.suggestions
    assert "write ./h100x to read it as a hardware profile" in e.value.message
    r = cli("solve", "peak_flops", "--hardware", "h100x")
    assert r.code == 2 and r.err.count("\n") == 1 and "write ./h100x" in r.err
    r = cli("solve", "peak_flops", "--hardware", "h100x", "--json")
    assert r.code == 2 and "write ./h100x" in json.loads(r.out)["error"]["message"]
    # with no such file, no such hint
    with pytest.raises(UnknownNameError) as e:
        find_preset("hardware", "h100y")
    assert "./h100y" not in e.value.message and "h100" in e.value.suggestions


def test_a_path_is_read_as_a_file_even_when_no_file_is_there(tmp_path, monkeypatch):
    # a typo in a path is "no such file", never a built-in preset's answer
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MalformedValueError, match="no such file"):
        find_preset("hardware", "./h100")
    with pytest.raises(MalformedValueError, match="no such file"):
        find_preset("model", "llama3-8b.json")


def test_a_tilde_is_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "ours.toml").write_text(HALF_PEAK)
    assert find_preset("hardware", "~/ours.toml").key == "h100_half"


def test_the_plan_reads_names_by_the_same_rule(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "h100").write_text("not a profile")     # would fail to read if it were taken
    with pytest.raises(MalformedValueError, match="not valid TOML"):
        symcalc.plan("llama3-8b", "./h100", gpus=8)


def test_the_server_takes_built_in_names_only():
    pytest.importorskip("starlette")
    from symcalc.serve.worker import RequestError, _preset
    assert _preset("h100", "hardware") == "h100"
    for name in ("./h100", "~/h100", "ours.toml", "/etc/passwd", "cfg\\h100"):
        with pytest.raises(RequestError, match="not a file"):
            _preset(name, "hardware")
    with pytest.raises(UnknownNameError) as e:
        _preset("llama3-8", "model")
    assert "llama3-8b" in e.value.suggestions and "./" not in e.value.message


def test_a_tilde_of_no_user_is_no_such_file():
    # Path.expanduser raises for an unknown user: one line, not an internal error
    with pytest.raises(MalformedValueError, match="no such file"):
        find_preset("hardware", "~no_such_user_here/h100.toml")


def test_a_preset_is_found_by_its_name_as_people_write_it():
    # spaces, hyphens and underscores are one separator, and case does not matter: the names of
    # the datasheet and the model card find the presets
    assert find_preset("hardware", "H100 SXM").key == "h100_sxm"
    assert find_preset("model", "Llama 3.1 70B").key == "llama3_1_70b"
    assert find_preset("model", "  llama_3.1-8b ").key == "llama3_1_8b"
