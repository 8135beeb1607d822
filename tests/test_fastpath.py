"""The sweep path of Result.function: the general path's answers and errors, only faster."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import symcalc
import symcalc.query.solve
from symcalc.query import reuse
from symcalc.engine import fastpath as sweep
from symcalc.errors import DomainError, OutOfBoundsError
from symcalc.engine.signs import NONNEG, POS, interval, sign

N = 2 * sweep.MIN_SIZE
RNG = np.random.default_rng(7)

ARCH = dict(n_layers=32, d_model=4096, vocab_size=32000, n_tokens="1e12 token", n_gpus=64, mfu=0.4,
            peak_flops="989 TFLOP/s")


def arch_arrays(n: int = N, counts=float) -> dict:
    return dict(n_layers=RNG.integers(8, 129, n).astype(counts), d_model=(RNG.integers(16, 257, n) * 64).astype(counts),
                vocab_size=RNG.integers(32_000, 256_001, n).astype(counts), n_tokens=RNG.uniform(1e11, 1e13, n),
                n_gpus=RNG.integers(8, 4097, n).astype(counts), mfu=RNG.uniform(0.2, 0.6, n),
                peak_flops=(RNG.uniform(3e14, 2e15, n), "FLOP/s"))


@pytest.fixture
def no_general_path(monkeypatch):
    """Fail if Result.function falls back to symcalc.solve."""
    def refuse(*args, **kwargs):
        raise AssertionError("the sweep path declined")
    monkeypatch.setattr(symcalc.query.solve, "solve", refuse)


def general(result, values: dict, **kwargs):
    """The general path's answer for the same values (what function() must equal)."""
    return symcalc.solve(result.target, values, options=result.all_options, to=result.unit or None,
                         library=result.library, **kwargs)


@pytest.mark.parametrize("counts", [float, np.int64])
def test_a_fused_sweep_equals_the_general_path(counts, no_general_path):
    r = symcalc.solve("train_time", **ARCH)
    values = arch_arrays(counts=counts)
    prog = sweep.program(r.derivation)
    assert prog.fused_expr is not None and prog.checked == ()   # every step proven positive
    got = r.function(**values)
    np.testing.assert_allclose(got.magnitude, general(r, values).value, rtol=1e-14)
    assert got.units == symcalc.Q(1, "day").units


def test_a_whole_number_answer_is_bitwise_the_general_paths(no_general_path):
    r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30day", mfu="45%",
                      peak_flops="989 TFLOP/s")
    assert sweep.program(r.derivation).fused_expr is None        # rounding must match exactly
    values = dict(n_params=RNG.uniform(1e9, 1e12, N), n_tokens=RNG.uniform(1e11, 1e13, N),
                  train_time=(RNG.uniform(1, 90, N), "day"), mfu=RNG.uniform(0.2, 0.6, N),
                  peak_flops=(RNG.uniform(3e14, 2e15, N), "FLOP/s"))
    np.testing.assert_array_equal(r.function(**values).magnitude, _general_value(r, values))


def _general_value(r, values):
    """The general path's evaluation, called without symcalc.query.solve.solve (patched away)."""
    from symcalc.engine.rounding import round_whole as _round
    from symcalc.query.derivations import derivation_for
    from symcalc.query.question import read_given
    knowns = read_given(r.library, values)
    derivation, used = derivation_for(r.library, r.target, frozenset(knowns), r.all_options)
    env = {k: v.magnitude for k, v in knowns.items()}
    env.update({k: d["magnitude"] for k, d in used.items() if "magnitude" in d})
    return _round(derivation.evaluate(env).values[r.target], r.quantity.whole) / r.factor


def test_a_step_that_subtracts_is_scanned_and_the_answer_is_bitwise(no_general_path):
    r = symcalc.solve("allreduce_time", message_size="7.38 GB", n_gpus=128, link_bandwidth="400 Gb/s")
    prog = sweep.program(r.derivation)
    assert prog is not None and prog.fused_expr is None and prog.checked
    values = dict(message_size=(RNG.uniform(1, 100, N), "GB"), n_gpus=RNG.integers(2, 4096, N),
                  link_bandwidth=(RNG.uniform(100, 800, N), "Gb/s"))
    np.testing.assert_array_equal(r.function(**values).magnitude, _general_value(r, values))


def test_a_grid_broadcasts_like_the_general_path(no_general_path):
    r = symcalc.solve("train_time", n_params=70e9, n_tokens="2e12 token", n_gpus=64, mfu=0.4,
                      peak_flops="989 TFLOP/s")
    values = dict(n_params=70e9, n_tokens="2e12 token", n_gpus=np.arange(8, 8 + 512).reshape(-1, 1),
                  mfu=np.linspace(0.2, 0.6, 128), peak_flops="989 TFLOP/s")
    got = r.function(**values).magnitude
    assert got.shape == (512, 128)
    np.testing.assert_allclose(got, _general_value(r, values), rtol=1e-14)


def test_an_answer_out_of_bounds_is_reported_as_by_solve():
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64, peak_flops="1979 TFLOP/s")
    tps = np.full(N, 150000.0)
    tps[N // 2] = 1.5e9                      # mfu far above 100 % at one point
    values = dict(n_params=7e9, tokens_per_second=(tps, "token/s"), n_gpus=64, peak_flops="1979 TFLOP/s")
    with pytest.raises(OutOfBoundsError) as swept:
        r.function(**values)
    with pytest.raises(OutOfBoundsError) as solved:
        general(r, values)
    assert str(swept.value) == str(solved.value) and "at 1 of" in str(swept.value)
    flagged = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                            peak_flops="1979 TFLOP/s", on_bounds="flag")
    np.testing.assert_array_equal(flagged.function(**values).magnitude, general(r, values, on_bounds="flag").value)


def test_an_input_that_is_not_whole_is_refused_as_by_solve():
    r = symcalc.solve("train_time", **ARCH)
    values = arch_arrays()
    values["n_layers"][5] = 32.5
    assert_same_refusal(r, values)


def test_a_value_the_derivation_does_not_use_is_still_checked():
    r = symcalc.solve("train_time", checkpoint_write_time="98 s", **ARCH)
    assert "checkpoint_write_time" in r.unused
    values = dict(arch_arrays(), checkpoint_write_time=(np.full(N, -5.0), "s"))
    assert_same_refusal(r, values)


def assert_same_refusal(r, values):
    """The sweep path refuses the values with solve()'s own words."""
    with pytest.raises(DomainError) as swept:
        r.function(**values)
    with pytest.raises(DomainError) as solved:
        general(r, values)
    assert str(swept.value) == str(solved.value)


def test_values_whole_within_tolerance_take_the_general_path():
    r = symcalc.solve("train_time", **ARCH)
    values = arch_arrays()
    values["n_layers"][5] = 32 + 1e-12        # whole to solve(), not exactly
    np.testing.assert_allclose(r.function(**values).magnitude, general(r, values).value, rtol=1e-14)


@pytest.mark.parametrize("huge", [1e150, 1e300])
def test_values_near_the_limits_of_floating_point_take_the_general_path(huge):
    r = symcalc.solve("train_time", n_params=70e9, n_tokens="2e12 token", n_gpus=64, mfu=0.4,
                      peak_flops="989 TFLOP/s")
    n_params = np.full(N, 70e9)
    n_params[3] = huge                        # the FLOPs of that point overflow in one order or another
    values = dict(n_params=n_params, n_tokens="2e12 token", n_gpus=64, mfu=0.4, peak_flops="989 TFLOP/s")
    try:
        expected = general(r, values).value
    except symcalc.SymcalcError as e:
        with pytest.raises(type(e)) as swept:
            r.function(**values)
        assert str(swept.value) == str(e)
    else:
        np.testing.assert_allclose(r.function(**values).magnitude, expected, rtol=1e-14)


def test_small_arrays_and_given_answers_use_the_general_path():
    r = symcalc.solve("train_time", **ARCH)
    assert reuse.sweep_path(r, arch_arrays(n=100)) is None
    given = symcalc.solve("n_params", n_params=7e9)           # a conversion: no steps
    values = np.full(N, 7e9)
    np.testing.assert_array_equal(given.function(n_params=values).magnitude, values)


def test_sign_follows_only_rules_that_floats_keep():
    a, b = sympy.symbols("a b", positive=True)
    c = sympy.Symbol("c")
    facts = {a: POS, b: NONNEG}
    assert sign(a * b / (a + 1) + sympy.sqrt(a), facts) == POS
    assert sign(a * b, facts) == NONNEG
    assert sign(a / (a + 2), facts) == POS
    assert sign(sympy.ceiling(a / 3), facts) == POS
    assert sign(a - b, facts) is None             # cancellation: not by structure
    assert sign(a * c, facts) is None             # unknown sign
    assert sign(sympy.Max(a, c), facts) == POS and sign(sympy.Min(a, c), facts) is None


def test_interval_refuses_what_could_overflow_or_underflow():
    a, b = sympy.symbols("a b", positive=True)
    assert interval(a * b, {a: (1.0, 2.0), b: (3.0, 4.0)}) == (3.0, 8.0)
    assert interval(a / b, {a: (1.0, 2.0), b: (4.0, 8.0)}) == (0.125, 0.5)
    assert interval(a * b, {a: (1.0, 1e200), b: (1.0, 1e200)}) is None            # 1e400
    assert interval(a / b, {a: (1e-200, 1.0), b: (1.0, 1e200)}) is None           # 1e-400
    assert interval(a * b / (b + 1), {a: (1.0, 2.0), b: (1.0, 1e300)}) is None    # a*b on the way
