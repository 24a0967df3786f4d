"""Transports: whole JSON-RPC messages in and out over stdio, memory or WebSocket.

Import the submodules (``trio_mcp.transports.stdio``, ...) directly.
"""

__all__: list[str] = []
