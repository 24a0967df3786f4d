"""A small HTTP/1.1 server for ASGI 3 applications, on h11 (sans-IO) and Trio.

:class:`H11Server` serves an ASGI 3 ``http`` application (``app(scope, receive, send)``) on
Trio listeners: ``serve_http`` runs the MCP endpoint (:class:`~trio_mcp.server.McpHttpApp`) on
it, and any other ASGI 3 application runs on it the same way. It does not run the ``lifespan``
protocol: whoever serves the application opens its context (``McpHttpApp.running()``).

What it guarantees:

- **One Trio task per connection**, none per request: a request is served in its
  connection's task. Its deadlines cost no timer per request: a connection's head and body
  deadlines are one cancel scope, moved only when a head or body does not arrive whole with
  its first read; keep-alive and write deadlines are kept by one timekeeper task of the
  server's, which ticks (at most once a second) only while connections are idle or writing.
- **Deadlines.** A request's head must arrive within ``header_timeout`` of its first byte (and
  a new connection's first request, TLS handshake included, within ``header_timeout`` of the
  accept), its body within ``body_timeout`` of its head; past either the answer is **408** and
  the connection is closed. A keep-alive connection idle for ``keepalive_timeout`` is closed
  (within a second more).
  A write that has not finished ``write_timeout`` seconds after it began (a peer that does not
  read) ends the connection, within a second more; the application sees
  :class:`ClientDisconnected` from ``send``.
- **Sizes.** A request head larger than ``max_header_size`` gets **431**, a body larger than
  ``max_body_size`` **413** (both close the connection).
- **Connections.** At most ``max_connections`` at once and ``max_connections_per_address``
  from one peer address, so one address cannot take every slot; past the total the
  connection idle the longest is closed to make room, and if none is idle the new one is
  answered **503** and closed.
- **Backpressure.** ``send`` returns once the bytes are handed to the kernel: an application
  that writes faster than its client reads waits.
- **Streaming.** Every ``http.response.body`` message is written at once (an SSE event is
  flushed per ``send``); a response without ``content-length`` is sent chunked. The head of a
  response is written together with its first body part.
- **Disconnects.** ``receive()``, once the body is read, waits for the client to go away and
  returns ``http.disconnect`` then, or as soon as the response is complete.
- ``Connection: close`` (either side), chunked request bodies, ``Expect: 100-continue`` and
  pipelined requests (served one after another) follow RFC 9112.
- **Draining.** :meth:`H11Server.drain` stops accepting; a request arriving on a live
  connection is then answered **503** with ``Retry-After`` and ``Connection: close`` without
  reaching the application, while requests in progress go on. :meth:`H11Server.close` ends
  every connection.
"""

from __future__ import annotations

import errno
import logging
import math
import ssl
import time
from collections.abc import Awaitable, Callable, Iterable, MutableMapping, Sequence
from typing import Any
from urllib.parse import unquote

import h11
import trio

__all__ = [
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_HEADER_TIMEOUT",
    "DEFAULT_KEEPALIVE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_ADDRESS",
    "DEFAULT_MAX_HEADER_SIZE",
    "DEFAULT_WRITE_TIMEOUT",
    "ClientDisconnected",
    "H11Server",
]

log = logging.getLogger("trio_mcp.http.server")

DEFAULT_HEADER_TIMEOUT = 10.0
"""Seconds a request's head may take from its first byte (a new connection: from the accept)."""
DEFAULT_BODY_TIMEOUT = 30.0
"""Seconds a request's body may take from the end of its head."""
DEFAULT_KEEPALIVE_TIMEOUT = 60.0
"""Seconds a keep-alive connection may sit idle between requests."""
DEFAULT_WRITE_TIMEOUT = 30.0
"""Seconds one write may wait for the client to read."""
DEFAULT_MAX_HEADER_SIZE = 64 * 1024
"""Largest request head (request line and headers), bytes; larger gets 431."""
DEFAULT_MAX_CONNECTIONS = 4096
"""Connections open at once."""
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 1024
"""Connections open at once from one peer address (behind a reverse proxy every client has
the proxy's address: raise it to ``max_connections`` there)."""

RECEIVE_SIZE = 65536
"""Bytes asked of the socket per read."""
READ_AHEAD_LIMIT = 65536
"""Bytes of a next (pipelined) request read ahead while the current one is served."""
DISCARD_LIMIT = 65536
"""Bytes of an unread request body read and dropped to keep a connection alive."""
RETRY_AFTER = "1"
TIMEKEEPER_PARK_TICKS = 8
"""Ticks with no connection idle or writing after which the timekeeper sleeps until there is."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_DISCONNECT: dict[str, Any] = {"type": "http.disconnect"}
_EMPTY_BODY: dict[str, Any] = {"type": "http.request", "body": b"", "more_body": False}
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_REASONS = {408: b"Request Timeout", 413: b"Content Too Large", 431: b"Request Header Fields Too Large"}


class ClientDisconnected(OSError):
    """Raised by ``send`` when the client has gone (or stopped reading): the response is over."""


def _canned(status: int, reason: bytes, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %d %s\r\nconnection: close\r\ncontent-length: 0\r\n%s\r\n" % (status, reason, extra)


_BUSY = _canned(503, b"Service Unavailable", b"retry-after: " + RETRY_AFTER.encode() + b"\r\n")


class _Clock:
    """The ``Date`` header's value, formatted once per second."""

    second = 0
    value = b""

    @classmethod
    def date(cls) -> bytes:
        now = int(time.time())
        if cls.second != now:
            cls.second = now
            cls.value = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(now)).encode()
        return cls.value


_date = _Clock.date


def _bytes_of(conn: h11.Connection, event: h11.Event) -> bytes:
    data = conn.send(event)
    return data if data is not None else b""


class H11Server:
    """An HTTP/1.1 server for one ASGI 3 application (see the module docstring).

    ``await server.serve(listeners)`` serves until cancelled (``nursery.start`` reports when
    it accepts). ``ssl_context`` turns every connection into HTTPS (``trio.SSLStream``; the
    handshake counts toward the first request's ``header_timeout``). ``max_body_size`` None
    leaves the body's size to the application.
    """

    def __init__(
        self,
        app: App,
        *,
        ssl_context: ssl.SSLContext | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
        header_timeout: float = DEFAULT_HEADER_TIMEOUT,
        body_timeout: float = DEFAULT_BODY_TIMEOUT,
        keepalive_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
        write_timeout: float = DEFAULT_WRITE_TIMEOUT,
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
        max_body_size: int | None = None,
    ) -> None:
        if max_connections < 1 or max_connections_per_address < 1 or max_header_size < 256:
            raise ValueError("max_connections(_per_address) must be >= 1 and max_header_size >= 256")
        if min(header_timeout, body_timeout, keepalive_timeout, write_timeout) <= 0:
            raise ValueError("timeouts must be positive")
        self.app = app
        self.ssl_context = ssl_context
        self.max_connections = max_connections
        self.max_connections_per_address = max_connections_per_address
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.keepalive_timeout = keepalive_timeout
        self.write_timeout = write_timeout
        self.max_header_size = max_header_size
        self.max_body_size = max_body_size
        self.draining = False
        """Set by :meth:`drain`: new requests are answered 503 without reaching the app."""
        self.refused_at = -math.inf
        """When a request was last answered 503 for the drain (Trio time)."""
        self.connections: dict[_Connection, None] = {}
        """Open connections, oldest first."""
        self._idle: dict[_Connection, float] = {}  # waiting for their next request since, longest first
        self._per_address: dict[str, int] = {}
        self._accepting = trio.CancelScope()
        self._all = trio.CancelScope()
        self.in_progress = 0
        """Requests being served by the application now."""
        self._writing: dict[_Connection, float] = {}  # writes in progress, and when each must end
        self._watchdog: trio.Event | None = None  # set to wake the timekeeper once parked

    @property
    def scheme(self) -> str:
        return "https" if self.ssl_context is not None else "http"

    async def serve(
        self,
        listeners: Sequence[trio.abc.Listener[Any]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Accept on ``listeners`` and serve every connection, until cancelled (or :meth:`close`,
        which makes it return)."""
        with self._all:
            async with trio.open_nursery() as connections:
                connections.start_soon(self._keep_time)
                with self._accepting:
                    async with trio.open_nursery() as accepters:
                        for listener in listeners:
                            accepters.start_soon(self._accept, listener, connections)
                        task_status.started()
                for listener in listeners:
                    with trio.CancelScope(shield=True):
                        await listener.aclose()
                await trio.sleep_forever()  # draining: the connections go on until close()

    async def _keep_time(self) -> None:
        """The deadlines no request pays a timer for: end a connection idle longer than
        ``keepalive_timeout``, or whose write has outlasted ``write_timeout``. It ticks while
        connections are idle or writing, and sleeps once there are none (they wake it)."""
        tick = min(1.0, self.write_timeout / 2, self.keepalive_timeout / 2)
        quiet = 0
        writing = self._writing
        idle = self._idle
        while True:
            now = trio.current_time()
            if writing:
                for connection, due in list(writing.items()):
                    if due <= now:
                        del writing[connection]
                        connection.write_expired()
            while idle:
                connection, since = next(iter(idle.items()))
                if since + self.keepalive_timeout > now:
                    break
                del idle[connection]
                connection.evict()
            if writing or idle:
                quiet = 0
            elif quiet >= TIMEKEEPER_PARK_TICKS:
                self._watchdog = parked = trio.Event()
                await parked.wait()
                quiet = 0
                continue
            else:
                quiet += 1
            await trio.sleep(tick)

    def _wake_timekeeper(self) -> None:
        watchdog = self._watchdog
        if watchdog is not None:
            self._watchdog = None
            watchdog.set()

    def drain(self) -> None:
        """Stop accepting; answer new requests on open connections 503 + ``Retry-After``."""
        self.draining = True
        self._accepting.cancel()

    def close(self) -> None:
        """End every connection at once (and the server: :meth:`serve` is cancelled)."""
        self.draining = True
        self._all.cancel()

    async def _accept(self, listener: trio.abc.Listener[Any], nursery: trio.Nursery) -> None:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno in (errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS):
                    log.warning("accept failed (%s): retrying in 0.1 s", exc)
                    await trio.sleep(0.1)
                    continue
                raise
            nursery.start_soon(self._connection, stream)

    def _admit(self, address: str) -> bool:
        if self._per_address.get(address, 0) >= self.max_connections_per_address:
            return False
        if len(self.connections) >= self.max_connections:
            if not self._idle:
                return False
            oldest = next(iter(self._idle))
            self._idle.pop(oldest)
            oldest.evict()
        return True

    async def _connection(self, stream: trio.abc.Stream) -> None:
        client: tuple[str, int] | None = None
        local: tuple[str, int] | None = None
        sock = getattr(stream, "socket", None)
        if sock is not None:
            try:
                peer = sock.getpeername()
                client = (str(peer[0]), int(peer[1]))
                here = sock.getsockname()
                local = (str(here[0]), int(here[1]))
            except OSError:  # already gone
                await trio.aclose_forcefully(stream)
                return
        address = client[0] if client is not None else ""
        if not self._admit(address):
            log.info("refused a connection from %s: too many connections", address or "?")
            if self.ssl_context is None:
                with trio.move_on_after(0.5):
                    try:
                        await stream.send_all(_BUSY)
                    except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                        pass
            await trio.aclose_forcefully(stream)
            return
        if self.ssl_context is not None:
            stream = trio.SSLStream(stream, self.ssl_context, server_side=True, https_compatible=True)
        connection = _Connection(self, stream, client, local)
        self.connections[connection] = None
        self._per_address[address] = self._per_address.get(address, 0) + 1
        try:
            await connection.run()
        finally:
            del self.connections[connection]
            self._idle.pop(connection, None)
            left = self._per_address[address] - 1
            if left:
                self._per_address[address] = left
            else:
                del self._per_address[address]


class _Cycle:
    """One request and its response on a connection: the ASGI ``receive`` and ``send``."""

    __slots__ = (
        "body_done",
        "body_size",
        "complete",
        "connection",
        "ended",
        "head",
        "head_sent",
        "is_head",
        "pending",
        "preread",
        "started",
        "too_large",
    )

    def __init__(self, connection: _Connection, is_head: bool) -> None:
        self.connection = connection
        self.is_head = is_head
        self.body_done = False
        self.body_size = 0
        self.started = False
        self.head_sent = False
        self.complete = False  # the response is written (receive() returns http.disconnect)
        self.ended = False  # the response's last part is being written
        self.too_large = False
        self.head: tuple[int, list[tuple[bytes, bytes]]] = (0, [])
        self.preread: bytes | None = None  # the whole body, read with the head
        self.pending: list[bytes] = []  # the body's first parts, read with the head

    async def receive(self) -> Message:
        connection = self.connection
        if self.body_done:  # the application has the whole body
            if self.complete or connection.gone:
                return _DISCONNECT
            return await connection.wait_disconnect(self)
        if self.too_large and not self.body_done:
            self.body_done = True
            return _DISCONNECT  # the application sees the client go; the server answers 413
        preread = self.preread
        if preread is not None:
            self.body_done = True
            self.preread = None
            if not preread:
                return _EMPTY_BODY
            return {"type": "http.request", "body": preread, "more_body": False}
        if self.pending:
            chunks, self.pending = self.pending, []
            return {"type": "http.request", "body": b"".join(chunks), "more_body": True}
        return await connection.read_body(self)

    async def send(self, message: Message) -> None:
        connection = self.connection
        kind = message["type"]
        if kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            self.head = (int(message["status"]), list(message.get("headers") or ()))
            return
        if kind != "http.response.body":
            raise RuntimeError(f"unexpected ASGI message {kind!r}")
        if not self.started or self.ended:
            raise RuntimeError("http.response.body outside a response")
        if connection.gone:
            raise ClientDisconnected("the client has gone")
        body = message.get("body", b"")
        more = bool(message.get("more_body", False))
        conn = connection.h11
        parts: list[bytes] = []
        try:
            if not self.head_sent:
                self.head_sent = True
                status, headers = self.head
                sized = any(name.lower() == b"content-length" for name, _ in headers)
                if not more and not self.is_head and not sized:
                    headers.append((b"content-length", b"%d" % len(body)))
                headers.append((b"date", _date()))
                if connection.server.draining:
                    headers.append((b"connection", b"close"))
                parts.append(_bytes_of(conn, h11.Response(status_code=status, headers=headers)))
            if body and not self.is_head:
                parts.append(_bytes_of(conn, h11.Data(data=body)))
            if not more:
                parts.append(_bytes_of(conn, h11.EndOfMessage()))
                self.ended = True
        except h11.LocalProtocolError as exc:
            connection.gone = True
            raise RuntimeError(f"the application's response is not valid HTTP/1.1: {exc}") from exc
        try:
            await connection.write(parts[0] if len(parts) == 1 else b"".join(parts))
        finally:
            if self.ended:  # only once written: a receive() waiting for a disconnect returns now
                self.complete = True
                connection.response_done()


class _Connection:
    __slots__ = (
        "client",
        "deadline",
        "gone",
        "h11",
        "local",
        "pending",
        "reader",
        "server",
        "stream",
        "too_slow",
        "watch_done",
        "watch_scope",
    )

    def __init__(
        self,
        server: H11Server,
        stream: trio.abc.Stream,
        client: tuple[str, int] | None,
        local: tuple[str, int] | None,
    ) -> None:
        self.server = server
        self.stream = stream
        self.client = client
        self.local = local
        self.h11 = h11.Connection(h11.SERVER, max_incomplete_event_size=server.max_header_size)
        self.deadline = trio.CancelScope()
        """The connection's one deadline: moved as it goes from phase to phase."""
        self.gone = False
        """The client went away, or the connection broke: nothing more can be written."""
        self.watch_scope: trio.CancelScope | None = None
        self.watch_done: trio.Event | None = None
        self.reader: trio.Nursery | None = None  # TLS only: runs the disconnect watcher's reads
        self.pending: trio.Event | None = None  # set when that read is done
        self.too_slow = False  # a write outlasted write_timeout: the socket was closed under it

    # -- control from the server ---------------------------------------------------------------
    def evict(self) -> None:
        self.deadline.cancel()

    # -- the connection's life -------------------------------------------------------------------
    async def run(self) -> None:
        if not isinstance(self.stream, trio.SSLStream):
            await self._run()
            return
        # A cancelled SSLStream read breaks the stream, so over TLS the read that watches for a
        # disconnect runs in a task of its own, never cancelled while the connection lives.
        async with trio.open_nursery() as reader:
            self.reader = reader
            try:
                await self._run()
            finally:
                reader.cancel_scope.cancel()

    async def _run(self) -> None:
        server = self.server
        status: int | None = None
        try:
            with self.deadline:
                self.deadline.deadline = trio.current_time() + server.header_timeout
                if isinstance(self.stream, trio.SSLStream):
                    await self.stream.do_handshake()
                first = True
                while True:
                    request = await self._next_request(first)
                    first = False
                    if request is None:
                        break
                    if server.draining:
                        server.refused_at = trio.current_time()
                        await self._refuse(request)
                        break
                    if not await self._serve(request):
                        break
                    if self.h11.our_state is not h11.DONE or self.h11.their_state is not h11.DONE:
                        break
                    self.h11.start_next_cycle()
            if self.deadline.cancelled_caught and not self.gone:
                # a head or a body too slow (not an idle connection's end, nor an eviction)
                their = self.h11.their_state
                if their is h11.SEND_BODY or (their is h11.IDLE and self.h11.trailing_data[0]):
                    status = 408
        except h11.RemoteProtocolError as exc:
            status = exc.error_status_hint
            log.debug("bad HTTP/1.1 from %s: %s", self.client, exc)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            log.debug("HTTP connection from %s broke: %r", self.client, exc)
            self.gone = True
        finally:
            await self._close(status)

    async def _close(self, status: int | None) -> None:
        """Close the connection, first answering ``status`` (no body) if no response started.

        When the client may still be sending (a request not read to its end), the write side
        is shut first and what arrives is read and dropped for a moment: closing a socket with
        unread bytes resets the connection, which can destroy the answer before it is read."""
        self.gone = True
        with trio.move_on_after(1) as cleanup:
            cleanup.shield = True
            unread = self.h11.their_state is h11.SEND_BODY
            try:
                if status is not None and self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                    await self.stream.send_all(_canned(status, _REASONS.get(status, b"Bad Request")))
                    unread = True
                if unread and isinstance(self.stream, trio.SocketStream):
                    await self.stream.send_eof()
                    with trio.move_on_after(0.2):
                        while await self.stream.receive_some(RECEIVE_SIZE):
                            pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, trio.BusyResourceError, OSError):
                pass
            try:
                await self.stream.aclose()
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
                pass
        if cleanup.cancelled_caught:
            await trio.aclose_forcefully(self.stream)

    async def _receive(self) -> bool:
        """Read what the client sent into the parser; False at its end of stream."""
        if self.pending is not None:  # TLS: a read started while watching for a disconnect
            await self.pending.wait()
            return not self.gone
        data = await self.stream.receive_some(RECEIVE_SIZE)
        self.h11.receive_data(bytes(data) if type(data) is bytearray else data)  # type: ignore[arg-type]
        return bool(data)

    async def _read_ahead(self) -> None:
        """One read into the parser (TLS), never cancelled but by the connection's end."""
        try:
            data = await self.stream.receive_some(RECEIVE_SIZE)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            data = b""
        if data:
            self.h11.receive_data(bytes(data) if type(data) is bytearray else data)  # type: ignore[arg-type]
        else:
            self.gone = True
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.set()

    async def _next_request(self, first: bool) -> h11.Request | None:
        """The next request's head, or None when the client is done (closed or idle too long)."""
        conn = self.h11
        server = self.server
        event = conn.next_event()
        if event is h11.NEED_DATA:
            if not first:
                if conn.trailing_data[0]:  # part of a next head is here already
                    self.deadline.deadline = trio.current_time() + server.header_timeout
                else:
                    # idle: the timekeeper ends it after keepalive_timeout (no timer of its own)
                    if self.deadline.deadline != math.inf:  # left by a body read to its end
                        self.deadline.deadline = math.inf
                    server._idle[self] = trio.current_time()
                    if server._watchdog is not None:
                        server._wake_timekeeper()
                    try:
                        if not await self._receive():
                            return None
                    finally:
                        server._idle.pop(self, None)
                    event = conn.next_event()
                    if event is h11.NEED_DATA:  # a head in several reads: it has its own deadline
                        self.deadline.deadline = trio.current_time() + server.header_timeout
            while event is h11.NEED_DATA:
                if not await self._receive():
                    return None
                event = conn.next_event()
        if type(event) is h11.Request:
            return event
        return None  # ConnectionClosed (an EOF between requests)

    async def _refuse(self, request: h11.Request) -> None:
        headers = [
            (b"retry-after", RETRY_AFTER.encode()),
            (b"connection", b"close"),
            (b"content-length", b"0"),
            (b"date", _date()),
        ]
        data = _bytes_of(self.h11, h11.Response(status_code=503, headers=headers))
        data += _bytes_of(self.h11, h11.EndOfMessage())
        await self.write(data)

    def _scope(self, request: h11.Request) -> Scope:
        target = bytes(request.target)
        raw_path, _, query = target.partition(b"?")
        if not raw_path.startswith(b"/"):  # absolute form: http://host/path
            after = raw_path.partition(b"://")[2]
            raw_path = b"/" + after.partition(b"/")[2]
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = unquote(path)
        return {
            "type": "http",
            "asgi": _ASGI,
            "http_version": "1.1",
            "method": request.method.decode("ascii"),
            "scheme": self.server.scheme,
            "path": path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": request.headers,
            "client": self.client,
            "server": self.local,
        }

    async def _serve(self, request: h11.Request) -> bool:
        """Serve one request; whether the connection can go on."""
        server = self.server
        conn = self.h11
        size = len(request.target) + 16
        for name, value in request.headers:
            size += len(name) + len(value) + 4
            if (
                name == b"content-length"
                and server.max_body_size is not None
                and int(value) > server.max_body_size
            ):
                await self._error(413)
                return False
        if size > server.max_header_size:  # h11 checks only heads that arrive in several reads
            await self._error(431)
            return False
        cycle = _Cycle(self, request.method == b"HEAD")
        if self._buffered_body(cycle):  # the whole body is here already (the common case)
            if self.deadline.deadline != math.inf:  # a first request's, or a slow head's
                self.deadline.deadline = math.inf
        else:
            self.deadline.deadline = trio.current_time() + server.body_timeout
        server.in_progress += 1
        try:
            await server.app(self._scope(request), cycle.receive, cycle.send)
        except Exception as exc:
            if not (self.gone and isinstance(exc, OSError)):
                log.error("the ASGI application failed: %r", exc, exc_info=exc)
            if not cycle.started and not self.gone:
                await self._error(500)
            return False
        finally:
            server.in_progress -= 1
            cycle.complete = True
            self.response_done()
        if cycle.too_large:
            if not cycle.started:
                await self._error(413)
            return False
        if self.gone:
            return False
        if not cycle.head_sent:
            log.error("the ASGI application returned without a response")
            await self._error(500)
            return False
        if conn.our_state is not h11.DONE:  # a response the application did not finish
            return False
        await self._wait_watcher()
        if conn.their_state is h11.SEND_BODY:  # a body the application did not read: drop it
            return await self._discard_body()
        return True

    def _buffered_body(self, cycle: _Cycle) -> bool:
        """Take the request's body from what was read already; True if it is all there (then
        ``receive()`` hands it over without reading). Over ``max_body_size``: True, and
        ``cycle.too_large``."""
        if self.h11.they_are_waiting_for_100_continue:
            return False  # it is sent once the application asks for the body
        chunks, stop = self._take_body(cycle)
        if stop is h11.EndOfMessage:
            cycle.preread = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            return True
        if stop is None:
            return True  # too large
        cycle.pending = chunks  # the rest comes later: what is here waits for receive()
        return False

    def _take_body(self, cycle: _Cycle) -> tuple[list[bytes], Any]:
        """The body's parts already read (counted in ``cycle.body_size``), and what ended the
        taking: ``h11.EndOfMessage``, ``h11.NEED_DATA``, another event (the connection closed
        mid-body), or None: past ``max_body_size`` (``cycle.too_large``)."""
        conn = self.h11
        limit = self.server.max_body_size
        chunks: list[bytes] = []
        while True:
            event = conn.next_event()
            if type(event) is not h11.Data:
                return chunks, (h11.EndOfMessage if type(event) is h11.EndOfMessage else event)
            data = bytes(event.data)
            cycle.body_size += len(data)
            if limit is not None and cycle.body_size > limit:
                cycle.too_large = True
                return chunks, None
            chunks.append(data)

    async def _error(self, status: int) -> None:
        """Answer ``status`` (no body) and close: the state of the request is unknown."""
        if self.gone or self.h11.our_state is not h11.SEND_RESPONSE:
            return
        reason = _REASONS.get(status, b"Internal Server Error")
        headers = [(b"connection", b"close"), (b"content-length", b"0"), (b"date", _date())]
        try:
            data = _bytes_of(self.h11, h11.Response(status_code=status, headers=headers, reason=reason))
            data += _bytes_of(self.h11, h11.EndOfMessage())
            await self.write(data)
        except (h11.LocalProtocolError, ClientDisconnected):
            pass

    async def _discard_body(self) -> bool:
        await self._wait_watcher()
        left = DISCARD_LIMIT
        self.deadline.deadline = trio.current_time() + self.server.body_timeout
        while left > 0:
            event = self.h11.next_event()
            if event is h11.NEED_DATA:
                if not await self._receive():
                    return False
            elif type(event) is h11.EndOfMessage:
                return True
            elif type(event) is h11.Data:
                left -= len(event.data)
            else:
                return False
        return False

    # -- the application's receive ---------------------------------------------------------------
    async def read_body(self, cycle: _Cycle) -> Message:
        conn = self.h11
        if conn.they_are_waiting_for_100_continue and not self.gone:
            await self.write(_bytes_of(conn, h11.InformationalResponse(status_code=100, headers=[])))
        try:
            while True:
                chunks, stop = self._take_body(cycle)
                if stop is None:  # the app sees the client go; we answer 413
                    cycle.body_done = True
                    return _DISCONNECT
                if stop is h11.EndOfMessage:
                    cycle.body_done = True
                    self.deadline.deadline = math.inf
                    if not chunks:
                        return _EMPTY_BODY
                    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    return {"type": "http.request", "body": body, "more_body": False}
                if stop is not h11.NEED_DATA:
                    self.gone = True  # ConnectionClosed mid-body
                    return _DISCONNECT
                if chunks:
                    body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                    return {"type": "http.request", "body": body, "more_body": True}
                if not await self._receive():
                    self.gone = True
                    return _DISCONNECT
        except h11.RemoteProtocolError:
            self.gone = True  # a malformed body (bad chunked framing): the connection is over
            return _DISCONNECT
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.gone = True
            return _DISCONNECT

    async def wait_disconnect(self, cycle: _Cycle) -> Message:
        """Wait until the client goes away or ``cycle``'s response is complete."""
        while self.watch_done is not None:  # another receive() is reading: wait for it
            await self.watch_done.wait()
            if cycle.complete or self.gone:
                return _DISCONNECT
        scope = trio.CancelScope()
        done = trio.Event()
        self.watch_scope, self.watch_done = scope, done
        try:
            with scope:
                while True:
                    if len(self.h11.trailing_data[0]) > READ_AHEAD_LIMIT:
                        await trio.sleep_forever()  # a pipelined request waits its turn
                    if self.reader is not None:  # TLS: wait on a read of its own (see run())
                        if self.pending is None:
                            self.pending = trio.Event()
                            self.reader.start_soon(self._read_ahead)
                        await self.pending.wait()
                        if self.gone:
                            return _DISCONNECT
                        continue
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        self.gone = True
                        return _DISCONNECT
                    self.h11.receive_data(bytes(data) if type(data) is bytearray else data)  # type: ignore[arg-type]
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.gone = True
        finally:
            self.watch_scope = self.watch_done = None
            done.set()
        return _DISCONNECT

    def response_done(self) -> None:
        if self.watch_scope is not None:
            self.watch_scope.cancel()

    async def _wait_watcher(self) -> None:
        if self.watch_done is not None:
            await self.watch_done.wait()

    # -- writing ---------------------------------------------------------------------------------
    async def write(self, data: bytes) -> None:
        """Write ``data``; :class:`ClientDisconnected` if the connection broke or the client
        does not read within ``write_timeout`` (the server's watchdog closes the socket)."""
        if self.gone:
            raise ClientDisconnected("the client has gone")
        server = self.server
        server._writing[self] = trio.current_time() + server.write_timeout
        if server._watchdog is not None:
            server._wake_timekeeper()
        try:
            await self.stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self.gone = True
            if self.too_slow:
                log.info("HTTP client %s does not read: connection closed", self.client)
                self.deadline.cancel()
                raise ClientDisconnected("the client does not read") from exc
            raise ClientDisconnected("the client has gone") from exc
        finally:
            server._writing.pop(self, None)

    def write_expired(self) -> None:
        """The write in progress outlasted ``write_timeout``: close the socket under it (the
        writer gets :class:`ClientDisconnected`)."""
        self.too_slow = self.gone = True
        stream = self.stream
        if isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        sock = getattr(stream, "socket", None)
        if sock is not None:
            sock.close()  # wakes the blocked send with ClosedResourceError
        else:
            self.deadline.cancel()


def listener_addresses(listeners: Iterable[trio.abc.Listener[Any]]) -> list[tuple[str, int]]:
    """The (host, port) each TCP listener is bound to."""
    found: list[tuple[str, int]] = []
    for listener in listeners:
        sock = getattr(listener, "socket", None)
        if sock is not None:
            name = sock.getsockname()
            found.append((str(name[0]), int(name[1])))
    return found
