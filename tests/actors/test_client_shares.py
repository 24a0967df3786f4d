"""One client (a peer address, or an identity) gets a share of the server below its global caps:
however many connections — each an owner of its own — one address opens, another client can
still create tasks."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio

from trio_mcp import Client, McpError, Server
from trio_mcp.actors.supervisor import TaskLimits
from trio_mcp.client import connect, connect_websocket
from trio_mcp.protocol.errors import TASK_LIMIT_REACHED
from trio_mcp.server import serve_websocket
from trio_mcp.transports.memory import memory_transport_pair

pytestmark = pytest.mark.every_store  # make test runs it again on each store

LIMITS = TaskLimits(
    max_live_tasks_per_owner=3,
    max_live_tasks_per_client=5,
    max_live_tasks=8,
)


def _server() -> Server:
    server = Server("shares", version="1", limits=LIMITS)

    @server.tool(task_support="optional")
    async def wait() -> str:
        await trio.sleep_forever()
        return "never"

    return server


async def _fill(client: Client, count: int) -> int:
    """Create up to ``count`` waiting tasks; how many were refused for a limit."""
    refused = 0
    for _ in range(count):
        try:
            await client.call_tool_as_task("wait", {})
        except McpError as error:
            assert error.code == TASK_LIMIT_REACHED
            refused += 1
    return refused


@asynccontextmanager
async def _session(runtime: Any, nursery: trio.Nursery, client: str | None) -> AsyncIterator[Client]:
    ours, theirs = memory_transport_pair()
    nursery.start_soon(partial(runtime.serve, theirs, client=client))
    async with connect(ours) as session:
        yield session


async def test_one_address_with_many_connections_cannot_lock_out_another() -> None:
    server = _server()
    async with server.open() as runtime, trio.open_nursery() as nursery, AsyncExitStack() as stack:
        # Four connections from one address, each its own owner: three tasks each at most,
        # five for the address altogether.
        crowd = [
            await stack.enter_async_context(_session(runtime, nursery, "address:10.0.0.1")) for _ in range(4)
        ]
        refused = [await _fill(session, 3) for session in crowd]
        assert sum(3 - r for r in refused) == 5  # the address's share, not the server's capacity
        # Another address still gets its tasks.
        other = await stack.enter_async_context(_session(runtime, nursery, "address:10.0.0.2"))
        assert await _fill(other, 3) == 0
        nursery.cancel_scope.cancel()


async def test_a_client_that_leaves_gives_its_share_back() -> None:
    server = _server()
    async with server.open() as runtime, trio.open_nursery() as nursery:
        async with _session(runtime, nursery, "address:10.0.0.1") as first:
            assert await _fill(first, 3) == 0
            async with _session(runtime, nursery, "address:10.0.0.1") as second:
                assert await _fill(second, 3) == 1
        await trio.testing.wait_all_tasks_blocked()
        async with _session(runtime, nursery, "address:10.0.0.1") as again:
            assert await _fill(again, 3) == 0  # the connections' tasks went with them
        nursery.cancel_scope.cancel()


async def test_websocket_connections_count_under_their_peer_address() -> None:
    server = _server()
    async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
        port = await nursery.start(partial(serve_websocket, server, max_connections_per_address=10))
        crowd = [
            await stack.enter_async_context(connect_websocket(f"ws://127.0.0.1:{port}/mcp")) for _ in range(4)
        ]
        refused = [await _fill(client, 3) for client in crowd]
        assert sum(3 - r for r in refused) == LIMITS.max_live_tasks_per_client
        nursery.cancel_scope.cancel()


async def test_http_sessions_count_under_their_peer_address() -> None:
    from trio_mcp.client import connect_http
    from trio_mcp.server import serve_http

    server = _server()
    async with trio.open_nursery() as nursery, AsyncExitStack() as stack:
        port = await nursery.start(partial(serve_http, server))
        crowd = [
            await stack.enter_async_context(connect_http(f"http://127.0.0.1:{port}/mcp")) for _ in range(4)
        ]
        refused = [await _fill(client, 3) for client in crowd]
        assert sum(3 - r for r in refused) == LIMITS.max_live_tasks_per_client
        nursery.cancel_scope.cancel()
