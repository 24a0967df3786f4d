"""The cheap paths of the hot loop keep the exact behaviour of the slow ones.

- ``protocol._json``: orjson where it agrees with the standard library, the standard library
  where it would not (NaN/Infinity refused both ways, integers of any size exact, lone
  surrogates written as escapes);
- ``format_timestamp``'s cache gives what ``datetime`` gives, to the millisecond;
- task ids come from a buffered ``os.urandom`` and stay unique and 24 characters;
- a task query about a task whose actor lives here is answered at once, in the asker's Trio
  task (no scheduler round trip through the supervisor); a started task's work begins without
  one either.
"""

from __future__ import annotations

import base64
import datetime
import json
import math
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_mcp.actors.runtime import Reply
from trio_mcp.actors.store import MemoryTaskStore
from trio_mcp.actors.supervisor import CreateTask, Route, TaskSupervisor, _TaskIds
from trio_mcp.actors.task_actor import AwaitResult, Cancel, Poll, TaskActor
from trio_mcp.protocol import _json
from trio_mcp.protocol.errors import McpError
from trio_mcp.protocol.records import TaskOutcome, TaskRecord
from trio_mcp.protocol.tasks import TaskStatus, format_timestamp

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_json_round_trips_exactly_as_the_standard_library_reads_it(value: Any) -> None:
    encoded = _json.dumps({"v": value})
    assert json.loads(encoded) == {"v": value}  # the reference reader agrees with what we wrote
    assert _json.loads(encoded) == {"v": value}
    assert _json.loads(json.dumps({"v": value})) == {"v": value}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_json_never_writes_nan_or_infinity(bad: float) -> None:
    with pytest.raises(ValueError):
        _json.dumps({"progress": [1, {"x": bad}]})


@pytest.mark.parametrize("text", [b"NaN", b'{"a": Infinity}', b"[-Infinity]", b"{", b"\xff"])
def test_json_refuses_what_is_not_strict_json(text: bytes) -> None:
    with pytest.raises(ValueError):
        _json.loads(text)


def test_json_keeps_huge_integers_and_lone_surrogates() -> None:
    big = 2**70 + 1
    assert _json.loads(b'{"id": %d}' % big) == {"id": big}
    assert _json.dumps({"id": big}) == b'{"id":%d}' % big
    lone = "a\ud800b"
    written = _json.dumps({"s": lone})
    assert written == b'{"s":"a\\ud800b"}'  # UTF-8 cannot hold it: an escape reads back the same
    assert _json.loads(written) == {"s": lone}
    assert _json.loads('{"s": "a\\ud800b"}') == {"s": lone}


def test_json_writes_null_where_the_value_is_null() -> None:
    assert _json.dumps({"id": None, "data": [None]}) == b'{"id":null,"data":[null]}'


@settings(max_examples=2000, deadline=None)
@given(
    st.floats(min_value=-2e9, max_value=4e9, allow_nan=False)
    | st.integers(min_value=0, max_value=4_000_000_000).map(lambda s: s + 0.0005)
    | st.integers(min_value=0, max_value=4_000_000_000_000).map(lambda ms: ms / 1000)
)
def test_timestamps_are_formatted_as_datetime_formats_them(epoch: float) -> None:
    reference = datetime.datetime.fromtimestamp(epoch, datetime.UTC)
    expected = reference.isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert format_timestamp(epoch) == expected
    assert format_timestamp(epoch) == expected  # the cached answer too


def test_task_ids_are_unique_unguessable_url_safe_and_24_characters() -> None:
    ids = _TaskIds()
    made = [ids() for _ in range(3 * _TaskIds.BATCH + 7)]  # across several refills
    assert len(set(made)) == len(made)
    assert all(len(i) == 24 and len(base64.urlsafe_b64decode(i)) == 18 for i in made)


async def _created(supervisor: TaskSupervisor, owner: str = "alice") -> TaskRecord:
    async def work(actor: TaskActor) -> TaskOutcome:
        await trio.sleep_forever()
        raise AssertionError

    reply: Reply[TaskRecord] = Reply()
    supervisor.tell(CreateTask(owner, work, None, None, reply))
    return await reply.wait()


async def test_queries_about_a_live_task_are_answered_before_any_checkpoint(autojump_clock: Any) -> None:
    supervisor = TaskSupervisor()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        record = await _created(supervisor)
        supervisor.start_work("alice", record.task_id)
        await trio.testing.wait_all_tasks_blocked()
        poll: Reply[TaskRecord] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Poll(poll)))
        assert poll.answered  # no await between asking and the answer
        assert (await poll.wait()).status == TaskStatus.WORKING
        foreign: Reply[TaskRecord] = Reply()
        supervisor.deliver(Route("mallory", record.task_id, Poll(foreign)))
        with pytest.raises(McpError) as caught:
            await foreign.wait()  # another owner's task looks exactly like a missing one
        assert caught.value.code == -32602
        result: Reply[TaskOutcome] = Reply()
        supervisor.deliver(Route("alice", record.task_id, AwaitResult(result)))
        assert not result.answered  # still running: answered when it ends
        cancel: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Cancel(cancel)))
        assert cancel.answered and result.answered  # the cancel ended it, and its waiter heard
        cancelled, was_terminal = await cancel.wait()
        assert cancelled.status == TaskStatus.CANCELLED and not was_terminal
        await trio.testing.wait_all_tasks_blocked()
        assert supervisor.actor(record.task_id) is None  # stored and forgotten: a record now
        # A task that is only a record in the memory store is answered at once too.
        late: Reply[TaskOutcome] = Reply()
        supervisor.deliver(Route("alice", record.task_id, AwaitResult(late)))
        assert late.answered and (await late.wait()).failed
        again: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Cancel(again)))
        assert (await again.wait())[1] is True  # already ended: nothing changed
        missing: Reply[TaskRecord] = Reply()
        supervisor.deliver(Route("alice", "no-such-task", Poll(missing)))
        assert missing.answered
        nursery.cancel_scope.cancel()


async def test_a_store_that_cannot_be_read_at_once_is_asked_through_the_mailbox(autojump_clock: Any) -> None:
    class SlowStore(MemoryTaskStore):
        peek = None  # type: ignore[assignment]  # like a durable store: reads wait

    supervisor = TaskSupervisor(store=SlowStore())
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        poll: Reply[TaskRecord] = Reply()
        supervisor.deliver(Route("alice", "unknown", Poll(poll)))
        assert not poll.answered  # it waits for the supervisor's turn
        with pytest.raises(McpError):
            await poll.wait()
        nursery.cancel_scope.cancel()
