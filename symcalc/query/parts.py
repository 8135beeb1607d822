"""What a total is made of: the terms of a sum and their values, for "what does not fit" messages.

When a layout does not fit, the useful sentence names the part that is too big ("the model
states alone need 1129 GB of an 80 GB GPU"), not the negative remainder a backwards solve
arrives at ("activation_memory = -1049 GB"). The library writes totals as sums
(``total_memory_per_gpu = model_state_memory + activation_memory + buffer_memory``); this module
reads such a formula and the values of a derivation and returns the parts, largest first.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Parts:
    """A total and its parts (base units), largest part first."""

    total: str
    total_value: float
    parts: tuple[tuple[str, float], ...]

    @property
    def largest(self) -> tuple[str, float] | None:
        return self.parts[0] if self.parts else None


def sum_parts(library, formula, values: dict, leave_out: str | None = None) -> Parts | None:
    """The parts of ``formula`` when it reads ``total = term + term + ...`` with one quantity in
    each term, evaluated at ``values`` (scalars; the first element of arrays); ``leave_out``
    names a part not to list (the one a backwards solve was after). None for any other shape.
    O(size of the formula). A formula marked ``breakdown`` is a plain sum of its named parts:
    read from the values, without sympy."""
    if formula.breakdown:
        total_name = formula.lhs_name
        if total_name not in values or any(n not in values for n in formula.breakdown):
            return None
        parts = sorted(((n, _first(values[n])) for n in formula.breakdown if n != leave_out), key=lambda p: -p[1])
        return Parts(total_name, _first(values[total_name]), tuple(parts))
    import sympy  # start-up: only a message about what does not fit reads a sum

    from symcalc.library.compiling import unit_factors  # (sympy's, as above)
    sides = [(formula.lhs, formula.rhs), (formula.rhs, formula.lhs)]
    for total, other in sides:
        if not (isinstance(total, sympy.Symbol) and isinstance(other, sympy.Add)):
            continue
        total_name = library.symbols.get(total)
        if total_name is None or total_name not in values:
            return None
        parts = []
        for term in other.args:
            names = [library.symbols[s] for s in term.free_symbols if s in library.symbols]
            if len(names) != 1 or names[0] not in values:
                return None
            if names[0] == leave_out:
                continue
            subs = {library.quantities[names[0]].symbol: _first(values[names[0]]), **unit_factors(term)}
            try:
                parts.append((names[0], float(term.subs(subs))))
            except (TypeError, ValueError):
                return None
        parts.sort(key=lambda p: -p[1])
        return Parts(total_name, _first(values[total_name]), tuple(parts))
    return None


def parts_of(library, derivation, values: dict, name: str, leave_out: str | None = None) -> Parts | None:
    """The parts of ``name`` as the derivation computed it (its step's formula is a sum), or None.

    A part that is itself a breakdown sum in the derivation is replaced by its own parts (the
    memory total is the tensors' sum plus the allocator's reserve: the largest part is a tensor,
    not the sum of them). O(steps x depth)."""
    sums: dict = {}
    for step in derivation.steps:
        if len(step.formulas) == 1:
            for unknown in step.unknowns:
                sums.setdefault(unknown, step.formulas[0])
    if name not in sums:
        return None
    top = sum_parts(library, sums[name], values, leave_out)
    if top is None:
        return None
    flat: list[tuple[str, float]] = []
    pending = list(top.parts)
    while pending:
        part, value = pending.pop()
        inner = sum_parts(library, sums[part], values, leave_out) if part in sums and sums[part].breakdown else None
        if inner is not None and inner.parts and math.isclose(inner.total_value, value, rel_tol=1e-9):
            pending.extend(inner.parts)
        else:
            flat.append((part, value))
    flat.sort(key=lambda p: -p[1])
    return Parts(top.total, top.total_value, tuple(flat))


def _first(v) -> float:
    a = np.asarray(v, dtype=float)
    return float(a.flat[0]) if a.ndim else float(a)
