"""The Redis store's calls on a warm pool (``RedisTaskStore._send``): what each costs the caller's
task, and that taking the cheap path changes none of the store's guarantees — a script the
server lost is run from its text, a call cut short by its caller leaves the pool whole. (A
frozen server: ``test_redis_faults.py``, whose calls go this way too once the pool is warm.)

Every test runs against the shared server (``tests/redis_server.py``) under a fresh key prefix.
"""

from __future__ import annotations

import pytest
import trio
from redis_server import fresh_redis_store, shared_server

from trio_mcp.protocol.records import TaskRecord, new_record


def record(task_id: str, owner: str = "alice") -> TaskRecord:
    return new_record(task_id, owner, now=0.0, ttl_ms=600_000, poll_interval_ms=500)


class TaskSteps(trio.abc.Instrument):
    """How many times each task was scheduled."""

    def __init__(self) -> None:
        self.steps: dict[trio.lowlevel.Task, int] = {}

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        self.steps[task] = self.steps.get(task, 0) + 1


async def test_a_call_on_a_warm_pool_is_scheduled_twice_send_and_answer() -> None:
    # The caller's task runs once to send the command and once more when the answer is in:
    # no checkpoint of its own in between (waiting for a pool slot, a lock).
    store = fresh_redis_store()
    try:
        await store.create(record("t1"))
        for _ in range(5):
            await store.get("t1")  # the pool warm
        steps = TaskSteps()
        trio.lowlevel.add_instrument(steps)
        try:
            for _ in range(100):
                assert await store.get("t1") == record("t1")
                assert await store.update(record("t1")) is False
        finally:
            trio.lowlevel.remove_instrument(steps)
        assert steps.steps[trio.lowlevel.current_task()] <= 200 + 5  # (was 400: a lock's checkpoint)
    finally:
        await store.aclose()


async def test_a_script_the_server_lost_is_run_from_its_text() -> None:
    store = fresh_redis_store()
    try:
        await store.create(record("t1"))
        shared_server().command("SCRIPT", "FLUSH")
        await store.create(record("t2"))  # EVALSHA: NOSCRIPT, then EVAL
        assert await store.get("t2") == record("t2")
        assert [r.task_id for r in (await store.page("alice", None, 10))[0]] == ["t1", "t2"]
        with pytest.raises(ValueError):
            await store.create(record("t2"))  # loaded again: EVALSHA
    finally:
        await store.aclose()


async def test_calls_cancelled_by_their_callers_leave_the_pool_whole() -> None:
    store = fresh_redis_store(connections=1)
    try:
        await store.create(record("t1"))
        for _ in range(20):
            with trio.CancelScope() as scope:
                scope.cancel()  # cancelled before it is answered (before it is sent, even)
                await store.get("t1")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(store.get, "t1")
                await trio.lowlevel.checkpoint()
                nursery.cancel_scope.cancel()  # cancelled while it waits for its answer
        with trio.fail_after(2):
            for _ in range(20):
                assert await store.get("t1") == record("t1")
    finally:
        await store.aclose()
