"""The official Python SDK 2.x peer over Streamable HTTP: an ``MCPServer`` with one tool under
uvicorn, for ``benchmarks/http_peers.py``. It runs in ``.venv-sdk2`` (``mcp`` 2.x and uvicorn;
:mod:`benchmarks.peers.sdk2` sets it up), never in the project's environment.

``echo {text}`` is a plain async tool (the SDK 2.3 server has no tasks). The app is the SDK's
``streamable_http_app()``: sessions for 2025-11-25 (``initialize``, ``Mcp-Session-Id``) and the
stateless 2026-07-28 path for requests that carry that protocol version.
``BENCH_JSON_RESPONSE=1`` (the harness's default) passes ``json_response=True`` (one
``application/json`` body per POST); ``0`` keeps the SDK's default SSE stream per POST.

uvicorn serves a socket bound here on 127.0.0.1 (a free port), printed as ``http-port PORT``;
access log off, log level warning. The process exits when stdin closes.
"""

from __future__ import annotations

import os
import socket
import sys
import threading

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("sdk2-http-bench", version="0.1.0", log_level="WARNING")


@server.tool()
async def echo(text: str) -> str:
    """Return the text unchanged."""
    return text


def _exit_at_end_of_input() -> None:
    while sys.stdin.buffer.read(65536):
        pass
    os._exit(0)


def main() -> None:
    json_response = os.environ.get("BENCH_JSON_RESPONSE", "1") != "0"
    app = server.streamable_http_app(json_response=json_response)
    # IPPROTO_TCP said explicitly: asyncio sets TCP_NODELAY on accepted connections only when the
    # listening socket's proto is IPPROTO_TCP (as when uvicorn binds through getaddrinfo); with
    # proto 0 every keep-alive answer (headers, then body) waits 40 ms for a delayed ACK.
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_keep_alive=600)
    threading.Thread(target=_exit_at_end_of_input, daemon=True).start()
    print(f"http-port {sock.getsockname()[1]}", flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
