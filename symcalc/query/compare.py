"""Scenario comparison: one quantity solved twice, side A and side B, and how they differ.

    >>> import symcalc
    >>> c = symcalc.compare("model_state_memory", n_params=7e9, dp=64,
    ...                     options={"zero_stage": 2}, vs_options={"zero_stage": 3})
    >>> print(c)
    model_state_memory: 15.53 GB (zero_stage=2) vs 1.75 GB (zero_stage=3)

Side A is the question as :func:`symcalc.solve` would take it; side B is the same question
with some given values, options or presets changed. Both go through ``solve`` unchanged, so
each side keeps its own derivation, defaults and warnings; this module only builds side B,
says which inputs differ, and computes B - A and B / A from the two answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pint

from symcalc import units
from symcalc.errors import QueryError, SymcalcError, UnknownNameError, closest_names
from symcalc.findings import Finding
from symcalc.formats import Rendered, render
from symcalc.library.loading import Library, default_library
from symcalc.query.implied import resolve_options
from symcalc.query.presetvalues import presets_of
from symcalc.query.question import option_mapping, output_unit, read_given
from symcalc.query.results import Result
from symcalc.query.solve import solve
from symcalc.units.format import with_unit

PRESET_KINDS = ("hardware", "model")


@dataclass(frozen=True)
class InputDifference:
    """One input that is not the same on both sides (None: not given on that side)."""

    name: str
    kind: str            # "value" | "option" | "preset"
    a: str | None
    b: str | None

    def shown(self, side: str) -> str:
        """``zero_stage=3``, ``n_gpus=64``, ``hardware=h100``; ``name=(not given)`` when absent."""
        text = self.a if side == "a" else self.b
        return f"{self.name}={text if text is not None else '(none)' if self.kind == 'preset' else '(not given)'}"


@dataclass
class Comparison(Rendered):
    """Two answers to the same question and how they differ (B - A, B / A).

    The difference and ratio are taken from the values as shown (rounded the quantity's way
    for whole numbers, so 94 vs 188 GPUs has ratio 2), in side A's unit; both sides are
    always solved for the same target in the same unit.
    """

    TEXT_FORMAT = "comparison_text"
    JSON_FORMAT = "comparison_json"

    target: str
    a: Result
    b: Result
    differences: list[InputDifference]
    same: dict[str, str] = field(default_factory=dict)     # inputs equal on both sides: name -> text

    # -- the two values and how they differ ---------------------------------------------
    @property
    def unit(self) -> str:
        return self.a.unit

    @property
    def numeric(self) -> bool:
        """False for text quantities (a roofline bound's name): no difference or ratio."""
        return self.a.quantity.kind != "text"

    def _pair(self):
        a = np.asarray(self.a.rounded_base, dtype=float) / self.a.factor
        b = np.asarray(self.b.rounded_base, dtype=float) / self.a.factor
        return a, b

    @property
    def difference(self) -> pint.Quantity | None:
        """B - A in the target's unit (None for text quantities)."""
        if not self.numeric:
            return None
        a, b = self._pair()
        return _quantity(b - a, self.unit)

    @property
    def ratio(self) -> pint.Quantity | None:
        """B / A, dimensionless; None when A is 0 (or the quantity is text). For arrays, NaN
        where A is 0 (``notes`` says where)."""
        if not self.numeric:
            return None
        a, b = self._pair()
        zero = a == 0
        if np.all(zero):
            return None
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(zero, np.nan, b / np.where(zero, 1.0, a))
        return units.Q(_plain_number(r))

    @property
    def percent_change(self) -> object | None:
        """(B / A - 1) x 100: a number (or array) in per cent; None when the ratio is undefined."""
        r = self.ratio
        return None if r is None else _plain_number((np.asarray(r.magnitude, dtype=float) - 1) * 100)

    @property
    def notes(self) -> list[str]:
        """Why a difference or ratio is missing or partial."""
        if not self.numeric:
            return [f"{self.target} is text: there is no difference or ratio"]
        a, _ = self._pair()
        zero = a == 0
        if not np.any(zero):
            return []
        if a.ndim == 0 or np.all(zero):
            return ["ratio B / A undefined: A is 0"]
        return [f"ratio B / A undefined at {int(zero.sum())} of {zero.size} points, where A is 0"]

    # -- what differs --------------------------------------------------------------------
    def label(self, side: str) -> str:
        """The inputs of one side ("a" or "b") that differ from the other: ``zero_stage=3``.

        A value given only on the other side shows what this side used instead, when its
        derivation has it: ``recompute_multiplier=1 (default)``.
        """
        result = self.a if side == "a" else self.b
        parts = []
        for d in self.differences:
            if d.kind == "value" and (d.a if side == "a" else d.b) is None and d.name in result.values:
                how = "default" if d.name in result.defaults_used else "computed"
                parts.append(f"{d.name}={with_unit(*result.display(d.name))} ({how})")
            else:
                parts.append(d.shown(side))
        return ", ".join(parts)

    @property
    def label_a(self) -> str:
        return self.label("a")

    @property
    def label_b(self) -> str:
        return self.label("b")

    @property
    def preset_values(self) -> list[InputDifference]:
        """Values a preset supplied that differ between the sides (the H100's peak vs the
        A100's): what a change of preset really changed, for the derivations that use them."""
        out = []
        for name in dict.fromkeys([*self.a.given, *self.b.given]):
            ga, gb = self.a.given.get(name), self.b.given.get(name)
            from_preset = any(g is not None and g.origin for g in (ga, gb))
            used = (ga is not None and name not in self.a.unused) or (gb is not None and name not in self.b.unused)
            if from_preset and used and not (ga and gb and _equal(ga.magnitude, gb.magnitude)):
                out.append(InputDifference(name, "value", ga.text if ga else None, gb.text if gb else None))
        return out

    @property
    def warnings(self) -> list[tuple[str, str]]:
        """(side, warning) for both sides: "A" or "B", and the solver's warning."""
        return [("A", w) for w in self.a.warnings] + [("B", w) for w in self.b.warnings]

    @property
    def findings(self) -> list[tuple[str, Finding]]:
        """(side, finding) for both sides: the records behind the warnings and violations."""
        return [("A", f) for f in self.a.findings] + [("B", f) for f in self.b.findings]

    @property
    def violations(self) -> list[tuple[str, str]]:
        """(side, out-of-bounds message): computed values outside their quantity's bounds."""
        return [("A", v) for v in self.a.violations] + [("B", v) for v in self.b.violations]

    # -- renderers (text(), as_dict(), json() from Rendered) ------------------------------
    def __str__(self) -> str:
        return render("comparison_headline", self)

    def __repr__(self) -> str:
        return f"<Comparison {self}>"

    def _repr_html_(self) -> str:
        """Jupyter: the two sides, what differs and what they share, as a table."""
        return render("comparison_html", self)

    def plot(self, path=None):
        """Draw the two sides as bars (split by the target's breakdown when it has one) into
        ``path`` (.png, .svg or .pdf); returns the matplotlib Figure. With no path, drawn on
        pyplot's current figure (inline in a notebook) and written nowhere."""
        return render("comparison_plot", self, path)


@dataclass
class VsChanges:
    """What ``--vs`` pairs change on side B, sorted by kind (see :func:`split_vs`)."""

    given: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    hardware: str | None = None
    model: str | None = None


def split_vs(library: Library, pairs: Mapping[str, Any]) -> VsChanges:
    """Sort NAME=VALUE changes of side B into presets, options and given values.

    ``hardware`` and ``model`` switch a preset; an option key sets that option; a quantity
    name or alias sets a given value. Anything else is an error naming the closest names, so
    a typo cannot silently become an unused value.

    Returns
    -------
    VsChanges
        The presets, options and given values side B changes.

    Raises
    ------
    UnknownNameError
        A name is no preset kind, option or quantity.
    """
    out = VsChanges()
    for name, value in pairs.items():
        if name in PRESET_KINDS:
            setattr(out, name, value)
        elif name in library.options:
            out.options[name] = value
        elif name in library.quantities or name in library.aliases:
            out.given[name] = value
        else:
            pool = [*PRESET_KINDS, *library.options, *library.all_names()]
            near = closest_names(name, pool)
            hint = f" Did you mean: {', '.join(near)}?" if near else ""
            raise UnknownNameError(f"--vs {name}: not an option, a quantity, hardware or model.{hint} "
                                   "See `symcalc list options` and `symcalc list quantities`", near)
    return out


def compare(target: str, given: Mapping[str, object] | None = None, /, *,
            options: Mapping[str, object] | None = None, vs: Mapping[str, object] | None = None,
            vs_options: Mapping[str, object] | None = None, hardware: str | None = None,
            model: str | None = None, vs_hardware: str | None = None, vs_model: str | None = None,
            to: str | None = None, library: Library | None = None, on_bounds: str = "flag",
            **values) -> Comparison:
    """Solve ``target`` for side A and for side B and compare the two answers.

    Side A takes ``given``/keyword values, ``options``, ``hardware`` and ``model`` exactly as
    :func:`symcalc.solve` does. Side B is side A with ``vs`` (given values, aliases allowed, and
    as on the command line options and ``hardware``/``model``), ``vs_options``, ``vs_hardware``
    and ``vs_model`` put on top. At least one input must
    differ. ``on_bounds`` defaults to ``"flag"``, unlike ``solve``: a comparison is often
    made to see which scenario breaks a bound (which one does not fit in memory), so an
    out-of-bounds side is kept and flagged (``comparison.violations``) instead of hiding
    the other side behind an error; ``"raise"`` restores solve's behaviour.

    Returns
    -------
    Comparison
        Both answers, with what differs between the sides and what they share.

    Raises
    ------
    QueryError
        The two sides are the same, the target is not a name or the given values no mapping.
    SymcalcError
        Any error of :func:`symcalc.solve` on either side, its message saying which side.
    """
    lib = library or default_library()
    if not isinstance(target, str):
        raise QueryError(f"the target is a quantity name, got {target!r}")
    output_unit(lib.quantity(target), to)     # a bad --to is the question's fault, not one side's
    if given is not None and not isinstance(given, Mapping):
        raise QueryError("given values must be a mapping of name -> value")
    given_a = _canonical(lib, [*(given or {}).items(), *values.items()])
    # ``vs`` may also name options and presets, as --vs does (vs={"zero_stage": 3, "hardware": "h100"})
    changes = split_vs(lib, {str(k): v for k, v in (vs or {}).items()}) if isinstance(vs, Mapping) else VsChanges()
    given_b = {**given_a, **_canonical(lib, list(changes.given.items()))}
    options_a = dict(option_mapping(options) or {})
    options_b = {**options_a, **dict(option_mapping({**changes.options, **(vs_options or {})}) or {})}
    presets_a: dict[str, Any] = {"hardware": hardware, "model": model}
    presets_b: dict[str, Any] = {"hardware": vs_hardware or changes.hardware or hardware,
                                 "model": vs_model or changes.model or model}

    differences, same = _differences(lib, (given_a, options_a, presets_a), (given_b, options_b, presets_b))
    if not differences:
        raise QueryError("both sides are the same: side B must change a given value, an option or a preset "
                         "(e.g. vs_options={'zero_stage': 3}, or --vs zero_stage=3)")
    sides = []
    for side, (g, o, p) in (("a", (given_a, options_a, presets_a)), ("b", (given_b, options_b, presets_b))):
        try:
            sides.append(solve(target, g, options=o, to=to, library=lib, on_bounds=on_bounds, **p))
        except SymcalcError as e:
            label = ", ".join(d.shown(side) for d in differences)
            e.message = f"side {side.upper()} ({label}): {e.message}"
            e.args = (e.message,)
            raise
    return Comparison(target=sides[0].target, a=sides[0], b=sides[1], differences=differences, same=same)


def _canonical(lib: Library, items: list[tuple[str, object]]) -> dict[str, object]:
    """Given values keyed by canonical quantity name (so ``vs={"Psi": ...}`` replaces a
    given ``n_params``); a name given twice on one side is an error."""
    read_given(lib, items)            # validates names, values and duplicates, with the usual messages
    return {lib.quantity(name).name: value for name, value in items}


def _differences(lib: Library, side_a: tuple, side_b: tuple) -> tuple[list[InputDifference], dict[str, str]]:
    """The inputs that differ between the sides (values compared by magnitude, so 80 GB and
    80e9 byte are the same; options by their effective values, presets' implied options
    included), and the inputs both share."""
    (given_a, options_a, presets_a), (given_b, options_b, presets_b) = side_a, side_b
    read_a, read_b = read_given(lib, given_a), read_given(lib, given_b)
    keys_a = {k: _preset_key(k, v) for k, v in presets_a.items()}
    keys_b = {k: _preset_key(k, v) for k, v in presets_b.items()}
    diffs: list[InputDifference] = []
    same: dict[str, str] = {}
    for kind in PRESET_KINDS:
        key_a, key_b = keys_a[kind], keys_b[kind]
        if key_a != key_b:
            diffs.append(InputDifference(kind, "preset", key_a, key_b))
        elif key_a:
            same[kind] = key_a
    for name in dict.fromkeys([*read_a, *read_b]):
        va, vb = read_a.get(name), read_b.get(name)
        if va is not None and vb is not None and _equal(va.magnitude, vb.magnitude):
            same[name] = va.text
        else:
            diffs.append(InputDifference(name, "value", va.text if va else None, vb.text if vb else None))
    eff_a = _effective_options(lib, options_a, presets_a)
    eff_b = _effective_options(lib, options_b, presets_b)
    for key in lib.options:
        if eff_a[key] != eff_b[key]:
            diffs.append(InputDifference(key, "option", eff_a[key], eff_b[key]))
        elif key in options_a or key in options_b:
            same[key] = eff_a[key]
    return diffs, same


def _preset_key(kind: str, name: str | None) -> str | None:
    if not name:
        return None
    return presets_of(name, None)[0].key if kind == "hardware" else presets_of(None, name)[0].key


def _effective_options(lib: Library, explicit: Mapping, presets: dict) -> dict[str, str]:
    """Every option's value on one side, as solve resolves it: explicit over preset over a
    stack's default over the option's own default."""
    implied = {k: v for p in presets_of(presets["hardware"], presets["model"]) for k, v in p.options.items()}
    return resolve_options(lib, explicit, implied, {}).values


def _equal(x, y) -> bool:
    if isinstance(x, str) or isinstance(y, str):
        return x == y
    return bool(np.shape(x) == np.shape(y) and np.array_equal(np.asarray(x, dtype=float), np.asarray(y, dtype=float)))


def _plain_number(x):
    arr = np.asarray(x, dtype=float)
    return float(arr) if arr.ndim == 0 else arr


def _quantity(x, unit: str) -> pint.Quantity:
    x = _plain_number(x)
    return units.Q(x, unit) if unit else units.Q(x)
