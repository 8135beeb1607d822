"""The evaluator's chunked kernel (Result.function on large arrays): the step walker's answers
and errors, only faster; and the one evaluator's other promises."""

from __future__ import annotations

import numpy as np
import pytest
import sympy

import symcalc
import symcalc.query.solve
from symcalc.engine import chunked
from symcalc.engine.evaluate import MIN_SIZE, Target, evaluate
from symcalc.errors import DomainError, OutOfBoundsError
from symcalc.engine.signs import NONNEG, POS, interval, sign

N = 2 * MIN_SIZE
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
        raise AssertionError("the chunked kernel declined")
    monkeypatch.setattr(symcalc.query.solve, "solve", refuse)


def general(result, values: dict, **kwargs):
    """solve()'s answer for the same values (what function() must equal)."""
    return symcalc.solve(result.target, values, options=result.all_options, to=result.unit or None,
                         library=result.library, **kwargs)


@pytest.mark.parametrize("counts", [float, np.int64])
def test_a_fused_sweep_equals_the_general_path(counts, no_general_path):
    r = symcalc.solve("train_time", **ARCH)
    values = arch_arrays(counts=counts)
    prog = chunked.program(r.derivation)
    assert prog.fused_expr is not None and prog.checked == ()   # every step proven positive
    got = r.function(**values)
    np.testing.assert_allclose(got.magnitude, general(r, values).value, rtol=1e-14)
    assert got.units == symcalc.Q(1, "day").units


def test_a_whole_number_answer_is_bitwise_the_general_paths(no_general_path):
    r = symcalc.solve("n_gpus", n_params=30e9, n_tokens="600e9 token", train_time="30day", mfu="45%",
                      peak_flops="989 TFLOP/s")
    assert chunked.program(r.derivation).fused_expr is None        # rounding must match exactly
    values = dict(n_params=RNG.uniform(1e9, 1e12, N), n_tokens=RNG.uniform(1e11, 1e13, N),
                  train_time=(RNG.uniform(1, 90, N), "day"), mfu=RNG.uniform(0.2, 0.6, N),
                  peak_flops=(RNG.uniform(3e14, 2e15, N), "FLOP/s"))
    np.testing.assert_array_equal(r.function(**values).magnitude, _general_value(r, values))


def _general_value(r, values):
    """The step walker's evaluation, called without symcalc.query.solve.solve (patched away)."""
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
    prog = chunked.program(r.derivation)
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
    """The chunked kernel refuses the values with solve()'s own words."""
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
    small = {k: (v[0] if isinstance(v, tuple) else v) for k, v in arch_arrays(n=100).items()}
    assert evaluate(r.derivation, small, [Target(r.target, r.factor)], strict=True) is None
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


# -- the one evaluator: both kernels mark the same points, several targets in one call ------

@pytest.mark.parametrize("size", [12, 3 * MIN_SIZE])
def test_both_kernels_mark_the_same_points_inside(size):
    # GPUs for a deadline, rounded down (rounding="down"): n = 6 N D / (mfu x peak x T). With
    # N = 1e6, D = 1e9, peak 1e12 FLOP/s and T = 1 day, n = 6e15 / (mfu x 8.64e16) = 0.0694 / mfu:
    # inside n_gpus > 0 exactly, but below 1 for mfu > 0.0694, where it rounds down to 0, outside;
    # a negative token count gives a negative n_gpus, outside too. The step walker (12 points)
    # and the chunked kernel (98,304) must agree point for point with that hand rule.
    r = symcalc.solve("n_gpus", n_params=1e6, n_tokens="1e9 token", train_time="1 day", mfu=0.01,
                      peak_flops="1 TFLOP/s", rounding="down")
    mfu = np.linspace(0.01, 0.2, size)
    tokens = np.where(np.arange(size) % 5 == 4, -1e9, 1e9)
    p = r.points(n_params=1e6, n_tokens=(tokens, "token"), train_time="1 day", mfu=mfu, peak_flops="1 TFLOP/s")
    exact = 6 * 1e6 * tokens / (mfu * 1e12 * 86400)
    expected = np.floor(exact) >= 1
    assert 0 < expected.sum() < size and (exact[~expected] > 0).any() and (exact < 0).any()
    assert p.inside.tolist() == expected.tolist()
    np.testing.assert_array_equal(p.value[expected], np.floor(exact[expected]))


def test_other_quantities_of_a_large_grid_come_from_the_chunked_kernel(monkeypatch):
    # `also` no longer forces the step walker: 98,304 points with the cluster's achieved FLOP/s
    # (6 N R) beside the mfu come from one chunked run
    calls = []
    real = chunked.run
    monkeypatch.setattr(chunked, "run", lambda *a, **k: calls.append(a[2]) or real(*a, **k))
    r = symcalc.solve("mfu", n_params=7e9, tokens_per_second="150000 token/s", n_gpus=64,
                      peak_flops="1979 TFLOP/s")
    rate = np.linspace(1e5, 1e6, 3 * MIN_SIZE)
    p = r.points(also=("achieved_flops_cluster",), n_params=7e9, tokens_per_second=(rate, "token/s"), n_gpus=64,
                 peak_flops="1979 TFLOP/s")
    assert len(calls) == 1 and {name for name, _, _ in calls[0]} == {"mfu", "achieved_flops_cluster"}
    np.testing.assert_allclose(p.also["achieved_flops_cluster"][0], 6 * 7e9 * rate / 1e15, rtol=1e-12)
    np.testing.assert_allclose(p.value, 6 * 7e9 * rate / (64 * 1979e12) * 100, rtol=1e-12)


def test_several_questions_on_the_same_knowns_are_one_call_with_shared_steps_walked_once(monkeypatch):
    # train_time and gpu_hours from the same knowns: both go through the training FLOPs
    # 6 N D and the cluster's FLOP/s; one call returns both (train_time = 6 N D / (n mfu peak),
    # gpu_hours = n x train_time), the steps they share evaluated once
    from symcalc.engine.derivation import Derivation
    from symcalc.query.reuse import together
    given = dict(n_params=7e9, n_tokens="1e12 token", n_gpus=64, mfu=0.4, peak_flops="989 TFLOP/s")
    t = symcalc.solve("train_time", **given)
    h = symcalc.solve("gpu_hours", **given)
    walked = []
    real = Derivation._evaluate_step
    monkeypatch.setattr(Derivation, "_evaluate_step", lambda self, s, *a: walked.append(s.step) or real(self, s, *a))
    n = np.array([64, 128, 256])
    got, inside = together((t, h), {**given, "n_gpus": n})
    seconds = 6 * 7e9 * 1e12 / (n * 0.4 * 989e12)
    np.testing.assert_allclose(got["train_time"], seconds / 86400, rtol=1e-12)
    np.testing.assert_allclose(got["gpu_hours"] * h.factor, n * seconds, rtol=1e-12)
    assert inside.all()
    shared = {s.step for s in t.derivation.steps} & {s.step for s in h.derivation.steps}
    assert shared and len(walked) == len(set(walked)) == len(t.derivation.steps) + len(h.derivation.steps) - len(shared)
