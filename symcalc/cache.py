"""An on-disk cache for the work every new ``symcalc`` process would otherwise redo.

Why: loading the library parses about 220 equations with sympy and checks their units with
pint (about 0.4 s), and the first answer to a question inverts and compiles its equations
(0.1-0.5 s). A command-line tool that pays that on every call is slow to use, so the loaded
library and each derivation (and each question found to have no route) are kept here, keyed by the content of what they were built from
(see :func:`code_fingerprint`), and rebuilt whenever that changes; so are the unit
definitions pint parsed (symcalc.units.pintcache: pint itself reads and writes no file).

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
import hmac
import os
import pickle
import re
import secrets
import stat
import sys
import threading
import time
from collections import Counter
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

ENV_DIR = "SYMCALC_CACHE_DIR"
ENV_KEY_DIR = "SYMCALC_KEY_DIR"
ENV_OFF = "SYMCALC_NO_CACHE"
MAGIC = b"symcalc-cache 3\n"
_MAC = 32
KEY_FILE = "cache-key"
KEY_BYTES = 32
# newest entries kept per kind; older ones are deleted when a new one is stored
# ("unrouted": a question no route answers, see symcalc.query.solve._store_failure;
# "pint": the unit definitions pint parsed, see symcalc.units.pintcache)
MAX_ENTRIES = {"library": 8, "derivation": 1000, "unrouted": 1000, "pint": 8}
MAX_ENTRY_BYTES = 64 << 20      # far above any entry written (a library is ~1 MB); more is not ours
STALE_SECONDS = 3600            # a temporary file this old belongs to a run that was killed
_ENTRY = re.compile(r"^(library|derivation|unrouted|pint)-([0-9a-f]{64})\.pickle$")
_TEMPORARY = re.compile(r"^\.(library|derivation|unrouted|pint|key)-(\d+)-[0-9a-f]{16}\.tmp$")
# pint's own cache folders as symcalc had pint keep them before issue 34 (pint-<version>/, files
# named by a SHA-1): nothing reads them now; clear() removes them
_PINT_FOLDER = re.compile(r"^pint-[A-Za-z0-9_.+-]{1,64}$")
_PINT_FILE = re.compile(r"^[0-9a-f]{40}\.(pickle|json)$")
_SUPPORTED = (hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd
              and os.unlink in os.supports_dir_fd and os.link in os.supports_dir_fd)
_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))

#: What happened since the process started: hits, misses, stores, rejected (a file that was
#: there but not trusted or not readable), errors (a store that failed). Tests read it.
stats: Counter = Counter()


class _Untrusted(Exception):
    """The directory, the key or an entry is not the user's own and private."""


_said: set[str] = set()


def _say_once(why: str) -> None:
    """Tell the user once per process why the cache is not used (a folder others may write, a
    key others may read): silently ignoring it would leave them with a slow tool and no clue."""
    if why not in _said:
        _said.add(why)
        try:
            sys.stderr.write(f"symcalc: the cache is not used: {why}\n")
        except Exception:       # a closed stderr: the answers are the same without the cache
            pass


def enabled() -> bool:
    """False when ``SYMCALC_NO_CACHE`` is set to anything but '', '0', 'false' or 'no' (or
    the platform cannot open files safely, see the module docstring)."""
    return _SUPPORTED and os.environ.get(ENV_OFF, "").strip().lower() in ("", "0", "false", "no")


def cache_dir() -> Path:
    """Where entries live (whether or not it exists yet)."""
    explicit = os.environ.get(ENV_DIR)
    if explicit:
        return Path(explicit).expanduser()
    import platformdirs  # on use: only a run that reaches the cache pays for it
    return Path(platformdirs.user_cache_dir("symcalc", appauthor=False))


def key_dir() -> Path:
    """Where the secret key lives: outside the cache directory, so that a copied cache carries
    no key that would authenticate its entries."""
    explicit = os.environ.get(ENV_KEY_DIR)
    if explicit:
        return Path(explicit).expanduser()
    import platformdirs  # on use: only a run that reaches the cache pays for it
    return Path(platformdirs.user_config_dir("symcalc", appauthor=False))


@lru_cache(maxsize=1)
def code_fingerprint() -> str:
    """A hash of everything besides the formula files that shapes a cached object: symcalc's own
    source and unit definitions, and the versions of Python, sympy and pint (whose objects are
    pickled). Hashing the source rather than trusting the version number means a changed
    loader never meets a library cached by the old one, in a checkout as much as a release."""
    import pint
    h = hashlib.sha256()
    h.update(f"{sys.version_info[:2]} sympy {_sympy_release()} pint {pint.__version__}".encode())
    package = Path(__file__).resolve().parent
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


def key_of(*parts: str | bytes) -> str:
    """A cache key: the SHA-256 of the parts (each length-prefixed, so no two lists collide)."""
    h = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()


def _name(kind: str, key: str) -> str:
    return f"{kind}-{key}.pickle"


def _mac(secret: bytes, kind: str, key: str, payload: bytes) -> bytes:
    """What authenticates an entry: its kind and key are inside the MAC, so an entry cannot be
    moved to another name either."""
    return hmac.new(secret, key_of(kind, key).encode() + payload, hashlib.sha256).digest()


# -- the directory, the key, the files ----------------------------------------------------------

def _own(st: os.stat_result) -> bool:
    return not hasattr(os, "getuid") or st.st_uid == os.getuid()


def _open_dir(create: bool, path: Path | None = None) -> int | None:
    """A descriptor of the cache directory (or ``path``: the key's), or None when there is none
    (and ``create`` is False). Raises _Untrusted for a link, another user's directory or one
    others may write (and says so once). Its permissions are never changed."""
    path = cache_dir() if path is None else path
    if create and not path.exists():
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as e:         # ELOOP: a symbolic link; ENOTDIR: not a directory
        raise _Untrusted(str(e)) from None
    try:
        st = os.fstat(fd)
        if not _own(st) or st.st_mode & 0o022:
            _say_once(f"{path} is not yours, or others may write to it (mode {stat.S_IMODE(st.st_mode):o}); "
                      "make it yours with chmod go-w, or point SYMCALC_CACHE_DIR elsewhere")
            raise _Untrusted("the directory is not the user's own, or others may write it")
    except BaseException:
        os.close(fd)
        raise
    return fd


def _open_file(dfd: int, name: str, limit: int, private: bool = False) -> bytes | None:
    """The bytes of a regular file of the user's in the directory (``private``: readable by
    the user only), None if there is none. Never follows a link, never waits on a FIFO;
    raises _Untrusted for anything else."""
    try:
        fd = os.open(name, _READ, dir_fd=dfd)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise _Untrusted(str(e)) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _own(st) or st.st_size > limit or (private and st.st_mode & 0o077):
            raise _Untrusted(f"{name} is not a regular file of the user's")
        chunks = []
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _read_key(create: bool = False, placed: bool = True) -> bytes | None:
    """The secret key from the key directory (made, with the key, when ``create``), or None
    when there is none. Raises _Untrusted for a directory or key that is not private (said
    once: a key others may read is not used, so nothing cached is read or written), and, when
    ``placed``, for a key directory that is the cache directory or inside it (see _beside)."""
    kdir = key_dir()
    if placed and _beside(kdir):
        raise _Untrusted("the key is inside the cache directory")
    kfd = _open_dir(create, kdir)
    if kfd is None:
        return None
    try:
        try:
            data = _open_file(kfd, KEY_FILE, KEY_BYTES, private=True)
        except _Untrusted:
            _say_once(f"{kdir / KEY_FILE} is not a private file of yours (others may read it, or it is a link); "
                      "delete it and symcalc makes a new one")
            raise
        if data is not None and len(data) != KEY_BYTES:
            _say_once(f"{kdir / KEY_FILE} is not a key symcalc wrote; delete it and symcalc makes a new one")
            raise _Untrusted("the key is not 32 bytes")
        if data is None and create:
            data = _create_key(kfd)
        return data
    finally:
        os.close(kfd)


def _beside(kdir: Path) -> bool:
    """Whether the key directory is the cache directory or inside it (SYMCALC_KEY_DIR set so,
    or both platform folders made one): a copy of the cache would then carry the key that
    authenticates it, so the cache is not used, and why is said once."""
    try:
        key, folder = kdir.resolve(), cache_dir().resolve()
    except (OSError, RuntimeError):
        return False
    if key != folder and folder not in key.parents:
        return False
    _say_once(f"the key folder {kdir} is {'the cache folder' if key == folder else 'inside the cache folder'} "
              f"{cache_dir()}, so a copy of the cache would carry its key; set {ENV_KEY_DIR} to a folder outside it")
    return True


def _create_key(kfd: int) -> bytes:
    """A new secret, in place atomically: written whole to a temporary file, then linked to its
    name (a link never replaces: when another process made a key first, that one is used)."""
    tmp = _write_temporary(kfd, "key", secrets.token_bytes(KEY_BYTES))
    try:
        os.link(tmp, KEY_FILE, src_dir_fd=kfd, dst_dir_fd=kfd)
    except FileExistsError:
        pass
    finally:
        _unlink(kfd, tmp)
    key = _open_file(kfd, KEY_FILE, KEY_BYTES, private=True)
    if key is None or len(key) != KEY_BYTES:
        raise _Untrusted("the key vanished")
    return key


def _write_temporary(dfd: int, kind: str, data: bytes) -> str:
    name = f".{kind}-{os.getpid()}-{secrets.token_hex(8)}.tmp"     # the writer's pid: see _gone
    fd = os.open(name, _CREATE, 0o600, dir_fd=dfd)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
    except BaseException:
        _unlink(dfd, name)
        raise
    return name


def _unlink(dfd: int, name: str) -> None:
    try:
        os.unlink(name, dir_fd=dfd)
    except OSError:
        pass


# -- reading and writing entries -------------------------------------------------------------------

def load(kind: str, key: str) -> object | None:
    """The object stored under (kind, key), or None if there is none that can be trusted."""
    if not enabled():
        return None
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
    return value


def _verified(data: bytes, secret: bytes, kind: str, key: str) -> bytes | None:
    """The payload of an entry when its MAC checks out (this cache wrote it), else None."""
    head = len(MAGIC) + _MAC
    if data.startswith(MAGIC) and hmac.compare_digest(data[len(MAGIC):head], _mac(secret, kind, key, data[head:])):
        return data[head:]
    return None


def _unpickle(payload: bytes):
    """Unpickle with the garbage collector paused: building ~10,000 small objects in a process
    that already holds sympy triggers full collections that cost more than the unpickling
    itself. (sympy objects inside are thawed later, with sympy's evaluation off: symcalc.lazy.)"""
    with collector_paused():
        return pickle.loads(payload)


_paused = 0                     # how many collector_paused blocks are open, in all threads
_resume = False                 # whether the outermost turned the collector off (and so turns it on)
_pausing = threading.Lock()


@contextmanager
def collector_paused():
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
    global _paused, _resume
    with _pausing:
        if _paused == 0:
            _resume = gc.isenabled()
            gc.disable()
        _paused += 1
    try:
        yield
    finally:
        with _pausing:
            _paused -= 1
            resume = _paused == 0 and _resume
            if resume:
                gc.enable()
        if resume:      # outside the lock: a finaliser the collection runs may pause in turn
            gc.collect(1)


def store(kind: str, key: str, value: object) -> None:
    """Store ``value`` under (kind, key), replacing any entry atomically; never raises."""
    if not enabled():
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
        _tidy(dfd, kind, secret)
    except _Untrusted:
        stats["rejected"] += 1
    except Exception:
        stats["errors"] += 1
    finally:
        os.close(dfd)


def _authentic(dfd: int, name: str, secret: bytes) -> bool:
    """Whether the entry ``name`` was written by this cache (its MAC checks out)."""
    m = _ENTRY.match(name)
    if not m:
        return False
    try:
        data = _open_file(dfd, name, MAX_ENTRY_BYTES)
    except (_Untrusted, OSError):
        return False
    return data is not None and _verified(data, secret, m.group(1), m.group(2)) is not None


def _files(dfd: int) -> list[tuple[str, os.stat_result]]:
    """(name, lstat) of the regular files of the user's in the directory (links left alone)."""
    out = []
    with os.scandir(dfd) as it:
        for entry in it:
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode) and _own(st):
                out.append((entry.name, st))
    return out


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


def _gone(name: str, st: os.stat_result) -> bool:
    """Whether ``name`` is a temporary file of a run that is no longer writing it: its process
    has ended (a run killed half-way), or it is an hour old (a pid reused since)."""
    m = _TEMPORARY.match(name)
    if not m:
        return False
    if time.time() - st.st_mtime > STALE_SECONDS:
        return True
    pid = int(m.group(2))
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False
    return False


def info() -> dict:
    """What the cache holds: its directory and the key's, whether it is on, and its entries by
    kind (count and bytes; only files this cache wrote are counted, by their names). Never
    raises."""
    out: dict = {"directory": str(cache_dir()), "key_directory": str(key_dir()), "enabled": enabled(),
                 "entries": {}, "bytes": 0}
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


def _clear_pint_folders(dfd: int) -> int:
    """Empty and remove the folders pint kept its pickles in before issue 34 (``pint-<version>``,
    files named by a SHA-1, .pickle and .json): the user's own directories only, reached without
    following a link; what else is in one stays, and so does the folder. Returns the pickles
    removed."""
    removed = 0
    with os.scandir(dfd) as it:
        names = [e.name for e in it if _PINT_FOLDER.match(e.name) and e.is_dir(follow_symlinks=False)]
    for name in names:
        try:
            sub = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), dir_fd=dfd)
        except OSError:
            continue
        try:
            if not _own(os.fstat(sub)):
                continue
            for file, _ in _files(sub):
                if _PINT_FILE.match(file):
                    _unlink(sub, file)
                    removed += file.endswith(".pickle")
        finally:
            os.close(sub)
        try:
            os.rmdir(name, dir_fd=dfd)
        except OSError:
            pass
    return removed
