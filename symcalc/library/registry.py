"""The loaded formula library: quantities, options and formulas, and the lookups over them.

A :class:`Library` is what :func:`symcalc.library.loading.load_library` returns: validated
records (symcalc.library.records) and their indexes. It carries no algorithms (routing,
derivation and rendering are functions elsewhere that read it) and imports no sympy: a library
read from the on-disk cache answers lookups at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from symcalc.errors import (
    BadOptionValueError,
    UnknownNameError,
    UnknownOptionError,
    closest_names,
    did_you_mean,
)
from symcalc.library.recent import Recent
from symcalc.library.records import FormulaSpec, OptionSpec, QuantitySpec

# derivations (with their compiled functions) and solved route steps a library keeps, the
# most recently used: a plan asks a few hundred questions, a server is sent shapes without end
DERIVATIONS_KEPT = 2048
STEPS_KEPT = 8192


class Library:
    """The loaded, validated formula library. Build it with :func:`symcalc.library.loading.load_library`."""

    def __init__(self, quantities: dict[str, QuantitySpec], options: dict[str, OptionSpec],
                 formulas: dict[str, FormulaSpec], files: list[Path], meta: dict[str, dict]):
        self.quantities = quantities
        self.options = options
        self.formulas = formulas
        self.files = files
        self.meta = meta
        self.aliases: dict[str, str] = {}
        for q in quantities.values():
            for a in q.aliases:
                self.aliases[a] = q.name
        self.derivation_cache: dict = Recent(DERIVATIONS_KEPT)
        # a route step inverted and compiled, by what it depends on (symcalc.engine.derive): the
        # same step in another derivation (another option combination's) is not inverted again
        self.step_cache: dict = Recent(STEPS_KEPT)
        # propagations over the formulas (symcalc.engine.routing.find_route's memo)
        self.route_cache: dict = {}
        # content hash of what the library was loaded from (see load_library); None when it was
        # built in memory. Derivations are cached on disk under it.
        self.fingerprint: str | None = None

    def __getstate__(self) -> dict:
        # derivations hold compiled functions and are cached on their own; the symbol index
        # is rebuilt on first use (it would import sympy with the library)
        state = dict(self.__dict__)
        state["derivation_cache"] = Recent(DERIVATIONS_KEPT)
        state["step_cache"] = Recent(STEPS_KEPT)
        state["route_cache"] = {}
        state.pop("_symbols", None)
        return state

    @property
    def symbols(self) -> dict:
        """sympy Symbol -> quantity name (for work on expressions; imports sympy on first use)."""
        if "_symbols" not in self.__dict__:
            self._symbols = {q.symbol: q.name for q in self.quantities.values()}
        return self._symbols

    # -- lookups -----------------------------------------------------------------------
    def quantity(self, name: str) -> QuantitySpec:
        """The quantity called ``name`` (or one of its aliases); suggests close names if unknown."""
        if name in self.quantities:
            return self.quantities[name]
        if name in self.aliases:
            return self.quantities[self.aliases[name]]
        if isinstance(name, str) and name in self.options:
            opt = self.options[name]
            raise UnknownNameError(
                f"{name} is an option, not a quantity: set it with --option {name}=... (one of "
                f"{', '.join(opt.said)}; options={{'{name}': ...}} in Python)", [])
        raise UnknownNameError(f"unknown quantity '{name}'."
                               f"{did_you_mean(name, self.all_names())}",
                               closest_names(name, self.all_names()))

    def all_names(self) -> list[str]:
        return list(self.quantities) + list(self.aliases)

    def formula(self, fid: str) -> FormulaSpec:
        if fid in self.formulas:
            return self.formulas[fid]
        raise UnknownNameError(f"unknown formula '{fid}'.{did_you_mean(fid, self.formulas)}",
                               closest_names(fid, self.formulas))

    def option_values(self, given: Mapping[str, object] | None = None) -> dict[str, str]:
        """All options with their effective values: the given ones (validated) and the defaults."""
        values = {name: opt.default for name, opt in self.options.items()}
        for key, raw in (given or {}).items():
            if key not in self.options:
                raise UnknownOptionError(
                    f"unknown option '{key}'.{did_you_mean(key, self.options)} "
                    f"Options: {', '.join(sorted(self.options))}", closest_names(key, self.options))
            opt = self.options[key]
            value = opt.canonical(_option_text(raw))
            if value not in opt.values and opt.pieces and not value.strip("[]()'\" ,+"):
                raise BadOptionValueError(f"option {key}={value} names no value: an empty list of modules "
                                          f"recomputes nothing (Megatron's recompute_modules = [] is --option "
                                          f"recompute=none); name one or more of {', '.join(opt.pieces)}")
            if value not in opt.values:
                several = f", or several of {', '.join(opt.pieces)} joined by +" if opt.pieces else ""
                raise BadOptionValueError(
                    f"option {key}={value} is not allowed.{did_you_mean(value, opt.declared)} "
                    f"Choose one of: {', '.join(opt.declared)}{several}")
            values[key] = value
        return values

    @property
    def stacks(self) -> tuple[str, ...]:
        """Options some of whose values set other options' defaults, restrict their values or
        require conditions of given values (training stacks), in order. Read on every solve:
        found once (the options do not change after loading)."""
        found = self.__dict__.get("_stacks")
        if found is None:
            found = self.__dict__["_stacks"] = tuple(name for name, opt in self.options.items() if opt.links_options)
        return found

    @property
    def requiring(self) -> tuple[str, ...]:
        """Options that are no stack but some of whose values require conditions of given values
        (OptionSpec.only_requires): checked wherever their value is given or used."""
        found = self.__dict__.get("_requiring")
        if found is None:
            found = self.__dict__["_requiring"] = tuple(n for n, opt in self.options.items() if opt.only_requires)
        return found

    @property
    def fractions(self) -> tuple[str, ...]:
        """Quantities that are a measured figure over its datasheet figure (QuantitySpec.ratio_of),
        found once: read on every question that names a preset."""
        found = self.__dict__.get("_fractions")
        if found is None:
            found = self.__dict__["_fractions"] = tuple(n for n, q in self.quantities.items() if q.ratio_of)
        return found

    def said_values(self, links: Mapping[str, Sequence[str]]) -> dict[str, tuple[str, ...]]:
        """Lists of option values (a formula's ``when``, a stack's ``supports``) as a reader is
        told them: the combinations of an option's pieces said once, not one by one."""
        return {k: self.options[k].listed(tuple(v)) if k in self.options else tuple(v) for k, v in links.items()}

    def compute_dtype(self, options: Mapping[str, str]) -> str | None:
        """The dtype the options say the math runs in (picks a hardware preset's dense peak)."""
        for name, opt in self.options.items():
            value = options.get(name, opt.default)
            if value in opt.compute_dtype:
                return opt.compute_dtype[value]
        return None

    def active_formulas(self, options: Mapping[str, str]) -> list[FormulaSpec]:
        """The formulas in force under ``options``: their ``when`` admits the options, and no
        option value in force sets their left side.

        An option value that sets a quantity replaces its law: memory_figure = textbook counts
        no ZeRO-3 gather buffer (zero3_gather_memory = 0), so the law that sizes that buffer
        must neither give it a value nor, run backwards from the 0, a layer's parameters."""
        overridden = set(self.set_by_option(options))
        # (most formulas hold under every option: their empty ``when`` is decided without a call)
        return [f for f in self.formulas.values()
                if (not f.when or f.active(options)) and f.lhs_name not in overridden]

    def coefficient_defaults(self, options: Mapping[str, str]) -> dict[str, tuple[str, str]]:
        """Default values in force under ``options``: quantity -> (value text, why/source).

        An option value's ``sets`` override the quantity's own default.
        """
        out: dict[str, tuple[str, str]] = {}
        for q in self.quantities.values():
            if q.default is not None:
                out[q.name] = (q.default, q.default_source or q.source)
        for name, value, qname, text in self._option_sets(options):
            src = self.options[name].sources.get(value, "")
            out[qname] = (text, f"option {name}={value}" + (f"; {src}" if src else ""))
        return out

    def set_by_option(self, options: Mapping[str, str]) -> dict[str, str]:
        """Quantity -> the option whose value (under ``options``) sets its default, for the
        defaults :meth:`coefficient_defaults` takes from option values."""
        return {qname: name for name, _, qname, _ in self._option_sets(options)}

    def _option_sets(self, options: Mapping[str, str]):
        """(option, its value under ``options``, quantity, value text) for every default an
        option value sets, in the options' order (a later one overrides an earlier)."""
        for name, opt in self.options.items():
            value = options.get(name, opt.default)
            for qname, text in opt.sets.get(value, {}).items():
                yield name, value, qname, text


def _option_text(raw: object) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    return str(raw).strip()
