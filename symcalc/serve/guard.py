"""``symcalc serve`` below the app: what a client that opens many connections, or sends slowly,
can take from the server (uvicorn's protocol, guarded), and the server's logs.

Limits below the app (uvicorn's protocol), what a client that opens many connections, or
sends slowly, can take from the server:

- **Header and body timeouts** (:class:`Limits`): a request's line and headers must arrive
  within ``header_timeout`` seconds of the connection (or of its first byte, on a kept-alive
  one), its body within ``body_timeout`` of the headers; else the connection is closed (with a
  408 when part of a request came); a client that stops reading its answer is cut off after
  ``write_timeout``. uvicorn itself only times out idle kept-alive connections.
- **A connection limit**: past ``connections`` open connections, the one that has waited
  longest for a request (a slow client, an idle kept-alive one) is closed to make room; when
  every connection is inside a request, the new one is answered 503 with Retry-After (JSON).
  The limit stays below the process's file-descriptor limit (:func:`connection_limit`, raised
  toward the hard limit at start), so accept() never runs out of descriptors.
- **Quiet logs** (:class:`_OncePer`): each kind of warning or error (a bad request, accept()
  out of resources, an exception) is written at most once a minute, one line, with the count
  of those left out.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import time
from dataclasses import dataclass
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

RETRY_AFTER = 2             # seconds a 503 tells the client to wait

MAX_CONNECTIONS = 1000          # open connections at most (fewer when file descriptors are scarce)
FD_RESERVE = 400                # descriptors kept for the rest: workers' pipes, files served, a burst of accepts
ACCEPT_BURST = 128              # the listen backlog, and the most connections accepted in one go
LOG_EVERY = 60.0                # seconds between two log lines of one kind


@dataclass(frozen=True)
class Limits:
    """The server's limits (seconds, counts); :func:`connection_limit` fits the connections to
    the machine. ``write_timeout``: how long a client may leave the answer unread once the
    server's buffer for it is full (a client that stops reading a large file)."""

    connections: int = MAX_CONNECTIONS
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    write_timeout: float = 30.0
    keep_alive: int = 5


def _error(status: int, kind: str, message: str) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = json.dumps({"error": {"kind": kind, "message": message}}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               (b"connection", b"close")]
    if status == 503:
        headers.append((b"retry-after", str(RETRY_AFTER).encode()))
    return body, headers


async def _refuse(scope, receive, send) -> None:
    """The app of a connection over the limit when no other can be closed for it: 503, JSON."""
    body, headers = _error(503, "busy", f"the server has as many connections open as it takes, all inside "
                           f"a request; ask again in {RETRY_AFTER} s")
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with the header and body timeouts and the connection limit."""

    limits: Limits = Limits()

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.timer: asyncio.TimerHandle | None = None
        self.phase = "head"                 # head: waiting for a request; body: reading it; app: answering
        self.since = self.loop.time()       # since when it has waited for a request
        if len(self.connections) > self.limits.connections and not self._make_room():
            self.app = _refuse
            self._arm(min(self.limits.header_timeout, RETRY_AFTER))
            return
        self._arm(self.limits.header_timeout)

    def _make_room(self) -> bool:
        """Close the connection that has waited longest for a request; False if none is waiting."""
        waiting = [c for c in self.connections if isinstance(c, GuardedH11) and c is not self
                   and c.phase == "head" and not c.transport.is_closing()]
        if not waiting:
            return False
        min(waiting, key=lambda c: c.since).transport.close()
        return True

    def _arm(self, seconds: float) -> None:
        self._disarm()
        self.timer = self.loop.call_later(seconds, self._too_slow)

    def _disarm(self) -> None:
        if getattr(self, "timer", None) is not None:
            self.timer.cancel()     # type: ignore[union-attr]
            self.timer = None

    def _too_slow(self) -> None:
        """Time is up for the request's headers or body: close (a 408 if part of a request came)."""
        self.timer = None
        if self.transport.is_closing():
            return
        if self.phase == "head" and self.conn.their_state is h11.IDLE and self.conn.trailing_data[0]:
            body, headers = _error(408, "timeout", "the request did not arrive in time")
            head = b"HTTP/1.1 408 Request Timeout\r\n" + b"".join(k + b": " + v + b"\r\n" for k, v in headers)
            self.transport.write(head + b"\r\n" + body)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.timer is None and self.phase == "head":     # the next request on a kept-alive connection
            self._arm(self.limits.header_timeout)
        super().data_received(data)
        self._follow()

    def _follow(self) -> None:
        """Move the timer along with the request: the body's after the headers, none once read."""
        state = self.conn.their_state
        if state is h11.SEND_BODY and self.phase == "head":
            self.phase = "body"
            self._arm(self.limits.body_timeout)
        elif state is not h11.IDLE and state is not h11.SEND_BODY and self.phase != "app":
            self.phase = "app"
            self._disarm()

    def on_response_complete(self) -> None:
        self.phase, self.since = "head", self.loop.time()
        self._disarm()              # idle now: uvicorn's keep-alive timeout applies until a byte comes
        super().on_response_complete()
        self._follow()              # a pipelined request may have started

    def pause_writing(self) -> None:
        """The client has stopped reading: it has ``write_timeout`` seconds to go on, or is cut off."""
        super().pause_writing()
        if getattr(self, "stalled", None) is None:
            self.stalled: asyncio.TimerHandle | None = self.loop.call_later(self.limits.write_timeout,
                                                                            self.transport.close)

    def resume_writing(self) -> None:
        super().resume_writing()
        self._unstall()

    def _unstall(self) -> None:
        if getattr(self, "stalled", None) is not None:
            self.stalled.cancel()   # type: ignore[union-attr]
            self.stalled = None

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._unstall()
        super().connection_lost(exc)


class _OncePer(logging.Filter):
    """Lets each kind of record (logger and message) through once per ``seconds``, without its
    traceback after the first, counting those held back; so that a flood writes a few lines."""

    def __init__(self, seconds: float = LOG_EVERY) -> None:
        super().__init__()
        self.seconds = seconds
        self.seen: dict[tuple[str, str], list[float]] = {}     # kind -> [last written, held back since]

    def filter(self, record: logging.LogRecord) -> bool:
        if record.name == "asyncio":        # accept() out of descriptors, say: one line, no socket, no traceback
            exc = record.exc_info[1] if record.exc_info else None
            first = str(record.msg).split("\n", 1)[0]
            record.msg, record.args = first + (f": {type(exc).__name__}: {exc}" if exc else ""), None
            record.exc_info, record.exc_text = None, None
        key = (record.name, str(record.msg))
        now = time.monotonic()
        last = self.seen.get(key)
        if last is not None and now - last[0] < self.seconds:
            last[1] += 1
            return False
        if last is not None:
            record.exc_info, record.exc_text = None, None      # its traceback was written the first time
            if last[1]:
                record.msg = f"{record.getMessage()} ({last[1]:g} more like it in {now - last[0]:.0f} s)"
                record.args = None
        self.seen[key] = [now, 0]
        return True


def quiet_logs() -> None:
    """Rate-limit the server's and asyncio's own warnings and errors (see :class:`_OncePer`)."""
    for name in ("uvicorn.error", "asyncio"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, _OncePer) for f in logger.filters):
            logger.addFilter(_OncePer())


def raise_fd_limit(wanted: int = 65536) -> int:
    """Raise this process's soft limit on open files toward its hard limit (``wanted`` at most);
    the soft limit in force after."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(hard, wanted)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft


def connection_limit(fds: int, wanted: int = MAX_CONNECTIONS) -> int:
    """Connections to allow with ``fds`` file descriptors: ``wanted``, or fewer, leaving
    :data:`FD_RESERVE` for everything else (at least 16)."""
    return max(16, min(wanted, fds - FD_RESERVE))


def make_server(app: Any, host: str, port: int, limits: Limits, **config: Any) -> uvicorn.Server:
    """A uvicorn server for ``app`` with these limits (its protocol, backlog, quiet logs)."""
    protocol = type("GuardedH11", (GuardedH11,), {"limits": limits})
    options: dict[str, Any] = {"log_level": "warning", "backlog": ACCEPT_BURST, "http": protocol,
                               "timeout_keep_alive": limits.keep_alive, "lifespan": "on", "ws": "none"}
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, **{**options, **config}))
    quiet_logs()
    return server
