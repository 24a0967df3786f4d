"""Cancel-at-every-checkpoint exploration.

:func:`explore_cancellation` runs a scenario (call a tool as a task, wait for its result)
once to count the checkpoints its work passes, then once per checkpoint ``k``, cancelling the
task exactly when its work has suspended at checkpoint ``k``. After every run it checks:

- the task ended in exactly one terminal status, its last (``cancelled`` when it was cancelled,
  and it stays so: ``tasks/get`` still says so, a second ``tasks/cancel`` is refused);
- every ``tasks/result`` waiter was answered, and every request got its response;
- nothing is left behind once the TTL has passed: no TaskActor, no table entry (so no TTL
  timer), no Trio task the run spawned, and the work itself finished;
- the tool's own cleanup ran (a :class:`~trio_mcp.testing.CleanupProbe` is balanced);
- your own ``check``, if any.

Each run is a fresh ``trio.run`` on an autojump mock clock with deterministic scheduling, so a
failing ``k`` fails the same way every time. Call it from a plain (``def``) test.

Three ways to cancel at ``k`` (``via``):

``"cancel"`` (default)
    the task's actor handles a Cancel message at that very moment, exactly as its supervisor
    would for a ``tasks/cancel``; the work sees ``trio.Cancelled`` at checkpoint ``k``.
``"request"``
    the client sends a real ``tasks/cancel`` when the work reaches ``k``. It arrives a few
    scheduler steps later: exact when checkpoint ``k`` blocks (a sleep, a receive), and possibly
    later (or after completion) when ``k`` is a bare checkpoint the work passes straight through.
``"disconnect"``
    the connection drops at ``k``; the server removes the connection's tasks and cancels their
    work. (The task is removed rather than moved to a terminal status.)
"""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Awaitable, Callable, Sized
from typing import Any, Literal

import attrs
import trio

from ..actors.runtime import Reply
from ..actors.task_actor import Cancel
from ..protocol.errors import INVALID_PARAMS, McpError
from ..protocol.messages import Task
from ..protocol.records import TaskRecord
from ..protocol.tasks import TERMINAL, TaskStatus
from ..server import Server
from .determinism import DEFAULT_SEED, run
from .harness import WATCHDOG, Harness, Pending, open_harness
from .monitor import Checkpoint, Work
from .probe import CleanupProbe
from .trace import Event

__all__ = ["ExplorationFailed", "ExplorationReport", "ExplorationRun", "Via", "explore_cancellation"]

Via = Literal["cancel", "request", "disconnect"]
Check = Callable[[Harness, str], None]
Start = Callable[[Harness], Awaitable[str]]


@attrs.define
class ExplorationRun:
    """One run of the scenario: ``k`` is the checkpoint cancelled at (None: the baseline)."""

    k: int | None
    injected_at: Checkpoint | None
    statuses: list[str]
    checkpoints: list[Checkpoint]
    violations: list[str]
    trace: str

    @property
    def ok(self) -> bool:
        return not self.violations

    @property
    def label(self) -> str:
        if self.k is None:
            return "baseline run (no cancellation)"
        where = f" at {self.injected_at.where}: {self.injected_at.line}" if self.injected_at else ""
        return f"cancelled at checkpoint {self.k}{where}"

    def describe(self, *, with_trace: bool = True) -> str:
        lines = [f"{self.label}", f"  statuses: {' -> '.join(self.statuses) or '(none)'}"]
        lines += [f"  - {v}" for v in self.violations]
        if with_trace:
            lines.append("  trace:")
            lines += [f"    {line}" for line in self.trace.splitlines()]
        return "\n".join(lines)


@attrs.define
class ExplorationReport:
    """Every run of an exploration. ``checkpoints`` are those of the baseline run."""

    tool: str
    via: Via
    baseline: ExplorationRun
    runs: list[ExplorationRun]

    @property
    def checkpoints(self) -> list[Checkpoint]:
        return self.baseline.checkpoints

    @property
    def failures(self) -> list[ExplorationRun]:
        return [r for r in [self.baseline, *self.runs] if not r.ok]

    @property
    def failing_checkpoints(self) -> list[int]:
        return [r.k for r in self.runs if not r.ok and r.k is not None]

    @property
    def ok(self) -> bool:
        return not self.failures

    def run_at(self, k: int) -> ExplorationRun:
        for candidate in self.runs:
            if candidate.k == k:
                return candidate
        raise KeyError(k)

    def summary(self, *, with_traces: bool = True) -> str:
        head = (
            f"cancellation exploration of tool {self.tool!r} (via {self.via}): "
            f"{len(self.checkpoints)} checkpoint(s), {len(self.failures)} failing run(s)"
        )
        lines = [head]
        lines += [f"  {cp}" for cp in self.checkpoints]
        for failure in self.failures:
            lines.append("")
            lines.append(failure.describe(with_trace=with_traces))
        return "\n".join(lines)

    def assert_ok(self) -> None:
        """Raise :class:`ExplorationFailed` (naming each failing k, with its trace) unless every
        run kept every invariant."""
        if not self.ok:
            raise ExplorationFailed(self)


class ExplorationFailed(AssertionError):
    def __init__(self, report: ExplorationReport) -> None:
        super().__init__(report.summary())
        self.report = report


@attrs.frozen
class _Spec:
    server: Server
    tool: str
    arguments: dict[str, Any] | None
    via: Via
    probe: CleanupProbe | None
    check: Check | None
    ttl_ms: int | None
    waiters: int
    start: Start | None
    harness_options: dict[str, Any]


def explore_cancellation(
    server: Server,
    tool: str,
    arguments: dict[str, Any] | None = None,
    *,
    via: Via = "cancel",
    probe: CleanupProbe | None = None,
    check: Check | None = None,
    ttl_ms: int | None = None,
    waiters: int = 2,
    seed: int | None = DEFAULT_SEED,
    max_checkpoints: int = 1000,
    start: Start | None = None,
    harness_options: dict[str, Any] | None = None,
) -> ExplorationReport:
    """Cancel ``tool``'s task at each of its checkpoints in turn; return what every run saw.

    ``probe`` is reset before each run and must be balanced after it. ``check(harness,
    task_id)`` runs after the task ended in each run (raise ``AssertionError`` to fail it).
    ``waiters`` ``tasks/result`` requests wait on the task from the start. ``max_checkpoints``
    bounds the number of runs. ``start(harness)`` replaces the default way of starting the
    task (``harness.start_task(tool, arguments, ttl_ms=ttl_ms)``) and returns its id as soon as
    the task is created, for a scenario that needs some setup first; ``harness_options`` go to
    :func:`open_harness`.

    >>> # report = explore_cancellation(server, "upload", {"size": 3}, probe=probe)
    >>> # report.assert_ok()
    """
    spec = _Spec(
        server, tool, arguments, via, probe, check, ttl_ms, waiters, start, dict(harness_options or {})
    )
    baseline = run(_explore_once, spec, None, seed=seed)
    runs = [
        run(_explore_once, spec, k, seed=seed)
        for k in range(1, min(len(baseline.checkpoints), max_checkpoints) + 1)
    ]
    return ExplorationReport(tool, via, baseline, runs)


async def _explore_once(spec: _Spec, k: int | None) -> ExplorationRun:
    violations: list[str] = []
    injected: list[Checkpoint] = []
    replies: list[Reply[tuple[TaskRecord, bool]]] = []
    statuses: list[str] = []
    checkpoints: list[Checkpoint] = []
    trace_text = ""
    if spec.probe is not None:
        spec.probe.reset()
    ttl_ms = spec.ttl_ms if spec.ttl_ms is not None else spec.server.limits.grant_ttl(None)
    ttl = spec.server.limits.grant_ttl(ttl_ms) / 1000
    harness: Harness | None = None
    try:
        options: dict[str, Any] = {"watchdog": max(WATCHDOG, 3 * ttl + 3600), **spec.harness_options}
        async with open_harness(spec.server, **options) as harness:
            h = harness
            before = set(h.monitor.live_tasks())
            cancel_now = trio.Event()

            def inject(work: Work, checkpoint: Checkpoint) -> None:
                if k is None or injected or work.tool != spec.tool or checkpoint.number != k:
                    return
                injected.append(checkpoint)
                h.trace.record("fault.cancel", {"via": spec.via, "checkpoint": k, "at": checkpoint.where})
                if spec.via == "cancel":
                    actor = h.actor(work.task_id) if work.task_id is not None else None
                    if actor is None:
                        violations.append(f"checkpoint {k}: the task is no longer in the server's table")
                        return
                    reply: Reply[tuple[TaskRecord, bool]] = Reply()
                    replies.append(reply)
                    actor.receive(Cancel(reply))  # what its supervisor does with a routed Cancel
                elif spec.via == "request":
                    cancel_now.set()
                else:
                    h.link.drop(f"cancel exploration: checkpoint {k}")

            h.monitor.hooks.append(inject)
            gate = h.hold_tools(spec.tool, tasks_only=True)  # park the waiters before the work starts
            if spec.start is not None:
                task_id = await spec.start(h)
            else:
                task_id = await h.start_task(spec.tool, spec.arguments, ttl_ms=spec.ttl_ms)

            canceller: Pending[Task] | None = None
            if spec.via == "request":

                async def cancel_when_told() -> Task:
                    await cancel_now.wait()
                    return await h.client.cancel_task(task_id)

                canceller = h.spawn(cancel_when_told, name="tasks/cancel")
            waiting = [
                h.spawn(h.client.task_result, task_id, name=f"tasks/result #{i + 1}")
                for i in range(spec.waiters)
            ]
            await h.settle()
            gate.set()

            with trio.move_on_after(ttl + 1):
                await _ended(h, task_id)
                for waiter in waiting:
                    with contextlib.suppress(Exception):
                        await waiter.wait()
            await h.settle()

            # -- the task ended, once -------------------------------------------------------
            statuses = h.trace.statuses(task_id)
            terminal = [s for s in statuses if TaskStatus(s) in TERMINAL]
            removed = (
                any(e.kind == "task.removed" for e in h.trace.for_task(task_id)) and h.actor(task_id) is None
            )
            if spec.via == "disconnect" and k is not None:
                if len(terminal) > 1 or (terminal and statuses[-1] != terminal[0]):
                    violations.append(f"task went {' -> '.join(statuses)}: more than one terminal status")
                if not removed:
                    violations.append("the connection dropped but the task was not removed")
            elif len(terminal) != 1 or statuses[-1] != terminal[0]:
                violations.append(
                    f"task went {' -> '.join(statuses)}: expected exactly one terminal status, as its last"
                )
            elif k is not None and spec.via == "cancel" and terminal[0] != "cancelled":
                violations.append(f"task was cancelled at checkpoint {k} but ended {terminal[0]}")
            elif k is None and terminal[0] == "cancelled":
                violations.append("task ended cancelled though nothing cancelled it")

            # -- waiters ----------------------------------------------------------------------
            if spec.via != "disconnect" or k is None:
                for waiter in waiting:
                    if not waiter.done:
                        violations.append(f"{waiter.name} waiter was never answered")
                    elif waiter.error is not None and not isinstance(waiter.error, McpError):
                        violations.append(f"{waiter.name} waiter failed with {waiter.error!r}")
            for reply in replies:
                if not reply.answered:
                    violations.append("the Cancel was never answered")
            if canceller is not None and k is not None and injected:
                if not canceller.done:
                    violations.append("the tasks/cancel request was never answered")
                elif canceller.error is None and terminal and terminal[0] != "cancelled":
                    violations.append(f"tasks/cancel succeeded but the task ended {terminal[0]}")

            # -- it stays as it ended ---------------------------------------------------------
            if terminal and not h.link.dropped:
                task = await h.client.get_task(task_id)
                if task.status.value != terminal[0]:
                    violations.append(
                        f"tasks/get says {task.status.value} after the task ended {terminal[0]}"
                    )
                if h.client.modern:
                    # tasks/cancel is an acknowledgement in this era: it must change nothing.
                    after = await h.client.cancel_task(task_id)
                    if after.status.value != terminal[0]:
                        violations.append(
                            f"a late tasks/cancel turned a {terminal[0]} task {after.status.value}"
                        )
                else:
                    try:
                        await h.client.cancel_task(task_id)
                    except McpError as exc:
                        if exc.code != INVALID_PARAMS:
                            violations.append(
                                f"a late tasks/cancel failed with {exc.code}, expected {INVALID_PARAMS}"
                            )
                    else:
                        violations.append(f"a late tasks/cancel of a {terminal[0]} task succeeded")

            if spec.check is not None:
                try:
                    spec.check(h, task_id)
                except AssertionError as exc:
                    violations.append(f"check failed: {exc}")

            # -- nothing left behind once the TTL has passed --------------------------------
            await h.advance(ttl + 1)
            final = h.trace.statuses(task_id)
            if final != statuses:
                violations.append(f"the task changed after it ended: {' -> '.join(final)}")
            if not any(e.kind in ("task.expired", "task.removed") for e in h.trace.for_task(task_id)):
                violations.append("the task was never expired or removed")
            store = h.runtime.supervisor.store
            stored = len(store) if isinstance(store, Sized) else 0
            if stored or h.runtime.supervisor.actors:
                violations.append(f"{stored} task(s) left in the server's table")
            actors = [a for a in h.trace.running_actors() if a.startswith("TaskActor")]
            if actors:
                violations.append(f"actors left running: {', '.join(actors)}")
            work = h.work(task_id)
            if work is None:
                violations.append("the tool never started")
            else:
                checkpoints = list(work.checkpoints)
                if not work.finished:
                    violations.append("the tool's work is still running")
            spawned_here = {t for t in h.monitor.live_tasks() if t.parent_nursery is not h._nursery}
            left = sorted(t.name for t in spawned_here - before)
            if left:
                violations.append(f"Trio tasks left behind: {', '.join(left)}")
            if not h.link.dropped:
                for request in h.trace.unanswered_requests():
                    violations.append(
                        f"request never answered: {request.get('method')} (id {request.get('id')!r})"
                    )
            if spec.probe is not None and not spec.probe.balanced:
                violations.append(
                    f"cleanup did not run: {spec.probe.name!r} acquired {spec.probe.acquired}, "
                    f"released {spec.probe.released}"
                )
            if k is not None and not injected:
                violations.append(
                    f"the work passed only {len(checkpoints)} checkpoint(s) this time, never reaching {k}"
                )
            violations += [f"cancellation hook raised {e!r}" for e in h.monitor.hook_errors]
    except Exception as exc:
        violations += [f"the scenario raised: {_describe(leaf)}" for leaf in _leaves(exc)]
    if harness is not None:
        left_actors = harness.trace.running_actors()
        if left_actors:
            violations.append(f"actors still running after shutdown: {', '.join(left_actors)}")
        trace_text = harness.trace.dump()
    return ExplorationRun(k, injected[0] if injected else None, statuses, checkpoints, violations, trace_text)


async def _ended(h: Harness, task_id: str) -> None:
    """Wait until the task is terminal or gone from the table."""

    def over() -> bool:
        return h.trace.terminal_status(task_id) is not None or any(
            e.kind in ("task.expired", "task.removed") for e in h.trace.for_task(task_id)
        )

    def on_event(event: Event) -> None:
        if event.task_id == task_id and (
            event.kind in ("task.expired", "task.removed")
            or (event.kind == "task.transition" and TaskStatus(event.fields["status"]) in TERMINAL)
        ):
            ended.set()

    ended = trio.Event()
    unsubscribe = h.trace.subscribe(on_event)
    try:
        if not over():
            await ended.wait()
    finally:
        unsubscribe()


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _describe(exc: BaseException) -> str:
    return "".join(traceback.format_exception_only(exc)).strip()
