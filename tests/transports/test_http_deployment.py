"""``trio-mcp serve --http`` as operators run it: several processes behind a round-robin
balancer (2026-07-28 multi round-trip retries land on other processes: ``--state-key``), and
SIGTERM with a request in flight (answered -32603, exit 0). Real processes, real sockets."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio
from balancer import round_robin

from trio_mcp.protocol.modern import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY
from trio_mcp.transports.http import ACCEPT_BOTH

MODERN = "2026-07-28"
KEY = "a-state-key-shared-by-every-process-0123456789"


@asynccontextmanager
async def serving_process(*options: str) -> AsyncIterator[tuple[trio.Process, str]]:
    """``trio-mcp serve`` of the demo server on a free port: (the process, its endpoint URL)."""
    command = [sys.executable, "-m", "trio_mcp.cli", "serve", "trio_mcp.cli.demo_server:server"]
    command += ["--http", "127.0.0.1:0", *options]
    env = {**os.environ, "TRIO_MCP_STATE_KEY": KEY}
    process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, env=env)
    assert process.stderr is not None
    seen = b""
    try:
        with trio.fail_after(20):
            while (found := re.search(rb"http://127\.0\.0\.1:(\d+)/mcp", seen)) is None:
                chunk = await process.stderr.receive_some(4096)
                assert chunk, seen.decode(errors="replace")
                seen += chunk
        yield process, found.group(0).decode()
    finally:
        if process.returncode is None:
            process.kill()
        with trio.move_on_after(5):
            await process.wait()


def modern_call(id: int, tool: str, arguments: dict[str, Any], **extra: Any) -> tuple[bytes, dict[str, str]]:
    meta = {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: {"elicitation": {}}}
    params = {"name": tool, "arguments": arguments, "_meta": meta, **extra}
    body = json.dumps({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}).encode()
    headers = {
        "accept": ACCEPT_BOTH,
        "content-type": "application/json",
        "mcp-protocol-version": MODERN,
        "mcp-method": "tools/call",
        "mcp-name": tool,
    }
    return body, headers


async def test_modern_retries_work_behind_round_robin_and_sigterm_answers_in_flight_requests() -> None:
    with trio.fail_after(40):
        async with (
            serving_process("--grace", "1") as (first, url1),
            serving_process() as (_, url2),
            serving_process() as (_, url3),
            trio.open_nursery() as nursery,
        ):
            ports = [int(url.rsplit(":", 1)[1].split("/")[0]) for url in (url1, url2, url3)]
            front = await nursery.start(round_robin, ports)
            url = f"http://127.0.0.1:{front}/mcp"
            # a new connection per request: each goes to the next process
            async with httpx.AsyncClient(
                timeout=10, limits=httpx.Limits(max_keepalive_connections=0)
            ) as http:
                for n in range(3):
                    body, headers = modern_call(n, "ask", {"question": "name?"})
                    asked = (await http.post(url, content=body, headers=headers)).json()["result"]
                    [key] = asked["inputRequests"]
                    answer = {key: {"action": "accept", "content": {"answer": f"trio {n}"}}}
                    body, headers = modern_call(
                        n,
                        "ask",
                        {"question": "name?"},
                        inputResponses=answer,
                        requestState=asked["requestState"],
                    )
                    final = (await http.post(url, content=body, headers=headers)).json()  # another process
                    assert final["result"]["content"][0]["text"] == f"The user answered: trio {n}", final

            # SIGTERM with a request in flight: answered -32603, exit 0
            async with httpx.AsyncClient(timeout=10) as http:
                answers: list[Any] = []

                async def sleeper() -> None:
                    body, headers = modern_call(9, "sleep", {"seconds": 30})
                    answers.append((await http.post(url1, content=body, headers=headers)).json())

                nursery.start_soon(sleeper)
                await trio.sleep(0.5)
                first.send_signal(signal.SIGTERM)
                begun = trio.current_time()
                assert await first.wait() == 0
                assert trio.current_time() - begun < 5
                while not answers:  # noqa: ASYNC110
                    await trio.sleep(0.01)
            assert answers[0]["error"]["code"] == -32603
            assert "shutting down" in answers[0]["error"]["message"].lower()
            nursery.cancel_scope.cancel()
