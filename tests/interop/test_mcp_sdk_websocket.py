"""Interop: the reference MCP Python SDK's WebSocket client against our WebSocket server.

``tests/interop/ws_demo_server.py`` serves ``examples/demo_server.py``'s tools with
:func:`trio_mcp.transports.websocket.serve_websocket` in a subprocess; the SDK's
``mcp.client.websocket.websocket_client`` (asyncio, via ``anyio.run``; it needs the ``websockets``
package, the SDK's ``ws`` extra) connects, initializes, and drives the 2025-11-25 task API:
create a task, poll it, fetch its result. The SDK offers the subprotocol ``mcp`` and sends no
``Origin``, as a non-browser client should.
"""

from __future__ import annotations

import subprocess
import sys
import warnings
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from conftest import run_on_asyncio
from conftest import sdk_text_of as text_of

anyio = pytest.importorskip("anyio")
pytest.importorskip("websockets", reason="the SDK's WebSocket client needs the 'websockets' package")

import mcp.types as types  # noqa: E402
from mcp.client.session import ClientSession  # noqa: E402

with warnings.catch_warnings():  # the SDK marks its WebSocket client deprecated (it is not in the spec)
    warnings.simplefilter("ignore", DeprecationWarning)
    from mcp.client.websocket import websocket_client

pytestmark = [
    pytest.mark.filterwarnings("ignore:The experimental tasks API is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore:The WebSocket client transport is deprecated:DeprecationWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning:websockets"),
]

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
WS_SERVER = HERE / "ws_demo_server.py"
RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
SCENARIO_TIMEOUT = 8.0
POLL_CAP = 0.1


@pytest.fixture(scope="module")
def ws_url() -> Iterator[str]:
    """Start the WebSocket demo server in a subprocess; yield its ws:// URL."""
    with subprocess.Popen(
        [sys.executable, str(WS_SERVER)],
        cwd=REPO_ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdin is not None and process.stdout is not None
        try:
            line = process.stdout.readline()  # the server prints "PORT <n>" once it listens
            if not line.startswith("PORT "):
                pytest.fail(f"the WebSocket demo server did not start (exit code {process.poll()}): {line!r}")
            yield f"ws://127.0.0.1:{int(line.split()[1])}/mcp"
        finally:
            process.stdin.close()  # asks it to exit
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def run_with_sdk(
    url: str, scenario: Callable[[ClientSession, types.InitializeResult], Awaitable[None]]
) -> None:
    async def main() -> None:
        async with (
            websocket_client(url) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream) as session,
        ):
            with anyio.fail_after(SCENARIO_TIMEOUT):
                init = await session.initialize()
                await scenario(session, init)

    run_on_asyncio(main)  # the SDK's task groups wrap a failed assertion: this unwraps it


def test_sdk_websocket_client_runs_a_task(ws_url: str) -> None:
    async def scenario(session: ClientSession, init: types.InitializeResult) -> None:
        assert init.protocolVersion == "2025-11-25"
        assert init.serverInfo.name == "trio-mcp-demo"
        assert init.capabilities.tasks is not None

        tools = {tool.name for tool in (await session.list_tools()).tools}
        assert {"echo", "sleep", "fail", "add", "batch_job"} <= tools
        plain = await session.call_tool("echo", {"text": "over websocket"})
        assert text_of(plain) == "over websocket"

        # Create a task, poll it until it is terminal, then fetch its result.
        created = await session.experimental.call_tool_as_task("sleep", {"seconds": 0.3})
        task_id = created.task.taskId
        assert created.task.status == "working"
        statuses = []
        while True:
            status = await session.experimental.get_task(task_id)
            assert status.taskId == task_id
            statuses.append(status.status)
            if status.status in TERMINAL:
                break
            interval = status.pollInterval / 1000 if status.pollInterval is not None else POLL_CAP
            await anyio.sleep(min(interval, POLL_CAP))
        assert statuses[0] == "working" and statuses[-1] == "completed", statuses

        result = await session.experimental.get_task_result(task_id, types.CallToolResult)
        assert result.isError is False
        assert text_of(result) == "slept 0.3s"
        assert result.meta is not None and result.meta[RELATED_TASK_KEY]["taskId"] == task_id

        listed = await session.experimental.list_tasks()
        assert task_id in {task.taskId for task in listed.tasks}

    run_with_sdk(ws_url, scenario)


def test_sdk_websocket_client_awaits_and_cancels(ws_url: str) -> None:
    async def scenario(session: ClientSession, init: types.InitializeResult) -> None:
        # tasks/result blocks until the task ends.
        created = await session.experimental.call_tool_as_task("batch_job", {"seconds": 0.2})
        result = await session.experimental.get_task_result(created.task.taskId, types.CallToolResult)
        assert text_of(result) == "batch job done after 0.2s"

        # A long task can be cancelled.
        created = await session.experimental.call_tool_as_task("sleep", {"seconds": 30})
        cancelled = await session.experimental.cancel_task(created.task.taskId)
        assert cancelled.status == "cancelled"
        assert (await session.experimental.get_task(created.task.taskId)).status == "cancelled"

    run_with_sdk(ws_url, scenario)
