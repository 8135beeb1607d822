"""Time limits: a block that would run for ever ends when its budget does (symcalc.budget)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

import symcalc
from symcalc.budget import (DEFAULT_QUESTION_LIMIT, BudgetExceeded, bounded, expired, limited, parse_seconds,
                            question, question_limit, remaining, time_limit)
from symcalc.errors import QueryError, TimeLimitError


def _spin():
    while True:
        pass


def test_a_limit_interrupts_a_busy_loop_on_time():
    start = time.monotonic()
    with pytest.raises(BudgetExceeded):
        with time_limit(0.2):
            _spin()
    # never before the limit; the loop never ends by itself, so returning at all is the limit's
    # doing (the upper bound only catches a limit taken as seconds x 100, whatever the load)
    assert 0.19 <= time.monotonic() - start < 20


def test_an_inner_limit_never_extends_the_outer_one():
    # the inner block asks for 600 s, but only 0.3 s of the outer budget are left: the outer wins
    # (well before 600 s, however loaded the machine)
    start = time.monotonic()
    with pytest.raises(BudgetExceeded):
        with time_limit(0.3):
            with time_limit(600):
                _spin()
    assert time.monotonic() - start < 60
    assert remaining() == float("inf")      # nothing left armed afterwards


def test_a_caught_inner_limit_leaves_the_outer_one_in_force():
    start = time.monotonic()
    with pytest.raises(BudgetExceeded):
        with time_limit(2.0):
            try:
                with time_limit(0.1):
                    _spin()
            except BudgetExceeded:
                caught = time.monotonic() - start
            _spin()                       # the fallback itself is still bounded by the outer 2 s
    # the inner limit fired first, and the outer one still ended the fallback (not before its 2 s)
    assert 0.09 <= caught < time.monotonic() - start and 1.99 <= time.monotonic() - start < 60


def test_outside_the_main_thread_the_deadline_is_only_recorded():
    seen = {}

    def work():
        with time_limit(0.05):
            time.sleep(0.1)
            seen["expired"] = expired()
    t = threading.Thread(target=work)
    t.start()
    t.join(5)
    assert seen == {"expired": True}


def test_bounded_ends_quietly_when_its_own_limit_runs_out():
    start = time.monotonic()
    with bounded(0.1) as limit:
        _spin()
    assert limit.expired and 0.09 <= time.monotonic() - start < 20


def test_bounded_lets_an_outer_limit_through():
    # the outer limit (0.1 s) runs out inside the inner attempt (5 s): that is the question
    # ending, not the attempt, so the attempt must not swallow it as its own
    with pytest.raises(BudgetExceeded) as caught:
        with time_limit(0.1) as outer:
            with bounded(5) as inner:
                _spin()
    assert caught.value.limit is outer and outer.expired and not inner.expired


def test_bounded_work_that_finishes_in_time_is_not_expired():
    with bounded(5) as limit:
        total = sum(range(1000))
    assert total == 499500 and not limit.expired


def test_a_question_that_runs_out_is_a_clear_refusal():
    with pytest.raises(TimeLimitError) as caught:
        with question(0.1):
            _spin()
    assert caught.value.kind == "time_limit"
    assert caught.value.message == ("no answer within the time limit of 0.1 s; to allow more, "
                                    "give --time-limit SECONDS or SYMCALC_TIME_LIMIT")


def test_a_limited_function_takes_a_time_limit_keyword():
    def spin_for_ever(x):
        _spin()

    def double(x):
        return 2 * x
    with pytest.raises(TimeLimitError, match="time_limit=SECONDS"):
        limited(spin_for_ever)(1, time_limit=0.1)
    assert limited(double)(21, time_limit=None) == 42
    with pytest.raises(QueryError, match="positive number of seconds"):
        limited(double)(21, time_limit=-1)


def test_a_timer_armed_before_the_first_limit_still_fires_with_its_own_handler():
    fired = []
    old = signal.signal(signal.SIGALRM, lambda *_: fired.append(time.monotonic()))
    try:
        start = time.monotonic()
        signal.setitimer(signal.ITIMER_REAL, 0.3)
        with bounded(0.1) as limit:        # takes the timer over for 0.1 s ...
            _spin()
        assert limit.expired and not fired
        with time_limit(5):                # ... and while a longer limit is in force
            while not fired:
                pass
        assert 0.29 <= fired[0] - start < 5      # its own 0.3 s, before the 5 s limit would end the wait
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_an_outside_timer_is_given_back_when_the_last_limit_ends():
    old = signal.signal(signal.SIGALRM, lambda *_: None)
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with time_limit(1):
            pass
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 29 < left <= 30
        assert signal.getsignal(signal.SIGALRM) is not None and remaining() == float("inf")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_threads_keep_their_own_deadlines():
    # a worker's short limit must never interrupt the main thread, whose own limit is long
    done = threading.Event()

    def work():
        with time_limit(0.05):
            time.sleep(0.1)
        done.set()
    with time_limit(5):
        t = threading.Thread(target=work)
        t.start()
        t.join(5)
        assert done.is_set() and 4 < remaining() <= 5


@pytest.mark.parametrize("raw, seconds", [("2.5", 2.5), (" 10 ", 10.0), ("inf", float("inf")), ("none", float("inf")),
                                          (3, 3.0)])
def test_limits_a_user_gives(raw, seconds):
    assert parse_seconds(raw, "--time-limit") == seconds


@pytest.mark.parametrize("raw", ["0", "-1", "nan", "abc", "", True])
def test_limits_that_are_refused(raw):
    with pytest.raises(QueryError, match="--time-limit is a positive number of seconds"):
        parse_seconds(raw, "--time-limit")


def test_the_environment_sets_the_question_limit(monkeypatch):
    monkeypatch.setenv("SYMCALC_TIME_LIMIT", "7")
    assert question_limit() == 7.0
    monkeypatch.setenv("SYMCALC_TIME_LIMIT", "nonsense")
    assert question_limit() == DEFAULT_QUESTION_LIMIT


def test_an_import_is_never_cut_half_way(tmp_path, monkeypatch):
    # a module cut half-way stays in sys.modules without its later names, for every later
    # question of the process: the limit waits for the import to finish, then raises
    (tmp_path / "slow_module_for_budget.py").write_text(
        "import time\nstart = time.monotonic()\nwhile time.monotonic() - start < 0.3:\n    pass\nLAST = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    start = time.monotonic()
    with pytest.raises(BudgetExceeded):
        with time_limit(0.05):
            import slow_module_for_budget
            _spin()
    # not before the import's own 0.3 s; the endless loop after it shows the limit then fired
    assert 0.3 <= time.monotonic() - start < 20
    assert slow_module_for_budget.LAST == 42


def test_a_limit_of_a_lifetime_is_armed_a_day_at_a_time():
    # setitimer cannot take 1e300 s (the platform's time_t overflows): the limit is still kept
    with time_limit(1e300) as limit:
        left, _ = signal.getitimer(signal.ITIMER_REAL)
        assert 86399 < left <= 86400 and limit.deadline > 1e299


def test_the_one_time_library_build_is_not_the_questions_time(monkeypatch):
    # a cold process builds the library once (seconds on a busy machine): that must not count
    # against the first question's limit, in the Python API or on the command line
    from symcalc.cli import main
    from symcalc.library import loading
    real = loading.load_library
    seen = []

    def recording(*args, **kwargs):
        seen.append(remaining())
        return real(*args, **kwargs)
    monkeypatch.setattr(loading, "load_library", recording)
    try:
        for ask in (lambda: symcalc.solve("n_gpus_min_memory", n_params=70e9, gpu_memory="80 GB", time_limit=5),
                    lambda: main(["solve", "n_gpus_min_memory", "n_params=70e9", "gpu_memory=80GB", "--brief"])):
            loading.default_library.cache_clear()
            seen.clear()
            ask()
            assert seen and seen[0] == float("inf")      # no limit was in force while it loaded
    finally:
        loading.default_library.cache_clear()


def test_a_limit_left_behind_never_fires_into_the_shutdown(tmp_path):
    # A limit left in force when the program ends (code a limit interrupted in an odd place) must
    # not raise BudgetExceeded while the interpreter shuts down: the audit lost its whole report
    # (unflushed output) that way. Here a limit is left armed 50 ms ahead and an exit handler
    # that runs after symcalc's own sleeps through its deadline.
    script = tmp_path / "leftover.py"
    script.write_text(
        "import atexit, sys, time\n"
        "atexit.register(lambda: time.sleep(0.3))\n"
        "from symcalc import budget\n"
        "budget._install()\n"
        "budget._state.limits.append(budget.Limit(0.05, time.monotonic() + 0.05))\n"
        "budget._arm()\n"
        "sys.stdout.write('report\\n')\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0 and run.stdout == "report\n"
    assert "BudgetExceeded" not in run.stderr


def _leave_a_limit_behind(seconds: float) -> None:
    # a block left without its __exit__, as a RecursionError raised inside __exit__ (deep in
    # sympy's recursion) or a generator abandoned inside its block leaves one
    bounded(seconds).__enter__()


def test_a_limit_whose_block_is_gone_never_fires_into_other_work():
    # The round-trip audit died now and then with a BudgetExceeded nobody claimed: a symbolic
    # attempt's limit (5 s) was left in force after its block had gone, and when its deadline
    # passed the exception landed in later, unrelated work and left every question's limit
    # unclaimed. A limit whose block no longer runs is forgotten when the timer fires instead.
    start = time.monotonic()
    with time_limit(30.0):
        _leave_a_limit_behind(0.05)
        while time.monotonic() - start < 0.4:     # the left-behind deadline passes in here
            pass
    assert remaining() == float("inf")            # and nothing stays armed afterwards
    # a limit whose block still runs fires as before, inside the same kind of loop
    with pytest.raises(BudgetExceeded):
        with time_limit(0.05):
            _spin()
