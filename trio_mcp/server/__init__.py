"""The MCP server API: declare tools on a :class:`Server`, then serve it over any transport.

>>> from trio_mcp.server import Context, Server, ServerRuntime, TaskLimits, serve_websocket
>>> from trio_mcp.server import mcp_asgi_app, serve_http
"""

from ..protocol.table import TaskLimits
from ._context import Context, ThreadContext, ToolCancelled
from ._http import McpHttpApp, mcp_asgi_app, serve_http
from ._options import RunOptions, parse_run_args
from ._server import (
    GC_FULL_AFTER,
    GC_THRESHOLD,
    Lifespan,
    RegisteredTool,
    Server,
    ServerRuntime,
    StartupError,
    tune_gc,
)
from ._surface import ResourceNotFound
from ._websocket import serve_websocket
from .middleware import Middleware, RateLimit, RequestInfo, RequestLog, ToolCallInfo

__all__ = [
    "GC_FULL_AFTER",
    "GC_THRESHOLD",
    "Context",
    "Lifespan",
    "McpHttpApp",
    "Middleware",
    "RateLimit",
    "RegisteredTool",
    "RequestInfo",
    "RequestLog",
    "ResourceNotFound",
    "RunOptions",
    "Server",
    "ServerRuntime",
    "StartupError",
    "TaskLimits",
    "ThreadContext",
    "ToolCallInfo",
    "ToolCancelled",
    "mcp_asgi_app",
    "parse_run_args",
    "serve_http",
    "serve_websocket",
    "tune_gc",
]
