"""Algorithms: registered procedures (not equations) wired into the graph from a formula file."""

import json
import subprocess

import numpy as np
import pytest

import symcalc
from symcalc.library.algorithms import dynamic_loss_scale, layer_distribution, roofline_bound
from symcalc.errors import LibraryError, MalformedValueError
from symcalc.library.loading import load_library

FILE = """
[quantities.stage_layout]
unit = "text"
latex = "\\\\mathrm{layout}"
description = "how many stages hold how many layers"

[quantities.pattern]
unit = "text"
latex = "\\\\mathrm{pattern}"
description = "runs like '1000 ok, 1 overflow'"

[quantities.scale_start]
unit = ""
latex = "S_0"
description = "initial loss scale"

[quantities.window]
unit = ""
latex = "W"
description = "growth interval"

[quantities.scale_end]
unit = ""
latex = "S"
description = "loss scale after the pattern"

[[algorithms]]
id = "spread_layers"
title = "Layers over stages"
function = "layer_distribution"
inputs = ["n_layers", "pp"]
output = "stage_layout"
source = "seed 001"

[[algorithms]]
id = "loss_scaling"
title = "Dynamic loss scaling"
function = "dynamic_loss_scale"
inputs = ["scale_start", "window", "pattern"]
output = "scale_end"
source = "seed 001"
"""


@pytest.fixture(scope="module")
def lib(library_with):
    return library_with(FILE)


def test_layer_distribution_of_405b():
    # 126 = 16 x 7 + 14: fourteen stages get 8 layers, two get 7 (seed 001)
    assert layer_distribution(126, 16) == "14 stages x 8 layers + 2 stages x 7 layers"
    assert layer_distribution(80, 4) == "4 stages x 20 layers"


def test_dynamic_loss_scaling_follows_gradscaler():
    # 65536: 1000 good steps (< W = 2000, no growth), overflow -> 32768, 500 good, overflow -> 16384
    assert dynamic_loss_scale(65536, 2000, "1000 ok, 1 overflow, 500 ok, 1 overflow") == 16384
    # 4500 good steps with W = 2000: doubled twice, 500 steps into the next window
    assert dynamic_loss_scale(1024, 2000, "4500 ok") == 4096
    with pytest.raises(MalformedValueError):
        dynamic_loss_scale(1024, 2000, "lots of steps")


def test_roofline_bound_is_the_smallest_rate():
    assert roofline_bound(1786.0, 5000.0, 6531.0) == "compute"
    assert roofline_bound(1786.0, 900.0, 6531.0) == "memory"


def test_an_algorithm_answers_through_solve(lib):
    r = symcalc.solve("stage_layout", n_layers=126, pp=16, library=lib)
    assert r.value == "14 stages x 8 layers + 2 stages x 7 layers"
    assert r.steps[0].method == "algorithm"
    assert "layer_distribution(126, 16)" in r.text()
    assert json.loads(r.json())["value"] == r.value


def test_text_inputs_and_sweeps(lib):
    r = symcalc.solve("scale_end", scale_start=65536, window=2000,
                      pattern="1000 ok, 1 overflow, 500 ok, 1 overflow", library=lib)
    assert r.value == 16384
    sweep = symcalc.solve("scale_end", scale_start=np.array([1024.0, 65536.0]), window=2000,
                          pattern="1 overflow", library=lib)
    assert list(sweep.value) == [512, 32768]


def test_algorithm_result_latex_compiles(lib, tmp_path, pdflatex):
    r = symcalc.solve("stage_layout", n_layers=126, pp=16, library=lib)
    (tmp_path / "a.tex").write_text(r.latex(standalone=True))
    run = subprocess.run([pdflatex, "-interaction=nonstopmode", "-halt-on-error", "a.tex"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-1500:]


@pytest.mark.parametrize("extra,needle", [
    ('[[algorithms]]\nid="x"\ntitle="t"\nsource="s"\nfunction="os_system"\ninputs=["n_layers"]\noutput="pp"\n',
     "unknown function"),
    ('[quantities.words]\nunit="text"\nlatex="w"\ndescription="d"\n[[formulas]]\nid="y"\ntitle="t"\nsource="s"\n'
     'equation="n_layers = words * 2"\n', "only an algorithm"),
])
def test_bad_algorithm_files(tmp_path, extra, needle):
    path = tmp_path / "bad.toml"
    path.write_text(extra)
    with pytest.raises(LibraryError) as e:
        load_library(extra=[path])
    assert needle in e.value.message
