"""A server-directed (2026-07-28) ``tools/call``: the race that decides its answer — the
task's outcome, its asking for input, a multi round-trip question, a required tool's first
scheduler rounds, the auto-task window — is run by the calling task alone, woken by
callbacks: no Trio task is spawned for it, and each signal still answers as it did."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp import Context, Server, TaskLimits
from trio_mcp.actors._dispatch import REQUIRED_INPUT_ROUNDS, _Race
from trio_mcp.protocol import jsonrpc

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
WINDOW_MS = 1_000
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}


def envelope(*, elicitation: bool = False) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}}
    if elicitation:
        capabilities["elicitation"] = {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }


def call(request_id: int, name: str, *, elicitation: bool = False) -> jsonrpc.Request:
    params = {"name": name, "arguments": {}, "_meta": envelope(elicitation=elicitation)}
    return jsonrpc.Request(request_id, "tools/call", params)


pytestmark = pytest.mark.every_store

_STORES_OWN = ("trio_mcp.actors.supervisor.", "trio_mcp.actors._writer.")
"""Trio tasks a durable store's supervisor spawns around a task (its writes, its removal)."""


class Spawns(trio.abc.Instrument):
    """The Trio tasks spawned for the call while it is installed (not the store's own)."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        if not task.name.startswith(_STORES_OWN):
            self.names.append(task.name)


def make_server() -> Server:
    server = Server("race", limits=TaskLimits(auto_task_after_ms=WINDOW_MS))

    @server.tool(task_support="optional")
    async def fast() -> str:
        return "fast"

    @server.tool(task_support="optional")
    async def slow() -> str:
        await trio.sleep(10)
        return "slow"

    @server.tool(task_support="optional")
    async def a_little_past_the_window() -> str:
        await trio.sleep(WINDOW_MS / 1000 + 0.1)
        return "just late"

    @server.tool(task_support="optional")
    async def ask_name(ctx: Context) -> Any:
        return (await ctx.elicit("name?", NAME_SCHEMA)).content

    @server.tool(task_support="required")
    async def job() -> str:
        return "job"

    @server.tool(task_support="required")
    async def ask_at_once(ctx: Context) -> Any:
        return (await ctx.elicit("name?", NAME_SCHEMA)).content

    @server.tool(task_support="required")
    async def ask_two_together(ctx: Context) -> str:
        async def ask(message: str) -> None:
            await ctx.elicit(message, NAME_SCHEMA)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, "first?")
            nursery.start_soon(ask, "second?")
        return "both"

    @server.tool(task_support="required")
    async def ask_late(ctx: Context) -> Any:
        for _ in range(2 * REQUIRED_INPUT_ROUNDS):
            await trio.lowlevel.checkpoint()
        return (await ctx.elicit("name?", NAME_SCHEMA)).content

    return server


async def serve(runtime: Any, message: jsonrpc.Request) -> dict[str, Any]:
    answer, _ = await runtime.serve_one(message, owner="alice", send=lambda _: True)
    result: dict[str, Any] = json.loads(answer)
    return result


async def counted(runtime: Any, message: jsonrpc.Request) -> tuple[dict[str, Any], list[str], float]:
    """Serve ``message``: its answer, the Trio tasks spawned meanwhile, the (mock) time taken."""
    spawns = Spawns()
    started = trio.current_time()
    trio.lowlevel.add_instrument(spawns)
    try:
        answer = await serve(runtime, message)
    finally:
        trio.lowlevel.remove_instrument(spawns)
    return answer, spawns.names, trio.current_time() - started


async def test_a_call_answered_within_the_window_spawns_only_its_work(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server().open() as runtime:
        await serve(runtime, call(0, "fast"))  # anything started once per runtime is started
        answer, spawned, took = await counted(runtime, call(1, "fast"))
        assert answer["result"]["resultType"] == "complete"
        assert answer["result"]["content"] == [{"type": "text", "text": "fast"}]
        assert took == 0
        # The task's work, named by its task id: nothing else (the race spawns nothing).
        assert len(spawned) == 1, spawned
        assert runtime.supervisor.live_count("alice") == 0  # the result's task is forgotten


async def test_a_call_past_the_window_is_shown_as_a_task_when_the_window_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server().open() as runtime:
        await serve(runtime, call(0, "fast"))
        answer, spawned, took = await counted(runtime, call(1, "slow"))
        assert answer["result"]["resultType"] == "task"
        assert answer["result"]["status"] == "working"
        assert took == pytest.approx(WINDOW_MS / 1000)
        assert len(spawned) == 1, spawned
        # Its outcome comes later, into a race that is over: it changes nothing, and the
        # task ends as usual.
        await trio.sleep(10)
        get = jsonrpc.Request(2, "tasks/get", {"taskId": answer["result"]["taskId"], "_meta": envelope()})
        assert (await serve(runtime, get))["result"]["status"] == "completed"


def test_an_outcome_that_comes_with_the_windows_end_is_shown_as_a_task() -> None:
    """The window's end wins a tie: when the scheduler finds both the window's deadline and
    the tool's end passed at once (a tool of about the window's length: the official suite's
    1 s ``slow_compute`` against the 1 s window), the call is answered with its task."""
    clock = trio.testing.MockClock()  # moved by hand: both deadlines pass in one jump
    answers: list[dict[str, Any]] = []

    async def main() -> None:
        async with make_server().open() as runtime:
            await serve(runtime, call(0, "fast"))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    lambda: _append(answers, serve(runtime, call(1, "a_little_past_the_window")))
                )
                await trio.testing.wait_all_tasks_blocked()
                clock.jump(WINDOW_MS / 1000 + 1)
            get = jsonrpc.Request(
                2, "tasks/get", {"taskId": answers[0]["result"]["taskId"], "_meta": envelope()}
            )
            assert (await serve(runtime, get))["result"]["status"] == "completed"

    trio.run(main, clock=clock)
    assert answers[0]["result"]["resultType"] == "task"


async def _append(into: list[dict[str, Any]], answer: Any) -> None:
    into.append(await answer)


async def test_a_call_asking_for_input_is_shown_at_once_as_an_input_required_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server().open() as runtime:
        await serve(runtime, call(0, "fast"))
        answer, spawned, took = await counted(runtime, call(1, "ask_name", elicitation=True))
        assert answer["result"]["resultType"] == "task"
        assert answer["result"]["status"] == "input_required"
        assert took == 0  # not the window: the task asking for input ended the wait
        assert len(spawned) == 1, spawned


async def test_a_required_tool_is_shown_as_a_task_even_when_it_ends_at_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server().open() as runtime:
        await serve(runtime, call(0, "fast"))
        answer, spawned, took = await counted(runtime, call(1, "job"))
        assert answer["result"]["resultType"] == "task"
        assert took == 0
        assert len(spawned) == 1, spawned


async def test_input_a_required_tool_asks_at_once_is_gathered_by_retry_first(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server().open() as runtime:
        await serve(runtime, call(0, "fast"))
        answer, spawned, took = await counted(runtime, call(1, "ask_at_once", elicitation=True))
        assert answer["result"]["resultType"] == "input_required"
        [question] = answer["result"]["inputRequests"].values()
        assert question["params"]["message"] == "name?"
        assert took == 0
        assert len(spawned) == 1, spawned
        await trio.sleep(0.1)
        assert runtime.supervisor.live_count("alice") == 0  # not shown: the task is gone


async def test_questions_a_required_tool_asks_together_are_all_in_one_input_required_result(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server().open() as runtime:
        answer = await serve(runtime, call(1, "ask_two_together", elicitation=True))
        assert answer["result"]["resultType"] == "input_required"
        messages = sorted(q["params"]["message"] for q in answer["result"]["inputRequests"].values())
        assert messages == ["first?", "second?"]


async def test_input_a_required_tool_asks_after_its_first_rounds_goes_through_the_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server().open() as runtime:
        answer = await serve(runtime, call(1, "ask_late", elicitation=True))
        assert answer["result"]["resultType"] == "task"
        task_id = answer["result"]["taskId"]
        await trio.sleep(0.1)
        get = jsonrpc.Request(2, "tasks/get", {"taskId": task_id, "_meta": envelope()})
        assert (await serve(runtime, get))["result"]["status"] == "input_required"


async def test_a_caller_cancelled_during_the_race_leaves_no_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with make_server().open() as runtime:
        with trio.move_on_after(WINDOW_MS / 2000):
            await serve(runtime, call(1, "slow"))
        await trio.sleep(0.1)
        assert runtime.supervisor.live_count("alice") == 0
        await trio.sleep(20)  # nothing fires into the call that was cancelled


async def test_the_race_wakes_its_waiter_once_and_ignores_signals_once_over() -> None:
    race = _Race()
    race.settle()  # before the wait: it returns at its checkpoint
    with trio.testing.assert_checkpoints():
        await race.wait()
    race.close()
    race.settle()  # over: nothing

    race = _Race()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(race.wait)
        await trio.testing.wait_all_tasks_blocked()
        race.settle()
        race.settle()  # a second signal: nothing more
    assert race.settled

    race = _Race()
    with trio.move_on_after(0.01):
        await race.wait()  # timed out: the waiter is forgotten...
    race.close()
    race.settle()  # ...so a signal after that reschedules nothing
    assert not race.settled
