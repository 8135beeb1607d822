"""What an answer tells its reader besides the value: warnings and bound violations as records.

A :class:`Finding` is data, never a sentence: its ``kind`` (one of :data:`KINDS`), the quantity
it is about, and the values a sentence needs. The sentences are the renderers' alone
(:mod:`symcalc.render.findings`, reached through the ``finding`` format of
:mod:`symcalc.formats`); code that acts on a finding tests its ``kind``, never the words
(a sweep leaves out the over-capacity warning its capacity mask already says).

It sits beside ``errors.py``, below every layer, because every layer finds something: a preset
read from config.json (library), several admissible roots (engine), the solver (query).
"""

from __future__ import annotations

from dataclasses import dataclass, field

# kind -> what it records, and the keys of ``values`` its sentence reads. Numbers are in the
# display unit ``values["unit"]`` names unless said otherwise; "bounds" is {lo, hi, lo_open,
# hi_open, percent} in display terms (x 100 for a percentage).
KINDS = {
    # warnings
    "several_roots": "more than one root of a step lies in range; the first was taken "
                     "(related: the step's unknowns; formulas[0]: its first formula)",
    "not_whole": "a derived quantity meant to be a whole number is not one (value, base units)",
    "rounded_nearest": "the target was rounded to the nearest whole number though far from one (value)",
    "over_capacity": "the answer exceeds the capacity it must fit in (value, capacity, excess, unit, "
                     "points and of for arrays, largest: [part, value] or None; related[0]: the capacity)",
    "not_used": "given values no formula on the route needs (related: their names)",
    "option_idle": "an option given where another option makes it mean nothing (option, value; needs: the "
                   "other option, allowed: its values that would, actual: its value here)",
    "found_numerically": "a step solved by numeric root finding (related: its unknowns; formulas; "
                         "torn: True with equations and follow when one quantity, the finding's, was "
                         "searched and the others follow)",
    "conflict": "a given value disagrees with what the others give (given, computed, unit, rel_error, "
                "rtol, from: names, leaning: [[name, value], ...])",
    "unused_disagrees": "given values the answer does not use (related), which the others give otherwise "
                        "only with defaults the answer does not lean on (as conflict, for the first of them; "
                        "leaning: those defaults)",
    "preset": "a caveat of a model read from a config.json (file; what: 'latent_attention' or "
              "'dense_layers' with layers)",
    "implausible": "a given value far outside real hardware and models (value, unit, side: 'above' or "
                   "'below', limit; slips: [[written, value], ...], the likely meant value, written as "
                   "given with bits and bytes swapped, or None for a unit prefix off by 1000; answer: True "
                   "when it is the answer that is, from given values each plausible)",
    "limits_clash": "given limits pull a whole-number answer both ways (rounded: how it rounded instead)",
    "reported": "a quantity the derivation's data asks to be stated beside the answer (value, unit, "
                "description): which pipeline stage a memory figure is that of",
    "above_limit": "a known or solved value above a limit it may exceed at a cost, as warn_above in the data says "
                   "(value, unit, limit: its name, limit_value, limit_unit, description, origin; solved: True for a "
                   "value the derivation computed, with points and of for arrays): a context longer than "
                   "max_position_embeddings",
    "layout_rule": "given layout degrees break a structure rule the planner keeps, marked given = \"warn\" in "
                   "formulas/planner/space.toml (rule, reason, shown: the values it reads; points and of for arrays)",
    "rounded_to_rule": "a whole-number layout degree solved for was rounded to the nearest value that keeps the "
                       "structure rules (value: exact, rounded, was: the plain rounding, rules and reasons it broke, "
                       "how)",
    "fit": "the memory of the answer's workload at the answer's own values against its capacity less the margin "
           "given (symcalc.query.fit: workload, option, fits, value: the amount (its largest for arrays), capacity, "
           "margin or None, limit, unit, excess, free, largest: [part, value] or None, defaults: whole-number inputs "
           "taken by default, points and of for arrays; related: capacity and margin; mask: where it does not fit)",
    "rescoped": "a given value read as its counterpart (a replica's rate as the deployment's), the only reading "
                "that settles the target (given: the name it was given as, text, target; total: True when the "
                "given name is the per-unit side); or the target answered by the one quantity declared to answer "
                "for it that the values settle (asked: the target asked for, meaning: what the finding's quantity, the answer, is)",
    "published": "the target is a preset's published value (origin)",
    "looked_up": "the target is looked up in a preset: nothing given determines it (origin)",
    "given_target": "the target itself is given: the answer is that value converted",
    "unmeasured": "a preset value the answer uses was derived or assumed, not measured (value: as written, "
                  "preset: e.g. 'hardware h100_sxm', basis: 'derived' or 'assumed', source)",
    "infeasible_points": "points of a sweep that are not feasible, and why (why: 'no_solution', "
                         "'out_of_bounds', 'rounds_outside', 'over_capacity', 'above' or 'rule'; points: how many; "
                         "domain: the quantity's bounds as text; capacity, value, unit: what it must fit in; "
                         "other: the quantity a given value exceeds though it never can; rule, reason: the "
                         "layout rule broken)",
    # violations (result.violations; on_bounds="raise" raises the first)
    "out_of_bounds": "a computed value outside its quantity's bounds (value or None for NaN, unit, "
                     "points and of for arrays, bounds; related: the given values it follows from; "
                     "formulas: the step's)",
    "rounds_outside": "a whole-number answer rounds outside its bounds (value, rounded, unit, how, bounds)",
}

VIOLATIONS = frozenset({"out_of_bounds", "rounds_outside"})


@dataclass(frozen=True)
class Finding:
    """One thing to tell the reader, as data. ``values`` holds plain numbers, names and units
    (see :data:`KINDS` for each kind's keys); ``mask`` is, for an array answer, where the finding
    holds (a bool array; None for a single value or where it does not apply)."""

    kind: str
    quantity: str | None = None
    values: dict = field(default_factory=dict)
    related: tuple[str, ...] = ()        # other quantities it names (a capacity, the sources)
    formulas: tuple[str, ...] = ()       # formula ids it names
    mask: object = field(default=None, compare=False)

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"unknown finding kind {self.kind!r}")

    @property
    def violation(self) -> bool:
        """True for a value outside its bounds (``result.violations``), False for a warning."""
        return self.kind in VIOLATIONS
