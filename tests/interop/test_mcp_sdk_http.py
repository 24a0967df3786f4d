"""Interop: the reference MCP Python SDK (``mcp`` 1.x) over Streamable HTTP, against our CLI.

The server is a real process: ``trio-mcp serve examples/demo_server.py --http 127.0.0.1:0``
(the URL is read from its stderr). The SDK's ``streamable_http_client`` + ``ClientSession``
(asyncio, through ``anyio.run``) drives the 2025-11-25 Tasks protocol over HTTP: create a task,
poll it, fetch its result, list tasks, cancel one, and an ``ask`` task whose elicitation the
SDK answers with its callback (sent while its ``tasks/result`` is open).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from conftest import run_on_asyncio, served
from conftest import sdk_text_of as text_of
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

pytestmark = pytest.mark.filterwarnings("ignore:The experimental tasks API is deprecated:DeprecationWarning")

REPO_ROOT = Path(__file__).resolve().parents[2]
DEMO = REPO_ROOT / "examples" / "demo_server.py"
CLI = [sys.executable, "-m", "trio_mcp.cli"]
RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
TERMINAL = frozenset({"completed", "failed", "cancelled"})
SCENARIO_TIMEOUT = 8.0
POLL_CAP = 0.1


@pytest.fixture(scope="module")
def http_url() -> Iterator[str]:
    """``trio-mcp serve examples/demo_server.py --http 127.0.0.1:0``; on teardown, SIGTERM must
    stop it cleanly (exit 0)."""
    with served(str(DEMO), "--http", "127.0.0.1:0", url=rb"http://127\.0\.0\.1:(\d+)/mcp") as url:
        yield url


async def wait_terminal(session: ClientSession, task_id: str) -> list[str]:
    """Poll ``tasks/get`` until the task is terminal; every status seen (the last terminal)."""
    seen: list[str] = []
    while True:
        task = await session.experimental.get_task(task_id)
        assert task.taskId == task_id
        seen.append(task.status)
        if task.status in TERMINAL:
            return seen
        interval = task.pollInterval / 1000 if task.pollInterval is not None else POLL_CAP
        await anyio.sleep(min(interval, POLL_CAP))


def test_sdk_http_task_lifecycle_list_and_cancel(http_url: str) -> None:
    async def main() -> None:
        with anyio.fail_after(SCENARIO_TIMEOUT):
            async with (
                streamable_http_client(http_url) as (read, write, session_id),
                ClientSession(read, write) as session,
            ):
                init = await session.initialize()
                assert init.protocolVersion == "2025-11-25"
                assert session_id()
                assert init.capabilities.tasks is not None and init.capabilities.tasks.list is not None

                # a task: created working, polled to completion, its result fetched
                created = await session.experimental.call_tool_as_task("sleep", {"seconds": 0.3})
                assert isinstance(created, types.CreateTaskResult)
                task_id = created.task.taskId
                assert created.task.status == "working"
                seen = await wait_terminal(session, task_id)
                assert seen[0] == "working" and seen[-1] == "completed", seen
                result = await session.experimental.get_task_result(task_id, types.CallToolResult)
                assert result.isError is False and text_of(result) == "slept 0.3s"
                assert result.meta is not None and result.meta[RELATED_TASK_KEY]["taskId"] == task_id

                # another, left running: listed with the first, then cancelled
                running = (await session.experimental.call_tool_as_task("sleep", {"seconds": 30})).task
                listed: dict[str, types.Task] = {}
                cursor: str | None = None
                for _ in range(100):
                    page = await session.experimental.list_tasks(cursor)
                    listed.update((task.taskId, task) for task in page.tasks)
                    cursor = page.nextCursor
                    if cursor is None:
                        break
                assert listed[task_id].status == "completed"
                assert listed[running.taskId].status == "working"
                cancelled = await session.experimental.cancel_task(running.taskId)
                assert cancelled.status == "cancelled"
                assert (await session.experimental.get_task(running.taskId)).status == "cancelled"

                # a plain call, with progress on its POST stream
                progress: list[float] = []

                async def on_progress(value: float, total: float | None, message: str | None) -> None:
                    progress.append(value)

                plain = await session.call_tool("sleep", {"seconds": 0.2}, progress_callback=on_progress)
                assert text_of(plain) == "slept 0.2s" and progress and progress == sorted(progress)

    run_on_asyncio(main)


def test_sdk_http_answers_the_elicitation_of_a_task(http_url: str) -> None:
    asked: list[types.ElicitRequestParams] = []
    statuses: list[str] = []
    completed: list[anyio.Event] = []  # made inside the event loop

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"answer": "blue"})

    async def on_message(message: Any) -> None:
        # Polling may never catch the short input_required (the SDK answers at once): the
        # task's status notifications (on the session's GET stream) show every step.
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.TaskStatusNotification
        ):
            statuses.append(message.root.params.status)
            if message.root.params.status in TERMINAL:
                completed[0].set()

    async def main() -> None:
        completed.append(anyio.Event())
        with anyio.fail_after(SCENARIO_TIMEOUT):
            async with (
                streamable_http_client(http_url) as (read, write, _),
                ClientSession(
                    read, write, elicitation_callback=on_elicit, message_handler=on_message
                ) as session,
            ):
                await session.initialize()
                question = {"question": "Favourite colour?"}
                created = await session.experimental.call_tool_as_task("ask", question)
                task_id = created.task.taskId
                result = await session.experimental.get_task_result(task_id, types.CallToolResult)
                assert not result.isError and text_of(result) == "The user answered: blue"
                assert (await session.experimental.get_task(task_id)).status == "completed"
                # the response came on the POST stream, the notifications on the GET stream:
                # the last of them may still be on its way
                await completed[0].wait()
                assert statuses == ["input_required", "working", "completed"]

    run_on_asyncio(main)
    [request] = asked
    assert request.message == "Favourite colour?"
    assert request.meta is not None
    assert (request.meta.model_extra or {}).get(RELATED_TASK_KEY, {}).get("taskId")
