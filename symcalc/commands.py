"""The ``symcalc`` command: a thin layer over the Python API.

Every failure a user can cause ends as one line on stderr (or a JSON error object on stdout
under ``--json``) and exit status 2; never a traceback.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .errors import SymcalcError

EXIT_ERROR = 2


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


def _library(formula_files: tuple[str, ...]):
    from .library import default_library, load_library
    if not formula_files:
        return default_library()
    return load_library(extra=formula_files)


def _write(path: str, content: str) -> None:
    if path == "-":
        click.echo(content)
        return
    try:
        Path(path).write_text(content, encoding="utf-8")
    except OSError as e:
        raise CliError(f"cannot write {path}: {e.strerror}") from None


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
      symcalc list memory
      symcalc list hardware
      symcalc show young_interval
      symcalc formulas --latex library.tex
    """


@cli.command()
@click.argument("target")
@click.argument("values", nargs=-1)
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="An assumption, e.g. zero_stage=3 (see `symcalc list options`).")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of the answer, e.g. GiB or hour.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--latex", "latex_file", metavar="FILE", help="Write the derivation as a LaTeX document ('-' for stdout).")
@click.option("--markdown", "markdown_file", metavar="FILE", help="Write the derivation as Markdown ('-' for stdout).")
@click.option("--brief", is_flag=True, help="Print only the answer line.")
@click.option("--round", "rounding", type=click.Choice(["up", "down", "nearest"]),
              help="How to round a whole-number answer (default: the quantity's own way).")
@click.option("--hardware", metavar="NAME", help="Fill in a GPU's known values (see `symcalc list hardware`).")
@click.option("--model", metavar="NAME|config.json", help="Fill in a model's shapes (see `symcalc list models`), "
              "or read a Hugging Face config.json.")
@click.option("--formulas", "formula_files", multiple=True, metavar="FILE",
              help="Load extra formula files on top of the built-in library.")
def solve(target, values, options, to_unit, as_json, latex_file, markdown_file, brief, rounding, hardware, model,
          formula_files):
    """Solve for TARGET from NAME=VALUE pairs (values may carry units: "989 TFLOP/s", 24h, 45%)."""
    from .api import solve as api_solve
    to_stdout = [name for name, dest, on in (("--json", None, as_json), ("--latex", latex_file, latex_file),
                                              ("--markdown", markdown_file, markdown_file))
                 if on and (dest is None or dest == "-")]
    if len(to_stdout) > 1:
        raise CliError(f"{' and '.join(to_stdout)} would both write to standard output; "
                       "give --latex/--markdown a file name")
    lib = _library(formula_files)
    result = api_solve(target, _pairs(values, "a value"), options=_pairs(options, "an option"),
                       to=to_unit, library=lib, hardware=hardware, model=model, rounding=rounding)
    if latex_file:
        _write(latex_file, result.latex(standalone=True))
    if markdown_file:
        _write(markdown_file, result.markdown())
    if as_json:
        click.echo(result.json())
        return
    if latex_file == "-" or markdown_file == "-":
        return
    from .render.text import headline
    click.echo(headline(result) if brief else result.text())
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)


@cli.command()
@click.argument("target")
@click.argument("values", nargs=-1)
@click.option("--vary", "varies", multiple=True, metavar="NAME=START:STOP[:COUNT][:log]",
              help="A quantity to vary (also NAME=V1,V2,...); several make a grid.")
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="An assumption, e.g. zero_stage=3.")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of the answer, e.g. GiB or day.")
@click.option("--csv", "csv_file", metavar="FILE", help="Write every point as CSV (one row per point).")
@click.option("--plot", "plot_file", metavar="FILE", help="Draw the sweep to FILE (.png, .svg or .pdf).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object with every point.")
@click.option("--hardware", metavar="NAME", help="Fill in a GPU's known values (see `symcalc list hardware`).")
@click.option("--model", metavar="NAME|config.json", help="Fill in a model's shapes (see `symcalc list models`).")
@click.option("--formulas", "formula_files", multiple=True, metavar="FILE", help="Load extra formula files.")
def sweep(target, values, varies, options, to_unit, csv_file, plot_file, as_json, hardware, model, formula_files):
    """Solve TARGET over a range or grid of values: what-if questions in one go.

    \b
    symcalc sweep total_memory_per_gpu --model llama2-7b --hardware h100 dp=8 \\
        --vary micro_batch_size=1:64 --plot memory.png
    symcalc sweep train_time n_params=70e9 "n_tokens=2e12 token" "peak_flops=989 TFLOP/s" \\
        --vary n_gpus=64:4096:13:log --vary mfu=30%:60%:7 --plot days.png
    """
    from .sweep import sweep as api_sweep
    if not varies:
        raise CliError("give at least one --vary NAME=START:STOP[:COUNT][:log]")
    lib = _library(formula_files)
    result = api_sweep(target, _pairs(values, "a value"), vary=_pairs(varies, "--vary"),
                       options=_pairs(options, "an option"), to=to_unit, library=lib,
                       hardware=hardware, model=model)
    if csv_file:
        try:
            result.to_csv(csv_file)
        except OSError as e:
            raise CliError(f"cannot write {csv_file}: {e.strerror}") from None
    if plot_file:
        result.plot(plot_file)
    if as_json:
        click.echo(result.json())
        return
    from .render.sweep_text import sweep_text
    click.echo(sweep_text(result))
    for f in (csv_file, plot_file):
        if f:
            click.echo(f"wrote {f}")
    for w in result.warnings:
        click.echo(f"warning: {w}", err=True)


@cli.command()
@click.argument("values", nargs=-1)
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", help="An assumption, e.g. zero_stage=3.")
@click.option("--rtol", default=0.02, show_default=True, metavar="FRACTION",
              help="Relative tolerance: values within it agree (0.02 is 2 %).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--brief", is_flag=True, help="Only the verdicts, without the derivations of what disagrees.")
@click.option("--hardware", metavar="NAME", help="Fill in a GPU's known values (see `symcalc list hardware`).")
@click.option("--model", metavar="NAME|config.json", help="Fill in a model's shapes (see `symcalc list models`).")
@click.option("--formulas", "formula_files", multiple=True, metavar="FILE", help="Load extra formula files.")
def check(values, options, rtol, as_json, brief, hardware, model, formula_files):
    """Check claimed numbers against each other: every relation among the NAME=VALUE pairs.

    Exit status 0 when all agree within --rtol, 1 when something disagrees, 2 for bad input.

    \b
    symcalc check n_params=70e9 n_gpus=128 "link_bandwidth=50 GB/s" "allreduce_time=2.8 s"
    """
    from .check import check as api_check
    lib = _library(formula_files)
    result = api_check(_pairs(values, "a value"), options=_pairs(options, "an option"), rtol=rtol,
                       library=lib, hardware=hardware, model=model)
    click.echo(result.json() if as_json else result.text(derivations=not brief))
    if not result.ok:
        raise click.exceptions.Exit(1)


@cli.command("list")
@click.argument("words", nargs=-1, metavar="[WHAT] [TEXT]...")
@click.option("--search", "-s", "term", metavar="TEXT", help="Only entries whose name, aliases or description contain TEXT.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--formulas", "formula_files", multiple=True, metavar="FILE", help="Load extra formula files.")
def list_cmd(words, term, as_json, formula_files):
    """List quantities, formulas, options, hardware or models. WHAT is one of those kinds;
    the other words are a search (every word must appear in a name, alias or description):
    `symcalc list formulas checkpoint`, `symcalc list bubble`."""
    from .catalog import catalog, preset_catalog
    what = words[0] if words else None
    term = " ".join(x for x in (*words[1:], term or "") if x) or None
    kinds = {"quantities", "formulas", "options"}
    if what in ("hardware", "models", "model", "gpus"):
        entries = {"hardware" if what in ("hardware", "gpus") else "models":
                   preset_catalog("hardware" if what in ("hardware", "gpus") else "models", term)}
        if as_json:
            click.echo(json.dumps(entries, indent=2))
            return
        if not any(entries.values()):
            raise CliError(f"nothing matches '{term}'")
        from .render.tables import print_presets
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
    from .render.tables import print_catalog
    print_catalog(entries)


@cli.command()
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.option("--formulas", "formula_files", multiple=True, metavar="FILE", help="Load extra formula files.")
def show(name, as_json, formula_files):
    """Show a quantity, formula or option: meaning, unit, source, LaTeX."""
    from .catalog import describe
    lib = _library(formula_files)
    info = describe(lib, name)
    if as_json:
        click.echo(json.dumps(info, indent=2))
        return
    from .render.tables import print_description
    print_description(info)


@cli.command()
@click.argument("target")
@click.argument("values", nargs=-1)
@click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE",
              help="An assumption of both sides, e.g. zero_stage=2 (see `symcalc list options`).")
@click.option("--vs", "vs_items", multiple=True, metavar="NAME=VALUE",
              help="What side B changes (repeatable): an option (zero_stage=3), a value (\"mfu=45%\"), "
              "or hardware=NAME / model=NAME.")
@click.option("--to", "to_unit", metavar="UNIT", help="Unit of both answers and the difference, e.g. GiB.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object (both derivations included).")
@click.option("--hardware", metavar="NAME", help="A GPU preset for both sides (see `symcalc list hardware`).")
@click.option("--model", metavar="NAME|config.json", help="A model preset for both sides (see `symcalc list models`).")
@click.option("--formulas", "formula_files", multiple=True, metavar="FILE",
              help="Load extra formula files on top of the built-in library.")
def compare(target, values, options, vs_items, to_unit, as_json, hardware, model, formula_files):
    """Compare TARGET in two scenarios: side A from NAME=VALUE pairs, --option, --hardware and
    --model; side B the same with every --vs applied. Prints both values, B - A and B / A."""
    from .compare import compare as api_compare
    from .compare import split_vs
    if not vs_items:
        raise CliError("say what side B changes with at least one --vs NAME=VALUE "
                       "(e.g. --vs zero_stage=3, --vs \"mfu=45%\", --vs hardware=h100)")
    lib = _library(formula_files)
    vs = split_vs(lib, _pairs(vs_items, "--vs"))
    result = api_compare(target, _pairs(values, "a value"), options=_pairs(options, "an option"), vs=vs.given,
                         vs_options=vs.options, hardware=hardware, model=model, vs_hardware=vs.hardware,
                         vs_model=vs.model, to=to_unit, library=lib)
    if as_json:
        click.echo(result.json())
        return
    click.echo(result.text())
    for side, w in result.warnings:
        click.echo(f"warning ({side}): {w}", err=True)


@cli.command()
@click.option("--latex", "latex_file", metavar="FILE", required=True,
              help="Write the whole library (formulas, quantities, options, presets) as a LaTeX document.")
@click.option("--formulas", "formula_files", multiple=True, metavar="FILE", help="Load extra formula files.")
def formulas(latex_file, formula_files):
    """Write the formula library as one LaTeX reference document that compiles with pdflatex."""
    from .presets import all_presets
    from .render.reference import render_reference
    lib = _library(formula_files)
    _write(latex_file, render_reference(lib, all_presets()))
    if latex_file != "-":
        click.echo(f"wrote {latex_file}: {len(lib.formulas)} formulas, {len(lib.quantities)} quantities")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print the answers as JSON.")
def example(as_json):
    """Run the built-in worked examples (from the source documents) and show one derivation."""
    from .examples import run_examples
    run_examples(as_json=as_json)


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every error into one line and exit status 2."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    try:
        code = cli.main(args=args, prog_name="symcalc", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:
        return _fail("interrupted", "interrupted", as_json)
    except click.ClickException as e:
        return _fail("usage", _click_message(e), as_json)
    except SymcalcError as e:
        return _fail(e.kind, e.message, as_json, e.to_dict())
    except KeyboardInterrupt:
        return _fail("interrupted", "interrupted", as_json)
    except Exception as e:  # a bug: still one line, and say so
        return _fail("internal", f"internal error ({type(e).__name__}: {e}); please report it", as_json)


def _click_message(e: click.ClickException) -> str:
    msg = e.format_message()
    if isinstance(e, click.UsageError) and e.ctx is not None and "Missing argument" in msg:
        msg += f" (see `{e.ctx.command_path} --help`)"
    return " ".join(msg.split())


def _fail(kind: str, message: str, as_json: bool, payload: dict | None = None) -> int:
    message = " ".join(str(message).split())
    if as_json:
        click.echo(json.dumps({"error": payload or {"kind": kind, "message": message}}))
    else:
        click.echo(f"error: {message}", err=True)
    return EXIT_ERROR


def run() -> None:  # console-script target
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    run()
