"""A per-unit value given where its deployment-wide total was meant, or the other way round;
and a related question that its values settle where the question itself has no answer.

One replica's decode rate (``decode_tokens_per_second``) and all replicas' together
(``cluster_decode_tokens_per_second``) have one unit, and people say "50,000 token/s" for
either. A question that one of them leaves open may be settled by the other: "how many GPUs
for 50,000 token/s" given as the replica's rate has no answer, given as the deployment's it
has one (13 replicas). The library declares such pairs in the data (a quantity's ``total``:
the quantity that sums it over a deployment's units); this module finds, for an
underdetermined question, the given values whose other side would settle the target, so the
refusal can say so. Likewise a quantity may declare the one people ask it by (``answers_for``):
"n_params for 100 token/s a sequence" has no answer without the model's shapes, but the most
parameters that rate allows (``largest_servable_params``) has one, and the refusal names it.
Where exactly one given value settles the question read as its counterpart, and nothing else
does, the question is answered so (:func:`rescoped`), and the answer says so first: "how many
GPUs for 50,000 token/s" means the deployment's rate, since one replica's has no GPU count.
Likewise, where the values settle exactly one related quantity and no reading, that quantity
is the answer, and it says which was asked. With two such readings, or a related quantity
besides, nothing is answered: the user chooses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from symcalc.errors import SymcalcError, UnderdeterminedError
from symcalc.findings import Finding
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


def related_reads(lib: Library, target: str, known: Iterable[str], given: Iterable[str],
                  reads: Callable[[str, frozenset], Iterable[str]]) -> dict[str, frozenset]:
    """The quantities people ask by ``target``'s name (a quantity's ``answers_for``: the most
    parameters a decode rate allows, for n_params) that the ``known`` names settle through a
    route that reads one of the ``given`` (the user's own values, not only presets and
    defaults); ``reads(name, names)`` is what the route to ``name`` reads (a routing without
    diagnosis; an error when there is none), each with the ``given`` values its route reads. One
    routing per related quantity."""
    names, mine = frozenset(known), set(given)
    out = {}
    for name, spec in sorted(lib.quantities.items()):
        if spec.answers_for != target or name in names:
            continue
        try:
            used = frozenset(mine & set(reads(name, names)))
        except SymcalcError:
            continue
        if used:
            out[name] = used
    return out


def refusal(error: UnderdeterminedError, lib: Library, target: str, knowns: Mapping[str, GivenValue],
            options: Mapping[str, str]) -> UnderdeterminedError:
    """``error``, with a sentence for each value the user gave whose counterpart would settle
    the target instead (its sets of missing values kept; ``rescopings`` lists the pairs), and
    for each related quantity that the values settle (``related``)."""
    from symcalc.query.derivations import derivation_for   # the routing, as solve asks it

    def reads(name: str, names: frozenset) -> tuple[str, ...]:   # an UnderdeterminedError: no route
        return derivation_for(lib, name, names, dict(options), diagnose=False)[0].route.given

    def settles(names: frozenset) -> bool:
        reads(target, names)
        return True

    given = [n for n, gv in knowns.items() if not gv.origin]
    found = rescopings(lib, target, knowns, given, settles)
    used = related_reads(lib, target, knowns, given, reads)
    related = list(used)
    if not found and not related:
        return error
    said = []
    for name, other in found:
        what = ("a per-replica or per-GPU figure", "its sum over the deployment") if lib.quantities[name].total \
            else ("the whole deployment's figure", "one replica's or one GPU's")
        said.append(f"{name} = {knowns[name].text} is {what[0]}; if you meant {other} ({what[1]}), give "
                    f"{other}={knowns[name].text} instead: that settles {target}")
    for name in related:
        meaning = lib.quantities[name].description.split(":")[0]
        said.append(f"the values given settle {name} ({meaning}), which may be what you meant: solve for {name}")
    out = UnderdeterminedError(f"{error}; or: {'; '.join(said)}", error.missing)
    out.rescopings = [list(p) for p in found]
    out.related = related
    # the one related quantity whose route reads every given value another one reads (a
    # deployment's rate when the replicas are given, not one replica's): answers_for's pick
    widest = [n for n in related if all(used[n] >= used[m] for m in related)]
    out.answer_instead = widest[0] if len(widest) == 1 else None
    return out


def rescoped(lib: Library, error: UnderdeterminedError, typed: Mapping[str, GivenValue], target: str
             ) -> tuple[dict[str, GivenValue], Finding] | None:
    """The given values with the one :func:`refusal` found whose counterpart alone settles
    ``target`` given as that counterpart, and the finding that says so; None unless the refusal
    found exactly one such value and no related quantity (then the user chooses)."""
    pairs = getattr(error, "rescopings", [])
    if len(pairs) != 1 or getattr(error, "related", []):
        return None
    name, other = pairs[0]
    gv = typed[name]
    values = {k: v for k, v in typed.items() if k != name}
    values[other] = GivenValue(other, gv.text, gv.magnitude)
    return values, Finding("rescoped", other, {"given": name, "text": gv.text, "target": target,
                                               "total": bool(lib.quantities[name].total)})


def answered_instead(error: UnderdeterminedError) -> str | None:
    """The related quantity :func:`refusal` found the values settle (a quantity that
    ``answers_for`` the target: the most parameters a decode rate allows, for n_params) whose
    route reads every given value the others read, when no given value could be read
    otherwise; None when there is none, or no one such."""
    return None if getattr(error, "rescopings", []) else getattr(error, "answer_instead", None)
