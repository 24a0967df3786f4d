"""TaskActor: one per MCP task. It runs the work and answers Poll, AwaitResult and Cancel.

Guarantees:
- the work runs in its own cancel scope; Cancel cancels that scope, so the work really stops
  (it sees ``trio.Cancelled`` at its next checkpoint);
- the task is ``cancelled`` before the Cancel is answered, and stays so whatever the work does;
- every AwaitResult is answered exactly once: with the outcome when the task ends, or with an
  error when it expires or the server stops;
- ``created_at`` / ``last_updated_at`` are stamped when those events happen, never at query time.

A run-to-completion actor: its state changes only inside its own handlers, and no handler
ever waits, so its supervisor delivers each message by running :meth:`TaskActor.receive` to
completion in the supervisor's own Trio task (Trio's single thread makes that atomic). A
task therefore costs one Trio task only while its work runs (in its own cancel scope, spawned
by the supervisor); a finished task is plain data until its TTL ends.
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
from .runtime import Reply
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


class TaskActor:
    """One MCP task. Created, fed and stopped by the :class:`~trio_mcp.actors.supervisor.TaskSupervisor`."""

    __slots__ = (
        "_clock",
        "_input_waits",
        "_on_change",
        "_on_terminal",
        "_scope",
        "_stopped",
        "_tracer",
        "_waiters",
        "_work",
        "outcome",
        "owner",
        "task",
    )

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
        self._tracer = tracer if tracer is not no_trace else None
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
        self._stopped: McpError | None = None

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
        if self._tracer is not None:
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
            stopped = self._stopped is not None  # removed: its state is final
            if self._input_waits == 0 and self.task.status == TaskStatus.INPUT_REQUIRED and not stopped:
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

    # -- the work: a Trio task the supervisor spawns on Start -------------------------------
    async def run_work(self, on_crash: Callable[[TaskActor, BaseException], None]) -> None:
        """Run the work in the task's cancel scope and settle the task with its outcome.

        The work's own errors settle the task (``failed``); an error of this actor itself is
        a crash, reported to ``on_crash`` (its supervisor) rather than raised into the nursery.
        """
        outcome: TaskOutcome | None = None
        try:
            with self._scope:
                try:
                    outcome = await self._work(self)
                except McpError as exc:
                    outcome = TaskOutcome.from_error(exc)
                except Exception as exc:
                    outcome = TaskOutcome.from_error(McpError(INTERNAL_ERROR, f"Internal error: {exc}"))
            if outcome is not None and not self.task.status.is_terminal and self._stopped is None:
                status = TaskStatus.FAILED if outcome.failed else TaskStatus.COMPLETED
                self._finish(status, outcome, outcome.message)
        except Exception as exc:
            on_crash(self, exc)

    # -- messages (synchronous: each runs to completion) ------------------------------------
    def receive(self, message: Poll | AwaitResult | Cancel | Stop) -> None:
        """Handle one message. Never waits; answers go to the message's reply slot."""
        if self._stopped is not None:
            if not isinstance(message, Stop):
                message.reply.fail(self._stopped)
        elif isinstance(message, Poll):
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
        elif isinstance(message, Stop):
            self.stop(message.error)

    def abort(self, error: McpError) -> None:
        """Cancel the work if it still runs and fail every waiter with ``error``."""
        self._scope.cancel()
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            waiter.fail(error)

    def stop(self, error: McpError) -> None:
        """Stop for good (the task is being removed): abort, and answer ``error`` from now on."""
        self._stopped = error
        self.abort(error)
