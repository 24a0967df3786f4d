"""The supervisor's in-place writes to a store that never waits (the memory store), and the
reply slot's plain attributes.

- a creation is stored in place and answered with the stored record; a store that refuses it
  (an id it holds) answers -32603 and leaves no task behind;
- a change is stored in place; one the store refuses because another version is there is
  merged onto it (as the writer's update merges it), and one meeting a stored end adopts it;
- through an observed store (telemetry) the same in-place calls are timed;
- ``Reply.answered`` and ``Reply.error_value`` say what ``send`` / ``fail`` / ``fail_value`` did.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp.actors.runtime import Reply
from trio_mcp.actors.supervisor import STORE_FAILURE, CreateTask, Route, TaskSupervisor
from trio_mcp.actors.task_actor import Cancel, Poll, TaskActor
from trio_mcp.protocol.errors import ErrorValue, McpError
from trio_mcp.protocol.records import TaskOutcome, TaskRecord
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores import MemoryTaskStore


async def _sleeper(actor: TaskActor) -> TaskOutcome:
    await trio.sleep_forever()
    raise AssertionError("never")


async def _create(supervisor: TaskSupervisor, owner: str = "alice") -> TaskRecord:
    reply: Reply[TaskRecord] = Reply()
    supervisor.create(CreateTask(owner, _sleeper, None, None, reply))
    return await reply.wait()


async def test_a_creation_is_stored_in_place_and_answered_with_the_stored_record(autojump_clock: Any) -> None:
    store = MemoryTaskStore()
    supervisor = TaskSupervisor(store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        reply: Reply[TaskRecord] = Reply()
        supervisor.create(CreateTask("alice", _sleeper, None, None, reply))
        assert reply.answered and reply.error_value is None
        record = reply.unwrap()
        assert store.peek(record.task_id) is record
        assert supervisor.actor(record.task_id) is not None
        nursery.cancel_scope.cancel()


async def test_a_creation_the_store_refuses_is_answered_with_an_error_and_forgotten(
    autojump_clock: Any,
) -> None:
    class Refusing(MemoryTaskStore):
        def create_now(self, record: TaskRecord) -> None:
            raise ValueError("no")

    supervisor = TaskSupervisor(store=Refusing())
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        reply: Reply[TaskRecord] = Reply()
        supervisor.create(CreateTask("alice", _sleeper, None, None, reply))
        assert reply.answered and reply.error_value == STORE_FAILURE
        assert supervisor.actors == 0 and supervisor.live_count("alice") == 0
        nursery.cancel_scope.cancel()


async def test_a_change_meeting_another_version_is_merged_onto_it(autojump_clock: Any) -> None:
    store = MemoryTaskStore()
    supervisor = TaskSupervisor(store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        record = await _create(supervisor)
        # Another writer moved the stored record on (still working): versions differ.
        store.update_now(
            record.with_message("elsewhere", now=record.created_at).with_version(record.version + 1)
        )
        cancel: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Cancel(cancel)))
        cancelled, was_terminal = await cancel.wait()
        assert cancelled.status == TaskStatus.CANCELLED and not was_terminal
        stored = store.peek(record.task_id)
        assert stored is not None and stored.status == TaskStatus.CANCELLED
        assert stored.version == record.version + 2  # rebased on the store's version
        assert supervisor.actor(record.task_id) is None  # its end is stored: a record now
        nursery.cancel_scope.cancel()


async def test_a_change_meeting_a_stored_end_adopts_it(autojump_clock: Any) -> None:
    store = MemoryTaskStore()
    supervisor = TaskSupervisor(store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        record = await _create(supervisor)
        ended = record.settle(TaskOutcome(result={"content": []}), now=record.created_at)
        store.update_now(ended.with_version(record.version + 1))  # it ended elsewhere
        cancel: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Cancel(cancel)))
        await trio.testing.wait_all_tasks_blocked()
        stored = store.peek(record.task_id)
        assert stored is not None and stored.status == TaskStatus.COMPLETED  # the stored end stands
        assert supervisor.actor(record.task_id) is None
        poll: Reply[TaskRecord] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Poll(poll)))
        assert (await poll.wait()).status == TaskStatus.COMPLETED
        nursery.cancel_scope.cancel()


async def test_in_place_writes_are_timed_through_an_observed_store(autojump_clock: Any) -> None:
    calls: list[str] = []

    class Observer:
        def store_call(self, kind: str, operation: str, seconds: float, error: Exception | None) -> None:
            calls.append(operation)

    supervisor = TaskSupervisor(store=MemoryTaskStore(), store_observer=Observer())
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        record = await _create(supervisor)
        cancel: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Cancel(cancel)))
        await cancel.wait()
        nursery.cancel_scope.cancel()
    assert "create" in calls and "update" in calls


def test_a_reply_says_how_it_was_answered() -> None:
    sent: Reply[int] = Reply()
    assert not sent.answered and not sent.failed and sent.error_value is None
    sent.send(1)
    sent.fail_value(ErrorValue(-1, "late"))  # the first answer wins
    assert sent.answered and not sent.failed and sent.error_value is None and sent.unwrap() == 1

    valued: Reply[int] = Reply()
    valued.fail(McpError(-32602, "bad"))
    assert valued.answered and valued.failed and valued.error_value == ErrorValue(-32602, "bad")
    with pytest.raises(McpError):
        valued.unwrap()

    raised: Reply[int] = Reply()
    raised.fail(KeyError("x"))
    assert raised.answered and raised.failed and raised.error_value is None
    with pytest.raises(KeyError):
        raised.unwrap()

    waiting: Reply[int] = Reply()
    with pytest.raises(RuntimeError):
        waiting.unwrap()
