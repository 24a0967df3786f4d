"""Resources, templates, prompts and completion, on the wire, in both protocol eras."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import trio

from trio_mcp import Context, Server
from trio_mcp.protocol.messages import ImageContent
from trio_mcp.transports.memory import MemoryTransport, memory_transport_pair

MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
PNG = base64.b64encode(b"\x89PNG").decode()


def make_server() -> Server:
    server = Server("surface", version="1")

    @server.resource("test://text", name="text", description="Some text", mime_type="text/plain")
    def text() -> str:
        return "hello"

    @server.resource("test://blob", mime_type="application/octet-stream")
    async def blob() -> bytes:
        return b"\x00\x01\x02"

    @server.resource("test://items/{item}/data", mime_type="application/json")
    def item(item: str) -> str:
        return json.dumps({"item": item})

    @server.prompt(description="Greets someone")
    def greet(name: str, style: str = "plain") -> str:
        return f"Hello {name} ({style})"

    @server.prompt()
    async def picture() -> list[Any]:
        return [ImageContent(PNG, "image/png"), ("assistant", "What do you see?")]

    @server.prompt()
    async def asks(ctx: Context) -> str:
        answer = await ctx.elicit(
            "Topic?", {"type": "object", "properties": {"t": {"type": "string"}}}, key="topic"
        )
        assert answer.content is not None
        return f"About {answer.content['t']}"

    @server.completion("prompt", "greet", "name")
    def names(value: str, context: dict[str, str]) -> list[str]:
        return [n for n in ("Ada", "Alan", "Grace") if n.startswith(value)]

    @server.completion("resource", "test://items/{item}/data", "item")
    async def items(value: str, context: dict[str, str]) -> list[str]:
        return [f"{value}{n}" for n in range(150)]

    return server


class Wire:
    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self.ids = 0
        self.notifications: list[dict[str, Any]] = []

    async def call(
        self, method: str, params: dict[str, Any] | None = None, *, modern: bool = False
    ) -> dict[str, Any]:
        self.ids += 1
        body = dict(params or {})
        if modern:
            body["_meta"] = MODERN_META
        await self.transport.send(
            json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": body}).encode()
        )
        while True:
            message = json.loads(await self.transport.receive_bytes())
            if "id" in message:
                assert message["id"] == self.ids
                return message
            self.notifications.append(message)

    async def next_notification(self) -> dict[str, Any]:
        if self.notifications:
            return self.notifications.pop(0)
        message: dict[str, Any] = json.loads(await self.transport.receive_bytes())
        assert "id" not in message, message
        return message


@asynccontextmanager
async def served(server: Server) -> AsyncIterator[Wire]:
    """A raw JSON-RPC wire to ``server``, served over a memory transport for the block."""
    async with server.open() as runtime, trio.open_nursery() as nursery:
        client_side, server_side = memory_transport_pair()
        nursery.start_soon(runtime.serve, server_side)
        yield Wire(client_side)
        nursery.cancel_scope.cancel()


async def test_resources_in_both_eras() -> None:
    server = make_server()
    async with served(server) as wire:
        hello = (await wire.call("initialize", HELLO))["result"]
        assert hello["capabilities"]["resources"] == {"subscribe": True, "listChanged": True}
        assert hello["capabilities"]["completions"] == {}
        listed = (await wire.call("resources/list"))["result"]
        assert listed == {
            "resources": [
                {"uri": "test://text", "name": "text", "description": "Some text", "mimeType": "text/plain"},
                {"uri": "test://blob", "name": "blob", "mimeType": "application/octet-stream"},
            ]
        }
        templates = (await wire.call("resources/templates/list"))["result"]["resourceTemplates"]
        assert templates == [
            {"uriTemplate": "test://items/{item}/data", "name": "item", "mimeType": "application/json"}
        ]
        blob = (await wire.call("resources/read", {"uri": "test://blob"}))["result"]["contents"]
        assert blob == [{"uri": "test://blob", "mimeType": "application/octet-stream", "blob": "AAEC"}]
        data = (await wire.call("resources/read", {"uri": "test://items/42/data"}))["result"]["contents"]
        assert data == [
            {"uri": "test://items/42/data", "mimeType": "application/json", "text": '{"item": "42"}'}
        ]
        missing = (await wire.call("resources/read", {"uri": "test://nothing"}))["error"]
        assert missing == {"code": -32002, "message": "Resource not found", "data": {"uri": "test://nothing"}}
        # The 2026-07-28 era: caching hints, -32602 naming the URI.
        modern = (await wire.call("resources/read", {"uri": "test://text"}, modern=True))["result"]
        assert modern["contents"] == [{"uri": "test://text", "mimeType": "text/plain", "text": "hello"}]
        assert (modern["resultType"], modern["ttlMs"], modern["cacheScope"]) == ("complete", 0, "public")
        gone = (await wire.call("resources/read", {"uri": "test://nothing"}, modern=True))["error"]
        assert gone["code"] == -32602 and gone["data"] == {"uri": "test://nothing"}
        assert "cacheScope" in (await wire.call("resources/list", modern=True))["result"]


async def test_subscriptions_and_list_changes_in_the_handshake_era() -> None:
    server = make_server()
    async with served(server) as wire:
        await wire.call("initialize", HELLO)
        assert (await wire.call("resources/subscribe", {"uri": "test://text"}))["result"] == {}
        server.notify_resource_updated("test://blob")  # not subscribed: nothing
        server.notify_resource_updated("test://text")
        assert await wire.next_notification() == {
            "jsonrpc": "2.0",
            "method": "notifications/resources/updated",
            "params": {"uri": "test://text"},
        }
        assert (await wire.call("resources/unsubscribe", {"uri": "test://text"}))["result"] == {}
        server.notify_resource_updated("test://text")

        @server.prompt()
        def later() -> str:
            return "added while serving"

        assert await wire.next_notification() == {
            "jsonrpc": "2.0",
            "method": "notifications/prompts/list_changed",
        }
        assert [p["name"] for p in (await wire.call("prompts/list"))["result"]["prompts"]][-1] == "later"
        assert wire.notifications == []  # no resources/updated after the unsubscribe
        # Subscriptions do not exist in the modern era.
        assert (await wire.call("resources/subscribe", {"uri": "test://text"}, modern=True))["error"][
            "code"
        ] == -32601


async def test_prompts_and_completion() -> None:
    server = make_server()
    async with served(server) as wire:
        await wire.call("initialize", HELLO)
        [greet, *_] = (await wire.call("prompts/list"))["result"]["prompts"]
        assert greet == {
            "name": "greet",
            "description": "Greets someone",
            "arguments": [{"name": "name", "required": True}, {"name": "style", "required": False}],
        }
        got = (await wire.call("prompts/get", {"name": "greet", "arguments": {"name": "Ada"}}))["result"]
        assert got["messages"] == [{"role": "user", "content": {"type": "text", "text": "Hello Ada (plain)"}}]
        picture = (await wire.call("prompts/get", {"name": "picture"}))["result"]["messages"]
        assert picture == [
            {"role": "user", "content": {"type": "image", "data": PNG, "mimeType": "image/png"}},
            {"role": "assistant", "content": {"type": "text", "text": "What do you see?"}},
        ]
        missing = (await wire.call("prompts/get", {"name": "greet", "arguments": {}}))["error"]
        assert missing["code"] == -32602 and "name" in missing["message"]
        unknown = (await wire.call("prompts/get", {"name": "nope"}))["error"]
        assert unknown["code"] == -32602
        ref = {"type": "ref/prompt", "name": "greet"}
        done = await wire.call(
            "completion/complete", {"ref": ref, "argument": {"name": "name", "value": "A"}}
        )
        assert done["result"] == {"completion": {"values": ["Ada", "Alan"], "total": 2, "hasMore": False}}
        template = {"type": "ref/resource", "uri": "test://items/{item}/data"}
        many = await wire.call(
            "completion/complete", {"ref": template, "argument": {"name": "item", "value": "x"}}
        )
        assert (
            many["result"]["completion"]["total"] == 150 and many["result"]["completion"]["hasMore"] is True
        )
        assert len(many["result"]["completion"]["values"]) == 100


async def test_a_prompt_asks_for_input_by_mrtr_in_the_modern_era() -> None:
    server = make_server()
    async with served(server) as wire:
        first = (await wire.call("prompts/get", {"name": "asks"}, modern=True))["result"]
        assert first["resultType"] == "input_required"
        assert list(first["inputRequests"]) == ["topic"]
        retry = {
            "name": "asks",
            "inputResponses": {"topic": {"action": "accept", "content": {"t": "trio"}}},
            "requestState": first["requestState"],
        }
        final = (await wire.call("prompts/get", retry, modern=True))["result"]
        assert final["messages"] == [{"role": "user", "content": {"type": "text", "text": "About trio"}}]


async def test_a_server_without_resources_or_prompts_has_no_such_methods() -> None:
    bare = Server("bare")
    async with served(bare) as wire:
        capabilities = (await wire.call("initialize", HELLO))["result"]["capabilities"]
        assert "resources" not in capabilities and "prompts" not in capabilities
        for method in ("resources/list", "prompts/get", "completion/complete"):
            assert (await wire.call(method))["error"]["code"] == -32601
