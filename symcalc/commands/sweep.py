"""``symcalc sweep``: one quantity over a range or grid of values."""

from __future__ import annotations

import click

from symcalc.commands import shared
from symcalc.query.requests import SweepRequest


@click.command()
@shared.limited
@shared.TARGET
@shared.VALUES
@click.option("--vary", "varies", multiple=True, metavar="NAME=START:STOP[:COUNT][:log]",
              help="A quantity to vary (also NAME=V1,V2,...); several make a grid.")
@shared.assumptions("An assumption, e.g. zero_stage=3.")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of the answer, e.g. GiB or day.", callback=shared.given)
@shared.output_flags("sweep")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with every point.")
@shared.RUN
def sweep(target, values, varies, options, to_unit, csv_file, plot_file, as_json, hardware, model, stack,
          formula_files):
    """Solve TARGET over a range or grid of values: what-if questions in one go.

    \b
    symcalc sweep total_memory_per_gpu --model llama2-7b --hardware h100 dp=8 \\
        --vary micro_batch_size=1:64 --plot memory.png
    symcalc sweep train_time n_params=70e9 "n_tokens=2e12 token" "peak_flops=989 TFLOP/s" \\
        --vary n_gpus=64:4096:13:log --vary mfu=30%:60%:7 --plot days.png
    """
    from symcalc.query.sweep import (
        sweep as api_sweep,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    files = {"csv_file": csv_file, "plot_file": plot_file}
    shared.check_outputs("sweep", files)
    lib = shared.library(formula_files)
    request = SweepRequest(target=target, values=shared.pairs(values, "a value"), vary=shared.pairs(varies, "--vary"),
                           options=shared.pairs(options, "an option"), stack=stack, to=to_unit, hardware=hardware,
                           model=model)
    result, written = shared.ask(request, lib, api_sweep, f"sweeping {target}", "sweep", files)
    if as_json:
        click.echo(result.json())
        return
    from symcalc.render.sweep_text import (
        sweep_text,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    shared.echo_wrapped(sweep_text(result))
    for f in written:
        click.echo(f"wrote {f}")
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
