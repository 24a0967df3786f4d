"""trio-mcp: MCP servers on Trio whose long-running tool calls are tasks, built as actors.

>>> from trio_mcp import Server, Context
>>> server = Server("demo", version="1.0")
>>> @server.tool(task_support="optional")
... async def echo(text: str) -> str:
...     return text
"""

from .actors.supervisor import TaskLimits
from .client import Client, ConnectionClosed, connect, connect_in_memory, connect_stdio, connect_websocket
from .protocol.errors import ErrorValue, McpError
from .protocol.messages import CallToolResult, Task, TextContent, Tool
from .protocol.records import TaskOutcome, TaskRecord
from .protocol.tasks import TaskStatus
from .server import Context, Server, ServerRuntime, serve_websocket

__all__ = [
    "CallToolResult",
    "Client",
    "ConnectionClosed",
    "Context",
    "ErrorValue",
    "McpError",
    "Server",
    "ServerRuntime",
    "Task",
    "TaskLimits",
    "TaskOutcome",
    "TaskRecord",
    "TaskStatus",
    "TextContent",
    "Tool",
    "connect",
    "connect_in_memory",
    "connect_stdio",
    "connect_websocket",
    "serve_websocket",
]
