"""URL-mode elicitation (MCP 2025-11-25 and 2026-07-28), our client against our server in
memory: ``ctx.elicit_url`` on the server, ``on_elicit_url`` on the client, the
``elicitation.url`` capability declared only with a handler, a mode the client did not declare
refused with -32602, and ``notifications/elicitation/complete`` and the -32042 refusal
(2025-11-25 only)."""

from __future__ import annotations

import json

import pytest
import trio

from trio_mcp import McpError, Server
from trio_mcp.client import Client, UrlElicitationRequired, connect_in_memory
from trio_mcp.protocol.converter import unstructure
from trio_mcp.protocol.messages import ElicitRequestParams, ElicitResult, ElicitUrlRequestParams
from trio_mcp.server import Context
from trio_mcp.transports.memory import memory_transport_pair

MODERN = "2026-07-28"
ERAS = ["2025-11-25", MODERN]
CONNECT = "https://mcp.example.com/connect?session=abc"


def url_server() -> Server:
    server = Server("url")

    async def ask(ctx: Context) -> str:
        answer = await ctx.elicit_url("Connect your Example account", CONNECT, elicitation_id="e-1")
        completed = ctx.elicitation_complete("e-1") if answer.action == "accept" else False
        ctx.elicitation_complete("e-unknown")  # the client ignores ids it was never asked about
        return json.dumps({"action": answer.action, "content": answer.content, "completed": completed})

    @server.tool()
    async def connect_account(ctx: Context) -> str:
        return await ask(ctx)

    @server.tool(task_support="required")
    async def connect_account_task(ctx: Context) -> str:
        return await ask(ctx)

    @server.tool()
    async def form(ctx: Context) -> str:
        answer = await ctx.elicit(
            "Your name?", {"type": "object", "properties": {"name": {"type": "string"}}}
        )
        return answer.action

    return server


@pytest.mark.parametrize("action", ["accept", "decline", "cancel"])
@pytest.mark.parametrize("protocol", ERAS)
async def test_the_handler_gets_the_url_and_the_message_and_its_answer_reaches_the_tool(
    protocol: str, action: str
) -> None:
    asked: list[ElicitUrlRequestParams] = []
    completed: list[str] = []
    done = trio.Event()

    async def consent(params: ElicitUrlRequestParams) -> ElicitResult:
        asked.append(params)
        # a stray content is never sent in URL mode
        return ElicitResult(action=action, content={"ignored": True})  # type: ignore[arg-type]

    def on_complete(elicitation_id: str) -> None:
        completed.append(elicitation_id)
        done.set()

    with trio.fail_after(10):
        async with connect_in_memory(
            url_server(), on_elicit_url=consent, on_elicitation_complete=on_complete, protocol=protocol
        ) as client:
            result = await client.call_tool("connect_account")
            if protocol != MODERN and action == "accept":
                await done.wait()
    [params] = asked
    assert (params.mode, params.url, params.message) == ("url", CONNECT, "Connect your Example account")
    answer = json.loads(result.text)
    assert answer["action"] == action and answer["content"] is None
    if protocol == MODERN:  # no elicitationId, no completion notification in 2026-07-28
        assert params.elicitation_id is None and completed == [] and answer["completed"] is False
    else:
        assert params.elicitation_id == "e-1"
        assert completed == (["e-1"] if action == "accept" else [])


async def test_a_modern_task_asks_through_its_input_requests() -> None:
    asked: list[ElicitUrlRequestParams] = []

    async def consent(params: ElicitUrlRequestParams) -> ElicitResult:
        asked.append(params)
        return ElicitResult(action="accept")

    with trio.fail_after(10):
        async with connect_in_memory(url_server(), on_elicit_url=consent, protocol=MODERN) as client:
            result = await client.call_tool("connect_account_task")
    assert [p.url for p in asked] == [CONNECT]
    assert json.loads(result.text)["action"] == "accept"


def capabilities(protocol: str, **handlers: object) -> dict[str, object]:
    client_side, _ = memory_transport_pair()
    client = Client(client_side, **handlers)  # type: ignore[arg-type]
    return client.modern_capabilities() if protocol == MODERN else client.capabilities


@pytest.mark.parametrize("protocol", ERAS)
def test_each_mode_is_declared_only_with_its_handler(protocol: str) -> None:
    async def form(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    async def url(params: ElicitUrlRequestParams) -> ElicitResult:
        return ElicitResult(action="decline")

    assert "elicitation" not in capabilities(protocol)
    assert capabilities(protocol, on_elicit=form)["elicitation"] == {"form": {}}
    assert capabilities(protocol, on_elicit_url=url)["elicitation"] == {"url": {}}
    assert capabilities(protocol, on_elicit=form, on_elicit_url=url)["elicitation"] == {"form": {}, "url": {}}


@pytest.mark.parametrize("protocol", ERAS)
async def test_the_server_does_not_ask_a_client_without_the_url_capability(protocol: str) -> None:
    async def form(params: ElicitRequestParams) -> ElicitResult:
        raise AssertionError("a URL-mode elicitation reached the form handler")

    with trio.fail_after(10):
        async with connect_in_memory(url_server(), on_elicit=form, protocol=protocol) as client:
            with pytest.raises(McpError) as refused:
                await client.call_tool("connect_account")
    expected = -32021 if protocol == MODERN else -32600
    assert refused.value.code == expected and "elicitation.url" in refused.value.message


async def test_a_form_elicitation_sent_to_a_url_only_client_is_refused_with_32602() -> None:
    """The server checks only ``elicitation`` for form mode (an empty object means form): the
    client refuses the mode it did not declare, as the specification says."""

    async def url(params: ElicitUrlRequestParams) -> ElicitResult:
        raise AssertionError("a form elicitation reached the URL handler")

    with trio.fail_after(10):
        async with connect_in_memory(url_server(), on_elicit_url=url) as client:
            with pytest.raises(McpError) as refused:
                await client.call_tool("form")
    assert refused.value.code == -32602 and "'form'" in refused.value.message


async def test_a_32042_refusal_raises_with_its_elicitations_and_their_completion_is_heard() -> None:
    """2025-11-25: a request refused with -32042 (URLElicitationRequiredError) raises
    UrlElicitationRequired with the URL-mode elicitations; their ids are then known, so the
    server's completion notification reaches ``on_elicitation_complete``."""
    server = Server("required")
    required = ElicitUrlRequestParams("Connect your Example account", CONNECT, "e-7")

    @server.tool()
    async def files() -> str:
        raise McpError(
            -32042, "This request requires more information.", {"elicitations": [unstructure(required)]}
        )

    @server.tool()
    async def connected(ctx: Context) -> str:  # stands for the server's connect page's callback
        ctx.elicitation_complete("e-7")
        return "ok"

    completed: list[str] = []
    done = trio.Event()

    def on_complete(elicitation_id: str) -> None:
        completed.append(elicitation_id)
        done.set()

    async def consent(params: ElicitUrlRequestParams) -> ElicitResult:
        return ElicitResult(action="accept")

    with trio.fail_after(10):
        async with connect_in_memory(
            server, on_elicit_url=consent, on_elicitation_complete=on_complete
        ) as client:
            with pytest.raises(UrlElicitationRequired) as raised:
                await client.call_tool("files")
            await client.call_tool("connected")
            await done.wait()
    assert raised.value.code == -32042 and raised.value.elicitations == [required]
    assert completed == ["e-7"]
