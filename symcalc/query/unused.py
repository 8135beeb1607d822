"""Where a given value the route did not need would count.

A question may carry values its answer does not use: ``train_time`` asked with an MTBF and a
restart time. These functions look through the library's formulas (the dependency graph read
as data) for the quantities that would use them, so that the answer can say what to ask for
instead of only "not used".
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping

MAX_USERS = 3
MAX_DEPTH = 8      # formula hops followed from a given value (the library's chains are shorter)


def users(lib, name: str, options: Mapping[str, str]) -> dict:
    """The quantities the formulas in force give from ``name`` (``quantities``: memory_headroom
    gives usable_gpu_memory; another question would use it), else the option values under which
    a formula takes it (``options``: seq_len counts under mfu_flops=with_attention).

    Returns at most MAX_USERS of each; {} when nothing takes it. O(formulas)."""
    gives: list[str] = []
    under: list[str] = []
    for f in lib.formulas.values():
        if name not in f.quantities or f.lhs_name is None:
            continue
        if f.active(options):
            other = f.lhs_name if f.lhs_name != name else None
            if other and other not in gives:
                gives.append(other)
        else:
            unmet = [(opt, allowed) for opt, allowed in f.when.items() if options.get(opt) not in allowed]
            # one unmet option: each of its values is a way in; several: all of them at once
            settings = ([f"{opt}={value}" for opt, allowed in unmet for value in allowed] if len(unmet) == 1 else
                        [" with ".join(f"{opt}={'|'.join(allowed)}" for opt, allowed in unmet)])
            under.extend(s for s in settings if s not in under)
    # a setting that needs more than another one does is implied by it: say the smaller
    parts = {u: set(u.split(" with ")) for u in under}
    under = [u for u in under if not any(parts[v] < parts[u] for v in under)]
    out: dict = {}
    if gives:
        out["quantities"] = gives[:MAX_USERS]
    elif under:
        out["options"] = under[:MAX_USERS]
    return out


@functools.lru_cache(maxsize=32)
def _graph(lib, options: tuple[tuple[str, str], ...]) -> tuple[dict[str, list], dict[str, list]]:
    """The formulas in force under ``options`` indexed both ways: left side -> formulas, and
    quantity -> formulas it appears in. O(formulas), once per library and options."""
    by_lhs: dict[str, list] = {}
    by_name: dict[str, list] = {}
    for f in lib.active_formulas(dict(options)):
        if f.lhs_name is None:
            continue
        by_lhs.setdefault(f.lhs_name, []).append(f)
        for q in f.quantities:
            by_name.setdefault(q, []).append(f)
    return by_lhs, by_name


def _key(options: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(options.items()))


def downstream(lib, name: str, options: Mapping[str, str]) -> set[str]:
    """The quantities the formulas in force compute, directly or through others, from ``name``
    (the left sides reachable from it, read forwards, at most MAX_DEPTH formulas away).
    O(what it reaches)."""
    _, by_name = _graph(lib, _key(options))
    reached: set[str] = set()
    frontier = {name}
    for _ in range(MAX_DEPTH):
        new = {f.lhs_name for q in frontier for f in by_name.get(q, ())
               if f.lhs_name not in reached and f.lhs_name != name}
        if not new:
            break
        reached |= new
        frontier = new
    return reached


def upstream(lib, name: str, options: Mapping[str, str]) -> set[str]:
    """The quantities the formulas in force compute ``name`` from, directly or through others
    (read backwards from its left side, at most MAX_DEPTH formulas away). O(what it reaches)."""
    by_lhs, _ = _graph(lib, _key(options))
    reached: set[str] = set()
    frontier = {name}
    for _ in range(MAX_DEPTH):
        new = {q for lhs in frontier for f in by_lhs.get(lhs, ()) for q in f.quantities
               if q not in reached and q != name}
        if not new:
            break
        reached |= new
        frontier = new
    return reached


def combined_with(lib, target: str, given: Iterable[str], options: Mapping[str, str]) -> dict[str, list[str]]:
    """Quantities a formula in force gives from ``target`` together with given values the answer
    did not use: train_time with mtbf and recovery_time gives wall_clock_time (and n_crashes).

    Returns {quantity: [the unused givens it takes]}, the quantities taking the most first, at
    most MAX_USERS, each taking at least half of them (one that explains two of nine unused
    values explains little); {} when none does. O(formulas of target x what they reach)."""
    given = list(given)
    _, by_name = _graph(lib, _key(options))
    found: dict[str, list[str]] = {}
    for f in by_name.get(target, ()):
        lhs = f.lhs_name
        if lhs == target or lhs in found:
            continue
        feeds = upstream(lib, lhs, options)
        takes = [g for g in given if g in feeds]
        if takes:
            found[lhs] = takes
    ranked = sorted((q for q in found if 2 * len(found[q]) >= len(given)), key=lambda q: -len(found[q]))
    return {q: found[q] for q in ranked[:MAX_USERS]}
