"""The MCP client: one connection to a server, over any transport.

>>> from trio_mcp.client import Client, connect, connect_in_memory, connect_stdio, connect_websocket
>>> from trio_mcp.client import connect_http
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
from ._http import HttpTransport, connect_http, open_http_transport
from ._websocket import connect_websocket

__all__ = [
    "Client",
    "ConnectionClosed",
    "ElicitationHandler",
    "HttpTransport",
    "ProgressCallback",
    "SamplingHandler",
    "Servable",
    "StatusCallback",
    "connect",
    "connect_http",
    "connect_in_memory",
    "connect_stdio",
    "connect_websocket",
    "open_http_transport",
]
