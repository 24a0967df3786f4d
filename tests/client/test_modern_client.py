"""The Client in both eras: ``protocol="auto"`` settles on 2026-07-28 with a server that speaks
it and falls back to the 2025-11-25 handshake otherwise; modern calls answer input requests
(MRTR and task ``inputRequests``) with the client's handlers, and follow server-directed tasks."""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from trio_mcp import Context, McpError, Server, TaskLimits, TaskStatus, connect, connect_in_memory
from trio_mcp.client import Client, connect_websocket
from trio_mcp.protocol.errors import INVALID_REQUEST, MISSING_REQUIRED_CLIENT_CAPABILITY, TASK_CANCELLED
from trio_mcp.protocol.messages import CallToolResult, DetailedTask, ElicitRequestParams, ElicitResult
from trio_mcp.server import serve_websocket
from trio_mcp.transports.memory import MemoryTransport, memory_transport_pair

pytestmark = pytest.mark.every_store  # make test runs it again on each store

NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}

server = Server("both-eras", version="2.0", limits=TaskLimits(auto_task_after_ms=1_000))
stopped: list[str] = []


@server.tool()
async def echo(text: str) -> str:
    return text


@server.tool()
async def slow(seconds: float) -> str:
    try:
        await trio.sleep(seconds)
    finally:
        stopped.append("slow")
    return f"slept {seconds:g}"


@server.tool()
async def greet(ctx: Context) -> str:
    first = await ctx.elicit("Your name?", NAME_SCHEMA)
    second = await ctx.elicit("And your friend's?", NAME_SCHEMA)
    assert first.content is not None and second.content is not None
    return f"hello {first.content['name']} and {second.content['name']}"


@server.tool(task_support="required")
async def report(pages: int) -> str:
    await trio.sleep(pages)
    return f"{pages} pages"


def answering(*names: str) -> Callable[[ElicitRequestParams], Any]:
    """An ``on_elicit`` handler answering the questions it is asked with ``names``, in order."""
    asked: list[str] = []

    async def on_elicit(params: ElicitRequestParams) -> ElicitResult:
        asked.append(params.message)
        return ElicitResult("accept", {"name": names[len(asked) - 1]})

    on_elicit.asked = asked  # type: ignore[attr-defined]
    return on_elicit


# ----------------------------------------------------------------------------- era selection


async def test_auto_settles_on_the_modern_era_with_a_server_that_speaks_it() -> None:
    async with connect_in_memory(server, protocol="auto") as client:
        assert (client.era, client.protocol_version) == ("modern", "2026-07-28")
        assert client.discovery is not None
        assert client.discovery["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "both-eras"
        assert client.server is None  # no initialize happened
        assert (await client.call_tool("echo", {"text": "hi"})).text == "hi"


async def test_a_pinned_handshake_client_never_probes() -> None:
    async with connect_in_memory(server, protocol="2025-11-25") as client:
        assert (client.era, client.protocol_version) == ("handshake", "2025-11-25")
        assert client.server is not None and client.server.protocol_version == "2025-11-25"


@asynccontextmanager
async def legacy_peer(on_discover: str) -> AsyncIterator[tuple[MemoryTransport, list[str]]]:
    """A handshake-only server: answers ``initialize`` and ``tools/list``; ``server/discover``
    gets an error (``on_discover="error"``), an -32022 naming only other versions
    (``"unsupported"``), or no answer at all (``"silence"``). Yields the client's end and the
    methods it received."""
    client_side, server_side = memory_transport_pair()
    seen: list[str] = []

    async def serve() -> None:
        while True:
            try:
                message = json.loads(await server_side.receive_bytes())
            except trio.EndOfChannel:
                return
            method = message.get("method")
            seen.append(method)
            if "id" not in message:
                continue
            reply: dict[str, Any] = {"jsonrpc": "2.0", "id": message["id"]}
            if method == "initialize":
                reply["result"] = {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "legacy", "version": "1"},
                }
            elif method == "tools/list":
                reply["result"] = {"tools": []}
            elif method == "server/discover" and on_discover == "silence":
                continue
            elif method == "server/discover" and on_discover == "unsupported":
                reply["error"] = {
                    "code": -32022,
                    "message": "Unsupported protocol version",
                    "data": {"supported": ["2027-01-01"], "requested": "2026-07-28"},
                }
            else:
                reply["error"] = {"code": -32600, "message": "Invalid request: send 'initialize' first"}
            await server_side.send(json.dumps(reply).encode())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        yield client_side, seen
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("on_discover", ["error", "unsupported"])
async def test_auto_falls_back_to_initialize_when_the_probe_gets_no_modern_answer(on_discover: str) -> None:
    async with legacy_peer(on_discover) as (transport, seen), connect(transport, protocol="auto") as client:
        assert (client.era, client.protocol_version) == ("handshake", "2025-11-25")
        assert await client.list_tools() == []
        assert seen == ["server/discover", "initialize", "notifications/initialized", "tools/list"]


async def test_auto_falls_back_when_the_probe_is_never_answered(autojump_clock: Any) -> None:
    async with legacy_peer("silence") as (transport, seen), connect(transport, protocol="auto") as client:
        assert client.era == "handshake"
        assert trio.current_time() == pytest.approx(5.0)  # the documented probe timeout
        assert await client.list_tools() == []
        # The unanswered probe is withdrawn before the handshake starts.
        assert seen == [
            "server/discover",
            "notifications/cancelled",
            "initialize",
            "notifications/initialized",
            "tools/list",
        ]


async def test_a_client_pinned_to_the_modern_era_fails_against_a_legacy_server() -> None:
    async with legacy_peer("error") as (transport, _):
        with pytest.raises(McpError) as info:
            async with connect(transport, protocol="2026-07-28"):
                pass  # pragma: no cover
        assert info.value.code == INVALID_REQUEST


# ----------------------------------------------------------------------------- modern calls


async def test_mrtr_input_is_answered_by_the_handlers_and_the_call_retried() -> None:
    on_elicit = answering("Ada", "Grace")
    async with connect_in_memory(
        server, protocol="2026-07-28", on_elicit=on_elicit, tasks_extension=False
    ) as client:
        result = await client.call_tool("greet")
        assert result.text == "hello Ada and Grace"
        assert on_elicit.asked == ["Your name?", "And your friend's?"]  # type: ignore[attr-defined]


async def test_a_modern_call_needing_input_the_client_cannot_give_is_refused() -> None:
    async with connect_in_memory(server, protocol="2026-07-28", tasks_extension=False) as client:
        with pytest.raises(McpError) as info:
            await client.call_tool("greet")
        assert info.value.code == MISSING_REQUIRED_CLIENT_CAPABILITY
        assert info.value.data == {"requiredCapabilities": {"elicitation": {}}}


async def test_server_directed_tasks_fast_calls_are_results_slow_ones_tasks(autojump_clock: Any) -> None:
    stopped.clear()
    async with connect_in_memory(server, protocol="2026-07-28") as client:
        fast = await client.start_tool("slow", {"seconds": 0.5})
        assert isinstance(fast, CallToolResult) and fast.text == "slept 0.5"
        started = trio.current_time()
        task = await client.start_tool("slow", {"seconds": 30})
        assert isinstance(task, DetailedTask)
        assert task.status == TaskStatus.WORKING and task.result_type == "task"
        assert trio.current_time() - started == pytest.approx(1.0)  # the auto-task window
        result = await client.task_result(task.task_id)
        assert result.text == "slept 30"
        assert trio.current_time() - started == pytest.approx(30.0, abs=0.6)  # polled every 500 ms


async def test_task_input_is_answered_through_tasks_update(autojump_clock: Any) -> None:
    on_elicit = answering("Ada", "Grace")
    async with connect_in_memory(server, protocol="2026-07-28", on_elicit=on_elicit) as client:
        task = await client.start_tool("greet")
        assert isinstance(task, DetailedTask)
        assert task.status == TaskStatus.INPUT_REQUIRED  # asked for input inside the window
        assert task.input_requests is None  # a CreateTaskResult is the task alone
        detailed = await client.get_detailed_task(task.task_id)
        assert detailed.input_requests is not None and list(detailed.input_requests) == ["input-0"]
        request = detailed.input_requests["input-0"]
        assert request["method"] == "elicitation/create"
        assert request["params"]["message"] == "Your name?"
        assert (await client.task_result(task.task_id)).text == "hello Ada and Grace"
        done = await client.get_detailed_task(task.task_id)
        assert done.status == TaskStatus.COMPLETED and done.input_requests is None


async def test_required_tools_are_tasks_and_cancel_really_stops_the_work(autojump_clock: Any) -> None:
    stopped.clear()
    async with connect_in_memory(server, protocol="2026-07-28") as client:
        assert (await client.call_tool("report", {"pages": 3})).text == "3 pages"
        task = await client.start_tool("slow", {"seconds": 100})
        assert isinstance(task, DetailedTask)
        cancelled = await client.cancel_task(task.task_id)
        assert cancelled.status == TaskStatus.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert stopped == ["slow"]
        with pytest.raises(McpError) as info:
            await client.task_result(task.task_id)
        assert info.value.code == TASK_CANCELLED


async def test_call_tool_as_task_is_refused_in_the_modern_era() -> None:
    async with connect_in_memory(server, protocol="2026-07-28") as client:
        with pytest.raises(McpError, match="the server decides"):
            await client.call_tool_as_task("report", {"pages": 1})


async def test_two_eras_on_one_server_at_once(autojump_clock: Any) -> None:
    async with server.open() as runtime, trio.open_nursery() as nursery:
        clients: list[Client] = []
        pairs = [memory_transport_pair() for _ in range(2)]
        for _, server_side in pairs:
            nursery.start_soon(runtime.serve, server_side)
        async with (
            connect(pairs[0][0], protocol="2025-11-25") as old,
            connect(pairs[1][0], protocol="2026-07-28") as new,
        ):
            clients += [old, new]
            created = await old.call_tool_as_task("report", {"pages": 2})
            modern = await new.start_tool("report", {"pages": 2})
            assert isinstance(modern, DetailedTask)
            assert (await old.task_result(created.task.task_id)).text == "2 pages"
            assert (await new.task_result(modern.task_id)).text == "2 pages"
            with pytest.raises(McpError):  # neither sees the other's tasks
                await new.get_task(created.task.task_id)
            with pytest.raises(McpError):
                await old.get_task(modern.task_id)
        nursery.cancel_scope.cancel()
    assert [c.era for c in clients] == ["handshake", "modern"]


async def test_both_eras_over_websocket() -> None:
    """The modern era over a real socket: the same client API as in memory."""
    stopped.clear()

    async def answer(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult("accept", {"name": "Ada"})

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(functools.partial(serve_websocket, server, ping_interval=None))
            url = f"ws://127.0.0.1:{port}/"
            async with connect_websocket(url, protocol="auto", on_elicit=answer) as modern:
                assert modern.era == "modern"
                assert (await modern.call_tool("echo", {"text": "over the wire"})).text == "over the wire"
                task = await modern.start_tool("slow", {"seconds": 30})
                assert isinstance(task, DetailedTask) and task.status == TaskStatus.WORKING
                assert (await modern.cancel_task(task.task_id)).status == TaskStatus.CANCELLED
                asking = await modern.start_tool("greet")
                assert isinstance(asking, DetailedTask)
                assert (await modern.task_result(asking.task_id)).text == "hello Ada and Ada"
            async with connect_websocket(url, protocol="2025-11-25") as old:
                assert old.era == "handshake"
                created = await old.call_tool_as_task("report", {"pages": 0})
                assert (await old.task_result(created.task.task_id)).text == "0 pages"
            nursery.cancel_scope.cancel()
        assert stopped == ["slow"]
