"""A 1e6-point sweep of a multi-step derivation, against the same formula written by hand.

The question is the training time of a dense transformer from its architecture (n_layers,
d_model, vocab_size: the parameter count from the shapes), the tokens, the GPU count, MFU and
the peak: 10 derivation steps. All seven knowns vary over 1e6 random points (float64 arrays).

* symcalc: ``Result.function`` of a result solved once for scalars, i.e. the compiled
  derivation with every check a user relies on (units, bounds, whole numbers, the answer's
  bounds), in days;
* hand-written numpy: the textbook formula, no checks;
* the naive ways, point by point: pint quantities, and sympy substitution into the closed
  form. Both are timed on a few thousand (hundred) points and extrapolated to 1e6.

All four must agree; the benchmark asserts it before timing.
"""

from __future__ import annotations

import numpy as np

import symcalc
from common import Row, alternate, fmt_time, median, seconds

N = 1_000_000
SECONDS_PER_DAY = 86400.0
SCALARS = dict(n_layers=32, d_model=4096, vocab_size=32000, n_tokens="1e12 token", n_gpus=64, mfu=0.4,
               peak_flops="989 TFLOP/s")
TARGET_NUMPY = 1.3
TARGET_NAIVE = 1000.0


def inputs(n: int, counts=np.int64, seed: int = 0) -> dict[str, np.ndarray]:
    """n random points of the seven knowns, in base units (FLOP/s, token, counts). Counts are
    integer arrays, as numpy makes them (``counts=float`` for float64 ones)."""
    rng = np.random.default_rng(seed)
    return dict(
        n_layers=rng.integers(8, 129, n).astype(counts),
        d_model=(rng.integers(16, 257, n) * 64).astype(counts),
        vocab_size=rng.integers(32_000, 256_001, n).astype(counts),
        n_tokens=rng.uniform(1e11, 1.5e13, n),
        n_gpus=rng.integers(8, 16_385, n).astype(counts),
        mfu=rng.uniform(0.2, 0.6, n),
        peak_flops=rng.uniform(3e14, 2.5e15, n),
    )


def by_hand(n_layers, d_model, vocab_size, n_tokens, n_gpus, mfu, peak_flops):
    """The formula as one writes it: 12 L d^2 + 2 V d parameters, 6 FLOP per parameter and
    token, divided by the cluster's achieved FLOP/s; in days."""
    n_params = n_layers * 12 * d_model**2 + 2 * vocab_size * d_model
    return 6 * n_params * n_tokens / (n_gpus * peak_flops * mfu) / SECONDS_PER_DAY


def symcalc_function():
    """The compiled derivation as a user gets it: solve once, then call result.function."""
    result = symcalc.solve("train_time", **SCALARS)
    assert result.unit == "day"

    def run(x: dict[str, np.ndarray]) -> np.ndarray:
        return result.function(**{k: v for k, v in x.items() if k != "peak_flops"},
                               peak_flops=(x["peak_flops"], "FLOP/s")).magnitude
    return run, result


def by_pint(x: dict[str, np.ndarray], i: int) -> float:
    """One point the naive way: pint quantities all the way, converted to days at the end."""
    Q = symcalc.Q
    d = Q(float(x["d_model"][i]))
    n_params = Q(float(x["n_layers"][i])) * 12 * d**2 + 2 * Q(float(x["vocab_size"][i])) * d
    flops = Q(6, "FLOP/token") * n_params * Q(x["n_tokens"][i], "token")
    rate = Q(float(x["n_gpus"][i])) * Q(x["peak_flops"][i], "FLOP/s") * Q(x["mfu"][i])
    return (flops / rate).to("day").magnitude


def sympy_point(result):
    """One point the naive way with sympy: substitute into the closed form and evaluate."""
    lib = result.library
    expr = result.closed_form.expr.subs({lib.quantities[k].symbol: v["magnitude"]
                                    for k, v in result.defaults_used.items() if "magnitude" in v})
    symbols = {name: lib.quantities[name].symbol for name in SCALARS}

    def point(x: dict[str, np.ndarray], i: int) -> float:
        seconds_ = expr.subs({symbols[k]: float(v[i]) for k, v in x.items()}).evalf()
        return float(seconds_) / SECONDS_PER_DAY
    return point


def _versus_numpy(fn, x: dict[str, np.ndarray], rounds: int, what: str) -> Row:
    """symcalc vs hand-written numpy on the same inputs, timed in alternation; the figure is
    the median of the per-round ratios (each against the mean of the hand runs around it),
    which a change in the machine's load between rounds does not bias."""
    hand = by_hand(**x)
    np.testing.assert_allclose(fn(x), hand, rtol=1e-12)
    t = alternate({"numpy": lambda: by_hand(**x), "symcalc": lambda: fn(x), "numpy again": lambda: by_hand(**x)},
                  rounds)
    ratios = [s / ((a + b) / 2) for s, a, b in zip(t["symcalc"], t["numpy"], t["numpy again"])]
    ratio = median(ratios)
    return Row(f"1e6-point sweep ({what}): compiled vs hand numpy",
               f"{fmt_time(median(t['symcalc']))} vs {fmt_time(median(t['numpy']))}",
               f"{ratio:.2f}x", f"<= {TARGET_NUMPY}x", ratio <= TARGET_NUMPY,
               f"train_time from n_layers, d_model, vocab_size, n_tokens, n_gpus, mfu, peak_flops (10 steps), all "
               f"varying; Result.function vs the formula in numpy; median ratio of {rounds} alternating rounds "
               f"(quartiles {np.percentile(ratios, 25):.2f}-{np.percentile(ratios, 75):.2f}x)")


def _solve_with_arrays(x: dict[str, np.ndarray], rounds: int) -> Row:
    """symcalc.solve itself on the same arrays: the general path, which keeps every step's
    values for the derivation display (context for the sweep path's figure)."""
    values = {k: v for k, v in x.items() if k != "peak_flops"}
    values["peak_flops"] = (x["peak_flops"], "FLOP/s")
    np.testing.assert_allclose(symcalc.solve("train_time", **values).value, by_hand(**x), rtol=1e-12)
    t = alternate({"solve": lambda: symcalc.solve("train_time", **values), "numpy": lambda: by_hand(**x)},
                  max(3, rounds // 3))
    ratio = median([a / b for a, b in zip(t["solve"], t["numpy"])])
    return Row("same sweep through symcalc.solve(arrays)", f"{fmt_time(median(t['solve']))} vs "
               f"{fmt_time(median(t['numpy']))}", f"{ratio:.2f}x", "", None,
               "the general path: every step's array kept for the derivation shown, each scanned for its bounds")


def _mixed_grid(result, rounds: int) -> Row:
    """A fifth of the points out of bounds (MFU above 100 %): Result.points keeps every point
    and marks them, against the hand formula plus the hand mask of the same rule (issue 12 asks
    for the same 1.3x on such grids)."""
    x = inputs(N, counts=float, seed=1)
    rng = np.random.default_rng(2)
    out = rng.random(N) < 0.2
    x["mfu"] = np.where(out, rng.uniform(1.0, 1.5, N), x["mfu"])

    def ours():
        return result.points(**{k: v for k, v in x.items() if k != "peak_flops"}, peak_flops=(x["peak_flops"], "FLOP/s"))

    def hand():
        return by_hand(**x), (x["mfu"] > 0) & (x["mfu"] <= 1)
    got, (value, mask) = ours(), hand()
    np.testing.assert_allclose(got.value, value, rtol=1e-12)
    assert (got.ok == mask).all() and (~mask).sum() == out.sum()
    t = alternate({"numpy": hand, "symcalc": ours, "numpy again": hand}, rounds)
    ratio = median([s / ((a + b) / 2) for s, a, b in zip(t["symcalc"], t["numpy"], t["numpy again"])])
    return Row("1e6-point sweep, a fifth out of bounds: Result.points vs hand numpy + mask",
               f"{fmt_time(median(t['symcalc']))} vs {fmt_time(median(t['numpy']))}", f"{ratio:.2f}x",
               f"<= {TARGET_NUMPY}x", ratio <= TARGET_NUMPY,
               "MFU in (100 %, 150 %] at 20 % of the points: values everywhere, masks inside/fits/ok; "
               f"median ratio of {rounds} alternating rounds")


def run(quick: bool = False) -> list[Row]:
    fn, result = symcalc_function()
    rounds = 7 if quick else 25
    x = inputs(N)
    rows = [_versus_numpy(fn, x, rounds, "counts int64"),
            _versus_numpy(fn, inputs(N, counts=float), rounds, "counts float64"),
            _mixed_grid(result, rounds)]
    ours = median(seconds(lambda: fn(x), repeat=rounds))
    hand = by_hand(**x)
    rows.append(_solve_with_arrays(x, rounds))
    n_pint, n_sympy = (200, 20) if quick else (2000, 200)
    sympy_at = sympy_point(result)
    for i in range(5):
        assert abs(by_pint(x, i) / hand[i] - 1) < 1e-12 and abs(sympy_at(x, i) / hand[i] - 1) < 1e-12
    pint_each = min(seconds(lambda: [by_pint(x, i) for i in range(n_pint)], repeat=3)) / n_pint
    sympy_each = min(seconds(lambda: [sympy_at(x, i) for i in range(n_sympy)], repeat=1)) / n_sympy
    pint_total, sympy_total = pint_each * N, sympy_each * N
    return rows + [
        Row("same sweep: speed-up over pint, point by point",
            f"{fmt_time(pint_total)} vs {fmt_time(ours)}", f"{pint_total / ours:,.0f}x", f">= {TARGET_NAIVE:,.0f}x",
            pint_total / ours >= TARGET_NAIVE, f"pint quantities, timed on {n_pint} points ({fmt_time(pint_each)} each) x 1e6"),
        Row("same sweep: speed-up over sympy subs, point by point",
            f"{fmt_time(sympy_total)} vs {fmt_time(ours)}", f"{sympy_total / ours:,.0f}x", f">= {TARGET_NAIVE:,.0f}x",
            sympy_total / ours >= TARGET_NAIVE, f"closed form .subs().evalf(), timed on {n_sympy} points ({fmt_time(sympy_each)} each) x 1e6"),
    ]
