"""asyncio libraries inside tools: ``@server.tool(asyncio=True)`` runs on an asyncio loop
inside Trio (trio-asyncio), and cancelling the call cancels the asyncio side."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

pytest.importorskip("trio_asyncio")

from trio_mcp import Context, Server, connect_in_memory


class Seen:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.started = trio.Event()
        self.cancelled = trio.Event()


def make_server(seen: Seen) -> Server:
    server = Server("aio")

    @server.tool(asyncio=True)
    async def pipeline(items: list[str]) -> str:
        """Pass the items through an asyncio.Queue between two asyncio tasks."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def produce() -> None:
            for item in items:
                await asyncio.sleep(0.001)
                await queue.put(item)
            await queue.put(None)

        producer = asyncio.get_running_loop().create_task(produce())
        out = []
        while (item := await queue.get()) is not None:
            out.append(item.upper())
        await producer
        return ",".join(out)

    @server.tool(asyncio=True)
    async def wait_forever() -> str:
        seen.events.append("started")
        seen.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            seen.events.append("asyncio cancelled")
            seen.cancelled.set()
            raise
        return "never"

    return server


async def test_an_asyncio_tool_awaits_asyncio_code_in_a_call_and_in_a_task() -> None:
    async with connect_in_memory(make_server(Seen())) as client:
        result = await client.call_tool("pipeline", {"items": ["a", "b", "c"]})
        assert result.content[0].text == "A,B,C"  # type: ignore[union-attr]
        created = await client.call_tool_as_task("pipeline", {"items": ["x"]})
        result = await client.task_result(created.task.task_id)
        assert result.content[0].text == "X"  # type: ignore[union-attr]


async def test_cancelling_the_task_cancels_the_asyncio_side() -> None:
    seen = Seen()
    async with connect_in_memory(make_server(seen)) as client:
        created = await client.call_tool_as_task("wait_forever", {})
        await seen.started.wait()
        await client.cancel_task(created.task.task_id)
        with trio.fail_after(5):
            await seen.cancelled.wait()
    assert seen.events == ["started", "asyncio cancelled"]


def test_only_an_async_def_may_run_on_asyncio() -> None:
    server = Server("aio")
    with pytest.raises(TypeError, match="asyncio=True"):

        @server.tool(asyncio=True)
        def plain() -> str:
            return "x"


def test_a_server_without_asyncio_tools_never_imports_trio_asyncio() -> None:
    code = (
        "import sys, trio\n"
        "from trio_mcp import Context, Server, connect_in_memory\n"
        "server = Server('plain')\n"
        "@server.tool\n"
        "async def echo(text: str) -> str:\n"
        "    return text\n"
        "async def main():\n"
        "    async with connect_in_memory(server) as client:\n"
        "        await client.call_tool('echo', {'text': 'x'})\n"
        "trio.run(main)\n"
        "print('trio_asyncio' in sys.modules, 'asyncio.base_events' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split()[0] == "False"


async def test_the_lifespan_and_the_context_work_from_asyncio_code() -> None:
    import trio_asyncio

    @asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[asyncio.Queue[str]]:
        # An asyncio client opened by the lifespan: the runtime's loop is already open.
        queue: asyncio.Queue[str] = await trio_asyncio.aio_as_trio(make_queue)()
        yield queue

    async def make_queue() -> asyncio.Queue[str]:
        queue: asyncio.Queue[str] = asyncio.Queue()
        await queue.put("from the lifespan")
        return queue

    server = Server("aio", lifespan=lifespan)

    @server.tool(asyncio=True)
    async def drain(ctx: Context) -> str:
        await trio_asyncio.trio_as_aio(ctx.report_progress)(1, 1)
        queue: asyncio.Queue[str] = ctx.lifespan
        return await asyncio.wait_for(queue.get(), 5)

    progress: list[float] = []
    async with connect_in_memory(server) as client:
        result = await client.call_tool("drain", {}, on_progress=lambda p: progress.append(p.progress))
    assert result.content[0].text == "from the lifespan"  # type: ignore[union-attr]
    assert progress == [1]
