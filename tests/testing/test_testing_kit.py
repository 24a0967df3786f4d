"""Tests for the deterministic testing kit (:mod:`trio_mcp.testing`) and its pytest plugin."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp import Client, Context, McpError, Server, Task
from trio_mcp.client import ConnectionClosed
from trio_mcp.protocol.errors import INVALID_PARAMS, TASK_CANCELLED
from trio_mcp.protocol.messages import ProgressParams
from trio_mcp.testing import (
    CleanupProbe,
    ExplorationFailed,
    Faults,
    Harness,
    HarnessTimeout,
    Trace,
    TraceAssertionError,
    explore_cancellation,
    open_harness,
    run,
    scheduling_is_controllable,
)
from trio_mcp.testing.plugin import HarnessFactory

HERE = Path(__file__).resolve().parent

# Every async test here runs on an autojump MockClock with deterministic scheduling.
pytestmark = [pytest.mark.every_store, pytest.mark.trio_mcp]

# ----------------------------------------------------------------------------- fixture tools

server = Server("kit-tests", version="1.0")
lock = CleanupProbe("lock")
"""Acquired by ``leaky`` and ``careful``; released in their cleanup."""


@server.tool()
async def echo(text: str) -> str:
    return text


@server.tool()
async def slow(seconds: float, ctx: Context) -> str:
    """Three steps of ``seconds / 3``, reporting progress and status before each."""
    for step in range(3):
        await ctx.report_progress(step, 3, f"step {step + 1}")
        ctx.set_status(f"step {step + 1} of 3")
        await trio.sleep(seconds / 3)
    await ctx.report_progress(3, 3)
    return f"slept {seconds:g}s"


@server.tool()
async def leaky(ctx: Context) -> str:
    """The planted bug: the lock is taken one checkpoint before the ``try`` that releases it,
    so a cancellation at that checkpoint (number 2) leaks it."""
    await ctx.report_progress(1, 3)
    lock.acquire()
    await trio.sleep(1)  # checkpoint 2: cancelled here, the release below never runs
    try:
        await trio.sleep(1)
    finally:
        lock.release()
    return "done"


@server.tool()
async def careful(ctx: Context) -> str:
    """The same work, written correctly."""
    await ctx.report_progress(1, 3)
    with lock.held():
        await trio.sleep(1)
        await trio.lowlevel.checkpoint()
        await trio.sleep(1)
    return "done"


# ----------------------------------------------------------------------------- harness and time


async def test_hours_of_work_take_no_real_time() -> None:
    started = time.perf_counter()
    async with open_harness(server) as h:
        task_id = await h.start_task("slow", {"seconds": 3 * 3600}, ttl_ms=4 * 3600 * 1000)
        result = await h.client.task_result(task_id)
        assert result.text == f"slept {3 * 3600}s"
        assert trio.current_time() == pytest.approx(3 * 3600)
        task = await h.client.get_task(task_id)
        # wall_clock is pinned to EPOCH + trio.current_time(): timestamps are reproducible.
        assert task.created_at == "2026-01-01T00:00:00.000Z"
        assert task.last_updated_at == "2026-01-01T03:00:00.000Z"
    # Three hours of the tool's time in far less real time (a bound no loaded machine or
    # shared store comes near; the mock clock's own reading above is the exact check).
    assert time.perf_counter() - started < 60


async def test_ttl_expiry_is_exact_in_mock_time() -> None:
    async with open_harness(server) as h:
        task_id = await h.start_task("echo", {"text": "hi"}, ttl_ms=2 * 3600 * 1000)
        await h.settle()
        assert h.status(task_id) == "completed"
        await h.advance(2 * 3600 - 1)
        assert (await h.client.get_task(task_id)).status == "completed"
        await h.advance(1)
        with pytest.raises(McpError) as error:
            await h.client.get_task(task_id)
        assert error.value.code == INVALID_PARAMS
        (expired,) = h.trace.of_kind("task.expired")
        assert expired.time == 2 * 3600
        assert h.trace.lines([expired]) == ["7200.000000 task.expired task-1"]


async def test_settle_gives_a_stable_state_to_assert_on() -> None:
    async with open_harness(server) as h:
        task_id = await h.start_task("slow", {"seconds": 30})
        waiter = h.spawn(h.client.task_result, task_id)
        await h.settle()
        # The work is blocked in its first sleep; nothing moves until time does.
        assert h.status(task_id) == "working"
        assert [cp.line for cp in h.checkpoints(task_id)] == [
            'await ctx.report_progress(step, 3, f"step {step + 1}")',
            "await trio.sleep(seconds / 3)",
        ]
        assert not waiter.done
        await h.client.cancel_task(task_id)
        await h.settle()
        h.trace.assert_statuses("task-1", "working", "cancelled")
        assert isinstance(waiter.error, McpError) and waiter.error.code == TASK_CANCELLED
        work = h.work(task_id)
        assert work is not None and work.finished and isinstance(work.error, trio.Cancelled)


async def test_progress_and_polling_follow_mock_time() -> None:
    seen: list[tuple[float, float]] = []
    polled: list[tuple[float, str]] = []

    def on_progress(params: ProgressParams) -> None:
        seen.append((trio.current_time(), params.progress))

    def on_status(task: Task) -> None:
        polled.append((trio.current_time(), task.status.value))

    async with open_harness(server) as h:
        task_id = await h.start_task("slow", {"seconds": 3}, on_progress=on_progress)
        final = await h.client.poll_task(task_id, on_status=on_status)
        assert final.status == "completed"
    assert seen == [(0.0, 0), (1.0, 1), (2.0, 2), (3.0, 3)]
    # pollInterval is 500 ms: one tasks/get every half second of mock time.
    assert [t for t, _ in polled] == [0.5 * i for i in range(7)]
    assert polled[-1] == (3.0, "completed")


async def test_hold_tools_parks_waiters_before_the_work_starts() -> None:
    async with open_harness(server) as h:
        gate = h.hold_tools()
        task_id = await h.start_task("echo", {"text": "x"})
        waiters = [h.spawn(h.client.task_result, task_id) for _ in range(3)]
        await h.settle()
        assert h.work(task_id) is None and not any(w.done for w in waiters)
        gate.set()
        await h.settle()
        assert [w.result().text for w in waiters] == ["x", "x", "x"]


async def test_hold_tools_can_hold_only_some_calls() -> None:
    async with open_harness(server) as h:
        gate = h.hold_tools("echo", tasks_only=True)
        assert (await h.client.call_tool("echo", {"text": "plain"})).text == "plain"
        task_id = await h.start_task("echo", {"text": "task"})
        await h.settle()
        assert h.status(task_id) == "working"
        gate.set()
        assert (await h.client.task_result(task_id)).text == "task"


async def test_a_deadlock_fails_fast_instead_of_spinning() -> None:
    with pytest.raises(BaseExceptionGroup) as error:
        async with open_harness(server, watchdog=3600):
            await trio.Event().wait()  # nothing will ever set it
    assert error.group_contains(HarnessTimeout, match="still open after 3600 s of mock time")
    assert trio.current_time() == 3600


async def test_second_connection_and_shutdown_leave_nothing_running() -> None:
    async with open_harness(server) as h:
        async with h.connect() as other:
            task_id = await h.start_task("slow", {"seconds": 10}, client=other)
            with pytest.raises(McpError):  # another connection's task looks missing
                await h.client.get_task(task_id)
        await h.settle()
        assert h.trace.statuses("task-1") == ["working"]
        assert [e.kind for e in h.trace.for_task("task-1")][-2:] == ["task.removed", "actor.stop"]
    assert h.trace.running_actors() == []
    assert h.trace.unanswered_requests() == []


# ----------------------------------------------------------------------------- the trace


async def test_trace_normalises_ids_everywhere() -> None:
    async with open_harness(server) as h:
        first = await h.start_task("echo", {"text": "a"})
        second = await h.start_task("echo", {"text": "b"})
        await h.settle()
    dump = h.trace.dump()
    assert first not in dump and second not in dump
    assert h.trace.task_ids() == ["task-1", "task-2"]
    assert h.trace.alias(second) == "task-2" and h.trace.raw_id("task-2") == second
    assert '"taskId":"task-2"' in dump
    assert "session-1" in dump and "actor.start TaskActor task-1" in dump
    assert h.trace.statuses(first) == h.trace.statuses("task-1") == ["working", "completed"]
    created = [m for m in h.trace.messages("out") if "task" in m.get("result", {})]
    assert [m["result"]["task"]["taskId"] for m in created] == [first, second]  # decoded data stays raw


async def test_trace_assertions_report_the_trace() -> None:
    async with open_harness(server) as h:
        task_id = await h.start_task("echo", {"text": "a"})
        await h.settle()
    h.trace.assert_statuses(task_id, "working", "completed")
    assert h.trace.assert_terminal_once("task-1") == "completed"
    with pytest.raises(TraceAssertionError) as error:
        h.trace.assert_statuses("task-1", "working", "cancelled")
    message = str(error.value)
    assert "task-1 went working -> completed, expected working -> cancelled" in message
    assert "0.000000 task.transition task-1 working -> completed" in message
    h.trace.assert_all_answered()
    h.trace.assert_no_running_actors()


def test_trace_records_any_events_with_their_time() -> None:
    trace = Trace(clock=lambda: 1.5)
    trace("task.created", {"task_id": "abc", "status": "working", "ttl": 10})
    trace("task.transition", {"task_id": "abc", "old": "working", "status": "failed"})
    trace("custom.kind", {"value": b"bytes"})
    assert trace.lines() == [
        "1.500000 task.created task-1 working ttl=10",
        "1.500000 task.transition task-1 working -> failed",
        '1.500000 custom.kind {"value":"bytes"}',
    ]
    assert trace.terminal_status("task-1") == "failed"
    assert len(trace) == 3 and [e.kind for e in trace] == ["task.created", "task.transition", "custom.kind"]


async def test_trace_listeners_and_responses() -> None:
    kinds: list[str] = []
    async with open_harness(server) as h:
        unsubscribe = h.trace.subscribe(lambda event: kinds.append(event.kind))
        pending = h.spawn(h.client.call_tool, "slow", {"seconds": 3})
        with pytest.raises(RuntimeError, match="still running"):
            pending.result()
        await h.settle()
        unsubscribe()
        assert kinds == ["message.in"]  # the tools/call; the tool is now asleep
        assert (await pending.wait()).text == "slept 3s"
        request = h.trace.requests("tools/call")[0]
        response = h.trace.response_to(request["id"])
        assert response is not None and response["result"]["content"][0]["text"] == "slept 3s"
        assert h.monitor.works_of("slow")[0].task_id is None  # a plain call, not a task


# ----------------------------------------------------------------------------- determinism


async def busy_scenario() -> str:
    """Concurrency on purpose: two tasks/result waiters and a tasks/cancel answered at the same
    instant, progress notifications, a second task, a TTL expiry and shutdown ordering."""
    async with open_harness(server) as h:
        first = await h.start_task("slow", {"seconds": 3}, ttl_ms=10_000, on_progress=lambda p: None)
        waiters = [h.spawn(h.client.task_result, first) for _ in range(2)]
        await h.advance(1.5)
        await h.client.cancel_task(first)
        second = await h.start_task("slow", {"seconds": 3})
        third = await h.start_task("careful")
        await h.client.task_result(second)
        await h.client.task_result(third)
        await h.advance(20)
        assert all(w.done for w in waiters)
    return h.trace.dump()


@pytest.fixture
def in_process_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory store whatever ``--task-store`` says. A store on a real server (Redis)
    answers when the network delivers: how many scheduler batches a run takes while it waits,
    and so the seeded coin of each, is not the kit's to fix (see docs/testing.md)."""
    from trio_mcp.stores import MemoryTaskStore

    monkeypatch.setattr("trio_mcp.server._server.MemoryTaskStore", MemoryTaskStore)
    monkeypatch.setattr("trio_mcp.actors.supervisor.MemoryTaskStore", MemoryTaskStore)


@pytest.mark.usefixtures("in_process_store")
def test_same_scenario_100_runs_give_byte_identical_traces() -> None:
    assert scheduling_is_controllable()
    traces = {run(busy_scenario).encode() for _ in range(100)}
    assert len(traces) == 1
    (trace,) = traces
    assert b"task.transition task-1 working -> cancelled" in trace
    assert b"task.expired task-1" in trace


@pytest.mark.usefixtures("in_process_store")
def test_trace_is_identical_in_another_process() -> None:
    """Not even PYTHONHASHSEED changes the trace. Both processes use the memory store (the
    child knows no --task-store): the same run, not one on another store, whose answers to
    concurrent requests may leave in another order."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import test_testing_kit as m; "
        "from trio_mcp.testing import run; sys.stdout.write(run(m.busy_scenario))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run(
        [sys.executable, "-c", code, str(HERE)], capture_output=True, env=env, check=True, timeout=60
    )
    assert out.stdout.decode() == run(busy_scenario)


@pytest.mark.usefixtures("in_process_store")
def test_each_seed_is_its_own_reproducible_schedule() -> None:
    for seed in (1, 2, 3):
        assert run(busy_scenario, seed=seed) == run(busy_scenario, seed=seed)


# ----------------------------------------------------------------------------- exploration


def test_exploration_finds_the_planted_bug_and_names_the_checkpoint() -> None:
    report = explore_cancellation(server, "leaky", probe=lock)
    lines, start = inspect.getsourcelines(leaky)
    first = start + next(i for i, line in enumerate(lines) if "await" in line)
    assert [str(cp) for cp in report.checkpoints] == [
        f"checkpoint 1 at test_testing_kit.py:{first} in leaky: await ctx.report_progress(1, 3)",
        f"checkpoint 2 at test_testing_kit.py:{first + 2} in leaky: "
        "await trio.sleep(1)  # checkpoint 2: cancelled here, the release below never runs",
        f"checkpoint 3 at test_testing_kit.py:{first + 4} in leaky: await trio.sleep(1)",
    ]
    assert report.failing_checkpoints == [2]
    failing = report.run_at(2)
    assert failing.statuses == ["working", "cancelled"]
    assert failing.violations == ["cleanup did not run: 'lock' acquired 1, released 0"]
    with pytest.raises(ExplorationFailed) as error:
        report.assert_ok()
    message = str(error.value)
    assert f"cancelled at checkpoint 2 at test_testing_kit.py:{first + 2} in leaky" in message
    assert "fault.cancel" in message and "task.transition task-1 working -> cancelled" in message


@pytest.mark.parametrize("via", ["cancel", "request", "disconnect"])
def test_exploration_passes_a_correct_tool(via: Any) -> None:
    report = explore_cancellation(server, "careful", probe=lock, via=via)
    assert len(report.checkpoints) == 4
    report.assert_ok()
    if via == "cancel":
        assert all(r.statuses == ["working", "cancelled"] for r in report.runs)
        assert report.baseline.statuses == ["working", "completed"]


@pytest.mark.parametrize("via", ["cancel", "request", "disconnect"])
def test_exploration_in_the_modern_era(via: Any) -> None:
    # The same scenario with a 2026-07-28 client: the server makes the call a task (its work is
    # held past the auto-task window), waiters poll tasks/get, cancel is an acknowledgement.
    modern = {"protocol": "2026-07-28"}
    report = explore_cancellation(server, "careful", probe=lock, via=via, harness_options=modern)
    assert len(report.checkpoints) == 4
    report.assert_ok()
    assert report.baseline.statuses == ["working", "completed"]
    if via == "cancel":
        assert all(r.statuses == ["working", "cancelled"] for r in report.runs)
    # The planted bug is found at the checkpoint where it is (2), and nowhere after it. A cancel
    # delivered by a message (a request, a dropped connection) lands a scheduler round or more
    # after the checkpoint it was sent at, so with those the one before (1) can leak too: how
    # far the work got meanwhile is scheduling, the same in both eras.
    leaky_modern = explore_cancellation(server, "leaky", probe=lock, via=via, harness_options=modern)
    if via == "cancel":
        assert leaky_modern.failing_checkpoints == [2]
    else:
        assert 2 in leaky_modern.failing_checkpoints and 3 not in leaky_modern.failing_checkpoints


def test_exploration_checks_every_run_with_your_check() -> None:
    def check(h: Harness, task_id: str) -> None:
        assert h.status(task_id) == "completed", f"ended {h.status(task_id)}"

    report = explore_cancellation(server, "slow", {"seconds": 3}, check=check, ttl_ms=60_000)
    assert report.baseline.ok
    assert report.failing_checkpoints == list(range(1, len(report.checkpoints) + 1))
    (violation,) = report.run_at(1).violations
    assert violation.startswith("check failed: ended cancelled")


def test_exploration_with_a_custom_start() -> None:
    async def start(h: Harness) -> str:
        assert (await h.client.call_tool("echo", {"text": "warm-up"})).text == "warm-up"
        return await h.start_task("careful", ttl_ms=5_000)

    report = explore_cancellation(server, "careful", probe=lock, start=start, harness_options={"owner": "me"})
    report.assert_ok()
    assert len(report.runs) == 4
    assert "5.000000 task.expired task-1" in report.run_at(1).trace.splitlines()[-3]


def test_exploration_can_be_bounded() -> None:
    report = explore_cancellation(server, "slow", {"seconds": 3}, max_checkpoints=2, waiters=0)
    assert len(report.checkpoints) == 7 and [r.k for r in report.runs] == [1, 2]
    report.assert_ok()


def test_exploration_reports_a_scenario_error() -> None:
    report = explore_cancellation(server, "no_such_tool")
    assert not report.ok and report.runs == []
    assert "Unknown tool: 'no_such_tool'" in report.baseline.violations[0]


# ----------------------------------------------------------------------------- fault injection


async def test_drop_after_the_nth_message() -> None:
    lock.reset()
    # out: 1 = initialize result, 2 = CreateTaskResult. The connection drops after it.
    async with open_harness(server, faults=Faults().drop_after(2, direction="out")) as h:
        task_id = await h.start_task("careful")
        with pytest.raises(ConnectionClosed):
            await h.client.get_task(task_id)
        await h.settle()
        assert [e.fields["reason"] for e in h.trace.of_kind("fault.drop")] == [
            "drop_after(2, direction='out')"
        ]
        assert h.trace.statuses("task-1") == ["working"]
        assert [e.kind for e in h.trace.for_task("task-1")] == [
            "task.created",
            "actor.start",
            "task.removed",
            "actor.stop",
        ]
        assert "SessionActor session-1" not in h.trace.running_actors()
    assert lock.balanced


async def test_manual_drop_mid_work_runs_the_tools_cleanup() -> None:
    lock.reset()
    async with open_harness(server) as h:
        task_id = await h.start_task("careful")
        await h.advance(0.5)
        assert lock.acquired == 1 and lock.released == 0
        h.drop()
        await h.settle()
        assert lock.balanced
        assert h.actor(task_id) is None


async def test_delay_lets_later_messages_overtake() -> None:
    arrivals: list[str] = []
    faults = Faults().delay(1.0, match="notifications/tasks/status", times=1)
    async with open_harness(server, faults=faults) as h:
        h.client.status_callbacks.append(lambda task: arrivals.append(f"status {task.status.value}"))
        task_id = await h.start_task("echo", {"text": "x"})
        result = await h.client.task_result(task_id)
        arrivals.append(f"result {result.text}")
        await h.advance(2)
    # The server sent the status notification first; the link delivered it a second late.
    assert arrivals == ["result x", "status completed"]
    assert [e.fields["number"] for e in h.trace.of_kind("fault.delay")] == [3]


async def test_ordered_delay_stalls_the_direction() -> None:
    faults = Faults().delay(5.0, direction="in", match="tools/call", ordered=True)
    async with open_harness(server, faults=faults) as h:
        task_id = await h.start_task("echo", {"text": "x"})
        assert trio.current_time() == 5.0
        assert (await h.client.get_task(task_id)).status in ("working", "completed")
    calls = [e for e in h.trace.of_kind("message.in") if b"tools/call" in e.fields["data"]]
    assert [e.time for e in calls] == [5.0]


async def test_reorder_swaps_responses() -> None:
    faults = Faults().reorder("ping")
    async with open_harness(server, faults=faults) as h:
        order: list[str] = []

        async def call(name: str) -> None:
            if name == "ping":
                await h.client.ping()
            else:
                await h.client.list_tools()
            order.append(name)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call, "ping")
            await h.settle()
            nursery.start_soon(call, "tools/list")
    assert order == ["tools/list", "ping"]


async def test_tool_raises_at_its_nth_progress_report() -> None:
    faults = Faults().tool_raises("slow", RuntimeError("disk full"), at_progress=2)
    async with open_harness(server, faults=faults) as h:
        task_id = await h.start_task("slow", {"seconds": 3})
        result = await h.client.task_result(task_id)
        assert result.is_error and result.text == "disk full"
        h.trace.assert_statuses(task_id, "working", "failed")
        assert (await h.client.get_task(task_id)).status_message == "disk full"
        assert trio.current_time() == 1.0  # the second report comes after the first step


async def test_tool_raises_at_a_checkpoint_after_its_cleanup() -> None:
    lock.reset()
    faults = Faults().tool_raises("careful", ValueError("boom"), at_checkpoint=3)
    async with open_harness(server, faults=faults) as h:
        task_id = await h.start_task("careful")
        result = await h.client.task_result(task_id)
        assert result.is_error and result.text == "boom"
        # A cancelled bare checkpoint suspends once more to deliver the cancellation.
        assert [cp.line for cp in h.checkpoints(task_id)][2:] == ["await trio.lowlevel.checkpoint()"] * 2
    assert lock.balanced


def test_fault_plan_validation() -> None:
    with pytest.raises(ValueError):
        Faults().tool_raises("x", RuntimeError(), at_progress=1, at_checkpoint=1)


def test_open_harness_needs_a_mock_clock() -> None:
    async def main() -> None:
        async with open_harness(server):
            pass  # pragma: no cover

    with pytest.raises(RuntimeError, match="MockClock"):
        trio.run(main)


# ----------------------------------------------------------------------------- the pytest plugin


@pytest.fixture
def mcp_server() -> Server:
    return server


async def test_mcp_harness_fixture_runs_on_an_autojump_clock(mcp_harness: HarnessFactory) -> None:
    clock = trio.lowlevel.current_clock()
    assert isinstance(clock, trio.testing.MockClock) and clock.autojump_threshold == 0
    h = await mcp_harness(server)
    other = await mcp_harness(server, faults=Faults().delay(1.0, match="ping"))
    # Finishes well inside its TTL (a 2-day request is clamped to the 1-day maximum).
    task_id = await h.start_task("slow", {"seconds": 80_000}, ttl_ms=2 * 86_400_000)
    await h.client.task_result(task_id)
    assert trio.current_time() == 80_000
    await other.client.ping()
    assert other.trace is not h.trace


async def test_mcp_client_fixture(mcp_client: Client) -> None:
    assert [t.name for t in await mcp_client.list_tools()] == ["echo", "slow", "leaky", "careful"]
    assert (await mcp_client.call_tool("echo", {"text": "hi"})).text == "hi"


async def test_mcp_clock_fixture_is_the_runs_clock(mcp_clock: trio.testing.MockClock) -> None:
    assert trio.lowlevel.current_clock() is mcp_clock
    await trio.sleep(3600)
    assert mcp_clock.current_time() == 3600


@pytest.mark.trio_mcp(seed=7)
async def test_mcp_seed_marker(mcp_client: Client) -> None:
    assert (await mcp_client.call_tool("slow", {"seconds": 1})).text == "slept 1s"


@pytest.mark.trio_mcp(seed=None)
async def test_seed_none_keeps_trios_scheduling(mcp_client: Client) -> None:
    assert (await mcp_client.call_tool("echo", {"text": "ok"})).text == "ok"
