"""``symcalc compare``: one quantity in two scenarios, side by side."""

from __future__ import annotations

import click

from symcalc.commands import shared
from symcalc.query.requests import CompareRequest


@click.command()
@shared.limited
@shared.TARGET
@shared.VALUES
@shared.assumptions("An assumption of both sides, e.g. zero_stage=2 (see `symcalc list options`).")
@click.option("--vs", "vs_items", multiple=True, metavar="NAME=VALUE",
              help="What side B changes (repeatable): an option (zero_stage=3), a value (\"mfu=45%\"), "
              "or hardware=NAME / model=NAME.")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of both answers and the difference, e.g. GiB.", callback=shared.given)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (both derivations included).")
@shared.output_flags("comparison")
@click.option("--hardware", metavar="NAME|profile.toml", help="A GPU preset for both sides (see `symcalc list hardware`).",
              callback=shared.given, shell_complete=shared.complete_preset("hardware"))
@click.option("--model", metavar="NAME|config.json", help="A model preset for both sides (see `symcalc list models`).",
              callback=shared.given, shell_complete=shared.complete_preset("model"))
@shared.STACK
@shared.FORMULAS
def compare(target, values, options, vs_items, to_unit, as_json, plot_file, hardware, model, stack, formula_files):
    """Compare TARGET in two scenarios: side A from NAME=VALUE pairs, --option, --hardware and
    --model; side B the same with every --vs applied. Prints both values, B - A and B / A.

    \b
    symcalc compare model_state_memory n_params=7e9 dp=64 --option zero_stage=2 --vs zero_stage=3
    symcalc compare train_time --model llama3-8b n_gpus=64 mfu=40% --hardware a100 --vs hardware=h100 --plot ab.png
    """
    from symcalc.query.compare import (
        compare as api_compare,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    if not vs_items:
        raise shared.CliError("say what side B changes with at least one --vs NAME=VALUE "
                       "(e.g. --vs zero_stage=3, --vs \"mfu=45%\", --vs hardware=h100)")
    files = {"plot_file": plot_file}
    shared.check_outputs("comparison", files)
    lib = shared.library(formula_files)
    request = CompareRequest(target=target, values=shared.pairs(values, "a value"), vs=shared.pairs(vs_items, "--vs"),
                             options=shared.pairs(options, "an option"), stack=stack, to=to_unit, hardware=hardware,
                             model=model)
    result, written = shared.ask(request, lib, api_compare, f"comparing {target}", "comparison", files)
    if as_json:
        click.echo(result.json())
        return
    shared.echo_wrapped(result.text())
    for f in written:
        click.echo(f"wrote {f}")
    for side, w in result.warnings:
        click.echo(f"warning ({side}): {w}", err=True)
