"""Fixtures: run the CLI in-process; find pdflatex."""

from __future__ import annotations

import json
import shutil

import pytest

from symcalc.cli import main


class CliRun:
    def __init__(self, code: int, out: str, err: str):
        self.code, self.out, self.err = code, out, err

    def json(self):
        return json.loads(self.out)


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
