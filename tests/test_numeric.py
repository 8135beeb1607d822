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


DEGREE_64_BLOCK = "".join(f'[quantities.zz_{s}]\nunit = ""\nlatex = "{s}"\ndescription = "{s}"\n\n' for s in "abcd") + """
[[formulas]]
id = "zz_one"
title = "one"
equation = "zz_a = zz_b**64 * zz_c**64 * zz_d + zz_b"
source = "a hostile test"

[[formulas]]
id = "zz_two"
title = "two"
equation = "zz_b = zz_c**64 + zz_d**64 + zz_c"
source = "a hostile test"

[[formulas]]
id = "zz_three"
title = "three"
equation = "zz_c = zz_d**64 * zz_b + zz_d"
source = "a hostile test"
"""


def test_a_block_of_degree_64_equations_is_searched_before_no_root_is_said(tmp_path):
    # Three simultaneous degree-64 equations with zz_a = 1e30. They have a root, found
    # independently by scipy's hybr from random starts with each equation scaled by its sides:
    # b = 2.91644368, c = 1.00994156, d = 0.94278011. Substitution composes the degrees (64 x 64),
    # so the engine must give up the algebra quickly and search numerically; scaled by their
    # 1e30-sized residuals the equations in c and d weigh nothing, so the search compares each
    # equation's sides on a log scale. It had answered "no value satisfies".
    path = tmp_path / "zz.toml"
    path.write_text(DEGREE_64_BLOCK)
    lib = symcalc.load_library([path])
    r = symcalc.solve("zz_d", zz_a=1e30, library=lib)
    b, c, d = (r.values[q] for q in ("zz_b", "zz_c", "zz_d"))
    assert (b, c, d) == pytest.approx((2.91644368, 1.00994156, 0.94278011), rel=1e-7)
    # and the equations hold at the answer, each to 1e-9 of its sides
    for lhs, rhs in ((1e30, b**64 * c**64 * d + b), (b, c**64 + d**64 + c), (c, d**64 * b + d)):
        assert lhs == pytest.approx(rhs, rel=1e-9)


def test_a_root_next_to_overflow_is_bracketed():
    # x^64 = 1e306 has its root at 1e306^(1/64) = 60,429.6; the scan's next point up, 10^4.75,
    # gives x^64 = 1e304 and the one after overflows to inf, which still has a sign
    from symcalc.engine.numeric import solve_scalar
    from symcalc.library.records import Interval
    with np.errstate(all="ignore"):
        root = solve_scalar(lambda x, a: x**64 - a, [np.array(1e306)], Interval())
    assert float(root) == pytest.approx(1e306 ** (1 / 64), rel=1e-12)


def test_a_dependent_system_is_not_determined_and_an_independent_one_is():
    from symcalc.engine.numeric import solve_system
    from symcalc.library.records import Interval
    positive = [Interval(0, float("inf"), True, True)] * 2

    # x + y = 2 and 2 x + 2 y = 4 are one equation twice: every (x, 2 - x) holds, and whichever
    # point the search lands on is no answer (as a GPU's peak rate traded against virtual stages)
    def dependent(x, y, a):
        return np.array([x + y - a, 2 * x + 2 * y - 2 * a])
    roots, undetermined = solve_system(dependent, [2.0], positive, 2, with_status=True)
    assert bool(undetermined) and np.all(np.isnan(roots))

    # x y = 2 and x / y = 1/2 have the one positive root x = 1, y = 2 (by hand)
    def independent(x, y, a):
        return np.array([x * y - a, x / y - 0.5])
    roots, undetermined = solve_system(independent, [2.0], positive, 2, with_status=True)
    assert not bool(undetermined) and roots[0] == pytest.approx(1.0, rel=1e-9) and roots[1] == pytest.approx(2.0, rel=1e-9)
