"""The demo server as a real subprocess over stdio: shutdown and oversized lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import trio

from trio_mcp import connect
from trio_mcp.transports.stdio import open_subprocess_transport

DEMO = [sys.executable, str(Path(__file__).resolve().parents[2] / "examples" / "demo_server.py")]


async def test_server_exits_promptly_on_stdin_eof_cancelling_running_tasks() -> None:
    with trio.fail_after(15):
        async with open_subprocess_transport(DEMO, shutdown_timeout=5) as transport:
            async with connect(transport) as client:
                created = await client.call_tool_as_task("sleep", {"seconds": 3600})
                assert created.task.status == "working"
                await transport.send_eof()
                with trio.fail_after(1.0):  # the spec's "exit cleanly on EOF", within a second
                    await transport.process.wait()
            assert transport.process.returncode == 0


async def test_oversized_line_gets_an_error_and_the_server_keeps_serving() -> None:
    with trio.fail_after(15):
        async with open_subprocess_transport(DEMO) as transport:
            huge = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"x": "a" * (5 << 20)}})
            await transport.send(huge.encode())
            error = json.loads(await transport.receive_line())
            assert error["id"] is None and error["error"]["code"] == -32600
            await transport.send(b'{"jsonrpc":"2.0","id":2,"method":"ping"}')
            assert json.loads(await transport.receive_line()) == {"jsonrpc": "2.0", "id": 2, "result": {}}
