"""A run's layout read where the question leaves it open.

The page's solve box sits under the run it describes: a model, hardware, a stack, options and a
layout (tp, pp, dp, the batch shape). A question asked "with the run above" must read that run
as the layout panel does, or the two answer one run two ways. The layout cannot simply be
given with the question's values: given, dp = 64 settles n_gpus = tp x pp x cp x dp before a
throughput target is read, and "the GPUs for 50,000 token/s" would answer 512 where it is 104.
Nor can the whole layout be a preset (a preset's values are known like given ones, with the
same effect): only the values admitted below become one.

What the layout is instead: the run's own stand-ins for the library's defaults. The question
is first solved from its own values; a layout value is admitted where the answer leaned on the
library's default for that quantity (tp = 1 "unless given"), and the question solved again
with it, until no default the layout overrides is left. Only when the question's values do
not settle the answer at all is the whole layout admitted. So the layout never competes with
what the question settles, and every answer that reads a degree reads the run's.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TypeVar

from symcalc.errors import ConflictError, DomainError, QueryError, UnderdeterminedError
from symcalc.library.loading import Library
from symcalc.query.results import Result

R = TypeVar("R", bound=Result)      # its defaults_used are read, its notes added to

# the page's Layout fields (its degrees and batch shape), by their quantities' names
FIELDS = ("tp", "pp", "dp", "cp", "ep", "etp", "virtual_stages", "micro_batch_size", "seq_len",
          "global_batch_size", "n_gpus")


def layout_of(lib: Library, layout: Mapping[str, object]) -> dict[str, object]:
    """``layout`` by the quantities' own names (aliases read).

    Raises UnknownNameError (a name the library does not know) and QueryError (a quantity that
    is not one of the layout's FIELDS)."""
    out: dict[str, object] = {}
    for name, value in layout.items():
        q = lib.quantity(name)
        if q.name not in FIELDS:
            raise QueryError(f"layout: {name} is not one of its fields ({', '.join(FIELDS)}); give it among the "
                             "values")
        out[q.name] = value
    return out


def solve_in_layout(ask: Callable[[dict], R], lib: Library, target: str, typed: set[str],
                    layout: Mapping[str, object]) -> R:
    """The answer of ``ask`` (the question solved with the layout values admitted: a preset of
    their own, which the answer names) with the run's ``layout`` admitted where the question
    leaves it open (module docstring).

    ``typed``: the names of the question's own values (a layout value for one of them, or for
    the target, is never admitted). At most len(layout) + 2 solves, each a cached derivation
    after the first. Raises what ``ask`` raises; a conflict or a broken layout rule found once
    the layout is admitted says that the layout took part."""
    target = lib.quantity(target).name
    typed_names = {lib.quantity(n).name for n in typed}
    open_ = {k: v for k, v in layout_of(lib, layout).items() if k not in typed_names and k != target}
    admitted: dict[str, object] = {}
    result: R | None = None
    for _ in range(len(open_) + 2):
        try:
            result = ask(admitted)
        except UnderdeterminedError:
            if len(admitted) == len(open_):
                raise
            admitted = dict(open_)
            continue
        except (ConflictError, DomainError) as e:
            if not admitted:
                raise
            said = f"{e.message} (with the run's layout: {_listed(admitted)})"
            raise (ConflictError(said, e.conflicts) if isinstance(e, ConflictError) else DomainError(said)) from None
        leaned = [k for k in open_ if k not in admitted and k in result.defaults_used]
        if not leaned:
            break
        admitted.update({k: open_[k] for k in leaned})
    assert result is not None       # the last round answers or raises
    return result


def _listed(values: Mapping[str, object]) -> str:
    return ", ".join(f"{k} = {v}" for k, v in values.items())
