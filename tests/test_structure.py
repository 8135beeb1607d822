"""Dulmage-Mendelsohn and block triangular order on the toy systems of engine-notes 3.2."""

from symcalc.engine.structure import block_triangular_order, dulmage_mendelsohn, maximum_matching


def test_algebraic_loop_then_assignment():
    # x + y = s, x - y = d, z = f(x) with s, d known: a 2x2 block {e1, e2}, then e3
    rows = {"e1": {"x", "y"}, "e2": {"x", "y"}, "e3": {"x", "z"}}
    dm = dulmage_mendelsohn(rows)
    assert dm["square_rows"] == {"e1", "e2", "e3"} and not dm["under_cols"] and not dm["over_rows"]
    blocks = block_triangular_order(rows, dm["match"])
    assert [set(b) for b in blocks] == [{"e1", "e2"}, {"e3"}]


def test_underdetermined_columns_are_the_missing_freedom():
    # time: T = C/(G P m) with C known and T, G, P, m unknown: 1 equation, 4 unknowns
    rows = {"time": {"T", "G", "P", "m"}}
    dm = dulmage_mendelsohn(rows)
    assert dm["under_cols"] == {"T", "G", "P", "m"}
    assert dm["under_rows"] == {"time"}


def test_redundant_equation_is_overdetermined():
    # C = 6ND and C = T G P m both give C when everything else is known: one is a check
    rows = {"compute": {"C"}, "time": {"C"}}
    m = maximum_matching(rows)
    dm = dulmage_mendelsohn(rows, m)
    assert dm["over_cols"] == {"C"} and dm["over_rows"] == {"compute", "time"}
    assert len(dm["match"]) == 1
