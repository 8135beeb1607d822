"""``symcalc serve``: a local page that answers as you type, and its JSON API (Starlette).

Routes: ``GET /`` the page; ``GET /static/...`` its script and style (from this package);
``GET /mathjax/...`` MathJax's files from the django-static-mathjax wheel (nothing is fetched
from another host); ``GET /api/presets`` the model and hardware presets; ``POST /api/solve``,
``POST /api/sweep``, ``/api/compare``, ``/api/check`` and ``/api/plan`` the questions (:mod:`symcalc.serve.worker`), each answered with the JSON
the command line's ``--json`` prints, status 400 for a bad request (504 when time ran out; 503
with Retry-After when the questions in hand are as many as the server takes, workers and queue,
or every worker stayed busy with earlier requests for the request's whole time limit; 413 for
a body over 1 MB, 415 for one not sent as JSON, 404 and 405 as JSON errors too). The page, its
files and the presets never wait on a worker or on a thread a question holds; a question whose
client goes away is ended.

Requests that could come from another site are refused: an API request must be sent as
``application/json`` (which a page elsewhere cannot do without a preflight this server never
grants), and the Host header must name this machine (no DNS rebinding).

Limits below the app (uvicorn's protocol: header, body and write timeouts, a connection limit,
quiet logs) are :mod:`symcalc.serve.guard`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from symcalc.errors import SymcalcError, one_line
from symcalc.serve.guard import (  # noqa: F401 - Limits, GuardedH11, _OncePer and make_server read from here too
    RETRY_AFTER,
    GuardedH11,
    Limits,
    _OncePer,
    connection_limit,
    make_server,
    raise_fd_limit,
)
from symcalc.serve.worker import WorkerPool, error_json, parse_request, presets_json

STATIC = Path(__file__).resolve().parent / "static"
MAX_BODY = 1 << 20          # a question (or a pasted config.json) is a few kB
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]"}
MAX_QUEUE = 64              # questions waiting for a worker at most, beyond those being answered


def mathjax_dir() -> Path | None:
    """MathJax 3's browser files as the django-static-mathjax wheel installs them (its
    ``mathjax`` package needs no Django), or None when it is not installed."""
    try:
        root = Path(str(resources.files("mathjax"))) / "static" / "mathjax"
    except (ModuleNotFoundError, TypeError):
        return None
    return root if (root / "es5" / "tex-svg.js").is_file() else None


def _host_name(header: str) -> str:
    """The Host header's name without its port: "127.0.0.1:8765" -> "127.0.0.1", "[::1]:80" -> "[::1]"."""
    return header if header.endswith("]") or ":" not in header else header.rsplit(":", 1)[0]


def _json(status: int, text: str) -> Response:
    """A JSON response; a 503 says when to ask again (Retry-After)."""
    headers = {"Retry-After": str(RETRY_AFTER)} if status == 503 else None
    return Response(text, status_code=status, media_type="application/json", headers=headers)


def _presets_once() -> tuple[int, str]:
    """(status, JSON) of the presets, made in the server process at start (fixed data, light:
    no engine is loaded for it), so that /api/presets never waits on a worker."""
    try:
        return 200, presets_json()
    except Exception as e:  # a bug: one line, and say so
        return 500, error_json("internal", one_line(f"internal error ({type(e).__name__}: {e}); please report it"))


class _Questions:
    """The questions in hand: at most the pool's size answered at once, in threads of their own
    (never Starlette's shared ones, so that the page's files never wait behind a question), and
    at most ``queue`` more waiting; past that, 503 at once. A question whose client goes away is
    dropped if it waits, else its worker is told to stop (:meth:`WorkerPool.ask`)."""

    def __init__(self, pool: WorkerPool, queue: int) -> None:
        size = getattr(pool, "size", 2)
        self.pool, self.most, self.held = pool, size + queue, 0
        self.threads = ThreadPoolExecutor(max_workers=size + 1, thread_name_prefix="symcalc-question")

    async def ask(self, kind: str, payload: Any, request: Request) -> tuple[int, str]:
        if self.held >= self.most:
            return 503, error_json("busy", f"{self.held} questions are in hand, as many as this server takes; "
                                   f"ask again in {RETRY_AFTER} s")
        self.held += 1
        cancel = threading.Event()
        loop = asyncio.get_running_loop()
        job: asyncio.Future[Any] = loop.run_in_executor(self.threads, self.pool.ask, kind, payload, cancel,
                                                        time.monotonic())
        gone: asyncio.Future[Any] = asyncio.ensure_future(_disconnected(request))
        try:
            await asyncio.wait([job, gone], return_when=asyncio.FIRST_COMPLETED)
            if not job.done():          # the client went away: drop the question, or stop its worker
                cancel.set()
                job.cancel()
                return 499, error_json("cancelled", "the client went away")
            return job.result()
        finally:
            gone.cancel()
            self.held -= 1

    def close(self) -> None:
        self.threads.shutdown(wait=False, cancel_futures=True)


async def _disconnected(request: Request) -> None:
    """Returns once the client has gone (its body already read, the next message says so)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(pool: WorkerPool | None = None, *, workers: int = 2, time_limit: float | None = None,
               hosts: set[str] | None = None, queue: int = MAX_QUEUE) -> Starlette:
    """The app; ``pool`` (else ``workers`` processes, ``time_limit`` seconds a request, default
    the command line's) answers the questions, ``queue`` more at most waiting for a worker (503
    with Retry-After beyond). ``hosts``: the Host names accepted besides this machine's own."""
    own = WorkerPool(workers, time_limit=time_limit) if pool is None else pool
    allowed = LOCAL_HOSTS | (hosts or set())
    asking = _Questions(own, queue)
    # fixed data, made once here: never waits on a worker or a thread, so never busy
    presets_text = _presets_once()
    page_bytes = (STATIC / "index.html").read_bytes()

    async def question(request: Request, kind: str) -> Response:
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _json(415, error_json("usage", "send the request as Content-Type: application/json"))
        try:
            body = await _body(request)
        except ClientDisconnect:        # gone (or cut off as too slow) before its body came: nobody to answer
            return _json(499, error_json("cancelled", "the client went away"))
        if body is None:
            return _json(413, error_json("usage", f"the request is over {MAX_BODY // 1024} kB"))
        try:
            payload: Any = parse_request(body)
        except SymcalcError as e:
            return _json(400, json.dumps({"error": e.to_dict()}))
        status, text = await asking.ask(kind, payload, request)
        return _json(status, text)

    def route(kind: str) -> Route:
        async def ask(request: Request) -> Response:
            return await question(request, kind)
        return Route(f"/api/{kind}", ask, methods=["POST"])

    async def presets(request: Request) -> Response:
        return _json(*presets_text)

    async def page(request: Request) -> Response:
        return Response(page_bytes, media_type="text/html")

    # one route a question, each read by its request type (symcalc.query.requests), as the command line reads it
    routes = [Route("/", page), *(route(kind) for kind in ("solve", "sweep", "compare", "check", "plan")), Route("/api/presets", presets),
              Mount("/static", StaticFiles(directory=STATIC), name="static")]
    mathjax = mathjax_dir()
    if mathjax is not None:
        routes.append(Mount("/mathjax", StaticFiles(directory=mathjax), name="mathjax"))
    else:
        async def no_mathjax(request: Request) -> Response:     # the page then shows the derivation as text
            return Response("// MathJax is not installed (pip install 'symcalc[serve]')\n",
                            media_type="text/javascript")
        routes.append(Route("/mathjax/es5/tex-svg.js", no_mathjax))

    @contextlib.asynccontextmanager
    async def lifespan(app):
        try:
            yield
        finally:
            asking.close()
            if pool is None:        # the workers this app started end with it
                own.close()

    async def http_error(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 500)
        what = {404: ("not_found", f"no such page or API: {request.url.path}"),
                405: ("usage", f"{request.url.path} does not answer {request.method}"
                               + ("; send the question as POST" if request.url.path.startswith("/api/") else ""))}
        kind, message = what.get(status, ("usage", getattr(exc, "detail", "") or "bad request"))
        return _json(status, error_json(kind, message))

    app = Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: http_error, 405: http_error},
                    middleware=[Middleware(_HostCheck, allowed=allowed)])
    app.router.redirect_slashes = False     # /api/solve/ is not found, not redirected to a Host-made URL
    app.state.pool = own
    return app


class _HostCheck:
    """Every request, the page's files and the errors included, is refused (403, JSON) unless its
    Host header names this server: one of ``allowed``, or the very address the connection came
    to (an address, which no DNS name can stand for). A page elsewhere cannot reach the server
    through a DNS name it controls (DNS rebinding), even one bound to every address."""

    def __init__(self, app, allowed: set[str]) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            host = _host_name(Headers(scope=scope).get("host") or "").lower()
            local = (scope.get("server") or ("",))[0] or ""
            if host not in self.allowed and host.strip("[]") != local:
                response = _json(403, error_json("forbidden", f"this server answers requests to "
                                                 f"{', '.join(sorted(self.allowed))} or its address only, "
                                                 f"not to '{host}'"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def own_names() -> set[str]:
    """The names and addresses of this machine a client may put in the Host header of a server
    bound to every address: its host names and the addresses they resolve to (besides the
    address each connection comes to, which :class:`_HostCheck` accepts anyway)."""
    names = {socket.gethostname(), socket.getfqdn()}
    for name in list(names):
        with contextlib.suppress(OSError, UnicodeError):
            addresses = {str(info[4][0]) for info in socket.getaddrinfo(name, None)}
            names |= {a if ":" not in a else f"[{a}]" for a in addresses}
    return {n.lower() for n in names if n}


async def _body(request: Request) -> bytes | None:
    """The request's body, or None once it is over MAX_BODY: refused by its Content-Length when
    that says so, else read no further than the limit (a client cannot make the server hold more)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        return None
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


EVERY_ADDRESS = ("0.0.0.0", "::")


def run(host: str = "127.0.0.1", port: int = 8765, workers: int = 2, time_limit: float | None = None,
        echo=print, allow_hosts: tuple[str, ...] = (), limits: Limits | None = None,
        queue: int = MAX_QUEUE) -> None:
    """Serve the page and the API until Ctrl-C, within ``limits`` (by default the connections
    this process's file descriptors allow, raised toward the hard limit first)."""
    hosts = {h.lower() for h in allow_hosts} | ({host.lower()} if host not in EVERY_ADDRESS else own_names())
    if limits is None:
        limits = Limits(connections=connection_limit(raise_fd_limit()))
    app = create_app(workers=workers, time_limit=time_limit, hosts=hosts, queue=queue)
    where = "this machine only" if host in ("127.0.0.1", "localhost", "::1") else \
        "other machines too (--host): anyone who can reach it can ask"
    echo(f"symcalc serve: http://{host}:{port}/ (bound to {host}: {where}); "
         f"{workers} workers; Ctrl-C to stop")
    make_server(app, host, port, limits).run()
