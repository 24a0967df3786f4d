"""A refused task creation frees its request at once, without the cyclic collector.

When the server refuses to create a task (a cap reached: ``TASK_LIMIT_REACHED``), the refusal
is answered as a value: no exception is raised that would end up in a reference cycle with the
frames that hold the request, keeping its arguments (here 4 MiB each) alive until the cyclic
garbage collector happens to run. With the collector off, 60 refused creations must leave next
to nothing behind, in either era.
"""

from __future__ import annotations

import gc
import json
import tracemalloc
from collections.abc import Iterator
from typing import Any

import pytest
import trio
from conftest import serve_in_memory

from trio_mcp import Server, TaskLimits
from trio_mcp.protocol.errors import TASK_LIMIT_REACHED

pytestmark = pytest.mark.every_store  # make test runs it again on each store

REFUSED = 60
ARGUMENT_BYTES = 4 * 1024 * 1024
GROWTH_LIMIT = 16 * 1024 * 1024  # far less than REFUSED * ARGUMENT_BYTES (240 MiB)
TASKS = "io.modelcontextprotocol/tasks"
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
}

server = Server("refusals", version="1", limits=TaskLimits(max_live_tasks_per_owner=1))


@server.tool(task_support="optional")
async def hold(blob: str = "") -> str:
    """Run until cancelled (the first one holds the owner's only live slot)."""
    await trio.sleep_forever()
    return "never"


@server.tool(task_support="required")
async def job(blob: str = "") -> str:
    await trio.sleep_forever()
    return "never"


@pytest.fixture
def no_cyclic_gc() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def creation(request_id: int, era: str, blob: str = '""') -> bytes:
    """A task creation of ``hold`` (modern era: of the task-required ``job``) whose ``blob``
    argument is the JSON text ``blob`` (encoded once by the caller: 4 MiB take a while)."""
    meta = "" if era == "handshake" else f', "_meta": {json.dumps(MODERN_META)}'
    name, task = ("hold", ', "task": {}') if era == "handshake" else ("job", "")
    params = f'{{"name": "{name}", "arguments": {{"blob": {blob}}}{task}{meta}}}'
    return f'{{"jsonrpc": "2.0", "id": {request_id}, "method": "tools/call", "params": {params}}}'.encode()


@pytest.mark.parametrize("era", ["handshake", "modern"])
async def test_refused_creations_free_their_requests_without_the_cyclic_gc(
    era: str, no_cyclic_gc: None
) -> None:
    async with serve_in_memory(server, max_message_size=2 * ARGUMENT_BYTES) as wire:

        async def answer_to(request_id: int) -> dict[str, Any]:
            while True:  # skip notifications
                message: dict[str, Any] = json.loads(await wire.receive_bytes())
                if message.get("id") == request_id:
                    return message

        if era == "handshake":
            await wire.send(
                json.dumps({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": HELLO}).encode()
            )
            assert "result" in await answer_to(0)
        await wire.send(creation(1, era))  # the owner's only live task
        held = await answer_to(1)
        assert "result" in held, held

        blob = json.dumps("x" * ARGUMENT_BYTES)
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for request_id in range(2, 2 + REFUSED):
                await wire.send(creation(request_id, era, blob))
                refused = await answer_to(request_id)
                assert refused["error"]["code"] == TASK_LIMIT_REACHED, refused
            for _ in range(10):
                await trio.lowlevel.checkpoint()
            grown = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert grown < GROWTH_LIMIT, f"{grown / 2**20:.0f} MiB still held after {REFUSED} refusals"
