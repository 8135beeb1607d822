"""MkDocs hooks: the generated reference pages, and the accuracy tables printed by the scripts
that compute them, added to every build (never committed: formulas and commands change, and a
committed copy would drift).

- ``on_files``: the pages of ``docs/gen_reference.py`` (CLI, library, Python and HTTP API).
- ``on_files`` also draws the gallery: each ``$ symcalc ... --plot NAME`` line of
  ``docs/gallery.md`` runs, and its picture is added to the site as ``NAME``.
- ``on_page_markdown``: a line ``<!-- run: SCRIPT ARGS -->`` in a page becomes what
  ``python SCRIPT ARGS`` prints (a text block), ``<!-- run-md: SCRIPT ARGS -->`` the Markdown it
  prints. ``SYMCALC_DOCS_QUICK=1`` (the test suite's build) writes the command instead of
  running it, and draws no gallery (a blank picture stands in): the scripts take a minute
  together, and tests/test_docs.py runs the gallery's commands.
"""

from __future__ import annotations

import base64
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from mkdocs.structure.files import File

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))

import gen_reference  # noqa: E402  (docs/gen_reference.py)

RUN = "<!-- run"
# a 1 x 1 white PNG: the quick build's stand-in for a gallery picture
BLANK_PNG = base64.b64decode("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4//8/AAX+Av4N70a4AAAAAElFTkSuQmCC")


def _env() -> dict[str, str]:
    """The checkout's symcalc first, as the CLI runs from the worktree root."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def _gallery() -> dict[str, bytes]:
    """Each gallery command's picture, by the file name its --plot gives."""
    pictures = {}
    for line in (DOCS / "gallery.md").read_text().splitlines():
        found = re.match(r"\$ symcalc (.*--plot (\S+).*)$", line)
        if not found:
            continue
        name = found.group(2)
        if os.environ.get("SYMCALC_DOCS_QUICK"):
            pictures[name] = BLANK_PNG
            continue
        with tempfile.TemporaryDirectory() as scratch:
            done = subprocess.run([sys.executable, "-m", "symcalc", *shlex.split(found.group(1))], cwd=scratch,
                                  env=_env(), capture_output=True, text=True, timeout=600)
            if done.returncode != 0 or not (Path(scratch) / name).is_file():
                raise RuntimeError(f"gallery: `{line[2:]}` failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
            pictures[name] = (Path(scratch) / name).read_bytes()
    return pictures


def on_files(files, config):
    for path, text in gen_reference.pages().items():
        files.append(File.generated(config, path, content=text))
    for name, picture in _gallery().items():
        files.append(File.generated(config, name, content=picture))
    return files


def _run(line: str) -> str:
    kind, _, rest = line.strip()[len("<!-- "):-len("-->")].strip().partition(":")
    argv = shlex.split(rest)
    if os.environ.get("SYMCALC_DOCS_QUICK"):
        return f"*(quick build: here the site shows what `python {' '.join(argv)}` prints)*"
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"python {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    shown = f"*Printed by `python {' '.join(argv)}` when the site was built:*\n\n"
    return shown + (done.stdout if kind == "run-md" else "```text\n" + done.stdout.rstrip() + "\n```")


def on_page_markdown(markdown, page, config, files):
    if RUN not in markdown:
        return markdown
    return "\n".join(_run(line) if line.strip().startswith(RUN) else line for line in markdown.split("\n"))
