"""The server the deploy recipe runs: ``report`` (a slow task that may run again if its
process dies: ``retries=2``) and ``charge`` (a task that must never run twice).

Fronts serve it over HTTP; workers run its queued tasks (see ``README.md``).
"""

from __future__ import annotations

import os

import trio

from trio_mcp import Context, Server
from trio_mcp.stores import store_from_url

server = Server(
    "deploy-demo",
    version="1",
    store=store_from_url(os.environ.get("TRIO_MCP_STORE", "redis://127.0.0.1:6379/0")),
)


@server.tool(task_support="optional", retries=2)
async def report(seconds: float, ctx: Context) -> str:
    """Build a report for ``seconds``; safe to run again (it writes nothing)."""
    for step in range(1, 4):
        ctx.set_status(f"part {step} of 3")
        await trio.sleep(seconds / 3)
    return f"report built by worker {os.getpid()}"


@server.tool(task_support="optional")
async def charge(amount: int) -> str:
    """Charge ``amount``: never run twice (if its process dies, the task fails instead)."""
    await trio.sleep(0.1)
    return f"charged {amount}"
