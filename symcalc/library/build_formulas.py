"""Reading ``[[formulas]]`` and ``[[algorithms]]`` entries into FormulaSpec records: each
equation parsed by the whitelist parser (evaluated, for solving, and as written, for display),
checked for size and dimensions, classified for solvability and printed once as cited.
"""

from __future__ import annotations

import sympy
from sympy.core.parameters import evaluate as sympy_evaluate

from symcalc import units
from symcalc.errors import LibraryError, did_you_mean
from symcalc.library.algorithms import REGISTRY
from symcalc.library.build_fields import NAME_RE, _check_keys, _check_texts, _is_unit_name, _require_table
from symcalc.library.exprparse import ParseError, UnitSymbol, parse_equation, unit_symbol
from symcalc.library.exprsize import TooComplex, check_equation
from symcalc.library.printing import latex
from symcalc.library.records import FormulaSpec, OptionSpec, QuantitySpec
from symcalc.library.registry import _option_text
from symcalc.library.solvability import classify_all
from symcalc.units import describe_dimension as show
from symcalc.units.dims import DimensionMismatch, dimension_of

FORMULA_KEYS = {"id", "title", "equation", "source", "when", "notes", "default", "forward_only", "from_given",
                "asked_backwards",
                "consequence", "approximate", "solved_for", "breakdown", "reports"}
ALGORITHM_KEYS = {"id", "title", "function", "inputs", "output", "source", "when", "notes"}


def _load_when(table: dict, where: str, options: dict[str, OptionSpec]) -> dict[str, tuple[str, ...]]:
    when: dict[str, tuple[str, ...]] = {}
    for key, allowed in _require_table(table.get("when", {}), f"{where}: when").items():
        if key not in options:
            raise LibraryError(f"{where}: 'when' names unknown option '{key}'.{did_you_mean(key, options)}")
        if isinstance(allowed, dict):
            # { except = [...] }: every other value, so that a new value of the option is not
            # silently left out of a list written out by hand (precision: all but FP8 and FP4)
            if set(allowed) != {"except"} or not isinstance(allowed["except"], list):
                raise LibraryError(f"{where}: when.{key} is a value, a list of values or {{ except = [...] }}")
            left_out = tuple(_option_text(v) for v in allowed["except"])
            for v in left_out:
                if v not in options[key].values:
                    raise LibraryError(f"{where}: option {key} has no value '{v}' (values: {list(options[key].values)})")
            allowed = [v for v in options[key].values if v not in left_out]
        vals = tuple(_option_text(v) for v in (allowed if isinstance(allowed, list) else [allowed]))
        for v in vals:
            if v not in options[key].values:
                raise LibraryError(f"{where}: option {key} has no value '{v}' (values: {list(options[key].values)})")
        when[key] = options[key].admitted(vals)
    return when


def _entry(table, file: str, kind: str, allowed: set[str], required: tuple[str, ...]) -> tuple[dict, str, str]:
    """Common checks of a [[formulas]] or [[algorithms]] entry: a table, a snake_case id, only
    known keys, the required text fields. Returns (table, id, where-prefix for messages)."""
    table = _require_table(table, f"{file}: a [[{kind}s]] entry")
    fid = table.get("id")
    if not isinstance(fid, str) or not NAME_RE.match(fid):
        raise LibraryError(f"{file}: every {kind} needs an id in snake_case (got {fid!r})")
    where = f"{file}: {kind} '{fid}'"
    _check_keys(table, allowed, where)
    for key in required:
        if not isinstance(table.get(key), str) or not table[key].strip():
            raise LibraryError(f"{where}: '{key}' (text) is required")
    _check_texts(table, ("title", "source", "notes"), where)
    return table, fid, where


def _load_algorithm(table, file: str, quantities: dict[str, QuantitySpec],
                    options: dict[str, OptionSpec]) -> FormulaSpec:
    """An [[algorithms]] entry: a registered procedure from named inputs to one output.

    It joins the graph like a formula that can only be solved for its output.
    """
    table, fid, where = _entry(table, file, "algorithm", ALGORITHM_KEYS, ("title", "source", "function", "output"))
    function = table["function"]
    if function not in REGISTRY:
        raise LibraryError(f"{where}: unknown function '{function}'.{did_you_mean(function, REGISTRY)} "
                           f"Available: {', '.join(sorted(REGISTRY))}")
    inputs = table.get("inputs")
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        raise LibraryError(f"{where}: 'inputs' must be a list of quantity names")
    output = table["output"]
    for name in [*inputs, output]:
        if name not in quantities:
            raise LibraryError(f"{where}: unknown quantity '{name}'.{did_you_mean(name, quantities)}")
    if output in inputs or len(set(inputs)) != len(inputs):
        raise LibraryError(f"{where}: inputs must be distinct and not include the output")
    lhs = quantities[output].symbol
    rhs = sympy.Function(function)(*[quantities[i].symbol for i in inputs])
    return FormulaSpec(id=fid, title=table["title"].strip(), source=table["source"].strip(), file=file,
                       equation=f"{output} = {function}({', '.join(inputs)})",
                       when=_load_when(table, where, options), notes=str(table.get("notes", "")).strip(),
                       algorithm=function, lhs=lhs, rhs=rhs, display_lhs=lhs, display_rhs=rhs,
                       latex=_latex_as_cited(lhs, rhs, quantities), lhs_name=output,
                       quantities=tuple(inputs) + (output,),
                       solvability={**{i: "none" for i in inputs}, output: "explicit"})


# a formula's two sides, parsed
_Sides = tuple[sympy.Expr, sympy.Expr]


def _resolver(quantities: dict[str, QuantitySpec]):
    """The names a formula may use: quantities (not text ones) and units."""
    def resolve(name: str) -> sympy.Expr:
        if name in quantities:
            if quantities[name].kind == "text":
                raise ParseError(f"'{name}' is text, not a number: only an algorithm can use it")
            return quantities[name].symbol
        if _is_unit_name(name):
            return unit_symbol(name)
        raise ParseError(f"unknown name '{name}' (not a declared quantity or a unit)."
                         f"{did_you_mean(name, quantities)}")
    return resolve


def _display_forms(entries: list, quantities: dict[str, QuantitySpec]) -> dict[int, _Sides | Exception]:
    """Each formula's sides as written (unevaluated, for display), by its position in
    ``entries``: parsed together, with sympy's evaluation switched off once. Switching it off
    and on again clears sympy's whole cache, and doing so around each formula made the
    evaluated parse of the next start cold (Min and Max compare their arguments through the
    assumptions system, a fifth of loading the library). What fails to parse is kept as its
    exception, raised where the formula is loaded."""
    resolve = _resolver(quantities)
    out: dict[int, _Sides | Exception] = {}
    with sympy_evaluate(False):
        for i, table in enumerate(entries):
            equation = table.get("equation") if isinstance(table, dict) else None
            if isinstance(equation, str):
                try:
                    out[i] = parse_equation(equation, resolve, evaluate=False)
                except Exception as e:      # raised again in order, by _load_formula
                    out[i] = e
    return out


def _load_formula(table, file: str, quantities: dict[str, QuantitySpec], options: dict[str, OptionSpec],
                  symbols: dict[sympy.Symbol, QuantitySpec], shown: _Sides | Exception | None = None) -> FormulaSpec:
    """One [[formulas]] entry; ``shown``: its sides as written, parsed already (or the
    exception parsing them raised), else None (parsed here)."""
    table, fid, where = _entry(table, file, "formula", FORMULA_KEYS, ("equation", "title", "source"))
    when = _load_when(table, where, options)
    equation = table["equation"]
    lhs, rhs, dlhs, drhs = _parse_formula(equation, quantities, shown, where)
    _check_dimensions(lhs, rhs, symbols, equation, where)
    names = [symbols[s].name for s in sorted((lhs - rhs).free_symbols | lhs.free_symbols | rhs.free_symbols,
                                                  key=lambda s: s.name)
             if not isinstance(s, UnitSymbol)]
    if not names:
        raise LibraryError(f"{where}: the equation relates no quantities")
    solvability = dict(zip(names, classify_all(lhs, rhs, [quantities[n].symbol for n in names])))
    rule, forward, consequence, approximate, from_given = _formula_flags(table, where)
    solvability = _directed(table, lhs, names, solvability, rule, forward, from_given, quantities, symbols, where)
    parts = _breakdown_parts(table, lhs, drhs, symbols, where)
    reports = table.get("reports", [])
    if not isinstance(reports, list) or not all(isinstance(x, str) and x in quantities for x in reports):
        raise LibraryError(f"{where}: 'reports' is a list of quantity names the answer states beside it")
    return FormulaSpec(id=fid, title=table["title"].strip(), equation=equation.strip(),
                       source=table["source"].strip(), file=file, when=when, default_rule=rule,
                       from_given=tuple(from_given), forward_only=forward,
                       asked_backwards=_inputs(table, "asked_backwards", names, where), consequence=consequence, approximate=approximate,
                       breakdown=tuple(symbols[t].name for t in parts), reports=tuple(reports), notes=str(table.get("notes", "")).strip(), lhs=lhs, rhs=rhs,
                       display_lhs=dlhs, display_rhs=drhs, quantities=tuple(names),
                       solvability=solvability, latex=_latex_as_cited(dlhs, drhs, quantities),
                       lhs_name=symbols[lhs].name if lhs in symbols else None)


def _parse_formula(equation: str, quantities: dict[str, QuantitySpec], shown: _Sides | Exception | None,
                   where: str) -> tuple[sympy.Expr, sympy.Expr, sympy.Expr, sympy.Expr]:
    """The equation's sides evaluated (for solving) and as written (for display, ``shown`` when
    parsed already); an equation too large to solve is refused here."""
    resolve = _resolver(quantities)
    try:
        lhs, rhs = parse_equation(equation, resolve)
        if isinstance(shown, Exception):
            raise shown
        dlhs, drhs = shown if shown is not None else parse_equation(equation, resolve, evaluate=False)
    except ParseError as e:
        raise LibraryError(f"{where}: {e}") from None
    try:
        check_equation(lhs, rhs)
    except TooComplex as e:
        raise LibraryError(f"{where}: too large to solve: {e}") from None
    return lhs, rhs, dlhs, drhs


def _check_dimensions(lhs: sympy.Expr, rhs: sympy.Expr, symbols: dict[sympy.Symbol, QuantitySpec],
                      equation: str, where: str) -> None:
    """Both sides have one dimension, the same (a right side of 0 has every dimension)."""
    def dim_of(sym: sympy.Symbol):
        if isinstance(sym, UnitSymbol):
            return units.dimensionality(sym.unit)
        return symbols[sym].dim

    try:
        left = dimension_of(lhs, dim_of)
        right = dimension_of(rhs, dim_of)
    except DimensionMismatch as e:
        raise LibraryError(f"{where}: dimension error: {e}") from None
    if left != right and rhs != 0:      # zero has every dimension ("no time": 0 * second)
        raise LibraryError(f"{where}: the two sides differ in dimension: left is {show(left)}, "
                           f"right is {show(right)} ('{equation.strip()}')")


def _formula_flags(table, where: str) -> tuple[bool, bool, bool, bool, list]:
    """The entry's (default, forward_only, consequence, approximate, from_given), checked
    against each other: a default rule is no consequence, only a consequence is approximate,
    only a default rule or a forward_only law (a bridge from a user's figure) reads from given
    values."""
    rule = table.get("default", False)
    forward = table.get("forward_only", False)
    from_given = table.get("from_given", [])
    consequence = table.get("consequence", False)
    if not all(isinstance(x, bool) for x in (rule, forward, consequence)):
        raise LibraryError(f"{where}: 'default', 'forward_only' and 'consequence' must be true or false")
    if consequence and rule:
        raise LibraryError(f"{where}: a default rule is an assumption, not a consequence of other laws")
    approximate = table.get("approximate", False)
    if not isinstance(approximate, bool) or (approximate and not consequence):
        raise LibraryError(f"{where}: 'approximate' (true or false) marks a consequence that holds only roughly")
    if not isinstance(from_given, list) or not all(isinstance(x, str) for x in from_given):
        raise LibraryError(f"{where}: 'from_given' is a list of the rule's inputs that must be given values")
    if from_given and not (rule or forward):
        raise LibraryError(f"{where}: 'from_given' applies to default rules and forward_only laws only")
    return rule, forward, consequence, approximate, from_given


def _inputs(table, key: str, names: list[str], where: str) -> tuple[str, ...]:
    """A list of the formula's own quantities under ``key``."""
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(x, str) and x in names for x in value):
        raise LibraryError(f"{where}: '{key}' is a list of the formula's own quantities")
    return tuple(value)


def _directed(table, lhs: sympy.Expr, names: list[str], solvability: dict[str, str], rule: bool, forward: bool,
              from_given: list, quantities: dict[str, QuantitySpec], symbols: dict[sympy.Symbol, QuantitySpec],
              where: str) -> dict[str, str]:
    """The solvability of a default rule or forward_only law: its left side only (and the inputs
    ``solved_for`` names); a law's is unchanged. ``from_given`` names the rule's inputs that must
    be given values, or other quantities whose being given (or asked for) is its condition."""
    backwards = table.get("solved_for", [])
    if not isinstance(backwards, list) or not all(isinstance(x, str) and x in names and quantities[x].symbol != lhs
                                                  for x in backwards) or (backwards and not forward):
        raise LibraryError(f"{where}: 'solved_for' names inputs a forward_only law may still be solved for")
    if rule or forward:
        # A default rule ("d_ffn = 4 d_model unless given"), or a law that is ill-posed backwards
        # (min(pp, m) = pp holds for every m >= pp), only ever delivers its left side.
        if not isinstance(lhs, sympy.Symbol) or lhs not in symbols or solvability[symbols[lhs].name] != "explicit":
            raise LibraryError(f"{where}: a default rule or forward_only formula must read 'quantity = expression'")
        solvability = {n: (solvability[n] if n in backwards else "explicit" if quantities[n].symbol == lhs
                           else "none") for n in names}
    unknown = [q for q in from_given if q not in quantities or quantities[q].symbol == lhs]
    if unknown:
        raise LibraryError(f"{where}: from_given names {unknown}, which are neither inputs of the rule nor quantities")
    return solvability


def _breakdown_parts(table, lhs: sympy.Expr, drhs: sympy.Expr, symbols: dict[sympy.Symbol, QuantitySpec],
                     where: str) -> list:
    """A breakdown's parts as written ('quantity = part + part + ...', each part a quantity),
    or none when the entry is not a breakdown."""
    breakdown = table.get("breakdown", False)
    if not isinstance(breakdown, bool):
        raise LibraryError(f"{where}: 'breakdown' must be true or false")
    parts = _terms(drhs) if breakdown else []
    if breakdown and not (lhs in symbols and len(parts) > 1 and all(t in symbols for t in parts)):
        raise LibraryError(f"{where}: a breakdown reads 'quantity = part + part + ...', each part a quantity")
    return parts


def _latex_as_cited(lhs: sympy.Expr, rhs: sympy.Expr, quantities: dict[str, QuantitySpec]) -> str:
    """The formula as written, in LaTeX with the quantities' symbols (renderers read it). (A
    quantity's symbol is named after it: only the symbols it reads are looked up, not all 500.)"""
    free = lhs.free_symbols | rhs.free_symbols
    names = {s: quantities[s.name].latex for s in free
             if s.name in quantities and quantities[s.name].symbol == s}
    return f"{latex(lhs, names, as_written=True)} = {latex(rhs, names, as_written=True)}"


def _terms(expr: sympy.Expr) -> list:
    """The terms of a sum as written, left to right (an unevaluated a + b + c nests as (a + b) + c)."""
    if not isinstance(expr, sympy.Add):
        return [expr]
    return [t for a in expr.args for t in _terms(a)]
