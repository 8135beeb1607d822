"""Presets: known values of real hardware and real models, each with its source.

``formulas/presets/hardware.toml`` and ``models.toml`` hold them; a Hugging Face
``config.json`` file is read as a model, and a TOML file holding one table of hardware.toml as
a hardware profile (from disk only, never the network). Each value may say how it is known
(``basis``: measured, datasheet, derived or assumed). A preset turns
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
    did_you_mean,
    unknown_key,
)
from symcalc.findings import Finding
from symcalc.library.loading import formula_dir

# a preset kind -> the name of its data file under formulas/presets (and of `symcalc list ...`)
KINDS = {"hardware": "hardware", "model": "models"}
PRESET_KEYS = {"title", "aliases", "source", "notes", "options", "values", "peak_flops", "published"}
VALUE_KEYS = {"value", "source", "basis"}
# how a preset value is known (optional ``basis`` beside value and source; "fitted": by calibration on
# measured runs, calibration/fit.py or `symcalc calibrate`): an answer that uses a
# derived or assumed one says so (finding "unmeasured")
BASES = ("measured", "datasheet", "fitted", "derived", "assumed")
UNMEASURED = ("derived", "assumed")


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
    basis: dict[str, str] = field(default_factory=dict)       # quantity -> how its value is known (BASES)
    peak_basis: dict[str, str] = field(default_factory=dict)  # compute dtype -> how its peak is known
    file: str = ""                      # the profile file it was read from ("" for a built-in preset)

    @property
    def label(self) -> str:
        """How answers name it: ``hardware h100_sxm``."""
        return f"{self.kind} {self.key}"

    def basis_of(self, name: str, compute_dtype: str | None) -> str | None:
        """How the value this preset gives for ``name`` is known (``basis`` in the data), or None
        when unstated; ``peak_flops`` is the dense peak of ``compute_dtype``."""
        if name == "peak_flops" and name not in self.values:
            return self.peak_basis.get(compute_dtype or "")
        return self.basis.get(name)

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
    values, basis, peaks, peak_basis = _value_tables(table, where, LibraryError)
    return Preset(kind=kind, key=key, title=str(table.get("title", key)), source=str(table.get("source", "")),
                  aliases=tuple(table.get("aliases", [])), notes=str(table.get("notes", "")),
                  values=values, peak_flops=peaks, basis=basis, peak_basis=peak_basis,
                  options={k: str(v).lower() if isinstance(v, bool) else str(v)
                           for k, v in table.get("options", {}).items()},
                  published=tuple(table.get("published", [])))


def _value_tables(table: dict, where: str, error: type[Exception]) -> tuple[dict, dict, dict, dict]:
    """A preset's or profile's ``values`` and ``peak_flops`` (with their bases); a malformed
    entry raises ``error`` naming ``where``."""
    try:
        return (*_pairs(table, "values"), *_pairs(table, "peak_flops"))
    except ValueError as e:
        raise error(f"{where}: {e}") from None


def _pairs(table: dict, section: str) -> tuple[dict[str, tuple[str, str]], dict[str, str]]:
    """``section.NAME = { value, source, basis }`` entries: (name -> (value, source), name -> basis).

    Raises ValueError (the caller adds where) for an entry that is not such a table, lacks a
    value or a source, has another key, or an unknown basis."""
    entries = table.get(section, {})
    if not isinstance(entries, dict):
        raise ValueError(f"{section} is a table of {{ value = ..., source = ... }} entries")
    out, basis = {}, {}
    for name, spec in entries.items():
        if not isinstance(spec, dict):
            raise ValueError(f"{section}.{name} is {{ value = ..., source = \"where it comes from\" }}")
        wrong = unknown_key(spec, VALUE_KEYS, "A value holds")
        if wrong:
            raise ValueError(f"{section}.{name}: {wrong}")
        if "value" not in spec or isinstance(spec["value"], (bool, dict, list)):
            raise ValueError(f"{section}.{name} needs a value (a number, or text with a unit)")
        if not isinstance(spec.get("source"), str) or not spec["source"].strip():
            raise ValueError(f"{section}.{name} needs a source (where the value comes from)")
        if "basis" in spec:
            if spec["basis"] not in BASES:
                raise ValueError(f"{section}.{name}: basis is one of {', '.join(BASES)}; got {spec['basis']!r:.40}")
            basis[name] = spec["basis"]
        out[name] = (str(spec["value"]), spec["source"])
    return out, basis


def find_preset(kind: str, name: str) -> Preset:
    """A built-in preset by key or alias (case-insensitive), or a config.json for models.

    Parameters
    ----------
    kind : "hardware" or "model"
    name : a key, an alias, or the path of a file: a Hugging Face config.json (models) or a
        hardware profile in TOML (see :func:`hardware_from_file`)

    Returns
    -------
    Preset

    Raises
    ------
    UnknownNameError
        No preset of ``kind`` has that name (the closest names are suggested).
    MalformedValueError
        A config.json or a hardware profile that cannot be read (see :func:`model_from_hf_config`,
        :func:`hardware_from_file`).
    """
    if kind == "model" and (name.endswith(".json") or _is_file(name)):
        return model_from_hf_config(name)
    if kind == "hardware" and (name.endswith(".toml") or _is_file(name)):
        return hardware_from_file(name)
    return builtin_preset(kind, name, files=True)


def builtin_preset(kind: str, name: str, files: bool = False) -> Preset:
    """A built-in preset by key or alias (case-insensitive), never a file (what a server takes
    from its clients). Raises UnknownNameError with the closest names; ``files``: the message
    also says a file may be given."""
    found = _lookup(kind, name)
    if found is not None:
        return found
    pool = [n for p in all_presets()[kind].values() for n in (p.key, *p.aliases)]
    near = closest_names(name, pool)
    hint = f" Did you mean: {', '.join(near)}?" if near else ""
    file = " (or give the path of a Hugging Face config.json)" if kind == "model" else \
        " (or give the path of a hardware profile, a .toml file)"
    raise UnknownNameError(f"unknown {kind} '{name}'.{hint} See `symcalc list {KINDS[kind]}`{file if files else ''}",
                           near)


def _lookup(kind: str, name: str) -> Preset | None:
    """The built-in preset of ``kind`` with this key or alias (case, ``-`` and ``_`` aside), or None."""
    wanted = name.strip().lower().replace("_", "-")
    for p in all_presets()[kind].values():
        if wanted in {n.lower().replace("_", "-") for n in (p.key, *p.aliases)}:
            return p
    return None


def _is_file(name: str) -> bool:
    """Whether ``name`` is a file; a name no file can have (300 characters, a NUL) is not one."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False


# -- a hardware profile file ------------------------------------------------------------------

MAX_PROFILE_BYTES = 1 << 20     # a profile is one table of a few kB
PROFILE_KEYS = {"title", "aliases", "source", "notes", "values", "peak_flops", "base"}


def hardware_from_file(path: str | Path) -> Preset:
    """A hardware profile from a TOML file: one table ``[name]`` as in
    ``formulas/presets/hardware.toml`` (title, source, ``values.X = { value, source, basis }``,
    ``peak_flops.DTYPE = { ... }``), optionally ``base = "h100"``: start from that built-in
    preset and override it with the file's values. What ``symcalc calibrate`` will write.

    Whether each name is a quantity of the library, and each value of its dimension, is checked
    against the library the question uses (:func:`symcalc.query.presetvalues.check_profile`).

    Returns
    -------
    Preset
        A hardware preset keyed by the table's name, ``file`` the path.

    Raises
    ------
    MalformedValueError
        The file is missing, not a regular file, too large, not text or not TOML; holds other
        than one table; has unknown keys; or a value without a value or a source.
    UnknownNameError
        ``base`` names no built-in hardware preset (the closest names are suggested).
    """
    p = Path(path)
    where = f"hardware profile '{p}'"
    doc = _read_profile(p, where)
    tables = [k for k, v in doc.items() if isinstance(v, dict)]
    loose = [k for k in doc if k not in tables]
    if loose or len(tables) != 1:
        found = f"top-level key '{loose[0]}' outside a table" if loose else f"{len(tables)} tables"
        raise MalformedValueError(f"{where}: {found}; a profile holds exactly one table [name] (with title, "
                                  "source, values.X = { value, source }, peak_flops.DTYPE = { value, source })")
    key = tables[0]
    table = doc[key]
    here = f"{where}: [{key}]"
    wrong = unknown_key(table, PROFILE_KEYS, "A profile holds")
    if wrong:
        raise MalformedValueError(f"{here}: {wrong}")
    for text_key in ("title", "source", "notes", "base"):
        if text_key in table and not isinstance(table[text_key], str):
            raise MalformedValueError(f"{here}: {text_key} is text")
    values, basis, peaks, peak_basis = _value_tables(table, here, MalformedValueError)
    if not values and not peaks:
        raise MalformedValueError(f"{here}: no values (values.X = {{ value = ..., source = ... }})")
    source = table.get("source") or str(p)
    if "base" in table:
        base = _builtin("hardware", table["base"], f"{here}: base")
        basis = {**{k: v for k, v in base.basis.items() if k not in values}, **basis}
        peak_basis = {**{k: v for k, v in base.peak_basis.items() if k not in peaks}, **peak_basis}
        values, peaks = {**base.values, **values}, {**base.peak_flops, **peaks}
        source = f"{source}; on {base.key} ({base.source})"
    name = _label(key)
    return Preset(kind="hardware", key=name, title=_label(table.get("title") or f"{name} (from {p.name})"),
                  source=source, notes=table.get("notes", ""), values=values, peak_flops=peaks, basis=basis,
                  peak_basis=peak_basis, file=str(p))


def _builtin(kind: str, name: str, where: str) -> Preset:
    """A built-in preset by key or alias, for a profile's ``base`` (never a file)."""
    found = _lookup(kind, name)
    if found is None:
        pool = [n for p in all_presets()[kind].values() for n in (p.key, *p.aliases)]
        raise UnknownNameError(f"{where} = '{name}' is not a built-in {kind} preset.{did_you_mean(name, pool)} "
                               f"See `symcalc list {KINDS[kind]}`", closest_names(name, pool))
    return found


def _read_profile(p: Path, where: str) -> dict:
    """The TOML document of a profile file; a clear error for anything else (no such file, not a
    regular file, too large, not text, not TOML, nested beyond reason)."""
    if sys.version_info >= (3, 11):   # start-up: a question without a profile never reads TOML here
        import tomllib
    else:  # pragma: no cover
        import tomli as tomllib
    data = read_bounded(p, where, MAX_PROFILE_BYTES, "a hardware profile is a few kB")
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        raise MalformedValueError(f"{where}: not a text file") from None
    except tomllib.TOMLDecodeError as e:
        raise MalformedValueError(f"{where}: not valid TOML ({e})") from None
    except RecursionError:
        raise MalformedValueError(f"{where}: nested too deeply to be a hardware profile") from None


def read_bounded(p: Path, where: str, limit: int, usual: str) -> bytes:
    """The bytes of a regular file of at most ``limit`` bytes, or a one-line error."""
    try:
        if not p.is_file():
            raise MalformedValueError(f"{where}: not a file" if p.exists() else f"{where}: no such file")
        with open(p, "rb") as fh:
            data = fh.read(limit + 1)
    except OSError as e:
        raise MalformedValueError(f"{where}: cannot be read ({e.strerror or e})") from None
    if len(data) > limit:
        raise MalformedValueError(f"{where}: larger than {limit >> 20} MB; {usual}")
    return data


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
    if latent == {}:        # latent attention of a form the formulas do not count (no query latent)
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
    name = _label(cfg.get("_name_or_path") or cfg.get("model_type") or p.stem)
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


def _hf_mtp_notes(cfg: dict, file: str) -> str:
    """A note that multi-token-prediction modules are not counted, when the config has some."""
    mtp = cfg.get("num_nextn_predict_layers")
    return (f"{file}: num_nextn_predict_layers = {_label(mtp)}: the multi-token-prediction module(s) are not "
            "counted (DeepSeek-V3's published 671B leaves its MTP module out)"
            if isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > 0 else "")


def _read_config(p: Path, where: str) -> dict:
    """The JSON object of a config.json; a clear error for anything else (not a regular file,
    too large, not text, not JSON, nested beyond what a parser should follow)."""
    data = read_bounded(p, where, MAX_CONFIG_BYTES, "a model's config.json is a few kB")
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
    (kv_lora_rank), {} when one of the five widths is missing or null (DeepSeek-V2-Lite's queries
    skip the latent: q_lora_rank null), a form the formulas do not count."""
    if not _hf_number(cfg, "kv_lora_rank", file):
        return None
    widths = {key: _hf_number(cfg, key, file, positive=True) for key in _MLA_KEYS}
    if any(v is None for v in widths.values()):
        return {}
    return {key: (str(v), f"{file}: {key} = {v}") for key, v in widths.items()}


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
