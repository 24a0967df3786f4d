"""SessionActor: one per connection. It speaks MCP 2025-11-25 (and the older handshake-era
versions) to one client, and turns task requests into messages to the TaskSupervisor.

Quick requests (ping, lists, task get/cancel/create) are answered in order by the reader;
requests that wait on work (a plain ``tools/call``, ``tasks/result``) run in their own Trio task
so any number can be open at once, and ``notifications/cancelled`` stops them. Nothing a client
sends reaches past this actor as an exception: every failure becomes a JSON-RPC error.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import trio
from outcome import Outcome

from ..protocol import jsonrpc
from ..protocol.converter import structure, unstructure
from ..protocol.cursors import decode_cursor, encode_cursor
from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, McpError
from ..protocol.messages import (
    MODEL_IMMEDIATE_RESPONSE_KEY,
    CallToolParams,
    CancelledParams,
    InitializeParams,
    InitializeResult,
    PaginatedParams,
    SetLevelParams,
)
from ..protocol.versions import has_tasks, negotiate
from ..transports.base import Transport
from .context import Context, level_passes
from .endpoint import ConnectionClosed, Endpoint, Handler
from .receiver import Started, TaskReceiver
from .requestor import TaskRequestor
from .runtime import MailboxFull
from .supervisor import OwnerGone, TaskSupervisor
from .task_actor import TaskActor, TaskOutcome

if TYPE_CHECKING:
    from .server import RegisteredTool, Server

log = logging.getLogger("trio_mcp")


MAX_WAITING_REQUESTS = 256
"""Requests one session may have outstanding (``tools/call``, ``tasks/result``, and task queries
awaiting the supervisor) before its reader stops reading: backpressure on that client."""

SERVER_TASK_CAPABILITIES: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}


@attrs.frozen
class ConnectionOwner:
    """The default owner of a session's tasks: the connection itself."""

    number: int


_connections = iter(range(1, 2**63))


class SessionActor(Endpoint):
    def __init__(
        self, server: Server, supervisor: TaskSupervisor, transport: Transport, *, owner: object | None = None
    ) -> None:
        number = next(_connections)
        super().__init__(transport, tracer=supervisor.tracer, name=f"session-{number}")
        self.server = server
        self.supervisor = supervisor
        self.connection_owned = owner is None
        self.owner: object = owner if owner is not None else ConnectionOwner(number)
        self.protocol_version: str | None = None
        self.client_capabilities: dict[str, Any] = {}
        self.client_info: Any = None
        self.log_level: str | None = None
        self._in_flight: dict[jsonrpc.RequestId, trio.CancelScope] = {}
        self._slots = trio.Semaphore(MAX_WAITING_REQUESTS)
        self.receiver = TaskReceiver(self, supervisor, self.owner)
        self.client_tasks = TaskRequestor(self)
        """Follow the tasks this session's client runs for the server (see Context.elicit_task)."""
        self._nursery: trio.Nursery | None = None
        self._quick: dict[str, Handler] = {
            "ping": self._ping,
            "initialize": self._initialize,
            "tools/list": self._tools_list,
            "logging/setLevel": self._set_level,
        }
        # Task queries: sent to the supervisor and answered from the reply's continuation, so
        # the reader goes on with the next request at once (pipelined clients: one scheduler
        # round per burst, not per request). FIFO mailboxes keep them in order.
        self._started: dict[str, Callable[[jsonrpc.Request], Started]] = {
            "tasks/get": self.receiver.start_get,
            "tasks/cancel": self.receiver.start_cancel,
            "tasks/list": self.receiver.start_list,
        }
        self._waiting: dict[str, Handler] = {
            "tools/call": self._tools_call,
            "tasks/result": self.receiver.result,
        }

    @property
    def tasks_enabled(self) -> bool:
        return self.protocol_version is not None and has_tasks(self.protocol_version)

    async def run(self) -> None:
        """Serve until the client hangs up, then cancel what it left running."""
        trace = self.supervisor.tracer
        trace("actor.start", {"actor": "SessionActor", "name": self.name})
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self.run_connection(nursery)
                nursery.cancel_scope.cancel()  # requests still running have no one to answer
        finally:
            with trio.CancelScope(shield=True):
                await self.transport.aclose()
            trace("actor.stop", {"actor": "SessionActor", "name": self.name})

    def on_disconnect(self) -> None:
        # Remove the connection's tasks first, so their work is cancelled before the requests
        # they have open to this client fail: a disconnect cancels, it does not fail them.
        if self.connection_owned:
            self.supervisor.deliver_now(OwnerGone(self.owner))

    # -- dispatch -------------------------------------------------------------------------
    async def on_request(self, request: jsonrpc.Request) -> None:
        method = request.method
        if self.protocol_version is None and method not in ("initialize", "ping"):
            await self.respond_error(
                request.id, McpError(INVALID_REQUEST, "Invalid request: send 'initialize' first")
            )
            return
        quick = self._quick.get(method)
        if quick is not None:
            await self.answer(request, quick)
            return
        start = self._started.get(method)
        if start is None and method == "tools/call" and self._asks_for_task(request):
            start = self._start_create
        if start is not None:
            await self._start(request, start)
            return
        waiting = self._waiting.get(method)
        if waiting is None or (method.startswith("tasks/") and not self.tasks_enabled):
            await self.respond_error(request.id, McpError(METHOD_NOT_FOUND, f"Method not found: {method}"))
            return
        if request.id in self._in_flight:
            await self.respond_error(
                request.id, McpError(INVALID_REQUEST, f"Invalid request: id {request.id!r} is already in use")
            )
            return
        assert self._nursery is not None
        # A bounded number of waiting requests: past it the reader waits, so a client that
        # never reads its answers is throttled like any other (backpressure).
        await self._slots.acquire()
        scope = trio.CancelScope()
        self._in_flight[request.id] = scope
        self._nursery.start_soon(self._answer_in_scope, request, waiting, scope)

    async def _start(self, request: jsonrpc.Request, start: Callable[[jsonrpc.Request], Started]) -> None:
        if not self.tasks_enabled:
            await self.respond_error(
                request.id, McpError(METHOD_NOT_FOUND, f"Method not found: {request.method}")
            )
            return
        await self._slots.acquire()  # bounded, like waiting requests: backpressure on the reader
        try:
            started = start(request)
        except McpError as exc:
            self._slots.release()
            await self.respond_error(request.id, exc)
            return
        except MailboxFull:
            self._slots.release()
            await self.respond_error(request.id, McpError(INTERNAL_ERROR, "Server overloaded; retry later"))
            return
        except Exception as exc:  # a bug: answer it, keep the connection
            self._slots.release()
            log.error("starting %s failed: %r", request.method, exc, exc_info=exc)
            await self.respond_error(request.id, McpError(INTERNAL_ERROR, f"Internal error: {exc}"))
            return
        started.reply.then(functools.partial(self._answer_later, request.id, started))

    def _answer_later(self, request_id: jsonrpc.RequestId, started: Started, result: Outcome[Any]) -> None:
        # Runs in the answering actor's task: it must never raise into it.
        self._slots.release()
        after: Callable[[], None] | None = None
        try:
            value = result.unwrap()
            data = jsonrpc.encode_response(request_id, started.render(value))
            if started.after is not None:
                after = functools.partial(started.after, value)
        except McpError as exc:
            data = jsonrpc.encode_error(request_id, exc.code, exc.message, exc.data)
        except Exception as exc:
            log.error("answering request %r failed: %r", request_id, exc, exc_info=exc)
            data = jsonrpc.encode_error(request_id, INTERNAL_ERROR, f"Internal error: {exc}")
        self.post(data, after)

    async def _answer_in_scope(
        self, request: jsonrpc.Request, handler: Handler, scope: trio.CancelScope
    ) -> None:
        try:
            with scope:
                await self.answer(request, handler)
        except ConnectionClosed:
            pass  # the client left; nobody to answer
        finally:
            self._in_flight.pop(request.id, None)
            self._slots.release()

    async def on_notification(self, notification: jsonrpc.Notification) -> None:
        if notification.method == "notifications/cancelled":
            try:
                params = structure(notification.params, CancelledParams)
            except McpError:
                return
            scope = self._in_flight.get(params.request_id) if params.request_id is not None else None
            if scope is not None:
                scope.cancel()  # the request ends without a response, as the spec asks
        # notifications/initialized and unknown notifications need no action.

    # -- lifecycle and base methods -------------------------------------------------------
    async def _ping(self, request: jsonrpc.Request) -> dict[str, Any]:
        return {}

    async def _initialize(self, request: jsonrpc.Request) -> dict[str, Any]:
        if self.protocol_version is not None:
            raise McpError(INVALID_REQUEST, "Invalid request: already initialized")
        params = structure(request.params, InitializeParams)
        self.protocol_version = negotiate(params.protocol_version)
        self.client_capabilities = params.capabilities
        self.client_info = params.client_info
        capabilities: dict[str, Any] = {"tools": {"listChanged": False}, "logging": {}}
        if self.tasks_enabled:
            capabilities["tasks"] = SERVER_TASK_CAPABILITIES
        result = InitializeResult(
            protocol_version=self.protocol_version,
            capabilities=capabilities,
            server_info=self.server.info,
            instructions=self.server.instructions,
        )
        data: dict[str, Any] = unstructure(result)
        return data

    async def _set_level(self, request: jsonrpc.Request) -> dict[str, Any]:
        self.log_level = structure(request.params, SetLevelParams).level
        return {}

    def log(self, level: str, data: Any, logger: str | None = None) -> bool:
        if self.log_level is None or not level_passes(level, self.log_level):
            return False
        params: dict[str, Any] = {"level": level, "data": data}
        if logger is not None:
            params["logger"] = logger
        return self.notify("notifications/message", params)

    async def _tools_list(self, request: jsonrpc.Request) -> dict[str, Any]:
        params = structure(request.params, PaginatedParams)
        tools = list(self.server.tools.values())
        try:
            start = decode_cursor("tools", params.cursor) if params.cursor is not None else 0
        except ValueError:
            start = -1
        if not 0 <= start <= len(tools):
            raise McpError(INVALID_PARAMS, "Invalid params at 'cursor': unknown cursor")
        end = start + self.server.tools_page_size
        result: dict[str, Any] = {"tools": [unstructure(t.tool) for t in tools[start:end]]}
        if end < len(tools):
            result["nextCursor"] = encode_cursor("tools", end)
        return result

    # -- tools/call -----------------------------------------------------------------------
    def _tool_for(self, params: CallToolParams) -> RegisteredTool:
        tool = self.server.tools.get(params.name)
        if tool is None:
            raise McpError(INVALID_PARAMS, f"Unknown tool: '{params.name}'")
        as_task = params.task is not None and self.tasks_enabled
        support = tool.tool.task_support
        if as_task and support == "forbidden":
            raise McpError(METHOD_NOT_FOUND, f"Tool '{params.name}' does not support task-augmented calls")
        if not as_task and support == "required" and self.tasks_enabled:
            raise McpError(METHOD_NOT_FOUND, f"Tool '{params.name}' must be called as a task")
        return tool

    def _asks_for_task(self, request: jsonrpc.Request) -> bool:
        # ``"task": null`` is no task: a plain call (wrong types are refused when structuring).
        return (
            self.tasks_enabled and isinstance(request.params, dict) and request.params.get("task") is not None
        )

    async def _tools_call(self, request: jsonrpc.Request) -> dict[str, Any]:
        """A plain call: run the tool here and answer with its result."""
        params = structure(request.params, CallToolParams)
        tool = self._tool_for(params)
        token = (params.meta or {}).get("progressToken")
        result = await tool.call(params.arguments, Context(self, progress_token=token))
        data: dict[str, Any] = unstructure(result)
        return data

    def _start_create(self, request: jsonrpc.Request) -> Started:
        """A task-augmented call: create the task; the work starts once it is answered."""
        params = structure(request.params, CallToolParams)
        tool = self._tool_for(params)
        token = (params.meta or {}).get("progressToken")
        ttl = params.task.ttl if params.task is not None else None

        async def work(actor: TaskActor) -> TaskOutcome:
            result = await tool.call(params.arguments, Context(self, progress_token=token, task=actor))
            return TaskOutcome(
                result=unstructure(result),
                failed=result.is_error,
                message=result.text if result.is_error else None,
            )

        meta = {MODEL_IMMEDIATE_RESPONSE_KEY: tool.immediate_response} if tool.immediate_response else None
        return self.receiver.start_create(work, ttl, meta)
