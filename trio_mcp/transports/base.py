"""The one interface every transport implements: whole JSON-RPC messages in and out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

__all__ = [
    "DEFAULT_MAX_MESSAGE_SIZE",
    "BatchTransport",
    "MessageTooLarge",
    "Transport",
]

DEFAULT_MAX_MESSAGE_SIZE = 4 * 1024 * 1024
"""Largest message (in bytes, without framing) a transport accepts by default: 4 MiB."""


class MessageTooLarge(Exception):
    """An incoming message exceeded the transport's limit and was discarded.

    The transport stays usable: the next ``receive()`` returns the message after it.
    """

    def __init__(self, limit: int) -> None:
        super().__init__(f"message exceeds the {limit} byte limit")
        self.limit = limit


class Transport(Protocol):
    """A bidirectional stream of serialized JSON-RPC messages.

    ``send`` takes one encoded message (UTF-8 JSON, no framing); ``receive`` returns the next
    one, raises :class:`trio.EndOfChannel` when the peer has closed cleanly, and
    :class:`MessageTooLarge` for an oversized message it skipped. A transport serialises
    concurrent ``send`` calls itself, so that frames never interleave.
    """

    async def send(self, message: bytes) -> None: ...

    async def receive(self) -> bytes: ...

    async def aclose(self) -> None: ...


class BatchTransport(Transport, Protocol):
    """A transport that can also write several messages at once (one system call for stdio)."""

    async def send_many(self, messages: Sequence[bytes]) -> None: ...
