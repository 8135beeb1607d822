"""Presets: known values of real hardware and real models, each with its source.

``formulas/presets/hardware.toml`` and ``models.toml`` hold them; a Hugging Face
``config.json`` file is read as a model, and a TOML file holding one table of hardware.toml as
a hardware profile (from disk only, never the network). Each value may say how it is known
(``basis``: measured, datasheet, derived or assumed). A preset turns
into given values and options for a query; what the user gives explicitly wins, and a preset
never supplies the quantity being solved for.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from symcalc.errors import QueryError, UnknownNameError
from symcalc.library.builtin_presets import (  # re-exported: the one place callers import presets from
    BASES,
    KINDS,
    UNMEASURED,
    Preset,
    all_presets,
    builtin_preset,
    load_table,
    presets_dir,
    read_bounded,
)
from symcalc.library.hfconfig import model_from_hf_config
from symcalc.library.profiles import hardware_from_file

__all__ = ["BASES", "KINDS", "UNMEASURED", "Preset", "all_presets", "builtin_preset", "find_preset",
           "hardware_from_file", "load_table", "looks_like_path", "model_from_hf_config", "presets_dir",
           "read_bounded"]

# an extension: a dot and a word that starts with a letter (``.toml``, ``.json``), not the
# version in a model's name (``llama3.1-8b``, ``mixtral-8x7b-v0.1``)
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]*$")


def looks_like_path(name: str) -> bool:
    """Whether a preset argument names a file rather than a built-in preset, by its shape alone,
    as ``pip install`` and ``git`` read theirs: it holds a path separator, starts with ``.`` or
    ``~`` (``./h100``, ``~/gpus.toml``), or ends in an extension (``ours.toml``, ``config.json``).

    A bare word is a built-in name even when a file of that name is in the working folder: what
    a command means must not depend on the folder it runs in (a stray ``h100`` file silently
    replaced the built-in preset)."""
    seps = {"/", "\\", os.sep} | ({os.altsep} if os.altsep else set())
    return any(sep in name for sep in seps) or name.startswith((".", "~")) or bool(_EXTENSION.search(name))


def find_preset(kind: str, name: str) -> Preset:
    """A built-in preset by key or alias (case-insensitive), or a config.json for models.

    Parameters
    ----------
    kind : "hardware" or "model"
    name : a key or an alias; or, when it looks like a path (:func:`looks_like_path`), the path
        of a file: a Hugging Face config.json (models) or a hardware profile in TOML (see
        :func:`hardware_from_file`)

    Returns
    -------
    Preset

    Raises
    ------
    UnknownNameError
        No preset of ``kind`` has that name (the closest names are suggested, and a file of
        that name in the working folder is pointed to as ``./NAME``).
    MalformedValueError
        A config.json or a hardware profile that cannot be read (see :func:`model_from_hf_config`,
        :func:`hardware_from_file`).
    QueryError
        ``name`` is not text (a GPU count passed where the hardware goes).
    """
    if not isinstance(name, str):
        raise QueryError(f"{kind} is a preset's name or a file's path (see `symcalc list {kind}`), "
                         f"got {name!r}")
    if looks_like_path(name):
        path = _expand(name)
        return model_from_hf_config(path) if kind == "model" else hardware_from_file(path)
    try:
        return builtin_preset(kind, name, files=True)
    except UnknownNameError as e:
        if _is_file(name):      # a file of this name is here: say how to read it
            raise UnknownNameError(f"{e.message}. A file '{name}' is in this folder: write ./{name} to read it "
                                   f"as a {'config.json' if kind == 'model' else 'hardware profile'}",
                                   e.suggestions) from None
        raise


def _expand(name: str) -> Path:
    """``name`` as a path, ``~`` and ``~user`` the home folder (left as written when there is no
    such user: the file read then says "no such file")."""
    try:
        return Path(name).expanduser()
    except RuntimeError:
        return Path(name)


def _is_file(name: str) -> bool:
    """Whether ``name`` is a file; a name no file can have (300 characters, a NUL) is not one."""
    try:
        return Path(name).is_file()
    except (OSError, ValueError):
        return False

