"""Workers' jobs for the serve tests, importable by the worker processes they spawn, and a real
server run in a thread (:func:`running_server`).

- :func:`stubborn`: the real answer, except that a plan of the model "stall" never ends (not
  even at symcalc's own, cooperative, time limit), so that only the server's kill can stop it.
- :func:`gated`: the real answer, except that a solve whose target is "gate" waits for a file
  (``values.open``) to exist: a question that holds its worker exactly as long as a test wants,
  no clock involved. It marks its start (``values.started``) and, when the server cancels it, its
  end (``values.cancelled``); with ``values.deaf`` it ignores the cancel, as code stuck in C would.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from pathlib import Path

from symcalc.serve.worker import CANCEL, Cancelled, answer

GATE_LIMIT = 300.0      # seconds a gate waits at most, so that a failed test leaves no process behind


def stubborn(kind, request, limit):
    if kind == "plan" and isinstance(request, dict) and request.get("model") == "stall":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})     # deaf to symcalc's own limit
        while True:
            time.sleep(3600)
    return answer(kind, request, limit)


def gated(kind, request, limit):
    if not (kind == "solve" and isinstance(request, dict) and request.get("target") == "gate"):
        return answer(kind, request, limit)
    files = request["values"]
    if files.get("deaf"):
        signal.signal(CANCEL, signal.SIG_IGN)           # the worker sets its handler again for the next question
    Path(files["started"]).write_text(str(os.getpid()))
    try:
        end = time.monotonic() + GATE_LIMIT
        while not os.path.exists(files["open"]) and time.monotonic() < end:
            time.sleep(0.02)
    except Cancelled:
        Path(files["cancelled"]).write_text(str(os.getpid()))
        raise
    return json.dumps({"gate": "opened", "pid": os.getpid()})


def gate_request(folder: Path, name: str, deaf: bool = False) -> dict:
    """A gated question's body, its files named ``name.*`` in ``folder``."""
    values = {k: str(folder / f"{name}.{k}") for k in ("open", "started", "cancelled")}
    return {"target": "gate", "values": {**values, **({"deaf": "1"} if deaf else {})}}


def wait_for(condition, what: str, seconds: float = 120.0):
    """Wait for ``condition()`` to be true (a generous bound, not a measurement)."""
    end = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"{what}: not within {seconds:g} s")
        time.sleep(0.02)
    return condition()


@contextlib.contextmanager
def running_server(app, limits):
    """``app`` served by symcalc's uvicorn server (its protocol and limits) on 127.0.0.1, an
    unused port, in a thread; yields the port."""
    from symcalc.serve.app import make_server
    server = make_server(app, "127.0.0.1", 0, limits)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started or not thread.is_alive(), "the server started")
        assert server.started, "the server did not start"
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(30)
