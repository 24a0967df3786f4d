"""Endpoint: one side of a JSON-RPC connection, shared by server sessions and the client.

It owns the transport: a reader loop turns frames into messages, a writer task drains an
outbound queue. Guarantees:

- **The reader never waits on the writer.** Queuing never blocks, so however slowly a peer
  reads, the reader goes on reading its requests, notifications (``notifications/cancelled``)
  and responses (answers to elicitation).
- **Outbound memory is bounded in bytes.** Responses and requests are always queued; once
  ``max_outbound_bytes`` (default :data:`DEFAULT_MAX_OUTBOUND_BYTES`, 16 MiB) are waiting to be
  written, the peer is not reading: the connection is closed. Notifications are best-effort:
  dropped (``dropped`` counts them) once ``notification_room`` bytes are waiting, which the
  spec allows.
- **A write that cannot finish within** ``write_timeout`` seconds (default
  :data:`DEFAULT_WRITE_TIMEOUT`, 30) closes the connection: a peer that stopped reading is let
  go after that long, whatever it sent.
- ``on_written`` callbacks run once their message is handed to the transport, before the write
  that carries it returns (a session's count of outstanding requests includes answers until
  then; a task whose CreateTaskResult was handed over counts as known to the client).
- **A direct transport** (:class:`~trio_mcp.transports.base.DirectTransport`, an HTTP
  session) has neither loop: its caller hands each message to :meth:`Endpoint.deliver` in its
  own Trio task, and each outgoing message goes to the transport's ``send_nowait`` as it is
  queued. The rules above are the same, but for memory: what a direct transport is handed it
  keeps, and bounds itself (an HTTP session's replay buffer, in bytes); only the tasks that
  carry the rules differ.
"""

from __future__ import annotations

import collections
import itertools
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, METHOD_NOT_FOUND, ErrorValue, McpError
from ..transports.base import DirectTransport, Transport
from .runtime import MailboxFull, Reply
from .trace import Tracer, no_trace

log = logging.getLogger("trio_mcp")

DEFAULT_MAX_OUTBOUND_BYTES = 16 * 1024 * 1024
"""Bytes waiting to be written past which a peer counts as not reading (it is disconnected)."""
DEFAULT_WRITE_TIMEOUT = 30.0
"""Seconds one write may take before the peer counts as not reading (it is disconnected)."""
NOTIFICATION_ROOM_FRACTION = 4
"""Notifications are dropped once a quarter of ``max_outbound_bytes`` is waiting."""
DRAIN_TIMEOUT = 1.0
"""Seconds the answers already on their way may take to be written after the peer's end of input."""
DRAIN_POLL = 0.005
MAX_BATCH = 256
"""Most messages the writer takes from the queue for one write."""
HOLD_BYTES = 64 * 1024
"""Most bytes a writer holds back while a burst is read (see ``BatchTransport.paced_input``)."""

OVERLOADED = ErrorValue(INTERNAL_ERROR, "Server overloaded; retry later")

NO_RESPONSE: dict[str, Any] = {}
"""Returned by a handler that already sent its response itself."""

Handler = Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]]


def _traced(message: jsonrpc.Received) -> bytes:
    """A received message as the tracer records it: its JSON (the error answered, for input
    that was not a message)."""
    if isinstance(message, jsonrpc.Unreadable):
        return jsonrpc.encode(message.response)
    return jsonrpc.encode(message)


class ConnectionClosed(Exception):
    """The connection ended before an answer arrived."""


class Endpoint:
    """Base of :class:`SessionActor` and :class:`Client`. Subclasses handle incoming messages."""

    def __init__(
        self,
        transport: Transport,
        *,
        max_outbound_bytes: int = DEFAULT_MAX_OUTBOUND_BYTES,
        write_timeout: float = DEFAULT_WRITE_TIMEOUT,
        idle_timeout: float | None = None,
        tracer: Tracer = no_trace,
        name: str = "connection",
    ) -> None:
        self.transport = transport
        self.name = name
        self._tracer = tracer if tracer is not no_trace else None
        self._outbound: collections.deque[tuple[bytes, Callable[[], None] | None]] = collections.deque()
        self._outbound_bytes = 0
        self.max_outbound_bytes = max_outbound_bytes
        self.write_timeout = write_timeout
        self.idle_timeout = idle_timeout
        """Close after this many seconds without an incoming message while :meth:`idle`."""
        self._waiting_since: float | None = None  # when the pending receive began (idle timeout)
        self._writer: trio.lowlevel.Task | None = None
        self._writing = False
        self._connection_scope: trio.CancelScope | None = None
        self._read_scope: trio.CancelScope | None = None
        self._pending: dict[jsonrpc.RequestId, Reply[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self.dropped = 0
        self.closed = False
        self.overflowed = False
        """Whether the connection was closed because the peer did not read."""
        self.nursery: trio.Nursery | None = None
        self._direct: DirectTransport | None = None
        self.reading = True
        """False once :meth:`stop_reading` was called: nothing more is served."""
        if isinstance(transport, DirectTransport):
            self._direct = transport
            transport.attach(self)

    @property
    def outbound_bytes(self) -> int:
        """Bytes queued and not yet written."""
        return self._outbound_bytes

    # -- outgoing -------------------------------------------------------------------------
    def post(
        self,
        data: bytes,
        on_written: Callable[[], None] | None = None,
        answer_to: jsonrpc.RequestId | None = None,
    ) -> bool:
        """Queue one encoded message, never waiting. False (and nothing queued) once the
        connection is closed; past ``max_outbound_bytes`` the peer is not reading and the
        connection is closed."""
        if self.closed or self.overflowed:  # overflowed: closing; nothing more is kept for it
            return False
        direct = self._direct
        if direct is not None:  # handed over at once: the transport buffers, never waits
            if self._tracer is not None:
                self._tracer("message.out", {"connection": self.name, "data": data})
            if on_written is not None:
                on_written()
            try:
                direct.send_nowait(data, answer_to)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed = True
                self.abort()
                return False
            return True
        self._outbound.append((data, on_written))
        self._outbound_bytes += len(data)
        if self._outbound_bytes > self.max_outbound_bytes:
            log.warning(
                "%s: %d bytes wait for a peer that does not read; closing the connection",
                self.name,
                self._outbound_bytes,
            )
            self.overflowed = True
            self.abort()
        self._wake_writer()
        return True

    async def send(self, data: bytes) -> None:
        """Queue one encoded message (never waits); ConnectionClosed once closed."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self.post(data):
            raise ConnectionClosed

    def _wake_writer(self) -> None:
        writer, self._writer = self._writer, None
        if writer is not None:
            trio.lowlevel.reschedule(writer)

    def stop_reading(self) -> None:
        """Read nothing more; what is queued is still written (as after the peer's end of input)."""
        self.reading = False
        if self._read_scope is not None:
            self._read_scope.cancel()

    def abort(self) -> None:
        """Close the connection now (the reader stops, pending requests fail)."""
        if self._connection_scope is not None:
            self._connection_scope.cancel()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        """Send a notification unless too much waits already; False if it was dropped."""
        if self.closed:
            return False
        return self.notify_encoded(jsonrpc.encode_notification(method, params))

    def notify_encoded(self, data: bytes) -> bool:
        """:meth:`notify` for a notification already encoded."""
        if self.closed:
            return False
        if self._outbound_bytes > self.max_outbound_bytes // NOTIFICATION_ROOM_FRACTION:
            self.dropped += 1
            return False
        return self.post(data)

    async def respond(
        self, id: jsonrpc.RequestId, result: dict[str, Any], on_written: Callable[[], None] | None = None
    ) -> None:
        try:
            data = jsonrpc.encode_response(id, result)
        except (ValueError, TypeError) as exc:  # e.g. NaN, or an object JSON cannot hold
            log.error("cannot encode the result for request %r: %r", id, exc)
            data = jsonrpc.encode_error(id, INTERNAL_ERROR, f"Internal error: result is not JSON: {exc}")
        await self._send_answer(data, on_written)

    async def respond_error(
        self, id: jsonrpc.RequestId | None, error: ErrorValue, on_written: Callable[[], None] | None = None
    ) -> None:
        await self._send_answer(jsonrpc.encode_error(id, error.code, error.message, error.data), on_written)

    async def _send_answer(self, data: bytes, on_written: Callable[[], None] | None) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if not self.post(data, on_written):
            raise ConnectionClosed

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
        paced = send_many is not None and getattr(self.transport, "paced_input", False)
        # A transport that times its own writes (stdio) starts a timer only for a write that
        # has to wait: a cancel scope around every write costs about as much as a request.
        send_within = getattr(self.transport, "send_many_within", None)
        write_timeout = self.write_timeout if math.isfinite(self.write_timeout) else math.inf
        outbound = self._outbound
        while True:
            if not outbound:
                if self.closed:
                    return
                self._writer = trio.lowlevel.current_task()

                def abort(_: Any) -> trio.lowlevel.Abort:
                    self._writer = None
                    return trio.lowlevel.Abort.SUCCEEDED

                await trio.lowlevel.wait_task_rescheduled(abort)
                continue
            if paced:
                # A burst of requests may still be being read, each in a scheduler round of its
                # own (see BatchTransport.paced_input), and each answer would be a write of its
                # own. While the queue grew in the last two rounds, wait one more (two: Trio
                # runs a round's tasks in no fixed order, so one round may show no answer
                # while the burst goes on): the burst's answers go out in one write. At most
                # MAX_BATCH answers, HOLD_BYTES, are held back.
                queued = len(outbound)
                still = 0
                while still < 2 and queued < MAX_BATCH and self._outbound_bytes < HOLD_BYTES:
                    await trio.lowlevel.checkpoint()
                    still = still + 1 if len(outbound) == queued else 0
                    queued = len(outbound)
            batch: list[bytes] = []
            callbacks: list[Callable[[], None]] = []
            size = 0
            self._writing = True
            while outbound and len(batch) < MAX_BATCH:
                data, on_written = outbound.popleft()
                batch.append(data)
                size += len(data)
                if on_written is not None:
                    callbacks.append(on_written)
            if self._tracer is not None:
                for item in batch:
                    self._tracer("message.out", {"connection": self.name, "data": item})
            # Handed to the transport: from here the peer may have them (a peer that reads the
            # bytes and hangs up at once must not find its answers treated as never sent).
            for callback in callbacks:
                callback()
            try:
                if send_within is not None:
                    in_time = await send_within(batch, write_timeout)
                else:
                    with trio.move_on_after(write_timeout) as timer:
                        if send_many is not None and len(batch) > 1:
                            await send_many(batch)
                        else:
                            for item in batch:
                                await self.transport.send(item)
                    in_time = not timer.cancelled_caught
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed = True
                self.abort()
                return
            finally:
                self._writing = False
                self._outbound_bytes -= size
            if not in_time:
                log.warning(
                    "%s: a write took over %gs; the peer is not reading: closing",
                    self.name,
                    self.write_timeout,
                )
                self.overflowed = True
                self.abort()
                return

    async def _read_loop(self) -> None:
        # The transport hands on parsed messages (parsed once, where they were framed).
        while True:
            try:
                message = await self._receive()
            except (trio.EndOfChannel, trio.BrokenResourceError, trio.ClosedResourceError):
                return
            await self.deliver(message)

    async def deliver(self, message: jsonrpc.Received) -> None:
        """Serve one received message, in the calling Trio task: the reader calls it for each
        message it reads, and the caller of a direct transport for each it is given (ignored
        once :meth:`stop_reading` was called)."""
        if not self.reading:
            return
        if self._tracer is not None:
            self._tracer("message.in", {"connection": self.name, "data": _traced(message)})
        if isinstance(message, jsonrpc.Request):
            await self.on_request(message)
        elif isinstance(message, jsonrpc.Notification):
            await self.on_notification(message)
        elif isinstance(message, jsonrpc.Unreadable):
            error = message.response
            await self.send(jsonrpc.encode_error(error.id, error.error.code, error.error.message))
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

    async def answer(
        self, request: jsonrpc.Request, handler: Handler, on_written: Callable[[], None] | None = None
    ) -> bool:
        """Run ``handler`` and send its result, or the JSON-RPC error it stands for; whether an
        answer was queued (not for :data:`NO_RESPONSE`).

        Anything but McpError is a bug in a handler: logged, answered -32603, never raised.
        ``on_written`` runs once the answer was written (not if the connection closed first).
        """
        try:
            result = await handler(request)
        except McpError as exc:
            await self.respond_error(request.id, exc.value, on_written)
        except MailboxFull:
            await self.respond_error(request.id, OVERLOADED, on_written)
        except ConnectionClosed:
            raise
        except Exception as exc:
            log.error("handler for %s failed: %r", request.method, exc, exc_info=exc)
            error = ErrorValue(INTERNAL_ERROR, f"Internal error: {exc}")
            await self.respond_error(request.id, error, on_written)
        else:
            if result is NO_RESPONSE:
                return False
            await self.respond(request.id, result, on_written)
        return True

    def on_input_ended(self) -> None:
        """Called when the peer ended its input cleanly, before what is on its way is written
        (override)."""

    def on_disconnect(self) -> None:
        """Called once when the peer is gone, before pending requests fail (override)."""

    async def on_request(self, request: jsonrpc.Request) -> None:
        await self.respond_error(
            request.id, ErrorValue(METHOD_NOT_FOUND, f"Method not found: {request.method}")
        )

    async def on_notification(self, notification: jsonrpc.Notification) -> None:
        return None

    def quiet(self) -> bool:
        """Whether no answer is on its way (override: a session's queries in flight)."""
        return True

    def idle(self) -> bool:
        """Whether nothing is going on that the peer waits for (override)."""
        return True

    async def _receive(self) -> jsonrpc.Received:
        if self.idle_timeout is None:
            return await self.transport.receive()
        # The wait is timed by _watch_idle, not by a cancel scope per message (one costs as
        # much as a small request).
        self._waiting_since = trio.current_time()
        try:
            return await self.transport.receive()
        finally:
            self._waiting_since = None

    async def _watch_idle(self, watch: trio.CancelScope) -> None:
        """End the reading, as the peer's end of input would, once a receive has waited
        :attr:`idle_timeout` seconds while :meth:`idle`; a receive that waited as long while
        something goes on waits as long again. Wakes about once per timeout, however many
        messages come."""
        timeout = self.idle_timeout
        assert timeout is not None
        with watch:
            while True:
                since = self._waiting_since
                now = trio.current_time()
                if since is not None and now - since >= timeout:
                    if self.idle():
                        log.info("%s: idle for %gs; closing the connection", self.name, timeout)
                        self.stop_reading()
                        return
                    self._waiting_since = since = now
                await trio.sleep_until((now if since is None else since) + timeout)

    async def run_connection(self, nursery: trio.Nursery) -> None:
        """Read until the peer hangs up; the writer runs in ``nursery``.

        When the peer ends its side cleanly (end of input), what is already on its way is
        still written — queued messages and the answers of queries in flight — for up to
        :data:`DRAIN_TIMEOUT` seconds: a request followed at once by end of input is answered.
        """
        self.nursery = nursery
        idle_watch = trio.CancelScope()
        if self._direct is None:
            nursery.start_soon(self._write_loop)
            if self.idle_timeout is not None:
                nursery.start_soon(self._watch_idle, idle_watch)
        try:
            with trio.CancelScope() as scope:
                self._connection_scope = scope
                with trio.CancelScope() as self._read_scope:
                    await self._read_loop()
            if not scope.cancelled_caught:
                self.on_input_ended()
                with trio.move_on_after(DRAIN_TIMEOUT):
                    # A short bounded poll, once, at the end of a connection.
                    while (self._outbound or self._writing or not self.quiet()) and not self.closed:  # noqa: ASYNC110
                        await trio.sleep(DRAIN_POLL)
        except ConnectionClosed:
            log.debug("%s: peer went away while we were answering", self.name)
        except Exception as exc:  # a bug in a handler: close this connection, keep the process
            log.error("connection failed: %r", exc, exc_info=exc)
            raise
        finally:
            idle_watch.cancel()
            self.closed = True
            self._wake_writer()
            self.on_disconnect()
            self._fail_pending()
