"""The built-in demo server of ``trio-mcp demo``: the same five tools as
``examples/demo_server.py``, for installs that do not have the repository's ``examples/``.

Serve it with ``trio-mcp serve trio_mcp.cli.demo_server:server`` (or
``python -m trio_mcp.cli.demo_server``).
"""

from __future__ import annotations

import trio

from trio_mcp import Context, Server

server = Server("trio-mcp-demo", version="0.1.0", instructions="Demo tools for trio-mcp tasks.")


@server.tool(task_support="optional")
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


@server.tool(task_support="optional")
async def sleep(seconds: float, ctx: Context) -> str:
    """Sleep for the given seconds, reporting progress about ten times; cancellable."""
    steps = 10
    for step in range(steps):
        await ctx.report_progress(step, steps, f"slept {seconds * step / steps:.1f}s of {seconds}s")
        ctx.set_status(f"sleeping: step {step + 1} of {steps}")
        await trio.sleep(seconds / steps)
    await ctx.report_progress(steps, steps, "done")
    return f"slept {seconds}s"


@server.tool(task_support="optional")
async def fail(message: str) -> str:
    """Raise an error with the given message (the call or task fails)."""
    raise RuntimeError(message)


@server.tool(task_support="forbidden")
async def add(a: float, b: float) -> str:
    """Return the sum of a and b."""
    return str(a + b)


@server.tool(task_support="required")
async def batch_job(seconds: float, ctx: Context) -> str:
    """A job that only runs as a task: works for the given seconds."""
    ctx.set_status("batch job running")
    await ctx.report_progress(0, 1)
    await trio.sleep(seconds)
    await ctx.report_progress(1, 1)
    return f"batch job done after {seconds}s"


if __name__ == "__main__":
    server.run()
