"""Time budgets: symbolic work and searches that could run without limit end on time.

sympy can take minutes (or grow memory without end) on an equation it will not solve anyway,
and the search for "also give ..." suggestions tries many plans. Every such piece of work runs
inside :func:`time_limit`, which raises :class:`BudgetExceeded` in the block once its seconds
have passed; the caller then falls back (numeric roots instead of a closed form, the
suggestions found so far) or refuses with a clear message. :func:`bounded` is the form for a
fallback (the block just ends when its own limit does), :func:`question` the form for a whole
question (a limit that ends in a :class:`~symcalc.errors.TimeLimitError`).

How: a real-time interval timer (``setitimer``) whose signal raises the exception between two
Python bytecodes. That only works in the main thread of a Unix process; elsewhere (a worker
thread, Windows) a limit cannot interrupt anything, so the block runs unbounded there, and
:func:`expired` still lets loops check their deadline cooperatively (each thread has its own
deadlines). Limits nest: the timer is always armed for the earliest deadline in force, so an
inner limit never extends an outer one, and an exception raised for an outer limit is never
taken by an inner block for its own (:attr:`BudgetExceeded.limit` says whose it is). A timer
someone else armed before the first limit (``signal.alarm`` in a test harness) is kept: it
still fires at its time, with its own handler, and is re-armed when the last limit ends.
"""

from __future__ import annotations

import functools
import math
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from .errors import QueryError, TimeLimitError

ENV_LIMIT = "SYMCALC_TIME_LIMIT"
#: Seconds a whole question may take before it is refused (``--time-limit``, SYMCALC_TIME_LIMIT,
#: ``time_limit=`` in Python).
DEFAULT_QUESTION_LIMIT = 30.0
#: Seconds the search for what would settle an underdetermined question may take.
DEFAULT_DIAGNOSIS_LIMIT = 1.0
#: Seconds one symbolic inversion (one step or block) may take before numbers are used instead.
DEFAULT_SYMBOLIC_LIMIT = 5.0

_SLACK = 0.005      # a timer may fire this much before time.monotonic() shows its deadline passed
_REMINDER = 0.05    # an expired limit whose exception is still on its way is signalled again after this


class BudgetExceeded(BaseException):
    """A time limit ran out inside the block it guards.

    A BaseException, like KeyboardInterrupt, so that the ``except Exception`` of code it
    interrupts (sympy has many) cannot swallow it; and not a SymcalcError: it is caught by
    whoever set the limit and turned into a fallback or a message there; one that escapes is a
    bug, not a user's mistake. ``limit`` is the :class:`Limit` that ran out, set as the
    exception leaves that limit's block (None until then)."""

    def __init__(self, message: str = "time limit reached"):
        super().__init__(message)
        self.limit: Limit | None = None


@dataclass(eq=False)
class Limit:
    """One limit in force: its seconds, its deadline (``time.monotonic``), and whether it ran out."""

    seconds: float
    deadline: float
    expired: bool = False


@dataclass(eq=False)
class _Outside:
    """A timer armed by someone else before our first limit: when it is due, and its handler."""

    deadline: float
    interval: float
    handler: object


class _Deadlines(threading.local):
    def __init__(self) -> None:
        self.limits: list[Limit] = []


_state = _Deadlines()
_previous_handler: object = None
_outside: _Outside | None = None


def parse_seconds(raw: object, what: str) -> float:
    """A limit given by a user: a positive number of seconds, or ``inf`` (or ``none``) for none.

    Raises QueryError naming ``what`` (``--time-limit``, ``SYMCALC_TIME_LIMIT``) otherwise."""
    if isinstance(raw, str) and raw.strip().lower() in ("inf", "none", "off"):
        return math.inf
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)   # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(raw, bool) or not value > 0:
        raise QueryError(f"{what} is a positive number of seconds (or inf for no limit), got {str(raw)[:40]!r}")
    return value


def question_limit() -> float:
    """The limit of a whole question: SYMCALC_TIME_LIMIT if set to a positive number (or inf),
    else the default. (The command line refuses a malformed value; see :func:`parse_seconds`.)"""
    raw = os.environ.get(ENV_LIMIT, "").strip()
    try:
        return parse_seconds(raw, ENV_LIMIT) if raw else DEFAULT_QUESTION_LIMIT
    except QueryError:
        return DEFAULT_QUESTION_LIMIT


def interruptible() -> bool:
    """Whether a limit can interrupt work here: the main thread of a process with SIGALRM."""
    return hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()


def remaining() -> float:
    """Seconds left before the earliest deadline in force in this thread (inf when none is)."""
    if not _state.limits:
        return math.inf
    return min(lim.deadline for lim in _state.limits) - time.monotonic()


def expired() -> bool:
    """True once the earliest deadline in force has passed (for loops that check cooperatively)."""
    return remaining() <= 0


# -- the timer (main thread only) ----------------------------------------------------------------

def _arm() -> None:
    """Arm the timer for the earliest deadline in force, ours or the outside timer's; a deadline
    already past gets a reminder, in case its exception was swallowed on the way."""
    due = [lim.deadline for lim in _state.limits] + ([_outside.deadline] if _outside else [])
    if not due:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    delay = min(due) - time.monotonic()
    signal.setitimer(signal.ITIMER_REAL, delay if delay > 1e-4 else (_REMINDER if delay < -_SLACK else 1e-4))


def _on_alarm(signum, frame) -> None:
    global _outside
    now = time.monotonic() + _SLACK
    if any(lim.deadline <= now for lim in _state.limits):
        _arm()
        raise BudgetExceeded()
    if _outside is not None and _outside.deadline <= now:
        outside, _outside = _outside, (_Outside(now + _outside.interval, _outside.interval, _outside.handler)
                                       if _outside.interval > 0 else None)
        _arm()
        _deliver(outside.handler, signum, frame)
        return
    _arm()      # early: wait for the real deadline


def _deliver(handler, signum, frame) -> None:
    """Run the handler of the outside timer as if its own signal had come."""
    if callable(handler):
        handler(signum, frame)
    elif handler != signal.SIG_IGN:     # the default action: the process ends, as it would have
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGALRM)


def _install() -> None:
    """Take the timer over from whoever had it (first limit in the main thread)."""
    global _previous_handler, _outside
    _previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    delay, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    _outside = _Outside(time.monotonic() + delay, interval, _previous_handler) if delay > 0 else None


def _uninstall() -> None:
    """Give the timer back: the previous handler, and the outside timer at its own time."""
    global _previous_handler, _outside
    signal.setitimer(signal.ITIMER_REAL, 0)
    outside_due = _outside is not None and _outside.deadline <= time.monotonic() + _SLACK
    if hasattr(signal, "sigpending") and signal.SIGALRM in signal.sigpending() and not outside_due:
        signal.sigwait({signal.SIGALRM})      # ours, come too late: not for the previous handler
    signal.signal(signal.SIGALRM, _previous_handler if _previous_handler is not None else signal.SIG_DFL)
    if _outside is not None:
        signal.setitimer(signal.ITIMER_REAL, max(_outside.deadline - time.monotonic(), 1e-4), _outside.interval)
    _previous_handler, _outside = None, None


@contextmanager
def _alarm_held(active: bool) -> Iterator[None]:
    """Hold the alarm back while the limits are put in order, so that it cannot fire half-way
    through (and leave a stale deadline, handler or timer behind)."""
    held = active and hasattr(signal, "pthread_sigmask")
    if held:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        yield
    finally:
        if held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})


class time_limit:
    """Raise BudgetExceeded inside the block once ``seconds`` have passed.

    ``None`` (or inf) sets no limit of its own; limits already in force still apply. Outside
    the main thread the deadline is only recorded, for :func:`expired`. Entering gives the
    :class:`Limit`; when the exception leaves the block and this limit is the one that ran out,
    the exception's ``limit`` is set to it. O(depth of nesting).
    """

    def __init__(self, seconds: float | None):
        self.own = seconds is not None and not math.isinf(seconds)
        seconds = max(float(seconds), 0.0) if self.own else math.inf   # type: ignore[arg-type]
        self.limit = Limit(seconds, math.inf)
        self.armed = False

    def __enter__(self) -> Limit:
        if not self.own:
            return self.limit
        self.limit.deadline = time.monotonic() + self.limit.seconds
        self.armed = interruptible()
        with _alarm_held(self.armed):
            _state.limits.append(self.limit)
            if self.armed:
                if len(_state.limits) == 1:
                    _install()
                _arm()
        return self.limit

    def __exit__(self, exc_type, exc, tb) -> bool:
        if not self.own:
            return False
        with _alarm_held(self.armed):
            if (isinstance(exc, BudgetExceeded) and exc.limit is None
                    and time.monotonic() >= self.limit.deadline - _SLACK):
                exc.limit = self.limit
                self.limit.expired = True
            _state.limits.remove(self.limit)
            if self.armed:
                if _state.limits:
                    _arm()
                else:
                    _uninstall()
        return False


@contextmanager
def bounded(seconds: float | None) -> Iterator[Limit]:
    """Like :func:`time_limit`, but when *this* limit runs out the block just ends, quietly:
    the caller reads ``limit.expired`` and falls back. An outer limit that runs out meanwhile
    still raises (the question is over, not just this attempt)::

        with bounded(DEFAULT_SYMBOLIC_LIMIT) as limit:
            roots = sympy.solve(residual, x)
        if limit.expired:
            roots = None        # numeric roots instead
    """
    guard = time_limit(seconds)
    try:
        with guard:
            yield guard.limit
    except BudgetExceeded as e:
        if e.limit is not guard.limit:
            raise


@contextmanager
def question(seconds: float | None = None, hint: str = "--time-limit SECONDS or SYMCALC_TIME_LIMIT"
             ) -> Iterator[Limit]:
    """The limit of a whole question (``seconds``, else :func:`question_limit`): when it runs
    out, the question ends in a TimeLimitError that says how to give it more (``hint``)."""
    seconds = question_limit() if seconds is None else seconds
    guard = time_limit(seconds)
    try:
        with guard:
            yield guard.limit
    except BudgetExceeded as e:
        if e.limit is not guard.limit:
            raise
        raise TimeLimitError(f"no answer within the time limit of {seconds:g} s; to allow more, "
                             f"give {hint}") from None


F = TypeVar("F", bound=Callable)
_UNSET = object()


def limited(fn: F) -> F:
    """``fn`` as a whole question: it takes one more keyword, ``time_limit`` (seconds, or None
    for no limit; default SYMCALC_TIME_LIMIT or DEFAULT_QUESTION_LIMIT), and raises
    TimeLimitError when that runs out. For the public Python API."""
    @functools.wraps(fn)
    def wrapper(*args, time_limit: object = _UNSET, **kwargs):
        if time_limit is _UNSET:
            seconds = question_limit()
        else:
            seconds = math.inf if time_limit is None else parse_seconds(time_limit, "time_limit")
        with question(seconds, hint="time_limit=SECONDS or SYMCALC_TIME_LIMIT"):
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
