"""TaskSupervisor: owns this process's tasks — their records in the store, their live actors,
the TTL timers and the per-owner limits.

- Task ids come from :mod:`secrets` (unguessable); each task is bound to its owner, a string
  identity: another owner gets -32602 and never sees it listed.
- TTL counts from creation. Absent TTLs get :attr:`TaskLimits.default_ttl_ms`; larger ones are
  clamped to :attr:`TaskLimits.max_ttl_ms` and the real value is reported.
- One timer loop over the deadlines (not a sleeper per task), filed in millisecond buckets
  (:mod:`trio_mcp.protocol._expiries`: a task expires at most 1 ms after its TTL, never
  before); ids of removed tasks are forgotten. At expiry a task's work is cancelled if still
  running, its record is deleted, and any ``tasks/result`` waiter is answered with -32602
  "Task has expired".
- At most :attr:`TaskLimits.max_live_tasks_per_owner` non-terminal tasks per owner; past it,
  creation fails with :data:`~trio_mcp.protocol.errors.TASK_LIMIT_REACHED`.
- A TaskActor that crashes (a bug in the runtime, not in a tool: tool errors fail the task
  normally) is reported here; its task becomes ``failed`` with the error kept, and every
  waiter is answered with that error.

Records and the live side. The store (:mod:`trio_mcp.stores.base`) holds records only. The
live side — a running task's actor with its cancel scope and result waiters — is a registry
here, in the process running the work. Every write goes through the process's one
:class:`~trio_mcp.actors._writer.StoreWriter` (in order per task, retried until stored, merged
on conflict); clients are shown only what is stored (a creation is answered once its record is
stored, a change shown once it is, a result once the task's end is). An actor is forgotten once
its final record is stored, and from then on the task is answered from the store. A store read
has the writer's deadline and runs in a Trio task of its own, so a slow store delays no request
that does not need it.
"""

from __future__ import annotations

import base64
import functools
import logging
import math
import os
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

import attrs
import trio

from ..protocol._frozen import slot_builder
from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, ErrorValue
from ..protocol.records import TaskOutcome, TaskRecord, new_record
from ..protocol.table import TaskLimits, TaskTable
from ..protocol.tasks import TERMINAL, TaskStatus
from ..stores.base import (
    DurableTaskStore,
    ImmediateTaskStore,
    InvalidCursor,
    SharedTaskStore,
    TargetedEvents,
    TaskEvent,
    TaskStore,
    WorkQueue,
)
from ..stores.memory import MemoryTaskStore
from ._observe import StoreObserver
from ._writer import RetryPolicy, StoreWriter, Submission
from .runtime import Actor, Alarm, Alarms, Reply
from .task_actor import (
    CANCELLED,
    ActorHost,
    AwaitResult,
    Cancel,
    Poll,
    ProvideInput,
    StagedWork,
    Start,
    Stop,
    TaskActor,
    Work,
)
from .trace import Tracer, no_trace

__all__ = [
    "EXPIRED",
    "GONE",
    "NOT_FOUND",
    "CreateTask",
    "ListTasks",
    "Reveal",
    "Route",
    "TaskLimits",
    "TaskSupervisor",
    "Unwatch",
    "Watch",
    "WorkReader",
]


class _TaskIds:
    """Unguessable task ids: 18 bytes from :func:`os.urandom` each, written as
    ``secrets.token_urlsafe(18)`` writes them (24 URL-safe base64 characters). The bytes of
    256 ids are read and encoded at once (one system call and one encoding per 256 tasks): 18
    bytes are whole base64 groups, so each id is a slice of the encoded text."""

    __slots__ = ("_pool", "_taken")
    SIZE = 18
    LENGTH = 24  # characters of one id
    BATCH = 256

    def __init__(self) -> None:
        self._pool = ""
        self._taken = 0

    def __call__(self) -> str:
        start = self._taken
        if start + self.LENGTH > len(self._pool):
            self._pool, start = base64.urlsafe_b64encode(os.urandom(self.SIZE * self.BATCH)).decode(), 0
        self._taken = start + self.LENGTH
        return self._pool[start : start + self.LENGTH]


class _Unborn:
    """A hidden task (:attr:`CreateTask.hidden`) before it is shown: not stored, and not yet
    counted in the task table (see :meth:`TaskSupervisor._reveal`)."""

    __slots__ = ("client", "due", "record", "result_bytes", "submission")

    def __init__(
        self, record: TaskRecord, submission: Submission | None, client: str | None, due: float
    ) -> None:
        self.record = record
        """Its latest record (what is stored if it is shown)."""
        self.submission = submission
        """The work to store with it (a work queue), or None."""
        self.client = client
        """Whom it will count under for the per-client limits."""
        self.due = due
        """When it expires, on the Trio clock (its TTL counts from its creation)."""
        self.result_bytes = 0
        """The size of its result, when that is to be counted in the kept bytes once it is
        shown (see :meth:`TaskSupervisor._keep_result`)."""


# Messages.
@attrs.frozen(weakref_slot=False)  # no weak reference slot: built by slot_builder
class CreateTask:
    """Create a task for ``owner``; answered with its first record. ``watcher`` is told every
    later record (status notifications)."""

    owner: str
    work: Work
    ttl_ms: int | None
    watcher: Callable[[TaskRecord], None] | None
    reply: Reply[TaskRecord]
    client: str | None = None
    """Whom the owner counts under for the per-client limits (a peer address); None: the
    owner itself."""
    hidden: bool = False
    """A server-directed call's task, which no client knows of yet: it runs here, and is
    stored only once :class:`Reveal` shows it (a call that ends within its auto-task window
    never touches the store); otherwise it is removed. Until shown it is admitted (the limits
    are checked at its creation) but not counted in the task table: it takes its place there
    when it is shown, if the limits still allow it."""


create_task = slot_builder(CreateTask)
"""``CreateTask(...)`` of all seven fields, positionally (every task creation)."""


@attrs.frozen
class Reveal:
    """A hidden task is to be shown to its client: it is stored (with its latest record), then
    ``reply`` gets that record; a task that is not hidden is answered as a Poll."""

    owner: str
    task_id: str
    reply: Reply[TaskRecord]


@attrs.frozen
class Route:
    """Deliver Start / Poll / AwaitResult / Cancel to the owner's task, or fail it with -32602."""

    owner: str
    task_id: str
    message: Start | Poll | AwaitResult | Cancel | ProvideInput


@attrs.frozen
class ListTasks:
    owner: str
    cursor: str | None
    reply: Reply[tuple[list[TaskRecord], str | None]]


@attrs.frozen
class Remove:
    """Cancel and forget one task of ``owner`` (e.g. created for a connection that closed
    before its CreateTaskResult could be sent)."""

    owner: str
    task_id: str


@attrs.frozen
class Watch:
    """Tell ``watcher`` every new record of these tasks of ``owner`` (``subscriptions/listen``);
    answered with the ids accepted (the owner's tasks that exist). Undo with :class:`Unwatch`."""

    owner: str
    task_ids: tuple[str, ...]
    watcher: Callable[[TaskRecord], None]
    reply: Reply[tuple[str, ...]]


@attrs.frozen
class Unwatch:
    task_ids: tuple[str, ...]
    watcher: Callable[[TaskRecord], None]


@attrs.frozen
class _Changed:
    """A crashed actor's last record, for the writer (sent by the supervisor to itself)."""

    actor: TaskActor
    record: TaskRecord


@attrs.frozen
class _DropOwner:
    owner: str


@attrs.frozen
class _Expire:
    task_ids: tuple[str, ...]


@attrs.frozen
class _Event:
    event: TaskEvent


@attrs.frozen
class _Recheck:
    """Read these tasks again: a lease renewal or a resubscription says they may have changed."""

    task_ids: tuple[str, ...]


@attrs.frozen
class _Lapse:
    """Fail the running tasks whose process stopped renewing their lease."""


@attrs.frozen
class _Sweep:
    """Delete the records the store says are due (tasks this process did not create)."""


@attrs.frozen
class _Crashed:
    actor: TaskActor
    error: BaseException


SupervisorMessage = (
    CreateTask
    | Reveal
    | Route
    | ListTasks
    | Remove
    | Watch
    | Unwatch
    | _Changed
    | _DropOwner
    | _Expire
    | _Crashed
    | _Sweep
    | _Event
    | _Lapse
    | _Recheck
)

log = logging.getLogger("trio_mcp.actors")

T = TypeVar("T")

NOT_FOUND = ErrorValue(INVALID_PARAMS, "Failed to retrieve task: Task not found")
GONE = ErrorValue(INVALID_PARAMS, "Failed to retrieve task: Task is gone (its owner disconnected)")
EXPIRED = ErrorValue(INVALID_PARAMS, "Failed to retrieve task: Task has expired")
ELSEWHERE = ErrorValue(INTERNAL_ERROR, "Task is not running in this server process")
STORE_FAILED = "Internal error: the task store failed"
STORE_FAILURE = ErrorValue(INTERNAL_ERROR, STORE_FAILED)
"""A request that needed the store when it failed (or passed its deadline)."""
PROCESS_GONE = ErrorValue(
    INTERNAL_ERROR, "The server process running this task stopped; its work cannot be resumed."
)
NOT_RETRIED = ErrorValue(
    INTERNAL_ERROR,
    "The server process running this task stopped, and its tool may not run again "
    "(mark it @server.tool(retries=N) or idempotent=True if running it twice is safe).",
)
OUT_OF_RUNS = ErrorValue(
    INTERNAL_ERROR,
    "The server process running this task stopped, and the task has had every run its tool allows.",
)
SHUT_DOWN = ErrorValue(
    INTERNAL_ERROR, "The server shut down before this task finished; its tool may not run again."
)
CLAIM_BATCH = 64
"""Queued tasks claimed at once, at most."""
CLAIM_EVERY_ROUNDS = 12
"""With a work queue, a process with room looks for queued tasks when another process says it
queued one, after a resubscription (events were missed), and every this many lease rounds
(a publication that failed: a minute by default)."""
LEASE_SECONDS = 15.0
"""The default of :attr:`TaskLimits.lease_seconds`: a shared store's lease on a running task,
renewed by its process every third of it. A task whose lease lapsed (its process is gone) is
queued again (a tool that may run again) or failed by the next process that looks, within
about ``LEASE_SECONDS * 4 / 3`` of the crash."""
REMOTE_RECHECK_SECONDS = 2.0
"""How often a process re-reads the tasks running elsewhere that its ``tasks/result`` requests
wait for (besides every ``changed`` event and every resubscription)."""
CANCEL_ATTEMPTS = 32
"""Compare-and-set rounds a cancel of a task running elsewhere tries against concurrent writes."""
MAX_REMOTE_WAITERS = 1024
"""``tasks/result`` requests one process keeps waiting on one task running elsewhere."""
SWEEP_BATCH = 1000
SWEEP_INTERVAL = 60.0
"""Seconds between sweeps of a durable store's expired records."""


class WorkReader(Protocol):
    """What reads tasks' work back (:class:`~trio_mcp.actors._queue.WorkSource`)."""

    def run(self, record: TaskRecord, work: bytes) -> Work | ErrorValue: ...
    def max_runs(self, work: bytes) -> int | None: ...


class TaskSupervisor(Actor[SupervisorMessage]):
    """The task table's single owner. Start it with ``nursery.start(supervisor.run)``."""

    def __init__(
        self,
        limits: TaskLimits | None = None,
        *,
        store: TaskStore | None = None,
        wall_clock: Callable[[], float] = time.time,
        tracer: Tracer = no_trace,
        retry: RetryPolicy | None = None,
        store_observer: StoreObserver | None = None,
    ) -> None:
        super().__init__(mailbox_size=65_536)
        self.tracer = tracer
        self.limits = limits or TaskLimits()
        self.store: TaskStore = store if store is not None else MemoryTaskStore()
        self.wall_clock = wall_clock
        self._actors: dict[str, TaskActor] = {}
        self.table = TaskTable(self.limits)
        """Every decision about this process's tasks (sans-IO: :mod:`trio_mcp.protocol.table`)."""
        self._watchers: dict[str, list[Callable[[TaskRecord], None]]] = {}
        self._new_id = _TaskIds()
        self.origin = secrets.token_hex(8)
        """This process's name among those sharing the store."""
        # The store's abilities, read once (stores/base.py declares them).
        self._shared: SharedTaskStore | None = self.store if isinstance(self.store, SharedTaskStore) else None
        self._queue: WorkQueue | None = self.store if isinstance(self.store, WorkQueue) else None
        self._targeted: TargetedEvents | None = self.store if isinstance(self.store, TargetedEvents) else None
        self._watching: set[str] = set()
        """Tasks running elsewhere whose ``changed`` events this process asked for (a
        :class:`TargetedEvents` store): those with remote waiters or watchers here."""
        self.events_seen = 0
        """Events of other processes handled (diagnostics)."""
        self.works = True
        """With a work queue: whether this process claims queued tasks (a front started with
        ``--no-work`` does not: it queues every task it creates)."""
        self.work_reader: WorkReader | None = None
        """Reads queued tasks' work (set by the runtime that serves the tools)."""
        self._work_wake = trio.Event()
        self._full = False
        """The work loop waits for room (this process runs ``max_running_work`` tasks)."""
        self._draining = False
        self._revealing: dict[str, str] = {}
        """Hidden tasks being stored to be shown, and their owners: a removal meanwhile (the
        call's client went away) deletes what the creation stores."""
        self._unborn: dict[str, _Unborn] = {}
        """Hidden tasks (:attr:`CreateTask.hidden`) not shown yet: not stored, not counted."""
        self._durable: DurableTaskStore | None = (
            self.store if isinstance(self.store, DurableTaskStore) else None
        )
        self._peek: Callable[[str], TaskRecord | None] | None = (
            self.store.peek if isinstance(self.store, ImmediateTaskStore) and self._shared is None else None
        )
        """Reads a record without waiting (the memory store): see :meth:`deliver`."""
        self._writer = StoreWriter(
            self.store,
            on_stored=self._on_stored,
            on_lost=self._on_lost,
            policy=retry if retry is not None else RetryPolicy(timeout=self.limits.store_timeout),
            shared=self._shared,
            origin=self.origin,
            lease_seconds=self.limits.lease_seconds,
            wall_clock=wall_clock,
            observer=store_observer,  # told of every store call (telemetry); None: nothing timed
        )
        self._forget_lane = None if self._writer.immediate else self._writer.forget
        """Drops what the writer keeps of a task that ended (a store that waits keeps a lane)."""
        self._remote_waiters: dict[str, list[Reply[TaskOutcome]]] = {}
        self._waiting_remotely = trio.Event()
        """Set when a ``tasks/result`` here starts waiting on a task running elsewhere."""
        self._timer = trio.CancelScope()
        self._timer_deadline = math.inf  # the timer's deadline (a property of Trio's, read per creation)
        self._nursery: trio.Nursery | None = None
        # Trio's time, read through the run's clock once it runs (trio.current_time() is
        # three calls deep; this is read at every creation).
        self._trio_now: Callable[[], float] = trio.current_time
        # Made once and shared: every live actor keeps a reference (a bound method made per
        # actor would be 64 bytes each).
        self._unread = self.mailbox.unread()  # the mailbox's backlog, tested at each creation
        self.alarms = Alarms()
        """Deadlines of the runtime's waits that seldom reach them (an auto-task window)."""
        self._actor_host = ActorHost(
            self.wall_clock,
            self._changed,
            tracer if tracer is not no_trace else None,
            self.limits.max_result_bytes,
            self._keep_result,
        )
        self._crash_reporter = self._on_crash

    def window_alarm(self, callback: Callable[[], None]) -> Alarm:
        """An alarm (:attr:`alarms`) calling ``callback`` once the auto-task window
        (:attr:`TaskLimits.auto_task_after_ms`) that starts now has passed; withdraw it with
        ``alarms.withdraw``."""
        return self.alarms.add(self._trio_now() + self.limits.auto_task_after_ms / 1000, callback)

    def live_count(self, owner: str) -> int:
        """Non-terminal tasks of ``owner`` counted in the task table (hidden tasks are not,
        until shown)."""
        return self.table.live_count(owner)

    @property
    def actors(self) -> int:
        """Live actors held (running tasks, and ended ones whose final record is being stored)."""
        return len(self._actors)

    def actor(self, task_id: str) -> TaskActor | None:
        """The live actor of a task running in this process (None once it is only a record)."""
        return self._actors.get(task_id)

    # -- the actor ------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._trio_now = trio.lowlevel.current_clock().current_time
            await nursery.start(self._writer.run)
            await self._sweep_due()
            if self._durable is not None:
                await self._recover(self._durable)
                nursery.start_soon(self._sweep_loop)
            if self._shared is not None:
                await nursery.start(self._event_loop, self._shared)
                nursery.start_soon(self._lease_loop, self._shared)
                nursery.start_soon(self._recheck_loop)
            if self._queue is not None:
                nursery.start_soon(self._work_loop, self._queue)
            nursery.start_soon(self._expire_loop)
            nursery.start_soon(self.alarms.run)
            self._nursery = nursery
            task_status.started()
            while True:
                await self._handle(await self.mailbox.get())

    async def _handle(self, message: SupervisorMessage) -> None:
        """Handle one message. What needs the store runs in a Trio task of its own (with the
        store's deadline), so that a slow store call delays only the requests that need its
        answer; with a store that never waits (the memory store) it runs here, in order."""
        serve = self._serve
        if isinstance(message, Route):
            inner = message.message
            if isinstance(inner, Start) or (
                message.task_id in self._actors and not (self._shared is not None and isinstance(inner, Poll))
            ):
                self._route_live(message)
            else:
                await serve(self._route, message)
        elif isinstance(message, _Changed):
            self._store_change(message.record)
        elif isinstance(message, CreateTask):
            self._create(message)
        elif isinstance(message, Reveal):
            self._reveal(message)
        elif isinstance(message, ListTasks):
            await serve(self._list, message)
        elif isinstance(message, _Expire):
            for task_id in message.task_ids:
                self._remove(task_id, EXPIRED)
        elif isinstance(message, Remove):
            await serve(self._remove_owned, message.owner, message.task_id)
        elif isinstance(message, Watch):
            await serve(self._watch, message)
        elif isinstance(message, Unwatch):
            for task_id in message.task_ids:
                self._unwatch(task_id, message.watcher)
        elif isinstance(message, _DropOwner):
            await serve(self._drop_owner, message.owner)
        elif isinstance(message, _Crashed):
            self._crashed(message.actor, message.error)
        elif isinstance(message, _Sweep):
            await serve(self._sweep_due)
        elif isinstance(message, _Event):
            await serve(self._on_event, message.event)
        elif isinstance(message, _Lapse):
            await serve(self._fail_lapsed)
        elif isinstance(message, _Recheck):
            await serve(self._recheck, message.task_ids)

    async def _serve(self, handler: Callable[..., Awaitable[None]], *args: Any) -> None:
        if self._peek is not None:
            await handler(*args)  # the store never waits: in mailbox order
        else:
            assert self._nursery is not None
            self._nursery.start_soon(handler, *args)

    async def _read(self, call: Callable[[], Awaitable[T]]) -> T:
        """A store read within the store's deadline (:class:`trio.TooSlowError` past it: an
        ``Exception`` like the store's own failures, which callers answer alike); every other
        call of the supervisor's to the store (a shared store's) is made through it too, so
        that the store observer, if there is one, is told of each."""
        observed = self._writer.observed
        if observed is not None:
            return await observed.call(call, trio.current_time() + self._writer.timeout)
        with trio.fail_after(self._writer.timeout):
            return await call()

    def owner_gone(self, owner: str) -> None:
        """Cancel every running task of ``owner`` now, in the caller's Trio task, and forget all
        its tasks (records are deleted next, in order). For a connection that closed: its
        running work is cancelled before its pending requests fail. Its hidden tasks (not
        counted in the table) go too."""
        for task_id in self.table.live_ids(owner):
            actor = self._actors.pop(task_id, None)
            self.table.ended(task_id)
            if actor is not None:
                self._deliver(actor, Stop(GONE))
        if self._unborn:
            for task_id in [
                task_id for task_id, unborn in self._unborn.items() if unborn.record.owner == owner
            ]:
                self._remove(task_id, GONE)
        self.mailbox.put(_DropOwner(owner), system=True)

    # -- creation -------------------------------------------------------------------------
    def create(self, message: CreateTask) -> None:
        """Create a task for ``message.owner``; its first record, once stored (or the refusal),
        answers ``message.reply``. The task is made now, in the caller's Trio task, unless
        earlier messages wait in the mailbox (or the supervisor is not running yet): then it
        goes through the mailbox, so that mailbox order is kept (:class:`MailboxFull` when
        full). Its place under the limits is taken at once, and the store writer stores it (in
        place, with the memory store); a hidden task (:attr:`CreateTask.hidden`) is answered at
        once, admitted but neither counted nor stored until it is shown."""
        if self._nursery is None or self._unread:
            self.mailbox.put(message)
        else:
            self._create(message)

    def remove(self, message: Remove) -> None:
        """Remove a task no client was told of (its work, if begun, is cancelled). A hidden
        task (see :class:`CreateTask`) has no record in the store: it goes now, in the caller's
        Trio task, unless earlier messages wait in the mailbox (mailbox order is kept, as in
        :meth:`create`). Any other goes through the mailbox, bound or not (it must never be
        refused: the task would stay, with nobody knowing its id)."""
        task_id = message.task_id
        unborn = self._unborn.get(task_id)
        if unborn is not None and self._nursery is not None and not self._unread:
            if unborn.record.owner == message.owner:
                self._remove(task_id, GONE)
            return
        self.mailbox.put(message, system=True)

    @property
    def queues(self) -> bool:
        """Whether tasks are stored with their work (a store that is a work queue)."""
        return self._queue is not None

    def _create(self, message: CreateTask) -> None:
        # Every creation: its checks, record, actor, place in the table and first write, in
        # one function (the path every task takes).
        owner = message.owner
        table = self.table
        refusal = table.refusal(owner, message.client)
        if refusal is not None:
            message.reply.fail_value(refusal)
            return
        limits = self.limits
        record = new_record(
            self._new_id(),
            owner,
            self.wall_clock(),
            limits.grant_ttl(message.ttl_ms),
            limits.poll_interval_ms,
        )
        work = message.work
        submission: Submission | None = None
        if self._queue is not None and isinstance(work, StagedWork) and work.replay is not None:
            queued = not self.works or self._draining or len(self._actors) >= limits.max_running_work
            submission = Submission(work.replay, queued, limits.max_queued_per_owner, limits.max_queued)
            if queued:  # another process (or this one, once it has room) runs it
                try:
                    self._writer.create(record, self._created_queued, message, record, work=submission)
                except Exception as exc:
                    log.error("task store failed to create a task: %r", exc, exc_info=exc)
                    message.reply.fail_value(STORE_FAILURE)
                return
        # The new task gets its actor, its place under the limits and its deadline.
        task_id = record.task_id
        ttl = record.ttl_ms
        actor = TaskActor(record, work, self._actor_host, message.watcher)
        if self.tracer is not no_trace:
            self.tracer("task.created", {"task_id": task_id, "status": record.status.value, "ttl": ttl})
            self.tracer("actor.start", {"actor": "TaskActor", "name": task_id})
        self._actors[task_id] = actor
        if message.hidden:
            # Stored, and counted in the table, only if it is shown (see _reveal): most such
            # calls end within their window, and are forgotten.
            self._unborn[task_id] = _Unborn(record, submission, message.client, self._trio_now() + ttl / 1000)
            message.reply.send(record)
            return
        due = table.add(task_id, owner, message.client, self._trio_now() + ttl / 1000)
        if due < self._timer_deadline:
            self._timer_deadline = self._timer.deadline = due
        try:
            self._writer.create(record, self._created, message, actor, work=submission)
        except Exception as exc:
            log.error("task store failed to create a task: %r", exc, exc_info=exc)
            self._created(message, actor, STORE_FAILURE)

    def _reveal(self, message: Reveal) -> None:
        """Count a hidden task in the table (if the limits still allow it: else it goes, and
        the reply gets the refusal), store it (its latest record), then answer with that
        record."""
        task_id = message.task_id
        unborn = self._unborn.get(task_id)
        if unborn is None or unborn.record.owner != message.owner:
            self.deliver(Route(message.owner, task_id, Poll(message.reply)))  # it was never hidden
            return
        record = unborn.record
        owner = record.owner
        table = self.table
        # Admitted at its creation, it takes its place under the limits now: they hold for
        # the tasks shown (a call within its window is bounded by its request's admission).
        refusal = table.refusal(owner, unborn.client)
        if refusal is None:
            due = table.add(task_id, owner, unborn.client, unborn.due)
            if due < self._timer_deadline:
                self._timer_deadline = self._timer.deadline = due
            if record.is_terminal:
                table.ended(task_id)
            if unborn.result_bytes:
                refusal = table.keep_result(task_id, unborn.result_bytes)
            if refusal is not None:
                table.remove(task_id)
        if refusal is not None:
            self._remove(task_id, refusal)
            message.reply.fail_value(refusal)
            return
        del self._unborn[task_id]
        self._revealing[task_id] = owner
        try:
            self._writer.create(record, self._revealed, message, record, work=unborn.submission)
        except Exception as exc:
            log.error("task store failed to create a task: %r", exc, exc_info=exc)
            self._revealed(message, record, STORE_FAILURE)

    def _keep_result(self, task_id: str, size: int) -> ErrorValue | None:
        """Whether a finished task may keep a result of ``size`` bytes (the table's
        :meth:`~trio_mcp.protocol.table.TaskTable.keep_result`); a hidden task's is counted
        when it is shown (see :meth:`_reveal`)."""
        unborn = self._unborn.get(task_id)
        if unborn is not None:
            unborn.result_bytes = size
            return None
        return self.table.keep_result(task_id, size)

    def _revealed(self, message: Reveal, record: TaskRecord, error: ErrorValue | None) -> None:
        """A hidden task is stored, and its client may be shown it; or it could not be, and it
        goes (its work stops): the call is answered with the error."""
        task_id = record.task_id
        self._revealing.pop(task_id, None)
        if error is not None:
            self._forget_task(task_id, error)
            message.reply.fail_value(error)
            return
        actor = self._actors.get(task_id)
        if actor is None and self._forget_lane is not None:
            self._forget_lane(task_id)  # it had ended: nothing more to write
        message.reply.send(actor.shown if actor is not None else record)

    def _created_queued(self, message: CreateTask, record: TaskRecord, error: ErrorValue | None) -> None:
        """A queued task is stored (or refused): its creator hears of it, and its watcher of
        its news from whichever process runs it."""
        if error is not None:
            message.reply.fail_value(error)
            return
        if message.watcher is not None:
            self._watchers.setdefault(record.task_id, []).append(message.watcher)
            self._interested(record.task_id)
        message.reply.send(record)

    def _created(self, message: CreateTask, actor: TaskActor, error: ErrorValue | None) -> None:
        """The store has the new task (``error`` None): its creator gets its record; or it was
        refused, and the task is forgotten (the writer makes sure no record of it stays)."""
        task_id = actor.task_id
        if error is None:
            if self._actors.get(task_id) is not actor and task_id in self.table:
                # Its owner went away while it was being stored (owner_gone dropped the actor,
                # and the owner's records were listed before this one was there): what was
                # stored goes too, and nobody is shown it.
                self.table.remove(task_id)
                self._writer.delete(task_id)
                message.reply.fail_value(GONE)
                return
            message.reply.send(actor.shown)
            return
        if self._actors.get(task_id) is actor:
            self._forget_task(task_id, error)
        message.reply.fail_value(error)

    # -- routing --------------------------------------------------------------------------
    def deliver(self, message: Route) -> None:
        """Deliver a task message, answering it at once where that needs no waiting.

        A task whose actor lives in this process is handed the message now, in the caller's
        Trio task (the actor's handlers never wait, so this is as atomic as the supervisor's
        own delivery); so is a query about a task that is only a record, when the store can
        read it without waiting (the memory store). Everything else — starting the work, a
        record in a durable or shared store — goes through the mailbox in order
        (:class:`MailboxFull` when it is full). Answers per task keep their order: a task
        whose actor is here is always answered at once, and its actor is forgotten only
        after its final record is stored. With a store several processes share, a poll is
        answered from the store even when the task runs here: another process may have ended
        it (a cancel through it), and no process answers older than the store.
        """
        inner = message.message
        if not isinstance(inner, Start) and not (self._shared is not None and isinstance(inner, Poll)):
            actor = self._actors.get(message.task_id)
            if actor is not None:
                if actor.record.owner == message.owner:
                    try:  # _deliver, in place (every query about a live task)
                        actor.receive(inner)
                    except Exception as exc:
                        self._receive_failed(actor, inner, exc)
                else:
                    inner.reply.fail_value(NOT_FOUND)  # foreign tasks look exactly like missing ones
                return
            unborn = self._unborn.get(message.task_id)
            if unborn is not None:  # a hidden task that ended: only its record is here
                self._answer_record(message.task_id, unborn.record, message.owner, inner)
                return
            if self._peek is not None:
                record = self._peek(message.task_id)
                if record is None or record.owner != message.owner or record.is_terminal:
                    self._answer_record(message.task_id, record, message.owner, inner)
                    return
        self.mailbox.put(message)

    def current(self, owner: str, task_id: str) -> TaskRecord | ErrorValue | None:
        """What a :class:`Poll` of the task would be answered, read now without a message when
        that needs no waiting: the record of a task whose actor is here (the error it answers
        with once stopped), or one the store reads without waiting (the memory store); a
        missing or foreign task is :data:`NOT_FOUND`. None when only the mailbox can tell (a
        durable or shared store). Reading changes nothing, so it keeps every order
        :meth:`deliver` keeps."""
        if self._shared is not None:
            return None  # the store answers for every process (see deliver)
        actor = self._actors.get(task_id)
        if actor is not None:
            if actor.record.owner != owner:
                return NOT_FOUND  # foreign tasks look exactly like missing ones
            return actor.current()
        if self._peek is not None:
            record = self._peek(task_id)
            if record is None:
                return self._missing(task_id, owner)
            if record.owner != owner:
                return NOT_FOUND
            return record
        return None

    def _missing(self, task_id: str, owner: str) -> ErrorValue:
        """The answer for a task of ``owner`` that is not here: it expired lately, or it is
        not found."""
        return EXPIRED if self.table.was_expired(task_id, owner) else NOT_FOUND

    def start_work(self, owner: str, task_id: str) -> None:
        """Start a created task's work now (its creator has answered with the task); nothing if
        it was removed meanwhile."""
        actor = self._actors.get(task_id)
        if actor is not None and self._nursery is not None:
            record = actor.record
            if record.owner == owner:  # as _spawn_work does
                self._nursery.start_soon(actor.run_work, self._crash_reporter, name=record.task_id)

    def _spawn_work(self, nursery: trio.Nursery, actor: TaskActor) -> None:
        # The Trio task is named by the task id the record already holds: unnamed, Trio would
        # format a name of its own for every task (CPU, and 94 bytes kept per live task).
        nursery.start_soon(actor.run_work, self._crash_reporter, name=actor.record.task_id)

    def _answer_record(
        self,
        task_id: str,
        record: TaskRecord | None,
        owner: str,
        inner: Poll | AwaitResult | Cancel | ProvideInput,
    ) -> None:
        """Answer, without waiting, a message about a task with no actor here: from its record
        when that is final (or for a Poll), or as missing. Both :meth:`deliver` and
        :meth:`_route` (after a store read) use it."""
        if record is None:
            inner.reply.fail_value(self._missing(task_id, owner))
        elif record.owner != owner:
            inner.reply.fail_value(NOT_FOUND)  # foreign tasks look exactly like missing ones
        elif isinstance(inner, Poll | ProvideInput):
            inner.reply.send(record)  # answers for no one waiting are ignored
        elif isinstance(inner, AwaitResult):
            if record.outcome is not None:
                inner.reply.send(record.outcome)
            else:
                inner.reply.fail_value(ELSEWHERE)
        else:  # it has ended: cancelling changes nothing
            inner.reply.send((record, True))

    def _route_live(self, message: Route) -> None:
        """A Start, or a message for a task whose actor is here: handled now."""
        inner = message.message
        actor = self._actors.get(message.task_id)
        if actor is None or actor.record.owner != message.owner:
            if not isinstance(inner, Start):  # else: removed before it could start
                # foreign tasks look exactly like missing ones
                missing = self._missing(message.task_id, message.owner) if actor is None else NOT_FOUND
                inner.reply.fail_value(missing)
        elif isinstance(inner, Start):
            assert self._nursery is not None
            self._spawn_work(self._nursery, actor)
        else:
            self._deliver(actor, inner)

    async def _route(self, message: Route) -> None:
        """A message for a task with no actor here: answered from the store."""
        inner = message.message
        assert not isinstance(inner, Start)
        unborn = self._unborn.get(message.task_id)
        if unborn is not None:  # hidden: not in the store, and only here
            actor = self._actors.get(message.task_id)
            if actor is not None and actor.record.owner == message.owner:
                self._deliver(actor, inner)
            else:
                self._answer_record(message.task_id, unborn.record, message.owner, inner)
            return
        try:
            record = await self._read(functools.partial(self.store.get, message.task_id))
        except Exception as exc:
            log.error("task store failed to read task %s: %r", message.task_id, exc, exc_info=exc)
            inner.reply.fail_value(STORE_FAILURE)
            return
        actor = self._actors.get(message.task_id)
        if actor is not None and actor.record.owner == message.owner and isinstance(inner, Poll):
            # It runs here, and the store says how it stands for every process: a task ended
            # elsewhere stops here now (a process answers nothing older than the store).
            if record is None or record.is_terminal:
                self._on_lost(message.task_id, record)
            if record is None:
                inner.reply.fail_value(EXPIRED)
            else:
                inner.reply.send(record)
            return
        if actor is not None:  # it came here while the store was read
            self._route_live(message)
            return
        if record is None or record.owner != message.owner or record.is_terminal or isinstance(inner, Poll):
            self._answer_record(message.task_id, record, message.owner, inner)
        elif isinstance(inner, AwaitResult):  # it runs elsewhere and has not ended
            if self._shared is not None:  # in another process: wait for its news
                waiting = self._remote_waiters.setdefault(record.task_id, [])
                if len(waiting) >= MAX_REMOTE_WAITERS:
                    inner.reply.fail_value(ErrorValue(INTERNAL_ERROR, "Server overloaded; retry later"))
                else:
                    waiting.append(inner.reply)
                    self._waiting_remotely.set()
                    self._interested(record.task_id)
            else:
                inner.reply.fail_value(ELSEWHERE)
        elif isinstance(inner, ProvideInput):
            if self._shared is not None:
                try:
                    with trio.fail_after(self._writer.timeout):
                        await self._publish("input", record.task_id, inner.responses)
                except Exception as exc:
                    log.error("task %s: its input could not be passed on: %r", record.task_id, exc)
                    inner.reply.fail_value(STORE_FAILURE)
                    return
            inner.reply.send(record)  # answers for no one waiting are ignored
        else:
            await self._cancel_record(record, inner)

    async def _cancel_record(self, record: TaskRecord, message: Cancel) -> None:
        """Cancel a task whose work does not run here: its record says so from now on.

        The cancelled record is written over whatever version the store holds while that is
        not terminal (the process running the work may be writing its statuses meanwhile: it
        finds the cancel at its next write, and stops); a task that ended first is answered as
        ended. Then the runner is told (an event: it stops the work at once)."""
        outcome = TaskOutcome(error=CANCELLED, failed=True, message=message.reason)
        try:
            for _ in range(CANCEL_ATTEMPTS):
                cancelled = record.settle(outcome, now=self.wall_clock(), status=TaskStatus.CANCELLED)
                if await self._read(functools.partial(self.store.update, cancelled)):
                    break
                current = await self._read(functools.partial(self.store.get, record.task_id))
                if current is None:
                    message.reply.fail_value(NOT_FOUND)
                    return
                if current.is_terminal:
                    message.reply.send((current, True))
                    return
                record = current
            else:
                message.reply.fail_value(STORE_FAILURE)
                return
        except Exception as exc:
            log.error("task store failed to cancel task %s: %r", record.task_id, exc, exc_info=exc)
            message.reply.fail_value(STORE_FAILURE)
            return
        if self._watchers:
            self._tell_watchers(cancelled)
        message.reply.send((cancelled, False))
        if self._shared is not None:
            try:
                with trio.fail_after(self._writer.timeout):
                    await self._publish("cancel", record.task_id)
                    await self._publish("changed", record.task_id)
            except Exception as exc:  # the runner finds it at its next write
                log.warning("task %s: its cancel was stored but not announced: %r", record.task_id, exc)

    def _deliver(self, actor: TaskActor, message: Poll | AwaitResult | Cancel | ProvideInput | Stop) -> None:
        """Run the actor's handler to completion here; a handler that raises has crashed."""
        try:
            actor.receive(message)
        except Exception as exc:
            self._receive_failed(actor, message, exc)

    def _receive_failed(
        self, actor: TaskActor, message: Poll | AwaitResult | Cancel | ProvideInput | Stop, exc: Exception
    ) -> None:
        """An actor's handler raised: it has crashed, and the message is answered with that."""
        failure = self._crashed(actor, exc)  # we are the supervisor's task: settle it now
        if isinstance(message, AwaitResult):
            message.reply.send(TaskOutcome.from_error(failure))
        elif not isinstance(message, Stop):
            message.reply.fail_value(failure)

    async def _list(self, message: ListTasks) -> None:
        try:
            records, cursor = await self._read(
                functools.partial(self.store.page, message.owner, message.cursor, self.limits.list_page_size)
            )
        except InvalidCursor:
            message.reply.fail_value(ErrorValue(INVALID_PARAMS, "Invalid params at 'cursor': unknown cursor"))
            return
        except Exception as exc:
            log.error("task store failed to list tasks: %r", exc, exc_info=exc)
            message.reply.fail_value(STORE_FAILURE)
            return
        live = self._actors
        message.reply.send(([live[r.task_id].shown if r.task_id in live else r for r in records], cursor))

    # -- watching -------------------------------------------------------------------------
    async def _watch(self, message: Watch) -> None:
        accepted: list[str] = []
        for task_id in message.task_ids:
            actor = self._actors.get(task_id)
            owner = actor.record.owner if actor is not None else None
            if actor is None:
                try:
                    record = await self._read(functools.partial(self.store.get, task_id))
                except Exception as exc:
                    log.error("task store failed to read task %s: %r", task_id, exc, exc_info=exc)
                    continue
                owner = record.owner if record is not None else None
            if owner == message.owner and task_id not in accepted:
                accepted.append(task_id)
                self._watchers.setdefault(task_id, []).append(message.watcher)
                if actor is None:
                    self._interested(task_id)
        message.reply.send(tuple(accepted))

    def _unwatch(self, task_id: str, watcher: Callable[[TaskRecord], None]) -> None:
        watchers = self._watchers.get(task_id)
        if watchers is not None and watcher in watchers:
            watchers.remove(watcher)
            if not watchers:
                del self._watchers[task_id]
                self._uninterested(task_id)

    def _tell(self, actor: TaskActor, record: TaskRecord) -> None:
        """Tell the task's creator and its listeners of a stored record. It is stored: a
        listener that fails changes nothing of the task (its error is logged)."""
        watcher = actor.watcher
        if watcher is not None:
            try:
                watcher(record)
            except Exception as exc:
                log.error("task watcher failed: %r", exc, exc_info=exc)
        if self._watchers:
            self._tell_watchers(record)

    def _tell_watchers(self, record: TaskRecord) -> None:
        for watcher in list(self._watchers.get(record.task_id, ())):
            try:
                watcher(record)
            except Exception as exc:  # a listener's bug is not the task's crash
                log.error("task watcher failed: %r", exc, exc_info=exc)

    # -- changes, removal -----------------------------------------------------------------
    def _changed(self, actor: TaskActor, record: TaskRecord) -> None:
        """An actor is making a change: the writer stores it (clients see it once stored); a
        hidden task's is only kept (see :meth:`_store_change`)."""
        task_id = record.task_id
        unborn = self._unborn.get(task_id)
        if unborn is not None:  # not counted in the table, not stored
            unborn.record = record
            self._on_stored(record)
            return
        if record.status in TERMINAL:
            self.table.ended(task_id)
        self._writer.update(record)

    def _store_change(self, record: TaskRecord) -> None:
        """The writer stores a change; a hidden task's is only kept (no client can see it, and
        it is stored, latest first, if it is ever shown)."""
        task_id = record.task_id
        unborn = self._unborn.get(task_id)
        if unborn is None:
            self._writer.update(record)
            return
        unborn.record = record
        self._on_stored(record)

    def _on_stored(self, record: TaskRecord) -> None:
        """The writer stored ``record``: its watchers hear of it, its actor shows it; after the
        final record the task is only a record."""
        task_id = record.task_id
        actor = self._actors.get(task_id)
        if actor is None:
            return  # removed meanwhile
        if actor.watcher is not None or self._watchers:
            self._tell(actor, record)
        actor.stored(record)
        if record.status in TERMINAL:
            del self._actors[task_id]  # final and stored: the task is a record now
            if self._forget_lane is not None:
                self._forget_lane(task_id)
            if self._full:
                self._full = False
                self._work_wake.set()  # room for a queued task

    def _on_lost(self, task_id: str, current: TaskRecord | None) -> None:
        """A change of ours met a record that stands: ended elsewhere (the task stops and is as
        stored) or gone (it is removed here too)."""
        actor = self._actors.get(task_id)
        if current is None:
            if task_id in self.table:
                self._forget_task(task_id, EXPIRED)
                self._removed(task_id, EXPIRED, None, actor)
            return
        if actor is None:
            return
        log.info("task %s ended elsewhere (%s): its work here stops", task_id, current.status.value)
        self.table.ended(task_id)
        self._tell(actor, current)
        actor.adopt(current)
        del self._actors[task_id]
        if self._forget_lane is not None:
            self._forget_lane(task_id)

    def _remove(self, task_id: str, error: ErrorValue) -> None:
        """Remove a task: it leaves the tables now (its work is stopped, its waiters answered
        with ``error``), and the writer deletes its record (a hidden task has none)."""
        unborn = self._unborn.pop(task_id, None)
        if unborn is not None:  # hidden: neither in the table nor in the store
            if self._watchers:
                self._watchers.pop(task_id, None)
            actor = self._actors.pop(task_id, None)
            if actor is not None:
                self._deliver(actor, Stop(error))
            if self.tracer is not no_trace:
                self._removed(task_id, error, unborn.record, actor)
            return
        actor = self._forget_task(task_id, error)
        self._writer.delete(task_id, functools.partial(self._removed, task_id, error, actor=actor))

    def _forget_task(self, task_id: str, error: ErrorValue) -> TaskActor | None:
        """A removal's first half: the task leaves the supervisor's tables, its actor (if it
        has one here) is stopped with ``error``; an expired one is remembered as expired."""
        self._watchers.pop(task_id, None)
        actor = self._actors.pop(task_id, None)
        owner = self.table.remove(task_id)
        if error is EXPIRED and owner is not None:
            self.table.expired(task_id, owner)
        if actor is not None:
            self._deliver(actor, Stop(error))
        return actor

    def _removed(
        self, task_id: str, error: ErrorValue, removed: TaskRecord | None, actor: TaskActor | None
    ) -> None:
        """A removal's last half, once the store has deleted the record: waiters on another
        process's task are failed with ``error``, the tracer is told."""
        for reply in self._remote_waiters.pop(task_id, ()):
            reply.fail_value(error)
        self._uninterested(task_id)
        if self.tracer is not no_trace and (removed is not None or actor is not None):
            self.tracer("task.expired" if error is EXPIRED else "task.removed", {"task_id": task_id})
            self.tracer("actor.stop", {"actor": "TaskActor", "name": task_id})

    async def _remove_all(self, task_ids: list[str], error: ErrorValue) -> None:
        """Remove these tasks (as :meth:`_remove`) and wait until the store has deleted them."""
        left = [len(task_ids)]
        deleted = trio.Event()

        def one(task_id: str, actor: TaskActor | None, removed: TaskRecord | None) -> None:
            self._removed(task_id, error, removed, actor)
            left[0] -= 1
            if not left[0]:
                deleted.set()

        for task_id in task_ids:
            actor = self._forget_task(task_id, error)
            self._writer.delete(task_id, functools.partial(one, task_id, actor))
        if task_ids:
            await deleted.wait()

    async def _remove_owned(self, owner: str, task_id: str) -> None:
        unborn = self._unborn.get(task_id)
        if unborn is not None or task_id in self._revealing:  # not in the store (yet)
            if (unborn.record.owner if unborn is not None else self._revealing[task_id]) == owner:
                self._remove(task_id, GONE)
            return
        actor = self._actors.get(task_id)
        if actor is None:
            try:
                record = await self._read(functools.partial(self.store.get, task_id))
            except Exception as exc:
                log.error("task store failed to read task %s: %r", task_id, exc, exc_info=exc)
                return
            if record is None or record.owner != owner:
                return
        elif actor.record.owner != owner:
            return
        self._remove(task_id, GONE)

    async def _drop_owner(self, owner: str) -> None:
        while True:
            try:
                records, _ = await self._read(functools.partial(self.store.page, owner, None, SWEEP_BATCH))
            except Exception as exc:
                log.error("task store failed to list an owner's tasks: %r", exc, exc_info=exc)
                return
            if not records:
                return
            await self._remove_all([record.task_id for record in records], GONE)

    # -- crashes --------------------------------------------------------------------------
    def _on_crash(self, actor: TaskActor, error: BaseException) -> None:
        self.mailbox.put(_Crashed(actor, error), system=True)

    def _crashed(self, actor: TaskActor, error: BaseException) -> ErrorValue:
        """The actor is broken, so its state is ours now: its task ends ``failed`` with the
        error kept, every waiter is answered with it, and the record is stored."""
        log.error("task actor %s crashed: %r", actor.task_id, error, exc_info=error)
        self.tracer("actor.crash", {"actor": "TaskActor", "name": actor.task_id, "error": repr(error)})
        failure = ErrorValue(INTERNAL_ERROR, f"Internal error: task actor crashed: {error!r}")
        if actor.stopped:
            return failure
        old = actor.status
        actor.crashed(failure, now=self.wall_clock())
        if self.tracer is not no_trace and actor.status != old:
            self.tracer(
                "task.transition", {"task_id": actor.task_id, "old": old.value, "status": actor.status.value}
            )
        self.table.ended(actor.task_id)
        self.mailbox.put(_Changed(actor, actor.record), system=True)
        return failure

    # -- TTL ------------------------------------------------------------------------------
    async def _sweep_due(self) -> None:
        """Delete records that expired while no process was serving them (durable stores)."""
        while True:
            try:
                due = await self._read(functools.partial(self.store.due, self.wall_clock(), SWEEP_BATCH))
            except Exception as exc:
                log.error("task store failed to list expired tasks: %r", exc, exc_info=exc)
                return
            if not due:
                return
            await self._remove_all([record.task_id for record in due], EXPIRED)

    # -- stores shared by several processes ------------------------------------------------
    async def _publish(self, kind: str, task_id: str, responses: dict[str, Any] | None = None) -> None:
        assert self._shared is not None
        await self._read(
            functools.partial(self._shared.publish, TaskEvent(kind, task_id, self.origin, responses))
        )

    async def _event_loop(
        self, shared: SharedTaskStore, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        """Hand every other process's event to this actor's mailbox, in order."""
        subscribed = self._targeted.events_for(self.origin) if self._targeted is not None else shared.events()
        async with subscribed as events:
            task_status.started()
            async for event in events:
                if event.origin != self.origin:
                    self.events_seen += 1
                    self.mailbox.put(_Event(event), system=True)

    def _interested(self, task_id: str) -> None:
        """This process waits for news of a task running elsewhere: ask for its ``changed``
        events (a targeted store), then read it again (it may have changed meanwhile)."""
        if self._targeted is not None and task_id not in self._watching and self._nursery is not None:
            self._watching.add(task_id)
            self._nursery.start_soon(self._watch_remote, self._targeted, task_id)

    def _uninterested(self, task_id: str) -> None:
        """No waiter or watcher here needs news of this task any more."""
        if (
            task_id in self._watching
            and task_id not in self._remote_waiters
            and task_id not in self._watchers
        ):
            self._watching.discard(task_id)
            if self._targeted is not None and self._nursery is not None:
                self._nursery.start_soon(self._unwatch_remote, self._targeted, task_id)

    async def _watch_remote(self, targeted: TargetedEvents, task_id: str) -> None:
        try:
            await self._read(functools.partial(targeted.watch, [task_id], self.origin))
        except Exception as exc:  # the recheck loop re-reads remote waiters all the same
            log.warning("task %s: could not ask for its events: %r", task_id, exc)
        await self._news(task_id)

    async def _unwatch_remote(self, targeted: TargetedEvents, task_id: str) -> None:
        try:
            await self._read(functools.partial(targeted.unwatch, [task_id], self.origin))
        except Exception as exc:  # the watch expires by itself
            log.debug("task %s: could not drop its watch: %r", task_id, exc)

    async def _lease_loop(self, shared: SharedTaskStore) -> None:
        """Renew the leases of the tasks running here (and of those whose end is not stored
        yet), stop those the store says ended elsewhere, and look for lapsed ones."""
        rounds = 0
        while True:
            rounds += 1
            running = [
                task_id
                for task_id, actor in self._actors.items()
                if not actor.shown.is_terminal and task_id not in self._unborn
            ]
            try:
                if running:
                    with trio.fail_after(self._writer.timeout):
                        until = self.wall_clock() + self.limits.lease_seconds
                        ended = await self._read(functools.partial(shared.hold, running, self.origin, until))
                    if ended:
                        self.mailbox.put(_Recheck(tuple(ended)), system=True)
            except Exception as exc:
                log.error("task store failed to renew leases: %r", exc, exc_info=exc)
            self.mailbox.put(_Lapse(), system=True)
            if rounds % CLAIM_EVERY_ROUNDS == 0:
                self._work_wake.set()  # look for queued work too (a "work" event may have been lost)
            await trio.sleep(self.limits.lease_seconds / 3)

    async def _recheck_loop(self) -> None:
        """Every :data:`REMOTE_RECHECK_SECONDS`, read again the tasks running elsewhere that
        ``tasks/result`` requests here wait for (an event may have been missed)."""
        while True:
            if not self._remote_waiters:  # nothing to re-read: sleep until something waits
                self._waiting_remotely = trio.Event()
                await self._waiting_remotely.wait()
            await trio.sleep(REMOTE_RECHECK_SECONDS)
            if self._remote_waiters:
                self.mailbox.put(_Recheck(tuple(self._remote_waiters)), system=True)

    async def _recheck(self, task_ids: tuple[str, ...]) -> None:
        """Read these tasks again: one running here that ended elsewhere stops; waiters and
        watchers here hear of any change."""
        for task_id in task_ids:
            if task_id in self._actors:
                try:
                    record = await self._read(functools.partial(self.store.get, task_id))
                except Exception as exc:
                    log.error("task store failed to read task %s: %r", task_id, exc, exc_info=exc)
                    continue
                if record is None or record.is_terminal:
                    self._on_lost(task_id, record)
            else:
                await self._news(task_id)

    async def _on_event(self, event: TaskEvent) -> None:
        actor = self._actors.get(event.task_id)
        if event.kind == "cancel" and actor is not None:
            self._deliver(
                actor, Cancel(Reply(), "The task was cancelled by request (through another server).")
            )
        elif event.kind == "input" and actor is not None and event.responses:
            self._deliver(actor, ProvideInput(event.responses, Reply()))
        elif event.kind == "changed":
            await self._news(event.task_id)
        elif event.kind == "work":
            self._work_wake.set()
        elif event.kind == "resync":  # events may have been missed: read what is waited for
            self._work_wake.set()
            await self._recheck(tuple({*self._remote_waiters, *self._watchers}))

    async def _news(self, task_id: str) -> None:
        """A task of another process changed: answer this process's waiters and watchers."""
        waiters = self._remote_waiters.get(task_id)
        if not waiters and task_id not in self._watchers:
            return
        try:
            record = await self._read(functools.partial(self.store.get, task_id))
        except Exception as exc:
            log.error("task store failed to read task %s: %r", task_id, exc, exc_info=exc)
            return
        if record is not None and self._watchers:
            self._tell_watchers(record)
            if record.is_terminal and task_id not in self._actors:
                self._watchers.pop(task_id, None)  # it ends elsewhere: nothing more to tell
        if record is None or record.outcome is not None:
            for reply in self._remote_waiters.pop(task_id, ()):
                if record is not None and record.outcome is not None:
                    reply.send(record.outcome)
                else:
                    reply.fail_value(EXPIRED)
            self._uninterested(task_id)

    async def _fail_lapsed(self) -> None:
        """Fail tasks whose process stopped renewing their lease: their work is gone. A task
        that ended meanwhile (its process stored its end late) keeps its end."""
        assert self._shared is not None
        try:
            lapsed = await self._read(functools.partial(self._shared.lapsed, self.wall_clock(), SWEEP_BATCH))
        except Exception as exc:
            log.error("task store failed to list lapsed tasks: %r", exc, exc_info=exc)
            return
        for record in lapsed:
            if record.task_id in self._actors or record.is_terminal:
                continue
            error = PROCESS_GONE
            if self._queue is not None:
                again = await self._run_again(self._queue, record)
                if again is None:
                    continue  # queued again, or alive after all
                error = again
            failed = record.settle(TaskOutcome.from_error(error), now=self.wall_clock())
            try:
                if await self._read(functools.partial(self.store.update, failed)):
                    with trio.fail_after(self._writer.timeout):
                        await self._read(functools.partial(self._shared.release, [record.task_id]))
                        await self._publish("changed", record.task_id)
                    await self._news(record.task_id)
            except Exception as exc:
                log.error("task store failed to fail lapsed task %s: %r", record.task_id, exc, exc_info=exc)

    async def _run_again(self, queue: WorkQueue, record: TaskRecord) -> ErrorValue | None:
        """A task whose process died: queue it again if its tool allows another run (None),
        or the error it ends with."""
        try:
            with trio.fail_after(self._writer.timeout):
                held = await self._read(functools.partial(queue.work_of, record.task_id))
                if held is None or self.work_reader is None:
                    return PROCESS_GONE  # a session's task (2025-11-25): it ran where its session was
                max_runs = self.work_reader.max_runs(held[0])
                again = await self._read(
                    functools.partial(queue.requeue, record.task_id, self.wall_clock(), max_runs)
                )
                if again == 1:
                    log.warning(
                        "task %s: its server process stopped; it is queued to run again", record.task_id
                    )
                    await self._publish("work", record.task_id)
                    self._work_wake.set()
                    return None
        except Exception as exc:
            log.error("task store failed to requeue task %s: %r", record.task_id, exc, exc_info=exc)
            return None  # the next sweep tries again
        if again == 0:
            return None
        if again == -1:
            return NOT_RETRIED if max_runs == 1 else OUT_OF_RUNS
        return PROCESS_GONE

    # -- the work queue --------------------------------------------------------------------
    async def _work_loop(self, queue: WorkQueue) -> None:
        """Claim queued tasks while this process has room (:attr:`TaskLimits.max_running_work`),
        and run them. Between claims it waits for news: another process queued a task (its
        ``work`` event), a task here ended (room), events were missed (``resync``), or the lease
        loop's round (every third of the lease), so that a missed event delays work that long
        at most."""
        backoff = self._writer.policy.backoff()
        while True:
            room = self.limits.max_running_work - len(self._actors)
            self._full = room <= 0
            claimed: list[tuple[TaskRecord, bytes]] = []
            if self.works and not self._draining and room > 0 and self.work_reader is not None:
                self._work_wake = trio.Event()
                try:
                    with trio.fail_after(self._writer.timeout):
                        until = self.wall_clock() + self.limits.lease_seconds
                        claim = functools.partial(queue.claim, self.origin, min(room, CLAIM_BATCH), until)
                        claimed = await self._read(claim)
                except Exception as exc:
                    log.warning("task store failed to hand out queued tasks: %r", exc)
                    await backoff.wait()
                    continue
                backoff = self._writer.policy.backoff()
                for record, work in claimed:
                    self._adopt(record, work)
                if len(claimed) == min(room, CLAIM_BATCH):
                    await trio.lowlevel.checkpoint()
                    continue  # there may be more
            else:
                self._work_wake = trio.Event()
            await self._work_wake.wait()

    def _adopt(self, record: TaskRecord, work: bytes) -> None:
        """Run a task claimed from the queue here."""
        assert self.work_reader is not None and self._nursery is not None
        task_id = record.task_id
        run = self.work_reader.run(record, work)
        if isinstance(run, ErrorValue):
            self._writer.update(record.settle(TaskOutcome.from_error(run), now=self.wall_clock()))
            return
        actor = TaskActor(record, run, self._actor_host, None)
        self._actors[task_id] = actor
        due = self.table.add(
            task_id, record.owner, None, self._trio_now() + record.expires_at - self.wall_clock()
        )
        if due < self._timer_deadline:
            self._timer_deadline = self._timer.deadline = due
        self._spawn_work(self._nursery, actor)

    async def drain(self, seconds: float) -> None:
        """Stop taking work (no more claims; tasks created from now on are queued for other
        processes) and let the tasks running here finish, for at most ``seconds``. Then each
        one still running is handed back to the queue if its tool may run again, or ends
        ``failed`` ("server shut down"); returns once that is stored."""
        self._draining = True
        self._work_wake.set()
        with trio.move_on_after(seconds):
            while any(not actor.record.is_terminal for actor in self._actors.values()):  # noqa: ASYNC110
                await trio.sleep(0.05)  # bounded, once, at the end of the process
        for task_id, actor in list(self._actors.items()):
            if actor.record.is_terminal:
                continue
            if await self._hand_back(task_id):
                self._actors.pop(task_id, None)
                self.table.remove(task_id)
                actor.stop(SHUT_DOWN)
                self._writer.forget(task_id)
                continue
            actor.crashed(SHUT_DOWN, now=self.wall_clock())
            self._changed(actor, actor.record)
        with trio.move_on_after(self._writer.timeout):
            await self._writer.settled()

    async def _hand_back(self, task_id: str) -> bool:
        """Queue a task running here again for another process (its tool may run again)."""
        queue, reader = self._queue, self.work_reader
        if queue is None or reader is None:
            return False
        try:
            with trio.fail_after(self._writer.timeout):
                held = await self._read(functools.partial(queue.work_of, task_id))
                if held is None or reader.max_runs(held[0]) == 1:
                    return False
                if await self._read(functools.partial(queue.hand_back, task_id, self.origin)):
                    await self._publish("work", task_id)
                    return True
        except Exception as exc:
            log.error("task store failed to hand back task %s: %r", task_id, exc, exc_info=exc)
        return False

    async def _recover(self, store: DurableTaskStore) -> None:
        """Fail the tasks a previous process left unfinished in a durable store: their work
        cannot be resumed. The store is this process's alone (it holds it while open), so
        every unfinished record it holds was left by a process that is gone. Each end goes
        through the store writer like any other (tried again until stored), a batch at a time."""
        outcome = TaskOutcome.from_error(PROCESS_GONE)
        writer = self._writer
        failed = 0
        while True:
            records = await store.unfinished(SWEEP_BATCH)
            if not records:
                break
            for record in records:
                writer.update(record.settle(outcome, now=self.wall_clock()))
                writer.forget(record.task_id)
            await writer.settled()
            failed += len(records)
        if failed:
            log.warning("%d task(s) left running by a stopped server process are now failed", failed)

    async def _sweep_loop(self) -> None:
        """Durable stores hold records this process never timed (from before a restart): every
        :data:`SWEEP_INTERVAL` seconds the store's due records are deleted."""
        while True:
            await trio.sleep(SWEEP_INTERVAL)
            self.mailbox.put(_Sweep(), system=True)

    async def _expire_loop(self) -> None:
        table = self.table
        while True:
            self._timer_deadline = table.earliest
            self._timer = trio.CancelScope(deadline=self._timer_deadline)
            with self._timer:
                await trio.sleep_forever()
            due = table.pop_due(trio.current_time())
            if due:
                self.mailbox.put(_Expire(tuple(due)), system=True)
