"""A worker's job for tests/test_serve.py, importable by the worker processes it spawns: the
real answer, except that a plan of the model "stall" never ends (not even at symcalc's own,
cooperative, time limit), so that only the server's kill can stop it."""

from __future__ import annotations

import signal
import time

from symcalc.serve.worker import answer


def stubborn(kind, request, limit):
    if kind == "plan" and isinstance(request, dict) and request.get("model") == "stall":
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})     # deaf to symcalc's own limit
        while True:
            time.sleep(3600)
    return answer(kind, request, limit)
