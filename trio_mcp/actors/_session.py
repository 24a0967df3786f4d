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
    Discover,
    GetTask,
    Initialize,
    Listen,
    ListTasks,
    ListTools,
    Ping,
    SetLogLevel,
    UpdateTask,
)
from ..protocol.converter import unstructure
from ..protocol.cursors import decode_cursor, encode_cursor
from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST, ErrorValue, McpError
from ..protocol.handshake import HandshakeDialect
from ..protocol.messages import CallToolResult, CreateTaskResult, Implementation, TaskSupport, Tool
from ..protocol.modern import ModernDialect, ModernScope, is_modern
from ..protocol.records import TaskOutcome, TaskRecord
from ..protocol.request_state import StateCodec, binding_of
from ..protocol.tasks import TaskStatus
from ..transports.base import Transport
from ._endpoint import OVERLOADED, ConnectionClosed, Endpoint
from ._receiver import Renderer, Started, TaskReceiver
from ._requestor import TaskRequestor
from .runtime import MailboxFull, Reply, ask
from .supervisor import Remove, Route, TaskSupervisor, Unwatch, Watch
from .task_actor import Poll, TaskActor

log = logging.getLogger("trio_mcp")


MAX_WAITING_REQUESTS = 256
"""Requests one session may have outstanding — ``tools/call``, ``tasks/result``, task queries
awaiting the supervisor, each until its answer is written. Past it, a new such request is
answered at once with :data:`TOO_MANY_REQUESTS`; the reader never stops reading, so pings,
cancellations and the client's own answers always get through."""

SHUTTING_DOWN = ErrorValue(INTERNAL_ERROR, "Server shutting down: the request was cancelled")

TOO_MANY_REQUESTS = ErrorValue(
    INTERNAL_ERROR, f"Server overloaded: at most {MAX_WAITING_REQUESTS} outstanding requests per connection"
)


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

    @property
    def state_codec(self) -> StateCodec: ...


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


class InputNeeded:
    """A modern-era plain call's multi round-trip state: the answers it was given (from the
    ``requestState`` and the retry's ``inputResponses``) and the input it still needs."""

    __slots__ = ("answers", "needed", "next_key", "scope")

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.needed: dict[str, Any] = {}
        self.next_key = 0
        self.scope = trio.CancelScope()


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
        self, capability: str, method: str, params: dict[str, Any], status: str | None
    ) -> dict[str, Any]:
        """Input from the client, the way this call's era and mode provide it."""
        request = self.scope.input_request(capability, method, params, self.task_id)
        if isinstance(request, ErrorValue):
            raise request.exception()
        method, params = request
        if self.scope.era == "modern":
            if self.task is not None:
                return await self._ask_through_task(method, params, status)
            return await self._ask_by_retry(method, params)
        if self.task is None:
            return await self.session.request(method, params)
        with self.task.awaiting_input(status):
            return await self.session.request(method, params)

    async def _ask_through_task(
        self, method: str, params: dict[str, Any], status: str | None
    ) -> dict[str, Any]:
        assert self.task is not None
        key, reply = self.task.request_input({"method": method, "params": params}, status)
        try:
            answer = await reply.wait()
        finally:
            self.task.withdraw_input(key)
        if not isinstance(answer, dict):
            raise McpError(INVALID_PARAMS, f"Invalid params at 'inputResponses.{key}': expected an object")
        return answer

    async def _ask_by_retry(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        mrtr = self.mrtr
        assert mrtr is not None
        key = f"input-{mrtr.next_key}"
        mrtr.next_key += 1
        answer = mrtr.answers.get(key)
        if answer is not None:
            if not isinstance(answer, dict):
                raise McpError(
                    INVALID_PARAMS, f"Invalid params at 'inputResponses.{key}': expected an object"
                )
            return answer
        mrtr.needed[key] = {"method": method, "params": params}
        mrtr.scope.cancel()  # stop the call here; the client retries with the answer
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


class SessionActor(Endpoint):
    def __init__(
        self,
        service: Service,
        supervisor: TaskSupervisor,
        transport: Transport,
        *,
        owner: str | None = None,
        idle_timeout: float | None = None,
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
        self._unstarted: set[str] = set()  # created; their CreateTaskResult not written yet
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

    def shutdown(self) -> None:
        """The server is stopping: answer every waiting request with :data:`SHUTTING_DOWN`
        (its work is cancelled) and read nothing more."""
        for request_id, scope in list(self._in_flight.items()):
            scope.cancel()
            self.post(jsonrpc.encode_error(request_id, SHUTTING_DOWN.code, SHUTTING_DOWN.message))
        self._in_flight.clear()
        self.stop_reading()

    def on_disconnect(self) -> None:
        # Remove the connection's tasks first, so their work is cancelled before the requests
        # they have open to this client fail: a disconnect cancels, it does not fail them.
        if self.connection_owned:
            self.supervisor.owner_gone(self.owner)
        # Tasks whose CreateTaskResult was never written never started, and their ids never
        # reached the client: whoever owns them, they go.
        for task_id in self._unstarted:
            self.supervisor.mailbox.put(Remove(self.owner, task_id), system=True)
        self._unstarted.clear()

    def _tool_support(self, name: str) -> TaskSupport | None:
        entry = self.service.tools.get(name)
        return entry.tool.task_support if entry is not None else None

    # -- dispatch -------------------------------------------------------------------------
    async def on_request(self, request: jsonrpc.Request) -> None:
        # The era is decided per request: the modern envelope in ``_meta`` means 2026-07-28
        # (stateless); anything else is the handshake era of this connection.
        if is_modern(request.params):
            await self._on_modern(request)
            return
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
            await self.answer(request, functools.partial(self._tools_list, command, self.dialect.complete))
        # Task queries: sent to the supervisor and answered from the reply's continuation, so
        # the reader goes on with the next request at once (pipelined clients: one scheduler
        # round per burst, not per request). FIFO mailboxes keep them in order.
        elif isinstance(command, GetTask):
            await self._start(request, lambda: self.receiver.start_get(command.task_id))
        elif isinstance(command, CancelTask):
            await self._start(request, lambda: self.receiver.start_cancel(command.task_id))
        elif isinstance(command, ListTasks):
            await self._start(
                request, lambda: self.receiver.start_list(command.cursor, self.dialect.render_page)
            )
        elif isinstance(command, CallTool) and command.as_task:
            await self._start(request, lambda: self._start_create(command, self.dialect), counted=True)
        elif isinstance(command, CallTool):
            await self._wait(request, functools.partial(self._tools_call, command, self.dialect))
        elif isinstance(command, AwaitTaskResult):
            await self._wait(request, functools.partial(self._task_result, command.task_id))

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
            await self._start(request, lambda: self.receiver.start_get(command.task_id, scope))
        elif isinstance(command, CancelTask):
            await self._start(request, lambda: self.receiver.start_cancel(command.task_id, scope))
        elif isinstance(command, UpdateTask):
            await self._start(
                request, lambda: self.receiver.start_update(command.task_id, command.input_responses, scope)
            )
        elif isinstance(command, CallTool) and command.as_task:
            await self._start(request, lambda: self._start_create(command, scope), counted=True)
        elif isinstance(command, Listen):
            await self._wait(request, functools.partial(self._listen, command, scope))
        elif isinstance(command, CallTool) and command.auto_task:
            await self._wait(request, functools.partial(self._call_maybe_task, command, scope))
        elif isinstance(command, CallTool):
            await self._wait(request, functools.partial(self._modern_call, command, scope))

    @staticmethod
    def _capabilities() -> dict[str, Any]:
        return {"tools": {"listChanged": False}, "logging": {}}

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
        if not await self._admit(request):
            return
        scope = trio.CancelScope()
        self._in_flight[request.id] = scope
        self._nursery.start_soon(self._answer_in_scope, request, handler, scope)

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
        started.reply.then(functools.partial(self._answer_later, request.id, started, release))

    def _answer_later(
        self,
        request_id: jsonrpc.RequestId,
        started: Started,
        release: Callable[[], None],
        result: Outcome[Any],
    ) -> None:
        # Runs in the answering actor's task: it must never raise into it.
        self._queries -= 1
        after: Callable[[], None] | None = None
        value: Any = None
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
        if after is None:
            written: Callable[[], None] = release
        else:
            start = after
            created = value.task_id if isinstance(value, TaskRecord) else None
            if created is not None:
                self._unstarted.add(created)

            def written() -> None:
                release()
                if created is not None:
                    self._unstarted.discard(created)
                start()  # the task's work begins once its CreateTaskResult is written

        if not self.post(data, written):
            release()
            if after is not None and isinstance(value, TaskRecord):
                # Created for a connection that has gone: nobody got its id, never start it.
                self._unstarted.discard(value.task_id)
                self.supervisor.mailbox.put(Remove(self.owner, value.task_id), system=True)

    async def _answer_in_scope(
        self,
        request: jsonrpc.Request,
        handler: Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]],
        scope: trio.CancelScope,
    ) -> None:
        queued = False
        try:
            with scope:
                queued = await self.answer(request, handler, self._release)
        except ConnectionClosed:
            pass  # the client left; nobody to answer
        finally:
            self._in_flight.pop(request.id, None)
            if not queued:  # no answer will be written (cancelled, or none due)
                self._release()

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

    async def _task_result(self, task_id: str, request: jsonrpc.Request) -> dict[str, Any]:
        return await self.receiver.result(task_id)

    def _start_create(self, command: CallTool, scope: Scope) -> Started:
        """A task: create it; the work starts once the CreateTaskResult is queued."""
        immediate = self.service.tools[command.name].immediate_response
        return self.receiver.start_create(self._task_work(command, scope), command.ttl_ms, immediate, scope)

    def _task_work(self, command: CallTool, scope: Scope) -> Callable[[TaskActor], Awaitable[TaskOutcome]]:
        entry = self.service.tools[command.name]

        async def work(actor: TaskActor) -> TaskOutcome:
            result = await entry.call(command.arguments, ToolCall(self, command.progress_token, actor, scope))
            return scope.settle_tool_result(result)

        return work

    async def _listen(self, command: Listen, scope: ModernScope, request: jsonrpc.Request) -> dict[str, Any]:
        """``subscriptions/listen``: acknowledge what will be sent, then tagged notifications of
        the watched tasks until the client cancels the request (``notifications/cancelled``)
        or goes away."""
        subscription = request.id
        early: list[TaskRecord] | None = []  # changes seen before the acknowledgement went out

        def watcher(record: TaskRecord) -> None:
            if early is not None:
                early.append(record)
            elif not self.closed:
                self.notify(*scope.task_notification(subscription, record))

        task_ids = command.task_ids or ()
        accepted: tuple[str, ...] = ()
        try:
            if task_ids:
                accepted = await ask(
                    self.supervisor, lambda reply: Watch(self.owner, task_ids, watcher, reply)
                )
            honoured: dict[str, Any] = {} if command.task_ids is None else {"taskIds": list(accepted)}
            await self.send(jsonrpc.encode_notification(*scope.subscription_ack(subscription, honoured)))
            backlog, early = early, None
            for record in backlog or ():
                self.notify(*scope.task_notification(subscription, record))
            await trio.sleep_forever()
        finally:
            if accepted:
                self.supervisor.mailbox.put(Unwatch(accepted, watcher), system=True)
        raise AssertionError("unreachable")  # pragma: no cover

    # -- the modern era's calls -------------------------------------------------------------
    def _state_binding(self, command: CallTool) -> str:
        # Bound to the caller where there is an identity; a connection-minted owner changes
        # with every connection (stateless HTTP), so those states bind to the call alone.
        owner = self.owner if not self.connection_owned else "anonymous"
        return binding_of(owner, "tools/call", command.name, command.arguments)

    def _answers(self, command: CallTool) -> dict[str, Any]:
        """The answers a retry carries: the sealed ones, plus new responses to what was asked."""
        if command.request_state is None:
            return dict(command.input_responses or {})
        opened = self.service.state_codec.open(
            command.request_state, binding=self._state_binding(command), now=self.supervisor.wall_clock()
        )
        if opened is None:
            raise McpError(INVALID_PARAMS, "Invalid params at 'requestState': not a state this server issued")
        answers = dict(opened.get("answers") or {})
        for key in opened.get("asked") or ():
            if command.input_responses and key in command.input_responses:
                answers[key] = command.input_responses[key]
        return answers

    async def _modern_call(
        self, command: CallTool, scope: ModernScope, request: jsonrpc.Request
    ) -> dict[str, Any]:
        """A plain modern-era call; input it needs comes back as an ``InputRequiredResult``."""
        entry = self.service.tools[command.name]
        mrtr = InputNeeded(self._answers(command))
        with mrtr.scope:
            result = await entry.call(
                command.arguments, ToolCall(self, command.progress_token, None, scope, mrtr)
            )
            data: dict[str, Any] = unstructure(result)
            return scope.complete(data)
        state = self.service.state_codec.seal(
            {"answers": mrtr.answers, "asked": list(mrtr.needed)},
            binding=self._state_binding(command),
            now=self.supervisor.wall_clock(),
        )
        return scope.input_required(mrtr.needed, state)

    async def _call_maybe_task(
        self, command: CallTool, scope: ModernScope, request: jsonrpc.Request
    ) -> dict[str, Any]:
        """Server-directed tasks: the call runs as a task from the start; if it ends within the
        window it is answered with its result (and the task is forgotten, never shown);
        otherwise, or as soon as it needs input, with the task."""
        needs_input = trio.Event()

        def watch(record: TaskRecord) -> None:
            if record.status == TaskStatus.INPUT_REQUIRED:
                needs_input.set()

        entry = self.service.tools[command.name]
        started = self.receiver.start_create(
            self._task_work(command, scope), None, entry.immediate_response, scope, watcher=watch
        )
        record: TaskRecord = await started.reply.wait()
        self.receiver.start_work(record)
        answered = False
        try:
            answer = await self._settle_maybe_task(record, scope, needs_input, entry.immediate_response)
            answered = True
            return answer
        finally:
            if not answered:
                # Withdrawn (or failed) before the task was shown: nobody holds its id.
                self.supervisor.mailbox.put(Remove(self.owner, record.task_id), system=True)

    async def _settle_maybe_task(
        self, record: TaskRecord, scope: ModernScope, needs_input: trio.Event, immediate: str | None
    ) -> dict[str, Any]:
        outcome: TaskOutcome | None = None

        async def wait_for_outcome(cancel_scope: trio.CancelScope) -> None:
            nonlocal outcome
            try:
                outcome = await self.receiver.outcome(record.task_id)
            except McpError:
                pass  # removed meanwhile: answer with the task, whose record says what happened
            cancel_scope.cancel()

        async def wait_for_input(cancel_scope: trio.CancelScope) -> None:
            await needs_input.wait()
            cancel_scope.cancel()

        window = self.supervisor.limits.auto_task_after_ms / 1000
        with trio.move_on_after(window):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_for_outcome, nursery.cancel_scope)
                nursery.start_soon(wait_for_input, nursery.cancel_scope)
        if outcome is not None:
            self.supervisor.mailbox.put(Remove(self.owner, record.task_id), system=True)
            rendered = scope.render_outcome(record.task_id, outcome)
            if isinstance(rendered, ErrorValue):
                raise rendered.exception()
            return rendered
        poll: Reply[TaskRecord] = Reply()
        self.supervisor.tell(Route(self.owner, record.task_id, Poll(poll)))
        return scope.render_created(await poll.wait(), immediate)
