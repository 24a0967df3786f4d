"""trio-mcp: MCP servers on Trio whose long-running tool calls are tasks, built as actors.

>>> from trio_mcp import Server, Context
>>> server = Server("demo", version="1.0")
>>> @server.tool(task_support="optional")
... async def echo(text: str) -> str:
...     return text

The names below are loaded on first use, so ``import trio_mcp.protocol`` (the sans-IO layer)
never imports Trio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .actors.supervisor import TaskLimits
    from .client import (
        Client,
        ConnectionClosed,
        connect,
        connect_http,
        connect_in_memory,
        connect_stdio,
        connect_websocket,
    )
    from .protocol.errors import ErrorValue, McpError
    from .protocol.messages import CallToolResult, Task, TextContent, Tool
    from .protocol.records import TaskOutcome, TaskRecord
    from .protocol.tasks import TaskStatus
    from .server import (
        Context,
        ResourceNotFound,
        Server,
        ServerRuntime,
        ThreadContext,
        mcp_asgi_app,
        serve_http,
        serve_websocket,
    )

_WHERE = {
    "CallToolResult": ".protocol.messages",
    "Client": ".client",
    "ConnectionClosed": ".client",
    "Context": ".server",
    "ErrorValue": ".protocol.errors",
    "McpError": ".protocol.errors",
    "ResourceNotFound": ".server",
    "Server": ".server",
    "ServerRuntime": ".server",
    "Task": ".protocol.messages",
    "TaskLimits": ".actors.supervisor",
    "TaskOutcome": ".protocol.records",
    "TaskRecord": ".protocol.records",
    "TaskStatus": ".protocol.tasks",
    "TextContent": ".protocol.messages",
    "ThreadContext": ".server",
    "Tool": ".protocol.messages",
    "connect": ".client",
    "connect_http": ".client",
    "connect_in_memory": ".client",
    "connect_stdio": ".client",
    "connect_websocket": ".client",
    "mcp_asgi_app": ".server",
    "serve_http": ".server",
    "serve_websocket": ".server",
}

__all__ = [
    "CallToolResult",
    "Client",
    "ConnectionClosed",
    "Context",
    "ErrorValue",
    "McpError",
    "ResourceNotFound",
    "Server",
    "ServerRuntime",
    "Task",
    "TaskLimits",
    "TaskOutcome",
    "TaskRecord",
    "TaskStatus",
    "TextContent",
    "ThreadContext",
    "Tool",
    "connect",
    "connect_http",
    "connect_in_memory",
    "connect_stdio",
    "connect_websocket",
    "mcp_asgi_app",
    "serve_http",
    "serve_websocket",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'trio_mcp' has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
