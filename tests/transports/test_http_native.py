"""The MCP app's two interfaces to HTTP servers: on our own server (``serve_http``) it is served
natively, each request handed to it as an ``h11_server.Request`` (no ASGI scope, no message
dicts); under any other server it is an ASGI application. One core serves both, so the same
requests get the same answers through each: natively, as ASGI on our server, under hypercorn."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import httpx
import pytest
import trio

from trio_mcp import Context, Server
from trio_mcp.client import connect_http
from trio_mcp.server import McpHttpApp, mcp_asgi_app, serve_http
from trio_mcp.transports.h11_server import H11Server, Request
from trio_mcp.transports.http import ACCEPT_BOTH

MODERN = "2026-07-28"
MAX_BODY = 10_000


class Probe:
    def __init__(self) -> None:
        self.started = trio.Event()
        self.cancelled = trio.Event()


def make_server(probe: Probe) -> Server:
    server = Server("native-test", version="1.0")

    @server.tool()
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    async def noted(text: str, ctx: Context) -> str:
        """Report progress first (the answer is an SSE stream), then return the text."""
        await ctx.report_progress(1, 1, "done")
        return text

    @server.tool()
    async def headers(ctx: Context) -> str:
        """What the tool sees of its request's headers."""
        return f"{ctx.headers.get('x-team')} {ctx.headers.get('authorization')}"

    @server.tool()
    async def gate(ctx: Context) -> str:
        """Wait until cancelled."""
        probe.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            probe.cancelled.set()
            raise
        return "never"

    return server


@asynccontextmanager
async def serving(kind: str, server: Server) -> AsyncIterator[str]:
    """``server``'s endpoint URL: served by ``serve_http`` (native), or as an ASGI application
    on our own server (``asgi-h11``) or under hypercorn."""
    if kind == "native":
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_http, server, max_body_size=MAX_BODY))
            yield f"http://127.0.0.1:{port}/mcp"
            nursery.cancel_scope.cancel()
        return
    app = mcp_asgi_app(server, max_body_size=MAX_BODY)
    async with app.running(), trio.open_nursery() as nursery:
        if kind == "asgi-h11":

            async def asgi(scope: Any, receive: Any, send: Any) -> None:  # no serve_request
                await app(scope, receive, send)

            http = H11Server(asgi, max_body_size=MAX_BODY)
            assert http.native is None
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(http.serve, listeners)
            url = f"http://127.0.0.1:{listeners[0].socket.getsockname()[1]}/mcp"
        else:
            from hypercorn.config import Config
            from hypercorn.trio import serve

            config = Config()
            config.bind = ["127.0.0.1:0"]
            config.errorlog = logging.getLogger("test.hypercorn")
            url = (await nursery.start(serve, app, config))[0] + "/mcp"
        yield url
        nursery.cancel_scope.cancel()


async def test_serve_http_serves_the_app_natively_never_through_asgi(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_asgi(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the ASGI interface was used")

    for name in ("scope", "receive", "send"):
        monkeypatch.setattr(Request, name, no_asgi)
    monkeypatch.setattr(McpHttpApp, "__call__", no_asgi)
    served: list[str] = []
    serve_request = McpHttpApp.serve_request

    async def counted(self: McpHttpApp, request: Request) -> None:
        served.append(request.method)
        await serve_request(self, request)

    monkeypatch.setattr(McpHttpApp, "serve_request", counted)
    probe = Probe()
    with trio.fail_after(10):
        async with serving("native", make_server(probe)) as url:
            async with connect_http(url) as client:  # a session: POSTs, then DELETE
                assert (await client.call_tool("echo", {"text": "a"})).text == "a"
                assert (await client.call_tool("noted", {"text": "b"})).text == "b"  # SSE
            async with connect_http(url, protocol=MODERN) as client:
                assert (await client.call_tool("noted", {"text": "c"})).text == "c"
            async with httpx.AsyncClient() as http:
                assert (await http.head(url)).status_code == 405
    assert {"POST", "DELETE", "HEAD"} <= set(served)


@pytest.mark.parametrize("kind", ["native", "asgi-h11", "hypercorn"])
async def test_every_interface_gets_the_same_answers(kind: str) -> None:
    probe = Probe()
    with trio.fail_after(15):
        async with serving(kind, make_server(probe)) as url:
            for protocol in ("2025-11-25", MODERN):
                team = {"X-Team": "blue"}
                async with connect_http(url, protocol=protocol, headers=team, token="s3cret") as client:
                    assert (await client.call_tool("echo", {"text": protocol})).text == protocol
                    assert (await client.call_tool("noted", {"text": "sse"})).text == "sse"
                    assert (await client.call_tool("headers", {})).text == "blue [redacted]"
            async with httpx.AsyncClient(timeout=10) as http:
                post = {"accept": ACCEPT_BOTH, "content-type": "application/json"}
                big = json.dumps(
                    {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "a" * MAX_BODY}}
                )
                assert (await http.post(url, content=big, headers=post)).status_code == 413
                head = await http.head(url)
                assert head.status_code == 405 and head.headers["allow"] == "GET, POST, DELETE"
                assert head.content == b""
                assert (await http.get(url.replace("/mcp", "/elsewhere"))).status_code == 404
                untyped = await http.post(url, content=b'{"jsonrpc": "2.0", "id": 7, "method": "ping"}')
                assert untyped.status_code == 415 and untyped.json()["id"] == 7
            # 2026-07-28: closing the response cancels the request (a disconnect, watched)
            async with connect_http(url, protocol=MODERN) as client:
                client.tasks_extension = False  # a plain call, not a task
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(client.call_tool, "gate", {})
                    await probe.started.wait()
                    nursery.cancel_scope.cancel()
                await probe.cancelled.wait()
