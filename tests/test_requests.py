"""One request type per question (symcalc/query/requests.py): the same request sent through the
command line and through the server gets the same answer and the same error, byte for byte where
both print the same JSON; where a message names a field, each face names it as it is written
there (--top on the command line, "top" in JSON), the rest of the words the same."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette", reason="symcalc serve needs the serve extra (pip install '.[test]')")
import warnings  # noqa: E402

with warnings.catch_warnings():     # Starlette 1.x prefers the httpx2 fork for its test client; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient  # noqa: E402

from symcalc.query.requests import CLI, JSON, RequestError, SolveRequest  # noqa: E402
from symcalc.serve.app import create_app  # noqa: E402
from symcalc.serve.worker import WorkerPool  # noqa: E402

MFU_VALUES = {"n_params": "7e9", "tokens_per_second": "150000 token/s", "n_gpus": "64"}


@pytest.fixture(scope="module")
def client():
    pool = WorkerPool(1)
    with TestClient(create_app(pool), base_url="http://127.0.0.1") as c:
        yield c
    pool.close()


def post(client, path, body):
    return client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})


def cli_args(values: dict, options: dict | None = None) -> list[str]:
    return [f"{k}={v}" for k, v in values.items()] + [x for k, v in (options or {}).items()
                                                      for x in ("--option", f"{k}={v}")]


# (what is wrong, the solve request as JSON, the same as command-line arguments, kind, message)
SOLVE_MISTAKES = [
    ("a bad unit", {"target": "mfu", "values": {**MFU_VALUES, "n_params": "7e9x"}, "hardware": "h100"},
     ["mfu", *cli_args({**MFU_VALUES, "n_params": "7e9x"}), "--hardware", "h100"],
     "malformed_value", "n_params: unknown unit 'x' in '7e9x'"),
    ("a bad unit of the answer", {"target": "mfu", "values": MFU_VALUES, "hardware": "h100", "to": "parsecs"},
     ["mfu", *cli_args(MFU_VALUES), "--hardware", "h100", "--to", "parsecs"], None, None),
    ("an unknown target", {"target": "mfuu", "values": MFU_VALUES, "hardware": "h100"},
     ["mfuu", *cli_args(MFU_VALUES), "--hardware", "h100"], "unknown_name", "Did you mean"),
    ("an unknown given name", {"target": "mfu", "values": {**MFU_VALUES, "n_gpu": "8"}, "hardware": "h100"},
     ["mfu", *cli_args({**MFU_VALUES, "n_gpu": "8"}), "--hardware", "h100"], None, "n_gpus"),
    ("an unknown option value", {"target": "model_state_memory", "values": {"n_params": "7e9", "dp": "64"},
                                 "options": {"zero_stage": "7"}},
     ["model_state_memory", "n_params=7e9", "dp=64", "--option", "zero_stage=7"], None, "zero_stage"),
    # the server once passed the stack to the solver unchecked, with the library's words
    ("an unknown stack", {"target": "model_state_memory", "values": {"n_params": "7e9", "dp": "64"},
                          "stack": "megatorn"},
     ["model_state_memory", "n_params=7e9", "dp=64", "--stack", "megatorn"], "bad_option_value",
     "unknown stack 'megatorn'. Did you mean: megatron-core?"),
    # the server said "n_gpus has no value", the command line "n_gpus= has no value"
    ("an empty value", {"target": "mfu", "values": {**MFU_VALUES, "n_gpus": ""}, "hardware": "h100"},
     ["mfu", *cli_args({k: v for k, v in MFU_VALUES.items() if k != "n_gpus"}), "n_gpus=", "--hardware", "h100"],
     "usage", "n_gpus= has no value (write e.g. n_gpus=64)"),
]


@pytest.mark.parametrize("what, body, args, kind, message", SOLVE_MISTAKES, ids=[m[0] for m in SOLVE_MISTAKES])
def test_the_same_solve_mistake_gets_the_same_error_from_both_faces(client, cli, what, body, args, kind, message):
    r = post(client, "/api/solve", body)
    run = cli("solve", *args, "--json")
    assert run.code == 2 and r.status_code == 400, (run.out, r.text)
    assert r.text == run.out.rstrip("\n")              # the same JSON error object, byte for byte
    err = r.json()["error"]
    assert "\n" not in err["message"]
    if kind is not None:
        assert err["kind"] == kind
    if message is not None:
        assert message in err["message"]


def test_the_same_solve_and_sweep_get_the_same_answer_from_both_faces(client, cli):
    r = post(client, "/api/solve", {"target": "mfu", "values": MFU_VALUES, "hardware": "h100", "to": "%"})
    run = cli("solve", "mfu", *cli_args(MFU_VALUES), "--hardware", "h100", "--to", "%", "--json")
    assert r.status_code == 200 and run.code == 0 and r.text == run.out.rstrip("\n")
    # 6 x 7e9 x 150000 / (64 x 989.4e12 dense BF16) = 9.95 %
    assert r.json()["value"] == pytest.approx(100 * 6 * 7e9 * 150000 / (64 * 989.4e12), rel=2e-3)
    body = {"target": "model_state_memory", "values": {"n_params": "7e9"}, "vary": {"dp": "1,8,64"},
            "options": {"zero_stage": "3"}, "to": "GB"}
    r = post(client, "/api/sweep", body)
    run = cli("sweep", "model_state_memory", "n_params=7e9", "--vary", "dp=1,8,64", "--option", "zero_stage=3",
              "--to", "GB", "--json")
    assert r.status_code == 200 and run.code == 0, (r.text, run.err)
    assert r.json() == run.json()
    # ZeRO-3 shards the 16 bytes a parameter of mixed-precision Adam over dp: 112, 14, 1.75 GB
    assert [round(v, 3) for v in r.json()["values"]] == [112.0, 14.0, 1.75]


# (the plan request as JSON, the same as arguments, the command line's message, the server's)
PLAN_MISTAKES = [
    ({"model": "llama3-8b", "hardware": "h100", "gpus": 8, "top": 0},
     ["--model", "llama3-8b", "--hardware", "h100", "--gpus", "8", "--top", "0"],
     "--top is the number of layouts to show, at least 1; got 0",
     '"top" is the number of layouts to show, 1 to 100; got 0'),
    ({"model": "llama3-8b", "hardware": "h100", "gpus": 8, "stack": "fsdp", "options": {"stack": "megatron-core"}},
     ["--model", "llama3-8b", "--hardware", "h100", "--gpus", "8", "--stack", "fsdp", "--option",
      "stack=megatron-core"],
     "--stack fsdp and --option stack=megatron-core disagree; give one",
     '"stack" fsdp and "options" stack=megatron-core disagree; give one'),
]


@pytest.mark.parametrize("body, args, cli_message, json_message", PLAN_MISTAKES)
def test_a_plan_mistake_is_worded_once_with_each_faces_spelling_of_the_field(client, cli, body, args, cli_message,
                                                                             json_message):
    r = post(client, "/api/plan", body)
    run = cli("plan", *args, "--json")
    assert run.code == 2 and r.status_code == 400
    assert run.json() == {"error": {"kind": "usage", "message": cli_message}}
    assert r.json() == {"error": {"kind": "usage", "message": json_message}}


def test_an_unknown_plan_option_value_is_the_same_error_from_both_faces(client, cli):
    r = post(client, "/api/plan", {"model": "llama3-8b", "hardware": "h100", "gpus": 8,
                                   "options": {"zero_stage": "7"}})
    run = cli("plan", "--model", "llama3-8b", "--hardware", "h100", "--gpus", "8", "--option", "zero_stage=7",
              "--json")
    assert run.code == 2 and r.status_code == 400
    assert r.text == run.out.rstrip("\n")
    assert r.json()["error"] == {"kind": "bad_query",
                                 "message": "option zero_stage=7: expected one of 0, 1, 2, 3 (or a list of them: 0,2)"}


@pytest.mark.parametrize("question, body, args, close", [
    ("solve", {"target": "mfu", "values": MFU_VALUES, "hardware": "h1000"},
     ["solve", "mfu", *cli_args(MFU_VALUES), "--hardware", "h1000"], "h100"),
    ("plan", {"model": "llama3-8b", "hardware": "h1000", "gpus": 8},
     ["plan", "--model", "llama3-8b", "--hardware", "h1000", "--gpus", "8"], "h100"),
    ("plan", {"model": "lama3-8b", "hardware": "h100", "gpus": 8},
     ["plan", "--model", "lama3-8b", "--hardware", "h100", "--gpus", "8"], "llama3-8b"),
])
def test_an_unknown_preset_suggests_the_same_names_and_only_the_command_line_offers_a_file(client, cli, question,
                                                                                           body, args, close):
    # the same kind and words, with the close names; the command line adds that a path would be
    # read as a file, which the server refuses by design (a client may not name the server's files)
    r = post(client, f"/api/{question}", body)
    run = cli(*args, "--json")
    assert run.code == 2 and r.status_code == 400
    ours, theirs = run.json()["error"], r.json()["error"]
    assert ours["kind"] == theirs["kind"] == "unknown_name"
    assert f"Did you mean: {close}" in theirs["message"]
    assert ours["message"].startswith(theirs["message"])
    assert ours["message"][len(theirs["message"]):].startswith(" (or the path of ")


def test_a_request_is_checked_where_it_is_made_not_by_the_face():
    # the request type itself refuses, whichever face built it, spelling the field as that face does
    req = SolveRequest(target="mfu", round="sideways")
    with pytest.raises(RequestError, match="^--round is one of up, down, nearest; got 'sideways'$"):
        req.arguments(None, CLI)
    with pytest.raises(RequestError, match="^\"round\" is one of up, down, nearest; got 'sideways'$"):
        req.arguments(None, JSON)
    with pytest.raises(RequestError, match="has no key 'targt'. Did you mean: target?"):
        SolveRequest.from_json({"targt": "mfu"})
    assert SolveRequest.from_json({"target": " mfu ", "values": {"n_gpus": 64}}) == \
        SolveRequest(target="mfu", values={"n_gpus": 64})


def test_the_same_compare_and_check_get_the_same_answer_and_error_from_both_faces(client, cli):
    body = {"target": "model_state_memory", "values": {"n_params": "7e9", "dp": "64"},
            "options": {"zero_stage": "2"}, "vs": {"zero_stage": "3"}, "to": "GB"}
    r = post(client, "/api/compare", body)
    run = cli("compare", "model_state_memory", "n_params=7e9", "dp=64", "--option", "zero_stage=2",
              "--vs", "zero_stage=3", "--to", "GB", "--json")
    assert r.status_code == 200 and run.code == 0, (r.text, run.err)
    assert r.json() == run.json()
    # ZeRO-2 keeps the 2-byte weights whole and shards 14 bytes over 64: 7e9 x (2 + 14/64) = 15.53 GB;
    # ZeRO-3 shards all 16: 7e9 x 16 / 64 = 1.75 GB
    assert r.json()["difference"] == pytest.approx(7 * 16 / 64 - 7 * (2 + 14 / 64))
    assert r.json()["ratio"] == pytest.approx(1.75 / 15.53125)
    # a mistyped side-B name: the same refusal with the close names from both
    r = post(client, "/api/compare", {**body, "vs": {"zero_stag": "3"}})
    run = cli("compare", "model_state_memory", "n_params=7e9", "dp=64", "--option", "zero_stage=2",
              "--vs", "zero_stag=3", "--to", "GB", "--json")
    assert r.status_code == 400 and run.code == 2 and r.text == run.out.rstrip("\n")
    assert "zero_stage" in r.json()["error"]["message"]
    # check: 6 x 7e9 x 150000 / (64 x 989 TFLOP/s) = 9.95 %, so a claimed 50 % disagrees, on both faces alike
    values = {"n_params": "7e9", "tokens_per_second": "150000 token/s", "n_gpus": "64",
              "peak_flops": "989 TFLOP/s", "mfu": "50%"}
    r = post(client, "/api/check", {"values": values})
    run = cli("check", *cli_args(values), "--json")
    assert r.status_code == 200 and run.code == 1
    assert r.json() == run.json() and r.json()["ok"] is False
