"""Middleware (issue 32, item 2): ordered async hooks around every request and every tool run,
in both eras and for tasks; error answers; a middleware's own failure; the built-ins
(``RequestLog``, ``RateLimit``) and their behaviour from both entry points."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp import McpError, Server, TaskStatus, connect_in_memory
from trio_mcp.protocol import jsonrpc
from trio_mcp.protocol.messages import DetailedTask
from trio_mcp.server.middleware import (
    RATE_LIMITED,
    CallNext,
    Middleware,
    RateLimit,
    RequestInfo,
    RequestLog,
    ToolCallInfo,
    ToolCallNext,
)

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"


def make_server(runs: list[str] | None = None) -> Server:
    server = Server("guarded")
    ran = runs if runs is not None else []

    @server.tool
    async def echo(text: str) -> str:
        ran.append(text)
        return text

    @server.tool(task_support="optional")
    async def nap(seconds: float) -> str:
        ran.append(f"nap {seconds}")
        await trio.sleep(seconds)
        return "rested"

    @server.tool
    async def broken() -> str:
        raise ValueError("the tool's own bug")

    return server


def recorder(name: str, seen: list[Any]) -> Any:
    async def middleware(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        seen.append((name, "before", request.method))
        try:
            result = await call_next()
        except McpError as exc:
            seen.append((name, "error", request.method, exc.code))
            raise
        seen.append((name, "after", request.method))
        return result

    return middleware


# -- order, before / after / on error ------------------------------------------------------------
async def test_middleware_runs_in_registration_order_around_every_request() -> None:
    server = make_server()
    seen: list[Any] = []
    server.add_middleware(recorder("outer", seen))
    server.middleware(recorder("inner", seen))
    async with connect_in_memory(server) as client:
        seen.clear()  # initialize went through too
        await client.ping()
        await client.list_tools()
        assert (await client.call_tool("echo", {"text": "hi"})).text == "hi"
        with pytest.raises(McpError) as refused:
            await client.call_tool("nope", {})
    assert refused.value.code == -32602
    assert seen == [
        ("outer", "before", "ping"),
        ("inner", "before", "ping"),
        ("inner", "after", "ping"),
        ("outer", "after", "ping"),
        ("outer", "before", "tools/list"),
        ("inner", "before", "tools/list"),
        ("inner", "after", "tools/list"),
        ("outer", "after", "tools/list"),
        ("outer", "before", "tools/call"),
        ("inner", "before", "tools/call"),
        ("inner", "after", "tools/call"),
        ("outer", "after", "tools/call"),
        # refused before any handler (an unknown tool): the middleware still sees it, as an error
        ("outer", "before", "tools/call"),
        ("inner", "before", "tools/call"),
        ("inner", "error", "tools/call", -32602),
        ("outer", "error", "tools/call", -32602),
    ]


async def test_a_middleware_sees_what_the_request_is_and_may_replace_the_result() -> None:
    server = make_server()
    infos: list[RequestInfo] = []

    @server.middleware
    async def shout(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        infos.append(request)
        result = await call_next()
        if request.tool == "echo":
            result = {**result, "content": [{"type": "text", "text": result["content"][0]["text"].upper()}]}
        return result

    async with connect_in_memory(server) as client:
        assert (await client.call_tool("echo", {"text": "hi"})).text == "HI"
        created = await client.call_tool_as_task("nap", {"seconds": 0})
        await client.task_result(created.task.task_id)
    call, task_call, result = (info for info in infos if info.method in ("tools/call", "tasks/result"))
    assert (call.tool, call.as_task, call.era, call.protocol_version) == (
        "echo",
        False,
        "handshake",
        "2025-11-25",
    )
    assert call.params["arguments"] == {"text": "hi"} and call.request_id == 2
    assert call.session_id is not None and call.session_id.startswith("session-")
    assert call.owner.startswith("connection:") and call.identity is None
    assert (task_call.tool, task_call.as_task) == ("nap", True)
    assert result.task_id == created.task.task_id


async def test_error_answers_keep_the_connection_serving_and_create_nothing() -> None:
    runs: list[str] = []
    server = make_server(runs)

    @server.middleware
    async def no_naps(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        if request.tool == "nap":
            raise McpError(-32001, "no naps today", {"why": "policy"})
        return await call_next()

    async with connect_in_memory(server) as client:
        for attempt in (
            client.call_tool("nap", {"seconds": 1}),
            client.call_tool_as_task("nap", {"seconds": 1}),
        ):
            with pytest.raises(McpError) as refused:
                await attempt
            assert (refused.value.code, refused.value.message, refused.value.data) == (
                -32001,
                "no naps today",
                {"why": "policy"},
            )
        assert (await client.list_tasks()).tasks == []  # the refused creation made no task
        assert (await client.call_tool("echo", {"text": "still here"})).text == "still here"
    assert runs == ["still here"]


async def test_an_error_after_a_creation_removes_the_task_nobody_was_told_of() -> None:
    runs: list[str] = []
    server = make_server(runs)

    @server.middleware
    async def regrets(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        result = await call_next()
        if request.as_task:
            raise McpError(-32001, "changed my mind")
        return result

    async with connect_in_memory(server) as client:
        with pytest.raises(McpError):
            await client.call_tool_as_task("nap", {"seconds": 60})
        await trio.sleep(0.01)
        assert (await client.list_tasks()).tasks == []
    assert runs == []  # its work never started


async def test_a_failing_middleware_is_answered_internal_error_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = make_server()
    mode = {"how": "raise"}

    @server.middleware
    async def buggy(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        if request.method != "tools/call":
            return await call_next()
        if mode["how"] == "raise":
            raise RuntimeError("middleware bug")
        if mode["how"] == "twice":
            await call_next()
            return await call_next()
        await call_next()
        return None  # type: ignore[return-value]  # forgot to return the result

    async with connect_in_memory(server) as client:
        for how in ("raise", "twice", "none"):
            mode["how"] = how
            caplog.clear()
            with caplog.at_level(logging.ERROR, logger="trio_mcp"):
                with pytest.raises(McpError) as failed:
                    await client.call_tool("echo", {"text": how})
            assert failed.value.code == -32603, how
            assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 1, how
        await client.ping()  # the connection goes on
        mode["how"] = "none"
        assert (await client.list_tools())[0].name == "echo"


async def test_quick_requests_through_failing_middleware_leave_the_reader_serving(
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = make_server()

    @server.middleware
    async def buggy(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        if request.method in ("ping", "tasks/get"):
            raise KeyError("oops")
        return await call_next()

    async with connect_in_memory(server) as client:
        with caplog.at_level(logging.ERROR, logger="trio_mcp"):
            for attempt in (client.ping(), client.get_task("nope")):
                with pytest.raises(McpError) as failed:
                    await attempt
                assert failed.value.code == -32603
        assert len([r for r in caplog.records if r.levelno >= logging.ERROR]) == 2
        created = await client.call_tool_as_task("nap", {"seconds": 60})
        assert [t.task_id for t in (await client.list_tasks()).tasks] == [created.task.task_id]
        cancelled = await client.cancel_task(created.task.task_id)
        assert cancelled.status == TaskStatus.CANCELLED


async def test_a_handler_error_passes_through_middleware_as_it_would_without() -> None:
    server = make_server()
    server.add_middleware(recorder("only", []))
    async with connect_in_memory(server) as client:
        result = await client.call_tool("broken", {})
    assert result.is_error and "the tool's own bug" in result.text


async def test_modern_era_requests_go_through_middleware_too() -> None:
    server = make_server()
    seen: list[RequestInfo] = []

    @server.middleware
    async def note(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        seen.append(request)
        if request.tool == "echo" and request.params.get("arguments", {}).get("text") == "refuse":
            raise McpError(-32001, "refused")
        return await call_next()

    async with connect_in_memory(server, protocol=MODERN) as client:
        assert (await client.call_tool("echo", {"text": "hi"})).text == "hi"
        with pytest.raises(McpError) as refused:
            await client.call_tool("echo", {"text": "refuse"})
        assert refused.value.code == -32001
    calls = [info for info in seen if info.method == "tools/call"]
    assert [(info.era, info.protocol_version) for info in calls] == [("modern", MODERN)] * 2


async def test_a_stateless_request_goes_through_middleware_and_a_refusal_leaves_no_task() -> None:
    runs: list[str] = []
    server = make_server(runs)
    seen: list[Any] = []
    server.add_middleware(recorder("mw", seen))

    @server.middleware
    async def no_naps(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        if request.tool == "nap":
            raise McpError(-32001, "no naps")
        return await call_next()

    tool_runs: list[tuple[str, str, str | None]] = []

    @server.tool_middleware
    async def note(call: ToolCallInfo, call_next: ToolCallNext) -> Any:
        tool_runs.append((call.tool, call.era, call.session_id))
        return await call_next()

    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }

    def call(request_id: int, name: str, arguments: dict[str, Any]) -> jsonrpc.Request:
        return jsonrpc.Request(
            request_id, "tools/call", {"name": name, "arguments": arguments, "_meta": meta}
        )

    async with server.open() as runtime:
        ok, _ = await runtime.serve_one(call(1, "echo", {"text": "hi"}), owner="alice", send=lambda _: True)
        refused, code = await runtime.serve_one(
            call(2, "nap", {"seconds": 1}), owner="alice", send=lambda _: True
        )
        unknown, _ = await runtime.serve_one(call(3, "nope", {}), owner="alice", send=lambda _: True)
        not_modern, _ = await runtime.serve_one(
            jsonrpc.Request(4, "tools/list", {}), owner="alice", send=lambda _: True
        )
        await trio.sleep(0.01)
        assert runtime.supervisor.live_count("alice") == 0
    assert json.loads(ok)["result"]["content"][0]["text"] == "hi"
    assert code == -32001 and json.loads(refused)["error"]["code"] == -32001
    assert json.loads(unknown)["error"]["code"] == -32602
    assert json.loads(not_modern)["error"]["code"] == -32600
    assert ("mw", "error", "tools/call", -32602) in seen and ("mw", "error", "tools/list", -32600) in seen
    assert runs == ["hi"]
    assert tool_runs == [("echo", "modern", None)]  # no session: a stateless request


# -- tool middleware ---------------------------------------------------------------------------
async def test_tool_middleware_wraps_plain_calls_and_task_runs_inside_the_task(autojump_clock: Any) -> None:
    server = make_server()
    seen: list[Any] = []

    class Audit(Middleware):
        async def on_tool_call(self, call: ToolCallInfo, call_next: ToolCallNext) -> Any:
            started = trio.current_time()
            seen.append(("start", call.tool, call.task_id, dict(call.arguments), call.era))
            value = await call_next()
            seen.append(("end", call.tool, call.task_id, trio.current_time() - started))
            return f"[{value}]"

    server.add_middleware(Audit())
    async with connect_in_memory(server) as client:
        assert (await client.call_tool("echo", {"text": "hi"})).text == "[hi]"
        created = await client.call_tool_as_task("nap", {"seconds": 30})
        task_id = created.task.task_id
        assert (await client.task_result(task_id)).text == "[rested]"
        bad = await client.call_tool("echo", {"text": 3})
        assert bad.is_error  # bad arguments are answered before any run: no hook
    assert seen == [
        ("start", "echo", None, {"text": "hi"}, "handshake"),
        ("end", "echo", None, 0),
        ("start", "nap", task_id, {"seconds": 30}, "handshake"),
        ("end", "nap", task_id, 30),  # the hook wrapped the task's whole run
    ]


async def test_tool_middleware_in_a_modern_era_task(autojump_clock: Any) -> None:
    server = make_server()
    seen: list[Any] = []

    @server.tool_middleware
    async def note(call: ToolCallInfo, call_next: ToolCallNext) -> Any:
        seen.append((call.tool, call.task_id is not None, call.era))
        return await call_next()

    async with connect_in_memory(server, protocol=MODERN) as client:
        started = await client.start_tool("nap", {"seconds": 10})  # past the auto-task window
        assert isinstance(started, DetailedTask)
        assert (await client.call_tool("nap", {"seconds": 10})).text == "rested"
    assert seen and all(entry == ("nap", True, "modern") for entry in seen)


async def test_a_tool_hook_may_refuse_or_fail_and_a_task_then_fails(autojump_clock: Any) -> None:
    runs: list[str] = []
    server = make_server(runs)

    @server.tool_middleware
    async def gate(call: ToolCallInfo, call_next: ToolCallNext) -> Any:
        if call.arguments.get("seconds") == 1:
            raise McpError(-32001, "not this one")
        if call.arguments.get("seconds") == 2:
            raise RuntimeError("hook bug")
        return await call_next()

    async with connect_in_memory(server) as client:
        with pytest.raises(McpError) as refused:
            await client.call_tool("nap", {"seconds": 1})
        assert refused.value.code == -32001
        for seconds, code in ((1, -32001), (2, -32603)):
            created = await client.call_tool_as_task("nap", {"seconds": seconds})
            task = await client.poll_task(created.task.task_id)
            assert task.status == TaskStatus.FAILED
            with pytest.raises(McpError) as failed:
                await client.task_result(task.task_id)
            assert failed.value.code == code
        assert (await client.call_tool("nap", {"seconds": 3})).text == "rested"
    assert runs == ["nap 3.0"]  # refused runs never started the tool


# -- the built-ins -------------------------------------------------------------------------------
async def test_rate_limit_per_caller_with_a_mock_clock(mock_clock: trio.testing.MockClock) -> None:
    runs: list[str] = []
    server = make_server(runs)
    server.add_middleware(RateLimit(rate=1, burst=2))  # time moves only when the test says
    async with connect_in_memory(server) as client, connect_in_memory(server) as other:
        assert (await client.call_tool("echo", {"text": "1"})).text == "1"
        assert (await client.call_tool("echo", {"text": "2"})).text == "2"
        with pytest.raises(McpError) as limited:
            await client.call_tool("echo", {"text": "3"})
        assert limited.value.code == RATE_LIMITED == -32029
        assert limited.value.data == {"retryAfterMs": 1000}
        with pytest.raises(McpError):
            await client.call_tool_as_task("echo", {"text": "task"})  # no task is created
        await client.ping()  # exempt
        assert (await other.call_tool("echo", {"text": "x"})).text == "x"  # another caller
        mock_clock.jump(0.5)
        with pytest.raises(McpError) as limited:
            await client.call_tool("echo", {"text": "4"})
        assert limited.value.data == {"retryAfterMs": 500}
        mock_clock.jump(0.5)
        assert (await client.call_tool("echo", {"text": "5"})).text == "5"
        mock_clock.jump(1)
        assert (await client.list_tasks()).tasks == []
    assert runs == ["1", "2", "x", "5"]


def test_the_token_bucket_refills_at_its_rate() -> None:
    clock = trio.testing.MockClock()

    async def body() -> list[float]:
        limit = RateLimit(rate=2, burst=3)
        waits = [limit.take("a") for _ in range(4)]  # three in the burst, then half a second
        clock.jump(0.25)
        waits.append(limit.take("a"))  # half a token: a quarter of a second more
        clock.jump(0.25)
        waits.append(limit.take("a"))
        clock.jump(10)
        waits.extend(limit.take("a") for _ in range(4))  # refilled to the burst, no more
        return waits

    assert trio.run(body, clock=clock) == [0, 0, 0, 0.5, 0.25, 0, 0, 0, 0, 0.5]


def test_rate_limit_keys_by_identity_then_address_then_connection() -> None:
    limit = RateLimit(rate=1, burst=1, max_callers=2)
    base: dict[str, Any] = {"method": "tools/list", "request_id": 1, "params": {}, "era": "handshake"}
    alice = RequestInfo(
        **base, protocol_version=None, owner="identity:alice", identity="alice", client="1.2.3.4"
    )
    guest = RequestInfo(**base, protocol_version=None, owner="anonymous", client="1.2.3.4")
    local = RequestInfo(**base, protocol_version=None, owner="connection:abc")
    assert [limit.key(info) for info in (alice, guest, local)] == [
        "identity:alice",
        "client:1.2.3.4",
        "connection:abc",
    ]

    async def body() -> None:
        for caller in ("a", "b", "c"):
            limit.take(caller)
        assert list(limit._buckets) == ["b", "c"]  # at most max_callers kept

    trio.run(body)


async def test_request_log_writes_one_structured_line_per_request(
    caplog: pytest.LogCaptureFixture, autojump_clock: Any
) -> None:
    server = make_server()
    server.add_middleware(RequestLog())
    with caplog.at_level(logging.DEBUG, logger="trio_mcp.requests"):
        async with connect_in_memory(server) as client:
            await client.call_tool("nap", {"seconds": 1.5})
            await client.call_tool("broken", {})
            with pytest.raises(McpError):
                await client.call_tool("nope", {})
            created = await client.call_tool_as_task("nap", {"seconds": 2})
            await client.task_result(created.task.task_id)
    lines = [r for r in caplog.records if r.name == "trio_mcp.requests" and r.levelno == logging.INFO]
    session = lines[1].mcp_request["session"]  # type: ignore[attr-defined]
    head = f"request method=tools/call tool=%s id=%d era=handshake session={session} outcome="
    assert [r.getMessage() for r in lines[1:4]] == [
        head % ("nap", 2) + "ok duration_ms=1500.0",
        head % ("broken", 3) + "tool_error duration_ms=0.0",
        head % ("nope", 4) + "error code=-32602 duration_ms=0.0",
    ]
    assert [r.mcp_request["method"] for r in lines] == [  # type: ignore[attr-defined]
        "initialize",
        "tools/call",
        "tools/call",
        "tools/call",
        "tools/call",
        "tasks/result",
    ]
    result_line = lines[-1].mcp_request  # type: ignore[attr-defined]
    assert result_line["task"] == created.task.task_id and result_line["duration_ms"] == 2000.0
    runs = [
        r.getMessage() for r in caplog.records if r.levelno == logging.DEBUG and r.name == "trio_mcp.requests"
    ]
    assert f"tool name=nap task={created.task.task_id} outcome=ok duration_ms=2000.0" in runs


async def test_a_cancelled_request_is_logged_cancelled(caplog: pytest.LogCaptureFixture) -> None:
    server = make_server()
    server.add_middleware(RequestLog())
    with caplog.at_level(logging.INFO, logger="trio_mcp.requests"):
        async with connect_in_memory(server) as client:
            with trio.move_on_after(0.05):
                await client.call_tool("nap", {"seconds": 60})  # the client cancels the request
            await trio.sleep(0.05)
    outcomes = [r.mcp_request["outcome"] for r in caplog.records if getattr(r, "mcp_request", None)]  # type: ignore[attr-defined]
    assert outcomes == ["ok", "cancelled"]


SERVER_FILE = """
from trio_mcp import Server
from trio_mcp.server.middleware import RequestLog

server = Server("logged")
server.add_middleware(RequestLog())


@server.tool
async def echo(text: str) -> str:
    return text


if __name__ == "__main__":
    server.run()
"""

LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO    trio_mcp\.requests: request method=(\S+) (?:tool=(\S+) )?"
    r"id=(\d+) era=handshake session=session-\d+ outcome=(\w+) duration_ms=[\d.]+$"
)


@pytest.mark.parametrize("entry", ["python server.py", "trio-mcp serve"])
def test_the_request_log_line_is_the_same_from_both_entry_points(tmp_path: Path, entry: str) -> None:
    path = tmp_path / "server.py"
    path.write_text(textwrap.dedent(SERVER_FILE))
    if entry == "python server.py":
        argv = [sys.executable, str(path), "--log-level", "info"]
    else:
        argv = [sys.executable, "-m", "trio_mcp.cli", "serve", f"{path}:server", "--log-level", "info"]
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": "echo", "arguments": {"text": "x"}},
        },
    ]
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path
    )
    assert process.stdin is not None and process.stdout is not None
    answers = []
    for message in messages:  # each answer read before the next request (and stdin's end)
        process.stdin.write(json.dumps(message) + "\n")
        process.stdin.flush()
        if "id" in message:
            answers.append(json.loads(process.stdout.readline()))
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 0, stderr
    assert [a["id"] for a in answers] == [1, 2] and "result" in answers[1]
    lines = [line for line in stderr.splitlines() if "trio_mcp.requests" in line]
    matched = [LINE.match(line) for line in lines]
    assert all(matched), lines
    assert [m.groups() for m in matched if m] == [
        ("initialize", None, "1", "ok"),
        ("tools/call", "echo", "2", "ok"),
    ]


async def test_a_connection_opened_before_any_middleware_serves_without() -> None:
    server = make_server()
    seen: list[Any] = []
    async with connect_in_memory(server) as client:
        server.add_middleware(recorder("late", seen))  # this connection looked when it opened
        await client.ping()
        async with connect_in_memory(server) as later:
            await later.ping()
    assert ("late", "before", "ping") in seen and len([s for s in seen if s[2] == "ping"]) == 2


def test_no_middleware_means_none_is_consulted() -> None:
    server = Server("plain")
    assert server.middleware_chain is None
    server.add_middleware(RequestLog())  # a request hook, and a tool hook
    assert server.middleware_chain is not None
    assert len(server.middleware_chain.requests) == len(server.middleware_chain.tools) == 1
    with pytest.raises(TypeError):
        server.add_middleware(42)


async def test_over_http_the_session_id_is_the_mcp_session_id() -> None:
    """Middleware and telemetry name a Streamable HTTP session alike: by its Mcp-Session-Id."""
    import httpx

    from trio_mcp.server import serve_http

    server = Server("ids")
    seen: list[str | None] = []

    @server.middleware
    async def record(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        seen.append(request.session_id)
        return await call_next()

    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}
    with trio.fail_after(10):
        async with server.open() as runtime, trio.open_nursery() as nursery:
            port = await nursery.start(serve_http, runtime, "127.0.0.1", 0)
            url = f"http://127.0.0.1:{port}/mcp"
            async with httpx.AsyncClient() as http:
                body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
                opened = await http.post(url, json=body, headers=headers)
                session = opened.headers["mcp-session-id"]
                listed = await http.post(
                    url,
                    json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
                    headers={**headers, "mcp-session-id": session, "mcp-protocol-version": "2025-11-25"},
                )
                assert listed.status_code == 200
            nursery.cancel_scope.cancel()
    assert seen == [session, session]
