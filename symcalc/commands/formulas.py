"""``symcalc formulas``: the whole library as one LaTeX reference document."""

from __future__ import annotations

import click

from symcalc.commands import shared


@click.command()
@shared.limited
@click.option("--latex", "latex_file", metavar="FILE", required=True,
              help="Write the whole library (formulas, quantities, options, presets) as a LaTeX document.")
@shared.FORMULAS
def formulas(latex_file, formula_files):
    """Write the formula library as one LaTeX reference document that compiles with pdflatex.

    \b
    symcalc formulas --latex library.tex
    symcalc formulas --latex - | head
    """
    from symcalc.library.presets import (
        all_presets,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    from symcalc.render.reference import (
        render_reference,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    shared.check_targets(latex=latex_file)
    lib = shared.library(formula_files)
    shared.write(latex_file, render_reference(lib, all_presets()), "--latex")
    if latex_file != "-":
        click.echo(f"wrote {latex_file}: {len(lib.formulas)} formulas, {len(lib.quantities)} quantities")
