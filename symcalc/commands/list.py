"""``symcalc list``: the library's quantities, formulas, options, and the presets."""

from __future__ import annotations

import json

import click

from symcalc.commands import shared


@click.command("list")
@shared.limited
@click.argument("words", nargs=-1, metavar="[WHAT] [TEXT]...")
@click.option("--search", "-s", "term", metavar="TEXT", help="Only entries whose name, aliases or description contain TEXT.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@shared.FORMULAS
def list_cmd(words, term, as_json, formula_files):
    """List quantities, formulas, options, hardware or models. WHAT is one of those kinds;
    the other words are a search (every word must appear in a name, alias or description).

    \b
    symcalc list formulas checkpoint
    symcalc list hardware
    """
    from symcalc.library.presets import (
        KINDS,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    from symcalc.render.catalog import (  # on use: the command line starts without it (start-up, Ctrl-C)
        catalog,
        preset_catalog,
    )
    what = words[0] if words else None
    term = " ".join(x for x in (*words[1:], term or "") if x) or None
    kinds = {"quantities", "formulas", "options"}
    if what in ("hardware", "models", "model", "gpus"):
        kind = "hardware" if what in ("hardware", "gpus") else "model"
        entries = {KINDS[kind]: preset_catalog(kind, term)}
        if as_json:
            click.echo(json.dumps(entries, indent=2))
            return
        if not any(entries.values()):
            raise shared.CliError(f"nothing matches '{term}'")
        from symcalc.render.tables import (
            print_presets,  # on use: the command line starts without it (start-up, Ctrl-C)
        )
        print_presets(entries)
        return
    if what and what not in kinds | {"all"}:
        term, what = (f"{what} {term}" if term else what), None
    lib = shared.library(formula_files)
    entries = catalog(lib, None if what in (None, "all") else what, term)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    if not any(entries.values()):
        raise shared.CliError(f"nothing matches '{term}'" if term else "the library is empty")
    from symcalc.render.tables import (
        print_catalog,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    print_catalog(entries)
