"""Numeric root finding for steps sympy cannot invert (Min/Max, transcendental equations, and
values where a closed form is singular), vectorised over sweeps.

One equation in one unknown: scan the unknown's domain on a grid (geometric for (0, inf),
since planning quantities span 30 orders of magnitude), take the first sign change of the
residual for each element, and bisect it to machine precision. All elements are processed at
once with numpy, so a fallback over a 1e6-point sweep costs a few hundred array passes rather
than a million scalar solves. A square block of several unknowns uses scipy.optimize.root per
element, from several starting points.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from symcalc.library.records import Interval

BISECTIONS = 200


def _grid(domain: Interval) -> tuple[np.ndarray, bool]:
    """Scan points inside ``domain`` and whether to bisect in log space."""
    lo, hi = domain.lo, domain.hi
    if np.isinf(hi) and lo >= 0:
        pts = lo + np.logspace(-30, 30, 241)
        if not domain.lo_open:
            pts = np.concatenate([[lo], pts])
        return pts, lo == 0
    if np.isinf(hi) or np.isinf(lo):
        pos = np.logspace(-30, 30, 121)
        base = 0.0 if np.isinf(lo) and np.isinf(hi) else (lo if np.isfinite(lo) else hi)
        pts = np.concatenate([base - pos[::-1], [base], base + pos])
        return pts[domain.contains(pts)], False
    span = hi - lo
    pts = np.unique(np.concatenate([lo + span * np.logspace(-12, 0, 49), np.linspace(lo, hi, 201)]))
    return pts[domain.contains(pts)], False


def solve_scalar(residual: Callable, args: list, domain: Interval, with_status: bool = False):
    """Root in ``domain`` of ``residual(x, *args) = 0`` for every element of the broadcast args.

    Returns an array of the broadcast shape: the smallest *verified* root, NaN where there is
    none. Every sign change of the residual on the scan grid is a candidate, smallest first;
    each is bisected and kept only if the residual really vanishes there (:func:`_verified`):
    a sign change across a jump (floor, ceiling) or a pole is not a root. A residual that is
    exactly 0 over an interval (Min(pp, m) = pp for every m >= pp) has no single root: such
    elements are NaN and, with ``with_status=True``, marked in a second boolean array
    ("not determined", as opposed to "no value satisfies"); a third marks the elements with
    another root beyond the one returned. O(grid + rounds x bisections)
    array passes, all elements at once.
    """
    shape = np.broadcast_shapes(*[np.shape(a) for a in args]) if args else ()
    flat = [np.broadcast_to(np.asarray(a, dtype=float), shape).reshape(-1) for a in args]
    n = flat[0].size if flat else 1
    pts, use_log = _grid(domain)
    result = np.full(n, np.nan)
    undetermined = np.zeros(n, dtype=bool)
    with np.errstate(all="ignore"):
        vals = np.asarray(residual(pts[:, None], *[a[None, :] for a in flat]), dtype=float)
        vals = np.broadcast_to(vals, (pts.size, n))
        finite = np.isfinite(vals)
        sign = np.sign(vals)
        exact = (sign == 0) & finite
        # an overflow to +-inf still has a sign: a root between a finite value and one that
        # overflowed is bracketed (x^64 = 1e300 has its root a fifth of a decade below overflow)
        signed = ~np.isnan(vals)
        change = (sign[:-1] * sign[1:] < 0) & signed[:-1] & signed[1:]
        # a residual that is exactly 0 at two neighbouring scan points is flat there: every value
        # between them is a root, so these values do not determine the unknown
        undetermined = (exact[:-1] & exact[1:]).any(axis=0)
        hit = (exact[:-1] | change) & ~undetermined[None, :]
        tried = np.full(n, -1)
        for _ in range(MAX_CANDIDATES):
            later = hit & (np.arange(pts.size - 1)[:, None] > tried[None, :])
            has = later.any(axis=0) & np.isnan(result)
            idx = np.nonzero(has)[0]
            if idx.size == 0:
                break
            k = np.argmax(later[:, idx], axis=0)
            tried[idx] = k
            at_point = exact[k, idx]
            result[idx[at_point]] = pts[k[at_point]]
            idx, k = idx[~at_point], k[~at_point]
            if idx.size == 0:
                continue
            sub = [a[idx] for a in flat]
            root, lo_x, hi_x = _bisect(residual, pts[k], pts[k + 1], sub, use_log)
            ok = _verified(residual, root, lo_x, hi_x, sub, domain)
            result[idx[ok]] = root[ok]
        if not with_status:
            return result.reshape(shape)
        several = _another_root(residual, flat, pts, hit, exact, tried, result, use_log, domain)
    return result.reshape(shape), undetermined.reshape(shape), several.reshape(shape)


def _another_root(residual: Callable, flat: list, pts: np.ndarray, hit: np.ndarray, exact: np.ndarray,
                  tried: np.ndarray, result: np.ndarray, use_log: bool, domain: Interval) -> np.ndarray:
    """Where a verified root lies beyond the one taken (the next sign change on the scan grid,
    bisected and verified like the first): the answer is one of several. One more round of
    bisection for the elements that have a later candidate."""
    several = np.zeros(result.size, dtype=bool)
    later = hit & (np.arange(pts.size - 1)[:, None] > tried[None, :])
    idx = np.nonzero(later.any(axis=0) & np.isfinite(result))[0]
    if idx.size == 0:
        return several
    k = np.argmax(later[:, idx], axis=0)
    at_point = exact[k, idx]
    several[idx[at_point]] = True
    idx, k = idx[~at_point], k[~at_point]
    if idx.size:
        sub = [a[idx] for a in flat]
        root, lo_x, hi_x = _bisect(residual, pts[k], pts[k + 1], sub, use_log)
        several[idx] = _verified(residual, root, lo_x, hi_x, sub, domain)
    return several


MAX_CANDIDATES = 16       # sign changes tried per element, smallest first


def _bisect(residual: Callable, lo_x: np.ndarray, hi_x: np.ndarray, sub: list, use_log: bool):
    """Bisect brackets with a sign change to machine precision: (midpoints, final lo, final hi)."""
    f_lo = np.asarray(residual(lo_x, *sub), dtype=float)
    for _ in range(BISECTIONS):
        mid = np.sqrt(lo_x * hi_x) if use_log and np.all(lo_x > 0) else 0.5 * (lo_x + hi_x)
        f_mid = np.asarray(residual(mid, *sub), dtype=float)
        left = np.sign(f_mid) == np.sign(f_lo)
        lo_x = np.where(left, mid, lo_x)
        f_lo = np.where(left, f_mid, f_lo)
        hi_x = np.where(left, hi_x, mid)
        if np.all(np.abs(hi_x - lo_x) <= 4 * np.finfo(float).eps * np.abs(hi_x)):
            break
    return 0.5 * (lo_x + hi_x), lo_x, hi_x


def _verified(residual: Callable, root: np.ndarray, lo_x: np.ndarray, hi_x: np.ndarray, sub: list,
              domain: Interval) -> np.ndarray:
    """Which bisected brackets hold a real root: the residual at the bracket's ends (a few ulps
    apart) is tiny next to its size a relative 1e-6 away. Across a jump or a pole it stays as
    large as it is nearby, and the sign change is not a root; a root outside the domain (an
    open bound bisected onto) is not one either."""
    delta = 1e-6 * np.maximum(np.abs(root), 1e-300)
    near = np.abs(np.asarray(residual(lo_x, *sub), dtype=float)) + \
        np.abs(np.asarray(residual(hi_x, *sub), dtype=float))
    far = np.abs(np.asarray(residual(root - delta, *sub), dtype=float)) + \
        np.abs(np.asarray(residual(root + delta, *sub), dtype=float))
    return np.isfinite(root) & domain.contains(root) & ((near == 0) | (near <= 1e-3 * far))


def solve_system(residuals: Callable, args: list, domains: list[Interval], n_unknowns: int,
                 terms: Callable | None = None, with_status: bool = False):
    """Roots of a square system ``residuals(x_1..x_k, *args) = 0`` for every element.

    Returns an array of shape (k, *broadcast shape), NaN where no root was found; with
    ``with_status=True`` also a boolean array of the broadcast shape marking the elements
    whose root is not isolated: the Jacobian there is singular (:func:`_dependent`), so the
    equations hold along a curve through it (two unknowns trading off, say a GPU's peak rate
    and the pipeline's virtual stages) and they do not determine the unknowns. Positive
    unknowns are solved for in log space. With ``terms`` (each equation's addends), each
    equation is solved as "its positive addends equal its negative ones" compared on a signed
    log scale (:func:`_log_balance`): an equation whose sides are 1e30 weighs no more than one
    whose sides are 1, and a power of 64 is a factor of 64 in the logs. The starts search the
    domain: every unknown at 1, 1e3, ..., 1e12 and 1e-3 ... 1e-9, then seeded random points over
    60 decades, until a verified root is found (at most ``STARTS`` tries per element).
    """
    from scipy.optimize import root

    shape = np.broadcast_shapes(*[np.shape(a) for a in args]) if args else ()
    flat = [np.broadcast_to(np.asarray(a, dtype=float), shape).reshape(-1) for a in args]
    n = flat[0].size if flat else 1
    out = np.full((n_unknowns, n), np.nan)
    undetermined = np.zeros(n, dtype=bool)
    positive = [d.lo >= 0 for d in domains]
    rng = np.random.default_rng(20261126)
    decades = [0.0, 3.0, 6.0, 9.0, 12.0, -3.0, -6.0, -9.0]
    starts = [np.full(n_unknowns, s) for s in decades] + \
        [rng.uniform(-30, 30, n_unknowns) for _ in range(STARTS - len(decades))]

    def to_x(y):
        return np.array([np.exp(v) if p else v for v, p in zip(y, positive)])

    for i in range(n):
        a = [v[i] for v in flat]

        def f(y, a=a):
            with np.errstate(all="ignore"):
                if terms is not None:
                    r = _log_balance(terms(*to_x(y), *a))
                else:
                    r = np.asarray(residuals(*to_x(y), *a), dtype=float)
                    r = r / np.maximum(np.abs(r).max(), 1.0)
            return r if np.all(np.isfinite(r)) else np.full(n_unknowns, 1e6)

        for start in starts:
            y0 = np.array([np.log(10.0) * s if p else (10.0 ** s if s >= 0 else -(10.0 ** -s))
                           for s, p in zip(start, positive)])
            with np.errstate(all="ignore"):
                sol = root(f, y0, method="hybr")
            x = to_x(sol.x)
            if not all(d.contains(v) for d, v in zip(domains, x)):
                continue
            with np.errstate(all="ignore"):
                r = np.asarray(residuals(*x, *a), dtype=float)
                balanced = terms is not None and np.all(np.abs(f(sol.x)) <= 1e-9)
            if np.all(np.isfinite(r)) and (balanced or np.all(np.abs(r) <= 1e-9 * (1 + np.abs(r).max()))):
                if _dependent(f, sol.x):
                    undetermined[i] = True
                else:
                    out[:, i] = x
                break
    if with_status:
        return out.reshape((n_unknowns, *shape)), undetermined.reshape(shape)
    return out.reshape((n_unknowns, *shape))


_JACOBIAN_STEP = 1e-5     # central-difference step (in log space for positive unknowns)
_DEPENDENT = 1e-9         # smallest singular value over the largest of a singular Jacobian


def _dependent(f: Callable, y: np.ndarray) -> bool:
    """Whether the (row-normalised) Jacobian of ``f`` at ``y`` is singular: central differences
    err by about 1e-10 of the largest singular value, a dependent system's smallest is 0. A row
    of zeros (an equation none of the unknowns moves there) is singular too. O(k) evaluations."""
    k = len(y)
    cols = []
    for j in range(k):
        step = np.zeros(k)
        step[j] = _JACOBIAN_STEP
        with np.errstate(all="ignore"):
            cols.append((np.asarray(f(y + step)) - np.asarray(f(y - step))) / (2 * _JACOBIAN_STEP))
    ratio = rank_ratio(np.array(cols).T)
    return ratio is not None and ratio < _DEPENDENT


def rank_ratio(jac: np.ndarray) -> float | None:
    """The smallest singular value of ``jac`` over its largest, each row (equation) scaled to
    unit norm first so that an equation's units do not count: 0 when a row is all zeros (that
    equation is flat in every unknown), None when an entry is not finite. O(k^3) for k x k."""
    if not np.all(np.isfinite(jac)):
        return None
    norms = np.linalg.norm(jac, axis=1)
    if np.any(norms == 0):
        return 0.0
    s = np.linalg.svd(jac / norms[:, None], compute_uv=False)
    return float(s[-1] / s[0])


STARTS = 24               # starting points tried per element of a block solved numerically
_SIGNED_LOG = 1e20        # asinh(x 1e20) ~ log(2e20 |x|) for |x| >> 1e-20


def _log_balance(terms: list) -> np.ndarray:
    """For each equation's addends t: asinh(K sum of the positive ones) - asinh(K sum of the
    negative ones), 0 exactly where the equation holds, and close to the log of their ratio."""
    out = []
    for t in terms:
        t = np.asarray([float(v) for v in t], dtype=float)
        out.append(np.arcsinh(_SIGNED_LOG * np.sum(np.maximum(t, 0))) -
                   np.arcsinh(_SIGNED_LOG * np.sum(np.maximum(-t, 0))))
    return np.array(out)
