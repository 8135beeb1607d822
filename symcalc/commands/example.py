"""``symcalc example``: the built-in worked examples."""

from __future__ import annotations

import click

from symcalc.commands import shared


@click.command()
@shared.limited
@click.option("--json", "as_json", is_flag=True, help="Print the answers as JSON.")
def example(as_json):
    """Run the built-in worked examples (from the source documents) and show one derivation.

    \b
    symcalc example
    symcalc example --json
    """
    from symcalc.examples import (
        run_examples,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    run_examples(as_json=as_json)
