"""The demo server: tools covering every kind of task support, and elicitation.

The single source of ``examples/demo_server.py`` and of ``trio-mcp demo``. Run over stdio
(the default): ``python examples/demo_server.py`` (or ``trio-mcp serve
trio_mcp.cli.demo_server:server``); over WebSocket: ``python examples/demo_server.py --ws
127.0.0.1:8765``.
"""

from __future__ import annotations

import trio

from trio_mcp import Context, Server

__all__ = [
    "ANSWER_SCHEMA",
    "main",
    "server",
]

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


ANSWER_SCHEMA = {
    "type": "object",
    "properties": {"answer": {"type": "string", "description": "Your answer"}},
    "required": ["answer"],
}


@server.tool(task_support="optional", immediate_response="I have asked the user; their answer will follow.")
async def ask(question: str, ctx: Context) -> str:
    """Ask the user a question (elicitation) and return their answer."""
    reply = await ctx.elicit(question, ANSWER_SCHEMA)
    if reply.action == "accept" and reply.content is not None:
        return f"The user answered: {reply.content.get('answer')}"
    return f"The user chose to {reply.action}."


def main() -> None:
    import argparse
    import functools
    import logging
    import signal
    import sys

    from trio_mcp.server import serve_websocket
    from trio_mcp.transports.websocket import parse_host_port

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--ws", metavar="HOST:PORT", type=parse_host_port, help="serve over WebSocket instead of stdio"
    )
    args = parser.parse_args()
    if args.ws is None:
        server.run()  # stdio; SIGTERM/SIGINT shut down cleanly
        return
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    host, port = args.ws

    async def serve_until_signalled() -> None:
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with server.open() as runtime, trio.open_nursery() as nursery:
                bound = await nursery.start(functools.partial(serve_websocket, runtime, host, port))
                print(
                    f"serving {server.info.name} on ws://{host}:{bound}/ (subprotocol mcp)", file=sys.stderr
                )
                async for _ in signals:  # answer what waits, then close every connection cleanly
                    await runtime.shutdown()
                    nursery.cancel_scope.cancel()
                    break

    trio.run(serve_until_signalled)


if __name__ == "__main__":
    main()
