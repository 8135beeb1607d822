"""Published training runs as symcalc questions: the calibration runs and the held-out ones.

Each run becomes a :class:`Run`: the hardware preset, the given values (model shapes, layout,
batch) and the options (stack, precision, recompute, attention kernel ...) that translate its
source's settings, with the measured step time. ``predict`` answers them the way
``symcalc solve step_time ...`` does, one solve per group of runs that share hardware, options
and given names (their values as arrays). Nothing here is fitted: calibration/fit.py fits,
calibration/held_out.py judges.

Sources:
- calibration/published_runs.toml (a copy of shared/calibration/published_runs.toml), with what
  its tables do not print taken from the sources' launch scripts (calibration/run_configs.toml);
- calibration/held_out/*.toml: published runs of other stacks and regimes, never fitted on.
"""

from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import symcalc

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

HERE = Path(__file__).resolve().parent
PUBLISHED = HERE / "published_runs.toml"
CONFIGS = HERE / "run_configs.toml"
HELD_OUT = HERE / "held_out"


@dataclass
class Run:
    """One published run as a question, with its measured step time."""

    id: str
    source: str                 # the source group (leave-one-source-out leaves these out together)
    regime: str                 # fsdp, torchtitan, fp8, cp, moe, megatron, deepspeed
    hardware: str               # a preset name (symcalc list hardware)
    given: dict                 # quantity -> number (seq_len in tokens)
    options: dict               # option -> value (the stack among them)
    measured: float             # step time, s
    figure: str = ""            # what the source prints
    scored: bool = True
    why_not_scored: str = ""
    notes: list = field(default_factory=list)

    def command(self) -> str:
        """The command line that asks the same question."""
        args = ["symcalc", "solve", "step_time", "--hardware", self.hardware]
        for k, v in self.given.items():
            args.append(f"{k}={_fmt(v)} token" if k == "seq_len" else f"{k}={_fmt(v)}")
        for k, v in self.options.items():
            args += ["--option", f"{k}={v}"]
        return shlex.join(args + ["--to", "s"])


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def load_toml(path: Path) -> dict:
    return tomllib.loads(path.read_text(encoding="utf-8"))


# -- FLOP conventions of the calibration tables ------------------------------------------------------

def narayanan_flops(B, s, l, h, V) -> float:
    """Narayanan et al. 2021, with full recomputation: 96 B s l h^2 (1 + s/(6h) + V/(16 l h))."""
    return 96 * B * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))


def megatron_core_flops(B, s, L, h, V) -> float:
    """Megatron-Core's num_floating_point_operations (MHA, 4h GELU FFN): 12 B s L h^2 ((2 + s/h) + 4 + V/(2 L h))."""
    return 12 * B * s * L * h * h * ((2 + s / h) + 4 + V / (2 * L * h))


# -- the calibration runs -----------------------------------------------------------------------------

SHAPE = ("d_model", "n_layers", "n_heads", "vocab_size", "tp", "pp", "dp", "n_gpus", "global_batch_size")


def calibration_runs() -> list[Run]:
    """The runs of published_runs.toml (sections 1, 3 and 4) as questions."""
    data, configs = load_toml(PUBLISHED), load_toml(CONFIGS)
    out = []
    for table, flops, achieved in (("megatron_2021", narayanan_flops, "achieved_tflops_per_gpu"),
                                   ("megatron_core_2024", megatron_core_flops, "tflops_per_gpu")):
        config = configs[table]
        for row in data[table]:
            run = dict(config["runs"][row["id"]])
            options = dict(config["options"])
            for key in [k for k in run if k in ("overlap_grad_reduce",)]:
                options[key] = run.pop(key)
            if "virtual_stages" in run:
                options["pipeline_schedule"] = "interleaved"
            given = {k: row[k] for k in SHAPE}
            given["seq_len"] = row["seq_len"]
            given.update(run)
            f = flops(row["global_batch_size"], row["seq_len"], row["n_layers"], row["d_model"], row["vocab_size"])
            out.append(Run(id=row["id"], source=table, regime="megatron", hardware=config["hardware"], given=given,
                           options=options, measured=f / (float(row[achieved]) * 1e12 * row["n_gpus"]),
                           figure=f"{row[achieved]} TFLOP/s"))
    config = configs["stacks"]
    for row in data["stacks"]:
        hardware, given, options = parse_args(row["args"])
        cfg = config["runs"][row["id"]]
        hardware = cfg.get("hardware", hardware)
        options.update(config["options"].get(cfg["source"], {}))
        options.update(cfg.get("options", {}))
        given.update(cfg.get("given", {}))
        out.append(Run(id=row["id"], source=cfg["source"], regime=row["regime"], hardware=hardware, given=given,
                       options=options, measured=float(row["step_time_s"]), figure=f"{row['step_time_s']} s",
                       notes=[cfg.get("why", "")]))
    return out


def parse_args(args: list[str]) -> tuple[str, dict, dict]:
    """(hardware, given, options) of a `symcalc solve step_time ...` argument list; a model preset
    is expanded into its shapes so that every run is asked with the same given names."""
    hardware, model, given, options = "", None, {}, {}
    it = iter(args[2:])
    for a in it:
        if a == "--hardware":
            hardware = next(it)
        elif a == "--model":
            model = next(it)
        elif a == "--option":
            k, v = next(it).split("=", 1)
            options[k] = v
        elif a == "--to":
            next(it)
        elif "=" in a:
            k, v = a.split("=", 1)
            given[k] = float(v.split()[0])
    if model:
        from symcalc.library.presets import find_preset
        preset = find_preset("model", model)
        for name in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ffn", "vocab_size"):
            given.setdefault(name, float(preset.values[name][0].split()[0]))
        options = {**preset.options, **options}
    return hardware, {k: (int(v) if float(v).is_integer() else v) for k, v in given.items()}, options


# -- predicting -------------------------------------------------------------------------------------

def _symcalc_given(given: dict) -> dict:
    out = {k: v for k, v in given.items() if k != "seq_len"}
    out["seq_len"] = (given["seq_len"], "token")
    return out


def groups(runs: list[Run]) -> dict:
    """Runs that share hardware, options and given names: one solve answers them all."""
    by_key: dict = {}
    for i, r in enumerate(runs):
        key = (r.hardware, tuple(sorted(r.options.items())), tuple(sorted(r.given)))
        by_key.setdefault(key, []).append(i)
    return by_key


def predict(runs: list[Run], coefficients: dict | None = None, errors: dict | None = None) -> np.ndarray:
    """Predicted step time (s) of each run; NaN where the question has no answer (its error in
    ``errors`` by run id). ``coefficients`` maps a quantity to a value given to every run (or a
    function of the run giving its value), as a user's --hardware profile would."""
    out = np.full(len(runs), np.nan)
    for (hardware, options, names), idx in groups(runs).items():
        given = {n: np.array([float(runs[i].given[n]) for i in idx]) for n in names}
        given = _symcalc_given(given)
        extra = {}
        for name, value in (coefficients or {}).items():
            vals = [value(runs[i]) if callable(value) else value for i in idx]
            if any(v is None for v in vals):
                continue
            extra[name] = np.array([float(v) for v in vals])
        opts = dict(options)
        try:
            r = symcalc.solve("step_time", {**given, **extra}, options=opts, hardware=hardware,
                              conflicts=False, on_bounds="flag")
            out[idx] = np.broadcast_to(np.asarray(r.quantity_value.to("s").magnitude, dtype=float), (len(idx),))
        except symcalc.SymcalcError as e:
            if len(idx) > 1:      # one run the model cannot express must not take its group with it
                for i in idx:
                    out[i] = predict([runs[i]], coefficients, errors)[0]
            elif errors is not None:
                errors[runs[idx[0]].id] = str(e)
    return out


# -- the held-out runs --------------------------------------------------------------------------------

HARDWARE = [("GB300", "gb300"), ("GB200", "gb200"), ("B300", "b300"), ("B200", "b200"), ("H800", "h800"),
            ("H200", "h200"), ("96GB HBM2e", "h100-96gb-500w"), ("HBM2e 95", "h100-96gb-500w"),
            ("A100 40GB", "a100-40gb"), ("A100", "a100-80gb"), ("H100", "h100")]


def _hardware(text: str) -> str:
    for key, preset in HARDWARE:
        if key in text:
            return preset
    raise KeyError(text)


def _stack(text: str, printed: str = "") -> str:
    """The stack a source's software translates to. NeMo AutoModel rows that print "TE +
    DeepEP" run Transformer Engine's kernels and DeepEP's dispatcher (Megatron-Core's), with
    PyTorch FSDP2 for the data parallelism (zero_stage 3): megatron-core; its others
    (torch.compile, no DeepEP) are FSDP2 with PyTorch's kernels: torchtitan."""
    t = text.lower()
    if "llm-foundry" in t or "fms-fsdp" in t:
        return "fsdp"
    if "automodel" in t and "DeepEP" in printed:
        return "megatron-core"
    if "torchtitan" in t or "automodel" in t:
        return "torchtitan"
    if "deepspeed" in t:
        return "deepspeed"
    if "hai-llm" in t:
        return "hai-llm"          # DeepSeek's own: DualPipe, the all-to-all on dedicated SMs
    return "megatron-core"


def source_of(row: dict) -> str:
    s = row["stack"]
    for key, name in (("llm-foundry", "llm-foundry"), ("torchtitan", "torchtitan"), ("fms-fsdp", "fms-fsdp"),
                      ("AutoModel", "nemo-automodel"), ("Megatron-Bridge", "megatron-bridge"),
                      ("NeMo 24.07", "nemo-24.07"), ("HAI-LLM", "deepseek-v3-report"),
                      ("bigscience", "bloom"), ("DeepSpeed 0.6", "deepspeed-azure"), ("Megatron-DeepSpeed", "mt-nlg"),
                      ("Megatron-LM", "megatron-lm-llama-example"), ("NeMo", "nemo-long-context")):
        if key in s:
            return name
    return s[:20]


def _recompute_layers(text: str) -> tuple[str, int] | None:
    """(recompute_method, recompute_num_layers) where a source says which layers full
    recomputation checkpoints: Megatron's "method block, 5 layers", torchtitan's "every 2nd
    layer"; None where it says no more than "full" (every layer, the default)."""
    t = text.lower()
    m = re.search(r"method (block|uniform),? (\d+) layers?", t)
    if m:
        return m.group(1), int(m.group(2))
    m = re.search(r"every (\d+)(?:st|nd|rd|th) (?:layer|block)", t)
    if m:
        return "every_nth", int(m.group(1))
    return None


def _recompute(text: str, stack: str) -> tuple[str, str | None]:
    """(recompute, selective_recompute or None) from a source's words."""
    t = text.lower()
    if t.startswith("none") or ("false" in t and "true" not in t):
        return "none", None
    if _recompute_layers(t):
        return "full", None
    if "per-op" in t or t.split()[0] == "op" or "selective op" in t:
        return "selective", "non_matmul"
    if "selective" in t:
        return "selective", ("non_matmul" if stack == "torchtitan" else None)
    if "full" in t or "true" in t:
        return "full", None
    return "none", None


def _precision(row: dict) -> tuple[str, str | None]:
    text = " ".join((row["precision"], row.get("other", ""), row["id"])).lower()
    if "nvfp4" in text:
        return "fp4", "nvfp4"
    if not re.search(r"fp8|float8", text):
        if "pure" in row.get("printed", "").lower():
            return "mixed_fp16_adam", None       # bf16 gradients reduced (MP mode PURE)
        return "bf16_fp32_grads", None           # fp32 gradients reduced
    if "mxfp8" in text or "fp8mx" in text:
        return "fp8", "mxfp8"
    if "block" in text or "1x128" in text:
        return "fp8", "blockwise"
    if "rowwise" in text:
        return "fp8", "rowwise"
    if "tensorwise" in text or "float8" in text:
        return "fp8", "tensorwise"
    if "current" in text or "fp8cs" in text or "fp8-cs" in text:
        return "fp8", "current"
    return "fp8", None


def held_out_rows() -> list[dict]:
    rows = []
    for path in sorted(HELD_OUT.glob("*.toml")):
        rows.extend(load_toml(path).get("runs", []))
    return rows


def held_out_runs() -> list[Run]:
    """Every held-out row as a question (one translation of its source's settings)."""
    return [held_out_run(r) for r in held_out_rows()]


def held_out_run(row: dict) -> Run:
    a, lay = row["arch"], row["layout"]
    stack = _stack(row["stack"], row.get("printed", ""))
    tp, pp, cp = lay.get("tp", 1), lay.get("pp", 1), lay.get("cp", 1)
    given = dict(n_layers=a["n_layers"], d_model=a["d_model"], n_heads=a["n_heads"],
                 n_kv_heads=a.get("n_kv_heads", a["n_heads"]), vocab_size=a["vocab_size"], seq_len=row["seq_len"],
                 tp=tp, pp=pp, cp=cp, dp=row["n_gpus"] // (tp * pp * cp), n_gpus=row["n_gpus"],
                 global_batch_size=row["global_batch_size"], micro_batch_size=row.get("micro_batch_size") or 1)
    options: dict = {"stack": stack}
    moe = a.get("moe")
    if moe:
        shared = moe.get("n_shared", 0)
        given.update(n_routed_experts=moe["n_experts"], n_experts_activated=moe["top_k"] + shared,
                     d_ffn_expert=moe["d_ffn_expert"], ep=lay.get("ep", 1))
        options["architecture"] = "moe"
        if shared:
            given.update(n_shared_experts=shared, d_ffn_shared=moe.get("d_ffn_shared", moe["d_ffn_expert"]))
            options["shared_experts"] = "some"
        else:
            options["shared_experts"] = "none"
        if moe.get("first_dense_layers"):
            given.update(n_dense_layers=moe["first_dense_layers"], d_ffn=a["d_ffn"])
            options["moe_layers"] = "mixed"
        else:
            options["moe_layers"] = "all"
    else:
        given["d_ffn"] = a.get("d_ffn", 4 * a["d_model"])
    if a.get("mla"):
        given.update({k: v for k, v in a["mla"].items()})
        given.pop("n_kv_heads", None)
        options["attention"] = "mla"
        if a.get("mtp_layers") and "w/o MTP" not in row["model"]:
            given["mtp_depth"] = a["mtp_layers"]
    elif a.get("head_dim") and a["head_dim"] * a["n_heads"] != a["d_model"]:
        given["head_dim"] = a["head_dim"]
        options["attention"] = "gqa_head_dim"
    else:
        options["attention"] = "gqa" if given["n_kv_heads"] < a["n_heads"] else "mha"
    if a.get("sliding_window"):       # windowed layers, as the architecture states them
        given.update(sliding_window=a["sliding_window"], windowed_layer_fraction=a["windowed_layer_fraction"])
        options["attention_window"] = "sliding"
    if options["attention"] != "mla" and "n_kv_heads" not in given:
        given["n_kv_heads"] = a["n_heads"]
    gated = str(a.get("ffn", "")).startswith("swiglu")
    options["ffn"] = "swiglu" if gated else "gelu"
    options["tied_embeddings"] = "true" if a.get("tied_embeddings") else "false"
    options["dropout"] = "false"
    pos = str(a.get("pos_emb", "rotary" if gated else "learned")).lower()
    options["position_encoding"] = "alibi" if "alibi" in pos else ("learned" if "learned" in pos else "rotary")
    if lay.get("vp", 1) and lay.get("vp", 1) > 1:
        given["virtual_stages"] = lay["vp"]
        options["pipeline_schedule"] = "interleaved"
    sharding = lay.get("sharding", "")
    low = sharding.lower()
    if "shard_grad_op" in low:
        zero = "2"
    elif ("fsdp" in low and "fsdp=0" not in low) or "full_shard" in low or "zero-3" in low or "hybrid" in low:
        zero = "3"
    elif "zero-1" in low or "distributed optimizer" in low or "zero_stage=0" in low:
        zero = "1"
    else:
        zero = "1" if stack in ("megatron-core", "deepspeed") else "0"
    options["zero_stage"] = zero
    recompute, selective = _recompute(row["recompute"], stack)
    options["recompute"] = recompute
    layers = _recompute_layers(row["recompute"])
    if layers:
        options["recompute_method"], given["recompute_num_layers"] = layers
    if selective:
        options["selective_recompute"] = selective
    precision, recipe = _precision(row)
    options["precision"] = precision
    if recipe:
        options["fp8_recipe"] = recipe
    if stack == "deepspeed":
        options["attention_kernel"] = "eager"     # BLOOM, MT-NLG, DeepSpeed-Azure (2021-2022): before FlashAttention
    if "llm-foundry" in row["stack"]:
        options["attention_kernel"] = "flash1" if "triton" in row.get("attention", "") else "flash"
    if str(row.get("compile", "")).startswith("on"):
        options["torch_compile"] = "true"
    if _async_tp(row):
        options["tp_comm_overlap"] = "true"
    if tp > 1 and stack in ("megatron-core", "torchtitan"):
        options["sequence_parallel"] = "true"
    return Run(id=row["id"], source=source_of(row), regime=_regime(row, options, given), hardware=_hardware(row["hardware"]),
               given=given, options=options, measured=float(row["step_time_s"]), figure=row.get("measured", ""),
               scored=row.get("scored", True), why_not_scored=row.get("unscored", ""))


def _async_tp(row: dict) -> bool:
    """Whether the row ran torchtitan's async TP, as its source records it: "async TP on" in
    its settings, "AsyncTP" in what it prints, or (the June 2025 table, which prints the vanilla
    and the async figure on one line) the row's own column named in its id."""
    rid = row["id"].lower()
    return ("async tp on" in row.get("other", "").lower() or "AsyncTP" in row.get("printed", "")
            or ("asynctp" in rid and "vanilla" not in rid))


def _regime(row: dict, options: dict, given: dict) -> str:
    if options.get("architecture") == "moe":
        return "moe"
    if given.get("cp", 1) > 1 or row["seq_len"] >= 32768:
        return "long context"
    if options.get("precision") in ("fp8", "fp4"):
        return "fp8"
    if options["stack"] == "torchtitan":
        return "torchtitan"
    if options["stack"] == "fsdp":
        return "fsdp"
    if options["stack"] == "deepspeed":
        return "deepspeed"
    return "megatron"


def errors_of(measured: list) -> np.ndarray:
    """Relative step-time errors of calibrate.Measured runs as the library answers them now."""
    out = np.full(len(measured), np.nan)
    for i, m in enumerate(measured):
        try:
            r = symcalc.solve("step_time", m.given, options=m.options, hardware=m.hardware, conflicts=False,
                              on_bounds="flag")
            out[i] = float(r.quantity_value.to("s").magnitude) / m.step_time - 1
        except symcalc.SymcalcError:
            pass
    return out
