"""A per-unit value given where its deployment-wide total was meant, or the other way round;
and a bound of the question that its values settle where the question itself has no answer.

One replica's decode rate (``decode_tokens_per_second``) and all replicas' together
(``cluster_decode_tokens_per_second``) have one unit, and people say "50,000 token/s" for
either. A question that one of them leaves open may be settled by the other: "how many GPUs
for 50,000 token/s" given as the replica's rate has no answer, given as the deployment's it
has one (13 replicas). The library declares such pairs in the data (a quantity's ``total``:
the quantity that sums it over a deployment's units); this module finds, for an
underdetermined question, the given values whose other side would settle the target, so the
refusal can say so. Likewise a quantity may declare the one it bounds (``bound_of``): "n_params
for 100 token/s a sequence" has no answer without the model's shapes, but the most parameters
that rate allows (``largest_servable_params``) has one, and the refusal names it. Nothing is
answered from either: the user chooses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from symcalc.errors import SymcalcError, UnderdeterminedError
from symcalc.library.loading import Library
from symcalc.query.values import GivenValue


def counterparts(lib: Library) -> dict[str, str]:
    """Quantity -> its declared counterpart, both ways (a per-unit rate and its total).
    O(quantities)."""
    out: dict[str, str] = {}
    for name, spec in lib.quantities.items():
        if spec.total:
            out[name], out[spec.total] = spec.total, name
    return out


def rescopings(lib: Library, target: str, known: Iterable[str], candidates: Iterable[str],
               settles: Callable[[frozenset], bool]) -> list[tuple[str, str]]:
    """(given name, its counterpart) for each of ``candidates`` (the values the user gave) whose
    counterpart, known instead of it, settles ``target``; ``settles(names)`` says whether a set
    of known names does (a routing without diagnosis). At most one routing per candidate."""
    pairs = counterparts(lib)
    names = frozenset(known)
    out = []
    for name in sorted(set(candidates)):
        other = pairs.get(name)
        if other is None or other in names or other == target:
            continue
        try:
            if settles(names - {name} | {other}):
                out.append((name, other))
        except SymcalcError:
            continue
    return out


def settled_bounds(lib: Library, target: str, known: Iterable[str],
                   settles: Callable[[str, frozenset], bool]) -> list[str]:
    """The quantities that bound ``target`` (a quantity's ``bound_of``: the most parameters a
    decode rate allows, for n_params) and that the ``known`` names settle; ``settles(name,
    names)`` says whether they do (a routing without diagnosis). One routing per bound."""
    names = frozenset(known)
    out = []
    for name, spec in sorted(lib.quantities.items()):
        if spec.bound_of != target or name in names:
            continue
        try:
            if settles(name, names):
                out.append(name)
        except SymcalcError:
            continue
    return out


def refusal(error: UnderdeterminedError, lib: Library, target: str, knowns: Mapping[str, GivenValue],
            options: Mapping[str, str]) -> UnderdeterminedError:
    """``error``, with a sentence for each value the user gave whose counterpart would settle
    the target instead (its sets of missing values kept; ``rescopings`` lists the pairs), and
    for each bound of the target that the values settle (``bounds``)."""
    from symcalc.query.derivations import derivation_for   # the routing, as solve asks it

    def settles_for(name: str, names: frozenset) -> bool:   # an UnderdeterminedError: read as no
        derivation_for(lib, name, names, dict(options), diagnose=False)
        return True

    given = [n for n, gv in knowns.items() if not gv.origin]
    found = rescopings(lib, target, knowns, given, lambda names: settles_for(target, names))
    # a bound counts only where it reads a value the user gave (not one the presets alone settle)
    bounds = [b for b in settled_bounds(lib, target, knowns, settles_for)
              if not _settled_by_presets(b, [n for n in knowns if n not in given], settles_for)]
    if not found and not bounds:
        return error
    said = []
    for name, other in found:
        what = ("a per-replica or per-GPU figure", "its sum over the deployment") if lib.quantities[name].total \
            else ("the whole deployment's figure", "one replica's or one GPU's")
        said.append(f"{name} = {knowns[name].text} is {what[0]}; if you meant {other} ({what[1]}), give "
                    f"{other}={knowns[name].text} instead: that settles {target}")
    for name in bounds:
        meaning = lib.quantities[name].description.split(":")[0]
        said.append(f"the values given settle {name} ({meaning}): solve for {name} to get that bound on {target}")
    out = UnderdeterminedError(f"{error}; or: {'; '.join(said)}", error.missing)
    out.rescopings = [list(p) for p in found]
    out.bounds = bounds
    return out


def _settled_by_presets(name: str, looked_up: list[str], settles: Callable[[str, frozenset], bool]) -> bool:
    try:
        return settles(name, frozenset(looked_up))
    except SymcalcError:
        return False
