"""TaskActor: the live side of one MCP task in the process that runs its work.

It holds the task's current :class:`~trio_mcp.protocol.records.TaskRecord` (plain data, which
the supervisor's store writer stores after every change), the record clients are shown (the
newest one stored: :attr:`TaskActor.shown`), the work's cancel scope and the ``tasks/result``
waiters. Guarantees:

- durable before visible: a poll is answered with the newest *stored* record, and a waiter
  (``tasks/result``, a ``tasks/cancel``) is answered once the task's end is stored — with the
  memory store that is at once, since it stores in place;

- the work runs in its own cancel scope; Cancel cancels that scope, so the work really stops
  (it sees ``trio.Cancelled`` at its next checkpoint);
- the task is ``cancelled`` (and stored so) before the Cancel is answered, and stays so whatever
  the work does; a task the store says has ended elsewhere (:meth:`TaskActor.adopt`) stops;
- every AwaitResult is answered exactly once: with the outcome when the task ends, or with an
  error when it expires or its owner goes away (at shutdown the waiting requests are cancelled
  with their sessions);
- ``created_at`` / ``last_updated_at`` are stamped when those events happen, never at query time.

A run-to-completion actor: its state changes only inside its own handlers, and no handler
ever waits, so its supervisor delivers each message by running :meth:`TaskActor.receive` to
completion in the supervisor's own Trio task (Trio's single thread makes that atomic). A task
costs one Trio task only while its work runs; once it has ended and its final record is
stored, the supervisor forgets the actor and the task is a record in the store.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import attrs
import trio

from ..protocol import _json
from ..protocol.errors import INTERNAL_ERROR, TASK_CANCELLED, ErrorValue, McpError
from ..protocol.records import NO_INPUT_REQUESTS, TaskOutcome, TaskRecord
from ..protocol.table import CHARGED_FROM
from ..protocol.tasks import TERMINAL, TaskStatus
from .runtime import Reply
from .trace import Tracer

__all__ = [
    "CANCELLED",
    "ActorHost",
    "AwaitResult",
    "Cancel",
    "Poll",
    "ProvideInput",
    "StagedWork",
    "Start",
    "Stop",
    "TaskActor",
    "TaskOutcome",
    "Work",
]


CANCELLED = ErrorValue(TASK_CANCELLED, "Task was cancelled: the request has no result")
_BY_REQUEST = "The task was cancelled by request."
_CANCELLED_BY_REQUEST = TaskOutcome(error=CANCELLED, failed=True, message=_BY_REQUEST)
"""Every task cancelled by ``tasks/cancel`` ends with this outcome (a frozen value: shared)."""


_PRUNE_FROM = 8
"""``tasks/result`` waiters a task keeps before it first drops abandoned ones."""


def _left(scope: trio.CancelScope, exc: BaseException) -> bool:
    """Leave ``scope`` as a ``with`` block would on ``exc``: True if the scope swallowed it."""
    return bool(scope.__exit__(type(exc), exc, exc.__traceback__))


def _internal_error(exc: Exception) -> TaskOutcome:
    """The outcome of an unexpected error of the work (built here, not in ``run_work``, whose
    frame lives as long as the task and is sized by its deepest expression)."""
    return TaskOutcome.from_error(ErrorValue(INTERNAL_ERROR, f"Internal error: {exc}"))


# Messages. Each carries its own reply slot where an answer is due.
@attrs.frozen
class Start:
    """Begin the work: sent once the creator has answered with the CreateTaskResult."""


@attrs.frozen
class Poll:
    reply: Reply[TaskRecord]


@attrs.frozen
class AwaitResult:
    """Answered with the task's outcome once it has ended (an error outcome too)."""

    reply: Reply[TaskOutcome]


@attrs.frozen
class Cancel:
    """Answered with the record and whether the task had already ended (then nothing changed)."""

    reply: Reply[tuple[TaskRecord, bool]]
    reason: str = _BY_REQUEST


@attrs.frozen
class ProvideInput:
    """Answers to the task's input requests, by key (unknown or answered keys are ignored);
    answered with the record after they were taken."""

    responses: dict[str, Any]
    reply: Reply[TaskRecord]


@attrs.frozen
class Stop:
    """Stop for good (expiry, owner gone, shutdown): waiters get ``error``."""

    error: ErrorValue


TaskMessage = Start | Poll | AwaitResult | Cancel | ProvideInput | Stop


class StagedWork:
    """Work in three parts, so that no frame of the runtime's sits between the task's actor
    and the running work (each would be kept for the task's whole life): :meth:`start`
    never waits and returns what to await (or the outcome at once); what that returns goes
    to :meth:`finish`, an exception (not McpError, not a cancellation) to :meth:`fail`."""

    __slots__ = ()

    replay: bytes | None = None
    """The work described for a work queue (:mod:`trio_mcp.actors._queue`), so that another
    process can run it; None: it runs only here."""

    def start(self, actor: TaskActor) -> Awaitable[Any] | TaskOutcome:
        raise NotImplementedError

    def finish(self, value: Any) -> TaskOutcome:
        raise NotImplementedError

    def fail(self, exc: Exception) -> TaskOutcome:
        raise NotImplementedError


Work = Callable[["TaskActor"], Awaitable[TaskOutcome]] | StagedWork
"""A task's work: an async function of its actor returning the outcome, or :class:`StagedWork`."""


@attrs.frozen
class ActorHost:
    """What every :class:`TaskActor` of one supervisor shares: one reference per actor."""

    clock: Callable[[], float]
    """Wall-clock epoch seconds (the records' times)."""
    on_change: Callable[[TaskActor, TaskRecord], None]
    """Told of every change before it is made (the supervisor: watchers, the store)."""
    tracer: Tracer | None = None
    """None: no tracing."""
    max_result_bytes: int | None = None
    """A result larger than this (as JSON) fails the task instead; None: no bound."""
    keep_result: Callable[[str, int], ErrorValue | None] | None = None
    """Asked whether a finished task (by id) may keep a result of so many bytes: None if it
    may (it is counted), else the error to end it with (the supervisor's task table)."""


class _InputState:
    """A task's dealings with its requestor for input, made when it first asks: the waits
    holding it in ``input_required``, the pending requests' reply slots by key, and the keys
    used over its life (most tasks never ask, and keep none of this)."""

    __slots__ = ("pending", "seq", "used_keys", "waits")

    def __init__(self) -> None:
        self.waits = 0
        self.pending: dict[str, Reply[Any]] = {}
        self.seq = 0
        self.used_keys: set[str] = set()


def _cancel_answer(end: TaskRecord, already: bool | None) -> tuple[TaskRecord, bool]:
    """What a Cancel is answered once the task's ``end`` is stored (see :class:`_CancelWait`)."""
    return end, already if already is not None else end.status is not TaskStatus.CANCELLED


class _CancelWait:
    """A ``tasks/cancel`` answered once the task's end is stored: with that record and whether
    the task had ended before (``already``; None: unless the end stored is the cancel)."""

    __slots__ = ("already", "reply")

    def __init__(self, reply: Reply[tuple[TaskRecord, bool]], already: bool | None) -> None:
        self.reply = reply
        self.already = already

    def answer(self, record: TaskRecord) -> None:
        self.reply.send(_cancel_answer(record, self.already))

    @property
    def abandoned(self) -> bool:
        return self.reply.abandoned

    def fail_value(self, error: ErrorValue) -> None:
        self.reply.fail_value(error)


class TaskActor:
    """One MCP task. Created, fed and stopped by the :class:`~trio_mcp.actors.supervisor.TaskSupervisor`."""

    __slots__ = ("_host", "_input", "_scope", "_stopped", "_waiters", "_work", "record", "shown", "watcher")

    def __init__(
        self,
        record: TaskRecord,
        work: Work,
        host: ActorHost,
        watcher: Callable[[TaskRecord], None] | None = None,
    ) -> None:
        self.record = record
        self.shown = record
        """The newest record stored: what clients are shown."""
        self._work = work
        self._host = host
        self.watcher = watcher
        """Told every new record (the creating session sends status notifications from it)."""
        # Made when first needed: most tasks never get a waiter or ask for input.
        self._waiters: list[Reply[TaskOutcome] | _CancelWait] | None = None
        self._input: _InputState | None = None
        self._scope = trio.CancelScope()
        self._stopped: ErrorValue | None = None

    @property
    def task_id(self) -> str:
        return self.record.task_id

    @property
    def owner(self) -> str:
        """The task's owner (a record's never changes; the hot paths read ``record.owner``:
        eight slots, not nine, make an actor 16 bytes smaller)."""
        return self.record.owner

    @property
    def status(self) -> TaskStatus:
        return self.record.status

    @property
    def stopped(self) -> bool:
        return self._stopped is not None

    # -- state changes (only ever made by this actor, or its supervisor after a crash) ----
    def _set(self, record: TaskRecord) -> None:
        # The supervisor hears of the change first: if that raises (a crash), the change was
        # never made, and the supervisor settles the task as failed from the state before it.
        host = self._host
        host.on_change(self, record)
        if host.tracer is not None and record.status != self.record.status:
            host.tracer(
                "task.transition",
                {"task_id": record.task_id, "old": self.record.status.value, "status": record.status.value},
            )
        self.record = record

    @contextlib.contextmanager
    def awaiting_input(self, message: str | None = None) -> Iterator[None]:
        """Hold the task in ``input_required`` while the block waits for the requestor.

        Nested or concurrent waits keep it there until the last one ends; then it returns to
        ``working``. A task cancelled meanwhile stays ``cancelled``.
        """
        state = self._input_state()
        state.waits += 1
        if state.waits == 1 and self.record.status == TaskStatus.WORKING and self._stopped is None:
            self._set(self.record.transition(TaskStatus.INPUT_REQUIRED, message, now=self._host.clock()))
        try:
            yield
        finally:
            state.waits -= 1
            if (
                state.waits == 0
                and not state.pending
                and self.record.status == TaskStatus.INPUT_REQUIRED
                and self._stopped is None  # removed: its state is final
            ):
                self._set(self.record.transition(TaskStatus.WORKING, None, now=self._host.clock()))

    def _input_state(self) -> _InputState:
        state = self._input
        if state is None:
            state = self._input = _InputState()
        return state

    def request_input(
        self, request: dict[str, Any], message: str | None = None, *, key: str | None = None
    ) -> tuple[str, Reply[Any]]:
        """Ask the requestor for input through the task itself (the tasks extension): the
        request is listed in the record's ``inputRequests`` under a key unique for the task's
        life, the task is ``input_required``, and the returned reply is answered by a
        :class:`ProvideInput` carrying that key. Withdraw it with :meth:`withdraw_input`."""
        state = self._input_state()
        state.seq += 1
        if key is None:
            key = f"input-{state.seq - 1}"
        elif key in state.used_keys:  # unique over the task's life
            key = f"{key}-{state.seq}"
        state.used_keys.add(key)
        reply: Reply[Any] = Reply()
        if self.record.is_terminal or self._stopped is not None:
            return key, reply  # never answered: the work is being cancelled
        state.pending[key] = reply
        status = TaskStatus.INPUT_REQUIRED
        note = message if self.record.status != status else self.record.status_message
        requests = {**self.record.input_requests, key: request}
        self._set(self.record.with_input_requests(requests, status, note, now=self._host.clock()))
        return key, reply

    def withdraw_input(self, key: str) -> None:
        """Forget an input request nobody waits for any more (its asker was cancelled)."""
        if self._input is not None and self._input.pending.pop(key, None) is not None:
            self._drop_requests((key,))

    def _drop_requests(self, keys: tuple[str, ...]) -> None:
        if self.record.is_terminal or self._stopped is not None:
            return
        requests = {k: v for k, v in self.record.input_requests.items() if k not in keys} or NO_INPUT_REQUESTS
        status = self.record.status
        message = self.record.status_message
        if not requests and not (self._input and self._input.waits) and status == TaskStatus.INPUT_REQUIRED:
            status, message = TaskStatus.WORKING, None
        self._set(self.record.with_input_requests(requests, status, message, now=self._host.clock()))

    def set_status_message(self, message: str | None) -> None:
        """Update ``statusMessage`` of a live task (from the work's context)."""
        if self.record.is_terminal or self._stopped is not None or message == self.record.status_message:
            return
        self._set(self.record.with_message(message, now=self._host.clock()))

    def settle(self, outcome: TaskOutcome, status: TaskStatus | None = None) -> None:
        """End the task with ``outcome`` and answer every waiter (no-op once terminal)."""
        record = self.record
        if record.status in TERMINAL:
            return
        self._set(record.settle(outcome, now=self._host.clock(), status=status))
        if self._input is not None:
            self._input.pending = {}  # the work has ended: its open input requests are forgotten

    def stored(self, record: TaskRecord) -> None:
        """``record`` (this actor's, or a newer one) is stored: clients see it from now on.
        Once it is the task's end, every waiter is answered from it."""
        self.shown = record
        if record.status in TERMINAL:
            waiters, self._waiters = self._waiters, None
            if waiters:
                outcome = record.outcome
                assert outcome is not None  # a terminal record has one
                for waiter in waiters:
                    if isinstance(waiter, _CancelWait):
                        waiter.answer(record)
                    else:
                        waiter.send(outcome)

    def adopt(self, record: TaskRecord) -> None:
        """The store says the task ended elsewhere (cancelled through another process, failed
        by a lease sweep): the work stops, and the task is what the store says."""
        self._scope.cancel()
        if self._input is not None:
            self._input.pending = {}
        self.record = record
        self.stored(record)

    def _answer_cancel(self, reply: Reply[tuple[TaskRecord, bool]], already: bool | None) -> None:
        """Answer a Cancel once the task's end is stored: now if it is (the memory store stores
        in place), else when it is (see :class:`_CancelWait`)."""
        shown = self.shown
        if shown.status in TERMINAL:
            reply.send(_cancel_answer(shown, already))
        else:
            self._wait(_CancelWait(reply, already))

    def _wait(self, waiter: Reply[TaskOutcome] | _CancelWait) -> None:
        waiters = self._waiters
        if waiters is None:
            waiters = self._waiters = []
        elif len(waiters) >= _PRUNE_FROM and not len(waiters) & (len(waiters) - 1):
            # At each power of two, drop waiters whose askers gave up: a client that
            # asks for the result and cancels, again and again, grows nothing.
            waiters[:] = [waiter for waiter in waiters if not waiter.abandoned]
        waiters.append(waiter)

    # -- the work: a Trio task the supervisor spawns on Start -------------------------------
    async def run_work(self, on_crash: Callable[[TaskActor, BaseException], None]) -> None:
        """Run the work in the task's cancel scope and settle the task with its outcome.

        The work's own errors settle the task (``failed``); an error of this actor itself is
        a crash, reported to ``on_crash`` (its supervisor) rather than raised into the nursery.
        A cancellation of the task's scope ends the work with no outcome (whoever cancelled it
        has settled the task); any other cancellation goes on up.
        """
        # This frame lives as long as the task, so it is kept small: few names, and the scope
        # entered and left by hand as ``with`` would (a ``with`` holds the bound ``__exit__``
        # on the frame for the task's whole life: 64 bytes a task).
        scope = self._scope
        try:
            scope.__enter__()
            try:
                work = self._work
                try:
                    if isinstance(work, StagedWork):
                        step: Any = work.start(self)
                        if not isinstance(step, TaskOutcome):
                            try:
                                step = await step
                            except McpError:
                                raise
                            except Exception as exc:
                                step = work.fail(exc)
                            else:
                                step = work.finish(step)
                    else:
                        step = await work(self)
                except McpError as exc:
                    step = TaskOutcome.from_error(exc.value)
                except Exception as exc:
                    step = _internal_error(exc)
            except BaseException as exc:
                if not _left(scope, exc):
                    raise
                return  # this task's scope was cancelled: no outcome
            scope.__exit__(None, None, None)
            if step is not None and self._stopped is None:
                self.settle(self._bounded(step))
        except Exception as exc:
            on_crash(self, exc)

    def _bounded(self, outcome: TaskOutcome) -> TaskOutcome:
        """The outcome to keep: a result over ``max_result_bytes`` (JSON) is replaced by an
        error, and so is one the host will not keep (``keep_result``: the task table's kept
        bytes); results under :data:`~trio_mcp.protocol.table.CHARGED_FROM` bytes are not
        counted."""
        host = self._host
        limit = host.max_result_bytes
        result = outcome.result
        if limit is None or result is None:
            return outcome
        size = -1
        if len(result) == 1:
            # Only one text block (a tool that returned a string): its JSON is at most 12
            # bytes per character (an escaped surrogate pair) and the fixed keys; not encoded.
            content = result.get("content")
            if type(content) is list and len(content) == 1:
                block = content[0]
                if type(block) is dict and len(block) == 2 and block.get("type") == "text":
                    text = block.get("text")
                    if type(text) is str:
                        length = len(text)
                        if 12 * length + 64 <= limit:
                            size = length + 64  # what keeping it costs: about its length
                            if size < CHARGED_FROM:
                                return outcome
        if size < 0:
            size = len(_json.dumps(result))
            if size > limit:
                return TaskOutcome.from_error(
                    ErrorValue(
                        INTERNAL_ERROR,
                        f"Internal error: the result ({size} bytes) exceeds the {limit} byte limit",
                    )
                )
        keep = host.keep_result
        error = keep(self.record.task_id, size) if keep is not None else None
        return outcome if error is None else TaskOutcome.from_error(error)

    def current(self) -> TaskRecord | ErrorValue:
        """What a :class:`Poll` is answered: the stored record, or the error once stopped."""
        return self.shown if self._stopped is None else self._stopped

    # -- messages (synchronous: each runs to completion) ------------------------------------
    def receive(self, message: Poll | AwaitResult | Cancel | ProvideInput | Stop) -> None:
        """Handle one message. Never waits; answers go to the message's reply slot."""
        if self._stopped is not None:
            if not isinstance(message, Stop):
                message.reply.fail_value(self._stopped)
        elif isinstance(message, Poll):
            message.reply.send(self.shown)
        elif isinstance(message, AwaitResult):
            outcome = self.shown.outcome
            if outcome is not None:
                message.reply.send(outcome)
            else:
                self._wait(message.reply)
        elif isinstance(message, Cancel):
            if self.record.status in TERMINAL:
                self._answer_cancel(message.reply, True)  # it had ended: cancelling changes nothing
                return
            self._scope.cancel()
            reason = message.reason
            outcome = (
                _CANCELLED_BY_REQUEST
                if reason is _BY_REQUEST or reason == _BY_REQUEST
                else TaskOutcome(error=CANCELLED, failed=True, message=reason)
            )
            self.settle(outcome, TaskStatus.CANCELLED)
            self._answer_cancel(message.reply, None)
        elif isinstance(message, ProvideInput):
            taken: list[str] = []
            for key, value in message.responses.items():
                reply = self._input.pending.pop(key, None) if self._input is not None else None
                if reply is not None:
                    taken.append(key)
                    reply.send(value)
            if taken:
                self._drop_requests(tuple(taken))
            message.reply.send(self.record)
        elif isinstance(message, Stop):
            self.stop(message.error)

    def abort(self, error: ErrorValue) -> None:
        """Cancel the work if it still runs and fail every waiter with ``error``."""
        self._scope.cancel()
        waiters, self._waiters = self._waiters or (), None
        for waiter in waiters:
            waiter.fail_value(error)

    def stop(self, error: ErrorValue) -> None:
        """Stop for good (the task is being removed): abort, and answer ``error`` from now on."""
        self._stopped = error
        self.abort(error)

    def crashed(self, failure: ErrorValue, *, now: float) -> None:
        """Settle as ``failed`` with ``failure`` kept, after a crash of this actor. Called by the
        supervisor, which owns a broken actor's state: no callback runs (one may be what broke);
        the supervisor stores the record itself, and every waiter is answered once it is."""
        self._scope.cancel()
        if not self.record.is_terminal:
            self.record = self.record.settle(TaskOutcome.from_error(failure), now=now)

    def __repr__(self) -> str:
        return f"<TaskActor {self.task_id} {self.record.status.value}>"
