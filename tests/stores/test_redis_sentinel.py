"""The Redis store through Sentinel (``redis+sentinel://HOST:PORT/SERVICE``): the store finds
the primary the Sentinel names, and once the primary died and the Sentinel promoted the replica
its calls reach the new primary, where the records written before are.

Real processes: a primary and a replica (``valkey-server``) and a Sentinel
(``valkey-server --sentinel``, the same binary), all started by the test.
"""

from __future__ import annotations

import time

import trio
from redis_server import RedisServer, SentinelServer, fresh_prefix

from trio_mcp.protocol.records import TaskRecord, new_record
from trio_mcp.stores import TaskEvent
from trio_mcp.stores.redis import RedisTaskStore, RedisUnavailable


def record(task_id: str) -> TaskRecord:
    return new_record(task_id, "alice", now=0.0, ttl_ms=600_000, poll_interval_ms=500)


def info_field(reply: bytes, name: str) -> str:
    for line in reply.decode(errors="replace").splitlines():
        if line.startswith(name + ":"):
            return line.split(":", 1)[1].strip()
    return ""


def wait_until(check: object, seconds: float, what: str) -> None:
    assert callable(check)
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, f"not within {seconds} s: {what}"
        time.sleep(0.05)


async def test_a_sentinel_url_reaches_the_primary_and_the_new_one_after_a_failover() -> None:
    with (
        RedisServer(args=["--repl-diskless-sync-delay", "0"]) as primary,
        RedisServer(args=["--replicaof", "127.0.0.1", str(primary.port)]) as replica,
    ):
        wait_until(
            lambda: info_field(replica.command("INFO", "replication"), "master_link_status") == "up",
            10,
            "the replica follows the primary",
        )
        with SentinelServer(primary.port, service="tasks") as sentinel:
            url = f"redis+sentinel://127.0.0.1:{sentinel.port}/tasks/0"
            store = RedisTaskStore(url, prefix=fresh_prefix(), timeout=2.0, connect_timeout=1.0)
            with trio.fail_after(10):
                async with store.events() as events:
                    await store.create(record("t1"))
                    assert await store.get("t1") == record("t1")
                    await store.publish(TaskEvent("work", "t1", "me"))
                    assert await anext(events) == TaskEvent("work", "t1", "me")
            assert b"task:t1" in primary.command("KEYS", "*t1")  # it wrote to the primary
            assert len(store) == 1  # a call made in place asks the Sentinel too

            # The Sentinel must know the replica before it can promote it.
            wait_until(
                lambda: b"127.0.0.1" in sentinel.command("SENTINEL", "REPLICAS", "tasks"),
                15,
                "the Sentinel knows the replica",
            )
            wait_until(lambda: b"task:t1" in replica.command("KEYS", "*t1"), 5, "t1 reached the replica")
            began = time.monotonic()
            primary.kill()  # the primary dies: the Sentinel promotes the replica
            # The store's calls reach the new primary (some may fail while it switches).
            failures: list[str] = []
            with trio.fail_after(15):
                while True:
                    try:
                        await store.create(record("t2"))
                        break
                    except RedisUnavailable as exc:
                        failures.append(str(exc))
                        await trio.sleep(0.1)
                assert await store.get("t1") == record("t1")  # written before the failover
                assert await store.get("t2") == record("t2")
            assert len(store) == 2  # in place as well: its connection to the dead primary is replaced
            took = time.monotonic() - began
            assert b"task:t2" in replica.command("KEYS", "*t2")  # the promoted replica has it
            await store.aclose()
            print(
                f"primary killed: {len(failures)} calls failed; the new primary answered after {took:.1f} s"
            )
