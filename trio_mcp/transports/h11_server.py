"""A small HTTP/1.1 server on h11 (sans-IO) and Trio, for ASGI 3 applications and native ones.

:class:`H11Server` serves an application on Trio listeners, one of two kinds:

- **native**: an object with a ``serve_request(request)`` method (:class:`NativeApp`) gets
  each request as a :class:`Request`: method, path and headers decoded once, the body when it
  came with the head, and ``start``/``write``/``end``/``respond`` that go straight to h11, with
  no ASGI messages in between. ``serve_http`` runs the MCP endpoint
  (:class:`~trio_mcp.server.McpHttpApp`) so.
- **ASGI 3**: any other application, ``app(scope, receive, send)``, ``http`` scopes only; its
  ``receive`` and ``send`` are built on the same :class:`Request` methods.

It does not run the ``lifespan`` protocol: whoever serves the application opens its context
(``McpHttpApp.running()``).

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
- **Backpressure.** A write (``send``) returns once the bytes are handed to the kernel: an
  application that writes faster than its client reads waits.
- **Streaming.** Every write (``http.response.body`` message) is written at once (an SSE event
  is flushed per write); a response without ``content-length`` is sent chunked. The head of a
  response is written together with its first body part.
- **Disconnects.** :meth:`Request.wait_disconnect` (ASGI: ``receive()`` once the body is read)
  waits for the client to go away, or for the response to be complete.
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
from typing import Any, Protocol
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
    "NativeApp",
    "Request",
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


class NativeApp(Protocol):
    """An application served natively: it gets each :class:`Request` itself, no ASGI."""

    async def serve_request(self, request: Request, /) -> None: ...


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


def _parts_of(conn: h11.Connection, event: h11.Event) -> list[bytes]:
    """What ``event`` writes, in parts (h11 would join them: the response is joined once)."""
    return conn.send_with_data_passthrough(event) or []


_END = h11.EndOfMessage()
"""Every response's end (an event h11 only reads)."""


class H11Server:
    """An HTTP/1.1 server for one application, native or ASGI 3 (see the module docstring).

    ``await server.serve(listeners)`` serves until cancelled (``nursery.start`` reports when
    it accepts). ``ssl_context`` turns every connection into HTTPS (``trio.SSLStream``; the
    handshake counts toward the first request's ``header_timeout``). ``max_body_size`` None
    leaves the body's size to the application.
    """

    def __init__(
        self,
        app: App | NativeApp,
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
        native = getattr(app, "serve_request", None)
        self.native: Callable[[Request], Awaitable[None]] | None = native
        """The application's ``serve_request``, when it has one (then it is served natively)."""
        self.app: App | None = None if native is not None else app  # type: ignore[assignment]
        """The ASGI application, when it is served as one."""
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


class Request:
    """One request on a connection and its response.

    This is the native interface: an application with a ``serve_request(request)`` method gets
    this object, with the head already parsed and decoded once (:attr:`method`, :attr:`path`,
    :attr:`headers`), the whole :attr:`body` when it came with the head, :meth:`read` for the
    rest, and :meth:`start`, :meth:`write`, :meth:`end` and :meth:`respond`, which go straight
    to h11. The ASGI ``receive`` and ``send`` of an ASGI application are built on the same
    methods (:meth:`scope`, :meth:`receive`, :meth:`send`).

    Responses: :meth:`respond` writes a whole response (``content-length`` added) in one write.
    :meth:`start` keeps the head, which is written with the first :meth:`write` or the
    :meth:`end`: a response ended before anything was written gets a ``content-length``,
    otherwise it is sent chunked. Every write waits until the bytes are handed to the kernel
    (backpressure) and raises :class:`ClientDisconnected` once the client has gone. A ``HEAD``
    request's response is written without its body. ``date`` is added to every response, and
    ``connection: close`` while the server drains.
    """

    __slots__ = (
        "body",
        "body_done",
        "body_size",
        "checked",
        "complete",
        "connection",
        "ended",
        "head",
        "head_sent",
        "headers",
        "is_head",
        "lost",
        "method",
        "path",
        "pending",
        "raw_headers",
        "sized",
        "started",
        "target",
        "too_large",
    )

    def __init__(self, connection: _Connection, event: h11.Request, headers: dict[str, list[str]]) -> None:
        self.connection = connection
        method = event.method
        self.method: str = method.decode("ascii")
        """The request's method, e.g. ``"POST"``."""
        self.is_head = method == b"HEAD"
        self.target: bytes = event.target
        target = self.target
        if target[:1] == b"/" and b"%" not in target and b"?" not in target:  # the common case
            self.path: str = target.decode("latin-1")
            """The request target's path, percent-decoded (as ASGI's ``path``)."""
        else:
            self.path = _path_of(_split_target(target)[0])
        self.headers = headers
        """The request's headers: lower-case name -> its values, in order, decoded (latin-1)."""
        self.raw_headers: Sequence[tuple[bytes, bytes]] = event.headers
        """The headers as h11 parsed them: (lower-case name, value) pairs, bytes."""
        self.body: bytes | None = None
        """The whole body, when it was read with the head (the common case); else None, and
        :meth:`read` reads it."""
        self.pending: list[bytes] = []  # the body's first parts, read with the head
        self.body_done = False  # read() has handed over the whole body (or found it lost)
        self.lost = False  # the body did not come whole: the client went, or it was too large
        self.body_size = 0
        self.too_large = False
        self.started = False
        self.head_sent = False
        self.sized = False  # the head has a content-length
        self.checked = False  # the head's headers are to be checked by h11 (an ASGI application's)
        self.ended = False  # the response's last part is being written
        self.complete = False  # the response is written (wait_disconnect() returns)
        self.head: tuple[int, list[tuple[bytes, bytes]]] = (0, [])

    # -- about the request -----------------------------------------------------------------------
    @property
    def client(self) -> tuple[str, int] | None:
        """The peer's (address, port), if known."""
        return self.connection.client

    @property
    def local(self) -> tuple[str, int] | None:
        """The (address, port) the request came in on, if known."""
        return self.connection.local

    @property
    def scheme(self) -> str:
        return self.connection.server.scheme

    @property
    def gone(self) -> bool:
        """The client has gone (or the connection broke): nothing more can be written."""
        return self.connection.gone

    # -- the body --------------------------------------------------------------------------------
    async def read(self) -> bytes | None:
        """The body's next part: the whole :attr:`body` if it came with the head, ``b""`` once
        it is all read, None if it will not come whole (the client went away or sent a
        malformed body, or it is larger than ``max_body_size``: the server then answers 413)."""
        if self.body_done:
            return None if self.lost else b""
        body = self.body
        if body is not None:
            self.body_done = True
            return body
        if self.too_large:
            self.body_done = self.lost = True
            return None
        if self.pending:
            chunks, self.pending = self.pending, []
            return b"".join(chunks)
        return await self.connection.read_body(self)

    async def wait_disconnect(self) -> None:
        """Wait until the client goes away or the response is complete (read the body first)."""
        if not (self.complete or self.connection.gone):
            await self.connection.wait_disconnect(self)

    # -- the response ----------------------------------------------------------------------------
    def start(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """Begin the response (nothing is written yet). ``headers``: (lower-case name, value)
        pairs, bytes; the list is the server's from now on (``date`` is appended to it).

        A native application's headers are written as given, without h11's checks (a regular
        expression per name and per value, a good part of a small response's cost): they must
        be valid, names tokens and values free of CR, LF and NUL. An ASGI application's are
        checked."""
        if self.started:
            raise RuntimeError("the response was started twice")
        self.started = True
        self.head = (status, headers)

    async def write(self, data: bytes) -> None:
        """Write ``data`` as the next part of the body (the head first, if not written yet)."""
        await self._out(data, True)

    async def end(self, data: bytes = b"") -> None:
        """Write ``data`` as the body's last part, and the end of the response."""
        await self._out(data, False)

    async def respond(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes = b"") -> None:
        """A whole response: ``headers`` (as for :meth:`start`) and ``content-length``, then
        ``body``, in one write."""
        headers.append((b"content-length", b"%d" % len(body)))
        self.start(status, headers)
        self.sized = True
        await self._out(body, False)

    async def _out(self, body: bytes, more: bool) -> None:
        if not self.started or self.ended:
            raise RuntimeError("a response body outside a response")
        connection = self.connection
        if connection.gone:
            raise ClientDisconnected("the client has gone")
        conn = connection.h11
        try:
            if not self.head_sent:
                self.head_sent = True
                status, headers = self.head
                if not (more or self.is_head or self.sized):
                    headers.append((b"content-length", b"%d" % len(body)))
                headers.append((b"date", _date()))
                if connection.server.draining:
                    headers.append((b"connection", b"close"))
                if self.checked:
                    response = h11.Response(status_code=status, headers=headers)
                else:  # (h11's own parser passes _parsed so for what it has checked already)
                    response = h11.Response(
                        status_code=status, headers=headers, reason=b"", http_version=b"1.1", _parsed=True
                    )
                parts = _parts_of(conn, response)
            else:
                parts = []
            if body and not self.is_head:
                parts += _parts_of(conn, h11.Data(data=body))
            if not more:
                parts += _parts_of(conn, _END)
                self.ended = True
        except h11.LocalProtocolError as exc:
            connection.gone = True
            raise RuntimeError(f"the response is not valid HTTP/1.1: {exc}") from exc
        try:
            await connection.write(parts[0] if len(parts) == 1 else b"".join(parts))
        finally:
            if self.ended:  # only once written: a wait for a disconnect returns now
                self.complete = True
                connection.response_done()

    # -- ASGI, on the same methods -----------------------------------------------------------------
    def scope(self) -> Scope:
        """The ASGI ``http`` scope of the request."""
        raw_path, query = _split_target(self.target)
        connection = self.connection
        return {
            "type": "http",
            "asgi": _ASGI,
            "http_version": "1.1",
            "method": self.method,
            "scheme": connection.server.scheme,
            "path": self.path,
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": self.raw_headers,
            "client": connection.client,
            "server": connection.local,
        }

    async def receive(self) -> Message:
        """ASGI ``receive``: the body (:meth:`read`), then ``http.disconnect`` once the client
        goes away or the response is complete (:meth:`wait_disconnect`)."""
        if self.body_done:
            await self.wait_disconnect()
            return _DISCONNECT
        body = await self.read()
        if body is None:
            return _DISCONNECT
        if self.body_done and not body:
            return _EMPTY_BODY
        return {"type": "http.request", "body": body, "more_body": not self.body_done}

    async def send(self, message: Message) -> None:
        """ASGI ``send``: ``http.response.start`` is :meth:`start`, ``http.response.body``
        :meth:`write` or, without ``more_body``, :meth:`end`."""
        kind = message["type"]
        if kind == "http.response.start":
            headers = list(message.get("headers") or ())
            self.start(int(message["status"]), headers)
            self.checked = True  # (names in any case, str or bytes: h11 checks and lowers them)
            self.sized = any(name.lower() == b"content-length" for name, _ in headers)
        elif kind == "http.response.body":
            await self._out(message.get("body", b""), bool(message.get("more_body", False)))
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")


def _split_target(target: bytes) -> tuple[bytes, bytes]:
    """A request target's raw path and query string (an absolute-form target's path)."""
    raw_path, _, query = target.partition(b"?")
    if not raw_path.startswith(b"/"):  # absolute form: http://host/path
        after = raw_path.partition(b"://")[2]
        raw_path = b"/" + after.partition(b"/")[2]
    return raw_path, query


def _path_of(raw_path: bytes) -> str:
    path = raw_path.decode("latin-1")
    return unquote(path) if "%" in path else path


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

    async def _serve(self, event: h11.Request) -> bool:
        """Serve one request; whether the connection can go on."""
        server = self.server
        conn = self.h11
        # the head's size (h11 checks only heads that arrive in several reads), and its headers
        # decoded once, for the application
        items = getattr(event.headers, "_full_items", None)
        if items is None:  # (iterating Headers itself is slow: h11 keeps the triples there)
            items = [(name, name.lower(), value) for name, value in event.headers.raw_items()]
        size = len(event.target) + 16 + 4 * len(items)
        headers: dict[str, list[str]] = {}
        for _, name, value in items:  # (raw name, lower-case name, value)
            size += len(name) + len(value)
            key = name.decode("latin-1")
            found = headers.get(key)
            if found is None:
                headers[key] = [value.decode("latin-1")]
            else:
                found.append(value.decode("latin-1"))
        if server.max_body_size is not None:
            length = headers.get("content-length")  # (h11 checked it: digits, one value)
            if length is not None and int(length[0]) > server.max_body_size:
                await self._error(413)
                return False
        if size > server.max_header_size:
            await self._error(431)
            return False
        request = Request(self, event, headers)
        if self._buffered_body(request):  # the whole body is here already (the common case)
            if self.deadline.deadline != math.inf:  # a first request's, or a slow head's
                self.deadline.deadline = math.inf
        else:
            self.deadline.deadline = trio.current_time() + server.body_timeout
        server.in_progress += 1
        try:
            native = server.native
            if native is not None:
                await native(request)
            else:
                assert server.app is not None
                await server.app(request.scope(), request.receive, request.send)
        except Exception as exc:
            if not (self.gone and isinstance(exc, OSError)):
                log.error("the application failed: %r", exc, exc_info=exc)
            if not request.started and not self.gone:
                await self._error(500)
            return False
        finally:
            server.in_progress -= 1
            request.complete = True
            self.response_done()
        if request.too_large:
            if not request.started:
                await self._error(413)
            return False
        if self.gone:
            return False
        if not request.head_sent:
            log.error("the application returned without a response")
            await self._error(500)
            return False
        if conn.our_state is not h11.DONE:  # a response the application did not finish
            return False
        if self.watch_done is not None:
            await self._wait_watcher()
        if conn.their_state is h11.SEND_BODY:  # a body the application did not read: drop it
            return await self._discard_body()
        return True

    def _buffered_body(self, request: Request) -> bool:
        """Take the request's body from what was read already; True if it is all there (then
        it is :attr:`Request.body`). Over ``max_body_size``: True, and ``request.too_large``."""
        if self.h11.they_are_waiting_for_100_continue:
            return False  # it is sent once the application asks for the body
        chunks, stop = self._take_body(request)
        if stop is h11.EndOfMessage:
            request.body = chunks[0] if len(chunks) == 1 else b"".join(chunks)
            return True
        if stop is None:
            return True  # too large
        request.pending = chunks  # the rest comes later: what is here waits for read()
        return False

    def _take_body(self, request: Request) -> tuple[list[bytes], Any]:
        """The body's parts already read (counted in ``request.body_size``), and what ended the
        taking: ``h11.EndOfMessage``, ``h11.NEED_DATA``, another event (the connection closed
        mid-body), or None: past ``max_body_size`` (``request.too_large``)."""
        conn = self.h11
        limit = self.server.max_body_size
        chunks: list[bytes] = []
        while True:
            event = conn.next_event()
            if type(event) is not h11.Data:
                return chunks, (h11.EndOfMessage if type(event) is h11.EndOfMessage else event)
            data = bytes(event.data)
            request.body_size += len(data)
            if limit is not None and request.body_size > limit:
                request.too_large = True
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

    # -- reading for the application ------------------------------------------------------------
    async def read_body(self, request: Request) -> bytes | None:
        """The next part of ``request``'s body, read from the client (see :meth:`Request.read`)."""
        conn = self.h11
        if conn.they_are_waiting_for_100_continue and not self.gone:
            await self.write(_bytes_of(conn, h11.InformationalResponse(status_code=100, headers=[])))
        try:
            while True:
                chunks, stop = self._take_body(request)
                if stop is h11.EndOfMessage:
                    request.body_done = True
                    self.deadline.deadline = math.inf
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
                if stop is None:  # too large: the application sees the client go; we answer 413
                    break
                if stop is not h11.NEED_DATA:
                    self.gone = True  # ConnectionClosed mid-body
                    break
                if chunks:
                    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
                if not await self._receive():
                    self.gone = True
                    break
        except h11.RemoteProtocolError:
            self.gone = True  # a malformed body (bad chunked framing): the connection is over
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.gone = True
        request.body_done = request.lost = True
        return None

    async def wait_disconnect(self, request: Request) -> None:
        """Wait until the client goes away or ``request``'s response is complete."""
        while self.watch_done is not None:  # another wait is reading: wait for it
            await self.watch_done.wait()
            if request.complete or self.gone:
                return
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
                            return
                        continue
                    data = await self.stream.receive_some(RECEIVE_SIZE)
                    if not data:
                        self.gone = True
                        return
                    self.h11.receive_data(bytes(data) if type(data) is bytearray else data)  # type: ignore[arg-type]
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            self.gone = True
        finally:
            self.watch_scope = self.watch_done = None
            done.set()

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
