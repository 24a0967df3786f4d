"""trio-mcp: MCP servers on Trio whose long-running tool calls are tasks, built as actors.

>>> from trio_mcp import Server, Context
>>> server = Server("demo", version="1.0")
>>> @server.tool(task_support="optional")
... async def echo(text: str) -> str:
...     return text
"""

from .actors.client import Client, connect, connect_in_memory, connect_stdio
from .actors.context import Context
from .actors.server import Server, ServerRuntime
from .actors.supervisor import TaskLimits
from .protocol.errors import McpError
from .protocol.messages import CallToolResult, Task, TextContent, Tool
from .protocol.tasks import TaskStatus

__all__ = [
    "CallToolResult",
    "Client",
    "Context",
    "McpError",
    "Server",
    "ServerRuntime",
    "Task",
    "TaskLimits",
    "TaskStatus",
    "TextContent",
    "Tool",
    "connect",
    "connect_in_memory",
    "connect_stdio",
]
