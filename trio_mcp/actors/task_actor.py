"""TaskActor: one per MCP task. It runs the work and answers Poll, AwaitResult and Cancel.

Guarantees:
- the work runs in its own cancel scope; Cancel cancels that scope, so the work really stops
  (it sees ``trio.Cancelled`` at its next checkpoint);
- the task is ``cancelled`` before the Cancel is answered, and stays so whatever the work does;
- every AwaitResult is answered exactly once: with the outcome when the task ends, or with an
  error when it expires or the server stops;
- ``created_at`` / ``last_updated_at`` are stamped when those events happen, never at query time.

The actor's mailbox loop and its work are two Trio tasks in the actor's own nursery; Trio's
single thread makes each handler atomic, so they share the actor's state safely.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import trio

from ..protocol.errors import INTERNAL_ERROR, INVALID_PARAMS, TASK_CANCELLED, McpError
from ..protocol.messages import Task
from ..protocol.tasks import TaskStatus, check_transition
from .runtime import Actor, MailboxClosed, Reply
from .trace import Tracer, no_trace


@attrs.frozen
class TaskOutcome:
    """What the underlying request produced: a result payload or a JSON-RPC error.

    ``failed`` picks the terminal status (a tool's ``isError`` result fails its task in v1).
    """

    result: dict[str, Any] | None = None
    error: McpError | None = None
    failed: bool = False
    message: str | None = None

    @classmethod
    def from_error(cls, error: McpError) -> TaskOutcome:
        return cls(error=error, failed=True, message=error.message)


# Messages. Each carries its own reply slot where an answer is due.
@attrs.frozen
class Start:
    """Begin the work: sent once the creator has answered with the CreateTaskResult."""


@attrs.frozen
class Poll:
    reply: Reply[Task]


@attrs.frozen
class AwaitResult:
    reply: Reply[TaskOutcome]


@attrs.frozen
class Cancel:
    reply: Reply[Task]
    reason: str = "The task was cancelled by request."


@attrs.frozen
class Stop:
    """Stop for good (expiry, owner gone, shutdown): waiters get ``error``."""

    error: McpError


TaskMessage = Start | Poll | AwaitResult | Cancel | Stop

Work = Callable[["TaskActor"], Awaitable[TaskOutcome]]
Clock = Callable[[], str]

EXPIRED = McpError(INVALID_PARAMS, "Failed to retrieve task: Task has expired")
CANCELLED = McpError(TASK_CANCELLED, "Task was cancelled: the request has no result")


class TaskActor(Actor[TaskMessage]):
    """One MCP task. Created by the :class:`~trio_mcp.actors.supervisor.TaskSupervisor`."""

    def __init__(
        self,
        task: Task,
        work: Work,
        *,
        owner: object,
        clock: Clock,
        on_change: Callable[[Task], None],
        on_terminal: Callable[[TaskActor], None],
        tracer: Tracer = no_trace,
    ) -> None:
        super().__init__(mailbox_size=256)
        self._tracer = tracer
        self.task = task
        self.owner = owner
        self.outcome: TaskOutcome | None = None
        self._work = work
        self._clock = clock
        self._on_change = on_change
        self._on_terminal = on_terminal
        self._waiters: list[Reply[TaskOutcome]] = []
        self._scope = trio.CancelScope()
        self._input_waits = 0

    @property
    def task_id(self) -> str:
        return self.task.task_id

    @property
    def status(self) -> TaskStatus:
        return self.task.status

    # -- state changes (only ever made by this actor) ------------------------------------
    def _transition(self, status: TaskStatus, message: str | None) -> None:
        old = self.task.status
        check_transition(old, status)
        self._tracer(
            "task.transition", {"task_id": self.task.task_id, "old": old.value, "status": status.value}
        )
        self.task = attrs.evolve(
            self.task, status=status, status_message=message, last_updated_at=self._clock()
        )
        self._on_change(self.task)

    @contextlib.contextmanager
    def awaiting_input(self, message: str | None = None) -> Iterator[None]:
        """Hold the task in ``input_required`` while the block waits for the requestor.

        Nested or concurrent waits keep it there until the last one ends; then it returns to
        ``working``. A task cancelled meanwhile stays ``cancelled``.
        """
        self._input_waits += 1
        if self._input_waits == 1 and self.task.status == TaskStatus.WORKING:
            self._transition(TaskStatus.INPUT_REQUIRED, message)
        try:
            yield
        finally:
            self._input_waits -= 1
            if self._input_waits == 0 and self.task.status == TaskStatus.INPUT_REQUIRED:
                self._transition(TaskStatus.WORKING, None)

    def set_status_message(self, message: str | None) -> None:
        """Update ``statusMessage`` of a live task (from the work's context)."""
        if self.task.status.is_terminal or message == self.task.status_message:
            return
        self.task = attrs.evolve(self.task, status_message=message, last_updated_at=self._clock())
        self._on_change(self.task)

    def _finish(self, status: TaskStatus, outcome: TaskOutcome, message: str | None) -> None:
        self._transition(status, message)
        self.outcome = outcome
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            self._answer(waiter)
        self._on_terminal(self)

    def _answer(self, waiter: Reply[TaskOutcome]) -> None:
        assert self.outcome is not None
        if self.outcome.error is not None and self.outcome.result is None:
            waiter.fail(self.outcome.error)
        else:
            waiter.send(self.outcome)

    # -- the two Trio tasks ---------------------------------------------------------------
    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            try:
                while True:
                    message = await self.mailbox.get()
                    if isinstance(message, Start):
                        nursery.start_soon(self._run_work)
                    elif isinstance(message, Stop):
                        self._stop(message.error)
                        break
                    else:
                        self._handle(message)
            except MailboxClosed:
                pass
            finally:
                self._scope.cancel()

    async def _run_work(self) -> None:
        outcome: TaskOutcome | None = None
        with self._scope:
            try:
                outcome = await self._work(self)
            except McpError as exc:
                outcome = TaskOutcome.from_error(exc)
            except Exception as exc:
                outcome = TaskOutcome.from_error(McpError(INTERNAL_ERROR, f"Internal error: {exc}"))
        if outcome is not None and not self.task.status.is_terminal:
            status = TaskStatus.FAILED if outcome.failed else TaskStatus.COMPLETED
            self._finish(status, outcome, outcome.message)

    # -- message handlers (synchronous: each is atomic) ----------------------------------
    def _handle(self, message: TaskMessage) -> None:
        if isinstance(message, Poll):
            message.reply.send(self.task)
        elif isinstance(message, AwaitResult):
            if self.outcome is not None:
                self._answer(message.reply)
            else:
                self._waiters.append(message.reply)
        elif isinstance(message, Cancel):
            if self.task.status.is_terminal:
                message.reply.fail(
                    McpError(
                        INVALID_PARAMS,
                        f"Cannot cancel task: already in terminal status '{self.task.status.value}'",
                    )
                )
                return
            self._scope.cancel()
            self._finish(TaskStatus.CANCELLED, TaskOutcome.from_error(CANCELLED), message.reason)
            message.reply.send(self.task)

    def answer_final(self, message: Poll | AwaitResult | Cancel) -> None:
        """Handle ``message`` synchronously from the actor's current state: for an actor that
        is no longer running (it crashed), and for test harnesses delivering a message between
        two Trio steps (:mod:`trio_mcp.testing` cancels exactly at a checkpoint this way)."""
        self._handle(message)

    def _stop(self, error: McpError) -> None:
        self._scope.cancel()
        self.abandon(error)

    def abandon(self, error: McpError) -> None:
        """Close the mailbox and fail every waiter and unread message with ``error``.

        Called on Stop, and by the supervisor when the actor itself crashed.
        """
        for message in self.mailbox.close():
            if isinstance(message, (Poll, AwaitResult, Cancel)):
                message.reply.fail(error)
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.fail(error)
