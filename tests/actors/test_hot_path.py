"""The cheap paths of the hot loop keep the exact behaviour of the slow ones.

- ``protocol._json``: orjson where it agrees with the standard library, the standard library
  where it would not (NaN/Infinity refused both ways, integers of any size exact, lone
  surrogates written as escapes);
- ``format_timestamp``'s cache gives what ``datetime`` gives, to the millisecond;
- task ids come from a buffered ``os.urandom`` and stay unique and 24 characters;
- a task query about a task whose actor lives here is answered at once, in the asker's Trio
  task (no scheduler round trip through the supervisor); a started task's work begins without
  one either; ``TaskSupervisor.current`` reads what a Poll would be answered without a
  message; the memory store takes changes and creations at once, keeping mailbox order, and
  an expired task leaves it without waiting on its async ``delete``;
- a running tool is awaited by its task's actor directly (no frame of ours in between);
- a frozen instance built by ``slot_builder`` (records, outcomes, requests, commands, the
  create message) is the one attrs' ``__init__`` builds of the same fields, and as frozen;
- a record's times are formatted once per change; a status notification and the cancel
  answer after it share one writing;
- ``tools/call`` and task-query params of the common shape are read directly, exactly as the
  converter reads them;
- a one-text-block result is kept without being encoded only when its largest possible JSON
  fits the size limit; a tool without a Context is started without a call object.
"""

from __future__ import annotations

import base64
import datetime
import inspect
import json
import math
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_mcp.actors._calls import ToolRun
from trio_mcp.actors._receiver import Started
from trio_mcp.actors.runtime import Reply
from trio_mcp.actors.supervisor import (
    EXPIRED,
    NOT_FOUND,
    CreateTask,
    ListTasks,
    Route,
    TaskSupervisor,
    _TaskIds,
    create_task,
)
from trio_mcp.actors.task_actor import ActorHost, AwaitResult, Cancel, Poll, TaskActor
from trio_mcp.protocol import _json, jsonrpc
from trio_mcp.protocol._frozen import slot_builder
from trio_mcp.protocol.commands import CallTool, GetTask, Initialize, call_tool_command
from trio_mcp.protocol.converter import structure
from trio_mcp.protocol.errors import ErrorValue, McpError
from trio_mcp.protocol.handshake import HandshakeDialect, call_tool_fields
from trio_mcp.protocol.messages import CallToolParams, Implementation, TaskIdParams
from trio_mcp.protocol.modern import ModernScope
from trio_mcp.protocol.records import (
    NO_INPUT_REQUESTS,
    TaskOutcome,
    TaskRecord,
    _build,
    _outcome,
    new_record,
    record_from_json,
    record_to_json,
    task_fields,
)
from trio_mcp.protocol.tasks import TaskStatus, format_timestamp
from trio_mcp.server import Context, Server
from trio_mcp.stores import MemoryTaskStore

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


@pytest.mark.parametrize(
    "number", [-(2**63) - 1, -(2**63), 2**64 - 1, 2**64, -(10**19), 10**19, -(10**25), 12345678901234567890]
)
def test_json_reads_integers_at_the_64_bit_edges_exactly(number: int) -> None:
    # -2**63 - 1 has only 19 digits, yet orjson reads it as a float: it must not be given it.
    assert _json.loads(b'{"id": %d, "x": [1, %d]}' % (number, number)) == {"id": number, "x": [1, number]}


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=-(2**80), max_value=2**80))
def test_json_reads_every_integer_exactly(number: int) -> None:
    assert _json.loads(b"[%d]" % number) == [number]
    assert type(_json.loads(b"%d" % number)) is int


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_a_text_result_settles_its_task_as_the_general_path_does(text: str) -> None:
    server = Server("fast")

    @server.tool()
    async def say() -> str:
        return text

    entry = server.tools["say"]
    for scope in (HandshakeDialect(), ModernScope("2026-07-28", {}, None, None, server.info)):
        work = ToolRun(None, entry, None, None, scope, None)  # type: ignore[arg-type]
        assert work.finish(text) == scope.settle_tool_result(entry.finish(text))


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(max_size=40)
    | st.text(st.sampled_from(["\x01", '"', "\\", "\ud800", "\U0001f600", "\u2028", "x"]), max_size=40),
    limit=st.integers(0, 700),
    extra=st.sampled_from([{}, {"annotations": {"audience": ["user"]}}]),
)
def test_a_result_over_the_size_limit_is_refused_whether_or_not_it_is_measured(
    text: str, limit: int, extra: dict[str, Any]
) -> None:
    # A one-text-block result is let through without being encoded only when even its
    # largest possible JSON fits; otherwise its encoded size decides, as for any result.
    actor = TaskActor.__new__(TaskActor)
    actor._host = type("Host", (), {"max_result_bytes": limit, "keep_result": None})()  # type: ignore[assignment]
    outcome = TaskOutcome(result={"content": [{"type": "text", "text": text, **extra}]})
    kept = actor._bounded(outcome)
    fits = len(_json.dumps(outcome.result)) <= limit
    assert (kept is outcome) is fits
    if not fits:
        assert kept.failed and kept.error is not None and kept.error.code == -32603


async def test_a_tool_without_a_context_is_started_without_a_call_object() -> None:
    server = Server("plain")
    seen: list[Any] = []

    @server.tool()
    async def plain(text: str) -> str:
        return text

    @server.tool()
    async def aware(text: str, ctx: Context) -> str:
        seen.append(ctx)
        return text

    class Spy:  # the registered tool, noting the call object each start is given
        def __init__(self, entry: Any) -> None:
            self.entry = entry
            self.context_param = entry.context_param
            self.calls: list[Any] = []

        def start(self, arguments: Any, call: Any) -> Any:
            self.calls.append(call)
            return self.entry.start(arguments, call)

    for name, takes_context in (("plain", False), ("aware", True)):
        spy = Spy(server.tools[name])
        work = ToolRun(None, spy, {"text": "hi"}, None, HandshakeDialect(), None)  # type: ignore[arg-type]
        running = work.start(TaskActor.__new__(TaskActor))
        assert await running == "hi"  # type: ignore[misc]
        assert [call is not None for call in spy.calls] == [takes_context]
    assert len(seen) == 1


@settings(max_examples=300, deadline=None)
@given(
    task_id=st.text(min_size=1, max_size=30) | st.sampled_from(["dGFzaw-_x", "a b", 'q"x', "b\\s", "\u2028"]),
    status=st.sampled_from(list(TaskStatus)),
    times=st.tuples(st.floats(0, 4e9), st.floats(0, 4e9)),
    ttl=st.integers(0, 2**40),
    poll=st.none() | st.integers(0, 10**6),
    message=st.none() | st.text(max_size=20) | st.sampled_from(['say "hi"\n', "lone \ud800"]),
)
def test_a_task_written_from_the_template_is_what_the_encoder_writes(
    task_id: str,
    status: TaskStatus,
    times: tuple[float, float],
    ttl: int,
    poll: int | None,
    message: str | None,
) -> None:
    created, updated = times
    record = TaskRecord(task_id, "alice", status, created, updated, ttl, created + ttl / 1000, poll, message)
    written = HandshakeDialect.task_json(record)
    assert written == _json.dumps(task_fields(record, ttl_key="ttl", poll_interval_key="pollInterval"))
    assert json.loads(written)["taskId"] == task_id
    dialect = HandshakeDialect()
    for immediate in (None, "Started."):
        expected = _json.dumps(dialect.render_created(record, immediate))
        assert dialect.created_json(record, immediate) == expected


@settings(max_examples=300, deadline=None)
@given(
    status=st.sampled_from(list(TaskStatus)),
    times=st.tuples(st.floats(0, 4e9), st.floats(0, 4e9)),
    ttl=st.integers(0, 2**40),
    poll=st.none() | st.integers(0, 10**6),
    message=st.none() | st.text(max_size=5),
    outcome=st.none() | st.just(TaskOutcome(result={"content": []})),
    requests=st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    version=st.integers(0, 100),
)
def test_a_record_built_field_by_field_is_the_frozen_record_attrs_builds(
    status: TaskStatus,
    times: tuple[float, float],
    ttl: int,
    poll: int | None,
    message: str | None,
    outcome: TaskOutcome | None,
    requests: dict[str, Any],
    version: int,
) -> None:
    created, updated = times
    fields = (
        "t1",
        "alice",
        status,
        created,
        updated,
        ttl,
        created + ttl,
        poll,
        message,
        outcome,
        requests,
        version,
    )
    made = TaskRecord(*fields)
    # Built by ``__init__`` (as a store reads it), a record formats its two times itself.
    assert made.created_text == format_timestamp(created)
    assert made.updated_text == format_timestamp(updated)
    built = _build(*fields, made.created_text, made.updated_text)
    assert type(built) is TaskRecord
    assert built == made and repr(built) == repr(made)
    names = [field.name for field in attrs.fields(TaskRecord)]
    assert [getattr(built, name) for name in names] == [getattr(made, name) for name in names]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        built.status = TaskStatus.FAILED  # type: ignore[misc]
    # The texts given are kept, not formatted again.
    assert _build(*fields, "then", "now").created_text == "then"


def _nothing_to_do(actor: Any) -> Any:
    raise AssertionError("never run")


@pytest.mark.parametrize(
    ("build", "cls", "fields"),
    [
        (_outcome, TaskOutcome, ({"content": []}, None, False, "done")),
        (_outcome, TaskOutcome, (None, ErrorValue(-32603, "boom"), True, None)),
        (jsonrpc._request, jsonrpc.Request, (7, "tools/call", {"name": "echo"})),
        (call_tool_command, CallTool, ("echo", {"text": "x"}, "p1", True, 60000, False, None, None)),
        (create_task, CreateTask, ("alice", _nothing_to_do, 1000, None, Reply(), "address:10.0.0.1", False)),
    ],
)
def test_slot_builders_build_the_instance_init_builds(build: Any, cls: type, fields: tuple[Any, ...]) -> None:
    built = build(*fields)
    made = cls(*fields)
    assert type(built) is cls
    assert built == made and repr(built) == repr(made)
    first = attrs.fields(cls)[0].name
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        setattr(built, first, None)


def test_slot_builder_refuses_what_it_cannot_build_like_init() -> None:
    @attrs.frozen  # a weak reference slot after the fields: not the draft's layout
    class Weak:
        x: int

    @attrs.frozen(weakref_slot=False)
    class Checked:
        x: int = attrs.field(validator=attrs.validators.instance_of(int))

    @attrs.frozen(weakref_slot=False, slots=False)
    class Unslotted:
        x: int

    for cls in (Weak, Checked, Unslotted):
        with pytest.raises(TypeError):
            slot_builder(cls)


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


async def _working(supervisor: TaskSupervisor) -> TaskRecord:
    """A task of alice's whose work has started and now waits forever."""
    record = await _created(supervisor)
    supervisor.start_work("alice", record.task_id)
    await trio.testing.wait_all_tasks_blocked()
    return record


async def test_queries_about_a_live_task_are_answered_before_any_checkpoint(autojump_clock: Any) -> None:
    supervisor = TaskSupervisor()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        record = await _working(supervisor)
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


class SlowStore(MemoryTaskStore):
    peek = None  # type: ignore[assignment]  # like a durable store: reads wait


async def test_a_store_that_cannot_be_read_at_once_is_asked_through_the_mailbox(autojump_clock: Any) -> None:
    supervisor = TaskSupervisor(store=SlowStore())
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        poll: Reply[TaskRecord] = Reply()
        supervisor.deliver(Route("alice", "unknown", Poll(poll)))
        assert not poll.answered  # it waits for the supervisor's turn
        with pytest.raises(McpError):
            await poll.wait()
        nursery.cancel_scope.cancel()


# -- answered without a message, stored without one, created without one ---------------------
async def test_current_reads_the_record_a_poll_would_be_answered_with(autojump_clock: Any) -> None:
    supervisor = TaskSupervisor()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        record = await _working(supervisor)
        current = supervisor.current("alice", record.task_id)
        assert isinstance(current, TaskRecord) and current.status == TaskStatus.WORKING
        assert supervisor.current("mallory", record.task_id) == NOT_FOUND  # foreign looks missing
        assert supervisor.current("alice", "no-such-task") == NOT_FOUND
        cancel: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Cancel(cancel)))
        # The memory store took the final record at once: the task is a record already.
        assert supervisor.actor(record.task_id) is None
        ended = supervisor.current("alice", record.task_id)
        assert isinstance(ended, TaskRecord) and ended.status == TaskStatus.CANCELLED
        assert ended == (await cancel.wait())[0]
        nursery.cancel_scope.cancel()


async def test_current_defers_to_the_mailbox_for_a_store_that_waits(autojump_clock: Any) -> None:
    supervisor = TaskSupervisor(store=SlowStore())
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        assert supervisor.current("alice", "unknown") is None
        record = await _created(supervisor)
        assert supervisor.current("alice", record.task_id) == record  # its actor is here
        nursery.cancel_scope.cancel()


async def test_a_creation_is_made_at_once_unless_messages_wait_before_it(autojump_clock: Any) -> None:
    async def work(actor: TaskActor) -> TaskOutcome:
        return TaskOutcome(result={"content": []})

    supervisor = TaskSupervisor()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        first: Reply[TaskRecord] = Reply()
        supervisor.create(CreateTask("alice", work, None, None, first))
        assert first.answered  # the memory store never waits: made in this Trio task
        listed: Reply[tuple[list[TaskRecord], str | None]] = Reply()
        supervisor.tell(ListTasks("alice", None, listed))
        second: Reply[TaskRecord] = Reply()
        supervisor.create(CreateTask("alice", work, None, None, second))
        assert not second.answered  # the list asked before it is answered first (FIFO)
        made = await second.wait()
        page, _ = await listed.wait()
        assert [r.task_id for r in page] == [(await first.wait()).task_id]  # not the later task
        assert supervisor.current("alice", made.task_id) == made
        nursery.cancel_scope.cancel()


async def test_an_expired_task_leaves_the_memory_store_without_its_async_delete(autojump_clock: Any) -> None:
    class Store(MemoryTaskStore):
        async def delete(self, task_id: str) -> TaskRecord | None:
            raise AssertionError("an expiry waits on the store")

    store = Store()
    supervisor = TaskSupervisor(store=store)
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        reply: Reply[TaskRecord] = Reply()
        supervisor.create(CreateTask("alice", _forever, 1_000, None, reply))
        record = await reply.wait()
        supervisor.start_work("alice", record.task_id)
        await trio.sleep(1.5)  # past its TTL: expired, its work cancelled, its record gone
        assert store.peek(record.task_id) is None and len(store) == 0
        assert supervisor.current("alice", record.task_id) is EXPIRED
        assert supervisor.current("mallory", record.task_id) is NOT_FOUND
        assert supervisor.live_count("alice") == 0
        nursery.cancel_scope.cancel()


async def _forever(actor: TaskActor) -> TaskOutcome:
    await trio.sleep_forever()
    raise AssertionError


async def test_a_running_tool_is_awaited_by_the_task_actor_itself(autojump_clock: Any) -> None:
    """No frame of the runtime sits between a task's actor and its tool while the tool runs:
    each would be kept for the task's whole life (the memory per live task)."""
    from trio_mcp import Server
    from trio_mcp.client import connect_in_memory

    callers: list[str] = []
    server = Server("frames")

    @server.tool(task_support="optional")
    async def probe() -> str:
        frame = inspect.currentframe()
        assert frame is not None and frame.f_back is not None
        callers.append(frame.f_back.f_code.co_qualname)
        return "ok"

    async with connect_in_memory(server) as client:
        created = await client.call_tool_as_task("probe", {})
        result = await client.task_result(created.task.task_id)
    assert result.text == "ok"
    assert callers == ["TaskActor.run_work"]


async def test_a_task_actor_ends_quietly_when_its_own_scope_is_cancelled(autojump_clock: Any) -> None:
    """The actor enters and leaves its cancel scope by hand (no ``with``, whose bound
    ``__exit__`` every live task would keep): its own cancellation is swallowed there, and the
    cancel has settled the task."""
    supervisor = TaskSupervisor()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        record = await _working(supervisor)
        reply: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Cancel(reply)))
        cancelled, was_final = await reply.wait()
        assert cancelled.status == TaskStatus.CANCELLED and not was_final
        await trio.testing.wait_all_tasks_blocked()
        assert supervisor.actors == 0 and supervisor.live_count("alice") == 0
        nursery.cancel_scope.cancel()


async def test_a_cancellation_from_outside_the_task_goes_on_up_and_settles_nothing() -> None:
    settled: list[TaskRecord] = []
    host = ActorHost(clock=lambda: 1.0, on_change=lambda actor, record: settled.append(record))
    actor = TaskActor(new_record("t1", "alice", now=0.0, ttl_ms=1000, poll_interval_ms=None), _forever, host)
    crashes: list[BaseException] = []
    with trio.CancelScope() as outer:
        outer.cancel()
        await actor.run_work(lambda _, exc: crashes.append(exc))
    assert outer.cancelled_caught  # the Cancelled reached the scope that was cancelled
    assert settled == [] and crashes == [] and actor.status == TaskStatus.WORKING


async def test_a_tool_that_fails_after_cancel_scope_handling_still_settles_failed() -> None:
    async def broken(actor: TaskActor) -> TaskOutcome:
        await trio.lowlevel.checkpoint()
        raise ValueError("boom")

    settled: list[TaskRecord] = []
    host = ActorHost(clock=lambda: 1.0, on_change=lambda actor, record: settled.append(record))
    actor = TaskActor(new_record("t1", "alice", now=0.0, ttl_ms=1000, poll_interval_ms=None), broken, host)
    await actor.run_work(lambda _, exc: pytest.fail(f"crashed: {exc!r}"))
    assert [r.status for r in settled] == [TaskStatus.FAILED]
    assert settled[0].outcome is not None and settled[0].outcome.error is not None
    assert settled[0].outcome.error.message == "Internal error: boom"


async def test_the_trio_task_running_a_task_is_named_by_its_task_id(autojump_clock: Any) -> None:
    """What Trio shows of the task (its task tree, instruments) names the MCP task."""
    from trio_mcp import Server
    from trio_mcp.client import connect_in_memory

    names: list[str] = []
    server = Server("names")

    @server.tool(task_support="optional")
    async def probe() -> str:
        names.append(trio.lowlevel.current_task().name)
        return "ok"

    async with connect_in_memory(server) as client:
        created = await client.call_tool_as_task("probe", {})
        await client.task_result(created.task.task_id)
    assert names == [created.task.task_id]


def test_records_without_input_requests_share_one_read_only_empty_mapping() -> None:
    record = new_record("t1", "alice", now=0.0, ttl_ms=1000, poll_interval_ms=None)
    assert record.input_requests is NO_INPUT_REQUESTS and record.input_requests == {}
    with pytest.raises(TypeError):
        record.input_requests["r1"] = {}  # type: ignore[index]
    asking = record.with_input_requests({"r1": {"method": "x"}}, TaskStatus.INPUT_REQUIRED, None, now=1.0)
    done = asking.settle(TaskOutcome(result={"content": []}), now=2.0)
    assert done.input_requests is NO_INPUT_REQUESTS
    assert "inputRequests" not in record_to_json(done)
    assert record_from_json(record_to_json(record)).input_requests is NO_INPUT_REQUESTS
    assert record_from_json(record_to_json(asking)) == asking


def test_reading_a_failed_reply_again_grows_no_traceback() -> None:
    reply: Reply[int] = Reply()
    reply.fail(ValueError("no"))
    depths = []
    for _ in range(3):
        with pytest.raises(ValueError) as caught:
            reply.unwrap()
        depth, tb = 0, caught.value.__traceback__
        while tb is not None:
            depth, tb = depth + 1, tb.tb_next
        depths.append(depth)
    assert depths[0] == depths[1] == depths[2]


def test_a_record_formats_its_times_once_and_a_change_only_its_new_time() -> None:
    record = new_record("t1", "alice", now=1_700_000_000.25, ttl_ms=1000, poll_interval_ms=500)
    created = record.created_text
    assert created == "2023-11-14T22:13:20.250Z"
    assert record.created_text is created and record.updated_text is created  # formatted once
    done = record.settle(TaskOutcome(result={"content": []}), now=1_700_000_001.5)
    assert done.created_text is created  # carried over, not formatted again
    assert done.updated_text == "2023-11-14T22:13:21.500Z"
    task = HandshakeDialect.render_task(done)
    assert (task["createdAt"], task["lastUpdatedAt"]) == (created, done.updated_text)
    assert json.loads(HandshakeDialect.task_json(done)) == task
    # The texts are caches: equality and the stored JSON form ignore them.
    assert record == new_record("t1", "alice", now=1_700_000_000.25, ttl_ms=1000, poll_interval_ms=500)
    assert "createdText" not in json.dumps(record_to_json(done))


def test_a_status_notification_and_the_cancel_answer_after_it_share_one_writing() -> None:
    dialect = HandshakeDialect()
    record = new_record("t1", "alice", now=5.0, ttl_ms=1000, poll_interval_ms=None)
    cancelled = record.settle(TaskOutcome(failed=True, message="stop"), now=6.0, status=TaskStatus.CANCELLED)
    notification = dialect.status_json(cancelled)
    answer = dialect.cancelled_json(cancelled, was_terminal=False)
    assert isinstance(answer, bytes) and notification.endswith(answer + b"}")
    assert dialect.cancelled_json(cancelled, was_terminal=False) is answer  # written once
    assert json.loads(notification) == {
        "jsonrpc": "2.0",
        "method": "notifications/tasks/status",
        "params": dialect.render_task(cancelled),
    }
    refused = dialect.cancelled_json(cancelled, was_terminal=True)
    assert isinstance(refused, ErrorValue) and refused.code == -32602


call_params = st.dictionaries(
    st.sampled_from(["name", "arguments", "task", "_meta", "other", "requestState"]),
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.floats(allow_nan=False)
    | st.text(max_size=3)
    | st.dictionaries(
        st.sampled_from(["ttl", "text", "progressToken", "x"]),
        st.none() | st.integers() | st.text(max_size=2) | st.booleans(),
        max_size=2,
    )
    | st.lists(st.integers(), max_size=2),
    max_size=4,
)


@settings(max_examples=1000, deadline=None)
@given(call_params | st.none())
def test_tools_call_params_read_directly_as_the_converter_reads_them(params: Any) -> None:
    def read(reader: Any) -> Any:
        try:
            return reader(params)
        except McpError as exc:
            return (exc.code, exc.message)

    def converted(p: Any) -> Any:
        call = structure(p, CallToolParams)
        ttl = call.task.ttl if call.task is not None else None
        return (call.name, call.arguments, call.task is not None, ttl, call.meta)

    assert read(call_tool_fields) == read(converted)


@pytest.mark.parametrize(
    "params",
    [{"taskId": "t"}, {"taskId": 5}, {"taskId": "t", "_meta": {}}, {"taskId": "t", "_meta": 3}, {}, None],
)
def test_task_query_params_read_directly_as_the_converter_reads_them(params: Any) -> None:
    dialect = HandshakeDialect()
    client, server = Implementation(name="c", version="1"), Implementation(name="s", version="1")
    dialect.initialize(Initialize("2025-11-25", {}, client), server, None)
    request = jsonrpc.Request(1, "tasks/get", params)
    got = dialect.interpret(request, lambda name: None)
    try:
        expected: Any = GetTask(structure(params, TaskIdParams).task_id)
    except McpError as exc:
        expected = exc.value
    assert got == expected


async def test_result_waiters_whose_askers_gave_up_are_not_kept(autojump_clock: Any) -> None:
    """A client asking for a long task's result and cancelling the request, again and again,
    grows nothing: the task keeps only waiters someone still waits on."""
    supervisor = TaskSupervisor()
    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        record = await _created(supervisor)
        supervisor.start_work("alice", record.task_id)
        kept: Reply[TaskOutcome] = Reply()
        supervisor.deliver(Route("alice", record.task_id, AwaitResult(kept)))
        for _ in range(1000):
            reply: Reply[TaskOutcome] = Reply()
            supervisor.deliver(Route("alice", record.task_id, AwaitResult(reply)))
            with trio.move_on_after(1):
                await reply.wait()
            assert reply.abandoned
        actor = supervisor.actor(record.task_id)
        assert actor is not None and actor._waiters is not None
        assert len(actor._waiters) <= 16
        assert kept in actor._waiters  # the one still waited on stays
        cancel: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.deliver(Route("alice", record.task_id, Cancel(cancel)))
        assert kept.answered
        nursery.cancel_scope.cancel()


async def test_a_started_query_answers_with_its_json_text_as_it_is() -> None:
    record = new_record("t1", "alice", now=0.0, ttl_ms=1000, poll_interval_ms=500)
    reply: Reply[TaskRecord] = Reply()
    reply.send(record)
    answer = await Started(reply, HandshakeDialect.task_json).answer(7)
    assert answer == jsonrpc.encode_response_json(7, HandshakeDialect.task_json(record))
    missing: Reply[TaskRecord] = Reply()
    missing.fail(NOT_FOUND.exception())
    error = json.loads(await Started(missing, HandshakeDialect.task_json).answer(8))
    assert error == {
        "jsonrpc": "2.0",
        "id": 8,
        "error": {"code": NOT_FOUND.code, "message": NOT_FOUND.message},
    }
