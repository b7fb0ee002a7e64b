"""HTTP/1.1 on bare asyncio protocols: the message framing shared by the ``direct`` chat client
(``direct_transport``) and the scripted test server, plus a keep-alive client connection pool.

Why not aiohttp: at hundreds of requests in flight on a 2-core machine, the rollout's throughput is
bounded by the client's CPU per request, and a general-purpose client spends most of it on layers a
JSON POST to a known endpoint does not use (URL objects, multidicts, tracing hooks, streams,
cookie jars). Here a request is one ``transport.write`` of prebuilt bytes and a response is parsed
from the buffer the socket delivered (``docs/bench/api_rollout.md`` has the figures).

Supported: ``Content-Length`` and ``chunked`` bodies, read-until-close responses, keep-alive and
``Connection: close``, ``Expect: 100-continue`` (server), TLS (``https://`` URLs, the system trust
store), per-request deadlines, one immediate resend when a reused keep-alive connection turns out
to be closed before any byte of the answer. Not supported: proxies, HTTP/2, compression (nothing
asks for it: no ``Accept-Encoding`` is sent), pipelining (requests on one connection are serial).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

MAX_HEAD_BYTES = 64 * 1024
CRLF = b"\r\n"
HEAD_END = b"\r\n\r\n"
NO_BODY_STATUSES = frozenset({204, 304})
DEADLINE_TICK_S = 0.001


class HTTPParseError(Exception):
    """The peer sent bytes that are not valid HTTP/1.1 framing."""


class ConnectionClosed(ConnectionError):
    """The connection ended before a complete response; ``answered`` says whether any byte came."""

    def __init__(self, message: str, answered: bool):
        super().__init__(message)
        self.answered = answered


class Message:
    """One parsed request or response. ``start`` is the start line split in three (``method,
    target, version`` or ``version, status, reason``); header names are lower-case, repeated
    headers are joined with ``', '``."""

    __slots__ = ("start", "headers", "body", "keep_alive")

    def __init__(self, start: list[str], headers: dict[str, str], body: bytes, keep_alive: bool):
        self.start = start
        self.headers = headers
        self.body = body
        self.keep_alive = keep_alive

    @property
    def status(self) -> int:
        return int(self.start[1])


class MessageReader:
    """Incremental parser: ``feed`` bytes, then ``next()`` returns complete messages one by one.

    ``response=True`` parses responses (a body without a length runs until ``close()``); a request
    without a length has no body.
    """

    __slots__ = ("response", "buffer", "_head", "_length", "_chunks", "_chunked", "_until_close")

    def __init__(self, response: bool):
        self.response = response
        self.buffer = bytearray()
        self._reset()

    def _reset(self) -> None:
        self._head: tuple[list[str], dict[str, str], bool] | None = None
        self._length = 0
        self._chunks: list[bytes] = []
        self._chunked = False
        self._until_close = False

    def feed(self, data: bytes) -> None:
        self.buffer += data

    @property
    def pending(self) -> bool:
        """Whether a message has started but not finished."""
        return self._head is not None or bool(self.buffer)

    @property
    def partial_headers(self) -> dict[str, str] | None:
        """The headers of a message whose head is parsed but whose body is still incomplete."""
        return self._head[1] if self._head is not None else None

    def next(self) -> Message | None:
        if self._head is None and not self._parse_head():
            return None
        start, headers, keep_alive = self._head  # type: ignore[misc]
        if self._chunked:
            if not self._read_chunks():
                return None
            body = b"".join(self._chunks)
        elif self._until_close:
            return None
        else:
            if len(self.buffer) < self._length:
                return None
            body = bytes(self.buffer[: self._length])
            del self.buffer[: self._length]
        self._reset()
        return Message(start, headers, body, keep_alive)

    def close(self) -> Message | None:
        """The connection ended: the read-until-close message, if one was being read."""
        if self._head is not None and self._until_close:
            start, headers, _ = self._head
            body = bytes(self.buffer)
            self.buffer.clear()
            self._reset()
            return Message(start, headers, body, False)
        return None

    def _parse_head(self) -> bool:
        buffer = self.buffer
        end = buffer.find(HEAD_END)
        if end < 0:
            if len(buffer) > MAX_HEAD_BYTES:
                raise HTTPParseError(f"header section longer than {MAX_HEAD_BYTES} bytes")
            while buffer[:2] == CRLF:  # stray CRLF between messages is allowed (RFC 9112 2.2)
                del buffer[:2]
            return False
        lines = bytes(buffer[:end]).decode("latin-1").split("\r\n")
        del buffer[: end + 4]
        while lines and not lines[0]:
            lines.pop(0)
        if not lines:
            return False
        start = lines[0].split(" ", 2)
        if len(start) < (2 if self.response else 3):
            raise HTTPParseError(f"bad start line {lines[0]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if not sep or not name or name[-1] in " \t":
                raise HTTPParseError(f"bad header line {line!r}")
            name = name.lower()
            value = value.strip()
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        version = start[0] if self.response else start[2]
        if not version.startswith("HTTP/1."):
            raise HTTPParseError(f"not HTTP/1.x: {lines[0]!r}")
        connection = headers.get("connection", "").lower()
        keep_alive = "close" not in connection and (version != "HTTP/1.0" or "keep-alive" in connection)
        self._head = (start, headers, keep_alive)
        if self.response:
            try:
                status = int(start[1])
            except ValueError as exc:
                raise HTTPParseError(f"bad status in {lines[0]!r}") from exc
            if status < 200 or status in NO_BODY_STATUSES:
                self._length = 0
                return True
        if "chunked" in headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif "content-length" in headers:
            try:
                self._length = int(headers["content-length"])
            except ValueError as exc:
                raise HTTPParseError(f"bad Content-Length {headers['content-length']!r}") from exc
            if self._length < 0:
                raise HTTPParseError(f"bad Content-Length {self._length}")
        elif self.response:
            self._until_close = True
            self._head = (start, headers, False)
        return True

    def _read_chunks(self) -> bool:
        buffer = self.buffer
        while True:
            line_end = buffer.find(CRLF)
            if line_end < 0:
                return False
            size_text = bytes(buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError as exc:
                raise HTTPParseError(f"bad chunk size {size_text!r}") from exc
            if size == 0:
                trailer_end = buffer.find(HEAD_END, line_end) if buffer[line_end + 2: line_end + 4] != CRLF else line_end
                if trailer_end < 0:
                    return False
                del buffer[: trailer_end + 4]
                return True
            if len(buffer) < line_end + 2 + size + 2:
                return False
            self._chunks.append(bytes(buffer[line_end + 2: line_end + 2 + size]))
            del buffer[: line_end + 2 + size + 2]


# -- client -------------------------------------------------------------------------------------------


class Origin:
    """Where requests go: scheme, host, port, the path prefix of ``url``, and the TLS context."""

    def __init__(self, url: str):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https"):
            raise ValueError(f"only http:// and https:// URLs are supported, got {url!r}")
        if not parts.hostname:
            raise ValueError(f"URL has no host: {url!r}")
        self.tls = parts.scheme == "https"
        self.host = parts.hostname
        self.port = parts.port or (443 if self.tls else 80)
        self.path = parts.path.rstrip("/")
        default_port = self.port == (443 if self.tls else 80)
        host = f"[{self.host}]" if ":" in self.host else self.host
        self.host_header = host if default_port else f"{host}:{self.port}"
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if self.tls else None


class _ClientConnection(asyncio.Protocol):
    """One keep-alive connection; one request at a time. ``deadline`` (loop time) is watched by
    the pool's sweep, not by a timer of its own."""

    __slots__ = ("transport", "reader", "waiter", "closed", "answered", "deadline", "pool")

    def __init__(self, pool: ConnectionPool):
        self.pool = pool
        self.transport: Any = None
        self.reader = MessageReader(response=True)
        self.waiter: asyncio.Future[Message] | None = None
        self.closed = False
        self.answered = False
        self.deadline: float | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        waiter = self.waiter
        if waiter is None or waiter.done():  # bytes nobody asked for: the connection is unusable
            self.transport.abort()
            return
        self.answered = True
        self.reader.feed(data)
        try:
            message = self.reader.next()
        except HTTPParseError as exc:
            self._fail(exc)
            return
        if message is not None:
            if message.start[1] == "100":  # 100 Continue and friends: the real answer follows
                self.answered = False
                message = self.reader.next()
                if message is None:
                    return
            if self.reader.pending:  # bytes past the response: no pipelining, so the stream is broken
                message.keep_alive = False
            waiter.set_result(message)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.pool._forget(self)
        waiter = self.waiter
        if waiter is None or waiter.done():
            return
        message = self.reader.close()
        if message is not None:
            waiter.set_result(message)
        else:
            reason = f"{type(exc).__name__}: {exc}" if exc else "the server closed the connection"
            waiter.set_exception(ConnectionClosed(reason, self.answered))

    def _fail(self, exc: BaseException) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(exc)
        self.closed = True
        self.transport.abort()

    def send(self, data: bytes, loop: asyncio.AbstractEventLoop) -> asyncio.Future[Message]:
        self.waiter = waiter = loop.create_future()
        self.answered = False
        self.transport.write(data)
        return waiter


class ConnectionPool:
    """Keep-alive connections to one origin, for one event loop. Idle connections are reused last
    in, first out; the pool grows to the number of requests in flight (the caller bounds that).

    Deadlines: one sweep timer per pool, due at the earliest deadline of the requests in flight,
    instead of a timer per request. Requests with the same timeout have deadlines in the order
    they were sent, so the sweep is rescheduled about once per timeout period, not per request;
    a timer per request (create, heap insert, cancel) was ~6 % of a rollout's client CPU.
    """

    def __init__(self, origin: Origin, *, connect_timeout_s: float | None = 30.0):
        self.origin = origin
        self.connect_timeout_s = connect_timeout_s
        self._idle: list[_ClientConnection] = []
        self._all: set[_ClientConnection] = set()
        self._in_flight: set[_ClientConnection] = set()
        self._sweep: asyncio.TimerHandle | None = None
        self._sweep_at = float("inf")
        self._loop: asyncio.AbstractEventLoop | None = None

    def _watch(self, deadline: float) -> None:
        if deadline < self._sweep_at:
            if self._sweep is not None:
                self._sweep.cancel()
            assert self._loop is not None
            self._sweep_at = deadline
            self._sweep = self._loop.call_at(deadline, self._expire)

    def _expire(self) -> None:
        """Fail the requests past their deadline; watch the earliest of the others. A deadline
        within one clock tick counts as past (uvloop's clock and timers have millisecond steps)."""
        self._sweep, self._sweep_at = None, float("inf")
        assert self._loop is not None
        now = self._loop.time() + DEADLINE_TICK_S
        later = []
        for connection in list(self._in_flight):
            deadline = connection.deadline
            if deadline is None:
                continue
            if deadline <= now:
                self._in_flight.discard(connection)
                connection._fail(TimeoutError("no complete response before the deadline"))
            else:
                later.append(deadline)
        if later:
            self._watch(min(later))

    async def _connect(self, deadline: float | None) -> _ClientConnection:
        loop = self._loop
        assert loop is not None
        origin = self.origin
        timeout = self.connect_timeout_s
        if deadline is not None:
            remaining = deadline - loop.time()
            timeout = remaining if timeout is None else min(timeout, remaining)
        connect = loop.create_connection(lambda: _ClientConnection(self), origin.host, origin.port, ssl=origin.ssl,
                                         server_hostname=origin.host if origin.ssl else None)
        if timeout is None:
            _, connection = await connect
        else:
            async with asyncio.timeout(max(timeout, 0.0)):
                _, connection = await connect
        self._all.add(connection)
        return connection

    def _forget(self, connection: _ClientConnection) -> None:
        self._all.discard(connection)

    async def request(self, head: bytes, body: bytes, timeout_s: float | None) -> Message:
        """Send ``head`` (request line and headers, ending with the blank line) and ``body``."""
        loop = self._loop
        if loop is None:
            loop = self._loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else loop.time() + timeout_s
        data = head + body
        idle = self._idle
        while True:
            connection = None
            while idle:
                candidate = idle.pop()
                if not candidate.closed:
                    connection = candidate
                    break
            reused = connection is not None
            if connection is None:
                connection = await self._connect(deadline)
            connection.deadline = deadline
            self._in_flight.add(connection)
            if deadline is not None:
                self._watch(deadline)
            try:
                response = await connection.send(data, loop)
            except ConnectionClosed as exc:
                if reused and not exc.answered:
                    continue  # the server had closed this idle connection: send again on another
                raise
            except BaseException:  # timeout, parse error, cancellation: the stream is in an unknown state
                connection.closed = True
                connection.transport.abort()
                raise
            finally:
                connection.waiter = None
                self._in_flight.discard(connection)
            if response.keep_alive and not connection.closed:
                idle.append(connection)
            else:
                connection.closed = True
                connection.transport.close()
            return response

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep, self._sweep_at = None, float("inf")
        self._in_flight.clear()
        for connection in list(self._all):
            connection.closed = True
            connection.transport.close()
        self._all.clear()
        self._idle.clear()


def response_head(status: int, reason: str, headers: Mapping[str, str], length: int, keep_alive: bool) -> bytes:
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    lines.append(f"Content-Length: {length}")
    if not keep_alive:
        lines.append("Connection: close")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
