"""``symcalc serve``: a local page that answers as you type, and its JSON API (Starlette).

Routes: ``GET /`` the page; ``GET /static/...`` its script and style (from this package);
``GET /mathjax/...`` MathJax's files from the django-static-mathjax wheel (nothing is fetched
from another host); ``GET /api/presets`` the model and hardware presets; ``POST /api/solve``
and ``POST /api/plan`` the questions (:mod:`symcalc.serve.worker`), each answered with the JSON
the command line's ``--json`` prints, status 400 for a bad request (504 when time ran out, 503
when every worker stayed busy with earlier requests for the request's whole time limit, 413 for
a body over 1 MB, 415 for one not sent as JSON, 404 and 405 as JSON errors too).

Requests that could come from another site are refused: an API request must be sent as
``application/json`` (which a page elsewhere cannot do without a preflight this server never
grants), and the Host header must name this machine (no DNS rebinding).
"""

from __future__ import annotations

import contextlib
import json
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from symcalc.errors import SymcalcError
from symcalc.serve.worker import WorkerPool, error_json, parse_request

STATIC = Path(__file__).resolve().parent / "static"
MAX_BODY = 1 << 20          # a question (or a pasted config.json) is a few kB
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]"}


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
    return Response(text, status_code=status, media_type="application/json")


def create_app(pool: WorkerPool | None = None, *, workers: int = 2, time_limit: float | None = None,
               hosts: set[str] | None = None) -> Starlette:
    """The app; ``pool`` (else ``workers`` processes, ``time_limit`` seconds a request, default
    the command line's) answers the questions. ``hosts``: the Host names accepted besides
    this machine's own ("*": any, for a server bound to every address)."""
    own = WorkerPool(workers, time_limit=time_limit) if pool is None else pool
    allowed = LOCAL_HOSTS | (hosts or set())

    async def question(request: Request, kind: str) -> Response:
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _json(415, error_json("usage", "send the request as Content-Type: application/json"))
        body = await _body(request)
        if body is None:
            return _json(413, error_json("usage", f"the request is over {MAX_BODY // 1024} kB"))
        try:
            payload: Any = parse_request(body)
        except SymcalcError as e:
            return _json(400, json.dumps({"error": e.to_dict()}))
        status, text = await run_in_threadpool(own.ask, kind, payload)
        return _json(status, text)

    async def solve(request: Request) -> Response:
        return await question(request, "solve")

    async def plan(request: Request) -> Response:
        return await question(request, "plan")

    known: list[str] = []      # the presets' answer once a worker gave it: fixed data, kept here

    async def presets(request: Request) -> Response:
        if known:
            return _json(200, known[0])
        status, text = await run_in_threadpool(own.ask, "presets", {})
        if status == 200:
            known.append(text)
        return _json(status, text)

    async def page(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    routes = [Route("/", page), Route("/api/solve", solve, methods=["POST"]),
              Route("/api/plan", plan, methods=["POST"]), Route("/api/presets", presets),
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
    Host header names this server: a page elsewhere cannot reach it through a DNS name it controls."""

    def __init__(self, app, allowed: set[str]) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            host = _host_name(Headers(scope=scope).get("host") or "")
            if "*" not in self.allowed and host not in self.allowed:
                response = _json(403, error_json("forbidden", f"this server answers requests to "
                                                 f"{', '.join(sorted(self.allowed))} only, not to '{host}'"))
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


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


def run(host: str = "127.0.0.1", port: int = 8765, workers: int = 2, time_limit: float | None = None,
        echo=print) -> None:
    """Serve the page and the API until Ctrl-C."""
    import uvicorn  # on use: only `symcalc serve` needs the server
    hosts = {"*"} if host in ("0.0.0.0", "::") else {host}
    app = create_app(workers=workers, time_limit=time_limit, hosts=hosts)
    where = "this machine only" if host in ("127.0.0.1", "localhost", "::1") else \
        "other machines too (--host): anyone who can reach it can ask"
    echo(f"symcalc serve: http://{host}:{port}/ (bound to {host}: {where}); "
         f"{workers} workers; Ctrl-C to stop")
    uvicorn.run(app, host=host, port=port, log_level="warning")
