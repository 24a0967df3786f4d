"""The MCP client: one connection to a server, over any transport.

>>> from trio_mcp.client import Client, connect, connect_in_memory, connect_stdio, connect_websocket
"""

from ._client import (
    Client,
    ConnectionClosed,
    ElicitationHandler,
    ProgressCallback,
    SamplingHandler,
    Servable,
    StatusCallback,
    connect,
    connect_in_memory,
    connect_stdio,
)
from ._websocket import connect_websocket

__all__ = [
    "Client",
    "ConnectionClosed",
    "ElicitationHandler",
    "ProgressCallback",
    "SamplingHandler",
    "Servable",
    "StatusCallback",
    "connect",
    "connect_in_memory",
    "connect_stdio",
    "connect_websocket",
]
