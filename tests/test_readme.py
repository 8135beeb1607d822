"""The README's command lines do what the README says they do."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
HF = Path(__file__).parent / "data" / "hf"


def _blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```|```\n(\$ .*?)```", README.read_text(), flags=re.S)


def _commands() -> list[tuple[list[str], str | None]]:
    """(argv after 'symcalc', the first line the README shows it printing, if any)."""
    out = []
    for sh, transcript in _blocks():
        lines = (sh or transcript).splitlines()
        for i, line in enumerate(lines):
            line = line.removeprefix("$ ")
            if not line.startswith("symcalc "):
                continue
            argv = shlex.split(line, comments=True)[1:]
            argv = [str(HF / "llama3-8b-config.json") if a == "./config.json" else a for a in argv]
            # a file of the repository the README names (an example runs file): from the root,
            # since the commands run in a scratch directory
            argv = [str(README.parent / a) if "/" in a and (README.parent / a).is_file() else a for a in argv]
            shown = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith(("$", "symcalc")) else None
            out.append((argv, shown))
    return out


COMMANDS = _commands()


def test_the_readme_shows_commands():
    # solve examples in both directions, presets, and the error transcript
    assert len(COMMANDS) >= 12
    assert sum(1 for _, shown in COMMANDS if shown and shown.startswith("error:")) >= 3


@pytest.mark.parametrize("argv,shown", COMMANDS, ids=[" ".join(a[:2]) for a, _ in COMMANDS])
def test_readme_command(cli, argv, shown, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)      # files the commands write (plots, CSV) land here
    run = cli(*argv)
    if shown and shown.startswith("error:"):
        assert run.code == 2 and run.err.strip() == shown
    elif argv[0] == "check" and shown and ", 0 disagree" not in shown:
        assert run.code == 1 and run.out.splitlines()[0] == shown     # check's "something disagrees"
    else:
        assert run.code == 0, run.err
        if shown and not shown.startswith("..."):
            assert run.out.splitlines()[0] == shown


def _module_map() -> set[str]:
    """The modules "How it works" names, as paths under symcalc/. Each bullet's first path sets
    the folder its bare ``name.py`` entries are in (``symcalc/engine/``: ``routing.py``, ...);
    naming a package folder names its ``__init__.py``."""
    text = README.read_text().split("## How it works", 1)[1].split("\n## ", 1)[0]
    named = set()
    for bullet in re.findall(r"^- (.*?)(?=^- |^\S|\Z)", text, flags=re.M | re.S):
        folder = None
        for path in re.findall(r"`([\w/.]+)`", bullet):
            if path.startswith("symcalc/"):
                if folder is None:
                    folder = path if path.endswith("/") else path.rpartition("/")[0] + "/"
                named.add(path + "__init__.py" if path.endswith("/") else path)
            elif path.endswith(".py") and folder is not None:
                named.add(folder + path)
    return named


def test_the_module_map_names_every_module_and_only_those():
    package = README.parent / "symcalc"
    modules = {p.relative_to(README.parent).as_posix() for p in package.rglob("*.py")
               if "__pycache__" not in p.parts}
    named = _module_map()
    assert not modules - named, f"modules the README's module map leaves out: {sorted(modules - named)}"
    assert not named - modules, f"modules the README's module map names but the code has not: {sorted(named - modules)}"


def test_the_readmes_hardware_profile_loads_and_its_assumed_value_is_said(cli, tmp_path, monkeypatch):
    # the README's profile example is a file a user copies: it must load with --hardware and
    # its values reach the answer (it once set values.gemm_efficiency, a name no quantity has,
    # and --hardware refused it). Its bf16_gemm_efficiency is 'assumed', which the answer says.
    import json
    block = re.search(r"```toml\n(\[h100_in_our_racks\].*?)```", README.read_text(), flags=re.S)
    assert block, "the README's hardware profile example is gone"
    (tmp_path / "ours.toml").write_text(block.group(1))
    monkeypatch.chdir(tmp_path)
    out = cli("solve", "step_time", "--model", "llama3-8b", "--hardware", "./ours.toml", "tp=1", "pp=1", "dp=8",
              "n_gpus=8", "micro_batch_size=1", "global_batch_size=8", "seq_len=4096 token", "--json")
    assert out.code == 0, out.err
    answer = json.loads(out.out)
    assert ("bf16_gemm_efficiency = 0.80 from hardware h100_in_our_racks is assumed, not measured: "
            "the H100 SXM's, not measured here") in answer["warnings"]
