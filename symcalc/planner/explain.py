"""One layout of a plan explained: its step time and memory asked of symcalc.solve, the same
question (and so the same derivation) the planner evaluated over arrays."""

from __future__ import annotations

from typing import TYPE_CHECKING

from symcalc.errors import QueryError
from symcalc.planner import dims
from symcalc.planner.evaluate import MEMORY, STEP_TIME, layout_names
from symcalc.query.solve import solve

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from symcalc.library.registry import Library
    from symcalc.planner.result import PlanResult
    from symcalc.query.results import Result


def question(plan: PlanResult, rank: int) -> tuple[dict[str, object], dict[str, str]]:
    """(given values, options) of layout ``rank`` (1 = the best) of ``plan``."""
    if not plan.rows:
        raise QueryError("--explain: nothing fits, so there is no ranked layout to explain")
    if not 1 <= rank <= len(plan.rows):
        raise QueryError(f"--explain {rank}: the plan ranks layouts 1 to {len(plan.rows)}")
    row = plan.rows[rank - 1]
    lay = row.layout
    given: dict[str, object] = {}
    for name in layout_names(tuple(d for d in dims.names() if d in lay), lay):
        if name == "global_batch_size":
            given[name] = plan.global_batch_size
        elif name == "seq_len":
            given[name] = f"{plan.seq_len} token"
        else:
            given[name] = lay[name]
    given.update(plan.given.get("extra", {}))
    options = {**plan.given.get("options", {}), **row.options}
    return given, options


def explain(plan: PlanResult, rank: int, library: Library | None = None) -> tuple[Result, Result]:
    """(step_time Result, total_memory_per_gpu Result) of layout ``rank``."""
    given, options = question(plan, rank)
    step = solve(STEP_TIME, given, options=options, library=library, hardware=plan.hardware, model=plan.model,
                 on_bounds="flag")
    memory = solve(MEMORY, given, options=options, library=library, hardware=plan.hardware, model=plan.model,
                   on_bounds="flag")
    return step, memory
