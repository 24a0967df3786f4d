"""Dispatch, apart from the connection loop: what each era-neutral command does.

A dialect turns a request into a command (and a scope: how its era writes answers); the
command's :class:`~trio_mcp.protocol.commands.Serving` says how it is served; :data:`HANDLERS`
— one table for both eras — says by what. Whoever serves requests (a connection's
:class:`~trio_mcp.actors._session.SessionActor`, or
:meth:`~trio_mcp.actors._oneshot.Stateless.serve_one` for one stateless request) carries out
the serving kind — admission, a Trio task of its own, answering from a reply's continuation —
and calls the handler; a handler knows nothing of connections.

A handler is called as ``handler(host, command, scope, request)``:

- ``NOW``: returns the answer (a result, JSON text, or an :class:`ErrorValue`);
- ``QUERY`` / ``CREATE``: returns the :class:`Started` query (or the answer, when it is
  known without asking);
- ``INLINE`` / ``CALL`` / ``MAYBE_TASK``: a coroutine returning the result (an McpError it
  raises is the error answer).

With middleware registered (``Service.middleware_chain``), every request is served awaited
through it instead, by the same handlers: :func:`served` is that awaited path for any serving
kind, :func:`request_info` what the middleware is shown of the request, and :func:`with_hooks`
gives a tool call's handler the run through the tool middleware (the handlers' ``run``, which
is :class:`ToolRun` itself on the paths without middleware).
"""

from __future__ import annotations

import contextlib
import functools
import logging
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
    Serving,
    SetLogLevel,
    SubscribeResource,
    UpdateTask,
)
from ..protocol.converter import unstructure
from ..protocol.cursors import decode_cursor, encode_cursor
from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, METHOD_NOT_FOUND, ErrorValue, McpError
from ..protocol.handshake import HandshakeDialect
from ..protocol.messages import Implementation
from ..protocol.modern import ModernDialect, ModernScope
from ..protocol.records import TaskOutcome, TaskRecord
from ..protocol.request_state import StateCodec, binding_of
from ..protocol.tasks import TERMINAL, TaskStatus
from ._calls import HookedToolRun, InputNeeded, Peer, Scope, ToolCall, ToolEntry, ToolRun
from ._endpoint import OVERLOADED
from ._middleware import Middlewares, RequestInfo
from ._queue import describe
from ._receiver import Rendered, Started, TaskReceiver, encode_answer, result_of
from ._request import InboundRequest, RequestObserver
from .runtime import MailboxFull, Reply, ask
from .supervisor import Reveal, Unwatch, Watch

__all__ = [
    "GATED_METHODS",
    "HANDLERS",
    "REQUIRED_INPUT_ROUNDS",
    "HiddenTask",
    "Host",
    "Listener",
    "Service",
    "answer_from",
    "answer_of",
    "asked",
    "asked_now",
    "request_info",
    "result_of",
    "served",
    "served_creation",
    "unoffered",
    "with_hooks",
]

log = logging.getLogger("trio_mcp")

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


GATED_METHODS = frozenset(_CAPABILITY_OF_METHOD)
"""The methods of kinds a server may not offer (see :func:`unoffered`)."""


def unoffered(service: Service, method: str) -> ErrorValue | None:
    """-32601 for a method of a kind the server does not offer (resources, prompts,
    completion), else None."""
    capability = _CAPABILITY_OF_METHOD.get(method)
    if capability is not None and capability not in service.capabilities():
        return ErrorValue(METHOD_NOT_FOUND, f"Method not found: {method}")
    return None


async def answer_of(
    request: InboundRequest, call: Callable[[], Awaitable[Rendered]]
) -> tuple[bytes, int | None]:
    """Run ``call`` and encode what it returns (a result, one already JSON text, or an error
    value), or the JSON-RPC error it raised: the answer, and its error code (None for a
    result). Anything but McpError is a bug in a handler: logged, answered -32603, never
    raised (cancellation goes on up)."""
    try:
        result = await call()
    except Exception as exc:
        return answer_from(request, None, exc)
    return answer_from(request, result, None)


def answer_from(
    request: InboundRequest, result: Rendered | None, raised: Exception | None
) -> tuple[bytes, int | None]:
    """:func:`answer_of` of a result known already (or of the exception raised instead)."""
    error: ErrorValue | None = None
    if raised is not None:
        if isinstance(raised, McpError):
            error = raised.value
        elif isinstance(raised, MailboxFull):
            error = OVERLOADED
        else:
            log.error("handler for %s failed: %r", request.message.method, raised, exc_info=raised)
            error = ErrorValue(INTERNAL_ERROR, f"Internal error: {raised}")
    request_id = request.id
    if error is None:
        if isinstance(result, ErrorValue):
            error = result
        else:
            assert result is not None  # (None only with ``raised``)
            try:
                return encode_answer(request_id, result), None
            except (ValueError, TypeError) as exc:  # e.g. NaN, or an object JSON cannot hold
                log.error("cannot encode the result for request %r: %r", request_id, exc)
                error = ErrorValue(INTERNAL_ERROR, f"Internal error: result is not JSON: {exc}")
    return jsonrpc.encode_error(request_id, error.code, error.message, error.data), error.code


async def asked(started: Started | Rendered) -> Rendered:
    """A query's answer, awaited: known at once, or rendered when its reply comes (a
    creation's work, ``started.after``, is then started: its answer is on its way)."""
    if not isinstance(started, Started):
        return started
    value = await started.reply.wait()
    return _rendered(started, value)


def asked_now(started: Started | Rendered) -> Rendered:
    """:func:`asked` of a query whose reply is answered already (or that asked nothing)."""
    if not isinstance(started, Started):
        return started
    return _rendered(started, started.reply.unwrap())


def _rendered(started: Started, value: Any) -> Rendered:
    rendered = started.render(value)
    if started.after is not None and not isinstance(rendered, ErrorValue):
        started.after(value)
    return rendered


async def served(
    handler: Handler, host: Host, command: Any, scope: Scope, request: InboundRequest
) -> dict[str, Any]:
    """Serve ``command`` awaited, whatever its serving kind (the path of a request served
    through middleware): its result, or its error raised. The handler is the one the table
    names; only the answering differs from the paths without middleware."""
    answer = handler(host, command, scope, request)
    if not isinstance(answer, Started | dict | bytes | ErrorValue):
        return result_of(await answer)  # INLINE, CALL, MAYBE_TASK: a coroutine
    return result_of(await asked(answer))


async def refused(error: ErrorValue) -> dict[str, Any]:
    """The serving of a request refused before any handler (what middleware calls on to)."""
    raise error.exception()


def request_info(
    request: InboundRequest,
    command: Command | None,
    era: str,
    version: str | None,
    owner: str,
    client: str | None,
    session_id: str | None,
) -> RequestInfo:
    """What middleware is shown of ``request`` (``command``: what it was read as; None if
    refused first); a tool call's hooks see it too."""
    message = request.message
    params = message.params if isinstance(message.params, dict) else {}
    tool: str | None = None
    task_id: str | None = None
    as_task = False
    if type(command) is CallTool:
        tool, as_task = command.name, command.as_task or command.auto_task
    elif isinstance(command, GetTask | CancelTask | UpdateTask | AwaitTaskResult):
        task_id = command.task_id
    elif message.method == "tools/call" and isinstance(params.get("name"), str):
        tool = params["name"]
    return RequestInfo(
        method=message.method,
        request_id=message.id,
        params=params,
        era=era,
        protocol_version=version,
        tool=tool,
        task_id=task_id,
        as_task=as_task,
        owner=owner,
        identity=owner[len(_IDENTITY) :] if owner.startswith(_IDENTITY) else None,
        client=client,
        session_id=session_id,
    )


_IDENTITY = "identity:"  # an authenticated identity's owner (transports.security.identity_owner)


class RunFactory(Protocol):
    """Makes a tool's run (:class:`ToolRun` itself, or one through the tool middleware)."""

    def __call__(
        self,
        peer: Peer,
        entry: ToolEntry,
        arguments: dict[str, Any] | None,
        progress_token: int | str | None,
        scope: Scope,
        mrtr: InputNeeded | None = None,
    ) -> ToolRun: ...


def with_hooks(handler: Handler, command: Command, middleware: Middlewares, info: RequestInfo) -> Handler:
    """``handler`` as the middleware path calls it: a tool call's handler makes its tool's run
    through the tool middleware (shown ``info``); any other handler as it is. (The paths
    without middleware call the handlers as they are, at no cost.)"""
    if type(command) is not CallTool or not middleware.tools:
        return handler
    hooked = functools.partial(HookedToolRun, hooks=(middleware, info))
    return functools.partial(handler, run=hooked)  # type: ignore[call-arg]  # the tool-call handlers take it


REQUIRED_INPUT_ROUNDS = 32
"""Scheduler rounds a ``task_support="required"`` tool runs, in the modern era, before its
CreateTaskResult goes out: input it asks for within them is gathered first by multi
round-trip (``InputRequiredResult``), as SEP-2663 asks of a tool that gathers input and then
runs as a task. Input asked later is asked through the task."""

_JOIN_ROUNDS = 3
"""Scheduler rounds a call that needs input waits before its ``InputRequiredResult``, so that
questions its tool asks together (siblings in a nursery) are all in it."""


class Service(Protocol):
    """What is served: the server layer's description of itself and its tools."""

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

    @property
    def request_observer(self) -> RequestObserver | None: ...

    @property
    def middleware_chain(self) -> Middlewares | None:
        """The registered middleware (None: none, and requests are served without it)."""

    def capabilities(self) -> dict[str, Any]: ...
    def resource_list(self) -> list[dict[str, Any]]: ...
    def template_list(self) -> list[dict[str, Any]]: ...
    def prompt_list(self) -> list[dict[str, Any]]: ...
    async def read_resource(self, uri: str, call: ToolCall) -> list[dict[str, Any]] | None: ...
    async def get_prompt(self, name: str, arguments: dict[str, str], call: ToolCall) -> dict[str, Any]: ...
    async def complete(
        self, ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any] | None
    ) -> dict[str, Any]: ...


@attrs.frozen
class Listener:
    """An open ``subscriptions/listen`` stream: its scope and what it asked for."""

    scope: ModernScope
    lists: frozenset[str]
    uris: frozenset[str]


class Host(Peer, Protocol):
    """Whoever serves a request, as its handler sees it: a connection's session, or one
    stateless request's exchange."""

    service: Service
    owner: str
    connection_owned: bool
    receiver: TaskReceiver
    dialect: HandshakeDialect
    modern: ModernDialect
    listeners: dict[jsonrpc.RequestId, Listener]
    subscribed: set[str]
    unwritten: set[str]
    """Tasks created for a request whose answer (showing them) is not written yet."""

    @property
    def session_id(self) -> str | None:
        """The connection's session, as middleware is told (None: a stateless request)."""

    def notify_encoded(self, data: bytes) -> bool: ...
    async def send(self, data: bytes) -> None: ...
    def remove_task(self, task_id: str) -> None: ...


# -- answered now ---------------------------------------------------------------------------
def _ping(host: Host, command: Ping, scope: Scope, request: InboundRequest) -> Rendered:
    return {}


def _initialize(host: Host, command: Initialize, scope: Scope, request: InboundRequest) -> Rendered:
    service = host.service
    return host.dialect.initialize(command, service.info, service.instructions, service.capabilities())


def _set_log_level(host: Host, command: SetLogLevel, scope: Scope, request: InboundRequest) -> Rendered:
    return host.dialect.set_log_level(command)


def _discover(host: Host, command: Discover, scope: Scope, request: InboundRequest) -> Rendered:
    assert isinstance(scope, ModernScope)
    return host.modern.discover(scope, host.service.capabilities())


def _subscribe(host: Host, command: SubscribeResource, scope: Scope, request: InboundRequest) -> Rendered:
    if command.subscribe:
        host.subscribed.add(command.uri)
    else:
        host.subscribed.discard(command.uri)
    return {}


# -- task queries -----------------------------------------------------------------------------
def _get(host: Host, command: GetTask, scope: Scope, request: InboundRequest) -> Started | Rendered:
    """``tasks/get``: answered from the record when it can be read without waiting (see
    :meth:`TaskSupervisor.current`), else through the supervisor's mailbox."""
    current = host.supervisor.current(host.owner, command.task_id)
    if current is None:
        return host.receiver.start_get(command.task_id, scope)
    if isinstance(current, ErrorValue):
        return current
    return scope.task_json(current)


def _cancel(host: Host, command: CancelTask, scope: Scope, request: InboundRequest) -> Started | Rendered:
    return host.receiver.start_cancel(command.task_id, scope)


def _update(host: Host, command: UpdateTask, scope: Scope, request: InboundRequest) -> Started | Rendered:
    return host.receiver.start_update(command.task_id, command.input_responses, scope)


def _list_tasks(host: Host, command: ListTasks, scope: Scope, request: InboundRequest) -> Started | Rendered:
    return host.receiver.start_list(command.cursor, host.dialect.render_page)


def _create(
    host: Host, command: CallTool, scope: Scope, request: InboundRequest, run: RunFactory = ToolRun
) -> Started | Rendered:
    """A task: create it; the work starts once the CreateTaskResult is queued."""
    entry = host.service.tools[command.name]
    work = run(host, entry, command.arguments, command.progress_token, scope)
    return host.receiver.start_create(work, command.ttl_ms, entry.immediate_response, scope)


# -- lists --------------------------------------------------------------------------------------
def _page(host: Host, items: list[Any], key: str, cursor: str | None) -> dict[str, Any]:
    try:
        start = decode_cursor(key, cursor) if cursor is not None else 0
    except ValueError:
        start = -1
    if not 0 <= start <= len(items):
        raise McpError(INVALID_PARAMS, "Invalid params at 'cursor': unknown cursor")
    end = start + host.service.tools_page_size
    result: dict[str, Any] = {key: items[start:end]}
    if end < len(items):
        result["nextCursor"] = encode_cursor(key, end)
    return result


async def _tools_list(
    host: Host, command: ListTools, scope: Scope, request: InboundRequest
) -> dict[str, Any]:
    page = _page(host, list(host.service.tools.values()), "tools", command.cursor)
    page["tools"] = [unstructure(entry.tool) for entry in page["tools"]]
    return scope.cacheable(page)


async def _resources_list(
    host: Host, command: ListResources, scope: Scope, request: InboundRequest
) -> dict[str, Any]:
    return scope.cacheable(_page(host, host.service.resource_list(), "resources", command.cursor))


async def _templates_list(
    host: Host, command: ListResourceTemplates, scope: Scope, request: InboundRequest
) -> dict[str, Any]:
    return scope.cacheable(_page(host, host.service.template_list(), "resourceTemplates", command.cursor))


async def _prompts_list(
    host: Host, command: ListPrompts, scope: Scope, request: InboundRequest
) -> dict[str, Any]:
    return scope.cacheable(_page(host, host.service.prompt_list(), "prompts", command.cursor))


async def _complete(host: Host, command: Complete, scope: Scope, request: InboundRequest) -> dict[str, Any]:
    return scope.complete(await host.service.complete(command.ref, command.argument, command.context))


# -- calls --------------------------------------------------------------------------------------
def _state_binding(host: Host, binding: tuple[str, str, Any]) -> str:
    # Bound to the caller where there is an identity; a connection-minted owner changes
    # with every connection (stateless HTTP), so those states bind to the call alone.
    owner = host.owner if not host.connection_owned else "anonymous"
    return binding_of(owner, *binding)


def _answers(
    host: Host, binding: tuple[str, str, Any], request_state: str | None, responses: dict[str, Any] | None
) -> dict[str, Any]:
    """The answers a retry carries: the sealed ones, plus new responses to what was asked."""
    if request_state is None:
        return dict(responses or {})
    opened = host.service.state_codec.open(
        request_state, binding=_state_binding(host, binding), now=host.supervisor.wall_clock()
    )
    if opened is None:
        raise McpError(INVALID_PARAMS, "Invalid params at 'requestState': not a state this server issued")
    answers = dict(opened.get("answers") or {})
    for key in opened.get("asked") or ():
        if responses and key in responses:
            answers[key] = responses[key]
    return answers


def _input_required(
    host: Host, binding: tuple[str, str, Any], mrtr: InputNeeded, scope: ModernScope
) -> dict[str, Any]:
    state = host.service.state_codec.seal(
        {"answers": mrtr.answers, "asked": list(mrtr.needed)},
        binding=_state_binding(host, binding),
        now=host.supervisor.wall_clock(),
    )
    return scope.input_required(mrtr.needed, state)


def _retry_of(request: jsonrpc.Request) -> tuple[str | None, dict[str, Any] | None]:
    """A modern-era retry's ``requestState`` and ``inputResponses`` (-32602 if malformed)."""
    params = request.params or {}
    state, responses = params.get("requestState"), params.get("inputResponses")
    if state is not None and not isinstance(state, str):
        raise McpError(INVALID_PARAMS, "Invalid params at 'requestState': expected a string")
    if responses is not None and not isinstance(responses, dict):
        raise McpError(INVALID_PARAMS, "Invalid params at 'inputResponses': expected an object")
    return state, responses


async def _call(
    host: Host, command: CallTool, scope: Scope, request: InboundRequest, run: RunFactory = ToolRun
) -> dict[str, Any]:
    """A plain ``tools/call``: run the tool and answer with its result. In the modern era,
    input it needs comes back as an ``InputRequiredResult`` (the retry runs it again)."""
    entry = host.service.tools[command.name]
    if scope.era != "modern":
        return await run(host, entry, command.arguments, command.progress_token, scope).result()
    assert isinstance(scope, ModernScope)
    binding = ("tools/call", command.name, command.arguments)
    mrtr = InputNeeded(_answers(host, binding, command.request_state, command.input_responses))
    running = run(host, entry, command.arguments, command.progress_token, scope, mrtr)
    if entry.context_param is None:
        return await running.result()  # no Context, no input to ask: nothing stops it to ask
    with mrtr.scope:
        return await running.result()
    return _input_required(host, binding, mrtr, scope)


async def _read_or_get(
    host: Host, command: ReadResource | GetPrompt, scope: Scope, request: InboundRequest
) -> dict[str, Any]:
    """``resources/read`` or ``prompts/get``; in a modern-era request, input the function
    asks for comes back as an ``InputRequiredResult`` (as for a plain tool call)."""
    binding: tuple[str, str, Any]
    if isinstance(command, ReadResource):
        binding = ("resources/read", command.uri, None)
    else:
        binding = ("prompts/get", command.name, command.arguments)
    mrtr = (
        InputNeeded(_answers(host, binding, *_retry_of(request.message))) if scope.era == "modern" else None
    )
    call = ToolCall(host, None, None, scope, mrtr)
    with mrtr.scope if mrtr is not None else contextlib.nullcontext():
        if isinstance(command, ReadResource):
            contents = await host.service.read_resource(command.uri, call)
            if contents is None:
                raise scope.resource_not_found(command.uri).exception()
            return scope.cacheable({"contents": contents})
        return scope.complete(await host.service.get_prompt(command.name, command.arguments, call))
    assert isinstance(scope, ModernScope) and mrtr is not None
    return _input_required(host, binding, mrtr, scope)


async def _listen(host: Host, command: Listen, scope: Scope, request: InboundRequest) -> dict[str, Any]:
    """``subscriptions/listen``: acknowledge what will be sent, then tagged notifications —
    the watched tasks' status, list changes, updates of the resources named — until the
    client cancels the request (``notifications/cancelled``) or goes away."""
    assert isinstance(scope, ModernScope)
    subscription = request.id
    early: list[TaskRecord] | None = []  # changes seen before the acknowledgement went out

    def watcher(record: TaskRecord) -> None:
        if early is not None:
            early.append(record)
        elif not host.closed:
            host.notify(*scope.task_notification(subscription, record))

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
    supervisor = host.supervisor
    try:
        if task_ids:
            accepted = await ask(supervisor, lambda reply: Watch(host.owner, task_ids, watcher, reply))
        honoured: dict[str, Any] = {}
        if command.task_ids is not None:
            honoured["taskIds"] = list(accepted)
        for kind in sorted(lists):
            honoured[f"{kind}ListChanged"] = True
        if command.resource_uris is not None:
            honoured["resourceSubscriptions"] = list(command.resource_uris)
        await host.send(jsonrpc.encode_notification(*scope.subscription_ack(subscription, honoured)))
        host.listeners[subscription] = Listener(scope, frozenset(lists), uris)
        backlog, early = early, None
        for record in backlog or ():
            host.notify(*scope.task_notification(subscription, record))
        await trio.sleep_forever()
    finally:
        host.listeners.pop(subscription, None)
        if accepted:
            supervisor.mailbox.put(Unwatch(accepted, watcher), system=True)
    raise AssertionError("unreachable")  # pragma: no cover


class HiddenTask:
    """The task of a server-directed call while no client may know of it: from its creation
    until the answer showing it (its CreateTaskResult) is handed to the transport.

    Whatever else ends the call — a plain result, more input first, the request cancelled, the
    connection closed, at any point, even before the creation was answered — removes the task,
    whoever owns it: an identity's tasks outlive the connection, so the removal of a
    connection's own tasks would not catch it. Until written, its id is also in the host's
    ``unwritten``, so a disconnect removes it too."""

    __slots__ = ("done", "host", "start", "task_id")

    def __init__(self, host: Host) -> None:
        self.host = host
        self.task_id: str | None = None
        self.done = False
        """The call is over: its answer queued, or none will be."""
        self.start: Callable[[], None] | None = None
        """Run once the answer showing the task is queued (a creation's work starts then)."""

    def created(self, reply: Reply[TaskRecord]) -> None:
        """The creation's continuation: runs as soon as the task exists (in the creating
        actor's task), whether or not the call still waits for it. Never raises."""
        if reply.failed:
            return  # refused: there is no task
        task_id = reply.unwrap().task_id
        if self.done:
            self.host.remove_task(task_id)  # the call gave up before it was created
        else:
            self.task_id = task_id
            self.host.unwritten.add(task_id)

    def queued(self) -> None:
        """The answer showing the task is queued: start what waited for it."""
        start, self.start = self.start, None
        if start is not None:
            start()

    def written(self) -> None:
        """The call's answer was handed to the transport: the task it shows, if it shows one,
        is known to the client from now on."""
        task_id, self.task_id = self.task_id, None
        if task_id is not None:
            self.host.unwritten.discard(task_id)

    def remove(self) -> None:
        """The task is not shown, or its answer will never be written: it goes."""
        task_id, self.task_id = self.task_id, None
        self.start = None  # its work never starts
        if task_id is not None:
            self.host.unwritten.discard(task_id)
            self.host.remove_task(task_id)


class _Race:
    """What ends a server-directed call's wait for its answer: the first of its signals (the
    task's outcome, its asking for input) — each a callback calling :meth:`settle` (the
    outcome through :meth:`ended`) — wakes the one calling task waiting in :meth:`wait`; no
    Trio task is spawned to watch any of them.

    A signal may come at any time, from any task (the task's watcher, the outcome's reply,
    both live as long as the task): once the race is over (:meth:`close`) it changes nothing,
    and the race holds nothing of the call."""

    __slots__ = ("_waiter", "outcome", "over", "settled", "timed_out")

    def __init__(self) -> None:
        self.settled = False
        """A signal came."""
        self.timed_out = False
        """The window's end came (:meth:`time_out`), even if another signal came with it."""
        self.over = False
        """The call stopped waiting: later signals are ignored."""
        self.outcome: TaskOutcome | None = None
        """The task's outcome, if its end was the signal that came first."""
        self._waiter: trio.lowlevel.Task | None = None

    def ended(self, outcome: TaskOutcome) -> None:
        """The task ended with ``outcome``: a signal, and the outcome kept if it is the first.
        Never raises."""
        if not (self.over or self.settled):
            self.outcome = outcome
            self.settle()

    def outcome_of(self, reply: Reply[TaskOutcome]) -> None:
        """An outcome's reply was answered (a reply's continuation): its outcome, if it has
        one, is the task's end; an error (the task was removed) is a signal all the same.
        Never raises."""
        if reply.failed:
            self.settle()
        else:
            self.ended(reply.unwrap())

    def time_out(self) -> None:
        """The window's alarm: it ends the wait, and wins over a signal that came in the same
        scheduler round (the waiter has not run since). Never raises."""
        if not self.over:
            self.timed_out = True
            self.settle()

    def settle(self, _: object = None) -> None:
        """A signal (a reply's continuation, or a watcher's call): wake the waiter. Never
        raises."""
        if self.over or self.settled:
            return
        self.settled = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)

    async def wait(self) -> None:
        """Until a signal comes (a checkpoint if one has)."""
        if self.settled:
            await trio.lowlevel.checkpoint()
            return
        self._waiter = trio.lowlevel.current_task()

        def abort(_: Any) -> trio.lowlevel.Abort:
            self._waiter = None  # timed out, or the caller was cancelled: never woken
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)

    def close(self) -> None:
        self.over = True
        self._waiter = None


async def _call_maybe_task(
    host: Host, command: CallTool, scope: Scope, request: InboundRequest, run: RunFactory = ToolRun
) -> dict[str, Any]:
    """Server-directed tasks: the call runs as a task from the start, hidden until the
    answer decides what the client sees.

    - Optional tool: if it ends within the auto-task window it is answered with its result
      (the task is forgotten); otherwise, or as soon as it asks for input, with the task.
    - Required tool (``as_task``): always answered with the task — but input it asks for
      before that answer is gathered first, by multi round-trip (``InputRequiredResult``; the
      retry re-runs it with the answers), so the task's input phase is over when it is shown.

    Until the answer showing it is written, the task is hidden (see :class:`HiddenTask`, which
    whoever serves the request keeps as ``request.hidden``): whatever ends the call otherwise
    removes it. A hidden task is admitted against the task table's limits when the call starts
    (a full table refuses the call at once) but counted in the table only once it is to be
    shown (and refused then if the limits no longer allow it: see
    :attr:`~trio_mcp.actors.supervisor.CreateTask.hidden`); until then the call is bounded by
    its request's admission, like any other.
    """
    assert isinstance(scope, ModernScope)
    hidden = HiddenTask(host)
    request.hidden = hidden
    race = _Race()

    def watch(record: TaskRecord) -> None:
        # Told every record of the task (a hidden one's at once: it is not stored).
        status = record.status
        if status is TaskStatus.INPUT_REQUIRED:
            race.settle()  # it asks for input: answer with the task now
        elif status in TERMINAL and record.outcome is not None:
            race.ended(record.outcome)

    entry = host.service.tools[command.name]
    binding = ("tools/call", command.name, command.arguments)
    mrtr = (
        InputNeeded(_answers(host, binding, command.request_state, command.input_responses))
        if command.as_task
        else None
    )
    work = run(host, entry, command.arguments, command.progress_token, scope, mrtr)
    if host.supervisor.queues:  # stored with the task: any process may run it (actors/_queue.py)
        work.replay = describe(request.message, work.caller)
    started = host.receiver.start_create(
        work, None, entry.immediate_response, scope, watcher=watch, hidden=True
    )
    # Told of the task the moment it exists, even if this call has stopped waiting by then.
    reply = started.reply
    if reply.answered:
        hidden.created(reply)
    else:
        reply.then(hidden.created)
    keep = False
    try:
        # Created in place as a rule: then no scheduler round is spent on it (the race's wait
        # below is this call's checkpoint).
        record: TaskRecord = reply.unwrap() if reply.answered else await reply.wait()
        host.receiver.start_work(record)
        answer, keep = await _settle_maybe_task(
            host, record, scope, race, entry.immediate_response, mrtr, binding
        )
        return answer
    finally:
        if not keep:
            # Not shown (a plain result, more input first, withdrawn, cancelled, refused):
            # nobody holds its id. The call is over (a creation answered later is removed
            # then), and its answer shows no task: nothing of it waits for that answer.
            hidden.done = True
            hidden.remove()
            request.hidden = None


async def served_creation(
    handler: Handler, host: Host, command: CallTool, scope: Scope, request: InboundRequest
) -> dict[str, Any]:
    """A handshake-era task creation served awaited (through middleware): its result, the
    CreateTaskResult. The task is hidden (:class:`HiddenTask`, ``request.hidden``) until the
    answer showing it is queued, and its work starts then (``hidden.queued()``): whoever serves
    the request removes it if the answer is an error, is dropped, or never comes."""
    hidden = HiddenTask(host)
    request.hidden = hidden
    started = handler(host, command, scope, request)
    if not isinstance(started, Started):
        return result_of(started)
    started.reply.then(hidden.created)
    value = await started.reply.wait()
    result = result_of(started.render(value))
    if started.after is not None:
        hidden.start = functools.partial(started.after, value)
    return result


async def _settle_maybe_task(
    host: Host,
    record: TaskRecord,
    scope: ModernScope,
    race: _Race,
    immediate: str | None,
    mrtr: InputNeeded | None,
    binding: tuple[str, str, Any],
) -> tuple[dict[str, Any], bool]:
    """The answer to a server-directed call, and whether it shows the task.

    The calling task waits alone (no Trio task is spawned): the task's outcome and its asking
    for input end the wait through ``race`` (callbacks: the task's watcher, told each of its
    records), the auto-task window by timing out; a required tool's first scheduler rounds are
    counted here, with each signal — its multi round-trip question among them — checked
    between rounds."""
    if host.supervisor.actor(record.task_id) is None:
        # Not run here (a work queue's task, queued for whichever process has room): its
        # outcome is asked for as well, answered when it ends, or with an error once it is
        # removed (then the answer is the task, whose record says what happened).
        host.receiver.start_outcome(record.task_id).then(race.outcome_of)
    within = False
    try:
        if mrtr is None:
            # An optional tool gets the auto-task window: an alarm, not a cancel scope (most
            # calls end well within it, and a scope costs about as much as the rest of them).
            supervisor = host.supervisor
            alarm = supervisor.window_alarm(race.time_out)
            try:
                await race.wait()
            finally:
                supervisor.alarms.withdraw(alarm)
            # The window's end wins a tie: an outcome that came in the same instant (both
            # deadlines passed in one scheduler round) is the task's, shown as one.
            within = not race.timed_out
        else:
            # A required one is a task anyway: only the input it asks for at once (within its
            # first scheduler rounds) comes before it.
            for _ in range(REQUIRED_INPUT_ROUNDS):
                if race.settled or mrtr.needed_event.is_set():
                    break
                await trio.lowlevel.checkpoint()
    finally:
        race.close()  # signals from now on (the outcome of a task shown) change nothing
    if mrtr is not None and mrtr.needed:
        # Let questions asked together all be recorded: as many rounds as the tool gives them
        # before it stops itself (ToolCall._ask_by_retry).
        for _ in range(_JOIN_ROUNDS):
            await trio.lowlevel.checkpoint()
        return _input_required(host, binding, mrtr, scope), False
    if mrtr is None and within and race.outcome is not None:  # it ended within the window
        rendered = scope.render_outcome(record.task_id, race.outcome)
        if isinstance(rendered, ErrorValue):
            raise rendered.exception()
        return rendered, False
    if mrtr is not None:
        mrtr.task_shown = True  # from now on, input is asked through the task
    shown: Reply[TaskRecord] = Reply()  # stored first: durable before visible
    host.supervisor.tell(Reveal(host.owner, record.task_id, shown))
    return scope.render_created(await shown.wait(), immediate), True


Handler = Callable[[Host, Any, Scope, InboundRequest], Any]

HANDLERS: Mapping[tuple[Serving, type[Command]], Handler] = {
    # answered now
    (Serving.NOW, Ping): _ping,
    (Serving.NOW, Initialize): _initialize,
    (Serving.NOW, SetLogLevel): _set_log_level,
    (Serving.NOW, Discover): _discover,
    (Serving.NOW, SubscribeResource): _subscribe,
    # task queries, and task creation
    (Serving.QUERY, GetTask): _get,
    (Serving.QUERY, CancelTask): _cancel,
    (Serving.QUERY, UpdateTask): _update,
    (Serving.QUERY, ListTasks): _list_tasks,
    (Serving.CREATE, CallTool): _create,
    # answered in order by the reader
    (Serving.INLINE, ListTools): _tools_list,
    (Serving.INLINE, ListResources): _resources_list,
    (Serving.INLINE, ListResourceTemplates): _templates_list,
    (Serving.INLINE, ListPrompts): _prompts_list,
    (Serving.INLINE, Complete): _complete,
    # in a Trio task of their own
    (Serving.CALL, CallTool): _call,
    (Serving.CALL, ReadResource): _read_or_get,
    (Serving.CALL, GetPrompt): _read_or_get,
    (Serving.CALL, Listen): _listen,
    (Serving.MAYBE_TASK, CallTool): _call_maybe_task,
}
"""How each command is served, by its serving kind and type: the one table of both eras
(``tasks/result``, :attr:`Serving.RESULT`, is the server's own: answered from the reply when
the task has ended, else waited for)."""
