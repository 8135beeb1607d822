"""An on-disk cache for the work every new ``symcalc`` process would otherwise redo.

Why: loading the library parses about 220 equations with sympy and checks their units with
pint (about 0.4 s), and the first answer to a question inverts and compiles its equations
(0.1-0.5 s). A command-line tool that pays that on every call is slow to use, so the loaded
library and each derivation (and each question found to have no route) are kept here, keyed by the content of what they were built from
(see :func:`code_fingerprint`), and rebuilt whenever that changes; so are the unit
definitions pint parsed (symcalc.units.pintcache: pint itself reads and writes no file).
The questions of one plan are kept together, as one entry (:func:`bundled`): their
derivations share most of their steps.

Where: ``$SYMCALC_CACHE_DIR``, else the platform's user cache directory as platformdirs names it
(``$XDG_CACHE_HOME/symcalc`` or ``~/.cache/symcalc`` on Linux, ``~/Library/Caches/symcalc`` on
macOS).
``SYMCALC_NO_CACHE=1`` turns the cache off.

Safety: entries are pickles, and unpickling can run code, so an entry is read only when it
provably came from this user's symcalc. A hash proves integrity, not authorship (anyone can
hash a forged pickle), so each entry carries an HMAC-SHA256 of its kind, key and payload under
a secret key kept *outside* the cache directory: ``cache-key`` (32 random bytes, 0600, created
once with an atomic link) in ``$SYMCALC_KEY_DIR``, else the platform's user configuration
directory (platformdirs: ``$XDG_CONFIG_HOME/symcalc`` or ``~/.config/symcalc`` on Linux). A cache directory copied from elsewhere (CI, a container layer, a
tarball), key file and all, therefore authenticates nothing: its entries are rebuilt. A key
directory that is the cache directory or inside it is refused (said once): a copy would carry
it. Both directories must be the user's own and writable by nobody else, as ssh requires:
they are opened without following a symbolic link (``O_NOFOLLOW``), created 0700, and their
permissions are never changed; one others may write is not used, and why is said once on
standard error, as is a key file others may read. Every file is then reached through the open
directory (``dir_fd``), so the path cannot be swapped underneath. Files are opened without
following links and without blocking (a FIFO planted there cannot hang a run) and must be
regular files of the user's. Anything else (missing, corrupt, truncated, stale, forged,
foreign, unreadable) is ignored and the caller rebuilds and overwrites it; a directory that
cannot be trusted or written just means no cache. Deleting (pruning old entries,
:func:`clear`) touches only entries that authenticate (the cache wrote them) and its own
temporary files of runs that are gone (a run killed while writing: its process no longer
exists, or the file is an hour old); never anything reached through a link. Nothing here ever
raises.

Platforms without ``dir_fd`` and ``O_NOFOLLOW`` (Windows) get no cache: the answers are the
same, only slower to start.
"""

from __future__ import annotations

import gc
import hashlib
import os
import pickle
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from functools import lru_cache
from pathlib import Path

from symcalc import budget
# the files, the key and the directory (symcalc.cache.files), and the names others use
from symcalc.cache.files import ENV_DIR as ENV_DIR
from symcalc.cache.files import ENV_KEY_DIR as ENV_KEY_DIR
from symcalc.cache.files import ENV_OFF as ENV_OFF
from symcalc.cache.files import KEY_BYTES as KEY_BYTES
from symcalc.cache.files import KEY_FILE as KEY_FILE
from symcalc.cache.files import MAGIC as MAGIC
from symcalc.cache.files import MAX_ENTRY_BYTES as MAX_ENTRY_BYTES
from symcalc.cache.files import STALE_SECONDS as STALE_SECONDS
from symcalc.cache.files import _said as _said
from symcalc.cache.files import cache_dir as cache_dir
from symcalc.cache.files import key_dir as key_dir
from symcalc.cache.files import key_of as key_of
from symcalc.cache.files import (_ENTRY, _SUPPORTED, _authentic, _clear_pint_folders, _files, _gone, _mac, _name,
                                 _beside, _open_dir, _open_file, _read_key, _unlink, _Untrusted, _verified,
                                 _write_temporary)

# newest entries kept per kind; older ones are deleted when a new one is stored
# ("unrouted": a question no route answers, see symcalc.query.solve._store_failure;
# "pint": the unit definitions pint parsed, see symcalc.units.pintcache)
# ("bundle": the derivations and unrouted questions of plans, each bundle one file, see bundled)
# ("evidence": the published runs parsed, see symcalc.planner.validation)
MAX_ENTRIES = {"library": 8, "derivation": 1000, "unrouted": 1000, "pint": 8, "bundle": 32, "evidence": 8}
#: A kind is pruned back to MAX_ENTRIES after every 1 + MAX_ENTRIES // TIDY_SLACK of its stores
#: (and at a process's first store of it in a directory): pruning reads the whole directory, so pruning at every
#: store made a cold plan's hundred stores read a full cache's 2,000 files a hundred times
#: (1.2 s of a 6 s plan); between prunes a kind holds at most 1/16 more than its cap
TIDY_SLACK = 16
_since_tidy: Counter = Counter()
#: What happened since the process started: hits, misses, stores, rejected (a file that was
#: there but not trusted or not readable), errors (a store that failed). Tests read it.
stats: Counter = Counter()


def enabled() -> bool:
    """False when ``SYMCALC_NO_CACHE`` is set to anything but '', '0', 'false' or 'no' (or
    the platform cannot open files safely, see the module docstring)."""
    return _SUPPORTED and os.environ.get(ENV_OFF, "").strip().lower() in ("", "0", "false", "no")


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of everything besides the formula files that shapes a cached object: symcalc's own
    source and unit definitions, and the versions of Python, sympy and pint (whose objects are
    pickled). Hashing the source rather than trusting the version number means a changed
    loader never meets a library cached by the old one, in a checkout as much as a release."""
    import pint
    h = hashlib.sha256()
    h.update(f"{sys.version_info[:2]} sympy {_sympy_release()} pint {pint.__version__}".encode())
    package = Path(__file__).resolve().parent.parent     # symcalc/
    for path in sorted([*package.rglob("*.py"), package / "units" / "units.txt"]):
        h.update(path.relative_to(package).as_posix().encode() + b"\0")
        try:
            h.update(path.read_bytes())
        except OSError:
            h.update(b"unreadable")
    return h.hexdigest()


def _sympy_release() -> str:
    """sympy's release file (it holds the version), read without importing sympy: a cached
    answer never needs sympy itself (importing it is 0.25 s)."""
    import importlib.util
    spec = importlib.util.find_spec("sympy")
    if spec is None or not spec.origin:
        return "none"
    try:
        return (Path(spec.origin).parent / "release.py").read_text()
    except OSError:
        return "unreadable"


# -- reading and writing entries -------------------------------------------------------------------

def load(kind: str, key: str) -> object | None:
    """The object stored under (kind, key), or None if there is none that can be trusted."""
    if not enabled():
        return None
    held = _bundle.get()
    if held is not None and kind in held.kinds:
        hit = held.take(kind, key)
        if hit is not None:
            stats["hits"] += 1
            return hit
    try:
        dfd = _open_dir(create=False)
    except (_Untrusted, OSError):
        stats["rejected"] += 1
        return None
    if dfd is None:
        stats["misses"] += 1
        return None
    try:
        secret = _read_key()
        data = _open_file(dfd, _name(kind, key), MAX_ENTRY_BYTES) if secret is not None else None
    except (_Untrusted, OSError):
        stats["rejected"] += 1
        return None
    finally:
        os.close(dfd)
    if data is None or secret is None:      # (no secret: data was not read)
        stats["misses"] += 1
        return None
    payload = _verified(data, secret, kind, key)
    if payload is None:
        stats["rejected"] += 1        # damaged, or not written by this cache: never unpickled
        return None
    try:
        stored_kind, stored_key, value = _unpickle(payload)
    except Exception:
        stats["rejected"] += 1
        return None
    if (stored_kind, stored_key) != (kind, key):
        stats["rejected"] += 1
        return None
    stats["hits"] += 1
    if held is not None and kind in held.kinds:     # a file of its own (a solve's, an older cache's):
        held.add(kind, key, value)                  # kept with the bundle from now on
    return value


def _unpickle(payload: bytes):
    """Unpickle with the garbage collector paused: building ~10,000 small objects in a process
    that already holds sympy triggers full collections that cost more than the unpickling
    itself. (sympy objects inside are thawed later, with sympy's evaluation off: symcalc.lazy.)"""
    with collector_paused():
        return pickle.loads(payload)


_paused = 0                     # how many collector_paused blocks are open, in all threads
_resume = False                 # whether the outermost turned the collector off (and so turns it on)
_pausing = threading.Lock()


def collector_paused() -> _Paused:
    """Work that builds many objects which live on (a library, a plan's ~100 answers and their
    derivations: 100,000 objects) with the cyclic garbage collector paused: its passes over
    them while they are built free nothing. After, the collector is on again and one young
    collection (generation 1) looks at what the work made, once: what survives is moved to the
    oldest generation and counted, as Python counts what survives its own young collections,
    towards the next full collection, which then frees the cycles left behind.

    Why not gc.freeze then gc.unfreeze (move it all to the oldest generation unexamined, as
    before issue 34): what is moved so is not counted; full collections stopped, and a
    long-lived process kept every plan's garbage (~10 MB a plan, 2 GB after 250). The one
    young pass costs ~0.03 s of a warm plan.

    Nests, and is shared by threads: the outermost block turns the collector off (unless it
    was off already) and the last to end turns it back on; nothing is ever frozen."""
    return _Paused()


class _Paused:
    """What :func:`collector_paused` gives. A class, not a generator, so that its bookkeeping
    is these two methods alone, which a time limit's alarm never interrupts (registered with
    symcalc.budget below): an exception raised half-way would leave the collector off for
    the rest of a long-lived process."""

    def __enter__(self) -> None:
        global _paused, _resume
        with _pausing:
            if _paused == 0:
                _resume = gc.isenabled()
                gc.disable()
            _paused += 1

    def __exit__(self, *exc: object) -> None:
        global _paused
        with _pausing:
            _paused -= 1
            resume = _paused == 0 and _resume
            if resume:
                gc.enable()
        if resume:      # outside the lock: a finaliser the collection runs may pause in turn
            gc.collect(1)


# the time limits' alarm comes back a moment later rather than raise inside these
budget._BOOKKEEPING.update({_Paused.__enter__.__code__, _Paused.__exit__.__code__})


def store(kind: str, key: str, value: object) -> None:
    """Store ``value`` under (kind, key), replacing any entry atomically; never raises."""
    if not enabled():
        return
    held = _bundle.get()
    if held is not None and kind in held.kinds:
        held.add(kind, key, value)
        return
    try:
        payload = pickle.dumps((kind, key, value), protocol=pickle.HIGHEST_PROTOCOL)
        dfd = _open_dir(create=True)
    except _Untrusted:
        stats["rejected"] += 1
        return
    except Exception:   # unpicklable, read-only or full disk: no cache, same answers
        stats["errors"] += 1
        return
    if dfd is None:     # removed between mkdir and open: os.close(None) below would raise
        stats["errors"] += 1
        return
    try:
        secret = _read_key(create=True)
        if secret is None:
            raise _Untrusted("no key")
        tmp = _write_temporary(dfd, kind, MAGIC + _mac(secret, kind, key, payload) + payload)
        try:
            os.replace(tmp, _name(kind, key), src_dir_fd=dfd, dst_dir_fd=dfd)
        except BaseException:
            _unlink(dfd, tmp)
            raise
        stats["stores"] += 1
        where = (str(cache_dir()), kind)
        _since_tidy[where] += 1
        if _since_tidy[where] == 1 or _since_tidy[where] > 1 + MAX_ENTRIES.get(kind, 100) // TIDY_SLACK:
            _since_tidy[where] = 1
            _tidy(dfd, kind, secret)
    except _Untrusted:
        stats["rejected"] += 1
    except Exception:
        stats["errors"] += 1
    finally:
        os.close(dfd)


# -- bundles: the entries of many questions asked together, kept as one file ----------------------

#: the kinds a bundle holds: what a plan asks a hundred of (derivations, questions with no route)
BUNDLED = frozenset({"derivation", "unrouted"})
#: entries a bundle keeps beyond those of the block that writes it (other plans' of the same key)
MAX_BUNDLE_ENTRIES = 1000


class _Bundle:
    """The entries of one :func:`bundled` block: read from the stored bundle on first ask (each
    given out once: a second ask is a miss, as two loads of one file give two objects), and
    those asked for or stored in the block, written back as one entry when it ends."""

    def __init__(self, key: str, kinds: frozenset[str]):
        self.key, self.kinds = key, kinds
        self.unread: dict | None = None       # the stored bundle's entries not asked for yet
        self.kept: dict = {}                  # (kind, key) -> value, asked for or made in the block
        self.new = False                      # whether the block made an entry (then it is written)

    def take(self, kind: str, key: str) -> object | None:
        if self.unread is None:
            self.unread = _stored_bundle(self.key)
        value = self.unread.pop((kind, key), None)
        if value is not None:
            self.kept[(kind, key)] = value
        return value

    def add(self, kind: str, key: str, value: object) -> None:
        self.kept[(kind, key)] = value
        self.new = True

    def save(self) -> None:
        """Write the bundle if the block made an entry: this block's entries, with the stored
        bundle's others while they stay within MAX_BUNDLE_ENTRIES. An entry that cannot be
        pickled (a derivation degraded for time is never kept) is left out, not the bundle."""
        if not self.new:
            return
        others = self.unread if self.unread is not None else _stored_bundle(self.key)
        entries = {**others, **self.kept} if len(others) + len(self.kept) <= MAX_BUNDLE_ENTRIES else dict(self.kept)
        errors = stats["errors"]
        store("bundle", self.key, entries)
        if stats["errors"] > errors:        # (an unpicklable entry, or no disk: then this fails too)
            store("bundle", self.key, {k: v for k, v in entries.items() if _picklable(v)})


def _stored_bundle(key: str) -> dict:
    stored = load("bundle", key)
    return stored if isinstance(stored, dict) else {}


def _picklable(value: object) -> bool:
    try:
        pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:
        return False
    return True


_bundle: ContextVar[_Bundle | None] = ContextVar("symcalc_cache_bundle", default=None)


def bundle_stored() -> bool:
    """Whether the bundle of the block in force holds stored entries (a plan asked before: warm)."""
    held = _bundle.get()
    if held is None:
        return False
    if held.unread is None:
        held.unread = _stored_bundle(held.key)
    return bool(held.unread)


@contextmanager
def bundled(key: str | None, kinds: frozenset[str] = BUNDLED) -> Iterator[None]:
    """Within the block, entries of ``kinds`` are read from and written to one bundle stored
    under ``key`` (None: no bundle, each entry its own file as outside a block).

    Why: a plan asks ~120 derivations, each its own file of ~100 solved steps, though its
    ~6,000 steps are ~250 distinct ones (the option combinations share them). One pickle of
    them all keeps each shared step once: one file to read and authenticate instead of 120,
    and a tenth of the bytes to unpickle (warm) or to pickle and write (cold). Each entry keeps
    its own content key inside the bundle, so a bundle can never answer a question it was not
    built for; the bundle's key only decides which questions are read together. Entries made
    in the block are not written as files of their own. Nested blocks use the outermost; a
    thread or a context outside the block sees none."""
    if key is None or not enabled() or _bundle.get() is not None:
        yield
        return
    held = _Bundle(key, kinds)
    token = _bundle.set(held)
    try:
        yield
    finally:
        _bundle.reset(token)
        held.save()


def _tidy(dfd: int, kind: str, secret: bytes) -> None:
    """Keep the newest MAX_ENTRIES[kind] entries of a kind (a library edited often, or many
    questions asked, would otherwise grow the directory without bound), and remove temporary
    files of runs killed while writing."""
    files = _files(dfd)
    for name, st in files:
        if _gone(name, st):
            _unlink(dfd, name)
    entries = sorted(((st.st_mtime, name) for name, st in files
                      if name.startswith(f"{kind}-") and _ENTRY.match(name)))
    for _, name in entries[:max(len(entries) - MAX_ENTRIES.get(kind, 100), 0)]:
        if _authentic(dfd, name, secret):
            _unlink(dfd, name)


def info() -> dict:
    """What the cache holds: its directory and the key's, whether it is on (not when the key
    folder is inside the cache folder: ``refused`` says so), and its entries by kind (count and
    bytes; only files this cache wrote are counted, by their names). Never raises."""
    out: dict = {"directory": str(cache_dir()), "key_directory": str(key_dir()), "enabled": enabled(),
                 "entries": {}, "bytes": 0}
    if out["enabled"] and _beside(key_dir()):      # (said on standard error, once)
        out["enabled"], out["refused"] = False, "the key folder is the cache folder or inside it"
    if not _SUPPORTED:
        return out
    try:
        dfd = _open_dir(create=False)
    except (_Untrusted, OSError):
        return out
    if dfd is None:
        return out
    try:
        for name, st in _files(dfd):
            m = _ENTRY.match(name)
            if m:
                kind = out["entries"].setdefault(m.group(1), {"count": 0, "bytes": 0})
                kind["count"] += 1
                kind["bytes"] += st.st_size
                out["bytes"] += st.st_size
    except OSError:
        pass
    finally:
        os.close(dfd)
    return out


def clear() -> int:
    """Delete every entry this cache wrote (and its stale temporary files), and pint's own
    cache folders of earlier symcalc versions; returns how many entries were removed. Files it
    did not write, and links, are left where they are."""
    if not _SUPPORTED:
        return 0
    try:
        dfd = _open_dir(create=False)
    except (_Untrusted, OSError):
        return 0
    if dfd is None:
        return 0
    removed = 0
    try:
        removed += _clear_pint_folders(dfd)
        # deleting reads nothing in: a key misplaced beside the entries still tells them apart
        secret = _read_key(placed=False)
        files = _files(dfd)
        for name, st in files:
            if secret is not None and _authentic(dfd, name, secret):
                _unlink(dfd, name)
                removed += 1
            elif _gone(name, st):
                _unlink(dfd, name)
    except (_Untrusted, OSError):
        pass
    finally:
        os.close(dfd)
    return removed


