"""What a hostile or careless client cannot do: wedge a session, grow the server's memory with
answers it never reads, or leave tasks behind by hanging up."""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_websocket

from trio_mcp import Context, McpError, Server, TaskLimits, TaskStatus, connect, connect_in_memory
from trio_mcp.actors._endpoint import DEFAULT_MAX_OUTBOUND_BYTES, DEFAULT_WRITE_TIMEOUT
from trio_mcp.actors._session import MAX_WAITING_REQUESTS, TOO_MANY_REQUESTS
from trio_mcp.client import ConnectionClosed, connect_websocket
from trio_mcp.protocol.errors import TASK_LIMIT_REACHED
from trio_mcp.protocol.messages import ElicitRequestParams, ElicitResult
from trio_mcp.server import ServerRuntime, serve_websocket
from trio_mcp.testing import Trace
from trio_mcp.transports.memory import MemoryTransport, memory_transport_pair

REPO = Path(__file__).resolve().parents[2]
DEMO = str(REPO / "examples" / "demo_server.py")
HELLO = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}

server = Server("hardening", version="1")
cleaned: list[str] = []
begun: list[str] = []


@server.tool()
async def wait(seconds: float) -> str:
    begun.append("wait")
    try:
        await trio.sleep(seconds)
    finally:
        cleaned.append("wait")
    return "waited"


@server.tool()
async def big(size: int) -> str:
    return "x" * size


def request(id: int, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


async def responses(wire: MemoryTransport, count: int) -> dict[int, dict[str, Any]]:
    """The next ``count`` responses by id (notifications skipped)."""
    out: dict[int, dict[str, Any]] = {}
    while len(out) < count:
        message = json.loads(await wire.receive_bytes())
        if "id" in message:
            out[message["id"]] = message
    return out


async def open_session(runtime: ServerRuntime, nursery: trio.Nursery, **pair: Any) -> MemoryTransport:
    client_side, server_side = memory_transport_pair(**pair)
    nursery.start_soon(runtime.serve, server_side)
    await client_side.send(request(0, "initialize", HELLO))
    assert "result" in (await responses(client_side, 1))[0]
    return client_side


async def test_waiting_requests_never_stop_the_reader(autojump_clock: Any) -> None:
    async with server.open() as runtime, trio.open_nursery() as nursery:
        wire = await open_session(runtime, nursery)
        await wire.send(request(1, "tools/call", {"name": "wait", "arguments": {"seconds": 15}, "task": {}}))
        task_id = (await responses(wire, 1))[1]["result"]["task"]["taskId"]
        # More tasks/result waiters than a session may have outstanding…
        for n in range(100, 100 + MAX_WAITING_REQUESTS + 44):
            await wire.send(request(n, "tasks/result", {"taskId": task_id}))
        # …and behind them a ping and a cancel, which are read and answered at once.
        await wire.send(request(2, "ping"))
        await wire.send(request(3, "tasks/cancel", {"taskId": task_id}))
        answered = await responses(wire, 44 + 2)
        assert trio.current_time() == 0
        refused = [n for n, m in answered.items() if n >= 100]
        assert len(refused) == 44  # the ones past the limit, refused at once
        assert all(answered[n]["error"] == TOO_MANY_REQUESTS.to_json() for n in refused)
        assert answered[2]["result"] == {}
        assert answered[3]["result"]["status"] == "cancelled"
        # The waiters are answered by the cancel (tasks/result of a cancelled task: -32011).
        waiters = await responses(wire, MAX_WAITING_REQUESTS)
        assert {m["error"]["code"] for m in waiters.values()} == {-32011}
        assert trio.current_time() == 0
        nursery.cancel_scope.cancel()


async def test_a_client_that_never_reads_is_disconnected_at_the_byte_limit() -> None:
    async with server.open() as runtime, trio.open_nursery() as nursery:
        # buffer=0: nothing is buffered between us and the server's writer, so what we do not
        # read stays in the server's outbound queue.
        wire = await open_session(runtime, nursery, buffer=0)
        size = 1024 * 1024
        sent = 0
        with trio.fail_after(10), pytest.raises(trio.BrokenResourceError):
            while True:  # never reading: the server gives up on us once 16 MiB wait
                sent += 1
                await wire.send(request(sent, "tools/call", {"name": "big", "arguments": {"size": size}}))
        assert DEFAULT_MAX_OUTBOUND_BYTES // size <= sent <= DEFAULT_MAX_OUTBOUND_BYTES // size + 3
        nursery.cancel_scope.cancel()


async def test_a_client_that_stops_reading_is_let_go_after_the_write_timeout(autojump_clock: Any) -> None:
    async with server.open() as runtime, trio.open_nursery() as nursery:
        wire = await open_session(runtime, nursery, buffer=0)
        await wire.send(
            request(1, "tools/call", {"name": "wait", "arguments": {"seconds": 3600}, "task": {}})
        )
        started = trio.current_time()
        with pytest.raises((trio.EndOfChannel, trio.BrokenResourceError)):
            await trio.sleep(DEFAULT_WRITE_TIMEOUT + 1)  # we read nothing meanwhile
            await wire.receive_bytes()  # the CreateTaskResult was never written: the server gave up
            await wire.receive_bytes()
        assert trio.current_time() - started >= DEFAULT_WRITE_TIMEOUT
        await trio.testing.wait_all_tasks_blocked()
        # The session ended, and its never-started task with it.
        assert runtime.supervisor.actors == 0
        assert len(runtime.supervisor.store) == 0  # type: ignore[arg-type]
        nursery.cancel_scope.cancel()


async def test_tasks_created_just_before_a_close_are_not_left_behind(autojump_clock: Any) -> None:
    for owner in (None, "identity:alice"):
        cleaned.clear()
        begun.clear()
        async with server.open() as runtime, trio.open_nursery() as nursery:
            client_side, server_side = memory_transport_pair(buffer=0)
            nursery.start_soon(functools.partial(runtime.serve, server_side, owner=owner))
            for n in range(1, 21):
                args = {"name": "wait", "arguments": {"seconds": 3600}, "task": {}}
                await client_side.send(request(n, "tools/call", args))
            await client_side.aclose()  # at once, answers unread
            await trio.sleep(1)
            await trio.testing.wait_all_tasks_blocked()
            store: Any = runtime.supervisor.store
            if owner is None:  # the connection's tasks went with it
                assert (runtime.supervisor.actors, len(store), len(begun) - len(cleaned)) == (0, 0, 0)
            else:
                # An identity's tasks outlive the connection, but only those whose id reached the
                # client (their work started): none is left never-started.
                assert runtime.supervisor.actors == len(begun) - len(cleaned) == len(store)
            nursery.cancel_scope.cancel()


def test_a_request_followed_at_once_by_end_of_input_is_answered() -> None:
    lines = [request(1, "initialize", HELLO), request(2, "ping"), request(3, "tools/list")]
    # (All of it, and the end of input, arrive before the server reads its first line.)
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "demo_server.py")],
        input=b"\n".join(lines) + b"\n",
        capture_output=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    answers = {m["id"]: m for m in map(json.loads, done.stdout.splitlines()) if "id" in m}
    assert sorted(answers) == [1, 2, 3]
    assert answers[2]["result"] == {}
    assert [t["name"] for t in answers[3]["result"]["tools"]][:2] == ["echo", "sleep"]


# ----------------------------------------------------------------------------- a new user's first tools


@dataclasses.dataclass
class Loan:
    amount: float
    months: int


newcomer = Server("newcomer", version="1")


@newcomer.tool  # bare, without parentheses: registered all the same
async def loan(amount: float) -> Loan:
    return Loan(amount, 12)


@newcomer.tool()
async def opaque() -> object:
    return object()


@newcomer.tool()
async def not_a_number() -> float:
    return float("nan")


@newcomer.tool()
async def broken() -> str:
    raise RuntimeError("disk on fire")


withdrawn: list[str] = []


@newcomer.tool()
async def impatient(ctx: Context) -> str:
    with trio.move_on_after(5):  # gives up on the question: the request is withdrawn
        await ctx.elicit("Still there?", {"type": "object", "properties": {}})
        return "answered"
    return "gave up"


async def test_newcomer_tools_behave(caplog: pytest.LogCaptureFixture, autojump_clock: Any) -> None:
    async def never_answers(params: ElicitRequestParams) -> ElicitResult:
        try:
            await trio.sleep_forever()
        finally:
            withdrawn.append(params.message)
        raise AssertionError("unreachable")

    async with connect_in_memory(newcomer, on_elicit=never_answers) as client:
        assert [t.name for t in await client.list_tools()] == [
            "loan",
            "opaque",
            "not_a_number",
            "broken",
            "impatient",
        ]
        result = await client.call_tool("loan", {"amount": 100})
        assert result.structured_content == {"amount": 100.0, "months": 12}
        assert json.loads(result.text) == {"amount": 100.0, "months": 12}
        with caplog.at_level(logging.WARNING, logger="trio_mcp"):
            bad = await client.call_tool("opaque")
            nan = await client.call_tool("not_a_number")
            boom = await client.call_tool("broken")
        assert bad.is_error and "returned a value that cannot be sent as JSON" in bad.text
        assert nan.is_error and "cannot be sent as JSON" in nan.text
        assert boom.is_error and boom.text == "disk on fire"
        levels = {(r.levelname, r.getMessage().split(" ")[1]) for r in caplog.records}
        assert {("ERROR", "opaque"), ("ERROR", "not_a_number"), ("WARNING", "broken")} <= levels
        # The server withdraws its question (notifications/cancelled): our handler stops at once.
        assert (await client.call_tool("impatient")).text == "gave up"
        await trio.testing.wait_all_tasks_blocked()
        assert withdrawn == ["Still there?"]


# ----------------------------------------------------------------------------- shutdown and broken pipes


DEMO_COMMANDS = {
    "server.run()": [sys.executable, str(REPO / "examples" / "demo_server.py")],
    "trio-mcp serve": [
        sys.executable,
        "-m",
        "trio_mcp.cli",
        "serve",
        str(REPO / "examples" / "demo_server.py"),
    ],
}


def spawn_demo(how: str = "server.run()") -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        DEMO_COMMANDS[how],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def read_message(process: subprocess.Popen[bytes]) -> dict[str, Any]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, "the server closed its output"
    message: dict[str, Any] = json.loads(line)
    return message


@pytest.mark.parametrize("how", sorted(DEMO_COMMANDS))
def test_sigterm_answers_pending_requests_and_exits_zero(how: str) -> None:
    process = spawn_demo(how)
    assert process.stdin is not None
    try:
        process.stdin.write(request(1, "initialize", HELLO) + b"\n")
        process.stdin.flush()
        assert read_message(process)["id"] == 1
        process.stdin.write(request(2, "tools/call", {"name": "sleep", "arguments": {"seconds": 60}}) + b"\n")
        process.stdin.write(request(3, "ping") + b"\n")
        process.stdin.flush()
        assert read_message(process) == {"jsonrpc": "2.0", "id": 3, "result": {}}  # the call is running
        started = time.monotonic()
        process.send_signal(signal.SIGTERM)
        answer = read_message(process)
        assert answer["id"] == 2 and answer["error"]["code"] == -32603
        assert "shutting down" in answer["error"]["message"]
        assert process.wait(timeout=10) == 0
        assert time.monotonic() - started < 5
    finally:
        process.kill()
        process.wait()


def test_a_closed_output_ends_the_server_at_once() -> None:
    process = spawn_demo()
    assert process.stdin is not None and process.stdout is not None
    try:
        process.stdin.write(request(1, "initialize", HELLO) + b"\n")
        process.stdin.flush()
        assert read_message(process)["id"] == 1
        args = {"name": "sleep", "arguments": {"seconds": 600}, "task": {}}
        process.stdin.write(request(2, "tools/call", args) + b"\n")
        process.stdin.flush()
        assert read_message(process)["result"]["task"]["status"] == "working"
        process.stdout.close()  # the client stops reading for good: the next write is EPIPE
        process.stdin.write(request(3, "ping") + b"\n")
        process.stdin.flush()
        # Input stays open, yet the server ends (its task cancelled) instead of running on.
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()


# --------------------------------------------------------------------- what one owner can make us keep


async def test_finished_tasks_count_until_they_expire(autojump_clock: Any) -> None:
    limited = Server("kept", version="1", limits=TaskLimits(max_tasks_per_owner=3, default_ttl_ms=60_000))

    @limited.tool()
    async def quick(size: int) -> str:
        return "x" * size

    async with connect_in_memory(limited) as client:
        for _ in range(3):
            created = await client.call_tool_as_task("quick", {"size": 10})
            assert (await client.task_result(created.task.task_id)).text == "x" * 10
        with pytest.raises(McpError) as refused:
            await client.call_tool_as_task("quick", {"size": 10})
        assert refused.value.code == TASK_LIMIT_REACHED and "finished ones included" in refused.value.message
        await trio.sleep(61)  # they expire: room again
        await client.call_tool_as_task("quick", {"size": 10})


async def test_live_tasks_are_capped_across_owners(autojump_clock: Any) -> None:
    limited = Server("live", version="1", limits=TaskLimits(max_live_tasks=2))
    limited.add_tool(wait)
    async with limited.open() as runtime, trio.open_nursery() as nursery:
        pairs = [memory_transport_pair() for _ in range(2)]
        for _, server_side in pairs:
            nursery.start_soon(runtime.serve, server_side)
        async with connect(pairs[0][0]) as first, connect(pairs[1][0]) as second:
            await first.call_tool_as_task("wait", {"seconds": 100})
            await first.call_tool_as_task("wait", {"seconds": 100})
            with pytest.raises(McpError, match="Server at capacity") as refused:
                await second.call_tool_as_task("wait", {"seconds": 100})  # another owner
            assert refused.value.code == TASK_LIMIT_REACHED
            await trio.sleep(101)  # they end: room again
            await second.call_tool_as_task("wait", {"seconds": 1})
        nursery.cancel_scope.cancel()


async def test_tasks_kept_in_total_are_capped(autojump_clock: Any) -> None:
    limited = Server("total", version="1", limits=TaskLimits(max_tasks=2, default_ttl_ms=10_000))
    limited.add_tool(big)
    async with limited.open() as runtime, trio.open_nursery() as nursery:
        pairs = [memory_transport_pair() for _ in range(2)]
        for _, server_side in pairs:
            nursery.start_soon(runtime.serve, server_side)
        async with connect(pairs[0][0]) as first, connect(pairs[1][0]) as second:
            for client in (first, second):  # two owners, one finished task each
                created = await client.call_tool_as_task("big", {"size": 1})
                await client.task_result(created.task.task_id)
            with pytest.raises(McpError, match="Server at capacity") as refused:
                await first.call_tool_as_task("big", {"size": 1})
            assert refused.value.code == TASK_LIMIT_REACHED
            await trio.sleep(11)  # they expire: room again
            await second.call_tool_as_task("big", {"size": 1})
        nursery.cancel_scope.cancel()


async def test_a_result_over_the_size_limit_fails_its_task(autojump_clock: Any) -> None:
    limited = Server("sized", version="1", limits=TaskLimits(max_result_bytes=1_000))
    limited.add_tool(big)
    async with connect_in_memory(limited) as client:
        small = await client.call_tool_as_task("big", {"size": 100})
        assert (await client.task_result(small.task.task_id)).text == "x" * 100
        large = await client.call_tool_as_task("big", {"size": 5_000})
        with pytest.raises(McpError) as failed:
            await client.task_result(large.task.task_id)
        assert failed.value.code == -32603 and "exceeds the 1000 byte limit" in failed.value.message
        assert (await client.get_task(large.task.task_id)).status == TaskStatus.FAILED


# ----------------------------------------------------------------------------- connections


@asynccontextmanager
async def websocket_server(**options: Any) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(functools.partial(serve_websocket, server, ping_interval=None, **options))
        yield f"ws://127.0.0.1:{port}/"
        nursery.cancel_scope.cancel()


async def test_connections_per_address_are_capped() -> None:
    with trio.fail_after(20):
        async with websocket_server(max_connections_per_address=3) as url, AsyncExitStack() as stack:
            clients = [await stack.enter_async_context(connect_websocket(url)) for _ in range(3)]
            with pytest.raises(trio_websocket.HandshakeError):
                async with connect_websocket(url, connect_timeout=5):
                    pass  # pragma: no cover
            for client in clients:  # the ones let in are served as before
                assert (await client.call_tool("big", {"size": 3})).text == "xxx"
        async with websocket_server(max_connections_per_address=3) as url, connect_websocket(url) as late:
            assert (await late.call_tool("big", {"size": 1})).text == "x"


async def test_an_idle_connection_is_closed_but_not_one_with_work_running() -> None:
    with trio.fail_after(20):
        async with websocket_server(idle_timeout=0.5) as url:
            async with connect_websocket(url) as idle:
                await trio.sleep(1.5)
                with pytest.raises(ConnectionClosed):
                    await idle.call_tool("big", {"size": 1})
            async with connect_websocket(url) as busy:
                created = await busy.call_tool_as_task("wait", {"seconds": 1.5})
                await trio.sleep(1.0)  # silent, but its task runs: not idle
                assert (await busy.task_result(created.task.task_id)).text == "waited"


async def test_the_idle_timeout_counts_from_the_last_message_and_spares_running_work(
    autojump_clock: Any,
) -> None:
    """One watcher times a connection's silence (no cancel scope per message): a message every
    6 s keeps a 10 s timeout away for a minute; a silent client whose task runs is kept; once
    nothing goes on, 10 s after its last message the connection ends."""
    async with server.open() as runtime, trio.open_nursery() as nursery:
        client_side, server_side = memory_transport_pair()
        nursery.start_soon(functools.partial(runtime.serve, server_side, idle_timeout=10))
        async with connect(client_side) as client:
            for _ in range(10):
                await trio.sleep(6)
                await client.ping()
            created = await client.call_tool_as_task("wait", {"seconds": 25})
            await trio.sleep(20)  # silent, but its task runs: not idle
            assert (await client.task_result(created.task.task_id)).text == "waited"
            await client.ping()  # (the silence counts from the client's last message)
            await trio.sleep(9.5)
            await client.ping()  # within the timeout: answered, and the silence counts anew
            await trio.sleep(9.5)
            await client.ping()
            await trio.sleep(10.5)
            with pytest.raises(ConnectionClosed):
                await client.ping()
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------------------- mixed load


async def test_mixed_load_with_abrupt_disconnects(autojump_clock: Any) -> None:
    """Many clients at once, some of them hanging up abruptly mid-way: every request of a client
    that stayed is answered exactly once, no task is left running or owned by no one, and each
    identity's finished tasks are all that is kept."""
    cleaned.clear()
    begun.clear()
    trace = Trace()
    async with server.open(tracer=trace) as runtime, trio.open_nursery() as nursery:

        async def session(number: int) -> None:
            owner = f"identity:user-{number}" if number % 4 == 0 else None
            client_side, server_side = memory_transport_pair()
            nursery.start_soon(functools.partial(runtime.serve, server_side, owner=owner))
            abrupt = number % 3 == 0
            async with connect(client_side) as client:
                tasks = [
                    (await client.call_tool_as_task("wait", {"seconds": 1 + number % 5})).task.task_id
                    for _ in range(4)
                ]
                if abrupt:
                    await client_side.aclose()  # gone, with requests of its own in flight
                    return
                await client.cancel_task(tasks[0])
                assert (await client.get_task(tasks[1])).status == TaskStatus.WORKING
                assert (await client.call_tool("big", {"size": 3})).text == "xxx"
                for task_id in tasks[1:]:
                    assert (await client.task_result(task_id)).text == "waited"

        async with trio.open_nursery() as clients:
            for number in range(24):
                clients.start_soon(session, number)
        await trio.sleep(10)  # every identity-owned task has ended by now
        await trio.testing.wait_all_tasks_blocked()
        # Answered exactly once: no response twice; every request of a connection that stayed.
        seen: dict[tuple[str, Any], int] = {}
        for event in trace.of_kind("message.out"):
            message = event.message
            if message is not None and "id" in message and "method" not in message:
                key = (str(event.fields["connection"]), message["id"])
                seen[key] = seen.get(key, 0) + 1
        assert seen and max(seen.values()) == 1
        unanswered = trace.unanswered_requests()
        assert all(m["method"] in ("tools/call", "tasks/result") for m in unanswered)  # of dropped ones
        # Nothing left running; kept records are the identities' finished tasks only.
        assert runtime.supervisor.actors == 0
        store: Any = runtime.supervisor.store
        records = list(store._rows.values())
        assert records and all(r.is_terminal and r.owner.startswith("identity:") for r in records)
        assert len(begun) == len(cleaned)  # every tool that started also cleaned up
        nursery.cancel_scope.cancel()


def test_the_websocket_demo_stops_cleanly_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, DEMO, "--ws", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert process.stderr is not None
    try:
        line = process.stderr.readline().decode()
        while "ws://" not in line:
            assert line, "the demo exited before serving"
            line = process.stderr.readline().decode()
        port = int(line.split("ws://127.0.0.1:")[1].split("/")[0])

        async def connect_and_stop() -> str:
            async with connect_websocket(f"ws://127.0.0.1:{port}/") as client:
                process.send_signal(signal.SIGTERM)
                with pytest.raises(ConnectionClosed):
                    await client.call_tool("sleep", {"seconds": 30})
                reason = client.transport.close_reason  # type: ignore[attr-defined]
                return f"{reason.code}" if reason is not None else "none"

        assert trio.run(connect_and_stop) == "1000"  # a clean close frame
        assert process.wait(timeout=10) == 0
    finally:
        process.kill()
        process.wait()
