"""Time limits: a block that would run for ever ends when its budget does (symcalc.budget)."""

from __future__ import annotations

import threading
import time

import pytest

from symcalc.budget import BudgetExceeded, expired, remaining, time_limit


def _spin():
    while True:
        pass


def test_a_limit_interrupts_a_busy_loop_on_time():
    start = time.monotonic()
    with pytest.raises(BudgetExceeded):
        with time_limit(0.2):
            _spin()
    assert 0.19 <= time.monotonic() - start < 1.0


def test_an_inner_limit_never_extends_the_outer_one():
    # the inner block asks for 5 s, but only 0.3 s of the outer budget are left: the outer wins
    start = time.monotonic()
    with pytest.raises(BudgetExceeded):
        with time_limit(0.3):
            with time_limit(5):
                _spin()
    assert time.monotonic() - start < 1.0
    assert remaining() == float("inf")      # nothing left armed afterwards


def test_a_caught_inner_limit_leaves_the_outer_one_in_force():
    start = time.monotonic()
    with pytest.raises(BudgetExceeded):
        with time_limit(0.5):
            try:
                with time_limit(0.1):
                    _spin()
            except BudgetExceeded:
                assert 0.09 <= time.monotonic() - start < 0.4
            _spin()                       # the fallback itself is still bounded by the outer 0.5 s
    assert 0.49 <= time.monotonic() - start < 1.5


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
