"""Serving MCP over WebSocket (the transport: :mod:`trio_mcp.transports.websocket`).

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
      identity (a non-empty ``str``, or an ``AccessToken`` with its scopes) or ``None``. A
      missing token, a ``None`` identity or a token without the verifier's required scopes is
      refused with **HTTP 401** (``WWW-Authenticate: Bearer``). Without ``authenticate``, an
      ``Authorization`` header is ignored. (Browsers cannot set headers on a WebSocket; browser
      clients need a proxy that authenticates them.)
    * **Per-tool scopes** (``@server.tool(scopes=[...])``), with ``authenticate`` set: a
      ``tools/call`` of a tool whose scopes the connection's token lacks is answered with the
      JSON-RPC error -32003 (:data:`~trio_mcp.transports.security.INSUFFICIENT_SCOPE_CODE`)
      before anything runs. Tools see the connection's identity, scopes and handshake headers
      (``ctx.identity``, ``ctx.scopes``, ``ctx.headers``; ``Authorization`` redacted).
    * The whole opening handshake, including ``authenticate``, must finish within
      ``handshake_timeout`` seconds (default 10), or the TCP connection is dropped.

    Ownership of tasks (see :meth:`~trio_mcp.server.ServerRuntime.serve`):

    * **With an identity** (``authenticate`` set), the connection is served with
      ``owner="identity:" + identity``: its tasks belong to the identity, not the connection.
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
    without touching the rest. Each session queues its outgoing messages without ever making
    its reader wait (so pings, cancellations and the client's own answers are always read):

    * at most :data:`~trio_mcp.actors._session.MAX_WAITING_REQUESTS` (256) requests per session
      are outstanding (``tools/call``, ``tasks/result``, task creation, each until its answer is
      written); past that a request is refused at once with -32603;
    * once :data:`~trio_mcp.actors._endpoint.DEFAULT_MAX_OUTBOUND_BYTES` (16 MiB) wait for a
      client that does not read, or one write takes over
      :data:`~trio_mcp.actors._endpoint.DEFAULT_WRITE_TIMEOUT` (30 s), the connection is closed;
    * **notifications** to that client (progress, task status, log messages) **are dropped**
      once a quarter of that is waiting; MCP lets a peer miss notifications.
    * **other connections are unaffected**: they have their own queue, reader and writer.
    * a client that stops reading its socket cannot answer pings either (our ping may not even
      get past its full window), so the keep-alive disconnects it after at most
      ``ping_interval + ping_timeout`` seconds, ending its session (and its connection-owned
      tasks).

>>> # async with trio.open_nursery() as nursery:
>>> #     port = await nursery.start(serve_websocket, server)
"""

from __future__ import annotations

import logging
import math
import ssl
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import trio
import trio_websocket
from trio_websocket import WebSocketConnection, WebSocketRequest

from ..actors._endpoint import ConnectionClosed
from ..protocol import jsonrpc
from ..transports.base import DEFAULT_MAX_MESSAGE_SIZE, Transport
from ..transports.security import (
    DEFAULT_ALLOWED_ORIGINS,
    INSUFFICIENT_SCOPE_CODE,
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
from ..transports.websocket import (
    DEFAULT_HANDSHAKE_TIMEOUT,
    DEFAULT_PING_INTERVAL,
    RECEIVE_BUFFER_SIZE,
    SUBPROTOCOL,
    WebSocketTransport,
    listener_port,
    reader_nursery,
)
from ._server import Server, ServerRuntime, open_runtime, register_listener

__all__ = [
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_MAX_CONNECTIONS",
    "DEFAULT_MAX_CONNECTIONS_PER_ADDRESS",
    "serve_websocket",
]

log = logging.getLogger("trio_mcp.websocket")

DEFAULT_MAX_CONNECTIONS = 1000
"""Connections one WebSocket server serves at once."""
DEFAULT_MAX_CONNECTIONS_PER_ADDRESS = 100
"""Connections from one peer address at once."""
DEFAULT_IDLE_TIMEOUT = 300.0
"""Seconds a connection may stay silent with nothing outstanding before it is closed."""


def _headers(request: WebSocketRequest, name: bytes) -> list[str]:
    return [value.decode("latin-1") for key, value in request.headers if key.lower() == name]


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
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    max_connections_per_address: int = DEFAULT_MAX_CONNECTIONS_PER_ADDRESS,
    idle_timeout: float | None = DEFAULT_IDLE_TIMEOUT,
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

    Limits: at most ``max_connections`` connections at once, and ``max_connections_per_address``
    from one peer address; a connection past either is closed before its handshake is read
    (so it costs no more than its socket, briefly). A connection that sends nothing for
    ``idle_timeout`` seconds while it has no request outstanding and no running task of its own
    is closed (None: never).
    """
    if max_message_size < 1:
        raise ValueError("max_message_size must be at least 1")
    if ping_interval is not None and not (math.isfinite(ping_interval) and ping_interval > 0):
        raise ValueError("ping_interval must be a positive number of seconds, or None")
    pong_wait = ping_interval if ping_timeout is None else ping_timeout
    if pong_wait is not None and not (math.isfinite(pong_wait) and pong_wait > 0):
        raise ValueError("ping_timeout must be a positive number of seconds")
    origin_allowed = origin_check(allowed_origins)

    async def handshake(
        request: WebSocketRequest,
    ) -> tuple[WebSocketConnection, str | None, Caller] | None:
        """Accept (→ the connection, its tasks' owner, its caller as tools see it) or refuse
        (→ None) a handshake."""
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
        owner: str | None = None
        caller = Caller(headers=request_headers(request.headers))
        if authenticate is not None:
            token = bearer_token(_headers(request, b"authorization"))
            try:
                access = await verify_token(authenticate, token) if token is not None else None
            except InsufficientScope:
                access = None  # no 403 to step up from here: refused, as an invalid token is
            except Exception as exc:
                log.error("authenticate() failed: %r", exc, exc_info=exc)
                await request.reject(500, body=b"authentication failed\n")
                return None
            if access is None:
                log.info("refused websocket: %s bearer token", "invalid" if token else "missing")
                await request.reject(
                    401,
                    extra_headers=[(b"WWW-Authenticate", b'Bearer realm="mcp"')],
                    body=b"a valid bearer token is required\n",
                )
                return None
            owner = identity_owner(access.identity)
            caller = Caller(access.identity, access.scopes, caller.headers)
        subprotocol = SUBPROTOCOL if SUBPROTOCOL in offered else None
        connection = await request.accept(subprotocol=subprotocol)
        return connection, owner, caller

    async with open_runtime(server_or_runtime) as runtime:

        def tool_scopes(name: str) -> Sequence[str]:
            entry = runtime.server.tools.get(name)
            return entry.scopes if entry is not None else ()

        async def run_session(
            transport: WebSocketTransport, owner: str | None, address: str, caller: Caller
        ) -> None:
            log.debug("websocket session %s started (owner %r)", transport.connection, owner)
            # The connection's caller, for what its session serves (ctx.identity, scopes, headers).
            current_caller.set(caller)
            served: Transport = transport
            if authenticate is not None:
                served = _ScopeGate(transport, caller, tool_scopes)
            async with trio.open_nursery() as nursery:
                if ping_interval is not None:
                    assert pong_wait is not None
                    nursery.start_soon(_keep_alive, transport, nursery.cancel_scope, ping_interval, pong_wait)
                client = None if owner is not None else f"address:{address}"
                await runtime.serve(served, owner=owner, idle_timeout=idle_timeout, client=client)
                nursery.cancel_scope.cancel()
            log.debug("websocket session %s ended", transport.connection)

        connections: dict[str, int] = {}

        async def serve_stream(stream: trio.abc.Stream) -> None:
            address = _peer_address(stream)
            total = sum(connections.values())
            if total >= max_connections or connections.get(address, 0) >= max_connections_per_address:
                log.warning(
                    "refused a connection from %s: %d open (%d from it)",
                    address,
                    total,
                    connections.get(address, 0),
                )
                return  # closed by handle_stream without reading it
            connections[address] = connections.get(address, 0) + 1
            try:
                await _serve_accepted(stream, address)
            finally:
                connections[address] -= 1
                if not connections[address]:
                    del connections[address]

        async def _serve_accepted(stream: trio.abc.Stream, address: str) -> None:
            async with reader_nursery() as readers:
                accepted = None
                with trio.move_on_after(handshake_timeout):
                    if isinstance(stream, trio.SSLStream):
                        await stream.do_handshake()
                    request = await trio_websocket.wrap_server_stream(
                        readers,
                        stream,
                        max_message_size=max_message_size,
                        receive_buffer_size=RECEIVE_BUFFER_SIZE,
                    )
                    accepted = await handshake(request)
                if accepted is None:
                    return
                connection, owner, caller = accepted
                transport = WebSocketTransport(connection, max_message_size=max_message_size)
                try:
                    await run_session(transport, owner, address, caller)
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
            bound = listener_port(listeners[0])
            log.info("serving MCP over WebSocket on %s port %d", host, bound)
            task_status.started(bound)
            await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover


class _ScopeGate:
    """The transport a session reads through when connections authenticate: a ``tools/call``
    (plain or task-augmented, either era) of a tool whose ``scopes`` the connection's token
    lacks never reaches the session; it is answered :data:`INSUFFICIENT_SCOPE_CODE` (-32003)
    instead, before anything runs — what HTTP answers with a 403 ``insufficient_scope``."""

    def __init__(
        self, inner: WebSocketTransport, caller: Caller, tool_scopes: Callable[[str], Sequence[str]]
    ) -> None:
        self.inner = inner
        self.granted = caller.scopes
        self.tool_scopes = tool_scopes

    async def receive(self) -> jsonrpc.Received:
        message = await self.inner.receive()
        if isinstance(message, jsonrpc.Request) and message.method == "tools/call":
            name = (message.params or {}).get("name")
            lacking = missing_scopes(self.tool_scopes(name), self.granted) if isinstance(name, str) else ()
            if lacking:
                log.info("refused tools/call of %r: the token lacks %s", name, " ".join(lacking))
                text = f"Forbidden: the tool {name!r} needs the scopes: {' '.join(lacking)}"
                # Answered by the session's own writer (an unreadable message's error answer).
                error = jsonrpc.ErrorObject(INSUFFICIENT_SCOPE_CODE, text)
                return jsonrpc.Unreadable(jsonrpc.ErrorResponse(message.id, error))
        return message

    async def send(self, message: bytes) -> None:
        await self.inner.send(message)

    async def send_many(self, messages: Sequence[bytes]) -> None:
        await self.inner.send_many(messages)

    async def aclose(self) -> None:
        await self.inner.aclose()


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


def _peer_address(stream: trio.abc.Stream) -> str:
    """The peer's IP address (without port), or "?" when the stream has none."""
    inner: Any = stream.transport_stream if isinstance(stream, trio.SSLStream) else stream
    sock = getattr(inner, "socket", None)
    try:
        peer = sock.getpeername() if sock is not None else None
    except OSError:
        return "?"
    return str(peer[0]) if isinstance(peer, tuple) and peer else "?"


def _log_connection_error(exc: Exception) -> None:
    if _is_disconnect(exc):
        log.debug("websocket connection ended: %r", exc)
    else:
        log.error("websocket connection failed: %r", exc, exc_info=exc)


def _is_disconnect(exc: BaseException) -> bool:
    """True for an exception (group) made only of "the peer went away" errors."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_is_disconnect(e) for e in exc.exceptions)
    return isinstance(
        exc,
        ConnectionClosed
        | trio_websocket.ConnectionClosed
        | trio.BrokenResourceError
        | trio.ClosedResourceError,
    )


register_listener("ws", serve_websocket, "ws://{host}:{port}/")
