"""Store call observation: the latency and the failures of every task-store call a process
makes, told to an optional :class:`StoreObserver` (telemetry implements it).

The calls are the store writer's (:mod:`trio_mcp.actors._writer`: create, update, delete, the
read-back of a write in doubt, a new task's lease), the supervisor's (its ``_read``: get, page,
due, a cancel's update, and the shared-store calls: hold, release, publish, lapsed, claim,
requeue, work_of, hand_back) and, for a store that never waits (the memory store), the
in-place ``create_now`` / ``update_now`` / ``delete_now`` (reported as create, update, delete).
A record read in place (``peek``) is not reported: it is a dictionary lookup on the hot path.

Nothing here runs unless an observer is given: without one the writer and the supervisor make
their calls exactly as they did (the in-place path is the store's own methods, unwrapped).
With one, each call is timed on Trio's clock and reported once it ends, with its error if it
raised one (a deadline passed: :class:`trio.TooSlowError`). An exception that is an answer (a
work queue's :class:`~trio_mcp.stores.base.WorkRefused`) is reported as a call that succeeded;
a call cancelled from outside (the server stopping) is not reported. A call made under an
enclosing deadline (several calls made as one step) is given that deadline when it is the
earlier, so that its passing is reported as that call's timeout.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from typing import Protocol, TypeVar

import trio

from ..protocol.records import TaskRecord
from ..stores.base import ImmediateTaskStore

__all__ = ["ObservedStore", "StoreObserver", "call_store", "operation_of", "store_kind"]

T = TypeVar("T")


class StoreObserver(Protocol):
    """Told of each task-store call once it ended (a cheap call: it runs after every one).

    ``kind``: the store's (:func:`store_kind`, ``memory``, ``sqlite``, ``redis``);
    ``operation``: the store method called (``create``, ``get``, ``update``, ``delete``,
    ``page``, ``due``, ``hold``, ``release``, ``publish``, ``lapsed``, ``claim``, ``requeue``,
    …); ``seconds``: how long it took (Trio's clock); ``error``: what it raised, or None."""

    def store_call(self, kind: str, operation: str, seconds: float, error: Exception | None) -> None: ...


def store_kind(store: object) -> str:
    """A store's kind, from its class name: ``MemoryTaskStore`` → ``memory``,
    ``SqliteTaskStore`` → ``sqlite``, ``RedisTaskStore`` → ``redis``, ``FlakyStore`` → ``flaky``.

    >>> from trio_mcp.stores.memory import MemoryTaskStore
    >>> store_kind(MemoryTaskStore())
    'memory'
    """
    name = type(store).__name__
    for suffix in ("TaskStore", "Store"):
        if name.endswith(suffix) and len(name) > len(suffix):
            return name[: -len(suffix)].lower()
    return name.lower()


def operation_of(call: Callable[[], object]) -> str:
    """The store method a call makes: ``call`` is the method itself or a
    :func:`functools.partial` of it (as the writer and the supervisor make them).

    >>> import functools
    >>> from trio_mcp.stores.memory import MemoryTaskStore
    >>> operation_of(functools.partial(MemoryTaskStore().get, "t1"))
    'get'
    """
    function = getattr(call, "func", call)
    name = getattr(function, "__name__", None)
    return name if isinstance(name, str) else "call"


class ObservedStore:
    """One store's calls, timed and told to ``observer``."""

    __slots__ = ("kind", "observer")

    def __init__(self, store: object, observer: StoreObserver) -> None:
        self.kind = store_kind(store)
        self.observer = observer

    async def call(
        self,
        call: Callable[[], Awaitable[T]],
        deadline: float,
        refusals: type[Exception] | tuple[type[Exception], ...] = (),
    ) -> T:
        """``await call()`` by ``deadline`` (Trio's clock; :class:`trio.TooSlowError` past
        it, or by an enclosing deadline that is earlier), reported to the observer.
        ``refusals``: exceptions that are an answer."""
        deadline = min(deadline, trio.current_effective_deadline())
        started = trio.current_time()
        try:
            with trio.fail_at(deadline):
                value = await call()
        except refusals:
            self.observer.store_call(self.kind, operation_of(call), trio.current_time() - started, None)
            raise
        except Exception as exc:
            self.observer.store_call(self.kind, operation_of(call), trio.current_time() - started, exc)
            raise
        except trio.Cancelled:
            now = trio.current_time()
            if -math.inf < deadline <= now:  # an enclosing deadline as early as ours passed
                self.observer.store_call(self.kind, operation_of(call), now - started, trio.TooSlowError())
            raise  # else cancelled from outside (the server stopping): not the store's doing
        self.observer.store_call(self.kind, operation_of(call), trio.current_time() - started, None)
        return value

    def immediate(self, store: ImmediateTaskStore) -> ImmediateTaskStore:
        """``store``'s in-place calls, timed (made only when an observer is given)."""
        return _ObservedImmediate(store, self)


async def call_store(observed: ObservedStore | None, call: Callable[[], Awaitable[T]], deadline: float) -> T:
    """``await call()`` by ``deadline`` (Trio's clock), through ``observed`` if there is one."""
    if observed is None:
        with trio.fail_at(deadline):
            return await call()
    return await observed.call(call, deadline)


class _ObservedImmediate:
    """A store that never waits, its in-place writes timed (an :class:`ImmediateTaskStore`)."""

    def __init__(self, store: ImmediateTaskStore, observed: ObservedStore) -> None:
        self._store = store
        self._observed = observed
        self.peek = store.peek  # not reported: a lookup
        # The async methods, as the store's own (the writer makes its in-place calls only).
        self.create = store.create
        self.get = store.get
        self.update = store.update
        self.delete = store.delete
        self.page = store.page
        self.due = store.due

    def _report(self, operation: str, started: float, error: Exception | None) -> None:
        observed = self._observed
        observed.observer.store_call(observed.kind, operation, trio.current_time() - started, error)

    def create_now(self, record: TaskRecord) -> None:
        started = trio.current_time()
        try:
            self._store.create_now(record)
        except Exception as exc:
            self._report("create", started, exc)
            raise
        self._report("create", started, None)

    def update_now(self, record: TaskRecord) -> bool:
        started = trio.current_time()
        try:
            done = self._store.update_now(record)
        except Exception as exc:
            self._report("update", started, exc)
            raise
        self._report("update", started, None)
        return done

    def delete_now(self, task_id: str) -> TaskRecord | None:
        started = trio.current_time()
        try:
            removed = self._store.delete_now(task_id)
        except Exception as exc:
            self._report("delete", started, exc)
            raise
        self._report("delete", started, None)
        return removed
