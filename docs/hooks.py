"""MkDocs hooks: the generated reference pages, and the accuracy tables printed by the scripts
that compute them, added to every build (never committed: formulas and commands change, and a
committed copy would drift).

- ``on_files``: the pages of ``docs/gen_reference.py`` (CLI, library, Python and HTTP API).
- ``on_page_markdown``: a line ``<!-- run: SCRIPT ARGS -->`` in a page becomes what
  ``python SCRIPT ARGS`` prints (a text block), ``<!-- run-md: SCRIPT ARGS -->`` the Markdown it
  prints. ``SYMCALC_DOCS_QUICK=1`` (the test suite's build) writes the command instead of
  running it: the scripts take a minute together, and tests/test_docs.py checks they exist.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from mkdocs.structure.files import File

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(DOCS))

import gen_reference  # noqa: E402  (docs/gen_reference.py)

RUN = "<!-- run"


def on_files(files, config):
    for path, text in gen_reference.pages().items():
        files.append(File.generated(config, path, content=text))
    return files


def _run(line: str) -> str:
    kind, _, rest = line.strip()[len("<!-- "):-len("-->")].strip().partition(":")
    argv = shlex.split(rest)
    if os.environ.get("SYMCALC_DOCS_QUICK"):
        return f"*(quick build: here the site shows what `python {' '.join(argv)}` prints)*"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"python {' '.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    shown = f"*Printed by `python {' '.join(argv)}` when the site was built:*\n\n"
    return shown + (done.stdout if kind == "run-md" else "```text\n" + done.stdout.rstrip() + "\n```")


def on_page_markdown(markdown, page, config, files):
    if RUN not in markdown:
        return markdown
    return "\n".join(_run(line) if line.strip().startswith(RUN) else line for line in markdown.split("\n"))
