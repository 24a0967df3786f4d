"""Interop: the reference MCP Python SDK (``mcp`` 1.x) client, with its experimental tasks API, over stdio.

Each test starts a server process, connects ``mcp.client.session.ClientSession`` to it through
``mcp.client.stdio.stdio_client`` and drives one scenario of the 2025-11-25 Tasks protocol (SEP-1686).

The servers under test (the ``server_command`` fixture):

* ``trio_mcp``: our ``examples/demo_server.py`` (skipped while that file does not exist yet);
* ``reference``: ``tests/interop/reference_server.py``, the same tools on the SDK's own server.

The SDK is anyio/asyncio based while the project's pytest runs async tests under Trio
(``trio_mode = true``), so every test is a plain ``def`` that runs its scenario with
``anyio.run(..., backend="asyncio")``.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import mcp.types as types
import pytest
from conftest import run_on_asyncio
from conftest import sdk_text_of as text_of
from mcp.client.experimental import ExperimentalClientFeatures
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import McpError
from mcp.shared.session import RequestResponder

# The SDK marks its whole experimental tasks API deprecated (tasks are expected to move to an MCP
# extension); it is still the API we interoperate with.
pytestmark = pytest.mark.filterwarnings("ignore:The experimental tasks API is deprecated:DeprecationWarning")

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parents[1]
DEMO_SERVER = REPO_ROOT / "examples" / "demo_server.py"
REFERENCE_SERVER = HERE / "reference_server.py"

RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
TERMINAL = frozenset({"completed", "failed", "cancelled"})

# Bounds (seconds). Every test stays well under 10 s.
SCENARIO_TIMEOUT = 7.0  # the whole client session of one test
STEP_TIMEOUT = 4.0  # any single wait (a poll loop, a blocking tasks/result, ...)
POLL_CAP = 0.1  # poll at least this often, whatever pollInterval the server suggests

EXPECTED_TASK_SUPPORT = {
    "echo": "optional",
    "sleep": "optional",
    "fail": "optional",
    "add": "forbidden",
    "batch_job": "required",
}
EXPECTED_ARGUMENTS = {
    "echo": {"text"},
    "sleep": {"seconds"},
    "fail": {"message"},
    "add": {"a", "b"},
    "batch_job": {"seconds"},
}


@pytest.fixture(
    params=[
        pytest.param(
            [sys.executable, str(DEMO_SERVER)],
            id="trio_mcp",
            marks=pytest.mark.skipif(
                not DEMO_SERVER.exists(),
                reason="examples/demo_server.py (our trio_mcp demo server) does not exist yet",
            ),
        ),
        pytest.param([sys.executable, str(REFERENCE_SERVER)], id="reference"),
    ]
)
def server_command(request: pytest.FixtureRequest) -> list[str]:
    """The command that starts the MCP server under test (stdio transport)."""
    command: list[str] = request.param
    return command


# --------------------------------------------------------------------------------------------------
# Harness
# --------------------------------------------------------------------------------------------------

Scenario = Callable[["Client"], Awaitable[None]]


class Client:
    """A connected, initialized SDK client session plus what the scenario may want to inspect."""

    def __init__(
        self,
        session: ClientSession,
        init: types.InitializeResult,
        notifications: list[types.ServerNotification],
    ) -> None:
        self.session = session
        self.init = init
        self.notifications = notifications  # every server notification received so far

    @property
    def tasks(self) -> ExperimentalClientFeatures:
        return self.session.experimental

    def progress_for(self, token: str | int) -> list[types.ProgressNotificationParams]:
        return [
            n.root.params
            for n in self.notifications
            if isinstance(n.root, types.ProgressNotification) and n.root.params.progressToken == token
        ]


def run_scenario(server_command: list[str], scenario: Scenario) -> None:
    """Start the server, initialize an SDK client session over stdio and run ``scenario`` on asyncio."""

    async def main() -> None:
        params = StdioServerParameters(command=server_command[0], args=server_command[1:], cwd=REPO_ROOT)
        notifications: list[types.ServerNotification] = []
        stream_errors: list[Exception] = []

        async def message_handler(
            message: RequestResponder[types.ServerRequest, types.ClientResult]
            | types.ServerNotification
            | Exception,
        ) -> None:
            if isinstance(message, Exception):  # e.g. a line the SDK could not parse as JSON-RPC
                stream_errors.append(message)
            elif isinstance(message, types.ServerNotification):
                notifications.append(message)

        # errlog: the server's stderr goes to ours (pytest shows it for failing tests).
        async with (
            stdio_client(params, errlog=sys.stderr) as (read_stream, write_stream),
            ClientSession(read_stream, write_stream, message_handler=message_handler) as session,
        ):
            # The bound covers the session, not the transport shutdown (the SDK closes the server's
            # stdin, waits up to 2 s for it to exit, then terminates it).
            with anyio.fail_after(SCENARIO_TIMEOUT):
                init = await session.initialize()
                await scenario(Client(session, init, notifications))
        assert not stream_errors, stream_errors

    # The SDK's task groups wrap a failed assertion in (nested) exception groups: unwrap a lone one.
    run_on_asyncio(main)


async def wait_terminal(client: Client, task_id: str) -> list[types.GetTaskResult]:
    """Poll ``tasks/get`` until the task is terminal; return every status seen (last one terminal)."""
    seen: list[types.GetTaskResult] = []
    with anyio.fail_after(STEP_TIMEOUT):
        while True:
            status = await client.tasks.get_task(task_id)
            check_task(status, task_id)
            seen.append(status)
            if status.status in TERMINAL:
                return seen
            interval = status.pollInterval / 1000 if status.pollInterval is not None else POLL_CAP
            await anyio.sleep(min(interval, POLL_CAP))


def check_task(task: types.Task, task_id: str | None = None) -> None:
    """Field-level checks every Task object (in any result) must pass."""
    if task_id is not None:
        assert task.taskId == task_id
    assert isinstance(task.taskId, str) and task.taskId
    assert task.status in {"working", "input_required", "completed", "failed", "cancelled"}
    # createdAt / lastUpdatedAt are required; the SDK parsed them as datetimes. RFC 3339 wants an offset.
    assert isinstance(task.createdAt, datetime) and task.createdAt.tzinfo is not None
    assert isinstance(task.lastUpdatedAt, datetime) and task.lastUpdatedAt.tzinfo is not None
    assert task.lastUpdatedAt >= task.createdAt
    # ttl must be present (the actual retention in ms, or null for unlimited).
    assert "ttl" in task.model_fields_set
    assert task.ttl is None or (isinstance(task.ttl, int) and task.ttl > 0)
    assert task.pollInterval is None or (isinstance(task.pollInterval, int) and task.pollInterval > 0)


async def create_task(client: Client, name: str, arguments: dict[str, Any], **kw: Any) -> types.Task:
    created = await client.tasks.call_tool_as_task(name, arguments, **kw)
    assert isinstance(created, types.CreateTaskResult)
    check_task(created.task)
    # Tasks MUST begin in the working status.
    assert created.task.status == "working", created.task
    return created.task


async def expect_error(code: int, call: Awaitable[Any]) -> types.ErrorData:
    with pytest.raises(McpError) as excinfo:
        await call
    error = excinfo.value.error
    assert error.code == code, error
    return error


# --------------------------------------------------------------------------------------------------
# Tests
# --------------------------------------------------------------------------------------------------


def test_initialize_and_list_tools(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        init = client.init
        assert init.protocolVersion == types.LATEST_PROTOCOL_VERSION == "2025-11-25"
        caps = init.capabilities
        assert caps.tools is not None
        # tasks capability: tasks/list, tasks/cancel and task-augmented tools/call.
        assert caps.tasks is not None
        assert caps.tasks.list is not None
        assert caps.tasks.cancel is not None
        assert caps.tasks.requests is not None
        assert caps.tasks.requests.tools is not None
        assert caps.tasks.requests.tools.call is not None

        listed = await client.session.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert set(EXPECTED_TASK_SUPPORT) <= set(tools)
        for name, expected in EXPECTED_TASK_SUPPORT.items():
            tool = tools[name]
            # An absent execution / taskSupport means "forbidden".
            mode = tool.execution.taskSupport if tool.execution is not None else None
            assert (mode or "forbidden") == expected, (name, tool.execution)
            assert tool.inputSchema.get("type") == "object"
            assert EXPECTED_ARGUMENTS[name] <= set(tool.inputSchema.get("properties", {})), name

    run_scenario(server_command, scenario)


def test_task_lifecycle_get_and_result(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        # echo as a task: poll tasks/get until terminal, then fetch tasks/result.
        task = await create_task(client, "echo", {"text": "hello interop"}, ttl=60_000)
        seen = await wait_terminal(client, task.taskId)
        final = seen[-1]
        assert final.status == "completed"
        assert [s.status for s in seen[:-1]] == ["working"] * (len(seen) - 1)
        assert all(s.createdAt == task.createdAt for s in seen)
        assert final.lastUpdatedAt >= task.lastUpdatedAt

        result = await client.tasks.get_task_result(task.taskId, types.CallToolResult)
        assert isinstance(result, types.CallToolResult)
        assert result.isError is False
        assert text_of(result) == "hello interop"
        # tasks/result MUST carry the related-task metadata.
        assert result.meta is not None
        assert result.meta[RELATED_TASK_KEY]["taskId"] == task.taskId

        # The result stays retrievable, and the task stays completed.
        again = await client.tasks.get_task_result(task.taskId, types.CallToolResult)
        assert text_of(again) == "hello interop"
        assert (await client.tasks.get_task(task.taskId)).status == "completed"

        # sleep 0.2 s as a task: observed working first, then completed.
        task = await create_task(client, "sleep", {"seconds": 0.2})
        first = await client.tasks.get_task(task.taskId)
        check_task(first, task.taskId)
        assert first.status == "working"
        seen = await wait_terminal(client, task.taskId)
        assert seen[-1].status == "completed"
        assert seen[-1].lastUpdatedAt >= first.lastUpdatedAt
        result = await client.tasks.get_task_result(task.taskId, types.CallToolResult)
        assert result.isError is False

    run_scenario(server_command, scenario)


def test_task_result_blocks_until_terminal(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        task = await create_task(client, "sleep", {"seconds": 0.3})
        started = anyio.current_time()
        with anyio.fail_after(STEP_TIMEOUT):
            result = await client.tasks.get_task_result(task.taskId, types.CallToolResult)
        assert anyio.current_time() - started >= 0.2  # it waited for the work, not answered early
        assert isinstance(result, types.CallToolResult)
        assert result.isError is False
        assert result.meta is not None and result.meta[RELATED_TASK_KEY]["taskId"] == task.taskId
        status = await client.tasks.get_task(task.taskId)
        assert status.status == "completed"

    run_scenario(server_command, scenario)


def test_list_tasks(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        done = await create_task(client, "echo", {"text": "listed"})
        assert (await wait_terminal(client, done.taskId))[-1].status == "completed"
        running = await create_task(client, "sleep", {"seconds": 30})

        listed: dict[str, types.Task] = {}
        cursor: str | None = None
        with anyio.fail_after(STEP_TIMEOUT):
            for _ in range(100):
                page = await client.tasks.list_tasks(cursor)
                assert isinstance(page, types.ListTasksResult)
                for task in page.tasks:
                    check_task(task)
                    listed[task.taskId] = task
                cursor = page.nextCursor
                if cursor is None:
                    break
        assert done.taskId in listed
        assert listed[done.taskId].status == "completed"
        assert listed[done.taskId].createdAt == done.createdAt
        assert running.taskId in listed
        assert listed[running.taskId].status == "working"

        # Leave nothing running behind.
        cancelled = await client.tasks.cancel_task(running.taskId)
        assert cancelled.status == "cancelled"

    run_scenario(server_command, scenario)


def test_cancel_running_task(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        task = await create_task(client, "sleep", {"seconds": 30})
        cancelled = await client.tasks.cancel_task(task.taskId)
        assert isinstance(cancelled, types.CancelTaskResult)
        check_task(cancelled, task.taskId)
        assert cancelled.status == "cancelled"
        assert cancelled.createdAt == task.createdAt

        status = await client.tasks.get_task(task.taskId)
        check_task(status, task.taskId)
        assert status.status == "cancelled"
        # Still cancelled a little later (terminal states never change).
        await anyio.sleep(0.3)
        status = await client.tasks.get_task(task.taskId)
        assert status.status == "cancelled"

        # Cancelling it again: it is terminal now -> -32602.
        await expect_error(types.INVALID_PARAMS, client.tasks.cancel_task(task.taskId))
        assert (await client.tasks.get_task(task.taskId)).status == "cancelled"

    run_scenario(server_command, scenario)


def test_cancel_completed_task_is_invalid_params(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        task = await create_task(client, "echo", {"text": "done soon"})
        assert (await wait_terminal(client, task.taskId))[-1].status == "completed"
        await expect_error(types.INVALID_PARAMS, client.tasks.cancel_task(task.taskId))
        status = await client.tasks.get_task(task.taskId)
        assert status.status == "completed"
        result = await client.tasks.get_task_result(task.taskId, types.CallToolResult)
        assert text_of(result) == "done soon"

    run_scenario(server_command, scenario)


def test_unknown_task_id_is_invalid_params(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        missing = "no-such-task"
        await expect_error(types.INVALID_PARAMS, client.tasks.get_task(missing))
        await expect_error(types.INVALID_PARAMS, client.tasks.cancel_task(missing))

    run_scenario(server_command, scenario)


def test_failing_tool_as_task_fails(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        task = await create_task(client, "fail", {"message": "boom"})
        seen = await wait_terminal(client, task.taskId)
        # For tools/call, a result with isError=true makes the task "failed" ...
        assert seen[-1].status == "failed"
        # ... and tasks/result returns exactly what tools/call would have: an isError CallToolResult.
        result = await client.tasks.get_task_result(task.taskId, types.CallToolResult)
        assert result.isError is True
        assert "boom" in text_of(result)
        assert result.meta is not None and result.meta[RELATED_TASK_KEY]["taskId"] == task.taskId

    run_scenario(server_command, scenario)


def test_plain_tool_calls(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        result = await client.session.call_tool("echo", {"text": "plain"})
        assert result.isError is False
        assert text_of(result) == "plain"

        result = await client.session.call_tool("add", {"a": 2, "b": 3.5})
        assert result.isError is False
        assert float(text_of(result)) == 5.5

        result = await client.session.call_tool("fail", {"message": "kaboom"})
        assert result.isError is True
        assert "kaboom" in text_of(result)

        # sleep without a task reports progress to the request's progress token.
        reports: list[tuple[float, float | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            reports.append((progress, total))

        with anyio.fail_after(STEP_TIMEOUT):
            result = await client.session.call_tool("sleep", {"seconds": 0.3}, progress_callback=on_progress)
        assert result.isError is False
        assert reports, "sleep reported no progress"
        values = [value for value, _ in reports]
        assert values == sorted(values)

    run_scenario(server_command, scenario)


def test_task_progress_uses_request_progress_token(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        token = "interop-progress-1"
        task = await create_task(client, "sleep", {"seconds": 0.3}, meta={"progressToken": token})
        assert (await wait_terminal(client, task.taskId))[-1].status == "completed"
        # Notifications sent before completion were read before the "completed" tasks/get answer.
        progress = client.progress_for(token)
        assert progress, "no progress notification carried the task request's progressToken"
        values = [p.progress for p in progress]
        assert values == sorted(values)

    run_scenario(server_command, scenario)


def test_task_mode_mismatch_is_method_not_found(server_command: list[str]) -> None:
    async def scenario(client: Client) -> None:
        # "forbidden": must not be called as a task.
        await expect_error(types.METHOD_NOT_FOUND, client.tasks.call_tool_as_task("add", {"a": 1, "b": 2}))
        # "required": must be called as a task.
        await expect_error(types.METHOD_NOT_FOUND, client.session.call_tool("batch_job", {"seconds": 0.1}))

        # Called properly, both work.
        result = await client.session.call_tool("add", {"a": 1, "b": 2})
        assert float(text_of(result)) == 3.0
        task = await create_task(client, "batch_job", {"seconds": 0.1})
        assert (await wait_terminal(client, task.taskId))[-1].status == "completed"
        result = await client.tasks.get_task_result(task.taskId, types.CallToolResult)
        assert result.isError is False

    run_scenario(server_command, scenario)
