"""The Redis store beyond the shared contract (``tests/stores/test_store_contract.py`` runs that on it):
events between processes, leases, Redis TTLs, an unreachable or frozen server, URLs.

Every test runs against a real server (``tests/redis_server.py``): the shared one under a fresh
key prefix, or a private one when the test stops it.
"""

from __future__ import annotations

import hashlib
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager
from functools import partial
from typing import Any

import attrs
import pytest
import trio
from redis_server import RedisServer, fresh_prefix, fresh_redis_store, shared_server

from trio_mcp import McpError, Server
from trio_mcp.client import Client, connect
from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores import MemoryTaskStore, SharedTaskStore, TaskEvent, TaskStore, store_from_url
from trio_mcp.stores.redis import (
    RedisReplyError,
    RedisTaskStore,
    RedisUnavailable,
    TlsOptions,
    parse_redis_url,
)
from trio_mcp.stores.sqlite import SqliteTaskStore, StoreClosed
from trio_mcp.transports.memory import memory_transport_pair


def record(task_id: str, owner: str = "alice", *, now: float = 0.0, ttl_ms: int = 60_000) -> TaskRecord:
    return new_record(task_id, owner, now=now, ttl_ms=ttl_ms, poll_interval_ms=500)


@pytest.fixture
async def store() -> AsyncIterator[RedisTaskStore]:
    async with fresh_redis_store() as store:
        yield store


@pytest.fixture
def private_server() -> Iterator[RedisServer]:
    """A server of the test's own, which it may stop and start again."""
    with RedisServer() as server:
        yield server


def keys_of(store: RedisTaskStore) -> list[bytes]:
    """The keys under the store's prefix (raw ``KEYS`` reply, parsed just enough)."""
    reply = shared_server().command("KEYS", store.prefix.replace("*", "\\*") + "*")
    lines = reply.split(b"\r\n")
    return sorted(line for line in lines[2::2] if line)


# ----------------------------------------------------------------------------- the interfaces


async def test_it_is_a_shared_task_store(store: RedisTaskStore) -> None:
    shared: SharedTaskStore = store  # checked by mypy
    plain: TaskStore = store
    assert shared is plain
    assert not hasattr(store, "recover")  # a process starting must not fail the others' tasks


async def test_the_constructor_does_no_io() -> None:
    store = RedisTaskStore("redis://127.0.0.1:1/0")  # nothing listens there
    assert repr(store) == "RedisTaskStore('redis://127.0.0.1:1/0', prefix='trio-mcp:')"
    with pytest.raises(RedisUnavailable):
        await store.get("t1")
    await store.aclose()


async def test_two_store_objects_on_one_prefix_share_the_records() -> None:
    prefix = fresh_prefix()
    async with (
        RedisTaskStore(shared_server().url, prefix=prefix) as a,
        RedisTaskStore(shared_server().url, prefix=prefix) as b,
        fresh_redis_store() as elsewhere,
    ):
        await a.create(record("t1"))
        got = await b.get("t1")
        assert got == record("t1")
        assert await b.update(got.with_message("from b", now=1.0))
        assert (await a.get("t1")) == got.with_message("from b", now=1.0)
        assert await elsewhere.get("t1") is None  # another prefix is another store
        assert len(a) == len(b) == 1 and len(elsewhere) == 0


async def test_a_record_that_is_not_json_is_refused_and_changes_nothing(store: RedisTaskStore) -> None:
    live = attrs.evolve(record("t1"), input_requests={"r1": object()})
    with pytest.raises(TypeError):
        await store.create(live)
    assert await store.count() == 0
    await store.create(record("t1"))
    with pytest.raises(TypeError):
        await store.update(attrs.evolve(live, version=1))
    assert await store.get("t1") == record("t1")


async def test_any_string_is_a_task_id_or_an_owner(store: RedisTaskStore) -> None:
    odd = ["", "*", "a:b", "\udcff lone surrogate", "é\x00nul", "task:x"]
    for i, text in enumerate(odd):
        await store.create(record(text, owner=text + "-owner"))
        await store.create(record(f"n{i}", owner=text))
    for i, text in enumerate(odd):
        assert await store.get(text) == record(text, owner=text + "-owner")
        records, _ = await store.page(text, None, 10)
        assert [r.task_id for r in records] == [f"n{i}"]
    assert await store.delete("\udcff lone surrogate") == record(
        "\udcff lone surrogate", "\udcff lone surrogate-owner"
    )


async def test_a_record_that_changes_owner_is_not_stored(store: RedisTaskStore) -> None:
    await store.create(record("t1", "alice"))
    assert not await store.update(attrs.evolve(record("t1", "bob"), version=1))
    assert await store.get("t1") == record("t1", "alice")


async def test_after_aclose_calls_raise_store_closed(store: RedisTaskStore) -> None:
    await store.create(record("t1"))
    await store.aclose()
    await store.aclose()  # again: nothing
    with pytest.raises(StoreClosed):
        await store.get("t1")
    with pytest.raises(StoreClosed):
        async with store.events():
            pass


async def test_a_cancelled_call_drops_its_connection_and_the_next_one_works(store: RedisTaskStore) -> None:
    await store.create(record("t1"))
    with trio.CancelScope() as scope:
        scope.cancel()
        await store.get("t1")
    assert await store.get("t1") == record("t1")


async def test_on_an_autojump_clock_a_call_takes_no_mock_time(
    store: RedisTaskStore, autojump_clock: Any
) -> None:
    async def sleeper() -> None:
        await trio.sleep(1.0)  # a deadline the clock would jump to while a call waits for the server

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper)
        before = trio.current_time()
        for i in range(20):
            await store.create(record(f"t{i}"))
            assert await store.get(f"t{i}") is not None
        assert trio.current_time() == before
    assert len(store) == 20


# ----------------------------------------------------------------------------- events


async def test_events_reach_the_processes_that_need_them_in_order() -> None:
    """``cancel``/``input`` to the task's holder, ``changed`` to its watchers, ``work`` to all
    the processes on the prefix (the publisher too), nothing across prefixes."""
    prefix = fresh_prefix()
    a = RedisTaskStore(shared_server().url, prefix=prefix)
    b = RedisTaskStore(shared_server().url, prefix=prefix)
    other = fresh_redis_store()
    now = time.time()
    await a.create(new_record("t1", "alice", now=now, ttl_ms=60_000, poll_interval_ms=500))
    assert await a.hold(["t1"], "a", now + 30) == []  # a runs t1
    await b.watch(["t2"], "b")  # b waits for news of t2
    answer = {"r1": {"action": "accept", "content": {"name": "x"}}}
    with trio.fail_after(5):
        async with a.events_for("a") as at_a, b.events_for("b") as at_b, other.events_for("a") as at_other:
            await other.publish(TaskEvent("work", "elsewhere", "other"))
            await b.publish(TaskEvent("cancel", "t1", "b"))
            await b.publish(TaskEvent("input", "t1", "b", answer))
            await a.publish(TaskEvent("changed", "t2", "a"))
            await a.publish(TaskEvent("changed", "t1", "a"))  # nobody watches t1
            await b.publish(TaskEvent("cancel", "t2", "b"))  # nobody holds t2
            await a.publish(TaskEvent("work", "t3", "a"))
            assert [await anext(at_a) for _ in range(3)] == [
                TaskEvent("cancel", "t1", "b"),
                TaskEvent("input", "t1", "b", answer),
                TaskEvent("work", "t3", "a"),
            ]
            assert [await anext(at_b) for _ in range(2)] == [
                TaskEvent("changed", "t2", "a"),
                TaskEvent("work", "t3", "a"),
            ]
            assert await anext(at_other) == TaskEvent("work", "elsewhere", "other")
            await b.unwatch(["t2"], "b")
            await a.publish(TaskEvent("changed", "t2", "a"))
            await a.publish(TaskEvent("work", "t4", "a"))
            assert await anext(at_b) == TaskEvent("work", "t4", "a")  # no news of t2 any more
    for store in (a, b, other):
        await store.aclose()


async def test_a_malformed_event_is_skipped(store: RedisTaskStore) -> None:
    with trio.fail_after(5):
        async with store.events() as events:
            for garbage in (b"not json", b"[]", b'{"kind": "changed"}'):
                shared_server().command("PUBLISH", store.channel, garbage)
            await store.publish(TaskEvent("work", "t1", "me"))
            assert await anext(events) == TaskEvent("work", "t1", "me")


async def test_events_resubscribe_after_the_server_comes_back(private_server: RedisServer) -> None:
    store = RedisTaskStore(private_server.url, connect_timeout=0.5, timeout=0.5)
    with trio.fail_after(10):
        async with store.events() as events:
            private_server.stop()
            with pytest.raises(RedisUnavailable):
                await store.publish(TaskEvent("work", "lost", "me"))
            private_server.start()

            async def publish_until_heard() -> None:
                while True:
                    await store.publish(TaskEvent("work", "t1", "me"))
                    await trio.sleep(0.05)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(publish_until_heard)
                assert await anext(events) == TaskEvent("resync", "", "")  # subscribed again
                assert await anext(events) == TaskEvent("work", "t1", "me")
                nursery.cancel_scope.cancel()
    await store.aclose()


async def test_a_silent_events_connection_counts_as_lost_and_is_replaced(
    private_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    store = RedisTaskStore(private_server.url, heartbeat=0.1, timeout=0.3, connect_timeout=0.3)
    assert private_server.process is not None
    pid = private_server.process.pid
    with trio.fail_after(10):
        async with store.events() as events:
            os.kill(pid, signal.SIGSTOP)  # the connection stays open, but nothing answers
            try:
                with trio.move_on_after(0.5):
                    await anext(events)
            finally:
                os.kill(pid, signal.SIGCONT)
            assert "task events connection lost (no answer to a ping within 0.1 s)" in caplog.text
            assert await anext(events) == TaskEvent("resync", "", "")  # subscribed again
            while True:  # (published before it subscribed again, an event is missed)
                await store.publish(TaskEvent("work", "t1", "me"))
                with trio.move_on_after(0.1):
                    assert await anext(events) == TaskEvent("work", "t1", "me")
                    break
    await store.aclose()


async def test_events_entered_while_the_server_is_down_flow_once_it_is_up() -> None:
    server = RedisServer()  # made but not started: its port is free
    store = RedisTaskStore(server.url, connect_timeout=0.5)
    try:
        with trio.fail_after(10):
            async with store.events() as events:  # does not raise: it keeps trying
                server.start()
                while True:
                    await store.publish(TaskEvent("work", "t1", "me"))
                    with trio.move_on_after(0.1):
                        assert await anext(events) == TaskEvent("work", "t1", "me")
                        break
    finally:
        server.close()
        await store.aclose()


# ----------------------------------------------------------------------------- leases


async def test_a_lease_that_ran_out_makes_the_running_record_lapsed(store: RedisTaskStore) -> None:
    now = time.time()
    running, waiting, done = record("run"), record("wait"), record("done")
    await store.create(running)
    await store.create(waiting)
    await store.create(done)
    waiting = waiting.transition(TaskStatus.INPUT_REQUIRED, "name?", now=1.0)
    assert await store.update(waiting)
    await store.hold(["run", "wait", "done", "never-created"], "process-a", now + 0.2)
    assert await store.lease("run") == ("process-a", pytest.approx(now + 0.2))
    assert await store.lease("never-created") is None  # no record: no lease
    ended = done.settle(TaskOutcome(result={"content": []}), now=1.0)
    assert await store.update(ended)

    assert await store.lapsed(now, 10) == []  # not yet
    assert await store.lapsed(now + 1, 10) == [running, waiting]  # a terminal record never lapses
    assert await store.lease("done") is None  # and its lease was dropped on the way
    assert await store.lapsed(now + 1, 1) == [running]

    await store.hold(["run"], "process-b", now + 5)  # renewed (by another process, even)
    assert await store.lapsed(now + 1, 10) == [waiting]
    await store.release(["wait", "not-held"])
    assert await store.lapsed(now + 1, 10) == []
    assert await store.lapsed(now + 10, 10) == [running]
    await store.delete("run")  # a deleted record loses its lease
    assert await store.lease("run") is None
    assert await store.lapsed(now + 10, 10) == []


async def test_a_recreated_id_does_not_inherit_an_old_lease(store: RedisTaskStore) -> None:
    await store.create(record("t1", ttl_ms=10))
    await store.hold(["t1"], "old", 5.0)
    shared_server().command("DEL", store.prefix + "task:t1")  # vanished (as by its TTL)
    await store.create(record("t1"))
    assert await store.lapsed(100.0, 10) == []


# ----------------------------------------------------------------------------- Redis TTLs


async def test_records_vanish_from_redis_after_their_expiry() -> None:
    async with fresh_redis_store(expiry_margin=0.0) as store:
        await store.create(record("short", ttl_ms=200))
        await store.create(record("long", ttl_ms=60_000))
        await store.create(record("other", "bob", ttl_ms=200))
        assert len(keys_of(store)) == 8  # 3 records, 2 owners x 2 keys, the expiry index
        await trio.sleep(0.4)
        assert await store.get("short") is None
        assert await store.get("long") is not None
        assert [r.task_id for r in (await store.page("alice", None, 10))[0]] == ["long"]
        assert await store.page("bob", None, 10) == ([], None)
        assert [r.task_id for r in await store.due(1e9, 10)] == ["long"]
        assert await store.count() == 1
        prefix = store.prefix.encode()
        assert keys_of(store) == sorted(
            prefix + key for key in (b"task:long", b"expiry", *keys_named(store, "alice"))
        )


def keys_named(store: RedisTaskStore, owner: str) -> list[bytes]:
    """The names of an owner's two keys (its counter and its index), without the prefix."""
    tag = hashlib.sha256(owner.encode()).hexdigest().encode()
    return [b"owner:" + tag, b"list:" + tag]


async def test_the_redis_ttl_is_the_time_left_plus_the_margin(store: RedisTaskStore) -> None:
    server = shared_server()

    def ttl_of(key: str) -> int:
        return int(server.command("PTTL", store.prefix + key)[1:].split(b"\r\n")[0])

    await store.create(record("t1", now=100.0, ttl_ms=10_000))
    assert 69_000 < ttl_of("task:t1") <= 70_000  # 10 s left, and a minute's margin
    later = record("t1", now=100.0, ttl_ms=10_000).with_message("late", now=108.0)
    assert await store.update(later)
    assert 61_000 < ttl_of("task:t1") <= 62_000  # 2 s left
    assert (
        ttl_of(keys_named(store, "alice")[0].decode()) > 69_000
    )  # the owner's keys outlive its longest-lived record


# ----------------------------------------------------------------------------- an unreachable server


async def test_an_unreachable_server_fails_calls_promptly_and_they_work_again_when_it_is_back(
    private_server: RedisServer,
) -> None:
    store = RedisTaskStore(private_server.url, connect_timeout=1.0, timeout=1.0)
    await store.create(record("t1"))
    private_server.stop()
    started = trio.current_time()
    for call in (
        store.get("t1"),
        store.create(record("t2")),
        store.page("alice", None, 5),
        store.due(1.0, 5),
    ):
        with pytest.raises(RedisUnavailable, match=r"Redis task store at redis://127\.0\.0\.1:\d+/0"):
            await call
    assert trio.current_time() - started < 1.0  # refused at once: no waiting for the timeout
    private_server.start()  # empty: there is no persistence
    assert await store.get("t1") is None
    await store.create(record("t1"))
    assert await store.get("t1") == record("t1")
    await store.aclose()


async def test_a_frozen_server_fails_calls_after_the_timeout(private_server: RedisServer) -> None:
    store = RedisTaskStore(private_server.url, timeout=0.3, connect_timeout=0.3)
    await store.create(record("t1"))
    assert private_server.process is not None
    pid = private_server.process.pid
    os.kill(pid, signal.SIGSTOP)
    try:
        started = trio.current_time()
        with pytest.raises(RedisUnavailable, match=r"no answer within 0\.3 s"):
            await store.get("t1")
        assert 0.25 < trio.current_time() - started < 1.0
    finally:
        os.kill(pid, signal.SIGCONT)
    assert await store.get("t1") == record("t1")
    await store.aclose()


async def test_on_a_mock_clock_an_unreachable_server_fails_calls_too(
    private_server: RedisServer, autojump_clock: Any
) -> None:
    store = RedisTaskStore(private_server.url, timeout=0.3, connect_timeout=0.3)
    await store.create(record("t1"))
    private_server.stop()
    with pytest.raises(RedisUnavailable):
        await store.get("t1")
    with pytest.raises(RedisUnavailable):
        len(store)
    private_server.start()
    await store.create(record("t1"))
    assert len(store) == 1
    await store.aclose()


async def test_a_password_in_the_url_is_sent() -> None:
    with RedisServer(args=["--requirepass", "s3cret"]) as server:
        async with RedisTaskStore(f"redis://:s3cret@127.0.0.1:{server.port}/2") as store:
            await store.create(record("t1"))
            assert await store.get("t1") == record("t1")
            assert "s3cret" not in repr(store)
        wrong = RedisTaskStore(f"redis://:nope@127.0.0.1:{server.port}/0")
        with pytest.raises(RedisReplyError, match=r"WRONGPASS|invalid"):
            await wrong.get("t1")
        await wrong.aclose()


async def test_an_acl_user_in_the_url_logs_in_as_that_user_with_that_users_rights(
    private_server: RedisServer,
) -> None:
    prefix = fresh_prefix()
    command = private_server.command
    # A user who may touch only this store's keys and channel; the default user switched off,
    # so a connection that did not log in as that user could do nothing.
    assert (
        command("ACL", "SETUSER", "tasks", "on", ">t4sks", f"~{prefix}*", f"&{prefix}*", "+@all")
        == b"+OK\r\n"
    )
    assert command("ACL", "SETUSER", "default", "off") == b"+OK\r\n"
    url = f"redis://tasks:t4sks@127.0.0.1:{private_server.port}/0"
    with trio.fail_after(10):
        async with RedisTaskStore(url, prefix=prefix) as store, store.events() as events:
            await store.create(record("t1"))
            assert await store.get("t1") == record("t1")
            await store.publish(TaskEvent("work", "t1", "me"))
            assert await anext(events) == TaskEvent("work", "t1", "me")
            assert "t4sks" not in repr(store)
        elsewhere = RedisTaskStore(url, prefix="not-its-keys:")
        with pytest.raises(RedisReplyError, match=r"NOPERM|permission"):  # its rights, not the default's
            await elsewhere.create(record("t1"))
        await elsewhere.aclose()
        for wrong in (
            f"redis://tasks:nope@127.0.0.1:{private_server.port}/0",
            f"redis://127.0.0.1:{private_server.port}/0",  # no user: the default one, switched off
        ):
            store = RedisTaskStore(wrong, prefix=prefix)
            with pytest.raises(RedisReplyError, match=r"WRONGPASS|invalid username-password|authenticated"):
                await store.get("t1")
            await store.aclose()


# ----------------------------------------------------------------------------- URLs


def test_store_urls() -> None:
    address = parse_redis_url("redis://user:p%40ss@[::1]:6390/3")
    assert (address.host, address.port, address.db, address.username, address.password) == (
        "::1",
        6390,
        3,
        "user",
        "p@ss",
    )
    assert repr(address) == "redis://***@[::1]:6390/3"
    assert parse_redis_url("redis://cache") == parse_redis_url("redis://cache:6379/0")
    for bad in (
        "redis://cache/x",
        "redis://cache/1/2",
        "redis://cache?db=1",  # the path is the database; options are keyword arguments
        "redis://cache?ssl_ca_certs=ca.pem",  # TLS options need rediss://
        "rediss://cache?ssl_cert_reqs=maybe",
        "rediss://cache?ssl_keyfile=key.pem",  # a key without its certificate
        "http://cache",
        "redis://c:99999",
        "redis+sentinel://s1:26379",  # no service
        "rediss+sentinel://s1:26379/tasks",  # TLS with Sentinel: not supported
    ):
        with pytest.raises(ValueError):
            parse_redis_url(bad)
    with pytest.raises(ValueError, match=r"Redis Cluster is not supported.*one hash slot"):
        store_from_url("redis+cluster://node1:7000,node2:7000")
    with pytest.raises(ValueError, match="bad TLS option"):
        RedisTaskStore(
            "rediss://cache?ssl_ca_certs=/nonexistent/ca.pem"
        )  # refused now, not at the first call

    tls = parse_redis_url(
        "rediss://app:s%3Acret@cache.internal:6380/1?ssl_ca_certs=/etc/ca.pem&ssl_cert_reqs=required"
    )
    assert tls.tls is not None and (tls.tls.ca_certs, tls.tls.cert_reqs, tls.tls.check_hostname) == (
        "/etc/ca.pem",
        "required",
        True,
    )
    assert (tls.username, tls.password, tls.port, tls.db) == ("app", "s:cret", 6380, 1)
    assert repr(tls) == "rediss://***@cache.internal:6380/1"
    assert parse_redis_url("rediss://cache").tls == TlsOptions()  # strict by default: system CAs, host name
    sentinel = parse_redis_url("redis+sentinel://:pw@s1,[::1]:26380/tasks/2")
    assert (sentinel.sentinels, sentinel.service, sentinel.db, sentinel.password) == (
        (("s1", 26379), ("::1", 26380)),
        "tasks",
        2,
        "pw",
    )
    assert repr(sentinel) == "redis+sentinel://***@s1:26379,[::1]:26380/tasks/2"

    made = store_from_url("redis://127.0.0.1:6380/1", prefix="app:", timeout=1.0)()
    assert isinstance(made, RedisTaskStore)
    assert (made.prefix, made.timeout, made.address.port, made.address.db) == ("app:", 1.0, 6380, 1)
    assert store_from_url("memory") is MemoryTaskStore
    assert isinstance(store_from_url("sqlite:///x.db")(), SqliteTaskStore)
    with pytest.raises(ValueError, match="redis://HOST"):
        store_from_url("mysql://x")
    with pytest.raises(TypeError):
        store_from_url("redis://cache", nonsense=1)
    with pytest.raises(ValueError):
        store_from_url("redis://cache", prefix="")


# ----------------------------------------------------------------------------- two server processes

shared_server_app = Server("shared-on-redis", version="1")
work_log: list[str] = []


@shared_server_app.tool()
async def work(seconds: float) -> str:
    work_log.append("started")
    try:
        await trio.sleep(seconds)
    except trio.Cancelled:
        work_log.append("cancelled")
        raise
    return f"worked {seconds:g}s"


@asynccontextmanager
async def two_processes() -> AsyncIterator[tuple[Client, Client]]:
    """Two runtimes ("processes"), each with its own store object and connections on one key
    prefix, and a client of the same identity on each (as through a load balancer)."""
    prefix = fresh_prefix()
    async with AsyncExitStack() as stack:
        runtimes = []
        for _ in range(2):
            store = RedisTaskStore(shared_server().url, prefix=prefix)
            stack.push_async_callback(store.aclose)  # after its runtime ends
            runtimes.append(await stack.enter_async_context(shared_server_app.open(store=store)))
        async with trio.open_nursery() as nursery:
            async with AsyncExitStack() as clients:
                ends = []
                for runtime in runtimes:
                    client_side, server_side = memory_transport_pair()
                    nursery.start_soon(partial(runtime.serve, server_side, owner="identity:alice"))
                    ends.append(await clients.enter_async_context(connect(client_side)))
                yield ends[0], ends[1]
            nursery.cancel_scope.cancel()


async def test_a_task_created_on_one_process_is_answered_by_another_through_redis() -> None:
    with trio.fail_after(10):
        async with two_processes() as (on_a, on_b):
            task_id = (await on_a.call_tool_as_task("work", {"seconds": 0.2})).task.task_id
            assert (await on_b.get_task(task_id)).status == TaskStatus.WORKING
            # B's tasks/result waits for A's news (a "changed" event through Redis pub/sub).
            assert (await on_b.task_result(task_id)).text == "worked 0.2s"
            assert (await on_b.get_task(task_id)).status == TaskStatus.COMPLETED
            assert task_id in [t.task_id for t in (await on_b.list_tasks()).tasks]


async def test_a_cancel_through_another_process_stops_the_work_through_redis() -> None:
    work_log.clear()
    with trio.fail_after(10):
        async with two_processes() as (on_a, on_b):
            task_id = (await on_a.call_tool_as_task("work", {"seconds": 60})).task.task_id
            assert (await on_b.cancel_task(task_id)).status == TaskStatus.CANCELLED
            with pytest.raises(McpError):
                await on_a.task_result(task_id)
            assert work_log == ["started", "cancelled"]  # the work in A really stopped
            assert (await on_a.get_task(task_id)).status == TaskStatus.CANCELLED


async def test_a_runtime_closing_its_store_while_tasks_are_dropped_logs_no_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The client hangs up with tasks running, and the process stops at once: the runtime drops
    # the connection's tasks (deletes and announcements through Redis) while it closes the
    # store it made. Nothing may reach the store after it closed.
    app = Server("closing", version="1", store=store_from_url(shared_server().url, prefix=fresh_prefix()))

    @app.tool()
    async def nap(seconds: float) -> str:
        await trio.sleep(seconds)
        return "rested"

    with trio.fail_after(10):
        async with app.open() as runtime, trio.open_nursery() as nursery:
            client_side, server_side = memory_transport_pair()
            nursery.start_soon(runtime.serve, server_side)
            async with connect(client_side) as client:
                for _ in range(20):
                    await client.call_tool_as_task("nap", {"seconds": 60})
            nursery.cancel_scope.cancel()
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == []
