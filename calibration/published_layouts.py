"""Published layouts against the planner: ``python calibration/published_layouts.py``.

For each run of published_runs.toml (the Megatron-LM 2021 weak-scaling runs on A100 and the
Megatron-Core run on H100, with what their launch scripts set from run_configs.toml), plan the
same model shapes, hardware, GPU count, global batch and sequence length, with the options the
planner does not search kept as the run had them (attention kernel, gradient-reduction
overlap, TP communication overlap, precision). The planner searches everything else: tp, pp,
cp, dp, micro-batch, schedule and virtual stages, ZeRO stage, recompute and sequence
parallelism. The run's own layout (its tp, pp, dp, micro-batch, virtual stages, and its ZeRO
stage, recompute and sequence parallelism, the library's defaults where the run states none)
is then found among the planner's fitting layouts.

Printed as a Markdown table (the README's "Published layouts against the planner"): the
published layout, its rank among the fitting layouts by predicted step time (1 = fastest;
ties share the better rank), its predicted step time, the planner's best layout, and how much
faster the best is *in the model* (published step time / best step time). The ranking is the
model's: a layout the model puts ahead was not measured, and the published runs were chosen
under constraints the model does not see (the code of the day: no sequence parallelism or
distributed optimizer in Megatron-LM 2021, for instance).

tests/test_plan.py imports :func:`published_layouts` and asserts that every published layout
is among the valid layouts that fit.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import fit  # noqa: E402  (calibration/fit.py: the runs as symcalc questions)

import symcalc  # noqa: E402
from symcalc.planner.result import PlanRow  # noqa: E402
from symcalc.planner.space import SEARCHED_OPTIONS  # noqa: E402

SHAPES = ("d_model", "n_layers", "n_heads", "vocab_size")
LAYOUT = ("tp", "pp", "dp", "micro_batch_size")


def _published(run: dict, lib) -> tuple[dict, dict, dict]:
    """(layout, searched options, fixed options) of a run: the searched options the run sets,
    else the library's defaults; the rest of its options stay fixed in the plan."""
    given, options = dict(run["given"]), dict(run["options"])
    layout = {k: int(given[k]) for k in LAYOUT}
    layout["cp"] = 1
    layout["virtual_stages"] = int(given.get("virtual_stages", 1))
    searched = {k: str(options.pop(k, lib.options[k].default)) for k in SEARCHED_OPTIONS}
    options.pop("pipeline_schedule", None)       # searched too (1F1B or interleaved with virtual_stages)
    return layout, searched, options


def pareto_rows(p, layout: dict, options: dict) -> np.ndarray:
    """The rows of plan ``p``'s fitting layouts (its ``pareto`` columns) that hold ``layout``
    and the searched ``options`` (their values; the columns hold indices into the searched
    options' values). A key the columns lack, or an option value the planner does not search,
    is not matched. O(fitting layouts)."""
    a = p.pareto
    if not a or not len(a.get("tp", ())):
        return np.zeros(0, dtype=np.int64)
    hit = np.ones(len(a["tp"]), dtype=bool)
    for k, v in layout.items():
        if k in a:
            hit &= a[k] == v
    for k, v in options.items():
        if k in a and v in SEARCHED_OPTIONS[k]:
            hit &= a[k] == SEARCHED_OPTIONS[k].index(v)
    return np.flatnonzero(hit)


def published_layouts(library=None) -> list[dict]:
    """One record per published run: its layout, whether it is valid and fits, its rank among
    the fitting layouts by step time, its step time, and the planner's best layout.

    Returns
    -------
    list of dict: id, hardware, n_gpus, layout (tp, pp, cp, dp, micro_batch_size,
    virtual_stages), options (zero_stage, recompute, sequence_parallel), found (among the
    fitting layouts), rank, fitting, step_time (s), best (PlanRow) and seconds (the plan's).
    """
    lib = library or symcalc.default_library()
    out = []
    for run in fit.questions(fit.load(), fit.load_configs()):
        layout, searched, fixed = _published(run, lib)
        g = run["given"]
        t0 = time.perf_counter()
        p = symcalc.plan(None, run["hardware"], int(g["n_gpus"]), global_batch_size=int(g["global_batch_size"]),
                         seq_len=g["seq_len"], options=fixed, top=1, library=library,
                         **{k: g[k] for k in SHAPES})
        took = time.perf_counter() - t0
        a = p.pareto
        rows = pareto_rows(p, layout, searched)
        step = float(a["step_time"][rows[0]]) if len(rows) else float("nan")
        rank = int(np.count_nonzero(a["step_time"] < step)) + 1 if len(rows) else None
        out.append(dict(id=run["id"], hardware=run["hardware"], n_gpus=int(g["n_gpus"]), layout=layout,
                        options=searched, found=len(rows) == 1, rank=rank, fitting=p.fitting, step_time=step,
                        best=p.best, seconds=took))
    return out


def _label(layout: dict, options: dict) -> str:
    return PlanRow(rank=0, layout=layout, options=options, step_time=0.0, memory=0.0, fits=True).label()


def markdown(records: list[dict]) -> str:
    lines = ["| run | GPUs | published layout | rank (of fitting) | step time | best layout (model) | step time "
             "| best is faster by |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        best: PlanRow = r["best"]
        rank = f"{r['rank']:,} of {r['fitting']:,}" if r["found"] else f"not among the {r['fitting']:,}"
        lines.append(f"| {r['id']} ({r['hardware']}) | {r['n_gpus']:,} | {_label(r['layout'], r['options'])} | {rank} "
                     f"| {r['step_time']:.3g} s | {best.label()} | {best.step_time:.3g} s "
                     f"| {r['step_time'] / best.step_time:.2f}x |")
    return "\n".join(lines)


# Published setups planned as a new user would (the library's default stack unless the setup
# names one, its defaults for every option the planner does not search), and the published
# layout looked up in the planner's order. Each layout with its source:
SETUPS = [
    dict(name="GPT-3 175B", source="Narayanan et al. 2021, Table 2 (calibration/out_of_sample.toml n21_175B_1536)",
         plan=dict(model="gpt3-175b", hardware="a100-80gb", gpus=1536, global_batch_size=1536, seq_len=2048),
         layout=dict(tp=8, pp=12, cp=1, dp=16, micro_batch_size=1, virtual_stages=4),
         options=dict(zero_stage="0", recompute="full", sequence_parallel="false")),
    dict(name="Megatron 530B", source="Narayanan et al. 2021 (calibration/published_runs.toml gpt_530B)",
         plan=dict(hardware="a100-80gb", gpus=2520, global_batch_size=2520, seq_len=2048,
                   values=dict(d_model=20480, n_layers=105, n_heads=128, vocab_size=51200)),
         layout=dict(tp=8, pp=35, cp=1, dp=9, micro_batch_size=1, virtual_stages=3),
         options=dict(zero_stage="0", recompute="full", sequence_parallel="false")),
    dict(name="Megatron 1T", source="Narayanan et al. 2021 (calibration/published_runs.toml gpt_1T)",
         plan=dict(hardware="a100-80gb", gpus=3072, global_batch_size=3072, seq_len=2048,
                   values=dict(d_model=25600, n_layers=128, n_heads=160, vocab_size=51200)),
         layout=dict(tp=8, pp=64, cp=1, dp=6, micro_batch_size=1, virtual_stages=1),
         options=dict(zero_stage="0", recompute="full", sequence_parallel="false")),
    dict(name="Llama 3 405B", source="Llama Team 2024, Table 4 (calibration/out_of_sample.toml llama3_405B_16k)",
         plan=dict(model="llama3-405b", hardware="h100", gpus=16384, global_batch_size=2048, seq_len=8192),
         layout=dict(tp=8, pp=16, cp=1, dp=128, micro_batch_size=1, virtual_stages=8),
         options=dict(zero_stage="1", recompute="none", sequence_parallel="true")),
    dict(name="MPT-70B, --stack fsdp", source="llm-foundry large-scale table "
         "(calibration/held_out/llm-foundry.toml lf_h100_large_70b_s2048_g512_mb8_gb4096)",
         plan=dict(hardware="h100", gpus=512, global_batch_size=4096, seq_len=2048,
                   options=dict(stack="fsdp", tied_embeddings="true", position_encoding="learned"),
                   values=dict(d_model=8192, n_layers=80, n_heads=64, vocab_size=50368, d_ffn=32768)),
         layout=dict(tp=1, pp=1, cp=1, dp=512, micro_batch_size=8, virtual_stages=1),
         options=dict(zero_stage="3", recompute="full", sequence_parallel="false")),
    dict(name="Mixtral 8x7B", source="no published layout with its source in symcalc's data",
         plan=dict(model="mixtral", hardware="h100", gpus=64, global_batch_size=256, seq_len=4096),
         layout=None, options=None),
]


def plan_setup(setup: dict, library=None) -> dict:
    """Plan one published setup and find its published layout in the planner's order: its rank
    (1 = the planner's first, among the fitting layouts), its planned step time against the
    first's (the gap), and the first row's verdict."""
    kw = dict(setup["plan"])
    args = (kw.pop("model", None), kw.pop("hardware"), kw.pop("gpus"))
    t0 = time.perf_counter()
    p = symcalc.plan(*args, top=3, library=library, **kw)
    took = time.perf_counter() - t0
    rank = planned = None
    if setup["layout"]:
        a = p.pareto
        rows = pareto_rows(p, setup["layout"], setup["options"])
        if len(rows):
            rank, planned = int(a["rank"][rows[0]]), float(a["planned_time"][rows[0]])
    return dict(setup=setup, plan=p, rank=rank, planned=planned, seconds=took)


def setups_markdown(records: list[dict]) -> str:
    lines = ["| setup | GPUs | published layout | its rank (of fitting) | gap to the top | planner's top | top's MFU "
             "| top validated? |",
             "|---|---|---|---|---|---|---|---|"]
    for r in records:
        s, p = r["setup"], r["plan"]
        top = p.rows[0]
        pub = _label(s["layout"], s["options"]) if s["layout"] else "none published"
        rank = (f"{r['rank']:,} of {p.fitting:,}" if r["rank"] else
                (f"not among the {p.fitting:,}" if s["layout"] else "-"))
        gap = f"{r['planned'] / top.planned_time - 1:+.1%}" if r["planned"] else "-"
        said = top.verdict.get("text", "") if top.verdict else ""
        lines.append(f"| {s['name']} | {p.n_gpus:,} {p.hardware} | {pub} | {rank} | {gap} | {top.label()} "
                     f"| {100 * top.metrics['mfu']:.1f} %{' (model ' + format(100 * top.metrics['model_mfu'], '.1f') + ' %)' if top.capped else ''} "
                     f"| {said} |")
    return "\n".join(lines)


def main() -> int:
    t0 = time.perf_counter()
    if "--setups" in sys.argv:
        print(setups_markdown([plan_setup(s) for s in SETUPS]))
        print(f"\n{len(SETUPS)} setups planned in {time.perf_counter() - t0:.1f} s")
        return 0
    records = published_layouts()
    print(markdown(records))
    print(f"\n{len(records)} runs planned in {time.perf_counter() - t0:.1f} s")
    return 0 if all(r["found"] for r in records) else 1


if __name__ == "__main__":
    sys.exit(main())
