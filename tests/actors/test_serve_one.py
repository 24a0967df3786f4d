"""One stateless (2026-07-28) request served without a connection actor
(``ServerRuntime.serve_one``), and the request object every request gets: its stages
(admitted → answered → written, or dropped) and its context (``current_request``)."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from trio_mcp import Context, Server, TaskLimits
from trio_mcp.actors._request import InboundRequest, current_request
from trio_mcp.protocol import jsonrpc
from trio_mcp.transports.memory import memory_transport_pair

pytestmark = pytest.mark.every_store

MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
SHUTTING_DOWN_MESSAGE = "Server shutting down: the request was cancelled"


def envelope(*, tasks: bool = False) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"extensions": {TASKS: {}}} if tasks else {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }


def call(request_id: int, name: str, arguments: Any, *, tasks: bool = False, progress: Any = None) -> Any:
    meta = envelope(tasks=tasks)
    if progress is not None:
        meta["progressToken"] = progress
    return jsonrpc.Request(request_id, "tools/call", {"name": name, "arguments": arguments, "_meta": meta})


@attrs.define
class Seen:
    requests: list[InboundRequest | None] = attrs.Factory(list)
    cancelled: trio.Event = attrs.Factory(trio.Event)
    started: trio.Event = attrs.Factory(trio.Event)


@attrs.define
class Stages:
    """A RequestObserver that writes down every stage."""

    events: list[tuple[str, Any, Any]] = attrs.Factory(list)

    def admitted(self, request: InboundRequest) -> None:
        self.events.append(("admitted", request.id, request.message.method))

    def answered(self, request: InboundRequest, error: int | None) -> None:
        self.events.append(("answered", request.id, error))

    def written(self, request: InboundRequest) -> None:
        self.events.append(("written", request.id, None))

    def dropped(self, request: InboundRequest) -> None:
        self.events.append(("dropped", request.id, None))

    def of(self, request_id: Any) -> list[str]:
        return [stage for stage, seen_id, _ in self.events if seen_id == request_id]


def make_server(seen: Seen) -> Server:
    server = Server("one-shot", limits=TaskLimits(auto_task_after_ms=1_000))

    @server.tool
    async def echo(text: str) -> str:
        seen.requests.append(current_request.get())
        return f"echo {text}"

    @server.tool
    async def counted(steps: int, ctx: Context) -> str:
        for step in range(1, steps + 1):
            await ctx.report_progress(step, steps)
        return "counted"

    @server.tool(task_support="optional")
    async def sleepy() -> str:
        seen.started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            seen.cancelled.set()
            raise
        return "never"  # pragma: no cover

    return server


async def test_a_stateless_call_is_answered_without_a_connection_actor() -> None:
    seen = Seen()
    server = make_server(seen)
    sent: list[bytes] = []
    async with server.open() as runtime:
        answer, _ = await runtime.serve_one(call(1, "echo", {"text": "hi"}), owner="alice", send=sent.append)
        assert not runtime.sessions  # no session actor was built
    message = json.loads(answer)
    assert message["id"] == 1
    assert message["result"]["content"] == [{"type": "text", "text": "echo hi"}]
    assert message["result"]["resultType"] == "complete"
    assert sent == []
    # The tool ran in the request's context.
    assert [request.id if request else None for request in seen.requests] == [1]


async def test_notifications_go_to_send_in_order_before_the_answer() -> None:
    server = make_server(Seen())
    sent: list[dict[str, Any]] = []
    async with server.open() as runtime:
        answer, _ = await runtime.serve_one(
            call(7, "counted", {"steps": 3}, progress="p"),
            owner="alice",
            send=lambda data: sent.append(json.loads(data)) is None,
        )
    assert [m["params"]["progress"] for m in sent if m["method"] == "notifications/progress"] == [1, 2, 3]
    assert json.loads(answer)["result"]["content"][0]["text"] == "counted"


async def test_bad_input_is_an_error_answer_with_the_request_id() -> None:
    server = make_server(Seen())
    async with server.open() as runtime:
        wrong_name = jsonrpc.Request(
            3, "tools/call", {"name": ["echo"], "arguments": {}, "_meta": envelope()}
        )
        not_modern = jsonrpc.Request(4, "tools/list", {})
        unknown = jsonrpc.Request(5, "resources/read", {"uri": "x://y", "_meta": envelope()})
        answers = [
            json.loads((await runtime.serve_one(message, owner="alice", send=lambda _: True))[0])
            for message in (wrong_name, not_modern, unknown)
        ]
    assert [(a["id"], a["error"]["code"]) for a in answers] == [(3, -32602), (4, -32600), (5, -32601)]


async def test_cancelling_the_caller_cancels_the_work_and_leaves_no_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    async with server.open() as runtime:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: runtime.serve_one(
                    call(9, "sleepy", {}, tasks=True), owner="alice", send=lambda _: True
                )
            )
            await seen.started.wait()
            nursery.cancel_scope.cancel()  # the client went away before the auto-task window
        with trio.fail_after(5):
            await seen.cancelled.wait()
        await trio.sleep(0.1)
        assert runtime.supervisor.live_count("alice") == 0


async def test_a_call_past_the_window_is_shown_as_a_task_and_can_be_polled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen = Seen()
    server = make_server(seen)
    async with server.open() as runtime:
        created = json.loads(
            (await runtime.serve_one(call(10, "sleepy", {}, tasks=True), owner="alice", send=lambda _: True))[
                0
            ]
        )
        assert created["result"]["resultType"] == "task"
        task_id = created["result"]["taskId"]
        get = jsonrpc.Request(11, "tasks/get", {"taskId": task_id, "_meta": envelope(tasks=True)})
        polled = json.loads((await runtime.serve_one(get, owner="alice", send=lambda _: True))[0])
        assert polled["result"]["status"] == "working"
        stranger = json.loads((await runtime.serve_one(get, owner="mallory", send=lambda _: True))[0])
        assert stranger["error"]["code"] == -32602  # another owner's task is not found
        cancel = jsonrpc.Request(12, "tasks/cancel", {"taskId": task_id, "_meta": envelope(tasks=True)})
        await runtime.serve_one(cancel, owner="alice", send=lambda _: True)
        with trio.fail_after(5):
            await seen.cancelled.wait()


async def test_shutdown_answers_the_requests_being_served(autojump_clock: trio.testing.MockClock) -> None:
    seen = Seen()
    server = make_server(seen)
    answers: list[dict[str, Any]] = []
    async with server.open() as runtime:

        async def serve() -> None:
            message = jsonrpc.Request(
                13, "tools/call", {"name": "sleepy", "arguments": {}, "_meta": envelope()}
            )
            answers.append(
                json.loads((await runtime.serve_one(message, owner="alice", send=lambda _: True))[0])
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve)
            await seen.started.wait()
            await runtime.shutdown(grace=0.1)
        late, _ = await runtime.serve_one(call(14, "echo", {"text": "x"}), owner="alice", send=lambda _: True)
    assert [(a["id"], a["error"]["message"]) for a in answers] == [(13, SHUTTING_DOWN_MESSAGE)]
    assert json.loads(late)["error"]["message"] == SHUTTING_DOWN_MESSAGE
    assert seen.cancelled.is_set()


async def test_request_stages_are_observed_in_order_on_a_connection() -> None:
    seen = Seen()
    server = make_server(seen)
    stages = Stages()
    server.request_observer = stages
    client, server_side = memory_transport_pair()
    async with server.open() as runtime, trio.open_nursery() as nursery:
        nursery.start_soon(runtime.serve, server_side)
        await client.send(jsonrpc.encode_request(1, "tools/call", call(1, "echo", {"text": "a"}).params))
        await client.send(
            jsonrpc.encode_request(2, "tools/call", {"name": "sleepy", "arguments": {}, "_meta": envelope()})
        )
        first = json.loads(await client.receive_bytes())
        await seen.started.wait()
        await client.send(jsonrpc.encode_notification("notifications/cancelled", {"requestId": 2}))
        await client.send(jsonrpc.encode_request(3, "ping", {"_meta": envelope()}))
        third = json.loads(await client.receive_bytes())
        nursery.cancel_scope.cancel()
    assert first["id"] == 1 and third["id"] == 3
    assert stages.of(1) == ["admitted", "answered", "written"]
    assert stages.of(2) == ["admitted", "dropped"]  # cancelled: no answer, as the spec asks
    assert stages.of(3) == ["admitted", "answered", "written"]
    # The spawned call ran in its request's context.
    assert [request.id if request else None for request in seen.requests] == [1]


async def test_request_stages_are_observed_for_a_stateless_request() -> None:
    server = make_server(Seen())
    stages = Stages()
    server.request_observer = stages
    async with server.open() as runtime:
        await runtime.serve_one(call(21, "echo", {"text": "a"}), owner="alice", send=lambda _: True)
        await runtime.serve_one(call(22, "nope", {}), owner="alice", send=lambda _: True)
    assert stages.of(21) == ["admitted", "answered", "written"]
    assert [(stage, error) for stage, seen_id, error in stages.events if seen_id == 22][:2] == [
        ("admitted", "tools/call"),
        ("answered", -32602),
    ]
