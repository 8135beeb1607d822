"""``symcalc solve``: one quantity from given values, with its derivation."""

from __future__ import annotations

import click

from symcalc.commands import shared
from symcalc.query.requests import SolveRequest


@click.command()
@shared.limited
@shared.TARGET
@shared.VALUES
@shared.assumptions("An assumption, e.g. zero_stage=3 (see `symcalc list options`).")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of the answer, e.g. GiB or hour.", callback=shared.given)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@shared.output_flags("result")
@click.option("--brief", is_flag=True, help="Print only the answer line.")
@click.option("--round", "rounding", type=click.Choice(["up", "down", "nearest"]),
              help="How to round a whole-number answer (default: the way that keeps the given limits, "
              "else the quantity's own way).")
@click.option("--allow-conflicts", is_flag=True,
              help="Answer even when given values contradict each other (each conflict becomes a warning).")
@click.option("--sensitivity", is_flag=True,
              help="Also give the elasticity d ln(target) / d ln(value) of the answer to each given value.")
@shared.RUN
def solve(target, values, options, to_unit, as_json, latex_file, markdown_file, brief, rounding, allow_conflicts,
          sensitivity, hardware, model, stack, formula_files):
    """Solve for TARGET from NAME=VALUE pairs (values may carry units: "989 TFLOP/s", 24h, 45%).

    \b
    symcalc solve mfu n_params=7e9 "tokens_per_second=150000 token/s" n_gpus=64 --hardware h100
    symcalc solve step_time --model llama3-8b --hardware h100 tp=1 pp=1 dp=64 micro_batch_size=2 global_batch_size=512 --stack fsdp
    """
    from symcalc.query.solve import (
        solve as api_solve,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    files = {"latex_file": latex_file, "markdown_file": markdown_file}
    to_stdout = shared.outputs_to_stdout("result", files, as_json)
    if len(to_stdout) > 1:
        raise shared.CliError(f"{' and '.join(to_stdout)} would both write to standard output; "
                       "give --latex/--markdown a file name")
    shared.check_outputs("result", files)
    lib = shared.library(formula_files)
    request = SolveRequest(target=target, values=shared.pairs(values, "a value"), options=shared.pairs(options, "an option"),
                           stack=stack, to=to_unit, round=rounding, hardware=hardware, model=model,
                           allow_conflicts=allow_conflicts, sensitivity=sensitivity)
    result, _ = shared.ask(request, lib, api_solve, f"solving {target}", "result", files)
    if as_json:
        click.echo(result.json())
        return
    if "-" in files.values():
        return
    from symcalc.render.text import (
        headline,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    from symcalc.render.wrap import wrap_text  # on use: the command line starts without it
    click.echo(wrap_text(headline(result) if brief else result.text()))
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)
