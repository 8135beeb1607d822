"""The ``symcalc`` command's entry point: every way a run can end, as one line and a status.

Every failure a user can cause ends as one line on stderr (or a JSON error object on stdout
under ``--json``) and exit status 2; never a traceback. Ctrl-C at any moment ends with status
130 and one line: this module imports nothing heavy at the top (the commands, click, sympy
and numpy are imported inside :func:`main`), so an interrupt during the second of start-up
lands in the same handler as one during the work; and files are written atomically
(:mod:`symcalc.outfile`), so an interrupted write leaves no partial file.
"""

from __future__ import annotations

import errno
import json
import gc
import os
import signal
import sys

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130      # 128 + SIGINT, as a shell reports a command ended by Ctrl-C


class Interrupted(BaseException):
    """Ctrl-C during a run. Not a KeyboardInterrupt, which click would catch and answer with a
    blank line of its own before ours."""


# set by the first Ctrl-C: a library that catches broadly (a BaseException swallowed inside a
# lazily built field) may turn the interrupt into another error further on, which is then the
# interrupt's doing, not a bug, and is answered as the interrupt
_ctrl_c_seen = False


def _on_ctrl_c(signum, frame) -> None:
    global _ctrl_c_seen
    _ctrl_c_seen = True
    raise Interrupted()


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the CLI, turning every error into one line and exit status 2 (130 for Ctrl-C)."""
    args = list(sys.argv[1:] if argv is None else argv)
    as_json = "--json" in args
    if argv is None and args[:1] == ["plan"]:
        # the program answers one plan and ends: the cyclic collector's passes over what the plan
        # builds (0.28 s of a cold 405B plan: its routing, derivations and answers live until
        # it ends) free almost nothing (the peak memory is the same within 2 MB, 405B, DeepSeek-V3
        # and an inverse plan measured); a long-lived process (serve, a caller in Python) keeps it
        gc.disable()
    _keep_interrupts()
    previous = _catch_ctrl_c()
    try:
        return _run(args, as_json)
    except (Interrupted, KeyboardInterrupt):
        return _fail("interrupted", "interrupted", as_json, status=EXIT_INTERRUPTED)
    except BrokenPipeError:          # `symcalc list | head -1`: the reader has gone, so has the output
        _silence_stdout()
        return EXIT_ERROR
    finally:
        if previous is not None:
            # the program itself (argv None) has answered: a Ctrl-C from here to its exit
            # changes nothing, so it is ignored; a caller in-process gets its handler back
            signal.signal(signal.SIGINT, signal.SIG_IGN if argv is None else previous)
        if argv is None:
            # the program has answered: the interpreter's last collection at exit would walk
            # every object the answer built (0.3-0.4 s after a cold plan) to free memory the
            # process is about to return anyway; frozen objects are skipped
            gc.freeze()


def _catch_ctrl_c():
    """Answer Ctrl-C with :class:`Interrupted`; returns the handler to restore (None: unchanged).
    Only Python's own handler is replaced (not one an embedding program set), in the main thread."""
    try:
        if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
            return signal.signal(signal.SIGINT, _on_ctrl_c)
    except ValueError:      # not the main thread
        pass
    return None


def _run(args: list[str], as_json: bool) -> int:
    import click

    from symcalc.budget import (
        BudgetExceeded,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    from symcalc.commands import (
        cli,  # on use: the command line starts without it (start-up, Ctrl-C)
    )
    from symcalc.errors import (  # on use: the command line starts without it (start-up, Ctrl-C)
        SymcalcError,
        one_line,
    )
    try:
        code = cli.main(args=args, prog_name="symcalc", standalone_mode=False)
        return code if isinstance(code, int) else 0
    except click.exceptions.Exit as e:
        return e.exit_code
    except click.exceptions.Abort:
        return _fail("interrupted", "interrupted", as_json, status=EXIT_INTERRUPTED)
    except getattr(click.exceptions, "NoArgsIsHelpError", ()) as e:     # click >= 8.2
        # a bare `symcalc` (or a group without its command): the help, formatted, is the answer
        click.echo(e.ctx.get_help() if e.ctx is not None else cli.get_help(click.Context(cli)))
        return 0
    except click.ClickException as e:
        return _fail("usage", _click_message(e), as_json)
    except SymcalcError as e:
        return _fail(e.kind, e.message, as_json, e.to_dict())
    except BudgetExceeded:   # a limit nobody claimed (a bug), but still the question ran out of time
        return _fail("time_limit", "no answer within the time limit", as_json)
    except (KeyboardInterrupt, BrokenPipeError):
        raise
    except OSError as e:
        if e.errno == errno.EPIPE:
            raise BrokenPipeError(e.errno, e.strerror) from None
        return _fail("internal", one_line(f"internal error ({type(e).__name__}: {e}); please report it"), as_json)
    except Exception as e:  # a bug: still one line, and say so (unless a Ctrl-C came first)
        if _ctrl_c_seen:
            return _fail("interrupted", "interrupted", as_json, status=EXIT_INTERRUPTED)
        return _fail("internal", one_line(f"internal error ({type(e).__name__}: {e}); please report it"), as_json)


def _click_message(e) -> str:
    import click
    msg = e.format_message()
    if isinstance(e, click.UsageError) and e.ctx is not None and "Missing argument" in msg:
        msg += f" (see `{e.ctx.command_path} --help`)"
    return " ".join(msg.split())


def _fail(kind: str, message: str, as_json: bool, payload: dict | None = None, status: int = EXIT_ERROR) -> int:
    message = " ".join(str(message).split())
    if as_json:
        print(json.dumps({"error": payload or {"kind": kind, "message": message}}), flush=True)
    else:
        # after Ctrl-C a terminal shows "^C" on the line: start the message over it
        start = "\r" if status == EXIT_INTERRUPTED and _is_terminal(sys.stderr) else ""
        print(f"{start}error: {message}", file=sys.stderr, flush=True)
    return status


def _is_terminal(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _keep_interrupts() -> None:
    """Ctrl-C that lands in code whose exceptions Python cannot raise (a weakref callback,
    ``__del__``) is printed as "Exception ignored in ..." and lost; signal it again instead,
    to be raised where it can be."""
    hook = sys.unraisablehook
    if getattr(hook, "symcalc_cli", False):
        return

    def again(unraisable) -> None:
        if isinstance(unraisable.exc_value, (KeyboardInterrupt, Interrupted)):
            signal.raise_signal(signal.SIGINT)
        else:
            hook(unraisable)
    again.symcalc_cli = True    # type: ignore[attr-defined]
    sys.unraisablehook = again


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so that Python's own flush at exit does not fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
