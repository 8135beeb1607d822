"""The README and the docs site say what symcalc does: every command they show runs, and prints
the numbers shown; the site builds with warnings as errors; its reference pages are generated
from the code, not copied.

A ```console block is a transcript: ``$ symcalc ...`` lines are commands, the lines under each
are what it printed (``...`` or a line in ``[...]`` leaves lines out; ``  # ...`` after two
spaces is a comment). Each command runs in-process; the numbers of each shown line must appear,
in order and next to each other, among the numbers of what it prints now (so a wrapped line or
a reworded sentence still passes, a changed figure does not). Other helpers change formulas and
rankings: when a figure moves, this test names the command, the line and what is printed now.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
HF = Path(__file__).parent / "data" / "hf"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

# a number as printed: sign, digits with thousands commas, decimals, exponent
NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?")
# what depends on the machine, not the model: how long the search took
TIMING = re.compile(r"(?:combinations solved|planned in),? [\d.]+ s")
ELIDED = ("...", "[...", "[..")


def _numbers(text: str) -> list[str]:
    return [n.replace(",", "") for n in NUMBER.findall(TIMING.sub("", text))]


def _shown(line: str) -> str:
    """A shown output line without its trailing comment (two spaces or more, then #)."""
    return re.sub(r"\s{2,}#.*$", "", line)


def transcripts() -> list[tuple[str, str, list[str]]]:
    """(page, command line, shown output lines) of every ``$ symcalc`` line in a console block,
    and of every ``symcalc`` line of a sh/bash block (shown nothing)."""
    out = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        for lang, body in re.findall(r"```(\w*)\n(.*?)```", page.read_text(), flags=re.S):
            lines = body.rstrip("\n").split("\n")
            if lang == "console":
                for i, line in enumerate(lines):
                    if line.startswith("$ symcalc "):
                        shown = []
                        for nxt in lines[i + 1:]:
                            if nxt.startswith("$ "):
                                break
                            shown.append(nxt)
                        out.append((name, line[2:], shown))
            elif lang in ("sh", "bash", ""):
                out += [(name, line, []) for line in lines if line.startswith("symcalc ")]
    return out


TRANSCRIPTS = transcripts()


def _files_of(page: str) -> dict[str, str]:
    """The files a page gives to save (a ```toml block whose first line is ``# NAME.toml``)."""
    blocks = re.findall(r"```toml\n# ([\w.-]+\.toml)\n(.*?)```", (ROOT / page).read_text(), flags=re.S)
    return {name: body for name, body in blocks}


def _argv(command: str) -> list[str]:
    argv = shlex.split(command, comments=True)[1:]
    argv = [str(HF / "llama3-8b-config.json") if a == "./config.json" else a for a in argv]
    # a file of the repository the page names: from the root, as the commands run in a scratch folder
    return [str(ROOT / a) if "/" in a and (ROOT / a).is_file() else a for a in argv]


def _expected_status(argv: list[str], shown: str) -> int:
    if shown.startswith("error:"):
        return 2
    if argv[0] in ("check", "plan") and re.search(r"\bFAIL\b|DOES NOT FIT|\b[1-9]\d* disagrees?\b", shown):
        return 1        # check's "something disagrees or does not fit"; a plan whose goal no count meets
    return 0


def test_the_pages_show_commands_of_every_kind():
    # the README's five questions and the guides' transcripts: solve both ways, plan, sweep,
    # compare, check, calibrate, graph, and the error transcript (one line each, exit status 2)
    assert len(TRANSCRIPTS) >= 40
    kinds = {_argv(cmd)[0] for _, cmd, _ in TRANSCRIPTS}
    assert {"solve", "plan", "sweep", "compare", "check", "calibrate", "graph"} <= kinds
    assert sum(1 for _, _, shown in TRANSCRIPTS if shown and shown[0].startswith("error:")) >= 3
    readme = [cmd for page, cmd, _ in TRANSCRIPTS if page == "README.md"]
    assert len(readme) >= 6, readme


@pytest.mark.parametrize("page,command,shown", TRANSCRIPTS,
                         ids=[f"{p}:{' '.join(c.split()[1:3])}" for p, c, _ in TRANSCRIPTS])
def test_a_shown_command_prints_what_the_page_shows(cli, page, command, shown, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)      # files the commands write (plots, CSV, profiles) land here
    for name, body in _files_of(page).items():
        (tmp_path / name).write_text(body)      # a file the page tells the reader to save
    argv = _argv(command)
    lines = [_shown(s) for s in shown if s.strip() and not s.strip().startswith(ELIDED)]
    run = cli(*argv)
    status = _expected_status(argv, "\n".join(lines))
    assert run.code == status, f"{page}: `{command}` exited {run.code}, not {status}: {run.err.strip()[:500]}"
    printed = run.err if status == 2 else run.out
    if status == 2:
        assert printed.strip() == lines[0], f"{page}: `{command}` says now: {printed.strip()}"
        return
    if lines and lines[0].strip() == "{":
        json.loads(printed)          # a --json answer: one JSON object
        return
    if lines:
        first_word = lines[0].split()[0]
        assert first_word in printed.splitlines()[0], f"{page}: `{command}` now opens: {printed.splitlines()[0]}"
    stream = _numbers(printed)
    at = 0
    for line in lines:
        want = _numbers(line)
        if not want:
            continue
        found = next((i for i in range(at, len(stream) - len(want) + 1) if stream[i:i + len(want)] == want), None)
        assert found is not None, (f"{page}: `{command}`: the numbers {want} of the shown line\n  {line.strip()}\n"
                                   f"are not printed (in order) now:\n{printed}")
        at = found + len(want)
    if "--plot" in argv:             # the gallery's pictures: a PNG the command drew, not a blank one
        picture = tmp_path / argv[argv.index("--plot") + 1]
        assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and picture.stat().st_size > 5_000, picture


def test_the_readme_opens_with_the_two_commands_and_stays_short():
    # the two commands a fresh machine runs, exactly as .ci/run and the issue require them
    text = (ROOT / "README.md").read_text()
    first = re.search(r"```sh\n(.*?)```", text, flags=re.S).group(1).splitlines()
    assert first == ['python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/symcalc example',
                     'python3 -m venv .venv && .venv/bin/pip install ".[test]" && .venv/bin/pytest']
    assert text.index("```sh") < text.index("\n## ")           # before anything else
    assert len(text.splitlines()) <= 250                        # issue 40: about 200 lines


def test_every_relative_link_of_the_readme_names_a_file_of_the_repository():
    # the README reads on its own (a checkout, a package page); mkdocs checks the site's links
    text = (ROOT / "README.md").read_text()
    links = [t for t in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text) if "://" not in t]
    assert len(links) >= 15
    missing = [t for t in links if not (ROOT / t).exists()]
    assert not missing, missing


def test_no_page_names_files_the_repository_does_not_have():
    # issue 40: the old README referred to shared/ and DESIGN.md, which are not in the repository
    for page in PAGES:
        text = page.read_text()
        assert "DESIGN.md" not in text and "shared/" not in text, page


def test_every_link_of_the_pages_is_internal_so_the_strict_build_checks_it():
    # issue 40: the notebook's badge once pointed at a GitHub organisation the project does not
    # control. The pages link only to each other (mkdocs --strict checks those, anchors too)
    # and to files of the repository (the README's, checked above); nothing to another host.
    for page in PAGES:
        external = re.findall(r"\]\((?:https?:)?//[^)]+\)|<https?://[^>]+>|href=\"https?://", page.read_text())
        assert not external, (page, external)


def test_the_accuracy_tables_are_printed_by_scripts_that_exist():
    # the accuracy pages' tables are what these scripts print when the site is built (docs/hooks.py)
    runs = [(page, line) for page in PAGES for line in page.read_text().splitlines() if line.startswith("<!-- run")]
    assert len(runs) >= 7
    for page, line in runs:
        argv = shlex.split(line.split(":", 1)[1].removesuffix("-->"))
        script = ROOT / argv[0]
        assert script.is_file(), (page, line)
        for flag in argv[1:]:
            assert f'"{flag}"' in script.read_text(), (page, flag)


def _build(site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of the site, its accuracy scripts left out (SYMCALC_DOCS_QUICK:
    they take a minute; .ci/run builds the whole site)."""
    env = {**os.environ, "SYMCALC_DOCS_QUICK": "1", "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_the_site_builds_strict_and_its_reference_is_generated_from_the_code(tmp_path):
    # one build (a few seconds) checked for all it must hold, rather than one build a test
    if os.environ.get("SYMCALC_REQUIRE_DOCS") != "1":
        pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install '.[docs]')")
        pytest.importorskip("material", reason="the docs extra is not installed (pip install '.[docs]')")
    site = tmp_path / "site"
    done = _build(site)
    assert done.returncode == 0, done.stderr[-3000:]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    assert not warnings, warnings
    _every_page_of_the_nav(site)
    _the_cli_reference_is_clicks_own(site)
    _the_library_reference_is_whole(site)
    _the_api_references_name_every_export_and_route(site)


def _every_page_of_the_nav(site: Path) -> None:
    import yaml
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["strict"] is True

    def pages(entry):
        if isinstance(entry, str):
            yield entry
        else:
            for v in (entry.values() if isinstance(entry, dict) else entry):
                yield from pages(v)
    listed = list(pages(config["nav"]))
    assert len(listed) >= 26
    for md in listed:
        html = site / ("index.html" if md == "index.md" else md.removesuffix(".md") + "/index.html")
        assert html.is_file(), md


def _the_cli_reference_is_clicks_own(site: Path) -> None:
    """Every command of the group's table has its section, with every long option click knows."""
    import click

    from symcalc.commands import COMMANDS, cli
    html = (site / "reference/cli/index.html").read_text()
    ctx = click.Context(cli, info_name="symcalc")
    for name in COMMANDS:
        assert f'id="symcalc-{name}"' in html, name
        for param in cli.get_command(ctx, name).params:
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert opt in html, (name, opt)


def _the_library_reference_is_whole(site: Path) -> None:
    """Every quantity (one row each), formula and option of the loaded library has its anchor."""
    import symcalc
    lib = symcalc.default_library()
    quantities = (site / "reference/quantities/index.html").read_text()
    formulas = (site / "reference/formulas/index.html").read_text()
    options = (site / "reference/options/index.html").read_text() + (site / "reference/stacks/index.html").read_text()
    assert quantities.count('<span id="') == len(lib.quantities)
    assert all(f'id="{q}"' in quantities for q in lib.quantities)
    assert all(f'id="{f}"' in formulas for f in lib.formulas)
    assert all(f'id="{o}"' in options for o in lib.options)
    # a formula's source is printed with it (young_interval: Young 1974)
    assert "Young 1974" in formulas


def _the_api_references_name_every_export_and_route(site: Path) -> None:
    import symcalc
    python = (site / "reference/python/index.html").read_text()
    assert all(f"symcalc.{name}" in python for name in symcalc.__all__)
    http = (site / "reference/http/index.html").read_text()
    for route in ("/api/solve", "/api/sweep", "/api/compare", "/api/check", "/api/plan", "/api/presets"):
        assert route in http
    assert "global_batch_size" in http and "allow_conflicts" in http   # fields of plan and solve requests


def _python_blocks() -> list[tuple[str, str]]:
    return [(page.relative_to(ROOT).as_posix(), body) for page in PAGES
            for body in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)]


@pytest.mark.parametrize("page,code", _python_blocks(), ids=[p for p, _ in _python_blocks()])
def test_a_python_block_runs_and_its_stated_values_hold(page, code, tmp_path, monkeypatch):
    # each block runs as shown; a line `EXPR  # LITERAL` whose comment is a Python literal
    # (README: `r.value, r.unit  # (2064.0, '')`) states EXPR's value, and it is checked
    import ast
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, page, "exec"), scope)
    checked = 0
    for line in code.splitlines():
        expr, sep, comment = line.partition("  # ")
        if not sep or not expr.strip() or "=" in expr.replace("==", ""):
            continue
        try:
            stated = ast.literal_eval(comment.strip())
        except (ValueError, SyntaxError):
            continue
        assert eval(expr.strip(), scope) == stated, (page, line)   # the page's own code, not user input
        checked += 1
    if page == "README.md":
        assert checked >= 1
