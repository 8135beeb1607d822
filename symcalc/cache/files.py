"""The cache's files: where they live, the secret key, and how each is opened, written and
told apart, without following a link or trusting what another user could have put there
(see :mod:`symcalc.cache` for why; this is its lower half, kept apart for length).
Nothing here unpickles."""

from __future__ import annotations

import hashlib
import hmac
import os
import re
import secrets
import stat
import sys
import time
from pathlib import Path

ENV_DIR = "SYMCALC_CACHE_DIR"
ENV_KEY_DIR = "SYMCALC_KEY_DIR"
ENV_OFF = "SYMCALC_NO_CACHE"
MAGIC = b"symcalc-cache 3\n"
_MAC = 32
KEY_FILE = "cache-key"
KEY_BYTES = 32
MAX_ENTRY_BYTES = 64 << 20      # far above any entry written (a library is ~1 MB); more is not ours
STALE_SECONDS = 3600            # a temporary file this old belongs to a run that was killed
# every kind the cache writes (symcalc.cache.MAX_ENTRIES): an entry of a kind not named here would
# be neither pruned, nor counted, nor cleared
_ENTRY = re.compile(r"^(library|derivation|unrouted|pint|bundle|evidence)-([0-9a-f]{64})\.pickle$")
_TEMPORARY = re.compile(r"^\.(library|derivation|unrouted|pint|bundle|evidence|key)-(\d+)-[0-9a-f]{16}\.tmp$")
# pint's own cache folders as symcalc had pint keep them before issue 34 (pint-<version>/, files
# named by a SHA-1): nothing reads them now; clear() removes them
_PINT_FOLDER = re.compile(r"^pint-[A-Za-z0-9_.+-]{1,64}$")
_PINT_FILE = re.compile(r"^[0-9a-f]{40}\.(pickle|json)$")
_SUPPORTED = (hasattr(os, "O_NOFOLLOW") and hasattr(os, "O_DIRECTORY") and os.open in os.supports_dir_fd
              and os.unlink in os.supports_dir_fd and os.link in os.supports_dir_fd)
_READ = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
_CREATE = (os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))


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


def _verified(data: bytes, secret: bytes, kind: str, key: str) -> bytes | None:
    """The payload of an entry when its MAC checks out (this cache wrote it), else None."""
    head = len(MAGIC) + _MAC
    if data.startswith(MAGIC) and hmac.compare_digest(data[len(MAGIC):head], _mac(secret, kind, key, data[head:])):
        return data[head:]
    return None


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
