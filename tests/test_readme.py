"""What the README and the docs say of the code itself: the module map of "How it works" names every
module, and the hardware profile a user copies from the calibration guide loads. (Every command
the README and the guides show runs in tests/test_docs.py.)"""

from __future__ import annotations

import re
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
INTERNALS = ROOT / "docs" / "internals.md"
CALIBRATE = ROOT / "docs" / "guides" / "calibrate.md"


def _module_map() -> set[str]:
    """The modules docs/internals.md ("How it works") names, as paths under symcalc/. Each bullet's first path sets
    the folder its bare ``name.py`` entries are in (``symcalc/engine/``: ``routing.py``, ...);
    naming a package folder names its ``__init__.py``."""
    text = INTERNALS.read_text().split("# How it works", 1)[1].split("\n## ", 1)[0]
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
    package = ROOT / "symcalc"
    modules = {p.relative_to(ROOT).as_posix() for p in package.rglob("*.py")
               if "__pycache__" not in p.parts}
    named = _module_map()
    assert not modules - named, f"modules the module map of docs/internals.md leaves out: {sorted(modules - named)}"
    assert not named - modules, f"modules the module map of docs/internals.md names but the code has not: {sorted(named - modules)}"


def test_the_guides_hardware_profile_loads_and_its_assumed_value_is_said(cli, tmp_path, monkeypatch):
    # the calibration guide's profile example is a file a user copies: it must load with --hardware and
    # its values reach the answer (it once set values.gemm_efficiency, a name no quantity has,
    # and --hardware refused it). Its bf16_gemm_efficiency is 'assumed', which the answer says.
    import json
    block = re.search(r"```toml\n(\[h100_in_our_racks\].*?)```", CALIBRATE.read_text(), flags=re.S)
    assert block, "the calibration guide's hardware profile example is gone"
    (tmp_path / "ours.toml").write_text(block.group(1))
    monkeypatch.chdir(tmp_path)
    out = cli("solve", "step_time", "--model", "llama3-8b", "--hardware", "./ours.toml", "tp=1", "pp=1", "dp=8",
              "n_gpus=8", "micro_batch_size=1", "global_batch_size=8", "seq_len=4096 token", "--json")
    assert out.code == 0, out.err
    answer = json.loads(out.out)
    assert ("bf16_gemm_efficiency = 0.80 from hardware h100_in_our_racks is assumed, not measured: "
            "the H100 SXM's, not measured here") in answer["warnings"]
