"""Serving MCP over Streamable HTTP, both protocol eras on one endpoint.

:func:`mcp_asgi_app` is an ASGI 3 application for any Trio ASGI server; :func:`serve_http` runs
the same application on our own HTTP/1.1 server (:mod:`trio_mcp.transports.h11_server`, h11 on
Trio), with TLS, connection limits and a graceful stop, natively: the server hands it each
request (:meth:`McpHttpApp.serve_request`), without ASGI. Both ways in are thin adapters
(:class:`_NativeExchange`, :class:`_AsgiExchange`) onto one core that sees an
:class:`_Exchange`. The pure rules (headers, SSE framing, Host checks) live in
:mod:`trio_mcp.transports.http`; the user guide is ``docs/http.md``.

Each POST is routed by era: a ``MCP-Protocol-Version`` header naming a modern version, or a
body whose ``params._meta`` carries the modern envelope, is served the 2026-07-28 way
(stateless); anything else is the 2025-11-25 way (``initialize`` opens a session).

**2025-11-25 (handshake era).** ``initialize`` (a POST without ``Mcp-Session-Id``) creates a
session: an id from :func:`secrets.token_urlsafe`, returned in the ``Mcp-Session-Id`` header,
bound to the authenticated identity when there is one. The session is one
:class:`~trio_mcp.server.ServerRuntime` session actor fed by the POST bodies; what it sends is
routed: a response to the POST that carried its request, progress notifications to the POST
stream of their request while it is open, server→client requests to the GET stream (or, if
none is open, the newest open POST stream), everything else to the GET stream.
A ``tools/call`` or ``tasks/result`` is answered as one JSON object when its response comes
first and within :data:`WATCH_AFTER` (50 ms), otherwise as SSE (what it sends first, progress
or requests to the client, then the response); every other request as one JSON object. A
session is a direct transport: each POST's message is served in that POST's Trio task, and
what the session sends is routed as it is queued. SSE streams start with
``retry: <ms>`` and a priming event (an id, empty data); every event has an id
``<stream>.<n>``; a session keeps its last :data:`DEFAULT_EVENT_BUFFER` (1000) events, over
all its streams, for ``GET`` + ``Last-Event-ID`` to replay that one stream (a dropped POST
stream is resumed so, and its response still arrives). A JSON answer whose POST connection
dropped goes to the GET stream instead. Idle sessions (no HTTP request for
``idle_timeout`` s, default 30 min) end; ``DELETE`` ends one at once. Ending a session ends
its actor: without authentication its tasks are cancelled, with it they belong to the
identity and outlive it.

**2026-07-28 (modern era).** Every POST is served in its own Trio task by the runtime's
``serve_one``, with no session actor; tasks belong to the identity (``identity:NAME``) or, without
authentication, to one shared owner, ``"anonymous"``, so that a task created by one POST can
be read, updated and cancelled by later ones (task ids are unguessable: 128+ random bits).
The headers must agree with the body (``MCP-Protocol-Version``, ``Mcp-Method``,
``Mcp-Name``), else 400 + -32020. The answer is one JSON object when the response is the
first thing the request produces, else an SSE stream of its notifications and then the
response. Closing the HTTP response cancels the request (noticed once it has been served
:data:`WATCH_AFTER`: a connection is read for its disconnect only from then on).
"""

from __future__ import annotations

import collections
import functools
import itertools
import json
import logging
import secrets
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any, Literal, NoReturn

import trio

from ..actors.runtime import Alarm, Alarms
from ..protocol import _json, jsonrpc
from ..protocol.errors import (
    HEADER_MISMATCH,
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorValue,
)
from ..protocol.modern import PROTOCOL_VERSION_KEY, is_modern
from ..protocol.versions import HANDSHAKE_VERSIONS, MODERN_VERSIONS
from ..transports.base import Receiver
from ..transports.h11_server import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_HEADER_TIMEOUT,
    DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    DEFAULT_MAX_HEADER_SIZE,
    H11Server,
    Request,
    listener_addresses,
)
from ..transports.http import (
    DEFAULT_ALLOWED_HOSTS,
    DEFAULT_EVENT_BUFFER,
    DEFAULT_EVENT_BUFFER_BYTES,
    DEFAULT_GRACE,
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_IDLE_TIMEOUT,
    DEFAULT_KEEPALIVE_INTERVAL,
    DEFAULT_MAX_BODY_SIZE,
    DEFAULT_MAX_EVENT_BYTES,
    DEFAULT_MAX_SESSIONS,
    DEFAULT_MAX_SESSIONS_PER_CLIENT,
    DEFAULT_RETRY_MS,
    HEADER_LAST_EVENT_ID,
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    JSON,
    METADATA_PATH,
    SSE,
    accepts,
    decode_header_value,
    expected_name,
    format_event_id,
    host_check,
    is_loopback,
    parse_event_id,
    sse_comment,
    sse_event,
)
from ..transports.security import (
    DEFAULT_ALLOWED_ORIGINS,
    INSUFFICIENT_SCOPE_CODE,
    NO_CALLER,
    AccessToken,
    Authenticator,
    Caller,
    InsufficientScope,
    OriginPolicy,
    bearer_token,
    current_caller,
    identity_owner,
    missing_scopes,
    origin_check,
    request_headers,
    verify_token,
)
from ._server import Server, ServerRuntime, open_runtime, register_listener

__all__ = ["ANONYMOUS_OWNER", "McpHttpApp", "mcp_asgi_app", "serve_http"]

log = logging.getLogger("trio_mcp.http")

ANONYMOUS_OWNER = "anonymous"
"""Owner of modern-era tasks created without authentication (shared by all such requests)."""

STREAMING_METHODS = frozenset({"tools/call", "tasks/result"})
"""Handshake-era requests answered as SSE: they may send notifications or requests first."""

MODERN_STATUS = {
    METHOD_NOT_FOUND: 404,
    INVALID_PARAMS: 400,
    INVALID_REQUEST: 400,
    PARSE_ERROR: 400,
    HEADER_MISMATCH: 400,
    MISSING_REQUIRED_CLIENT_CAPABILITY: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
}
"""HTTP status of a modern-era JSON answer that is this JSON-RPC error (else 200)."""

MODERN_NOTIFICATION_BUFFER = 256
"""Notifications of one 2026-07-28 request waiting to be written; past it they are dropped
(MCP allows it), so a client that does not read holds no more than this."""
WATCH_AFTER = 0.05
"""Seconds a request is served before its connection is watched for a disconnect (see
:class:`_Watches`), and a handshake-era ``tools/call`` or ``tasks/result`` waits for its
response before its answer becomes an SSE stream (primed, so that it can be resumed)."""
GET_STREAM = "g"
_PROGRESS = jsonrpc.NOTIFICATION_PREFIX + b'"notifications/progress"'
CANCELLED = "notifications/cancelled"
INITIALIZED = "notifications/initialized"
PRESSURE_IDLE = 10.0
"""Seconds a handshake-era session must have gone unused before ``max_sessions`` lets a new
session take its place (sessions that never finished their handshake go at once)."""
SHUTDOWN_WRITE_GRACE = 2.0
"""Seconds :meth:`McpHttpApp.shutdown` gives the -32603 answers to be written."""

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _quoted(text: str) -> str:
    """An HTTP quoted-string (RFC 9110 §5.6.4), for ``WWW-Authenticate`` parameters."""
    text = "".join(c for c in text if " " <= c <= "~" or "\x80" <= c <= "\xff")  # no CR/LF
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


@functools.lru_cache(maxsize=64)
def _accepts_post(values: tuple[str, ...]) -> bool:
    """Whether ``Accept`` header ``values`` allow a POST's answer (both types); clients send
    the same few values again and again."""
    return accepts(values, JSON, SSE)


def _error_body(code: int, message: str, id: jsonrpc.RequestId | None = None, data: Any = None) -> bytes:
    return jsonrpc.encode_error(id, code, message, data)


# -- one HTTP exchange ----------------------------------------------------------------------
_SSE_HEAD = (
    (b"content-type", SSE.encode()),
    (b"cache-control", b"no-cache, no-transform"),
    (b"x-accel-buffering", b"no"),
)


def _head(content_type: str | None, headers: Iterable[tuple[str, str]]) -> list[tuple[bytes, bytes]]:
    """A response's headers, encoded: ``headers`` (lower-case names), then ``content_type``."""
    head = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in headers] if headers else []
    if content_type is not None:
        head.append((b"content-type", content_type.encode("latin-1")))
    return head


class _Exchange:
    """One HTTP request and its response, with the disconnect it may end in: the one interface
    the app's core serves. Two kinds, the same to the core: :class:`_NativeExchange` on our
    own server's :class:`~trio_mcp.transports.h11_server.Request` (what ``serve_http`` runs),
    and :class:`_AsgiExchange` on an ASGI server's ``scope``, ``receive`` and ``send``.

    :attr:`headers` maps each lower-case name to its values, decoded once. A kind provides
    :attr:`scheme`, :attr:`peer`, :meth:`read_body`, :meth:`watch`, :meth:`start`,
    :meth:`write`, :meth:`end` and :meth:`respond`; the rest is shared."""

    __slots__ = (
        "_watching",
        "access",
        "alarm",
        "disconnected",
        "finished",
        "headers",
        "method",
        "path",
        "started",
        "watched",
    )

    def __init__(self, method: str, path: str, headers: dict[str, list[str]]) -> None:
        self.method = method
        self.path = path
        self.headers = headers
        self.started = False
        self.finished = False
        self.disconnected = False
        """The client has gone (seen while reading, writing or watching)."""
        self.access: AccessToken | None = None
        """What the verifier said of the request's bearer token (None: no verifier)."""
        self.watched: trio.CancelScope | None = None
        """What a disconnect cancels, while the request is served (see :class:`_Watches`)."""
        self.alarm: Alarm | None = None
        """Set while the request waits for its watch, or for a reminder (see :class:`_Watches`)."""
        self._watching: trio.CancelScope | None = None

    # -- what each kind provides ---------------------------------------------------------------
    @property
    def scheme(self) -> str:
        raise NotImplementedError

    @property
    def peer(self) -> str | None:
        """The client's address (without its port), as the HTTP server gives it; None if unknown."""
        raise NotImplementedError

    def _raw_headers(self) -> Iterable[tuple[bytes, bytes]]:
        raise NotImplementedError

    async def read_body(self, limit: int) -> bytes | None:
        """The whole body, or None if it exceeds ``limit`` bytes (the rest is not read). A
        client gone before its end: what came (and :attr:`disconnected`)."""
        raise NotImplementedError

    async def watch(self) -> None:
        """Wait for the client to go away (run after the body was read)."""
        raise NotImplementedError

    async def start(self, status: int, head: list[tuple[bytes, bytes]]) -> bool:
        """Begin a streamed response (``head``: lower-case names, bytes). False: the client has gone."""
        raise NotImplementedError

    async def write(self, data: bytes) -> bool:
        raise NotImplementedError

    async def end(self, data: bytes = b"") -> bool:
        """Write ``data`` as the body's last part, and end the response (one write)."""
        raise NotImplementedError

    async def respond(
        self,
        status: int,
        body: bytes = b"",
        *,
        content_type: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """A whole response, ``content-length`` added (see :func:`_head`)."""
        raise NotImplementedError

    # -- shared --------------------------------------------------------------------------------
    def start_watch(self, nursery: trio.Nursery) -> None:
        """Read the request's connection for its disconnect, from a task in ``nursery``, until
        :meth:`stop_watch`; a disconnect cancels :attr:`watched`."""
        if self._watching is None:
            self._watching = trio.CancelScope()
            nursery.start_soon(_cancel_on_disconnect, self, self._watching)

    def stop_watch(self) -> None:
        self.watched = None
        watching, self._watching = self._watching, None
        if watching is not None:
            watching.cancel()

    def caller(self, identity: str | None) -> Caller:
        """Who makes this request, as its tools see it: ``identity``, the token's scopes, and
        the request's headers (``Authorization`` redacted)."""
        scopes = self.access.scopes if self.access is not None else frozenset()
        return Caller(identity, scopes, request_headers(self._raw_headers()))

    def header(self, name: str) -> str | None:
        values = self.headers.get(name)
        return values[0] if values else None

    def too_long(self, limit: int) -> bool:
        """Whether the ``Content-Length`` header says the body is longer than ``limit``."""
        length = self.header("content-length")
        return length is not None and length.strip().isdigit() and int(length) > limit

    async def error(
        self,
        status: int,
        message: str,
        *,
        code: int = INVALID_REQUEST,
        id: jsonrpc.RequestId | None = None,
        data: Any = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """An HTTP error whose body is a JSON-RPC error response."""
        await self.respond(status, _error_body(code, message, id, data), content_type=JSON, headers=headers)

    async def start_sse(self) -> bool:
        return await self.start(200, list(_SSE_HEAD))


class _NativeExchange(_Exchange):
    """An exchange on our own HTTP server (``serve_http``): its
    :class:`~trio_mcp.transports.h11_server.Request`, used directly."""

    __slots__ = ("request",)

    def __init__(self, request: Request) -> None:
        super().__init__(request.method, request.path, request.headers)
        self.request = request

    @property
    def scheme(self) -> str:
        return self.request.scheme

    @property
    def peer(self) -> str | None:
        client = self.request.client
        return client[0] if client is not None else None

    def _raw_headers(self) -> Iterable[tuple[bytes, bytes]]:
        return self.request.raw_headers

    async def read_body(self, limit: int) -> bytes | None:
        request = self.request
        body = request.body
        if body is not None:  # it came with the head (the common case)
            return body if len(body) <= limit else None
        if self.too_long(limit):
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            part = await request.read()
            if part is None:
                self.disconnected = True
                return b"".join(chunks)
            if not part:
                return b"".join(chunks)
            size += len(part)
            if size > limit:
                return None
            chunks.append(part)

    async def watch(self) -> None:
        await self.request.wait_disconnect()  # (or the response is complete)
        self.disconnected = True

    async def start(self, status: int, head: list[tuple[bytes, bytes]]) -> bool:
        self.started = True
        if self.disconnected:
            return False
        self.request.start(status, head)
        return True

    async def write(self, data: bytes) -> bool:
        if self.disconnected:
            return False
        try:
            await self.request.write(data)
        except OSError:  # ClientDisconnected
            self.disconnected = True
            return False
        return True

    async def end(self, data: bytes = b"") -> bool:
        if self.finished or self.disconnected:
            self.finished = True
            return False
        self.finished = True
        try:
            await self.request.end(data)
        except OSError:
            self.disconnected = True
            return False
        return True

    async def respond(
        self,
        status: int,
        body: bytes = b"",
        *,
        content_type: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.started = self.finished = True
        if self.disconnected:
            return
        try:
            await self.request.respond(status, _head(content_type, headers), body)
        except OSError:
            self.disconnected = True


class _AsgiExchange(_Exchange):
    """An exchange under any ASGI 3 server: its ``scope``, ``receive`` and ``send``."""

    __slots__ = ("_receive", "_send", "scope")

    def __init__(self, scope: Scope, receive: Receive, send: Send) -> None:
        headers: dict[str, list[str]] = {}
        for raw_name, raw_value in scope.get("headers") or ():
            name = raw_name.decode("latin-1").lower()  # bytes (or a bytearray) in ASGI
            found = headers.get(name)
            if found is None:
                headers[name] = [raw_value.decode("latin-1")]
            else:
                found.append(raw_value.decode("latin-1"))
        super().__init__(scope["method"], scope["path"], headers)
        self.scope = scope
        self._receive = receive
        self._send = send

    @property
    def scheme(self) -> str:
        return str(self.scope.get("scheme", "http"))

    @property
    def peer(self) -> str | None:
        client = self.scope.get("client")
        if isinstance(client, list | tuple) and client:
            return str(client[0])
        return None

    def _raw_headers(self) -> Iterable[tuple[bytes, bytes]]:
        return self.scope.get("headers") or ()

    async def read_body(self, limit: int) -> bytes | None:
        if self.too_long(limit):
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True
                return b"".join(chunks)
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            if size > limit:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def watch(self) -> None:
        while not self.disconnected:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                self.disconnected = True

    async def _out(self, message: Message) -> bool:
        if self.disconnected:
            return False
        try:
            await self._send(message)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError):
            self.disconnected = True
            return False
        return True

    async def start(self, status: int, head: list[tuple[bytes, bytes]]) -> bool:
        self.started = True
        return await self._out({"type": "http.response.start", "status": status, "headers": head})

    async def write(self, data: bytes) -> bool:
        return await self._out({"type": "http.response.body", "body": data, "more_body": True})

    async def end(self, data: bytes = b"") -> bool:
        if self.finished:
            return False
        self.finished = True
        return await self._out({"type": "http.response.body", "body": data, "more_body": False})

    async def respond(
        self,
        status: int,
        body: bytes = b"",
        *,
        content_type: str | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        head = _head(content_type, headers)
        head.append((b"content-length", b"%d" % len(body)))
        self.started = self.finished = True
        if await self._out({"type": "http.response.start", "status": status, "headers": head}):
            await self._out({"type": "http.response.body", "body": body, "more_body": False})


class _Watches:
    """Watches for their client's disconnect the requests served longer than
    :data:`WATCH_AFTER`, from one Trio task of the app's.

    Reading a connection for its disconnect costs a Trio task and a registration with the
    kernel; most requests are answered in well under a millisecond, so a request starts as an
    alarm (:class:`~trio_mcp.actors.runtime.Alarms`, :meth:`watched`) and gets its watcher only
    once it has been served that long: a disconnect is noticed at most :data:`WATCH_AFTER`
    seconds late. An alarm withdrawn (its request answered) moves the task's wake-up on, so a
    server whose requests are all quick never wakes for them (on a busy machine a wake-up
    costs far more than moving a deadline).
    """

    def __init__(self) -> None:
        self.alarms = Alarms()
        """The requests being served, not watched yet: one alarm each, due :data:`WATCH_AFTER`
        after it was set."""
        self.nursery: trio.Nursery | None = None

    async def run(self, nursery: trio.Nursery) -> None:
        """Start the due watchers in ``nursery``, until cancelled."""
        self.nursery = nursery
        try:
            await self.alarms.run()
        finally:
            self.nursery = None

    def remind(self, exchange: _Exchange, reminder: Callable[[], None]) -> None:
        """Call ``reminder`` once :data:`WATCH_AFTER` seconds have passed, unless
        :meth:`forget` comes first (a timer that costs no cancel scope)."""
        self._set(exchange, reminder)

    def _set(self, exchange: _Exchange, callback: Callable[[], None]) -> None:
        exchange.alarm = self.alarms.add(trio.current_time() + WATCH_AFTER, callback)

    def _due(self, exchange: _Exchange) -> None:
        exchange.alarm = None
        if self.nursery is not None:
            exchange.start_watch(self.nursery)

    def forget(self, exchange: _Exchange) -> None:
        """``exchange`` needs no watch, or reminder, (any more)."""
        alarm, exchange.alarm = exchange.alarm, None
        if alarm is not None:
            self.alarms.withdraw(alarm)

    async def watched(
        self,
        exchange: _Exchange,
        work: Callable[[], Awaitable[None]],
        *,
        at_once: bool = False,
        scope: trio.CancelScope | None = None,
    ) -> bool:
        """Run ``work`` in the calling task; cancel it if the client disconnects first (noticed
        from :data:`WATCH_AFTER` seconds on, or ``at_once``: an SSE stream's, whose events
        must not count as delivered to a client that has gone). True if it ran to its end.

        ``scope``: the scope ``work`` runs in, entered by ``work`` itself (a cancel scope costs
        as much as a small request: a request that has one anyway lends it): a disconnect
        cancels that one."""
        if exchange.disconnected:
            return False
        watching = scope if scope is not None else trio.CancelScope()
        nursery = self.nursery
        if nursery is None:  # the app is stopping: watch at once, in a nursery of our own
            async with trio.open_nursery() as own:
                return await self._watch(exchange, work, watching, scope is None, own)
        return await self._watch(exchange, work, watching, scope is None, nursery if at_once else None)

    async def _watch(
        self,
        exchange: _Exchange,
        work: Callable[[], Awaitable[None]],
        watching: trio.CancelScope,
        enter: bool,
        now_in: trio.Nursery | None,
    ) -> bool:
        exchange.watched = watching
        if now_in is not None:
            exchange.start_watch(now_in)
        else:
            self._set(exchange, functools.partial(self._due, exchange))
        try:
            if enter:
                with watching:
                    await work()
            else:
                await work()
            # (a scope lent may have been cancelled by someone else, e.g. a shutdown: only a
            # disconnect makes the answer pointless)
            return not exchange.disconnected
        finally:
            self.forget(exchange)
            exchange.stop_watch()


async def _cancel_on_disconnect(exchange: _Exchange, watching: trio.CancelScope) -> None:
    with watching:
        try:
            await exchange.watch()
        except Exception as exc:  # not the app's nursery's to handle: the exchange is over
            log.debug("reading an HTTP request for its disconnect failed: %r", exc)
            exchange.disconnected = True
        if exchange.watched is not None:
            exchange.watched.cancel()


# -- handshake-era sessions -----------------------------------------------------------------
class _Event:
    __slots__ = ("data", "gone", "seq")

    def __init__(self, seq: int, data: bytes) -> None:
        self.seq = seq
        self.data = data
        self.gone = False  # dropped from the replay buffer


class _ReplayBudget:
    """Bytes of SSE events kept for replay by all of an app's sessions, and its limit."""

    __slots__ = ("limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0


class _Stream:
    """One SSE stream of a session (the GET stream, or one POST's), as buffered events."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.events: collections.deque[_Event] = collections.deque()
        self.finished = False  # a POST stream whose response is in ``events``
        self.consumer: trio.CancelScope | None = None  # the HTTP response writing it now
        self.sent_upto = 0
        self._changed: trio.Event | None = None
        self.undecided = False
        """A POST's stream whose answer may still be plain JSON: nothing came before it yet."""
        self.answer: bytes | None = None
        """The response, when it came first to an undecided stream (never buffered for replay:
        it is answered as JSON, with no event id)."""
        self.on_wake: Callable[[], None] | None = None
        """Called at each change (after :attr:`changed` is set), while a POST serving its
        call in its own task watches the stream (see :class:`_PostAnswer`)."""
        self.on_call: Callable[[], None] | None = None
        """Called when the session starts the POST's call in the POST's own task."""

    @property
    def changed(self) -> trio.Event:
        """Set at the stream's next change (made when first asked for: most streams are over
        before anyone waits)."""
        changed = self._changed
        if changed is None:
            changed = self._changed = trio.Event()
        return changed

    def take_over(self) -> trio.CancelScope:
        """A new consumer (an HTTP response writing the stream): one still at it stops (a
        resumption takes over from a connection we think alive)."""
        if self.consumer is not None:
            self.consumer.cancel()
        self.consumer = scope = trio.CancelScope()
        return scope

    def wake(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()
        if self.on_wake is not None:
            self.on_wake()

    def after(self, seq: int) -> list[_Event]:
        new: list[_Event] = []
        for event in reversed(self.events):
            if event.seq <= seq:
                break
            new.append(event)
        new.reverse()
        return new


class _Waiter:
    """A request answered as one JSON object: where its response goes. (Most responses are
    there before anyone waits: the event to wait on is made only when needed.)"""

    __slots__ = ("_event", "data", "done")

    def __init__(self) -> None:
        self.done = False
        self.data: bytes | None = None
        self._event: trio.Event | None = None

    def set(self) -> None:
        self.done = True
        if self._event is not None:
            self._event.set()

    async def wait(self) -> None:
        if not self.done:
            if self._event is None:
                self._event = trio.Event()
            await self._event.wait()


class _Session:
    """A 2025-11-25 session: the :class:`~trio_mcp.transports.base.Transport` its actor runs
    on (fed by POST bodies; what it sends is routed to the session's SSE streams)."""

    def __init__(
        self,
        session_id: str,
        identity: str | None,
        buffer_size: int,
        *,
        client: str = "",
        buffer_bytes: int = DEFAULT_EVENT_BUFFER_BYTES,
        budget: _ReplayBudget | None = None,
        relieve: Callable[[], None] | None = None,
        shields_calls: bool = False,
    ) -> None:
        self.id = session_id
        self.identity = identity
        self.client = client
        """Whom the session counts under for the per-client limit: identity, else address."""
        self.initialized = False
        """``notifications/initialized`` arrived: the handshake is over."""
        self.created = trio.current_time()
        self._receiver: Receiver | None = None
        self._attached = trio.Event()  # set by attach(), or when the session ends first
        self._input_over = trio.Event()
        self.seq = 0
        self.streams: dict[str, _Stream] = {GET_STREAM: _Stream(GET_STREAM)}
        self._order: collections.deque[tuple[_Stream, _Event]] = collections.deque()
        self._delivered: collections.deque[tuple[_Stream, _Event]] = collections.deque()
        self._buffer_size = buffer_size
        self._buffer_bytes = buffer_bytes
        self._budget = budget if budget is not None else _ReplayBudget(buffer_bytes)
        self._relieve = relieve
        self.count = 0
        """Events kept for replay."""
        self.bytes = 0
        """Bytes of the events kept for replay."""
        self._by_request: dict[jsonrpc.RequestId, _Stream | _Waiter] = {}
        self._by_token: dict[Any, _Stream] = {}
        self._numbers = itertools.count(1)
        self.closed = False
        self.ended = trio.Event()
        self.last_seen = trio.current_time()
        self.active = 0
        self.shields_calls = shields_calls
        """The session's plain calls, served in their POSTs' tasks, are not cancelled with
        those tasks (see :class:`~trio_mcp.transports.base.DirectTransport`)."""

    @property
    def get_stream(self) -> _Stream:
        return self.streams[GET_STREAM]

    def use(self) -> None:
        """A request of the session's begins (pair with :meth:`done`): it is not idle (an
        idle session is one with no request in progress since :attr:`last_seen`)."""
        self.active += 1

    def done(self) -> None:
        self.active -= 1
        self.last_seen = trio.current_time()

    # -- the DirectTransport the session actor runs on -------------------------------------
    def attach(self, receiver: Receiver) -> None:
        self._receiver = receiver
        self._attached.set()

    async def receive(self) -> jsonrpc.Received:
        # Messages are delivered (feed), never read: this only reports the end of input.
        await self._input_over.wait()
        raise trio.EndOfChannel

    async def send(self, message: bytes) -> None:
        self.route(message)

    def send_nowait(self, message: bytes, answer_to: jsonrpc.RequestId | None = None) -> None:
        if answer_to is None:
            self.route(message)
        else:
            self.route_answer(answer_to, message)

    async def aclose(self) -> None:
        self.close()

    # -- life -------------------------------------------------------------------------------
    def end(self) -> None:
        """Stop the session: its actor reads end-of-input and finishes."""
        self._input_over.set()
        self._attached.set()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self.end()
        for holder in self._by_request.values():
            if isinstance(holder, _Waiter):
                holder.set()
        for stream in self.streams.values():
            stream.wake()

    async def feed(self, message: jsonrpc.Message, caller: Caller = NO_CALLER) -> bool:
        """Serve one message (parsed once, by the app) in the calling POST's Trio task, as the
        session actor's reader would, and who sent it (what it serves sees that POST's caller:
        its headers, its token's scopes; a task created now keeps it). False if the session
        has ended. An answer ready at once is routed before this returns."""
        if self._receiver is None:
            await self._attached.wait()  # the actor is starting (the session was just made)
        receiver = self._receiver
        if receiver is None or self._input_over.is_set():
            return False
        token = current_caller.set(caller)
        try:
            await receiver.deliver(message)
        except Exception as exc:  # a bug in a handler: the session ends, as a connection would
            log.error("HTTP session %s... failed: %r", self.id[:6], exc, exc_info=exc)
            receiver.abort()
            return False
        finally:
            current_caller.reset(token)
        return True

    def call_started(self, request_id: jsonrpc.RequestId) -> None:
        """The session runs the call of ``request_id`` in its POST's task, from now on (see
        :class:`~trio_mcp.transports.base.DirectTransport`)."""
        holder = self._by_request.get(request_id)
        if isinstance(holder, _Stream) and holder.on_call is not None:
            holder.on_call()

    # -- routing ------------------------------------------------------------------------------
    def open_post_stream(self, request_id: jsonrpc.RequestId, token: Any) -> _Stream:
        stream = _Stream(f"p{next(self._numbers)}")
        self.streams[stream.key] = stream
        self._by_request[request_id] = stream
        if token is not None:
            self._by_token[token] = stream
        return stream

    def wait_json(self, request_id: jsonrpc.RequestId) -> _Waiter:
        waiter = _Waiter()
        self._by_request[request_id] = waiter
        return waiter

    def abandon(self, request_id: jsonrpc.RequestId, waiter: _Waiter) -> None:
        """The JSON request's connection dropped: its response will go to the GET stream."""
        if self._by_request.get(request_id) is waiter:
            del self._by_request[request_id]

    def withdraw(self, request_id: Any) -> None:
        """The client cancelled ``request_id``: no response will come, so end what waits for one
        (its POST stream ends; a JSON request is answered 204)."""
        holder = self._by_request.pop(request_id, None) if isinstance(request_id, int | str) else None
        if isinstance(holder, _Waiter):
            holder.set()
        elif isinstance(holder, _Stream):
            holder.finished = True
            for token in [t for t, s in self._by_token.items() if s is holder]:
                del self._by_token[token]
            holder.wake()

    def route_answer(self, request_id: jsonrpc.RequestId | None, data: bytes) -> None:
        """Route ``data``, the response to ``request_id``: to the POST that carried the
        request (its waiter, or its stream), else to the GET stream."""
        holder = self._by_request.pop(request_id, None) if isinstance(request_id, int | str) else None
        if isinstance(holder, _Waiter):
            holder.data = data
            holder.set()
            return
        target = self.get_stream
        if isinstance(holder, _Stream):
            holder.finished = True
            if self._by_token:
                for token in [t for t, s in self._by_token.items() if s is holder]:
                    del self._by_token[token]
            if holder.undecided and not holder.events:  # nothing before it: plain JSON
                holder.answer = data
                holder.wake()
                return
            target = holder
        self._append(target, data)

    def route(self, data: bytes) -> None:
        """Route one message the session sends (see :meth:`route_answer` for a response)."""
        if data.startswith(jsonrpc.NOTIFICATION_PREFIX) and not data.startswith(_PROGRESS):
            self._append(self.get_stream, data)  # a notification for the GET stream: no parse
            return
        try:
            message = _json.loads(data)
        except ValueError:
            message = None
        target = self.get_stream
        if isinstance(message, dict) and "method" not in message:  # a response
            self.route_answer(message.get("id"), data)
            return
        elif isinstance(message, dict) and "id" in message:  # a server→client request
            if target.consumer is None:
                for stream in reversed(self.streams.values()):
                    if (
                        stream.key != GET_STREAM
                        and not stream.finished
                        and (stream.consumer is not None or stream.undecided)
                    ):
                        target = stream
                        break
        elif isinstance(message, dict) and message.get("method") == "notifications/progress":
            params = message.get("params")
            token = params.get("progressToken") if isinstance(params, dict) else None
            related = self._by_token.get(token) if isinstance(token, int | str) else None
            if related is not None and not related.finished:
                target = related
        self._append(target, data)

    def _append(self, stream: _Stream, data: bytes) -> None:
        self.seq += 1
        event = _Event(self.seq, data)
        stream.events.append(event)
        self._order.append((stream, event))
        self.count += 1
        self.bytes += len(data)
        self._budget.total += len(data)
        while (self.count > self._buffer_size or self.bytes > self._buffer_bytes) and self.count > 1:
            if not self.drop_one(delivered_only=False):
                break
        if self._budget.total > self._budget.limit and self._relieve is not None:
            self._relieve()
        stream.wake()

    def delivered(self, stream: _Stream, events: Iterable[_Event]) -> None:
        """``events`` of ``stream`` were written to the client: the first to drop from the buffer."""
        for event in events:
            if not event.gone:
                self._delivered.append((stream, event))

    def drop_one(self, *, delivered_only: bool) -> bool:
        """Drop one event from the replay buffer: the oldest already written to the client,
        else (unless ``delivered_only``) the oldest. False if there is none."""
        queues = (self._delivered,) if delivered_only else (self._delivered, self._order)
        for queue in queues:
            while queue:
                stream, event = queue.popleft()
                if event.gone:
                    continue
                event.gone = True
                if stream.events and stream.events[0] is event:
                    stream.events.popleft()
                else:
                    stream.events.remove(event)
                self.count -= 1
                self.bytes -= len(event.data)
                self._budget.total -= len(event.data)
                self.forget_if_done(stream)
                self._compact()
                return True
        return False

    def _compact(self) -> None:
        """Drop entries of events already gone, once they are most of a queue (amortized O(1))."""
        for queue in (self._order, self._delivered):
            if len(queue) > 2 * self.count + 64:
                live = [entry for entry in queue if not entry[1].gone]
                queue.clear()
                queue.extend(live)

    def release(self) -> None:
        """The session left the app: its buffered events (and any it buffers from now on) no
        longer count toward the app's total (idempotent)."""
        self._budget.total -= self.bytes
        self._budget = _ReplayBudget(self._buffer_bytes)
        self._budget.total = self.bytes
        self._relieve = None

    def forget_if_done(self, stream: _Stream) -> None:
        if stream.key != GET_STREAM and stream.finished and not stream.events and stream.consumer is None:
            self.streams.pop(stream.key, None)


class _ModernAnswer:
    """How a 2026-07-28 request is answered: one JSON object when the response is all there
    is; else an SSE stream, written by a Trio task started at the first notification (in the
    app's nursery), of the notifications as they come and then the response."""

    __slots__ = ("_channel", "_done", "_exchange", "_final", "_keepalive", "_nursery", "_scope")

    def __init__(self, exchange: _Exchange, keepalive: float, nursery: trio.Nursery | None) -> None:
        self._exchange = exchange
        self._keepalive = keepalive
        self._nursery = nursery
        self._channel: trio.MemorySendChannel[bytes] | None = None
        self._done: trio.Event | None = None
        self._scope: trio.CancelScope | None = None
        self._final: bytes | None = None

    def send(self, data: bytes) -> bool:
        """A notification of the request's (never waits; False: dropped, the client reads
        too slowly or has gone)."""
        channel = self._channel
        if channel is None:
            if self._nursery is None:
                return False
            channel, notifications = trio.open_memory_channel[bytes](MODERN_NOTIFICATION_BUFFER)
            self._channel, self._done, self._scope = channel, trio.Event(), trio.CancelScope()
            self._nursery.start_soon(self._write, notifications, self._scope, self._done)
        try:
            channel.send_nowait(data)
        except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
            return False
        return True

    async def finish(self, data: bytes, code: int | None) -> None:
        """Answer with ``data``: as JSON if nothing was sent before it, else as the stream's
        last event (once what came before it is written)."""
        if self._channel is None:
            status = MODERN_STATUS.get(code, 200) if code is not None else 200
            await self._exchange.respond(status, data, content_type=JSON)
            return
        self._final = data
        self._channel.close()
        assert self._done is not None
        await self._done.wait()

    def close(self) -> None:
        """The request is over: a stream not finished by :meth:`finish` stops."""
        if self._channel is not None:
            self._channel.close()
            if self._done is not None and not self._done.is_set() and self._final is None:
                assert self._scope is not None
                self._scope.cancel()

    async def _write(
        self, notifications: trio.MemoryReceiveChannel[bytes], scope: trio.CancelScope, done: trio.Event
    ) -> None:
        exchange = self._exchange
        try:
            with scope:
                if not await exchange.start_sse():
                    return
                while True:
                    following: bytes | None = None
                    with trio.move_on_after(self._keepalive):
                        try:
                            following = await notifications.receive()
                        except trio.EndOfChannel:
                            if self._final is not None:  # the last event and the end: one send
                                await exchange.end(sse_event(self._final))
                            return
                    part = sse_event(following) if following is not None else sse_comment()
                    if not await exchange.write(part):
                        return
        except Exception as exc:  # the app's nursery is not this request's to fail
            log.error("writing a 2026-07-28 SSE answer failed: %r", exc, exc_info=exc)
        finally:
            done.set()


class _PostAnswer:
    """How a 2025-11-25 POST that waits (a ``tools/call``, a ``tasks/result``) is answered
    while its call runs in the POST's own task: as JSON if the response comes first; else,
    from the first thing sent before it (progress, a request to the client) or once
    :data:`WATCH_AFTER` has passed, as an SSE stream written by a task of the app's
    (:meth:`go_sse`), so that the call can go on meanwhile (an elicitation's answer needs its
    request written)."""

    __slots__ = ("_app", "_armed", "_exchange", "_session", "_start", "_stream", "_waiting", "writing")

    def __init__(self, app: McpHttpApp, exchange: _Exchange, session: _Session, stream: _Stream, start: int):
        self._app = app
        self._exchange = exchange
        self._session = session
        self._stream = stream
        self._start = start
        self.writing: trio.Event | None = None
        """Set once the SSE writer is done (None: no writer started)."""
        self._waiting: trio.Event | None = None
        self._armed = False

    def arm(self) -> None:
        """Go SSE once :data:`WATCH_AFTER` has passed (unless decided before): called when the
        call starts in the POST's task, or when the POST waits for an answer from elsewhere.
        (An answer ready at once needs no alarm: one moves a Trio deadline, twice, when no
        other is pending.)"""
        if not self._armed:
            self._armed = True
            self._app._watches.remind(self._exchange, self.go_sse)

    def undecided(self) -> bool:
        """Nothing has come yet: neither the response nor anything before it."""
        stream = self._stream
        return (
            stream.answer is None and not stream.events and not stream.finished and not self._session.closed
        )

    async def decided(self) -> None:
        """Wait until :meth:`undecided` is over (the POST's task: its call ran elsewhere)."""
        self._waiting = waiting = trio.Event()
        await waiting.wait()

    def changed(self) -> None:
        """The stream changed: its response, which is answered as JSON, or what goes before it."""
        if self._stream.answer is None:
            self.go_sse()
        elif self._waiting is not None:
            self._waiting.set()

    def go_sse(self) -> None:
        """Start the SSE writer, unless the response came first (or it has begun)."""
        stream = self._stream
        if self.writing is not None or stream.answer is not None:
            return
        stream.on_wake = None
        self._app._watches.forget(self._exchange)
        nursery = self._app._nursery
        if nursery is None:  # the app is stopping: the POST's task writes, once the call is over
            if self._waiting is not None:
                self._waiting.set()
            return
        stream.undecided = False
        scope = stream.take_over()
        self.writing = writing = trio.Event()
        nursery.start_soon(self._write, scope, writing)
        if self._waiting is not None:
            self._waiting.set()

    def stop(self) -> None:
        """The POST is over: a writer still running (the POST was cancelled) stops."""
        if self.writing is not None and not self.writing.is_set():
            consumer = self._stream.consumer
            if consumer is not None:
                consumer.cancel()

    async def _write(self, scope: trio.CancelScope, writing: trio.Event) -> None:
        try:
            await self._app._serve_stream(self._exchange, self._session, self._stream, self._start, scope)
        except Exception as exc:  # the app's nursery is not this request's to fail
            log.error("writing a POST's SSE stream failed: %r", exc, exc_info=exc)
        finally:
            writing.set()


# -- the application ------------------------------------------------------------------------
class McpHttpApp:
    """The MCP endpoint as an ASGI 3 application (see :func:`mcp_asgi_app`), which our own
    HTTP server serves natively instead (:meth:`serve_request`).

    It needs a running Trio context of its own for sessions: under an ASGI server that runs
    the ``lifespan`` protocol it starts itself; otherwise run it with ``async with
    app.running():`` (or ``await nursery.start(app.run)``) around serving it.
    """

    def __init__(
        self,
        server_or_runtime: Server | ServerRuntime,
        *,
        path: str = "/mcp",
        allowed_origins: OriginPolicy = DEFAULT_ALLOWED_ORIGINS,
        allowed_hosts: Iterable[str] | Callable[[str], bool] | None = DEFAULT_ALLOWED_HOSTS,
        authenticate: Authenticator | None = None,
        authorization_servers: Iterable[str] = (),
        scopes_supported: Iterable[str] = (),
        resource_url: str | None = None,
        max_body_size: int = DEFAULT_MAX_BODY_SIZE,
        event_buffer: int = DEFAULT_EVENT_BUFFER,
        retry_ms: int = DEFAULT_RETRY_MS,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
        max_sessions: int = DEFAULT_MAX_SESSIONS,
        keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL,
        event_buffer_bytes: int = DEFAULT_EVENT_BUFFER_BYTES,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
        handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    ) -> None:
        if not path.startswith("/"):
            raise ValueError("path must start with '/'")
        if max_body_size < 1 or event_buffer < 1 or max_sessions < 1:
            raise ValueError("max_body_size, event_buffer and max_sessions must be at least 1")
        if not (idle_timeout > 0 and keepalive_interval > 0 and handshake_timeout > 0 and retry_ms >= 0):
            raise ValueError("timeouts and intervals must be positive, retry_ms >= 0")
        if min(event_buffer_bytes, max_event_bytes, max_sessions_per_client) < 1:
            raise ValueError("event_buffer_bytes, max_event_bytes, max_sessions_per_client must be >= 1")
        self.server_or_runtime = server_or_runtime
        self.path = path.rstrip("/") or "/"
        self._origin_allowed = origin_check(allowed_origins)
        self._host_allowed = host_check(allowed_hosts)
        self.authenticate = authenticate
        self.required_scopes: tuple[str, ...] = tuple(getattr(authenticate, "required_scopes", ()))
        self.authorization_servers = list(authorization_servers)
        self.scopes_supported = list(scopes_supported)
        """Given: the metadata's ``scopes_supported``; empty: the verifier's required scopes
        and every tool's ``scopes``, as registered when the document is asked for."""
        self.resource_url = resource_url
        self.max_body_size = max_body_size
        self.event_buffer = event_buffer
        self.retry_ms = retry_ms
        self.idle_timeout = idle_timeout
        self.max_sessions = max_sessions
        self.keepalive_interval = keepalive_interval
        self.event_buffer_bytes = event_buffer_bytes
        self.max_sessions_per_client = max_sessions_per_client
        self.handshake_timeout = handshake_timeout
        self.runtime: ServerRuntime | None = None
        self._nursery: trio.Nursery | None = None
        self.sessions: dict[str, _Session] = {}
        self.replay = _ReplayBudget(max_event_bytes)
        """Bytes of SSE events all sessions keep for replay (``replay.total``) and the limit."""
        self._per_client: dict[str, int] = {}
        self.draining = False
        """Set by :meth:`shutdown`: new requests get 503 + ``Retry-After``."""
        self._working = 0  # POSTs being served
        self._watches = _Watches()
        self._quiet: trio.Event | None = None  # set when _working drops to 0, for shutdown

    # -- running ----------------------------------------------------------------------------
    @asynccontextmanager
    async def running(self) -> AsyncIterator[McpHttpApp]:
        """Serve requests inside the block (opens the runtime if given a Server)."""
        if self._nursery is not None:
            raise RuntimeError("this MCP app is already running")
        async with open_runtime(self.server_or_runtime) as runtime, trio.open_nursery() as nursery:
            self.runtime, self._nursery = runtime, nursery
            nursery.start_soon(self._expire_idle)
            nursery.start_soon(self._watches.run, nursery)
            try:
                yield self
            finally:
                self.runtime = self._nursery = None
                for session in list(self.sessions.values()):
                    session.end()
                self.sessions.clear()
                self._per_client.clear()
                self.replay.total = 0
                nursery.cancel_scope.cancel()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> NoReturn:
        """:meth:`running` as a task: ``await nursery.start(app.run)``."""
        async with self.running():
            task_status.started()
            await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def shutdown(self, grace: float = DEFAULT_GRACE) -> None:
        """Stop serving cleanly (call it before leaving :meth:`running`).

        New requests are answered 503 with ``Retry-After`` (and ``Connection: close``) from
        now on. POSTs in progress get ``grace`` seconds to finish; then every request still
        waiting is answered -32603 "server shutting down" (its work cancelled) and given
        :data:`SHUTDOWN_WRITE_GRACE` seconds to be written. Then every session ends: its SSE
        streams end cleanly (the body's end is written) and its tasks go as at ``DELETE``.
        """
        self.draining = True
        await self._until_quiet(grace)
        runtime = self.runtime
        if runtime is not None and self._working:
            ours: set[object] = set(self.sessions.values())
            for actor in list(runtime.sessions):
                if actor.transport in ours:
                    actor.shutdown()
            runtime.stateless.shutdown()  # the 2026-07-28 requests being served
            await self._until_quiet(SHUTDOWN_WRITE_GRACE)
        for session in list(self.sessions.values()):
            session.close()
        with trio.move_on_after(1):  # the streams woken by close() write their end
            while any(  # noqa: ASYNC110 - bounded, once, at the end
                stream.consumer is not None
                for session in self.sessions.values()
                for stream in session.streams.values()
            ):
                await trio.sleep(0.01)
        for session in list(self.sessions.values()):
            self._end(session)

    async def _until_quiet(self, seconds: float) -> None:
        """Wait until no POST is in progress, for at most ``seconds``."""
        with trio.move_on_after(seconds):
            while self._working:
                self._quiet = trio.Event()
                await self._quiet.wait()
        self._quiet = None

    async def _expire_idle(self) -> None:
        interval = max(0.01, min(60.0, self.idle_timeout / 4, self.handshake_timeout / 2))
        while True:
            await trio.sleep(interval)
            now = trio.current_time()
            for session in list(self.sessions.values()):
                if session.active == 0 and now - session.last_seen >= self.idle_timeout:
                    log.info(
                        "HTTP session %s... expired after %.0f s idle", session.id[:6], self.idle_timeout
                    )
                    self._end(session)
                elif not session.initialized and now - session.created >= self.handshake_timeout:
                    log.info("HTTP session %s... ended: no notifications/initialized", session.id[:6])
                    self._end(session)

    def _relieve_replay(self) -> None:
        """All sessions together keep too many bytes for replay: drop events already written
        (in every session), then the oldest of the session that holds the most."""
        budget = self.replay
        for session in list(self.sessions.values()):
            while budget.total > budget.limit and session.drop_one(delivered_only=True):
                pass
        while budget.total > budget.limit and self.sessions:
            largest = max(self.sessions.values(), key=lambda session: session.bytes)
            if largest.count <= 1 or not largest.drop_one(delivered_only=False):
                break

    def _end(self, session: _Session) -> None:
        if self.sessions.get(session.id) is session:
            del self.sessions[session.id]
            self._forget(session)
        session.end()

    def _forget(self, session: _Session) -> None:
        """``session`` left :attr:`sessions`: it no longer counts toward its client's limit."""
        left = self._per_client.get(session.client, 0) - 1
        if left > 0:
            self._per_client[session.client] = left
        else:
            self._per_client.pop(session.client, None)
        session.release()

    async def _run_session(self, session: _Session, owner: str | None, client: str | None) -> None:
        assert self.runtime is not None
        try:
            await self.runtime.serve(session, owner=owner, client=client)
        finally:
            if self.sessions.get(session.id) is session:
                del self.sessions[session.id]
                self._forget(session)
            session.release()  # what it buffered since it left ``sessions``
            session.close()
            session.ended.set()

    # -- ASGI -------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope.get("type")
        if kind == "lifespan":
            await self._lifespan(receive, send)
            return
        if kind != "http":
            if kind == "websocket":
                await send({"type": "websocket.close", "code": 1000})
            return
        await self._serve(_AsgiExchange(scope, receive, send))

    async def serve_request(self, request: Request) -> None:
        """Serve one request of our own HTTP server's natively, without ASGI (the server calls
        this instead of the app itself: see :class:`~trio_mcp.transports.h11_server.H11Server`)."""
        await self._serve(_NativeExchange(request))

    async def _serve(self, exchange: _Exchange) -> None:
        try:
            await self._handle(exchange)
        finally:
            if exchange.started and not exchange.finished:
                await exchange.end()
            elif not exchange.started:
                await exchange.error(500, "Internal error: no response", code=INTERNAL_ERROR)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        if self._nursery is not None:  # started by whoever serves us (e.g. serve_http)
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        started = False
        try:
            async with self.running():  # enters the server's lifespan (Server.open)
                await send({"type": "lifespan.startup.complete"})
                started = True
                await receive()
        except Exception as exc:
            log.error("MCP app failed%s: %r", "" if started else " to start", exc, exc_info=exc)
            failed = "lifespan.shutdown.failed" if started else "lifespan.startup.failed"
            await send({"type": failed, "message": str(exc) or type(exc).__name__})
            return
        await send({"type": "lifespan.shutdown.complete"})

    async def _handle(self, exchange: _Exchange) -> None:
        if self.draining:
            await exchange.error(
                503,
                "Service unavailable: the server is shutting down",
                code=INTERNAL_ERROR,
                headers=[("retry-after", "1"), ("connection", "close")],
            )
            return
        host = exchange.headers.get("host", [])
        if len(host) != 1 or not self._host_allowed(host[0]):
            log.info("refused HTTP request with Host %r", host)
            await exchange.error(421, "Misdirected request: Host not allowed")
            return
        path = exchange.path.rstrip("/") or "/"
        if self.authenticate is not None and path in (METADATA_PATH, METADATA_PATH + self.path):
            await self._metadata(exchange)
            return
        if path != self.path:
            await exchange.respond(404, b"not found\n", content_type="text/plain")
            return
        origins = exchange.headers.get("origin", [])
        if len(origins) > 1 or (origins and not self._origin_allowed(origins[0])):
            log.info("refused HTTP request from origin %r", origins)
            await exchange.error(403, "Forbidden: Origin not allowed")
            return
        identity: str | None = None
        if self.authenticate is not None:
            token = bearer_token(exchange.headers.get("authorization", []))
            access: AccessToken | None = None
            try:
                access = await verify_token(self.authenticate, token) if token is not None else None
            except InsufficientScope as exc:
                await exchange.error(
                    403,
                    f"Forbidden: the token lacks a required scope ({' '.join(exc.required)})",
                    headers=[("www-authenticate", self._scope_challenge(exchange, exc.required))],
                )
                return
            except Exception as exc:
                log.error("authenticate() failed: %r", exc, exc_info=exc)
                await exchange.error(500, "Internal error: authentication failed", code=INTERNAL_ERROR)
                return
            if access is None:
                challenge = f"Bearer resource_metadata={_quoted(self._metadata_url(exchange))}"
                if self.required_scopes:
                    challenge += f", scope={_quoted(' '.join(self.required_scopes))}"
                if token is not None:
                    challenge += ', error="invalid_token"'
                await exchange.error(
                    401,
                    "Unauthorized: a valid bearer token is required",
                    headers=[("www-authenticate", challenge)],
                )
                return
            identity = access.identity
            exchange.access = access
        if self.runtime is None or self._nursery is None:
            await exchange.error(503, "Service unavailable: the MCP app is not running", code=INTERNAL_ERROR)
            return
        if exchange.method not in ("POST", "GET", "DELETE"):
            await exchange.error(405, "Method not allowed", headers=[("allow", "GET, POST, DELETE")])
            return
        body = await exchange.read_body(self.max_body_size)
        if body is None:
            await exchange.error(413, f"Request body larger than {self.max_body_size} bytes")
            return
        if exchange.disconnected:
            return
        if exchange.method == "POST":
            self._working += 1
            try:
                await self._post(exchange, body, identity)
            finally:
                self._working -= 1
                if not self._working and self._quiet is not None:
                    self._quiet.set()
            return
        version = exchange.header(HEADER_PROTOCOL_VERSION)
        if version in MODERN_VERSIONS:
            await exchange.error(
                405, f"Method not allowed in {version}: POST only", headers=[("allow", "POST")]
            )
        elif exchange.method == "GET":
            await self._get(exchange, identity)
        else:
            await self._delete(exchange, identity)

    # -- well-known metadata ------------------------------------------------------------------
    def _resource(self, exchange: _Exchange) -> str:
        if self.resource_url is not None:
            return self.resource_url
        return f"{exchange.scheme}://{exchange.header('host')}{self.path}"

    def _metadata_url(self, exchange: _Exchange) -> str:
        resource = self._resource(exchange)
        scheme, _, rest = resource.partition("://")
        authority, slash, path = rest.partition("/")
        suffix = ("/" + path.rstrip("/")) if slash and path.strip("/") else ""
        return f"{scheme}://{authority}{METADATA_PATH}{suffix}"

    def _scopes_in_use(self) -> list[str]:
        """The verifier's required scopes, then the tools' (each once, in order)."""
        tools = self.runtime.server.tools.values() if self.runtime is not None else ()
        return list(dict.fromkeys((*self.required_scopes, *(s for tool in tools for s in tool.scopes))))

    def _scope_challenge(self, exchange: _Exchange, scopes: Iterable[str]) -> str:
        """``WWW-Authenticate`` of a 403 for a token that lacks ``scopes`` (RFC 6750 §3.1)."""
        return (
            f'Bearer error="insufficient_scope", scope={_quoted(" ".join(scopes))}, '
            f"resource_metadata={_quoted(self._metadata_url(exchange))}"
        )

    def _tool_scopes(self, request: jsonrpc.Request) -> tuple[str, ...]:
        """The scopes the tool a ``tools/call`` names requires (none for an unknown tool: that
        is for the session to answer, -32602)."""
        name = (request.params or {}).get("name")
        entry = (
            self.runtime.server.tools.get(name)
            if self.runtime is not None and isinstance(name, str)
            else None
        )
        return entry.scopes if entry is not None else ()

    async def _refuse_tool(self, exchange: _Exchange, request: jsonrpc.Request) -> bool:
        """With a verifier: answer 403 ``insufficient_scope`` (and True) for a ``tools/call``
        — plain or task-augmented, either era — of a tool whose ``scopes`` the token lacks,
        before anything runs. The challenge names the server's required scopes and the tool's,
        so that a client asking its authorization server for exactly those loses nothing."""
        if self.authenticate is None or request.method != "tools/call":
            return False
        needed = self._tool_scopes(request)
        granted = exchange.access.scopes if exchange.access is not None else frozenset()
        lacking = missing_scopes(needed, granted)
        if not lacking:
            return False
        name = (request.params or {}).get("name")
        challenge = self._scope_challenge(exchange, dict.fromkeys((*self.required_scopes, *needed)))
        await exchange.error(
            403,
            f"Forbidden: the tool {name!r} needs the scopes: {' '.join(lacking)}",
            code=INSUFFICIENT_SCOPE_CODE,
            id=request.id,
            data={"error": "insufficient_scope", "scope": " ".join(needed)},
            headers=[("www-authenticate", challenge)],
        )
        return True

    async def _metadata(self, exchange: _Exchange) -> None:
        if exchange.method != "GET":
            await exchange.error(405, "Method not allowed", headers=[("allow", "GET")])
            return
        document = {
            "resource": self._resource(exchange),
            "authorization_servers": self.authorization_servers,
            "bearer_methods_supported": ["header"],
            "scopes_supported": self.scopes_supported or self._scopes_in_use(),
        }
        await exchange.respond(200, json.dumps(document).encode(), content_type=JSON)

    # -- POST -------------------------------------------------------------------------------
    async def _post(self, exchange: _Exchange, body: bytes, identity: str | None) -> None:
        if not _accepts_post(tuple(exchange.headers.get("accept", ()))):
            await exchange.error(
                406, f"Not acceptable: the Accept header must list {JSON} and {SSE}", id=_id_of(body)
            )
            return
        content_type = (exchange.header("content-type") or "").split(";", 1)[0].strip().lower()
        if content_type != JSON:
            await exchange.error(415, f"Unsupported media type: send {JSON}", id=_id_of(body))
            return
        try:
            message = jsonrpc.parse(body)
        except jsonrpc.InvalidMessage as exc:
            error = exc.response.error
            await exchange.error(400, error.message, code=error.code, id=exc.response.id)
            return
        if isinstance(message, jsonrpc.Request) and await self._refuse_tool(exchange, message):
            return
        version = exchange.header(HEADER_PROTOCOL_VERSION)
        params = message.params if isinstance(message, jsonrpc.Request | jsonrpc.Notification) else None
        if version in MODERN_VERSIONS or is_modern(params):
            await self._modern_post(exchange, message, identity)
        else:
            await self._handshake_post(exchange, message, identity)

    # -- the modern era ---------------------------------------------------------------------
    def _header_error(self, exchange: _Exchange, request: jsonrpc.Request) -> ErrorValue | None:
        params = request.params or {}
        meta = params.get("_meta")
        body_version = meta.get(PROTOCOL_VERSION_KEY) if isinstance(meta, dict) else None
        if not isinstance(body_version, str):
            return ErrorValue(INVALID_PARAMS, f"Invalid params: missing _meta['{PROTOCOL_VERSION_KEY}']")

        headers = exchange.headers
        version = _one_header(headers, HEADER_PROTOCOL_VERSION)
        if version is None:
            return ErrorValue(HEADER_MISMATCH, "Header mismatch: missing MCP-Protocol-Version header")
        if version != body_version:
            return ErrorValue(
                HEADER_MISMATCH,
                f"Header mismatch: MCP-Protocol-Version {version!r} but _meta says {body_version!r}",
            )
        method = _one_header(headers, HEADER_METHOD)
        if method is None:
            return ErrorValue(HEADER_MISMATCH, "Header mismatch: missing Mcp-Method header")
        if method != request.method:
            return ErrorValue(
                HEADER_MISMATCH, f"Header mismatch: Mcp-Method {method!r} but the body is {request.method!r}"
            )
        name = expected_name(request.method, params)
        if name is not None:
            header = _one_header(headers, HEADER_NAME)
            if header is None:
                return ErrorValue(HEADER_MISMATCH, "Header mismatch: missing Mcp-Name header")
            decoded = decode_header_value(header) if header is not False else None
            if decoded is None:
                return ErrorValue(HEADER_MISMATCH, "Header mismatch: malformed Mcp-Name header")
            if decoded != name:
                return ErrorValue(
                    HEADER_MISMATCH, f"Header mismatch: Mcp-Name {decoded!r} but the body names {name!r}"
                )
        if request.method == "tools/call" and self.runtime is not None:
            return self._param_header_error(exchange, params, functools.partial(_one_header, headers))
        return None

    def _param_header_error(
        self, exchange: _Exchange, params: dict[str, Any], one: Callable[[str], str | Literal[False] | None]
    ) -> ErrorValue | None:
        """SEP-2243: a tool argument whose schema says ``x-mcp-header: NAME`` travels in the
        ``Mcp-Param-NAME`` header too; when the argument is present the header must be there,
        well formed (base64 form included) and equal to the argument's value."""
        assert self.runtime is not None
        name = params.get("name")
        entry = self.runtime.server.tools.get(name) if isinstance(name, str) else None
        properties = entry.tool.input_schema.get("properties") if entry is not None else None
        if not isinstance(properties, dict):
            return None
        arguments = params.get("arguments") or {}
        for argument, schema in properties.items():
            header_name = schema.get("x-mcp-header") if isinstance(schema, dict) else None
            if (
                not isinstance(header_name, str)
                or not isinstance(arguments, dict)
                or argument not in arguments
            ):
                continue
            if arguments[argument] is None:
                continue  # a null argument travels without its header (the spec: a client omits it)
            header = one(f"mcp-param-{header_name.lower()}")
            if header is None:
                return ErrorValue(HEADER_MISMATCH, f"Header mismatch: missing Mcp-Param-{header_name} header")
            decoded = decode_header_value(header) if header is not False else None
            if decoded is None:
                return ErrorValue(
                    HEADER_MISMATCH, f"Header mismatch: malformed Mcp-Param-{header_name} header"
                )
            value = arguments[argument]
            expected = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
            if decoded != expected:
                return ErrorValue(
                    HEADER_MISMATCH,
                    f"Header mismatch: Mcp-Param-{header_name} {decoded!r} but the argument is {expected!r}",
                )
        return None

    async def _modern_post(self, exchange: _Exchange, message: jsonrpc.Message, identity: str | None) -> None:
        """A 2026-07-28 POST: served by the runtime's ``serve_one`` in this request's own Trio
        task, without a session actor. The answer goes out as ``application/json`` unless a
        notification (progress, a log message, a listen stream) comes first: then as SSE."""
        if isinstance(message, jsonrpc.Notification):
            await exchange.respond(202)  # nothing to act on: cancelling is closing the response
            return
        if not isinstance(message, jsonrpc.Request):
            await exchange.error(400, "Invalid request: clients do not POST responses in this era")
            return
        error = self._header_error(exchange, message)
        if error is not None:
            await exchange.error(400, error.message, code=error.code, id=message.id, data=error.data)
            return
        owner = identity_owner(identity) if identity is not None else ANONYMOUS_OWNER
        peer = exchange.peer if identity is None else None
        client = f"address:{peer}" if peer is not None else None  # anonymous: counted per address
        runtime = self.runtime
        assert runtime is not None
        caller = exchange.caller(identity)
        answer = _ModernAnswer(exchange, self.keepalive_interval, self._nursery)
        served: list[tuple[bytes, int | None]] = []
        scope = trio.CancelScope()  # serve_one's, which a disconnect cancels

        async def serve() -> None:
            served.append(
                await runtime.stateless.serve_one(
                    message, owner=owner, client=client, send=answer.send, caller=caller, cancel_scope=scope
                )
            )

        try:
            if await self._watches.watched(exchange, serve, scope=scope):
                await answer.finish(*served[0])
            else:
                log.debug("modern request %r cancelled: the client closed its response", message.id)
        finally:
            answer.close()

    # -- the handshake era ------------------------------------------------------------------
    def _version_error(self, exchange: _Exchange) -> str | None:
        version = exchange.header(HEADER_PROTOCOL_VERSION)
        if version is not None and version.strip() not in HANDSHAKE_VERSIONS:
            return (
                f"Unsupported MCP-Protocol-Version: {version!r} (supported: {', '.join(HANDSHAKE_VERSIONS)})"
            )
        return None

    async def _session_of(
        self, exchange: _Exchange, identity: str | None, request_id: jsonrpc.RequestId | None = None
    ) -> _Session | None:
        """The request's session, or None after answering 400 (no header) / 404 (unknown)."""
        values = exchange.headers.get(HEADER_SESSION_ID, [])
        if not values:
            await exchange.error(
                400, "Bad request: missing Mcp-Session-Id header (send initialize first)", id=request_id
            )
            return None
        session = self.sessions.get(values[0].strip()) if len(values) == 1 else None
        if session is None or session.closed or session.identity != identity:
            await exchange.error(404, "Session not found", id=request_id)
            return None
        return session

    async def _handshake_post(
        self, exchange: _Exchange, message: jsonrpc.Message, identity: str | None
    ) -> None:
        request_id = message.id if isinstance(message, jsonrpc.Request) else None
        problem = self._version_error(exchange)
        if problem is not None:
            await exchange.error(400, problem, id=request_id)
            return
        creating = (
            isinstance(message, jsonrpc.Request)
            and message.method == "initialize"
            and not exchange.headers.get(HEADER_SESSION_ID)
        )
        if creating:
            session = self._new_session(identity, exchange.peer, native=isinstance(exchange, _NativeExchange))
            if session is None:
                await exchange.error(
                    503,
                    "Service unavailable: too many sessions",
                    id=request_id,
                    headers=[("retry-after", "5")],
                )
                return
        else:
            found = await self._session_of(exchange, identity, request_id)
            if found is None:
                return
            session = found
        session.use()
        try:
            if not isinstance(message, jsonrpc.Request):
                if await session.feed(message, exchange.caller(identity)):
                    if isinstance(message, jsonrpc.Notification):
                        if message.method == CANCELLED:
                            session.withdraw((message.params or {}).get("requestId"))
                        elif message.method == INITIALIZED:
                            session.initialized = True
                    await exchange.respond(202)
                else:
                    await exchange.error(404, "Session not found")
                return
            if message.method in STREAMING_METHODS:
                await self._post_stream(exchange, session, message)
            else:
                await self._post_json(exchange, session, message, creating)
        finally:
            session.done()

    def _new_session(
        self, identity: str | None, peer: str | None, *, native: bool = False
    ) -> _Session | None:
        """A 2025-11-25 session. Without an identity it owns its tasks, and they count under
        the peer's address for the per-client limits (every session is an owner of its own).

        None when there is no room: at :attr:`max_sessions_per_client` the client's own unused
        sessions make room (one that never finished its handshake first, then the one unused
        the longest); at :attr:`max_sessions` anyone's unused session does, if it has been
        unused for :data:`PRESSURE_IDLE` seconds or never finished its handshake."""
        client = f"identity:{identity}" if identity is not None else f"address:{peer or '?'}"
        if self._per_client.get(client, 0) >= self.max_sessions_per_client:
            victim = self._evictable(client, 0.0)
            if victim is None:
                return None
            log.info("HTTP session %s... ended: its client opened too many", victim.id[:6])
            self._end(victim)
        if len(self.sessions) >= self.max_sessions:
            victim = self._evictable(None, PRESSURE_IDLE)
            if victim is None:
                return None
            log.info("HTTP session %s... ended to make room (unused, or handshake unfinished)", victim.id[:6])
            self._end(victim)
        assert self._nursery is not None
        session = _Session(
            secrets.token_urlsafe(32),
            identity,
            self.event_buffer,
            client=client,
            buffer_bytes=self.event_buffer_bytes,
            budget=self.replay,
            relieve=self._relieve_replay,
            # Served by our own server, a connection's end (a client that stops reading)
            # cancels its POST's task: the session's calls, which run there, are shielded from
            # it. (An ASGI server does not cancel a request for its client's disconnect, and
            # cancels what is left at its shutdown, before the app's: shielded, a call would
            # hold that up.)
            shields_calls=native,
        )
        self.sessions[session.id] = session
        self._per_client[client] = self._per_client.get(client, 0) + 1
        owner = identity_owner(identity) if identity is not None else None
        count_under = client if owner is None and peer is not None else None
        self._nursery.start_soon(self._run_session, session, owner, count_under)
        return session

    def _evictable(self, client: str | None, idle: float) -> _Session | None:
        """The session to end for room: of ``client`` (None: anyone's), with no HTTP request in
        progress; one whose handshake never finished first, else the one unused the longest
        if that is at least ``idle`` seconds."""
        now = trio.current_time()
        unfinished: _Session | None = None
        oldest: _Session | None = None
        for session in self.sessions.values():
            if session.active or (client is not None and session.client != client):
                continue
            if not session.initialized:
                if unfinished is None or session.created < unfinished.created:
                    unfinished = session
            elif oldest is None or session.last_seen < oldest.last_seen:
                oldest = session
        if unfinished is not None:
            return unfinished
        if oldest is not None and now - oldest.last_seen >= idle:
            return oldest
        return None

    async def _post_json(
        self, exchange: _Exchange, session: _Session, request: jsonrpc.Request, creating: bool
    ) -> None:
        waiter = session.wait_json(request.id)
        if not await session.feed(request, exchange.caller(session.identity)):
            await exchange.error(404, "Session not found")
            return
        if not waiter.done and not await self._watches.watched(exchange, waiter.wait):
            session.abandon(request.id, waiter)
            if creating:
                self._end(session)
            return
        if waiter.data is None:
            if session.closed:
                await exchange.error(404, "Session not found: it ended", id=request.id)
            else:
                await exchange.respond(204)  # the client cancelled it: there is no response
            return
        headers: list[tuple[str, str]] = []
        if creating:
            if _classify(waiter.data) == ("response", None):
                headers.append((HEADER_SESSION_ID, session.id))
            else:
                self._end(session)
        await exchange.respond(200, waiter.data, content_type=JSON, headers=headers)

    async def _post_stream(self, exchange: _Exchange, session: _Session, request: jsonrpc.Request) -> None:
        """A ``tools/call`` or ``tasks/result``: plain JSON if its response is the first thing
        it produces within :data:`WATCH_AFTER` seconds, else an SSE stream (primed, resumable)
        of what it sends and then the response.

        A plain call is served in this task (the session runs it here: :meth:`_Session.feed`
        returns once it is answered); what it sends before its answer, or its taking longer
        than :data:`WATCH_AFTER`, starts the SSE stream's writer in a task of the app's
        (:class:`_PostAnswer`), which this task then waits for."""
        meta = (request.params or {}).get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        stream = session.open_post_stream(request.id, token)
        stream.undecided = True
        start = session.seq
        post = _PostAnswer(self, exchange, session, stream, start)
        stream.on_wake = post.changed
        stream.on_call = post.arm  # a call run here: its grace counts from its start
        try:
            fed = await session.feed(request, exchange.caller(session.identity))
            if fed and post.writing is None and post.undecided():
                post.arm()  # not answered at once (a tasks/result that waits, a call elsewhere)
                await post.decided()
            if post.writing is not None:
                await post.writing.wait()  # the writer ends the response
                return
        finally:
            stream.on_wake = stream.on_call = None
            self._watches.forget(exchange)
            post.stop()
        stream.undecided = False
        if not fed:
            await exchange.error(404, "Session not found")
            return
        answer, stream.answer = stream.answer, None
        if answer is not None:
            session.forget_if_done(stream)
            await exchange.respond(200, answer, content_type=JSON)
            return
        await self._serve_stream(exchange, session, stream, start)  # over with no answer

    async def _serve_stream(
        self,
        exchange: _Exchange,
        session: _Session,
        stream: _Stream,
        after: int,
        scope: trio.CancelScope | None = None,
    ) -> None:
        """Write ``stream``'s events after ``after`` as SSE until it is finished (a POST
        stream) or the session ends or the client goes. ``scope``: the stream's consumer
        already (see :meth:`_PostAnswer.go_sse`), else a new one takes over."""
        if scope is None:
            scope = stream.take_over()
        try:
            with scope:
                if not await exchange.start_sse():
                    return
                priming = sse_event("", id=format_event_id(stream.key, after), retry=self.retry_ms)
                pending = [priming]
                written: list[_Event] = []
                cursor = after

                async def drain() -> trio.Event | None:
                    """Write what is ready (pending bytes, then every new event) in one body
                    part, the last one when the stream is over. The event to wait on for more,
                    or None when this response is over (or the client went)."""
                    nonlocal cursor
                    while True:
                        changed = stream.changed
                        for event in stream.after(cursor):
                            pending.append(sse_event(event.data, id=format_event_id(stream.key, event.seq)))
                            cursor = event.seq
                            if event.seq > stream.sent_upto:
                                written.append(event)
                        over = (stream.finished and stream.key != GET_STREAM) or session.closed
                        if not pending:
                            return None if over else changed
                        data = b"".join(pending)
                        pending.clear()
                        if not await (exchange.end(data) if over else exchange.write(data)):
                            return None
                        stream.sent_upto = max(stream.sent_upto, cursor)
                        if written:
                            session.delivered(stream, written)
                            written.clear()
                        if over:
                            return None

                async def pump(changed: trio.Event) -> None:
                    while True:
                        with trio.move_on_after(self.keepalive_interval) as quiet:
                            await changed.wait()
                        if quiet.cancelled_caught:
                            pending.append(sse_comment())
                        following = await drain()
                        if following is None:
                            return
                        changed = following

                changed = await drain()  # often the whole answer is ready: no watcher needed
                if changed is not None:
                    await self._watches.watched(exchange, functools.partial(pump, changed), at_once=True)
        finally:
            if stream.consumer is scope:
                stream.consumer = None
                session.forget_if_done(stream)

    # -- GET and DELETE -----------------------------------------------------------------------
    async def _get(self, exchange: _Exchange, identity: str | None) -> None:
        if not accepts(exchange.headers.get("accept", []), SSE):
            await exchange.error(406, f"Not acceptable: the Accept header must list {SSE}")
            return
        problem = self._version_error(exchange)
        if problem is not None:
            await exchange.error(400, problem)
            return
        session = await self._session_of(exchange, identity)
        if session is None:
            return
        last = exchange.header(HEADER_LAST_EVENT_ID)
        if last is not None:
            parsed = parse_event_id(last)
            stream = session.streams.get(parsed[0]) if parsed is not None else None
            if parsed is None or stream is None:
                await exchange.error(400, f"Bad request: unknown or expired Last-Event-ID {last!r}")
                return
            after = parsed[1]
        else:
            stream = session.get_stream
            if stream.consumer is not None:
                await exchange.error(409, "Conflict: this session's GET stream is already open")
                return
            after = stream.sent_upto
        session.use()
        try:
            await self._serve_stream(exchange, session, stream, after)
        finally:
            session.done()

    async def _delete(self, exchange: _Exchange, identity: str | None) -> None:
        problem = self._version_error(exchange)
        if problem is not None:
            await exchange.error(400, problem)
            return
        session = await self._session_of(exchange, identity)
        if session is None:
            return
        self._end(session)
        with trio.move_on_after(5):
            await session.ended.wait()
        await exchange.respond(200)


def _one_header(headers: dict[str, list[str]], name: str) -> str | Literal[False] | None:
    """The one value of header ``name``, stripped; None if absent, False if repeated."""
    values = headers.get(name)
    if values is None:
        return None
    if len(values) == 1:
        return values[0].strip()
    return False if values else None


def _id_of(body: bytes) -> jsonrpc.RequestId | None:
    """The id of the request in ``body`` if it has a valid one (for an error answered before
    the body is parsed as JSON-RPC), else None."""
    try:
        message = _json.loads(body)
    except ValueError:
        return None
    found = message.get("id") if isinstance(message, dict) else None
    return found if isinstance(found, int | str) and not isinstance(found, bool) else None


def _classify(data: bytes) -> tuple[str, int | None]:
    """("response", error code or None) / ("request", None) / ("notification", None)."""
    try:
        message = _json.loads(data)
    except ValueError:
        return "notification", None
    if not isinstance(message, dict):
        return "notification", None
    if "method" in message:
        return ("request" if "id" in message else "notification"), None
    error = message.get("error")
    code = error.get("code") if isinstance(error, dict) else None
    return "response", code if isinstance(code, int) else None


def mcp_asgi_app(
    server_or_runtime: Server | ServerRuntime,
    *,
    path: str = "/mcp",
    allowed_origins: OriginPolicy = DEFAULT_ALLOWED_ORIGINS,
    allowed_hosts: Iterable[str] | Callable[[str], bool] | None = DEFAULT_ALLOWED_HOSTS,
    authenticate: Authenticator | None = None,
    authorization_servers: Iterable[str] = (),
    scopes_supported: Iterable[str] = (),
    resource_url: str | None = None,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    event_buffer: int = DEFAULT_EVENT_BUFFER,
    retry_ms: int = DEFAULT_RETRY_MS,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL,
    event_buffer_bytes: int = DEFAULT_EVENT_BUFFER_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
) -> McpHttpApp:
    """The MCP endpoint at ``path`` as an ASGI application, serving both protocol eras.

    ``server_or_runtime``: a :class:`~trio_mcp.Server` (a runtime is opened while the app runs)
    or an open :class:`~trio_mcp.ServerRuntime` (to share tasks with other transports).

    Security: ``allowed_hosts`` (``Host`` allow-list against DNS rebinding, else **421**;
    default the loopback names, any port; None turns the check off), ``allowed_origins``
    (browser ``Origin`` allow-list, else **403**; requests without ``Origin`` pass),
    ``authenticate`` (bearer token → identity, :class:`~trio_mcp.transports.security.AccessToken`
    or None, e.g. :func:`~trio_mcp.transports.security.jwt_verifier`; missing or refused →
    **401** with ``WWW-Authenticate: Bearer resource_metadata="…"``; a valid token without a
    required scope (the verifier raises ``InsufficientScope``) → **403** with
    ``error="insufficient_scope", scope="…"``; it also turns on the RFC 9728
    document at ``/.well-known/oauth-protected-resource[/<path>]``, listing
    ``authorization_servers`` and ``scopes_supported``, default the verifier's
    ``required_scopes`` and the tools' ``scopes``; ``resource_url`` is the public URL of
    the endpoint, default taken from the request's ``Host``), ``max_body_size`` (else **413**).
    With ``authenticate``, a ``tools/call`` (plain or as a task, either era) of a tool
    registered with ``scopes=[...]`` that the token lacks is answered **403** with
    ``WWW-Authenticate: Bearer error="insufficient_scope", scope="…", resource_metadata="…"``
    (the scopes the server requires and the tool's) before anything runs; without
    ``authenticate`` tool scopes are not enforced. Tools see who calls as ``ctx.identity``,
    ``ctx.scopes`` and ``ctx.headers`` (the request's, ``Authorization`` redacted).

    Limits: ``event_buffer`` SSE events and ``event_buffer_bytes`` bytes kept per session for
    replay, ``max_event_bytes`` by all sessions together (events already written to the client
    are dropped first), ``retry_ms`` sent to clients, ``idle_timeout`` seconds before an unused
    session ends, ``handshake_timeout`` seconds from ``initialize`` to
    ``notifications/initialized``, ``max_sessions`` at once and ``max_sessions_per_client`` of
    one client (its identity, else its address; past either, unused sessions make room, else
    **503**), ``keepalive_interval`` seconds between SSE comments on quiet streams.
    """
    return McpHttpApp(
        server_or_runtime,
        path=path,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
        authenticate=authenticate,
        authorization_servers=authorization_servers,
        scopes_supported=scopes_supported,
        resource_url=resource_url,
        max_body_size=max_body_size,
        event_buffer=event_buffer,
        retry_ms=retry_ms,
        idle_timeout=idle_timeout,
        max_sessions=max_sessions,
        keepalive_interval=keepalive_interval,
        event_buffer_bytes=event_buffer_bytes,
        max_event_bytes=max_event_bytes,
        max_sessions_per_client=max_sessions_per_client,
        handshake_timeout=handshake_timeout,
    )


_AUTO: Any = object()


def _tls_context(cert: str, key: str | None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    context.set_alpn_protocols(["http/1.1"])
    return context


async def serve_http(
    server_or_runtime: Server | ServerRuntime,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    path: str = "/mcp",
    allowed_origins: OriginPolicy = DEFAULT_ALLOWED_ORIGINS,
    allowed_hosts: Iterable[str] | Callable[[str], bool] | None = _AUTO,
    authenticate: Authenticator | None = None,
    authorization_servers: Iterable[str] = (),
    scopes_supported: Iterable[str] = (),
    resource_url: str | None = None,
    max_body_size: int = DEFAULT_MAX_BODY_SIZE,
    event_buffer: int = DEFAULT_EVENT_BUFFER,
    retry_ms: int = DEFAULT_RETRY_MS,
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    keepalive_interval: float = DEFAULT_KEEPALIVE_INTERVAL,
    event_buffer_bytes: int = DEFAULT_EVENT_BUFFER_BYTES,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    max_sessions_per_client: int = DEFAULT_MAX_SESSIONS_PER_CLIENT,
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    grace: float = DEFAULT_GRACE,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    header_timeout: float = DEFAULT_HEADER_TIMEOUT,
    body_timeout: float = DEFAULT_BODY_TIMEOUT,
    connection_idle_timeout: float = DEFAULT_KEEPALIVE_TIMEOUT,
    max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    backlog: int = 1024,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve MCP over Streamable HTTP at ``http://host:port/path`` until cancelled, on our own
    HTTP/1.1 server (:class:`~trio_mcp.transports.h11_server.H11Server`, h11 on Trio).
    ``port = await nursery.start(serve_http, server)`` reports the bound port (``port=0``, the
    default, picks a free one).

    Arguments as for :func:`mcp_asgi_app`, except ``allowed_hosts``, whose default depends on
    ``host``: bound to a loopback address, the loopback names (any port); otherwise no Host
    check (list your public names). ``tls_cert``/``tls_key`` (PEM files; ``certfile``/``keyfile``
    are older names for them) serve HTTPS.

    The connection limits are the server's (see :mod:`trio_mcp.transports.h11_server`):
    ``max_connections`` at once and ``max_connections_per_address`` from one address (behind a
    reverse proxy, raise it to ``max_connections``), ``header_timeout`` and ``body_timeout``
    (else 408), ``connection_idle_timeout`` between keep-alive requests, ``max_header_size``
    (else 431); ``max_body_size`` is enforced by both (413). ``backlog``: the listening
    socket's queue of connections not yet accepted.

    **Stopping.** When cancelled it stops gracefully, shielded from the cancellation for at
    most ``grace`` + a few seconds: it stops accepting, answers new requests on open
    connections 503 with ``Retry-After``, lets requests in progress finish for ``grace``
    seconds, then answers those still waiting -32603 "server shutting down", ends the SSE
    streams cleanly and closes every connection (:meth:`McpHttpApp.shutdown`).
    """
    if allowed_hosts is _AUTO:
        allowed_hosts = DEFAULT_ALLOWED_HOSTS if is_loopback(host) else None
    if grace < 0:
        raise ValueError("grace must be >= 0")
    cert = tls_cert if tls_cert is not None else certfile
    key = tls_key if tls_key is not None else keyfile
    app = McpHttpApp(
        server_or_runtime,
        path=path,
        allowed_origins=allowed_origins,
        allowed_hosts=allowed_hosts,
        authenticate=authenticate,
        authorization_servers=authorization_servers,
        scopes_supported=scopes_supported,
        resource_url=resource_url,
        max_body_size=max_body_size,
        event_buffer=event_buffer,
        retry_ms=retry_ms,
        idle_timeout=idle_timeout,
        max_sessions=max_sessions,
        keepalive_interval=keepalive_interval,
        event_buffer_bytes=event_buffer_bytes,
        max_event_bytes=max_event_bytes,
        max_sessions_per_client=max_sessions_per_client,
        handshake_timeout=handshake_timeout,
    )
    http = H11Server(
        app,
        ssl_context=_tls_context(cert, key) if cert is not None else None,
        max_connections=max_connections,
        max_connections_per_address=max_connections_per_address,
        header_timeout=header_timeout,
        body_timeout=body_timeout,
        keepalive_timeout=connection_idle_timeout,
        max_header_size=max_header_size,
        max_body_size=max_body_size,
    )
    listeners = await trio.open_tcp_listeners(port, host=host, backlog=backlog)
    bound = listener_addresses(listeners)[0][1]
    stopping = trio.Event()

    async def run(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # Shielded: the caller's cancellation only sets ``stopping``, and the drain below runs
        # within its own deadline.
        with trio.CancelScope(shield=True) as shielded:
            async with app.running(), trio.open_nursery() as nursery:
                await nursery.start(http.serve, listeners)
                task_status.started()
                await stopping.wait()
                shielded.deadline = trio.current_time() + grace + SHUTDOWN_WRITE_GRACE + 3
                log.info("HTTP server stopping: %d request(s) in progress", http.in_progress)
                http.drain()
                drained_by = trio.current_time() + grace
                await app.shutdown(grace)
                # Keep-alive connections stay open a little longer (within the grace, at most
                # DRAIN_LINGER, and only while clients still send on them): a request a client
                # sends on one meanwhile is answered 503 + Retry-After + Connection: close,
                # which it retries elsewhere; closed at once, the request would cross the close
                # and fail without an answer.
                lingering = trio.current_time()
                with trio.move_on_at(min(drained_by, lingering + DRAIN_LINGER)):
                    while http.connections and (  # noqa: ASYNC110 - bounded, once, at the end
                        trio.current_time() - max(lingering, http.refused_at) < LINGER_QUIET
                    ):
                        await trio.sleep(0.05)
                http.close()

    async with trio.open_nursery() as nursery:
        await nursery.start(run)
        log.info("serving MCP over HTTP%s on %s (path %s)", "S" if cert else "", _bind(host, bound), path)
        task_status.started(bound)
        try:
            await trio.sleep_forever()
        finally:
            stopping.set()


DRAIN_LINGER = 2.0
"""Seconds at most a stopping HTTP server keeps idle keep-alive connections open once its
requests are answered (within its grace), so that clients using them get a 503 to retry
rather than a connection closed under their request; it closes them sooner once no request
has come for :data:`LINGER_QUIET` seconds."""
LINGER_QUIET = 0.25


def _bind(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


register_listener("http", serve_http, "http://{host}:{port}/mcp")
