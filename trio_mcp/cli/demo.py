"""``trio-mcp demo``: the tour of ``examples/demo_client.py``, with rich output.

The demo server runs as a child process (``trio-mcp serve SERVER`` over stdio); everything
goes through the same client code as ``trio-mcp call --task``.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.text import Text

from ..client import Client
from ..protocol.errors import McpError
from ..protocol.messages import CallToolResult, DetailedTask, ElicitRequestParams, ElicitResult, Task
from ..protocol.versions import MODERN_VERSIONS
from .errors import ExitCode
from .follow import TaskFollower
from .parsing import format_duration_ms
from .render import result_lines, stdout_console, task_line, tasks_table, tools_table
from .runner import Interrupts, open_target

__all__ = ["run_demo"]

SLEEP_SECONDS = 2.0
BATCH_SECONDS = 1.0
CANCEL_AFTER = 1.2


def _explain(out: Console, text: str) -> None:
    out.print(Text(text, style="dim italic"))


def _result(out: Console, label: str, value: Any) -> None:
    out.print(Text.assemble(("  → ", "bold"), (f"{label}: ", "bold"), str(value)))


def _error(out: Console, label: str, exc: McpError) -> None:
    out.print(
        Text.assemble(
            ("  → ", "bold"), (f"{label}: ", "bold"), (f"error {exc.code}", "red"), f": {exc.message}"
        )
    )


async def _answer(request: ElicitRequestParams) -> ElicitResult:
    """The demo answers the server's question itself (`trio-mcp call` asks at the terminal)."""
    return ElicitResult(action="accept", content={"answer": "trio"})


async def run_demo(spec: str, interrupts: Interrupts, *, pace: float = 1.0) -> int:
    """The tour; ``pace`` multiplies its durations."""
    out = stdout_console()
    command = shlex.join([sys.executable, "-m", "trio_mcp.cli", "serve", spec])
    out.rule("[bold]trio-mcp demo[/]")
    out.print(Text.assemble("Starting the demo server over stdio: ", ("trio-mcp serve " + spec, "bold")))
    async with open_target(command, connect_timeout=30.0, on_elicit=_answer) as client:
        code = await _tour(client, out, interrupts, pace)
    if code == ExitCode.OK:
        async with open_target(
            command, connect_timeout=30.0, on_elicit=_answer, protocol=MODERN_VERSIONS[0]
        ) as client:
            code = await _modern_tour(client, out, pace)
    if code == ExitCode.OK:
        out.rule()
        exe = command_name()
        out.print("Done. Try it yourself:")
        out.print(f'  {exe} call "{exe} serve {spec}" sleep seconds=5 --task', soft_wrap=True)
        if exe != "trio-mcp":
            bin_dir = os.path.dirname(exe)
            out.print(f"  (or `source {bin_dir}/activate` first; then it is `trio-mcp`)", soft_wrap=True)
    return code


def command_name() -> str:
    """How to run ``trio-mcp`` from this shell: the bare name when it is on PATH and is this
    installation's, else the path of this environment's script (relative to the current
    directory when inside it), e.g. ``.venv/bin/trio-mcp`` after ``make demo``."""
    script = os.path.join(os.path.dirname(sys.executable), "trio-mcp")
    found = shutil.which("trio-mcp")
    if found is not None and os.path.realpath(found) == os.path.realpath(script):
        return "trio-mcp"
    relative = os.path.relpath(script)
    return relative if not relative.startswith("..") else script


async def _follow(
    client: Client, out: Console, interrupts: Interrupts, tool: str, arguments: dict[str, Any], **follow: Any
) -> tuple[TaskFollower, Any]:
    label = f"{tool} " + " ".join(f"{k}={v}" for k, v in arguments.items())
    follower = TaskFollower(client, label=label, err=out, interrupts=interrupts)
    created = await follower.create(tool, arguments)
    assert isinstance(created, Task), "the demo's handshake-era calls always create tasks"
    out.print(
        Text.assemble(
            "  created ",
            task_line(created),
            f" (ttl {format_duration_ms(created.ttl)},"
            f" poll every {format_duration_ms(created.poll_interval)})",
        )
    )
    final = await follower.follow(**follow)
    return follower, final


async def _tour(client: Client, out: Console, interrupts: Interrupts, pace: float) -> int:
    assert client.server is not None
    info = client.server
    out.print(
        Panel(
            Text.assemble(
                ("Connected to ", ""),
                (f"{info.server_info.name} {info.server_info.version}", "bold"),
                f", protocol {info.protocol_version}\n",
                (info.instructions or "", "dim"),
            ),
            expand=False,
        )
    )
    out.print(tools_table(await client.list_tools()))

    out.rule("1. Create a task and follow it")
    _explain(
        out,
        "tools/call with a `task` field answers at once with the task; progress notifications "
        "drive the bar, and tasks/get (every pollInterval) plus notifications/tasks/status give "
        "the status message.",
    )
    follower, final = await _follow(
        client, out, interrupts, "sleep", {"seconds": round(SLEEP_SECONDS * pace, 3)}
    )
    if follower.cancel_requested:
        return int(interrupts.exit_code)
    _result(out, "tasks/result", repr((await client.task_result(final.task_id)).text))

    out.rule("2. Create a task and await its result")
    _explain(out, "batch_job has taskSupport 'required'; tasks/result blocks until the task is done.")
    job = await client.call_tool_as_task("batch_job", {"seconds": round(BATCH_SECONDS * pace, 3)})
    out.print(Text.assemble("  created ", task_line(job.task)))
    with out.status("waiting on tasks/result…"):
        result = await client.task_result(job.task.task_id)
    _result(out, "tasks/result", repr(result.text))

    out.rule("3. Cancel a running task")
    _explain(
        out,
        f"An hour-long sleep, cancelled with tasks/cancel after {CANCEL_AFTER * pace:g}s: the work stops.",
    )
    follower, final = await _follow(
        client, out, interrupts, "sleep", {"seconds": 3600}, cancel_after=CANCEL_AFTER * pace
    )
    if interrupts.signalled:
        return int(interrupts.exit_code)
    out.print(Text.assemble(("  → ", "bold"), ("tasks/cancel: ", "bold"), task_line(final)))
    try:
        await client.cancel_task(final.task_id)
    except McpError as exc:
        _error(out, "cancelling it again", exc)
    try:
        await client.task_result(final.task_id)
    except McpError as exc:
        _error(out, "its tasks/result", exc)

    out.rule("4. A failing tool, and the taskSupport rules")
    follower, final = await _follow(client, out, interrupts, "fail", {"message": "something broke"})
    if follower.cancel_requested:
        return int(interrupts.exit_code)
    failed = await client.task_result(final.task_id)
    _result(out, "tasks/result", f"isError={failed.is_error}: {' '.join(result_lines(failed))}")
    added = await client.call_tool("add", {"a": 2, "b": 3})
    _result(out, "add a=2 b=3 (taskSupport forbidden), a plain call", added.text)
    try:
        await client.call_tool_as_task("add", {"a": 1, "b": 1})
    except McpError as exc:
        _error(out, "add as a task", exc)
    try:
        await client.call_tool("batch_job", {"seconds": 1})
    except McpError as exc:
        _error(out, "batch_job without a task", exc)

    out.rule("5. A task that needs input (elicitation)")
    _explain(out, "ask elicits an answer from us: the task is input_required until we reply.")
    asking = await client.call_tool_as_task("ask", {"question": "Which async library?"})
    immediate = (asking.meta or {}).get("io.modelcontextprotocol/model-immediate-response")
    _result(out, "model-immediate-response", immediate)
    _result(out, "tasks/get", task_line(await client.poll_task(asking.task.task_id)))
    _result(out, "tasks/result", (await client.task_result(asking.task.task_id)).text)

    out.rule("6. tasks/list")
    out.print(tasks_table([task async for task in client.all_tasks()]))
    return ExitCode.OK


async def _modern_tour(client: Client, out: Console, pace: float) -> int:
    """The same server in MCP 2026-07-28: no handshake, the tasks extension, input without
    server-to-client requests."""
    out.rule("7. MCP 2026-07-28: the server decides what becomes a task")
    discovery = client.discovery or {}
    _explain(
        out,
        "A second connection, with no initialize: every request carries its envelope in _meta. "
        f"server/discover says: versions {discovery.get('supportedVersions')}, extensions "
        f"{sorted(discovery.get('capabilities', {}).get('extensions', {}))}.",
    )
    quick = await client.start_tool("echo", {"text": "fast calls stay plain"})
    assert isinstance(quick, CallToolResult)
    _result(out, "echo (done within the window)", quick.text)
    # Longer than the demo server's auto-task window (1 s) whatever the pace.
    slow = await client.start_tool("sleep", {"seconds": max(round(SLEEP_SECONDS * pace, 3), 1.5)})
    assert isinstance(slow, DetailedTask)
    out.print(Text.assemble("  still running after the window, so a task: ", task_line(slow.as_task())))
    with out.status("polling tasks/get…"):
        _result(out, "its result (tasks/get, inline)", (await client.task_result(slow.task_id)).text)
    asking = await client.start_tool("ask", {"question": "Which async library?"})
    assert isinstance(asking, DetailedTask)
    detailed = await client.get_detailed_task(asking.task_id)
    _result(
        out,
        "ask asked for input at once",
        f"{detailed.status.value}, inputRequests {list(detailed.input_requests or {})}",
    )
    _result(out, "answered with tasks/update", (await client.task_result(asking.task_id)).text)
    return ExitCode.OK
