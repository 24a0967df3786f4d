"""The Redis store under a frozen, killed or restarting server: every call answers within its
deadline however many wait, data written survives a restart (with persistence), the events
iterator says when it subscribed again, and a lease renewal names the tasks ended elsewhere.

The module runs its own server (``tests/redis_server.py``), persistent, so that freezing and
killing it disturbs no other test; each test works under a fresh key prefix.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from functools import partial

import pytest
import trio
from redis_server import RedisServer, fresh_prefix

from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores import TaskEvent
from trio_mcp.stores.redis import RedisTaskStore, RedisUnavailable

RESYNC = TaskEvent("resync", "", "")


def record(task_id: str, owner: str = "alice") -> TaskRecord:
    return new_record(task_id, owner, now=0.0, ttl_ms=600_000, poll_interval_ms=500)


@pytest.fixture(scope="module")
def module_server() -> Iterator[RedisServer]:
    with RedisServer(persistent=True) as server:
        yield server


@pytest.fixture
def server(module_server: RedisServer) -> RedisServer:
    """The module's server, running (a test before may have killed it)."""
    module_server.start()
    return module_server


@pytest.fixture
async def store(server: RedisServer) -> AsyncIterator[RedisTaskStore]:
    store = RedisTaskStore(server.url, prefix=fresh_prefix(), timeout=1.0, connect_timeout=1.0)
    yield store
    await store.aclose()


def connected_clients(server: RedisServer) -> int:
    info = server.command("INFO", "clients").decode()
    return int(info.split("connected_clients:")[1].split("\r\n")[0])


# ----------------------------------------------------------------------------- deadlines


async def test_on_a_frozen_server_every_call_fails_within_its_own_deadline(
    server: RedisServer, store: RedisTaskStore
) -> None:
    await store.create(record("t1"))
    took: list[float] = []
    failures: list[BaseException] = []

    async def get(i: int) -> None:
        made = trio.current_time()
        try:
            await store.get(f"absent-{i}")
        except RedisUnavailable as exc:
            failures.append(exc)
        took.append(trio.current_time() - made)

    os.kill(server.pid, signal.SIGSTOP)
    try:
        async with trio.open_nursery() as nursery:
            for i in range(30):
                nursery.start_soon(get, i)
                await trio.sleep(0.01)  # made one after the other: each counts from its own start
    finally:
        os.kill(server.pid, signal.SIGCONT)
    assert len(failures) == 30, failures
    assert all("no answer within 1.0 s" in str(exc) for exc in failures), failures
    assert max(took) < 1.0 + 0.5, sorted(took)
    assert min(took) > 0.9, sorted(took)  # they waited for the server: none failed early
    # The connections whose calls timed out were closed: a reply to one of those 30 calls,
    # coming now, is never taken for the answer to this one.
    with trio.fail_after(2):
        assert await store.get("t1") == record("t1")


async def test_concurrent_calls_share_a_few_connections(server: RedisServer) -> None:
    before = connected_clients(server)
    store = RedisTaskStore(server.url, prefix=fresh_prefix(), connections=4)
    try:
        await store.create(record("t1"))
        seen: list[TaskRecord | None] = []

        async def get() -> None:
            seen.append(await store.get("t1"))

        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for _ in range(50):
                    nursery.start_soon(get)
        assert seen == [record("t1")] * 50
        assert 1 <= connected_clients(server) - before <= 4  # calls share them (pipelined)
    finally:
        await store.aclose()
    with pytest.raises(ValueError):
        RedisTaskStore(server.url, connections=0)


async def test_one_call_on_a_slow_connection_does_not_hold_up_the_others(
    server: RedisServer, store: RedisTaskStore
) -> None:
    # A blocking command with a server-side wait is a call the server answers late without
    # being frozen: it keeps its connection, and the other calls go on others meanwhile.
    await store.create(record("t1"))
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            key = store.prefix + "nothing"
            nursery.start_soon(store._call, lambda client: client.blpop([key], 0.8), [])
            await trio.sleep(0.05)
            started = trio.current_time()
            for _ in range(10):
                assert await store.get("t1") == record("t1")
            assert trio.current_time() - started < 0.5


async def test_calls_cut_short_while_connecting_leave_the_pool_whole(
    server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    # A frozen server accepts connections (the kernel does) but never answers HELLO: each call
    # gives up while its connection is being made. The pool must get every such slot back,
    # or once it has none, calls wait for a connection until their deadline even with the
    # server back.
    store = RedisTaskStore(server.url, prefix=fresh_prefix(), timeout=0.3, connect_timeout=5.0, connections=2)
    os.kill(server.pid, signal.SIGSTOP)
    try:
        for _ in range(3):  # more than the pool has connections
            with pytest.raises(RedisUnavailable, match=r"no answer within 0\.3 s"):
                await store.get("t1")
    finally:
        os.kill(server.pid, signal.SIGCONT)
    with trio.fail_after(1):
        assert await store.get("t1") is None
    await store.aclose()
    # Each call said what happened (RedisUnavailable); nothing logged it as an error besides.
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


class SilencingProxy:
    """A TCP proxy to the server whose connections made so far can be silenced at once (as a
    network partition leaves them: open, but nothing comes back); new ones work."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.silenced: set[int] = set()
        self.made = 0

    def silence(self) -> None:
        self.silenced.update(range(self.made))

    async def serve(self, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
        async def pump(number: int, source: trio.SocketStream, sink: trio.SocketStream) -> None:
            while data := await source.receive_some(65536):
                if number not in self.silenced:
                    await sink.send_all(data)

        async def handle(client: trio.SocketStream) -> None:
            number, self.made = self.made, self.made + 1
            async with await trio.open_tcp_stream("127.0.0.1", self.upstream_port) as upstream:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(pump, number, client, upstream)
                    nursery.start_soon(pump, number, upstream, client)

        async with trio.open_nursery() as nursery:
            (listener,) = await nursery.start(partial(trio.serve_tcp, handle, 0, host="127.0.0.1"))
            task_status.started(listener.socket.getsockname()[1])


async def test_a_connection_that_stops_answering_takes_no_new_calls(server: RedisServer) -> None:
    proxy = SilencingProxy(server.port)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(proxy.serve)
        store = RedisTaskStore(f"redis://127.0.0.1:{port}/0", prefix=fresh_prefix(), timeout=0.5)
        await store.create(record("t1"))
        proxy.silence()  # the store's connection is open, but nothing goes through any more
        with pytest.raises(RedisUnavailable, match=r"no answer within 0\.5 s"):
            await store.get("t1")
        # Silent for a whole timeout with a call waiting: the next call goes on a new connection
        # (without that, every call would wait on the dead one until TCP gave up, minutes later).
        with trio.fail_after(0.5):
            assert await store.get("t1") == record("t1")
            await store.create(record("t2"))
        await store.aclose()
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------------------- a restart


async def test_a_killed_server_fails_calls_and_they_find_the_data_once_it_is_back(
    server: RedisServer, store: RedisTaskStore
) -> None:
    await store.create(record("t1"))
    await store.create(record("t2"))
    assert await store.update(record("t2").with_message("written before the crash", now=1.0))
    server.kill()
    try:
        started = trio.current_time()
        for call in (store.get("t1"), store.create(record("t3")), store.page("alice", None, 10)):
            with pytest.raises(RedisUnavailable):
                await call
        assert trio.current_time() - started < 1.0 + 0.5
    finally:
        server.start()  # same port, same directory: it reads its append-only file
    with trio.fail_after(5):
        assert await store.get("t1") == record("t1")
        assert await store.get("t2") == record("t2").with_message("written before the crash", now=1.0)
        records, cursor = await store.page("alice", None, 10)
        assert [r.task_id for r in records] == ["t1", "t2"] and cursor is None
        await store.create(record("t3"))
        assert await store.count() == 3


# ----------------------------------------------------------------------------- resync


async def test_the_events_iterator_says_resync_after_the_server_restarted(
    server: RedisServer, store: RedisTaskStore
) -> None:
    with trio.fail_after(10):
        async with store.events() as events:
            # The first subscription is no resubscription: no resync.
            await store.publish(TaskEvent("work", "t1", "me"))
            assert await anext(events) == TaskEvent("work", "t1", "me")

            server.kill()
            server.start()
            assert await anext(events) == RESYNC  # subscribed again: what was missed is unknown
            while True:  # (published before it subscribed again, an event is missed)
                await store.publish(TaskEvent("work", "t2", "me"))
                with trio.move_on_after(0.1):
                    assert await anext(events) == TaskEvent("work", "t2", "me")
                    break

            # And again after a second outage, this time while the iterator waits.
            async with trio.open_nursery() as nursery:
                got: list[TaskEvent] = []

                async def read() -> None:
                    got.append(await anext(events))

                nursery.start_soon(read)
                await trio.sleep(0.05)
                server.kill()
                await trio.sleep(0.2)  # it retries meanwhile (refused)
                server.start()
            assert got == [RESYNC]


# ----------------------------------------------------------------------------- leases


async def test_hold_returns_exactly_the_tasks_that_ended_or_are_gone(
    server: RedisServer, store: RedisTaskStore
) -> None:
    now = time.time()
    for task_id in ("working", "waiting", "completed", "cancelled", "failed", "vanished", "deleted"):
        await store.create(record(task_id))
    waiting = record("waiting").transition(TaskStatus.INPUT_REQUIRED, "name?", now=1.0)
    assert await store.update(waiting)
    assert await store.update(record("completed").settle(TaskOutcome(result={"content": []}), now=1.0))
    assert await store.update(record("cancelled").transition(TaskStatus.CANCELLED, "by request", now=1.0))
    assert await store.update(record("failed").transition(TaskStatus.FAILED, "lease lapsed", now=1.0))
    server.command("DEL", store.prefix + "task:vanished")  # as by its Redis TTL
    assert await store.delete("deleted") is not None

    ids = ["working", "cancelled", "never-created", "waiting", "completed", "vanished", "failed", "deleted"]
    assert await store.hold(ids, "process-a", now + 30) == [
        "cancelled",
        "never-created",
        "completed",
        "vanished",
        "failed",
        "deleted",
    ]
    assert await store.hold([], "process-a", now + 30) == []
    assert await store.lease("working") == ("process-a", now + 30)
    assert await store.lease("waiting") == ("process-a", now + 30)
    for task_id in ("cancelled", "never-created", "completed", "vanished", "failed", "deleted"):
        assert await store.lease(task_id) is None  # no lease for what is over

    # A renewal after the task ended elsewhere reports it, and drops its lease.
    assert await store.hold(["working"], "process-a", now + 60) == []
    working = await store.get("working")
    assert working is not None
    assert await store.update(working.transition(TaskStatus.CANCELLED, "through another process", now=2.0))
    assert await store.hold(["working", "waiting"], "process-a", now + 60) == ["working"]
    assert await store.lease("working") is None
    assert await store.lapsed(now + 100, 10) == [waiting]


async def test_a_server_still_loading_its_data_is_unavailable() -> None:
    # What a restarted server answers until it has read its append-only file (a stand-in
    # server: a real one is seldom slow enough to be caught at it).
    async def loading(stream: trio.SocketStream) -> None:
        while await stream.receive_some(65536):
            await stream.send_all(b"-LOADING Valkey is loading the dataset in memory\r\n")

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(partial(trio.serve_tcp, loading, 0, host="127.0.0.1"))
        port = listener.socket.getsockname()[1]
        store = RedisTaskStore(f"redis://127.0.0.1:{port}/0", prefix=fresh_prefix(), timeout=1.0)
        with pytest.raises(RedisUnavailable, match="not ready"):
            await store.get("t1")
        with pytest.raises(RedisUnavailable, match="not ready"):
            await store.hold(["t1"], "process-a", 1.0)
        await store.aclose()
        nursery.cancel_scope.cancel()
