"""Errors are values: answering many errors keeps no memory.

A module-level exception instance raised again and again grows its traceback with every raise
(each raise appends the frames it passed through to the same object), a leak any client could
drive with requests that fail. Errors are kept as frozen values and each raise is a fresh
exception, so the memory the server holds after 40,000 error answers is what it held before.
"""

from __future__ import annotations

import gc
import json
import sys
from typing import Any

import trio
from conftest import serve_in_memory

from trio_mcp import Server
from trio_mcp.protocol.errors import INVALID_PARAMS, TASK_CANCELLED

ROUNDS = 20_000  # of each of the two kinds of error: 40,000 error answers
BATCH = 500
KEPT_LIMIT = 2_000  # memory blocks the process may still hold after all of them (noise)

server = Server("errors", version="1")


@server.tool(task_support="optional")
async def wait(seconds: float) -> str:
    await trio.sleep(seconds)
    return "done"


def request(id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).encode()


async def test_error_answers_leave_no_memory_behind() -> None:
    async with serve_in_memory(server) as wire:
        next_id = 0

        async def response() -> dict[str, Any]:
            while True:  # skip notifications (the cancelled task's status)
                message: dict[str, Any] = json.loads(await wire.receive_bytes())
                if "id" in message:
                    return message

        async def call(method: str, params: dict[str, Any]) -> dict[str, Any]:
            nonlocal next_id
            next_id += 1
            await wire.send(request(next_id, method, params))
            return await response()

        client_info = {"name": "t", "version": "1"}
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": client_info}
        await call("initialize", hello)
        created = await call("tools/call", {"name": "wait", "arguments": {"seconds": 3600}, "task": {}})
        task_id = created["result"]["task"]["taskId"]
        await call("tasks/cancel", {"taskId": task_id})

        async def burst(count: int) -> None:
            """``count`` rounds of: tasks/get of an unknown id, tasks/result of a cancelled task."""
            nonlocal next_id
            for start in range(0, count, BATCH):
                for _ in range(start, min(count, start + BATCH)):
                    next_id += 2
                    await wire.send(request(next_id - 1, "tasks/get", {"taskId": "no-such-task"}))
                    await wire.send(request(next_id, "tasks/result", {"taskId": task_id}))
                for _ in range(2 * (min(count, start + BATCH) - start)):
                    answer = await response()
                    assert answer["error"]["code"] in (INVALID_PARAMS, TASK_CANCELLED), answer

        await burst(BATCH)  # warm up: caches, interned strings, the allocator's pools
        gc.collect()
        before = sys.getallocatedblocks()
        await burst(ROUNDS)
        gc.collect()
        kept = sys.getallocatedblocks() - before
        # A shared exception re-raised would keep a traceback entry per raise: tens of thousands
        # of blocks here (and ~90 MiB over 40,000 answers in a real server).
        assert kept < KEPT_LIMIT, f"{kept} memory blocks kept after {2 * ROUNDS} error answers"
        # Both kinds of error were really answered (not, say, refused before the supervisor).
        get = await call("tasks/get", {"taskId": "no-such-task"})
        assert get["error"] == {"code": INVALID_PARAMS, "message": "Failed to retrieve task: Task not found"}
        result = await call("tasks/result", {"taskId": task_id})
        assert result["error"]["code"] == TASK_CANCELLED
