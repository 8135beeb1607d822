"""A per-unit value given where its deployment-wide total was meant, or the other way round.

One replica's decode rate (``decode_tokens_per_second``) and all replicas' together
(``cluster_decode_tokens_per_second``) have one unit, and people say "50,000 token/s" for
either. A question that one of them leaves open may be settled by the other: "how many GPUs
for 50,000 token/s" given as the replica's rate has no answer, given as the deployment's it
has one (13 replicas). The library declares such pairs in the data (a quantity's ``total``:
the quantity that sums it over a deployment's units); this module finds, for an
underdetermined question, the given values whose other side would settle the target, so the
refusal can say so. Nothing is answered from it: the user chooses.
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


def refusal(error: UnderdeterminedError, lib: Library, target: str, knowns: Mapping[str, GivenValue],
            options: Mapping[str, str]) -> UnderdeterminedError:
    """``error``, with a sentence for each value the user gave whose counterpart would settle
    the target instead (its sets of missing values kept; ``rescopings`` lists the pairs)."""
    from symcalc.query.derivations import derivation_for   # the routing, as solve asks it

    def settles(names: frozenset) -> bool:      # an UnderdeterminedError: rescopings reads it as no
        derivation_for(lib, target, names, dict(options), diagnose=False)
        return True

    found = rescopings(lib, target, knowns, [n for n, gv in knowns.items() if not gv.origin], settles)
    if not found:
        return error
    said = []
    for name, other in found:
        what = ("a per-replica or per-GPU figure", "its sum over the deployment") if lib.quantities[name].total \
            else ("the whole deployment's figure", "one replica's or one GPU's")
        said.append(f"{name} = {knowns[name].text} is {what[0]}; if you meant {other} ({what[1]}), give "
                    f"{other}={knowns[name].text} instead: that settles {target}")
    out = UnderdeterminedError(f"{error}; or: {'; '.join(said)}", error.missing)
    out.rescopings = [list(p) for p in found]
    return out
