"""Sans-IO MCP: JSON-RPC framing, message classes, the task state machine and the era dialects.

Nothing here imports Trio; import the submodules (``trio_mcp.protocol.messages``, ...) directly.
"""

__all__: list[str] = []
