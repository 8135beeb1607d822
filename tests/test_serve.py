"""`symcalc serve`'s JSON API, in-process (Starlette's TestClient): the same JSON as the command
line's --json, one-line errors with status 400, and a request over the time limit killed with
its worker while the server goes on answering."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("starlette", reason="symcalc serve needs the serve extra (pip install '.[test]')")
import warnings  # noqa: E402

with warnings.catch_warnings():     # Starlette 1.x prefers the httpx2 fork for its test client; httpx still works
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient  # noqa: E402

from symcalc.serve.app import create_app  # noqa: E402
from symcalc.serve.worker import WorkerPool  # noqa: E402

MFU = {"target": "mfu", "values": {"n_params": "7e9", "tokens_per_second": "150000 token/s", "n_gpus": "64"},
       "options": {"zero_stage": "1"}, "hardware": "h100", "model": None, "to": None}
MFU_CLI = ["solve", "mfu", "n_params=7e9", "tokens_per_second=150000 token/s", "n_gpus=64",
           "--option", "zero_stage=1", "--hardware", "h100", "--json"]
STALL_LIMIT = 1.0       # the stalled plan's limit: it never answers, so the kill comes at this + grace


@pytest.fixture(scope="module")
def client():
    import serve_jobs    # tests/: on the path the spawned workers inherit
    pool = WorkerPool(2, runner=serve_jobs.stubborn, grace=0.5, limits={"plan": STALL_LIMIT * 60})
    app = create_app(pool)
    with TestClient(app, base_url="http://127.0.0.1") as c:
        c.pool = pool
        yield c
    pool.close()


def post(client, path, body):
    return client.post(path, content=json.dumps(body), headers={"Content-Type": "application/json"})


def test_the_mfu_question_answers_with_the_command_lines_json(client, cli):
    r = post(client, "/api/solve", MFU)
    assert r.status_code == 200, r.text
    expected = cli(*MFU_CLI)
    assert expected.code == 0
    assert r.text == expected.out.rstrip("\n")          # byte for byte what `symcalc solve ... --json` prints
    assert r.json()["unit"] == "%" and r.json()["value"] == pytest.approx(9.9492, rel=1e-4)


def test_a_repeated_question_is_answered_by_the_same_warm_workers(client):
    # the workers keep the library and the compiled answers between requests: the same
    # processes answer every time (a worker rebuilt per request would cost seconds each; this
    # is asserted on the processes, not on a clock, so a loaded machine gives the same result)
    post(client, "/api/solve", MFU)
    before = {w.process.pid for w in client.pool.workers}
    for _ in range(5):
        assert post(client, "/api/solve", MFU).status_code == 200
    assert {w.process.pid for w in client.pool.workers} == before


def test_the_runs_layout_answers_as_the_same_degrees_typed(client):
    # the page's "with the run above": the layout goes as "layout", read where the values leave
    # it open; a memory question's answer equals the one with the degrees among the values
    base = {"target": "total_memory_per_gpu", "model": "llama3-8b", "hardware": "h100",
            "values": {"micro_batch_size": "1"}}
    with_layout = post(client, "/api/solve", {**base, "layout": {"tp": "8", "dp": "8"}}).json()
    typed = post(client, "/api/solve", {**base, "values": {"micro_batch_size": "1", "tp": "8", "dp": "8"}}).json()
    assert with_layout["value"] == pytest.approx(typed["value"], rel=1e-12)
    bad = post(client, "/api/solve", {**base, "layout": {"n_params": "7e9"}})
    assert bad.status_code == 400 and "not one of its fields" in bad.json()["error"]["message"]


def test_a_plan_request_mirrors_the_python_api(client, cli):
    body = {"model": "llama3-8b", "hardware": "h100", "gpus": 64, "top": 3, "global_batch_size": 512,
            "options": {"zero_stage": "1"}}
    r = post(client, "/api/plan", body)
    assert r.status_code == 200, r.text
    got = r.json()
    expected = cli("plan", "--model", "llama3-8b", "--hardware", "h100", "--gpus", "64", "--top", "3",
                   "--global-batch-size", "512", "--option", "zero_stage=1", "--json").json()
    for d in (got, expected):
        d.pop("seconds")                                 # the search's own run time
    assert got == expected
    assert 1 <= len(got["rows"]) <= 3 and got["rows"][0]["memory_parts_bytes"] and got["rows"][0]["step_parts_s"]


def test_a_bad_value_is_a_one_line_error_with_status_400(client, cli):
    r = post(client, "/api/solve", {**MFU, "values": {**MFU["values"], "n_params": "7e9x"}})
    assert r.status_code == 400
    assert r.json() == {"error": {"kind": "malformed_value", "message": "n_params: unknown unit 'x' in '7e9x'"}}
    same = cli("solve", "mfu", "n_params=7e9x", "tokens_per_second=150000 token/s", "n_gpus=64", "--hardware", "h100",
               "--json")
    assert r.text == same.out.rstrip("\n")
    assert "\n" not in r.json()["error"]["message"]


def test_an_unknown_name_is_refused_with_suggestions(client):
    r = post(client, "/api/solve", {**MFU, "target": "mfuu"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["kind"] == "unknown_name" and "Did you mean" in err["message"] and "mfu" in err["message"]
    r = post(client, "/api/solve", {"targt": "mfu"})
    assert r.status_code == 400 and r.json()["error"]["kind"] == "usage"
    assert "Did you mean: target?" in r.json()["error"]["message"]


@pytest.mark.parametrize("body, content_type, status, kind", [
    (b"{not json", "application/json", 400, "bad_query"),
    (b'["mfu"]', "application/json", 400, "usage"),
    (json.dumps(MFU).encode(), "text/plain", 415, "usage"),      # what a page on another site could send
    (json.dumps({**MFU, "model": "/etc/passwd"}).encode(), "application/json", 400, "usage"),
])
def test_requests_that_are_not_questions(client, body, content_type, status, kind):
    r = client.post("/api/solve", content=body, headers={"Content-Type": content_type})
    assert r.status_code == status and r.json()["error"]["kind"] == kind, r.text


def test_another_host_name_is_refused(client):
    r = client.post("/api/solve", content=json.dumps(MFU), headers={"Content-Type": "application/json",
                                                                     "Host": "attacker.example"})
    assert r.status_code == 403


def test_a_request_over_the_limit_is_killed_and_the_server_answers_the_next(client):
    client.pool.limits["plan"] = STALL_LIMIT
    try:
        before = {w.process.pid for w in client.pool.workers}
        r = post(client, "/api/plan", {"model": "stall", "gpus": 8})
    finally:
        client.pool.limits["plan"] = STALL_LIMIT * 60
    assert r.status_code == 504
    assert r.json()["error"]["kind"] == "time_limit" and "time limit" in r.json()["error"]["message"]
    after = {w.process.pid for w in client.pool.workers}
    assert len(before - after) == 1 and len(after) == 2          # the stalled worker is gone, replaced
    for _ in range(3):                                            # ... and the server answers on
        assert post(client, "/api/solve", MFU).status_code == 200


def test_the_page_and_its_assets_are_served_from_the_package(client):
    page = client.get("/")
    assert page.status_code == 200 and "/static/app.js" in page.text and "/mathjax/es5/tex-svg.js" in page.text
    assert "http://" not in page.text and "https://" not in page.text      # nothing from another host
    assert client.get("/static/app.js").status_code == 200
    mathjax = client.get("/mathjax/es5/tex-svg.js")
    assert mathjax.status_code == 200 and len(mathjax.content) > 100_000
    presets = client.get("/api/presets").json()
    assert "llama3_8b" in [m["name"] for m in presets["models"]]
    assert "h100_sxm" in [h["name"] for h in presets["hardware"]]


def test_deeply_nested_json_is_refused_and_loses_no_worker(client):
    # 500 nested arrays in a 1 kB body once made pickling it for a worker fail, which took that
    # worker out of the pool for good; json.loads itself overflows near 1,000 levels
    for depth in (500, 5_000, 17):
        r = client.post("/api/plan", content=b"[" * depth + b"]" * depth, headers={"Content-Type": "application/json"})
        assert r.status_code == 400 and "nests arrays and objects more than 16 deep" in r.json()["error"]["message"]
    for _ in range(3):
        assert post(client, "/api/solve", MFU).status_code == 200


def test_a_preset_name_is_never_read_as_a_file(client):
    # README.md exists where the tests run (the server's working directory): a name, not a path,
    # once reached find_preset's file branch; only built-in names are taken. Shaped like a path
    # (an extension), it is refused as one, as the command line would read it as a file
    for body in ({**MFU, "hardware": "README.md"}, {"target": "n_params", "model": "README.md"}):
        r = post(client, "/api/solve", body)
        assert r.status_code == 400 and r.json()["error"]["kind"] == "usage", r.text
        assert r.json()["error"]["message"].endswith("not a file") or "model_config" in r.json()["error"]["message"]
    # a bare name is a built-in name, unknown here, with no hint at files the API refuses
    for body in ({**MFU, "hardware": "README"}, {"target": "n_params", "model": "README"}):
        r = post(client, "/api/solve", body)
        assert r.status_code == 400 and r.json()["error"]["kind"] == "unknown_name", r.text
        assert "path" not in r.json()["error"]["message"] and "./" not in r.json()["error"]["message"]


def test_routes_and_methods_that_do_not_exist_answer_json_and_never_redirect(client):
    cases = [("GET", "/api/solve", 405), ("PUT", "/api/plan", 405), ("GET", "/api/nosuch", 404),
             ("POST", "/api/solve/", 404), ("POST", "/", 405)]
    for method, path, status in cases:
        r = client.request(method, path, content=json.dumps(MFU), headers={"Content-Type": "application/json"},
                           follow_redirects=False)
        assert r.status_code == status and r.headers["content-type"] == "application/json", (method, path, r.text)
        assert r.json()["error"]["message"]
    # the Host check covers the page's files too, not only the API
    assert client.get("/static/app.js", headers={"Host": "attacker.example"}).status_code == 403


def test_a_pasted_config_json_is_called_model_config_not_a_server_path(client):
    r = post(client, "/api/plan", {"model_config": "not json at all", "hardware": "h100", "gpus": 8})
    assert r.status_code == 400
    message = r.json()["error"]["message"]
    assert "model_config" in message and "/tmp" not in message and "symcalc-serve-" not in message


@pytest.mark.parametrize("tp", ["1e9", "3", "128"])
def test_an_absurd_parallel_degree_is_answered_as_the_command_line_answers_it(client, cli, tp):
    # llama3-70b has 64 heads: tp = 1e9, 3 (no divisor) or 128 (more than the heads). Whatever
    # the command line says of them (refused, once the run's structure checks refuse them), the
    # API says the same, byte for byte: both go through symcalc.solve with the same arguments
    values = {"tp": tp, "pp": "1", "dp": "8", "micro_batch_size": "1", "seq_len": "8192 token"}
    r = post(client, "/api/solve", {"target": "total_memory_per_gpu", "model": "llama3-70b", "hardware": "h100",
                                    "values": values})
    expected = cli("solve", "total_memory_per_gpu", "--model", "llama3-70b", "--hardware", "h100",
                   *[f"{k}={v}" for k, v in values.items()], "--json")
    assert r.text == expected.out.rstrip("\n")
    assert (r.status_code == 200) == (expected.code == 0)
    assert r.status_code in (200, 400)
