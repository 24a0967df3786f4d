"""Plain (``def``) tools with a :class:`ThreadContext`: progress, elicitation and the lifespan
from the worker thread, and a cancelled call the thread can notice."""

from __future__ import annotations

import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from trio_mcp import Server, connect_in_memory
from trio_mcp.protocol.messages import ElicitResult, ProgressParams
from trio_mcp.server import ThreadContext, ToolCancelled


@asynccontextmanager
async def lifespan(server: Server) -> AsyncIterator[dict[str, str]]:
    yield {"greeting": "hello"}


async def test_a_plain_tool_reports_progress_asks_the_user_and_reads_the_lifespan() -> None:
    server = Server("threads", lifespan=lifespan)

    @server.tool
    def greet(steps: int, ctx: ThreadContext) -> str:
        for step in range(1, steps + 1):
            ctx.report_progress(step, steps)
        answer = ctx.elicit("Your name?", {"type": "object", "properties": {"name": {"type": "string"}}})
        assert answer.content is not None
        return f"{ctx.lifespan['greeting']} {answer.content['name']} ({threading.current_thread().name})"

    async def on_elicit(params: Any) -> ElicitResult:
        return ElicitResult(action="accept", content={"name": "Ada"})

    progress: list[float] = []

    def on_progress(params: ProgressParams) -> None:
        progress.append(params.progress)

    async with connect_in_memory(server, on_elicit=on_elicit) as client:
        result = await client.call_tool("greet", {"steps": 3}, on_progress=on_progress)
    text = result.content[0].text  # type: ignore[union-attr]
    assert text.startswith("hello Ada (") and "MainThread" not in text
    assert progress == [1, 2, 3]


async def test_a_cancelled_plain_tool_stops_working_when_it_checks() -> None:
    server = Server("threads")
    ticks: list[int] = []
    stopped = threading.Event()
    started = threading.Event()

    @server.tool
    def spin(ctx: ThreadContext) -> str:
        started.set()
        try:
            while True:
                ctx.check_cancelled()
                ticks.append(1)
                time.sleep(0.001)  # stands for a slice of CPU-bound work
        except ToolCancelled:
            stopped.set()
            raise

    async with connect_in_memory(server) as client:
        created = await client.call_tool_as_task("spin", {})
        await trio.to_thread.run_sync(started.wait)
        await client.cancel_task(created.task.task_id)
        assert await trio.to_thread.run_sync(stopped.wait, 5)
        after_cancel = len(ticks)
        await trio.sleep(0.1)
        assert len(ticks) == after_cancel  # no more work once it noticed
