"""Time budgets: symbolic work and searches that could run without limit end on time.

sympy can take minutes (or grow memory without end) on an equation it will not solve anyway,
and the search for "also give ..." suggestions tries many plans. Every such piece of work runs
inside :func:`time_limit`, which raises :class:`BudgetExceeded` in the block once its seconds
have passed; the caller then falls back (numeric roots instead of a closed form, the
suggestions found so far) or refuses with a clear message.

How: a real-time interval timer (``setitimer``) whose signal raises the exception between two
Python bytecodes. That only works in the main thread of a Unix process; elsewhere (a worker
thread, Windows) a limit cannot interrupt anything, so the block runs unbounded there, and
:func:`expired` still lets loops check their deadline cooperatively. Limits nest: the timer is
always armed for the earliest deadline in force, so an inner limit never extends an outer one.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

ENV_LIMIT = "SYMCALC_TIME_LIMIT"
#: Seconds a whole question may take before it is refused (``--time-limit``, SYMCALC_TIME_LIMIT).
DEFAULT_QUESTION_LIMIT = 30.0
#: Seconds the search for what would settle an underdetermined question may take.
DEFAULT_DIAGNOSIS_LIMIT = 1.0
#: Seconds one symbolic inversion (one step or block) may take before numbers are used instead.
DEFAULT_SYMBOLIC_LIMIT = 5.0

_deadlines: list[float] = []     # absolute (time.monotonic) deadlines of the limits in force
_previous_handler = None


class BudgetExceeded(Exception):
    """A time limit ran out inside the block it guards.

    Not a SymcalcError on purpose: it is caught by whoever set the limit and turned into a
    fallback or a message there; one that escapes is a bug, not a user's mistake."""


ENV_DIAGNOSIS_LIMIT = "SYMCALC_DIAGNOSIS_LIMIT"


def _seconds_from_env(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        return default
    return value if value > 0 else default


def question_limit() -> float:
    """The limit of a whole question: SYMCALC_TIME_LIMIT if set to a positive number, else the default."""
    return _seconds_from_env(ENV_LIMIT, DEFAULT_QUESTION_LIMIT)


def diagnosis_limit() -> float:
    """The budget of the search for what would settle an underdetermined question:
    SYMCALC_DIAGNOSIS_LIMIT if set to a positive number, else the default (1 s). The tests set
    it higher, so that what they find does not depend on how busy the machine is."""
    return _seconds_from_env(ENV_DIAGNOSIS_LIMIT, DEFAULT_DIAGNOSIS_LIMIT)


def interruptible() -> bool:
    """Whether a limit can interrupt work here: the main thread of a process with SIGALRM."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def remaining() -> float:
    """Seconds left before the earliest deadline in force (inf when none is)."""
    if not _deadlines:
        return float("inf")
    return min(_deadlines) - time.monotonic()


def expired() -> bool:
    """True once the earliest deadline in force has passed (for loops that check cooperatively)."""
    return remaining() <= 0


def _on_alarm(signum, frame) -> None:
    raise BudgetExceeded("time limit reached")


def _arm() -> None:
    if not _deadlines:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    signal.setitimer(signal.ITIMER_REAL, max(min(_deadlines) - time.monotonic(), 1e-4))


@contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise BudgetExceeded inside the block once ``seconds`` have passed.

    ``None`` (or inf) sets no limit of its own; limits already in force still apply. Outside
    the main thread the deadline is only recorded, for :func:`expired`. O(depth of nesting).
    """
    global _previous_handler
    if seconds is None or seconds == float("inf"):
        yield
        return
    deadline = time.monotonic() + max(float(seconds), 0.0)
    armed = interruptible()
    _deadlines.append(deadline)
    if armed:
        if len(_deadlines) == 1:
            _previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
        _arm()
    try:
        yield
    finally:
        # the alarm is held back while the limits are put in order, so that it cannot fire
        # half-way through (and leave a stale handler or timer behind)
        blocked = armed and hasattr(signal, "pthread_sigmask")
        if blocked:
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
        try:
            _deadlines.remove(deadline)
            if armed:
                _arm()
                if not _deadlines:
                    signal.signal(signal.SIGALRM, _previous_handler or signal.SIG_DFL)
                    _previous_handler = None
        finally:
            if blocked:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
