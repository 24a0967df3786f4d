"""The server of ``benchmarks/scale.py``: one task tool, on the Redis store the environment
names (``SCALE_REDIS_URL``, ``SCALE_PREFIX``). Served with ``trio-mcp serve FILE --http``."""

from __future__ import annotations

import os

import trio

from trio_mcp import Server
from trio_mcp.stores.redis import RedisTaskStore

server = Server(
    "scale",
    store=lambda: RedisTaskStore(
        os.environ["SCALE_REDIS_URL"], prefix=os.environ.get("SCALE_PREFIX", "scale:")
    ),
)


@server.tool(task_support="required")
async def work(ms: float) -> str:
    """A task that works ``ms`` milliseconds."""
    await trio.sleep(ms / 1000)
    return "done"
