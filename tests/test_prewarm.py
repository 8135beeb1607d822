"""A cold plan's second half of option combinations derived in a forked child (symcalc.planner.prewarm).

The child runs the same code on a copy of the parent's library; what it sends back must be what
the parent would have derived, taken as the parent's own. Both tests run in a new process (a
fork is allowed only in a process with one thread, which a test runner's worker may not be)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(not hasattr(os, "fork") or (os.cpu_count() or 1) < 2,
                                reason="needs fork and a second core")

CHILD_SCRIPT = r'''
import os, sys
sys.path.insert(0, sys.argv[1])
from symcalc.planner import prewarm

class Made:                      # stands for a Derivation: picklable, bound back by the parent
    def __init__(self, n):
        self.n, self.pid, self.bound = n, os.getpid(), False
    def bind(self, library):
        self.bound = True
        return self

class Library:
    def __init__(self):
        self.derivation_cache = {"before": (Made(-1), {})}

lib = Library()
def work(n):
    return lambda: lib.derivation_cache.__setitem__(("step_time", n), (Made(n), {"d": n}))

stored = []
prewarm.allow()
child = prewarm.start(lib, [work(n) for n in range(6)], 60.0)
assert child is not None and not lib.derivation_cache.keys() - {"before"}   # the parent has not derived them
taken = child.join(lib, lambda key, value: stored.append(key))
got = {k: v for k, v in lib.derivation_cache.items() if k != "before"}
print(taken, sorted(k[1] for k in got), all(v[0].pid != os.getpid() and v[0].bound and v[0].n == k[1]
      and v[1] == {"d": k[1]} for k, v in got.items()), sorted(k[1] for k in stored),
      prewarm.start(lib, [work(9)] * 6, 60.0) is None)
'''


def test_a_forked_child_derives_and_the_parent_takes_its_derivations_as_its_own(tmp_path):
    """Six derivations made in the child (its pid, not the parent's), each bound to the parent's
    library, kept in its cache and handed to the store (the on-disk bundle); the entry the
    parent had before the fork is not taken again; a second plan in the process forks no child."""
    script = tmp_path / "child.py"
    script.write_text(CHILD_SCRIPT)
    run = subprocess.run([sys.executable, str(script), str(ROOT)], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "SYMCALC_CACHE_DIR": str(tmp_path / "cache")})
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[0] == "6 [0, 1, 2, 3, 4, 5] True [0, 1, 2, 3, 4, 5] True"


def test_a_cold_plan_on_two_cores_prints_what_one_core_prints(tmp_path):
    """Llama 2 7B on 8 H100s, cold (an empty cache each), once with a second core allowed and
    once with SYMCALC_WORKERS=1: the same plan to the byte but for its wall time."""
    def plan(workers: str) -> list[str]:
        env = {**os.environ, "SYMCALC_CACHE_DIR": str(tmp_path / f"cache{workers}"), "SYMCALC_WORKERS": workers}
        run = subprocess.run([sys.executable, "-m", "symcalc", "plan", "--model", "llama2-7b", "--hardware", "h100",
                              "--gpus", "8", "--global-batch-size", "16", "--top", "5"],
                             capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
        assert run.returncode == 0, run.stderr
        return [line for line in run.stdout.splitlines() if "option combinations solved" not in line]
    two, one = plan("2"), plan("1")
    assert two == one and any(line.startswith("1 ") for line in two)
