"""Output files written whole or not at all (``--latex``, ``--markdown``, ``--csv``, ``--plot``).

A file written in place is truncated first: a full disk, an error half-way or Ctrl-C leaves a
damaged file where a good one was. Here the content goes to a temporary file in the same
directory (so that the rename stays on one file system), is flushed to disk, and then renamed
over the target in one step: readers see the old file or the new one, never a part. A name
that cannot be a file (empty, a directory, a directory that does not exist) is refused before
any work. An existing target that is not a regular file (``/dev/stdout``, a pipe from
``>(...)``) is a stream, not a document: it is written directly, and never replaced.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, Union

from symcalc.errors import OutputError

Content = Union[str, bytes, Callable[[BinaryIO], None]]


def check_target(path: str | os.PathLike, what: str) -> Path:
    """The path as a writable file name, or OutputError saying why it cannot be one.

    ``what`` names the option in the message (``--latex``). Called before the work that
    produces the content, so that a typo in a name does not cost a whole computation.

    Returns
    -------
    Path

    Raises
    ------
    OutputError
        The name is empty, a directory, in a directory that does not exist, or not writable.
    """
    text = os.fspath(path)
    if not isinstance(text, str) or not text.strip():
        raise OutputError(f"{what} needs a file name (got an empty one)")
    p = Path(text)
    try:
        if p.is_dir():
            raise OutputError(f"cannot write {what} {text}: it is a directory")
        parent = p.parent
        if not parent.is_dir():
            raise OutputError(f"cannot write {what} {text}: the directory {parent} does not exist")
    except OSError as e:            # a name too long, a loop of symbolic links
        raise OutputError(f"cannot write {what} {text}: {e.strerror or e}") from None
    return p


def write_file(path: str | os.PathLike, content: Content, what: str = "the output") -> Path:
    """Write ``content`` (text, bytes, or a function that writes to a binary file) to ``path``
    atomically. On failure the target is as it was (a temporary file is never left behind,
    not even on Ctrl-C).

    Parameters
    ----------
    path : the file to write
    content : text, bytes, or a function given the open binary file
    what : what is written, for the message

    Returns
    -------
    Path
        The path written.

    Raises
    ------
    OutputError
        The file cannot be written; the message says why.
    """
    p = check_target(path, what)
    try:
        st = os.stat(p)
    except OSError:
        st = None
    if st is not None and not stat.S_ISREG(st.st_mode):
        return _write_stream(p, content, what)
    tmp = p.parent / f".{p.name[:80]}.{secrets.token_hex(6)}.tmp"
    try:
        # 0o666 less the umask, like any new file; an existing file keeps its permissions
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)
    except OSError as e:
        raise OutputError(f"cannot write {what} {p}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            _put(fh, content)
            fh.flush()
            os.fsync(fh.fileno())
        if st is not None:
            os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.replace(tmp, p)
    except OSError as e:
        _discard(tmp)
        raise OutputError(f"cannot write {what} {p}: {e.strerror or e}") from None
    except BaseException:
        _discard(tmp)
        raise
    return p


def _write_stream(p: Path, content: Content, what: str) -> Path:
    try:
        with open(p, "wb") as fh:
            _put(fh, content)
    except OSError as e:
        raise OutputError(f"cannot write {what} {p}: {e.strerror or e}") from None
    return p


def _put(fh: BinaryIO, content: Content) -> None:
    if isinstance(content, str):
        fh.write(content.encode("utf-8"))
    elif isinstance(content, bytes):
        fh.write(content)
    else:
        content(fh)


def _discard(tmp: Path) -> None:
    try:
        os.unlink(tmp)
    except OSError:
        pass
