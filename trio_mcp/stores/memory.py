"""The default store: task records in this process's memory (:class:`MemoryTaskStore`)."""

from __future__ import annotations

import bisect
import heapq

import attrs

from ..protocol.cursors import encode_cursor, split_cursor
from ..protocol.records import TaskRecord
from .base import InvalidCursor, owner_tag, text_digest

__all__ = ["MemoryTaskStore"]


@attrs.define(eq=False)
class _OwnerIndex:
    """An owner's task ids in creation order, numbered by the owner's own counter (so a cursor
    says nothing about anyone else's activity): ``positions`` ascend, and ``ids`` holds the id
    at each (None where that record was deleted, until compaction drops the holes).

    An index lives while its owner has records. Its cursors name the owner (a digest) and the
    index's epoch (a digest of its first task id, unguessable like the id): a cursor from an
    index that emptied and was dropped is recognised as older than every record now there, so
    paging goes on from the start of the new index — nothing is kept for owners who have no
    records left. Per record it keeps a dict entry and two list slots (no object of its own)."""

    tag: str
    epoch: str
    position_of: dict[str, int] = attrs.Factory(dict)
    positions: list[int] = attrs.Factory(list)
    ids: list[str | None] = attrs.Factory(list)
    counter: int = 0

    @property
    def kind(self) -> str:
        return f"task.{self.tag}.{self.epoch}"

    def add(self, task_id: str) -> None:
        position = self.counter = self.counter + 1
        self.position_of[task_id] = position
        self.positions.append(position)  # positions only grow: the list stays sorted
        self.ids.append(task_id)

    def remove(self, task_id: str) -> None:
        """Forget a record (present); its slot becomes a hole, and holes are dropped once they
        are half the index (amortised O(1))."""
        positions = self.positions
        self.ids[bisect.bisect_left(positions, self.position_of.pop(task_id))] = None
        if len(positions) > 2 * len(self.position_of) + 32:
            kept = [(p, i) for p, i in zip(positions, self.ids, strict=True) if i is not None]
            self.positions = [p for p, _ in kept]
            self.ids = [i for _, i in kept]


class MemoryTaskStore:
    """The default store: dicts in this process. Records are gone when the process exits.

    Every operation is O(1) or O(log n) in the number of records, except a page which is
    O(page size + log n), and :meth:`due`, which builds its heap of expiry times when asked
    (O(n)) and keeps it only while records are due: a supervisor asks once, when it starts
    (each task it creates is timed by the supervisor itself), so tasks cost no heap entry
    here. Memory is the records plus a few words each.
    """

    def __init__(self) -> None:
        self._rows: dict[str, TaskRecord] = {}
        self._by_owner: dict[str, _OwnerIndex] = {}
        self._expiries: list[tuple[float, str]] | None = None  # kept by due() while needed

    def __len__(self) -> int:
        return len(self._rows)

    async def create(self, record: TaskRecord) -> None:
        self.create_now(record)

    def create_now(self, record: TaskRecord) -> None:
        """:meth:`create` without waiting (the supervisor creates a task with it at once)."""
        task_id = record.task_id
        rows = self._rows
        if task_id in rows:
            raise ValueError(f"task {task_id!r} exists")
        owner = record.owner
        index = self._by_owner.get(owner)
        if index is None:
            index = self._by_owner[owner] = _OwnerIndex(owner_tag(owner), text_digest(task_id, 8))
        index.add(task_id)
        rows[task_id] = record
        if self._expiries is not None:
            heapq.heappush(self._expiries, (record.expires_at, record.task_id))

    async def get(self, task_id: str) -> TaskRecord | None:
        return self._rows.get(task_id)

    def peek(self, task_id: str) -> TaskRecord | None:
        """:meth:`get` without waiting (the supervisor answers queries with it at once)."""
        return self._rows.get(task_id)

    async def update(self, record: TaskRecord) -> bool:
        return self.update_now(record)

    def update_now(self, record: TaskRecord) -> bool:
        """:meth:`update` without waiting (the supervisor stores a change with it at once)."""
        rows = self._rows
        task_id = record.task_id
        old = rows.get(task_id)
        if old is None or old.version != record.version - 1:
            return False
        rows[task_id] = record
        return True

    async def delete(self, task_id: str) -> TaskRecord | None:
        return self.delete_now(task_id)

    def delete_now(self, task_id: str) -> TaskRecord | None:
        """:meth:`delete` without waiting (the supervisor removes an expired task with it at once)."""
        record = self._rows.pop(task_id, None)
        if record is None:
            return None
        owner = record.owner
        index = self._by_owner[owner]
        index.remove(task_id)
        if not index.position_of:
            del self._by_owner[owner]
        expiries = self._expiries
        if expiries is not None and len(expiries) > 2 * len(self._rows) + 64:
            expiries[:] = [e for e in expiries if e[1] in self._rows]  # forget deleted records'
            heapq.heapify(expiries)
        return record

    async def page(self, owner: str, cursor: str | None, limit: int) -> tuple[list[TaskRecord], str | None]:
        index = self._by_owner.get(owner)
        after = 0
        if cursor is not None:
            try:
                kind, after = split_cursor(cursor)
            except ValueError:
                raise InvalidCursor(cursor) from None
            prefix = f"task.{owner_tag(owner)}."
            if not kind.startswith(prefix) or after < 1:
                raise InvalidCursor(cursor)  # not one we made for this owner
            if index is None:
                return [], None  # every record it came after is gone, and none came since
            if kind != index.kind:
                after = 0  # from an index since emptied: every record now is newer
            elif after > index.counter:
                raise InvalidCursor(cursor)
        if index is None:
            return [], None
        out: list[TaskRecord] = []
        positions = index.positions
        at = bisect.bisect_right(positions, after)
        last = after
        ids = index.ids
        while at < len(positions) and len(out) < limit:
            task_id = ids[at]
            if task_id is not None:
                out.append(self._rows[task_id])
                last = positions[at]
            at += 1
        while at < len(positions) and ids[at] is None:
            at += 1  # skip holes left by deleted records (compaction bounds them)
        more = at < len(positions)
        return out, (encode_cursor(index.kind, last) if out and more else None)

    async def due(self, now: float, limit: int) -> list[TaskRecord]:
        expiries = self._expiries
        if expiries is None:
            expiries = self._expiries = [
                (record.expires_at, task_id) for task_id, record in self._rows.items()
            ]
            heapq.heapify(expiries)
        out: list[TaskRecord] = []
        kept: list[tuple[float, str]] = []
        while expiries and expiries[0][0] <= now and len(out) < limit:
            entry = heapq.heappop(expiries)
            record = self._rows.get(entry[1])
            if record is not None and record.expires_at == entry[0]:  # else stale: forget it
                out.append(record)
                kept.append(entry)
        for entry in kept:  # due records stay until deleted
            heapq.heappush(expiries, entry)
        if len(out) < limit:
            self._expiries = None  # nothing more is due: no heap until the next asking
        return out
