"""Loading the formula library (``formulas/*.toml``), through the on-disk cache.

A library file may declare ``[quantities.NAME]``, ``[options.NAME]`` and ``[[formulas]]``; a new
domain is one more file. Parsing and validating the files is :mod:`symcalc.library.build` (and
sympy's): it runs only when the cache has no library for these files and this code. The result
is a :class:`~symcalc.library.registry.Library`.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path

from symcalc import cache
from symcalc.errors import LibraryError
from symcalc.library.registry import Library

__all__ = ["Library", "default_library", "formula_dir", "load_library"]


def formula_dir() -> Path:
    """Where the built-in formula files are: inside the installed package, or the source tree."""
    package = Path(__file__).resolve().parent.parent       # symcalc/ (this file is symcalc/library/loading.py)
    for candidate in (package / "formulas", package.parent / "formulas"):
        if (candidate / "quantities.toml").is_file():
            return candidate
    raise LibraryError(f"the built-in formula files were not found (looked in {package / 'formulas'} "
                       f"and {package.parent / 'formulas'})")


def load_library(paths: Iterable[str | Path] | None = None, extra: Iterable[str | Path] = (),
                 *, use_cache: bool = True) -> Library:
    """Load and validate formula files.

    ``paths``: the files or directories to load (default: the built-in library). ``extra``:
    more files or directories loaded on top (a user's own formulas). Raises LibraryError with
    the file and formula id of the first problem found.

    Parsing and unit-checking every formula costs far more than starting Python, so the
    validated library is kept in the on-disk cache (:mod:`symcalc.cache`) under a hash of the
    files' paths and content and of symcalc's own code; an edited file is a new key.
    ``use_cache=False`` (or ``SYMCALC_NO_CACHE=1``) loads from the files without the cache.
    """
    files = _collect(paths if paths is not None else [formula_dir()]) + _collect(extra)
    key = _cache_key(files) if use_cache and cache.enabled() else None
    if key is not None:
        cached = cache.load("library", key)
        if isinstance(cached, Library):
            cached.fingerprint = key
            return cached
    from symcalc.library.build import build  # start-up: a cached library is never rebuilt
    with cache.collector_paused():      # the library's records live as long as the process
        library = build(files)
    if key is not None:
        library.fingerprint = key
        cache.store("library", key, library)
    return library


def _cache_key(files: list[Path]) -> str | None:
    """A hash of the files' paths and bytes and of symcalc's code; None if one cannot be read."""
    parts: list[str | bytes] = [cache.code_fingerprint()]
    for path in files:
        try:
            parts += [str(path.resolve()), path.read_bytes()]
        except OSError:
            return None
    return cache.key_of(*parts)


@lru_cache(maxsize=1)
def default_library() -> Library:
    """The built-in library, loaded once per process."""
    return load_library()


def _collect(items: Iterable[str | Path]) -> list[Path]:
    out: list[Path] = []
    for item in items:
        p = Path(item)
        try:
            if p.is_dir():
                out.extend(sorted(p.glob("*.toml")))
            elif p.is_file():
                out.append(p)
            elif p.exists():
                raise LibraryError(f"{p} is not a formula file (not a regular file or a directory)")
            else:
                raise LibraryError(f"formula file or directory not found: {p}")
        except OSError as e:        # a name too long, a loop of links, a directory that cannot be listed
            raise LibraryError(f"cannot read formula file {p}: {e.strerror or e}") from None
    return out
