"""The ``symcalc`` commands (click): a thin layer over the Python API.

Every command is one question under a time limit (``--time-limit``, SYMCALC_TIME_LIMIT,
default :data:`symcalc.budget.DEFAULT_QUESTION_LIMIT`), and every file it writes is written
atomically (:mod:`symcalc.outfile`), its name checked before any work. Errors are raised, not
printed: :func:`symcalc.cli.main` turns them into one line and an exit status.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import click

from symcalc.budget import (
    DEFAULT_CALIBRATE_LIMIT,
    DEFAULT_PLAN_LIMIT,
    DEFAULT_QUESTION_LIMIT,
    ENV_LIMIT,
    parse_seconds,
    question,
)
from symcalc.errors import BadOptionValueError, SymcalcError, did_you_mean
from symcalc.outfile import check_target, write_file


class CliError(SymcalcError):
    kind = "usage"


def _pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    """Read NAME=VALUE arguments; later ones may not repeat earlier names."""
    out: dict[str, str] = {}
    for item in items:
        if "=" not in item:
            raise CliError(f"expected {what} as NAME=VALUE, got '{item}'")
        name, value = item.split("=", 1)
        name, value = name.strip(), value.strip()
        if not name:
            raise CliError(f"'{item}': the name before '=' is missing")
        if not value:
            raise CliError(f"{name}= has no value (write e.g. {name}=64)")
        if name in out:
            raise CliError(f"{name} is given twice")
        out[name] = value
    return out


STACK_OPTION = "stack"      # the option --stack NAME gives (formulas/stacks.toml declares it)


def _options(lib, items: tuple[str, ...], stack: str | None) -> dict[str, str]:
    """The --option KEY=VALUE pairs, with --stack NAME as ``stack=NAME``: both given with
    different values is an error, and so is --stack with a library that has no option stack, or
    a name that is none of its values (the closest names are suggested)."""
    options = _pairs(items, "an option")
    if stack is None:
        return options
    if STACK_OPTION not in lib.options:
        raise CliError(f"--stack: the formula library has no option '{STACK_OPTION}' (training stacks are "
                       "declared as its values; see `symcalc list options`)")
    if options.get(STACK_OPTION, stack) != stack:
        raise CliError(f"--stack {stack} and --option {STACK_OPTION}={options[STACK_OPTION]} disagree; give one")
    known = lib.options[STACK_OPTION].values
    if stack not in known:
        raise BadOptionValueError(f"unknown stack '{stack}'.{did_you_mean(stack, known)} Stacks: "
                                  f"{', '.join(known)} (see `symcalc show {STACK_OPTION}`)")
    return {**options, STACK_OPTION: stack}


def _library(formula_files: tuple[str, ...]):
    from symcalc.library.loading import (  # on use: the command line starts without it (start-up, Ctrl-C)
        default_library,
        load_library,
    )
    if not formula_files:
        return default_library()
    return load_library(extra=formula_files)


def _targets(**files: str | None) -> None:
    """Refuse output file names that cannot be written (empty, no such directory) before any
    work; ``files`` maps each option (``latex``) to its value (None: not given, '-': stdout)."""
    for option, path in files.items():
        if path is not None and path != "-":
            check_target(path, f"--{option}")


def _write(path: str, content: str, what: str) -> None:
    if path == "-":
        click.echo(content)
        return
    write_file(path, content, what)


def _given(ctx, param, value):
    """An option given as '' (a shell variable that was not set) is a mistake, never "not
    given": --model "" would answer without the model, --formulas "" would load the current
    directory."""
    if any(v is not None and not v.strip() for v in (value if isinstance(value, tuple) else (value,))):
        raise click.BadParameter("needs a value (got an empty one)")
    return value


def _time_limit(raw: str | None, default: float | None = DEFAULT_QUESTION_LIMIT) -> float | None:
    """--time-limit, else SYMCALC_TIME_LIMIT, else ``default``; a malformed one is refused."""
    if raw is not None:
        return parse_seconds(raw, "--time-limit")
    env = os.environ.get(ENV_LIMIT, "").strip()
    return parse_seconds(env, ENV_LIMIT) if env else default


def limited(command=None, *, default: float = DEFAULT_QUESTION_LIMIT):
    """Give a command ``--time-limit`` and run it as one question under that limit (``default``
    when neither the option nor SYMCALC_TIME_LIMIT is given)."""
    if command is None:
        return functools.partial(limited, default=default)

    @click.option("--time-limit", "time_limit", metavar="SECONDS",
                  help=f"Give up after SECONDS (default {default:g}, or {ENV_LIMIT}; inf for none).")
    @functools.wraps(command)
    def run(*args, time_limit: str | None = None, **kwargs):
        limit = _time_limit(time_limit, default)
        # the built-in library first, outside the limit: a process's one-time build (a cold
        # cache on a busy machine) is not the question's time
        from symcalc.library.loading import default_library  # on use: the command line starts without it (start-up, Ctrl-C)
        default_library()
        with question(limit):
            return command(*args, **kwargs)
    return run


def _output_flags(kind: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The file-output flags of a record kind, as click options, from the format registry
    (symcalc.render.formats.OUTPUT_FLAGS): a format gets its flag there, not here."""
    from symcalc.render.formats import OUTPUT_FLAGS  # on use: at import of the commands, no renderer loaded

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        for out in reversed(OUTPUT_FLAGS[kind]):
            command = click.option(out.flag, out.dest, metavar="FILE", help=out.help)(command)
        return command
    return add


def _outputs_to_stdout(kind: str, files: dict[str, str | None], as_json: bool) -> list[str]:
    """The flags of ``kind`` (and --json) that would write to standard output."""
    from symcalc.render.formats import OUTPUT_FLAGS  # on use: the command line starts without it (start-up, Ctrl-C)
    return (["--json"] if as_json else []) + [o.flag for o in OUTPUT_FLAGS[kind] if o.text and files.get(o.dest) == "-"]


def _check_outputs(kind: str, files: dict[str, str | None]) -> None:
    """Refuse an output file that cannot be written, before any work (--csv, --plot ...)."""
    from symcalc.render.formats import OUTPUT_FLAGS  # on use: the command line starts without it (start-up, Ctrl-C)
    _targets(**{o.flag.lstrip("-"): files.get(o.dest) for o in OUTPUT_FLAGS[kind]})


def _write_outputs(kind: str, record: Any, files: dict[str, str | None]) -> list[str]:
    """Write ``record`` in each format whose flag was given; returns the files written."""
    from symcalc.render.formats import OUTPUT_FLAGS, render  # on use: the command line starts without it
    written = []
    for out in OUTPUT_FLAGS[kind]:
        path = files.get(out.dest)
        if path is None:
            continue
        if out.text:
            _write(path, render(out.format, record, **dict(out.options)), out.flag)
        else:
            render(out.format, record, path, **dict(out.options))
        if path != "-":
            written.append(path)
    return written


# shell completion (click's: eval "$(_SYMCALC_COMPLETE=bash_source symcalc)", zsh_source, fish_source):
# names read from the built-in library and presets, nothing evaluated
def _complete(names: list[str], incomplete: str) -> list[str]:
    return sorted(n for n in names if n.startswith(incomplete))[:200]


def _complete_quantity(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from symcalc.library.loading import default_library  # on use: only when completing
    lib = default_library()
    if "=" in incomplete:       # NAME=VALUE: nothing to complete in a value
        return []
    return _complete(list(lib.quantities) + list(lib.aliases), incomplete)


def _complete_pair(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    return [f"{n}=" for n in _complete_quantity(ctx, param, incomplete)]


def _complete_option(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from symcalc.library.loading import default_library  # on use: only when completing
    options = default_library().options
    name, eq, _ = incomplete.partition("=")
    if eq and name in options:
        return _complete([f"{name}={v}" for v in options[name].values], incomplete)
    return [f"{n}=" for n in _complete(list(options), incomplete)]


def _complete_preset(kind: str):
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
        from symcalc.library.presets import all_presets  # on use: only when completing
        presets = all_presets()[kind]
        names = list(presets) + [a for p in presets.values() for a in getattr(p, "aliases", ())]
        return _complete(names, incomplete)
    return complete


# what several commands share, declared once
_TARGET = click.argument("target", shell_complete=_complete_quantity)
_VALUES = click.argument("values", nargs=-1, shell_complete=_complete_pair)
_HARDWARE = click.option("--hardware", metavar="NAME|profile.toml", callback=_given,
                         shell_complete=_complete_preset("hardware"),
                         help="Fill in a GPU's known values (see `symcalc list hardware`), or read a hardware "
                         "profile from a TOML file.")
_MODEL = click.option("--model", metavar="NAME|config.json", callback=_given, shell_complete=_complete_preset("model"),
                      help="Fill in a model's shapes (see `symcalc list models`), or read a Hugging Face config.json.")
_FORMULAS = click.option("--formulas", "formula_files", multiple=True, metavar="FILE", callback=_given,
                         help="Load extra formula files on top of the built-in library.")
_STACK = click.option("--stack", metavar="NAME", callback=_given,
                      shell_complete=lambda ctx, param, inc: [v.partition("=")[2] for v in
                                                              _complete_option(ctx, param, f"{STACK_OPTION}={inc}")],
                      help=f"The training stack that runs the layout (see `symcalc show {STACK_OPTION}`): "
                      f"--option {STACK_OPTION}=NAME.")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="symcalc", prog_name="symcalc")
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


@cli.command()
@limited
@_TARGET
@_VALUES
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", shell_complete=_complete_option,
              help="An assumption, e.g. zero_stage=3 (see `symcalc list options`).")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of the answer, e.g. GiB or hour.", callback=_given)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_output_flags("result")
@click.option("--brief", is_flag=True, help="Print only the answer line.")
@click.option("--round", "rounding", type=click.Choice(["up", "down", "nearest"]),
              help="How to round a whole-number answer (default: the way that keeps the given limits, "
              "else the quantity's own way).")
@click.option("--allow-conflicts", is_flag=True,
              help="Answer even when given values contradict each other (each conflict becomes a warning).")
@click.option("--sensitivity", is_flag=True,
              help="Also give the elasticity d ln(target) / d ln(value) of the answer to each given value.")
@_HARDWARE
@_MODEL
@_STACK
@_FORMULAS
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
    to_stdout = _outputs_to_stdout("result", files, as_json)
    if len(to_stdout) > 1:
        raise CliError(f"{' and '.join(to_stdout)} would both write to standard output; "
                       "give --latex/--markdown a file name")
    _check_outputs("result", files)
    lib = _library(formula_files)
    with _working(f"solving {target}"):
        result = api_solve(target, _pairs(values, "a value"), options=_options(lib, options, stack),
                           to=to_unit, library=lib, hardware=hardware, model=model, rounding=rounding,
                           conflicts="warn" if allow_conflicts else True, sensitivity=sensitivity)
    _write_outputs("result", result, files)
    if as_json:
        click.echo(result.json())
        return
    if "-" in files.values():
        return
    from symcalc.render.text import (
        headline,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    click.echo(headline(result) if brief else result.text())
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)


@cli.command()
@limited
@_TARGET
@_VALUES
@click.option("--vary", "varies", multiple=True, metavar="NAME=START:STOP[:COUNT][:log]",
              help="A quantity to vary (also NAME=V1,V2,...); several make a grid.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", shell_complete=_complete_option, help="An assumption, e.g. zero_stage=3.")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of the answer, e.g. GiB or day.", callback=_given)
@_output_flags("sweep")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with every point.")
@_HARDWARE
@_MODEL
@_STACK
@_FORMULAS
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
    if not varies:
        raise CliError("give at least one --vary NAME=START:STOP[:COUNT][:log]")
    files = {"csv_file": csv_file, "plot_file": plot_file}
    _check_outputs("sweep", files)
    lib = _library(formula_files)
    with _working(f"sweeping {target}"):
        result = api_sweep(target, _pairs(values, "a value"), vary=_pairs(varies, "--vary"),
                           options=_options(lib, options, stack), to=to_unit, library=lib,
                           hardware=hardware, model=model)
    written = _write_outputs("sweep", result, files)
    if as_json:
        click.echo(result.json())
        return
    from symcalc.render.sweep_text import (
        sweep_text,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    click.echo(sweep_text(result))
    for f in written:
        click.echo(f"wrote {f}")
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)


@cli.command()
@limited
@_VALUES
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", shell_complete=_complete_option, help="An assumption, e.g. zero_stage=3.")
@click.option("--rtol", default=0.02, show_default=True, metavar="FRACTION",
              help="Relative tolerance: values within it agree (0.02 is 2 %).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--brief", is_flag=True, help="Only the verdicts, without the derivations of what disagrees.")
@_HARDWARE
@_MODEL
@_STACK
@_FORMULAS
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
    lib = _library(formula_files)
    result = api_check(_pairs(values, "a value"), options=_options(lib, options, stack), rtol=rtol,
                       library=lib, hardware=hardware, model=model)
    click.echo(result.json() if as_json else result.text(derivations=not brief))
    if not result.ok:
        raise click.exceptions.Exit(1)


@cli.group("cache", invoke_without_command=True)
@click.pass_context
def cache_group(ctx):
    """See or clear the on-disk cache of loaded libraries, derivations and parsed units.

    \b
    symcalc cache info
    symcalc cache clear
    """
    if ctx.invoked_subcommand is None:
        ctx.invoke(cache_info)


@cache_group.command("info")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cache_info(as_json=False):
    """Where the cache is, whether it is on, and what it holds (entries by kind, bytes).

    \b
    symcalc cache info
    symcalc cache info --json
    """
    from symcalc import cache  # on use: the command line starts without it (start-up, Ctrl-C)
    got = cache.info()
    if as_json:
        click.echo(json.dumps(got, indent=2))
        return
    state = f"not used: {got['refused']}" if got.get("refused") else "on" if got["enabled"] else "off"
    click.echo(f"cache: {got['directory']} ({state}; SYMCALC_CACHE_DIR to move it, "
               "SYMCALC_NO_CACHE=1 to turn it off)")
    click.echo(f"key:   {got['key_directory']}")
    for kind, e in sorted(got["entries"].items()):
        click.echo(f"  {kind:<11} {e['count']:>5} entries  {e['bytes'] / 1e6:8.1f} MB")
    click.echo(f"  {'in all':<11} {sum(e['count'] for e in got['entries'].values()):>5} entries  "
               f"{got['bytes'] / 1e6:8.1f} MB")


@cache_group.command("clear")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def cache_clear(as_json):
    """Delete every entry the cache wrote, pint's parsed units included, and the folders older
    versions let pint keep its own files in (files it did not write, and links, are left alone).

    \b
    symcalc cache clear
    symcalc cache clear --json
    """
    from symcalc import cache  # on use: the command line starts without it (start-up, Ctrl-C)
    removed = cache.clear()
    if as_json:
        click.echo(json.dumps({"removed": removed, "directory": str(cache.cache_dir())}))
    else:
        click.echo(f"removed {removed} entries from {cache.cache_dir()}")


@cli.command("list")
@limited
@click.argument("words", nargs=-1, metavar="[WHAT] [TEXT]...")
@click.option("--search", "-s", "term", metavar="TEXT", help="Only entries whose name, aliases or description contain TEXT.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_FORMULAS
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
            raise CliError(f"nothing matches '{term}'")
        from symcalc.render.tables import (
            print_presets,  # on use: the command line starts without it (start-up, Ctrl-C)
        )
        print_presets(entries)
        return
    if what and what not in kinds | {"all"}:
        term, what = (f"{what} {term}" if term else what), None
    lib = _library(formula_files)
    entries = catalog(lib, None if what in (None, "all") else what, term)
    if as_json:
        click.echo(json.dumps(entries, indent=2))
        return
    if not any(entries.values()):
        raise CliError(f"nothing matches '{term}'" if term else "the library is empty")
    from symcalc.render.tables import (
        print_catalog,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    print_catalog(entries)


@cli.command()
@limited
@click.argument("name")
@click.option("--depth", type=click.IntRange(min=1), metavar="N",
              help="Follow at most N formula hops each way (default: all; --plot draws 2 unless given).")
@click.option("-o", "--option", "options", multiple=True, metavar="KEY=VALUE", shell_complete=_complete_option,
              help="An option the formulas in force depend on (attention_kernel=flash, zero_stage=3, ...).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON: the neighbourhood, and the graph's nodes and edges.")
@click.option("--dot", "dot_file", metavar="FILE", help="Write what gives NAME as a Graphviz DOT file.")
@click.option("--plot", "plot_file", metavar="FILE", help="Draw what gives NAME (.png/.svg/.pdf).")
@_STACK
@_FORMULAS
def graph(name, depth, options, as_json, dot_file, plot_file, stack, formula_files):
    """What a quantity depends on and what depends on it, through the library's formulas (a
    networkx graph: quantities and formulas, "appears in" and "determines" edges).

    \b
    symcalc graph step_time --depth 1
    symcalc graph tp --json
    symcalc graph mfu --plot mfu.png --depth 2
    """
    from symcalc.library import graph as G  # on use: networkx is imported only here
    from symcalc.query.implied import resolve_options  # on use: the command line starts without it (start-up, Ctrl-C)
    from symcalc.render.graph import graph_text, plot_graph  # on use: the command line starts without it

    _targets(dot=dot_file, plot=plot_file)
    lib = _library(formula_files)
    quantity = lib.quantity(name).name          # aliases; unknown names suggest the closest
    resolved = resolve_options(lib, _options(lib, options, stack), {}, {})
    g = G.dependency_graph(lib, resolved.values)
    info = G.neighbourhood(g, quantity, depth)
    sub = G.subgraph_of(g, quantity, depth)
    if dot_file is not None:
        _write(dot_file, G.as_dot(sub), "--dot")
    if plot_file is not None:
        plot_graph(G.subgraph_of(g, quantity, depth or 2), quantity, plot_file)
    if as_json:
        click.echo(json.dumps({**info, "options": resolved.values, **G.as_json(sub)}, indent=2))
        return
    click.echo(graph_text(lib, info, {k: v for k, v in resolved.values.items() if k in _options(lib, options, stack)}))
    for f in (dot_file, plot_file):
        if f:
            click.echo(f"wrote {f}")


@cli.command()
@limited
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_FORMULAS
def show(name, as_json, formula_files):
    """Show a quantity, formula or option: meaning, unit, source, LaTeX.

    \b
    symcalc show young_interval
    symcalc show zero_stage --json
    """
    from symcalc.render.catalog import (
        describe,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    lib = _library(formula_files)
    info = describe(lib, name)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    from symcalc.render.tables import (
        print_description,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    print_description(info)


@cli.command()
@limited
@_TARGET
@_VALUES
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", shell_complete=_complete_option,
              help="An assumption of both sides, e.g. zero_stage=2 (see `symcalc list options`).")
@click.option("--vs", "vs_items", multiple=True, metavar="NAME=VALUE",
              help="What side B changes (repeatable): an option (zero_stage=3), a value (\"mfu=45%\"), "
              "or hardware=NAME / model=NAME.")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of both answers and the difference, e.g. GiB.", callback=_given)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (both derivations included).")
@_output_flags("comparison")
@click.option("--hardware", metavar="NAME|profile.toml", help="A GPU preset for both sides (see `symcalc list hardware`).",
              callback=_given, shell_complete=_complete_preset("hardware"))
@click.option("--model", metavar="NAME|config.json", help="A model preset for both sides (see `symcalc list models`).",
              callback=_given, shell_complete=_complete_preset("model"))
@_STACK
@_FORMULAS
def compare(target, values, options, vs_items, to_unit, as_json, plot_file, hardware, model, stack, formula_files):
    """Compare TARGET in two scenarios: side A from NAME=VALUE pairs, --option, --hardware and
    --model; side B the same with every --vs applied. Prints both values, B - A and B / A.

    \b
    symcalc compare model_state_memory n_params=7e9 dp=64 --option zero_stage=2 --vs zero_stage=3
    symcalc compare train_time --model llama3-8b n_gpus=64 mfu=40% --hardware a100 --vs hardware=h100 --plot ab.png
    """
    from symcalc.query.compare import (  # on use: the command line starts without it (start-up, Ctrl-C)
        compare as api_compare,
        split_vs,
    )
    if not vs_items:
        raise CliError("say what side B changes with at least one --vs NAME=VALUE "
                       "(e.g. --vs zero_stage=3, --vs \"mfu=45%\", --vs hardware=h100)")
    files = {"plot_file": plot_file}
    _check_outputs("comparison", files)
    lib = _library(formula_files)
    vs = split_vs(lib, _pairs(vs_items, "--vs"))
    with _working(f"comparing {target}"):
        result = api_compare(target, _pairs(values, "a value"), options=_options(lib, options, stack), vs=vs.given,
                             vs_options=vs.options, hardware=hardware, model=model, vs_hardware=vs.hardware,
                             vs_model=vs.model, to=to_unit, library=lib)
    written = _write_outputs("comparison", result, files)
    if as_json:
        click.echo(result.json())
        return
    click.echo(result.text())
    for f in written:
        click.echo(f"wrote {f}")
    for side, w in result.warnings:
        click.echo(f"warning ({side}): {w}", err=True)


@cli.command()
@limited
@click.option("--latex", "latex_file", metavar="FILE", required=True,
              help="Write the whole library (formulas, quantities, options, presets) as a LaTeX document.")
@_FORMULAS
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
    _targets(latex=latex_file)
    lib = _library(formula_files)
    _write(latex_file, render_reference(lib, all_presets()), "--latex")
    if latex_file != "-":
        click.echo(f"wrote {latex_file}: {len(lib.formulas)} formulas, {len(lib.quantities)} quantities")


@contextlib.contextmanager
def _working(message: str) -> Iterator[None]:
    """A progress line for a question that lasts over a second (a cold derivation, a large
    sweep, a calibration) on a terminal's stderr: ``message`` with rich's spinner, from a timer,
    gone when the answer is ready. Nothing when stderr is not a terminal."""
    if not sys.stderr.isatty():
        yield
        return
    line, lock, done = ProgressLine(), threading.Lock(), [False]

    def show() -> None:
        with lock:
            if not done[0]:
                line(message)
    timer = threading.Timer(ProgressLine.DELAY, show)
    timer.daemon = True
    timer.start()
    try:
        yield
    finally:
        timer.cancel()
        with lock:
            done[0] = True
            line.stop()


class ProgressLine:
    """A one-line status on a terminal's stderr for work that lasts: silent for its first second
    (a quick answer should not flicker), then rich's spinner with the latest message."""

    DELAY = 1.0

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.status: Any = None       # a rich Status once shown (rich is imported on use)

    def __call__(self, message: str) -> None:
        if self.status is None:
            if time.perf_counter() - self.t0 < self.DELAY:
                return
            from rich.console import Console
            self.status = Console(stderr=True).status(message)
            self.status.start()
        else:
            self.status.update(message)

    def stop(self) -> None:
        if self.status is not None:
            self.status.stop()


@cli.command()
@limited(default=DEFAULT_PLAN_LIMIT)     # a first plan solves up to 48 option combinations (budget.py)
@_VALUES
@click.option("--gpus", "gpus", metavar="N|A:B|N1,N2,...", callback=_given,
              help="GPU count; a range A:B (A, then 2^k and 3x2^k multiples of the node size up to B) or a "
              "list with --deadline, --budget or a throughput target.")
@click.option("--tokens", metavar="TOKENS", callback=_given,
              help="Training tokens, e.g. 15e12 (for days, GPU-hours and cost; default the model preset's).")
@click.option("--global-batch-size", "global_batch_size", metavar="SEQUENCES", callback=_given,
              help="Global batch in sequences (or give \"global_batch_tokens=...\"); default about 4M tokens, "
                   "a power of two of sequences, said in the notes.")
@click.option("--seq-len", "seq_len", metavar="TOKENS", callback=_given, help="Sequence length (default the model's).")
@click.option("--gpus-per-node", "gpus_per_node", metavar="N", callback=_given,
              help="GPUs a node (default the hardware's, usually 8).")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", shell_complete=_complete_option,
              help="Fix an option (zero_stage=3 fixes a searched one; attention_kernel=flash, precision=...).")
@click.option("--by", type=click.Choice(["time", "days", "gpu_hours", "cost", "memory"]), default="time",
              show_default=True, help="Rank by step time, training days, GPU-hours, cost or memory per GPU.")
@click.option("--top", default=10, show_default=True, metavar="K", help="Show the K best layouts.")
@click.option("--headroom", "memory_headroom", metavar="GB", callback=_given,
              help="Memory each GPU keeps free beyond what the model counts (the allocator's reserve, CUDA "
                   "context and NCCL are counted: --option memory_figure=device); default 5 % of gpu_memory: "
                   "4 GB on an 80 GB GPU.")
@click.option("--price", "gpu_hour_price", metavar="USD/hour", callback=_given,
              help="GPU-hour price, e.g. \"2 USD/hour\" (for cost).")
@click.option("--deadline", metavar="TIME", callback=_given,
              help="Find the fewest GPUs (of --gpus) whose best layout trains --tokens within TIME, e.g. 90day.")
@click.option("--budget", metavar="USD", callback=_given,
              help="Find the fastest plan (of --gpus) within a budget, e.g. 2e6USD (needs --price).")
@click.option("--tp-across-nodes", is_flag=True, help="Allow tp beyond one node.")
@click.option("--even-stages", is_flag=True, help="Only pp dividing n_layers (no uneven split).")
@click.option("--no-frontier", is_flag=True,
              help="Rank every layout by the model's own step time, even one the model puts beyond the best MFU "
                   "published for its hardware and size class (by default such a layout, unless published runs of "
                   "its regime validate it, is ranked at that MFU).")
@click.option("--explain", "explain", type=int, metavar="RANK",
              help="Print the whole derivation of layout RANK's step time and memory (symcalc solve's).")
@click.option("--latex", "latex_file", metavar="FILE",
              help="With --explain: write that layout's step-time derivation as a LaTeX document.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--csv", "csv_file", metavar="FILE", help="Write the top layouts as CSV.")
@click.option("--plot", "plot_file", metavar="FILE",
              help="Draw step time against memory (Pareto front) and the top layouts' breakdowns (.png/.svg/.pdf).")
@_HARDWARE
@_MODEL
@_STACK
@_FORMULAS
def plan(values, gpus, tokens, global_batch_size, seq_len, gpus_per_node, options, by, top, memory_headroom,
         gpu_hour_price, deadline, budget, tp_across_nodes, even_stages, no_frontier, explain, latex_file, as_json,
         csv_file, plot_file, hardware, model, stack, formula_files):
    """Search every parallel layout (tp, pp, cp, dp, ep, micro-batch, schedule, ZeRO, recompute,
    sequence parallelism) of a run, keep those that fit, rank them. NAME=VALUE pairs fix values
    (pp=1, "buffer_memory=4 GB", "tokens_per_second=2e6 token/s" as a throughput target).
    Goals given together (--deadline with --budget, or with a throughput target) are all met:
    the fewest GPUs meeting every one (the fastest within a budget alone), and which one binds.

    \b
    symcalc plan --model gpt3-175b --hardware a100-80gb --gpus 1024 --global-batch-size 1536
    symcalc plan --model llama3-70b --hardware h100 --gpus 1024:16384 --tokens 15e12 --deadline 90day \\
        --global-batch-size 2048 --price "2 USD/hour" --option attention_kernel=flash
    """
    from symcalc.planner.search import (
        plan as api_plan,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    if latex_file is not None and explain is None:
        raise CliError("--latex needs --explain RANK (the layout whose derivation to write)")
    if sum(x is not None for x in (latex_file if latex_file == "-" else None,)) and as_json:
        raise CliError("--json and --latex - would both write to standard output")
    _targets(latex=latex_file, csv=csv_file, plot=plot_file)
    lib = _library(formula_files)
    given = _pairs(values, "a value")
    if top < 1:
        raise CliError(f"--top is the number of layouts to show, at least 1; got {top}")
    top_k = max(top, explain or 0)
    line = ProgressLine() if sys.stderr.isatty() else None
    try:
        result = api_plan(model, hardware, gpus, tokens=tokens, global_batch_size=global_batch_size, seq_len=seq_len,
                          gpus_per_node=gpus_per_node, options=_options(lib, options, stack), by=by, top=top_k,
                          memory_headroom=memory_headroom, gpu_hour_price=gpu_hour_price, deadline=deadline,
                          budget=budget, tp_across_nodes=tp_across_nodes, uneven_pp=not even_stages, library=lib,
                          values=given, progress=line, frontier=not no_frontier)
    finally:
        if line is not None:
            line.stop()
    if csv_file is not None:
        result.to_csv(csv_file)
    if plot_file is not None:
        result.plot(plot_file)
    if explain is not None:
        from symcalc.planner.explain import (
            explain as api_explain,  # on use: the command line starts without it (start-up, Ctrl-C)
        )
        step, memory = api_explain(result, explain, library=lib)
        if latex_file is not None:
            _write(latex_file, step.latex(standalone=True), "--latex")
        if as_json:
            click.echo(json.dumps({"plan": result.as_dict(), "rank": explain, "step_time": step.as_dict(),
                                   "total_memory_per_gpu": memory.as_dict()}, indent=2))
            return
        if latex_file == "-":
            return
        row = result.rows[explain - 1]
        click.echo(f"#{explain}: {row.label()} on {result.n_gpus} x {result.hardware}")
        click.echo(f"$ {row.command}")
        click.echo("")
        click.echo(step.text())
        click.echo("")
        click.echo(memory.text())
        return
    if as_json:
        click.echo(result.json())
    else:
        # on a terminal the table fits its width (columns left out, and named); piped, all of it
        click.echo(result.text(width=shutil.get_terminal_size().columns if sys.stdout.isatty() else None))
        for f in (csv_file, plot_file):
            if f:
                click.echo(f"wrote {f}")
    if not result.rows:
        raise click.exceptions.Exit(1)


@cli.command()
@limited(default=DEFAULT_CALIBRATE_LIMIT)
@click.argument("runs_file", metavar="RUNS.toml", callback=_given)
@click.option("--hardware", metavar="NAME", callback=_given,
              help="The built-in GPU preset the runs ran on, the profile's base (instead of the runs file's "
              "hardware; see `symcalc list hardware`).")
@click.option("--output", "-o", "output", metavar="PROFILE.toml", required=True, callback=_given,
              help="Write the fitted hardware profile to this file ('-' for stdout).")
@click.option("--fit", "fit_names", multiple=True, metavar="COEF", callback=_given,
              help="A coefficient to fit (repeatable; instead of the runs file's fit): sustained_clock_fraction, "
              "comm_contention, layer_pass_overhead, elementwise_traffic_factor.")
@click.option("--name", metavar="NAME", callback=_given,
              help="The profile's name (instead of the runs file's name).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@_FORMULAS
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
        raise CliError("--json and -o - would both write to standard output; give -o a file name")
    _targets(output=output)
    check_not_input(runs_file, output)
    lib = _library(formula_files)
    with _working("fitting the step-time model to the runs"):
        result = api_calibrate(runs_file, lib, functools.partial(api_solve, library=lib), find_preset,
                               hardware=hardware, fit_names=list(fit_names) or None, name=name)
    _write(output, result.profile(), "--output")
    if output == "-":
        return
    result.profile_path = output
    click.echo(result.json() if as_json else result.text())


@cli.command()
@limited
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


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, callback=_given,
              help="The address to listen on (127.0.0.1: this machine only; 0.0.0.0 lets other machines ask, "
              "by this machine's own names and addresses).")
@click.option("--port", default=8765, show_default=True, type=click.IntRange(0, 65535), help="The port.")
@click.option("--workers", default=2, show_default=True, type=click.IntRange(1, 64),
              help="Worker processes that answer the questions (each request in one, killed at the time limit).")
@click.option("--time-limit", "time_limit", metavar="SECONDS",
              help=f"Give up on a request after SECONDS (default the command line's: {DEFAULT_QUESTION_LIMIT:g} for "
              f"a solve, {DEFAULT_PLAN_LIMIT:g} for a plan; or {ENV_LIMIT}).")
@click.option("--allow-host", "allow_hosts", multiple=True, metavar="NAME", callback=_given,
              help="Also answer requests whose Host header is NAME (a DNS name of this machine); repeatable.")
def serve(host, port, workers, time_limit, allow_hosts):
    """Serve a local page that answers as you type (memory, step time, the best layouts, and any
    quantity solved with its derivation), and a JSON API: POST /api/solve and POST /api/plan answer
    with what `symcalc solve|plan ... --json` prints.

    \b
    symcalc serve                      # then open http://127.0.0.1:8765/
    symcalc serve --port 9000 --workers 4
    curl -s localhost:8765/api/solve -H 'Content-Type: application/json' -d '{"target": "mfu",
      "values": {"n_params": "7e9", "tokens_per_second": "150000 token/s", "n_gpus": "64"}, "hardware": "h100"}'
    """
    if host.strip() == "*" or "*" in allow_hosts:
        # '*' as "any Host header" would undo the DNS-rebinding check
        raise CliError("'*' is not an address or a name: --host 0.0.0.0 listens on every address (and answers "
                       "requests to this machine's own names and addresses; add others with --allow-host NAME)")
    try:
        from symcalc.serve.app import (
            run,  # on use: Starlette and uvicorn load for this command only (the serve extra)
        )
    except ModuleNotFoundError as e:
        raise CliError(f"symcalc serve needs {e.name}: pip install starlette uvicorn (or reinstall symcalc)") from None
    # None: each kind of request keeps its own default limit (a solve's, a plan's)
    run(host=host, port=port, workers=workers, time_limit=_time_limit(time_limit, default=None), echo=click.echo,
        allow_hosts=allow_hosts)
