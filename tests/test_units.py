"""The unit registry catches the classic planning mistakes (DESIGN.md, 'Units')."""

import pint
import pytest

from symcalc import units
from symcalc.errors import AmbiguousUnitError, MalformedValueError
from helpers import base


def test_gigabit_per_second_is_an_eighth_of_a_gigabyte_per_second():
    # 400 Gb/s = 400e9 bit/s / 8 = 50e9 byte/s (a stock pint registry reads Gb as a gilbert)
    assert base("400 Gb/s") == pytest.approx(50e9)
    assert units.parse_quantity("400 Gb/s").to("GB/s").magnitude == pytest.approx(50)
    # the network's own spelling, Gbps, is bits too (a ConnectX-7 port: 400 Gbps, 50 GB/s); GBps is bytes
    assert base("400 Gbps") == pytest.approx(50e9)
    assert base("50 GBps") == pytest.approx(50e9)
    assert base("100 Mbps") == pytest.approx(12.5e6)


@pytest.mark.parametrize("text, hint", [
    ("1 month", "did you mean 30 day (a month is not one length"),
    ("15 trillion", "did you mean e12 (write 15e12)"),
])
def test_a_word_for_a_length_of_time_or_a_count_gets_the_number_to_write(text, hint):
    with pytest.raises(MalformedValueError) as e:
        units.parse_quantity(text, "train_time")
    assert hint in str(e.value)


def test_gb_is_decimal_and_gib_is_binary():
    assert base("1 GB") == 1e9
    assert base("1 GiB") == 2 ** 30
    assert base("80 GB") / base("1 GiB") == pytest.approx(74.5058, rel=1e-5)


def test_bytes_and_flops_are_real_dimensions():
    ureg = units.registry()
    assert units.dimensionality("byte") != units.dimensionality("count")
    assert units.dimensionality("FLOP") != units.dimensionality("byte")
    with pytest.raises(pint.DimensionalityError):
        ureg.Quantity(1, "FLOP") + ureg.Quantity(1, "byte")
    with pytest.raises(pint.DimensionalityError):
        ureg.Quantity(1, "byte") + 1          # a byte is not a pure number


def test_time_units():
    assert base("24h") == 86400
    assert base("30 day") == 30 * 86400
    assert base("98 s") == 98
    assert base("5 us") == pytest.approx(5e-6)


def test_currency_and_dollar_sign():
    # "$2/hour" must not silently lose the dollar
    assert base("$2/hour") == pytest.approx(2 / 3600)
    assert base("2 $/h") == pytest.approx(2 / 3600)
    assert units.dimensionality("USD/hour") == units.registry().get_dimensionality(
        units.parse_quantity("$2/hour").units)


def test_percent_and_pf_day():
    assert base("45%") == pytest.approx(0.45)
    assert base("1 PF_day") == pytest.approx(1e15 * 86400)   # 8.64e19 FLOP


def test_flops_spellings_are_ambiguous():
    for text in ("1979 TFLOPs", "7 FLOPS", "3 flops"):
        with pytest.raises(AmbiguousUnitError) as e:
            units.parse_quantity(text)
        assert "FLOP/s" in e.value.message and "FLOP'" in e.value.message


@pytest.mark.parametrize("text", ["nan", "inf", "-inf", "1e400", "", "abc", "1,000",
                                  "__import__('os')", "3 GB/", "5 T", "24h*2", "1/0",
                                  # arithmetic pint would happily evaluate, for minutes or forever:
                                  "9**9**9 h", "10**100000 h", "3 min**9**9**9", "2 GB^9^9"])
def test_malformed_values_are_rejected(text):
    with pytest.raises(MalformedValueError):
        units.parse_quantity(text, "x")


def test_a_value_is_a_number_then_a_unit():
    assert base("8/3") == pytest.approx(8 / 3)          # a fraction is a number
    assert base("3 s^-1") == 3
    assert base("1_000 token") == 1000
    with pytest.raises(MalformedValueError):
        units.parse_unit("min**9**9**9", "--to")


def test_unit_latex():
    assert units.unit_to_latex("TFLOP/s") == r"\mathrm{TFLOP/s}"
    assert units.unit_to_latex("%") == r"\%"
    assert units.unit_to_latex("") == ""


def test_one_level_of_brackets_in_units():
    # seed 004's $/(TB/s)/hour: 1.17313 USD per (TB/s x hour)
    assert base("1.17313 USD/(TB/s*hour)") == pytest.approx(1.17313 / (1e12 * 3600), rel=1e-12)
    for text in ("3 ((GB))", "(9**9) h", "2 GB/(s**9**9)"):
        with pytest.raises(MalformedValueError):
            units.parse_quantity(text)


def test_a_price_in_another_currency_says_money_is_counted_in_dollars(cli):
    # a European user gives "2.5 EUR/hour": pint knows no EUR, and there is no exchange rate to
    # take; the refusal says what to do instead of only "unknown unit"
    r = cli("solve", "total_cost", "n_gpus=1024", "gpu_hour_price=2.5 EUR/hour", "train_time=3 day")
    assert r.code != 0 and r.err.startswith("error: gpu_hour_price: unknown unit 'EUR' in '2.5 EUR/hour'; money "
                                            "is counted in one currency, USD")
