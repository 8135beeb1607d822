"""What a training stack lets the planner search: the options it runs with and the layouts it allows.

A stack is an option whose values restrict other options (``supports``) and require conditions
of given values (``requires``; see :mod:`symcalc.query.stacks`). The solver refuses a question
that breaks them; the planner must not ask one, so the searched options are narrowed to the
supported values (ZeRO stages, recompute modes, sequence parallelism, the pipeline schedule)
and the conditions over layout quantities become rules of the space
(:func:`symcalc.planner.space.enumerate_space`), each rejection counted under its reason. The
stack is the one given (``--stack`` or ``options``), else the option's default: every plan asks
step-time questions, which the stack is an assumption of.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from symcalc.library.loading import default_library
from symcalc.planner import dims
from symcalc.planner.space import searched_options
from symcalc.query.stacks import unsupported

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.records import Condition, Requirement
    from symcalc.library.registry import Library


def narrow(library: Library, options: dict[str, str], fixed: dict[str, list[int]],
           searched: dict[str, tuple[str, ...]], max_virtual_stages: int
           ) -> tuple[tuple[str, Condition, tuple[tuple[str, tuple[str, ...]], ...]], ...]:
    """Narrow ``searched`` (option -> values) and the schedule dimension's fixed values (virtual_stages) in place to what the
    stacks allow; return their conditions as (reason, Condition, scope) for ``Shape.requires``
    (scope: (option, values) pairs of the searched options under which a condition binds, :func:`_scope`).

    Raises
    ------
    BadOptionValueError
        A value fixed by the question that the stack does not run
        (``option zero_stage=0 is not supported by stack=fsdp (it runs: 2, 3)``).
    """
    requires = []
    all_searched = searched_options(library)
    for name in (*library.stacks, *library.requiring):
        spec = library.options[name]
        value = options.get(name, spec.default)
        for other, allowed in spec.supports.get(value, {}).items():
            if other in all_searched:
                current = searched.get(other, all_searched[other])
                keep = tuple(v for v in current if v in allowed)
                if not keep:
                    raise unsupported(library, other, current[0], name, value, allowed)
                searched[other] = keep
            elif other == dims.schedule().schedule_option:
                sched = dims.schedule().name
                single = one_chunk_schedule(library, options)
                stages = fixed.get(sched, list(range(1, max_virtual_stages + 1)))
                kept = [v for v in stages if ("interleaved" if v > 1 else single) in allowed]
                if not kept:
                    raise unsupported(library, other, "interleaved" if stages[0] > 1 else single, name, value, allowed)
                fixed[sched] = kept
        for r in spec.requires.get(value, ()):
            scope = _scope(library, r, options, spec.option_defaults.get(value, {}), all_searched)
            if scope is not None:
                requires.append((f"{name}={value} requires {r.text} ({r.why})", r.condition, scope))
    return tuple(requires)


def _scope(library: Library, req: Requirement, options: dict[str, str], stack_defaults: dict[str, str],
           all_searched: dict[str, tuple[str, ...]]) -> tuple[tuple[str, tuple[str, ...]], ...] | None:
    """Where a requirement holds in the space: its ``under`` options that are searched (columns of
    the space: the layouts with those values must satisfy it), the others read from the question
    (given, else the stack's default, else the option's); None when the question's own values put
    it out of force."""
    scope = []
    for option, values in req.under.items():
        if option in all_searched:
            scope.append((option, values))
        elif options.get(option, stack_defaults.get(option, library.options[option].default)) not in values:
            return None
    return tuple(scope)


def one_chunk_schedule(library: Library | None, options: dict[str, str]) -> str:
    """The pipeline schedule of a layout with one chunk a GPU (virtual_stages = 1): the one the
    question fixes (--option pipeline_schedule=dualpipe), else the stack's (hai-llm runs DualPipe),
    else the option's default (1F1B). Above one chunk the layout is interleaved."""
    library = library or default_library()
    option = dims.schedule().schedule_option or "pipeline_schedule"
    given = options.get(option)
    if given and given != "interleaved":
        return given
    for name in library.stacks:
        spec = library.options[name]
        value = spec.option_defaults.get(options.get(name, spec.default), {}).get(option)
        if value and value != "interleaved":
            return value
    return library.options[option].default
