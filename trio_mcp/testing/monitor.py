"""Watching tool work at the level of Trio checkpoints, with Trio's public instrumentation API.

The harness serves a *copy* of your :class:`~trio_mcp.Server` whose tools are wrapped: when a
tool starts, the wrapper registers the Trio task running it (for a task-augmented call, the
task the supervisor spawns for ``TaskActor.run_work``; for a plain call, the session's request task)
with a :class:`WorkMonitor`. The monitor is a :class:`trio.abc.Instrument`:

- ``after_task_step`` of a watched task means the work just suspended at a checkpoint: it is
  counted, and located (file, line, function) with :meth:`trio.lowlevel.Task.iter_await_frames`;
- ``task_spawned`` / ``task_exited`` keep the set of live Trio tasks, to find leftovers.

Only checkpoints taken while the tool function is on the stack are counted, so a tool's
checkpoints are numbered 1, 2, 3, … from its first suspension, the same way on every run.
"""

from __future__ import annotations

import copy
import linecache
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import trio

import trio_mcp

from ..server import Context, RegisteredTool, Server
from .faults import Faults, ToolFault

__all__ = ["Checkpoint", "Gate", "Work", "WorkMonitor", "instrument_server"]

_CTX_KEY = "__trio_mcp_testing_ctx__"
_SKIP_DIRS = tuple(os.path.dirname(m.__file__ or "") + os.sep for m in (trio, trio_mcp))


@attrs.frozen
class Checkpoint:
    """Where a tool's work suspended: its ``number`` (1-based) and the innermost frame of your
    code (outside Trio and trio-mcp) at that moment."""

    number: int
    time: float
    filename: str
    lineno: int
    function: str

    @property
    def line(self) -> str:
        """The source line of the checkpoint, stripped."""
        return linecache.getline(self.filename, self.lineno).strip()

    @property
    def where(self) -> str:
        return f"{os.path.basename(self.filename)}:{self.lineno} in {self.function}"

    def __str__(self) -> str:
        return f"checkpoint {self.number} at {self.where}: {self.line}"


@attrs.define(eq=False)
class Work:
    """One run of one tool, as the monitor saw it."""

    tool: str
    task_id: str | None
    """The MCP task id (raw) of a task-augmented call; None for a plain call."""
    trio_task: trio.lowlevel.Task
    checkpoints: list[Checkpoint] = attrs.Factory(list)
    finished: bool = False
    error: BaseException | None = None
    """What the tool function raised (``trio.Cancelled`` included), if anything."""


CheckpointHook = Callable[[Work, Checkpoint], None]


@attrs.frozen
class Gate:
    """Holds the start of the named tools (all when ``tools`` is empty; only task-augmented
    calls when ``tasks_only``) until ``event`` is set."""

    event: trio.Event
    tools: frozenset[str] = frozenset()
    tasks_only: bool = False

    def holds(self, tool: str, task_id: str | None) -> bool:
        if self.event.is_set():
            return False
        if self.tools and tool not in self.tools:
            return False
        return task_id is not None or not self.tasks_only


class WorkMonitor(trio.abc.Instrument):
    """Counts and locates the checkpoints of tool work; tracks live Trio tasks.

    ``on_checkpoint(work, checkpoint)`` hooks run synchronously when the work has just
    suspended, before any other task runs: the right moment to inject a cancellation.
    """

    def __init__(self) -> None:
        self.works: list[Work] = []
        self.hooks: list[CheckpointHook] = []
        self.hook_errors: list[BaseException] = []
        self.gates: list[Gate] = []
        """Tools matching a gate wait, before they start, until its event is set (uncounted)."""
        self._watched: dict[trio.lowlevel.Task, Work] = {}
        self._live: dict[trio.lowlevel.Task, None] = {}

    # -- instrument hooks -----------------------------------------------------------------
    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self._live[task] = None

    def task_exited(self, task: trio.lowlevel.Task) -> None:
        self._live.pop(task, None)
        work = self._watched.pop(task, None)
        if work is not None:
            work.finished = True

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        work = self._watched.get(task)
        if work is None:
            return
        checkpoint = _locate(task, len(work.checkpoints) + 1)
        work.checkpoints.append(checkpoint)
        for hook in list(self.hooks):
            try:
                hook(work, checkpoint)
            except BaseException as exc:  # never let Trio drop the instrument
                self.hook_errors.append(exc)

    # -- queries --------------------------------------------------------------------------
    def live_tasks(self) -> list[trio.lowlevel.Task]:
        """Trio tasks spawned since the monitor was installed and not yet exited."""
        return list(self._live)

    def works_of(self, tool: str) -> list[Work]:
        return [w for w in self.works if w.tool == tool]

    def work_for_task(self, task_id: str) -> Work | None:
        for work in self.works:
            if work.task_id == task_id:
                return work
        return None

    # -- used by the tool wrapper ---------------------------------------------------------
    @contextmanager
    def watch(self, tool: str, task_id: str | None) -> Iterator[Work]:
        trio_task = trio.lowlevel.current_task()
        work = Work(tool, task_id, trio_task)
        self.works.append(work)
        self._watched[trio_task] = work
        try:
            yield work
        except BaseException as exc:
            work.error = exc
            raise
        finally:
            work.finished = True
            self._watched.pop(trio_task, None)


def _locate(task: trio.lowlevel.Task, number: int) -> Checkpoint:
    frames = list(task.iter_await_frames())
    chosen = None
    for frame, lineno in reversed(frames):
        if not frame.f_code.co_filename.startswith(_SKIP_DIRS):
            chosen = (frame, lineno)
            break
    if chosen is None and frames:
        chosen = frames[-1]
    if chosen is None:
        return Checkpoint(number, trio.current_time(), "?", 0, "?")
    frame, lineno = chosen
    return Checkpoint(number, trio.current_time(), frame.f_code.co_filename, lineno, frame.f_code.co_name)


def _plant_progress_faults(ctx: Context, faults: list[ToolFault]) -> None:
    """Make ``ctx.report_progress`` raise a planted error at its n-th call (on this instance
    only; everything else about the context is untouched)."""
    planted = [f for f in faults if f.at_progress is not None]
    if not planted:
        return
    report_progress = ctx.report_progress
    calls = 0

    async def faulty_report_progress(
        progress: float, total: float | None = None, message: str | None = None
    ) -> bool:
        nonlocal calls
        calls += 1
        for fault in planted:
            if fault.at_progress == calls:
                raise fault.error
        return await report_progress(progress, total, message)

    setattr(ctx, "report_progress", faulty_report_progress)  # noqa: B010 - shadow the method


def _wrap(registered: RegisteredTool, monitor: WorkMonitor, faults: Faults) -> RegisteredTool:
    fn = registered.fn
    name = registered.name
    context_param = registered.context_param
    tool_faults = faults.for_tool(name)
    at_checkpoint = [f for f in tool_faults if f.at_checkpoint is not None]

    async def wrapped(**kwargs: Any) -> Any:
        ctx: Context = kwargs.pop(_CTX_KEY)
        for gate in list(monitor.gates):
            if gate.holds(name, ctx.task_id):
                await gate.event.wait()
        if context_param is not None:
            _plant_progress_faults(ctx, tool_faults)
            kwargs[context_param] = ctx
        with monitor.watch(name, ctx.task_id) as work:
            if not at_checkpoint:
                return await fn(**kwargs)
            scope = trio.CancelScope()
            planted: list[BaseException] = []

            def inject(seen: Work, checkpoint: Checkpoint) -> None:
                if seen is work:
                    for fault in at_checkpoint:
                        if fault.at_checkpoint == checkpoint.number and not planted:
                            planted.append(fault.error)
                            scope.cancel()

            monitor.hooks.append(inject)
            try:
                with scope:
                    return await fn(**kwargs)
            finally:
                monitor.hooks.remove(inject)
                if planted and scope.cancelled_caught:
                    raise planted[0]

    wrapped.__name__ = getattr(fn, "__name__", name)
    wrapped.__qualname__ = getattr(fn, "__qualname__", name)
    return attrs.evolve(registered, fn=wrapped, context_param=_CTX_KEY)


def instrument_server(server: Server, monitor: WorkMonitor, faults: Faults | None = None) -> Server:
    """A shallow copy of ``server`` whose tools report to ``monitor`` (the original is left
    untouched; the wire description of every tool is the same)."""
    clone = copy.copy(server)
    plan = faults if faults is not None else Faults()
    clone.tools = {name: _wrap(tool, monitor, plan) for name, tool in server.tools.items()}
    return clone
