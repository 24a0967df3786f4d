"""Reference MCP server (built on the ``mcp`` 1.x SDK) exposing the same tools as ``examples/demo_server.py``.

Run it as ``python tests/interop/reference_server.py``; it speaks MCP over stdio.

It is a stand-in peer for the interop tests: it lets ``test_mcp_sdk_client.py`` be validated against
the reference implementation, and lets our own client be tested against the reference server.

Tools (names and task support match the demo server):

* ``echo {text}``        -> the text as one text content block            (taskSupport "optional")
* ``sleep {seconds}``    -> sleeps, reporting progress, cancellable        (taskSupport "optional")
* ``fail {message}``     -> the tool raises: isError result / failed task  (taskSupport "optional")
* ``add {a, b}``         -> the sum as text                                (taskSupport "forbidden")
* ``batch_job {seconds}``-> sleeps, then reports that it finished          (taskSupport "required")

Where the SDK's defaults deviate from the 2025-11-25 tasks spec this server patches them:

* ``tasks/cancel``: the SDK's default handler only marks the task ``cancelled`` in the store and lets the
  work run on (and, when the work later finishes, its attempt to complete the task raises inside the
  server's task group).  Here the work runs in a cancel scope that ``tasks/cancel`` cancels.
* A tool that raises while running as a task: ``run_task`` marks the task ``failed`` but stores no result,
  so ``tasks/result`` answers ``{"_meta": ...}`` only, which is not a ``CallToolResult``.  Here the task is
  failed with the same ``isError`` ``CallToolResult`` the plain call returns, as the spec requires.
* Task-mode mismatches (``add`` as a task, ``batch_job`` without one) answer JSON-RPC error -32601: the
  SDK's ``@server.call_tool()`` decorator would turn the ``McpError`` into an ``isError`` result, so
  ``tools/call`` is registered as a raw request handler instead.
"""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import mcp.types as types
from mcp.server.experimental.task_context import ServerTaskContext
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import McpError

ProgressToken = str | int


def _schema(**properties: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": kind} for name, kind in properties.items()},
        "required": list(properties),
    }


TOOLS: list[types.Tool] = [
    types.Tool(
        name="echo",
        description="Return the given text.",
        inputSchema=_schema(text="string"),
        execution=types.ToolExecution(taskSupport=types.TASK_OPTIONAL),
    ),
    types.Tool(
        name="sleep",
        description="Sleep for the given number of seconds, reporting progress.",
        inputSchema=_schema(seconds="number"),
        execution=types.ToolExecution(taskSupport=types.TASK_OPTIONAL),
    ),
    types.Tool(
        name="fail",
        description="Raise an error with the given message.",
        inputSchema=_schema(message="string"),
        execution=types.ToolExecution(taskSupport=types.TASK_OPTIONAL),
    ),
    types.Tool(
        name="add",
        description="Add two numbers.",
        inputSchema=_schema(a="number", b="number"),
        execution=types.ToolExecution(taskSupport=types.TASK_FORBIDDEN),
    ),
    types.Tool(
        name="batch_job",
        description="A batch job that must run as a task.",
        inputSchema=_schema(seconds="number"),
        execution=types.ToolExecution(taskSupport=types.TASK_REQUIRED),
    ),
]
TOOLS_BY_NAME = {tool.name: tool for tool in TOOLS}

# Report progress at least this often while sleeping.
PROGRESS_STEP = 0.1

ProgressFn = Callable[[float, float, str], Awaitable[None]]


def _text(text: str) -> list[types.ContentBlock]:
    return [types.TextContent(type="text", text=text)]


def _error_result(message: str) -> types.CallToolResult:
    return types.CallToolResult(content=_text(message), isError=True)


async def _sleep_with_progress(seconds: float, report: ProgressFn | None) -> None:
    elapsed = 0.0
    while elapsed < seconds:
        step = min(PROGRESS_STEP, seconds - elapsed)
        await anyio.sleep(step)
        elapsed += step
        if report is not None:
            await report(min(elapsed, seconds), seconds, f"slept {elapsed:.2f}/{seconds:.2f} s")


async def run_tool(name: str, arguments: dict[str, Any], report: ProgressFn | None) -> types.CallToolResult:
    """Run a tool body; a raising tool gives an ``isError`` result (tool execution error)."""
    try:
        if name == "echo":
            return types.CallToolResult(content=_text(str(arguments["text"])))
        if name == "add":
            total = float(arguments["a"]) + float(arguments["b"])
            return types.CallToolResult(content=_text(repr(total)))
        if name == "sleep":
            seconds = float(arguments["seconds"])
            await _sleep_with_progress(seconds, report)
            return types.CallToolResult(content=_text(f"slept {seconds} s"))
        if name == "batch_job":
            seconds = float(arguments["seconds"])
            await _sleep_with_progress(seconds, report)
            return types.CallToolResult(content=_text(f"batch job finished after {seconds} s"))
        if name == "fail":
            raise RuntimeError(str(arguments["message"]))
    except (KeyError, TypeError, ValueError) as exc:
        return _error_result(f"invalid arguments for {name}: {exc!r}")
    except RuntimeError as exc:
        return _error_result(str(exc))
    raise AssertionError(f"unhandled tool {name}")  # pragma: no cover - names are checked before


def build_server() -> Server[Any, Any]:
    server: Server[Any, Any] = Server("reference-tasks-server")

    # Cancel scopes of running task work, by task id, so tasks/cancel can stop the work.
    running: dict[str, anyio.CancelScope] = {}

    @server.list_tools()
    async def list_tools() -> list[types.Tool]:
        return TOOLS

    async def call_tool(req: types.CallToolRequest) -> types.ServerResult:
        ctx = server.request_context
        name = req.params.name
        arguments = req.params.arguments or {}
        tool = TOOLS_BY_NAME.get(name)
        if tool is None:
            raise McpError(types.ErrorData(code=types.INVALID_PARAMS, message=f"Unknown tool: {name}"))
        # -32601 when the call's task mode contradicts the tool's execution.taskSupport.
        ctx.experimental.validate_for_tool(tool)

        progress_token: ProgressToken | None = ctx.meta.progressToken if ctx.meta is not None else None
        session = ctx.session

        if not ctx.experimental.is_task:

            async def report_plain(progress: float, total: float, message: str) -> None:
                if progress_token is not None:
                    await session.send_progress_notification(
                        progress_token, progress, total, message, related_request_id=str(ctx.request_id)
                    )

            return types.ServerResult(await run_tool(name, arguments, report_plain))

        async def work(task: ServerTaskContext) -> types.CallToolResult:
            async def report_task(progress: float, total: float, message: str) -> None:
                if progress_token is not None:
                    await session.send_progress_notification(progress_token, progress, total, message)

            with anyio.CancelScope() as scope:
                running[task.task_id] = scope
                try:
                    result = await run_tool(name, arguments, report_task)
                finally:
                    running.pop(task.task_id, None)
            if scope.cancelled_caught:
                # tasks/cancel already moved the task to "cancelled" in the store. Refresh our view
                # of the task (a status-message-only update) so run_task() sees a terminal status and
                # does not try to complete it.
                await task.update_status("Cancelled by request.", notify=False)
                return _error_result("cancelled")
            if result.isError:
                # Per spec a tool call whose result has isError=true is a *failed* task, and
                # tasks/result returns exactly what tools/call would have returned.
                store = support.store
                await store.store_result(task.task_id, result)
                message = result.content[0].text if isinstance(result.content[0], types.TextContent) else ""
                await task.fail(message)
            return result

        return types.ServerResult(await ctx.experimental.run_task(work))

    server.request_handlers[types.CallToolRequest] = call_tool

    with warnings.catch_warnings():
        # `Server.experimental` is deprecated in mcp 1.2x+ (tasks left the core spec); still the API here.
        warnings.simplefilter("ignore", DeprecationWarning)
        support = server.experimental.enable_tasks()

    default_cancel = server.request_handlers[types.CancelTaskRequest]

    async def cancel_task(req: types.CancelTaskRequest) -> types.ServerResult:
        # The default handler validates (-32602 for unknown / terminal tasks) and marks it cancelled.
        result = await default_cancel(req)
        scope = running.get(req.params.taskId)
        if scope is not None:
            scope.cancel()
        return result

    server.request_handlers[types.CancelTaskRequest] = cancel_task
    return server


async def main() -> None:
    server = build_server()
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
