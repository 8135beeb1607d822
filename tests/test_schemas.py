"""Every --json output validates against its published JSON Schema (symcalc/schemas/, shipped
in the wheel and shown on the docs' reference page): real outputs of each command, a refusal
of each, and a schema that names every top-level field the output has (a field renamed in
the code and not in its schema fails here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

jsonschema = pytest.importorskip("jsonschema")      # a test extra
from referencing import Registry, Resource          # noqa: E402  (jsonschema's own dependency)

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "symcalc" / "schemas"
RUNS = str(ROOT / "calibration" / "examples" / "h100_fsdp_runs.toml")

COMMANDS = {
    "solve": ["solve", "step_time", "--model", "llama3-8b", "--hardware", "h100", "tp=1", "pp=1", "dp=64",
              "micro_batch_size=2", "global_batch_size=512", "--stack", "fsdp"],
    "sweep": ["sweep", "train_time", "n_params=70e9", "n_tokens=2e12 token", "peak_flops=989 TFLOP/s",
              "--vary", "n_gpus=64:4096:3:log", "--vary", "mfu=30%:60%:2"],
    "compare": ["compare", "model_state_memory", "n_params=7e9", "dp=64", "--option", "zero_stage=2",
                "--vs", "zero_stage=3"],
    "check": ["check", "n_params=70e9", "n_gpus=128", "link_bandwidth=50 GB/s", "allreduce_time=2.8 s"],
    "plan": ["plan", "--model", "llama3-8b", "--hardware", "h100", "--gpus", "64", "--global-batch-size", "512"],
}


def _validator(name: str):
    schemas = {p.name: json.loads(p.read_text()) for p in SCHEMAS.glob("*.schema.json")}
    registry = Registry().with_resources([(k, Resource.from_contents(v)) for k, v in schemas.items()])
    schema = schemas[f"{name}.schema.json"]
    jsonschema.Draft202012Validator.check_schema(schema)
    return schema, jsonschema.Draft202012Validator(schema, registry=registry)


def _valid(name: str, out: dict) -> None:
    schema, validator = _validator(name)
    errors = [f"{'/'.join(map(str, e.path))}: {e.message[:200]}" for e in validator.iter_errors(out)]
    assert not errors, f"{name} --json does not match {name}.schema.json: {errors[:5]}"
    assert set(out) == set(schema["properties"]), f"{name}: fields and schema differ: {set(out) ^ set(schema['properties'])}"


def test_there_is_a_schema_for_every_json_output():
    assert sorted(p.name.split(".")[0] for p in SCHEMAS.glob("*.schema.json")) == sorted(
        [*COMMANDS, "calibrate", "error"])


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_commands_json_validates_against_its_schema(cli, name):
    run = cli(*COMMANDS[name], "--json")
    assert run.code in (0, 1), run.err       # check exits 1: its relation disagrees (2.8 s against 5.56 s)
    _valid(name, json.loads(run.out))


def test_calibrates_json_validates_against_its_schema(cli, tmp_path):
    run = cli("calibrate", RUNS, "-o", str(tmp_path / "p.toml"), "--json")
    assert run.code == 0
    out = json.loads(run.out)
    _valid("calibrate", out)
    assert len(out["runs"]) == 7                   # the example file's seven llm-foundry steps


@pytest.mark.parametrize("args", [["solve", "step_tme"], ["sweep", "train_tme", "--vary", "n_gpus=1:2"],
                                  ["compare", "train_time", "n_gpus=1", "--vs", "n_gpu=2"], ["check", "n_param=7e9"],
                                  ["plan", "--model", "llama3-8b", "--hardware", "h1000", "--gpus", "8"],
                                  ["calibrate", "no_such_runs.toml", "-o", "x.toml"]])
def test_every_commands_refusal_is_the_published_error_object(cli, args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = cli(*args, "--json")
    assert run.code == 2
    out = json.loads(run.out)
    _valid("error", out)
    assert "\n" not in out["error"]["message"] and not list(tmp_path.iterdir())
