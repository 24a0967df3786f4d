"""Interop: the reference MCP Python SDK client completes an ``ask`` task over stdio, answering
the server's elicitation (sent while its ``tasks/result`` is open) through its own callback."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = pytest.mark.filterwarnings("ignore:The experimental tasks API is deprecated:DeprecationWarning")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "examples" / "demo_server.py"
RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"


def test_sdk_client_answers_elicitation_of_a_task() -> None:
    seen: list[types.ElicitRequestParams] = []

    statuses: list[str] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen.append(params)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def on_message(message: Any) -> None:
        # The SDK answers the question at once, so polling may never catch the short
        # input_required; the task's status notifications show every step.
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.TaskStatusNotification
        ):
            statuses.append(message.root.params.status)

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable, args=[str(DEMO)], cwd=REPO_ROOT)
        async with (
            stdio_client(params, errlog=sys.stderr) as (read, write),
            ClientSession(read, write, elicitation_callback=on_elicit, message_handler=on_message) as session,
        ):
            with anyio.fail_after(8):
                await session.initialize()
                created = await session.experimental.call_tool_as_task(
                    "ask", {"question": "Favourite colour?"}
                )
                task_id = created.task.taskId
                assert (created.meta or {}).get("io.modelcontextprotocol/model-immediate-response")
                result = await session.experimental.get_task_result(task_id, types.CallToolResult)
                assert not result.isError
                [block] = result.content
                assert isinstance(block, types.TextContent) and block.text == "The user answered: blue"
                assert (await session.experimental.get_task(task_id)).status == "completed"
                assert statuses == ["input_required", "working", "completed"]

    anyio.run(main, backend="asyncio", backend_options={"loop_factory": asyncio.SelectorEventLoop})
    [request] = seen
    assert request.message == "Favourite colour?"
    assert request.meta is not None
    assert (request.meta.model_extra or {}).get(RELATED_TASK_KEY, {}).get("taskId")
