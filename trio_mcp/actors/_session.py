"""SessionActor: one per connection. It keeps the connection's loop and admission; what
each request means is its era's dialect's to say (a command and a scope), how it is served is
the command's (:class:`~trio_mcp.protocol.commands.Serving`), and what serves it is the one
dispatch table (:mod:`trio_mcp.actors._dispatch`).

Quick requests (ping, lists, task get/cancel/create) are answered in order by the reader;
requests that wait on work (a plain ``tools/call``, ``tasks/result``) run in their own Trio task
so any number can be open at once, and ``notifications/cancelled`` stops them (a plain call
delivered by a direct transport's caller, an HTTP POST, runs in that caller's task instead). Nothing a client
sends reaches past this actor as an exception: every failure becomes a JSON-RPC error. Every
request is an :class:`~trio_mcp.actors._request.InboundRequest` from admission to its
answer's write.
"""

from __future__ import annotations

import contextvars
import functools
import itertools
import logging
import secrets
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from ..protocol import jsonrpc
from ..protocol.commands import AwaitTaskResult, Command, Serving, serving_of
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, ErrorValue, McpError
from ..protocol.handshake import HandshakeDialect
from ..protocol.modern import ModernDialect, ModernScope, is_modern
from ..protocol.records import TaskRecord
from ..transports.base import Transport
from ._calls import InputNeeded, Scope, ToolCall, ToolEntry, ToolRun, task_support_of
from ._dispatch import (
    GATED_METHODS,
    HANDLERS,
    REQUIRED_INPUT_ROUNDS,
    Listener,
    Service,
    answer_of,
    refused,
    request_info,
    served,
    served_creation,
    unoffered,
    with_hooks,
)
from ._endpoint import OVERLOADED, ConnectionClosed, Endpoint
from ._middleware import Middlewares
from ._receiver import Rendered, Started, TaskReceiver, encode_answer
from ._request import InboundRequest, current_request
from ._requestor import TaskRequestor
from .runtime import MailboxFull, Reply
from .supervisor import Remove, TaskSupervisor

__all__ = [
    "MAX_WAITING_REQUESTS",
    "REQUIRED_INPUT_ROUNDS",
    "SHUTTING_DOWN",
    "TOO_MANY_REQUESTS",
    "InputNeeded",
    "Service",
    "SessionActor",
    "ToolCall",
    "ToolEntry",
    "ToolRun",
    "connection_owner",
]

log = logging.getLogger("trio_mcp")


MAX_WAITING_REQUESTS = 256
"""Requests one session may have outstanding — ``tools/call``, ``tasks/result``, task
creation, ``subscriptions/listen``, each until its answer is written. Past it, a new such
request is answered at once with :data:`TOO_MANY_REQUESTS`. Queries about existing tasks
(get, cancel, list, update) are answered in microseconds and not counted, and the reader never
stops reading, so pings, cancellations and the client's own answers always get through."""

SHUTTING_DOWN = ErrorValue(INTERNAL_ERROR, "Server shutting down: the request was cancelled")

TOO_MANY_REQUESTS = ErrorValue(
    INTERNAL_ERROR, f"Server overloaded: at most {MAX_WAITING_REQUESTS} outstanding requests per connection"
)

_session_numbers = itertools.count(1)

current_session_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "trio_mcp_current_session_id", default=None
)
"""The MCP session id of the connection being served (:attr:`SessionActor.mcp_session_id`), in
its Trio tasks and the tasks they start; None where the transport has none. Telemetry reads it."""

_NO_MIDDLEWARE = Middlewares((), ())

# The serving kinds as module globals: an Enum member read through its class costs a Python
# call in 3.11, and the reader compares kinds for every request.
_NOW, _INLINE, _QUERY, _CREATE, _RESULT, _CALL = (
    Serving.NOW,
    Serving.INLINE,
    Serving.QUERY,
    Serving.CREATE,
    Serving.RESULT,
    Serving.CALL,
)


def connection_owner() -> str:
    """A fresh identity for a connection without an authenticated one."""
    return "connection:" + secrets.token_urlsafe(12)


Call = Callable[[], Awaitable[dict[str, Any]]]


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
        self.unwritten: set[str] = set()
        """Tasks created whose answer (their CreateTaskResult) is not written yet."""
        self._tasks_dropped = False
        self.subscribed: set[str] = set()
        """``resources/subscribe`` (handshake era)."""
        self.listeners: dict[jsonrpc.RequestId, Listener] = {}
        """Open ``subscriptions/listen`` streams."""
        self._tool_support = task_support_of(service.tools)
        self.receiver = TaskReceiver(self, supervisor, self.owner, self.dialect, client)
        self.client_tasks = TaskRequestor(self)
        """Follow the tasks this session's client runs for the server (see Context.elicit_task)."""
        self._nursery: trio.Nursery | None = None
        self._shield_calls = self._direct is not None and self._direct.shields_calls
        session_id = getattr(transport, "id", None)  # read once: a transport's id never changes
        self._mcp_session_id: str | None = session_id if isinstance(session_id, str) else None
        if self._mcp_session_id is not None:
            # What a message starts must see the session's id; without one, nothing to set.
            self.deliver = self._deliver_in_session  # type: ignore[method-assign]
        if service.middleware_chain is not None:
            # Requests go through the middleware registered by now (and any added later).
            self.on_request = self._on_request_through  # type: ignore[method-assign]

    @property
    def protocol_version(self) -> str | None:
        return self.dialect.version

    @property
    def session_id(self) -> str:
        """This connection's session, as middleware is told: the MCP session id where the
        transport has one (Streamable HTTP's ``Mcp-Session-Id``, as telemetry's
        ``mcp.session.id``), else the actor's name (``session-N``: stdio, WebSocket)."""
        return self.mcp_session_id or self.name

    @property
    def mcp_session_id(self) -> str | None:
        """The MCP session id the transport gave this connection — Streamable HTTP's
        ``Mcp-Session-Id`` (its session transport's ``id``) — or None: stdio and WebSocket
        connections have none (MCP defines session ids for Streamable HTTP only)."""
        return self._mcp_session_id

    @property
    def client_capabilities(self) -> dict[str, Any]:
        return self.dialect.client_capabilities

    async def run(self) -> None:
        """Serve until the client hangs up, then cancel what it left running."""
        trace = self.supervisor.tracer
        trace("actor.start", {"actor": "SessionActor", "name": self.name})
        # In this task's context, for the connection's life: every task it starts inherits it.
        session_id = self.mcp_session_id
        token = current_session_id.set(session_id) if session_id is not None else None
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                await self.run_connection(nursery)
                nursery.cancel_scope.cancel()  # requests still running have no one to answer
        finally:
            for scope in self._in_flight.values():
                scope.cancel()  # nor have those served in their deliverers' tasks (see deliver)
            with trio.CancelScope(shield=True):
                await self.transport.aclose()
            trace("actor.stop", {"actor": "SessionActor", "name": self.name})
            if token is not None:
                current_session_id.reset(token)

    async def _deliver_in_session(self, message: jsonrpc.Received) -> None:
        """:meth:`deliver` of a connection with an MCP session id: a direct transport's caller
        delivers from its own task (an HTTP POST's), and what the message starts must still
        see this session's id, as the reader's tasks do."""
        session_id = self._mcp_session_id
        if current_session_id.get() == session_id:
            await Endpoint.deliver(self, message)
            return
        token = current_session_id.set(session_id)
        try:
            await Endpoint.deliver(self, message)
        finally:
            current_session_id.reset(token)

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
        for task_id in self.unwritten:
            self.remove_task(task_id)
        self.unwritten.clear()

    def remove_task(self, task_id: str) -> None:
        """Remove a task no client was told of, whoever owns it (its work, if begun, is
        cancelled): an identity's tasks outlive the connection, so dropping the connection's
        owner would not do."""
        self.supervisor.remove(Remove(self.owner, task_id))

    def _read(self, message: jsonrpc.Request, modern: bool) -> tuple[Command, Scope] | ErrorValue:
        """What ``message`` asks, and how its era writes the answer; or the error to answer."""
        if message.method in GATED_METHODS and (modern or self.dialect.initialized):
            # A server that offers no resources (prompts, completion) does not have their methods.
            refused = unoffered(self.service, message.method)
            if refused is not None:
                return refused
        if modern:
            return self.modern.interpret(message, self._tool_support)
        command = self.dialect.interpret(message, self._tool_support)
        return command if isinstance(command, ErrorValue) else (command, self.dialect)

    # -- dispatch -------------------------------------------------------------------------
    async def on_request(self, message: jsonrpc.Request) -> None:
        # The era is decided per request: the modern envelope in ``_meta`` means 2026-07-28
        # (stateless); anything else is the handshake era of this connection.
        request = InboundRequest(message, self.service.request_observer)
        modern = is_modern(message.params)
        read = self._read(message, modern)
        if isinstance(read, ErrorValue):
            self._refuse(request, read)
            return
        command, scope = read
        serving = request.serving = serving_of(command, modern)
        if serving is _RESULT:
            assert isinstance(command, AwaitTaskResult)
            self._await_result(request, command.task_id, scope)
            return
        handler = HANDLERS[serving, type(command)]
        if serving is _QUERY or serving is _CREATE:
            self._query(request, handler, command, scope, serving is _CREATE)
        elif serving is _NOW:
            self._queue_answer(request, encode_answer(message.id, handler(self, command, scope, request)))
        elif serving is _INLINE:
            await self._answer(request, lambda: handler(self, command, scope, request))
        elif self._admit_waiting(request):
            if serving is _CALL and self._direct is not None:
                # A direct transport's deliverer waits for its call anyway: served in its task.
                await self._answer_in_caller(request, lambda: handler(self, command, scope, request))
            else:  # CALL, MAYBE_TASK: in a Trio task of their own
                self._spawn_answer(request, lambda: handler(self, command, scope, request))

    async def _on_request_through(self, message: jsonrpc.Request) -> None:
        """:meth:`on_request` of a session whose server has middleware (chosen when the
        session is made, so that a server without any pays nothing per request)."""
        request = InboundRequest(message, self.service.request_observer)
        modern = is_modern(message.params)
        read = self._read(message, modern)
        await self._through(self.service.middleware_chain or _NO_MIDDLEWARE, request, read, modern)

    async def _through(
        self,
        middleware: Middlewares,
        request: InboundRequest,
        read: tuple[Command, Scope] | ErrorValue,
        modern: bool,
    ) -> None:
        """Serve ``request`` through the server's middleware, awaited, by the same handlers
        (:func:`served`). What waits on work or a task (calls, creations, ``tasks/result``)
        runs in a Trio task of its own, admitted and counted as without middleware; the rest
        (ping, lists, task queries, refusals) is answered in order by the reader, as before."""
        if isinstance(read, ErrorValue):
            command: Any = None
            era, version = ("modern", None) if modern else ("handshake", self.dialect.version)
        else:
            command, scope = read
            era = scope.era
            version = scope.version if isinstance(scope, ModernScope) else self.dialect.version
        info = request_info(request, command, era, version, self.owner, self.receiver.client, self.session_id)
        if command is None:
            assert isinstance(read, ErrorValue)
            error = read
            await self._answer_inline(request, lambda: middleware.serve(info, lambda: refused(error)))
            return
        serving = request.serving = serving_of(command, modern)
        if serving is _RESULT:
            task_id = command.task_id
            if self._admit_waiting(request):
                self._spawn_answer(
                    request,
                    lambda: middleware.serve(info, lambda: self.receiver.start_result(task_id, scope).wait()),
                )
            return
        handler = with_hooks(HANDLERS[serving, type(command)], command, middleware, info)
        if serving is _NOW or serving is _INLINE or serving is _QUERY:
            inner = functools.partial(served, handler, self, command, scope, request)
            await self._answer_inline(request, lambda: middleware.serve(info, inner))
        elif self._admit_waiting(request):
            way = served_creation if serving is _CREATE else served
            inner = functools.partial(way, handler, self, command, scope, request)
            self._spawn_answer(request, lambda: middleware.serve(info, inner))

    async def _answer_inline(self, request: InboundRequest, call: Call) -> None:
        """Answer in the reader, in the request's context (:data:`current_request`)."""
        token = current_request.set(request)
        try:
            await self._answer(request, call)
        finally:
            current_request.reset(token)

    def _queue_answer(self, request: InboundRequest, data: bytes, error: int | None = None) -> bool:
        """Queue ``request``'s answer (never waits); False (the request dropped) if the
        connection has closed."""
        return request.queue(self.post, data, error)

    def _refuse(self, request: InboundRequest, error: ErrorValue) -> None:
        """Answer ``request`` with ``error`` (queued: never waits)."""
        self._queue_answer(request, encode_answer(request.message.id, error), error.code)

    async def _answer(self, request: InboundRequest, call: Call) -> bool:
        """Run ``call`` and queue its answer (:func:`answer_of`); ConnectionClosed if the
        connection has closed."""
        data, error = await answer_of(request, call)
        await trio.lowlevel.checkpoint_if_cancelled()
        hidden = request.hidden
        if hidden is not None and error is not None:
            hidden.remove()  # an error shows no task: one made for the request goes
        if not self._queue_answer(request, data, error):
            raise ConnectionClosed
        if hidden is not None and error is None:
            hidden.queued()  # the answer showing its task is on its way: start the work
        return True

    # -- telling the client what changed --------------------------------------------------
    def list_changed(self, kind: str) -> None:
        """The server's ``kind`` list (tools, prompts, resources) changed."""
        if self.dialect.initialized:
            self.notify(f"notifications/{kind}/list_changed")
        for subscription, listener in list(self.listeners.items()):
            if kind in listener.lists:
                self.notify(*listener.scope.tagged(subscription, f"notifications/{kind}/list_changed", {}))

    def resource_updated(self, uri: str) -> None:
        """The resource at ``uri`` changed: tell the client if it subscribed to it."""
        if uri in self.subscribed:
            self.notify("notifications/resources/updated", {"uri": uri})
        for subscription, listener in list(self.listeners.items()):
            if uri in listener.uris:
                self.notify(
                    *listener.scope.tagged(subscription, "notifications/resources/updated", {"uri": uri})
                )

    # -- admission ---------------------------------------------------------------------------
    def _admit_waiting(self, request: InboundRequest) -> bool:
        """Admit a request that may wait: refused if its id is already waiting, or past the limit."""
        request_id = request.message.id
        if request_id in self._in_flight:
            self._refuse(
                request, ErrorValue(INVALID_REQUEST, f"Invalid request: id {request_id!r} is already in use")
            )
            return False
        return self._admit(request)

    def _admit(self, request: InboundRequest) -> bool:
        """Count one more outstanding request (released once its answer is written), or refuse
        it at once past the limit (the refusal queued: never waits)."""
        if self._outstanding >= MAX_WAITING_REQUESTS:
            self._queue_answer(
                request, encode_answer(request.message.id, TOO_MANY_REQUESTS), TOO_MANY_REQUESTS.code
            )
            return False
        self._outstanding += 1
        request.after_written = self._release
        return True

    def _release(self) -> None:
        self._outstanding -= 1

    def _unanswered(self, request: InboundRequest) -> None:
        """An admitted request no answer will be written for: dropped, its slot freed."""
        request.after_written = None
        request.dropped()
        self._release()

    def quiet(self) -> bool:
        return self._queries == 0

    def idle(self) -> bool:
        """Nothing outstanding, and no running task of this connection's own."""
        owned = self.supervisor.live_count(self.owner) if self.connection_owned else 0
        return self._outstanding == 0 and self._queries == 0 and not self._in_flight and not owned

    # -- serving kinds ------------------------------------------------------------------------
    def _spawn_answer(self, request: InboundRequest, call: Call) -> None:
        """Answer an admitted request from a Trio task of its own (started in the request's
        context), which a ``notifications/cancelled`` for it cancels."""
        assert self._nursery is not None
        scope = trio.CancelScope()
        self._in_flight[request.id] = scope
        request.run(self._nursery.start_soon, self._answer_in_scope, request, call, scope)

    async def _answer_in_caller(self, request: InboundRequest, call: Call) -> None:
        """Answer an admitted call in the calling Trio task (a direct transport's deliverer: an
        HTTP POST's, which keeps what the call sends meanwhile moving from a task of its
        own). ``notifications/cancelled``, the session's end and shutdown cancel it, and so
        does cancelling the deliverer, unless the transport ``shields_calls``."""
        if self.closed:  # the session ended as it was delivered: nothing runs, nobody hears
            self._unanswered(request)
            return
        scope = trio.CancelScope(shield=self._shield_calls)
        self._in_flight[request.id] = scope
        assert self._direct is not None
        self._direct.call_started(request.id)
        token = current_request.set(request)
        try:
            await self._answer_in_scope(request, call, scope)
        finally:
            current_request.reset(token)

    async def _answer_in_scope(self, request: InboundRequest, call: Call, scope: trio.CancelScope) -> None:
        queued = False
        try:
            with scope:
                queued = await self._answer(request, call)
        except ConnectionClosed:
            pass  # the client left; nobody to answer
        finally:
            self._in_flight.pop(request.id, None)
            if not queued:  # no answer will be written (cancelled, or none due)
                self._unanswered(request)
            hidden = request.hidden
            if hidden is not None:
                # The call is over. Its task stays only if the answer showing it was queued —
                # and then only until the connection ends, unless that answer is written.
                hidden.done = True
                if not queued:
                    hidden.remove()

    def _await_result(self, request: InboundRequest, task_id: str, scope: Scope) -> None:
        """``tasks/result``: answered at once, without a Trio task of its own, when the task has
        ended or is unknown; otherwise by a waiting one (:meth:`_admit_waiting`'s rules either way)."""
        if request.id not in self._in_flight:
            current = self.supervisor.current(self.owner, task_id)
            if isinstance(current, ErrorValue):
                self._queue_answer(request, encode_answer(request.id, current), current.code)
                return
            if current is not None and current.outcome is not None:
                rendered = scope.render_outcome(task_id, current.outcome)
                self._queue_answer(request, encode_answer(request.id, rendered))
                return
        if not self._admit_waiting(request):
            return
        try:
            started = self.receiver.start_result(task_id, scope)
        except MailboxFull:
            request.after_written = None
            self._release()
            self._refuse(request, OVERLOADED)
            return
        if started.reply.answered:
            self._queries += 1
            self._answer_later(request, started, started.reply)
        else:
            self._spawn_answer(request, started.wait)

    def _query(
        self,
        request: InboundRequest,
        handler: Callable[..., Started | Rendered],
        command: Any,
        scope: Scope,
        counted: bool,
    ) -> None:
        """Send a query to the supervisor and answer it from the reply's continuation.

        Queries about existing tasks (get, cancel, list, update) are answered in microseconds
        and are not counted against :data:`MAX_WAITING_REQUESTS`, so a cancel always gets
        through; a task creation (``counted``) is, until its answer is written."""
        if counted and not self._admit(request):
            return
        # A creation runs in its request's context: what a task made now was made for.
        token = current_request.set(request) if counted else None
        try:
            started = handler(self, command, scope, request)
        except MailboxFull:
            started = OVERLOADED
        except Exception as exc:  # a bug: answer it, keep the connection
            log.error("starting %s failed: %r", request.message.method, exc, exc_info=exc)
            started = ErrorValue(INTERNAL_ERROR, f"Internal error: {exc}")
        finally:
            if token is not None:
                current_request.reset(token)
        if not isinstance(started, Started):  # answered without asking
            code = started.code if isinstance(started, ErrorValue) else None
            if not self._queue_answer(request, encode_answer(request.id, started), code) and counted:
                self._release()
            return
        self._queries += 1
        reply = started.reply
        if reply.answered:  # answered in the supervisor's call: no continuation to keep
            self._answer_later(request, started, reply)
        else:
            reply.then(lambda reply: self._answer_later(request, started, reply))

    def _answer_later(self, request: InboundRequest, started: Started, reply: Reply[Any]) -> None:
        # Runs in the answering actor's task: it must never raise into it. A refusal is an
        # error value, answered as it is: nothing raised, so nothing (no traceback holding the
        # frames that hold the request) outlives the answer.
        self._queries -= 1
        request_id = request.message.id
        after = started.after  # run with the answer once it is queued, unless it is an error
        value: Any = None
        error = reply.error_value
        code: int | None = None
        if error is not None:
            after = None
            code = error.code
            data = jsonrpc.encode_error(request_id, error.code, error.message, error.data)
        else:
            try:
                value = reply.unwrap()
                rendered = started.render(value)
                data = encode_answer(request_id, rendered)
                if isinstance(rendered, ErrorValue):
                    after = None
                    code = rendered.code
            except McpError as exc:
                after = None
                code = exc.code
                data = jsonrpc.encode_error(request_id, exc.code, exc.message, exc.data)
            except Exception as exc:
                after = None
                code = INTERNAL_ERROR
                log.error("answering request %r failed: %r", request_id, exc, exc_info=exc)
                data = jsonrpc.encode_error(request_id, INTERNAL_ERROR, f"Internal error: {exc}")
        release = request.after_written  # a counted request's slot (None for a query)
        if after is None:
            if not self._queue_answer(request, data, code) and release is not None:
                release()
            if started.after is not None and isinstance(value, TaskRecord):
                # Created, but answered with an error instead of its CreateTaskResult: nobody
                # got its id, never start it.
                self.remove_task(value.task_id)
            return
        created: str = value.task_id  # only a creation has something to do after its answer
        # A creation is counted (its slot, ``release``, is freed once its answer is written).
        request.after_written = functools.partial(self._creation_written, created)
        if self._queue_answer(request, data):
            # The work starts now: its status notifications queue behind its CreateTaskResult
            # (often into the same write). Until that answer is written the task is one the
            # client may never hear of: if the connection ends first, it is removed.
            self.unwritten.add(created)
            after(value)
        else:
            if release is not None:
                release()
            # Created for a connection that has gone: nobody got its id, never start it.
            self.remove_task(created)

    def _creation_written(self, task_id: str) -> None:
        """A creation's CreateTaskResult was handed to the transport: the client may know the
        task from now on, and the creation no longer counts as outstanding."""
        self._outstanding -= 1
        self.unwritten.discard(task_id)

    async def on_notification(self, notification: jsonrpc.Notification) -> None:
        command = self.dialect.interpret_notification(notification)
        if command is not None:
            scope = self._in_flight.get(command.request_id)
            if scope is not None:
                scope.cancel()  # the request ends without a response, as the spec asks
