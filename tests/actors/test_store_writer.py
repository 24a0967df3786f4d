"""The store writer (``trio_mcp/actors/_writer.py``) against a store that fails, stalls and is
written by others: nothing is dropped, a task's writes stay in order, conflicts are merged by
the documented precedence, and one task's slow write holds up no other's."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp.actors._writer import STORE_UNAVAILABLE, RetryPolicy, StoreWriter
from trio_mcp.protocol.errors import ErrorValue
from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores.memory import MemoryTaskStore


class FlakyStore:
    """A store that waits (not an ImmediateTaskStore): the records of a memory store behind
    async calls that can be made to fail or stall, per task."""

    def __init__(self) -> None:
        self.inner = MemoryTaskStore()
        self.failures: dict[str, int] = {}  # task id -> calls still to fail
        self.stalled: set[str] = set()  # task ids whose calls wait until released
        self.released = trio.Event()
        self.updates: list[tuple[str, int, str]] = []  # (task id, version, status) stored

    async def _gate(self, task_id: str) -> None:
        await trio.lowlevel.checkpoint()
        if task_id in self.stalled:
            await self.released.wait()
        left = self.failures.get(task_id, 0)
        if left:
            self.failures[task_id] = left - 1
            raise OSError(f"store down for {task_id}")

    async def create(self, record: TaskRecord) -> None:
        await self._gate(record.task_id)
        self.inner.create_now(record)

    async def get(self, task_id: str) -> TaskRecord | None:
        await trio.lowlevel.checkpoint()
        return self.inner.peek(task_id)

    async def update(self, record: TaskRecord) -> bool:
        await self._gate(record.task_id)
        done = self.inner.update_now(record)
        if done:
            self.updates.append((record.task_id, record.version, record.status.value))
        return done

    async def delete(self, task_id: str) -> TaskRecord | None:
        await self._gate(task_id)
        return self.inner.delete_now(task_id)

    async def page(self, owner: str, cursor: str | None, limit: int) -> tuple[list[TaskRecord], str | None]:
        return await self.inner.page(owner, cursor, limit)

    async def due(self, now: float, limit: int) -> list[TaskRecord]:
        return await self.inner.due(now, limit)


class Seen:
    def __init__(self) -> None:
        self.stored: list[TaskRecord] = []
        self.lost: list[tuple[str, TaskRecord | None]] = []
        self.created: list[ErrorValue | None] = []

    def on_stored(self, record: TaskRecord) -> None:
        self.stored.append(record)

    def on_lost(self, task_id: str, current: TaskRecord | None) -> None:
        self.lost.append((task_id, current))


def _record(task_id: str) -> TaskRecord:
    return new_record(task_id, "alice", now=0.0, ttl_ms=60_000, poll_interval_ms=None)


async def _writer(nursery: trio.Nursery, store: FlakyStore, seen: Seen) -> StoreWriter:
    writer = StoreWriter(
        store, on_stored=seen.on_stored, on_lost=seen.on_lost, policy=RetryPolicy(timeout=1.0)
    )
    await nursery.start(writer.run)
    return writer


async def _create(writer: StoreWriter, seen: Seen, record: TaskRecord) -> None:
    writer.create(record, seen.created.append)
    await trio.testing.wait_all_tasks_blocked()


async def test_a_failing_write_is_retried_until_stored_and_the_newest_change_wins(
    autojump_clock: Any,
) -> None:
    store, seen = FlakyStore(), Seen()
    async with trio.open_nursery() as nursery:
        writer = await _writer(nursery, store, seen)
        first = _record("t1")
        await _create(writer, seen, first)
        assert seen.created == [None]
        store.failures["t1"] = 12  # down for a while: 12 attempts fail, with backoff
        working = first.with_message("step 1", now=1.0)
        writer.update(working)
        done = working.settle(TaskOutcome(result={"content": []}), now=2.0)
        writer.update(done)  # made while the first is being retried: merged into it
        await trio.sleep(60)  # twelve attempts with a backoff doubling to 2 s
        assert not writer.pending
        stored = store.inner.peek("t1")
        assert stored is not None and stored.status == TaskStatus.COMPLETED and stored.outcome == done.outcome
        assert seen.stored[-1] is done  # shown once stored, and only then
        assert [status for _, _, status in store.updates] in (["completed"], ["working", "completed"])
        assert all(r.status != TaskStatus.COMPLETED for r in seen.stored[:-1])
        nursery.cancel_scope.cancel()


async def test_nothing_is_shown_before_it_is_stored(autojump_clock: Any) -> None:
    store, seen = FlakyStore(), Seen()
    async with trio.open_nursery() as nursery:
        writer = await _writer(nursery, store, seen)
        first = _record("t1")
        await _create(writer, seen, first)
        store.stalled.add("t1")
        done = first.settle(TaskOutcome(result={"content": []}), now=1.0)
        writer.update(done)
        await trio.sleep(30)
        assert seen.stored == []  # the store has not taken it: no one is told
        store.stalled.clear()
        store.released.set()
        await trio.sleep(5)
        assert seen.stored == [done]
        nursery.cancel_scope.cancel()


async def test_one_tasks_stalled_write_holds_up_no_other_task(autojump_clock: Any) -> None:
    store, seen = FlakyStore(), Seen()
    async with trio.open_nursery() as nursery:
        writer = await _writer(nursery, store, seen)
        slow, quick = _record("slow"), _record("quick")
        await _create(writer, seen, slow)
        await _create(writer, seen, quick)
        store.stalled.add("slow")
        writer.update(slow.with_message("x", now=1.0))
        writer.update(quick.with_message("y", now=1.0))
        await trio.sleep(0.1)
        assert [r.task_id for r in seen.stored] == ["quick"]
        store.released.set()
        nursery.cancel_scope.cancel()


async def test_a_terminal_record_written_elsewhere_stands(autojump_clock: Any) -> None:
    store, seen = FlakyStore(), Seen()
    async with trio.open_nursery() as nursery:
        writer = await _writer(nursery, store, seen)
        first = _record("t1")
        await _create(writer, seen, first)
        # Another process cancels it (a conditional update on the stored version).
        cancelled = first.settle(
            TaskOutcome(failed=True, message="stop"), now=1.0, status=TaskStatus.CANCELLED
        )
        assert store.inner.update_now(cancelled)
        # The runner, not knowing, completes it: its write conflicts, and the cancel stands.
        writer.update(first.settle(TaskOutcome(result={"content": []}), now=2.0))
        await trio.sleep(1)
        assert seen.lost == [("t1", cancelled)] and seen.stored == []
        assert store.inner.peek("t1") == cancelled
        nursery.cancel_scope.cancel()


async def test_a_change_over_another_non_terminal_version_is_rebased_and_written(autojump_clock: Any) -> None:
    store, seen = FlakyStore(), Seen()
    async with trio.open_nursery() as nursery:
        writer = await _writer(nursery, store, seen)
        first = _record("t1")
        await _create(writer, seen, first)
        assert store.inner.update_now(first.with_message("someone else", now=0.5))  # version 1
        mine = first.with_message("mine", now=1.0)  # also version 1
        writer.update(mine)
        await trio.sleep(1)
        stored = store.inner.peek("t1")
        assert stored is not None and stored.status_message == "mine" and stored.version == 2
        assert seen.stored == [mine]
        nursery.cancel_scope.cancel()


async def test_a_creation_the_store_cannot_take_in_time_is_refused_and_removed(autojump_clock: Any) -> None:
    store, seen = FlakyStore(), Seen()
    async with trio.open_nursery() as nursery:
        writer = await _writer(nursery, store, seen)
        store.failures["t1"] = 1_000_000  # down for good, for this task
        writer.create(_record("t1"), seen.created.append)
        await trio.sleep(1.5)
        assert seen.created == [STORE_UNAVAILABLE]  # within the deadline (1 s), plus a backoff step
        store.failures["t1"] = 0
        store.inner.create_now(_record("t1"))  # suppose one attempt had been stored after all
        await trio.sleep(5)
        assert store.inner.peek("t1") is None  # the writer made sure it is not
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("gone_by", ["delete", "expiry elsewhere"])
async def test_a_write_of_a_record_that_is_gone_tells_the_runtime(autojump_clock: Any, gone_by: str) -> None:
    store, seen = FlakyStore(), Seen()
    async with trio.open_nursery() as nursery:
        writer = await _writer(nursery, store, seen)
        first = _record("t1")
        await _create(writer, seen, first)
        store.inner.delete_now("t1")
        writer.update(first.with_message("x", now=1.0))
        await trio.sleep(1)
        assert seen.lost == [("t1", None)]
        nursery.cancel_scope.cancel()


async def test_a_store_read_past_the_servers_store_timeout_is_answered_as_failed(autojump_clock: Any) -> None:
    from trio_mcp.actors.runtime import Reply
    from trio_mcp.actors.supervisor import Route, TaskLimits, TaskSupervisor
    from trio_mcp.actors.task_actor import Poll
    from trio_mcp.protocol.errors import INTERNAL_ERROR, McpError

    store = FlakyStore()
    store.inner.create_now(_record("elsewhere"))  # a task this process does not run
    supervisor = TaskSupervisor(TaskLimits(store_timeout=0.5), store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)

        async def hang(task_id: str) -> TaskRecord | None:
            await trio.sleep_forever()
            raise AssertionError("unreachable")

        store.get = hang  # type: ignore[method-assign]
        poll: Reply[TaskRecord] = Reply()
        asked = trio.current_time()
        supervisor.tell(Route("alice", "elsewhere", Poll(poll)))
        with pytest.raises(McpError) as failed:
            await poll.wait()
        assert failed.value.code == INTERNAL_ERROR
        assert trio.current_time() - asked == pytest.approx(0.5)
        nursery.cancel_scope.cancel()


async def test_a_cancel_is_answered_once_stored_a_second_as_already_ended(
    autojump_clock: Any,
) -> None:
    from trio_mcp.actors.runtime import Reply
    from trio_mcp.actors.supervisor import CreateTask, Route, TaskSupervisor
    from trio_mcp.actors.task_actor import Cancel, Start, TaskActor

    async def forever(actor: TaskActor) -> TaskOutcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    store = FlakyStore()
    supervisor = TaskSupervisor(store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        created: Reply[TaskRecord] = Reply()
        supervisor.tell(CreateTask("alice", forever, None, None, created))
        task_id = (await created.wait()).task_id
        supervisor.tell(Route("alice", task_id, Start()))
        await trio.testing.wait_all_tasks_blocked()
        store.stalled.add(task_id)  # the cancel's write waits
        first: Reply[tuple[TaskRecord, bool]] = Reply()
        second: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.tell(Route("alice", task_id, Cancel(first)))
        supervisor.tell(Route("alice", task_id, Cancel(second)))
        await trio.sleep(10)
        assert not first.answered and not second.answered  # not before it is stored
        store.released.set()
        ended, already = await first.wait()
        assert ended.status == TaskStatus.CANCELLED and not already
        assert (await second.wait()) == (ended, True)  # the second found it ended
        nursery.cancel_scope.cancel()


class DurableFlakyStore(FlakyStore):
    """A FlakyStore whose records outlive a process (a DurableTaskStore)."""

    async def unfinished(self, limit: int) -> list[TaskRecord]:
        await trio.lowlevel.checkpoint()
        left = [r for r in self.inner._rows.values() if not r.is_terminal]
        return left[:limit]


async def test_start_up_fails_what_a_dead_process_left_through_the_writer_retrying_until_stored(
    autojump_clock: Any,
) -> None:
    import time

    from trio_mcp.actors.supervisor import PROCESS_GONE, SWEEP_BATCH, TaskSupervisor

    store = DurableFlakyStore()
    left = [  # more than one batch, none due to expire yet
        new_record(f"t-{n}", "alice", now=time.time(), ttl_ms=3_600_000, poll_interval_ms=None)
        for n in range(SWEEP_BATCH + 3)
    ]
    for record in left:
        store.inner.create_now(record)
    for record in left[:3]:
        store.failures[record.task_id] = 4  # the store refuses their ends a while
    supervisor = TaskSupervisor(store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)  # started only once every one is stored failed
        stored = [store.inner.peek(record.task_id) for record in left]
        nursery.cancel_scope.cancel()
    assert {record.status for record in stored if record is not None} == {TaskStatus.FAILED}
    assert [record.version if record else None for record in stored] == [r.version + 1 for r in left]
    assert stored[0] is not None and PROCESS_GONE.message in str(stored[0].outcome)
    assert [task_id for task_id, _, _ in store.updates].count(left[0].task_id) == 1  # once stored
    assert store.failures[left[0].task_id] == 0  # after the four refusals
