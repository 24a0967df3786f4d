"""SessionActor: one per connection. Its dialect decides what each message means in the
connection's protocol era; the session acts on the era-neutral commands, turning task
requests into messages to the TaskSupervisor, and has the dialect write every answer.

Quick requests (ping, lists, task get/cancel/create) are answered in order by the reader;
requests that wait on work (a plain ``tools/call``, ``tasks/result``) run in their own Trio task
so any number can be open at once, and ``notifications/cancelled`` stops them. Nothing a client
sends reaches past this actor as an exception: every failure becomes a JSON-RPC error.
"""

from __future__ import annotations

import functools
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import trio
from outcome import Outcome

from ..protocol import jsonrpc
from ..protocol.commands import (
    AwaitTaskResult,
    CallTool,
    CancelTask,
    GetTask,
    Initialize,
    ListTasks,
    ListTools,
    Ping,
    SetLogLevel,
)
from ..protocol.converter import unstructure
from ..protocol.cursors import decode_cursor, encode_cursor
from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, ErrorValue, McpError
from ..protocol.handshake import HandshakeDialect
from ..protocol.messages import CallToolResult, CreateTaskResult, Implementation, TaskSupport, Tool
from ..protocol.records import TaskOutcome, TaskRecord
from ..transports.base import Transport
from ._endpoint import OVERLOADED, ConnectionClosed, Endpoint
from ._receiver import Started, TaskReceiver
from ._requestor import TaskRequestor
from .runtime import MailboxFull
from .supervisor import Remove, TaskSupervisor
from .task_actor import TaskActor

log = logging.getLogger("trio_mcp")


MAX_WAITING_REQUESTS = 256
"""Requests one session may have outstanding (``tools/call``, ``tasks/result``, and task queries
awaiting the supervisor) before its reader stops reading: backpressure on that client."""


class ToolEntry(Protocol):
    """A tool as a session sees it (the server layer's registered tool)."""

    @property
    def tool(self) -> Tool: ...

    @property
    def immediate_response(self) -> str | None: ...

    def call(self, arguments: dict[str, Any] | None, call: ToolCall) -> Awaitable[CallToolResult]: ...


class Service(Protocol):
    """What a session serves: the server layer's description of itself and its tools."""

    @property
    def info(self) -> Implementation: ...

    @property
    def instructions(self) -> str | None: ...

    @property
    def tools_page_size(self) -> int: ...

    @property
    def tools(self) -> Mapping[str, ToolEntry]: ...


_session_numbers = itertools.count(1)


def connection_owner() -> str:
    """A fresh identity for a connection without an authenticated one."""
    return "connection:" + secrets.token_urlsafe(12)


class ToolCall:
    """One running tool call's way back to its client: the mechanics behind the public
    :class:`~trio_mcp.Context` (progress, status, logging, input from the client)."""

    __slots__ = ("_last_progress", "progress_token", "session", "task")

    def __init__(
        self, session: SessionActor, progress_token: int | str | None, task: TaskActor | None
    ) -> None:
        self.session = session
        self.progress_token = progress_token
        self.task = task
        self._last_progress: float | None = None

    @property
    def task_id(self) -> str | None:
        return self.task.task_id if self.task is not None else None

    def progress(self, progress: float, total: float | None, message: str | None) -> bool:
        """Send ``notifications/progress``; False if there is no token, ``progress`` does not
        increase, the task has ended, or the outbound queue is full."""
        task = self.task
        if self.progress_token is None or (task is not None and (task.record.is_terminal or task.stopped)):
            return False
        if self._last_progress is not None and progress <= self._last_progress:
            return False
        self._last_progress = progress
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        if task is not None:
            params["_meta"] = self.session.dialect.related_task(task.task_id)
        return self.session.notify("notifications/progress", params)

    def set_status(self, message: str | None) -> None:
        if self.task is not None:
            self.task.set_status_message(message)

    def log(self, level: str, data: Any, logger: str | None) -> bool:
        params = self.session.dialect.log_message(level, data, logger)
        return params is not None and self.session.notify("notifications/message", params)

    async def ask_client(
        self, capability: str, method: str, params: dict[str, Any], status: str | None
    ) -> dict[str, Any]:
        """A request for input from the client; in a task, the task is ``input_required`` meanwhile."""
        request = self.session.dialect.input_request(capability, method, params, self.task_id)
        if isinstance(request, ErrorValue):
            raise request.exception()
        method, params = request
        if self.task is None:
            return await self.session.request(method, params)
        with self.task.awaiting_input(status):
            return await self.session.request(method, params)

    async def client_task(
        self, kind: str, verb: str, method: str, params: dict[str, Any], ttl_ms: int | None
    ) -> CreateTaskResult:
        """Ask the client to run ``method`` as a task on its side; returns its CreateTaskResult."""
        if not self.session.dialect.client_accepts_task(kind, verb):
            raise McpError(INVALID_REQUEST, f"The client does not accept task-augmented {method} requests")
        if self.task is not None:
            params["_meta"] = self.session.dialect.related_task(self.task.task_id)
        return await self.session.client_tasks.create(method, params, ttl_ms)


class SessionActor(Endpoint):
    def __init__(
        self, service: Service, supervisor: TaskSupervisor, transport: Transport, *, owner: str | None = None
    ) -> None:
        self.connection_owned = owner is None
        self.owner: str = owner if owner is not None else connection_owner()
        super().__init__(transport, tracer=supervisor.tracer, name=f"session-{next(_session_numbers)}")
        self.service = service
        self.supervisor = supervisor
        self.dialect = HandshakeDialect()
        self._in_flight: dict[jsonrpc.RequestId, trio.CancelScope] = {}
        self._slots = trio.Semaphore(MAX_WAITING_REQUESTS)
        self.receiver = TaskReceiver(self, supervisor, self.owner, self.dialect)
        self.client_tasks = TaskRequestor(self)
        """Follow the tasks this session's client runs for the server (see Context.elicit_task)."""
        self._nursery: trio.Nursery | None = None

    @property
    def protocol_version(self) -> str | None:
        return self.dialect.version

    @property
    def client_capabilities(self) -> dict[str, Any]:
        return self.dialect.client_capabilities

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
            self.supervisor.owner_gone(self.owner)

    def _tool_support(self, name: str) -> TaskSupport | None:
        entry = self.service.tools.get(name)
        return entry.tool.task_support if entry is not None else None

    # -- dispatch -------------------------------------------------------------------------
    async def on_request(self, request: jsonrpc.Request) -> None:
        command = self.dialect.interpret(request, self._tool_support)
        if isinstance(command, ErrorValue):
            await self.respond_error(request.id, command)
        elif isinstance(command, Ping):
            await self.respond(request.id, {})
        elif isinstance(command, Initialize):
            await self.respond(
                request.id, self.dialect.initialize(command, self.service.info, self.service.instructions)
            )
        elif isinstance(command, SetLogLevel):
            await self.respond(request.id, self.dialect.set_log_level(command))
        elif isinstance(command, ListTools):
            await self.answer(request, functools.partial(self._tools_list, command))
        # Task queries: sent to the supervisor and answered from the reply's continuation, so
        # the reader goes on with the next request at once (pipelined clients: one scheduler
        # round per burst, not per request). FIFO mailboxes keep them in order.
        elif isinstance(command, GetTask):
            await self._start(request, lambda: self.receiver.start_get(command.task_id))
        elif isinstance(command, CancelTask):
            await self._start(request, lambda: self.receiver.start_cancel(command.task_id))
        elif isinstance(command, ListTasks):
            await self._start(request, lambda: self.receiver.start_list(command.cursor))
        elif isinstance(command, CallTool) and command.as_task:
            await self._start(request, lambda: self._start_create(command))
        elif isinstance(command, CallTool):
            await self._wait(request, functools.partial(self._tools_call, command))
        elif isinstance(command, AwaitTaskResult):
            await self._wait(request, functools.partial(self._task_result, command.task_id))

    async def _wait(
        self, request: jsonrpc.Request, handler: Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]]
    ) -> None:
        if request.id in self._in_flight:
            await self.respond_error(
                request.id,
                ErrorValue(INVALID_REQUEST, f"Invalid request: id {request.id!r} is already in use"),
            )
            return
        assert self._nursery is not None
        # A bounded number of waiting requests: past it the reader waits, so a client that
        # never reads its answers is throttled like any other (backpressure).
        await self._slots.acquire()
        scope = trio.CancelScope()
        self._in_flight[request.id] = scope
        self._nursery.start_soon(self._answer_in_scope, request, handler, scope)

    async def _start(self, request: jsonrpc.Request, start: Callable[[], Started]) -> None:
        await self._slots.acquire()  # bounded, like waiting requests: backpressure on the reader
        try:
            started = start()
        except MailboxFull:
            self._slots.release()
            await self.respond_error(request.id, OVERLOADED)
            return
        except Exception as exc:  # a bug: answer it, keep the connection
            self._slots.release()
            log.error("starting %s failed: %r", request.method, exc, exc_info=exc)
            await self.respond_error(request.id, ErrorValue(INTERNAL_ERROR, f"Internal error: {exc}"))
            return
        started.reply.then(functools.partial(self._answer_later, request.id, started))

    def _answer_later(self, request_id: jsonrpc.RequestId, started: Started, result: Outcome[Any]) -> None:
        # Runs in the answering actor's task: it must never raise into it.
        self._slots.release()
        after: Callable[[], None] | None = None
        try:
            value = result.unwrap()
            rendered = started.render(value)
            if isinstance(rendered, ErrorValue):
                data = jsonrpc.encode_error(request_id, rendered.code, rendered.message, rendered.data)
            else:
                data = jsonrpc.encode_response(request_id, rendered)
                if started.after is not None:
                    after = functools.partial(started.after, value)
        except McpError as exc:
            data = jsonrpc.encode_error(request_id, exc.code, exc.message, exc.data)
        except Exception as exc:
            log.error("answering request %r failed: %r", request_id, exc, exc_info=exc)
            data = jsonrpc.encode_error(request_id, INTERNAL_ERROR, f"Internal error: {exc}")
        if after is not None and self.closed and isinstance(value, TaskRecord) and self.connection_owned:
            # Created for a connection that has gone: nobody holds its id, never start it.
            self.supervisor.mailbox.put(Remove(self.owner, value.task_id), system=True)
            return
        self.post(data, after)

    async def _answer_in_scope(
        self,
        request: jsonrpc.Request,
        handler: Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]],
        scope: trio.CancelScope,
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
        command = self.dialect.interpret_notification(notification)
        if command is not None:
            scope = self._in_flight.get(command.request_id)
            if scope is not None:
                scope.cancel()  # the request ends without a response, as the spec asks

    # -- handlers -------------------------------------------------------------------------
    async def _tools_list(self, command: ListTools, request: jsonrpc.Request) -> dict[str, Any]:
        tools = list(self.service.tools.values())
        try:
            start = decode_cursor("tools", command.cursor) if command.cursor is not None else 0
        except ValueError:
            start = -1
        if not 0 <= start <= len(tools):
            raise McpError(INVALID_PARAMS, "Invalid params at 'cursor': unknown cursor")
        end = start + self.service.tools_page_size
        result: dict[str, Any] = {"tools": [unstructure(t.tool) for t in tools[start:end]]}
        if end < len(tools):
            result["nextCursor"] = encode_cursor("tools", end)
        return result

    async def _tools_call(self, command: CallTool, request: jsonrpc.Request) -> dict[str, Any]:
        """A plain call: run the tool here and answer with its result."""
        entry = self.service.tools[command.name]
        result = await entry.call(command.arguments, ToolCall(self, command.progress_token, None))
        data: dict[str, Any] = unstructure(result)
        return data

    async def _task_result(self, task_id: str, request: jsonrpc.Request) -> dict[str, Any]:
        return await self.receiver.result(task_id)

    def _start_create(self, command: CallTool) -> Started:
        """A task-augmented call: create the task; the work starts once it is answered."""
        entry = self.service.tools[command.name]
        dialect = self.dialect

        async def work(actor: TaskActor) -> TaskOutcome:
            result = await entry.call(command.arguments, ToolCall(self, command.progress_token, actor))
            return dialect.settle_tool_result(result)

        return self.receiver.start_create(work, command.ttl_ms, entry.immediate_response)
