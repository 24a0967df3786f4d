"""Tests for trio_mcp.protocol.converter: the wire shape of MCP message bodies."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_mcp.protocol.converter import structure, unstructure, wire_name
from trio_mcp.protocol.errors import McpError
from trio_mcp.protocol.messages import (
    AudioContent,
    CallToolParams,
    CallToolResult,
    CancelledParams,
    CreateTaskResult,
    EmbeddedResource,
    ImageContent,
    Implementation,
    InitializeParams,
    ListTasksResult,
    ListToolsResult,
    PaginatedParams,
    ProgressParams,
    ResourceLink,
    SetLevelParams,
    Task,
    TaskIdParams,
    TaskMetadata,
    TextContent,
    Tool,
    ToolExecution,
)
from trio_mcp.protocol.tasks import TaskStatus

INVALID_PARAMS = -32602


def invalid(data: Any, cls: type[Any]) -> str:
    """Structure ``data`` as ``cls``, which must fail with -32602; return the error message."""
    with pytest.raises(McpError) as info:
        structure(data, cls)
    assert info.value.code == INVALID_PARAMS
    return info.value.message


TASK_WIRE: dict[str, Any] = {
    "taskId": "t-1",
    "status": "working",
    "createdAt": "2025-11-25T10:00:00.000Z",
    "lastUpdatedAt": "2025-11-25T10:00:01.500Z",
    "ttl": 60000,
}


# ------------------------------------------------------------------ names


@pytest.mark.parametrize(
    ("name", "wire"),
    [
        ("task_id", "taskId"),
        ("last_updated_at", "lastUpdatedAt"),
        ("meta", "_meta"),
        ("ttl", "ttl"),
        ("is_error", "isError"),
        ("structured_content", "structuredContent"),
    ],
)
def test_wire_name(name: str, wire: str) -> None:
    assert wire_name(name) == wire


def test_camel_case_and_meta_on_the_way_out() -> None:
    result = CallToolResult(
        content=[TextContent("hi")],
        structured_content={"snake_key": 1},
        is_error=True,
        meta={"io.modelcontextprotocol/related-task": {"taskId": "t"}},
    )
    assert unstructure(result) == {
        "content": [{"type": "text", "text": "hi"}],
        "structuredContent": {"snake_key": 1},  # user data is never renamed
        "isError": True,
        "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "t"}},
    }


def test_camel_case_and_meta_on_the_way_in() -> None:
    params = structure(
        {"name": "echo", "arguments": {"some_arg": 1}, "task": {"ttl": 5}, "_meta": {"progressToken": 3}},
        CallToolParams,
    )
    assert params == CallToolParams(
        name="echo", arguments={"some_arg": 1}, task=TaskMetadata(ttl=5), meta={"progressToken": 3}
    )
    progress = structure({"progressToken": "tok", "progress": 2, "total": 10}, ProgressParams)
    assert progress.progress_token == "tok"
    assert progress.progress == 2.0
    assert type(progress.progress) is float


def test_snake_case_names_are_not_read_from_the_wire() -> None:
    # ``task_id`` is the Python name; the wire name is ``taskId``.
    message = invalid({"task_id": "abc"}, TaskIdParams)
    assert "'taskId'" in message


def test_meta_without_underscore_is_not_meta() -> None:
    params = structure({"name": "x", "meta": {"progressToken": 1}}, CallToolParams)
    assert params.meta is None


def test_initialize_params_nested_camel_case() -> None:
    params = structure(
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tasks": {"list": {}}},
            "clientInfo": {"name": "c", "version": "1", "title": "C"},
        },
        InitializeParams,
    )
    assert params.protocol_version == "2025-11-25"
    assert params.client_info == Implementation("c", "1", "C")
    assert params.capabilities == {"tasks": {"list": {}}}


# ------------------------------------------------------------------ defaults omitted, required kept


def test_absent_optional_fields_are_omitted() -> None:
    assert unstructure(CallToolResult([TextContent("x")])) == {"content": [{"type": "text", "text": "x"}]}
    assert unstructure(TextContent("x")) == {"type": "text", "text": "x"}
    assert unstructure(Tool(name="t", input_schema={"type": "object"})) == {
        "name": "t",
        "inputSchema": {"type": "object"},
    }
    assert unstructure(ListToolsResult(tools=[])) == {"tools": []}
    assert unstructure(Implementation("n", "1")) == {"name": "n", "version": "1"}


def test_empty_call_tool_result_keeps_required_content() -> None:
    wire = unstructure(CallToolResult())
    assert wire == {"content": []}


def test_content_type_is_always_written() -> None:
    # ``type`` has a default, but a content block without it is unreadable.
    for block, kind in [
        (TextContent("t"), "text"),
        (ImageContent("AAAA", "image/png"), "image"),
        (AudioContent("AAAA", "audio/wav"), "audio"),
        (ResourceLink("file:///a", "a"), "resource_link"),
        (EmbeddedResource({"uri": "file:///a", "text": "x"}), "resource"),
    ]:
        assert unstructure(block)["type"] == kind


def test_task_ttl_null_is_kept() -> None:
    task = Task("t-1", TaskStatus.WORKING, "c", "u", ttl=None)
    wire = unstructure(task)
    assert "ttl" in wire
    assert wire["ttl"] is None
    assert wire == {"taskId": "t-1", "status": "working", "createdAt": "c", "lastUpdatedAt": "u", "ttl": None}
    assert json.loads(json.dumps(wire))["ttl"] is None


def test_task_ttl_is_required_on_the_way_in() -> None:
    data = dict(TASK_WIRE)
    del data["ttl"]
    assert invalid(data, Task) == "Invalid params at 'ttl': required field missing"
    assert structure({**TASK_WIRE, "ttl": None}, Task).ttl is None


def test_task_optional_fields_present_when_set() -> None:
    task = Task("t", TaskStatus.INPUT_REQUIRED, "c", "u", 1000, status_message="waiting", poll_interval=500)
    assert unstructure(task) == {
        "taskId": "t",
        "status": "input_required",
        "createdAt": "c",
        "lastUpdatedAt": "u",
        "ttl": 1000,
        "statusMessage": "waiting",
        "pollInterval": 500,
    }


def test_status_is_written_as_its_string_value() -> None:
    wire = unstructure(Task("t", TaskStatus.CANCELLED, "c", "u", None))
    assert wire["status"] == "cancelled"
    assert type(wire["status"]) is str
    assert json.dumps(wire["status"]) == '"cancelled"'


def test_bool_default_false_is_omitted_but_true_is_written() -> None:
    assert "isError" not in unstructure(CallToolResult(is_error=False))
    assert unstructure(CallToolResult(is_error=True))["isError"] is True


def test_tool_execution_nested_camel_case() -> None:
    tool = Tool(name="t", input_schema={}, execution=ToolExecution(task_support="required"))
    assert unstructure(tool)["execution"] == {"taskSupport": "required"}


# ------------------------------------------------------------------ unknown fields tolerated


def test_unknown_fields_are_tolerated() -> None:
    task = structure({**TASK_WIRE, "futureField": {"x": 1}, "another": [1, 2]}, Task)
    assert task.task_id == "t-1"
    params = structure({"name": "t", "unknown": 1, "task": {"ttl": 3, "newThing": True}}, CallToolParams)
    assert params.task == TaskMetadata(ttl=3)
    block = structure({"content": [{"type": "text", "text": "x", "newField": 1}]}, CallToolResult)
    assert block.content == [TextContent("x")]


def test_missing_params_structure_as_empty() -> None:
    # A request without params is treated as ``{}``.
    assert structure(None, PaginatedParams) == PaginatedParams()
    assert invalid(None, TaskIdParams) == "Invalid params at 'taskId': required field missing"


# ------------------------------------------------------------------ strict primitives


@pytest.mark.parametrize(
    ("data", "cls", "message"),
    [
        ({**TASK_WIRE, "ttl": "5"}, Task, "Invalid params at 'ttl': expected integer, got string"),
        ({**TASK_WIRE, "ttl": True}, Task, "Invalid params at 'ttl': expected integer, got boolean"),
        ({**TASK_WIRE, "ttl": 5.0}, Task, "Invalid params at 'ttl': expected integer, got number"),
        ({**TASK_WIRE, "taskId": 5}, Task, "Invalid params at 'taskId': expected string, got integer"),
        ({**TASK_WIRE, "status": "done"}, Task, None),
        ({**TASK_WIRE, "status": 1}, Task, None),
        ({"taskId": None}, TaskIdParams, "Invalid params at 'taskId': expected string, got null"),
        ({"taskId": ["a"]}, TaskIdParams, "Invalid params at 'taskId': expected string, got array"),
        ({"name": 5}, CallToolParams, "Invalid params at 'name': expected string, got integer"),
        (
            {"name": "x", "arguments": [1]},
            CallToolParams,
            "Invalid params at 'arguments': expected object, got array",
        ),
        (
            {"name": "x", "_meta": "m"},
            CallToolParams,
            "Invalid params at '_meta': expected object, got string",
        ),
        ({"cursor": 1}, PaginatedParams, "Invalid params at 'cursor': expected string, got integer"),
        ({"progressToken": "t", "progress": True}, ProgressParams, None),
        ({"progressToken": "t", "progress": "1"}, ProgressParams, None),
        ({"progressToken": 1.5, "progress": 1}, ProgressParams, None),
        ({"progressToken": True, "progress": 1}, ProgressParams, None),
        (
            {"content": [], "isError": 1},
            CallToolResult,
            "Invalid params at 'isError': expected boolean, got integer",
        ),
        ({"content": [], "isError": "true"}, CallToolResult, None),
        ({"level": "verbose"}, SetLevelParams, None),
        ({"level": 3}, SetLevelParams, None),
    ],
)
def test_strict_primitives(data: dict[str, Any], cls: type[Any], message: str | None) -> None:
    text = invalid(data, cls)
    if message is not None:
        assert text == message
    else:
        assert text.startswith("Invalid params at '")


def test_int_is_accepted_where_a_number_is_expected() -> None:
    assert structure({"progressToken": 0, "progress": 3, "total": 4}, ProgressParams).total == 4.0


@pytest.mark.parametrize("token", [0, "", "tok", -7])
def test_progress_token_is_string_or_integer(token: int | str) -> None:
    assert structure({"progressToken": token, "progress": 0.5}, ProgressParams).progress_token == token


@pytest.mark.parametrize(
    "level", ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
)
def test_every_logging_level_is_accepted(level: str) -> None:
    assert structure({"level": level}, SetLevelParams).level == level


# ------------------------------------------------------------------ paths in -32602 messages


def test_nested_path_task_ttl() -> None:
    message = invalid({"name": "x", "task": {"ttl": "5"}}, CallToolParams)
    assert message == "Invalid params at 'task.ttl': expected integer, got string"


def test_nested_path_content_index_text() -> None:
    data = {"content": [{"type": "text", "text": "ok"}, {"type": "text", "text": 5}]}
    assert (
        invalid(data, CallToolResult) == "Invalid params at 'content[1].text': expected string, got integer"
    )


def test_nested_path_missing_field_in_list_item() -> None:
    data = {"content": [{"type": "image", "data": "AAAA"}]}
    assert invalid(data, CallToolResult) == "Invalid params at 'content[0].mimeType': required field missing"


def test_nested_path_list_of_tasks() -> None:
    data = {"tasks": [TASK_WIRE, {**TASK_WIRE, "lastUpdatedAt": 3}]}
    message = invalid(data, ListTasksResult)
    assert message == "Invalid params at 'tasks[1].lastUpdatedAt': expected string, got integer"


def test_nested_path_client_info() -> None:
    data = {"protocolVersion": "2025-11-25", "clientInfo": {"name": "c", "version": 1}}
    assert (
        invalid(data, InitializeParams)
        == "Invalid params at 'clientInfo.version': expected string, got integer"
    )


def test_nested_path_create_task_result() -> None:
    data = {"task": {**TASK_WIRE, "ttl": "forever"}}
    assert invalid(data, CreateTaskResult) == "Invalid params at 'task.ttl': expected integer, got string"


@pytest.mark.parametrize("value", [[], [1], "", "yes"])
def test_string_or_array_where_an_object_is_expected(value: Any) -> None:
    message = invalid({"name": "echo", "task": value}, CallToolParams)
    assert message.startswith("Invalid params at 'task': expected object, got ")


@pytest.mark.parametrize("value", [5, 1.5, True])
def test_scalar_where_an_object_is_expected(value: Any) -> None:
    assert invalid({"name": "echo", "task": value}, CallToolParams).startswith("Invalid params at 'task'")


def test_non_array_where_an_array_is_expected() -> None:
    assert (
        invalid({"content": "x"}, CallToolResult) == "Invalid params at 'content': expected array, got string"
    )
    assert (
        invalid({"content": [1]}, CallToolResult)
        == "Invalid params at 'content[0]': expected object, got integer"
    )


# ------------------------------------------------------------------ content union by ``type``


@pytest.mark.parametrize(
    ("wire", "expected"),
    [
        ({"type": "text", "text": "t"}, TextContent("t")),
        ({"type": "image", "data": "AAAA", "mimeType": "image/png"}, ImageContent("AAAA", "image/png")),
        ({"type": "audio", "data": "AAAA", "mimeType": "audio/wav"}, AudioContent("AAAA", "audio/wav")),
        (
            {"type": "resource_link", "uri": "file:///a", "name": "a", "mimeType": "text/plain", "size": 3},
            ResourceLink("file:///a", "a", mime_type="text/plain", size=3),
        ),
        (
            {"type": "resource", "resource": {"uri": "file:///a", "text": "x"}},
            EmbeddedResource({"uri": "file:///a", "text": "x"}),
        ),
    ],
)
def test_content_block_union_by_type(wire: dict[str, Any], expected: Any) -> None:
    result = structure({"content": [wire]}, CallToolResult)
    assert result.content == [expected]
    assert type(result.content[0]) is type(expected)
    assert unstructure(result) == {"content": [wire]}


def test_content_type_decides_even_when_fields_fit_another_block() -> None:
    # A ``text`` field does not make an image a text block: ``type`` selects the class.
    message = invalid({"content": [{"type": "image", "text": "t"}]}, CallToolResult)
    assert message.startswith("Invalid params at 'content[0].")


@pytest.mark.parametrize("kind", ["video", None, 1, "TEXT"])
def test_unknown_content_type_is_invalid(kind: Any) -> None:
    block: dict[str, Any] = {"text": "t"}
    if kind is not None:
        block["type"] = kind
    message = invalid({"content": [{"type": "text", "text": "ok"}, block]}, CallToolResult)
    assert message.startswith("Invalid params at 'content[1]': unknown content type")


def test_mixed_content_keeps_order() -> None:
    wire = {
        "content": [
            {"type": "text", "text": "a"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "text", "text": "b"},
        ]
    }
    result = structure(wire, CallToolResult)
    assert [type(b) for b in result.content] == [TextContent, ImageContent, TextContent]
    assert result.text == "a\nb"


# ------------------------------------------------------------------ cancellation params


@pytest.mark.parametrize("request_id", [7, "r-1", 0, ""])
def test_cancelled_params_structure(request_id: int | str) -> None:
    params = structure({"requestId": request_id, "reason": "user"}, CancelledParams)
    assert params == CancelledParams(request_id=request_id, reason="user")


# ------------------------------------------------------------------ round trips (hypothesis)

texts = st.text(max_size=30)
opt_texts = st.none() | texts
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
json_values = st.recursive(
    json_scalars,
    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=3)
opt_objects = st.none() | json_objects

tasks = st.builds(
    Task,
    task_id=st.text(min_size=1, max_size=40),
    status=st.sampled_from(TaskStatus),
    created_at=texts,
    last_updated_at=texts,
    ttl=st.none() | st.integers(0, 2**53),
    status_message=opt_texts,
    poll_interval=st.none() | st.integers(0, 2**31),
)

content_blocks = st.one_of(
    st.builds(TextContent, text=texts, annotations=opt_objects, meta=opt_objects),
    st.builds(ImageContent, data=texts, mime_type=texts, annotations=opt_objects, meta=opt_objects),
    st.builds(AudioContent, data=texts, mime_type=texts, annotations=opt_objects, meta=opt_objects),
    st.builds(
        ResourceLink,
        uri=texts,
        name=texts,
        title=opt_texts,
        description=opt_texts,
        mime_type=opt_texts,
        size=st.none() | st.integers(0, 2**40),
        annotations=opt_objects,
        meta=opt_objects,
    ),
    st.builds(EmbeddedResource, resource=json_objects, annotations=opt_objects, meta=opt_objects),
)

call_tool_results = st.builds(
    CallToolResult,
    content=st.lists(content_blocks, max_size=5),
    structured_content=opt_objects,
    is_error=st.booleans(),
    meta=opt_objects,
)


def through_json(data: Any) -> Any:
    return json.loads(json.dumps(data))


@settings(max_examples=200, deadline=None)
@given(tasks)
def test_task_round_trip(task: Task) -> None:
    wire = through_json(unstructure(task))
    assert set(wire) >= {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl"}
    assert structure(wire, Task) == task
    assert structure({"task": wire}, CreateTaskResult).task == task


@settings(max_examples=200, deadline=None)
@given(call_tool_results)
def test_call_tool_result_round_trip(result: CallToolResult) -> None:
    wire = through_json(unstructure(result))
    assert all("type" in block for block in wire.get("content", []))
    assert all("_" not in key or key == "_meta" for key in wire)  # no snake_case leaks
    assert structure(wire, CallToolResult) == result


@settings(max_examples=100, deadline=None)
@given(st.lists(tasks, max_size=4), st.none() | texts)
def test_list_tasks_result_round_trip(items: list[Task], cursor: str | None) -> None:
    page = ListTasksResult(tasks=items, next_cursor=cursor)
    wire = through_json(unstructure(page))
    assert ("nextCursor" in wire) == (cursor is not None)
    assert structure(wire, ListTasksResult) == page
