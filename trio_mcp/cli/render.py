"""How the command shows things: rich tables and messages on a terminal, plain text and JSON
for pipes.

Results go to **stdout** (text blocks as text, ``structuredContent`` as JSON), so they can be
piped; everything about the process (progress, status lines, errors) goes to **stderr**.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TextIO, TypeVar

from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..protocol.converter import unstructure
from ..protocol.messages import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    Task,
    TextContent,
    Tool,
)
from .errors import CliError
from .parsing import format_duration_ms, type_label

__all__ = [
    "STATUS_STYLES",
    "SUPPORT_STYLES",
    "LiveDisplay",
    "LiveDisplays",
    "dump_json",
    "parameters_label",
    "print_error",
    "print_result",
    "result_lines",
    "status_text",
    "stderr_console",
    "stdout_console",
    "task_line",
    "task_table",
    "tasks_table",
    "tools_table",
    "wire",
]

STATUS_STYLES = {
    "working": "bold blue",
    "input_required": "bold yellow",
    "completed": "bold green",
    "failed": "bold red",
    "cancelled": "bold magenta",
}
SUPPORT_STYLES = {"optional": "green", "required": "yellow", "forbidden": "dim"}


def stdout_console() -> Console:
    return Console(file=sys.stdout, highlight=False)


def stderr_console() -> Console:
    # soft_wrap: messages are not broken at the console width (logs and pipes keep whole lines).
    return Console(file=sys.stderr, highlight=False, soft_wrap=True)


class LiveDisplay(Protocol):
    """A rich live display: :class:`rich.progress.Progress` or :class:`rich.status.Status`."""

    def start(self) -> None: ...

    def stop(self) -> None: ...


D = TypeVar("D", bound=LiveDisplay)


class LiveDisplays:
    """The live displays (progress bar, spinner) on the terminal, so that a prompt can pause
    them: a rich ``Live`` redraws its lines over whatever the user is typing.

    Show a display with ``with displays.live(progress):`` instead of ``with progress:``; a
    prompt runs inside ``with displays.pause():``. A display shown during a pause starts when
    the pause ends. Code that refreshes a display itself checks :attr:`paused` first.
    """

    def __init__(self) -> None:
        self.paused = False
        self._shown: list[tuple[LiveDisplay, Callable[[], None] | None]] = []

    @contextlib.contextmanager
    def live(self, display: D, *, before_pause: Callable[[], None] | None = None) -> Iterator[D]:
        """Show ``display`` for the duration; ``before_pause`` brings it up to date before a
        pause freezes it (its last frame stays above the prompt)."""
        entry = (display, before_pause)
        if not self.paused:
            display.start()
        self._shown.append(entry)
        try:
            yield display
        finally:
            self._shown.remove(entry)
            display.stop()  # a no-op if it is paused

    @contextlib.contextmanager
    def pause(self) -> Iterator[None]:
        """Stop every live display for the duration (nested pauses are one pause)."""
        if self.paused:
            yield
            return
        for _, before_pause in self._shown:
            if before_pause is not None:
                before_pause()
        self.paused = True
        for display, _ in self._shown:
            display.stop()
        try:
            yield
        finally:
            self.paused = False
            for display, _ in self._shown:
                display.start()


def print_error(console: Console, error: CliError) -> None:
    if error.details:
        console.print(Text(error.details, style="dim"))
    console.print(Text.assemble(("Error: ", "bold red"), error.message))
    if error.hint:
        console.print(Text.assemble(("Hint: ", "bold"), error.hint))


def dump_json(value: Any, out: TextIO | None = None) -> None:
    """Machine-readable output: indented JSON, one document, newline-terminated."""
    (out or sys.stdout).write(json.dumps(value, indent=2, ensure_ascii=False) + "\n")
    (out or sys.stdout).flush()


def wire(value: Any) -> Any:
    """A protocol object as it appears on the wire (camelCase keys)."""
    return unstructure(value)


# ---------------------------------------------------------------------------------- tools


def parameters_label(tool: Tool) -> str:
    schema = tool.input_schema if isinstance(tool.input_schema, dict) else {}
    properties: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    parts = []
    for name, prop in properties.items():
        label = f"{name}: {type_label(prop)}"
        if name not in required:
            default = prop.get("default") if isinstance(prop, dict) else None
            label = f"{label} = {json.dumps(default)}" if default is not None else f"{label}?"
        parts.append(label)
    return ", ".join(parts) or "-"


def tools_table(tools: Iterable[Tool], *, title: str | None = None) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    table.add_column("Tool", style="bold cyan", no_wrap=True)
    table.add_column("Tasks", no_wrap=True)
    table.add_column("Parameters")
    table.add_column("Description")
    for tool in tools:
        support = tool.task_support
        description = (tool.description or tool.title or "").strip().splitlines()
        table.add_row(  # Text, not str: no rich markup in what the server sent ("array[number]")
            Text(tool.name),
            Text(support, style=SUPPORT_STYLES.get(support, "")),
            Text(parameters_label(tool)),
            Text(description[0] if description else ""),
        )
    return table


# ---------------------------------------------------------------------------------- tasks


def status_text(status: str) -> Text:
    return Text(status, style=STATUS_STYLES.get(status, "bold"))


def _age(timestamp: str, now: datetime.datetime | None = None) -> str:
    try:
        moment = datetime.datetime.fromisoformat(timestamp)
    except ValueError:
        return timestamp
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    now = now or datetime.datetime.now(datetime.UTC)
    seconds = max(0.0, (now - moment).total_seconds())
    if seconds < 1:
        return "just now"
    return f"{format_duration_ms(int(seconds) * 1000)} ago"


def task_line(task: Task) -> Text:
    """``<id> working - sleeping: step 3 of 10``."""
    line = Text.assemble((task.task_id, "cyan"), " ", status_text(task.status.value))
    if task.status_message:
        line.append(f" - {task.status_message}")
    return line


def task_table(task: Task) -> Table:
    table = Table(show_header=False, box=None, padding=(0, 2, 0, 0))
    table.add_column(style="bold")
    table.add_column()
    table.add_row("Task", Text(task.task_id, style="cyan"))
    table.add_row("Status", status_text(task.status.value))
    if task.status_message:
        table.add_row("Message", Text(task.status_message))
    table.add_row("Created", f"{task.created_at} ({_age(task.created_at)})")
    table.add_row("Updated", f"{task.last_updated_at} ({_age(task.last_updated_at)})")
    table.add_row("TTL", format_duration_ms(task.ttl))
    if task.poll_interval is not None:
        table.add_row("Poll every", format_duration_ms(task.poll_interval))
    return table


def tasks_table(tasks: Iterable[Task]) -> Table:
    table = Table()
    table.add_column("Task", style="cyan", no_wrap=True)
    table.add_column("Status", no_wrap=True)
    table.add_column("Message")
    table.add_column("Created", no_wrap=True)
    table.add_column("TTL", no_wrap=True, justify="right")
    for task in tasks:
        table.add_row(
            Text(task.task_id),
            status_text(task.status.value),
            Text(task.status_message or ""),
            _age(task.created_at),
            format_duration_ms(task.ttl),
        )
    return table


# -------------------------------------------------------------------------------- results


def _block_text(block: Any) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ImageContent | AudioContent):
        kind = "image" if isinstance(block, ImageContent) else "audio"
        return f"[{kind} {block.mime_type}, {len(block.data)} base64 characters]"
    if isinstance(block, ResourceLink):
        return f"[resource link {block.name}: {block.uri}]"
    if isinstance(block, EmbeddedResource):
        resource = block.resource
        text = resource.get("text")
        head = f"[resource {resource.get('uri', '?')}]"
        return f"{head}\n{text}" if isinstance(text, str) else head
    return json.dumps(wire(block))


def result_lines(result: CallToolResult) -> list[str]:
    """What to print for a result: its ``structuredContent`` as JSON, and its content blocks
    (a text block that only repeats the structured content as JSON is left out)."""
    lines: list[str] = []
    structured = result.structured_content
    if structured is not None:
        lines.append(json.dumps(structured, indent=2, ensure_ascii=False))
    for block in result.content:
        if structured is not None and isinstance(block, TextContent):
            try:
                if json.loads(block.text) == structured:
                    continue
            except ValueError:
                pass
        lines.append(_block_text(block))
    return lines


def print_result(
    result: CallToolResult, *, err: Console, tool: str | None = None, task: Task | None = None
) -> None:
    """A successful result to stdout; an ``isError`` one to stderr, marked as an error.

    The error names ``tool`` when it is known (``call``); else the ``task`` it is the result
    of (``tasks result``: ``tasks/get`` does not say which tool a task runs).
    """
    lines = result_lines(result)
    if result.is_error:
        message = "\n".join(lines) or "(no message)"
        if tool is not None:
            head = Text.assemble(("Error from tool ", "bold red"), (tool, "bold"), ": ")
        elif task is not None:
            head = Text.assemble(("Task ", "bold red"), (task.task_id, "cyan"), (" failed: ", "bold red"))
        else:
            head = Text("Error from the tool: ", style="bold red")
        err.print(Text.assemble(head, message))
        return
    if lines:
        sys.stdout.write("\n".join(lines) + "\n")
        sys.stdout.flush()
