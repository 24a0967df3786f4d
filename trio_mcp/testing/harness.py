"""The connected harness: a server and a client joined in memory, on Trio's mock clock."""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

import outcome
import trio
import trio.testing

from ..actors.task_actor import TaskActor
from ..client import Client, ProgressCallback, connect
from ..protocol.messages import DetailedTask
from ..server import Server, ServerRuntime
from .faults import Faults, Link
from .monitor import Checkpoint, Gate, Work, WorkMonitor, instrument_server
from .trace import Trace

__all__ = ["EPOCH", "WATCHDOG", "Harness", "HarnessTimeout", "Pending", "open_harness", "pinned_wall_clock"]

T = TypeVar("T")

EPOCH = 1_767_225_600.0
"""2026-01-01T00:00:00Z: the harness's wall clock reads ``EPOCH + trio.current_time()``."""

SHUTDOWN_GRACE = 60.0
"""Mock seconds a closing harness waits for a session to wind down before cancelling it."""

WATCHDOG = 30 * 24 * 3600.0
"""Default mock seconds after which a harness gives up (see :class:`HarnessTimeout`)."""


class HarnessTimeout(Exception):
    """The harness was still open after its watchdog's mock time: most likely a deadlock.

    Under an autojump clock a deadlock would otherwise spin forever (the clock has nowhere
    to jump); the watchdog's deadline gives it somewhere, so a deadlocked test fails at once.
    """


async def _watchdog(limit: float) -> None:
    await trio.sleep(limit)
    raise HarnessTimeout(
        f"the harness was still open after {limit:g} s of mock time: is the test deadlocked "
        "(waiting for something nothing will ever do)?"
    )


def pinned_wall_clock(epoch: float = EPOCH) -> Callable[[], float]:
    """A ``wall_clock`` for ``Server.open`` that is a pure function of Trio's (mock) time, so
    ``createdAt`` / ``lastUpdatedAt`` are the same on every run."""

    def wall_clock() -> float:
        return epoch + trio.current_time()

    return wall_clock


class Pending(Generic[T]):
    """A call running in the background of the harness (see :meth:`Harness.spawn`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._done = trio.Event()
        self._outcome: outcome.Outcome[T] | None = None

    @property
    def done(self) -> bool:
        return self._outcome is not None

    @property
    def outcome(self) -> outcome.Outcome[T] | None:
        return self._outcome

    @property
    def error(self) -> BaseException | None:
        """What the call raised (None while running or if it returned)."""
        return self._outcome.error if isinstance(self._outcome, outcome.Error) else None

    def result(self) -> T:
        """The call's return value (or its exception, raised); it must be done."""
        if self._outcome is None:
            raise RuntimeError(f"{self.name} is still running")
        return self._outcome.unwrap()

    async def wait(self) -> T:
        """Wait for the call to finish; return its value or raise its exception."""
        await self._done.wait()
        return self.result()

    async def _run(self, fn: Callable[..., Awaitable[T]], args: tuple[Any, ...]) -> None:
        result: outcome.Outcome[T] = await outcome.acapture(fn, *args)
        if isinstance(result, outcome.Error) and isinstance(result.error, trio.Cancelled):
            result.unwrap()  # propagate: the harness is closing
        self._outcome = result
        self._done.set()


class Harness:
    """A running server with a connected client, in memory, on the current (mock) clock.

    Create one with :func:`open_harness` (or the ``mcp_harness`` pytest fixture).
    """

    client: Client
    """The first client, connected and initialised."""
    link: Link
    """The first client's link (see :mod:`trio_mcp.testing.faults`)."""

    def __init__(
        self,
        server: Server,
        runtime: ServerRuntime,
        trace: Trace,
        monitor: WorkMonitor,
        nursery: trio.Nursery,
    ) -> None:
        self.server = server
        """The server as served: a copy of yours whose tools report to :attr:`monitor`."""
        self.runtime = runtime
        self.trace = trace
        self.monitor = monitor
        self._nursery = nursery
        self._links = 0
        self.links: list[Link] = []

    # -- time -----------------------------------------------------------------------------
    async def settle(self) -> None:
        """Return once every other Trio task is blocked: the server is quiescent, so what you
        assert now is a stable state. Mock time does not move while settling."""
        await trio.testing.wait_all_tasks_blocked()

    async def advance(self, seconds: float) -> None:
        """Let ``seconds`` of mock time pass (timers fire on the way, in order), then settle."""
        await trio.sleep(seconds)
        await self.settle()

    @property
    def now(self) -> float:
        """The current Trio (mock) time in seconds."""
        return trio.current_time()

    # -- connections ----------------------------------------------------------------------
    @asynccontextmanager
    async def connect(
        self,
        *,
        owner: str | None = None,
        faults: Faults | None = None,
        initialize: bool = True,
        **client_options: Any,
    ) -> AsyncIterator[Client]:
        """Connect one more client (its own session). ``owner`` binds its tasks to an identity
        (default: the connection); ``faults`` apply to its link; ``client_options`` (such as
        ``on_elicit`` / ``on_sample``) go to :func:`trio_mcp.connect`."""
        self._links += 1
        link = Link(f"link-{self._links}", self.trace, faults)
        self.links.append(link)
        async with trio.open_nursery() as nursery:
            await nursery.start(link.run)
            nursery.start_soon(functools.partial(self.runtime.serve, link.server_transport, owner=owner))
            try:
                async with connect(link.client_transport, initialize=initialize, **client_options) as client:
                    yield client
            finally:
                # The client hung up; the session sees it and winds down on its own.
                nursery.cancel_scope.deadline = trio.current_time() + SHUTDOWN_GRACE

    def drop(self, link: Link | None = None) -> None:
        """Cut the first client's connection (or ``link``'s) now."""
        (link or self.link).drop()

    def hold_tools(self, *tools: str, tasks_only: bool = False) -> trio.Event:
        """Calls of ``tools`` (all tools if none are named; only task-augmented calls when
        ``tasks_only``) made from now on wait before they start until the returned event is
        set; their checkpoints are counted from the release. Lets a test park ``tasks/result``
        waiters, or arrange any state, before the work begins."""
        gate = Gate(trio.Event(), frozenset(tools), tasks_only)
        self.monitor.gates.append(gate)
        return gate.event

    # -- background calls -----------------------------------------------------------------
    def spawn(self, fn: Callable[..., Awaitable[T]], *args: Any, name: str | None = None) -> Pending[T]:
        """Run ``fn(*args)`` in the background; returns a :class:`Pending` handle.

        >>> # waiter = harness.spawn(harness.client.task_result, task_id)
        """
        pending: Pending[T] = Pending(name if name is not None else str(getattr(fn, "__name__", repr(fn))))
        self._nursery.start_soon(pending._run, fn, args, name=pending.name)
        return pending

    # -- tasks ----------------------------------------------------------------------------
    async def start_task(
        self,
        tool: str,
        arguments: dict[str, Any] | None = None,
        *,
        ttl_ms: int | None = None,
        on_progress: ProgressCallback | None = None,
        client: Client | None = None,
    ) -> str:
        """Call ``tool`` as a task; return its (raw) task id. In the modern era (a client opened
        with ``protocol="2026-07-28"``) the server decides: the call must come back as a task
        (a ``"required"`` tool, or one still running after the auto-task window); ``ttl_ms``
        does not exist there."""
        caller = client or self.client
        if caller.modern:
            started = await caller.start_tool(tool, arguments, on_progress=on_progress)
            if not isinstance(started, DetailedTask):
                raise AssertionError(f"the server answered {tool!r} with a result, not a task")
            return started.task_id
        created = await caller.call_tool_as_task(tool, arguments, ttl_ms=ttl_ms, on_progress=on_progress)
        return created.task.task_id

    def task_id(self, task: str) -> str:
        """The raw id of a task given as an alias (``"task-1"``) or raw id."""
        return self.trace.raw_id(task)

    def actor(self, task: str) -> TaskActor | None:
        """The live TaskActor of a task still running (None once it is only a stored record)."""
        return self.runtime.supervisor.actor(self.task_id(task))

    def work(self, task: str) -> Work | None:
        """The monitor's record of the task's work (None before it starts)."""
        return self.monitor.work_for_task(self.task_id(task))

    def checkpoints(self, task: str) -> list[Checkpoint]:
        """Checkpoints the task's work has passed so far."""
        work = self.work(task)
        return list(work.checkpoints) if work is not None else []

    def status(self, task: str) -> str | None:
        """The task's status as the server holds it now (None once it was removed)."""
        actor = self.actor(task)
        if actor is not None:
            return actor.status.value
        events = self.trace.for_task(task)
        if any(e.kind in ("task.expired", "task.removed") for e in events):
            return None
        statuses = self.trace.statuses(task)
        return statuses[-1] if statuses else None


@asynccontextmanager
async def open_harness(
    server: Server,
    *,
    faults: Faults | None = None,
    owner: str | None = None,
    epoch: float = EPOCH,
    trace: Trace | None = None,
    initialize: bool = True,
    require_mock_clock: bool = True,
    watchdog: float | None = WATCHDOG,
    **client_options: Any,
) -> AsyncIterator[Harness]:
    """Serve ``server`` and connect a client to it in memory; yields a :class:`Harness`.

    Run it under ``trio.testing.MockClock(autojump_threshold=0)`` (the pytest fixtures and
    :func:`trio_mcp.testing.run` do): sleeps, poll intervals and TTLs then take no real time.
    Tasks are stamped with ``epoch + trio.current_time()``. ``faults`` apply to the first
    client's link and to ``server``'s tools; ``client_options`` (``on_elicit``, ``on_sample``)
    go to the first client. After ``watchdog`` seconds of mock time the harness fails with
    :class:`HarnessTimeout` (None: never).
    """
    clock = trio.lowlevel.current_clock()
    if require_mock_clock and not isinstance(clock, trio.testing.MockClock):
        raise RuntimeError(
            "open_harness needs a trio.testing.MockClock (autojump_threshold=0): run under "
            "trio_mcp.testing.run(), or request the `mcp_clock` / `autojump_clock` fixture"
        )
    trace = trace if trace is not None else Trace()
    monitor = WorkMonitor()
    served = instrument_server(server, monitor, faults)
    trio.lowlevel.add_instrument(monitor)
    try:
        async with (
            served.open(tracer=trace, wall_clock=pinned_wall_clock(epoch)) as runtime,
            trio.open_nursery() as nursery,
        ):
            harness = Harness(served, runtime, trace, monitor, nursery)
            if watchdog is not None:
                nursery.start_soon(_watchdog, watchdog, name="trio_mcp.testing watchdog")
            async with harness.connect(
                owner=owner, faults=faults, initialize=initialize, **client_options
            ) as client:
                harness.client = client
                harness.link = harness.links[0]
                await harness.settle()  # the handshake is over on both sides
                yield harness
            nursery.cancel_scope.cancel()
    finally:
        trio.lowlevel.remove_instrument(monitor)
