"""Endpoint: one side of a JSON-RPC connection, shared by server sessions and the client.

It owns the transport: a reader loop turns frames into messages, a writer task drains a
bounded outbound queue. Responses and requests wait for room in that queue (backpressure on
a slow peer); notifications are best-effort and dropped when it is full (``dropped`` counts
them), which the spec allows: peers must not rely on notifications.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, ErrorValue, McpError
from ..transports.base import MessageTooLarge, Transport
from .runtime import MailboxFull, Reply
from .trace import Tracer, no_trace

log = logging.getLogger("trio_mcp")

DEFAULT_OUTBOUND_SIZE = 1024
MAX_BATCH = 256
"""Most messages the writer takes from the queue for one write."""

OVERLOADED = ErrorValue(INTERNAL_ERROR, "Server overloaded; retry later")

NO_RESPONSE: dict[str, Any] = {}
"""Returned by a handler that already sent its response itself."""

Handler = Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]]


class ConnectionClosed(Exception):
    """The connection ended before an answer arrived."""


class Endpoint:
    """Base of :class:`SessionActor` and :class:`Client`. Subclasses handle incoming messages."""

    def __init__(
        self,
        transport: Transport,
        *,
        outbound_size: int = DEFAULT_OUTBOUND_SIZE,
        tracer: Tracer = no_trace,
        name: str = "connection",
    ) -> None:
        self.transport = transport
        self.name = name
        self._tracer = tracer if tracer is not no_trace else None
        self._out_send, self._out_recv = trio.open_memory_channel[bytes](outbound_size)
        self._pending: dict[jsonrpc.RequestId, Reply[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.dropped = 0
        self.closed = False
        self.nursery: trio.Nursery | None = None

    # -- outgoing -------------------------------------------------------------------------
    async def send(self, data: bytes) -> None:
        """Queue one encoded message, waiting only if the queue is full."""
        try:
            self._out_send.send_nowait(data)  # no scheduler round trip when there is room
        except trio.WouldBlock:
            try:
                await self._out_send.send(data)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                raise ConnectionClosed from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise ConnectionClosed from None

    def post(self, data: bytes, then: Callable[[], None] | None = None) -> None:
        """Queue a response from synchronous code: at once if there is room, else from a task
        that waits for room (so it is never lost while the connection lives). ``then`` runs
        once it is queued."""
        try:
            self._out_send.send_nowait(data)
        except trio.WouldBlock:
            if self.nursery is not None:
                self.nursery.start_soon(self._send_then, data, then)
            return
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return  # the connection is gone: nobody to answer
        if then is not None:
            then()

    async def _send_then(self, data: bytes, then: Callable[[], None] | None) -> None:
        try:
            await self.send(data)
        except ConnectionClosed:
            return
        if then is not None:
            then()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        """Send a notification if the outbound queue has room; False if it was dropped."""
        try:
            self._out_send.send_nowait(jsonrpc.encode_notification(method, params))
            return True
        except trio.WouldBlock:
            self.dropped += 1
            return False
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return False

    async def respond(self, id: jsonrpc.RequestId, result: dict[str, Any]) -> None:
        try:
            data = jsonrpc.encode_response(id, result)
        except (ValueError, TypeError) as exc:  # e.g. NaN, or an object JSON cannot hold
            log.error("cannot encode the result for request %r: %r", id, exc)
            data = jsonrpc.encode_error(id, INTERNAL_ERROR, f"Internal error: result is not JSON: {exc}")
        await self.send(data)

    async def respond_error(self, id: jsonrpc.RequestId | None, error: ErrorValue) -> None:
        await self.send(jsonrpc.encode_error(id, error.code, error.message, error.data))

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request and wait for its result; an error response raises McpError."""
        if self.closed:
            raise ConnectionClosed
        request_id = next(self._ids)
        reply: Reply[dict[str, Any]] = Reply()
        self._pending[request_id] = reply
        try:
            await self.send(jsonrpc.encode_request(request_id, method, params))
            return await reply.wait()
        except trio.Cancelled:
            if not reply.answered:  # tell the peer to stop working on it
                self.notify("notifications/cancelled", {"requestId": request_id, "reason": "cancelled"})
            raise
        finally:
            self._pending.pop(request_id, None)

    # -- the two loops --------------------------------------------------------------------
    async def _write_loop(self) -> None:
        # Whatever queued up while we were writing goes out in one write, where the transport
        # can (a burst of answers to pipelined requests costs one system call, not one each).
        send_many = getattr(self.transport, "send_many", None)
        async with self._out_recv:
            async for data in self._out_recv:
                batch = [data]
                while len(batch) < MAX_BATCH:
                    try:
                        batch.append(self._out_recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                if self._tracer is not None:
                    for item in batch:
                        self._tracer("message.out", {"connection": self.name, "data": item})
                try:
                    if send_many is not None and len(batch) > 1:
                        await send_many(batch)
                    else:
                        for item in batch:
                            await self.transport.send(item)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    return

    async def _read_loop(self) -> None:
        while True:
            try:
                data = await self.transport.receive()
            except (trio.EndOfChannel, trio.BrokenResourceError, trio.ClosedResourceError):
                return
            except MessageTooLarge as exc:
                await self.respond_error(None, ErrorValue(INVALID_REQUEST, f"Invalid request: {exc}"))
                continue
            if self._tracer is not None:
                self._tracer("message.in", {"connection": self.name, "data": data})
            try:
                message = jsonrpc.parse(data)
            except jsonrpc.InvalidMessage as exc:
                error = exc.response.error
                await self.send(jsonrpc.encode_error(exc.response.id, error.code, error.message))
                continue
            if isinstance(message, jsonrpc.Request):
                await self.on_request(message)
            elif isinstance(message, jsonrpc.Notification):
                await self.on_notification(message)
            else:
                self._on_response(message)

    def _on_response(self, message: jsonrpc.Response | jsonrpc.ErrorResponse) -> None:
        reply = self._pending.pop(message.id, None) if message.id is not None else None
        if reply is None:
            log.debug("response to unknown request id %r ignored", message.id)
            return
        if isinstance(message, jsonrpc.Response):
            reply.send(message.result)
        else:
            e = message.error
            reply.fail(McpError(e.code, e.message, e.data))

    def _fail_pending(self) -> None:
        pending, self._pending = self._pending, {}
        for reply in pending.values():
            reply.fail(ConnectionClosed("connection closed"))

    async def answer(self, request: jsonrpc.Request, handler: Handler) -> None:
        """Run ``handler`` and send its result, or the JSON-RPC error it stands for.

        Anything but McpError is a bug in a handler: logged, answered -32603, never raised.
        """
        try:
            result = await handler(request)
        except McpError as exc:
            await self.respond_error(request.id, exc.value)
        except MailboxFull:
            await self.respond_error(request.id, OVERLOADED)
        except ConnectionClosed:
            raise
        except Exception as exc:
            log.error("handler for %s failed: %r", request.method, exc, exc_info=exc)
            await self.respond_error(request.id, ErrorValue(INTERNAL_ERROR, f"Internal error: {exc}"))
        else:
            if result is not NO_RESPONSE:
                await self.respond(request.id, result)

    def on_disconnect(self) -> None:
        """Called once when the peer is gone, before pending requests fail (override)."""

    async def on_request(self, request: jsonrpc.Request) -> None:
        await self.respond_error(
            request.id, ErrorValue(METHOD_NOT_FOUND, f"Method not found: {request.method}")
        )

    async def on_notification(self, notification: jsonrpc.Notification) -> None:
        return None

    async def run_connection(self, nursery: trio.Nursery) -> None:
        """Read until the peer hangs up; the writer runs in ``nursery`` and is stopped here."""
        self.nursery = nursery
        nursery.start_soon(self._write_loop)
        try:
            await self._read_loop()
        except ConnectionClosed:
            log.debug("%s: peer went away while we were answering", self.name)
        except Exception as exc:  # a bug in a handler: close this connection, keep the process
            log.error("connection failed: %r", exc, exc_info=exc)
            raise
        finally:
            self.closed = True
            self.on_disconnect()
            self._fail_pending()
            self._out_send.close()
