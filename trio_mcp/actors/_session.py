"""SessionActor: one per connection. Its dialect decides what each message means in the
connection's protocol era; the session acts on the era-neutral commands, turning task
requests into messages to the TaskSupervisor, and has the dialect write every answer.

Quick requests (ping, lists, task get/cancel/create) are answered in order by the reader;
requests that wait on work (a plain ``tools/call``, ``tasks/result``) run in their own Trio task
so any number can be open at once, and ``notifications/cancelled`` stops them. Nothing a client
sends reaches past this actor as an exception: every failure becomes a JSON-RPC error.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import itertools
import json
import logging
import math
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Protocol

import attrs
import trio

from ..protocol import jsonrpc
from ..protocol.commands import (
    AwaitTaskResult,
    CallTool,
    CancelTask,
    Command,
    Complete,
    Discover,
    GetPrompt,
    GetTask,
    Initialize,
    Listen,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ListTasks,
    ListTools,
    Ping,
    ReadResource,
    SetLogLevel,
    SubscribeResource,
    UpdateTask,
)
from ..protocol.converter import unstructure
from ..protocol.cursors import decode_cursor, encode_cursor
from ..protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    ErrorValue,
    McpError,
)
from ..protocol.handshake import HandshakeDialect
from ..protocol.messages import CallToolResult, CreateTaskResult, Implementation, TaskSupport, Tool
from ..protocol.modern import ModernDialect, ModernScope, is_modern
from ..protocol.records import TaskOutcome, TaskRecord, text_outcome
from ..protocol.request_state import StateCodec, binding_of
from ..protocol.tasks import TaskStatus
from ..transports.base import Transport
from ._endpoint import OVERLOADED, ConnectionClosed, Endpoint
from ._receiver import Rendered, Renderer, Started, TaskReceiver, encode_answer
from ._requestor import TaskRequestor
from .runtime import MailboxFull, Reply, ask
from .supervisor import Remove, Route, TaskSupervisor, Unwatch, Watch
from .task_actor import Poll, StagedWork, TaskActor

log = logging.getLogger("trio_mcp")


MAX_WAITING_REQUESTS = 256
"""Requests one session may have outstanding — ``tools/call``, ``tasks/result``, task
creation, ``subscriptions/listen``, each until its answer is written. Past it, a new such
request is answered at once with :data:`TOO_MANY_REQUESTS`. Queries about existing tasks
(get, cancel, list, update) are answered in microseconds and not counted, and the reader never
stops reading, so pings, cancellations and the client's own answers always get through."""

SHUTTING_DOWN = ErrorValue(INTERNAL_ERROR, "Server shutting down: the request was cancelled")

REQUIRED_INPUT_ROUNDS = 32
"""Scheduler rounds a ``task_support="required"`` tool runs, in the modern era, before its
CreateTaskResult goes out: input it asks for within them is gathered first by multi
round-trip (``InputRequiredResult``), as SEP-2663 asks of a tool that gathers input and then
runs as a task. Input asked later is asked through the task."""

TOO_MANY_REQUESTS = ErrorValue(
    INTERNAL_ERROR, f"Server overloaded: at most {MAX_WAITING_REQUESTS} outstanding requests per connection"
)


class ToolEntry(Protocol):
    """A tool as a session sees it (the server layer's registered tool)."""

    @property
    def tool(self) -> Tool: ...

    @property
    def immediate_response(self) -> str | None: ...

    @property
    def task_support(self) -> TaskSupport:
        """``tool.task_support`` (kept: it is asked at every call)."""

    @property
    def context_param(self) -> str | None:
        """The parameter the tool takes its Context by, if it takes one."""

    def call(self, arguments: dict[str, Any] | None, call: ToolCall) -> Awaitable[CallToolResult]: ...

    def start(
        self, arguments: dict[str, Any] | None, call: ToolCall | None
    ) -> Awaitable[Any] | CallToolResult: ...

    def finish(self, value: Any) -> CallToolResult: ...

    def failed(self, exc: Exception) -> CallToolResult: ...


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

    @property
    def state_codec(self) -> StateCodec: ...

    def capabilities(self) -> dict[str, Any]: ...
    def resource_list(self) -> list[dict[str, Any]]: ...
    def template_list(self) -> list[dict[str, Any]]: ...
    def prompt_list(self) -> list[dict[str, Any]]: ...
    async def read_resource(self, uri: str, call: ToolCall) -> list[dict[str, Any]] | None: ...
    async def get_prompt(self, name: str, arguments: dict[str, str], call: ToolCall) -> dict[str, Any]: ...
    async def complete(
        self, ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any] | None
    ) -> dict[str, Any]: ...


_session_numbers = itertools.count(1)


def _nothing() -> None:
    pass


def connection_owner() -> str:
    """A fresh identity for a connection without an authenticated one."""
    return "connection:" + secrets.token_urlsafe(12)


class Scope(Renderer, Protocol):
    """What a tool call needs of its request's era: a handshake dialect or a modern scope."""

    @property
    def era(self) -> str: ...

    def related_task(self, task_id: str) -> dict[str, Any]: ...
    def log_message(self, level: str, data: Any, logger: str | None) -> dict[str, Any] | None: ...
    def input_request(
        self, capability: str, method: str, params: dict[str, Any], task_id: str | None
    ) -> tuple[str, dict[str, Any]] | ErrorValue: ...
    def client_accepts_task(self, kind: str, verb: str) -> bool: ...
    def settle_tool_result(self, result: CallToolResult) -> TaskOutcome: ...
    def cacheable(self, result: dict[str, Any]) -> dict[str, Any]: ...
    def resource_not_found(self, uri: str) -> ErrorValue: ...


_CAPABILITY_OF_METHOD: dict[str, str] = {
    "resources/list": "resources",
    "resources/templates/list": "resources",
    "resources/read": "resources",
    "resources/subscribe": "resources",
    "resources/unsubscribe": "resources",
    "prompts/list": "prompts",
    "prompts/get": "prompts",
    "completion/complete": "completions",
}


@attrs.frozen
class _Listener:
    """An open ``subscriptions/listen`` stream: its scope and what it asked for."""

    scope: ModernScope
    lists: frozenset[str]
    uris: frozenset[str]


class InputNeeded:
    """A modern-era call's multi round-trip state: the answers it was given (from the
    ``requestState`` and the retry's ``inputResponses``) and the input it still needs.

    Keys are the tool's own (``ctx.elicit(..., key="user_name")``) or made from the request
    itself (a digest of method and params, numbered if asked again), so the same call re-run
    asks under the same keys whatever order concurrent questions happen in. ``task_shown``:
    for a call running as a task, whether its CreateTaskResult went out (input is then asked
    through the task instead)."""

    __slots__ = ("answers", "asked", "needed", "needed_event", "scope", "task_shown")

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.needed: dict[str, Any] = {}
        self.asked: dict[str, int] = {}
        self.scope = trio.CancelScope()
        self.needed_event = trio.Event()
        self.task_shown = False

    def key_for(self, key: str | None, request: dict[str, Any]) -> str:
        if key is None:
            canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
            key = "input-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]
        seen = self.asked.get(key, 0)
        self.asked[key] = seen + 1
        return key if seen == 0 else f"{key}-{seen + 1}"


class ToolCall:
    """One running tool call's way back to its client: the mechanics behind the public
    :class:`~trio_mcp.Context` (progress, status, logging, input from the client).

    Input comes three ways, whatever the tool wrote (``await ctx.elicit(...)``): a handshake-era
    server→client request (in a task: ``input_required`` meanwhile); a modern-era task's
    ``inputRequests``, answered by ``tasks/update``; or, in a modern-era plain call, an
    ``InputRequiredResult`` — the call is stopped (cancelled, so its cleanup runs) and run
    again from the start when the client retries with the answers.
    """

    __slots__ = ("_last_progress", "mrtr", "progress_token", "scope", "session", "task")

    def __init__(
        self,
        session: SessionActor,
        progress_token: int | str | None,
        task: TaskActor | None,
        scope: Scope,
        mrtr: InputNeeded | None = None,
    ) -> None:
        self.session = session
        self.progress_token = progress_token
        self.task = task
        self.scope = scope
        self.mrtr = mrtr
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
            params["_meta"] = self.scope.related_task(task.task_id)
        return self.session.notify("notifications/progress", params)

    def set_status(self, message: str | None) -> None:
        if self.task is not None:
            self.task.set_status_message(message)

    def log(self, level: str, data: Any, logger: str | None) -> bool:
        params = self.scope.log_message(level, data, logger)
        return params is not None and self.session.notify("notifications/message", params)

    async def ask_client(
        self, capability: str, method: str, params: dict[str, Any], status: str | None, key: str | None = None
    ) -> dict[str, Any]:
        """Input from the client, the way this call's era and mode provide it. ``key`` names
        the request in a modern-era ``inputRequests`` map (default: made from the request)."""
        request = self.scope.input_request(capability, method, params, self.task_id)
        if isinstance(request, ErrorValue):
            raise request.exception()
        method, params = request
        if self.scope.era == "modern":
            if self.mrtr is not None and not self.mrtr.task_shown:
                return await self._ask_by_retry(method, params, key)
            if self.task is not None:
                return await self._ask_through_task(method, params, status, key)
            return await self._ask_by_retry(method, params, key)
        if self.task is None:
            return await self.session.request(method, params)
        with self.task.awaiting_input(status):
            return await self.session.request(method, params)

    async def _ask_through_task(
        self, method: str, params: dict[str, Any], status: str | None, wanted: str | None
    ) -> dict[str, Any]:
        assert self.task is not None
        key, reply = self.task.request_input({"method": method, "params": params}, status, key=wanted)
        try:
            answer = await reply.wait()
        finally:
            self.task.withdraw_input(key)
        if not isinstance(answer, dict):
            raise McpError(INVALID_PARAMS, f"Invalid params at 'inputResponses.{key}': expected an object")
        return answer

    async def _ask_by_retry(self, method: str, params: dict[str, Any], wanted: str | None) -> dict[str, Any]:
        mrtr = self.mrtr
        assert mrtr is not None
        request = {"method": method, "params": params}
        key = mrtr.key_for(wanted, request)
        answer = mrtr.answers.get(key)
        if answer is not None:
            if not isinstance(answer, dict):
                raise McpError(
                    INVALID_PARAMS, f"Invalid params at 'inputResponses.{key}': expected an object"
                )
            return answer
        mrtr.needed[key] = request
        if not mrtr.needed_event.is_set():
            mrtr.needed_event.set()
            # Let questions asked at the same moment (siblings in a nursery) join this round,
            # then stop the call here; the client retries with the answers.
            for _ in range(3):
                await trio.lowlevel.checkpoint()
            mrtr.scope.cancel()
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def client_task(
        self, kind: str, verb: str, method: str, params: dict[str, Any], ttl_ms: int | None
    ) -> CreateTaskResult:
        """Ask the client to run ``method`` as a task on its side; returns its CreateTaskResult."""
        if not self.scope.client_accepts_task(kind, verb):
            raise McpError(INVALID_REQUEST, f"The client does not accept task-augmented {method} requests")
        if self.task is not None:
            params["_meta"] = self.scope.related_task(self.task.task_id)
        return await self.session.client_tasks.create(method, params, ttl_ms)


class _ToolWork(StagedWork):
    """A task's work: run the tool with its arguments, settle its result in the creating
    era's terms. A small object rather than a closure: every live task keeps one. Staged
    (see :class:`StagedWork`): while the tool runs, its coroutine is awaited by the task's
    actor directly."""

    __slots__ = ("arguments", "entry", "mrtr", "progress_token", "scope", "session")

    def __init__(
        self,
        session: SessionActor,
        entry: ToolEntry,
        arguments: dict[str, Any] | None,
        progress_token: int | str | None,
        scope: Scope,
        mrtr: InputNeeded | None,
    ) -> None:
        self.session = session
        self.entry = entry
        self.arguments = arguments
        self.progress_token = progress_token
        self.scope = scope
        self.mrtr = mrtr

    def start(self, actor: TaskActor) -> Awaitable[Any] | TaskOutcome:
        entry = self.entry
        # The tool's call context, made only for a tool that takes a Context.
        call = (
            ToolCall(self.session, self.progress_token, actor, self.scope, self.mrtr)
            if entry.context_param is not None
            else None
        )
        arguments, self.arguments = self.arguments, None  # the tool has them now: not kept
        running = entry.start(arguments, call)
        if isinstance(running, CallToolResult):
            return self.scope.settle_tool_result(running)
        return running

    def finish(self, value: Any) -> TaskOutcome:
        if type(value) is str:
            # The commonest result, one text block, written directly: what the entry's result
            # unstructures to, and no era fails a task on it (it is not ``isError``).
            return text_outcome(value)
        return self.scope.settle_tool_result(self.entry.finish(value))

    def fail(self, exc: Exception) -> TaskOutcome:
        return self.scope.settle_tool_result(self.entry.failed(exc))


class _HiddenTask:
    """The task of a server-directed call while no client may know of it: from its creation
    until the answer showing it (its CreateTaskResult) is handed to the transport.

    Whatever else ends the call — a plain result, more input first, the request cancelled, the
    connection closed, at any point, even before the creation was answered — removes the task,
    whoever owns it: an identity's tasks outlive the connection, so the removal of a
    connection's own tasks would not catch it. Until written, its id is also in the session's
    ``_unwritten``, so a disconnect removes it too."""

    __slots__ = ("done", "session", "task_id")

    def __init__(self, session: SessionActor) -> None:
        self.session = session
        self.task_id: str | None = None
        self.done = False
        """The call is over: its answer queued, or none will be."""

    def created(self, reply: Reply[TaskRecord]) -> None:
        """The creation's continuation: runs as soon as the task exists (in the creating
        actor's task), whether or not the call still waits for it. Never raises."""
        if reply.failed:
            return  # refused: there is no task
        task_id = reply.unwrap().task_id
        if self.done:
            self.session._remove_task(task_id)  # the call gave up before it was created
        else:
            self.task_id = task_id
            self.session._unwritten.add(task_id)

    def written(self) -> None:
        """The call's answer was handed to the transport (``on_written``): the task it
        shows, if it shows one, is known to the client from now on."""
        self.session._release()
        task_id, self.task_id = self.task_id, None
        if task_id is not None:
            self.session._unwritten.discard(task_id)

    def remove(self) -> None:
        """The task is not shown, or its answer will never be written: it goes."""
        task_id, self.task_id = self.task_id, None
        if task_id is not None:
            self.session._unwritten.discard(task_id)
            self.session._remove_task(task_id)


class SessionActor(Endpoint):
    def __init__(
        self,
        service: Service,
        supervisor: TaskSupervisor,
        transport: Transport,
        *,
        owner: str | None = None,
        idle_timeout: float | None = None,
        client: str | None = None,
    ) -> None:
        self.connection_owned = owner is None
        self.owner: str = owner if owner is not None else connection_owner()
        super().__init__(
            transport,
            tracer=supervisor.tracer,
            name=f"session-{next(_session_numbers)}",
            idle_timeout=idle_timeout,
        )
        self.service = service
        self.supervisor = supervisor
        self.dialect = HandshakeDialect()
        """The handshake era's state on this connection (``initialize``)."""
        self.modern = ModernDialect(service.info, service.instructions)
        """The modern era's rules: requests that carry the per-request envelope."""
        self._in_flight: dict[jsonrpc.RequestId, trio.CancelScope] = {}
        self._outstanding = 0
        self._queries = 0  # task queries sent to the supervisor and not answered yet
        self._unwritten: set[str] = set()  # created; their CreateTaskResult not written yet
        self._tasks_dropped = False
        self._subscribed: set[str] = set()  # resources/subscribe (handshake era)
        self._listeners: dict[jsonrpc.RequestId, _Listener] = {}  # subscriptions/listen streams
        self.receiver = TaskReceiver(self, supervisor, self.owner, self.dialect, client)
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

    def shutdown(self) -> None:
        """The server is stopping: answer every waiting request with :data:`SHUTTING_DOWN`
        (its work is cancelled) and read nothing more."""
        for request_id, scope in list(self._in_flight.items()):
            scope.cancel()
            self.post(jsonrpc.encode_error(request_id, SHUTTING_DOWN.code, SHUTTING_DOWN.message))
        self._in_flight.clear()
        self.stop_reading()

    def on_input_ended(self) -> None:
        # The client can send nothing more (no tasks/result, no tasks/get): the connection's
        # tasks go now, as at a disconnect, rather than running on while the answers already on
        # their way are written.
        self._drop_connection_tasks()

    def _drop_connection_tasks(self) -> None:
        if self.connection_owned and not self._tasks_dropped:
            self._tasks_dropped = True
            self.supervisor.owner_gone(self.owner)

    def on_disconnect(self) -> None:
        # Remove the connection's tasks first, so their work is cancelled before the requests
        # they have open to this client fail: a disconnect cancels, it does not fail them.
        self._drop_connection_tasks()
        # Tasks whose CreateTaskResult was never written: their ids never reached the client,
        # so whoever owns them, they go (their work, begun a moment ago, is cancelled).
        for task_id in self._unwritten:
            self._remove_task(task_id)
        self._unwritten.clear()

    def _remove_task(self, task_id: str) -> None:
        """Remove a task no client was told of, whoever owns it (its work, if begun, is
        cancelled): an identity's tasks outlive the connection, so dropping the connection's
        owner would not do."""
        self.supervisor.mailbox.put(Remove(self.owner, task_id), system=True)

    def _tool_support(self, name: str) -> TaskSupport | None:
        entry = self.service.tools.get(name)
        return entry.task_support if entry is not None else None

    # -- dispatch -------------------------------------------------------------------------
    async def on_request(self, request: jsonrpc.Request) -> None:
        # The era is decided per request: the modern envelope in ``_meta`` means 2026-07-28
        # (stateless); anything else is the handshake era of this connection.
        capability = _CAPABILITY_OF_METHOD.get(request.method)
        if capability is not None and capability not in self.service.capabilities():
            # A server that offers no resources (prompts, completion) does not have their methods.
            if is_modern(request.params) or self.dialect.initialized:
                await self.respond_error(
                    request.id, ErrorValue(METHOD_NOT_FOUND, f"Method not found: {request.method}")
                )
                return
        if is_modern(request.params):
            await self._on_modern(request)
            return
        command = self.dialect.interpret(request, self._tool_support)
        # The busiest first, by exact type: a task query is answered here and now when its
        # task's record can be read without waiting; then task creation.
        if type(command) is GetTask:
            await self._get(request, command.task_id, self.dialect)
        elif type(command) is AwaitTaskResult:
            await self._await_result(request, command.task_id)
        elif type(command) is CancelTask:
            task_id = command.task_id
            await self._start(request, lambda: self.receiver.start_cancel(task_id))
        elif type(command) is CallTool and command.as_task:
            await self._start(request, lambda: self._start_create(command, self.dialect), counted=True)
        elif isinstance(command, ErrorValue):
            await self.respond_error(request.id, command)
        elif isinstance(command, Ping):
            await self.respond(request.id, {})
        elif isinstance(command, Initialize):
            await self.respond(
                request.id,
                self.dialect.initialize(
                    command, self.service.info, self.service.instructions, self.service.capabilities()
                ),
            )
        elif isinstance(command, SetLogLevel):
            await self.respond(request.id, self.dialect.set_log_level(command))
        elif isinstance(command, ListTools):
            await self.answer(request, functools.partial(self._tools_list, command, self.dialect.complete))
        # Task queries: sent to the supervisor and answered from the reply's continuation, so
        # the reader goes on with the next request at once (pipelined clients: one scheduler
        # round per burst, not per request). FIFO mailboxes keep them in order.
        elif isinstance(command, ListTasks):
            await self._start(
                request, lambda: self.receiver.start_list(command.cursor, self.dialect.render_page)
            )
        elif isinstance(command, CallTool):
            await self._wait(request, functools.partial(self._tools_call, command, self.dialect))
        elif isinstance(command, SubscribeResource):
            if command.subscribe:
                self._subscribed.add(command.uri)
            else:
                self._subscribed.discard(command.uri)
            await self.respond(request.id, {})
        else:
            await self._surface(request, command, self.dialect)

    async def _surface(self, request: jsonrpc.Request, command: Command, scope: Scope) -> None:
        """Resources, prompts, completion: the same in both eras but for how results are written
        (a server offering none of a kind was refused their methods by :meth:`on_request`)."""
        if isinstance(command, ListResources):
            await self.answer(
                request, self._lister(self.service.resource_list, "resources", command.cursor, scope)
            )
        elif isinstance(command, ListResourceTemplates):
            lister = self._lister(self.service.template_list, "resourceTemplates", command.cursor, scope)
            await self.answer(request, lister)
        elif isinstance(command, ListPrompts):
            await self.answer(
                request, self._lister(self.service.prompt_list, "prompts", command.cursor, scope)
            )
        elif isinstance(command, Complete):
            await self.answer(request, functools.partial(self._complete, command, scope))
        elif isinstance(command, ReadResource | GetPrompt):
            await self._wait(request, functools.partial(self._read_or_get, command, scope))

    def _lister(
        self, items: Callable[[], list[dict[str, Any]]], key: str, cursor: str | None, scope: Scope
    ) -> Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]]:
        async def handler(request: jsonrpc.Request) -> dict[str, Any]:
            return scope.cacheable(self._page(items(), key, cursor))

        return handler

    def _page(self, items: list[dict[str, Any]], key: str, cursor: str | None) -> dict[str, Any]:
        try:
            start = decode_cursor(key, cursor) if cursor is not None else 0
        except ValueError:
            start = -1
        if not 0 <= start <= len(items):
            raise McpError(INVALID_PARAMS, "Invalid params at 'cursor': unknown cursor")
        end = start + self.service.tools_page_size
        result: dict[str, Any] = {key: items[start:end]}
        if end < len(items):
            result["nextCursor"] = encode_cursor(key, end)
        return result

    async def _complete(self, command: Complete, scope: Scope, request: jsonrpc.Request) -> dict[str, Any]:
        return scope.complete(await self.service.complete(command.ref, command.argument, command.context))

    async def _read_or_get(
        self, command: ReadResource | GetPrompt, scope: Scope, request: jsonrpc.Request
    ) -> dict[str, Any]:
        """``resources/read`` or ``prompts/get``; in a modern-era request, input the function
        asks for comes back as an ``InputRequiredResult`` (as for a plain tool call)."""
        binding: tuple[str, str, Any]
        if isinstance(command, ReadResource):
            binding = ("resources/read", command.uri, None)
        else:
            binding = ("prompts/get", command.name, command.arguments)
        mrtr = (
            InputNeeded(self._answers(binding, *self._retry_of(request))) if scope.era == "modern" else None
        )
        call = ToolCall(self, None, None, scope, mrtr)
        with mrtr.scope if mrtr is not None else contextlib.nullcontext():
            if isinstance(command, ReadResource):
                contents = await self.service.read_resource(command.uri, call)
                if contents is None:
                    raise scope.resource_not_found(command.uri).exception()
                return scope.cacheable({"contents": contents})
            return scope.complete(await self.service.get_prompt(command.name, command.arguments, call))
        assert isinstance(scope, ModernScope) and mrtr is not None
        return self._input_required(binding, mrtr, scope)

    # -- telling the client what changed --------------------------------------------------
    def list_changed(self, kind: str) -> None:
        """The server's ``kind`` list (tools, prompts, resources) changed."""
        if self.dialect.initialized:
            self.notify(f"notifications/{kind}/list_changed")
        for subscription, listener in list(self._listeners.items()):
            if kind in listener.lists:
                self.notify(*listener.scope.tagged(subscription, f"notifications/{kind}/list_changed", {}))

    def resource_updated(self, uri: str) -> None:
        """The resource at ``uri`` changed: tell the client if it subscribed to it."""
        if uri in self._subscribed:
            self.notify("notifications/resources/updated", {"uri": uri})
        for subscription, listener in list(self._listeners.items()):
            if uri in listener.uris:
                self.notify(
                    *listener.scope.tagged(subscription, "notifications/resources/updated", {"uri": uri})
                )

    async def _on_modern(self, request: jsonrpc.Request) -> None:
        interpreted = self.modern.interpret(request, self._tool_support)
        if isinstance(interpreted, ErrorValue):
            await self.respond_error(request.id, interpreted)
            return
        command, scope = interpreted
        if isinstance(command, Discover):
            await self.respond(request.id, self.modern.discover(scope, self._capabilities()))
        elif isinstance(command, ListTools):
            await self.answer(request, functools.partial(self._tools_list, command, scope.cacheable))
        elif isinstance(command, GetTask):
            await self._get(request, command.task_id, scope)
        elif isinstance(command, CancelTask):
            await self._start(request, lambda: self.receiver.start_cancel(command.task_id, scope))
        elif isinstance(command, UpdateTask):
            await self._start(
                request, lambda: self.receiver.start_update(command.task_id, command.input_responses, scope)
            )
        elif isinstance(command, CallTool) and (command.as_task or command.auto_task):
            if await self._admit_waiting(request):
                hidden = _HiddenTask(self)
                handler = functools.partial(
                    self._call_maybe_task, command, scope, hidden, required=command.as_task
                )
                self._spawn_answer(request, handler, hidden)
        elif isinstance(command, Listen):
            await self._wait(request, functools.partial(self._listen, command, scope))
        elif isinstance(command, CallTool):
            await self._wait(request, functools.partial(self._modern_call, command, scope))
        else:
            await self._surface(request, command, scope)

    def _capabilities(self) -> dict[str, Any]:
        return self.service.capabilities()

    async def _wait(
        self, request: jsonrpc.Request, handler: Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]]
    ) -> None:
        if await self._admit_waiting(request):
            self._spawn_answer(request, handler)

    async def _admit_waiting(self, request: jsonrpc.Request) -> bool:
        """Admit a request that may wait: refused if its id is already waiting, or past the limit."""
        if request.id in self._in_flight:
            await self.respond_error(
                request.id,
                ErrorValue(INVALID_REQUEST, f"Invalid request: id {request.id!r} is already in use"),
            )
            return False
        return await self._admit(request)

    def _spawn_answer(
        self,
        request: jsonrpc.Request,
        handler: Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]],
        hidden: _HiddenTask | None = None,
    ) -> None:
        """Answer an admitted request from a Trio task of its own, which a
        ``notifications/cancelled`` for it cancels. ``hidden``: the task of a server-directed
        call, removed unless the answer showing it is written."""
        assert self._nursery is not None
        scope = trio.CancelScope()
        self._in_flight[request.id] = scope
        self._nursery.start_soon(self._answer_in_scope, request, handler, scope, hidden)

    async def _get(self, request: jsonrpc.Request, task_id: str, renderer: Renderer) -> None:
        """``tasks/get``: answered from the record when it can be read without waiting (see
        :meth:`TaskSupervisor.current`), else through the supervisor's mailbox."""
        current = self.supervisor.current(self.owner, task_id)
        if current is None:
            await self._start(request, lambda: self.receiver.start_get(task_id, renderer))
        elif isinstance(current, ErrorValue):
            self._answer_now(request.id, current)
        else:
            self._answer_now(request.id, renderer.task_json(current))

    def _answer_now(self, request_id: jsonrpc.RequestId, rendered: Rendered) -> None:
        """Queue the answer to a query answered without waiting (nothing if the connection has
        closed: the reader stops at its next read)."""
        self.post(encode_answer(request_id, rendered))

    async def _await_result(self, request: jsonrpc.Request, task_id: str) -> None:
        """``tasks/result``: answered at once, without a Trio task of its own, when the task has
        ended or is unknown; otherwise by a waiting one (:meth:`_wait`'s rules either way)."""
        if request.id not in self._in_flight:
            current = self.supervisor.current(self.owner, task_id)
            if isinstance(current, ErrorValue):
                self._answer_now(request.id, current)
                return
            if current is not None and current.outcome is not None:
                self._answer_now(request.id, self.dialect.render_outcome(task_id, current.outcome))
                return
        if not await self._admit_waiting(request):
            return
        try:
            started = self.receiver.start_result(task_id)
        except MailboxFull:
            self._release()
            await self.respond_error(request.id, OVERLOADED)
            return
        if started.reply.answered:
            self._queries += 1
            started.reply.then(functools.partial(self._answer_later, request.id, started, self._release))
        else:

            async def wait(request: jsonrpc.Request) -> dict[str, Any]:
                return await started.wait()

            self._spawn_answer(request, wait)

    async def _admit(self, request: jsonrpc.Request) -> bool:
        """Count one more outstanding request, or refuse it at once past the limit."""
        if self._outstanding >= MAX_WAITING_REQUESTS:
            await self.respond_error(request.id, TOO_MANY_REQUESTS)
            return False
        self._outstanding += 1
        return True

    def _release(self) -> None:
        self._outstanding -= 1

    def quiet(self) -> bool:
        return self._queries == 0

    def idle(self) -> bool:
        """Nothing outstanding, and no running task of this connection's own."""
        owned = self.supervisor.live_count(self.owner) if self.connection_owned else 0
        return self._outstanding == 0 and self._queries == 0 and not self._in_flight and not owned

    async def _start(
        self, request: jsonrpc.Request, start: Callable[[], Started], *, counted: bool = False
    ) -> None:
        """Send a query to the supervisor and answer it from the reply's continuation.

        Queries about existing tasks (get, cancel, list, update) are answered in microseconds
        and are not counted against :data:`MAX_WAITING_REQUESTS`, so a cancel always gets
        through; a task creation (``counted``) is, until its answer is written."""
        if counted and not await self._admit(request):
            return
        release = self._release if counted else _nothing
        try:
            started = start()
        except MailboxFull:
            release()
            await self.respond_error(request.id, OVERLOADED)
            return
        except Exception as exc:  # a bug: answer it, keep the connection
            release()
            log.error("starting %s failed: %r", request.method, exc, exc_info=exc)
            await self.respond_error(request.id, ErrorValue(INTERNAL_ERROR, f"Internal error: {exc}"))
            return
        self._queries += 1
        reply = started.reply
        if reply.answered:  # answered in the supervisor's call: no continuation to keep
            self._answer_later(request.id, started, release, reply)
        else:
            reply.then(functools.partial(self._answer_later, request.id, started, release))

    def _answer_later(
        self,
        request_id: jsonrpc.RequestId,
        started: Started,
        release: Callable[[], None],
        reply: Reply[Any],
    ) -> None:
        # Runs in the answering actor's task: it must never raise into it. A refusal is an
        # error value, answered as it is: nothing raised, so nothing (no traceback holding the
        # frames that hold the request) outlives the answer.
        self._queries -= 1
        after = started.after  # run with the answer once it is queued, unless it is an error
        value: Any = None
        error = reply.error_value
        if error is not None:
            after = None
            data = jsonrpc.encode_error(request_id, error.code, error.message, error.data)
        else:
            try:
                value = reply.unwrap()
                rendered = started.render(value)
                data = encode_answer(request_id, rendered)
                if isinstance(rendered, ErrorValue):
                    after = None
            except McpError as exc:
                after = None
                data = jsonrpc.encode_error(request_id, exc.code, exc.message, exc.data)
            except Exception as exc:
                after = None
                log.error("answering request %r failed: %r", request_id, exc, exc_info=exc)
                data = jsonrpc.encode_error(request_id, INTERNAL_ERROR, f"Internal error: {exc}")
        if after is None:
            if not self.post(data, release):
                release()
            if started.after is not None and isinstance(value, TaskRecord):
                # Created, but answered with an error instead of its CreateTaskResult: nobody
                # got its id, never start it.
                self._remove_task(value.task_id)
            return
        created: str = value.task_id  # only a creation has something to do after its answer

        def written() -> None:
            release()
            self._unwritten.discard(created)

        if self.post(data, written):
            # The work starts now: its status notifications queue behind its CreateTaskResult
            # (often into the same write). Until that answer is written the task is one the
            # client may never hear of: if the connection ends first, it is removed.
            self._unwritten.add(created)
            after(value)
        else:
            release()
            # Created for a connection that has gone: nobody got its id, never start it.
            self._remove_task(created)

    async def _answer_in_scope(
        self,
        request: jsonrpc.Request,
        handler: Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]],
        scope: trio.CancelScope,
        hidden: _HiddenTask | None,
    ) -> None:
        queued = False
        try:
            with scope:
                queued = await self.answer(
                    request, handler, self._release if hidden is None else hidden.written
                )
        except ConnectionClosed:
            pass  # the client left; nobody to answer
        finally:
            self._in_flight.pop(request.id, None)
            if not queued:  # no answer will be written (cancelled, or none due)
                self._release()
            if hidden is not None:
                # The call is over. Its task stays only if the answer showing it was queued —
                # and then only until the connection ends, unless that answer is written.
                hidden.done = True
                if not queued:
                    hidden.remove()

    async def on_notification(self, notification: jsonrpc.Notification) -> None:
        command = self.dialect.interpret_notification(notification)
        if command is not None:
            scope = self._in_flight.get(command.request_id)
            if scope is not None:
                scope.cancel()  # the request ends without a response, as the spec asks

    # -- handlers -------------------------------------------------------------------------
    async def _tools_list(
        self,
        command: ListTools,
        finish: Callable[[dict[str, Any]], dict[str, Any]],
        request: jsonrpc.Request,
    ) -> dict[str, Any]:
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
        return finish(result)

    async def _tools_call(self, command: CallTool, scope: Scope, request: jsonrpc.Request) -> dict[str, Any]:
        """A plain call: run the tool here and answer with its result."""
        entry = self.service.tools[command.name]
        result = await entry.call(command.arguments, ToolCall(self, command.progress_token, None, scope))
        data: dict[str, Any] = unstructure(result)
        return scope.complete(data)

    def _start_create(self, command: CallTool, scope: Scope) -> Started:
        """A task: create it; the work starts once the CreateTaskResult is queued."""
        immediate = self.service.tools[command.name].immediate_response
        return self.receiver.start_create(self._task_work(command, scope), command.ttl_ms, immediate, scope)

    def _task_work(self, command: CallTool, scope: Scope, mrtr: InputNeeded | None = None) -> _ToolWork:
        entry = self.service.tools[command.name]
        return _ToolWork(self, entry, command.arguments, command.progress_token, scope, mrtr)

    async def _listen(self, command: Listen, scope: ModernScope, request: jsonrpc.Request) -> dict[str, Any]:
        """``subscriptions/listen``: acknowledge what will be sent, then tagged notifications —
        the watched tasks' status, list changes, updates of the resources named — until the
        client cancels the request (``notifications/cancelled``) or goes away."""
        subscription = request.id
        early: list[TaskRecord] | None = []  # changes seen before the acknowledgement went out

        def watcher(record: TaskRecord) -> None:
            if early is not None:
                early.append(record)
            elif not self.closed:
                self.notify(*scope.task_notification(subscription, record))

        task_ids = command.task_ids or ()
        accepted: tuple[str, ...] = ()
        lists = {
            kind
            for kind, wanted in (
                ("tools", command.tools_list_changed),
                ("prompts", command.prompts_list_changed),
                ("resources", command.resources_list_changed),
            )
            if wanted
        }
        uris = frozenset(command.resource_uris or ())
        try:
            if task_ids:
                accepted = await ask(
                    self.supervisor, lambda reply: Watch(self.owner, task_ids, watcher, reply)
                )
            honoured: dict[str, Any] = {}
            if command.task_ids is not None:
                honoured["taskIds"] = list(accepted)
            for kind in sorted(lists):
                honoured[f"{kind}ListChanged"] = True
            if command.resource_uris is not None:
                honoured["resourceSubscriptions"] = list(command.resource_uris)
            await self.send(jsonrpc.encode_notification(*scope.subscription_ack(subscription, honoured)))
            self._listeners[subscription] = _Listener(scope, frozenset(lists), uris)
            backlog, early = early, None
            for record in backlog or ():
                self.notify(*scope.task_notification(subscription, record))
            await trio.sleep_forever()
        finally:
            self._listeners.pop(subscription, None)
            if accepted:
                self.supervisor.mailbox.put(Unwatch(accepted, watcher), system=True)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the modern era's calls -------------------------------------------------------------
    def _state_binding(self, binding: tuple[str, str, Any]) -> str:
        # Bound to the caller where there is an identity; a connection-minted owner changes
        # with every connection (stateless HTTP), so those states bind to the call alone.
        owner = self.owner if not self.connection_owned else "anonymous"
        return binding_of(owner, *binding)

    def _answers(
        self, binding: tuple[str, str, Any], request_state: str | None, responses: dict[str, Any] | None
    ) -> dict[str, Any]:
        """The answers a retry carries: the sealed ones, plus new responses to what was asked."""
        if request_state is None:
            return dict(responses or {})
        opened = self.service.state_codec.open(
            request_state, binding=self._state_binding(binding), now=self.supervisor.wall_clock()
        )
        if opened is None:
            raise McpError(INVALID_PARAMS, "Invalid params at 'requestState': not a state this server issued")
        answers = dict(opened.get("answers") or {})
        for key in opened.get("asked") or ():
            if responses and key in responses:
                answers[key] = responses[key]
        return answers

    def _input_required(
        self, binding: tuple[str, str, Any], mrtr: InputNeeded, scope: ModernScope
    ) -> dict[str, Any]:
        state = self.service.state_codec.seal(
            {"answers": mrtr.answers, "asked": list(mrtr.needed)},
            binding=self._state_binding(binding),
            now=self.supervisor.wall_clock(),
        )
        return scope.input_required(mrtr.needed, state)

    @staticmethod
    def _retry_of(request: jsonrpc.Request) -> tuple[str | None, dict[str, Any] | None]:
        """A modern-era retry's ``requestState`` and ``inputResponses`` (-32602 if malformed)."""
        params = request.params or {}
        state, responses = params.get("requestState"), params.get("inputResponses")
        if state is not None and not isinstance(state, str):
            raise McpError(INVALID_PARAMS, "Invalid params at 'requestState': expected a string")
        if responses is not None and not isinstance(responses, dict):
            raise McpError(INVALID_PARAMS, "Invalid params at 'inputResponses': expected an object")
        return state, responses

    async def _modern_call(
        self, command: CallTool, scope: ModernScope, request: jsonrpc.Request
    ) -> dict[str, Any]:
        """A plain modern-era call; input it needs comes back as an ``InputRequiredResult``."""
        entry = self.service.tools[command.name]
        binding = ("tools/call", command.name, command.arguments)
        mrtr = InputNeeded(self._answers(binding, command.request_state, command.input_responses))
        with mrtr.scope:
            result = await entry.call(
                command.arguments, ToolCall(self, command.progress_token, None, scope, mrtr)
            )
            data: dict[str, Any] = unstructure(result)
            return scope.complete(data)
        return self._input_required(binding, mrtr, scope)

    async def _call_maybe_task(
        self,
        command: CallTool,
        scope: ModernScope,
        hidden: _HiddenTask,
        request: jsonrpc.Request,
        *,
        required: bool = False,
    ) -> dict[str, Any]:
        """Server-directed tasks: the call runs as a task from the start, hidden until the
        answer decides what the client sees.

        - Optional tool: if it ends within the auto-task window it is answered with its result
          (the task is forgotten); otherwise, or as soon as it asks for input, with the task.
        - Required tool: always answered with the task — but input it asks for before that
          answer is gathered first, by multi round-trip (``InputRequiredResult``; the retry
          re-runs it with the answers), so the task's input phase is over when it is shown.

        Until the answer showing it is written, the task is ``hidden``'s: whatever ends the
        call otherwise — a plain answer, the request cancelled, the client gone, even before
        the creation was answered — removes it (see :class:`_HiddenTask`).
        """
        needs_input = trio.Event()

        def watch(record: TaskRecord) -> None:
            if record.status == TaskStatus.INPUT_REQUIRED:
                needs_input.set()

        entry = self.service.tools[command.name]
        binding = ("tools/call", command.name, command.arguments)
        mrtr = (
            InputNeeded(self._answers(binding, command.request_state, command.input_responses))
            if required
            else None
        )
        started = self.receiver.start_create(
            self._task_work(command, scope, mrtr), None, entry.immediate_response, scope, watcher=watch
        )
        # Told of the task the moment it exists, even if this call has stopped waiting by then.
        started.reply.then(hidden.created)
        keep = False
        try:
            record: TaskRecord = await started.reply.wait()
            self.receiver.start_work(record)
            answer, keep = await self._settle_maybe_task(
                record, scope, needs_input, entry.immediate_response, mrtr, binding
            )
            return answer
        finally:
            if not keep:
                # Not shown (a plain result, more input first, withdrawn, cancelled, refused):
                # nobody holds its id.
                hidden.remove()

    async def _settle_maybe_task(
        self,
        record: TaskRecord,
        scope: ModernScope,
        needs_input: trio.Event,
        immediate: str | None,
        mrtr: InputNeeded | None,
        binding: tuple[str, str, Any],
    ) -> tuple[dict[str, Any], bool]:
        """The answer to a server-directed call, and whether it shows the task."""
        outcome: TaskOutcome | None = None

        async def wait_for_outcome(cancel_scope: trio.CancelScope) -> None:
            nonlocal outcome
            try:
                outcome = await self.receiver.outcome(record.task_id)
            except McpError:
                pass  # removed meanwhile: answer with the task, whose record says what happened
            cancel_scope.cancel()

        async def wait_for(event: trio.Event, cancel_scope: trio.CancelScope) -> None:
            await event.wait()
            cancel_scope.cancel()

        async def first_rounds(cancel_scope: trio.CancelScope) -> None:
            for _ in range(REQUIRED_INPUT_ROUNDS):
                await trio.lowlevel.checkpoint()
            cancel_scope.cancel()

        # An optional tool gets the auto-task window; a required one is a task anyway, and only
        # the input it asks for at once (within its first scheduler rounds) comes before it.
        window = self.supervisor.limits.auto_task_after_ms / 1000 if mrtr is None else math.inf
        with trio.move_on_after(window):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_outcome, nursery.cancel_scope)
                nursery.start_soon(wait_for, needs_input, nursery.cancel_scope)
                if mrtr is not None:
                    nursery.start_soon(wait_for, mrtr.needed_event, nursery.cancel_scope)
                    nursery.start_soon(first_rounds, nursery.cancel_scope)
        if mrtr is not None and mrtr.needed:
            await trio.lowlevel.checkpoint()  # let questions asked together all be recorded
            return self._input_required(binding, mrtr, scope), False
        if outcome is not None and mrtr is None:
            rendered = scope.render_outcome(record.task_id, outcome)
            if isinstance(rendered, ErrorValue):
                raise rendered.exception()
            return rendered, False
        if mrtr is not None:
            mrtr.task_shown = True  # from now on, input is asked through the task
        poll: Reply[TaskRecord] = Reply()
        self.supervisor.tell(Route(self.owner, record.task_id, Poll(poll)))
        return scope.render_created(await poll.wait(), immediate), True
