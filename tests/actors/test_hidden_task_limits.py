"""A server-directed (2026-07-28) call's hidden task and the task table's limits.

The call is admitted against the limits when it starts (a full table refuses it at once), but
its task takes its place in the table only when it is shown: a call answered within its
auto-task window never counts (it is bounded by its request's admission meanwhile). A task to
be shown when the limits no longer allow it is not shown: the call is answered with the
refusal, and its work stops.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp import Context, Server, TaskLimits
from trio_mcp.protocol import jsonrpc
from trio_mcp.protocol.errors import TASK_LIMIT_REACHED

pytestmark = pytest.mark.every_store

TASKS = "io.modelcontextprotocol/tasks"
WINDOW_MS = 1_000


def envelope() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }


def call(request_id: int, name: str) -> jsonrpc.Request:
    return jsonrpc.Request(request_id, "tools/call", {"name": name, "arguments": {}, "_meta": envelope()})


def make_server(stopped: list[str]) -> Server:
    server = Server("limits", limits=TaskLimits(auto_task_after_ms=WINDOW_MS, max_live_tasks_per_owner=1))

    @server.tool(task_support="optional")
    async def fast() -> str:
        return "fast"

    @server.tool(task_support="optional")
    async def slow() -> str:
        try:
            await trio.sleep(10)
        except trio.Cancelled:
            stopped.append("slow")
            raise
        return "slow"

    return server


async def serve(runtime: Any, message: jsonrpc.Request) -> dict[str, Any]:
    answer, _ = await runtime.serve_one(message, owner="alice", send=lambda _: True)
    result: dict[str, Any] = json.loads(answer)
    return result


async def test_a_hidden_task_counts_under_the_limits_only_once_shown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server([]).open() as runtime:
        supervisor = runtime.supervisor
        answers: list[dict[str, Any]] = []

        async def slow_call() -> None:
            answers.append(await serve(runtime, call(1, "slow")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_call)
            await trio.sleep(WINDOW_MS / 2000)
            # Within its window: it runs here, and counts under no limit but its request's.
            assert supervisor.actors == 1
            assert supervisor.live_count("alice") == 0
            # A call answered within its window never counts, even at the limit's edge.
            assert (await serve(runtime, call(2, "fast")))["result"]["content"][0]["text"] == "fast"
        assert answers[0]["result"]["resultType"] == "task"
        assert supervisor.live_count("alice") == 1  # shown: it counts now
        # The table is full: the next call is refused at once, before any work.
        refused = await serve(runtime, call(3, "fast"))
        assert refused["error"]["code"] == TASK_LIMIT_REACHED


async def test_a_hidden_task_the_limits_no_longer_allow_is_not_shown(
    autojump_clock: trio.testing.MockClock,
) -> None:
    stopped: list[str] = []
    async with make_server(stopped).open() as runtime:
        supervisor = runtime.supervisor
        answers: list[dict[str, Any]] = []

        async def slow_call(request_id: int) -> None:
            answers.append(await serve(runtime, call(request_id, "slow")))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(slow_call, 1)
            nursery.start_soon(slow_call, 2)  # admitted too: nothing counts yet
        shown = [a for a in answers if "result" in a]
        refused = [a for a in answers if "error" in a]
        assert len(shown) == 1 and shown[0]["result"]["resultType"] == "task"
        assert len(refused) == 1 and refused[0]["error"]["code"] == TASK_LIMIT_REACHED
        await trio.sleep(0.1)
        assert stopped == ["slow"]  # the refused call's work stopped; the shown one runs on
        assert supervisor.live_count("alice") == 1
        assert supervisor.actors == 1


async def test_a_hidden_task_is_its_owners_to_poll_and_cancel_while_its_call_waits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Not counted in the table, a hidden task still runs here: its owner, who may have its id
    (a progress notification names it), can poll it and cancel it, and the call is answered
    with the cancellation."""
    server = make_server([])

    @server.tool(task_support="optional")
    async def reports(ctx: Context) -> str:
        await ctx.report_progress(1)
        await trio.sleep(10)
        return "done"

    async with server.open() as runtime:
        notes: list[dict[str, Any]] = []
        answers: list[dict[str, Any]] = []
        message = call(1, "reports")
        message.params["_meta"]["progressToken"] = "p"

        async def the_call() -> None:
            answer, _ = await runtime.serve_one(
                message, owner="alice", send=lambda data: notes.append(json.loads(data)) or True
            )
            answers.append(json.loads(answer))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(the_call)
            await trio.sleep(WINDOW_MS / 2000)
            [progress] = notes
            task_id = progress["params"]["_meta"]["io.modelcontextprotocol/related-task"]["taskId"]
            get = jsonrpc.Request(2, "tasks/get", {"taskId": task_id, "_meta": envelope()})
            assert (await serve(runtime, get))["result"]["status"] == "working"
            other, _ = await runtime.serve_one(get, owner="mallory", send=lambda _: True)
            assert json.loads(other)["error"]["code"] == -32602  # another owner's: not found
            cancel = jsonrpc.Request(3, "tasks/cancel", {"taskId": task_id, "_meta": envelope()})
            assert "result" in await serve(runtime, cancel)
        assert "error" in answers[0]  # the call ends with its task's cancellation
        assert runtime.supervisor.actors == 0
        assert runtime.supervisor.live_count("alice") == 0
