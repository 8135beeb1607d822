"""The questions a page or an API client asks, answered in worker processes killed at a limit.

symcalc's own time limits are cooperative (a timer's signal in the main thread, see
:mod:`symcalc.budget`): they cannot stop C code, nor anything in a thread of a web server. So
each request is answered by one of a few worker processes, in that process's main thread under
the same limit as the command line's (:func:`answer`), and the server kills the worker if no
answer has come a little after that limit (:class:`WorkerPool`), starting a fresh one in its
place. A worker keeps the library and its compiled answers between requests: a repeated
question is answered in milliseconds. A question whose client went away is interrupted
(:data:`CANCEL`; the worker is killed if it does not stop within the grace), a worker found
dead when taken is replaced before the question goes to it, and each worker's folder (its
working directory and temporary files) is removed with it.

A request is a JSON object whose keys are the fields of its request type
(:mod:`symcalc.query.requests`: the command line builds the same type from its parameters, and
both are checked there, with the same messages); its text is read by symcalc's own parsers only
(nothing is evaluated), and the answer is exactly what ``symcalc solve|sweep|plan ... --json`` print: the result's JSON, or ``{"error": {"kind", "message", ...}}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import multiprocessing
import os
import queue
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from symcalc import budget  # its alarm's rules of where an exception may land
from symcalc.budget import DEFAULT_PLAN_LIMIT, DEFAULT_QUESTION_LIMIT, BudgetExceeded, question
from symcalc.errors import QueryError, SymcalcError, one_line
from symcalc.query.requests import RequestError

#: Each kind of request, with its default time limit (the command line's).
LIMITS = {"solve": DEFAULT_QUESTION_LIMIT, "sweep": DEFAULT_QUESTION_LIMIT, "compare": DEFAULT_QUESTION_LIMIT,
          "check": DEFAULT_QUESTION_LIMIT, "plan": DEFAULT_PLAN_LIMIT, "presets": DEFAULT_QUESTION_LIMIT}
GRACE = 2.0         # seconds past a request's own limit before its worker is killed
START_LIMIT = 120.0  # seconds a fresh worker may take to start (import, build the library)

MAX_TOP = 100
POLL = 0.05       # seconds between looks at a cancel while waiting for a worker or its answer




def error_json(kind: str, message: str) -> str:
    """The command line's JSON error object (:func:`symcalc.cli._fail`)."""
    return json.dumps({"error": {"kind": kind, "message": " ".join(str(message).split())}})


# -- in the worker ------------------------------------------------------------------------------

def answer(kind: str, request: Any, limit: float) -> str:
    """The JSON text ``symcalc solve|plan ... --json`` prints for ``request``, under ``limit``
    seconds (symcalc's own limit: a TimeLimitError's JSON when it runs out)."""
    from symcalc.library.loading import default_library  # on use: a worker builds it once, outside the limit
    lib = default_library()
    with tempfile.TemporaryDirectory(prefix="symcalc-serve-") as tmp:
        # a pasted config.json is written as tmp/config.json; answers and errors call it model_config
        return _answered(kind, request, lib, tmp, limit).replace(json.dumps(_config_path(tmp))[1:-1], "model_config")


def _answered(kind: str, request: Any, lib, tmp: str, limit: float) -> str:
    try:
        with question(limit):
            if kind in ("solve", "sweep", "compare", "check", "plan"):
                return _ask(kind, request, lib, tmp)
            if kind == "presets":
                return presets_json()
            raise RequestError(f"no such question '{kind}'")
    except SymcalcError as e:
        return json.dumps({"error": e.to_dict()})
    except BudgetExceeded:
        return error_json("time_limit", "no answer within the time limit")
    except Exception as e:  # a bug: still one line, and say so
        return error_json("internal", one_line(f"internal error ({type(e).__name__}: {e}); please report it"))


def _config_path(tmp: str) -> str:
    return os.path.join(tmp, "config.json")


def _ask(kind: str, request: Any, lib, tmp: str) -> str:
    """One question, read as the command line reads it (:mod:`symcalc.query.requests`: the same
    request type, the same checks and messages), its model and hardware built-in names only."""
    from symcalc.query.requests import JSON, REQUESTS, CompareRequest, PlanRequest  # on use: in the worker only
    req = REQUESTS[kind].from_json(request)
    req = dataclasses.replace(req, hardware=_preset(req.hardware, "hardware"), model=_model(req, tmp), model_config=None)
    if isinstance(req, CompareRequest):        # side B's presets: built-in names too
        for key in ("hardware", "model"):
            _preset(req.vs.get(key), key)
    if isinstance(req, PlanRequest):
        from symcalc.planner.search import plan  # on use: the server process never loads the planner
        args, kwargs = req.arguments(lib, JSON, MAX_TOP)
        return plan(*args, **kwargs).json()
    args, kwargs = req.arguments(lib, JSON)
    return _query(kind)(*args, **kwargs).json()


def _query(kind: str) -> Callable[..., Any]:
    """The query function that answers ``kind`` (imported here: the server process never loads the engine)."""
    import importlib  # on use: in the worker only
    return getattr(importlib.import_module(f"symcalc.query.{kind}"), kind)     # symcalc.query.solve.solve, ...


def presets_json() -> str:
    """The model and hardware presets' names and titles (the page's lists), as JSON."""
    from symcalc.library.presets import KINDS  # on use: only the presets' data loads, not the engine
    from symcalc.render.catalog import preset_catalog  # on use: only the presets' data loads, not the engine
    return json.dumps({KINDS[kind]: [{"name": p["name"], "title": p["title"]} for p in preset_catalog(kind)]
                       for kind in ("model", "hardware")})


def _preset(name: str | None, key: str) -> str | None:
    """A built-in preset's name: no path, and no name that is not a built-in one (a file on the
    server's disk is not the client's to name; the workers also run in an empty directory)."""
    from symcalc.library.presets import (  # on use: in the worker process only
        builtin_preset,
        looks_like_path,
    )
    if name is None:
        return None
    if looks_like_path(name):       # what the command line would read as a file
        raise RequestError(f'"{key}" is the name of a built-in preset (see `symcalc list '
                           f'{"models" if key == "model" else "hardware"}`), not a file'
                           + ('; give a config.json\'s text as "model_config"' if key == "model" else ""))
    builtin_preset(key, name)       # an unknown name is refused here, with the closest ones
    return name                     # as given: the answer echoes it as the command line's does


def _model(req, tmp: str) -> str | None:
    """The model preset's name, or the path of a config.json written from "model_config" in the
    request's own temporary directory (the command line's --model config.json)."""
    name = _preset(req.model, "model")
    if req.model_config is None:
        return name
    if name is not None:
        raise RequestError('give "model" (a preset) or "model_config" (a config.json), not both')
    path = _config_path(tmp)
    with open(path, "w", encoding="utf-8") as f:
        f.write(req.model_config)
    return path


class Cancelled(BaseException):
    """The server's :data:`CANCEL` signal in a worker: the client went away, the question ends.
    A BaseException, as symcalc's BudgetExceeded: no ``except Exception`` on the way swallows it."""


CANCEL = signal.SIGUSR1     # the server -> a worker: stop the question in hand (the client went away)
_asking = False             # whether a question runs: a cancel that comes between two is ignored


def _cancel(signum, frame) -> None:
    """Raise Cancelled in the question, except where symcalc's own time limit would not raise
    either (its limits being put in order, an import half-way): there, the signal comes again
    in a moment, as budget's alarm does."""
    if not _asking:
        return
    if budget._busy or (frame is not None and frame.f_code in budget._BOOKKEEPING) or budget._importing(frame):
        threading.Timer(0.005, os.kill, (os.getpid(), CANCEL)).start()
        return
    raise Cancelled


def _serve(conn, runner: Callable[[str, Any, float], str], home: str) -> None:
    """A worker's loop: build the library, say so, then answer (kind, request, limit) until the
    pipe closes. ``home`` (made, and removed, by the server) is its working directory and its
    temporary folder: no name a client gives can be read as a file relative to it, and whatever a
    question leaves there goes when the server removes it (on a kill, a crash or close)."""
    try:
        from symcalc.library.loading import default_library  # on use: in the worker process only
        default_library()
        os.chdir(home)
        tempfile.tempdir = home
        conn.send("ready")
        while True:
            try:
                kind, request, limit = conn.recv()
            except (EOFError, OSError):
                return
            conn.send(_one(runner, kind, request, limit))
    except KeyboardInterrupt:       # the server's Ctrl-C reaches its workers too: end quietly
        return


def _one(runner: Callable[[str, Any, float], str], kind: str, request: Any, limit: float) -> str:
    """One answer, or the cancelled error once :data:`CANCEL` came while it ran. The signal may
    reach the process through any of its threads (numpy's own among them), so it is not masked:
    its handler raises only while a question runs."""
    global _asking
    signal.signal(CANCEL, _cancel)
    try:
        _asking = True
        try:
            return runner(kind, request, limit)
        finally:
            _asking = False
    except Cancelled:
        return error_json("cancelled", "the client went away; the question was ended")


# -- in the server ------------------------------------------------------------------------------

class Worker:
    """One worker process, the pipe to it, and its folder (removed when it is killed)."""

    def __init__(self, ctx, runner) -> None:
        self.home = tempfile.mkdtemp(prefix="symcalc-worker-")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=_serve, args=(child, runner, self.home), daemon=True,
                                   name="symcalc-serve-worker")
        self.process.start()
        child.close()
        self.ready = False

    def wait_ready(self, seconds: float) -> bool:
        if not self.ready and self.conn.poll(seconds):
            self.ready = self.conn.recv() == "ready"
        return self.ready

    def interrupt(self) -> None:
        """Ask the question in hand to end (:data:`CANCEL`); the worker then answers and stays."""
        with contextlib.suppress(OSError):
            if self.process.is_alive() and self.process.pid:
                os.kill(self.process.pid, CANCEL)

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)
        self.conn.close()
        shutil.rmtree(self.home, ignore_errors=True)


class WorkerPool:
    """``size`` worker processes; :meth:`ask` gives a request to an idle one and waits for its
    answer at most the request's limit plus :data:`GRACE`, then kills it and starts another."""

    def __init__(self, size: int = 2, runner: Callable[[str, Any, float], str] = answer,
                 time_limit: float | None = None, grace: float = GRACE, limits: dict[str, float] | None = None) -> None:
        self.ctx = multiprocessing.get_context("spawn")     # no fork of a server's threads
        self.size = size
        self.runner, self.time_limit, self.grace = runner, time_limit, grace
        self.limits = {**LIMITS, **(limits or {})}
        self.idle: queue.Queue[Worker] = queue.Queue()
        self.lock = threading.Lock()
        self.closed = False
        self.workers = [Worker(self.ctx, runner) for _ in range(size)]
        for w in self.workers:
            self.idle.put(w)

    def limit(self, kind: str) -> float:
        """The request's limit: the server's --time-limit if given, else the kind's (the command line's default)."""
        return self.time_limit if self.time_limit is not None else self.limits.get(kind, DEFAULT_QUESTION_LIMIT)

    def ask(self, kind: str, request: Any, cancel: threading.Event | None = None,
            since: float | None = None) -> tuple[int, str]:
        """(HTTP status, JSON text) for one request. ``cancel``, once set (the client went away),
        ends it: a question still waiting is dropped, one in a worker is interrupted (and the
        worker killed and replaced if it does not stop within the grace). ``since``: when the
        request came (time.monotonic), if it waited before this call; the wait for a worker
        counts from then."""
        limit = self.limit(kind)
        wait = limit + self.grace if math.isfinite(limit) else math.inf
        worker = self._take((since if since is not None else time.monotonic()) + wait, cancel)
        if worker is None:
            if cancel is not None and cancel.is_set():
                return 499, error_json("cancelled", "the client went away")
            return 503, error_json("busy", "every worker is busy with an earlier request; ask again in a moment")
        try:
            if not worker.wait_ready(START_LIMIT):
                self._replace(worker)
                return 500, error_json("internal", "a worker did not start; please report it")
            t0 = time.monotonic()
            worker.conn.send((kind, request, limit))
            if self._wait(worker, t0 + wait, cancel):
                text = worker.conn.recv()
                self.idle.put(worker)
                return status_of(text), text
            if cancel is not None and cancel.is_set():
                return self._cancelled(worker)
            self._replace(worker)
            return 504, error_json("time_limit", f"no answer within the time limit ({limit:g} s; "
                                   f"stopped after {time.monotonic() - t0:.1f} s): the question was ended")
        except (EOFError, OSError, BrokenPipeError):
            self._replace(worker)
            return 500, error_json("internal", "the worker answering the question ended; please report it")
        except Exception as e:     # the request could not even be sent (parse_request bounds it): never lose a worker
            self._replace(worker)
            return 500, error_json("internal", one_line(f"internal error ({type(e).__name__}); please report it"))

    def _take(self, deadline: float, cancel: threading.Event | None) -> Worker | None:
        """An idle worker that is alive (a dead one, crashed while idle, is replaced here, so that
        no request is lost to it), or None when the deadline passed or the request was cancelled."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (cancel is not None and cancel.is_set()):
                return None
            try:
                worker = self.idle.get(timeout=min(left, POLL) if cancel is not None
                                       else left if math.isfinite(left) else None)
            except queue.Empty:
                continue
            if worker.process.is_alive():
                return worker
            fresh = self._replace(worker, idle=False)
            if fresh is not None:
                return fresh

    def _wait(self, worker: Worker, deadline: float, cancel: threading.Event | None) -> bool:
        """Whether the worker's answer came before the deadline (False at once when cancelled)."""
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if cancel is None:
                return worker.conn.poll(left if math.isfinite(left) else None)
            if worker.conn.poll(min(left, POLL)):
                return True
            if cancel.is_set():
                return False

    def _cancelled(self, worker: Worker) -> tuple[int, str]:
        """The client went away: interrupt the worker's question; if it has not stopped within
        the grace, kill the worker and start another."""
        worker.interrupt()
        try:
            if worker.conn.poll(self.grace):
                worker.conn.recv()
                self.idle.put(worker)
            else:
                self._replace(worker)
        except (EOFError, OSError):
            self._replace(worker)
        return 499, error_json("cancelled", "the client went away; the question was ended")

    def _replace(self, worker: Worker, idle: bool = True) -> Worker | None:
        """Kill ``worker`` (its folder goes too) and start another in its place, put back idle
        unless ``idle`` is False (then returned to the caller); None once the pool is closed."""
        worker.kill()
        with self.lock:
            if self.closed:
                return None
            fresh = Worker(self.ctx, self.runner)
            self.workers = [fresh if w is worker else w for w in self.workers]
        if idle:
            self.idle.put(fresh)
        return fresh

    def close(self) -> None:
        with self.lock:
            self.closed = True
            workers = list(self.workers)
        for w in workers:
            w.kill()


def status_of(text: str) -> int:
    """200 for an answer; an error's status by its kind: 504 when time ran out, 500 for a bug,
    else 400 (the request's own mistake)."""
    if not text.startswith('{"error"'):
        return 200
    try:
        kind = json.loads(text)["error"].get("kind")
    except (ValueError, KeyError, AttributeError):
        return 500
    return {"time_limit": 504, "internal": 500}.get(kind, 400)


MAX_DEPTH = 16      # arrays and objects inside one another: a question needs 3 (a config.json 4 or 5)


def parse_request(body: bytes) -> Any:
    """The request's JSON (never evaluated: json.loads only), refused when arrays and objects
    nest in it deeper than MAX_DEPTH (such a request could not even be handed to a worker)."""
    try:
        parsed = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise QueryError(f"the request is not JSON ({one_line(str(e))})") from None
    except RecursionError:
        parsed = None
    if parsed is None and body.strip() != b"null" or _depth(parsed) > MAX_DEPTH:
        raise QueryError(f"the request nests arrays and objects more than {MAX_DEPTH} deep")
    return parsed


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in parsed JSON (walked without recursion). O(size)."""
    deepest = 0
    todo = [(value, 1)]
    while todo:
        v, depth = todo.pop()
        items = v.values() if isinstance(v, dict) else v if isinstance(v, list) else None
        if items is None:
            continue
        deepest = max(deepest, depth)
        if depth <= MAX_DEPTH:
            todo.extend((x, depth + 1) for x in items)
    return deepest
