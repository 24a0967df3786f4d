"""The handshake-era dialect, sans-IO: plain synchronous calls, no Trio anywhere.

``HandshakeDialect`` reads parsed JSON-RPC messages into era-neutral commands and writes
era-neutral records and outcomes in the 2024-11-05 … 2025-11-25 wire shapes.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from trio_mcp.protocol.commands import (
    AwaitTaskResult,
    CallTool,
    CancelRequest,
    CancelTask,
    GetTask,
    Initialize,
    ListResources,
    ListTasks,
    ListTools,
    Ping,
    ReadResource,
    SetLogLevel,
)
from trio_mcp.protocol.errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, ErrorValue
from trio_mcp.protocol.handshake import SERVER_TASK_CAPABILITIES, HandshakeDialect, level_passes
from trio_mcp.protocol.jsonrpc import Notification, Request
from trio_mcp.protocol.messages import (
    MODEL_IMMEDIATE_RESPONSE_KEY,
    RELATED_TASK_KEY,
    CallToolResult,
    Implementation,
    TaskSupport,
    TextContent,
)
from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.protocol.versions import has_tasks

SERVER_INFO = Implementation("test-server", "1.0")
TOOLS: dict[str, TaskSupport] = {"plain": "forbidden", "flexible": "optional", "slow": "required"}
NOT_INITIALIZED = ErrorValue(INVALID_REQUEST, "Invalid request: send 'initialize' first")


def tool_support(name: str) -> TaskSupport | None:
    return TOOLS.get(name)


def initialize_params(
    version: str = "2025-11-25", capabilities: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "protocolVersion": version,
        "capabilities": capabilities if capabilities is not None else {},
        "clientInfo": {"name": "test-client", "version": "0.1"},
    }


def open_dialect(version: str = "2025-11-25", capabilities: dict[str, Any] | None = None) -> HandshakeDialect:
    """A dialect that has been through ``initialize`` with ``version``."""
    dialect = HandshakeDialect()
    command = dialect.interpret(
        Request(0, "initialize", initialize_params(version, capabilities)), tool_support
    )
    assert isinstance(command, Initialize)
    dialect.initialize(command, SERVER_INFO, None)
    return dialect


def call(dialect: HandshakeDialect, params: dict[str, Any]) -> object:
    return dialect.interpret(Request(1, "tools/call", params), tool_support)


def record() -> TaskRecord:
    """A live task created at 2023-11-14T22:13:20.500Z."""
    return new_record("task-1", "alice", now=1_700_000_000.5, ttl_ms=60_000, poll_interval_ms=250)


# -- the initialize gate -----------------------------------------------------------------------
@pytest.mark.parametrize(
    "method",
    ["tools/list", "tools/call", "logging/setLevel", "tasks/get", "tasks/list", "resources/list", "nope"],
)
def test_only_initialize_and_ping_before_initialize(method: str) -> None:
    dialect = HandshakeDialect()
    answer = dialect.interpret(Request(1, method, {"name": "plain"}), tool_support)
    assert answer == NOT_INITIALIZED
    assert answer.code == -32600
    assert not dialect.initialized


def test_ping_before_initialize() -> None:
    assert HandshakeDialect().interpret(Request(1, "ping"), tool_support) == Ping()


def test_initialize_reads_the_request() -> None:
    dialect = HandshakeDialect()
    command = dialect.interpret(
        Request(1, "initialize", initialize_params("2025-06-18", {"elicitation": {}})), tool_support
    )
    assert command == Initialize("2025-06-18", {"elicitation": {}}, Implementation("test-client", "0.1"))
    assert not dialect.initialized  # interpreting does not agree on anything yet


def test_initialize_with_bad_params_is_invalid_params() -> None:
    answer = HandshakeDialect().interpret(Request(1, "initialize", {"protocolVersion": 5}), tool_support)
    assert isinstance(answer, ErrorValue)
    assert answer.code == INVALID_PARAMS


# -- negotiation -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("requested", "agreed"),
    [
        ("2025-11-25", "2025-11-25"),
        ("2025-06-18", "2025-06-18"),
        ("2025-03-26", "2025-03-26"),
        ("2024-11-05", "2024-11-05"),
        ("1999-01-01", "2025-11-25"),
        ("2026-07-28", "2025-11-25"),  # a modern-era version is no handshake-era version
    ],
)
def test_initialize_negotiates_the_version(requested: str, agreed: str) -> None:
    dialect = HandshakeDialect()
    command = dialect.interpret(Request(1, "initialize", initialize_params(requested)), tool_support)
    assert isinstance(command, Initialize)
    result = dialect.initialize(command, SERVER_INFO, "be nice")
    assert result["protocolVersion"] == agreed
    assert dialect.version == agreed
    assert dialect.initialized
    assert result["serverInfo"] == {"name": "test-server", "version": "1.0"}
    assert result["instructions"] == "be nice"
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert result["capabilities"]["logging"] == {}


@pytest.mark.parametrize(
    ("version", "tasks"),
    [("2025-11-25", True), ("2025-06-18", False), ("2025-03-26", False), ("2024-11-05", False)],
)
def test_tasks_capability_only_in_2025_11_25(version: str, tasks: bool) -> None:
    dialect = HandshakeDialect()
    command = dialect.interpret(Request(1, "initialize", initialize_params(version)), tool_support)
    assert isinstance(command, Initialize)
    result = dialect.initialize(command, SERVER_INFO, None)
    assert dialect.tasks_enabled is tasks
    if tasks:
        assert result["capabilities"]["tasks"] == {
            "list": {},
            "cancel": {},
            "requests": {"tools": {"call": {}}},
        }
        assert result["capabilities"]["tasks"] == SERVER_TASK_CAPABILITIES
    else:
        assert "tasks" not in result["capabilities"]
    assert "instructions" not in result


def test_initialize_remembers_the_client() -> None:
    dialect = open_dialect(capabilities={"sampling": {}})
    assert dialect.client_capabilities == {"sampling": {}}
    assert dialect.client_info == Implementation("test-client", "0.1")


def test_second_initialize_is_invalid_request() -> None:
    dialect = open_dialect()
    answer = dialect.interpret(Request(2, "initialize", initialize_params()), tool_support)
    assert isinstance(answer, ErrorValue)
    assert answer.code == -32600
    assert dialect.version == "2025-11-25"


def test_has_tasks_is_exactly_2025_11_25() -> None:
    assert has_tasks("2025-11-25") is True
    assert has_tasks("2025-06-18") is False
    assert has_tasks("2026-07-28") is False


# -- the method table --------------------------------------------------------------------------
def test_methods_after_initialize() -> None:
    dialect = open_dialect()
    assert dialect.interpret(Request(1, "ping"), tool_support) == Ping()
    assert dialect.interpret(Request(1, "tools/list"), tool_support) == ListTools(None)
    assert dialect.interpret(Request(1, "tools/list", {"cursor": "c1"}), tool_support) == ListTools("c1")
    assert dialect.interpret(Request(1, "logging/setLevel", {"level": "info"}), tool_support) == SetLogLevel(
        "info"
    )
    assert dialect.interpret(Request(1, "resources/list"), tool_support) == ListResources(None)
    assert dialect.interpret(Request(1, "resources/read", {"uri": "test://a"}), tool_support) == ReadResource(
        "test://a"
    )
    unknown = dialect.interpret(Request(1, "resources/nonsense"), tool_support)
    assert unknown == ErrorValue(METHOD_NOT_FOUND, "Method not found: resources/nonsense")


def test_set_level_with_a_bad_level_is_invalid_params() -> None:
    answer = open_dialect().interpret(Request(1, "logging/setLevel", {"level": "loud"}), tool_support)
    assert isinstance(answer, ErrorValue)
    assert answer.code == INVALID_PARAMS


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26", "2024-11-05"])
@pytest.mark.parametrize("method", ["tasks/get", "tasks/cancel", "tasks/list", "tasks/result"])
def test_task_methods_do_not_exist_before_2025_11_25(version: str, method: str) -> None:
    answer = open_dialect(version).interpret(Request(1, method, {"taskId": "t"}), tool_support)
    assert answer == ErrorValue(METHOD_NOT_FOUND, f"Method not found: {method}")
    assert answer.code == -32601


def test_task_methods_in_2025_11_25() -> None:
    dialect = open_dialect()

    def interpret(method: str, params: dict[str, Any] | None) -> object:
        return dialect.interpret(Request(1, method, params), tool_support)

    assert interpret("tasks/get", {"taskId": "t1"}) == GetTask("t1")
    assert interpret("tasks/cancel", {"taskId": "t2"}) == CancelTask("t2")
    assert interpret("tasks/result", {"taskId": "t3"}) == AwaitTaskResult("t3")
    assert interpret("tasks/list", None) == ListTasks(None)
    assert interpret("tasks/list", {"cursor": "next"}) == ListTasks("next")


@pytest.mark.parametrize("params", [None, {}, {"taskId": 7}])
def test_task_methods_need_a_string_task_id(params: dict[str, Any] | None) -> None:
    answer = open_dialect().interpret(Request(1, "tasks/get", params), tool_support)
    assert isinstance(answer, ErrorValue)
    assert answer.code == INVALID_PARAMS
    assert "taskId" in answer.message


# -- tools/call --------------------------------------------------------------------------------
def test_plain_call() -> None:
    command = call(open_dialect(), {"name": "flexible", "arguments": {"x": 1}})
    assert command == CallTool("flexible", {"x": 1}, None, False, None)


def test_unknown_tool_is_invalid_params() -> None:
    answer = call(open_dialect(), {"name": "missing"})
    assert answer == ErrorValue(INVALID_PARAMS, "Unknown tool: 'missing'")


def test_call_without_a_name_is_invalid_params() -> None:
    answer = call(open_dialect(), {"arguments": {}})
    assert isinstance(answer, ErrorValue)
    assert answer.code == INVALID_PARAMS


def test_task_on_a_forbidden_tool_is_method_not_found() -> None:
    answer = call(open_dialect(), {"name": "plain", "task": {"ttl": 1000}})
    assert isinstance(answer, ErrorValue)
    assert answer.code == -32601
    assert "plain" in answer.message


def test_no_task_on_a_required_tool_is_method_not_found() -> None:
    answer = call(open_dialect(), {"name": "slow"})
    assert isinstance(answer, ErrorValue)
    assert answer.code == -32601
    assert "slow" in answer.message


def test_task_null_is_a_plain_call() -> None:
    dialect = open_dialect()
    assert call(dialect, {"name": "flexible", "task": None}) == CallTool("flexible", None, None, False, None)
    # ... so a required tool called with ``"task": null`` was not called as a task.
    answer = call(dialect, {"name": "slow", "task": None})
    assert isinstance(answer, ErrorValue)
    assert answer.code == METHOD_NOT_FOUND


@pytest.mark.parametrize("name", ["flexible", "slow"])
def test_task_call_carries_the_ttl(name: str) -> None:
    dialect = open_dialect()
    assert call(dialect, {"name": name, "task": {"ttl": 30_000}}) == CallTool(name, None, None, True, 30_000)
    assert call(dialect, {"name": name, "task": {}}) == CallTool(name, None, None, True, None)


def test_task_with_a_bad_ttl_is_invalid_params() -> None:
    answer = call(open_dialect(), {"name": "flexible", "task": {"ttl": "soon"}})
    assert isinstance(answer, ErrorValue)
    assert answer.code == INVALID_PARAMS


@pytest.mark.parametrize("name", ["plain", "flexible", "slow"])
def test_task_before_2025_11_25_is_a_plain_call(name: str) -> None:
    command = call(open_dialect("2025-06-18"), {"name": name, "task": {"ttl": 1000}})
    assert command == CallTool(name, None, None, False, None)


@pytest.mark.parametrize("token", ["tok-1", 0, 42, -3])
def test_progress_token_string_or_integer(token: int | str) -> None:
    command = call(open_dialect(), {"name": "flexible", "_meta": {"progressToken": token}})
    assert isinstance(command, CallTool)
    assert command.progress_token == token
    assert type(command.progress_token) is type(token)


@pytest.mark.parametrize("token", [{"id": 1}, 1.5, True, False, None, [1]])
def test_progress_token_of_another_type_is_invalid_params(token: object) -> None:
    answer = call(open_dialect(), {"name": "flexible", "_meta": {"progressToken": token}})
    assert isinstance(answer, ErrorValue)
    assert answer.code == -32602
    assert "progressToken" in answer.message


def test_meta_without_progress_token() -> None:
    command = call(open_dialect(), {"name": "flexible", "_meta": {"other": 1}})
    assert command == CallTool("flexible", None, None, False, None)


# -- notifications -----------------------------------------------------------------------------
@pytest.mark.parametrize("request_id", [7, "req-7"])
def test_cancelled_notification(request_id: int | str) -> None:
    dialect = open_dialect()
    notification = Notification("notifications/cancelled", {"requestId": request_id, "reason": "bored"})
    assert dialect.interpret_notification(notification) == CancelRequest(request_id)


@pytest.mark.parametrize(
    "params",
    [None, {}, {"requestId": None}, {"requestId": 1.5}, {"requestId": True}, {"requestId": {"a": 1}}],
)
def test_malformed_cancelled_notification_is_ignored(params: dict[str, Any] | None) -> None:
    notification = Notification("notifications/cancelled", params)
    assert open_dialect().interpret_notification(notification) is None


@pytest.mark.parametrize("method", ["notifications/initialized", "notifications/whatever"])
def test_other_notifications_need_no_action(method: str) -> None:
    assert open_dialect().interpret_notification(Notification(method, {})) is None


# -- rendering tasks ---------------------------------------------------------------------------
def test_render_task() -> None:
    rec = record()
    assert HandshakeDialect.render_task(rec) == {
        "taskId": "task-1",
        "status": "working",
        "createdAt": "2023-11-14T22:13:20.500Z",
        "lastUpdatedAt": "2023-11-14T22:13:20.500Z",
        "ttl": 60_000,
        "pollInterval": 250,
    }


def test_render_task_with_status_message_and_no_poll_interval() -> None:
    rec = new_record("task-2", "bob", now=0.0, ttl_ms=1000, poll_interval_ms=None)
    rec = rec.transition(TaskStatus.INPUT_REQUIRED, "waiting for you", now=1.25)
    assert HandshakeDialect.render_task(rec) == {
        "taskId": "task-2",
        "status": "input_required",
        "createdAt": "1970-01-01T00:00:00.000Z",
        "lastUpdatedAt": "1970-01-01T00:00:01.250Z",
        "ttl": 1000,
        "statusMessage": "waiting for you",
    }


def test_render_created() -> None:
    dialect = open_dialect()
    rec = record()
    assert dialect.render_created(rec, None) == {"task": dialect.render_task(rec)}
    assert dialect.render_created(rec, "Started; I will report back.") == {
        "task": dialect.render_task(rec),
        "_meta": {"io.modelcontextprotocol/model-immediate-response": "Started; I will report back."},
    }
    assert MODEL_IMMEDIATE_RESPONSE_KEY == "io.modelcontextprotocol/model-immediate-response"


def test_render_page() -> None:
    dialect = open_dialect()
    first = record()
    second = new_record("task-2", "alice", now=0.0, ttl_ms=1000, poll_interval_ms=None)
    assert dialect.render_page([first, second], "cur") == {
        "tasks": [dialect.render_task(first), dialect.render_task(second)],
        "nextCursor": "cur",
    }
    assert dialect.render_page([], None) == {"tasks": []}


def test_status_notification() -> None:
    dialect = open_dialect()
    rec = record()
    assert json.loads(dialect.status_json(rec)) == {
        "jsonrpc": "2.0",
        "method": "notifications/tasks/status",
        "params": dialect.render_task(rec),
    }


def test_render_cancelled_of_a_live_task() -> None:
    dialect = open_dialect()
    cancelled = record().transition(TaskStatus.CANCELLED, "cancelled by the client", now=1_700_000_001.0)
    answer = dialect.cancelled_json(cancelled, was_terminal=False)
    assert isinstance(answer, bytes) and json.loads(answer) == dialect.render_task(cancelled)


@pytest.mark.parametrize("status", [TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED])
def test_render_cancelled_of_a_terminal_task_is_invalid_params(status: TaskStatus) -> None:
    ended = record().transition(status, None, now=1_700_000_001.0)
    answer = open_dialect().cancelled_json(ended, was_terminal=True)
    assert isinstance(answer, ErrorValue)
    assert answer.code == -32602
    assert f"'{status.value}'" in answer.message


# -- results -----------------------------------------------------------------------------------
def test_render_outcome_adds_related_task_meta() -> None:
    outcome = TaskOutcome(result={"content": [{"type": "text", "text": "hi"}], "_meta": {"mine": 1}})
    rendered = HandshakeDialect.render_outcome("task-9", outcome)
    assert rendered == {
        "content": [{"type": "text", "text": "hi"}],
        "_meta": {"mine": 1, "io.modelcontextprotocol/related-task": {"taskId": "task-9"}},
    }
    assert RELATED_TASK_KEY == "io.modelcontextprotocol/related-task"
    assert outcome.result == {
        "content": [{"type": "text", "text": "hi"}],
        "_meta": {"mine": 1},
    }  # not mutated


def test_render_outcome_of_an_error_is_the_error() -> None:
    error = ErrorValue(INVALID_PARAMS, "bad input", {"field": "x"})
    assert HandshakeDialect.render_outcome("task-9", TaskOutcome.from_error(error)) is error


def test_settle_tool_result() -> None:
    ok = HandshakeDialect.settle_tool_result(CallToolResult([TextContent("done")]))
    assert ok == TaskOutcome(
        result={"content": [{"type": "text", "text": "done"}]}, failed=False, message=None
    )
    bad = HandshakeDialect.settle_tool_result(CallToolResult([TextContent("it broke")], is_error=True))
    assert bad.failed
    assert bad.message == "it broke"
    assert bad.result == {"content": [{"type": "text", "text": "it broke"}], "isError": True}
    assert bad.error is None


def test_settled_records_take_the_status() -> None:
    live = record()
    bad = HandshakeDialect.settle_tool_result(CallToolResult([TextContent("nope")], is_error=True))
    assert live.settle(bad, now=1_700_000_002.0).status is TaskStatus.FAILED
    ok = HandshakeDialect.settle_tool_result(CallToolResult([TextContent("yes")]))
    assert live.settle(ok, now=1_700_000_002.0).status is TaskStatus.COMPLETED


# -- what the server may send ------------------------------------------------------------------
def test_log_message_before_set_level_is_none() -> None:
    assert open_dialect().log_message("emergency", "x", None) is None


def test_log_message_honours_the_level() -> None:
    dialect = open_dialect()
    assert dialect.set_log_level(SetLogLevel("warning")) == {}
    assert dialect.log_message("info", "quiet", None) is None
    assert dialect.log_message("warning", "w", None) == {"level": "warning", "data": "w"}
    assert dialect.log_message("error", {"k": 1}, "db") == {
        "level": "error",
        "data": {"k": 1},
        "logger": "db",
    }
    dialect.set_log_level(SetLogLevel("debug"))
    assert dialect.log_message("debug", "loud", None) == {"level": "debug", "data": "loud"}


def test_level_passes() -> None:
    assert level_passes("error", "warning")
    assert level_passes("warning", "warning")
    assert not level_passes("debug", "info")
    assert level_passes("emergency", "debug")


def test_input_request_needs_the_declared_capability() -> None:
    dialect = open_dialect(capabilities={"sampling": {}})
    answer = dialect.input_request("elicitation", "elicitation/create", {"message": "?"}, None)
    assert isinstance(answer, ErrorValue)
    assert answer.code == -32600
    assert "elicitation" in answer.message


def test_input_request_outside_a_task() -> None:
    dialect = open_dialect(capabilities={"elicitation": {}})
    params = {"message": "name?", "requestedSchema": {"type": "object"}}
    assert dialect.input_request("elicitation", "elicitation/create", params, None) == (
        "elicitation/create",
        params,
    )


def test_input_request_in_a_task_carries_the_related_task() -> None:
    dialect = open_dialect(capabilities={"sampling": {}})
    params = {"messages": [], "maxTokens": 10}
    request = dialect.input_request("sampling", "sampling/createMessage", params, "task-3")
    assert not isinstance(request, ErrorValue)
    method, sent = request
    assert method == "sampling/createMessage"
    assert sent == {
        "messages": [],
        "maxTokens": 10,
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "task-3"}},
    }
    assert "_meta" not in params  # the caller's dict is left alone


def test_related_task() -> None:
    assert HandshakeDialect.related_task("t") == {"io.modelcontextprotocol/related-task": {"taskId": "t"}}


@pytest.mark.parametrize(
    ("capabilities", "accepts"),
    [
        ({}, False),
        ({"tasks": {}}, False),
        ({"tasks": {"requests": {"elicitation": {"create": {}}}}}, True),
        ({"tasks": {"requests": {"sampling": {"createMessage": {}}}}}, False),
        ({"tasks": "yes"}, False),
        ({"tasks": {"requests": {"elicitation": "create"}}}, False),
    ],
)
def test_client_accepts_task(capabilities: dict[str, Any], accepts: bool) -> None:
    assert open_dialect(capabilities=capabilities).client_accepts_task("elicitation", "create") is accepts
