"""A model from a Hugging Face ``config.json`` (from disk only, never the network): the shapes,
experts and attention form it gives, and the options they imply."""

from __future__ import annotations

import json
from pathlib import Path

from symcalc.errors import (
    MalformedValueError,
)
from symcalc.findings import Finding
from symcalc.library.builtin_presets import Preset, label, read_document

MAX_CONFIG_BYTES = 1 << 20      # real config.json files are a few kB; more is not one

# config key -> (quantity, unit appended to the value)
_HF_KEYS = [
    (("num_hidden_layers", "n_layer", "num_layers"), "n_layers", ""),
    (("hidden_size", "n_embd", "d_model"), "d_model", ""),
    (("num_attention_heads", "n_head"), "n_heads", ""),
    (("num_key_value_heads",), "n_kv_heads", ""),
    (("head_dim",), "head_dim", ""),
    (("intermediate_size", "n_inner", "ffn_dim"), "d_ffn", ""),
    (("vocab_size",), "vocab_size", ""),
    # the longest context the model supports: the usual training sequence length unless given
    (("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length"), "seq_len", " token"),
    # and the limit a longer context is warned against
    (("max_position_embeddings", "n_positions", "n_ctx", "max_sequence_length", "seq_length"),
     "max_position_embeddings", " token"),
]
_NOTES = {"seq_len": " (the model's longest context, taken as the training sequence length; give seq_len "
                     "if it trained on shorter sequences)"}
_GATED = ("silu", "swiglu", "swish")
# model families whose feed-forward block is gated (3 matrices) whatever the activation's name
_GATED_FAMILIES = ("llama", "mistral", "mixtral", "qwen", "gemma", "phi3", "deepseek", "olmo", "granite",
                   "cohere", "internlm", "yi", "baichuan", "starcoder2_gated")


def model_from_hf_config(path: str | Path) -> Preset:
    """Read a Hugging Face ``config.json`` (layers, widths, heads, vocabulary, multi-head latent
    attention, experts, dense layers of an MoE model, and the options they imply). Missing
    optional keys are left out; unreadable files are a clear error.

    Returns
    -------
    Preset
        A model preset keyed by the file's name.

    Raises
    ------
    MalformedValueError
        The file is missing or unreadable, lacks the shape keys, or has values that are not
        positive numbers or do not fit together.
    """
    p = Path(path)
    where = f"config.json '{p}'"
    cfg = _read_config(p, where)
    if isinstance(cfg.get("text_config"), dict):     # multimodal wrappers keep the LM here
        cfg = {**cfg, **cfg["text_config"]}
    values = _hf_values(cfg, p.name, where)
    findings: list[Finding] = []
    experts, moe_options = _hf_experts(cfg, float(values["n_layers"][0]), p.name)
    options: dict[str, str] = {}
    latent = _hf_attention(cfg, values, options, p.name, where)
    if latent == {}:        # latent attention of a form the formulas do not count (a width missing)
        findings.append(Finding("preset", values={"file": p.name, "what": "latent_attention"}))
    family = str(cfg.get("model_type", "")).lower()
    options["ffn"] = "swiglu" if _hf_gated(cfg, family) else "gelu"
    if experts:
        options["architecture"] = "moe"
        options.update(moe_options)
        values.update(experts)
        if "moe_intermediate_size" not in cfg:          # Mixtral: every layer's FFN is the experts
            values["d_ffn_expert"] = values.pop("d_ffn")
    if "rms_norm_eps" in cfg:                    # the norms' weights are counted in n_params
        options["norms"] = "rmsnorm"
    elif "layer_norm_eps" in cfg or "layer_norm_epsilon" in cfg:
        options["norms"] = "layernorm"
    _hf_tied_embeddings(cfg, family, options)
    values.update(_hf_window(cfg, int(float(values["n_layers"][0])), family, options, p.name))
    name = label(cfg.get("_name_or_path") or cfg.get("model_type") or p.stem)
    return Preset(kind="model", key=name, title=f"{name} (from {p.name})", source=str(p), values=values,
                  options=options, notes=_hf_mtp_notes(cfg, p.name), findings=tuple(findings))


def _hf_values(cfg: dict, file: str, where: str) -> dict[str, tuple[str, str]]:
    """The shape values _HF_KEYS names (the first key present of each), each a positive number
    with where it came from; the layers, width and heads are required."""
    values: dict[str, tuple[str, str]] = {}
    for keys, quantity, unit in _HF_KEYS:
        for key in keys:
            if key in cfg and cfg[key] is not None:
                value = cfg[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                    raise MalformedValueError(f"{where}: '{key}' must be a positive number, got {value!r}")
                values[quantity] = (f"{value}{unit}", f"{file}: {key} = {value}{_NOTES.get(quantity, '')}")
                break
    required = {"n_layers", "d_model", "n_heads"}
    missing = sorted(required - set(values))
    if missing:
        raise MalformedValueError(f"{where}: missing {', '.join(missing)} (keys like num_hidden_layers, "
                                  "hidden_size, num_attention_heads); is this a transformer config?")
    return values


def _hf_attention(cfg: dict, values: dict[str, tuple[str, str]], options: dict[str, str], file: str,
                  where: str) -> dict[str, tuple[str, str]] | None:
    """Set the attention option the heads imply (MLA, GQA with heads of their own width, GQA or
    MHA), with the values it reads (MLA's latents in, a head_dim the formulas derive out).
    Returns _hf_mla's answer: {} for latent attention of a form the formulas do not count."""
    heads = float(values["n_heads"][0])
    kv = float(values.get("n_kv_heads", values["n_heads"])[0])
    if kv > heads or heads % kv:
        raise MalformedValueError(f"{where}: num_key_value_heads = {values['n_kv_heads'][0]} must divide "
                                  f"num_attention_heads = {values['n_heads'][0]} (each KV head serves a group of "
                                  "query heads)")
    d = float(values["d_model"][0])
    head = float(values["head_dim"][0]) if "head_dim" in values else d / heads
    latent = _hf_mla(cfg, file)
    if latent:
        values.update(latent)
        values.pop("head_dim", None)        # DeepseekV3Config's head_dim is the RoPE part, not a head's width
        options["attention"] = "mla"
    elif abs(head * heads - d) > 0.5:
        options["attention"] = "gqa_head_dim"       # Gemma: n_heads x head_dim != d_model
    else:
        values.pop("head_dim", None)
        options["attention"] = "gqa" if kv < heads else "mha"
    return latent


def _hf_gated(cfg: dict, family: str) -> bool:
    """Whether the feed-forward block is gated (3 matrices): by its activation's name or the
    model's family."""
    act = str(cfg.get("hidden_act") or cfg.get("hidden_activation") or cfg.get("activation_function") or "").lower()
    return any(g in act for g in _GATED) or any(family.startswith(f) for f in _GATED_FAMILIES)


def _hf_tied_embeddings(cfg: dict, family: str, options: dict[str, str]) -> None:
    """Set whether the LM head is the embedding: as the config says, else as GPT-2 style configs
    and Gemma do by default (tied)."""
    if "tie_word_embeddings" in cfg:
        options["tied_embeddings"] = "true" if cfg["tie_word_embeddings"] else "false"
    elif "n_embd" in cfg:      # GPT-2 style configs tie the LM head to the embedding
        options["tied_embeddings"] = "true"
    if "tie_word_embeddings" not in cfg and family.startswith("gemma"):
        options["tied_embeddings"] = "true"      # Gemma ties its embeddings by default


# families whose config.json leaves the local/global pattern implicit: one layer in n attends over
# the whole context (transformers' Gemma2Config alternates the two; Gemma3TextConfig's
# sliding_window_pattern defaults to 6)
_WINDOW_EVERY = {"gemma2": 2, "gemma3": 6}


def _hf_window(cfg: dict, n_layers: int, family: str, options: dict[str, str], file: str
               ) -> dict[str, tuple[str, str]]:
    """The sliding window and the share of the layers that use it (attention_window = sliding),
    nothing where every layer attends over the whole context. Read from layer_types (the layers
    named sliding_attention), else sliding_window_pattern (one layer in p global), max_window_layers
    (Qwen: the layers from that one on are windowed), the family's implicit pattern, else every
    layer (Mistral 7B v0.1, Phi-3). A window switched off (use_sliding_window false) is none."""
    window = _hf_number(cfg, "sliding_window", file)
    if not window or cfg.get("use_sliding_window") is False:
        return {}
    types = cfg.get("layer_types")
    pattern = _hf_number(cfg, "sliding_window_pattern", file, positive=True)
    every = next((n for f, n in _WINDOW_EVERY.items() if family.startswith(f)), None)
    if types is not None:
        if not isinstance(types, list) or len(types) != n_layers or not all(isinstance(t, str) for t in types):
            raise MalformedValueError(f"config.json '{file}': 'layer_types' must list one attention type a layer "
                                      f"({n_layers}), got {types!r:.60}")
        windowed = sum("sliding" in t for t in types)
        why = f"layer_types: {windowed} of {n_layers} sliding_attention"
    elif pattern:
        windowed, why = n_layers - n_layers // int(pattern), f"sliding_window_pattern = {pattern}: one layer in {pattern} global"
    elif _hf_number(cfg, "max_window_layers", file) is not None:
        first = int(cfg["max_window_layers"])
        windowed, why = max(0, n_layers - first), f"max_window_layers = {first}: the layers from it on windowed"
    elif every:
        windowed, why = n_layers - n_layers // every, f"model_type {family}: one layer in {every} global"
    else:
        windowed, why = n_layers, "every layer windowed"
    if not windowed:
        return {}
    options["attention_window"] = "sliding"
    return {"sliding_window": (f"{window} token", f"{file}: sliding_window = {window}"),
            "windowed_layer_fraction": (str(windowed / n_layers), f"{file}: {why}")}


def _hf_mtp_notes(cfg: dict, file: str) -> str:
    """A note that multi-token-prediction modules are not counted, when the config has some."""
    mtp = cfg.get("num_nextn_predict_layers")
    return (f"{file}: num_nextn_predict_layers = {label(mtp)}: the multi-token-prediction module(s) are not "
            "counted (DeepSeek-V3's published 671B leaves its MTP module out)"
            if isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > 0 else "")


def _read_config(p: Path, where: str) -> dict:
    """The JSON object of a config.json; a clear error for anything else (not a regular file,
    too large, not text, not JSON, nested beyond what a parser should follow)."""
    cfg = read_document(p, where, MAX_CONFIG_BYTES, "a model's config.json is a few kB", json.loads,
                        lambda e: f"not valid JSON ({e.msg.removesuffix(' at')} at line {e.lineno}, "
                                  f"column {e.colno}); truncated?", "a model's settings")
    if not isinstance(cfg, dict):
        raise MalformedValueError(f"{where}: expected a JSON object of model settings")
    return cfg



def _hf_number(cfg: dict, key: str, file: str, positive: bool = False):
    """A count or width of the config, None when absent or null; a clear error when it is not a
    number (negative, or with ``positive`` zero, included)."""
    v = cfg.get(key)
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float))
                          or not (0 < v if positive else 0 <= v) or v == float("inf")):
        raise MalformedValueError(f"config.json '{file}': '{key}' must be a {'positive' if positive else 'non-negative'} "
                                  f"number, got {v!r:.40}")
    return v


# multi-head latent attention (DeepSeek-V2/V3, Kimi K2): its config keys are the quantities' names
_MLA_KEYS = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def _hf_mla(cfg: dict, file: str) -> dict[str, tuple[str, str]] | None:
    """The widths of multi-head latent attention (attention = mla): None without a KV latent
    (kv_lora_rank), {} when one of the widths is missing or null, a form the formulas do not
    count. A null or 0 q_lora_rank (DeepSeek-V2-Lite, Moonlight: the queries skip the latent) is
    given as 0, which implies mla_query = direct."""
    if not _hf_number(cfg, "kv_lora_rank", file):
        return None
    widths = {key: _hf_number(cfg, key, file, positive=True) for key in _MLA_KEYS if key != "q_lora_rank"}
    if any(v is None for v in widths.values()):
        return {}
    widths["q_lora_rank"] = _hf_number(cfg, "q_lora_rank", file) or 0
    return {key: (str(v), f"{file}: {key} = {cfg.get(key)}") for key, v in widths.items()}


def _hf_experts(cfg: dict, n_layers: float, file: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """Expert counts and sizes of an MoE config (Mixtral, DeepSeek, Qwen-MoE key names): the
    values, and the options shared_experts and moe_layers they imply. Nothing for a dense config.

    Shared experts: DeepSeek's n_shared_experts, each as wide as a routed expert
    (moe_intermediate_size); Qwen2-MoE's one shared expert of shared_expert_intermediate_size.
    Dense layers: DeepSeek's first first_k_dense_replace layers, and every layer whose index is not
    a multiple of moe_layer_freq; Qwen-MoE's mlp_only_layers, and the layers decoder_sparse_step
    skips (Hugging Face's DeepseekV3DecoderLayer and Qwen2MoeDecoderLayer choose an MLP or the experts
    by these keys)."""
    out: dict[str, tuple[str, str]] = {}
    options: dict[str, str] = {}
    routed_key = next((k for k in ("n_routed_experts", "num_local_experts", "num_experts")
                       if _hf_number(cfg, k, file)), None)
    if routed_key is None:
        return out, options
    routed = cfg[routed_key]
    out["n_routed_experts"] = (str(routed), f"{file}: {routed_key} = {routed}")
    shared = _hf_number(cfg, "n_shared_experts", file) or 0
    shared_width = _hf_number(cfg, "shared_expert_intermediate_size", file)
    if shared:
        out["n_shared_experts"] = (str(shared), f"{file}: n_shared_experts = {shared}")
        width = _hf_number(cfg, "moe_intermediate_size", file, positive=True)
        if width:
            out["d_ffn_shared"] = (str(width), f"{file}: moe_intermediate_size = {width} (DeepSeek's shared experts "
                                               "are as wide as its routed ones)")
    elif shared_width:        # Qwen2-MoE: one shared expert of its own width
        shared = 1
        out["n_shared_experts"] = ("1", f"{file}: shared_expert_intermediate_size = {shared_width} (one shared expert)")
        out["d_ffn_shared"] = (str(shared_width), f"{file}: shared_expert_intermediate_size = {shared_width}")
    options["shared_experts"] = "some" if shared else "none"
    out["n_experts"] = (str(routed + shared), f"{file}: {routed_key} = {routed}"
                        + (f" routed + {shared} shared" if shared else ""))
    top_k = _hf_number(cfg, "num_experts_per_tok", file) or _hf_number(cfg, "moe_topk", file)
    if top_k:
        out["n_experts_activated"] = (str(top_k + shared), f"{file}: num_experts_per_tok = {top_k} routed"
                                      + (f" + {shared} shared" if shared else ""))
    width = _hf_number(cfg, "moe_intermediate_size", file)
    if width is not None:
        out["d_ffn_expert"] = (str(width), f"{file}: moe_intermediate_size = {width}")
    dense, why = _hf_dense_layers(cfg, int(n_layers), file)
    if dense:
        out["n_dense_layers"] = (str(dense), f"{file}: {why}")
    options["moe_layers"] = "mixed" if dense else "all"
    return out, options


def _hf_dense_layers(cfg: dict, n_layers: int, file: str) -> tuple[int, str]:
    """How many of the n_layers layers of an MoE config keep a dense MLP, and the keys that say so."""
    first = int(_hf_number(cfg, "first_k_dense_replace", file) or 0)
    freq = int(_hf_number(cfg, "moe_layer_freq", file, positive=True) or 1)
    step = int(_hf_number(cfg, "decoder_sparse_step", file, positive=True) or 1)
    only = cfg.get("mlp_only_layers") or []
    if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in only):
        raise MalformedValueError(f"config.json '{file}': 'mlp_only_layers' must be a list of layer numbers, "
                                  f"got {only!r:.40}")
    if n_layers > 100_000:
        raise MalformedValueError(f"config.json '{file}': num_hidden_layers = {n_layers} is not a layer count")
    moe = sum(1 for i in range(n_layers)
              if i >= first and i % freq == 0 and i not in only and (i + 1) % step == 0)
    keys = [f"{k} = {v}" for k, v, usual in (("first_k_dense_replace", first, 0), ("moe_layer_freq", freq, 1),
                                             ("decoder_sparse_step", step, 1), ("mlp_only_layers", only, []))
            if v != usual]
    return n_layers - moe, f"{', '.join(keys)}: {n_layers - moe} of {n_layers} layers dense"
