"""JSON-RPC and MCP error codes, errors as values, and the exception that carries one.

Errors are values: an :class:`ErrorValue` is a frozen ``(code, message, data)`` that may be
kept in a task record, shared between requests and compared. Where an exception is needed,
:meth:`ErrorValue.exception` makes a **fresh** :class:`McpError` each time: a shared exception
instance raised again and again would grow its traceback with every raise (a leak a client
could drive), so no module of trio-mcp keeps one.

>>> NOT_FOUND = ErrorValue(INVALID_PARAMS, "Failed to retrieve task: Task not found")
>>> first, second = NOT_FOUND.exception(), NOT_FOUND.exception()
>>> first is second, first.value == second.value == NOT_FOUND
(False, True)
"""

from __future__ import annotations

from typing import Any

import attrs

__all__ = [
    "HEADER_MISMATCH",
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "MISSING_REQUIRED_CLIENT_CAPABILITY",
    "PARSE_ERROR",
    "TASK_CANCELLED",
    "TASK_LIMIT_REACHED",
    "UNSUPPORTED_PROTOCOL_VERSION",
    "URL_ELICITATION_REQUIRED",
    "ErrorValue",
    "McpError",
]

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


@attrs.frozen
class ErrorValue:
    """A JSON-RPC error as plain data: what an error response carries.

    ``data`` must be a JSON value (it goes on the wire and into task records as it is).
    """

    code: int
    message: str
    data: Any = None

    def exception(self) -> McpError:
        """A new :class:`McpError` carrying this value (raise it; never keep and re-raise it)."""
        return McpError(self.code, self.message, self.data)

    def to_json(self) -> dict[str, Any]:
        """The wire's error object: ``{"code", "message"[, "data"]}``.

        >>> ErrorValue(-32602, "bad").to_json()
        {'code': -32602, 'message': 'bad'}
        """
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data is not None:
            out["data"] = self.data
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> ErrorValue:
        return cls(int(obj["code"]), str(obj["message"]), obj.get("data"))


class McpError(Exception):
    """An error that becomes a JSON-RPC error response.

    Raise it from any request handler (or a tool, to fail the request with a protocol error
    rather than an ``isError`` result)::

        raise McpError(INVALID_PARAMS, "Unknown tool: 'nope'")

    Every instance is raised once: build a new one (or use :meth:`ErrorValue.exception`)
    for each failure.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data

    @property
    def value(self) -> ErrorValue:
        """This error as a value (to keep in a record or compare)."""
        return ErrorValue(self.code, self.message, self.data)

    def __repr__(self) -> str:
        return f"McpError({self.code}, {self.message!r})"
