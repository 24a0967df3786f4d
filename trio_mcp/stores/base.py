"""Where task records live: the async :class:`TaskStore` interface and the abilities a store
may add to it (:class:`ImmediateTaskStore`, :class:`DurableTaskStore`, :class:`SharedTaskStore`).

A store keeps :class:`~trio_mcp.protocol.records.TaskRecord` values only — plain data, never a
running task (the live side, cancel scopes and result waiters, stays in the supervisor of the
process running the work). Every method is async so a store may do I/O (a file, a database, a
server). In a process the runtime's store writer (:mod:`trio_mcp.actors._writer`) makes every
write and the task table every read: one task's writes reach the store in order, different
tasks' concurrently. A store's abilities are declared by the protocols it implements and read
once, when the runtime is built (never per call).

Rules every store keeps (``tests/stores/test_store_contract.py`` holds each store to them):

- ``create`` adds a record whose id is new; ``get`` returns it, or None.
- ``update`` is conditional: it replaces the stored record only if the stored ``version`` is
  exactly one less than the new record's, and says whether it did (no record: False).
- ``delete`` removes a record and returns it (None if absent).
- ``page(owner, cursor, limit)`` lists one owner's records in creation order, ``limit`` at a
  time, with an opaque cursor for the next page (None on the last). A cursor is valid only for
  the owner it was made for and reveals nothing about other owners; an unknown one raises
  :class:`InvalidCursor`. Records deleted between pages are skipped, never repeated.
- ``due(now, limit)`` returns up to ``limit`` records whose ``expires_at`` is at or before
  ``now``, earliest first (they stay until deleted).
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol, runtime_checkable

import attrs

from ..protocol.records import TaskRecord

__all__ = [
    "AnnouncedUpdates",
    "DurableTaskStore",
    "ImmediateTaskStore",
    "InvalidCursor",
    "SharedTaskStore",
    "TargetedEvents",
    "TaskEvent",
    "TaskStore",
    "WorkQueue",
    "WorkRefused",
    "owner_tag",
    "store_key",
    "text_digest",
]


class InvalidCursor(Exception):
    """A ``tasks/list`` cursor this store did not make for that owner."""


@attrs.frozen
class TaskEvent:
    """A message between the server processes sharing a store (:class:`SharedTaskStore`).

    ``changed``: the task's record was written (readers re-read it). ``cancel``: someone asked
    for the task to be cancelled (the process running its work stops it). ``input``: answers to
    the task's input requests (``responses``, by key) for the process running its work.
    ``origin`` names the process that published it.

    ``resync`` (``task_id`` and ``origin`` both ``""``) is never published: a store's ``events``
    iterator yields it after it subscribed again, once its subscription was lost (not on the
    first subscription). Events published meanwhile were missed, so the reader re-reads every
    record it waits for.
    """

    kind: str
    task_id: str
    origin: str
    responses: dict[str, Any] | None = None


@runtime_checkable
class TaskStore(Protocol):
    """The interface the supervisor keeps task records through (see the module docstring)."""

    async def create(self, record: TaskRecord) -> None: ...
    async def get(self, task_id: str) -> TaskRecord | None: ...
    async def update(self, record: TaskRecord) -> bool: ...
    async def delete(self, task_id: str) -> TaskRecord | None: ...
    async def page(
        self, owner: str, cursor: str | None, limit: int
    ) -> tuple[list[TaskRecord], str | None]: ...
    async def due(self, now: float, limit: int) -> list[TaskRecord]: ...


def store_key(text: str) -> bytes:
    """A str as a storage key: every str, lone surrogates too (ids may come off the wire)."""
    return text.encode("utf-8", "surrogatepass")


def text_digest(text: str, size: int) -> str:
    """The first ``size`` hex digits of the SHA-256 of ``text`` (cursor tags, epochs)."""
    return hashlib.sha256(store_key(text)).hexdigest()[:size]


def owner_tag(owner: str) -> str:
    """The digest of an owner that its cursors carry."""
    return text_digest(owner, 16)


@runtime_checkable
class ImmediateTaskStore(TaskStore, Protocol):
    """A store whose every operation is done without waiting (the memory store): beside the
    async methods, the same operations as plain calls, which the runtime makes in place. They
    never fail but on a caller's bug (``create_now`` of an id that exists)."""

    def create_now(self, record: TaskRecord) -> None: ...
    def peek(self, task_id: str) -> TaskRecord | None: ...
    def update_now(self, record: TaskRecord) -> bool: ...
    def delete_now(self, task_id: str) -> TaskRecord | None: ...


@runtime_checkable
class DurableTaskStore(TaskStore, Protocol):
    """A store whose records outlive the process (an SQLite file), served by one process at a
    time: it holds the store for itself while open, so any record it finds not ended was left
    by a process that is gone. ``unfinished(limit)`` lists up to ``limit`` such records
    (``working`` or ``input_required``), oldest first: the runtime decides what becomes of them
    (it fails them: their work cannot be resumed)."""

    async def unfinished(self, limit: int) -> list[TaskRecord]: ...


@runtime_checkable
class SharedTaskStore(TaskStore, Protocol):
    """A store several server processes share (Redis): beside the records, a channel of
    :class:`TaskEvent` between them, and leases on running tasks.

    - ``publish`` reaches every process subscribed through ``events`` (itself included; a
      process ignores its own ``origin``). Delivery is at most once and in order per publisher;
      a process that misses an event still converges, because readers re-read records.
    - ``hold(task_ids, origin, until)`` says that process ``origin`` runs these tasks and will
      renew before ``until`` (wall-clock seconds). It returns those of ``task_ids`` whose
      stored record is terminal or gone — ended elsewhere (cancelled through another process,
      failed by a lease sweep) or expired — in the order given, checked in the same atomic step
      that leases the others (they get no lease): the runner stops them. ``release(task_ids)``
      drops the lease of tasks that ended. ``lapsed(now, limit)`` returns non-terminal records
      whose lease ran out (their process is gone): the supervisor fails them.
    """

    async def publish(self, event: TaskEvent) -> None: ...
    def events(self) -> AbstractAsyncContextManager[AsyncIterator[TaskEvent]]: ...
    async def hold(self, task_ids: Sequence[str], origin: str, until: float) -> list[str]: ...
    async def release(self, task_ids: Sequence[str]) -> None: ...
    async def lapsed(self, now: float, limit: int) -> list[TaskRecord]: ...


@runtime_checkable
class TargetedEvents(SharedTaskStore, Protocol):
    """A shared store whose events reach only the processes that need them, instead of all:

    - ``cancel`` and ``input`` go to the process holding the task's lease (none: nobody; a
      process that claims it later finds the record as it is);
    - ``changed`` goes to the processes watching the task (``watch(task_ids, origin)``, until
      ``unwatch``: those with ``tasks/result`` waiters or listeners on a task running
      elsewhere);
    - ``work`` goes to every process.

    ``events_for(origin)`` is :meth:`SharedTaskStore.events` for the process ``origin``: its
    own events and those that go to all. A watch may outlive its process (it expires)."""

    def events_for(self, origin: str) -> AbstractAsyncContextManager[AsyncIterator[TaskEvent]]: ...
    async def watch(self, task_ids: Sequence[str], origin: str) -> None: ...
    async def unwatch(self, task_ids: Sequence[str], origin: str) -> None: ...


@runtime_checkable
class AnnouncedUpdates(SharedTaskStore, Protocol):
    """A shared store that announces an update in the same atomic step as the update itself.

    ``update_announced(record, origin)`` is ``update(record)`` and, only if that stored the
    record: ``release([record.task_id])`` when the record is terminal, then ``publish`` of
    ``TaskEvent("changed", record.task_id, origin)`` — all or nothing, in one call (with Redis,
    one round trip instead of three). A process writing a change waits for the store once, not
    three times: each wait is a sleep and a wake-up of a process that, among several sharing a
    store, has usually nothing else to do meanwhile."""

    async def update_announced(self, record: TaskRecord, origin: str) -> bool: ...


class WorkRefused(Exception):
    """A :class:`WorkQueue` refused a queued task: its owner's share, or the whole queue, is
    full (``str(exc)`` says which, fit for the client)."""


@runtime_checkable
class WorkQueue(SharedTaskStore, Protocol):
    """A shared store that also holds the work of its tasks, so that any process sharing it
    can run a task — the one that created it, another one with room, or, when the process
    running it died, another one again (for tools that may run again).

    A task's *work* is a description of the call to run (bytes the runtime makes and reads;
    the store keeps them with the record). A task is **queued** (waiting for a process with
    room) or **held** (a process runs it, under the lease of :class:`SharedTaskStore`).

    - ``create_work(record, work, holder, until, max_owner, max_total)`` creates the record
      with its work in one atomic step: held by ``holder`` (leased until ``until``), or, with
      ``holder`` None, queued — refused with :class:`WorkRefused` (nothing stored) when the
      owner already has ``max_owner`` tasks queued or the queue ``max_total``. Returns False
      if the id exists.
    - ``claim(holder, count, until)`` takes up to ``count`` queued tasks, oldest first, each
      leased to ``holder`` in the same step: their records and work. Each claim counts a run.
    - ``requeue(task_id, now, max_runs)``: a task whose lease lapsed before ``now`` is queued
      again if it has run fewer than ``max_runs`` times (None: no bound); 1 if queued, 0 if
      its lease is alive (renewed meanwhile, or already requeued by another process), -1 if
      it ran out of runs, -2 if it has no work or has ended.
    - ``hand_back(task_id, holder)``: a task ``holder`` holds is queued again now, its run not
      counted (a process stopping hands back what it cannot finish); False if not held by it.
    - ``work_of(task_id)``: its work and how many runs it has had, or None.
    - ``queued(owner)``: how many tasks wait in the queue (``owner``'s, or all with None).

    A task that ends (``release``) or is deleted leaves the queue.
    """

    async def create_work(
        self,
        record: TaskRecord,
        work: bytes,
        holder: str | None,
        until: float,
        max_owner: int | None,
        max_total: int | None,
    ) -> bool: ...
    async def claim(self, holder: str, count: int, until: float) -> list[tuple[TaskRecord, bytes]]: ...
    async def requeue(self, task_id: str, now: float, max_runs: int | None) -> int: ...
    async def hand_back(self, task_id: str, holder: str) -> bool: ...
    async def work_of(self, task_id: str) -> tuple[bytes, int] | None: ...
    async def queued(self, owner: str | None = None) -> int: ...
