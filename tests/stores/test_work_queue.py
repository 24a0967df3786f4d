"""The Redis store's work queue (:class:`~trio_mcp.stores.base.WorkQueue`) on a real
``valkey-server``: tasks stored with their work, queued or held, claimed through the stream's
consumer group, queued again when their holder's lease lapsed (within the runs their tool
allows), handed back, and gone from the queue when they end or are deleted; caps per owner and
in all refuse a queued creation without storing anything.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import trio
from redis_server import fresh_prefix, fresh_redis_store, shared_server

from trio_mcp import Context, Server, TaskLimits, TaskStatus
from trio_mcp.protocol import jsonrpc
from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.stores.base import WorkQueue, WorkRefused
from trio_mcp.stores.redis import RedisTaskStore
from trio_mcp.transports.security import Caller, current_caller


def _record(task_id: str, owner: str = "alice") -> TaskRecord:
    return new_record(task_id, owner, now=time.time(), ttl_ms=60_000, poll_interval_ms=500)


@pytest.fixture
async def store() -> RedisTaskStore:
    made = fresh_redis_store()
    assert isinstance(made, WorkQueue)
    return made


async def test_a_queued_task_is_claimed_once_with_its_work_and_leased_to_its_claimant(
    store: RedisTaskStore,
) -> None:
    record = _record("t-1")
    assert await store.create_work(record, b"work-1", None, 0.0, None, None)
    assert await store.queued() == 1 and await store.queued("alice") == 1 and await store.queued("bob") == 0
    until = time.time() + 30
    claimed = await store.claim("worker-a", 10, until)
    assert claimed == [(record, b"work-1")]
    assert await store.lease("t-1") == ("worker-a", until)
    assert await store.claim("worker-b", 10, until) == []  # handed out once
    assert await store.queued() == 0
    assert await store.work_of("t-1") == (b"work-1", 1)  # one run so far
    await store.aclose()


async def test_a_task_that_ends_or_is_deleted_leaves_the_queue(store: RedisTaskStore) -> None:
    ended, deleted = _record("t-end"), _record("t-gone")
    for record in (ended, deleted):
        await store.create_work(record, b"w", None, 0.0, None, None)
    await store.delete("t-gone")  # before anyone claimed it
    assert await store.queued() == 1
    [(claimed, _)] = await store.claim("worker", 10, time.time() + 30)
    assert claimed == ended
    assert await store.update(claimed.settle(TaskOutcome(result={"content": []}), now=time.time()))
    await store.release(["t-end"])
    assert await store.lease("t-end") is None
    # Nothing left to claim or to run again, whatever lapses.
    assert await store.claim("worker", 10, time.time() + 30) == []
    assert await store.requeue("t-end", time.time() + 100, None) == -2
    await store.aclose()


async def test_caps_refuse_a_queued_creation_and_store_nothing(store: RedisTaskStore) -> None:
    for index in range(2):
        await store.create_work(_record(f"a-{index}"), b"w", None, 0.0, 2, 3)
    with pytest.raises(WorkRefused, match="for this owner"):
        await store.create_work(_record("a-2"), b"w", None, 0.0, 2, 3)
    assert await store.get("a-2") is None
    await store.create_work(_record("b-0", owner="bob"), b"w", None, 0.0, 2, 3)
    with pytest.raises(WorkRefused, match="at capacity"):
        await store.create_work(_record("c-0", owner="carol"), b"w", None, 0.0, 2, 3)
    assert await store.get("c-0") is None
    # A held task (its creator runs it) is not queued: the caps do not apply to it.
    assert await store.create_work(_record("a-held"), b"w", "front", time.time() + 30, 2, 3)
    assert await store.queued() == 3
    # Claiming frees a place.
    await store.claim("worker", 1, time.time() + 30)
    assert await store.create_work(_record("c-1", owner="carol"), b"w", None, 0.0, 2, 3)
    await store.aclose()


async def test_a_lapsed_task_is_queued_again_within_the_runs_its_tool_allows(store: RedisTaskStore) -> None:
    record = _record("t-r")
    now = time.time()
    await store.create_work(record, b"work", "front", now + 30, None, None)  # held: run 1
    assert await store.requeue("t-r", now, 2) == 0  # its lease is alive
    assert await store.requeue("t-r", now + 31, 2) == 1  # lapsed: queued for run 2
    assert await store.requeue("t-r", now + 31, 2) == 0  # already queued (another process did)
    [(claimed, work)] = await store.claim("worker-b", 5, now + 60)
    assert (claimed, work) == (record, b"work")
    assert await store.work_of("t-r") == (b"work", 2)
    assert await store.lease("t-r") == ("worker-b", now + 60)
    assert await store.requeue("t-r", now + 61, 2) == -1  # two runs: no more
    assert await store.requeue("t-r", now + 61, None) == 1  # no bound (an idempotent tool)
    await store.aclose()


async def test_a_held_task_handed_back_is_claimed_elsewhere_and_its_run_not_counted(
    store: RedisTaskStore,
) -> None:
    now = time.time()
    await store.create_work(_record("t-h"), b"w", "front", now + 30, None, None)
    assert not await store.hand_back("t-h", "someone-else")
    assert await store.hand_back("t-h", "front")
    assert await store.lease("t-h") is None
    assert await store.work_of("t-h") == (b"w", 0)
    [(claimed, _)] = await store.claim("worker", 5, now + 30)
    assert claimed.task_id == "t-h"
    assert await store.work_of("t-h") == (b"w", 1)
    await store.aclose()


# ----------------------------------------------------------------------------- the runtime


def _call(request_id: int, name: str, arguments: dict[str, Any]) -> jsonrpc.Request:
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }
    return jsonrpc.Request(request_id, "tools/call", {"name": name, "arguments": arguments, "_meta": meta})


seen: dict[str, tuple[str | None, frozenset[str]]] = {}
hooked: list[tuple[str | None, str | None]] = []


def _queue_server(ran: list[str]) -> Server:
    server = Server("queue", limits=TaskLimits(max_queued_per_owner=2, max_queued=100))

    @server.tool(task_support="required")
    async def work(ctx: Context) -> str:
        ran.append(str(ctx.task_id))
        seen[str(ctx.task_id)] = (ctx.identity, ctx.scopes)
        return "worked"

    @server.tool_middleware
    async def note(call: Any, call_next: Any) -> Any:
        hooked.append((call.task_id, call.request.identity))
        return await call_next()

    return server


async def test_a_front_without_work_queues_every_task_and_refuses_past_the_owners_share() -> None:
    ran: list[str] = []
    server = _queue_server(ran)
    server.works = False
    store = fresh_redis_store()
    async with server.open(store=store) as runtime:
        answers = []
        alice = current_caller.set(Caller("alice", frozenset({"reports"})))
        for request_id in range(3):
            data, code = await runtime.serve_one(
                _call(request_id, "work", {}), owner="alice", send=lambda _: True
            )
            answers.append((json.loads(data), code))
        current_caller.reset(alice)
        (first, ok1), (second, ok2), (third, code3) = answers
        assert ok1 is None and ok2 is None
        assert first["result"]["resultType"] == "task" and second["result"]["resultType"] == "task"
        assert code3 == -32010, third
        assert "Too many queued tasks" in third["error"]["message"]
        assert await store.queued("alice") == 2
        # Another owner still has its share.
        _, code = await runtime.serve_one(_call(9, "work", {}), owner="bob", send=lambda _: True)
        assert code is None
        await trio.sleep(0.5)
        assert ran == []  # queued for the workers: nothing ran here
        task_id = first["result"]["taskId"]
        assert (await store.get(task_id)).status == TaskStatus.WORKING  # type: ignore[union-attr]

    # A process that works claims them and runs them.
    worker_server = _queue_server(ran)
    async with worker_server.open(store=store):
        with trio.fail_after(10):
            while len(ran) < 3:  # noqa: ASYNC110
                await trio.sleep(0.05)
    assert task_id in ran
    assert seen[task_id] == ("alice", frozenset({"reports"}))  # who called, wherever it runs
    assert (task_id, "alice") in hooked  # the tool middleware runs wherever the tool does
    assert await store.queued() == 0
    await store.aclose()


def _commands_served(port: int) -> int:
    """How many commands the Redis server has run (``INFO commandstats``), INFO excluded."""
    import socket

    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"*2\r\n$4\r\nINFO\r\n$12\r\ncommandstats\r\n")
        data = b""
        while not data.endswith(b"\r\n\r\n") or data.count(b"\r\n") < 2:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
            header, _, rest = data.partition(b"\r\n")
            if header.startswith(b"$") and len(rest) >= int(header[1:]) + 2:
                break
    total = 0
    for line in data.decode().splitlines():
        if line.startswith("cmdstat_") and not line.startswith("cmdstat_info:"):
            total += int(line.split("calls=", 1)[1].split(",", 1)[0])
    return total


async def test_a_call_that_ends_within_the_auto_task_window_never_touches_redis() -> None:
    server = Server("window", limits=TaskLimits(lease_seconds=600))

    @server.tool
    async def quick(text: str) -> str:
        return text

    @server.tool
    async def slow(seconds: float) -> str:
        await trio.sleep(seconds)
        return "slow"

    store = fresh_redis_store()
    port = shared_server().port
    async with server.open(store=store) as runtime:
        await trio.sleep(0.3)  # the loops' first rounds (a lease round, a claim) are over
        before = _commands_served(port)
        for request_id in range(5):
            data, code = await runtime.serve_one(
                _call(request_id, "quick", {"text": "hi"}), owner="alice", send=lambda _: True
            )
            assert code is None and json.loads(data)["result"]["resultType"] == "complete"
        assert _commands_served(port) == before  # no task was stored, none deleted
        # A call past the window is a task: stored before the client sees it.
        data, code = await runtime.serve_one(
            _call(9, "slow", {"seconds": 2}), owner="alice", send=lambda _: True
        )
        task_id = json.loads(data)["result"]["taskId"]
        assert (await store.get(task_id)) is not None
        assert _commands_served(port) > before
    await store.aclose()


async def test_an_idle_process_hears_no_events_of_tasks_it_does_not_wait_for() -> None:
    prefix = fresh_prefix()

    def make(name: str) -> Server:
        server = Server(name, limits=TaskLimits(auto_task_after_ms=10, lease_seconds=600))

        @server.tool
        async def slow(seconds: float) -> str:
            await trio.sleep(seconds)
            return "slow"

        return server

    store_a = RedisTaskStore(shared_server().url, prefix=prefix)
    store_b = RedisTaskStore(shared_server().url, prefix=prefix)
    async with make("a").open(store=store_a) as a, make("b").open(store=store_b) as b:
        ids = []
        for request_id in range(10):
            data, _ = await a.serve_one(
                _call(request_id, "slow", {"seconds": 0.1}), owner="alice", send=lambda _: True
            )
            ids.append(json.loads(data)["result"]["taskId"])
        with trio.fail_after(5):
            for task_id in ids:
                while (record := await store_b.get(task_id)) is None or not record.is_terminal:  # noqa: ASYNC110
                    await trio.sleep(0.05)
        await trio.sleep(0.2)
        assert b.supervisor.events_seen == 0  # ten tasks created, run and ended next door
    for store in (store_a, store_b):
        await store.aclose()
