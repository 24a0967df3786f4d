"""The reverse direction: the server asks the client to run elicitation / sampling as tasks,
and follows them with tasks/get, tasks/result, tasks/list and tasks/cancel sent to the client."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from conftest import kit_client

from trio_mcp import Context, Server
from trio_mcp.protocol.errors import INVALID_REQUEST, McpError
from trio_mcp.protocol.messages import (
    RELATED_TASK_KEY,
    CreateMessageParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
)

pytestmark = pytest.mark.every_store  # make test runs it again on each store

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}}


def make_server() -> Server:
    server = Server("reverse", version="1")

    @server.tool()
    async def survey(ctx: Context) -> str:
        created = await ctx.elicit_task("Name?", SCHEMA, ttl_ms=60_000)
        task_id = created.task.task_id
        assert created.task.status == "working"
        final = await ctx.client_tasks.poll(task_id)
        listed = [t.task_id async for t in ctx.client_tasks.all()]
        result = await ctx.client_tasks.result(task_id)
        answer = result["content"]["answer"]
        return f"{final.status.value} {result['action']} {answer} listed={listed == [task_id]}"

    @server.tool()
    async def abandon(ctx: Context) -> str:
        created = await ctx.elicit_task("Never mind?", SCHEMA)
        await trio.sleep(1)
        cancelled = await ctx.client_tasks.cancel(created.task.task_id)
        again = await ctx.client_tasks.get(created.task.task_id)
        return f"{cancelled.status.value} {again.status.value}"

    @server.tool()
    async def think(ctx: Context) -> str:
        created = await ctx.sample_task(["2+2?"], max_tokens=5)
        result = await ctx.client_tasks.result(created.task.task_id)
        return str(result["content"]["text"])

    return server


async def test_server_runs_an_elicitation_task_on_the_client(autojump_clock: Any) -> None:
    seen: list[ElicitRequestParams] = []

    async def human(params: ElicitRequestParams) -> ElicitResult:
        seen.append(params)
        await trio.sleep(3)  # the user takes a while: the server polls meanwhile
        return ElicitResult(action="accept", content={"answer": "Ada"})

    async with kit_client(make_server(), on_elicit=human) as client:
        assert client.capabilities["tasks"]["requests"] == {"elicitation": {"create": {}}}
        created = await client.call_tool_as_task("survey", {})
        result = await client.task_result(created.task.task_id)
        assert result.text == "completed accept Ada listed=True"
        # The elicitation task is tied to the server task that asked for it.
        assert seen[0].meta == {RELATED_TASK_KEY: {"taskId": created.task.task_id}}
        assert seen[0].task is not None


async def test_server_cancels_a_client_task_and_the_handler_stops(autojump_clock: Any) -> None:
    stopped: list[str] = []

    async def human(params: ElicitRequestParams) -> ElicitResult:
        try:
            await trio.sleep_forever()
        finally:
            stopped.append(params.message)
        raise AssertionError("unreachable")

    async with kit_client(make_server(), on_elicit=human) as client:
        result = await client.call_tool("abandon", {})
        assert result.text == "cancelled cancelled"
        await trio.testing.wait_all_tasks_blocked()
        assert stopped == ["Never mind?"]


async def test_sampling_task_on_the_client(autojump_clock: Any) -> None:
    async def model(params: CreateMessageParams) -> CreateMessageResult:
        return CreateMessageResult(role="assistant", content={"type": "text", "text": "4"}, model="m")

    async with kit_client(make_server(), on_sample=model) as client:
        assert (await client.call_tool("think", {})).text == "4"


async def test_no_task_augmented_request_to_a_client_that_did_not_declare_it(autojump_clock: Any) -> None:
    async with kit_client(make_server()) as client:
        assert "tasks" not in client.capabilities
        with pytest.raises(McpError) as info:
            await client.call_tool("survey", {})
        assert info.value.code == INVALID_REQUEST
        assert "elicitation/create" in info.value.message


def probe_server() -> Server:
    """A tool that asks the client about a task id the client never created."""
    server = Server("probe", version="1")

    @server.tool()
    async def probe(ctx: Context) -> str:
        try:
            await ctx.client_tasks.get("not-a-task")
        except McpError as exc:
            return str(exc.code)
        return "answered"

    return server


async def test_client_without_receiver_refuses_tasks_requests(autojump_clock: Any) -> None:
    async with kit_client(probe_server()) as client:
        assert (await client.call_tool("probe", {})).text == "-32601"


async def test_client_task_ids_of_another_peer_are_not_found(autojump_clock: Any) -> None:
    async def human(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    async with kit_client(probe_server(), on_elicit=human) as client:
        assert (await client.call_tool("probe", {})).text == "-32602"


async def test_a_client_answers_malformed_task_queries_with_invalid_params(autojump_clock: Any) -> None:
    server = Server("raw", version="1")

    @server.tool()
    async def raw(ctx: Context) -> str:
        session = ctx._call.peer  # the tool's own connection: a query the SDK would not send
        codes = []
        for method in ("tasks/get", "tasks/cancel"):
            try:
                await session.request(method, {"taskId": 5})
            except McpError as exc:
                codes.append(str(exc.code))
        await session.request("ping")  # and the client goes on serving
        return " ".join(codes)

    async def human(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    async with kit_client(server, on_elicit=human) as client:
        assert (await client.call_tool("raw", {})).text == "-32602 -32602"
