"""Middleware: ordered async hooks around every request and every tool run.

A server may register two kinds (``Server.add_middleware``; the public side is
:mod:`trio_mcp.server.middleware`):

- **request middleware**, ``async def mw(request: RequestInfo, call_next) -> dict``: around the
  serving of each request a client sends, in both eras. ``await call_next()`` serves it and
  returns its result (a dict), or raises the :class:`~trio_mcp.protocol.errors.McpError` it is
  answered with; the middleware returns the result to answer with, or raises an McpError to
  answer with that error instead (without calling on, nothing is served: no task is created).
- **tool middleware**, ``async def hook(call: ToolCallInfo, call_next) -> value``: around each
  run of a tool whose arguments are valid — a plain call, or a task's work (it then runs inside
  the task, for the task's life). ``await call_next()`` runs the tool and returns what the tool
  returned (or raises what it raised); the hook returns the value the call's result is made
  from, or raises.

Either kind runs in registration order, the first registered outermost. An exception a
middleware raises itself (not an McpError, not one it let through from ``call_next``) is a bug:
logged once, answered -32603, and the connection goes on serving. Every ``call_next`` may be
called once.

:class:`Middlewares` is what the server hands the runtime (``Service.middleware_chain``), or
None when nothing is registered: a connection then serves by exactly the paths it has without
middleware (it looks once, when it opens).
"""

from __future__ import annotations

import functools
import logging
import types
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeAlias

import attrs

from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, McpError

__all__ = [
    "CallNext",
    "Middlewares",
    "RequestInfo",
    "RequestMiddleware",
    "ToolCallInfo",
    "ToolCallNext",
    "ToolMiddleware",
]

log = logging.getLogger("trio_mcp")

_NO_ARGUMENTS: Mapping[str, Any] = types.MappingProxyType({})


@attrs.frozen(kw_only=True)
class RequestInfo:
    """One request, as middleware sees it (read-only, but for :attr:`state`)."""

    method: str
    """The JSON-RPC method, ``tools/call``."""
    request_id: jsonrpc.RequestId
    params: Mapping[str, Any]
    """The request's params as sent (read them; do not change them)."""
    era: str
    """``"handshake"`` (MCP 2025-11-25 and before) or ``"modern"`` (2026-07-28)."""
    protocol_version: str | None
    """The version the request is served in (None: before ``initialize``)."""
    tool: str | None = None
    """The tool a ``tools/call`` names."""
    task_id: str | None = None
    """The task a ``tasks/*`` request names."""
    as_task: bool = False
    """A ``tools/call`` the server may run as a task (task-augmented, or 2026-07-28)."""
    owner: str
    """Whom the request's tasks belong to: ``identity:NAME``, ``connection:…``, ``anonymous``."""
    identity: str | None = None
    """The authenticated identity (a bearer token's subject), if any."""
    client: str | None = None
    """The client's network address, where the transport knows it."""
    session_id: str | None = None
    """The connection's session: its ``Mcp-Session-Id`` over Streamable HTTP (as telemetry's
    ``mcp.session.id``), ``session-N`` over stdio and WebSocket; None for a stateless
    2026-07-28 request."""
    state: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)
    """Scratch space for this request's middleware and its tool call's hooks."""


@attrs.frozen(kw_only=True)
class ToolCallInfo:
    """One run of a tool, as tool middleware sees it (read-only)."""

    tool: str
    arguments: Mapping[str, Any]
    """The arguments as the client sent them (already valid)."""
    task_id: str | None
    """The task the tool runs as (None: a plain call)."""
    request: RequestInfo
    """The request that started it (for a task: the one that created it)."""

    @property
    def era(self) -> str:
        return self.request.era

    @property
    def identity(self) -> str | None:
        return self.request.identity

    @property
    def session_id(self) -> str | None:
        return self.request.session_id


CallNext: TypeAlias = Callable[[], Awaitable[dict[str, Any]]]
RequestMiddleware: TypeAlias = Callable[[RequestInfo, CallNext], Awaitable[dict[str, Any]]]
ToolCallNext: TypeAlias = Callable[[], Awaitable[Any]]
ToolMiddleware: TypeAlias = Callable[[ToolCallInfo, ToolCallNext], Awaitable[Any]]


def _called_twice() -> RuntimeError:
    return RuntimeError("call_next() may be called once")


class Middlewares:
    """The middleware a server registered, in order: what the runtime runs them by."""

    __slots__ = ("requests", "tools")

    def __init__(self, requests: Sequence[RequestMiddleware], tools: Sequence[ToolMiddleware]) -> None:
        self.requests = tuple(requests)
        self.tools = tuple(tools)

    # -- requests -----------------------------------------------------------------------------
    async def serve(
        self, info: RequestInfo, inner: Callable[[], Awaitable[dict[str, Any]]]
    ) -> dict[str, Any]:
        """Serve a request through the request middleware: ``inner()`` serves it (its result,
        or the McpError it is answered with). A middleware's own exception is logged here and
        raised as -32603; what ``inner`` raised goes on as it is."""
        called = False
        raised: BaseException | None = None

        async def innermost() -> dict[str, Any]:
            nonlocal called, raised
            if called:
                raise _called_twice()
            called = True
            try:
                return await inner()
            except BaseException as exc:
                raised = exc
                raise

        try:
            result = await self._request_layer(0, info, innermost)
        except McpError:
            raise
        except Exception as exc:
            if exc is raised:
                raise  # the request's own failure: answered as without middleware
            log.error("middleware failed on %s: %r", info.method, exc, exc_info=exc)
            raise McpError(INTERNAL_ERROR, f"Internal error: {exc}") from None
        if not isinstance(result, dict):
            log.error("middleware returned %r for %s, not a result (a dict)", type(result), info.method)
            raise McpError(INTERNAL_ERROR, "Internal error: middleware returned no result")
        return result

    def _request_layer(
        self, index: int, info: RequestInfo, innermost: Callable[[], Coroutine[Any, Any, dict[str, Any]]]
    ) -> Awaitable[dict[str, Any]]:
        if index == len(self.requests):
            return innermost()
        return self.requests[index](info, functools.partial(self._request_layer, index + 1, info, innermost))

    # -- tool runs ----------------------------------------------------------------------------
    def run_tool(
        self,
        tool: str,
        arguments: Mapping[str, Any] | None,
        task_id: str | None,
        request: RequestInfo,
        running: Awaitable[Any],
    ) -> Awaitable[Any]:
        """``running`` (the tool's started coroutine) run through the tool middleware."""
        info = ToolCallInfo(
            tool=tool,
            arguments=types.MappingProxyType(arguments) if arguments else _NO_ARGUMENTS,
            task_id=task_id,
            request=request,
        )
        return self._run_tool(info, running)

    async def _run_tool(self, info: ToolCallInfo, running: Awaitable[Any]) -> Any:
        called = False
        raised: BaseException | None = None

        async def innermost() -> Any:
            nonlocal called, raised
            if called:
                raise _called_twice()
            called = True
            try:
                return await running
            except BaseException as exc:
                raised = exc
                raise

        try:
            return await self._tool_layer(0, info, innermost)
        except McpError:
            raise
        except Exception as exc:
            if exc is raised:
                raise  # the tool's own exception: an isError result, as without middleware
            log.error("tool middleware failed on tool %s: %r", info.tool, exc, exc_info=exc)
            raise McpError(INTERNAL_ERROR, f"Internal error: {exc}") from None
        finally:
            if not called and isinstance(running, Coroutine):
                running.close()  # refused: the tool never runs

    def _tool_layer(
        self, index: int, info: ToolCallInfo, innermost: Callable[[], Coroutine[Any, Any, Any]]
    ) -> Awaitable[Any]:
        if index == len(self.tools):
            return innermost()
        return self.tools[index](info, functools.partial(self._tool_layer, index + 1, info, innermost))
