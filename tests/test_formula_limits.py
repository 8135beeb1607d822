"""Formula files the solver cannot handle are refused at load, with the formula id and the
reason (symcalc.library.exprsize): an equation may be short and still expand beyond any solver."""

from __future__ import annotations

import time

import pytest

import symcalc
from symcalc.errors import LibraryError
from symcalc.library.loading import load_library


def user_file(tmp_path, equation: str, names: list[str]) -> str:
    quantities = "".join(f'[quantities.{n}]\nunit = ""\nlatex = "x"\ndescription = "{n}"\n\n' for n in names)
    path = tmp_path / "user.toml"
    path.write_text(quantities + f'[[formulas]]\nid = "hostile"\ntitle = "t"\nequation = "{equation}"\nsource = "s"\n')
    return str(path)


def refusal(tmp_path, equation: str, names: list[str]) -> str:
    start = time.monotonic()
    with pytest.raises(LibraryError) as e:
        load_library(extra=[user_file(tmp_path, equation, names)], use_cache=False)
    assert time.monotonic() - start < 10
    assert e.value.message.startswith("user.toml: formula 'hostile': too large to solve: ")
    return e.value.message.split("too large to solve: ", 1)[1]


def test_nested_powers_multiply_their_degrees(tmp_path):
    assert refusal(tmp_path, "yq = ((bq^64)^64)^64", ["yq", "bq"]) == (
        "its effective degree in bq is 262144 (powers of powers multiply); at most 64 can be solved")


def test_a_power_of_a_sum_counts_its_degree_too(tmp_path):
    assert refusal(tmp_path, "yq = ((aq + bq)^16)^8", ["yq", "aq", "bq"]).startswith("its effective degree in aq is 128")


def test_a_product_of_sixty_sums_would_expand_to_2_to_the_60_terms(tmp_path):
    names = [f"s{i}" for i in range(30)] + ["yq"]
    product = " * ".join(f"(s{i % 30} + s{(i + 1) % 30} + s{(i + 7) % 30})" for i in range(60))
    assert refusal(tmp_path, f"yq = {product}", names) == (
        "multiplied out it has more than 4096 terms (a product of sums, or a power of one); introduce "
        "intermediate quantities instead")


def test_too_many_quantities_in_one_equation(tmp_path):
    names = [f"s{i}" for i in range(45)] + ["yq"]
    assert refusal(tmp_path, "yq = " + " + ".join(names[:-1]), names) == (
        "it relates 46 quantities and units; at most 40 can be solved together")


@pytest.mark.parametrize("constant, shown", [
    ("99999999999999999999999999999999999999^64", "the constant 99999999999999999999999999999999999"),
    ("(10^64)^64", "the constant 10000000000000000000000000000000000"),
    ("1/(10^64)^64", "the constant 1/1000000000000000000000000000000000"),
    ("exp(10^4)", "the constant exp(10000)"),
])
def test_a_constant_past_the_range_of_floating_point(tmp_path, constant, shown):
    message = refusal(tmp_path, f"yq = {constant} * bq", ["yq", "bq"])
    assert message.startswith(shown) and message.endswith(
        "is beyond the range of floating point (about 1e-300 to 1e300)")


def test_a_high_but_admissible_degree_loads_and_is_solved_in_time(tmp_path):
    # degree 60 in bq: no closed form; numeric roots within the question's limit
    lib = load_library(extra=[user_file(tmp_path, "yq = (bq + cq)^60", ["yq", "bq", "cq"])], use_cache=False)
    start = time.monotonic()
    r = symcalc.solve("bq", yq=2.0 ** 60, cq=1, library=lib)
    assert r.value == pytest.approx(1.0, rel=1e-9)
    assert time.monotonic() - start < 20


def test_a_default_past_the_range_of_floating_point(tmp_path):
    path = tmp_path / "user.toml"
    path.write_text('[quantities.big_memory]\nunit = "byte"\nlatex = "M"\ndescription = "m"\n'
                    'default = "1e300 GB"\ndefault_source = "s"\n')
    with pytest.raises(LibraryError, match="quantity 'big_memory': default: '1e300 GB' is beyond the range of "
                                           "floating point in base units"):
        load_library(extra=[path], use_cache=False)
