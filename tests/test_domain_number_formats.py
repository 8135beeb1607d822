"""Number formats and dynamic loss scaling (formulas/number_formats.toml), forwards and backwards.
Every expectation is a value seeds 001/003 print, a standard IEEE 754 / OCP FP8 constant, or a
hand computation written next to it."""

import pytest

import symcalc


def test_exponent_bits_whose_max_normal_exceeds_a_value():
    # IEEE-style with 10 mantissa bits: max = (2 - 2^-10) 2^(2^(e-1) - 1). For max >= 1e5:
    # 2^(e-1) = 1 + log2(1e5 / 1.99902) = 16.61 -> e = 5.054 -> 6 bits (5 bits give only 65504)
    r = symcalc.solve("exponent_bits", max_normal="1e5", mantissa_bits="10")
    assert r.rounded_base == 6 and r.base_value == pytest.approx(5.0540, rel=1e-4)
    # fp16's own 65504 needs exactly 5 bits
    assert symcalc.solve("exponent_bits", max_normal="65504", mantissa_bits="10").rounded_base == 5
    # fp32's 3.4e38 (just below its 3.4028e38) with 23 mantissa bits: 8 bits
    assert symcalc.solve("exponent_bits", max_normal="3.4e38", mantissa_bits="23").rounded_base == 8


def test_e4m3fn_differs_from_an_ieee_style_e4m3():
    # e4m3fn: 1.75 x 2^(15 - 7) = 448; ieee: (2 - 2^-3) x 2^(14 - 7) = 1.875 x 128 = 240
    fn = symcalc.solve("max_normal", exponent_bits="4", mantissa_bits="3", options={"format": "e4m3fn"})
    ieee = symcalc.solve("max_normal", exponent_bits="4", mantissa_bits="3")
    assert fn.base_value == 448 and ieee.base_value == 240
    # backwards under e4m3fn: 448 with 3 mantissa bits -> 4 exponent bits
    r = symcalc.solve("exponent_bits", max_normal="448", mantissa_bits="3", options={"format": "e4m3fn"})
    assert r.rounded_base == 4


def test_mantissa_bits_backwards():
    # E5M2: 57344 = (2 - 2^-m) x 2^15 -> 2 - 2^-m = 1.75 -> m = 2
    r = symcalc.solve("mantissa_bits", max_normal="57344", exponent_bits="5")
    assert r.base_value == pytest.approx(2, rel=1e-12)
    # 8 values per binade -> 3 mantissa bits (seed 001's E4M3 '8 fractions')
    assert symcalc.solve("mantissa_bits", mantissa_steps_per_binade="8").rounded_base == 3
    # fp16 smallest subnormal 2^-24 with 5 exponent bits (bias 15): 1 - 15 - m = -24 -> m = 10
    r = symcalc.solve("mantissa_bits", smallest_subnormal=f"{2.0 ** -24}", exponent_bits="5")
    assert r.base_value == pytest.approx(10, rel=1e-12)


def test_exponent_bits_from_the_smallest_normal():
    # 2^-14 = 2^(1 - bias) -> bias 15 = 2^(e-1) - 1 -> e = 5 (fp16)
    r = symcalc.solve("exponent_bits", smallest_normal=f"{2.0 ** -14}")
    assert r.base_value == pytest.approx(5, rel=1e-12)


def test_reference_values_of_common_formats():
    # bf16: (2 - 2^-7) 2^127 = 3.3895e38; fp32 smallest subnormal 2^-149; E5M2 smallest subnormal 2^-16
    assert symcalc.solve("max_normal", exponent_bits="8", mantissa_bits="7").base_value == \
        pytest.approx((2 - 2 ** -7) * 2.0 ** 127, rel=1e-12)
    assert symcalc.solve("smallest_subnormal", exponent_bits="8", mantissa_bits="23").base_value == \
        pytest.approx(2.0 ** -149, rel=1e-12)
    assert symcalc.solve("smallest_subnormal", exponent_bits="5", mantissa_bits="2").base_value == \
        pytest.approx(2.0 ** -16, rel=1e-12)
    # E4M3: smallest normal 2^(1-7) = 2^-6, the same under both formats
    for fmt in ("ieee", "e4m3fn"):
        r = symcalc.solve("smallest_normal", exponent_bits="4", options={"format": fmt})
        assert r.base_value == pytest.approx(2.0 ** -6, rel=1e-12)


def test_dynamic_loss_scaling():
    # seed 001: 65536, two overflows, no run of 2000 good steps -> 16384
    r = symcalc.solve("loss_scale", initial_loss_scale="65536", growth_interval="2000",
                      overflow_pattern="1000 ok, 1 overflow, 500 ok, 1 overflow")
    assert r.value == 16384
    # defaults (PyTorch GradScaler: 65536, 2000): 4000 good steps double twice -> 262144
    r = symcalc.solve("loss_scale", overflow_pattern="4000 ok")
    assert r.value == 65536 * 4 and set(r.defaults_used) == {"initial_loss_scale", "growth_interval"}
    # an overflow resets the count: 1999 ok, overflow (32768), 2000 ok (65536)
    r = symcalc.solve("loss_scale", overflow_pattern="1999 ok, 1 overflow, 2000 ok")
    assert r.value == 65536


def test_fp8_peak_from_bf16():
    # seed 003: FP8 twice BF16; H100 SXM 989 dense BF16 -> 1978 TFLOP/s (datasheet 1979); backwards 1979/2
    assert symcalc.solve("peak_flops_fp8", peak_flops_bf16="989 TFLOP/s").base_value == pytest.approx(1978e12)
    assert symcalc.solve("peak_flops_bf16", peak_flops_fp8="1979 TFLOP/s").base_value == pytest.approx(989.5e12)
