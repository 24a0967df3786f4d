"""The receiver side of tasks, shared by both directions: a server session runs tasks for
``tools/call``; a client runs tasks for a server's ``elicitation/create`` and
``sampling/createMessage``. Either way, one TaskReceiver answers ``tasks/get``,
``tasks/result``, ``tasks/list`` and ``tasks/cancel`` from its peer by messaging a
:class:`TaskSupervisor`, with every task bound to ``owner``.
"""

from __future__ import annotations

from typing import Any

from ..protocol import jsonrpc
from ..protocol.converter import structure, unstructure
from ..protocol.messages import RELATED_TASK_KEY, CreateTaskResult, PaginatedParams, Task, TaskIdParams
from .endpoint import Endpoint
from .runtime import ask
from .supervisor import CreateTask, ListTasks, Route, TaskSupervisor
from .task_actor import AwaitResult, Cancel, Poll, Start, TaskActor, TaskOutcome, Work


class TaskReceiver:
    def __init__(self, endpoint: Endpoint, supervisor: TaskSupervisor, owner: object) -> None:
        self.endpoint = endpoint
        self.supervisor = supervisor
        self.owner = owner

    async def create(
        self, request: jsonrpc.Request, work: Work, ttl_ms: int | None, meta: dict[str, Any] | None = None
    ) -> TaskActor:
        """Create a task for ``request``, answer it with the CreateTaskResult, then start the work.

        Answering first means no status notification can overtake the CreateTaskResult.
        """
        actor: TaskActor = await ask(
            self.supervisor, lambda reply: CreateTask(self.owner, work, ttl_ms, self._changed, reply)
        )
        await self.endpoint.respond(request.id, unstructure(CreateTaskResult(task=actor.task, meta=meta)))
        # A system message: it must not be refused once the client holds the task id.
        self.supervisor.mailbox.put(Route(self.owner, actor.task_id, Start()), system=True)
        return actor

    def _changed(self, task: Task) -> None:
        if not self.endpoint.closed:
            self.endpoint.notify("notifications/tasks/status", unstructure(task))

    async def get(self, request: jsonrpc.Request) -> dict[str, Any]:
        task_id = structure(request.params, TaskIdParams).task_id
        task: Task = await ask(self.supervisor, lambda reply: Route(self.owner, task_id, Poll(reply)))
        data: dict[str, Any] = unstructure(task)
        return data

    async def cancel(self, request: jsonrpc.Request) -> dict[str, Any]:
        task_id = structure(request.params, TaskIdParams).task_id
        task: Task = await ask(self.supervisor, lambda reply: Route(self.owner, task_id, Cancel(reply)))
        data: dict[str, Any] = unstructure(task)
        return data

    async def list(self, request: jsonrpc.Request) -> dict[str, Any]:
        cursor = structure(request.params, PaginatedParams).cursor
        page: tuple[list[Task], str | None] = await ask(
            self.supervisor, lambda reply: ListTasks(self.owner, cursor, reply)
        )
        tasks, next_cursor = page
        result: dict[str, Any] = {"tasks": [unstructure(t) for t in tasks]}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

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
