"""The modern era (MCP 2026-07-28) on the wire: raw JSON-RPC over an in-memory transport.

A request is modern when its ``params._meta`` carries ``io.modelcontextprotocol/protocolVersion``
(routing is by that key alone); it is then understood on its own, from its envelope. These tests
check the exact shapes the server answers: ``server/discover``, the removed methods, plain calls,
the tasks extension (flat ``CreateTaskResult``, ``tasks/get|update|cancel``), server-directed
tasks for optional tools, input through a task, multi round-trip requests (``requestState``), and
both eras served by one runtime at once.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio

from trio_mcp import Context, McpError, Server, ServerRuntime, TaskLimits
from trio_mcp.transports.memory import MemoryTransport, memory_transport_pair

pytestmark = pytest.mark.every_store  # make test runs it again on each store

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
TASKS = "io.modelcontextprotocol/tasks"

INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022

SERVER_INFO = {"name": "modern-server", "version": "2.0.0"}
INSTRUCTIONS = "Tools for modern-era tests."
META = {SERVER_INFO_KEY: SERVER_INFO}
WINDOW_MS = 1_000
"""``auto_task_after_ms`` of the test server: an optional call still running after 1 s is a task."""
NAME_SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}}}
ADA = {"action": "accept", "content": {"name": "Ada"}}
ISO_8601_UTC = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")
RECEIVE_TIMEOUT = 30.0
"""Seconds to wait for the next message (virtual under the autojump clock)."""

# ----------------------------------------------------------------------------- the test server


@attrs.define
class Probe:
    """What the tools saw, recorded from inside them."""

    slow_stopped: trio.Event = attrs.Factory(trio.Event)
    slow_outcome: str | None = None  # "returned" or "cancelled"
    job_stopped: trio.Event = attrs.Factory(trio.Event)
    job_outcome: str | None = None


def make_server(probe: Probe | None = None, *, instructions: str | None = INSTRUCTIONS) -> Server:
    probe = probe if probe is not None else Probe()
    server = Server(
        "modern-server",
        version="2.0.0",
        instructions=instructions,
        limits=TaskLimits(auto_task_after_ms=WINDOW_MS),
    )

    @server.tool(task_support="optional")
    async def fast(text: str) -> str:
        """Answer at once."""
        return f"fast {text}"

    @server.tool(task_support="optional")
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            probe.slow_outcome = "cancelled"
            raise
        else:
            probe.slow_outcome = "returned"
        finally:
            probe.slow_stopped.set()
        return f"slept {seconds:g}"

    @server.tool(task_support="optional")
    async def broken(message: str) -> str:
        raise ValueError(message)

    @server.tool(task_support="optional")
    async def invalid(message: str) -> str:
        raise McpError(-32602, message)

    @server.tool(task_support="required")
    async def job(seconds: float = 0.0) -> str:
        try:
            await trio.sleep(seconds)
        except trio.Cancelled:
            probe.job_outcome = "cancelled"
            raise
        else:
            probe.job_outcome = "returned"
        finally:
            probe.job_stopped.set()
        return f"job done after {seconds:g}"

    @server.tool(task_support="required")
    async def job_broken(message: str) -> str:
        raise ValueError(message)

    @server.tool(task_support="required")
    async def job_invalid(message: str) -> str:
        raise McpError(-32602, message)

    @server.tool(task_support="forbidden")
    async def inline(seconds: float = 0.0) -> str:
        await trio.sleep(seconds)
        return f"inline after {seconds:g}"

    @server.tool(task_support="optional")
    async def ask_name(ctx: Context) -> Any:
        answer = await ctx.elicit("name?", NAME_SCHEMA)
        return answer.content

    @server.tool(task_support="optional")
    async def ask_twice(ctx: Context) -> Any:
        first = await ctx.elicit("first?", NAME_SCHEMA)
        second = await ctx.elicit("second?", NAME_SCHEMA)
        return {"first": (first.content or {}).get("name"), "second": (second.content or {}).get("name")}

    @server.tool(task_support="forbidden")
    async def greet(greeting: str, ctx: Context) -> str:
        answer = await ctx.elicit("name?", NAME_SCHEMA)
        return f"{greeting}, {(answer.content or {}).get('name')}"

    return server


# ----------------------------------------------------------------------------- raw wire client


def envelope(*, tasks: bool = False, elicitation: bool = False) -> dict[str, Any]:
    """The modern ``_meta``: version, capabilities (tasks extension, elicitation), client info."""
    capabilities: dict[str, Any] = {}
    if tasks:
        capabilities["extensions"] = {TASKS: {}}
    if elicitation:
        capabilities["elicitation"] = {}
    return {
        PROTOCOL_VERSION_KEY: MODERN,
        CLIENT_CAPABILITIES_KEY: capabilities,
        CLIENT_INFO_KEY: {"name": "wire", "version": "1"},
    }


class Wire:
    """A raw JSON-RPC peer speaking the modern envelope (or anything else, with ``meta=``)."""

    def __init__(self, transport: MemoryTransport, runtime: ServerRuntime) -> None:
        self.transport = transport
        self.runtime = runtime
        self.notifications: list[dict[str, Any]] = []
        self._ids = itertools.count(1)

    async def send(self, message: dict[str, Any]) -> None:
        await self.transport.send(json.dumps(message).encode())

    async def receive(self) -> dict[str, Any]:
        with trio.fail_after(RECEIVE_TIMEOUT):
            data = await self.transport.receive_bytes()
        message: dict[str, Any] = json.loads(data)
        assert message.get("jsonrpc") == "2.0", message
        return message

    async def send_request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        tasks: bool = False,
        elicitation: bool = False,
        meta: dict[str, Any] | None = None,
        modern: bool = True,
        id: int | str | None = None,
    ) -> int | str:
        """Send ``method``; with ``modern`` its params carry the envelope (or ``meta``)."""
        request_id: int | str = next(self._ids) if id is None else id
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        body = dict(params or {})
        if modern:
            body["_meta"] = meta if meta is not None else envelope(tasks=tasks, elicitation=elicitation)
        if body or params is not None:
            message["params"] = body
        await self.send(message)
        return request_id

    async def response_to(self, request_id: int | str) -> dict[str, Any]:
        """The next response, which must answer ``request_id``; notifications are kept aside."""
        while True:
            message = await self.receive()
            if "id" not in message:
                self.notifications.append(message)
                continue
            assert message["id"] == request_id, f"expected an answer to {request_id!r}, got {message}"
            assert ("result" in message) != ("error" in message), message
            return message

    async def request(self, method: str, params: dict[str, Any] | None = None, **how: Any) -> dict[str, Any]:
        """Send a request and return its response (notifications skipped)."""
        return await self.response_to(await self.send_request(method, params, **how))

    async def result(self, method: str, params: dict[str, Any] | None = None, **how: Any) -> dict[str, Any]:
        response = await self.request(method, params, **how)
        assert "result" in response, response
        result: dict[str, Any] = response["result"]
        return result

    async def error(self, method: str, params: dict[str, Any] | None = None, **how: Any) -> dict[str, Any]:
        response = await self.request(method, params, **how)
        assert "error" in response, response
        error: dict[str, Any] = response["error"]
        assert type(error["code"]) is int
        assert isinstance(error["message"], str) and error["message"]
        return error

    async def call(self, name: str, arguments: dict[str, Any] | None = None, **how: Any) -> dict[str, Any]:
        extra = how.pop("extra", {})
        return await self.result("tools/call", {"name": name, "arguments": arguments or {}, **extra}, **how)

    async def get(self, task_id: str) -> dict[str, Any]:
        return await self.result("tasks/get", {"taskId": task_id}, tasks=True)

    async def discover_ok(self) -> None:
        """The connection still serves modern requests."""
        assert (await self.result("server/discover"))["resultType"] == "complete"


async def serve_wire(runtime: ServerRuntime, nursery: trio.Nursery) -> Wire:
    """Serve one more connection of ``runtime``; its client end as a Wire."""
    client_side, server_side = memory_transport_pair()
    nursery.start_soon(runtime.serve, server_side)
    return Wire(client_side, runtime)


@asynccontextmanager
async def open_wire(server: Server) -> AsyncIterator[Wire]:
    """Open ``server`` and serve one connection; the Wire also reaches the runtime."""
    async with server.open() as runtime, trio.open_nursery() as nursery:
        yield await serve_wire(runtime, nursery)
        nursery.cancel_scope.cancel()


def text_of(result: dict[str, Any]) -> str:
    return "\n".join(block["text"] for block in result["content"] if block["type"] == "text")


def tool_result(text: str) -> dict[str, Any]:
    """A successful CallToolResult with one text block, as the wire carries it."""
    return {"content": [{"type": "text", "text": text}]}


def assert_flat_created(result: dict[str, Any], status: str = "working", message: str | None = None) -> str:
    """``result`` is exactly the modern flat CreateTaskResult; returns the task id."""
    assert result.get("statusMessage") == message
    assert set(result) - {"statusMessage"} == {
        "resultType",
        "taskId",
        "status",
        "createdAt",
        "lastUpdatedAt",
        "ttlMs",
        "pollIntervalMs",
        "_meta",
    }, result
    assert "task" not in result
    assert result["resultType"] == "task"
    assert isinstance(result["taskId"], str) and result["taskId"]
    assert result["status"] == status
    assert ISO_8601_UTC.match(result["createdAt"]), result["createdAt"]
    assert ISO_8601_UTC.match(result["lastUpdatedAt"]), result["lastUpdatedAt"]
    assert type(result["ttlMs"]) is int and result["ttlMs"] > 0
    assert type(result["pollIntervalMs"]) is int and result["pollIntervalMs"] > 0
    assert result["_meta"] == META
    task_id: str = result["taskId"]
    return task_id


async def settle(seconds: float = 0.001) -> None:
    """Let every pending message be handled (under the autojump clock: until all are blocked)."""
    await trio.sleep(seconds)


# ----------------------------------------------------------------------------- 1. server/discover


async def test_discover_describes_the_modern_server() -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.result("server/discover")
        assert result == {
            "resultType": "complete",
            "supportedVersions": [MODERN],
            "capabilities": {
                "tools": {"listChanged": True},
                "logging": {},
                "extensions": {TASKS: {}},
            },
            "instructions": INSTRUCTIONS,
            "ttlMs": 0,
            "cacheScope": "public",
            "_meta": META,
        }
        assert "tasks" not in result["capabilities"]  # no legacy (2025-11-25) tasks capability


async def test_discover_without_instructions_omits_them() -> None:
    async with open_wire(make_server(instructions=None)) as wire:
        result = await wire.result("server/discover", tasks=True)
        assert "instructions" not in result
        assert result["supportedVersions"] == [MODERN]
        assert result["capabilities"]["extensions"] == {TASKS: {}}


# ----------------------------------------------------------------------------- 2. envelope errors


async def test_routing_is_by_the_protocol_version_key_alone() -> None:
    """Other modern ``_meta`` keys without the protocol version: a handshake-era request,
    which on a connection that never initialized is refused as such."""
    meta = {CLIENT_CAPABILITIES_KEY: {}, CLIENT_INFO_KEY: {"name": "wire", "version": "1"}}
    async with open_wire(make_server()) as wire:
        for method in ("server/discover", "tools/list"):
            error = await wire.error(method, meta=meta)
            assert error == {"code": INVALID_REQUEST, "message": "Invalid request: send 'initialize' first"}
        await wire.discover_ok()


async def test_missing_client_capabilities_is_invalid_params() -> None:
    async with open_wire(make_server()) as wire:
        for method in ("server/discover", "tools/list", "tools/call"):
            error = await wire.error(method, {"name": "fast"}, meta={PROTOCOL_VERSION_KEY: MODERN})
            assert error["code"] == INVALID_PARAMS
            assert CLIENT_CAPABILITIES_KEY in error["message"]
            assert "data" not in error
        await wire.discover_ok()


async def test_unsupported_version_is_32022_naming_the_supported_ones() -> None:
    meta = {PROTOCOL_VERSION_KEY: "2099-01-01", CLIENT_CAPABILITIES_KEY: {}}
    async with open_wire(make_server()) as wire:
        for method in ("server/discover", "initialize"):
            error = await wire.error(method, meta=meta)
            assert error["code"] == UNSUPPORTED_VERSION
            assert error["data"] == {"supported": [MODERN], "requested": "2099-01-01"}
        await wire.discover_ok()


# ----------------------------------------------------------------------------- 3. removed methods


@pytest.mark.parametrize(
    ("method", "params"),
    [
        (
            "initialize",
            {"protocolVersion": MODERN, "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}},
        ),
        ("ping", None),
        ("logging/setLevel", {"level": "info"}),
        ("tasks/result", {"taskId": "t"}),
        ("tasks/list", None),
        ("resources/subscribe", {"uri": "test://x"}),
        ("no/such/method", None),
    ],
)
async def test_removed_and_unknown_methods_are_method_not_found(method: str, params: Any) -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error(method, params, tasks=True)
        assert error["code"] == METHOD_NOT_FOUND
        assert method in error["message"]
        await wire.discover_ok()


# ----------------------------------------------------------------------------- 4. tools/list


async def test_tools_list_is_cacheable_and_lists_every_tool() -> None:
    server = make_server()
    async with open_wire(server) as wire:
        result = await wire.result("tools/list")
        assert set(result) == {"resultType", "tools", "ttlMs", "cacheScope", "_meta"}
        assert result["resultType"] == "complete"
        assert result["ttlMs"] == 0
        assert result["cacheScope"] == "public"
        assert result["_meta"] == META
        tools = {tool["name"]: tool for tool in result["tools"]}
        assert list(tools) == list(server.tools)
        assert tools["fast"]["description"] == "Answer at once."
        assert tools["fast"]["inputSchema"]["properties"] == {"text": {"type": "string"}}
        assert tools["job"]["execution"] == {"taskSupport": "required"}
        assert tools["inline"]["execution"] == {"taskSupport": "forbidden"}


# ----------------------------------------------------------------------------- 5. plain tools/call


async def test_plain_call_answers_a_complete_result() -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call("fast", {"text": "hi"})
        assert result == {**tool_result("fast hi"), "resultType": "complete", "_meta": META}


async def test_plain_call_error_result_stays_a_result() -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call("broken", {"message": "nope"})
        assert result == {
            "content": [{"type": "text", "text": "nope"}],
            "isError": True,
            "resultType": "complete",
            "_meta": META,
        }


async def test_plain_call_mcp_error_is_a_jsonrpc_error() -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error("tools/call", {"name": "invalid", "arguments": {"message": "bad input"}})
        assert error == {"code": INVALID_PARAMS, "message": "bad input"}
        unknown = await wire.error("tools/call", {"name": "nope", "arguments": {}})
        assert unknown["code"] == INVALID_PARAMS
        await wire.discover_ok()


async def test_required_tool_without_the_extension_is_32021() -> None:
    async with open_wire(make_server()) as wire:
        for elicitation in (False, True):
            error = await wire.error("tools/call", {"name": "job", "arguments": {}}, elicitation=elicitation)
            assert error["code"] == MISSING_CAPABILITY
            assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
        await wire.discover_ok()


async def test_the_task_param_is_ignored() -> None:
    task = {"task": {"ttl": 60_000}}
    async with open_wire(make_server()) as wire:
        # An optional tool, no extension: a plain result, whatever ``task`` says.
        result = await wire.call("fast", {"text": "x"}, extra=task)
        assert result == {**tool_result("fast x"), "resultType": "complete", "_meta": META}
        # A forbidden tool with the extension: still a plain result (no -32601 as in 2025-11-25).
        result = await wire.call("inline", {}, extra=task, tasks=True)
        assert result["resultType"] == "complete"
        # A required tool: ``task`` does not stand for the extension.
        error = await wire.error("tools/call", {"name": "job", "arguments": {}, **task})
        assert error["code"] == MISSING_CAPABILITY


# ----------------------------------------------------------------------------- 6. the tasks extension


async def test_required_tool_answers_a_flat_create_task_result(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        created = await wire.call("job", {"seconds": 5}, tasks=True)
        task_id = assert_flat_created(created)
        assert created["ttlMs"] == TaskLimits().default_ttl_ms
        assert created["pollIntervalMs"] == TaskLimits().poll_interval_ms
        assert created["createdAt"] == created["lastUpdatedAt"]
        # tasks/get resolves at once.
        got = await wire.get(task_id)
        assert got == {**{k: v for k, v in created.items() if k != "resultType"}, "resultType": "complete"}


async def test_task_completes_with_its_result_inline(autojump_clock: Any) -> None:
    probe = Probe()
    async with open_wire(make_server(probe)) as wire:
        task_id = assert_flat_created(await wire.call("job", {"seconds": 5}, tasks=True))
        await trio.sleep(2)
        working = await wire.get(task_id)
        assert working["status"] == "working"
        assert "result" not in working and "error" not in working
        await trio.sleep(4)
        done = await wire.get(task_id)
        assert probe.job_outcome == "returned"
        assert set(done) == {
            "resultType",
            "taskId",
            "status",
            "createdAt",
            "lastUpdatedAt",
            "ttlMs",
            "pollIntervalMs",
            "result",
            "_meta",
        }
        assert done["resultType"] == "complete"
        assert done["taskId"] == task_id
        assert done["status"] == "completed"
        assert done["result"] == tool_result("job done after 5")
        assert done["_meta"] == META
        assert ISO_8601_UTC.match(done["lastUpdatedAt"])


async def test_error_result_completes_the_task(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        # A required tool is always a task; one that ends at once is shown already ended.
        created = await wire.call("job_broken", {"message": "oops"}, tasks=True)
        task_id = assert_flat_created(created, status="completed")
        await settle()
        done = await wire.get(task_id)
        assert done["status"] == "completed"  # not failed: isError is a tool result
        assert done["result"] == {"content": [{"type": "text", "text": "oops"}], "isError": True}
        assert "error" not in done


async def test_mcp_error_fails_the_task(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        created = await wire.call("job_invalid", {"message": "bad input"}, tasks=True)
        task_id = assert_flat_created(created, status="failed", message="bad input")
        await settle()
        failed = await wire.get(task_id)
        assert failed["status"] == "failed"
        assert failed["error"] == {"code": INVALID_PARAMS, "message": "bad input"}
        assert "result" not in failed


async def test_cancel_acks_and_really_stops_the_work(autojump_clock: Any) -> None:
    probe = Probe()
    async with open_wire(make_server(probe)) as wire:
        task_id = assert_flat_created(await wire.call("job", {"seconds": 60}, tasks=True))
        await trio.sleep(1)
        assert (await wire.get(task_id))["status"] == "working"
        ack = await wire.result("tasks/cancel", {"taskId": task_id}, tasks=True)
        assert ack == {"resultType": "complete", "_meta": META}
        with trio.fail_after(1):
            await probe.job_stopped.wait()
        assert probe.job_outcome == "cancelled"
        cancelled = await wire.get(task_id)
        assert cancelled["status"] == "cancelled"
        assert "result" not in cancelled and "error" not in cancelled
        # Later, the work has not come back to life.
        await trio.sleep(120)
        assert (await wire.get(task_id))["status"] == "cancelled"
        assert wire.runtime.supervisor.actors == 0


async def test_cancel_of_a_terminal_task_is_still_an_ack(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        task_id = assert_flat_created(await wire.call("job", {"seconds": 1}, tasks=True))
        await trio.sleep(2)
        assert (await wire.get(task_id))["status"] == "completed"
        ack = await wire.result("tasks/cancel", {"taskId": task_id}, tasks=True)
        assert ack == {"resultType": "complete", "_meta": META}
        again = await wire.get(task_id)
        assert again["status"] == "completed"  # terminal states never change
        assert again["result"] == tool_result("job done after 1")


async def test_unknown_task_id_is_invalid_params() -> None:
    async with open_wire(make_server()) as wire:
        for method, params in (
            ("tasks/get", {"taskId": "no-such-task"}),
            ("tasks/cancel", {"taskId": "no-such-task"}),
            ("tasks/update", {"taskId": "no-such-task", "inputResponses": {}}),
        ):
            error = await wire.error(method, params, tasks=True)
            assert error["code"] == INVALID_PARAMS, (method, error)
        await wire.discover_ok()


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tasks/get", {"taskId": "t"}),
        ("tasks/update", {"taskId": "t", "inputResponses": {}}),
        ("tasks/cancel", {"taskId": "t"}),
    ],
)
async def test_tasks_methods_without_the_extension_are_32021(method: str, params: dict[str, Any]) -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error(method, params, elicitation=True)
        assert error["code"] == MISSING_CAPABILITY
        assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}


async def test_tasks_update_needs_an_input_responses_object(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        task_id = assert_flat_created(await wire.call("job", {"seconds": 5}, tasks=True))
        for params in ({"taskId": task_id}, {"taskId": task_id, "inputResponses": ["x"]}):
            error = await wire.error("tasks/update", params, tasks=True)
            assert error["code"] == INVALID_PARAMS
        assert (await wire.get(task_id))["status"] == "working"


# ----------------------------------------------------------------------------- 7. server-directed tasks


async def test_fast_optional_call_is_a_plain_result_and_leaves_no_task(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call("slow", {"seconds": 0.5}, tasks=True)
        assert result == {**tool_result("slept 0.5"), "resultType": "complete", "_meta": META}
        await settle()
        supervisor = wire.runtime.supervisor
        assert supervisor.actors == 0
        assert len(supervisor.store) == 0  # type: ignore[arg-type]


async def test_optional_error_outcomes_within_the_window_leave_no_task(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call("broken", {"message": "nope"}, tasks=True)
        assert result["resultType"] == "complete"
        assert result["isError"] is True
        error = await wire.error(
            "tools/call", {"name": "invalid", "arguments": {"message": "bad"}}, tasks=True
        )
        assert error == {"code": INVALID_PARAMS, "message": "bad"}
        await settle()
        assert wire.runtime.supervisor.actors == 0
        assert len(wire.runtime.supervisor.store) == 0  # type: ignore[arg-type]


async def test_slow_optional_call_becomes_a_task_after_the_window(autojump_clock: Any) -> None:
    probe = Probe()
    async with open_wire(make_server(probe)) as wire:
        start = trio.current_time()
        created = await wire.call("slow", {"seconds": 5}, tasks=True)
        assert trio.current_time() - start == pytest.approx(WINDOW_MS / 1000)
        task_id = assert_flat_created(created)
        assert (await wire.get(task_id))["status"] == "working"
        await trio.sleep(5)
        done = await wire.get(task_id)
        assert done["status"] == "completed"
        assert done["result"] == tool_result("slept 5")
        assert probe.slow_outcome == "returned"


async def test_slow_optional_call_without_the_extension_waits_for_its_result(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        start = trio.current_time()
        result = await wire.call("slow", {"seconds": 5})
        assert trio.current_time() - start == pytest.approx(5)
        assert result == {**tool_result("slept 5"), "resultType": "complete", "_meta": META}
        assert len(wire.runtime.supervisor.store) == 0  # type: ignore[arg-type]


async def test_forbidden_tool_never_becomes_a_task(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        result = await wire.call("inline", {"seconds": 5}, tasks=True)
        assert result == {**tool_result("inline after 5"), "resultType": "complete", "_meta": META}


async def test_cancelling_an_optional_call_within_the_window_stops_its_work(autojump_clock: Any) -> None:
    probe = Probe()
    async with open_wire(make_server(probe)) as wire:
        request_id = await wire.send_request(
            "tools/call", {"name": "slow", "arguments": {"seconds": 60}}, tasks=True
        )
        await trio.sleep(0.5)  # inside the window: no answer yet
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
        )
        with trio.move_on_after(5):
            await probe.slow_stopped.wait()
        assert probe.slow_outcome == "cancelled"
        assert wire.runtime.supervisor.actors == 0


# ----------------------------------------------------------------------------- 8. input through a task


async def test_eliciting_tool_becomes_an_input_required_task(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        start = trio.current_time()
        created = await wire.call("ask_name", tasks=True, elicitation=True)
        assert trio.current_time() - start < WINDOW_MS / 1000  # at once, not after the window
        task_id = assert_flat_created(created, status="input_required", message="name?")
        waiting = await wire.get(task_id)
        assert waiting["status"] == "input_required"
        assert waiting["statusMessage"] == "name?"
        assert waiting["inputRequests"] == {
            "input-0": {
                "method": "elicitation/create",
                "params": {"message": "name?", "requestedSchema": NAME_SCHEMA},
            }
        }
        ack = await wire.result(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"input-0": {"action": "accept", "content": {"name": "Ada"}}},
            },
            tasks=True,
        )
        assert ack == {"resultType": "complete", "_meta": META}
        await settle()
        done = await wire.get(task_id)
        assert done["status"] == "completed"
        assert "inputRequests" not in done
        assert done["result"] == {
            "content": [{"type": "text", "text": '{"name": "Ada"}'}],
            "structuredContent": {"name": "Ada"},
        }
        assert wire.notifications == []  # no elicitation/create request was sent to the client


async def test_update_for_an_unknown_key_is_ignored(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        task_id = assert_flat_created(
            await wire.call("ask_name", tasks=True, elicitation=True),
            status="input_required",
            message="name?",
        )
        ack = await wire.result(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"input-9": {"action": "accept", "content": {"name": "Bob"}}},
            },
            tasks=True,
        )
        assert ack == {"resultType": "complete", "_meta": META}
        await settle()
        still = await wire.get(task_id)
        assert still["status"] == "input_required"
        assert list(still["inputRequests"]) == ["input-0"]


async def test_input_request_keys_are_unique_for_the_task(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        task_id = assert_flat_created(
            await wire.call("ask_twice", tasks=True, elicitation=True),
            status="input_required",
            message="first?",
        )
        first = await wire.get(task_id)
        assert list(first["inputRequests"]) == ["input-0"]
        assert first["inputRequests"]["input-0"]["params"]["message"] == "first?"
        await wire.result(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"input-0": {"action": "accept", "content": {"name": "Ada"}}},
            },
            tasks=True,
        )
        await settle()
        second = await wire.get(task_id)
        assert second["status"] == "input_required"
        assert list(second["inputRequests"]) == ["input-1"]
        assert second["inputRequests"]["input-1"]["params"]["message"] == "second?"
        # The old key, answered again, is not the new request.
        await wire.result(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"input-0": {"action": "accept", "content": {"name": "X"}}},
            },
            tasks=True,
        )
        await settle()
        assert list((await wire.get(task_id))["inputRequests"]) == ["input-1"]
        await wire.result(
            "tasks/update",
            {
                "taskId": task_id,
                "inputResponses": {"input-1": {"action": "accept", "content": {"name": "Bob"}}},
            },
            tasks=True,
        )
        await settle()
        done = await wire.get(task_id)
        assert done["status"] == "completed"
        assert done["result"]["structuredContent"] == {"first": "Ada", "second": "Bob"}


async def test_cancelling_a_task_waiting_for_input_drops_its_requests(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        task_id = assert_flat_created(
            await wire.call("ask_name", tasks=True, elicitation=True),
            status="input_required",
            message="name?",
        )
        ack = await wire.result("tasks/cancel", {"taskId": task_id}, tasks=True)
        assert ack == {"resultType": "complete", "_meta": META}
        await settle()
        cancelled = await wire.get(task_id)
        assert cancelled["status"] == "cancelled"
        assert "inputRequests" not in cancelled
        # A late answer is acknowledged and changes nothing.
        await wire.result("tasks/update", {"taskId": task_id, "inputResponses": {"input-0": ADA}}, tasks=True)
        await settle()
        assert (await wire.get(task_id))["status"] == "cancelled"
        assert wire.runtime.supervisor.actors == 0


async def test_eliciting_task_without_the_elicitation_capability_is_32021(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error("tools/call", {"name": "ask_name", "arguments": {}}, tasks=True)
        assert error["code"] == MISSING_CAPABILITY
        assert error["data"] == {"requiredCapabilities": {"elicitation": {}}}
        await settle()
        assert wire.runtime.supervisor.actors == 0


# ----------------------------------------------------------------------------- 9. MRTR on a plain call


def only_key(result: dict[str, Any]) -> str:
    """The one key of an answer's ``inputRequests``."""
    [key] = result["inputRequests"]
    assert isinstance(key, str) and key.startswith("input-")
    return key


async def first_round(wire: Wire, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call ``greet``; it must answer an InputRequiredResult asking one question (under a key
    made from the question: the same whenever the same call asks it)."""
    result = await wire.call("greet", arguments, elicitation=True)
    assert set(result) == {"resultType", "inputRequests", "requestState", "_meta"}
    assert result["resultType"] == "input_required"
    assert result["inputRequests"] == {
        only_key(result): {
            "method": "elicitation/create",
            "params": {"message": "name?", "requestedSchema": NAME_SCHEMA},
        }
    }
    assert isinstance(result["requestState"], str) and result["requestState"]
    assert result["_meta"] == META
    return result


async def test_mrtr_input_required_then_retry_with_the_answer() -> None:
    async with open_wire(make_server()) as wire:
        first_id = await wire.send_request(
            "tools/call", {"name": "greet", "arguments": {"greeting": "Hello"}}, elicitation=True
        )
        first = (await wire.response_to(first_id))["result"]
        assert first["resultType"] == "input_required"
        retry = {
            "name": "greet",
            "arguments": {"greeting": "Hello"},
            "inputResponses": {only_key(first): ADA},
            "requestState": first["requestState"],
        }
        second_id = await wire.send_request("tools/call", retry, elicitation=True)
        assert second_id != first_id
        final = (await wire.response_to(second_id))["result"]
        assert final == {**tool_result("Hello, Ada"), "resultType": "complete", "_meta": META}
        assert wire.notifications == []


async def test_mrtr_retry_without_the_answer_asks_again() -> None:
    async with open_wire(make_server()) as wire:
        first = await first_round(wire, {"greeting": "Hi"})
        again = await wire.call(
            "greet",
            {"greeting": "Hi"},
            extra={"requestState": first["requestState"], "inputResponses": {}},
            elicitation=True,
        )
        assert again["resultType"] == "input_required"
        assert list(again["inputRequests"]) == [only_key(first)]  # the same key again


async def test_mrtr_multi_round_keeps_earlier_answers() -> None:
    async with open_wire(make_server()) as wire:
        first = await wire.call("ask_twice", elicitation=True)
        key1 = only_key(first)
        second = await wire.call(
            "ask_twice",
            extra={"inputResponses": {key1: ADA}, "requestState": first["requestState"]},
            elicitation=True,
        )
        assert second["resultType"] == "input_required"
        key2 = only_key(second)
        assert key2 != key1
        assert second["inputRequests"][key2]["params"]["message"] == "second?"
        final = await wire.call(
            "ask_twice",
            extra={
                "inputResponses": {key2: {"action": "accept", "content": {"name": "Bob"}}},
                "requestState": second["requestState"],
            },
            elicitation=True,
        )
        assert final["resultType"] == "complete"
        assert final["structuredContent"] == {"first": "Ada", "second": "Bob"}


async def test_mrtr_tampered_request_state_is_invalid_params() -> None:
    async with open_wire(make_server()) as wire:
        first = await first_round(wire, {"greeting": "Hi"})
        state: str = first["requestState"]
        middle = len(state) // 2
        assert state[middle] != "."
        tampered = state[:middle] + ("A" if state[middle] != "A" else "B") + state[middle + 1 :]
        error = await wire.error(
            "tools/call",
            {
                "name": "greet",
                "arguments": {"greeting": "Hi"},
                "inputResponses": {only_key(first): ADA},
                "requestState": tampered,
            },
            elicitation=True,
        )
        assert error["code"] == INVALID_PARAMS
        assert "requestState" in error["message"]
        # The untouched state still works.
        final = await wire.call(
            "greet",
            {"greeting": "Hi"},
            extra={"inputResponses": {only_key(first): ADA}, "requestState": state},
            elicitation=True,
        )
        assert text_of(final) == "Hi, Ada"


async def test_mrtr_request_state_is_bound_to_the_arguments() -> None:
    async with open_wire(make_server()) as wire:
        first = await first_round(wire, {"greeting": "Hi"})
        state = first["requestState"]
        error = await wire.error(
            "tools/call",
            {
                "name": "greet",
                "arguments": {"greeting": "Bye"},
                "inputResponses": {only_key(first): ADA},
                "requestState": state,
            },
            elicitation=True,
        )
        assert error["code"] == INVALID_PARAMS
        await wire.discover_ok()


async def test_mrtr_request_state_expires() -> None:
    now = [1_000_000.0]
    server = make_server()
    async with server.open(wall_clock=lambda: now[0]) as runtime, trio.open_nursery() as nursery:
        wire = await serve_wire(runtime, nursery)
        first = await first_round(wire, {"greeting": "Hi"})
        state = first["requestState"]
        now[0] += server.state_codec.lifetime + 1
        error = await wire.error(
            "tools/call",
            {
                "name": "greet",
                "arguments": {"greeting": "Hi"},
                "inputResponses": {only_key(first): ADA},
                "requestState": state,
            },
            elicitation=True,
        )
        assert error["code"] == INVALID_PARAMS
        nursery.cancel_scope.cancel()


async def test_mrtr_without_the_elicitation_capability_is_32021() -> None:
    async with open_wire(make_server()) as wire:
        error = await wire.error("tools/call", {"name": "greet", "arguments": {"greeting": "Hi"}})
        assert error["code"] == MISSING_CAPABILITY
        assert error["data"] == {"requiredCapabilities": {"elicitation": {}}}
        assert "elicitation" in error["message"]
        await wire.discover_ok()


# ----------------------------------------------------------------------------- 10. both eras at once


async def test_both_eras_on_one_runtime_keep_their_shapes_and_their_tasks(autojump_clock: Any) -> None:
    server = make_server()
    async with server.open() as runtime, trio.open_nursery() as nursery:
        old = await serve_wire(runtime, nursery)
        new = await serve_wire(runtime, nursery)

        # The handshake era on one connection.
        init = await old.result(
            "initialize",
            {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}},
            modern=False,
        )
        assert init["protocolVersion"] == HANDSHAKE
        assert "tasks" in init["capabilities"] and "extensions" not in init["capabilities"]
        await old.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        created_old = await old.result(
            "tools/call", {"name": "slow", "arguments": {"seconds": 5}, "task": {"ttl": 60_000}}, modern=False
        )
        assert set(created_old) == {"task"}
        old_task = created_old["task"]
        assert set(old_task) == {"taskId", "status", "createdAt", "lastUpdatedAt", "ttl", "pollInterval"}
        assert old_task["status"] == "working"
        assert old_task["ttl"] == 60_000

        # The modern era on the other.
        created_new = await new.call("job", {"seconds": 5}, tasks=True)
        new_id = assert_flat_created(created_new)

        # Neither sees the other's tasks.
        error = await new.error("tasks/get", {"taskId": old_task["taskId"]}, tasks=True)
        assert error["code"] == INVALID_PARAMS
        error = await old.error("tasks/get", {"taskId": new_id}, modern=False)
        assert error["code"] == INVALID_PARAMS
        listed = await old.result("tasks/list", modern=False)
        assert [t["taskId"] for t in listed["tasks"]] == [old_task["taskId"]]

        # Each finishes in its own era's shape.
        result = await old.result("tasks/result", {"taskId": old_task["taskId"]}, modern=False)
        assert result == {
            **tool_result("slept 5"),
            "_meta": {RELATED_TASK_KEY: {"taskId": old_task["taskId"]}},
        }
        assert "resultType" not in result
        done = await new.get(new_id)
        assert done["status"] == "completed"
        assert done["result"] == tool_result("job done after 5")
        got_old = await old.result("tasks/get", {"taskId": old_task["taskId"]}, modern=False)
        assert got_old["status"] == "completed"
        assert "resultType" not in got_old and "result" not in got_old
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------------------- 11. subscriptions/listen

SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"


async def test_listen_acknowledges_then_streams_tagged_task_notifications(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        created = await wire.call("job", {"seconds": 5}, tasks=True)
        task_id = created["taskId"]
        listen_id = await wire.send_request(
            "subscriptions/listen", {"notifications": {"taskIds": [task_id, "no-such-task"]}}, tasks=True
        )
        ack = await wire.receive()
        # The first message of the stream says what it will carry: only the client's own tasks.
        assert ack == {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"notifications": {"taskIds": [task_id]}, "_meta": {SUBSCRIPTION_ID_KEY: listen_id}},
        }
        update = await wire.receive()
        assert update["method"] == "notifications/tasks"
        params = update["params"]
        assert params["_meta"] == {SUBSCRIPTION_ID_KEY: listen_id}
        assert params["taskId"] == task_id and params["status"] == "completed"
        assert params["result"]["content"] == [{"type": "text", "text": "job done after 5"}]
        assert trio.current_time() == pytest.approx(5.0)
        # The client ends the stream with notifications/cancelled: no response, and no more
        # notifications for it (the connection goes on serving).
        await wire.send(
            {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": listen_id}}
        )
        again = await wire.call("job", {"seconds": 1}, tasks=True)
        assert again["resultType"] == "task"
        await trio.sleep(2)
        await wire.discover_ok()
        assert [n for n in wire.notifications if n["method"] == "notifications/tasks"] == []


async def test_listen_for_another_owners_task_streams_nothing_of_it(autojump_clock: Any) -> None:
    async with make_server().open() as runtime, trio.open_nursery() as nursery:
        owner, stranger = await serve_wire(runtime, nursery), await serve_wire(runtime, nursery)
        task_id = (await owner.call("job", {"seconds": 3}, tasks=True))["taskId"]
        listen_id = await stranger.send_request(
            "subscriptions/listen", {"notifications": {"taskIds": [task_id]}}, tasks=True
        )
        ack = await stranger.receive()
        assert ack["params"] == {"notifications": {"taskIds": []}, "_meta": {SUBSCRIPTION_ID_KEY: listen_id}}
        await trio.sleep(5)  # the task completes meanwhile
        assert (await owner.get(task_id))["status"] == "completed"
        await stranger.discover_ok()
        assert stranger.notifications == []
        nursery.cancel_scope.cancel()


async def test_listen_rules(autojump_clock: Any) -> None:
    async with open_wire(make_server()) as wire:
        # Task notifications need the tasks extension.
        error = await wire.error("subscriptions/listen", {"notifications": {"taskIds": ["x"]}})
        assert error["code"] == MISSING_CAPABILITY
        assert error["data"] == {"requiredCapabilities": {"extensions": {TASKS: {}}}}
        assert (await wire.error("subscriptions/listen", {}))["code"] == INVALID_PARAMS
        bad = {"notifications": {"taskIds": [1, 2]}}
        assert (await wire.error("subscriptions/listen", bad, tasks=True))["code"] == INVALID_PARAMS
        # List changes are streamed too: a tool added while serving is announced, tagged.
        listen_id = await wire.send_request(
            "subscriptions/listen", {"notifications": {"toolsListChanged": True}}
        )
        ack = await wire.receive()
        assert ack["params"] == {
            "notifications": {"toolsListChanged": True},
            "_meta": {SUBSCRIPTION_ID_KEY: listen_id},
        }

        async def added() -> str:
            return "new"

        wire.runtime.server.add_tool(added)
        changed = await wire.receive()
        assert changed == {
            "jsonrpc": "2.0",
            "method": "notifications/tools/list_changed",
            "params": {"_meta": {SUBSCRIPTION_ID_KEY: listen_id}},
        }
