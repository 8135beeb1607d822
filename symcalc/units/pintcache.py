"""pint's cache of parsed unit definitions, kept as entries of symcalc's own cache.

Why: pint can keep the definitions it parsed (two pickles, two thirds of the ~15 ms it takes
to build the registry, a cost every command pays) in a folder of its own, and reads them back
with pickle.load, unauthenticated. In symcalc's cache folder that let a copied or planted
cache run code (issue 34). Here pint reads no file at all: the registry is given a disk cache
whose reads and writes go through :mod:`symcalc.cache`, so pint's entries are authenticated
(HMAC under the user's key), written atomically, tidied and cleared like every other entry.

pint (0.24, 0.25) builds its cache from ``cache_folder`` in the registry's constructor and
otherwise leaves ``_diskcache`` as the class sets it: the registry class here sets it. A pint
that no longer works this way gets a plain registry (the definitions parsed every time; the
same units).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pint

from symcalc import cache

KIND = "pint"


def _disk_cache() -> Any:
    """pint's disk cache class for floats (it knows how pint names what it caches), reading
    and writing through symcalc.cache instead of files; None when pint has none."""
    try:
        from pint.delegates import build_disk_cache_class
        base = build_disk_cache_class(float)
    except Exception:
        return None

    class Authenticated(base):  # type: ignore[misc, valid-type]
        """Entries named as pint names its files (a hash of pint's and Python's versions and of
        the parsed content), stored as symcalc cache entries of kind ``pint``."""

        def __init__(self) -> None:
            # no folder is made or read; pint only joins names to it
            self.cache_folder = pathlib.Path("symcalc-cache")

        def rawload(self, header: Any, cache_path: pathlib.Path | None = None) -> Any:
            path = cache_path if cache_path is not None else self.cache_path_for(header)
            return cache.load(KIND, cache.key_of(path.stem))

        def rawsave(self, header: Any, converted_object: Any, cache_path: pathlib.Path | None = None) -> pathlib.Path:
            path = cache_path if cache_path is not None else self.cache_path_for(header)
            cache.store(KIND, cache.key_of(path.stem), converted_object)
            return path

    return Authenticated()


class UnitRegistry(pint.UnitRegistry):
    """pint's registry, whose parsed definitions are kept in symcalc's cache (``_diskcache``:
    pint's constructor leaves it as the class sets it when ``cache_folder`` is None)."""

    _diskcache = _disk_cache()


def build(definitions: str, **options: Any) -> pint.UnitRegistry:
    """A unit registry of ``definitions`` whose parsed form pint keeps in symcalc's cache (and
    never in a folder of its own: ``cache_folder`` is None)."""
    try:
        return UnitRegistry(definitions, cache_folder=None, **options)
    except Exception:       # a pint whose cache works otherwise: parse as without one
        return pint.UnitRegistry(definitions, cache_folder=None, **options)
