"""A store shared by several runtimes in one process: records in one :class:`MemoryTaskStore`,
events through in-memory channels, leases in a dict. It stands in for Redis where a test wants
several "server processes" (runtimes with their own supervisor) on one store, deterministically."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager

import trio

from trio_mcp.protocol.records import TaskRecord
from trio_mcp.stores import MemoryTaskStore, TaskEvent


class SharedRecords:
    """What the "processes" share: one record table, one event bus, one lease table."""

    def __init__(self) -> None:
        self.records = MemoryTaskStore()
        self.subscribers: list[trio.MemorySendChannel[TaskEvent]] = []
        self.leases: dict[str, tuple[str, float]] = {}
        self.published: list[TaskEvent] = []


class SharedMemoryStore:
    """One process's handle on :class:`SharedRecords` (a ``SharedTaskStore``)."""

    def __init__(self, shared: SharedRecords) -> None:
        self.shared = shared
        records = shared.records
        self.create = records.create
        self.get = records.get
        self.update = records.update
        self.delete = records.delete
        self.page = records.page
        self.due = records.due

    def __len__(self) -> int:
        return len(self.shared.records)

    async def publish(self, event: TaskEvent) -> None:
        self.shared.published.append(event)
        for channel in list(self.shared.subscribers):
            try:
                channel.send_nowait(event)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.shared.subscribers.remove(channel)

    @asynccontextmanager
    async def events(self) -> AsyncIterator[AsyncIterator[TaskEvent]]:
        send, receive = trio.open_memory_channel[TaskEvent](1000)
        self.shared.subscribers.append(send)
        try:
            yield receive
        finally:
            self.shared.subscribers.remove(send)
            await receive.aclose()

    async def hold(self, task_ids: Sequence[str], origin: str, until: float) -> list[str]:
        """Lease the tasks whose record runs; return the others (terminal or gone), unleased."""
        over: list[str] = []
        for task_id in task_ids:
            record = self.shared.records.peek(task_id)
            if record is None or record.is_terminal:
                over.append(task_id)
                self.shared.leases.pop(task_id, None)
            else:
                self.shared.leases[task_id] = (origin, until)
        return over

    async def release(self, task_ids: Sequence[str]) -> None:
        for task_id in task_ids:
            self.shared.leases.pop(task_id, None)

    async def lapsed(self, now: float, limit: int) -> list[TaskRecord]:
        out: list[TaskRecord] = []
        for task_id, (_, until) in list(self.shared.leases.items()):
            if until < now:
                record = await self.shared.records.get(task_id)
                if record is not None and not record.is_terminal:
                    out.append(record)
            if len(out) >= limit:
                break
        return out
