"""Connecting a :class:`~trio_mcp.Client` over WebSocket."""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from ..transports.base import DEFAULT_MAX_MESSAGE_SIZE
from ..transports.websocket import CONNECT_TIMEOUT, open_websocket_transport
from ._client import Client, connect

__all__ = ["connect_websocket"]


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
    **options: Any,
) -> AsyncIterator[Client]:
    """Connect a :class:`~trio_mcp.Client` to the MCP server at ``url`` (initialized by default).

    Arguments as for :func:`open_websocket_transport`; ``options`` (``protocol``, ``on_elicit``,
    ``on_sample``, ``tasks_extension``) as for :func:`~trio_mcp.client.connect`.

    >>> # async with connect_websocket("ws://127.0.0.1:8765/", token="s3cret") as client:
    >>> #     created = await client.call_tool_as_task("sleep", {"seconds": 2})
    """
    async with (
        open_websocket_transport(
            url,
            token=token,
            origin=origin,
            max_message_size=max_message_size,
            connect_timeout=connect_timeout,
            ssl_context=ssl_context,
        ) as transport,
        connect(transport, initialize=initialize, **options) as client,
    ):
        yield client
