"""Serve ``examples/demo_server.py``'s tools over WebSocket, for the interop tests.

Run as ``python tests/interop/ws_demo_server.py [HOST:PORT]`` (default ``127.0.0.1:0``, a free
port). Once listening it prints ``PORT <n>`` on stdout (and nothing else there); it logs to
stderr and runs until killed or its stdin closes, so it never outlives the test that spawned it.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType

import trio

from trio_mcp.server import serve_websocket
from trio_mcp.transports.websocket import parse_host_port

DEMO_SERVER = Path(__file__).resolve().parents[2] / "examples" / "demo_server.py"


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("trio_mcp_demo_server", DEMO_SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def main(host: str, port: int) -> None:
    demo = load_demo()
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(serve_websocket, demo.server, host, port)
        print(f"PORT {bound}", flush=True)
        # Exit when the parent closes our stdin (or dies).
        stdin = trio.lowlevel.FdStream(0)
        while await stdin.receive_some():
            pass
        nursery.cancel_scope.cancel()


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    address = parse_host_port(sys.argv[1]) if len(sys.argv) > 1 else ("127.0.0.1", 0)
    trio.run(main, *address)
