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

import atexit
import functools
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from symcalc.errors import QueryError, TimeLimitError

ENV_LIMIT = "SYMCALC_TIME_LIMIT"
#: Seconds a whole question may take before it is refused (``--time-limit``, SYMCALC_TIME_LIMIT,
#: ``time_limit=`` in Python).
DEFAULT_QUESTION_LIMIT = 30.0
#: Seconds a plan (``symcalc plan``, ``symcalc.plan``) may take: its first run for a model and
#: GPU solves up to 48 option combinations symbolically, and planning backwards or a
#: nothing-fits hint searches several GPU counts; the room left for a slow or shared machine is
#: measured by benchmarks/planner.py (the cold search against its own target).
DEFAULT_PLAN_LIMIT = 120.0
#: Seconds a calibration (``symcalc calibrate``) may take: it solves the step time once per group
#: of runs sharing options (a cold derivation of a few seconds each for a stack not asked before)
#: and evaluates the compiled answers a few hundred times while fitting.
DEFAULT_CALIBRATE_LIMIT = 120.0
#: Trial propagations the search for what would settle an underdetermined question may run: its
#: bound, counted in work rather than time so that a busy machine gets the same answer, later
#: (issue 38). The questions of benchmarks/diagnosis.py need at most about 400.
DEFAULT_DIAGNOSIS_TRIALS = 2000
#: Seconds that search may take all the same: a guard for a machine many times slower than
#: usual, not the bound that decides what is found (the trials are); when it ends the search
#: the refusal says it was cut short.
DEFAULT_DIAGNOSIS_LIMIT = 10.0
#: Seconds one symbolic inversion (one step or block) may take before numbers are used instead.
DEFAULT_SYMBOLIC_LIMIT = 5.0

_SLACK = 0.005      # a timer may fire this much before time.monotonic() shows its deadline passed
# what signal.signal takes and gives back: a function, SIG_DFL or SIG_IGN
_Handler = Callable[[int, FrameType | None], Any] | int
_REMINDER = 0.1     # an exception that may have been lost is raised again after this
_FARTHEST = 86400.0  # the longest the timer is armed for at once (setitimer overflows near 1e9 s)


class BudgetExceeded(BaseException):
    """A time limit ran out inside the block it guards.

    A BaseException, like KeyboardInterrupt, so that the ``except Exception`` of code it
    interrupts (sympy has many) cannot swallow it; and not a SymcalcError: it is caught by
    whoever set the limit and turned into a fallback or a message there; one that escapes is a
    bug, not a user's mistake. ``limit`` is the :class:`Limit` that ran out, set as the
    exception leaves that limit's block (None until then)."""

    def __init__(self, message: str = "time limit reached", due: Limit | None = None):
        super().__init__(message)
        self.limit: Limit | None = None
        self.due = due          # the limit it was raised for (it claims the exception on the way out)


@dataclass(eq=False)
class Limit:
    """One limit in force: its seconds, its deadline (``time.monotonic``), and whether it ran out."""

    seconds: float
    deadline: float
    expired: bool = False
    fired: bool = False         # its exception has been raised (once: a second could hit a cleanup)
    # the frame running the ``with`` block it guards: a limit whose frame is no longer running
    # (its block left without its __exit__, as a RecursionError inside __exit__ can do) is stale,
    # and never raises into code that has nothing to do with it
    frame: FrameType | None = None


@dataclass(eq=False)
class _Outside:
    """A timer armed by someone else before our first limit: when it is due, and its handler."""

    deadline: float
    interval: float
    handler: _Handler | None


class _Deadlines(threading.local):
    def __init__(self) -> None:
        self.limits: list[Limit] = []


_state = _Deadlines()
_previous_handler: _Handler | None = None
_outside: _Outside | None = None
_busy = False       # True while the main thread's limits are being put in order
#: How many attempts (:class:`bounded`) have run out in this process: work whose result depends on
#: how busy the machine was (a closed form given up for numbers) compares it before and after,
#: so as not to keep that result for other processes.
expirations = 0


def parse_seconds(raw: object, what: str) -> float:
    """A limit given by a user: a positive number of seconds, or ``inf`` (or ``none``) for none.

    Parameters
    ----------
    raw : the value as given (text or a number)
    what : where it was given, for the message (``--time-limit``, ``SYMCALC_TIME_LIMIT``)

    Returns
    -------
    The seconds, ``math.inf`` for no limit.

    Raises
    ------
    QueryError
        ``raw`` is not a positive number of seconds, ``inf`` or ``none``.
    """
    if isinstance(raw, str) and raw.strip().lower() in ("inf", "none", "off"):
        return math.inf
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)   # type: ignore[arg-type]
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(raw, bool) or not value > 0:
        raise QueryError(f"{what} is a positive number of seconds (or inf for no limit), got {str(raw)[:40]!r}")
    return value


ENV_DIAGNOSIS_LIMIT = "SYMCALC_DIAGNOSIS_LIMIT"


def question_limit(default: float = DEFAULT_QUESTION_LIMIT) -> float:
    """The limit of a whole question: SYMCALC_TIME_LIMIT if set to a positive number (or inf),
    else ``default``. (The command line refuses a malformed value; see :func:`parse_seconds`.)"""
    raw = os.environ.get(ENV_LIMIT, "").strip()
    try:
        return parse_seconds(raw, ENV_LIMIT) if raw else default
    except QueryError:
        return default


def diagnosis_limit() -> float:
    """The time guard of the search for what would settle an underdetermined question:
    SYMCALC_DIAGNOSIS_LIMIT if set to a positive number, else the default (10 s). What the search
    finds is bounded by its trials (DEFAULT_DIAGNOSIS_TRIALS), not by this guard."""
    raw = os.environ.get(ENV_DIAGNOSIS_LIMIT, "").strip()
    try:
        return parse_seconds(raw, ENV_DIAGNOSIS_LIMIT) if raw else DEFAULT_DIAGNOSIS_LIMIT
    except QueryError:
        return DEFAULT_DIAGNOSIS_LIMIT


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

def _arm(soon: bool = False) -> None:
    """Arm the timer for the earliest deadline in force that has not fired yet, ours or the
    outside timer's (``soon``: in a moment, for an exception that must be raised again)."""
    due = [lim.deadline for lim in _state.limits if not lim.fired] + ([_outside.deadline] if _outside else [])
    if soon:
        due.append(time.monotonic() + _REMINDER)
    if not due:
        signal.setitimer(signal.ITIMER_REAL, 0)
        return
    # (a far deadline is armed a day at a time: the handler sees it is early and arms again)
    signal.setitimer(signal.ITIMER_REAL, min(max(min(due) - time.monotonic(), 1e-4), _FARTHEST))


def _on_alarm(signum, frame) -> None:
    global _outside
    if _busy or (frame is not None and frame.f_code in _BOOKKEEPING) or _importing(frame):
        # the limits are being put in order (or are about to be), or a module is being
        # imported: raising here would leave the limits in disorder, or a half-initialised
        # module behind for every later question of the process. Come back in a moment.
        signal.setitimer(signal.ITIMER_REAL, 5e-3)
        return
    if _drop_stale(frame) and not _state.limits:
        _uninstall()        # the last limit was a stale one: give the timer back
        return
    now = time.monotonic() + _SLACK
    due = [lim for lim in _state.limits if lim.deadline <= now and not lim.fired]
    if due:
        due[0].fired = True
        _arm()
        raise BudgetExceeded(due=due[0])
    if _outside is not None and _outside.deadline <= now:
        outside, _outside = _outside, (_Outside(now + _outside.interval, _outside.interval, _outside.handler)
                                       if _outside.interval > 0 else None)
        _arm()
        _deliver(outside.handler, signum, frame)
        return
    _arm()      # early: wait for the real deadline


def _drop_stale(frame) -> bool:
    """Forget the limits whose blocks are no longer running: their frame is not among the
    interrupted frame and its callers. A limit is left behind only when its block was left
    without its __exit__ (a RecursionError raised inside __exit__, a generator abandoned inside
    its block); raised for, its exception would reach code that has nothing to do with it and
    end the process. Returns whether some were dropped. O(depth of the stack)."""
    if frame is None or not any(lim.frame is not None for lim in _state.limits):
        return False
    running = set()
    while frame is not None:
        running.add(id(frame))
        frame = frame.f_back
    live = [lim for lim in _state.limits if lim.frame is None or id(lim.frame) in running]
    dropped = len(live) < len(_state.limits)
    _state.limits[:] = live
    return dropped


_IMPORTLIB = (os.path.join("importlib", "_bootstrap.py"), os.path.join("importlib", "_bootstrap_external.py"))


def _importing(frame) -> bool:
    """True while the interrupted code runs inside an import (a lazy import deep in sympy or
    networkx counts): an import cut half-way leaves a module that lacks names, in sys.modules."""
    depth = 0
    while frame is not None and depth < 500:
        name = frame.f_code.co_filename
        if name.startswith("<frozen importlib") or name.endswith(_IMPORTLIB):
            return True
        frame, depth = frame.f_back, depth + 1
    return False


def _deliver(handler, signum, frame) -> None:
    """Run the handler of the outside timer as if its own signal had come."""
    if callable(handler):
        handler(signum, frame)
    elif handler != signal.SIG_IGN:     # the default action: the process ends, as it would have
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
        signal.raise_signal(signal.SIGALRM)


def _unraisable(hook):
    """``sys.unraisablehook`` that takes our own alarm back. A signal can land in code whose
    exceptions Python cannot raise (a weakref callback, ``__del__``), which prints them as
    "Exception ignored in ..." and goes on: for BudgetExceeded that would be noise and a lost
    limit, so it is dropped quietly and raised again in a moment, where it can be."""
    def again(unraisable) -> None:
        exc = unraisable.exc_value
        if not isinstance(exc, BudgetExceeded):
            hook(unraisable)
        elif exc.due is not None and exc.due in _state.limits and interruptible():
            exc.due.fired = False
            _arm(soon=True)
    again.symcalc_budget = True    # type: ignore[attr-defined]
    return again


def _install() -> None:
    """Take the timer over from whoever had it (first limit in the main thread)."""
    global _previous_handler, _outside
    if not getattr(sys.unraisablehook, "symcalc_budget", False):
        sys.unraisablehook = _unraisable(sys.unraisablehook)
        atexit.register(_quiet_at_exit)
    _previous_handler = signal.signal(signal.SIGALRM, _on_alarm)
    delay, interval = signal.setitimer(signal.ITIMER_REAL, 0)
    _outside = _Outside(time.monotonic() + delay, interval, _previous_handler) if delay > 0 else None


def _quiet_at_exit() -> None:
    """No limit outlives the program: a timer still armed when the interpreter shuts down (a
    limit left behind by code that a limit interrupted in an odd place) must not raise into the
    finalisation, where the exception is lost and takes unflushed output with it."""
    if interruptible() and signal.getsignal(signal.SIGALRM) is _on_alarm:
        signal.setitimer(signal.ITIMER_REAL, 0)
        _state.limits.clear()


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


class _Held:
    """Hold the alarm back while the limits are put in order, so that it cannot fire half-way
    through (and leave a stale deadline, handler or timer behind, or raise a second exception
    that nobody claims): the signal is blocked, and the handler leaves alone a signal that
    came just before (the bookkeeping arms the timer again)."""

    def __init__(self, active: bool):
        self.active = active and hasattr(signal, "pthread_sigmask")

    def __enter__(self) -> None:
        global _busy
        if self.active:
            _busy = True
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})

    def __exit__(self, *exc) -> None:
        global _busy
        if self.active:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
            _busy = False


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
        self.armed = interruptible()
        with _Held(self.armed):
            self.limit.deadline = time.monotonic() + self.limit.seconds
            self.limit.frame = sys._getframe(1) if self.armed else None
            _state.limits.append(self.limit)
            if self.armed:
                if len(_state.limits) == 1:
                    _install()
                _arm()
        return self.limit

    # bool although it never swallows: its subclass bounded does (its own limit running out)
    def __exit__(self, exc_type, exc, tb) -> bool:  # type: ignore[exit-return]
        if not self.own:
            return False
        # off the stack first, with no Python call before it: a RecursionError raised further
        # down this method (deep in sympy's recursion) must not leave the limit behind; with it
        # go limits entered after it and left behind (limits nest: an inner block ends first)
        limits = _state.limits
        if self.limit in limits:
            del limits[limits.index(self.limit):]
        self.limit.frame = None
        with _Held(self.armed):
            passing = isinstance(exc, BudgetExceeded) and exc.limit is None
            if passing and (exc.due is self.limit or (exc.due is None and time.monotonic() >= self.limit.deadline - _SLACK)):
                exc.limit = self.limit
                self.limit.expired = True
                passing = False
            if self.armed:
                if not _state.limits:
                    _uninstall()
                elif passing and exc.due in _state.limits:
                    # an outer limit's exception on its way out: should the code between here
                    # and that limit catch it, the limit is signalled again
                    exc.due.fired = False
                    _arm(soon=True)
                else:
                    _arm()
        return False


class bounded(time_limit):
    """Like :class:`time_limit`, but when *this* limit runs out the block just ends, quietly:
    the caller reads ``limit.expired`` and falls back. An outer limit that runs out meanwhile
    still raises (the question is over, not just this attempt)::

        with bounded(DEFAULT_SYMBOLIC_LIMIT) as limit:
            roots = sympy.solve(residual, x)
        if limit.expired:
            roots = None        # numeric roots instead
    """

    def __exit__(self, exc_type, exc, tb) -> bool:
        global expirations
        time_limit.__exit__(self, exc_type, exc, tb)
        if isinstance(exc, BudgetExceeded) and exc.limit is self.limit:
            expirations += 1
            return True
        return False


class question(time_limit):
    """The limit of a whole question (``seconds``, else :func:`question_limit`): when it runs
    out, the question ends in a TimeLimitError that says how to give it more (``hint``)."""

    def __init__(self, seconds: float | None = None, hint: str = "--time-limit SECONDS or SYMCALC_TIME_LIMIT"):
        super().__init__(question_limit() if seconds is None else seconds)
        self.hint = hint

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        time_limit.__exit__(self, exc_type, exc, tb)
        if isinstance(exc, BudgetExceeded) and exc.limit is self.limit:
            raise TimeLimitError(f"no answer within the time limit of {self.limit.seconds:g} s; to allow more, "
                                 f"give {self.hint}") from None
        return False


# the handler never raises in these: they put the limits in order
_BOOKKEEPING = {f.__code__ for f in (time_limit.__enter__, time_limit.__exit__, bounded.__exit__,
                                     question.__exit__, _Held.__enter__, _Held.__exit__)}


F = TypeVar("F", bound=Callable)
_UNSET = object()


def limited(fn: F, default: float = DEFAULT_QUESTION_LIMIT, prepare: Callable[[], object] | None = None) -> F:
    """``fn`` as a whole question: it takes one more keyword, ``time_limit`` (seconds, or None
    for no limit; default SYMCALC_TIME_LIMIT or ``default``, DEFAULT_QUESTION_LIMIT unless
    given), and raises TimeLimitError when that runs out. For the public Python API.
    ``prepare`` runs first, outside the limit: a one-time cost of the process (building the
    library on a cold cache, slow on a busy machine) is not the question's."""
    @functools.wraps(fn)
    def wrapper(*args, time_limit: object = _UNSET, **kwargs):
        if time_limit is _UNSET:
            seconds = question_limit(default)
        else:
            seconds = math.inf if time_limit is None else parse_seconds(time_limit, "time_limit")
        if prepare is not None:
            prepare()
        with question(seconds, hint="time_limit=SECONDS or SYMCALC_TIME_LIMIT"):
            return fn(*args, **kwargs)
    return wrapper  # type: ignore[return-value]
