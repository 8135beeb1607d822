"""``symcalc check``: claimed numbers tested against each other."""

from __future__ import annotations

import click

from symcalc.commands import shared
from symcalc.query.requests import CLI, CheckRequest


@click.command()
@shared.limited
@shared.VALUES
@shared.assumptions("An assumption, e.g. zero_stage=3.")
@click.option("--rtol", default=0.02, show_default=True, metavar="FRACTION",
              help="Relative tolerance: values within it agree (0.02 is 2 %).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--brief", is_flag=True, help="Only the verdicts, without the derivations of what disagrees.")
@shared.RUN
def check(values, options, rtol, as_json, brief, hardware, model, stack, formula_files):
    """Check claimed numbers against each other: every relation among the NAME=VALUE pairs.

    Exit status 0 when all agree within --rtol, 1 when something disagrees, 2 for bad input.

    \b
    symcalc check n_params=70e9 n_gpus=128 "link_bandwidth=50 GB/s" "allreduce_time=2.8 s"
    symcalc check n_params=7e9 "tokens_per_second=150000 token/s" n_gpus=64 "peak_flops=989 TFLOP/s" mfu=50%
    """
    from symcalc.query.check import (
        check as api_check,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    lib = shared.library(formula_files)
    request = CheckRequest(values=shared.pairs(values, "a value"), options=shared.pairs(options, "an option"),
                           stack=stack, rtol=rtol, hardware=hardware, model=model)
    args, kwargs = request.arguments(lib, CLI)
    result = api_check(*args, **kwargs)
    if as_json:
        click.echo(result.json())
    else:
        from symcalc.render.common import run_sentence  # on use, as the check itself above
        said = run_sentence(result.run.as_dict()) if result.run else None
        shared.echo_wrapped((f"{said}\n" if said else "") + result.text(derivations=not brief))
    if not result.ok:
        raise click.exceptions.Exit(1)
