"""When nothing fits: which of the options the planner searches would make it fit.

An inverse question (the largest micro-batch, the fewest GPUs) can find that the memory parts
it does not solve for already exceed the GPU at any value (Llama 3 8B's 128 GB of model states
with no optimizer sharding). ``symcalc plan`` would still find a layout, because it also
searches the options marked ``searched = true`` in the library (ZeRO stage, recomputation,
sequence parallelism). A solve says the same: each such option's other values are tried
alone, and those under which the question answers are named beside the error, with the
answer each gives. The solver is passed in (``ask``), as in :mod:`symcalc.query.fit`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from symcalc.errors import NoFitError, SymcalcError
from symcalc.library.loading import Library
from symcalc.query.layout_rules import searched_options
from symcalc.units.format import with_unit

MAX_SAID = 3        # the options named; the tries stop there (each is one solve)


def with_fitting_options(error: NoFitError, lib: Library, target: str, given: Mapping[str, object],
                         options: Mapping[str, object] | None, ask: Callable, **presets) -> NoFitError:
    """``error`` with the searched option values under which ``target`` answers (at most
    MAX_SAID, in the library's order), or unchanged when none does. O(values of the searched
    options) solves, on the error's path only."""
    chosen = dict(options or {})
    current = lib.option_values({k: v for k, v in chosen.items() if k in lib.options})
    found: list[str] = []
    for name, values in searched_options(lib).items():
        if name in chosen:
            continue
        for value in values:
            if value == current.get(name) or len(found) >= MAX_SAID:
                continue
            try:
                r = ask(target, dict(given), options={**chosen, name: value}, library=lib, on_bounds="flag", **presets)
            except SymcalcError:
                continue
            if not _answers_and_fits(r):
                continue
            found.append(f"--option {name}={value} ({target} = {with_unit(r.value, r.unit)})")
            break       # the first value of an option that fits is the one to name
    searched = len(found)
    found += _wider_tp(lib, target, given, chosen, ask, presets) if len(found) < MAX_SAID else []
    if not found:
        return error
    error.message += (f"; it fits with {' or '.join(found)}{', each alone' if len(found) > 1 else ''}"
                      f"{' (symcalc plan searches these options)' if searched else ''}")
    error.args = (error.message,)
    return error


def _wider_tp(lib: Library, target: str, given: Mapping[str, object], chosen: dict, ask: Callable,
              presets: dict) -> list[str]:
    """The given tensor-parallel degree doubled, and doubled again, up to 8 times (it splits
    the weights, whose share is often what does not fit: a 70B replica at tp 1): the first that
    answers and fits, as ``tp=2 (n_gpus = 16)``; [] when tp is not given or none does. At
    most three solves."""
    key = next((k for k in given if lib.quantity(k).name == "tp"), None)
    try:
        tp = int(float(str(given[key]))) if key is not None else 0
    except ValueError:
        return []
    for wider in (2 * tp, 4 * tp, 8 * tp) if tp >= 1 else ():
        try:
            r = ask(target, {**given, key: wider}, options=chosen, library=lib, on_bounds="flag", **presets)
        except SymcalcError:
            continue
        if not _answers_and_fits(r):
            continue
        return [f"tp={wider} ({target} = {with_unit(r.value, r.unit)})"]
    return []


def _answers_and_fits(r) -> bool:
    """Whether a trial answer is one to name: a number, at least one of a whole quantity (not a
    micro-batch of 0), and its run fits (its fit finding, where it has one)."""
    if isinstance(r.value, str) or not r.value >= (1 if r.quantity.whole else 0):
        return False
    return all(f.values.get("fits", True) for f in r.findings if f.kind == "fit")
