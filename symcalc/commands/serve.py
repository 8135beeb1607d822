"""``symcalc serve``: the local page and its JSON API."""

from __future__ import annotations

import click

from symcalc.budget import DEFAULT_PLAN_LIMIT, DEFAULT_QUESTION_LIMIT, ENV_LIMIT
from symcalc.commands import shared


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, callback=shared.given,
              help="The address to listen on (127.0.0.1: this machine only; 0.0.0.0 lets other machines ask, "
              "by this machine's own names and addresses).")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="The port.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Worker processes that answer the questions (each request in one, killed at the time limit).")
@click.option("--time-limit", "time_limit", metavar="SECONDS",
              help=f"Give up on a request after SECONDS (default the command line's: {DEFAULT_QUESTION_LIMIT:g} for "
              f"a solve, {DEFAULT_PLAN_LIMIT:g} for a plan; or {ENV_LIMIT}).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME", callback=shared.given,
              help="Also answer requests whose Host header is NAME (a DNS name of this machine); repeatable.")
def serve(host, port, workers, time_limit, allow_hosts):
    """Serve a local page that answers as you type (memory, step time, the best layouts, and any
    quantity solved with its derivation), and a JSON API: POST /api/solve and POST /api/plan answer
    with what `symcalc solve|plan ... --json` prints.

    \b
    symcalc serve                      # then open http://127.0.0.1:8765/
    symcalc serve --port 9000 --workers 4
    curl -s localhost:8765/api/solve -H 'Content-Type: application/json' -d '{"target": "mfu",
      "values": {"n_params": "7e9", "tokens_per_second": "150000 token/s", "n_gpus": "64"}, "hardware": "h100"}'
    """
    if host.strip() == "*" or "*" in allow_hosts:
        # '*' as "any Host header" would undo the DNS-rebinding check
        raise shared.CliError("'*' is not an address or a name: --host 0.0.0.0 listens on every address (and answers "
                       "requests to this machine's own names and addresses; add others with --allow-host NAME)")
    try:
        from symcalc.serve.app import (
            run,  # on use: Starlette and uvicorn load for this command only (the serve extra)
        )
    except ModuleNotFoundError as e:
        raise shared.CliError(f"symcalc serve needs {e.name}: pip install starlette uvicorn (or reinstall symcalc)") from None
    # None: each kind of request keeps its own default limit (a solve's, a plan's)
    run(host=host, port=port, workers=workers, time_limit=shared.time_limit_of(time_limit, default=None), echo=click.echo,
        allow_hosts=allow_hosts)
