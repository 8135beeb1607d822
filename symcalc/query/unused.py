"""Where a given value the route did not need would count.

A question may carry values its answer does not use: ``train_time`` asked with an MTBF and a
restart time. These functions look through the library's formulas (the dependency graph read
as data) for the quantities that would use them, so that the answer can say what to ask for
instead of only "not used".
"""

from __future__ import annotations

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
            for opt, allowed in f.when.items():
                if options.get(opt) not in allowed:
                    for value in allowed:
                        setting = f"{opt}={value}"
                        if setting not in under:
                            under.append(setting)
    out: dict = {}
    if gives:
        out["quantities"] = gives[:MAX_USERS]
    elif under:
        out["options"] = under[:MAX_USERS]
    return out


def downstream(lib, name: str, options: Mapping[str, str]) -> set[str]:
    """The quantities the formulas in force compute, directly or through others, from ``name``
    (the left sides reachable from it, read forwards). O(MAX_DEPTH x formulas)."""
    active = [f for f in lib.active_formulas(options) if f.lhs_name is not None]
    reached: set[str] = set()
    frontier = {name}
    for _ in range(MAX_DEPTH):
        new = {f.lhs_name for f in active if f.lhs_name not in reached and f.lhs_name != name
               and frontier & set(f.quantities)}
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
    values explains little); {} when none does. O(given x MAX_DEPTH x formulas)."""
    given = list(given)
    reach = {g: downstream(lib, g, options) for g in given}
    found: dict[str, list[str]] = {}
    for f in lib.active_formulas(options):
        lhs = f.lhs_name
        if lhs is None or lhs == target or target not in f.quantities:
            continue
        takes = [g for g in reach if lhs in reach[g] or (g in f.quantities and g != lhs)]
        if takes:
            found.setdefault(lhs, [])
            found[lhs] += [g for g in takes if g not in found[lhs]]
    ranked = sorted((q for q in found if 2 * len(found[q]) >= len(given)), key=lambda q: -len(found[q]))
    return {q: found[q] for q in ranked[:MAX_USERS]}
