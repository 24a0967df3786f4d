"""What a server author reaches for first: plain (synchronous) functions as tools."""

from __future__ import annotations

import threading
import time

import pytest
import trio

from trio_mcp import Context, Server, TaskStatus, connect_in_memory

released = threading.Event()
finished: list[str] = []


def make_server(max_threads: int = 8) -> Server:
    server = Server("sync-tools", version="1", max_threads=max_threads)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two integers (a plain function)."""
        return a + b

    @server.tool()
    def blocking(name: str) -> str:
        released.wait(10)
        finished.append(name)
        return f"{name} done"

    @server.tool()
    def thread_name() -> str:
        return threading.current_thread().name

    return server


async def test_a_plain_function_is_a_tool_run_in_a_worker_thread() -> None:
    async with connect_in_memory(make_server()) as client:
        [add] = [t for t in await client.list_tools() if t.name == "add"]
        assert add.input_schema["properties"] == {"a": {"type": "integer"}, "b": {"type": "integer"}}
        assert add.description == "Add two integers (a plain function)."
        assert (await client.call_tool("add", {"a": 2, "b": 3})).text == "5"
        assert (await client.call_tool("thread_name")).text != threading.current_thread().name
        created = await client.call_tool_as_task("add", {"a": 1, "b": 1})
        assert (await client.task_result(created.task.task_id)).text == "2"


async def test_cancelling_a_sync_tool_ends_its_task_at_once_and_abandons_the_thread() -> None:
    released.clear()
    finished.clear()
    async with connect_in_memory(make_server()) as client:
        created = await client.call_tool_as_task("blocking", {"name": "first"})
        await trio.sleep(0.05)  # the thread is blocked in released.wait()
        started = time.monotonic()
        cancelled = await client.cancel_task(created.task.task_id)
        assert cancelled.status == TaskStatus.CANCELLED
        assert time.monotonic() - started < 1  # did not wait for the thread
        assert finished == []
        released.set()  # the abandoned thread ends on its own; its result is discarded
        await trio.to_thread.run_sync(lambda: time.sleep(0.1))
        assert finished == ["first"]
        assert (await client.get_task(created.task.task_id)).status == TaskStatus.CANCELLED


async def test_worker_threads_are_bounded() -> None:
    released.clear()
    finished.clear()
    async with connect_in_memory(make_server(max_threads=1)) as client:
        first = await client.call_tool_as_task("blocking", {"name": "one"})
        second = await client.call_tool_as_task("blocking", {"name": "two"})
        await trio.sleep(0.1)
        assert finished == []  # "two" waits for the only thread "one" holds
        released.set()
        assert (await client.task_result(first.task.task_id)).text == "one done"
        assert (await client.task_result(second.task.task_id)).text == "two done"
        assert finished == ["one", "two"]


def test_a_sync_tool_is_told_to_take_a_thread_context() -> None:
    server = Server("x")

    def needs_context(ctx: Context) -> str:
        return "never"

    with pytest.raises(TypeError, match="takes a ThreadContext, not a Context"):
        server.add_tool(needs_context)
