"""The receiver side of tasks, shared by both directions: a server session runs tasks for
``tools/call``; a client runs tasks for a server's ``elicitation/create`` and
``sampling/createMessage``. Either way, one TaskReceiver answers its peer's task queries by
messaging a :class:`TaskSupervisor`, with every task bound to ``owner``, and has the request's
dialect (its protocol era) write each answer.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from ..protocol import _json, jsonrpc
from ..protocol.errors import ErrorValue, McpError
from ..protocol.records import TaskOutcome, TaskRecord
from ._endpoint import Endpoint
from .runtime import Reply
from .supervisor import ListTasks, Remove, Route, TaskSupervisor, create_task
from .task_actor import AwaitResult, Cancel, Poll, ProvideInput, Work

Rendered = dict[str, Any] | bytes | ErrorValue
"""A JSON-RPC result (bytes: one already written as JSON text), or the error to answer with."""


class Renderer(Protocol):
    """How one era writes task answers (a handshake dialect, or a modern request's scope)."""

    def render_task(self, record: TaskRecord) -> dict[str, Any]: ...
    def task_json(self, record: TaskRecord) -> bytes: ...
    def render_created(self, record: TaskRecord, immediate_response: str | None) -> dict[str, Any]: ...
    def created_json(self, record: TaskRecord, immediate_response: str | None) -> bytes: ...
    def cancelled_json(self, record: TaskRecord, was_terminal: bool) -> bytes | ErrorValue: ...
    def render_outcome(self, task_id: str, outcome: TaskOutcome) -> dict[str, Any] | ErrorValue: ...
    def status_json(self, record: TaskRecord) -> bytes | None: ...
    def complete(self, result: dict[str, Any]) -> dict[str, Any]: ...


def encode_answer(request_id: jsonrpc.RequestId, rendered: Rendered) -> bytes:
    """The response carrying ``rendered`` (a result, one already JSON text, or an error)."""
    if isinstance(rendered, bytes):
        return jsonrpc.encode_response_json(request_id, rendered)
    if isinstance(rendered, ErrorValue):
        return jsonrpc.encode_error(request_id, rendered.code, rendered.message, rendered.data)
    return jsonrpc.encode_response(request_id, rendered)


def result_of(rendered: Rendered) -> dict[str, Any]:
    """An answer as a result dict (one already JSON text decoded); an error is raised."""
    if isinstance(rendered, ErrorValue):
        raise rendered.exception()
    if isinstance(rendered, bytes):
        result: dict[str, Any] = _json.loads(rendered)
        return result
    return rendered


class Started:
    """A query on its way: the reply slot, and how to render its answer as a JSON-RPC result
    (a plain class, not a value: one is made per query)."""

    __slots__ = ("after", "render", "reply")

    def __init__(
        self,
        reply: Reply[Any],
        render: Callable[[Any], Rendered],
        after: Callable[[Any], None] | None = None,
    ) -> None:
        self.reply = reply
        self.render = render
        self.after = after
        """Run with the answer once its response is queued (e.g. start a task's work)."""

    async def answer(self, request_id: jsonrpc.RequestId) -> bytes:
        """Wait for the answer and write the response to ``request_id`` (an error response
        for an error; a result already JSON text is not decoded to be encoded again)."""
        try:
            rendered = self.render(await self.reply.wait())
        except McpError as exc:
            rendered = exc.value
        return encode_answer(request_id, rendered)

    async def wait(self) -> dict[str, Any]:
        return result_of(self.render(await self.reply.wait()))


class StatusSink(Protocol):
    """Where a receiver's status notifications go: a connection, or one stateless request."""

    @property
    def closed(self) -> bool: ...

    def notify_encoded(self, data: bytes) -> bool: ...


class TaskReceiver:
    def __init__(
        self,
        endpoint: StatusSink,
        supervisor: TaskSupervisor,
        owner: str,
        dialect: Renderer,
        client: str | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.supervisor = supervisor
        self.owner = owner
        self.client = client
        """Whom the owner's tasks count under for the per-client limits (None: the owner)."""
        self.dialect = dialect
        """The connection's own dialect: what renders when a call names none."""
        self._own_notifier: Callable[[TaskRecord], None] | None = None

    def start_create(
        self,
        work: Work,
        ttl_ms: int | None,
        immediate_response: str | None = None,
        dialect: Renderer | None = None,
        watcher: Callable[[TaskRecord], None] | None = None,
        hidden: bool = False,
    ) -> Started:
        """Ask for a task; its CreateTaskResult is the answer, and the work starts only once
        that answer is queued, so no status notification can overtake it. ``watcher`` (default:
        status notifications in the dialect's shape) is told every later record. ``hidden``:
        a server-directed call's task, stored only if it is shown (see
        :class:`~trio_mcp.actors.supervisor.Reveal`)."""
        renderer = dialect or self.dialect
        reply: Reply[TaskRecord] = Reply()
        notify = watcher if watcher is not None else self._notifier(renderer)
        self.supervisor.create(create_task(self.owner, work, ttl_ms, notify, reply, self.client, hidden))

        def render(record: TaskRecord) -> Rendered:
            return renderer.created_json(record, immediate_response)

        return Started(reply, render, after=self.start_work)

    def start_work(self, record: TaskRecord) -> None:
        # Never refused (no mailbox bound applies): the client may already hold the task id.
        self.supervisor.start_work(self.owner, record.task_id)

    async def create(self, request: jsonrpc.Request, work: Work, ttl_ms: int | None) -> None:
        """Create a task for ``request``, answer it with the CreateTaskResult, then start the
        work (a connection's receiver: the client side's)."""
        endpoint = self.endpoint
        assert isinstance(endpoint, Endpoint)
        started = self.start_create(work, ttl_ms)
        answered = False
        try:
            record = await started.reply.wait()
            await endpoint.respond(request.id, self.dialect.render_created(record, None))
            answered = True
        finally:
            if not answered:  # cancelled, or the connection closed: nobody got its id
                started.reply.then(self._remove_created)
        self.start_work(record)

    def _remove_created(self, reply: Reply[TaskRecord]) -> None:
        """A creation's continuation when its CreateTaskResult will not be sent: the task, if
        it was created (now or later), goes. Never raises."""
        if not reply.failed:
            self.supervisor.remove(Remove(self.owner, reply.unwrap().task_id))

    def _notifier(self, renderer: Renderer) -> Callable[[TaskRecord], None]:
        # One for the connection's own dialect, shared by all its tasks (one per task would
        # be a closure kept by every live task); a modern request's scope gets its own.
        if renderer is self.dialect:
            if self._own_notifier is None:
                self._own_notifier = self._make_notifier(renderer)
            return self._own_notifier
        return self._make_notifier(renderer)

    def _make_notifier(self, renderer: Renderer) -> Callable[[TaskRecord], None]:
        def changed(record: TaskRecord) -> None:
            if not self.endpoint.closed:
                notification = renderer.status_json(record)
                if notification is not None:
                    self.endpoint.notify_encoded(notification)

        return changed

    # Each query sends the message and returns at once with the reply slot and how to render
    # its answer (a session answers from the continuation, without waiting; ``wait()`` waits).
    def start_get(self, task_id: str, dialect: Renderer | None = None) -> Started:
        reply: Reply[TaskRecord] = Reply()
        self.supervisor.deliver(Route(self.owner, task_id, Poll(reply)))
        return Started(reply, (dialect or self.dialect).task_json)

    def start_cancel(self, task_id: str, dialect: Renderer | None = None) -> Started:
        reply: Reply[tuple[TaskRecord, bool]] = Reply()
        self.supervisor.deliver(Route(self.owner, task_id, Cancel(reply)))
        renderer = dialect or self.dialect

        def render(answer: tuple[TaskRecord, bool]) -> Rendered:
            return renderer.cancelled_json(*answer)

        return Started(reply, render)

    def start_update(
        self, task_id: str, responses: dict[str, Any], dialect: Renderer | None = None
    ) -> Started:
        """``tasks/update``: deliver answers to the task's input requests; an acknowledgement."""
        reply: Reply[TaskRecord] = Reply()
        self.supervisor.deliver(Route(self.owner, task_id, ProvideInput(responses, reply)))
        renderer = dialect or self.dialect

        def render(record: TaskRecord) -> Rendered:
            return renderer.complete({})

        return Started(reply, render)

    def start_list(
        self, cursor: str | None, render_page: Callable[[list[TaskRecord], str | None], Rendered]
    ) -> Started:
        reply: Reply[tuple[list[TaskRecord], str | None]] = Reply()
        self.supervisor.tell(ListTasks(self.owner, cursor, reply))

        def render(page: tuple[list[TaskRecord], str | None]) -> Rendered:
            return render_page(*page)

        return Started(reply, render)

    def start_result(self, task_id: str, dialect: Renderer | None = None) -> Started:
        """``tasks/result``: the reply is answered at once when the task has ended (or is
        unknown), otherwise when it ends."""
        reply: Reply[TaskOutcome] = Reply()
        self.supervisor.deliver(Route(self.owner, task_id, AwaitResult(reply)))
        renderer = dialect or self.dialect

        def render(outcome: TaskOutcome) -> Rendered:
            return renderer.render_outcome(task_id, outcome)

        return Started(reply, render)

    def start_outcome(self, task_id: str) -> Reply[TaskOutcome]:
        """Ask for the task's outcome without waiting: the reply is answered (``then``,
        ``answered``, ``wait``) when the task has ended, at once if it has — or with an error
        once it is removed or stopped, or if it is unknown."""
        reply: Reply[TaskOutcome] = Reply()
        self.supervisor.deliver(Route(self.owner, task_id, AwaitResult(reply)))
        return reply

    async def outcome(self, task_id: str) -> TaskOutcome:
        """Wait for the task to end: what its request produced."""
        return await self.start_outcome(task_id).wait()

    async def result(self, task_id: str, dialect: Renderer | None = None) -> dict[str, Any]:
        """Wait for the end; return what the request would have (or raise its McpError)."""
        rendered = (dialect or self.dialect).render_outcome(task_id, await self.outcome(task_id))
        if isinstance(rendered, ErrorValue):
            raise rendered.exception()
        return rendered
