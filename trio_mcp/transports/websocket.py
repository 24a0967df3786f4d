"""MCP over WebSocket, on trio-websocket: a :class:`WebSocketTransport`, a server and a client.

WebSocket is not one of the transports the MCP specification defines; this one follows the
convention of the reference SDKs: the subprotocol ``mcp``, and one JSON-RPC message per **text**
frame (UTF-8 JSON, no other framing).

Transport (:class:`WebSocketTransport`)
    * A **binary** frame is a protocol violation: the transport closes the connection with
      code **1003** (unsupported data) and ``receive()`` ends with :class:`trio.EndOfChannel`.
    * A message larger than ``max_message_size`` (default :data:`DEFAULT_MAX_MESSAGE_SIZE`,
      **4 MiB**, counted in UTF-8 bytes) closes the connection with code **1009** (message too
      big) and ``receive()`` ends. Unlike the stdio transport the message is not skipped: a
      WebSocket peer is told why it is being disconnected instead. The limit is also given to
      trio-websocket, which stops buffering a message as soon as it passes the limit (counted
      in characters there), so an oversized message costs at most a few times the limit in
      memory.
    * A clean close by the peer (or a dropped TCP connection) makes ``receive()`` raise
      :class:`trio.EndOfChannel` once every message that arrived before it was returned;
      ``send()`` on a closed connection raises :class:`trio.BrokenResourceError` (after our own
      :meth:`~WebSocketTransport.aclose`: :class:`trio.ClosedResourceError`).
    * ``aclose()`` performs the closing handshake (code 1000), waiting at most
      ``close_timeout`` seconds for the peer, then closes the TCP connection in any case.
      :meth:`~WebSocketTransport.abort` drops the TCP connection without a handshake.

Server (:func:`serve_websocket`)
    Security defaults:

    * It binds **127.0.0.1** unless told otherwise, and speaks plain ``ws://`` unless given an
      ``ssl_context`` (then ``wss://``). Expose it beyond the local machine only over TLS and
      with ``authenticate`` set.
    * **Origin** is checked on every handshake (browsers always send it; that is what stops a
      web page the user visits from driving a local server, "DNS rebinding"/CSRF). A request
      without ``Origin`` is a non-browser client and is allowed. The default allow-list,
      :data:`DEFAULT_ALLOWED_ORIGINS`, is ``http``/``https`` on ``localhost``, ``127.0.0.1`` and
      ``[::1]``, any port; anything else (including ``Origin: null``) is refused with
      **HTTP 403**.
    * **Subprotocol**: a client offering ``mcp`` gets ``mcp``; a client offering no
      subprotocol at all is accepted (none is selected); a client offering only others is
      refused with **HTTP 400**.
    * **Authentication** (optional): with ``authenticate`` given, the client must send
      ``Authorization: Bearer <token>``; ``authenticate(token)`` (sync or async) returns the
      identity (a non-empty ``str``) or ``None``. A missing token or a ``None`` identity is
      refused with **HTTP 401** (``WWW-Authenticate: Bearer``). Without ``authenticate``, an
      ``Authorization`` header is ignored. (Browsers cannot set headers on a WebSocket; browser
      clients need a proxy that authenticates them.)
    * The whole opening handshake, including ``authenticate``, must finish within
      ``handshake_timeout`` seconds (default 10), or the TCP connection is dropped.

    Ownership of tasks (see :meth:`~trio_mcp.actors.server.ServerRuntime.serve`):

    * **With an identity** (``authenticate`` set), the connection is served with
      ``owner=("identity", identity)``: its tasks belong to the identity, not the connection.
      They keep running when the connection closes or drops, and any later connection
      authenticated as the same identity can ``tasks/get``, ``tasks/result``, ``tasks/list``
      and ``tasks/cancel`` them. Another identity gets -32602 for them and never sees them
      listed.
    * **Without authentication**, tasks are owned by the connection: when it closes (cleanly
      or not) they are cancelled and removed, and no other connection can reach them.

    Keep-alive: every ``ping_interval`` seconds (default 20) the server sends a WebSocket ping;
    a peer that does not answer with a pong within ``ping_timeout`` seconds (default: the
    interval) is disconnected at once (TCP closed without a closing handshake) and its session
    ends exactly as if it had hung up.

    Concurrency and slow clients: every connection is its own session actor (its own reader,
    writer and keep-alive tasks) running in one nursery under the server, so nothing one client
    does, or fails to do, waits on another, and a connection that fails is logged and closed
    without touching the rest. Each session has a bounded outbound queue
    (:data:`~trio_mcp.actors.endpoint.DEFAULT_OUTBOUND_SIZE`, 1024 messages) in front of the
    socket. When a client stops reading, the TCP window and then that queue fill up, and:

    * **responses wait for room**, and the reader with them: it answers ``initialize``,
      ``ping`` and ``tools/list`` itself, and at most
      :data:`~trio_mcp.actors.session.MAX_WAITING_REQUESTS` (256) other requests per session are
      outstanding at once (task queries answered by the supervisor, ``tools/call`` and
      ``tasks/result`` running in their own Trio tasks); past that the reader stops reading
      that connection: backpressure, which reaches the client as TCP flow control.
    * **notifications** to that client (progress, task status, log messages) **are dropped**
      while the queue is full; MCP lets a peer miss notifications.
    * **other connections are unaffected**: they have their own queue, reader and writer.
    * a client that stops reading its socket cannot answer pings either (our ping may not even
      get past its full window), so the keep-alive disconnects it after at most
      ``ping_interval + ping_timeout`` seconds, ending its session (and its connection-owned
      tasks).

Client
    :func:`open_websocket_transport` yields a :class:`WebSocketTransport` on a ``ws://`` or
    ``wss://`` URL (it offers the subprotocol ``mcp`` and sends ``Authorization: Bearer`` when
    given a token); :func:`connect_websocket` runs an initialized :class:`~trio_mcp.Client` on
    it. A refused handshake raises :class:`trio_websocket.ConnectionRejected` (its
    ``status_code`` is the HTTP status); other connection failures raise
    :class:`trio_websocket.HandshakeError`.

>>> # async with trio.open_nursery() as nursery:
>>> #     port = await nursery.start(serve_websocket, server)
>>> #     async with connect_websocket(f"ws://127.0.0.1:{port}/") as client:
>>> #         print(await client.call_tool("echo", {"text": "hi"}))
"""

from __future__ import annotations

import inspect
import ipaddress
import logging
import math
import re
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, NoReturn
from urllib.parse import urlsplit

import trio
import trio_websocket
from trio_websocket import WebSocketConnection, WebSocketRequest

from .base import DEFAULT_MAX_MESSAGE_SIZE

if TYPE_CHECKING:
    from ..actors.client import Client
    from ..actors.server import Server, ServerRuntime

__all__ = [
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_UNSUPPORTED_DATA",
    "DEFAULT_ALLOWED_ORIGINS",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "SUBPROTOCOL",
    "Authenticator",
    "OriginPolicy",
    "Owner",
    "WebSocketTransport",
    "connect_websocket",
    "open_websocket_transport",
    "parse_host_port",
    "serve_websocket",
]

log = logging.getLogger("trio_mcp.websocket")

SUBPROTOCOL = "mcp"
"""The WebSocket subprotocol MCP uses."""

CLOSE_UNSUPPORTED_DATA = 1003
"""Close code sent when the peer sends a binary frame."""

CLOSE_MESSAGE_TOO_BIG = 1009
"""Close code sent when the peer sends a message over ``max_message_size``."""

DEFAULT_ALLOWED_ORIGINS: tuple[str, ...] = (
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
)
"""Origins a browser page may connect from by default: the local machine, any port.

Entry syntax (for ``allowed_origins``): ``scheme://host`` (that origin on the scheme's default
port), ``scheme://host:port`` (exactly that port), ``scheme://host:*`` (any port), the literal
``null``, or ``*`` (any origin at all: this turns the check off).
"""

DEFAULT_PING_INTERVAL = 20.0
"""Seconds between keep-alive pings."""

DEFAULT_HANDSHAKE_TIMEOUT = 10.0
"""Seconds a client has to complete the opening handshake."""

DEFAULT_CLOSE_TIMEOUT = 5.0
"""Seconds :meth:`WebSocketTransport.aclose` waits for the peer's half of the closing handshake."""

CONNECT_TIMEOUT = 10.0
"""Seconds :func:`open_websocket_transport` waits for the connection and handshake."""

_RECEIVE_BUFFER_SIZE = 65536
_TOKEN = re.compile(r"[\x21-\x7e]+")  # visible ASCII: what may go into an HTTP header unquoted

Authenticator = Callable[[str], Awaitable[str | None] | str | None]
"""Maps a bearer token to an identity, or to None to refuse it. May be sync or async."""

Owner = tuple[str, str] | None
"""What a connection's tasks are owned by: ``("identity", identity)``, or None for the connection."""

OriginPolicy = Iterable[str] | Callable[[str], bool]
"""An allow-list of origin patterns (see :data:`DEFAULT_ALLOWED_ORIGINS`) or a predicate."""


# ---------------------------------------------------------------------------- the transport


class WebSocketTransport:
    """A :class:`~trio_mcp.transports.base.Transport` on a :class:`trio_websocket.WebSocketConnection`.

    One JSON-RPC message per text frame. See the module docstring for the exact behaviour on
    binary frames (close 1003), oversized messages (close 1009) and closing. Any number of
    tasks may ``send`` concurrently (trio-websocket writes each frame whole, under a lock);
    one task at a time may ``receive``.
    """

    def __init__(
        self,
        connection: WebSocketConnection,
        *,
        max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
        close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
    ) -> None:
        if max_message_size < 1:
            raise ValueError("max_message_size must be at least 1")
        self.connection = connection
        """The underlying trio-websocket connection."""
        self.max_message_size = max_message_size
        """Largest message accepted, in UTF-8 bytes."""
        self.close_timeout = close_timeout
        self._closed = False
        self._send_broken = False

    @property
    def close_reason(self) -> trio_websocket.CloseReason | None:
        """Why the connection closed (code and reason), or None while it is open."""
        return self.connection.closed

    async def send(self, message: bytes) -> None:
        """Send one message as a text frame.

        Raises:
          trio.BrokenResourceError: the connection is closed or closing, or an earlier send was
            interrupted in the middle of a frame.
          trio.ClosedResourceError: this transport was closed.
          UnicodeDecodeError: ``message`` is not UTF-8 (nothing is sent).
        """
        text = message.decode("utf-8")
        if self._closed:
            raise trio.ClosedResourceError("transport was closed")
        if self._send_broken:
            raise trio.BrokenResourceError("an earlier send was interrupted in the middle of a frame")
        # Fail here, where it is known that nothing was written.
        await trio.lowlevel.checkpoint_if_cancelled()
        try:
            await self.connection.send_message(text)
        except trio_websocket.ConnectionClosed as exc:
            raise trio.BrokenResourceError(f"websocket closed: {exc.reason}") from exc
        except BaseException:
            # Cancelled (or failed) in the middle: part of a frame may be on the wire.
            self._send_broken = True
            raise

    async def receive(self) -> bytes:
        """The next message, as UTF-8 bytes.

        Raises:
          trio.EndOfChannel: the connection closed (by the peer, or by us after a binary or
            oversized message) and every message received before that has been returned.
          trio.ClosedResourceError: this transport was closed.
        """
        if self._closed:
            raise trio.ClosedResourceError("transport was closed")
        try:
            message = await self.connection.get_message()
        except trio_websocket.ConnectionClosed as exc:
            raise trio.EndOfChannel(f"websocket closed: {exc.reason}") from None
        if isinstance(message, bytes):
            log.info("%s sent a binary frame; closing with 1003", self.connection)
            await self._close(CLOSE_UNSUPPORTED_DATA, "binary frames are not supported; send text")
            raise trio.EndOfChannel("peer sent a binary frame")
        data = message.encode("utf-8")
        if len(data) > self.max_message_size:
            # trio-websocket counts characters; the limit is in bytes.
            log.info("%s sent a message over %d bytes; closing with 1009", self.connection, len(data))
            await self._close(CLOSE_MESSAGE_TOO_BIG, f"message exceeds {self.max_message_size} bytes")
            raise trio.EndOfChannel("peer sent an oversized message")
        return data

    async def aclose(self, code: int = 1000, reason: str | None = None) -> None:
        """Close cleanly (closing handshake bounded by ``close_timeout``), then drop the TCP
        connection. Idempotent; never blocks longer than ``close_timeout``."""
        if self._closed:
            await self._drop_tcp()
            return
        await self._close(code, reason)

    async def abort(self) -> None:
        """Drop the TCP connection at once, without a closing handshake. Idempotent."""
        self._closed = True
        await self._drop_tcp()

    async def _close(self, code: int, reason: str | None) -> None:
        self._closed = True
        try:
            if not self._send_broken:
                with trio.move_on_after(self.close_timeout):
                    await self.connection.aclose(code, reason)
        finally:
            await self._drop_tcp()

    async def _drop_tcp(self) -> None:
        # trio-websocket's aclose() does nothing once the connection has a close reason, which
        # it also has after closing by itself with 1009, or as a client after the server's close
        # frame: the TCP stream can stay open then. Close it here, in every case.
        stream: trio.abc.AsyncResource | None = getattr(self.connection, "_stream", None)
        if stream is not None:
            await trio.aclose_forcefully(stream)
        else:  # pragma: no cover - trio-websocket changed its internals
            await trio.aclose_forcefully(self.connection)


# ---------------------------------------------------------------------------- the server


def _parse_origin(text: str, *, allow_wildcard_port: bool = False) -> tuple[str, str, int | None] | None:
    """``scheme://host[:port]`` → (scheme, host, port); port None means "any". None if malformed."""
    any_port = allow_wildcard_port and text.endswith(":*")
    if any_port:
        text = text[:-2]
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if not scheme or not host or parts.path or parts.query or parts.fragment or parts.username:
        return None
    if parts.password is not None or "@" in parts.netloc:
        return None
    if any_port:
        if port is not None:
            return None
        return scheme, host, None
    if port is None:
        port = {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(scheme)
        if port is None:
            return None
    return scheme, host, port


def _origin_check(policy: OriginPolicy) -> Callable[[str], bool]:
    if callable(policy):
        return policy
    if isinstance(policy, str):
        raise TypeError("allowed_origins must be a collection of origins, not one string")
    patterns: list[tuple[str, str, int | None]] = []
    allow_null = False
    for entry in policy:
        entry = entry.strip()
        if entry == "*":
            return lambda origin: True
        if entry.lower() == "null":
            allow_null = True
            continue
        parsed = _parse_origin(entry, allow_wildcard_port=True)
        if parsed is None:
            raise ValueError(f"not an origin pattern: {entry!r} (expected scheme://host[:port|:*])")
        patterns.append(parsed)

    def check(origin: str) -> bool:
        if origin.strip().lower() == "null":
            return allow_null
        parsed = _parse_origin(origin.strip())
        if parsed is None:
            return False
        scheme, host, port = parsed
        return any(
            scheme == p_scheme and host == p_host and (p_port is None or p_port == port)
            for p_scheme, p_host, p_port in patterns
        )

    return check


def _headers(request: WebSocketRequest, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in request.headers if key.lower() == name]


def _bearer_token(request: WebSocketRequest) -> str | None:
    values = _headers(request, b"authorization")
    if len(values) != 1:
        return None
    scheme, _, token = values[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


async def _authenticate(authenticate: Authenticator, token: str) -> str | None:
    result = authenticate(token)
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return None
    if not isinstance(result, str):
        raise TypeError(f"authenticate() must return str or None, not {type(result).__name__}")
    return result or None


@asynccontextmanager
async def _running(server_or_runtime: Server | ServerRuntime) -> AsyncIterator[ServerRuntime]:
    from ..actors.server import ServerRuntime

    if isinstance(server_or_runtime, ServerRuntime):
        yield server_or_runtime
    else:
        async with server_or_runtime.open() as runtime:
            yield runtime


async def serve_websocket(
    server_or_runtime: Server | ServerRuntime,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    allowed_origins: OriginPolicy = DEFAULT_ALLOWED_ORIGINS,
    authenticate: Authenticator | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    ping_interval: float | None = DEFAULT_PING_INTERVAL,
    ping_timeout: float | None = None,
    handshake_timeout: float = DEFAULT_HANDSHAKE_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
    task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Serve MCP over WebSocket on ``host:port`` until cancelled.

    Use with ``port = await nursery.start(serve_websocket, server)``: it reports the bound port
    once it is listening (``port=0``, the default, picks a free one). ``server_or_runtime`` is a
    :class:`~trio_mcp.Server` (a runtime is opened for the lifetime of this call) or an open
    :class:`~trio_mcp.ServerRuntime` (to share tasks with other transports).

    ``allowed_origins``: origin patterns (see :data:`DEFAULT_ALLOWED_ORIGINS`) or a predicate
    ``origin -> bool``; requests without ``Origin`` are always allowed. ``authenticate``: see
    the module docstring; e.g. ``authenticate={"s3cret": "alice"}.get`` (prefer a constant-time
    comparison such as :func:`hmac.compare_digest` for real tokens). ``ping_interval=None``
    turns the keep-alive off. ``ssl_context`` (a server-side context with a certificate) serves
    ``wss://``. If ``host`` resolves to several addresses and ``port`` is 0, each listener gets
    its own port and the first one is reported: pass a literal address.
    """
    if max_message_size < 1:
        raise ValueError("max_message_size must be at least 1")
    if ping_interval is not None and not (math.isfinite(ping_interval) and ping_interval > 0):
        raise ValueError("ping_interval must be a positive number of seconds, or None")
    pong_wait = ping_interval if ping_timeout is None else ping_timeout
    if pong_wait is not None and not (math.isfinite(pong_wait) and pong_wait > 0):
        raise ValueError("ping_timeout must be a positive number of seconds")
    origin_allowed = _origin_check(allowed_origins)

    async def handshake(request: WebSocketRequest) -> tuple[WebSocketConnection, Owner] | None:
        """Accept (→ the connection and its tasks' owner) or refuse (→ None) a handshake."""
        origins = _headers(request, b"origin")
        if len(origins) > 1 or (origins and not origin_allowed(origins[0])):
            log.info("refused websocket from origin %r", origins)
            await request.reject(403, body=b"origin not allowed\n")
            return None
        offered = request.proposed_subprotocols
        if offered and SUBPROTOCOL not in offered:
            log.info("refused websocket offering subprotocols %r", offered)
            await request.reject(400, body=b"unsupported subprotocol: offer 'mcp'\n")
            return None
        owner: Owner = None
        if authenticate is not None:
            token = _bearer_token(request)
            try:
                identity = await _authenticate(authenticate, token) if token is not None else None
            except Exception as exc:
                log.error("authenticate() failed: %r", exc, exc_info=exc)
                await request.reject(500, body=b"authentication failed\n")
                return None
            if identity is None:
                log.info("refused websocket: %s bearer token", "invalid" if token else "missing")
                await request.reject(
                    401,
                    extra_headers=[(b"WWW-Authenticate", b'Bearer realm="mcp"')],
                    body=b"a valid bearer token is required\n",
                )
                return None
            owner = ("identity", identity)
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
        connection = await request.accept(subprotocol=subprotocol)
        return connection, owner

    async with _running(server_or_runtime) as runtime:

        async def run_session(transport: WebSocketTransport, owner: Owner) -> None:
            log.debug("websocket session %s started (owner %r)", transport.connection, owner)
            async with trio.open_nursery() as nursery:
                if ping_interval is not None:
                    assert pong_wait is not None
                    nursery.start_soon(_keep_alive, transport, nursery.cancel_scope, ping_interval, pong_wait)
                await runtime.serve(transport, owner=owner)
                nursery.cancel_scope.cancel()
            log.debug("websocket session %s ended", transport.connection)

        async def serve_stream(stream: trio.abc.Stream) -> None:
            async with _reader_nursery() as readers:
                accepted = None
                with trio.move_on_after(handshake_timeout):
                    if isinstance(stream, trio.SSLStream):
                        await stream.do_handshake()
                    request = await trio_websocket.wrap_server_stream(
                        readers,
                        stream,
                        max_message_size=max_message_size,
                        receive_buffer_size=_RECEIVE_BUFFER_SIZE,
                    )
                    accepted = await handshake(request)
                if accepted is None:
                    return
                connection, owner = accepted
                transport = WebSocketTransport(connection, max_message_size=max_message_size)
                try:
                    await run_session(transport, owner)
                finally:
                    with trio.CancelScope(shield=True):
                        await transport.aclose()

        async def handle_stream(stream: trio.abc.Stream) -> None:
            # One broken connection must not take the server down: log its errors, keep only
            # cancellation (and KeyboardInterrupt and the like) propagating.
            try:
                async with stream:
                    await serve_stream(stream)
            except BaseExceptionGroup as group:
                cancelled, errors = group.split(trio.Cancelled)
                if errors is not None and not isinstance(errors, ExceptionGroup):
                    raise
                if errors is not None:
                    _log_connection_error(errors)
                if cancelled is not None:
                    raise cancelled from None
            except Exception as exc:
                _log_connection_error(exc)

        listeners: list[trio.abc.Listener[trio.abc.Stream]] = []
        if ssl_context is None:
            listeners.extend(await trio.open_tcp_listeners(port, host=host))
        else:
            listeners.extend(
                await trio.open_ssl_over_tcp_listeners(port, ssl_context, host=host, https_compatible=True)
            )
        async with trio.open_nursery() as nursery:
            await nursery.start(trio.serve_listeners, handle_stream, listeners)
            bound = _listener_port(listeners[0])
            log.info("serving MCP over WebSocket on %s port %d", host, bound)
            task_status.started(bound)
            await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


@asynccontextmanager
async def _reader_nursery() -> AsyncIterator[trio.Nursery]:
    """A nursery for trio-websocket's reader task that outside cancellation does not reach.

    The reader must outlive a connection torn down by cancellation (server shutdown, a cancelled
    client), or the closing handshake that the transport's ``aclose()`` performs under a shield
    could not finish (nobody would read the peer's close frame). Leaving the block cancels it.
    """
    async with trio.open_nursery() as nursery:
        scope = trio.CancelScope(shield=True)
        inner: trio.Nursery = await nursery.start(_host_nursery, scope)
        try:
            yield inner
        finally:
            scope.cancel()


async def _host_nursery(scope: trio.CancelScope, *, task_status: trio.TaskStatus[trio.Nursery]) -> None:
    with scope:
        async with trio.open_nursery() as nursery:
            task_status.started(nursery)
            await trio.sleep_forever()


def _listener_port(listener: trio.abc.Listener[trio.abc.Stream]) -> int:
    if isinstance(listener, trio.SSLListener):
        listener = listener.transport_listener
    assert isinstance(listener, trio.SocketListener)
    port: int = listener.socket.getsockname()[1]
    return port


async def _keep_alive(
    transport: WebSocketTransport, session: trio.CancelScope, interval: float, pong_wait: float
) -> None:
    """Ping every ``interval`` s; if no pong comes within ``pong_wait`` s, end the session."""
    while True:
        await trio.sleep(interval)
        with trio.move_on_after(pong_wait) as ping:
            try:
                await transport.connection.ping()
            except trio_websocket.ConnectionClosed:
                return
        if ping.cancelled_caught:
            log.info("%s did not answer a ping within %.3g s; disconnecting", transport.connection, pong_wait)
            session.cancel()
            with trio.CancelScope(shield=True):
                await transport.abort()
            return


def _log_connection_error(exc: Exception) -> None:
    if _is_disconnect(exc):
        log.debug("websocket connection ended: %r", exc)
    else:
        log.error("websocket connection failed: %r", exc, exc_info=exc)


def _is_disconnect(exc: BaseException) -> bool:
    """True for an exception (group) made only of "the peer went away" errors."""
    from ..actors.endpoint import ConnectionClosed

    if isinstance(exc, BaseExceptionGroup):
        return all(_is_disconnect(e) for e in exc.exceptions)
    return isinstance(
        exc,
        ConnectionClosed
        | trio_websocket.ConnectionClosed
        | trio.BrokenResourceError
        | trio.ClosedResourceError,
    )


# ---------------------------------------------------------------------------- the client


def _split_url(url: str) -> tuple[str, int, str, str, bool]:
    """``ws[s]://host[:port]/path?query`` → (host, port, Host header, resource, secure)."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("ws", "wss"):
        raise ValueError(f"a WebSocket URL must start with ws:// or wss://, not {url!r}")
    if parts.username is not None or parts.password is not None:
        raise ValueError("credentials in the URL are not supported; pass token=")
    host = parts.hostname
    if not host:
        raise ValueError(f"no host in {url!r}")
    secure = scheme == "wss"
    default_port = 443 if secure else 80
    port = parts.port or default_port  # .port raises ValueError for a bad port
    literal = f"[{host}]" if ":" in host else host
    host_header = literal if port == default_port else f"{literal}:{port}"
    resource = parts.path or "/"
    if parts.query:
        resource += "?" + parts.query
    return host, port, host_header, resource, secure


@asynccontextmanager
async def open_websocket_transport(
    url: str,
    *,
    token: str | None = None,
    origin: str | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    connect_timeout: float = CONNECT_TIMEOUT,
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
) -> AsyncIterator[WebSocketTransport]:
    """Connect to ``url`` (``ws://`` or ``wss://``) and yield a :class:`WebSocketTransport`.

    Offers the subprotocol ``mcp``; sends ``Authorization: Bearer <token>`` if ``token`` is
    given, and ``Origin: <origin>`` if ``origin`` is (a non-browser client normally sends none).
    ``max_message_size`` limits what the *server* may send us. ``ssl_context`` is for ``wss://``
    (default: the system's trusted CAs). Leaving the block closes the connection cleanly
    (bounded by ``close_timeout``) and always closes the socket.

    Raises :class:`trio_websocket.ConnectionRejected` if the server refuses the handshake
    (``status_code`` 401, 403, ...) and :class:`trio_websocket.HandshakeError` if it cannot be
    reached (TCP or TLS) or does not complete the handshake within ``connect_timeout`` seconds
    (:class:`trio_websocket.ConnectionTimeout`).
    """
    host, port, host_header, resource, secure = _split_url(url)
    if ssl_context is not None and not secure:
        raise ValueError("ssl_context is only for wss:// URLs")
    headers: list[tuple[bytes, bytes]] = []
    if token is not None:
        if not _TOKEN.fullmatch(token):
            raise ValueError("a bearer token must be non-empty visible ASCII without spaces")
        headers.append((b"Authorization", b"Bearer " + token.encode("ascii")))
    if origin is not None:
        if not _TOKEN.fullmatch(origin):
            raise ValueError("origin must be visible ASCII without spaces")
        headers.append((b"Origin", origin.encode("ascii")))

    deadline = trio.current_time() + connect_timeout
    stream: trio.SocketStream | trio.SSLStream[trio.SocketStream]
    try:
        with trio.fail_at(deadline):
            if secure:
                tls = await trio.open_ssl_over_tcp_stream(
                    host, port, ssl_context=ssl_context or ssl.create_default_context(), https_compatible=True
                )
                try:
                    await tls.do_handshake()
                except BaseException:
                    await trio.aclose_forcefully(tls)
                    raise
                stream = tls
            else:
                stream = await trio.open_tcp_stream(host, port)
    except trio.TooSlowError:
        raise trio_websocket.ConnectionTimeout from None
    except (OSError, trio.BrokenResourceError) as exc:
        raise trio_websocket.HandshakeError(f"cannot connect to {url}: {exc}") from exc

    # We own the socket, so it is closed on every path (open_websocket_url leaks it when the
    # handshake is refused or the server closes first), and trio-websocket's reader runs in our
    # shielded nursery, so a cancelled client can still finish its closing handshake.
    user_error: BaseException | None = None
    try:
        async with _reader_nursery() as readers:
            try:
                with trio.fail_at(deadline):
                    connection = await trio_websocket.wrap_client_stream(
                        readers,
                        stream,
                        host_header,
                        resource,
                        subprotocols=[SUBPROTOCOL],
                        extra_headers=headers,
                        max_message_size=max_message_size,
                        receive_buffer_size=_RECEIVE_BUFFER_SIZE,
                    )
            except trio.TooSlowError:
                raise trio_websocket.ConnectionTimeout from None
            transport = WebSocketTransport(
                connection, max_message_size=max_message_size, close_timeout=close_timeout
            )
            try:
                yield transport
            except BaseException as exc:
                user_error = exc
                raise
            finally:
                with trio.CancelScope(shield=True):
                    await transport.aclose()
    except BaseExceptionGroup as group:
        _raise_unwrapped(group, user_error)
    finally:
        with trio.CancelScope(shield=True):
            await trio.aclose_forcefully(stream)


def _raise_unwrapped(group: BaseExceptionGroup[BaseException], preferred: BaseException | None) -> NoReturn:
    """Re-raise the one exception that matters from a nursery's group (the caller's own, or the
    only one that is not Cancelled, e.g. ConnectionRejected), else the group itself."""
    leaves: list[BaseException] = []

    def collect(exc: BaseException) -> None:
        if isinstance(exc, BaseExceptionGroup):
            for sub in exc.exceptions:
                collect(sub)
        else:
            leaves.append(exc)

    collect(group)
    chosen: BaseException = group
    if preferred is not None and any(leaf is preferred for leaf in leaves):
        chosen = preferred
    else:
        real = [leaf for leaf in leaves if not isinstance(leaf, trio.Cancelled)]
        if len(real) == 1:
            chosen = real[0]
        elif not real and leaves:
            chosen = leaves[0]
    if chosen is group:
        raise group
    context = chosen.__context__
    try:
        raise chosen
    finally:
        chosen.__context__ = context  # don't chain the group (which contains it) as its context


@asynccontextmanager
async def connect_websocket(
    url: str,
    *,
    token: str | None = None,
    origin: str | None = None,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
    connect_timeout: float = CONNECT_TIMEOUT,
    ssl_context: ssl.SSLContext | None = None,
    initialize: bool = True,
) -> AsyncIterator[Client]:
    """Connect a :class:`~trio_mcp.Client` to the MCP server at ``url`` (initialized by default).

    Arguments as for :func:`open_websocket_transport`.

    >>> # async with connect_websocket("ws://127.0.0.1:8765/", token="s3cret") as client:
    >>> #     created = await client.call_tool_as_task("sleep", {"seconds": 2})
    """
    from ..actors.client import connect

    async with (
        open_websocket_transport(
            url,
            token=token,
            origin=origin,
            max_message_size=max_message_size,
            connect_timeout=connect_timeout,
            ssl_context=ssl_context,
        ) as transport,
        connect(transport, initialize=initialize) as client,
    ):
        yield client


# ---------------------------------------------------------------------------- CLI helper


def parse_host_port(text: str, *, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """Parse ``--ws`` values: ``HOST:PORT``, ``[IPv6]:PORT``, ``:PORT`` or ``PORT``.

    A missing host is ``default_host`` (loopback). Raises :class:`ValueError` (which argparse
    reports as an invalid value) for anything else.

    >>> parse_host_port("0.0.0.0:8765"), parse_host_port("[::1]:80"), parse_host_port("8765")
    (('0.0.0.0', 8765), ('::1', 80), ('127.0.0.1', 8765))
    """
    text = text.strip()
    if text.startswith("["):
        host, bracket, rest = text[1:].partition("]")
        if not bracket or not rest.startswith(":"):
            raise ValueError(f"expected [IPV6]:PORT, got {text!r}")
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise ValueError(f"not an IPv6 address: {host!r}") from None
        port_text = rest[1:]
    elif ":" not in text:
        host, port_text = "", text
    elif text.count(":") == 1:
        host, _, port_text = text.partition(":")
    else:
        raise ValueError(f"write an IPv6 address in brackets, e.g. [::1]:8765, not {text!r}")
    if not (port_text.isascii() and port_text.isdigit()):
        raise ValueError(f"expected HOST:PORT with a numeric port, got {text!r}")
    port = int(port_text)
    if port > 65535:
        raise ValueError(f"port out of range: {port}")
    return host or default_host, port
