"""A cold plan's derivations on a second core: half of the option combinations routed in a forked child.

Why: a first plan in a new process spends most of its time routing and deriving the step time
and memory of each option combination (48 for a dense model: ZeRO stage x recompute x sequence
parallelism x schedule). Those derivations are independent of each other and of the layouts'
values, and deterministic: a child process forked after the library is loaded derives the second
half of them while the parent derives the first, and sends its derivations back (pickled, as the
on-disk cache keeps them). The parent then finds them as if it had derived them itself: the same
derivations, so the same answers, in about half the wall time on a machine with two cores.

It runs only where it is safe and useful: the command line asked for it (:func:`allow`; a library
user's process may hold threads, and a fork copies only the forking one), the platform forks, the
process has one thread, the machine has a second core, the plan is cold (no derivation of the
library in memory yet, no stored bundle of this plan's on disk) and has enough combinations to
share. A child that fails, or outlives the plan's time budget, is ignored: the parent derives
what it did not get. Nothing it sends is trusted beyond what the parent's own derivations are:
it is the same code and library, forked from the parent itself.
"""

from __future__ import annotations

import os
import pickle
import select
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from symcalc import cache

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.registry import Library

#: the fewest option combinations worth a child: below this the fork and the transfer cost more
MIN_COMBOS = 8
_state = {"allowed": False, "used": False}


def allow(on: bool = True) -> None:
    """Let the first plan of this process derive on a second core (the command line's
    ``symcalc plan``: one plan a process, and no thread of its own)."""
    _state["allowed"] = on


def _possible() -> bool:
    """Allowed, not used yet in this process (a second plan finds the first's derivations in
    memory), forkable, one thread, two cores, SYMCALC_WORKERS not 1, and cold on disk too."""
    return (_state["allowed"] and not _state["used"] and hasattr(os, "fork") and threading.active_count() == 1
            and (os.cpu_count() or 1) >= 2 and os.environ.get("SYMCALC_WORKERS", "2") != "1"
            and not cache.bundle_stored())


@dataclass
class _Child:
    pid: int
    fd: int
    deadline: float

    def join(self, library: Library, store: Callable[[tuple, tuple], None]) -> int:
        """Read the child's derivations into ``library`` (and ``store`` each, for the on-disk
        bundle); the number taken. A child past the deadline is killed and gives nothing."""
        chunks, done = [], False
        try:
            while True:
                left = self.deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    return 0
                chunk = os.read(self.fd, 1 << 20)
                if not chunk:
                    done = True
                    break
                chunks.append(chunk)
        finally:           # past the deadline, or the plan's own limit fired while waiting: no orphan
            if not done:
                os.kill(self.pid, signal.SIGKILL)
            os.close(self.fd)
            os.waitpid(self.pid, 0)
        try:
            entries = pickle.loads(b"".join(chunks)) if chunks else {}
        except Exception:           # a child that died mid-write: derive its part here
            return 0
        taken = 0
        for key, (derivation, used) in entries.items():
            if key in library.derivation_cache:
                continue
            try:
                derivation = derivation.bind(library)   # its formulas are this process's records again
            except Exception:       # (as a cached one that does not fit: derived here instead)
                continue
            derivation.cache_key = key
            library.derivation_cache[key] = (derivation, used)
            store(key, (derivation, used))
            taken += 1
        return taken


def start(library: Library, work: Sequence[Callable[[], object]], seconds: float) -> _Child | None:
    """Fork a child that runs ``work`` (each a call that derives, filling
    ``library.derivation_cache``) and sends back the derivations it made; None where it
    cannot run (see the module's docstring). ``seconds``: how long the parent will wait."""
    if len(work) < MIN_COMBOS // 2 or not _possible():
        return None
    _state["used"] = True
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:                    # the child: derive, send, leave without running the parent's cleanup
        os.close(read)
        status = 1
        try:
            for call in work:
                call()
            made = {k: v for k, v in library.derivation_cache.items() if isinstance(v, tuple) and k[0] != "underdetermined"}
            data = pickle.dumps(made, protocol=pickle.HIGHEST_PROTOCOL)
            view = memoryview(data)
            while view:
                view = view[os.write(write, view):]
            status = 0
        finally:
            os._exit(status)
    os.close(write)
    return _Child(pid, read, time.monotonic() + seconds)
