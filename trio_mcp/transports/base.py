"""The one interface every transport implements: parsed JSON-RPC messages in, encoded
messages out.

A transport parses what it receives once (:func:`~trio_mcp.protocol.jsonrpc.read`) and hands
the runtime the message, or an :class:`~trio_mcp.protocol.jsonrpc.Unreadable` value for input
that is not one (or is over its size limit); the runtime encodes each answer once, and the
transport frames and writes those bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from ..protocol.jsonrpc import Received

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "BatchTransport",
    "MessageTooLarge",
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
    """A transport that can also write several messages at once (one system call for stdio)."""

    async def send_many(self, messages: Sequence[bytes]) -> None: ...
