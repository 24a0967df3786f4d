"""A small actor runtime on Trio.

An actor owns its state; others reach it only by message. Two kinds:

- a *mailbox actor* (:class:`Actor`) is a Trio task reading a bounded :class:`Mailbox`:
  :meth:`Actor.tell` (fire and forget, never blocks) and :func:`ask` (a message carrying a
  :class:`Reply` slot, awaited by the sender);
- a *run-to-completion actor* (a TaskActor) has handlers that never wait, so the actor that
  routes a message to it runs the handler to completion in its own Trio task — atomic on
  Trio's single thread, and no Trio task per idle actor.

A :class:`Reply` can also carry a continuation (:meth:`Reply.then`), so an asker that need not
wait goes on at once and answers from the continuation. Actors run inside a nursery owned by
their supervisor, and report a crash to it (a callback) instead of letting it tear the
nursery, and so the process, down.
"""

from __future__ import annotations

import collections
import contextlib
import heapq
import logging
import math
from collections.abc import Callable, Iterator, Sized
from typing import Any, Generic, TypeVar

import trio

from ..protocol.errors import ErrorValue, McpError

__all__ = [
    "DEFAULT_MAILBOX_SIZE",
    "YIELD_EVERY",
    "Actor",
    "Alarm",
    "Alarms",
    "Mailbox",
    "MailboxClosed",
    "MailboxFull",
    "Reply",
    "ask",
    "unwrap_single",
]

M = TypeVar("M")
T = TypeVar("T")

DEFAULT_MAILBOX_SIZE = 1024
YIELD_EVERY = 64

log = logging.getLogger("trio_mcp.actors")

Alarm = list[Any]
"""One alarm of :class:`Alarms`: ``[deadline, sequence, callback]``, the callback None once
withdrawn."""


class Alarms:
    """Callbacks at deadlines, all called from one Trio task (:meth:`run`).

    What a cancel scope with a deadline does for one waiting Trio task — wake it at a time —
    at the cost of a heap entry: making, entering and leaving a scope costs about as much as
    a small request. For waits that usually end before their deadline (a server-directed
    call's auto-task window), the alarm is withdrawn when the wait ends. Deadlines are on the
    Trio clock; an alarm is called in the first scheduler round that finds its deadline passed
    (as a scope's would be cancelled), in deadline order.

    The Trio task's wake-up is a scope's deadline, and moving one costs about a fifth of a
    wake-up: it is moved only when it must be. An alarm earlier than the wake-up brings it
    forward; withdrawing the last alarm kept puts it off (an idle runtime never wakes); but
    withdrawing one while others are kept leaves it as it is, and the task, waking early,
    finds nothing due and sleeps on until the next. While alarms are added and withdrawn
    without pause (quick requests, one after another on many connections) the task so wakes
    at most once per alarm's delay, instead of each alarm moving the wake-up twice.

    >>> alarms = Alarms()
    >>> alarm = alarms.add(5.0, lambda: None)
    >>> alarms.pending
    1
    >>> alarms.withdraw(alarm)
    >>> alarms.pending
    0
    """

    __slots__ = ("_count", "_heap", "_sleep", "_wake_at")

    def __init__(self) -> None:
        self._heap: list[Alarm] = []
        self._count = 0
        self._sleep: trio.CancelScope | None = None  # the running task's, while it sleeps
        self._wake_at = math.inf  # its deadline (read without the scope's property)

    @property
    def pending(self) -> int:
        """Alarms kept: not yet due, and not withdrawn from the front."""
        return len(self._heap)

    def add(self, deadline: float, callback: Callable[[], None]) -> Alarm:
        """Call ``callback`` (it must not raise, nor wait) once ``deadline`` has passed,
        unless :meth:`withdraw` is called first. Never waits."""
        self._count += 1
        alarm: Alarm = [deadline, self._count, callback]
        heapq.heappush(self._heap, alarm)
        if deadline < self._wake_at:
            self._wake_at = deadline
            if self._sleep is not None:
                self._sleep.deadline = deadline
        return alarm

    def withdraw(self, alarm: Alarm) -> None:
        """The alarm is not wanted any more (nothing if it was called already)."""
        alarm[2] = None
        heap = self._heap
        if heap and heap[0] is alarm:  # the front: it goes now, with any withdrawn behind it
            while heap and heap[0][2] is None:
                heapq.heappop(heap)
            if not heap:  # none kept: no wake-up (while some are, it is left as it is)
                self._wake_at = math.inf
                if self._sleep is not None:
                    self._sleep.deadline = math.inf

    async def run(self) -> None:
        """Call alarms as they fall due, until cancelled."""
        heap = self._heap
        while True:
            while heap and heap[0][2] is None:  # withdrawn: not worth waking for
                heapq.heappop(heap)
            self._wake_at = heap[0][0] if heap else math.inf
            with trio.CancelScope(deadline=self._wake_at) as self._sleep:
                await trio.sleep_forever()
            self._sleep = None
            now = trio.current_time()
            while heap and heap[0][0] <= now:
                callback = heapq.heappop(heap)[2]
                if callback is not None:
                    try:
                        callback()
                    except Exception as exc:  # a bug of the caller's: the others still ring
                        log.error("alarm callback failed: %r", exc, exc_info=exc)


class MailboxFull(Exception):
    """The actor is too far behind: a bounded mailbox refuses rather than grows."""


class MailboxClosed(Exception):
    """The actor has stopped; nothing more will be read."""


class Mailbox(Generic[M]):
    """A bounded single-consumer queue. ``put`` never blocks; ``get`` waits for a message.

    Lighter than a memory channel pair: one deque and at most one parked reader, which
    matters when every live MCP task owns one.
    """

    __slots__ = ("_capacity", "_closed", "_queue", "_reader", "_since_yield")

    def __init__(self, capacity: int = DEFAULT_MAILBOX_SIZE) -> None:
        self._queue: collections.deque[M] = collections.deque()
        self._capacity = capacity
        self._reader: trio.lowlevel.Task | None = None
        self._closed = False
        self._since_yield = 0

    def __len__(self) -> int:
        return len(self._queue)

    def unread(self) -> Sized:
        """The unread messages themselves, live: keep it to test for a backlog (``not
        unread``) without a call per test. Read only."""
        return self._queue

    @property
    def closed(self) -> bool:
        return self._closed

    def put(self, message: M, *, system: bool = False) -> None:
        """Queue ``message``. ``system`` messages (exits, bookkeeping from the runtime itself)
        bypass the bound: their number is bounded by the number of actors, not by peers."""
        if self._closed:
            raise MailboxClosed
        if len(self._queue) >= self._capacity and not system:
            raise MailboxFull
        self._queue.append(message)
        self._wake()

    def close(self) -> list[M]:
        """Stop accepting messages; return the unread ones so the caller can answer them."""
        self._closed = True
        left = list(self._queue)
        self._queue.clear()
        self._wake()
        return left

    def _wake(self) -> None:
        reader, self._reader = self._reader, None
        if reader is not None:
            trio.lowlevel.reschedule(reader)

    async def get(self) -> M:
        """The next message; raises :class:`MailboxClosed` once closed and empty."""
        if not self._queue:
            if self._closed:
                await trio.lowlevel.checkpoint()
                raise MailboxClosed
            self._reader = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._reader = None
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
            if not self._queue:
                raise MailboxClosed
            self._since_yield = 0
        else:
            # Drain a backlog in runs: a scheduler round per message would cost more than the
            # handlers, but a busy actor still lets others run every YIELD_EVERY messages.
            self._since_yield += 1
            if self._since_yield >= YIELD_EVERY:
                self._since_yield = 0
                await trio.lowlevel.checkpoint()
            else:
                await trio.lowlevel.checkpoint_if_cancelled()
        return self._queue.popleft()


class Reply(Generic[T]):
    """A one-shot answer slot. The first ``send``/``fail``/``fail_value`` wins; later ones are
    ignored.

    Senders may have given up waiting (cancelled); answering is then harmless. The slot keeps
    the value (or the error) itself: reading an answer that is already there costs an
    attribute read, with no outcome objects in between.

    Errors are values here: an :class:`~trio_mcp.protocol.errors.McpError` it is failed with
    is kept as its :class:`~trio_mcp.protocol.errors.ErrorValue`, which an answering actor
    reads with :attr:`error_value` and writes as an error response without raising anything.
    :meth:`unwrap` (and :meth:`wait`) raise a fresh McpError from it each time. An exception
    the slot kept and raised would hold, through its traceback, the frames that hold the slot
    (a cycle): everything those frames reference — the request, its arguments — would stay
    alive until the cyclic garbage collector ran.
    """

    __slots__ = ("_abandoned", "_callback", "_exception", "_value", "_waiter", "answered", "error_value")

    def __init__(self) -> None:
        self.answered = False
        """Whether it was answered (a plain attribute, not a property: every query reads it;
        only the slot's own methods set it)."""
        self._value: T | None = None
        self.error_value: ErrorValue | None = None
        """The protocol error it was failed with, as a value (None if it was not failed, or
        failed with another kind of exception: :meth:`unwrap` raises that one). Read this
        before :meth:`unwrap` where the error is only to be answered: nothing is raised."""
        self._exception: BaseException | None = None
        self._waiter: trio.lowlevel.Task | None = None
        self._callback: Callable[[Reply[T]], None] | None = None
        self._abandoned = False

    @property
    def abandoned(self) -> bool:
        """Whether its asker was cancelled while waiting (nobody will read the answer): an
        actor keeping replies to answer later may drop it."""
        return self._abandoned

    def then(self, callback: Callable[[Reply[T]], None]) -> None:
        """Run ``callback(reply)`` when the answer arrives (at once if it already has), in
        the answering actor's task: the asker goes on without waiting, and the callback reads
        the answer with :meth:`unwrap`. One callback per slot."""
        if self.answered:
            callback(self)
        else:
            self._callback = callback

    @property
    def failed(self) -> bool:
        """Whether it was answered with an error."""
        return self.error_value is not None or self._exception is not None

    def unwrap(self) -> T:
        """The answer: the value sent, or the error failed with raised — a protocol error as a
        fresh McpError each time; any other exception afresh, from an empty traceback (so
        reading twice grows nothing)."""
        if not self.answered:
            raise RuntimeError("the reply has not been answered yet")
        error = self.error_value
        if error is not None:
            raise error.exception()
        exception = self._exception
        if exception is not None:
            raise exception.with_traceback(None)
        return self._value  # type: ignore[return-value]

    def send(self, value: T) -> None:
        if not self.answered:
            self._value = value
            self.answered = True
            if self._waiter is not None or self._callback is not None:
                self._answered()

    def fail(self, error: BaseException) -> None:
        """Answer with ``error``. An McpError is kept as its value (its traceback, if it was
        raised, and what that holds, are not kept): see the class docstring."""
        if not self.answered:
            if type(error) is McpError:
                self.error_value = error.value
            else:
                self._exception = error
            self.answered = True
            if self._waiter is not None or self._callback is not None:
                self._answered()

    def fail_value(self, error: ErrorValue) -> None:
        """Answer with the protocol error ``error``: :meth:`fail` without an exception."""
        if not self.answered:
            self.error_value = error
            self.answered = True
            if self._waiter is not None or self._callback is not None:
                self._answered()

    def _answered(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)
        callback, self._callback = self._callback, None
        if callback is not None:
            callback(self)

    async def wait(self) -> T:
        if not self.answered:
            self._waiter = trio.lowlevel.current_task()

            def abort(_: Any) -> trio.lowlevel.Abort:
                self._waiter = None
                self._abandoned = True
                return trio.lowlevel.Abort.SUCCEEDED

            await trio.lowlevel.wait_task_rescheduled(abort)
        else:
            await trio.lowlevel.checkpoint()
        return self.unwrap()


class Actor(Generic[M]):
    """Base class: a mailbox plus ``tell``. Subclasses implement :meth:`run`."""

    def __init__(self, mailbox_size: int = DEFAULT_MAILBOX_SIZE) -> None:
        self.mailbox: Mailbox[M] = Mailbox(mailbox_size)

    def tell(self, message: M) -> None:
        """Deliver ``message`` without waiting. Raises MailboxFull / MailboxClosed."""
        self.mailbox.put(message)

    async def run(self) -> None:
        raise NotImplementedError


async def ask(actor: Actor[M], make: Callable[[Reply[T]], M]) -> T:
    """Send ``make(reply)`` to ``actor`` and wait for the answer.

    >>> # version = await ask(supervisor, lambda r: GetTask(owner, task_id, r))
    """
    reply: Reply[T] = Reply()
    actor.tell(make(reply))
    return await reply.wait()


@contextlib.contextmanager
def unwrap_single() -> Iterator[None]:
    """Re-raise a lone exception out of the group a nursery wrapped it in.

    For context managers that run the caller's block inside their own nursery: the caller's
    ``except McpError`` should work as if there were no nursery.
    """
    try:
        yield
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]
