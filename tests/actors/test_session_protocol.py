"""Session-level protocol tests: a live SessionActor spoken to over an in-memory transport.

Most tests talk raw JSON-RPC (``Wire``) so that they check exactly what goes over the wire; a few
go through :func:`trio_mcp.connect_in_memory` to check the client sees the same thing.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import attrs
import pytest
import trio
import trio.testing
from conftest import serve_in_memory

from trio_mcp import Context, McpError, Server, connect_in_memory
from trio_mcp.protocol.messages import ProgressParams
from trio_mcp.protocol.versions import LATEST_VERSION, SUPPORTED_VERSIONS
from trio_mcp.transports.memory import MemoryTransport

pytestmark = pytest.mark.every_store  # make test runs it again on each store

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602

RECEIVE_TIMEOUT = 10.0
LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
TASK_CAPABILITIES = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}

# ----------------------------------------------------------------------------- the test server


@attrs.frozen
class Point:
    x: int
    y: int = 0


@attrs.define
class Probe:
    """What the slow tool saw, recorded from inside it."""

    started: trio.Event = attrs.Factory(trio.Event)
    outcome: str | None = None  # "returned", "cancelled" or "error"
    finished: bool = False


def make_server(probe: Probe | None = None, **kwargs: Any) -> Server:
    probe = probe if probe is not None else Probe()
    server = Server("test-server", version="9.9.9", instructions="Tools for protocol tests.", **kwargs)

    @server.tool(task_support="optional")
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool(task_support="forbidden")
    async def add(a: float, b: float) -> str:
        return str(a + b)

    @server.tool(task_support="required")
    async def job(label: str = "job") -> str:
        return f"{label} done"

    @server.tool(task_support="forbidden")
    async def count_up(values: list[float], ctx: Context, total: float | None = None) -> list[bool]:
        """Report each value as progress; return which reports were sent."""
        return [await ctx.report_progress(v, total, f"at {v}") for v in values]

    @server.tool(task_support="forbidden")
    async def shapes(
        kind: Literal["circle", "square"], points: list[Point], scale: float = 1.0
    ) -> dict[str, Any]:
        return {"kind": kind, "count": len(points), "sum_x": sum(p.x for p in points) * scale}

    @server.tool(task_support="forbidden")
    async def boom(message: str) -> str:
        raise RuntimeError(message)

    @server.tool(task_support="forbidden")
    async def refuse() -> str:
        raise McpError(-32042, "URL elicitation required", {"url": "https://example.test/auth"})

    @server.tool(task_support="forbidden")
    async def chatter(ctx: Context) -> list[bool]:
        return [ctx.log(level, {"level": level}, logger="chatter") for level in LEVELS]  # type: ignore[arg-type]

    @server.tool(task_support="forbidden")
    async def nothing() -> None:
        return None

    @server.tool(task_support="forbidden")
    async def slow(seconds: float) -> str:
        probe.started.set()
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            probe.outcome = "cancelled"
            raise
        except BaseException:
            probe.outcome = "error"
            raise
        else:
            probe.outcome = "returned"
        finally:
            probe.finished = True
        return f"slept {seconds}"

    return server


# ----------------------------------------------------------------------------- raw wire client


class Wire:
    """A raw JSON-RPC peer: sends dicts (or bytes), reads parsed dicts, keeps notifications."""

    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self.notifications: list[dict[str, Any]] = []
        self._ids = itertools.count(1000)
        self.receive_timeout = RECEIVE_TIMEOUT
        """How long to wait for the next message (virtual seconds under the autojump clock)."""

    async def send(self, message: dict[str, Any]) -> None:
        await self.transport.send(json.dumps(message).encode())

    async def send_raw(self, data: bytes) -> None:
        await self.transport.send(data)

    async def receive(self) -> dict[str, Any]:
        with trio.fail_after(self.receive_timeout):
            data = await self.transport.receive_bytes()
        message: dict[str, Any] = json.loads(data)
        assert message.get("jsonrpc") == "2.0", message
        return message

    async def send_request(
        self, method: str, params: Any = None, *, id: int | str | None = None
    ) -> int | str:
        request_id: int | str = next(self._ids) if id is None else id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)
        return request_id

    async def notify(self, method: str, params: Any = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        await self.send(message)

    async def response_to(self, request_id: int | str | None) -> dict[str, Any]:
        """The next response, which must answer ``request_id``; notifications are kept aside."""
        while True:
            message = await self.receive()
            if "id" not in message:
                assert isinstance(message.get("method"), str), message
                self.notifications.append(message)
                continue
            assert message["id"] == request_id, f"expected an answer to {request_id!r}, got {message}"
            assert type(message["id"]) is type(request_id)
            assert ("result" in message) != ("error" in message), message
            return message

    async def exchange(
        self, method: str, params: Any = None, *, id: int | str | None = None
    ) -> dict[str, Any]:
        return await self.response_to(await self.send_request(method, params, id=id))

    async def result(self, method: str, params: Any = None) -> dict[str, Any]:
        response = await self.exchange(method, params)
        assert "result" in response, response
        result: dict[str, Any] = response["result"]
        return result

    async def error(self, method: str, params: Any = None, *, id: int | str | None = None) -> dict[str, Any]:
        response = await self.exchange(method, params, id=id)
        assert "error" in response, response
        error: dict[str, Any] = response["error"]
        assert type(error["code"]) is int
        assert isinstance(error["message"], str) and error["message"]
        return error

    async def call_tool(
        self, name: str, arguments: dict[str, Any] | None = None, **extra: Any
    ) -> dict[str, Any]:
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}, **extra}
        return await self.result("tools/call", params)

    async def initialize(self, version: str = LATEST_VERSION) -> dict[str, Any]:
        result = await self.result(
            "initialize",
            {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "wire", "version": "1"}},
        )
        await self.notify("notifications/initialized")
        return result

    async def assert_quiet(self, seconds: float = 1.0) -> None:
        """Nothing arrives for ``seconds`` (virtual seconds under the autojump clock)."""
        with trio.move_on_after(seconds):
            message = await self.transport.receive_bytes()
            raise AssertionError(f"unexpected message: {message!r}")

    async def ping_ok(self) -> None:
        assert await self.result("ping") == {}


@asynccontextmanager
async def open_wire(server: Server, *, version: str | None = LATEST_VERSION) -> AsyncIterator[Wire]:
    async with serve_in_memory(server) as client_side:
        wire = Wire(client_side)
        if version is not None:
            await wire.initialize(version)
        yield wire


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in result["content"] if block["type"] == "text")


# ----------------------------------------------------------------------------- initialize


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
async def test_initialize_echoes_a_supported_version(version: str) -> None:
    async with open_wire(make_server(), version=None) as wire:
        result = await wire.initialize(version)
        assert result["protocolVersion"] == version
        assert result["serverInfo"] == {"name": "test-server", "version": "9.9.9"}
        assert result["instructions"] == "Tools for protocol tests."
        capabilities = result["capabilities"]
        assert "tools" in capabilities
        assert capabilities["logging"] == {}
        if version == "2025-11-25":
            assert capabilities["tasks"] == TASK_CAPABILITIES
        else:
            assert "tasks" not in capabilities
        await wire.ping_ok()


@pytest.mark.parametrize("version", ["1999-01-01", "2025-99-99", "", "latest"])
async def test_initialize_with_unsupported_version_answers_the_latest(version: str) -> None:
    async with open_wire(make_server(), version=None) as wire:
        result = await wire.initialize(version)
        assert result["protocolVersion"] == LATEST_VERSION
        assert result["capabilities"]["tasks"] == TASK_CAPABILITIES


@pytest.mark.parametrize(
    "params",
    [
        None,
        {},
        {"protocolVersion": 20251125, "clientInfo": {"name": "c", "version": "1"}},
        {"protocolVersion": "2025-11-25"},
        {"protocolVersion": "2025-11-25", "clientInfo": {"name": "c"}},
        {"protocolVersion": "2025-11-25", "clientInfo": "c"},
        {"protocolVersion": "2025-11-25", "clientInfo": {"name": "c", "version": "1"}, "capabilities": []},
    ],
)
async def test_initialize_with_bad_params_is_invalid_params_and_leaves_session_uninitialized(
    params: Any,
) -> None:
    async with open_wire(make_server(), version=None) as wire:
        error = await wire.error("initialize", params)
        assert error["code"] == INVALID_PARAMS
        # Still not initialized...
        assert (await wire.error("tools/list"))["code"] == INVALID_REQUEST
        # ...and a correct initialize still works.
        assert (await wire.initialize())["protocolVersion"] == LATEST_VERSION
        assert len((await wire.result("tools/list"))["tools"]) > 0


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/list", None),
        ("tools/call", {"name": "echo", "arguments": {"text": "x"}}),
        ("tasks/get", {"taskId": "t"}),
        ("tasks/list", None),
        ("tasks/result", {"taskId": "t"}),
        ("logging/setLevel", {"level": "info"}),
        ("no/such/method", None),
    ],
)
async def test_requests_before_initialize_are_refused(method: str, params: Any) -> None:
    async with open_wire(make_server(), version=None) as wire:
        error = await wire.error(method, params, id="early")
        assert error["code"] == INVALID_REQUEST
        assert "initialize" in error["message"]


async def test_ping_before_initialize_is_answered() -> None:
    async with open_wire(make_server(), version=None) as wire:
        await wire.ping_ok()
        await wire.initialize()
        await wire.ping_ok()


async def test_notifications_before_initialize_are_ignored() -> None:
    async with open_wire(make_server(), version=None) as wire:
        await wire.notify("notifications/initialized")
        await wire.notify("notifications/cancelled", {"requestId": 1})
        await wire.notify("notifications/whatever", {"x": 1})
        await wire.ping_ok()
        assert wire.notifications == []


async def test_second_initialize_is_refused_and_keeps_the_first_version() -> None:
    async with open_wire(make_server(), version="2025-06-18") as wire:
        error = await wire.error(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "w", "version": "1"},
            },
        )
        assert error["code"] == INVALID_REQUEST
        # The session still speaks 2025-06-18: no tasks.
        assert (await wire.error("tasks/list"))["code"] == METHOD_NOT_FOUND


@pytest.mark.parametrize("request_id", [0, "", "abc", -5, 2**62])
async def test_ping_echoes_the_id(request_id: int | str) -> None:
    async with open_wire(make_server()) as wire:
        response = await wire.exchange("ping", id=request_id)
        assert response == {"jsonrpc": "2.0", "id": request_id, "result": {}}


async def test_ping_with_params_is_answered() -> None:
    async with open_wire(make_server()) as wire:
        assert await wire.result("ping", {"_meta": {"progressToken": 1}}) == {}


# ----------------------------------------------------------------------------- older protocol versions


@pytest.mark.parametrize("version", ["2025-06-18", "2025-03-26", "2024-11-05"])
@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tasks/get", {"taskId": "t"}),
        ("tasks/list", None),
        ("tasks/cancel", {"taskId": "t"}),
        ("tasks/result", {"taskId": "t"}),
    ],
)
async def test_tasks_methods_do_not_exist_before_2025_11_25(version: str, method: str, params: Any) -> None:
    async with open_wire(make_server(), version=version) as wire:
        assert (await wire.error(method, params))["code"] == METHOD_NOT_FOUND


async def test_2025_06_18_ignores_the_task_param() -> None:
    async with open_wire(make_server(), version="2025-06-18") as wire:
        # optional: a plain call, answered with the CallToolResult itself.
        result = await wire.call_tool("echo", {"text": "hi"}, task={"ttl": 1000})
        assert result == {"content": [{"type": "text", "text": "hi"}]}
        # forbidden + task: not -32601 in a session without tasks; the task param is ignored.
        result = await wire.call_tool("add", {"a": 1, "b": 2}, task={})
        assert text_of(result) == "3.0"
        # required without task: processed normally too.
        result = await wire.call_tool("job", {"label": "j"})
        assert text_of(result) == "j done"


# ----------------------------------------------------------------------------- tools/list


async def test_tools_list_describes_every_tool() -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.result("tools/list")
        assert "nextCursor" not in result
        tools = {tool["name"]: tool for tool in result["tools"]}
        assert list(tools) == [
            "echo",
            "add",
            "job",
            "count_up",
            "shapes",
            "boom",
            "refuse",
            "chatter",
            "nothing",
            "slow",
        ]
        assert tools["echo"]["execution"] == {"taskSupport": "optional"}
        assert tools["add"]["execution"] == {"taskSupport": "forbidden"}
        assert tools["job"]["execution"] == {"taskSupport": "required"}
        assert tools["echo"]["description"] == "Return the text unchanged."
        assert tools["echo"]["inputSchema"]["type"] == "object"
        assert tools["echo"]["inputSchema"]["required"] == ["text"]
        # The Context parameter is not an argument.
        assert set(tools["count_up"]["inputSchema"]["properties"]) == {"values", "total"}
        shapes = tools["shapes"]["inputSchema"]
        assert shapes["properties"]["kind"]["enum"] == ["circle", "square"]
        assert shapes["properties"]["points"]["type"] == "array"
        assert set(shapes["required"]) == {"kind", "points"}


def paged_server() -> Server:
    server = Server("paged", tools_page_size=2)
    for index in range(5):

        async def tool() -> str:
            return "ok"

        server.add_tool(tool, name=f"tool{index}")
    return server


async def test_tools_list_pagination() -> None:
    async with open_wire(paged_server()) as wire:
        pages: list[list[str]] = []
        cursors: list[str] = []
        params: dict[str, Any] = {}
        while True:
            page = await wire.result("tools/list", params)
            pages.append([tool["name"] for tool in page["tools"]])
            if "nextCursor" not in page:
                break
            cursor = page["nextCursor"]
            assert isinstance(cursor, str) and cursor
            cursors.append(cursor)
            params = {"cursor": cursor}
            assert len(pages) <= 5, "pagination never ends"
        assert pages == [["tool0", "tool1"], ["tool2", "tool3"], ["tool4"]]
        assert len(set(cursors)) == 2
        # A cursor is stable: asking again gives the same page.
        again = await wire.result("tools/list", {"cursor": cursors[0]})
        assert [tool["name"] for tool in again["tools"]] == ["tool2", "tool3"]
        assert again["nextCursor"] == cursors[1]


async def test_client_list_tools_follows_every_page() -> None:
    async with connect_in_memory(paged_server()) as client:
        assert [tool.name for tool in await client.list_tools()] == [f"tool{i}" for i in range(5)]


@pytest.mark.parametrize(
    "cursor",
    [
        "garbage!!",
        "",
        "not base64 at all: ~~~",
        "dG9vbHM6eA",  # base64 of "tools:x"
        "dGFza3M6MA",  # base64 of "tasks:0"
        "dG9vbHM6LTE",  # base64 of "tools:-1"
        5,
        ["c"],
    ],
)
async def test_tools_list_bad_cursor_is_invalid_params(cursor: Any) -> None:
    async with open_wire(paged_server()) as wire:
        error = await wire.error("tools/list", {"cursor": cursor})
        assert error["code"] == INVALID_PARAMS
        assert "cursor" in error["message"]


# ----------------------------------------------------------------------------- tools/call: protocol errors


async def test_unknown_tool_is_invalid_params() -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error("tools/call", {"name": "nope", "arguments": {}})
        assert error["code"] == INVALID_PARAMS
        assert "nope" in error["message"]


@pytest.mark.parametrize(
    "params",
    [None, {}, {"arguments": {"text": "x"}}, {"name": 5}, {"name": None}, {"name": "echo", "arguments": [1]}],
)
async def test_malformed_tools_call_params_are_invalid_params(params: Any) -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error("tools/call", params)
        assert error["code"] == INVALID_PARAMS


@pytest.mark.parametrize("params", [[1, 2], "echo", 3])
async def test_non_object_params_are_invalid_params_with_the_id(params: Any) -> None:
    async with open_wire(make_server()) as wire:
        await wire.send({"jsonrpc": "2.0", "id": "p1", "method": "tools/call", "params": params})
        response = await wire.response_to("p1")
        assert response["error"]["code"] == INVALID_PARAMS


async def test_forbidden_tool_with_task_is_method_not_found() -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error("tools/call", {"name": "add", "arguments": {"a": 1, "b": 2}, "task": {}})
        assert error["code"] == METHOD_NOT_FOUND
        assert "add" in error["message"]


async def test_required_tool_without_task_is_method_not_found() -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error("tools/call", {"name": "job", "arguments": {}})
        assert error["code"] == METHOD_NOT_FOUND
        assert "job" in error["message"]


@pytest.mark.parametrize("tool", ["job", "echo"])
async def test_task_augmented_call_answers_a_create_task_result(tool: str) -> None:
    arguments = {"text": "x"} if tool == "echo" else {}
    async with open_wire(make_server()) as wire:
        result = await wire.call_tool(tool, arguments, task={"ttl": 60_000})
        task = result["task"]
        assert isinstance(task["taskId"], str) and task["taskId"]
        assert task["status"] == "working"  # answered before the work starts
        assert {"createdAt", "lastUpdatedAt", "ttl"} <= set(task)
        assert "content" not in result


@pytest.mark.parametrize("task", [5, True, None])
async def test_non_object_task_is_invalid_params_or_ignored(task: Any) -> None:
    async with open_wire(make_server()) as wire:
        params = {"name": "echo", "arguments": {"text": "x"}, "task": task}
        if task is None:  # null is "absent": a plain call
            assert text_of(await wire.result("tools/call", params)) == "x"
        else:
            assert (await wire.error("tools/call", params))["code"] == INVALID_PARAMS


@pytest.mark.parametrize("task", ["yes", "", [], [60000]])
async def test_string_or_array_task_is_invalid_params(task: Any) -> None:
    async with open_wire(make_server()) as wire:
        params = {"name": "echo", "arguments": {"text": "x"}, "task": task}
        assert (await wire.error("tools/call", params))["code"] == INVALID_PARAMS


async def test_tool_raising_mcp_error_is_that_jsonrpc_error() -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error("tools/call", {"name": "refuse", "arguments": {}})
        assert error == {
            "code": -32042,
            "message": "URL elicitation required",
            "data": {"url": "https://example.test/auth"},
        }


# ----------------------------------------------------------------------------- tools/call: results


async def test_call_returns_text_content() -> None:
    async with open_wire(make_server()) as wire:
        assert await wire.call_tool("echo", {"text": "héllo\nworld"}) == {
            "content": [{"type": "text", "text": "héllo\nworld"}]
        }


async def test_call_with_literal_attrs_and_list_arguments() -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call_tool(
            "shapes", {"kind": "square", "points": [{"x": 1}, {"x": 2, "y": 5}], "scale": 2}
        )
        assert result["structuredContent"] == {"kind": "square", "count": 2, "sum_x": 6.0}
        assert json.loads(text_of(result)) == result["structuredContent"]
        assert "isError" not in result


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("shapes", {"kind": "triangle", "points": []}, "kind"),
        ("shapes", {"kind": "circle", "points": [{"x": 1}, {"x": "2"}]}, "points[1].x"),
        ("shapes", {"kind": "circle", "points": [{"y": 1}]}, "points[0].x"),
        ("shapes", {"kind": "circle"}, "points"),
        ("shapes", {"kind": "circle", "points": {"x": 1}}, "points"),
        ("shapes", {"kind": "circle", "points": [], "scale": "big"}, "scale"),
        ("shapes", {"kind": "circle", "points": [], "colour": "red"}, "colour"),
        ("echo", {"text": 5}, "text"),
        ("echo", {}, "text"),
        ("add", {"a": True, "b": 1}, "a"),
    ],
)
async def test_bad_arguments_are_an_error_result_naming_the_field(
    name: str, arguments: dict[str, Any], field: str
) -> None:
    # SEP-1303: input validation failures are tool errors the model can see, not protocol errors.
    async with open_wire(make_server()) as wire:
        result = await wire.call_tool(name, arguments)
        assert result["isError"] is True
        text = text_of(result)
        assert name in text
        assert f"{field}:" in text, text


async def test_tool_exception_is_an_error_result_with_the_message() -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call_tool("boom", {"message": "the disk is on fire"})
        assert result == {"content": [{"type": "text", "text": "the disk is on fire"}], "isError": True}
        await wire.ping_ok()  # the session survives the tool's failure


async def test_tool_returning_none_answers_empty_content() -> None:
    async with open_wire(make_server()) as wire:
        assert await wire.call_tool("nothing") == {"content": []}


# ----------------------------------------------------------------------------- progress


@pytest.mark.parametrize("token", ["tok-1", 7, 0, ""])
async def test_progress_notifications_carry_the_token_and_strictly_increase(token: int | str) -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call_tool(
            "count_up", {"values": [1, 1, 0.5, 2, 2.5, 2], "total": 10}, _meta={"progressToken": token}
        )
        assert json.loads(text_of(result)) == [True, False, False, True, True, False]
        progress = [n["params"] for n in wire.notifications if n["method"] == "notifications/progress"]
        assert [p["progress"] for p in progress] == [1, 2, 2.5]
        for params in progress:
            assert params["progressToken"] == token
            assert type(params["progressToken"]) is type(token)
            assert params["total"] == 10
        assert [p["message"] for p in progress] == ["at 1.0", "at 2.0", "at 2.5"]


async def test_no_progress_without_a_token() -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call_tool("count_up", {"values": [1, 2, 3]})
        assert json.loads(text_of(result)) == [False, False, False]
        await wire.ping_ok()
        assert wire.notifications == []


async def test_client_receives_progress_through_its_callback() -> None:
    seen: list[ProgressParams] = []
    async with connect_in_memory(make_server()) as client:
        result = await client.call_tool("count_up", {"values": [0.5, 1.0]}, on_progress=seen.append)
        assert not result.is_error
        assert [p.progress for p in seen] == [0.5, 1.0]
        assert [p.message for p in seen] == ["at 0.5", "at 1.0"]


# ----------------------------------------------------------------------------- concurrency and cancellation


async def test_a_slow_call_does_not_block_other_requests(autojump_clock: trio.testing.MockClock) -> None:
    probe = Probe()
    async with open_wire(make_server(probe)) as wire:
        slow_id = await wire.send_request("tools/call", {"name": "slow", "arguments": {"seconds": 100}})
        await probe.started.wait()
        start = trio.current_time()
        await wire.ping_ok()
        assert text_of(await wire.call_tool("echo", {"text": "fast"})) == "fast"
        assert trio.current_time() - start < 1  # answered while the slow call sleeps
        wire.receive_timeout = 200
        response = await wire.response_to(slow_id)
        assert text_of(response["result"]) == "slept 100.0"
        assert probe.outcome == "returned"


async def test_duplicate_in_flight_id_is_refused(autojump_clock: trio.testing.MockClock) -> None:
    probe = Probe()
    async with open_wire(make_server(probe)) as wire:
        await wire.send_request("tools/call", {"name": "slow", "arguments": {"seconds": 50}}, id=77)
        await probe.started.wait()
        await wire.send_request("tools/call", {"name": "echo", "arguments": {"text": "dup"}}, id=77)
        first = await wire.response_to(77)
        assert first["error"]["code"] == INVALID_REQUEST
        wire.receive_timeout = 100
        second = await wire.response_to(77)
        assert text_of(second["result"]) == "slept 50.0"


@pytest.mark.parametrize("request_id", [41, "call-41"])
async def test_cancelled_notification_stops_an_in_flight_call(
    request_id: int | str, autojump_clock: trio.testing.MockClock
) -> None:
    probe = Probe()
    async with open_wire(make_server(probe)) as wire:
        await wire.send_request("tools/call", {"name": "slow", "arguments": {"seconds": 1000}}, id=request_id)
        await probe.started.wait()
        await wire.notify("notifications/cancelled", {"requestId": request_id, "reason": "user hit stop"})
        # Later requests are still answered...
        await wire.ping_ok()
        assert text_of(await wire.call_tool("echo", {"text": "after"})) == "after"
        # ...the tool saw trio.Cancelled...
        await trio.testing.wait_all_tasks_blocked()
        assert probe.finished
        assert probe.outcome == "cancelled"
        # ...and no response is ever sent for the cancelled id (well past the tool's 1000 s).
        await wire.assert_quiet(5000)


async def test_cancelling_unknown_or_finished_requests_is_ignored(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with open_wire(make_server()) as wire:
        response = await wire.exchange("tools/call", {"name": "echo", "arguments": {"text": "x"}}, id=5)
        assert "result" in response
        await wire.notify("notifications/cancelled", {"requestId": 5})  # already answered
        await wire.notify("notifications/cancelled", {"requestId": 999})  # never existed
        await wire.notify("notifications/cancelled", {"requestId": None})
        await wire.notify("notifications/cancelled", {"requestId": [1]})  # malformed: ignored
        await wire.notify("notifications/cancelled")
        await wire.ping_ok()
        await wire.assert_quiet(10)
        assert wire.notifications == []


# ----------------------------------------------------------------------------- unknown methods


@pytest.mark.parametrize("method", ["no/such", "resources/list", "prompts/get", "server/discover", ""])
async def test_unknown_method_is_method_not_found(method: str) -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error(method, id="u1")
        assert error["code"] == METHOD_NOT_FOUND
        assert method in error["message"]


async def test_notification_for_a_request_method_is_not_answered() -> None:
    async with open_wire(make_server()) as wire:
        await wire.notify("tools/call", {"name": "echo", "arguments": {"text": "x"}})
        await wire.notify("notifications/unknown", {"x": 1})
        await wire.notify("notifications/initialized")
        await wire.ping_ok()
        assert wire.notifications == []


async def test_responses_from_the_client_are_ignored() -> None:
    async with open_wire(make_server()) as wire:
        await wire.send({"jsonrpc": "2.0", "id": 12345, "result": {}})
        await wire.send({"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "x"}})
        await wire.ping_ok()


# ----------------------------------------------------------------------------- logging


async def test_set_level_filters_tool_logs() -> None:
    async with open_wire(make_server()) as wire:
        assert await wire.result("logging/setLevel", {"level": "warning"}) == {}
        result = await wire.call_tool("chatter")
        assert json.loads(text_of(result)) == [False, False, False, True, True, True, True, True]
        messages = [n["params"] for n in wire.notifications if n["method"] == "notifications/message"]
        assert [m["level"] for m in messages] == LEVELS[3:]
        assert all(m["logger"] == "chatter" for m in messages)
        assert [m["data"] for m in messages] == [{"level": level} for level in LEVELS[3:]]


async def test_set_level_can_be_lowered_and_raised() -> None:
    async with open_wire(make_server()) as wire:
        await wire.result("logging/setLevel", {"level": "debug"})
        assert json.loads(text_of(await wire.call_tool("chatter"))) == [True] * 8
        await wire.result("logging/setLevel", {"level": "emergency"})
        assert json.loads(text_of(await wire.call_tool("chatter"))) == [False] * 7 + [True]
        levels = [n["params"]["level"] for n in wire.notifications if n["method"] == "notifications/message"]
        assert levels == [*LEVELS, "emergency"]


async def test_no_logs_before_set_level() -> None:
    async with open_wire(make_server()) as wire:
        assert json.loads(text_of(await wire.call_tool("chatter"))) == [False] * 8
        await wire.ping_ok()
        assert wire.notifications == []


@pytest.mark.parametrize("params", [{"level": "verbose"}, {"level": "INFO"}, {"level": 3}, {}, None])
async def test_bad_log_level_is_invalid_params(params: Any) -> None:
    async with open_wire(make_server()) as wire:
        await wire.result("logging/setLevel", {"level": "error"})
        error = await wire.error("logging/setLevel", params)
        assert error["code"] == INVALID_PARAMS
        assert "level" in error["message"]
        # The previous level still applies.
        assert json.loads(text_of(await wire.call_tool("chatter"))) == [False] * 4 + [True] * 4
