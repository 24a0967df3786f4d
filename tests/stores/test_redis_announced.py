"""The Redis store's announced updates (:class:`~trio_mcp.stores.base.AnnouncedUpdates`) on a
real ``valkey-server``: ``update_announced`` is ``update``, ``release`` (of a terminal record)
and ``publish`` of ``changed`` in one script — all of it when the update is stored, none of it
when it is not; and a task created already ended is not leased (nothing runs it)."""

from __future__ import annotations

import time

import trio
from redis_server import fresh_prefix, fresh_redis_store, shared_server

from trio_mcp.protocol.errors import ErrorValue
from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores.base import AnnouncedUpdates, TaskEvent
from trio_mcp.stores.redis import RedisTaskStore


def _record(task_id: str, owner: str = "alice") -> TaskRecord:
    return new_record(task_id, owner, now=time.time(), ttl_ms=60_000, poll_interval_ms=500)


async def test_the_redis_store_announces_its_updates() -> None:
    store = fresh_redis_store()
    announced: AnnouncedUpdates = store  # checked by mypy
    assert isinstance(announced, AnnouncedUpdates)
    await store.aclose()


async def test_an_announced_update_is_stored_released_and_published_in_one_step() -> None:
    prefix = fresh_prefix()
    runner = RedisTaskStore(shared_server().url, prefix=prefix)
    waiter = RedisTaskStore(shared_server().url, prefix=prefix)
    now = time.time()
    first = _record("t1")
    assert await runner.create_work(first, b"work", "runner", now + 30, None, None)
    assert await runner.lease("t1") == ("runner", now + 30)
    await waiter.watch(["t1"], "waiter")
    with trio.fail_after(5):
        async with waiter.events_for("waiter") as events:
            asking = first.transition(TaskStatus.INPUT_REQUIRED, "name?", now=now + 1)
            assert await runner.update_announced(asking, "runner")
            assert await runner.get("t1") == asking
            assert await runner.lease("t1") is not None  # not ended: still held
            assert await anext(events) == TaskEvent("changed", "t1", "runner")

            stale = first.settle(TaskOutcome(result={"content": []}), now=now + 2)  # version 2 again
            assert not await runner.update_announced(stale, "runner")  # not stored: nothing else done
            assert await runner.get("t1") == asking
            assert await runner.lease("t1") is not None

            done = asking.settle(TaskOutcome(result={"content": []}), now=now + 3)
            assert await runner.update_announced(done, "runner")
            assert await runner.get("t1") == done
            assert await runner.lease("t1") is None  # ended: released
            assert await runner.lapsed(now + 100, 10) == []
            assert await anext(events) == TaskEvent("changed", "t1", "runner")  # not the stale one
    for store in (runner, waiter):
        await store.aclose()


async def test_an_announced_update_of_a_queued_task_that_ends_takes_it_off_the_queue() -> None:
    store = fresh_redis_store()
    record = _record("q1")
    assert await store.create_work(record, b"work", None, 0.0, None, None)
    assert await store.queued() == 1
    outcome = TaskOutcome(error=ErrorValue(-32603, "no"), failed=True)
    cancelled = record.settle(outcome, now=time.time(), status=TaskStatus.CANCELLED)
    assert await store.update_announced(cancelled, "someone")
    assert await store.queued() == 0
    assert await store.claim("worker", 10, time.time() + 30) == []
    await store.aclose()


async def test_a_task_created_already_ended_is_not_leased() -> None:
    store = fresh_redis_store()
    now = time.time()
    running = _record("run")
    ended = _record("ended").settle(TaskOutcome(result={"content": []}), now=now)
    assert await store.create_work(running, b"work", "me", now + 30, None, None)
    assert await store.create_work(ended, b"work", "me", now + 30, None, None)
    assert await store.lease("run") == ("me", now + 30)
    assert await store.lease("ended") is None
    assert await store.get("ended") == ended
    assert await store.work_of("ended") == (b"work", 1)
    assert await store.lapsed(now + 100, 10) == [running]
    await store.aclose()
