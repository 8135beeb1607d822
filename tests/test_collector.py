"""Which runs pause Python's cyclic garbage collector: the program answering one plan turns it
off for good (it ends right after), a plan asked in Python pauses it only while it searches,
and every other command, and any caller of ``main(argv)``, leaves it as it was."""

from __future__ import annotations

import gc
import signal
import sys

import pytest

import symcalc
from symcalc import cli


@pytest.fixture
def collector():
    """The collector on before, and on again (and nothing left frozen) after; Ctrl-C's handler
    as it was (the program ignores it once it has answered)."""
    gc.enable()
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)
    gc.unfreeze()
    gc.enable()


def _as_program(monkeypatch, *args: str) -> bool:
    """Run ``symcalc ARGS`` as the program runs it (``main()`` reading sys.argv); whether the
    collector is on afterwards."""
    monkeypatch.setattr(sys, "argv", ["symcalc", *args])
    assert cli.main() == 0
    return gc.isenabled()


def test_the_program_answering_a_plan_turns_the_collector_off(collector, monkeypatch, capsys):
    assert _as_program(monkeypatch, "plan", "--help") is False


def test_other_commands_keep_the_collector(collector, monkeypatch, capsys):
    assert _as_program(monkeypatch, "solve", "--help") is True
    assert _as_program(monkeypatch, "serve", "--help") is True


def test_a_caller_of_main_keeps_the_collector(collector, capsys):
    assert cli.main(["plan", "--help"]) == 0 and gc.isenabled()


def test_a_plan_asked_in_python_pauses_the_collector_only_while_it_searches(collector, monkeypatch):
    seen = []
    from symcalc.planner import search

    real = search._search

    def spy(*args, **kwargs):
        seen.append(gc.isenabled())
        return real(*args, **kwargs)
    monkeypatch.setattr(search, "_search", spy)
    symcalc.plan("llama3-8b", "h100", 8, global_batch_size=64, top=1)
    assert seen == [False] and gc.isenabled()
