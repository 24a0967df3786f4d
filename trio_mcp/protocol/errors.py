"""JSON-RPC and MCP error codes, and the exception that carries one."""

from __future__ import annotations

from typing import Any

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603

# Implementation-defined server errors (the -32000..-32099 range JSON-RPC reserves for servers).
TASK_LIMIT_REACHED = -32010
"""The requestor already has the maximum number of live tasks."""
TASK_CANCELLED = -32011
"""``tasks/result`` of a cancelled task: the underlying request never produced an answer."""

URL_ELICITATION_REQUIRED = -32042
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022


class McpError(Exception):
    """An error that becomes a JSON-RPC error response.

    Raise it from any request handler (or a tool, to fail the request with a protocol error
    rather than an ``isError`` result)::

        raise McpError(INVALID_PARAMS, "Unknown tool: 'nope'")
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    def __repr__(self) -> str:
        return f"McpError({self.code}, {self.message!r})"
