"""`symcalc serve`'s limits under load, on a real server (uvicorn in a thread, symcalc's protocol):
slow clients cut off, connections and questions over the limit answered 503 with Retry-After,
the page and the presets answered while every worker is busy, abandoned questions ended, dead
workers replaced, worker folders removed, quiet logs.

Workers hold questions with files (tests/serve_jobs.gated), not with clocks: every wait below is
for a condition, with a generous bound, and no assertion depends on the machine's speed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import sys
import warnings

import pytest

pytest.importorskip("starlette", reason="symcalc serve needs the serve extra (pip install '.[test]')")

import serve_jobs  # noqa: E402  (tests/: on the path the spawned workers inherit)
from serve_jobs import gate_request, running_server, wait_for  # noqa: E402

from symcalc.serve.app import create_app, own_names  # noqa: E402
from symcalc.serve.app import Limits, _OncePer  # noqa: E402
from symcalc.serve.worker import WorkerPool  # noqa: E402

WAIT = 120.0        # seconds a socket waits for the server's answer: far more than any needs
MFU = {"target": "mfu", "values": {"n_params": "7e9", "tokens_per_second": "150000 token/s", "n_gpus": "64"},
       "hardware": "h100"}


@pytest.fixture(scope="module")
def pool():
    p = WorkerPool(2, runner=serve_jobs.gated, grace=1.0)
    yield p
    p.close()


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=WAIT)
    return s


def request_bytes(method: str, path: str, body: dict | None = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" \
           f"Content-Length: {len(data)}\r\n\r\n"
    return head.encode() + data


def read_response(s: socket.socket) -> tuple[int, dict[str, str], bytes]:
    """(status, headers, body) of one response (read up to its Content-Length)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(65536)
        if not chunk:
            raise ConnectionError(f"closed after {data!r}")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    while len(body) < int(headers.get("content-length", 0)):
        body += s.recv(65536)
    return int(lines[0].split()[1]), headers, body


def ask(port: int, method: str, path: str, body: dict | None = None) -> tuple[int, dict[str, str], bytes]:
    with connect(port) as s:
        s.sendall(request_bytes(method, path, body))
        return read_response(s)


def closed(s: socket.socket) -> bytes:
    """What the server sent before it closed the connection (raises if it stays open past WAIT)."""
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    return data


def test_a_client_that_sends_its_headers_slowly_is_cut_off(pool):
    # 3 s: the partial headers are sent right after the connection; a loaded machine must not
    # delay them past the timeout (then the connection would close silently, not with 408)
    with running_server(create_app(pool), Limits(header_timeout=3.0, body_timeout=3.0)) as port:
        silent, partial, slow_body = connect(port), connect(port), connect(port)
        partial.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")         # never the blank line
        slow_body.sendall(request_bytes("POST", "/api/solve", MFU)[:-5])   # the body's last bytes never come
        assert closed(silent) == b""                                       # nothing came: closed, nothing said
        status = closed(partial).split(b"\r\n")[0]
        assert status == b"HTTP/1.1 408 Request Timeout"
        assert closed(slow_body) == b""                                    # cut off inside the body
        assert ask(port, "GET", "/")[0] == 200                             # and the server answers on
        for s in (silent, partial, slow_body):
            s.close()


def test_past_the_connection_limit_the_longest_waiting_connection_makes_room(pool):
    # 3 connections at most; 9 that never send a request (and no header timeout within the
    # test): each new one closes the oldest idle one, so a client that asks still gets its answer
    # (without that, it would get 503: a flood of slow clients would lock it out)
    with running_server(create_app(pool), Limits(connections=3, header_timeout=3600)) as port:
        idle = [connect(port) for _ in range(9)]
        status, _, body = ask(port, "POST", "/api/solve", MFU)
        assert status == 200 and json.loads(body)["unit"] == "%"
        # the 7 oldest made room (the 4th to 9th connections and the asking one closed one each)
        assert all(closed(s) == b"" for s in idle[:7])
        idle[8].setblocking(False)
        with pytest.raises(BlockingIOError):            # the newest is still open, waiting
            idle[8].recv(1)
        for s in idle:
            s.close()


def test_when_every_connection_is_inside_a_request_a_new_one_gets_503_with_retry_after(pool, tmp_path):
    with running_server(create_app(pool), Limits(connections=2)) as port:
        busy = [connect(port) for _ in range(2)]
        for i, s in enumerate(busy):
            s.sendall(request_bytes("POST", "/api/solve", gate_request(tmp_path, f"g{i}")))
        wait_for(lambda: all((tmp_path / f"g{i}.started").exists() for i in range(2)), "both questions started")
        status, headers, body = ask(port, "GET", "/")
        assert status == 503 and headers["retry-after"] == "2"
        assert json.loads(body)["error"]["kind"] == "busy"
        for i, s in enumerate(busy):
            (tmp_path / f"g{i}.open").touch()
            assert read_response(s)[0] == 200
            s.close()


def test_the_page_and_presets_answer_while_every_worker_is_busy_and_the_queue_is_full(pool, tmp_path):
    # 2 workers answering and 1 question waiting (queue=1): the 4th question is refused at once
    # with 503 + Retry-After, while the page, its files and the presets are answered (they never
    # wait on a worker or a thread that a question holds)
    with running_server(create_app(pool, queue=1), Limits()) as port:
        held = [connect(port) for _ in range(3)]
        for i, s in enumerate(held):
            s.sendall(request_bytes("POST", "/api/solve", gate_request(tmp_path, f"q{i}")))
        wait_for(lambda: sum((tmp_path / f"q{i}.started").exists() for i in range(3)) == 2, "two questions started")
        status, headers, body = ask(port, "POST", "/api/solve", MFU)
        assert status == 503 and headers["retry-after"] == "2" and json.loads(body)["error"]["kind"] == "busy"
        assert ask(port, "GET", "/")[0] == 200
        assert ask(port, "GET", "/static/app.js")[0] == 200
        status, _, body = ask(port, "GET", "/api/presets")
        assert status == 200 and "llama3_8b" in [m["name"] for m in json.loads(body)["models"]]
        for i in range(3):
            (tmp_path / f"q{i}.open").touch()
        assert [json.loads(read_response(s)[2])["gate"] for s in held] == ["opened"] * 3
        for s in held:
            s.close()


def test_a_question_whose_client_went_away_is_ended_and_its_worker_kept(pool, tmp_path):
    pids = {w.process.pid for w in pool.workers}
    with running_server(create_app(pool), Limits()) as port:
        s = connect(port)
        s.sendall(request_bytes("POST", "/api/solve", gate_request(tmp_path, "gone")))
        wait_for((tmp_path / "gone.started").exists, "the question started")
        s.close()                                           # the client goes; the gate never opens
        wait_for((tmp_path / "gone.cancelled").exists, "the question was cancelled")
        assert ask(port, "POST", "/api/solve", MFU)[0] == 200
    assert {w.process.pid for w in pool.workers} == pids    # interrupted, not killed: no rebuild


def test_a_worker_deaf_to_the_cancel_is_killed_replaced_and_its_folder_removed(pool, tmp_path):
    with running_server(create_app(pool), Limits()) as port:
        s = connect(port)
        s.sendall(request_bytes("POST", "/api/solve", gate_request(tmp_path, "deaf", deaf=True)))
        wait_for((tmp_path / "deaf.started").exists, "the question started")
        pid = int((tmp_path / "deaf.started").read_text())
        home = next(w.home for w in pool.workers if w.process.pid == pid)
        s.close()
        wait_for(lambda: pid not in {w.process.pid for w in pool.workers}, "the deaf worker was replaced")
        assert not os.path.exists(home) and not (tmp_path / "deaf.cancelled").exists()
        assert ask(port, "POST", "/api/solve", MFU)[0] == 200


def test_a_worker_dead_while_idle_is_replaced_before_the_next_question(pool):
    victim = pool.workers[0]
    victim.process.kill()
    victim.process.join(WAIT)
    with running_server(create_app(pool), Limits()) as port:
        for _ in range(2 * len(pool.workers)):        # every idle worker is taken at least once
            status, _, body = ask(port, "POST", "/api/solve", MFU)
            assert status == 200, body
    assert victim not in pool.workers and not os.path.exists(victim.home)
    assert all(w.process.is_alive() for w in pool.workers)


def test_closing_the_pool_removes_every_worker_folder():
    p = WorkerPool(1, runner=serve_jobs.gated)
    homes = [w.home for w in p.workers]
    assert all(os.path.isdir(h) for h in homes)
    p.close()
    assert not any(os.path.exists(h) for h in homes)


def test_a_server_on_every_address_answers_this_machines_names_only():
    with warnings.catch_warnings():     # Starlette 1.x prefers the httpx2 fork for its test client; httpx still works
        warnings.simplefilter("ignore")
        from starlette.testclient import TestClient
    app = create_app(WorkerPool(1, runner=serve_jobs.gated), hosts=own_names())
    with TestClient(app, base_url="http://127.0.0.1") as client:
        assert client.get("/", headers={"Host": socket.gethostname()}).status_code == 200
        refused = client.get("/", headers={"Host": "attacker.example"})
        assert refused.status_code == 403 and refused.json()["error"]["kind"] == "forbidden"
    app.state.pool.close()


def test_host_star_is_refused_in_one_line(cli):
    r = cli("serve", "--host", "*")
    assert r.code != 0 and "0.0.0.0" in r.err and "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1


def test_a_flood_of_one_kind_of_log_line_writes_one():
    quiet = _OncePer(seconds=3600)
    records = [logging.LogRecord("uvicorn.error", logging.WARNING, __file__, 1, "Invalid HTTP request received.",
                                 None, None) for _ in range(1000)]
    assert sum(quiet.filter(r) for r in records) == 1
    try:
        raise OSError(24, "Too many open files")
    except OSError:
        exc = sys.exc_info()
    accept = logging.LogRecord("asyncio", logging.ERROR, __file__, 1,
                               "socket.accept() out of system resource\nsocket: <fd=7>", None, exc)
    assert quiet.filter(accept)                            # another kind: written, as one line
    assert accept.getMessage() == "socket.accept() out of system resource: OSError: [Errno 24] Too many open files"
    assert accept.exc_info is None


class _Transport(asyncio.Transport):
    """A connection's transport as the protocol sees it, without a socket."""

    def __init__(self) -> None:
        super().__init__()
        self.closed = False

    def get_extra_info(self, name, default=None):
        return {"sockname": ("127.0.0.1", 8765), "peername": ("127.0.0.1", 50000)}.get(name, default)

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def write(self, data) -> None:
        pass

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


def test_a_client_that_stops_reading_its_answer_is_cut_off_after_the_write_timeout():
    # the server's buffer for the client is full (the transport pauses writing): past the write
    # timeout, the connection is closed; resumed before it, the connection stays
    import uvicorn
    from uvicorn.server import ServerState

    from symcalc.serve.app import GuardedH11
    protocol = type("Guarded", (GuardedH11,), {"limits": Limits(write_timeout=0.05)})
    pool = WorkerPool(1, runner=serve_jobs.gated)
    config = uvicorn.Config(create_app(pool), http=protocol, lifespan="off", ws="none")
    config.load()
    loop = asyncio.new_event_loop()
    try:
        stuck, reading = _Transport(), _Transport()
        for transport in (stuck, reading):
            p = protocol(config, ServerState(), {}, _loop=loop)
            p.connection_made(transport)
            p.phase = "app"             # inside a request: no header timer
            p._disarm()
            p.pause_writing()
            if transport is reading:
                p.resume_writing()

        async def until_closed():
            for _ in range(int(WAIT / 0.01)):
                if stuck.closed:
                    return
                await asyncio.sleep(0.01)
        loop.run_until_complete(until_closed())
        loop.run_until_complete(asyncio.sleep(0.2))     # 4 times the write timeout: had its timer stayed, it had fired
        assert stuck.closed and not reading.closed
    finally:
        loop.close()
        pool.close()
