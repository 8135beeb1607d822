"""The answer of a plan: a passive typed record, read by renderers (text, JSON, CSV, plots)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from symcalc.formats import Rendered, render
from symcalc.planner import dims

if TYPE_CHECKING:   # pragma: no cover - for type checkers
    from matplotlib.figure import Figure

    from symcalc.query.run import Run


@dataclass
class PlanRow:
    """One layout of a plan, with what the planner computed for it (base units: s, bytes, USD)."""

    rank: int
    layout: dict            # tp, pp, cp, dp, ep, micro_batch_size, virtual_stages, n_gpus
    options: dict           # zero_stage, recompute, sequence_parallel, pipeline_schedule
    step_time: float        # s
    memory: float           # bytes per GPU
    fits: bool
    memory_parts: dict = field(default_factory=dict)      # part -> bytes
    step_parts: dict = field(default_factory=dict)        # part -> s (the step_time breakdown)
    metrics: dict = field(default_factory=dict)           # tokens_per_second, mfu, train_time, gpu_hours, total_cost
    command: str = ""                                     # the `symcalc solve step_time ...` that re-checks it
    index: int = -1                                       # its row in the search's space
    planned_time: float = 0.0                             # s: the step time it is ranked by (the model's, or the frontier's)
    verdict: dict = field(default_factory=dict)           # what validates it (planner.validation.Verdict.as_dict)
    equivalents: list = field(default_factory=list)       # layouts of the same band and degrees, grouped under it
    band: int | None = None                               # its planned step's band of tie_band from the best (0: the best's); None by memory
    breakdown_parts: list = field(default_factory=list, repr=False)   # the step-time breakdown's parts (base units)

    @property
    def capped(self) -> bool:
        """Ranked at the frontier: the model puts it beyond every published run of its class."""
        return self.planned_time > self.step_time * (1 + 1e-12)

    @property
    def largest_memory_part(self) -> tuple[str, float] | None:
        return max(self.memory_parts.items(), key=lambda kv: kv[1]) if self.memory_parts else None

    def label(self) -> str:
        """tp8 pp2 v2 cp1 dp4 mbs1 zero1 selective sp: as space.toml's ``[layout] label`` spells it."""
        return dims.label(self.layout, self.options)


@dataclass
class GpuScan:
    """The best layout at one GPU count (planning backwards over a list of counts)."""

    n_gpus: int
    best: PlanRow | None
    searched: int
    fitting: int
    meets: bool | None = None        # meets the deadline / budget / throughput target


@dataclass
class PlanResult(Rendered):
    """A ranked plan: the top layouts, what was searched, valid and fitting, and why the rest
    were rejected (rendered through the registry: text, JSON, CSV, HTML, plots)."""

    TEXT_FORMAT = "plan_text"
    JSON_FORMAT = "plan_json"

    model: str | None
    hardware: str | None
    n_gpus: int
    by: str
    rows: list[PlanRow]                        # the top layouts, ranked
    searched: int                              # layouts in the whole space
    valid: int                                 # passing every rule
    evaluated_ok: int                          # valid and inside the model's bounds
    fitting: int                               # ... and within the memory limit
    rejected: dict[str, int]                   # reason -> layouts
    memory_limit: float                        # bytes: gpu_memory - memory_headroom
    gpu_memory: float
    memory_headroom: float
    global_batch_size: int
    seq_len: int
    given: dict = field(default_factory=dict)  # what the run fixed (values, options, presets)
    searched_options: dict = field(default_factory=dict)
    combos: int = 0
    seconds: float = 0.0
    layouts_per_second: float = 0.0
    message: str = ""                          # nothing fits: what is closest and what would fit
    closest: list[PlanRow] = field(default_factory=list)
    scan: list[GpuScan] = field(default_factory=list)   # planning backwards
    goal: dict = field(default_factory=dict)            # {"kind": deadline|budget|throughput, "value", "unit", ...}
    # every fitting layout as columns (tp, pp, ..., zero_stage/recompute/sequence_parallel as
    # indices into the searched options' values, step_time s, memory bytes): the Pareto plot's points
    pareto: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    stack: str = ""                            # the training stack the plan ran under
    stack_given: bool = False                  # named by the question (else the library's default)
    evidence: dict = field(default_factory=dict)   # validated rows, the frontier (search._evidence_summary)
    run: Run | None = None                         # the run it plans (symcalc.query.run)
    tie_band: float = 0.0                          # the rows' bands' width (relative): within one they tie (0: by memory)

    @property
    def best(self) -> PlanRow | None:
        return self.rows[0] if self.rows else None


    def text(self, width: int | None = None) -> str:
        """The plan as text; ``width`` (a terminal's columns) leaves table columns out to fit."""
        return render(self.TEXT_FORMAT, self, width=width)

    def to_csv(self, path: str) -> None:
        render("plan_csv", self, path)

    def plot(self, path: str | None = None) -> Figure:
        """Draw the plan into ``path`` (.png/.svg/.pdf) and return the matplotlib Figure (the
        session's backend is left as it was). With no path nothing is written: the Figure is
        returned to show (inline in a notebook)."""
        return render("plan_plot", self, path)

    def _repr_html_(self) -> str:
        return render("plan_html", self)

    def __repr__(self) -> str:
        best = self.best
        head = f"<PlanResult {self.model} on {self.n_gpus} x {self.hardware}: {self.fitting} of {self.searched} fit"
        return head + (f"; best {best.label()} at {best.step_time:.4g} s>" if best else ">")
