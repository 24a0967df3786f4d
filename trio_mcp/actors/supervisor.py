"""TaskSupervisor: owns the task table, the TTL timers and every TaskActor.

- Task ids come from :mod:`secrets` (unguessable); each task is bound to its owner (the
  connection, or an authenticated identity): another owner gets -32602 and never sees it listed.
- TTL counts from creation. Absent TTLs get :attr:`TaskLimits.default_ttl_ms`; larger ones are
  clamped to :attr:`TaskLimits.max_ttl_ms` and the real value is reported.
- One timer loop over a deadline heap (not a sleeper per task). At expiry a task's work is
  cancelled if still running, the task and its result are removed, and any ``tasks/result``
  waiter is answered with -32602 "Task has expired".
- At most :attr:`TaskLimits.max_live_tasks_per_owner` non-terminal tasks per owner; past it,
  creation fails with :data:`~trio_mcp.protocol.errors.TASK_LIMIT_REACHED`.
- A TaskActor that crashes (a bug in the runtime, not in a tool: tool errors fail the task
  normally) is reported here; its task becomes ``failed`` with the error preserved.
"""

from __future__ import annotations

import heapq
import logging
import math
import secrets
import time
from collections.abc import Callable

import attrs
import trio

from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, TASK_LIMIT_REACHED, McpError
from ..protocol.messages import Task
from ..protocol.tasks import TaskStatus, format_timestamp
from .runtime import Actor, Reply
from .store import InvalidCursor, MemoryTaskStore, TaskEntry, TaskStore
from .task_actor import EXPIRED, AwaitResult, Cancel, Poll, Start, Stop, TaskActor, TaskOutcome, Work
from .trace import Tracer, no_trace


@attrs.frozen
class TaskLimits:
    """The documented task policy of a server. All durations in milliseconds."""

    default_ttl_ms: int = 60 * 60 * 1000
    """TTL of a task whose request named none: one hour."""
    max_ttl_ms: int = 24 * 60 * 60 * 1000
    """Longest TTL granted: one day. Longer requests are clamped to it."""
    poll_interval_ms: int = 500
    """Suggested polling interval reported in every task."""
    max_live_tasks_per_owner: int = 10_000
    """Non-terminal tasks one owner may have at once."""
    list_page_size: int = 100
    """Tasks per ``tasks/list`` page."""

    def grant_ttl(self, requested: int | None) -> int:
        if requested is None:
            return self.default_ttl_ms
        return max(0, min(requested, self.max_ttl_ms))


# Messages.
@attrs.frozen
class CreateTask:
    owner: object
    work: Work
    ttl_ms: int | None
    on_change: Callable[[Task], None]
    reply: Reply[TaskActor]


@attrs.frozen
class Route:
    """Deliver Start / Poll / AwaitResult / Cancel to the owner's task, or fail it with -32602."""

    owner: object
    task_id: str
    message: Start | Poll | AwaitResult | Cancel


@attrs.frozen
class ListTasks:
    owner: object
    cursor: str | None
    reply: Reply[tuple[list[Task], str | None]]


@attrs.frozen
class OwnerGone:
    """Cancel and forget every task of ``owner`` (its connection closed)."""

    owner: object


@attrs.frozen
class _Ended:
    actor: TaskActor


@attrs.frozen
class _Crashed:
    actor: TaskActor
    error: BaseException


SupervisorMessage = CreateTask | Route | ListTasks | OwnerGone | _Ended | _Crashed

log = logging.getLogger("trio_mcp.actors")

NOT_FOUND = McpError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
GONE = McpError(INVALID_PARAMS, "Failed to retrieve task: Task is gone (its owner disconnected)")


class TaskSupervisor(Actor[SupervisorMessage]):
    """The task table's single owner. Start it with ``nursery.start(supervisor.run)``."""

    def __init__(
        self,
        limits: TaskLimits | None = None,
        *,
        store: TaskStore | None = None,
        wall_clock: Callable[[], float] = time.time,
        tracer: Tracer = no_trace,
    ) -> None:
        super().__init__(mailbox_size=65_536)
        self.tracer = tracer
        self.limits = limits or TaskLimits()
        self.store: TaskStore = store if store is not None else MemoryTaskStore()
        self._wall_clock = wall_clock
        self._seq = 0
        self._deadlines: list[tuple[float, int, str]] = []
        self._live: dict[object, set[str]] = {}
        self._timer = trio.CancelScope()
        self._nursery: trio.Nursery | None = None

    def now_iso(self) -> str:
        return format_timestamp(self._wall_clock())

    def live_count(self, owner: object) -> int:
        return len(self._live.get(owner, ()))

    # -- the actor ------------------------------------------------------------------------
    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._expire_loop)
            task_status.started()
            while True:
                self._handle(await self.mailbox.get())

    def deliver_now(self, message: SupervisorMessage) -> None:
        """Handle ``message`` in the caller's Trio task, to completion, before returning.

        Every handler of this actor runs to completion (none waits), so this is as atomic as
        the mailbox; use it where ordering against the caller's next step matters (a session
        removing its tasks before it fails its pending requests)."""
        self._handle(message)

    def _handle(self, message: SupervisorMessage) -> None:
        if isinstance(message, Route):
            self._route(message)
        elif isinstance(message, CreateTask):
            self._create(message)
        elif isinstance(message, ListTasks):
            self._list(message)
        elif isinstance(message, _Ended):
            self._forget_live(message.actor.owner, message.actor.task_id)
        elif isinstance(message, OwnerGone):
            for entry in self.store.owned_by(message.owner):
                self._remove(entry.actor.task_id, GONE)
        elif isinstance(message, _Crashed):
            self._crashed(message.actor, message.error)

    def _create(self, message: CreateTask) -> None:
        if self.live_count(message.owner) >= self.limits.max_live_tasks_per_owner:
            message.reply.fail(
                McpError(
                    TASK_LIMIT_REACHED,
                    f"Too many live tasks: at most {self.limits.max_live_tasks_per_owner} per requestor",
                )
            )
            return
        assert self._nursery is not None
        ttl = self.limits.grant_ttl(message.ttl_ms)
        now = self.now_iso()
        task = Task(
            task_id=secrets.token_urlsafe(18),
            status=TaskStatus.WORKING,
            created_at=now,
            last_updated_at=now,
            ttl=ttl,
            poll_interval=self.limits.poll_interval_ms,
        )
        actor = TaskActor(
            task,
            message.work,
            owner=message.owner,
            clock=self.now_iso,
            on_change=message.on_change,
            on_terminal=self._on_terminal,
            tracer=self.tracer,
        )
        if self.tracer is not no_trace:
            self.tracer("task.created", {"task_id": task.task_id, "status": task.status.value, "ttl": ttl})
            self.tracer("actor.start", {"actor": "TaskActor", "name": task.task_id})
        self._seq += 1
        deadline = trio.current_time() + ttl / 1000
        self.store.add(TaskEntry(actor, message.owner, self._seq, deadline))
        self._live.setdefault(message.owner, set()).add(task.task_id)
        heapq.heappush(self._deadlines, (deadline, self._seq, task.task_id))
        if deadline < self._timer.deadline:
            self._timer.deadline = deadline
        message.reply.send(actor)

    def _route(self, message: Route) -> None:
        entry = self.store.get(message.task_id)
        if entry is None or entry.owner != message.owner:
            if not isinstance(message.message, Start):
                message.message.reply.fail(NOT_FOUND)  # foreign tasks look exactly like missing ones
            return
        if isinstance(message.message, Start):
            assert self._nursery is not None
            self._nursery.start_soon(entry.actor.run_work, self._on_crash)
        else:
            self._deliver(entry.actor, message.message)

    def _deliver(self, actor: TaskActor, message: Poll | AwaitResult | Cancel | Stop) -> None:
        """Run the actor's handler to completion here; a handler that raises has crashed."""
        try:
            actor.receive(message)
        except Exception as exc:
            log.error("task actor %s crashed: %r", actor.task_id, exc, exc_info=exc)
            self.tracer("actor.crash", {"actor": "TaskActor", "name": actor.task_id, "error": repr(exc)})
            failure = self._crashed(actor, exc)  # we are the supervisor's task: settle it now
            if not isinstance(message, Stop):
                message.reply.fail(failure)

    def _list(self, message: ListTasks) -> None:
        try:
            entries, cursor = self.store.page(message.owner, message.cursor, self.limits.list_page_size)
        except InvalidCursor:
            message.reply.fail(McpError(INVALID_PARAMS, "Invalid params at 'cursor': unknown cursor"))
            return
        message.reply.send(([e.actor.task for e in entries], cursor))

    def _remove(self, task_id: str, error: McpError) -> None:
        entry = self.store.remove(task_id)
        if entry is None:
            return
        if self.tracer is not no_trace:
            self.tracer("task.expired" if error is EXPIRED else "task.removed", {"task_id": task_id})
            self.tracer("actor.stop", {"actor": "TaskActor", "name": task_id})
        self._forget_live(entry.owner, task_id)
        self._deliver(entry.actor, Stop(error))

    def _forget_live(self, owner: object, task_id: str) -> None:
        live = self._live.get(owner)
        if live is not None:
            live.discard(task_id)
            if not live:
                del self._live[owner]

    def _on_terminal(self, actor: TaskActor) -> None:
        self.mailbox.put(_Ended(actor), system=True)

    def _on_crash(self, actor: TaskActor, error: BaseException) -> None:
        log.error("task actor %s crashed: %r", actor.task_id, error, exc_info=error)
        self.tracer("actor.crash", {"actor": "TaskActor", "name": actor.task_id, "error": repr(error)})
        self.mailbox.put(_Crashed(actor, error), system=True)

    def _crashed(self, actor: TaskActor, error: BaseException) -> McpError:
        # The actor is broken, so its state is ours now: settle it as failed, keeping the error.
        failure = McpError(INTERNAL_ERROR, f"Internal error: task actor crashed: {error!r}")
        if actor.outcome is None:
            actor.outcome = TaskOutcome.from_error(failure)
        if not actor.task.status.is_terminal:
            actor.task = attrs.evolve(
                actor.task,
                status=TaskStatus.FAILED,
                status_message=failure.message,
                last_updated_at=self.now_iso(),
            )
        actor.abort(failure)  # it stays in the table: later questions get its final state
        self._forget_live(actor.owner, actor.task_id)
        return failure

    # -- TTL ------------------------------------------------------------------------------
    async def _expire_loop(self) -> None:
        while True:
            self._timer = trio.CancelScope(deadline=self._deadlines[0][0] if self._deadlines else math.inf)
            with self._timer:
                await trio.sleep_forever()
            now = trio.current_time()
            while self._deadlines and self._deadlines[0][0] <= now:
                _, seq, task_id = heapq.heappop(self._deadlines)
                entry = self.store.get(task_id)
                if entry is not None and entry.seq == seq:
                    self._remove(task_id, EXPIRED)
