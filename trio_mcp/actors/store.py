"""Where the supervisor keeps its task table: an interface, and the in-memory store.

The supervisor talks to the table only through :class:`TaskStore`, so a durable or shared store
can replace :class:`MemoryTaskStore`. Every operation is O(1) or O(log n) in the number of
tasks, except a page of ``tasks/list`` which is O(page size + log n).
"""

from __future__ import annotations

import bisect
from typing import Protocol

import attrs

from ..protocol.cursors import decode_cursor, encode_cursor
from .task_actor import TaskActor


@attrs.define(eq=False)
class TaskEntry:
    """One row of the table: the actor, who owns it, and when it expires."""

    actor: TaskActor
    owner: object
    seq: int
    deadline: float


class InvalidCursor(Exception):
    pass


class TaskStore(Protocol):
    def add(self, entry: TaskEntry) -> None: ...
    def get(self, task_id: str) -> TaskEntry | None: ...
    def remove(self, task_id: str) -> TaskEntry | None: ...
    def owned_by(self, owner: object) -> list[TaskEntry]: ...
    def page(self, owner: object, cursor: str | None, limit: int) -> tuple[list[TaskEntry], str | None]: ...
    def __len__(self) -> int: ...


@attrs.define(eq=False)
class _OwnerIndex:
    """An owner's tasks in creation order: seqs ascending (with holes), for cursor seeks."""

    seqs: list[int] = attrs.Factory(list)
    entries: dict[int, TaskEntry] = attrs.Factory(dict)

    def compact(self) -> None:
        if len(self.seqs) > 2 * len(self.entries) + 32:
            self.seqs = [s for s in self.seqs if s in self.entries]


class MemoryTaskStore:
    """The default store: dicts in this process. Tasks are gone when the process exits."""

    def __init__(self) -> None:
        self._by_id: dict[str, TaskEntry] = {}
        self._by_owner: dict[object, _OwnerIndex] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def add(self, entry: TaskEntry) -> None:
        self._by_id[entry.actor.task_id] = entry
        index = self._by_owner.setdefault(entry.owner, _OwnerIndex())
        index.seqs.append(entry.seq)  # seqs only grow, so the list stays sorted
        index.entries[entry.seq] = entry

    def get(self, task_id: str) -> TaskEntry | None:
        return self._by_id.get(task_id)

    def remove(self, task_id: str) -> TaskEntry | None:
        entry = self._by_id.pop(task_id, None)
        if entry is not None:
            index = self._by_owner[entry.owner]
            del index.entries[entry.seq]
            if index.entries:
                index.compact()
            else:
                del self._by_owner[entry.owner]
        return entry

    def owned_by(self, owner: object) -> list[TaskEntry]:
        index = self._by_owner.get(owner)
        return list(index.entries.values()) if index else []

    def page(self, owner: object, cursor: str | None, limit: int) -> tuple[list[TaskEntry], str | None]:
        try:
            after = decode_cursor("task", cursor) if cursor is not None else -1
        except ValueError:
            raise InvalidCursor(cursor) from None
        index = self._by_owner.get(owner)
        if index is None:
            return [], None
        out: list[TaskEntry] = []
        position = bisect.bisect_right(index.seqs, after)
        seqs = index.seqs
        while position < len(seqs) and len(out) < limit:
            entry = index.entries.get(seqs[position])
            if entry is not None:
                out.append(entry)
            position += 1
        while position < len(seqs) and seqs[position] not in index.entries:
            position += 1  # skip holes left by removed tasks (compaction bounds them)
        more = position < len(seqs)
        next_cursor = encode_cursor("task", out[-1].seq) if out and more else None
        return out, next_cursor
