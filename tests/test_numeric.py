"""Where sympy has no closed form, the engine finds roots numerically and says so."""


import numpy as np
import pytest

import symcalc
from symcalc.errors import NoSolutionError

OVERLAP = """
[quantities.busy_time]
unit = "s"
display_unit = "ms"
latex = "T_{c}"
description = "compute time of a step"

[quantities.transfer_time]
unit = "s"
display_unit = "ms"
latex = "T_{m}"
description = "communication time of a step, fully overlapped"

[quantities.growth]
unit = ""
latex = "g"
description = "a pure number"

[quantities.growth_out]
unit = ""
latex = "y"
description = "x e^x"

[[formulas]]
id = "overlapped_step"
title = "Step time with communication fully overlapped"
equation = "step_time = Max(busy_time, transfer_time)"
source = "test"

[[formulas]]
id = "lambert"
title = "A transcendental relation"
equation = "growth_out = growth * exp(growth)"
source = "test"
"""


@pytest.fixture(scope="module")
def lib(library_with):
    return library_with(OVERLAP)


def test_max_is_inverted_numerically_and_the_step_says_so(lib):
    r = symcalc.solve("busy_time", step_time="250 ms", transfer_time="100 ms", library=lib)
    # Max(T_c, 100 ms) = 250 ms  =>  T_c = 250 ms
    assert r.value == pytest.approx(250, rel=1e-9)
    assert r.steps[0].method == "numeric"
    assert any("numerically" in w for w in r.warnings)
    assert "found numerically" in r.text() and "numerically" in r.latex()


def test_max_over_a_sweep(lib):
    r = symcalc.solve("busy_time", step_time=symcalc.Q(np.array([150.0, 250.0, 400.0]), "ms"),
                      transfer_time="100 ms", library=lib)
    assert np.allclose(r.value, [150, 250, 400], rtol=1e-9)


def test_no_admissible_root_is_a_clear_error(lib):
    # the step cannot be shorter than its fully overlapped communication
    with pytest.raises(NoSolutionError) as e:
        symcalc.solve("busy_time", step_time="50 ms", transfer_time="100 ms", library=lib)
    assert "busy_time" in e.value.message and "overlapped_step" in e.value.message


def test_transcendental_inverse_uses_lambert_w(lib):
    r = symcalc.solve("growth", growth_out=1.0, library=lib)
    # x e^x = 1 at x = W(1) = 0.5671432904 (the omega constant)
    assert r.value == pytest.approx(0.5671432904097838, rel=1e-12)
    assert r.steps[0].method == "rearranged" and "LambertW" in str(r.closed_form)


def test_a_target_without_closed_form_says_so(lib):
    r = symcalc.solve("busy_time", step_time="250 ms", transfer_time="100 ms", library=lib)
    assert not r.has_closed_form
    assert "Closed form: none" in r.text()
    d = r.as_dict()
    assert d["expression"] is None and d["found_numerically"] == ["busy_time"]


def test_a_flat_residual_has_no_single_answer(lib):
    # step = max(busy, transfer) = 250 ms with busy = 250 ms: any transfer up to 250 ms fits
    with pytest.raises(NoSolutionError):
        symcalc.solve("transfer_time", step_time="250 ms", busy_time="250 ms", library=lib)
