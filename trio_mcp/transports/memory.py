"""In-memory transports: a connected pair, for tests and for embedding a server in-process."""

from __future__ import annotations

import math

import attrs
import trio

from ..protocol import jsonrpc
from .base import DEFAULT_MAX_MESSAGE_SIZE

__all__ = [
    "MemoryTransport",
    "memory_transport_pair",
]


@attrs.define(eq=False)
class MemoryTransport:
    """One end of an in-memory connection. Create both ends with :func:`memory_transport_pair`."""

    _outgoing: trio.MemorySendChannel[bytes]
    _incoming: trio.MemoryReceiveChannel[bytes]
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE

    async def send(self, message: bytes) -> None:
        try:
            await self._outgoing.send(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise trio.BrokenResourceError("peer closed") from exc

    async def receive(self) -> jsonrpc.Received:
        """The next message, parsed (over ``max_message_size`` bytes: skipped, and
        :func:`~trio_mcp.protocol.jsonrpc.too_large` handed on)."""
        try:
            message = await self._incoming.receive()
        except trio.ClosedResourceError as exc:
            raise trio.EndOfChannel from exc
        if len(message) > self.max_message_size:
            return jsonrpc.too_large(self.max_message_size)
        return jsonrpc.read(message)

    async def receive_bytes(self) -> bytes:
        """The next message as sent, unparsed (a raw peer's view, for tests)."""
        try:
            return await self._incoming.receive()
        except trio.ClosedResourceError as exc:
            raise trio.EndOfChannel from exc

    async def aclose(self) -> None:
        await self._outgoing.aclose()
        await self._incoming.aclose()


def memory_transport_pair(
    buffer: float = math.inf, max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
) -> tuple[MemoryTransport, MemoryTransport]:
    """Two connected transports: what one sends, the other receives.

    >>> client_side, server_side = memory_transport_pair()
    """
    a_send, b_recv = trio.open_memory_channel[bytes](buffer)
    b_send, a_recv = trio.open_memory_channel[bytes](buffer)
    return (
        MemoryTransport(a_send, a_recv, max_message_size),
        MemoryTransport(b_send, b_recv, max_message_size),
    )
