"""The MCP server API: declare tools on a :class:`Server`, then serve it over any transport.

>>> from trio_mcp.server import Context, Server, ServerRuntime, TaskLimits, serve_websocket
"""

from ..actors.supervisor import TaskLimits
from ._context import Context
from ._server import GC_THRESHOLD, RegisteredTool, Server, ServerRuntime, tune_gc
from ._websocket import serve_websocket

__all__ = [
    "GC_THRESHOLD",
    "Context",
    "RegisteredTool",
    "Server",
    "ServerRuntime",
    "TaskLimits",
    "serve_websocket",
    "tune_gc",
]
