"""The values of one solved step on arrays: per element, the first root inside the unknowns'
domains, else the first finite one, else a numeric root; a registered algorithm element by
element. The step walker of symcalc.engine.derivation calls :func:`step_values` for each step.

Its own module because choosing among roots and falling back to numeric root finding is a job
of its own, apart from holding the derivation. No sympy (numeric root finding compiles what it
needs on first use, symcalc.engine.solved_step).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from symcalc.engine import numeric
from symcalc.engine.method import Method
from symcalc.engine.solved_step import SolvedStep, _real
from symcalc.errors import NoSolutionError
from symcalc.findings import Finding
from symcalc.library.algorithms import REGISTRY
from symcalc.library.records import Interval

if TYPE_CHECKING:   # pragma: no cover
    from symcalc.library.registry import Library


def step_values(library: Library, s: SolvedStep, args: list, findings: list[Finding],
                undetermined: dict) -> tuple[dict, int, bool]:
    """Values of one step's unknowns. Per element: the first root inside the unknowns'
    domains; else the first finite root (the bounds check reports it); else a numeric root."""
    names = s.unknowns
    if s.method == Method.ALGORITHM:
        return {names[0]: _algorithm(library, s, args)}, 0, False
    if s.method == Method.NUMERIC:
        return _numeric(library, s, args, None, undetermined, findings), -1, True
    results = [{u: _real(fn(*args)) for u, fn in fns.items()} for fns in s.functions]
    if s.method == Method.EXPLICIT:
        return results[0], 0, False
    if len(results) == 1 and all(_all_finite(results[0][u]) for u in names):
        return results[0], 0, False
    shape = np.broadcast_shapes(*[np.shape(v) for r in results for v in r.values()])
    # a root that squaring brought in (both sides of a square root squared to solve) does not
    # satisfy the step's own equations: it is not offered while another root does
    holds = [_satisfies(s, r, names, args, shape) for r in results]
    finite = [_finite(r, names) & h for r, h in zip(results, holds)]
    inside = [f & _inside(r, names, s.domains) for f, r in zip(finite, results)]
    chosen = {u: np.full(shape, np.nan) for u in names}
    taken = np.zeros(shape, dtype=bool)
    first_used = None
    for masks in (inside, finite):
        for k, (r, mask) in enumerate(zip(results, masks)):
            mask = np.broadcast_to(mask, shape) & ~taken
            if np.any(mask):
                first_used = k if first_used is None else first_used
                for u in names:
                    chosen[u] = np.where(mask, np.broadcast_to(r[u], shape), chosen[u])
                taken |= mask
    if len(results) > 1:
        several = sum(np.broadcast_to(m, shape).astype(int) for m in inside) > 1
        if np.any(several):
            findings.append(Finding("several_roots", names[0], related=tuple(names),
                                    formulas=(s.formulas[0].id,), mask=several if np.ndim(several) else None))
    used_numeric = False
    if not np.all(taken):
        used_numeric = True
        fallback = _numeric(library, s, args, ~taken, undetermined, findings)
        for u in names:
            chosen[u] = np.where(taken, chosen[u], np.broadcast_to(fallback[u], shape))
    out = {u: (float(v) if v.ndim == 0 else v) for u, v in chosen.items()}
    return out, (first_used if first_used is not None else -1), used_numeric


def _satisfies(s: SolvedStep, root: dict, names: tuple[str, ...], args: list, shape: tuple) -> np.ndarray:
    """Where ``root`` satisfies every equation of the step: lhs - rhs within 1e-6 of the size of
    its addends (true where that cannot be told, a NaN root say: the finiteness test decides).
    Solving through a square root squares both sides, and the squared equation has roots the
    original does not: Young's law solved with the waste for the MTBF gives two, one of them
    spurious (a 90 % goodput read as 3000 s between failures, which gives 50 %)."""
    terms = s.terms_function
    ok = np.ones(shape, dtype=bool)
    if terms is None:
        return ok
    xs = [np.broadcast_to(np.asarray(root[u], dtype=float), shape) for u in names]
    with np.errstate(all="ignore"):
        for addends in terms(*xs, *args):
            parts = [np.broadcast_to(np.asarray(a, dtype=float), shape) for a in addends]
            total, size = sum(parts), sum(np.abs(p) for p in parts)
            ok &= ~(np.abs(total) > 1e-6 * size)
    return ok


def _algorithm(library, s: SolvedStep, args: list):
    """Apply a registered algorithm, element by element over any arrays among its inputs."""
    fn = REGISTRY[s.formulas[0].algorithm]  # type: ignore[index]  # an algorithm step names one
    text_out = library.quantities[s.unknowns[0]].kind == "text"
    if all(np.ndim(a) == 0 for a in args):
        return fn(*args)
    out = np.vectorize(fn, otypes=[object])(*args)
    return out if text_out else out.astype(float)


def _numeric(library, s: SolvedStep, args: list, where, undetermined: dict, findings: list[Finding]) -> dict:
    """Numeric roots of the step's equations, for the elements selected by ``where``;
    where the equations are flat in an unknown, ``undetermined[unknown]`` marks it; where
    another root lies beyond the one taken, a several_roots finding says so."""
    names = s.unknowns
    if s.residual_function is None:
        raise NoSolutionError(f"cannot solve {s.formulas[0].id} for {names[0]}")
    shape = np.broadcast_shapes(*[np.shape(a) for a in args]) if args else ()
    if where is not None:
        shape = np.broadcast_shapes(shape, np.shape(where))
        mask = np.broadcast_to(where, shape)
        sub = [np.broadcast_to(np.asarray(a, dtype=float), shape)[mask] for a in args]
    else:
        mask, sub = None, args
    flat = several = None
    if len(names) == 1:
        root, flat, several = numeric.solve_scalar(s.residual_function, sub, s.domains[0], with_status=True)
        roots = [root]
    elif s.tearing is not None:
        roots, flat, several = _numeric_torn(library, s, sub)
    elif s.reduction is not None:
        roots, flat, several = _numeric_reduced(library, s, sub)
    else:
        solved, flat = numeric.solve_system(s.residual_function, sub, list(s.domains), len(names),
                                            terms=s.terms_function, with_status=True)
        roots = list(solved)
    out = {}
    for u, r in zip(names, roots):
        if mask is not None:
            full = np.full(shape, np.nan)
            full[mask] = r
            r = full
        out[u] = float(r) if np.ndim(r) == 0 else r
    if flat is not None and np.any(flat):
        if mask is not None:
            full_flat = np.zeros(shape, dtype=bool)
            full_flat[mask] = flat
            flat = full_flat
        for u in names:
            undetermined[u] = flat
    if several is not None and np.any(several):
        if mask is not None:
            full_several = np.zeros(shape, dtype=bool)
            full_several[mask] = several
            several = full_several
        findings.append(Finding("several_roots", names[0], related=tuple(names), formulas=(s.formulas[0].id,),
                                mask=several if np.ndim(several) else None))
    return out


def _numeric_torn(library, s: SolvedStep, args: list) -> tuple[list, Any, Any]:
    """A torn block: the tear's root of the leftover equation, then the chain from it.
    Returns (the unknowns' values, where the leftover equation is flat in the tear, where it
    has another root)."""
    torn = s.torn
    assert torn is not None       # a step is torn only with a tearing
    domain = library.quantities[torn.tear].domain
    root, flat, several = numeric.solve_scalar(torn.residual_of, args, domain, with_status=True)
    with np.errstate(all="ignore"):
        found = torn.values(root, *args)
        wrong = ~np.asarray(torn.inside([found[n] for n in torn.names])) & ~np.asarray(flat)
        if np.any(wrong):
            # a root whose chain leaves a domain (a negative time): look again, inside only
            again, _, _ = numeric.solve_scalar(torn.residual_inside, args, domain, with_status=True)
            root = np.where(wrong, again, root)
            root = float(root) if np.ndim(root) == 0 else root
            found = torn.values(root, *args)
    return [found[u] for u in s.unknowns], flat, several


def _numeric_reduced(library, s: SolvedStep, args: list) -> tuple[list, Any, Any]:
    """A block's reduced equation solved numerically, then its substitutions evaluated.
    Returns (the unknowns' values, where the reduced equation is flat, where it has another
    root)."""
    last, residual, chain = s.reduction  # type: ignore[misc]  # a reduced step's
    root, flat, several = numeric.solve_scalar(residual, args, library.quantities[last].domain,
                                               with_status=True)
    found = {last: root}
    for name, fn, later in reversed(chain):
        found[name] = _real(fn(*[found[x] for x in later], *args))
    return [found[u] for u in s.unknowns], flat, several


def _all_finite(v) -> bool:
    """No inf or NaN: a minimum and a maximum, not an elementwise mask."""
    if isinstance(v, float):
        return math.isfinite(v)
    a = np.asarray(v, dtype=float)
    return a.size == 0 or (math.isfinite(np.minimum.reduce(a, axis=None)) and math.isfinite(np.maximum.reduce(a, axis=None)))


def _finite(result: dict, names: tuple[str, ...]):
    mask = True
    for u in names:
        mask = mask & np.isfinite(np.asarray(result[u], dtype=float))
    return mask


def _inside(result: dict, names: tuple[str, ...], domains: tuple[Interval, ...]):
    mask = True
    for u, d in zip(names, domains):
        mask = mask & d.contains(np.asarray(result[u], dtype=float))
    return mask
