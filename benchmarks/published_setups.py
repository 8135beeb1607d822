"""Ten published setups against ``symcalc plan``: ``python benchmarks/published_setups.py``.

Issue 36's table: for ten training runs whose layout and measured throughput are public, the
planner is asked the run's own question (its model, hardware, GPU count, global batch, sequence
length, and every option the planner does not search kept as the run had it), and prints:

* the published (expert's) layout as the planner plans it: its planned MFU and step time (next
  to the measured one), whether it fits, its rank among the fitting layouts (1 = the planner's
  first) and its planned step time against the top pick's;
* the planner's top pick: its layout, its planned MFU and its verdict (validated by published
  runs of its regime, or a hypothesis, with the first thing that differs);
* whether that MFU lies inside the range the published runs allow.

Every figure comes from the repository's data, named by its id: calibration/published_runs.toml
(with run_configs.toml), calibration/held_out/*.toml and calibration/out_of_sample.toml, read
through calibration/runs.py and calibration/out_of_sample.py as calibration/regimes.py reads
them. The published range of a setup is the MFU of every scored run of the same model (shapes),
stack, hardware preset and precision class in that data, min..max, each measured step time
turned into MFU by the library (``symcalc.solve("mfu", ..., step_time=...)``, symcalc's 6N-style
convention, as the plan reports MFU). A pick is inside when its planned MFU lies within
[min x (1 - TOLERANCE), max x (1 + TOLERANCE)]: 10 % either side.

Each setup runs under its own time limit (each plan ``time_limit=``); one that errors prints
its error in its row and the others still run. ``--json`` prints the records instead of the
table; ``--only 4,5`` runs some of them; ``--time-limit S`` sets each plan's limit (default 120).
Prints the Markdown table, then "top pick inside the published range: k of N", and how many
of the published layouts fit the GPU and plan within 10 % of the top pick (or faster).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path


ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "calibration"))

import regimes  # noqa: E402  (calibration/regimes.py: every scored published run, as its file reads them)
from published_layouts import pareto_rows  # noqa: E402  (a layout among a plan's fitting ones)
import runs as R  # noqa: E402

import symcalc  # noqa: E402
from symcalc.library.presets import find_preset  # noqa: E402
from symcalc.planner.result import PlanRow  # noqa: E402
from symcalc.planner.setup import LAYOUT_DIMS  # noqa: E402
from symcalc.planner.space import SEARCHED_OPTIONS  # noqa: E402
from symcalc.planner.validation import precision_class  # noqa: E402

TOLERANCE = 0.10            # a pick within 10 % of the published min..max is inside
PLAN_LIMIT = 120.0          # s: each plan's time limit (symcalc.budget.DEFAULT_PLAN_LIMIT)
LAYOUT = ("tp", "pp", "cp", "dp", "ep", "micro_batch_size", "virtual_stages")
# what makes "the same model" (the run's shapes; a missing d_ffn is 4 d_model, GPT's)
MODEL_KEYS = ("n_layers", "d_model", "n_heads", "vocab_size", "d_ffn", "d_ffn_expert", "n_routed_experts")


@dataclass(frozen=True)
class Setup:
    """One published setup: the run (by its id in the data) whose question and layout are posed."""

    name: str
    run: str                        # the published run's id (calibration data)
    n_gpus: int | None = None       # plan at another GPU count than the run's (its layout then is not posed)
    model: str | None = None        # a model preset posed instead of the run's shapes
    options: dict = field(default_factory=dict)     # options posed over the run's
    no_layout: str = ""             # why the setup has no published layout to pose


SETUPS = [
    Setup("GPT-3 175B, Megatron-LM 2021", "n21_175B_1536", n_gpus=1024,
          no_layout="out_of_sample.toml: the 1024-GPU run (140 TFLOP/s, Narayanan 2021 section 5.1) prints "
                    "no tp, pp, micro-batch or interleaving; the published tp8 pp12 (n21_175B_*) does not "
                    "tile 1024 GPUs (96 does not divide 1024)"),
    # the data's question (ZeRO-2's traffic, no recompute, bf16) with sequence parallelism, as
    # tests/test_activation_layouts.py poses Meta's layout (the data's run states none)
    Setup("Llama 3 405B, Meta", "llama3_405B_16k", options={"sequence_parallel": "true"}),
    Setup("Llama 3 70B, Megatron-Bridge (NeMo)", "mb260401_h100_llama3_70b_fp8_64g_gbs256"),
    # as tests/test_moe_layouts.py poses it: the preset, HAI-LLM (DualPipe, its all-to-all overlap), FP8
    Setup("DeepSeek-V3, HAI-LLM", "dsv3_report_pretrain_avg_2048h800", model="deepseek-v3",
          options={"stack": "hai-llm", "precision": "fp8", "zero_stage": "1", "recompute": "selective"}),
    Setup("Qwen3-235B-A22B, NVIDIA recipe", "mb260401_h100_qwen3_235b_fp8_256g_gbs8192"),
    Setup("BLOOM-176B, Megatron-DeepSpeed", "bloom176b_48n_tp4pp12_mb2"),
    Setup("MT-NLG 530B, Megatron-DeepSpeed", "mtnlg530b_280nodes"),
    Setup("Llama 3 70B fp8, torchtitan", "tt2506_70b_float8_tensorwise_asyncTP"),
    Setup("Llama 3 8B, torchtitan", "tt2412_t1_8b_fsdp_compile_8gpu"),
    Setup("Llama 2 7B, FMS-FSDP", "fms_compile_7b_h100"),
]


# -- the published runs ------------------------------------------------------------------------------

def all_runs() -> dict[str, R.Run]:
    """Every scored published run of the three collections, by id (calibration/regimes.py's list)."""
    return {run.id: run for run, _fitted in regimes._runs()}


def model_key(run: R.Run) -> tuple:
    g = run.given
    return tuple(g.get(k, 4 * g["d_model"] if k == "d_ffn" and "d_ffn_expert" not in g else None)
                 for k in MODEL_KEYS)


def regime_of(run: R.Run) -> tuple:
    """(model, stack, hardware preset, precision class): runs sharing it make a setup's range."""
    return (model_key(run), run.options.get("stack", "megatron-core"), find_preset("hardware", run.hardware).key,
            precision_class(run.options.get("precision", "")))


def measured_mfu(run: R.Run) -> float:
    """The run's measured step time as MFU, by the library (regimes.record's question)."""
    m = symcalc.solve("mfu", {**regimes._given(run), "step_time": f"{run.measured} s"}, options=run.options,
                      hardware=run.hardware, conflicts=False, on_bounds="flag")
    return float(m.base_value)


def published_range(anchor: R.Run, runs: dict[str, R.Run]) -> dict[str, float]:
    """Run id -> measured MFU of every run in the anchor's regime (the anchor's included)."""
    want = regime_of(anchor)
    return {rid: measured_mfu(r) for rid, r in runs.items() if regime_of(r) == want}


def inside(mfu: float, rng: dict[str, float]) -> bool:
    """Whether a planned MFU lies in the published range, TOLERANCE either side of min..max."""
    return bool(min(rng.values()) * (1 - TOLERANCE) <= mfu <= max(rng.values()) * (1 + TOLERANCE))


# -- posing a setup ----------------------------------------------------------------------------------

def pose(setup: Setup, run: R.Run) -> dict:
    """The plan's question for a setup: model, hardware, GPUs, global batch, sequence length,
    given values (the run's shapes unless a preset is named), the options the planner does not
    search (fixed), and the published layout (None when the setup has none)."""
    g = dict(run.given)
    options = {k: v for k, v in run.options.items() if k not in SEARCHED_OPTIONS and k != "pipeline_schedule"}
    values = {k: v for k, v in g.items() if k not in LAYOUT_DIMS and k not in ("n_gpus", "seq_len", "global_batch_size")}
    if setup.model:
        values, options = {}, {}
    options.update({k: v for k, v in setup.options.items() if k not in SEARCHED_OPTIONS})
    layout = None if setup.no_layout else {k: int(g.get(k, 1)) for k in LAYOUT}
    searched = {k: v for k, v in {**run.options, **setup.options}.items() if k in SEARCHED_OPTIONS}
    return dict(model=setup.model, hardware=run.hardware, n_gpus=setup.n_gpus or int(g["n_gpus"]),
                global_batch_size=int(g["global_batch_size"]), seq_len=int(g["seq_len"]), values=values,
                options=options, layout=layout, searched=searched)


def _plan(q: dict, limit: float, fixed: dict | None = None, options: dict | None = None, top: int = 1):
    return symcalc.plan(q["model"], q["hardware"], q["n_gpus"], global_batch_size=q["global_batch_size"],
                        seq_len=q["seq_len"], options={**q["options"], **(options or {})}, top=top,
                        values={**q["values"], **(fixed or {})}, time_limit=limit)


def resolved_options(q: dict) -> dict[str, str]:
    """The published layout's searched options as its own step time is asked (given, else its
    stack's, else the library's defaults): what it is looked up with among the planner's."""
    given = {**q["values"], **q["layout"], "n_gpus": q["n_gpus"], "global_batch_size": q["global_batch_size"],
             "seq_len": f"{q['seq_len']} token"}
    if given.get("virtual_stages", 1) <= 1:
        given.pop("virtual_stages")
    if given.get("ep", 1) <= 1 and not q["model"] and "n_routed_experts" not in q["values"]:
        given.pop("ep")
    r = symcalc.solve("step_time", given, model=q["model"], hardware=q["hardware"],
                      options={**q["options"], **q["searched"]}, conflicts=False, on_bounds="flag")
    out = {k: str(r.options.get(k, "")) for k in SEARCHED_OPTIONS}
    if q["layout"]["tp"] == 1:
        # nothing to split at tp 1: the planner spells such a layout sequence_parallel=false (a stack
        # whose default is true, torchtitan's, is answered true by solve; the planner refuses it)
        out["sequence_parallel"] = "false"
    return out


def expert_row(q: dict, limit: float) -> tuple[PlanRow | None, dict[str, str], str]:
    """The published layout planned alone (every dimension and searched option fixed): its row
    (the closest row when it does not fit), its options, and the plan's message."""
    opts = resolved_options(q)
    fixed = {k: v for k, v in q["layout"].items() if k != "dp"}
    if fixed.get("ep", 1) <= 1:
        fixed.pop("ep")
    p = _plan(q, limit, fixed=fixed, options=opts)
    rows = p.rows or p.closest
    return (rows[0] if rows else None), opts, p.message


def mfu_at(q: dict, layout: dict, opts: dict, step_time: float) -> float:
    """MFU of the setup's run at a step time, by the library (the plan's rows carry theirs)."""
    given = {**q["values"], **{k: v for k, v in layout.items() if k in LAYOUT}, "n_gpus": q["n_gpus"],
             "global_batch_size": q["global_batch_size"], "seq_len": f"{q['seq_len']} token",
             "step_time": f"{step_time} s"}
    r = symcalc.solve("mfu", given, model=q["model"], hardware=q["hardware"], options={**q["options"], **opts},
                      conflicts=False, on_bounds="flag")
    return float(r.base_value)


def rank_of(p, layout: dict, opts: dict) -> int | None:
    """The published layout's place in the planner's order among the fitting layouts, or None."""
    rows = pareto_rows(p, layout, opts)
    return int(p.pareto["rank"][rows].min()) if len(rows) else None


# -- one setup ---------------------------------------------------------------------------------------

def run_setup(setup: Setup, runs: dict[str, R.Run], limit: float) -> dict:
    """Plan one setup; every failure is kept as its one-line error (the table goes on)."""
    t0 = time.perf_counter()
    out: dict = {"number": SETUPS.index(setup) + 1, "name": setup.name, "run": setup.run, "error": ""}
    try:
        anchor = runs[setup.run]
        rng = published_range(anchor, runs)
        out.update(range={k: round(v, 4) for k, v in rng.items()}, measured_mfu=rng.get(setup.run),
                   measured_step=anchor.measured)
        q = pose(setup, anchor)
        out.update(n_gpus=q["n_gpus"], hardware=q["hardware"], layout=q["layout"], no_layout=setup.no_layout)
        p = _plan(q, limit, top=1)
        out.update(plan_seconds=round(p.seconds, 2), fitting=p.fitting, searched=p.searched)
        top = p.best
        if top is None:
            out["error"] = f"nothing fits: {p.message}"
        else:
            out["top"] = dict(label=top.label(), mfu=top.metrics.get("mfu"), model_mfu=top.metrics.get("model_mfu"),
                              step_time=top.step_time, planned_time=top.planned_time,
                              validated=bool(top.verdict.get("validated")), verdict=top.verdict.get("text", ""))
            out["inside"] = inside(top.metrics["mfu"], rng)
        if q["layout"] is not None:
            out["expert"] = expert(q, p, limit)
    except Exception as e:      # noqa: BLE001  (any failure is this row's, the others still run)
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    out["seconds"] = round(time.perf_counter() - t0, 2)
    return out


def expert(q: dict, p, limit: float) -> dict:
    """The published layout as the planner plans it, and where it stands against the top pick."""
    row, opts, message = expert_row(q, limit)
    if row is None:
        return {"error": message or "not in the planner's space", "options": opts}
    mfu = row.metrics.get("mfu")
    if mfu is None:
        mfu = mfu_at(q, row.layout, opts, row.planned_time or row.step_time)
    top, planned = p.best, row.planned_time or row.step_time
    return dict(label=row.label(), options=opts, fits=bool(row.fits), memory_gb=row.memory / 1e9,
                step_time=row.step_time, planned_time=planned, mfu=mfu, model_mfu=mfu * planned / row.step_time,
                verdict=row.verdict.get("text", ""),
                rank=rank_of(p, q["layout"], opts),
                vs_top=(row.planned_time or row.step_time) / top.planned_time - 1 if top else None,
                limit_gb=p.memory_limit / 1e9, gpu_gb=p.gpu_memory / 1e9)


# -- printing ----------------------------------------------------------------------------------------

def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{100 * x:.1f} %"


def _model(row: dict) -> str:
    """The model's own MFU beside a planned one the frontier capped."""
    m = row.get("model_mfu")
    return f" (model {_pct(m)})" if m and m > row["mfu"] * (1 + 1e-9) else ""


def _cells(r: dict) -> list[str]:
    rng = r.get("range") or {}
    span = f"{_pct(min(rng.values()))}..{_pct(max(rng.values()))} ({len(rng)})" if rng else "-"
    gpus = f"{r['n_gpus']:,} {r['hardware']}" if "n_gpus" in r else "-"
    e = r.get("expert")
    if r.get("no_layout"):
        pub = [f"none posed: {r['no_layout']}", "-", "-", "-"]
    elif e is None:
        pub = ["-", "-", "-", "-"]
    elif "error" in e:
        pub = [f"refused: {e['error']}", "-", "-", "-"]
    else:
        rank = f"{e['rank']:,} of {r['fitting']:,}" if e["rank"] else f"not among the {r['fitting']:,}"
        pub = [f"{e['label']} ({r['run']})",
               f"{_pct(e['mfu'])}{_model(e)}, {e['planned_time']:.3g} s (measured {_pct(r.get('measured_mfu'))}, "
               f"{r['measured_step']:.3g} s)",
               _fits(e),
               f"{rank}, {e['vs_top']:+.1%}" if e["vs_top"] is not None else rank]
    t = r.get("top")
    if t:
        said = "validated" if t["validated"] else t["verdict"]
        pick = [t["label"], _pct(t["mfu"]) + _model(t), said.replace("|", "/"), "yes" if r["inside"] else "**no**"]
    else:
        pick = [f"error: {r['error']}".replace("|", "/"), "-", "-", "-"]
    return [str(r["number"]), r["name"], gpus, *pub, span, *pick, f"{r['seconds']:.1f}"]


def _fits(e: dict) -> str:
    """Fits; tight (it fits the GPU's memory, not the margin the planner keeps free: solve's verdict
    says the same); or no, with the memory and the GPU's."""
    if e["fits"]:
        return "yes"
    if e["memory_gb"] <= e["gpu_gb"]:
        return f"tight: {e['memory_gb']:.1f} GB of {e['gpu_gb']:.1f} (margin to {e['limit_gb']:.1f})"
    return f"no: {e['memory_gb']:.1f} GB > {e['gpu_gb']:.1f}"


HEAD = ["#", "setup", "GPUs", "published layout (run)", "its planned MFU, step (measured)", "fits",
        "rank (of fitting), vs top", "published MFU range (runs)", "top pick", "top's MFU", "verdict", "inside",
        "wall s"]


def markdown(records: list[dict]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(_cells(r)) + " |" for r in records]
    return "\n".join(lines)


#: an expert's layout ranks close to the top pick when its planned step is at most this much slower
EXPERT_SLACK = 0.10


def summary(records: list[dict]) -> str:
    """The two counts issue 36 asks for: top picks inside the published range, and published
    layouts that fit and plan within EXPERT_SLACK of the top pick (or faster)."""
    k = sum(1 for r in records if r.get("inside"))
    experts = [r["expert"] for r in records if r.get("expert")]
    close = sum(1 for e in experts if e.get("memory_gb", math.inf) <= e.get("gpu_gb", 0)
                and e.get("vs_top") is not None and e["vs_top"] <= EXPERT_SLACK)
    return (f"top pick inside the published range: {k} of {len(records)}; published layouts that fit the GPU and "
            f"plan within {EXPERT_SLACK:.0%} of the top pick: {close} of {len(experts)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true", help="the records as JSON instead of the table")
    ap.add_argument("--only", default="", help="setups to run, by number (1-10): 4,5")
    ap.add_argument("--time-limit", type=float, default=PLAN_LIMIT, help="seconds each plan may take")
    a = ap.parse_args(argv)
    try:
        chosen = [int(x) for x in a.only.split(",") if x.strip()] or list(range(1, len(SETUPS) + 1))
        if any(not 1 <= n <= len(SETUPS) for n in chosen):
            raise ValueError
    except ValueError:
        print(f"--only: numbers from 1 to {len(SETUPS)}, comma-separated; got {a.only!r}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    runs = all_runs()
    records = [run_setup(SETUPS[n - 1], runs, a.time_limit) for n in chosen]
    if a.json:
        print(json.dumps({"setups": records, "inside": sum(1 for r in records if r.get("inside")),
                          "of": len(records), "tolerance": TOLERANCE}, indent=1, default=str))
    else:
        print(markdown(records))
        print(f"\n{summary(records)} (tolerance {TOLERANCE:.0%} either side of the published min..max); "
              f"{len(records)} setups in {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
