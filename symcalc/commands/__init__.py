"""The ``symcalc`` commands (click): a thin layer over the Python API, one module a command.

The group knows its commands by name from a static table (:data:`COMMANDS`) and imports a
command's module only when that command runs, or when a help lists it: ``symcalc solve`` loads
``solve.py`` and :mod:`symcalc.commands.shared`, not the planner's options or the server's. What
the commands share (NAME=VALUE pairs, --stack, the library, the time limit, the output flags,
completion, the progress line) is in :mod:`symcalc.commands.shared`.
"""

from __future__ import annotations

import importlib

import re
from pathlib import Path

import click

from symcalc.commands.shared import ProgressLine  # noqa: F401  (re-exported: symcalc.commands.ProgressLine)

# command name -> "module:object", read by name (symcalc.commands.<module>); tests/test_cli.py
# checks that each loads and is the command it is listed as
COMMANDS = {
    "cache": "cache:cache_group",
    "calibrate": "calibrate:calibrate",
    "check": "check:check",
    "compare": "compare:compare",
    "example": "example:example",
    "formulas": "formulas:formulas",
    "graph": "graph:graph",
    "list": "list:list_cmd",
    "plan": "plan:plan",
    "serve": "serve:serve",
    "show": "show:show",
    "solve": "solve:solve",
    "sweep": "sweep:sweep",
}


class LazyGroup(click.Group):
    """A click group whose commands are listed from :data:`COMMANDS` and imported on first use
    (click's lazy-loading pattern): start-up pays for the one command asked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in COMMANDS:
            return super().get_command(ctx, cmd_name)
        module, _, name = COMMANDS[cmd_name].partition(":")
        return getattr(importlib.import_module(f"{__name__}.{module}"), name)

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        """click's, but an unknown name is answered with the close names among every command
        (`sovle`: Did you mean 'solve'?): click suggests from the commands it holds loaded."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            no_such = getattr(click.exceptions, "NoSuchCommand", None)  # click >= 8.2 (8.1 suggests nothing)
            if no_such is None or not isinstance(e, no_such):
                raise
            raise no_such(e.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None


def checkout_version(root: Path) -> str | None:
    """The version pyproject.toml in ``root`` declares (a checkout run without installing), or None."""
    pyproject = root / "pyproject.toml"
    found = re.search(r'^version = "([^"]+)"', pyproject.read_text(), re.M) if pyproject.is_file() else None
    return found.group(1) if found else None


# the distribution's name (pyproject.toml): "symcalc" on PyPI is another author's package, so
# `pip install symcalc` would not install this one; the import package and the command keep the name
DISTRIBUTION = "symcalc-gpu"


def _print_version(ctx: click.Context, _param, value: bool) -> None:
    """``--version``: the installed distribution's version, or the checkout's (pyproject.toml)
    when symcalc runs from a source tree without being installed (click's own option raised
    an internal error there)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib import metadata
    try:
        version = metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        root = Path(__file__).resolve().parents[2]
        version = f"{checkout_version(root) or 'unknown'} (not installed: running from {root})"
    click.echo(f"symcalc, version {version}")
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and exit.")
def cli() -> None:
    """Solve the arithmetic of training large models for any quantity, with units and a
    derivation you can cite.

    \b
    Examples:
      symcalc solve mfu n_params=7e9 "tokens_per_second=150000 token/s" n_gpus=64 "peak_flops=1979 TFLOP/s"
      symcalc solve n_gpus n_params=30e9 "n_tokens=600e9 token" train_time=30day mfu=0.45 "peak_flops=989 TFLOP/s"
      symcalc solve model_state_memory n_params=7e9 dp=64 --option zero_stage=3
      symcalc solve train_time --model llama3-8b --hardware h100 n_gpus=64 mfu=40%
      symcalc sweep train_time --model llama3-8b --hardware h100 mfu=40% --vary n_gpus=64:1024:5:log
      symcalc compare model_state_memory n_params=7e9 dp=64 --option zero_stage=2 --vs zero_stage=3
      symcalc calibrate calibration/examples/h100_fsdp_runs.toml -o h100_fsdp.toml
      symcalc list memory
      symcalc list hardware
      symcalc show young_interval
      symcalc formulas --latex library.tex
    """

