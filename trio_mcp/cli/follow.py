"""Creating a task and following it to the end, with a live progress display.

The display (on stderr) is fed by ``notifications/progress`` (the bar: a percentage when the
server gives a total, a pulsing bar and spinner when it does not), by
``notifications/tasks/status`` and by polling ``tasks/get`` at the server's ``pollInterval``
(the status and its message), and shows the elapsed time. On a terminal it is a rich
progress bar; on a pipe it is one line per status change; with ``display="none"`` nothing.

Ctrl-C while following (or while the task is being created) sends ``tasks/cancel`` and
reports the final status; a second Ctrl-C stops without waiting.

The display pauses while a question is asked at the terminal (see ``LiveDisplays``): its last
frame stays above the prompt, and it goes on below once the question is answered.
"""

from __future__ import annotations

from typing import Any, Literal

import trio
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
)
from rich.progress import Task as ProgressTask
from rich.spinner import Spinner
from rich.text import Text

from ..client import Client
from ..protocol.errors import McpError
from ..protocol.messages import CallToolResult, CreateTaskResult, ProgressParams, Task
from ..protocol.tasks import TaskStatus
from .render import STATUS_STYLES, LiveDisplays, status_text
from .runner import Interrupts

__all__ = ["CANCEL_TIMEOUT", "Display", "TaskFollower"]

Display = Literal["auto", "live", "lines", "none"]

CANCEL_TIMEOUT = 10.0
"""Seconds to wait for the answer to ``tasks/cancel`` after Ctrl-C."""

REFRESH_INTERVAL = 0.1
_SYMBOLS = {"completed": "✔", "failed": "✘", "cancelled": "■"}


class _StateColumn(ProgressColumn):
    """A spinner while the task runs; a mark for how it ended."""

    def __init__(self) -> None:
        super().__init__()
        self._spinner = Spinner("dots", style="cyan")

    def render(self, task: ProgressTask) -> Any:
        status = task.fields.get("state", "working")
        if status in _SYMBOLS:
            return Text(_SYMBOLS[status], style=STATUS_STYLES[status])
        return self._spinner.render(task.get_time())


class TaskFollower:
    """One task of ``client``, from ``tools/call`` with ``task`` to its terminal status.

    Use :meth:`create`, then :meth:`follow`. Install :meth:`request_cancel` as the interrupt
    handler (``interrupts`` does this) so that Ctrl-C cancels the task rather than the command.
    """

    def __init__(
        self,
        client: Client,
        *,
        label: str,
        err: Console,
        display: Display = "auto",
        interrupts: Interrupts | None = None,
        displays: LiveDisplays | None = None,
    ) -> None:
        self.client = client
        self.displays = displays if displays is not None else LiveDisplays()
        self.label = label
        self.err = err
        if display == "auto":
            display = "live" if err.is_terminal and not err.is_dumb_terminal else "lines"
        self.display: Display = display
        self.interrupts = interrupts
        self.task: Task | None = None
        self.progress: float | None = None
        self.total: float | None = None
        self.progress_message: str | None = None
        self.cancel_requested = False
        self._early: dict[str, Task] = {}
        self._terminal = trio.Event()
        self._scope: trio.CancelScope | None = None
        self._printed: tuple[str, str | None] | None = None

    # -- feeds ------------------------------------------------------------------------------
    def on_progress(self, params: ProgressParams) -> None:
        self.progress = params.progress
        self.total = params.total
        if params.message:
            self.progress_message = params.message

    def on_status(self, task: Task) -> None:
        if self.task is None:
            self._early[task.task_id] = task  # arrived before the tools/call answer
        elif task.task_id == self.task.task_id:
            self._update(task)

    def _update(self, task: Task) -> None:
        assert self.task is not None
        if self.task.status.is_terminal and not task.status.is_terminal:
            return  # a stale poll answer overtaken by the terminal notification
        self.task = task
        if task.status.is_terminal:
            self._terminal.set()
        if self.display == "lines" and not self.displays.paused:
            self._print_line()  # (while a question is open, the next poll after it prints it)

    def request_cancel(self) -> None:
        """Ask for the task to be cancelled (now, or as soon as it has been created)."""
        self.cancel_requested = True
        if self._scope is not None:
            self._scope.cancel()

    # -- the work ---------------------------------------------------------------------------
    async def create(
        self, name: str, arguments: dict[str, Any], *, ttl_ms: int | None = None
    ) -> Task | CallToolResult:
        """Send ``tools/call`` as a task. Ctrl-C from here on cancels the task.

        In the modern era the server decides: it may answer with the result at once (returned
        as it is, and nothing is followed)."""
        if self.interrupts is not None:
            self.interrupts.handler = self.request_cancel
        self.client.status_callbacks.append(self.on_status)
        if self.client.modern:
            started = await self.client.start_tool(name, arguments, on_progress=self.on_progress)
            if isinstance(started, CallToolResult):
                self.detach()
                return started
            created = CreateTaskResult(task=started.as_task())
        else:
            created = await self.client.call_tool_as_task(
                name, arguments, ttl_ms=ttl_ms, on_progress=self.on_progress
            )
        self.task = created.task
        self._printed = (created.task.status.value, None)  # the caller reports the creation
        if created.task.status.is_terminal:
            self._terminal.set()
        return created.task

    def detach(self) -> None:
        """Stop listening (e.g. after ``--detach``): Ctrl-C goes back to stopping the command."""
        if self.interrupts is not None and self.interrupts.handler == self.request_cancel:
            self.interrupts.handler = None
        if self.on_status in self.client.status_callbacks:
            self.client.status_callbacks.remove(self.on_status)

    async def follow(self, *, cancel_after: float | None = None) -> Task:
        """Follow the created task until it is terminal and return its last state.

        If a cancel was requested (Ctrl-C, or ``cancel_after`` seconds passed), send
        ``tasks/cancel`` and return the state that answered it (``cancelled``, or the terminal
        status the task reached first).
        """
        assert self.task is not None, "create() first"
        early = self._early.pop(self.task.task_id, None)
        self._early.clear()
        if early is not None:
            self._update(early)
        try:
            if self.display == "live":
                progress = self._progress()
                row = progress.add_task(escape(self.label), total=None, status="", state="working")

                def render() -> None:
                    self._render(progress, row)

                with self.displays.live(progress, before_pause=render):
                    await self._run(cancel_after, render)
                    if self.cancel_requested:
                        await self._cancel(render)
                    render()
            else:
                await self._run(cancel_after, None)
                if self.cancel_requested:
                    await self._cancel(None)
                if self.display == "lines":
                    self._print_line()
        finally:
            self.detach()
        return self.task

    def _progress(self) -> Progress:
        return Progress(
            _StateColumn(),
            TextColumn("[bold]{task.description}"),
            BarColumn(bar_width=30),
            TaskProgressColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}", markup=False),
            console=self.err,
            auto_refresh=False,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    async def _run(self, cancel_after: float | None, render: Any) -> None:
        if self.cancel_requested:
            return
        with trio.CancelScope() as scope:
            self._scope = scope
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._poll)
                if render is not None:
                    nursery.start_soon(self._render_loop, render)
                if cancel_after is not None:
                    nursery.start_soon(self._cancel_later, cancel_after)
                await self._terminal.wait()
                nursery.cancel_scope.cancel()
        self._scope = None

    async def _poll(self) -> None:
        assert self.task is not None
        while True:
            interval = self.task.poll_interval if self.task.poll_interval is not None else 1000
            task = await self.client.get_task(self.task.task_id)
            self._update(task)
            if task.status.is_terminal:
                return
            if task.status == TaskStatus.INPUT_REQUIRED and self.client.modern:
                if await self.client.answer_task_input(task.task_id):
                    continue  # answered: look again at once
            await trio.sleep(max(interval, 50) / 1000)

    async def _render_loop(self, render: Any) -> None:
        while True:
            render()
            await trio.sleep(REFRESH_INTERVAL)

    async def _cancel_later(self, seconds: float) -> None:
        await trio.sleep(seconds)
        self.request_cancel()

    async def _cancel(self, render: Any) -> None:
        assert self.task is not None
        task_id = self.task.task_id
        if not self.task.status.is_terminal:
            self.progress_message = "cancelling…"
            if render is not None:
                render()
            elif self.display == "lines":
                self.err.print(Text.assemble((task_id, "cyan"), " cancelling…"))
            with trio.move_on_after(CANCEL_TIMEOUT):
                try:
                    self._update(await self.client.cancel_task(task_id))
                except McpError:
                    # It reached a terminal status first (or is gone): report what it is.
                    try:
                        self._update(await self.client.get_task(task_id))
                    except McpError:
                        pass

    # -- display ----------------------------------------------------------------------------
    def _describe(self) -> str:
        assert self.task is not None
        message = self.task.status_message or self.progress_message
        if self.task.status.is_terminal:
            message = self.task.status_message
        status = self.task.status.value
        if self.total is None and self.progress is not None and not self.task.status.is_terminal:
            status = f"{status} ({self.progress:g} so far)"  # no total: the bar only pulses
        return f"{status} · {message}" if message else status

    def _render(self, progress: Progress, row: Any) -> None:
        assert self.task is not None
        status = self.task.status
        total = self.total
        completed = self.progress or 0.0
        if status == TaskStatus.COMPLETED:
            total = total if total is not None else 1.0
            completed = total
        progress.update(row, total=total, completed=completed, status=self._describe(), state=status.value)
        if status.is_terminal:
            progress.stop_task(row)
        if not self.displays.paused:
            progress.refresh()

    def _print_line(self) -> None:
        assert self.task is not None
        key = (self.task.status.value, None)
        if key == self._printed:
            return
        self._printed = key
        line = Text.assemble((self.task.task_id, "cyan"), " ", status_text(self.task.status.value))
        if self.task.status_message:
            line.append(f" - {self.task.status_message}")
        self.err.print(line)
