"""The store writer: the one place a server process writes its task store.

Every write of the process goes through one :class:`StoreWriter` — a task's creation, each of
its changes, its deletion — and it makes these promises:

- **In order per task, concurrent across tasks.** A task's writes reach the store in the
  order they were made; changes made while an earlier one is being written are merged into
  the newest (the store gets the latest state, never an older one after a newer one). A slow
  or failing write of one task holds up no other task's.
- **Never dropped.** A write that fails (the store unreachable, a full disk, a timeout) is
  tried again, with a backoff from :attr:`RetryPolicy.first_delay` doubling up to
  :attr:`RetryPolicy.max_delay`, until it is stored. An attempt that ended in doubt (a timeout
  after the store may have done it) is settled by reading the record back.
- **Conflicts merged by one precedence.** A conditional update that finds another version in
  the store (another process wrote: a cancel, a lease sweep) re-reads the record and decides:

  1. the store's record is terminal: it stands (a terminal state never changes), and the
     runtime is told with ``on_lost`` — the task ends as the store says (its work stops);
  2. the record is gone (expired, deleted elsewhere): ``on_lost`` with None;
  3. otherwise this process's change wins (the process running a task is the only one that
     writes its non-terminal states) and is written on top of the store's version.

  A change's ``version`` is rebased on the store's when they differ: the store's versions
  count writes, the runtime's count changes.
- **Durable before visible.** ``on_stored(record)`` is called once ``record`` (or a newer
  change it was merged into) is stored, and only then: the runtime shows a state to clients
  from there (:meth:`~trio_mcp.actors.task_actor.TaskActor.stored`).
- **Deadlines.** Each store call has :attr:`timeout` seconds; a creation is answered (stored,
  or refused with :data:`STORE_UNAVAILABLE`) within that time from when it was asked, and a
  creation refused in doubt is deleted afterwards (retried like any write), so no task the
  client was refused is left behind.

A store that never waits (an :class:`~trio_mcp.stores.base.ImmediateTaskStore`: the memory
store) is written in place, in the caller's Trio task, through the same calls: ``on_stored`` runs
before :meth:`StoreWriter.update` returns. Nothing pending is written after the writer's nursery
is cancelled (a stopping server); nothing acknowledged depends on it, since clients only ever see
what was stored.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

import attrs
import trio

from ..protocol.errors import INTERNAL_ERROR, TASK_LIMIT_REACHED, ErrorValue
from ..protocol.records import TaskRecord
from ..stores.base import (
    AnnouncedUpdates,
    ImmediateTaskStore,
    SharedTaskStore,
    TaskEvent,
    TaskStore,
    WorkQueue,
    WorkRefused,
)
from ._observe import ObservedStore, StoreObserver, call_store

__all__ = ["STORE_UNAVAILABLE", "Backoff", "RetryPolicy", "StoreWriter", "Submission"]

log = logging.getLogger("trio_mcp.actors")

T = TypeVar("T")

STORE_UNAVAILABLE = ErrorValue(INTERNAL_ERROR, "Internal error: the task store is unavailable; retry later")
"""A creation the store could not take within the writer's deadline."""


@attrs.frozen
class RetryPolicy:
    """How a failed store write is tried again (seconds)."""

    first_delay: float = 0.05
    max_delay: float = 2.0
    timeout: float = 5.0
    """Each store call's deadline; also the longest a creation waits to be stored."""

    def backoff(self) -> Backoff:
        """The waits of one write's retries, from :attr:`first_delay` doubling to :attr:`max_delay`."""
        return Backoff(self)


@attrs.frozen
class Submission:
    """A new task's work, stored with it in a :class:`~trio_mcp.stores.base.WorkQueue`:
    ``queued`` for any process with room to claim (within the queue's caps, else refused), or
    held by this process, which runs it (and may be run again elsewhere if it dies)."""

    work: bytes
    queued: bool
    max_owner: int | None = None
    max_total: int | None = None


class Backoff:
    """The wait before a write's next attempt (see :meth:`RetryPolicy.backoff`)."""

    __slots__ = ("delay", "policy")

    def __init__(self, policy: RetryPolicy) -> None:
        self.policy = policy
        self.delay = policy.first_delay

    async def wait(self) -> None:
        await trio.sleep(self.delay)
        self.delay = min(self.delay * 2, self.policy.max_delay)


class _Lane:
    """One task's writes: the store's version as this process knows it, the newest change
    not yet written, and whether the record is to be deleted."""

    __slots__ = ("deleting", "done", "ended", "on_deleted", "running", "stored", "task_id", "want")

    def __init__(self, task_id: str, stored: int) -> None:
        self.task_id = task_id
        self.stored = stored
        self.want: TaskRecord | None = None
        self.deleting = False
        self.on_deleted: Callable[[TaskRecord | None], None] | None = None
        self.running = False
        self.ended = False  # the store's record is terminal or gone: nothing more to write
        self.done = False


class StoreWriter:
    """Writes one process's task store (see the module docstring for its promises).

    ``on_stored(record)``: ``record`` is stored now (clients may see it). ``on_lost(task_id,
    current)``: a change of ours met a record it must not overwrite — terminal, or None
    (gone). ``shared`` and ``origin``: for a store several processes share, a new task's lease
    is taken (``lease_seconds`` from ``wall_clock()``), a finished task's released, and a
    ``changed`` event published after each stored change. ``observer``: told of every store
    call's latency and error (:mod:`trio_mcp.actors._observe`); without one, nothing is timed.
    """

    def __init__(
        self,
        store: TaskStore,
        *,
        on_stored: Callable[[TaskRecord], None],
        on_lost: Callable[[str, TaskRecord | None], None],
        policy: RetryPolicy | None = None,
        shared: SharedTaskStore | None = None,
        origin: str = "",
        lease_seconds: float = 15.0,
        wall_clock: Callable[[], float] = time.time,
        observer: StoreObserver | None = None,
    ) -> None:
        self.store = store
        self.policy = policy or RetryPolicy()
        self.timeout = self.policy.timeout
        self.observed = ObservedStore(store, observer) if observer is not None else None
        """The store's calls, timed for the observer (None: no observer, nothing timed)."""
        self._immediate = store if isinstance(store, ImmediateTaskStore) else None
        if self._immediate is not None and self.observed is not None:
            self._immediate = self.observed.immediate(self._immediate)  # timed only when observed
        self._on_stored = on_stored
        self._on_lost = on_lost
        self._shared = shared
        self._announced = shared if isinstance(shared, AnnouncedUpdates) else None
        """A shared store whose updates announce themselves (one call, not three)."""
        self._origin = origin
        self._lease_seconds = lease_seconds
        self._wall_clock = wall_clock
        self._lanes: dict[str, _Lane] = {}
        self._running = 0  # lanes with a write under way
        self._settled: trio.Event | None = None
        self._nursery: trio.Nursery | None = None

    @property
    def immediate(self) -> bool:
        """Whether writes are made in place (the store never waits)."""
        return self._immediate is not None

    @property
    def pending(self) -> int:
        """Tasks with a write not yet stored."""
        return self._running

    async def settled(self) -> None:
        """Wait until every write asked for so far is stored (each is retried until it is)."""
        while self._running:
            self._settled = trio.Event()
            await self._settled.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Write until cancelled (``nursery.start(writer.run)``)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # -- what the runtime asks ---------------------------------------------------------------
    def create(
        self, record: TaskRecord, done: Callable[..., None], *context: Any, work: Submission | None = None
    ) -> None:
        """Store a new task; ``done(*context, None)`` once it is stored, ``done(*context,
        error)`` if it could not be within the deadline (then it is deleted in the background,
        in case it was) or the work queue refused it (nothing stored). ``work``: stored with
        it (a store that is a :class:`~trio_mcp.stores.base.WorkQueue` only)."""
        immediate = self._immediate
        if immediate is not None:
            immediate.create_now(record)
            done(*context, None)
            return
        lane = self._lanes[record.task_id] = _Lane(record.task_id, record.version - 1)
        self._start(lane, self._create, lane, record, partial(done, *context), work)

    def update(self, record: TaskRecord) -> None:
        """Store a change of a task (in order after its earlier ones)."""
        immediate = self._immediate
        if immediate is not None:
            if immediate.update_now(record):
                self._on_stored(record)
            else:
                self._merge_now(immediate, record)
            return
        lane = self._lanes.get(record.task_id)
        if lane is None:
            lane = self._lanes[record.task_id] = _Lane(record.task_id, record.version - 1)
        if lane.ended or lane.deleting:
            return  # the store's record ended, or is being deleted: nothing to write
        lane.want = record
        if not lane.running:
            self._start(lane, self._drain, lane)

    def delete(self, task_id: str, done: Callable[[TaskRecord | None], None] | None = None) -> None:
        """Delete a task's record (after any write under way); ``done(removed)`` once deleted."""
        immediate = self._immediate
        if immediate is not None:
            removed = immediate.delete_now(task_id)
            if done is not None:
                done(removed)
            return
        lane = self._lanes.get(task_id)
        if lane is None:
            lane = self._lanes[task_id] = _Lane(task_id, -1)
        lane.deleting = True
        lane.want = None
        lane.on_deleted = done
        if not lane.running:
            self._start(lane, self._drain, lane)

    def forget(self, task_id: str) -> None:
        """The runtime is done with this task: drop what is kept for it, unless a write of it
        is still under way (then it goes once that ends)."""
        lane = self._lanes.get(task_id)
        if lane is not None:
            if lane.running:
                lane.done = True
            else:
                del self._lanes[task_id]

    # -- in place (a store that never waits) -----------------------------------------------
    def _merge_now(self, store: ImmediateTaskStore, record: TaskRecord) -> None:
        current = store.peek(record.task_id)
        if current is None or current.is_terminal:
            self._on_lost(record.task_id, current)
        elif store.update_now(record.with_version(current.version + 1)):
            self._on_stored(record)

    # -- the writing tasks -------------------------------------------------------------------
    def _start(self, lane: _Lane, function: Callable[..., Awaitable[None]], *args: object) -> None:
        """Run ``lane``'s writes in a Trio task of their own (``function(*args)``)."""
        if self._nursery is None:
            raise RuntimeError("the store writer is not running")
        lane.running = True
        self._running += 1
        try:
            self._nursery.start_soon(function, *args)
        except RuntimeError:  # the writer has stopped (the server is stopping): nothing is written
            log.debug("task store writer stopped: a write was not made")
            self._ended(lane)

    async def _call(
        self,
        call: Callable[[], Awaitable[T]],
        seconds: float,
        refusals: type[Exception] | tuple[type[Exception], ...] = (),
    ) -> tuple[bool, T | None]:
        """(True, value), or (False, None) if it raised or took over ``seconds``: in doubt.
        ``refusals``: exceptions that are an answer (raised to the caller), not a failure."""
        try:
            if self.observed is not None:
                deadline = trio.current_time() + max(seconds, 0.0)
                return True, await self.observed.call(call, deadline, refusals)
            with trio.fail_after(max(seconds, 0.0)):
                return True, await call()
        except refusals:
            raise
        except trio.TooSlowError:
            log.warning("task store call took over %.1f s", seconds)
        except Exception as exc:
            log.warning("task store call failed: %r", exc, exc_info=exc)
        return False, None

    async def _create(
        self,
        lane: _Lane,
        record: TaskRecord,
        done: Callable[[ErrorValue | None], None],
        work: Submission | None,
    ) -> None:
        store = self.store
        deadline = trio.current_time() + self.timeout
        backoff = self.policy.backoff()
        create: Callable[[], Awaitable[Any]] = partial(store.create, record)
        if work is not None:
            assert isinstance(store, WorkQueue)
            create = partial(
                store.create_work,
                record,
                work.work,
                None if work.queued else self._origin,
                self._wall_clock() + self._lease_seconds,
                work.max_owner,
                work.max_total,
            )
        try:
            while True:
                try:
                    ok, _ = await self._call(create, deadline - trio.current_time(), refusals=WorkRefused)
                except WorkRefused as exc:  # the queue is full: nothing was stored
                    lane.ended = True
                    done(ErrorValue(TASK_LIMIT_REACHED, str(exc)))
                    break
                if not ok:  # in doubt: did it happen?
                    ok, current = await self._call(
                        partial(store.get, record.task_id), deadline - trio.current_time()
                    )
                    ok = ok and current is not None and current == record
                if ok:
                    lane.stored = record.version
                    if work is not None:
                        if work.queued:  # wake the processes waiting for work
                            await self._publish(TaskEvent("work", record.task_id, self._origin))
                    elif self._shared is not None:
                        await self._hold(record.task_id)
                    done(None)
                    break
                if trio.current_time() + backoff.delay >= deadline:
                    done(STORE_UNAVAILABLE)
                    lane.deleting = True  # it may have been stored: make sure it is not
                    lane.want = None
                    break
                await backoff.wait()
            await self._drain_lane(lane)
        finally:
            self._ended(lane)

    async def _hold(self, task_id: str) -> None:
        assert self._shared is not None
        shared = self._shared
        until = self._wall_clock() + self._lease_seconds
        ok, _ = await self._call(partial(shared.hold, [task_id], self._origin, until), self.timeout)
        if not ok:
            log.warning("task %s: its lease was not taken; the lease loop renews it", task_id)

    async def _drain(self, lane: _Lane) -> None:
        try:
            await self._drain_lane(lane)
        finally:
            self._ended(lane)

    def _ended(self, lane: _Lane) -> None:
        lane.running = False
        self._running -= 1
        if not self._running and self._settled is not None:
            self._settled.set()
        if lane.done or lane.ended:
            if self._lanes.get(lane.task_id) is lane:
                del self._lanes[lane.task_id]

    async def _drain_lane(self, lane: _Lane) -> None:
        while lane.want is not None and not lane.deleting and not lane.ended:
            record, lane.want = lane.want, None
            await self._write(lane, record)
        if lane.deleting:
            await self._delete(lane)

    async def _write(self, lane: _Lane, record: TaskRecord) -> None:
        store = self.store
        backoff = self.policy.backoff()
        conflicts = 0  # refused for another version, the store's record not ended
        while True:
            if lane.want is not None:  # a newer change came meanwhile: it replaces this one
                record, lane.want = lane.want, None
            if lane.deleting:
                return
            attempt = record if record.version == lane.stored + 1 else record.with_version(lane.stored + 1)
            announced = self._announced
            write = (
                partial(announced.update_announced, attempt, self._origin)
                if announced is not None
                else partial(store.update, attempt)
            )
            ok, updated = await self._call(write, self.timeout)
            if ok and updated:
                await self._stored(lane, attempt, record)
                return
            read, current = await self._call(partial(store.get, record.task_id), self.timeout)
            if not read:
                await backoff.wait()
                continue
            if current is None:
                lane.ended = True
                self._on_lost(record.task_id, None)
                return
            if current.version == attempt.version and current == attempt:
                await self._stored(lane, attempt, record)  # the attempt in doubt was made
                return
            lane.stored = current.version
            if current.is_terminal:
                lane.ended = True
                self._on_lost(record.task_id, current)
                return
            conflicts += ok
            if not ok or conflicts > 3:  # the store failed, or others keep writing: wait first
                await backoff.wait()

    async def _stored(self, lane: _Lane, attempt: TaskRecord, record: TaskRecord) -> None:
        lane.stored = attempt.version
        if attempt.is_terminal:
            lane.ended = True
        self._on_stored(record)
        if self._announced is None:  # (else the update announced itself, in the same step)
            await self._announce(record.task_id, release=attempt.is_terminal)

    async def _publish(self, event: TaskEvent) -> None:
        """Tell the other processes (a hint: a failure is logged)."""
        assert self._shared is not None
        try:
            deadline = trio.current_time() + self.timeout
            await call_store(self.observed, partial(self._shared.publish, event), deadline)
        except Exception as exc:
            log.warning("task %s: %s event not published: %r", event.task_id, event.kind, exc)

    async def _announce(self, task_id: str, *, release: bool) -> None:
        """With a shared store: release the lease of a task that ended, and tell the other
        processes its record changed (news is a hint: readers re-read, so a failure is logged)."""
        shared = self._shared
        if shared is None:
            return
        try:
            deadline = trio.current_time() + self.timeout  # for both calls
            if release:
                await call_store(self.observed, partial(shared.release, [task_id]), deadline)
            event = TaskEvent("changed", task_id, self._origin)
            await call_store(self.observed, partial(shared.publish, event), deadline)
        except Exception as exc:
            log.warning("task %s: its change was stored but not announced: %r", task_id, exc)

    async def _delete(self, lane: _Lane) -> None:
        store = self.store
        backoff = self.policy.backoff()
        while True:
            ok, removed = await self._call(partial(store.delete, lane.task_id), self.timeout)
            if ok:
                break
            await backoff.wait()
        lane.ended = True
        if removed is not None:
            await self._announce(lane.task_id, release=True)
        if lane.on_deleted is not None:
            lane.on_deleted(removed)
