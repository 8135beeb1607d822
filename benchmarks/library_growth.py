"""Library load time as the library grows: x1, x2, x4 formulas, by synthetic replication.

Each copy of the formula files renames every quantity, alias and formula id with a suffix
(``n_params`` -> ``n_params_c1``), so copy k is a second, independent library of the same
shape (its options renamed as well). Each size is loaded without
the disk cache, in a fresh process (so no memo table carries over from a smaller size), and
the exponent of load time against formula count is fitted on log-log axes: 1 is linear.
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from common import Row, fmt_time, median
from symcalc.library.loading import formula_dir, load_library

TARGET_EXPONENT = 1.1       # linear, with room for measurement noise
LOAD = "import time, sys; from symcalc.library.loading import load_library; t = time.perf_counter(); " \
       "lib = load_library([sys.argv[1]], use_cache=False); print(time.perf_counter() - t, len(lib.formulas))"


def replicate(copies: int, into: Path) -> int:
    """Write ``copies`` renamed copies of the built-in formula files into ``into``; returns the
    formula count. Names are renamed in the text, whole words only, which also renames them
    in notes and descriptions (harmless)."""
    lib = load_library(use_cache=False)
    names = set(lib.quantities) | set(lib.aliases) | set(lib.formulas)
    # options are renamed too: a copy's training stack sets its own copy's options (one option
    # may not be set by two)
    names |= set(lib.options)
    pattern = re.compile(r"\b(" + "|".join(sorted(map(re.escape, names), key=len, reverse=True)) + r")\b")
    into.mkdir(parents=True, exist_ok=True)
    for k in range(copies):
        for path in sorted(formula_dir().glob("*.toml")):
            text = path.read_text()
            if k > 0:
                text = pattern.sub(lambda m, k=k: f"{m.group(1)}_c{k}", text)
                # an algorithm's id is renamed, the registered function it calls is not
                text = re.sub(r'(function\s*=\s*")(\w+)_c\d+"', r'\1\2"', text)
            (into / f"{path.stem}_c{k}.toml").write_text(text)
    return len(lib.formulas) * copies


def load_seconds(directory: Path, repeat: int) -> tuple[float, int]:
    """The best of ``repeat`` loads of ``directory``, each in a fresh process."""
    times, count = [], 0
    for _ in range(repeat):
        out = subprocess.run([sys.executable, "-c", LOAD, str(directory)], capture_output=True, text=True, check=True)
        seconds_, count = out.stdout.split()
        times.append(float(seconds_))
    return min(times), int(count)


def exponent(sizes: list[int], times: list[float]) -> float:
    """Least-squares slope of log(time) against log(size)."""
    return float(np.polyfit(np.log(sizes), np.log(times), 1)[0])


def run(quick: bool = False) -> list[Row]:
    sizes, times = [], []
    with tempfile.TemporaryDirectory(prefix="symcalc-bench-growth-") as tmp:
        for copies in (1, 2, 4):
            directory = Path(tmp) / f"x{copies}"
            expected = replicate(copies, directory)
            seconds_, count = load_seconds(directory, repeat=1 if quick else 3)
            assert count == expected, (count, expected)
            sizes.append(count)
            times.append(seconds_)
    k = exponent(sizes, times)
    per = [t / n for t, n in zip(times, sizes)]
    return [Row("library load vs size (x1, x2, x4 formulas)",
                " / ".join(f"{n}: {fmt_time(t)}" for n, t in zip(sizes, times)),
                f"exponent {k:.2f}", f"<= {TARGET_EXPONENT}", k <= TARGET_EXPONENT,
                f"uncached, renamed copies of the formula files, a fresh process per load, best of "
                f"{1 if quick else 3}; {fmt_time(median(per))} per formula; "
                f"x4/x1 = {times[-1] / times[0]:.2f} for {sizes[-1] / sizes[0]:.0f}x the formulas"
                + ("" if math.isfinite(k) else "; fit failed"))]
