"""Presets: known values of real hardware and real models, each with its source.

``formulas/presets/hardware.toml`` and ``models.toml`` hold them; a Hugging Face
``config.json`` file is read as a model (from disk only, never the network). A preset turns
into given values and options for a query; what the user gives explicitly wins, and a preset
never supplies the quantity being solved for.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from symcalc.errors import (
    LibraryError,
    MalformedValueError,
    UnknownNameError,
    closest_names,
)
from symcalc.findings import Finding
from symcalc.library.loading import formula_dir

# a preset kind -> the name of its data file under formulas/presets (and of `symcalc list ...`)
KINDS = {"hardware": "hardware", "model": "models"}
PRESET_KEYS = {"title", "aliases", "source", "notes", "options", "values", "peak_flops", "published"}


@dataclass
class Preset:
    """One piece of hardware or one model: values (with sources) and implied options."""

    kind: str                                     # "hardware" or "model" (a key of KINDS)
    key: str
    title: str
    source: str
    aliases: tuple[str, ...] = ()
    notes: str = ""
    values: dict[str, tuple[str, str]] = field(default_factory=dict)      # quantity -> (value, source)
    peak_flops: dict[str, tuple[str, str]] = field(default_factory=dict)  # compute dtype -> (value, source)
    options: dict[str, str] = field(default_factory=dict)
    published: tuple[str, ...] = ()     # values kept even when asked for (the shapes do not model them)
    findings: tuple[Finding, ...] = ()  # what a reader of this preset should know (config.json caveats)

    def resolve(self, options: dict[str, str], compute_dtype: str | None) -> dict[str, tuple[str, str]]:
        """Values this preset gives under ``options``: its values, plus the dense peak for the
        compute dtype the precision option implies (its ``compute_dtype`` in the option data;
        a precision that names none gets no peak from a preset: nothing is guessed)."""
        out = dict(self.values)
        if self.peak_flops and compute_dtype in self.peak_flops:
            out["peak_flops"] = self.peak_flops[compute_dtype]
        return out


def presets_dir() -> Path:
    return formula_dir() / "presets"


@lru_cache(maxsize=1)
def all_presets() -> dict[str, dict[str, Preset]]:
    """Every built-in preset, by kind and key (loaded once).

    Returns
    -------
    ``{kind: {key: Preset}}`` for the kinds of :data:`KINDS`.

    Raises
    ------
    LibraryError
        A preset file cannot be read, or a preset in it has unknown or incomplete keys.
    """
    if sys.version_info >= (3, 11):   # start-up: a question without presets never reads them
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    out: dict[str, dict[str, Preset]] = {}
    for kind, stem in KINDS.items():
        path = presets_dir() / f"{stem}.toml"
        try:
            doc = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise LibraryError(f"presets/{path.name}: cannot be read: {e}") from None
        out[kind] = {key: _load(kind, key, table, path.name) for key, table in doc.items()}
    return out


def _load(kind: str, key: str, table: dict, file: str) -> Preset:
    where = f"presets/{file}: [{key}]"
    unknown = set(table) - PRESET_KEYS
    if unknown:
        raise LibraryError(f"{where}: unknown key(s) {sorted(unknown)}")

    def pairs(section: str) -> dict[str, tuple[str, str]]:
        out = {}
        for name, spec in table.get(section, {}).items():
            if not isinstance(spec, dict) or "value" not in spec or "source" not in spec:
                raise LibraryError(f"{where}: {section}.{name} needs a value and a source")
            out[name] = (str(spec["value"]), str(spec["source"]))
        return out

    return Preset(kind=kind, key=key, title=str(table.get("title", key)), source=str(table.get("source", "")),
                  aliases=tuple(table.get("aliases", [])), notes=str(table.get("notes", "")),
                  values=pairs("values"), peak_flops=pairs("peak_flops"),
                  options={k: str(v).lower() if isinstance(v, bool) else str(v)
                           for k, v in table.get("options", {}).items()},
                  published=tuple(table.get("published", [])))


def find_preset(kind: str, name: str) -> Preset:
    """A built-in preset by key or alias (case-insensitive), or a config.json for models.

    Parameters
    ----------
    kind : "hardware" or "model"
    name : a key, an alias, or (models) the path of a Hugging Face config.json

    Returns
    -------
    Preset

    Raises
    ------
    UnknownNameError
        No preset of ``kind`` has that name (the closest names are suggested).
    MalformedValueError
        A config.json that cannot be read (see :func:`model_from_hf_config`).
    """
    if kind == "model" and (name.endswith(".json") or _is_file(name)):
        return model_from_hf_config(name)
    table = all_presets()[kind]
    wanted = name.strip().lower().replace("_", "-")
    for p in table.values():
        names = [p.key, *p.aliases]
        if wanted in {n.lower().replace("_", "-") for n in names}:
            return p
    pool = [n for p in table.values() for n in (p.key, *p.aliases)]
    near = closest_names(name, pool)
    hint = f" Did you mean: {', '.join(near)}?" if near else ""
    raise UnknownNameError(f"unknown {kind} '{name}'.{hint} See `symcalc list {KINDS[kind]}`"
                           + (" (or give the path of a Hugging Face config.json)" if kind == "model" else ""),
                           near)


def _is_file(name: str) -> bool:
    """Whether ``name`` is a file; a name no file can have (300 characters, a NUL) is not one."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False


# -- Hugging Face config.json -----------------------------------------------------------------

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
]
_NOTES = {"seq_len": " (the model's longest context, taken as the training sequence length; give seq_len "
                     "if it trained on shorter sequences)"}
_GATED = ("silu", "swiglu", "swish")
# model families whose feed-forward block is gated (3 matrices) whatever the activation's name
_GATED_FAMILIES = ("llama", "mistral", "mixtral", "qwen", "gemma", "phi3", "deepseek", "olmo", "granite",
                   "cohere", "internlm", "yi", "baichuan", "starcoder2_gated")


def model_from_hf_config(path: str | Path) -> Preset:
    """Read a Hugging Face ``config.json`` (layers, widths, heads, vocabulary, experts, and the
    options they imply). Missing optional keys are left out; unreadable files are a clear error.

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
    values: dict[str, tuple[str, str]] = {}
    for keys, quantity, unit in _HF_KEYS:
        for key in keys:
            if key in cfg and cfg[key] is not None:
                value = cfg[key]
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
                    raise MalformedValueError(f"{where}: '{key}' must be a positive number, got {value!r}")
                values[quantity] = (f"{value}{unit}", f"{p.name}: {key} = {value}{_NOTES.get(quantity, '')}")
                break
    findings: list[Finding] = []
    experts = _hf_experts(cfg, values, p.name)
    required = {"n_layers", "d_model", "n_heads"}
    missing = sorted(required - set(values))
    if missing:
        raise MalformedValueError(f"{where}: missing {', '.join(missing)} (keys like num_hidden_layers, "
                                  "hidden_size, num_attention_heads); is this a transformer config?")
    options: dict[str, str] = {}
    heads = float(values["n_heads"][0])
    kv = float(values.get("n_kv_heads", values["n_heads"])[0])
    if kv > heads or heads % kv:
        raise MalformedValueError(f"{where}: num_key_value_heads = {values['n_kv_heads'][0]} must divide "
                                  f"num_attention_heads = {values['n_heads'][0]} (each KV head serves a group of "
                                  "query heads)")
    d = float(values["d_model"][0])
    head = float(values["head_dim"][0]) if "head_dim" in values else d / heads
    if abs(head * heads - d) > 0.5:
        options["attention"] = "gqa_head_dim"       # Gemma: n_heads x head_dim != d_model
    else:
        values.pop("head_dim", None)
        options["attention"] = "gqa" if kv < heads else "mha"
    act = str(cfg.get("hidden_act") or cfg.get("hidden_activation") or cfg.get("activation_function") or "").lower()
    family = str(cfg.get("model_type", "")).lower()
    gated = any(g in act for g in _GATED) or any(family.startswith(f) for f in _GATED_FAMILIES)
    options["ffn"] = "swiglu" if gated else "gelu"
    if experts:
        options["architecture"] = "moe"
        values.update(experts)
        if "moe_intermediate_size" not in cfg:          # Mixtral: every layer's FFN is the experts
            values["d_ffn_expert"] = values.pop("d_ffn")
    if cfg.get("kv_lora_rank") or cfg.get("q_lora_rank"):
        findings.append(Finding("preset", values={"file": p.name, "what": "latent_attention"}))
    if cfg.get("first_k_dense_replace"):
        findings.append(Finding("preset", values={"file": p.name, "what": "dense_layers",
                                                  "layers": _label(cfg["first_k_dense_replace"])}))
    if "tie_word_embeddings" in cfg:
        options["tied_embeddings"] = "true" if cfg["tie_word_embeddings"] else "false"
    elif "n_embd" in cfg:      # GPT-2 style configs tie the LM head to the embedding
        options["tied_embeddings"] = "true"
    if "tie_word_embeddings" not in cfg and family.startswith("gemma"):
        options["tied_embeddings"] = "true"      # Gemma ties its embeddings by default
    name = _label(cfg.get("_name_or_path") or cfg.get("model_type") or p.stem)
    return Preset(kind="model", key=name, title=f"{name} (from {p.name})", source=str(p), values=values,
                  options=options, findings=tuple(findings))


def _read_config(p: Path, where: str) -> dict:
    """The JSON object of a config.json; a clear error for anything else (not a regular file,
    too large, not text, not JSON, nested beyond what a parser should follow)."""
    try:
        if not p.is_file():
            raise MalformedValueError(f"{where}: not a file" if p.exists() else f"{where}: no such file")
        with open(p, "rb") as fh:
            data = fh.read(MAX_CONFIG_BYTES + 1)
    except OSError as e:
        raise MalformedValueError(f"{where}: cannot be read ({e.strerror or e})") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise MalformedValueError(f"{where}: larger than {MAX_CONFIG_BYTES >> 20} MB; a model's config.json is a "
                                  "few kB")
    try:
        cfg = json.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise MalformedValueError(f"{where}: not a text file") from None
    except json.JSONDecodeError as e:
        raise MalformedValueError(f"{where}: not valid JSON ({e.msg.removesuffix(' at')} at line {e.lineno}, column {e.colno}); truncated?") from None
    except RecursionError:
        raise MalformedValueError(f"{where}: nested too deeply to be a model's settings") from None
    if not isinstance(cfg, dict):
        raise MalformedValueError(f"{where}: expected a JSON object of model settings")
    return cfg


def _label(raw: object) -> str:
    """A model's name from its config, fit to print: printable characters, at most 80."""
    text = "".join(c if c.isprintable() else " " for c in str(raw)).strip()
    return text if len(text) <= 80 else text[:77] + "..."


def _hf_experts(cfg: dict, values: dict, file: str) -> dict[str, tuple[str, str]]:
    """Expert counts and sizes of an MoE config (Mixtral, DeepSeek, Qwen-MoE key names)."""
    out: dict[str, tuple[str, str]] = {}

    def count(key: str):
        v = cfg.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v >= 0):
            raise MalformedValueError(f"config.json '{file}': '{key}' must be a non-negative number, got {v!r:.40}")
        return v

    def take(key: str, quantity: str, value=None) -> None:
        v = count(key) if value is None else value
        if v is None:
            return
        out[quantity] = (str(v), f"{file}: {key} = {v}")

    routed = count("n_routed_experts") or count("num_local_experts") or count("num_experts")
    if not routed:
        return out
    shared = count("n_shared_experts") or 0
    take("n_routed_experts", "n_routed_experts", routed)
    if shared:
        take("n_shared_experts", "n_shared_experts", shared)
    take("num_local_experts", "n_experts", routed + shared)
    top_k = count("num_experts_per_tok") or count("moe_topk")
    if top_k:
        take("num_experts_per_tok", "n_experts_activated", top_k + shared)
    take("moe_intermediate_size", "d_ffn_expert")
    return out
