"""Task semantics (SEP-1686) end to end over an in-memory connection, on a MockClock."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp import Client, Context, McpError, Server, TaskLimits
from trio_mcp.protocol.errors import INVALID_PARAMS, TASK_CANCELLED, TASK_LIMIT_REACHED
from trio_mcp.protocol.messages import RELATED_TASK_KEY, ProgressParams, Task
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.testing import Harness, open_harness

pytestmark = pytest.mark.every_store  # make test runs it again on each store

EPOCH = 1_800_000_000.0  # tasks are stamped EPOCH + mock time


class Probe:
    """Records what the tools saw, so tests can check the work really stopped."""

    def __init__(self) -> None:
        self.started = 0
        self.cleaned_up = 0
        self.cancelled = 0
        self.finished = 0
        self.release = trio.Event()


def make_server(probe: Probe, limits: TaskLimits | None = None) -> Server:
    server = Server("test", version="1", limits=limits)

    @server.tool()
    async def echo(text: str) -> str:
        return text

    @server.tool()
    async def wait(seconds: float, ctx: Context) -> str:
        probe.started += 1
        try:
            for step in range(4):
                await ctx.report_progress(step, 4)
                await trio.sleep(seconds / 4)
            await ctx.report_progress(4, 4)
            probe.finished += 1
            return f"waited {seconds}"
        except trio.Cancelled:
            probe.cancelled += 1
            raise
        finally:
            probe.cleaned_up += 1

    @server.tool()
    async def stubborn(seconds: float) -> str:
        """Ignores cancellation: finishes its work under a shield and returns anyway."""
        with trio.CancelScope(shield=True):
            await trio.sleep(seconds)
        probe.finished += 1
        return "finished anyway"

    @server.tool()
    async def gated() -> str:
        await probe.release.wait()
        return "released"

    @server.tool()
    async def broken(message: str) -> str:
        raise ValueError(message)

    @server.tool()
    async def refuse() -> str:
        raise McpError(-32001, "refused by policy")

    return server


@asynccontextmanager
async def clients(server: Server, count: int = 1) -> AsyncIterator[tuple[Harness, list[Client]]]:
    """The testing kit's harness on ``server`` with ``count`` clients, each its own connection."""
    async with open_harness(server, epoch=EPOCH) as harness, contextlib.AsyncExitStack() as stack:
        extra = [await stack.enter_async_context(harness.connect()) for _ in range(count - 1)]
        yield harness, [harness.client, *extra]


@pytest.fixture
def probe() -> Probe:
    return Probe()


async def error_of(awaitable: Any) -> McpError:
    with pytest.raises(McpError) as info:
        await awaitable
    return info.value


async def test_create_answers_at_once_with_a_working_task(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        created = await client.call_tool_as_task("wait", {"seconds": 60})
        task = created.task
        assert task.status == TaskStatus.WORKING
        assert trio.current_time() < 1  # answered before the 60 s of work
        assert task.created_at == task.last_updated_at
        assert task.ttl == TaskLimits().default_ttl_ms
        assert task.poll_interval == TaskLimits().poll_interval_ms
        assert len(task.task_id) >= 22  # 128+ bits from secrets


async def test_timestamps_are_the_times_of_the_events(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        await trio.sleep(10)
        task = (await client.call_tool_as_task("wait", {"seconds": 20})).task
        created = datetime.fromisoformat(task.created_at)
        assert created.timestamp() == pytest.approx(EPOCH + 10, abs=0.01)
        await trio.sleep(100)  # the work ended at +30; we query at +110
        done = await client.get_task(task.task_id)
        assert done.status == TaskStatus.COMPLETED
        assert done.created_at == task.created_at
        assert datetime.fromisoformat(done.last_updated_at).timestamp() == pytest.approx(EPOCH + 30, abs=0.01)
        assert done.last_updated_at.endswith("Z")


async def test_result_waits_for_the_end_and_carries_related_task(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        task = (await client.call_tool_as_task("wait", {"seconds": 8})).task
        result = await client.task_result(task.task_id)
        assert trio.current_time() == pytest.approx(8, abs=0.01)
        assert result.text == "waited 8.0"
        assert result.meta == {RELATED_TASK_KEY: {"taskId": task.task_id}}


async def test_concurrent_result_waiters_are_all_answered(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe), count=1) as (harness, [client]):
        task = (await client.call_tool_as_task("gated", {})).task
        answers: list[str] = []

        async def waiter() -> None:
            answers.append((await client.task_result(task.task_id)).text)

        async with trio.open_nursery() as nursery:
            for _ in range(25):
                nursery.start_soon(waiter)
            await harness.settle()
            assert answers == []
            probe.release.set()
        assert answers == ["released"] * 25
        # A waiter that arrives after the end is answered too.
        assert (await client.task_result(task.task_id)).text == "released"


async def test_cancel_stops_the_work_and_is_cancelled_before_the_answer(
    probe: Probe, autojump_clock: Any
) -> None:
    async with clients(make_server(probe)) as (harness, [client]):
        task = (await client.call_tool_as_task("wait", {"seconds": 3600})).task
        await trio.sleep(5)
        cancelled = await client.cancel_task(task.task_id)
        assert cancelled.status == TaskStatus.CANCELLED
        await harness.settle()
        assert probe.cancelled == 1 and probe.cleaned_up == 1 and probe.finished == 0
        assert (await client.get_task(task.task_id)).status == TaskStatus.CANCELLED
        harness.trace.assert_statuses("task-1", "working", "cancelled")
        error = await error_of(client.task_result(task.task_id))
        assert error.code == TASK_CANCELLED


async def test_cancelled_stays_cancelled_when_the_work_returns_anyway(
    probe: Probe, autojump_clock: Any
) -> None:
    async with clients(make_server(probe)) as (harness, [client]):
        task = (await client.call_tool_as_task("stubborn", {"seconds": 10})).task
        await trio.sleep(1)
        assert (await client.cancel_task(task.task_id)).status == TaskStatus.CANCELLED
        await trio.sleep(20)
        assert probe.finished == 1  # the work did return...
        harness.trace.assert_statuses("task-1", "working", "cancelled")
        after = await client.get_task(task.task_id)
        assert after.status == TaskStatus.CANCELLED  # ...and changed nothing
        assert (await error_of(client.task_result(task.task_id))).code == TASK_CANCELLED


async def test_cancel_wakes_result_waiters(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (harness, [client]):
        task = (await client.call_tool_as_task("gated", {})).task
        errors: list[int] = []

        async def waiter() -> None:
            errors.append((await error_of(client.task_result(task.task_id))).code)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            nursery.start_soon(waiter)
            await harness.settle()
            await client.cancel_task(task.task_id)
        assert errors == [TASK_CANCELLED, TASK_CANCELLED]


@pytest.mark.parametrize(
    "tool,args,status", [("echo", {"text": "x"}, "completed"), ("broken", {"message": "m"}, "failed")]
)
async def test_cancelling_a_terminal_task_is_invalid_params(
    probe: Probe, autojump_clock: Any, tool: str, args: dict[str, Any], status: str
) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        task = (await client.call_tool_as_task(tool, args)).task
        await client.task_result(task.task_id) if status == "completed" else await client.poll_task(
            task.task_id
        )
        error = await error_of(client.cancel_task(task.task_id))
        assert error.code == INVALID_PARAMS
        assert error.message == f"Cannot cancel task: already in terminal status '{status}'"


async def test_tool_error_fails_the_task_with_an_is_error_result(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        task = (await client.call_tool_as_task("broken", {"message": "disk on fire"})).task
        result = await client.task_result(task.task_id)
        assert result.is_error and result.text == "disk on fire"
        final = await client.get_task(task.task_id)
        assert final.status == TaskStatus.FAILED
        assert final.status_message == "disk on fire"


async def test_protocol_error_in_a_tool_fails_the_task_with_that_error(
    probe: Probe, autojump_clock: Any
) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        task = (await client.call_tool_as_task("refuse", {})).task
        error = await error_of(client.task_result(task.task_id))
        assert (error.code, error.message) == (-32001, "refused by policy")
        assert (await client.get_task(task.task_id)).status == TaskStatus.FAILED


async def test_bad_arguments_fail_the_task_naming_the_field(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        task = (await client.call_tool_as_task("wait", {"seconds": "soon"})).task
        result = await client.task_result(task.task_id)
        assert result.is_error and "seconds" in result.text


async def test_ttl_is_clamped_to_the_maximum_and_reported(probe: Probe, autojump_clock: Any) -> None:
    limits = TaskLimits(default_ttl_ms=1000, max_ttl_ms=5000)
    async with clients(make_server(probe, limits)) as (_harness, [client]):
        assert (await client.call_tool_as_task("echo", {"text": "a"}, ttl_ms=10**9)).task.ttl == 5000
        assert (await client.call_tool_as_task("echo", {"text": "b"}, ttl_ms=2000)).task.ttl == 2000
        assert (await client.call_tool_as_task("echo", {"text": "c"})).task.ttl == 1000


async def test_ttl_counts_from_creation_and_removes_finished_tasks(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        task = (await client.call_tool_as_task("wait", {"seconds": 4}, ttl_ms=10_000)).task
        await trio.sleep(9.9)
        assert (await client.get_task(task.task_id)).status == TaskStatus.COMPLETED
        assert [t.task_id async for t in client.all_tasks()] == [task.task_id]
        await trio.sleep(0.2)  # 10.1 s after creation, 6.1 s after it finished
        assert (await error_of(client.get_task(task.task_id))).code == INVALID_PARAMS
        assert (await error_of(client.task_result(task.task_id))).code == INVALID_PARAMS
        assert [t async for t in client.all_tasks()] == []


async def test_expiry_cancels_running_work_and_answers_waiters(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (harness, [client]):
        task = (await client.call_tool_as_task("wait", {"seconds": 3600}, ttl_ms=30_000)).task
        error = await error_of(client.task_result(task.task_id))
        assert trio.current_time() == pytest.approx(30, abs=0.01)
        assert error.code == INVALID_PARAMS and "expired" in error.message
        await harness.settle()
        assert [e.time for e in harness.trace.of_kind("task.expired")] == pytest.approx([30], abs=0.01)
        assert probe.cancelled == 1 and probe.cleaned_up == 1
        assert len(harness.runtime.supervisor.store) == 0


async def test_a_task_asked_for_after_it_expired_says_it_expired(probe: Probe, autojump_clock: Any) -> None:
    # Not "Task not found": the client learns its result was kept too short a time. To another
    # owner it is still simply not found.
    async with clients(make_server(probe), count=2) as (harness, [alice, mallory]):
        task = (await alice.call_tool_as_task("echo", {"text": "hi"}, ttl_ms=10_000)).task
        await trio.sleep(11)
        await harness.settle()
        for attempt in (alice.get_task, alice.task_result, alice.cancel_task):
            assert (
                await error_of(attempt(task.task_id))
            ).message == "Failed to retrieve task: Task has expired"
        for attempt in (mallory.get_task, mallory.task_result, mallory.cancel_task):
            assert (
                await error_of(attempt(task.task_id))
            ).message == "Failed to retrieve task: Task not found"


async def test_other_owners_cannot_see_or_touch_a_task(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe), count=2) as (_harness, [alice, mallory]):
        task = (await alice.call_tool_as_task("wait", {"seconds": 50})).task
        for attempt in (mallory.get_task, mallory.task_result, mallory.cancel_task):
            error = await error_of(attempt(task.task_id))
            assert error.code == INVALID_PARAMS
            assert error.message == "Failed to retrieve task: Task not found"
        assert [t async for t in mallory.all_tasks()] == []
        assert (await alice.get_task(task.task_id)).status == TaskStatus.WORKING
        assert [t.task_id async for t in alice.all_tasks()] == [task.task_id]


async def test_list_paginates_in_creation_order_including_terminal_tasks(
    probe: Probe, autojump_clock: Any
) -> None:
    async with clients(make_server(probe, TaskLimits(list_page_size=3))) as (_harness, [client]):
        ids = []
        for i in range(7):
            tool, args = ("echo", {"text": str(i)}) if i % 2 else ("wait", {"seconds": 100})
            ids.append((await client.call_tool_as_task(tool, args)).task.task_id)
        await trio.sleep(1)
        first = await client.list_tasks()
        assert [t.task_id for t in first.tasks] == ids[:3] and first.next_cursor
        second = await client.list_tasks(first.next_cursor)
        assert [t.task_id for t in second.tasks] == ids[3:6] and second.next_cursor
        third = await client.list_tasks(second.next_cursor)
        assert [t.task_id for t in third.tasks] == ids[6:] and third.next_cursor is None
        statuses = {t.status for t in first.tasks + second.tasks + third.tasks}
        assert statuses == {TaskStatus.COMPLETED, TaskStatus.WORKING}
        for bad in ("nonsense", "dGFzazp4", first.next_cursor + "x"):
            assert (await error_of(client.list_tasks(bad))).code == INVALID_PARAMS


async def test_list_pages_stay_consistent_when_tasks_expire_between_pages(
    probe: Probe, autojump_clock: Any
) -> None:
    async with clients(make_server(probe, TaskLimits(list_page_size=2))) as (_harness, [client]):
        short = [
            (await client.call_tool_as_task("echo", {"text": "s"}, ttl_ms=1000)).task.task_id
            for _ in range(3)
        ]
        long = [(await client.call_tool_as_task("echo", {"text": "l"})).task.task_id for _ in range(3)]
        page = await client.list_tasks()
        assert [t.task_id for t in page.tasks] == short[:2]
        await trio.sleep(2)  # the short ones expire
        rest = [t.task_id async for t in _pages_from(client, page.next_cursor)]
        assert rest == long


async def _pages_from(client: Client, cursor: str | None) -> AsyncIterator[Task]:
    while cursor is not None:
        page = await client.list_tasks(cursor)
        for task in page.tasks:
            yield task
        cursor = page.next_cursor


async def test_live_task_limit_per_owner(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe, TaskLimits(max_live_tasks_per_owner=2)), count=2) as (
        harness,
        [a, b],
    ):
        first = (await a.call_tool_as_task("wait", {"seconds": 10})).task
        await a.call_tool_as_task("wait", {"seconds": 100})
        error = await error_of(a.call_tool_as_task("echo", {"text": "x"}))
        assert error.code == TASK_LIMIT_REACHED and "2" in error.message
        await b.call_tool_as_task("echo", {"text": "other owners have their own budget"})
        await a.cancel_task(first.task_id)
        await harness.settle()
        assert (await a.call_tool_as_task("echo", {"text": "room again"})).task.status == TaskStatus.WORKING


async def test_status_notifications_follow_every_transition(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (harness, [client]):
        seen: list[Task] = []
        client.status_callbacks.append(seen.append)
        done = (await client.call_tool_as_task("wait", {"seconds": 2})).task
        stopped = (await client.call_tool_as_task("wait", {"seconds": 100})).task
        await trio.sleep(5)
        await client.cancel_task(stopped.task_id)
        await harness.settle()
        final = {t.task_id: t.status for t in seen if t.status.is_terminal}
        assert final == {done.task_id: TaskStatus.COMPLETED, stopped.task_id: TaskStatus.CANCELLED}
        assert all(t.task_id in (done.task_id, stopped.task_id) for t in seen)


async def test_progress_follows_the_task_and_stops_at_the_end(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (_harness, [client]):
        updates: list[ProgressParams] = []
        task = (await client.call_tool_as_task("wait", {"seconds": 4}, on_progress=updates.append)).task
        await client.task_result(task.task_id)
        await trio.sleep(10)
        assert [u.progress for u in updates] == [0, 1, 2, 3, 4]
        assert all(u.total == 4 for u in updates)
        assert all(u.meta == {RELATED_TASK_KEY: {"taskId": task.task_id}} for u in updates)


async def test_closing_the_connection_cancels_its_tasks(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe)) as (harness, _):
        async with harness.connect() as leaving:
            await leaving.call_tool_as_task("wait", {"seconds": 3600})
            await leaving.call_tool_as_task("wait", {"seconds": 3600})
            await trio.sleep(1)
        await harness.settle()
        assert probe.cancelled == 2 and probe.cleaned_up == 2
        assert len(harness.runtime.supervisor.store) == 0
        for task in ("task-1", "task-2"):  # removed with their owner, never completed
            harness.trace.assert_statuses(task, "working")
        assert [e.kind for e in harness.trace.of_kind("task.removed")] == ["task.removed"] * 2


async def test_poll_helper_honours_poll_interval(probe: Probe, autojump_clock: Any) -> None:
    async with clients(make_server(probe, TaskLimits(poll_interval_ms=2000))) as (_harness, [client]):
        task = (await client.call_tool_as_task("wait", {"seconds": 9})).task
        polls: list[float] = []
        final = await client.poll_task(task.task_id, on_status=lambda t: polls.append(trio.current_time()))
        assert final.status == TaskStatus.COMPLETED
        assert polls == pytest.approx([0, 2, 4, 6, 8, 10], abs=0.01)  # every 2 s until terminal


async def test_client_never_task_augments_for_a_server_without_task_support(
    probe: Probe, autojump_clock: Any
) -> None:
    async with clients(make_server(probe)) as (harness, _), harness.connect(initialize=False) as client:
        await client.initialize(protocol_version="2025-06-18")  # no tasks in that version
        assert "tasks" not in client.server.capabilities  # type: ignore[union-attr]
        with pytest.raises(McpError) as info:
            await client.call_tool_as_task("echo", {"text": "x"})
        assert info.value.code == -32600
        assert len(harness.runtime.supervisor.store) == 0  # nothing was sent
        assert (await client.call_tool("echo", {"text": "plain"})).text == "plain"
