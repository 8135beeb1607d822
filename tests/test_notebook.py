"""The tutorial notebook (docs/tutorial.ipynb) runs headless from top to bottom, and says what
it prints: each number its text states is checked in the cell outputs (issue 25, item 1)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK = ROOT / "docs" / "tutorial.ipynb"

# what the notebook's text states, each found in the outputs of the cell below it
STATED = [
    "140.4 GB", "exceeds gpu_memory = 85.52 GB", "activation_memory = 88.11 GB",   # 1. does not fit
    "total_memory_per_gpu = 44.74 GB",                                       # with full recompute
    "step_time = 8.744 s, mfu = 36.5 %",                                      # 2.
    "n_gpus = 773",                                                           # 3.
    "'90.5'", "'5.7'",                                                        # 4. the sweep's ends
    "tp1 pp1 cp1 dp512 mbs1 zero3 no-recompute | validated: 37 published fsdp",  # 5.
    "Calibration of h100_fsdp_llm_foundry: 7 measured steps",                 # 6.
]


def _outputs(nb) -> str:
    out = []
    for cell in nb.cells:
        for o in cell.get("outputs", []):
            if o.output_type == "stream":
                out.append(o.text)
            elif o.output_type in ("execute_result", "display_data"):
                out.append(str(o.data.get("text/plain", "")))
                out.append(str(o.data.get("text/html", "")))
    return "\n".join(out)


def test_the_tutorial_notebook_runs_and_prints_what_it_says(tmp_path):
    (tmp_path / "calibration" / "examples").mkdir(parents=True)
    shutil.copy(ROOT / "calibration" / "examples" / "h100_fsdp_runs.toml", tmp_path / "calibration" / "examples")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                            resources={"metadata": {"path": str(tmp_path)}}).execute()
    text = _outputs(nb)
    missing = [s for s in STATED if s not in text]
    assert not missing, f"the notebook states what its outputs do not show: {missing}"
    # .plot() with no path draws inline and writes nothing; the profile is written, as output= asks
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calibration", "h100_fsdp.toml"]
    shown = [set(o.get("data", {})) for c in nb.cells for o in c.get("outputs", []) if o.output_type == "execute_result"]
    assert {"text/html", "text/latex"} <= shown[0]            # the Result: HTML and LaTeX
    assert any("image/png" in kinds for kinds in shown)       # .plot()'s Figure, inline
    assert sum("text/html" in kinds for kinds in shown) >= 3  # the Result, the Sweep, the plan
    assert (tmp_path / "h100_fsdp.toml").exists()


def test_nothing_points_at_a_repository_the_project_does_not_control():
    # issue 34: the badge, the notebook's install cell and its download pointed at a GitHub
    # organisation named "symcalc" that hosts another author's project. The project publishes
    # no repository it controls, so pyproject.toml declares none, and the README and the
    # notebook neither link to one nor install or download from one.
    import re
    try:
        import tomllib
    except ImportError:     # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "urls" not in project
    readme = (ROOT / "README.md").read_text()
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for text in (readme, _sources(nb)):
        assert not re.search(r"github\.com/symcalc|githubusercontent|colab\.research", text)
    assert not re.search(r"pip\W+install|urlretrieve|urlopen", _sources(nb))


def test_the_committed_notebook_is_what_make_tutorial_writes_and_importing_it_writes_nothing():
    # docs/make_tutorial.py is the notebook's source; importing it (as this test does) must not
    # rewrite docs/tutorial.ipynb, and the committed notebook must be the one it builds
    import importlib.util
    before = NOTEBOOK.stat().st_mtime_ns
    spec = importlib.util.spec_from_file_location("make_tutorial", ROOT / "docs" / "make_tutorial.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert NOTEBOOK.stat().st_mtime_ns == before
    built = module.notebook()
    committed = nbformat.read(NOTEBOOK, as_version=4)
    assert [(c.cell_type, c.source) for c in built.cells] == [(c.cell_type, c.source) for c in committed.cells]


def _sources(nb) -> str:
    return "\n".join(c.source for c in nb.cells if c.cell_type == "code")


def test_the_distribution_has_a_name_of_its_own_used_wherever_it_is_installed():
    # issue 40: `pip install symcalc` installs another author's package (a 2023 calculator,
    # 0.1.0), so the distribution is named symcalc-gpu; the import package and command stay symcalc
    from helpers import tomllib
    from symcalc.commands import DISTRIBUTION
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["name"] == DISTRIBUTION == "symcalc-gpu"
    assert project["scripts"] == {"symcalc": "symcalc.cli:main"}
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for text in ((ROOT / "README.md").read_text(), (ROOT / "docs" / "index.md").read_text(),
                 (ROOT / "docs" / "guides" / "notebook.md").read_text(), _sources(nb)):
        assert "symcalc-gpu" in text
