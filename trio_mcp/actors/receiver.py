"""The receiver side of tasks, shared by both directions: a server session runs tasks for
``tools/call``; a client runs tasks for a server's ``elicitation/create`` and
``sampling/createMessage``. Either way, one TaskReceiver answers ``tasks/get``,
``tasks/result``, ``tasks/list`` and ``tasks/cancel`` from its peer by messaging a
:class:`TaskSupervisor`, with every task bound to ``owner``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs

from ..protocol import jsonrpc
from ..protocol.converter import structure, unstructure
from ..protocol.messages import RELATED_TASK_KEY, CreateTaskResult, PaginatedParams, Task, TaskIdParams
from .endpoint import Endpoint
from .runtime import Reply, ask
from .supervisor import CreateTask, ListTasks, Route, TaskSupervisor
from .task_actor import AwaitResult, Cancel, Poll, Start, TaskActor, TaskOutcome, Work


@attrs.frozen
class Started:
    """A query on its way: the reply slot, and how to render its answer as a JSON-RPC result."""

    reply: Reply[Any]
    render: Callable[[Any], dict[str, Any]]
    after: Callable[[Any], None] | None = None
    """Run with the answer once its response is queued (e.g. start a task's work)."""

    async def wait(self) -> dict[str, Any]:
        return self.render(await self.reply.wait())


def _render_page(page: tuple[list[Task], str | None]) -> dict[str, Any]:
    tasks, next_cursor = page
    result: dict[str, Any] = {"tasks": [unstructure(t) for t in tasks]}
    if next_cursor is not None:
        result["nextCursor"] = next_cursor
    return result


class TaskReceiver:
    def __init__(self, endpoint: Endpoint, supervisor: TaskSupervisor, owner: object) -> None:
        self.endpoint = endpoint
        self.supervisor = supervisor
        self.owner = owner

    def start_create(self, work: Work, ttl_ms: int | None, meta: dict[str, Any] | None = None) -> Started:
        """Ask for a task; its CreateTaskResult is the answer, and the work starts only once
        that answer is queued, so no status notification can overtake it."""
        reply: Reply[TaskActor] = Reply()
        self.supervisor.tell(CreateTask(self.owner, work, ttl_ms, self._changed, reply))

        def render(actor: TaskActor) -> dict[str, Any]:
            data: dict[str, Any] = unstructure(CreateTaskResult(task=actor.task, meta=meta))
            return data

        return Started(reply, render, after=self._start_work)

    def _start_work(self, actor: TaskActor) -> None:
        # A system message: it must not be refused once the client holds the task id.
        self.supervisor.mailbox.put(Route(self.owner, actor.task_id, Start()), system=True)

    async def create(
        self, request: jsonrpc.Request, work: Work, ttl_ms: int | None, meta: dict[str, Any] | None = None
    ) -> None:
        """Create a task for ``request``, answer it with the CreateTaskResult, then start the work."""
        started = self.start_create(work, ttl_ms, meta)
        actor = await started.reply.wait()
        await self.endpoint.respond(request.id, started.render(actor))
        self._start_work(actor)

    def _changed(self, task: Task) -> None:
        if not self.endpoint.closed:
            self.endpoint.notify("notifications/tasks/status", unstructure(task))

    # Each query comes in two forms: ``start_*`` sends the message and returns at once with
    # the reply slot and how to render its answer (a session answers from the continuation,
    # without waiting); the ``async`` form waits for the answer.
    def start_get(self, request: jsonrpc.Request) -> Started:
        task_id = structure(request.params, TaskIdParams).task_id
        reply: Reply[Task] = Reply()
        self.supervisor.tell(Route(self.owner, task_id, Poll(reply)))
        return Started(reply, unstructure)

    def start_cancel(self, request: jsonrpc.Request) -> Started:
        task_id = structure(request.params, TaskIdParams).task_id
        reply: Reply[Task] = Reply()
        self.supervisor.tell(Route(self.owner, task_id, Cancel(reply)))
        return Started(reply, unstructure)

    def start_list(self, request: jsonrpc.Request) -> Started:
        cursor = structure(request.params, PaginatedParams).cursor
        reply: Reply[tuple[list[Task], str | None]] = Reply()
        self.supervisor.tell(ListTasks(self.owner, cursor, reply))
        return Started(reply, _render_page)

    async def get(self, request: jsonrpc.Request) -> dict[str, Any]:
        return await self.start_get(request).wait()

    async def cancel(self, request: jsonrpc.Request) -> dict[str, Any]:
        return await self.start_cancel(request).wait()

    async def list(self, request: jsonrpc.Request) -> dict[str, Any]:
        return await self.start_list(request).wait()

    async def result(self, request: jsonrpc.Request) -> dict[str, Any]:
        """Wait for the end; return what the request would have (or raise its McpError)."""
        task_id = structure(request.params, TaskIdParams).task_id
        outcome: TaskOutcome = await ask(
            self.supervisor, lambda reply: Route(self.owner, task_id, AwaitResult(reply))
        )
        assert outcome.result is not None
        result = dict(outcome.result)
        result["_meta"] = {**result.get("_meta", {}), RELATED_TASK_KEY: {"taskId": task_id}}
        return result
