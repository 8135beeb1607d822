"""A cached solve (same target and known names, new values) vs a cold one, and the disk cache.

A question is planned, inverted by sympy and compiled once; asking it again with other
values only reads the values and evaluates the compiled steps. Cold means nothing cached:
a library object with an empty derivation cache, sympy's and symcalc's memo tables cleared,
the disk cache off. The question is the sweep's (train_time from the architecture, 10
steps), with scalar values.

Also reported, for the start-up budget: loading the library from the disk cache vs parsing
and unit-checking the formula files, and a derivation read from the disk cache (what a new
process does) vs building it.
"""

from __future__ import annotations

import os
import tempfile

import sympy

import symcalc
from common import Row, fmt_time, median, seconds
from symcalc import cache
from symcalc.query import derivations as api
from symcalc.engine import invert
from symcalc.library.loading import load_library

QUESTION = dict(n_layers=32, d_model=4096, vocab_size=32000, n_tokens="1e12 token", n_gpus=64, mfu=0.4,
                peak_flops="989 TFLOP/s")
TARGET_MS = 0.5


def _forget(library) -> None:
    """Everything a first solve would find empty."""
    library.derivation_cache.clear()
    sympy.core.cache.clear_cache()
    for memo in (invert.solve_for, invert.dependent_equation, invert.reduce_block):
        memo.cache_clear()


def run(quick: bool = False) -> list[Row]:
    library = load_library(use_cache=False)         # no fingerprint: the disk cache is not used

    def cold():
        _forget(library)
        symcalc.solve("train_time", library=library, **QUESTION)
    cold_time = median(seconds(cold, repeat=2 if quick else 5))

    calls = [dict(QUESTION, n_gpus=64 + i, mfu=0.3 + i / 1000) for i in range(200)]
    symcalc.solve("train_time", library=library, **QUESTION)

    def cached():
        for values in calls:
            symcalc.solve("train_time", library=library, **values)
    cached_time = median(seconds(cached, repeat=5 if quick else 15)) / len(calls)
    rows = [Row("cached solve (new values) vs cold solve",
                f"{fmt_time(cached_time)} vs {fmt_time(cold_time)}", f"{cold_time / cached_time:,.0f}x faster",
                f"< {TARGET_MS} ms", cached_time * 1e3 < TARGET_MS,
                "same target and known names, new scalar values; the 10-step sweep question; cold: every "
                "cache empty (sympy's too), disk cache off")]
    return rows + _disk(quick)


def _disk(quick: bool) -> list[Row]:
    """The library and a derivation from the disk cache, in a temporary cache directory."""
    saved = os.environ.get(cache.ENV_DIR)
    with tempfile.TemporaryDirectory(prefix="symcalc-bench-cache-") as tmp:
        os.environ[cache.ENV_DIR] = tmp
        try:
            parse = median(seconds(lambda: load_library(use_cache=False), repeat=2 if quick else 5))
            warm = load_library()                          # writes the entry
            read = median(seconds(load_library, repeat=5 if quick else 15))
            symcalc.solve("train_time", library=warm, **QUESTION)   # writes the derivation
            # the key the solve used (its options: the library's defaults with the training
            # stack's, which a question the stack does not reach keeps)
            key = next(k for k in warm.derivation_cache if k[0] == "train_time" and k[1] == frozenset(QUESTION))

            times = []
            for _ in range(5 if quick else 15):
                fresh = load_library()
                times += seconds(lambda lib=fresh: api.cached_derivation(lib, key), repeat=1)
                assert api.cached_derivation(fresh, key) is not None
            from_disk_time = median(times)
        finally:
            if saved is None:
                os.environ.pop(cache.ENV_DIR, None)
            else:
                os.environ[cache.ENV_DIR] = saved
    return [
        Row("library load: disk cache vs parse + unit check",
            f"{fmt_time(read)} vs {fmt_time(parse)}", f"{parse / read:.0f}x faster", "", None,
            f"{len(warm.formulas)} formulas, {len(warm.quantities)} quantities"),
        Row("derivation from the disk cache", fmt_time(from_disk_time), "", "", None,
            "read + compile, into a new library object: what a new process pays instead of a cold solve"),
    ]
