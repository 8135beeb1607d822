"""``symcalc serve``: a local page that answers as you type, and its JSON API (Starlette).

Routes: ``GET /`` the page; ``GET /static/...`` its script and style (from this package);
``GET /mathjax/...`` MathJax's files from the django-static-mathjax wheel (nothing is fetched
from another host); ``GET /api/presets`` the model and hardware presets; ``POST /api/solve``
and ``POST /api/plan`` the questions (:mod:`symcalc.serve.worker`), each answered with the JSON
the command line's ``--json`` prints, status 400 for a bad request (504 when time ran out).

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

    def refused(request: Request) -> Response | None:
        host = _host_name(request.headers.get("host") or "")
        if "*" not in allowed and host not in allowed:
            return _json(403, error_json("forbidden", f"this server answers requests to {', '.join(sorted(allowed))} "
                                         f"only, not to '{host}'"))
        return None

    async def question(request: Request, kind: str) -> Response:
        bad = refused(request)
        if bad is not None:
            return bad
        if request.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
            return _json(415, error_json("usage", "send the request as Content-Type: application/json"))
        body = await request.body()
        if len(body) > MAX_BODY:
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

    async def presets(request: Request) -> Response:
        bad = refused(request)
        if bad is not None:
            return bad
        status, text = await run_in_threadpool(own.ask, "presets", {})
        return _json(status, text)

    async def page(request: Request) -> Response:
        bad = refused(request)
        if bad is not None:
            return bad
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

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.pool = own
    return app


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
