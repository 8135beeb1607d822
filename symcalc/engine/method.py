"""How a derivation step was solved: the one vocabulary the engine, the checks and the
renderers share (a string enum: it prints and serialises as its value)."""

from __future__ import annotations

from enum import Enum


class Method(str, Enum):
    EXPLICIT = "explicit"        # the formula already gives the unknown
    REARRANGED = "rearranged"    # one equation inverted by sympy
    BLOCK = "block"              # simultaneous equations solved by sympy
    NUMERIC = "numeric"          # roots found numerically (a torn block too)
    ALGORITHM = "algorithm"      # a registered procedure, evaluated in Python

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    @property
    def rearranges(self) -> bool:
        """The step shows the equation rearranged for its unknown(s)."""
        return self in (Method.REARRANGED, Method.BLOCK)

    @property
    def runs_forward(self) -> bool:
        """Nothing was solved backwards: the formula (or procedure) gives the unknown as written."""
        return self in (Method.EXPLICIT, Method.ALGORITHM)
