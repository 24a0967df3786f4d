"""The client's smaller duties of issue 31: SEP-2243 parameter headers and the filtering of
tools whose annotations are invalid (over a real socket), the retry after -32022 when pinned to
2026-07-28, elicitation defaults (SEP-1034), and resources, prompts and completion."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
import trio
from oauth_server import Request, Response, serve

from trio_mcp import Server
from trio_mcp.client import connect_http, connect_in_memory
from trio_mcp.protocol.messages import ElicitRequestParams, ElicitResult, TextContent
from trio_mcp.server import Context

MODERN = "2026-07-28"
VALID = {
    "name": "query",
    "inputSchema": {
        "type": "object",
        "properties": {
            "region": {"type": "string", "x-mcp-header": "Region"},
            "priority": {"type": "integer", "x-mcp-header": "Priority"},
            "verbose": {"type": "boolean", "x-mcp-header": "Verbose"},
            "where": {"type": "object", "properties": {"zone": {"type": "string", "x-mcp-header": "Zone"}}},
            "sql": {"type": "string"},
        },
    },
}
INVALID = [
    {"name": "on_a_number", "inputSchema": {"properties": {"n": {"type": "number", "x-mcp-header": "N"}}}},
    {"name": "empty", "inputSchema": {"properties": {"a": {"type": "string", "x-mcp-header": ""}}}},
    {"name": "not_a_token", "inputSchema": {"properties": {"a": {"type": "string", "x-mcp-header": "A B"}}}},
    {
        "name": "duplicate",
        "inputSchema": {
            "properties": {
                "a": {"type": "string", "x-mcp-header": "Same"},
                "b": {"type": "string", "x-mcp-header": "same"},
            }
        },
    },
    {
        "name": "under_items",
        "inputSchema": {
            "properties": {"a": {"type": "array", "items": {"type": "string", "x-mcp-header": "Item"}}}
        },
    },
]


class ModernMock:
    """A 2026-07-28 server that answers from a script and records every POST."""

    def __init__(self, *, refuse_first: bool = False) -> None:
        self.posts: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.refuse_first = refuse_first

    async def __call__(self, request: Request) -> Response:
        body = json.loads(request.body)
        self.posts.append((request.headers, body))
        method, rid = body.get("method"), body.get("id")
        if self.refuse_first:
            self.refuse_first = False
            error = {
                "code": -32022,
                "message": "Unsupported protocol version",
                "data": {"supported": [MODERN]},
            }
            return Response.json(400, {"jsonrpc": "2.0", "id": rid, "error": error})
        if method == "server/discover":
            result: dict[str, Any] = {"supportedVersions": [MODERN], "capabilities": {"tools": {}}}
        elif method == "tools/list":
            result = {"tools": [VALID, *INVALID]}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "ok"}]}
        else:
            result = {}
        return Response.json(200, {"jsonrpc": "2.0", "id": rid, "result": result})


async def test_annotated_arguments_travel_in_mcp_param_headers_and_invalid_tools_are_left_out() -> None:
    mock = ModernMock()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, mock)
        with trio.fail_after(10):
            async with connect_http(f"http://127.0.0.1:{port}/mcp", protocol=MODERN) as client:
                assert [tool.name for tool in await client.list_tools()] == ["query"]
                arguments = {
                    "region": "Hello, 世界",
                    "priority": 42,
                    "verbose": None,  # null: no header
                    "where": {"zone": " padded "},
                    "sql": "SELECT 1",
                }
                await client.call_tool("query", arguments)
        nursery.cancel_scope.cancel()
    headers, body = mock.posts[-1]
    assert body["method"] == "tools/call"
    params = {k: v for k, v in headers.items() if k.startswith("mcp-param-")}
    assert params == {
        "mcp-param-region": "=?base64?SGVsbG8sIOS4lueVjA==?=",
        "mcp-param-priority": "42",
        "mcp-param-zone": "=?base64?IHBhZGRlZCA=?=",
    }


async def test_pinned_to_2026_07_28_a_32022_naming_that_version_is_retried() -> None:
    mock = ModernMock(refuse_first=True)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, mock)
        with trio.fail_after(10):
            async with connect_http(f"http://127.0.0.1:{port}/mcp", protocol=MODERN) as client:
                assert client.protocol_version == MODERN
        nursery.cancel_scope.cancel()
    assert [body["method"] for _, body in mock.posts[:2]] == ["server/discover", "server/discover"]


def defaults_server() -> Server:
    server = Server("defaults")

    @server.tool()
    async def ask(ctx: Context) -> str:
        schema = {
            "type": "object",
            "properties": {
                "name": {"type": "string", "default": "John Doe"},
                "age": {"type": "integer", "default": 30},
                "given": {"type": "string", "default": "unused"},
            },
        }
        answer = await ctx.elicit("who?", schema)
        return json.dumps(answer.content, sort_keys=True)

    return server


@pytest.mark.parametrize("protocol", ["2025-11-25", MODERN])
async def test_an_accepted_elicitation_gets_the_schema_defaults_it_left_out(protocol: str) -> None:
    async def answer(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"given": "mine"})

    with trio.fail_after(10):
        async with connect_in_memory(defaults_server(), on_elicit=answer, protocol=protocol) as client:
            result = await client.call_tool("ask")
    assert json.loads(result.text) == {"age": 30, "given": "mine", "name": "John Doe"}


@pytest.mark.parametrize("protocol", ["2025-11-25", MODERN])
async def test_resources_prompts_and_completion_are_typed(protocol: str) -> None:
    server = Server("docs")

    @server.resource("memo://readme", mime_type="text/plain")
    def readme() -> str:
        return "hello"

    @server.resource("memo://notes/{day}", mime_type="application/octet-stream")
    def notes(day: str) -> bytes:
        return day.encode()

    @server.prompt()
    def greet(who: str) -> str:
        return f"Hello {who}"

    @server.completion("prompt", "greet", "who")
    def names(value: str, context: dict[str, str]) -> list[str]:
        return [n for n in ("alice", "albert", "bob") if n.startswith(value)]

    with trio.fail_after(10):
        async with connect_in_memory(server, protocol=protocol) as client:
            [resource] = await client.list_resources()
            [template] = await client.list_resource_templates()
            blob = await client.read_resource("memo://notes/monday")
            read = await client.read_resource(resource.uri)
            [prompt] = await client.list_prompts()
            got = await client.get_prompt(prompt.name, {"who": "you"})
            values = await client.complete({"type": "ref/prompt", "name": "greet"}, "who", "al")
    assert (resource.uri, resource.name, resource.mime_type) == ("memo://readme", "readme", "text/plain")
    assert (template.uri_template, template.name) == ("memo://notes/{day}", "notes")
    assert blob.contents[0].blob == "bW9uZGF5" and blob.text == ""
    assert read.contents[0].text == read.text == "hello"
    assert read.contents[0].mime_type == "text/plain"
    assert [(a.name, a.required) for a in prompt.arguments or []] == [("who", True)]
    assert got.messages[0].role == "user" and got.text == "Hello you"
    assert isinstance(got.messages[0].content, TextContent)
    assert values == ["alice", "albert"]


def roots_server() -> Server:
    server = Server("roots")

    @server.tool()
    async def where(ctx: Context) -> str:
        return ",".join(root["uri"] for root in await ctx.list_roots())

    return server


@pytest.mark.parametrize("protocol", ["2025-11-25", MODERN])
async def test_roots_are_answered_and_can_change(protocol: str) -> None:
    with trio.fail_after(10):
        async with connect_in_memory(
            roots_server(), roots=[{"uri": "file:///work", "name": "work"}], protocol=protocol
        ) as client:
            assert (await client.call_tool("where")).text == "file:///work"
            await client.set_roots([{"uri": "file:///a"}, {"uri": "file:///b"}])
            assert (await client.call_tool("where")).text == "file:///a,file:///b"


class SessionMock:
    """A 2025-11-25 server that, like the TypeScript SDK's, sends a request during a tool call
    on the session's GET stream, and loses it if that stream is not open yet."""

    def __init__(self) -> None:
        self.get_open = False
        self.call_arrived = trio.Event()
        self.answered = trio.Event()
        self.answer: dict[str, Any] = {}
        self.gets = 0

    async def events(self) -> AsyncIterator[bytes]:
        self.get_open = True  # the headers are out: the stream is open
        await self.call_arrived.wait()
        ask = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
        event = {"jsonrpc": "2.0", "id": "e1", "method": "elicitation/create"}
        event["params"] = {"message": "sure?", "requestedSchema": ask}
        yield f"id: 1\ndata: {json.dumps(event)}\n\n".encode()

    async def __call__(self, request: Request) -> Response:
        session = {"mcp-session-id": "s1"}
        if request.method == "GET":
            self.gets += 1
            if self.gets > 1:
                return Response(405)
            await trio.sleep(0.3)  # slow to open the stream (a proxy, an auth check)
            return Response(
                200, headers={"content-type": "text/event-stream", **session}, stream=self.events()
            )
        if request.method == "DELETE":
            return Response(200)
        body = json.loads(request.body)
        if "method" not in body:  # our answer to the elicitation
            self.answer = body
            self.answered.set()
            return Response(202)
        method, rid = body["method"], body.get("id")
        if method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "mock", "version": "1"},
            }
            return Response.json(200, {"jsonrpc": "2.0", "id": rid, "result": result}, **session)
        if rid is None:
            return Response(202)
        if method == "tools/call":
            if not self.get_open:
                text = "lost: the GET stream was not open"
            else:
                self.call_arrived.set()
                await self.answered.wait()
                text = json.dumps(self.answer["result"]["content"])
            result = {"content": [{"type": "text", "text": text}]}
            return Response.json(200, {"jsonrpc": "2.0", "id": rid, "result": result})
        return Response.json(200, {"jsonrpc": "2.0", "id": rid, "result": {}})


async def test_a_request_on_the_get_stream_right_after_the_handshake_is_not_lost() -> None:
    async def accept(params: ElicitRequestParams) -> ElicitResult:
        return ElicitResult(action="accept", content={"ok": True})

    mock = SessionMock()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, mock)
        with trio.fail_after(10):
            async with connect_http(f"http://127.0.0.1:{port}/mcp", on_elicit=accept) as client:
                result = await client.call_tool("confirm")
        nursery.cancel_scope.cancel()
    assert not result.text.startswith("lost"), result.text
    assert json.loads(result.text) == {"ok": True}
