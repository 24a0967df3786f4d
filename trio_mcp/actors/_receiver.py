"""The receiver side of tasks, shared by both directions: a server session runs tasks for
``tools/call``; a client runs tasks for a server's ``elicitation/create`` and
``sampling/createMessage``. Either way, one TaskReceiver answers its peer's task queries by
messaging a :class:`TaskSupervisor`, with every task bound to ``owner``, and has the
connection's dialect write each answer in that era's shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..protocol import jsonrpc
from ..protocol.errors import ErrorValue
from ..protocol.handshake import HandshakeDialect
from ..protocol.records import TaskOutcome, TaskRecord
from ._endpoint import Endpoint
from .runtime import Reply, ask
from .supervisor import CreateTask, ListTasks, Route, TaskSupervisor
from .task_actor import AwaitResult, Cancel, Poll, Start, Work

Rendered = dict[str, Any] | ErrorValue


@attrs.frozen
class Started:
    """A query on its way: the reply slot, and how to render its answer as a JSON-RPC result."""

    reply: Reply[Any]
    render: Callable[[Any], Rendered]
    after: Callable[[Any], None] | None = None
    """Run with the answer once its response is queued (e.g. start a task's work)."""

    async def wait(self) -> dict[str, Any]:
        rendered = self.render(await self.reply.wait())
        if isinstance(rendered, ErrorValue):
            raise rendered.exception()
        return rendered


class TaskReceiver:
    def __init__(
        self, endpoint: Endpoint, supervisor: TaskSupervisor, owner: str, dialect: HandshakeDialect
    ) -> None:
        self.endpoint = endpoint
        self.supervisor = supervisor
        self.owner = owner
        self.dialect = dialect

    def start_create(self, work: Work, ttl_ms: int | None, immediate_response: str | None = None) -> Started:
        """Ask for a task; its CreateTaskResult is the answer, and the work starts only once
        that answer is queued, so no status notification can overtake it."""
        reply: Reply[TaskRecord] = Reply()
        self.supervisor.tell(CreateTask(self.owner, work, ttl_ms, self._changed, reply))
        dialect = self.dialect

        def render(record: TaskRecord) -> Rendered:
            return dialect.render_created(record, immediate_response)

        return Started(reply, render, after=self._start_work)

    def _start_work(self, record: TaskRecord) -> None:
        # A system message: it must not be refused once the client holds the task id.
        self.supervisor.mailbox.put(Route(self.owner, record.task_id, Start()), system=True)

    async def create(self, request: jsonrpc.Request, work: Work, ttl_ms: int | None) -> None:
        """Create a task for ``request``, answer it with the CreateTaskResult, then start the work."""
        started = self.start_create(work, ttl_ms)
        record = await started.reply.wait()
        await self.endpoint.respond(request.id, self.dialect.render_created(record, None))
        self._start_work(record)

    def _changed(self, record: TaskRecord) -> None:
        if not self.endpoint.closed:
            method, params = self.dialect.status_notification(record)
            self.endpoint.notify(method, params)

    # Each query comes in two forms: ``start_*`` sends the message and returns at once with
    # the reply slot and how to render its answer (a session answers from the continuation,
    # without waiting); the ``async`` form waits for the answer.
    def start_get(self, task_id: str) -> Started:
        reply: Reply[TaskRecord] = Reply()
        self.supervisor.tell(Route(self.owner, task_id, Poll(reply)))
        return Started(reply, self.dialect.render_task)

    def start_cancel(self, task_id: str) -> Started:
        reply: Reply[tuple[TaskRecord, bool]] = Reply()
        self.supervisor.tell(Route(self.owner, task_id, Cancel(reply)))
        dialect = self.dialect

        def render(answer: tuple[TaskRecord, bool]) -> Rendered:
            return dialect.render_cancelled(*answer)

        return Started(reply, render)

    def start_list(self, cursor: str | None) -> Started:
        reply: Reply[tuple[list[TaskRecord], str | None]] = Reply()
        self.supervisor.tell(ListTasks(self.owner, cursor, reply))
        dialect = self.dialect

        def render(page: tuple[list[TaskRecord], str | None]) -> Rendered:
            return dialect.render_page(*page)

        return Started(reply, render)

    async def result(self, task_id: str) -> dict[str, Any]:
        """Wait for the end; return what the request would have (or raise its McpError)."""
        outcome: TaskOutcome = await ask(
            self.supervisor, lambda reply: Route(self.owner, task_id, AwaitResult(reply))
        )
        rendered = self.dialect.render_outcome(task_id, outcome)
        if isinstance(rendered, ErrorValue):
            raise rendered.exception()
        return rendered
