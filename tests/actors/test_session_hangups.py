"""Clients that hang up in the middle of a call leave no task behind.

A server-directed call (2026-07-28, tasks extension) runs as a task from the start, hidden until
its answer decides what the client sees. Whenever the client goes — right after sending, while
the call runs, around the auto-task window, with or without the WebSocket close handshake, after
cancelling the request — a task whose CreateTaskResult was never handed to the transport must be
gone from the supervisor (no actor, no live slot) and from the store once the session has ended,
whoever owns it: a connection, or an identity shared by several connections (whose tasks outlive
a disconnect, so only the owner-independent cleanup of the session can remove them).

Real connections: WebSocket over TCP on 127.0.0.1, with a bare wsproto client so the test decides
exactly when the socket closes. Real time, kept short (the auto-task window is 150 ms).
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import attrs
import pytest
import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Event, Ping, Request, TextMessage

from trio_mcp import Server, ServerRuntime, TaskLimits
from trio_mcp.server import serve_websocket

pytestmark = pytest.mark.every_store  # make test runs it again on each store

WINDOW = 0.15
"""``auto_task_after_ms`` of the test server, in seconds."""
MODERN = "2026-07-28"
TASKS = "io.modelcontextprotocol/tasks"
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
CALLS = 200
HANDSHAKE_CALLS = 60
HELLO = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "hangup-test", "version": "1"},
}


def envelope() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {TASKS: {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "hangup-test", "version": "1"},
    }


class Shown:
    """A tracer: every task created, and the task ids whose CreateTaskResult (or a status
    notification naming it) was handed to a transport — the only tasks a client may know."""

    def __init__(self) -> None:
        self.created: list[str] = []
        self.written: set[str] = set()

    def __call__(self, kind: str, fields: dict[str, Any]) -> None:
        if kind == "task.created":
            self.created.append(fields["task_id"])
        elif kind == "message.out":
            message = json.loads(fields["data"])
            result = message.get("result")
            if isinstance(result, dict) and result.get("resultType") == "task":
                self.written.add(result["taskId"])
            task = result.get("task") if isinstance(result, dict) else None
            if isinstance(task, dict):  # the handshake era's CreateTaskResult
                self.written.add(task["taskId"])


def make_server() -> Server:
    server = Server("hangups", version="1.0", limits=TaskLimits(auto_task_after_ms=int(WINDOW * 1000)))

    @server.tool(task_support="optional")
    async def work(seconds: float) -> str:
        """Sleep, then answer: a plain result within the window, a task past it."""
        await trio.sleep(seconds)
        return f"slept {seconds:g}"

    @server.tool(task_support="required")
    async def job(seconds: float) -> str:
        """Always a task."""
        await trio.sleep(seconds)
        return f"job {seconds:g}"

    return server


class RawWs:
    """A bare WebSocket client: the test decides when (and how rudely) it hangs up."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: list[Event] = []
        self.ids = itertools.count(1)

    @classmethod
    @asynccontextmanager
    async def open(cls, port: int, token: str | None) -> AsyncIterator[RawWs]:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            client = cls(stream)
            headers = [(b"Authorization", f"Bearer {token}".encode())] if token else []
            await stream.send_all(
                client.ws.send(
                    Request(host="127.0.0.1", target="/mcp", subprotocols=["mcp"], extra_headers=headers)
                )
            )
            assert isinstance(await client.next_event(), AcceptConnection)
            yield client

    async def next_event(self) -> Event:
        while not self.events:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.ws.receive_data(data)
            self.events.extend(self.ws.events())
        return self.events.pop(0)

    async def send_json(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(self.ws.send(TextMessage(json.dumps(message))))

    async def receive_json(self) -> dict[str, Any]:
        while True:
            event = await self.next_event()
            if isinstance(event, Ping):
                await self.stream.send_all(self.ws.send(event.response()))
            elif isinstance(event, TextMessage):
                assert event.message_finished
                message: dict[str, Any] = json.loads(event.data)
                return message

    async def initialize(self) -> None:
        await self.send_json(
            {"jsonrpc": "2.0", "id": next(self.ids), "method": "initialize", "params": HELLO}
        )
        assert "result" in await self.receive_json()
        await self.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def read_forever(self) -> None:
        while True:
            event = await self.next_event()
            if isinstance(event, Ping):
                await self.stream.send_all(self.ws.send(event.response()))

    async def hang_up(self, *, graceful: bool) -> None:
        if graceful:
            await self.stream.send_all(self.ws.send(CloseConnection(code=1000)))
        await self.stream.aclose()


@attrs.frozen
class Plan:
    era: str
    tool: str
    seconds: float
    token: str | None
    hang_up_after: float | None  # None: at once, without reading
    graceful: bool
    cancel_first: bool


def plans(count: int, era: str = "modern") -> list[Plan]:
    rng = random.Random(20260728)
    durations = [0.0, 0.3 * WINDOW, 0.95 * WINDOW, 1.05 * WINDOW, 2 * WINDOW, 3 * WINDOW]
    out = []
    for i in range(count):
        token = [None, "tok-alice", "tok-bob"][i % 3]
        kind = i % 5
        hang: float | None
        if kind == 0:
            hang = None  # right after sending
        elif kind == 1:
            hang = 0.0  # after one scheduler round
        elif kind == 2:
            hang = rng.uniform(0, WINDOW)  # before the answer
        elif kind == 3:
            hang = WINDOW + rng.uniform(-0.01, 0.01)  # around the auto-task window
        else:
            hang = rng.uniform(WINDOW, 2 * WINDOW)  # after the window
        out.append(
            Plan(
                era=era,
                tool="job" if i % 7 == 0 and era == "modern" else "work",
                seconds=rng.choice(durations),
                token=token,
                hang_up_after=hang,
                graceful=rng.random() < 0.5,
                cancel_first=i % 11 == 0,
            )
        )
    return out


async def one_call(ports: dict[bool, int], plan: Plan) -> None:
    async with RawWs.open(ports[plan.token is not None], plan.token) as client:
        params: dict[str, Any] = {"name": plan.tool, "arguments": {"seconds": plan.seconds}}
        if plan.era == "modern":
            params["_meta"] = envelope()
        else:
            await client.initialize()
            params["task"] = {}  # the client asks for a task
        request_id = next(client.ids)
        await client.send_json({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params})
        if plan.cancel_first:
            await client.send_json(
                {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": request_id}}
            )
        if plan.hang_up_after is not None:
            with trio.move_on_after(plan.hang_up_after):
                try:
                    await client.read_forever()
                except EOFError:
                    pass
        try:
            await client.hang_up(graceful=plan.graceful)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def left_behind(runtime: ServerRuntime, shown: Shown) -> tuple[list[str], list[str]]:
    """The tasks the supervisor or its store still holds: those no client may know of, and
    those whose CreateTaskResult was handed to the transport."""
    supervisor = runtime.supervisor
    unknown: list[str] = []
    known: list[str] = []
    for task_id in shown.created:
        held = supervisor.actor(task_id) is not None or await supervisor.store.get(task_id) is not None
        if held:
            (known if task_id in shown.written else unknown).append(task_id)
    return unknown, known


async def settled(runtime: ServerRuntime) -> None:
    """Every session ended, every tool done, the supervisor's mailbox processed."""
    # Polled: neither the runtime nor the supervisor has an event for it.
    with trio.fail_after(10):
        while runtime.sessions:  # noqa: ASYNC110
            await trio.sleep(0.01)
        await trio.sleep(3 * WINDOW + 0.05)  # the longest tool of a task shown to an identity
        while len(runtime.supervisor.mailbox):  # noqa: ASYNC110
            await trio.sleep(0.01)
        await trio.sleep(0.05)


async def hang_up_during(calls: list[Plan]) -> None:
    """Make the calls at once, each on its own connection; check what is left behind."""
    shown = Shown()
    async with make_server().open(tracer=shown) as runtime, trio.open_nursery() as nursery:
        serve = partial(
            serve_websocket, runtime, max_connections_per_address=len(calls) + 10, ping_interval=None
        )
        ports = {
            False: await nursery.start(serve),
            True: await nursery.start(partial(serve, authenticate=TOKENS.get)),
        }
        with trio.fail_after(10):
            async with trio.open_nursery() as clients:
                for plan in calls:
                    clients.start_soon(one_call, ports, plan)
        await settled(runtime)
        supervisor = runtime.supervisor
        unknown, known = await left_behind(runtime, shown)
        assert len(shown.created) >= len(calls) // 2  # most calls got as far as creating their task
        assert unknown == [], (
            f"{len(unknown)} of {len(shown.created)} tasks no client was told of left behind"
        )
        # What is left is only what an identity's client was told of (its tasks outlive the
        # connection by design); all of it has finished, so nothing is live.
        owners = {(await supervisor.store.get(task_id)).owner for task_id in known}  # type: ignore[union-attr]
        assert owners <= {"identity:alice", "identity:bob"}, owners
        assert supervisor.actors == 0
        for owner in ("identity:alice", "identity:bob"):
            assert supervisor.live_count(owner) == 0
        nursery.cancel_scope.cancel()


async def test_hang_ups_during_server_directed_calls_leave_no_hidden_task() -> None:
    await hang_up_during(plans(CALLS))


async def test_hang_ups_during_handshake_era_task_creations_leave_no_unannounced_task() -> None:
    await hang_up_during(plans(HANDSHAKE_CALLS, "handshake"))
