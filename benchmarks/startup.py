"""Start-up: ``symcalc solve ...`` as a new process vs a bare import of numpy and pint.

The target is at most 1.3x ``python -c "import numpy, pint"``: a command-line tool is run
once per question, so everything it does besides reading values with units (loading and
unit-checking the formula files, inverting and compiling the equations with sympy) must be
cached or cheap. A question whose derivation is cached does not import sympy at all (the
library and the derivation are read with their sympy parts frozen, symcalc.lazy; the compiled
functions keep their code objects, symcalc.compiled; the forms shown are printed already,
symcalc.library.printed); the run checks that it did not. The cache lives in a fresh temporary directory: the first run builds it (reported), the
timed runs use it. The same command with the cache off is reported for comparison. Both
sides run with Python's bytecode cache on, as after ``pip install``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import Row, fmt_time, median

BARE = [sys.executable, "-c", "import numpy, pint"]
QUESTION = ["solve", "n_gpus", "n_params=30e9", "n_tokens=600e9 token", "train_time=30day", "mfu=45%",
            "peak_flops=989 TFLOP/s"]
TARGET = 1.3


def symcalc_command() -> list[str]:
    """The installed console script next to this Python, else ``python -m symcalc``."""
    script = Path(sys.executable).with_name("symcalc")
    return [str(script)] if script.exists() else [sys.executable, "-m", "symcalc"]


def _run(cmd: list[str], env: dict[str, str]) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    elapsed = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr.strip()}")
    return elapsed


def _imports_sympy(env: dict[str, str]) -> bool:
    """Whether the cached question imports sympy (it should not)."""
    probe = ("import sys\nfrom symcalc import cli\nsys.argv = ['symcalc', *sys.argv[1:]]\n"
             "try:\n    cli.main()\nexcept SystemExit:\n    pass\nprint('sympy' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe, *QUESTION], env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True)
    return done.stderr.strip().splitlines()[-1] == "True"


def measure(rounds: int) -> dict[str, list[float]]:
    """Seconds per run: bare import, symcalc with a warm cache, symcalc with the cache off, and
    the first symcalc run (which builds the cache)."""
    solve = symcalc_command() + QUESTION
    with tempfile.TemporaryDirectory(prefix="symcalc-bench-cache-") as tmp:
        env = {**os.environ, "SYMCALC_CACHE_DIR": tmp}
        env.pop("SYMCALC_NO_CACHE", None)
        # as installed: pip compiles symcalc's modules like sympy's, so neither side
        # recompiles its source on every start (the first run below writes the bytecode)
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        off = {**env, "SYMCALC_NO_CACHE": "1"}
        _run(BARE, env)                      # the OS file cache, for both sides alike
        times = {"first": [_run(solve, env)], "bare": [], "cached": [], "off": []}
        times["sympy"] = _imports_sympy(env)
        for _ in range(rounds):
            times["bare"].append(_run(BARE, env))
            times["cached"].append(_run(solve, env))
            times["off"].append(_run(solve, off))
    return times


def run(quick: bool = False) -> list[Row]:
    t = measure(3 if quick else 9)
    bare, cached, off = median(t["bare"]), median(t["cached"]), median(t["off"])
    # each run against the bare import of its own round: a change of load between rounds
    # does not bias the ratio
    ratio = median([c / b for c, b in zip(t["cached"], t["bare"])])
    ratio_off = median([c / b for c, b in zip(t["off"], t["bare"])])
    best = min(t["cached"]) / min(t["bare"])
    n = len(t["bare"])
    return [
        Row("start-up: symcalc solve vs bare import",
            f"{fmt_time(cached)} vs {fmt_time(bare)}", f"{ratio:.2f}x", f"<= {TARGET}x, no sympy", ratio <= TARGET and not t["sympy"],
            f"new process each, cache warm: `symcalc {shlex.join(QUESTION)}` vs `python -c \"import numpy, "
            f"pint\"` (sympy imported: {t['sympy']}); median ratio of {n} alternating rounds (ratio of the minimums {best:.2f}x)"),
        Row("start-up, cache off", f"{fmt_time(off)} vs {fmt_time(bare)}",
            f"{ratio_off:.2f}x", "", None, "SYMCALC_NO_CACHE=1: what the cache saves"),
        Row("start-up, first run (fills the cache)", fmt_time(t["first"][0]), f"{t['first'][0] / bare:.2f}x",
            "", None, "one run, fresh cache directory"),
    ]
