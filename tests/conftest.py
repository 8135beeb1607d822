"""Fixtures: run the CLI in-process; find pdflatex; load the library with a test formula file."""

from __future__ import annotations

import json
import shutil
import textwrap

import pytest

from symcalc.cli import main
from symcalc.library.loading import Library, load_library


class CliRun:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


def pytest_configure(config):
    """The tests' own on-disk cache, set before collection (which may load the library): the
    suite neither reads nor fills the user's, and starts cold every run."""
    import os
    import tempfile
    if hasattr(config, "workerinput"):      # a pytest-xdist worker: share the controller's cache
        return
    config._symcalc_cache = tempfile.mkdtemp(prefix="symcalc-test-cache-")
    os.environ["SYMCALC_CACHE_DIR"] = os.path.join(config._symcalc_cache, "cache")
    # the cache's secret key lives outside the cache folder: the suite's own too, not the user's
    os.environ["SYMCALC_KEY_DIR"] = os.path.join(config._symcalc_cache, "key")
    # what the diagnosis finds must not depend on how busy the machine is (1 s by default;
    # benchmarks/ measures the real time of the slowest diagnoses)
    os.environ.setdefault("SYMCALC_DIAGNOSIS_LIMIT", "20")
    # nor whether a question ends within the command line's 30 s (a cold derivation on a loaded
    # machine): the suite's questions get 600 s; the tests of the limit itself give their own
    os.environ.setdefault("SYMCALC_TIME_LIMIT", "600")


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    """Output to a pipe is not wrapped (symcalc.render.wrap), but pytest-xdist's workers run with
    a COLUMNS the shell never exported: each test starts without it; those that wrap set it."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True, scope="session")
def _exports_bound():
    """symcalc's public names are bound on first use (PEP 562); bind them all before any test
    patches the module one comes from (test_evaluate patches symcalc.query.solve.solve), so that
    a patch never becomes what ``symcalc.solve`` is for the rest of the session."""
    import symcalc
    for name in symcalc.__all__:
        getattr(symcalc, name)


def pytest_unconfigure(config):
    path = getattr(config, "_symcalc_cache", None)
    if path:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(autouse=True)
def _no_time_limit_left_behind():
    """Every time limit a test's questions set has ended when the test does: a limit left in
    force would keep the timer (and whoever's handler it borrowed) armed into the next test."""
    yield
    from symcalc import budget
    left = list(budget._state.limits)
    if left:
        budget._state.limits.clear()
        if budget.interruptible():
            budget._uninstall()
        pytest.fail(f"time limits left in force after the test: {left}")


@pytest.fixture
def cli(capsys):
    """Run ``symcalc ARGS...`` in this process; returns exit code, stdout, stderr."""
    def run(*args: str) -> CliRun:
        code = main(list(args))
        cap = capsys.readouterr()
        return CliRun(code, cap.out, cap.err)
    return run


@pytest.fixture
def pdflatex():
    """Path of pdflatex. .ci/run installs it; a missing pdflatex fails the test there."""
    import os
    exe = shutil.which("pdflatex")
    if exe is None:
        if os.environ.get("SYMCALC_REQUIRE_PDFLATEX"):
            pytest.fail("pdflatex is required (apt-get install texlive-latex-base)")
        pytest.skip("pdflatex not installed (apt-get install texlive-latex-base); CI requires it")
    return exe


def pytest_terminal_summary(terminalreporter):
    """Count the seed worked examples run, by kind and outcome."""
    from collections import Counter
    import sys
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    from pathlib import Path
    data = Path(__file__).parent / "data" / "seed_examples.toml"
    kinds = {e["id"]: e["kind"] for e in tomllib.loads(data.read_text())["example"]}
    counts = Counter()
    for outcome in ("passed", "failed", "skipped"):
        for rep in terminalreporter.stats.get(outcome, []):
            nodeid = getattr(rep, "nodeid", "")
            if "test_seed_example[" in nodeid and rep.when == "call":
                ex = nodeid.split("[", 1)[1].rstrip("]")
                counts[(kinds.get(ex, "?"), outcome)] += 1
            elif "test_comparison_example[" in nodeid and rep.when == "call":
                ex = nodeid.split("[", 1)[1].rstrip("]")
                counts[(kinds.get(ex, "?"), outcome)] += 1
    if counts:
        by_kind = {}
        for (kind, outcome), n in counts.items():
            by_kind.setdefault(kind, Counter())[outcome] += n
        parts = [f"{k}: " + ", ".join(f"{n} {o}" for o, n in sorted(c.items())) for k, c in sorted(by_kind.items())]
        terminalreporter.write_line("seed worked examples -- " + "; ".join(parts))


@pytest.fixture(scope="module")
def library_with(tmp_path_factory):
    """``library_with(text)``: the built-in library plus one formula file holding ``text``."""
    def load(text: str) -> Library:
        path = tmp_path_factory.mktemp("formulas") / "extra.toml"
        path.write_text(textwrap.dedent(text))
        return load_library(extra=[path])
    return load


@pytest.fixture
def unit_registry_built():
    """The process's unit registry built before a test points the cache elsewhere: it is built
    once a process (its parsed definitions read from or written to the cache, kind pint), so
    a test that counts what the cache did would otherwise count it when it runs first."""
    from symcalc import units
    units.registry()


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    """A fresh cache directory of this test's own, with the cache on."""
    from symcalc import cache
    path = tmp_path / "cache"
    monkeypatch.setenv(cache.ENV_DIR, str(path))
    monkeypatch.setenv(cache.ENV_KEY_DIR, str(tmp_path / "key"))
    monkeypatch.delenv(cache.ENV_OFF, raising=False)
    return path
