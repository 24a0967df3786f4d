"""Several server processes on one shared store: what one process starts, another answers for.

Each "process" here is a runtime with its own supervisor, all on one shared store
(``tests/shared_memory_store.py``: the Redis store's behaviour, in memory and deterministic).
A client of one identity talks to process A and to process B as it would through a load
balancer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import pytest
import trio
from shared_memory_store import SharedMemoryStore, SharedRecords

from trio_mcp import Context, McpError, Server, TaskStatus
from trio_mcp.actors.supervisor import LEASE_SECONDS, PROCESS_GONE
from trio_mcp.client import Client, connect
from trio_mcp.protocol.errors import TASK_CANCELLED
from trio_mcp.protocol.messages import DetailedTask, ElicitRequestParams, ElicitResult
from trio_mcp.server import ServerRuntime
from trio_mcp.testing import pinned_wall_clock
from trio_mcp.transports.memory import memory_transport_pair

OWNER = "identity:alice"

server = Server("shared", version="1")
events: list[str] = []


@server.tool()
async def work(seconds: float) -> str:
    events.append("started")
    try:
        await trio.sleep(seconds)
    except trio.Cancelled:
        events.append("cancelled")
        raise
    return f"worked {seconds:g}s"


@server.tool()
async def ask(ctx: Context) -> str:
    answer = await ctx.elicit("Name?", {"type": "object", "properties": {"name": {"type": "string"}}})
    assert answer.content is not None
    return f"hello {answer.content['name']}"


@asynccontextmanager
async def processes(count: int) -> AsyncIterator[tuple[list[ServerRuntime], list[trio.CancelScope]]]:
    """``count`` runtimes on one shared store; each can be killed by cancelling its scope."""
    shared = SharedRecords()
    runtimes: list[ServerRuntime] = []
    scopes: list[trio.CancelScope] = []
    async with trio.open_nursery() as nursery:
        for _ in range(count):
            ready = trio.Event()
            scope = trio.CancelScope()

            async def run(scope: trio.CancelScope = scope, ready: trio.Event = ready) -> None:
                with scope:
                    store = SharedMemoryStore(shared)
                    async with server.open(store=store, wall_clock=pinned_wall_clock()) as runtime:
                        runtimes.append(runtime)
                        ready.set()
                        await trio.sleep_forever()

            nursery.start_soon(run)
            await ready.wait()
            scopes.append(scope)
        yield runtimes, scopes
        nursery.cancel_scope.cancel()


@asynccontextmanager
async def client_of(runtime: ServerRuntime, **options: Any) -> AsyncIterator[Client]:
    client_side, server_side = memory_transport_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: runtime.serve(server_side, owner=OWNER))
        async with connect(client_side, **options) as client:
            yield client
        nursery.cancel_scope.cancel()


async def test_a_task_created_on_one_process_is_answered_by_another(autojump_clock: Any) -> None:
    async with processes(2) as ([a, b], _), client_of(a) as on_a, client_of(b) as on_b:
        created = await on_a.call_tool_as_task("work", {"seconds": 10})
        task_id = created.task.task_id
        assert (await on_b.get_task(task_id)).status == TaskStatus.WORKING
        # B waits for A's work: its tasks/result is answered when A finishes.
        assert (await on_b.task_result(task_id)).text == "worked 10s"
        assert trio.current_time() == pytest.approx(10)
        assert (await on_b.get_task(task_id)).status == TaskStatus.COMPLETED
        assert any(t.task_id == task_id for t in (await on_b.list_tasks()).tasks)


async def test_a_cancel_through_another_process_stops_the_work(autojump_clock: Any) -> None:
    events.clear()
    async with processes(2) as ([a, b], _), client_of(a) as on_a, client_of(b) as on_b:
        created = await on_a.call_tool_as_task("work", {"seconds": 600})
        task_id = created.task.task_id
        waiter_on_a: list[BaseException] = []

        async def wait_on_a() -> None:
            try:
                await on_a.task_result(task_id)
            except McpError as exc:
                waiter_on_a.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_on_a)
            await trio.sleep(1)
            assert (await on_b.cancel_task(task_id)).status == TaskStatus.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert events == ["started", "cancelled"]  # the work in A really stopped
        assert trio.current_time() < 2
        assert [getattr(e, "code", None) for e in waiter_on_a] == [TASK_CANCELLED]
        assert (await on_a.get_task(task_id)).status == TaskStatus.CANCELLED


async def test_input_given_through_another_process_reaches_the_work(autojump_clock: Any) -> None:
    async def answer(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult("accept", {"name": "Ada"})

    async with (
        processes(2) as ([a, b], _),
        client_of(a, protocol="2026-07-28", on_elicit=answer) as on_a,  # declares elicitation
        client_of(b, protocol="2026-07-28", on_elicit=answer) as on_b,
    ):
        started = await on_a.start_tool("ask")
        assert isinstance(started, DetailedTask) and started.status == TaskStatus.INPUT_REQUIRED
        # B reads the question from the shared record and answers with tasks/update.
        assert (await on_b.task_result(started.task_id)).text == "hello Ada"


async def test_a_process_that_dies_leaves_no_task_working_past_its_lease(autojump_clock: Any) -> None:
    async with processes(2) as ([a, b], [kill_a, _]):
        async with AsyncExitStack() as stack:
            on_a = await stack.enter_async_context(client_of(a))
            created = await on_a.call_tool_as_task("work", {"seconds": 3600})
        task_id = created.task.task_id
        async with client_of(b) as on_b:
            assert (await on_b.get_task(task_id)).status == TaskStatus.WORKING
            died = trio.current_time()
            kill_a.cancel()  # process A is gone: no final record, no more lease renewals
            with pytest.raises(McpError) as failed:
                await on_b.task_result(task_id)  # answered once B fails the orphan
            assert "stopped" in failed.value.message
            assert trio.current_time() - died <= LEASE_SECONDS * 4 / 3 + 1
            task = await on_b.get_task(task_id)
            assert task.status == TaskStatus.FAILED
            assert task.status_message == PROCESS_GONE.message
