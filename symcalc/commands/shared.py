"""What the ``symcalc`` commands share, declared once: reading NAME=VALUE pairs and --stack, the
library a command answers from, the time limit of a question, the file-output flags of a record,
shell completion, the options several commands take, and the progress line on a terminal.

Every command is one question under a time limit (``--time-limit``, SYMCALC_TIME_LIMIT,
default :data:`symcalc.budget.DEFAULT_QUESTION_LIMIT`), and every file it writes is written
atomically (:mod:`symcalc.outfile`), its name checked before any work. Errors are raised, not
printed: :func:`symcalc.cli.main` turns them into one line and an exit status. The commands call
these helpers through the module (``shared.library(...)``), so a test can replace one for all.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import click

from symcalc.budget import (
    DEFAULT_QUESTION_LIMIT,
    ENV_LIMIT,
    parse_seconds,
    question,
)
from symcalc.errors import SymcalcError
from symcalc.outfile import check_target, write_file
from symcalc.query import requests
from symcalc.query.requests import STACK_OPTION


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]   # what a click.option(...) returns


class CliError(SymcalcError):
    kind = "usage"


def pairs(items: tuple[str, ...], what: str) -> dict[str, str]:
    """Read NAME=VALUE arguments; later ones may not repeat earlier names (the server's JSON
    pairs are checked by the same :func:`symcalc.query.requests.given_pairs`)."""
    return requests.cli_pairs(items, what)


def option_pairs(lib, items: tuple[str, ...], stack: str | None) -> dict[str, str]:
    """The --option KEY=VALUE pairs, with --stack NAME as ``stack=NAME`` (checked as the server
    checks its "stack": :func:`symcalc.query.requests.with_stack`)."""
    return requests.with_stack(lib, pairs(items, "an option"), stack, requests.CLI)


def library(formula_files: tuple[str, ...]):
    from symcalc.library.loading import (  # on use: the command line starts without it (start-up, Ctrl-C)
        default_library,
        load_library,
    )
    if not formula_files:
        return default_library()
    return load_library(extra=formula_files)


def check_targets(**files: str | None) -> None:
    """Refuse output file names that cannot be written (empty, no such directory) before any
    work; ``files`` maps each option (``latex``) to its value (None: not given, '-': stdout)."""
    for option, path in files.items():
        if path is not None and path != "-":
            check_target(path, f"--{option}")


def echo_wrapped(text: str, width: int | None = None) -> None:
    """Print ``text`` with its long lines wrapped to the terminal (COLUMNS, else the terminal's
    width; piped output stays whole: symcalc.render.wrap), as solve's answer is."""
    from symcalc.render.wrap import wrap_text  # on use: the command line starts without it
    click.echo(wrap_text(text, width))


def write(path: str, content: str, what: str) -> None:
    if path == "-":
        click.echo(content)
        return
    write_file(path, content, what)


def given(ctx, param, value):
    """An option given as '' (a shell variable that was not set) is a mistake, never "not
    given": --model "" would answer without the model, --formulas "" would load the current
    directory."""
    if any(v is not None and not v.strip() for v in (value if isinstance(value, tuple) else (value,))):
        raise click.BadParameter("needs a value (got an empty one)")
    return value


def time_limit_of(raw: str | None, default: float | None = DEFAULT_QUESTION_LIMIT) -> float | None:
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
        limit = time_limit_of(time_limit, default)
        # the built-in library first, outside the limit: a process's one-time build (a cold
        # cache on a busy machine) is not the question's time
        from symcalc.library.loading import default_library  # on use: the command line starts without it (start-up, Ctrl-C)
        default_library()
        with question(limit):
            return command(*args, **kwargs)
    return run


def output_flags(kind: str) -> Decorator:
    """The file-output flags of a record kind, as click options, from the format registry
    (symcalc.formats.OUTPUT_FLAGS): a format gets its flag there, not here."""
    from symcalc.formats import OUTPUT_FLAGS  # on use: at import of the commands, no renderer loaded

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        for out in reversed(OUTPUT_FLAGS[kind]):
            command = click.option(out.flag, out.dest, metavar="FILE", help=out.help)(command)
        return command
    return add


def outputs_to_stdout(kind: str, files: dict[str, str | None], as_json: bool) -> list[str]:
    """The flags of ``kind`` (and --json) that would write to standard output."""
    from symcalc.formats import OUTPUT_FLAGS  # on use: the command line starts without it (start-up, Ctrl-C)
    return (["--json"] if as_json else []) + [o.flag for o in OUTPUT_FLAGS[kind] if o.text and files.get(o.dest) == "-"]


def ask(request: Any, lib: Any, api: Callable[..., Any], doing: str, kind: str,
        files: dict[str, str | None]) -> tuple[Any, list[str]]:
    """A question of one quantity (solve, sweep, compare) asked: the request's arguments for
    ``lib`` (checked as the server checks them), ``api`` called under the "working" line, and
    the record written to ``files``. Returns (the record, the files written)."""
    args, kwargs = request.arguments(lib, requests.CLI)
    with working(doing):
        result = api(*args, **kwargs)
    return result, write_outputs(kind, result, files)


def check_outputs(kind: str, files: dict[str, str | None]) -> None:
    """Refuse an output file that cannot be written, before any work (--csv, --plot ...)."""
    from symcalc.formats import OUTPUT_FLAGS  # on use: the command line starts without it (start-up, Ctrl-C)
    check_targets(**{o.flag.lstrip("-"): files.get(o.dest) for o in OUTPUT_FLAGS[kind]})


def write_outputs(kind: str, record: Any, files: dict[str, str | None]) -> list[str]:
    """Write ``record`` in each format whose flag was given; returns the files written."""
    from symcalc.formats import OUTPUT_FLAGS, render  # on use: the command line starts without it
    written = []
    for out in OUTPUT_FLAGS[kind]:
        path = files.get(out.dest)
        if path is None:
            continue
        if out.text:
            write(path, render(out.format, record, **dict(out.options)), out.flag)
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


def complete_option(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
    from symcalc.library.loading import default_library  # on use: only when completing
    options = default_library().options
    name, eq, _ = incomplete.partition("=")
    if eq and name in options:
        return _complete([f"{name}={v}" for v in options[name].values], incomplete)
    return [f"{n}=" for n in _complete(list(options), incomplete)]


def complete_preset(kind: str):
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[str]:
        from symcalc.library.presets import all_presets  # on use: only when completing
        presets = all_presets()[kind]
        names = list(presets) + [a for p in presets.values() for a in getattr(p, "aliases", ())]
        return _complete(names, incomplete)
    return complete


def assumptions(help: str) -> Decorator:
    """--option KEY=VALUE (repeatable: the assumptions of a question), completed from the
    library's options and their values; ``help`` says what it means for the command."""
    return click.option("--option", "-o", "options", multiple=True, metavar="KEY=VALUE", shell_complete=complete_option,
                        help=help)


def stacked(*decorators: Decorator) -> Decorator:
    """Several click decorators as one, applied as if written in this order above a function."""
    def apply(command: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            command = decorator(command)
        return command
    return apply


# what several commands share, declared once
TARGET = click.argument("target", shell_complete=_complete_quantity)
VALUES = click.argument("values", nargs=-1, shell_complete=_complete_pair)
HARDWARE = click.option("--hardware", metavar="NAME|profile.toml", callback=given,
                        shell_complete=complete_preset("hardware"),
                        help="Fill in a GPU's known values (see `symcalc list hardware`), or read a hardware "
                        "profile from a TOML file.")
MODEL = click.option("--model", metavar="NAME|config.json", callback=given, shell_complete=complete_preset("model"),
                     help="Fill in a model's shapes (see `symcalc list models`), or read a Hugging Face config.json.")
FORMULAS = click.option("--formulas", "formula_files", multiple=True, metavar="FILE", callback=given,
                        help="Load extra formula files on top of the built-in library.")
STACK = click.option("--stack", metavar="NAME", callback=given,
                     shell_complete=lambda ctx, param, inc: [v.partition("=")[2] for v in
                                                             complete_option(ctx, param, f"{STACK_OPTION}={inc}")],
                     help=f"The training stack that runs the layout (see `symcalc show {STACK_OPTION}`): "
                     f"--option {STACK_OPTION}=NAME.")
# the run a question is about: the GPU, the model, the stack, and formula files beyond the built-in ones
RUN = stacked(HARDWARE, MODEL, STACK, FORMULAS)


@contextlib.contextmanager
def working(message: str) -> Iterator[None]:
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
