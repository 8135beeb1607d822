"""Judge the peak-memory model on published measured peaks: ``python calibration/memory.py``.

The rows are in ``calibration/memory/*.toml`` (one file per source; README.md there). Each row
is translated once, by the settings it records (``translate``: no per-row tuning), into the
question ``symcalc solve total_memory_per_gpu ... --option memory_figure=F`` asks, F being the
counter the source printed (reserved; allocated, or active, which PyTorch counts the same way
at the peak; a row that does not say is scored as reserved, what runs out). The error is
predicted / measured - 1: positive when the model counts too much.

A row the data marks unscored is listed with the reason, not scored. CPU offload of states or
activations, the optimizer step in the backward, paged optimizer states (outside PyTorch's
counters) and LoRA / QLoRA are options (formulas/finetune.toml).

``--fit`` fits the one coefficient these rows can speak to, allocator_reserve_fraction (what
PyTorch's caching allocator holds beyond the tensors' peak), on the reserved rows, and reports
leave-one-source-out errors: the fraction fitted on the other sources, this one predicted.
Options: ``--rows`` (every row, worst first), ``--commands`` (with each row's command line),
``--json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from held_out import stats  # noqa: E402  (the same summary of relative errors)

ROWS = HERE / "memory"
GiB = 2 ** 30


@dataclass
class MemoryRun:
    id: str
    source: str                 # the file's stem: one published source
    measured: float             # bytes
    figure: str                 # memory_figure to ask for
    given: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    why_not: str | None = None  # set when the row cannot be expressed
    measure: str = ""           # the counter as the row records it ("unknown" where not printed)
    check: bool = False         # added after the model was set: scored, never fitted on (``check = true``)

    def command(self) -> str:
        values = " ".join(f"'{k}={v}'" if " " in str(v) else f"{k}={v}" for k, v in self.given.items())
        opts = " ".join(f"-o {k}={v}" for k, v in self.options.items())
        return f"symcalc solve total_memory_per_gpu {values} {opts} --to GiB"


def load_rows() -> list[tuple[str, dict]]:
    """(source, row) for every row: the source is the published document (repository and
    path, before its commit), so that leaving a source out leaves out one publication."""
    rows = []
    for path in sorted(ROWS.glob("*.toml")):
        for row in tomllib.loads(path.read_text())["runs"]:
            doc = row["source"].split(" @")[0].split(" (")[0].strip()
            rows.append((doc.split("/test_cases/")[0], row))     # one CI suite is one publication
    return rows


def _has(text: str, *words: str) -> bool:
    t = text.lower()
    return any(w in t for w in words)


def _finetune_options(row: dict, other: str, o: dict, g: dict) -> None:
    """The fine-tuning settings a row records (formulas/finetune.toml): the optimizer step in
    the backward, states or weights offloaded to the CPU, checkpointed inputs offloaded, and a
    LoRA / QLoRA adapter (the row's ``adapter`` table: method, rank, targets)."""
    text = other.lower().replace(" ", "")
    if "optimizer_in_bwd=true" in text:
        o["optimizer_step"] = "in_backward"
    if "fsdp_cpu_offload=true" in text or "offload_param" in text:
        o["offload"] = "all"
    elif "offload_optimizer" in text or "zero-offload" in text:
        o["offload"] = "optimizer"
    if "enable_activation_offloading=true" in text:
        o["activation_offload"] = "cpu"
    adapter = row.get("adapter")
    if adapter:
        o["finetune"], o["lora_targets"] = adapter["method"], adapter["targets"]
        g["lora_rank"] = adapter["rank"]


def _moe_and_latent(a: dict, lay: dict, g: dict, o: dict) -> None:
    """A mixture of experts' counts and layout (ep, etp) and multi-head latent attention's widths,
    as the row's arch records them (its moe and mla tables)."""
    moe, mla = a.get("moe"), a.get("mla")
    if moe:
        o["architecture"] = "moe"
        g.update(n_routed_experts=moe["n_experts"], d_ffn_expert=moe["d_ffn_expert"],
                 n_experts_activated=moe["top_k"] + moe.get("n_shared", 0), ep=lay.get("ep", 1))
        if lay.get("etp"):
            g["etp"] = lay["etp"]
        o["shared_experts"] = "some" if moe.get("n_shared") else "none"
        if moe.get("n_shared"):
            g.update(n_shared_experts=moe["n_shared"], d_ffn_shared=moe.get("d_ffn_shared", moe["d_ffn_expert"]))
        o["moe_layers"] = "mixed" if moe.get("first_dense_layers") else "all"
        if moe.get("first_dense_layers"):
            g["n_dense_layers"] = moe["first_dense_layers"]
    if mla:
        g.update({k: mla[k] for k in ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                        "v_head_dim")})


def translate(source: str, row: dict) -> MemoryRun:
    """One row as a symcalc question, from what the row records (architecture, layout,
    precision, recompute, loss, optimizer, counter)."""
    a, lay = row["arch"], row["layout"]
    other = " ".join(str(row.get(k, "")) for k in ("other", "optimizer", "precision", "layout"))
    run = MemoryRun(row["id"], source, row["measured_gib"] * GiB,
                    "allocated" if row["measure"] in ("allocated", "active") else "reserved", measure=row["measure"],
                    check=bool(row.get("check", False)))
    if not row.get("scored", True):
        run.why_not = row.get("why_not_scored", "marked unscored in the data")
        return run
    g = run.given
    g.update(n_layers=a["n_layers"], d_model=a["d_model"], n_heads=a["n_heads"], n_kv_heads=a.get("n_kv_heads", a["n_heads"]),
             vocab_size=a["vocab_size"], seq_len=f"{row['seq_len']} token", micro_batch_size=row["micro_batch_size"],
             tp=lay.get("tp", 1), pp=lay.get("pp", 1), cp=lay.get("cp", 1), dp=lay.get("dp", 1))
    g["n_gpus"] = g["tp"] * g["pp"] * g["cp"] * g["dp"]
    if "d_ffn" in a:
        g["d_ffn"] = a["d_ffn"]
    if a.get("head_dim") and a["head_dim"] * a["n_heads"] != a["d_model"]:
        g["head_dim"] = a["head_dim"]
    o = run.options
    _moe_and_latent(a, lay, g, o)
    o["memory_figure"] = run.figure
    o["ffn"] = "swiglu" if "swiglu" in a.get("ffn", "") else "gelu"
    o["tied_embeddings"] = "true" if a.get("tied_embeddings") else "false"
    megatron = row["stack"].startswith("megatron")
    o["stack"] = {"torchtitan": "torchtitan", "megatron-core": "megatron-core", "deepspeed": "deepspeed",
                  "torchtune": "torchtune"}.get(row["stack"], "fsdp")
    o["dropout"] = "true" if row.get("dropout", megatron) else "false"     # as the row records it, else the stack's
    o["position_encoding"] = "learned" if megatron else "rotary"
    # sharding: FSDP full shard is ZeRO-3; Megatron's distributed optimizer ZeRO-1; one GPU none
    sharding = lay.get("sharding", "").lower()
    if g["dp"] * g["cp"] == 1:
        o["zero_stage"] = "0"
    elif "fsdp" in sharding or "zero-3" in sharding or "full shard" in sharding:
        o["zero_stage"] = "3"
    elif "distributed optimizer" in sharding:
        o["zero_stage"] = "1"
    else:
        o["zero_stage"] = "0"
    # precision: Megatron keeps fp32 main gradients; torchtune's pure bf16 keeps no fp32 copy
    prec = row.get("precision", "").lower()
    if megatron:
        # fp32 main gradients unless the optimizer keeps them in bf16 (precision-aware optimizer)
        o["precision"] = "mixed_fp16_adam" if "bf16 main grads" in prec else "bf16_main_grads"
        if "bf16 exp_avg" in prec:
            o["optimizer"] = "adam_bf16_moments"
    elif "pure bf16" in prec and o["stack"] != "torchtune":     # torchtune's stack says it itself
        g["master_weight_bytes_per_param"] = "0 byte"
        if "8bit" not in row.get("optimizer", "").lower():
            g["optimizer_state_bytes_per_param"] = "4 byte"   # AdamW's m and v in bf16
    # FP8 GEMMs where the row names a Float8 or MX converter (the states stay the stack's)
    if "mxfp8" in prec:
        o["precision"], o["fp8_recipe"] = "fp8", "mxfp8"
    elif "float8" in prec:
        o["precision"], o["fp8_recipe"] = "fp8", "rowwise" if "rowwise" in prec else "tensorwise"
    opt = row.get("optimizer", "").lower()
    _finetune_options(row, other, o, g)
    if "paged" in opt:      # bitsandbytes' paged states: outside PyTorch's counters
        o["optimizer_paging"] = "unified"
    if "8bit" in opt:
        o["optimizer"] = "adamw_8bit_torchao" if "torchao" in opt else "adam_8bit"
    # the optimizer step's kernels: as the row records them, else PyTorch's default (foreach);
    # a row naming foreach wins over the word "fused" in its reason ("optimizer.fused default false")
    if "foreach" in opt or ("torch.optim" in opt and "fused" not in opt):
        o["optimizer_impl"] = "foreach"
    elif "fused" in opt:
        o["optimizer_impl"] = "fused"
    # the allocator: expandable segments where the launcher sets them
    if "expandable_segments:true" in other.lower().replace(" ", "") and "not printed (the post" not in other:
        o["allocator_segments"] = "expandable"
    # recompute
    rec = row.get("recompute", "").lower()
    if rec.startswith("selective modules"):       # Megatron-Core's recompute_modules, as listed
        listed = rec.removeprefix("selective modules").split("(")[0].replace("core_attn", "attention_core")
        o["recompute"] = "selective"
        o["selective_recompute"] = "+".join(m.strip() for m in listed.split(",") if m.strip())
    elif rec.startswith("selective op"):
        o["recompute"], o["selective_recompute"] = "selective", "non_matmul"
    elif rec.startswith("selective"):
        o["recompute"], o["selective_recompute"] = "selective", "attention_core"
    elif rec.startswith("full"):
        o["recompute"] = "full"
    else:
        o["recompute"] = "none"
    # attention
    att = row.get("attention", "").lower()
    if "unfused" in att or "eager" in att or ("sdpa" in att and "materialised mask" in att and "flex" not in att):
        o["attention_kernel"] = "eager"
    elif megatron:
        o["attention_kernel"] = "cudnn"
    else:
        o["attention_kernel"] = "flash"
    loss = row.get("loss", "").lower()
    compiled = ("compiled" in loss and "not compiled" not in loss) or "compile_loss" in other.lower()
    o["loss_kernel"] = ("vocab_parallel" if "vocab-parallel" in loss or "vocab_parallel" in loss
                        else "dtensor_parallel" if "loss parallel" in loss and g["tp"] > 1
                        else "fused" if "fused linear" in loss
                        else "chunked_compiled" if compiled and "chunk" in loss
                        # torchtune's decoder upcasts unchunked logits itself; the compiled loss reads them
                        else "fp32_logits_compiled" if compiled and row.get("stack") == "torchtune"
                        else "compiled" if compiled
                        else "chunked" if "chunk" in loss else "standard")
    if row.get("compile"):
        o["torch_compile"] = "true"
    if row.get("fsdp_units") and o["zero_stage"] == "3":   # the FSDP units the stack's version wraps
        o["fsdp_units"] = row["fsdp_units"]
    if g["tp"] > 1 and o["stack"] == "torchtitan":
        o["sequence_parallel"] = "true"
    if megatron:
        o["sequence_parallel"] = "true" if "sequence parallel" in other.lower() and "without sequence" not in other.lower() else "false"
    if g["pp"] > 1:
        vp = row.get("layout", {}).get("vp") or (8 if "virtual" in other.lower() else 1)
        if "interleaved" in other.lower() and vp > 1:
            o["pipeline_schedule"] = "interleaved"
            g["virtual_stages"] = vp
    # the global batch fixes the micro-batches of a step (whether gradients accumulate): as
    # printed, or one micro-batch per replica where the row records no accumulation
    if row.get("global_batch_size"):
        g["global_batch_size"] = row["global_batch_size"]
    elif "gradient_accumulation_steps=1" in other.replace(" ", ""):
        g["global_batch_size"] = row["micro_batch_size"] * g["dp"]
    return run


def predict(runs: list[MemoryRun], reserve: float | None = None, target: str = "total_memory_per_gpu",
            figure: str | None = None) -> tuple[np.ndarray, dict]:
    """(``target`` in bytes per run, nan where not expressible; {run id: error line}), with the
    allocator's reserve fraction and the memory figure given where they are."""
    import symcalc
    out, errors = [], {}
    for r in runs:
        if r.why_not:
            out.append(np.nan)
            continue
        given = dict(r.given)
        if reserve is not None:
            given["allocator_reserve_fraction"] = reserve
        options = {**r.options, "memory_figure": figure} if figure else r.options
        try:
            res = symcalc.solve(target, given, options=options)
            out.append(res.to("byte").magnitude)
        except symcalc.SymcalcError as e:   # a row the model cannot answer: reported, not scored
            errors[r.id] = str(e).splitlines()[0]
            out.append(np.nan)
    return np.array(out, dtype=float), errors


def reserve_base(runs: list[MemoryRun]) -> np.ndarray:
    """Per run, what the allocator's reserve is a fraction of (allocator_reserve_memory at a
    fraction of 1: the transient blocks at the peak), nan where the run is not answered."""
    return predict(runs, reserve=1, target="allocator_reserve_memory", figure="reserved")[0]


def fit_reserve(runs: list[MemoryRun], pred_alloc: np.ndarray, transient: np.ndarray) -> float:
    """The allocator_reserve_fraction f minimising the error of the reserved rows, predicted =
    allocated + f x transient (the short-lived blocks the reserve follows, formulas/peak_memory.toml
    allocator_reserve), on the rows that print the reserved counter (not those whose counter
    is unknown and only scored as reserved) and are not check rows (added after the model was set,
    to judge it out of sample): the mean over publications of each one's mean |error|, so that one
    publication's many rows (one machine, one software version) do not outvote the others.
    A 1-D search over [0, 0.5] (convex in f). O(n x 501)."""
    idx = [i for i, r in enumerate(runs) if r.figure == "reserved" and r.measure != "unknown" and not r.check
           and np.isfinite(pred_alloc[i]) and np.isfinite(transient[i])]
    if not idx:
        return float("nan")
    alloc, base = pred_alloc[idx], transient[idx]
    meas = np.array([runs[i].measured for i in idx])
    groups = [np.array([k for k, i in enumerate(idx) if runs[i].source == src]) for src in {runs[i].source for i in idx}]
    grid = np.linspace(0, 0.5, 501)
    cost = [np.mean([np.mean(np.abs((alloc[g] + f * base[g]) / meas[g] - 1)) for g in groups]) for f in grid]
    return float(grid[int(np.argmin(cost))])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", action="store_true", help="fit allocator_reserve_fraction; leave-one-source-out errors")
    ap.add_argument("--rows", action="store_true")
    ap.add_argument("--commands", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    runs = [translate(src, row) for src, row in load_rows()]
    pred, failures = predict(runs)
    ok = np.isfinite(pred)
    err = np.where(ok, pred / np.array([r.measured for r in runs]) - 1, np.nan)
    by = defaultdict(list)
    for r, e in zip(runs, err):
        if np.isfinite(e):
            by[r.source].append(e)
    report = {"all": stats(err[ok]), "by_source": {k: stats(np.array(v)) for k, v in sorted(by.items())},
              "rows": {r.id: float(e) for r, e in zip(runs, err) if np.isfinite(e)},
              "not_expressible": {r.id: r.why_not for r in runs if r.why_not}, "failed": failures}
    if args.fit:
        # the tensors' peak of every row (allocated), then the reserve fitted per left-out source
        alloc, _ = predict(runs, figure="allocated")
        transient = reserve_base(runs)
        f_all = fit_reserve(runs, alloc, transient)
        loso = {}
        for src in sorted({r.source for r in runs}):
            keep = [i for i, r in enumerate(runs) if r.source != src]
            f = fit_reserve([runs[i] for i in keep], alloc[keep], transient[keep])
            mine = [i for i, r in enumerate(runs) if r.source == src and np.isfinite(alloc[i])]
            e = np.array([(alloc[i] + (f * transient[i] if runs[i].figure == "reserved" else 0)) / runs[i].measured - 1
                          for i in mine])
            loso[src] = {"fraction": f, **stats(e)}
        report["fit"] = {"allocator_reserve_fraction": f_all, "leave_one_source_out": loso}
    if args.json:
        print(json.dumps(report, indent=1))
        return 0
    n_scored = int(ok.sum())
    print(f"Published measured peaks: {len(runs)} rows of {len({r.source for r in runs})} sources, {n_scored} scored "
          "(error = predicted / measured - 1)\n")
    w = max(len(k) for k in report["by_source"]) if report["by_source"] else 10
    print(f"  {'source':<{w}} rows  mean|e|   max|e|    bias")
    for k, s in report["by_source"].items():
        print(f"  {k:<{w}} {s['n']:4d}  {s['mean'] * 100:5.1f} %  {s['max'] * 100:5.1f} %  {s['bias'] * 100:+6.1f} %")
    s = report["all"]
    if s["n"]:
        print(f"  {'all':<{w}} {s['n']:4d}  {s['mean'] * 100:5.1f} %  {s['max'] * 100:5.1f} %  {s['bias'] * 100:+6.1f} %")
    if args.fit:
        f = report["fit"]
        print(f"\nallocator_reserve_fraction fitted on every reserved row (check rows left out): "
              f"{f['allocator_reserve_fraction']:.3f}")
        print("Leave one source out (fraction fitted on the others):")
        for k, v in f["leave_one_source_out"].items():
            if v["n"]:
                print(f"  {k:<{w}} f = {v['fraction']:.3f}  mean|e| {v['mean'] * 100:5.1f} %  max {v['max'] * 100:5.1f} %")
    if report["not_expressible"] or failures:
        print("\nNot scored:")
        for k, v in {**report["not_expressible"], **failures}.items():
            print(f"  {k}: {v}")
    if args.rows:
        print("\nRows, worst first:")
        for r, e in sorted(((r, e) for r, e in zip(runs, err) if np.isfinite(e)), key=lambda t: -abs(t[1])):
            print(f"  {e * 100:+6.1f} %  {r.id}  ({r.source}, {r.figure}; measured {r.measured / GiB:.1f} GiB, "
                  f"predicted {(1 + e) * r.measured / GiB:.1f})")
            if args.commands:
                print(f"      {r.command()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
