"""An on-disk cache for the work every new ``symcalc`` process would otherwise redo.

Why: loading the library parses about 220 equations with sympy and checks their units with
pint (about 0.4 s), and the first answer to a question inverts and compiles its equations
(0.1-0.5 s). A command-line tool that pays that on every call is slow to use, so the loaded
library and each derivation are kept here, keyed by the content of what they were built from
(see :func:`code_fingerprint`), and rebuilt whenever that changes.

Where: ``$SYMCALC_CACHE_DIR``, else ``$XDG_CACHE_HOME/symcalc``, else ``~/.cache/symcalc``.
``SYMCALC_NO_CACHE=1`` turns the cache off.

Safety: entries are pickles, and unpickling can run code, so only files this module wrote are
ever read. The directory must belong to the user and be writable by nobody else (it is created
0700); each file must belong to the user, start with a magic header and the SHA-256 of its
payload, and the payload must name the kind and key it was asked for. Anything else (corrupt,
truncated, stale, foreign, unreadable) is ignored and the caller rebuilds and overwrites it;
a directory that cannot be written just means no cache. Nothing here ever raises.
"""

from __future__ import annotations

import gc
import hashlib
import os
import pickle
import sys
import tempfile
from collections import Counter
from functools import lru_cache
from pathlib import Path

ENV_DIR = "SYMCALC_CACHE_DIR"
ENV_OFF = "SYMCALC_NO_CACHE"
MAGIC = b"symcalc-cache 1\n"
_DIGEST = 32
# newest entries kept per kind; older ones are deleted when a new one is stored
MAX_ENTRIES = {"library": 8, "derivation": 1000}

#: What happened since the process started: hits, misses, stores, rejected (a file that was
#: there but not trusted or not readable), errors (a store that failed). Tests read it.
stats: Counter = Counter()


def enabled() -> bool:
    """False when ``SYMCALC_NO_CACHE`` is set to anything but '', '0', 'false' or 'no'."""
    return os.environ.get(ENV_OFF, "").strip().lower() in ("", "0", "false", "no")


def cache_dir() -> Path:
    """Where entries live (whether or not it exists yet)."""
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "symcalc"


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of everything besides the formula files that shapes a cached object: symcalc's own
    source and unit definitions, and the versions of Python, sympy and pint (whose objects are
    pickled). Hashing the source rather than trusting the version number means a changed
    loader never meets a library cached by the old one, in a checkout as much as a release."""
    import pint
    import sympy
    h = hashlib.sha256()
    h.update(f"{sys.version_info[:2]} sympy {sympy.__version__} pint {pint.__version__}".encode())
    package = Path(__file__).resolve().parent
    for path in sorted([*package.rglob("*.py"), package / "units.txt"]):
        h.update(path.relative_to(package).as_posix().encode() + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"unreadable")
    return h.hexdigest()


def key_of(*parts: str | bytes) -> str:
    """A cache key: the SHA-256 of the parts (each length-prefixed, so no two lists collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _path(kind: str, key: str) -> Path:
    return cache_dir() / f"{kind}-{key}.pickle"


def _trusted(st: os.stat_result, directory: bool) -> bool:
    """Owned by this user and, for the directory, writable by nobody else."""
    if not hasattr(os, "getuid"):   # pragma: no cover - Windows: per-user profile directories
        return True
    if st.st_uid != os.getuid():
        return False
    return not (directory and st.st_mode & 0o022)


def load(kind: str, key: str) -> object | None:
    """The object stored under (kind, key), or None if there is none that can be trusted."""
    if not enabled():
        return None
    path = _path(kind, key)
    try:
        if not _trusted(os.stat(path.parent), directory=True):
            stats["rejected"] += 1
            return None
        with open(path, "rb") as fh:
            if not _trusted(os.fstat(fh.fileno()), directory=False):
                stats["rejected"] += 1
                return None
            data = fh.read()
    except FileNotFoundError:
        stats["misses"] += 1
        return None
    except OSError:
        stats["rejected"] += 1
        return None
    head = len(MAGIC) + _DIGEST
    if not data.startswith(MAGIC) or hashlib.sha256(data[head:]).digest() != data[len(MAGIC):head]:
        stats["rejected"] += 1
        return None
    try:
        stored_kind, stored_key, value = _unpickle(data[head:])
    except Exception:
        stats["rejected"] += 1
        return None
    if (stored_kind, stored_key) != (kind, key):
        stats["rejected"] += 1
        return None
    stats["hits"] += 1
    return value


def _unpickle(payload: bytes):
    """Unpickle with sympy's evaluation off and the garbage collector paused.

    sympy objects are rebuilt by calling their constructors. With evaluation on, an expression
    kept as written (``4 * d_model^2``, shown "as cited") would come back reordered and
    simplified; with it off every expression comes back exactly as stored, and 4x faster. The
    collector is paused because building ~10,000 small objects in a process that already holds
    sympy triggers full collections that cost more than the unpickling itself."""
    from sympy.core.parameters import evaluate
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        with evaluate(False):
            return pickle.loads(payload)
    finally:
        if was_enabled:
            gc.enable()


def store(kind: str, key: str, value: object) -> None:
    """Store ``value`` under (kind, key), replacing any entry atomically; never raises."""
    if not enabled():
        return
    try:
        payload = pickle.dumps((kind, key, value), protocol=pickle.HIGHEST_PROTOCOL)
        directory = cache_dir()
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not _trusted(os.stat(directory), directory=True):
            stats["rejected"] += 1
            return
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{kind}-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(MAGIC + hashlib.sha256(payload).digest() + payload)
            os.replace(tmp, _path(kind, key))
        except BaseException:
            _remove(Path(tmp))
            raise
        stats["stores"] += 1
        _prune(directory, kind)
    except Exception:   # unpicklable, read-only or full disk: no cache, same answers
        stats["errors"] += 1


def _prune(directory: Path, kind: str) -> None:
    """Keep the newest MAX_ENTRIES[kind] entries of a kind (a library edited often, or many
    questions asked, would otherwise grow the directory without bound)."""
    limit = MAX_ENTRIES.get(kind, 100)
    entries = list(directory.glob(f"{kind}-*.pickle"))
    if len(entries) <= limit:
        return

    def mtime(p: Path) -> float:
        try:
            return p.stat().st_mtime
        except OSError:
            return 0.0
    for old in sorted(entries, key=mtime)[:-limit]:
        _remove(old)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def clear() -> int:
    """Delete every entry; returns how many were removed."""
    removed = 0
    for path in cache_dir().glob("*.pickle") if cache_dir().is_dir() else ():
        _remove(path)
        removed += 1
    return removed
