"""One layout of a plan explained: its step time and memory asked of symcalc.solve, the same
question (and so the same derivation) the planner evaluated over arrays."""

from __future__ import annotations

from symcalc.errors import QueryError
from symcalc.planner.evaluate import MEMORY, STEP_TIME, layout_names
from symcalc.query.solve import solve


def question(plan, rank: int) -> tuple[dict, dict]:
    """(given values, options) of layout ``rank`` (1 = the best) of ``plan``."""
    if not plan.rows:
        raise QueryError("--explain: nothing fits, so there is no ranked layout to explain")
    if not 1 <= rank <= len(plan.rows):
        raise QueryError(f"--explain {rank}: the plan ranks layouts 1 to {len(plan.rows)}")
    row = plan.rows[rank - 1]
    lay = row.layout
    moe = "ep" in lay
    given = {}
    for name in layout_names(moe, lay["virtual_stages"] > 1):
        if name == "global_batch_size":
            given[name] = plan.global_batch_size
        elif name == "seq_len":
            given[name] = f"{plan.seq_len} token"
        else:
            given[name] = lay[name]
    given.update(plan.given.get("extra", {}))
    options = {**plan.given.get("options", {}), **row.options}
    return given, options


def explain(plan, rank: int, library=None):
    """(step_time Result, total_memory_per_gpu Result) of layout ``rank``."""
    given, options = question(plan, rank)
    kw = dict(options=options, library=library, hardware=plan.hardware, model=plan.model, on_bounds="flag")
    return solve(STEP_TIME, given, **kw), solve(MEMORY, given, **kw)
