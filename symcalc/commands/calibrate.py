"""``symcalc calibrate``: the step-time model fitted to measured steps, written as a hardware profile."""

from __future__ import annotations

import functools

import click

from symcalc.budget import DEFAULT_CALIBRATE_LIMIT
from symcalc.commands import shared


@click.command()
@shared.limited(default=DEFAULT_CALIBRATE_LIMIT)
@click.argument("runs_file", metavar="RUNS.toml", callback=shared.given)
@click.option("--hardware", metavar="NAME", callback=shared.given,
              help="The built-in GPU preset the runs ran on, the profile's base (instead of the runs file's "
              "hardware; see `symcalc list hardware`).")
@click.option("--output", "-o", "output", metavar="PROFILE.toml", required=True, callback=shared.given,
              help="Write the fitted hardware profile to this file ('-' for stdout).")
@click.option("--fit", "fit_names", multiple=True, metavar="COEF", callback=shared.given,
              help="A coefficient to fit (repeatable; instead of the runs file's fit): sustained_clock_fraction, "
              "comm_contention, layer_pass_overhead, elementwise_traffic_factor.")
@click.option("--name", metavar="NAME", callback=shared.given,
              help="The profile's name (instead of the runs file's name).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@shared.FORMULAS
def calibrate(runs_file, hardware, output, fit_names, name, as_json, formula_files):
    """Fit the step-time model to steps measured on your cluster (RUNS.toml: each run's layout,
    options and step time) and write the fitted coefficients as a hardware profile, to use as
    --hardware PROFILE.toml in solve, sweep and plan. Prints each run's error before and after.
    Each coefficient stays in the range --hardware accepts (the output says when one is held at
    its bound); the profile is never written over RUNS.toml.

    \b
    symcalc calibrate calibration/examples/h100_fsdp_runs.toml -o h100_fsdp.toml
    symcalc calibrate runs.toml --hardware h100 --fit sustained_clock_fraction -o ours.toml
    """
    from symcalc.library.presets import (
        find_preset,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    from symcalc.query.calibrate import (  # on use: the command line starts without it (start-up, Ctrl-C)
        calibrate as api_calibrate,
        check_not_input,
    )
    from symcalc.query.solve import (
        solve as api_solve,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    if output == "-" and as_json:
        raise shared.CliError("--json and -o - would both write to standard output; give -o a file name")
    shared.check_targets(output=output)
    check_not_input(runs_file, output)
    lib = shared.library(formula_files)
    with shared.working("fitting the step-time model to the runs"):
        result = api_calibrate(runs_file, lib, functools.partial(api_solve, library=lib), find_preset,
                               hardware=hardware, fit_names=list(fit_names) or None, name=name)
    shared.write(output, result.profile(), "--output")
    if output == "-":
        return
    result.profile_path = output
    click.echo(result.json() if as_json else result.text())
