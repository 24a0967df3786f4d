"""The one interface every transport implements: parsed JSON-RPC messages in, encoded
messages out.

A transport parses what it receives once (:func:`~trio_mcp.protocol.jsonrpc.read`) and hands
the runtime the message, or an :class:`~trio_mcp.protocol.jsonrpc.Unreadable` value for input
that is not one (or is over its size limit); the runtime encodes each answer once, and the
transport frames and writes those bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from ..protocol.jsonrpc import Received, RequestId

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "BatchTransport",
    "DirectTransport",
    "MessageTooLarge",
    "Receiver",
    "Transport",
]

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""Largest message (in bytes, without framing) a transport accepts by default: 4 MiB."""


class MessageTooLarge(Exception):
    """An incoming message exceeded the transport's limit and was discarded (a framer's
    internal signal: ``receive`` hands on :func:`~trio_mcp.protocol.jsonrpc.too_large`).

    The transport stays usable: the next ``receive()`` returns the message after it.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"message exceeds the {limit} byte limit")
        self.limit = limit


class Transport(Protocol):
    """A bidirectional stream of JSON-RPC messages.

    ``send`` takes one encoded message (UTF-8 JSON, no framing); ``receive`` returns the next
    one parsed — or an :class:`~trio_mcp.protocol.jsonrpc.Unreadable` for input that is not a
    message, or over the size limit (skipped) — and raises :class:`trio.EndOfChannel` when
    the peer has closed cleanly. A transport serialises concurrent ``send`` calls itself, so
    that frames never interleave.
    """

    async def send(self, message: bytes) -> None: ...

    async def receive(self) -> Received: ...

    async def aclose(self) -> None: ...


class BatchTransport(Transport, Protocol):
    """A transport that can also write several messages at once (one system call for stdio).

    One may also say, by a class attribute ``paced_input = True``, that each message it
    receives costs its reader a scheduler round (another Trio task hands them over one at a
    time, as trio-websocket's does): a writer then holds the answers back while a burst is
    still being read, and writes them together. Without it (stdio reads a burst in one round)
    every answer queued goes out as soon as the writer runs.
    """

    async def send_many(self, messages: Sequence[bytes]) -> None: ...


class Receiver(Protocol):
    """What serves a :class:`DirectTransport`'s messages: the endpoint (session) on it."""

    async def deliver(self, message: Received) -> None:
        """Serve one message in the caller's Trio task (as the endpoint's reader would)."""
        ...

    def abort(self) -> None:
        """End the connection now (after a message failed in a way no answer covers)."""
        ...


@runtime_checkable
class DirectTransport(Transport, Protocol):
    """A transport that is fed by its caller rather than read, and never waits to send.

    An HTTP session is one: each POST hands its message to the session in the POST's own Trio
    task (:meth:`Receiver.deliver`) instead of through a reader task, and what the session sends
    is routed into the session's streams at once (``send_nowait``), so a request answered at
    once costs no task switch. ``attach`` is called once, by the endpoint that serves the
    transport, when it is made; ``receive`` then only reports the end of input.

    A request that waits on work and may be stopped only by its client (a plain
    ``tools/call``) is served in the deliverer's task too: ``deliver`` returns once it is
    answered, and what it sends meanwhile (progress, a request to the client) comes through
    ``send_nowait`` as ever; the deliverer must keep that moving from another task (an HTTP
    POST starts its SSE stream's writer). Such a call is cancelled with the deliverer's task,
    unless the transport :attr:`shields_calls`.
    """

    shields_calls: bool
    """True: only the session stops a call served in the deliverer's task
    (``notifications/cancelled``, its end, shutdown), for a deliverer whose task may be
    cancelled by what must not stop the call (its connection's end)."""

    def attach(self, receiver: Receiver) -> None: ...

    def call_started(self, request_id: RequestId) -> None:
        """The call of ``request_id`` starts in the deliverer's task now (see above): what
        must go on meanwhile (a timer that turns its answer into a stream) starts here."""
        ...

    def send_nowait(self, message: bytes, answer_to: RequestId | None = None) -> None:
        """Take one encoded message — the answer to request ``answer_to``, when the sender
        knows it is one (so that it need not be parsed again to be routed);
        ``trio.ClosedResourceError`` once closed."""
        ...
