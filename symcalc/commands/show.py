"""``symcalc show``: one quantity, formula or option described."""

from __future__ import annotations

import json

import click

from symcalc.commands import shared


@click.command()
@shared.limited
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@shared.FORMULAS
def show(name, as_json, formula_files):
    """Show a quantity, formula or option: meaning, unit, source, LaTeX.

    \b
    symcalc show young_interval
    symcalc show zero_stage --json
    """
    from symcalc.render.catalog import (
        describe,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    lib = shared.library(formula_files)
    info = describe(lib, name)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    from symcalc.render.tables import (
        print_description,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    print_description(info)
