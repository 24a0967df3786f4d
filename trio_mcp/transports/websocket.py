"""MCP over WebSocket, on trio-websocket: the :class:`WebSocketTransport` and the client's connection.

Serving is :func:`trio_mcp.server.serve_websocket`; connecting a client,
:func:`trio_mcp.client.connect_websocket`.

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

Client
    :func:`open_websocket_transport` yields a :class:`WebSocketTransport` on a ``ws://`` or
    ``wss://`` URL (it offers the subprotocol ``mcp`` and sends ``Authorization: Bearer`` when
    given a token); :func:`trio_mcp.client.connect_websocket` runs an initialized :class:`~trio_mcp.Client` on
    it. A refused handshake raises :class:`trio_websocket.ConnectionRejected` (its
    ``status_code`` is the HTTP status); other connection failures raise
    :class:`trio_websocket.HandshakeError`.

>>> # async with open_websocket_transport("ws://127.0.0.1:8765/") as transport:
>>> #     await transport.send(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
"""

from __future__ import annotations

import ipaddress
import logging
import re
import ssl
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import NoReturn
from urllib.parse import urlsplit

import trio
import trio_websocket
from trio_websocket import WebSocketConnection
from wsproto.events import TextMessage

from ..protocol import jsonrpc
from .base import DEFAULT_MAX_MESSAGE_SIZE

__all__ = [
    "CLOSE_MESSAGE_TOO_BIG",
    "CLOSE_UNSUPPORTED_DATA",
    "CONNECT_TIMEOUT",
    "DEFAULT_CLOSE_TIMEOUT",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_MAX_MESSAGE_SIZE",
    "DEFAULT_PING_INTERVAL",
    "RECEIVE_BUFFER_SIZE",
    "SUBPROTOCOL",
    "WebSocketTransport",
    "listener_port",
    "open_websocket_transport",
    "parse_host_port",
    "reader_nursery",
]

log = logging.getLogger("trio_mcp.websocket")

SUBPROTOCOL = "mcp"
"""The WebSocket subprotocol MCP uses."""

CLOSE_UNSUPPORTED_DATA = 1003
"""Close code sent when the peer sends a binary frame."""

CLOSE_MESSAGE_TOO_BIG = 1009
"""Close code sent when the peer sends a message over ``max_message_size``."""

DEFAULT_PING_INTERVAL = 20.0
"""Seconds between keep-alive pings."""

DEFAULT_HANDSHAKE_TIMEOUT = 10.0
"""Seconds a client has to complete the opening handshake."""

DEFAULT_CLOSE_TIMEOUT = 5.0
"""Seconds :meth:`WebSocketTransport.aclose` waits for the peer's half of the closing handshake."""

CONNECT_TIMEOUT = 10.0
"""Seconds :func:`open_websocket_transport` waits for the connection and handshake."""

RECEIVE_BUFFER_SIZE = 65536
"""Bytes read from the socket at a time."""
_TOKEN = re.compile(r"[\x21-\x7e]+")  # visible ASCII: what may go into an HTTP header unquoted


# ---------------------------------------------------------------------------- the transport


class WebSocketTransport:
    """A :class:`~trio_mcp.transports.base.Transport` on a :class:`trio_websocket.WebSocketConnection`.

    One JSON-RPC message per text frame. See the module docstring for the exact behaviour on
    binary frames (close 1003), oversized messages (close 1009) and closing. Any number of
    tasks may ``send`` concurrently (trio-websocket writes each frame whole, under a lock);
    one task at a time may ``receive``.
    """

    paced_input = True
    """Messages come one per scheduler round (trio-websocket's reader task hands each over):
    see :class:`~trio_mcp.transports.base.BatchTransport`."""

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
        await self._may_send()
        try:
            await self.connection.send_message(text)
        except trio_websocket.ConnectionClosed as exc:
            raise trio.BrokenResourceError(f"websocket closed: {exc.reason}") from exc
        except BaseException:
            # Cancelled (or failed) in the middle: part of a frame may be on the wire.
            self._send_broken = True
            raise

    async def _may_send(self) -> None:
        """Refuse a send on a transport closed here or broken by an interrupted write; then a
        cancellation point, where it is known that nothing was written."""
        if self._closed:
            raise trio.ClosedResourceError("transport was closed")
        if self._send_broken:
            raise trio.BrokenResourceError("an earlier send was interrupted in the middle of a frame")
        await trio.lowlevel.checkpoint_if_cancelled()

    async def send_many(self, messages: Sequence[bytes]) -> None:
        """Send several messages, one text frame each, in one write to the socket where the
        connection allows (a burst of answers to pipelined requests costs one system call, not
        one each). Raises as :meth:`send`; nothing is sent if one message is not UTF-8."""
        texts = [message.decode("utf-8") for message in messages]
        connection = self.connection
        framer = getattr(connection, "_wsproto", None)
        lock = getattr(connection, "_stream_lock", None)
        stream = getattr(connection, "_stream", None)
        if framer is None or lock is None or stream is None:  # pragma: no cover - trio-websocket changed
            for text in texts:
                await self.send(text.encode("utf-8"))
            return
        await self._may_send()
        if connection.closed is not None:
            raise trio.BrokenResourceError(f"websocket closed: {connection.closed.reason}")
        # The frames are made as trio-websocket makes them (its wsproto connection, so any
        # negotiated extension applies) and written under its lock, as its own sends are.
        data = b"".join([framer.send(TextMessage(data=text)) for text in texts])
        try:
            async with lock:
                await stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._send_broken = True
            raise trio.BrokenResourceError("websocket connection lost") from exc
        except BaseException:
            self._send_broken = True  # cancelled (or failed) in the middle: part may be written
            raise

    async def receive(self) -> jsonrpc.Received:
        """The next message, parsed (an :class:`~trio_mcp.protocol.jsonrpc.Unreadable` for
        text that is not a JSON-RPC message); see :meth:`receive_text` for what raises."""
        return jsonrpc.read(await self.receive_text())

    async def receive_bytes(self) -> bytes:
        """The next message as UTF-8 bytes, unparsed (a raw peer's view)."""
        return (await self.receive_text()).encode("utf-8")

    async def receive_text(self) -> str:
        """The next message's text, unparsed.

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
        # trio-websocket counts characters; the limit is in bytes (at most 4 a character).
        if len(message) * 4 > self.max_message_size and len(message.encode("utf-8")) > self.max_message_size:
            log.info(
                "%s sent a message over %d bytes; closing with 1009", self.connection, self.max_message_size
            )
            await self._close(CLOSE_MESSAGE_TOO_BIG, f"message exceeds {self.max_message_size} bytes")
            raise trio.EndOfChannel("peer sent an oversized message")
        return message

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


@asynccontextmanager
async def reader_nursery() -> AsyncIterator[trio.Nursery]:
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


def listener_port(listener: trio.abc.Listener[trio.abc.Stream]) -> int:
    if isinstance(listener, trio.SSLListener):
        listener = listener.transport_listener
    assert isinstance(listener, trio.SocketListener)
    port: int = listener.socket.getsockname()[1]
    return port


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
        async with reader_nursery() as readers:
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
                        receive_buffer_size=RECEIVE_BUFFER_SIZE,
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
