"""The requestor side of tasks, shared by both directions: a client following a server's
tool-call tasks, and a server following the tasks its client runs for it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, Protocol

import trio

from ..protocol.converter import structure
from ..protocol.messages import CreateTaskResult, ListTasksResult, Task
from ..protocol.tasks import TaskStatus


class Requester(Protocol):
    """Whatever sends requests to the peer and waits for their results (an endpoint)."""

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]: ...


class TaskRequestor:
    """``tasks/*`` requests to a peer over ``endpoint``."""

    def __init__(self, endpoint: Requester) -> None:
        self.endpoint = endpoint

    async def create(
        self, method: str, params: dict[str, Any], ttl_ms: int | None = None
    ) -> CreateTaskResult:
        """Send ``method`` task-augmented; returns the peer's CreateTaskResult at once."""
        task: dict[str, Any] = {} if ttl_ms is None else {"ttl": ttl_ms}
        return structure(await self.endpoint.request(method, {**params, "task": task}), CreateTaskResult)

    async def get(self, task_id: str) -> Task:
        return structure(await self.endpoint.request("tasks/get", {"taskId": task_id}), Task)

    async def result(self, task_id: str) -> dict[str, Any]:
        """The raw result the task's request produced, once it is terminal (errors raise)."""
        return await self.endpoint.request("tasks/result", {"taskId": task_id})

    async def list(self, cursor: str | None = None) -> ListTasksResult:
        return structure(
            await self.endpoint.request("tasks/list", {"cursor": cursor} if cursor else {}), ListTasksResult
        )

    async def all(self) -> AsyncIterator[Task]:
        """Every task the peer lists for us, across pages."""
        cursor: str | None = None
        while True:
            page = await self.list(cursor)
            for task in page.tasks:
                yield task
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def cancel(self, task_id: str) -> Task:
        return structure(await self.endpoint.request("tasks/cancel", {"taskId": task_id}), Task)

    async def poll(self, task_id: str, *, on_status: Any = None, default_interval_ms: int = 1000) -> Task:
        """Poll until terminal or ``input_required``, sleeping the peer's ``pollInterval``."""
        return await poll_task(
            self.get, task_id, on_status=on_status, default_interval_ms=default_interval_ms
        )


async def poll_task(
    get: Callable[[str], Awaitable[Task]],
    task_id: str,
    *,
    on_status: Callable[[Task], object] | None = None,
    default_interval_ms: int = 1000,
) -> Task:
    """Call ``get(task_id)`` until the task is terminal or ``input_required``, sleeping the
    peer's ``pollInterval`` (else ``default_interval_ms``) between calls; the last Task seen.
    ``on_status`` is called with every Task read."""
    while True:
        task = await get(task_id)
        if on_status is not None:
            on_status(task)
        if task.status.is_terminal or task.status == TaskStatus.INPUT_REQUIRED:
            return task
        interval = task.poll_interval if task.poll_interval is not None else default_interval_ms
        await trio.sleep(interval / 1000)
