"""The actor runtime: mailboxes, replies, supervision of crashing task actors."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trio_mcp.actors.runtime import Mailbox, MailboxClosed, MailboxFull, Reply
from trio_mcp.actors.supervisor import CreateTask, Route, TaskSupervisor
from trio_mcp.actors.task_actor import AwaitResult, Cancel, Poll, Start, TaskActor
from trio_mcp.protocol.errors import INTERNAL_ERROR, McpError
from trio_mcp.protocol.records import TaskOutcome, TaskRecord
from trio_mcp.protocol.tasks import TaskStatus

pytestmark = pytest.mark.every_store  # make test runs it again on each store


async def test_mailbox_is_bounded_fifo_and_wakes_its_reader() -> None:
    box: Mailbox[int] = Mailbox(capacity=2)
    got: list[int] = []

    async def reader() -> None:
        for _ in range(3):
            got.append(await box.get())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        box.put(1)
        box.put(2)
        with pytest.raises(MailboxFull):
            box.put(3)
        box.put(3, system=True)  # runtime messages bypass the bound
    assert got == [1, 2, 3]


async def test_closing_a_mailbox_returns_unread_messages_and_stops_the_reader() -> None:
    box: Mailbox[str] = Mailbox()
    box.put("a")
    assert box.close() == ["a"]
    with pytest.raises(MailboxClosed):
        box.put("b")
    with pytest.raises(MailboxClosed):
        await box.get()


async def test_reply_first_answer_wins_and_cancelled_asker_is_harmless() -> None:
    reply: Reply[int] = Reply()
    with trio.move_on_after(0) as scope:
        await reply.wait()
    assert scope.cancelled_caught
    reply.send(1)
    reply.fail(RuntimeError("ignored"))
    assert await reply.wait() == 1


async def test_a_crashing_task_actor_fails_its_task_and_the_supervisor_survives(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = TaskSupervisor()

    def explode(self: TaskActor, outcome: TaskOutcome) -> TaskOutcome:
        raise RuntimeError("actor bug")  # raised inside the actor: a crash, not a tool error

    monkeypatch.setattr(TaskActor, "_bounded", explode)

    async def work(actor: TaskActor) -> TaskOutcome:
        await trio.sleep(1)
        return TaskOutcome(result={"content": []})

    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        reply: Reply[TaskRecord] = Reply()
        supervisor.tell(CreateTask("owner", work, None, None, reply))
        task_id = (await reply.wait()).task_id
        waiting: Reply[TaskOutcome] = Reply()
        supervisor.tell(Route("owner", task_id, AwaitResult(waiting)))
        supervisor.tell(Route("owner", task_id, Start()))
        # The waiter is answered with the crash, kept as the task's error.
        outcome = await waiting.wait()
        assert outcome.result is None and outcome.failed
        assert outcome.error is not None and outcome.error.code == INTERNAL_ERROR
        assert "actor bug" in outcome.error.message
        await trio.testing.wait_all_tasks_blocked()
        # The task is failed, with the error kept, in the actor's last state and in the store.
        poll: Reply[TaskRecord] = Reply()
        supervisor.tell(Route("owner", task_id, Poll(poll)))
        polled = await poll.wait()
        assert polled.status == TaskStatus.FAILED
        assert polled.status_message == outcome.error.message
        stored = await supervisor.store.get(task_id)
        assert stored is not None and stored.status == TaskStatus.FAILED and stored.outcome == outcome
        late: Reply[TaskOutcome] = Reply()
        supervisor.tell(Route("owner", task_id, AwaitResult(late)))
        assert await late.wait() == outcome
        assert supervisor.live_count("owner") == 0
        # And the supervisor still creates tasks.
        again: Reply[TaskRecord] = Reply()
        supervisor.tell(CreateTask("owner", work, None, None, again))
        assert (await again.wait()).status == TaskStatus.WORKING
        nursery.cancel_scope.cancel()


async def test_a_crashing_session_closes_only_its_connection(autojump_clock: Any) -> None:
    from trio_mcp import Server, connect
    from trio_mcp.actors._session import SessionActor
    from trio_mcp.client import ConnectionClosed
    from trio_mcp.transports.memory import memory_transport_pair

    server = Server("crash", version="1")

    @server.tool()
    async def echo(text: str) -> str:
        return text

    original = SessionActor.on_notification

    async def buggy(self: SessionActor, notification: Any) -> None:
        if notification.method == "test/crash":
            raise RuntimeError("bug in the session")
        await original(self, notification)

    SessionActor.on_notification = buggy  # type: ignore[method-assign]
    try:
        async with server.open() as runtime, trio.open_nursery() as nursery:
            pairs = [memory_transport_pair() for _ in range(2)]
            serves_returned: list[int] = []

            async def serve(index: int) -> None:
                await runtime.serve(pairs[index][1])
                serves_returned.append(index)

            for index in range(2):
                nursery.start_soon(serve, index)
            async with connect(pairs[0][0]) as victim, connect(pairs[1][0]) as bystander:
                await victim.send(b'{"jsonrpc":"2.0","method":"test/crash"}')
                with pytest.raises(ConnectionClosed):
                    await victim.call_tool("echo", {"text": "x"})
                await trio.testing.wait_all_tasks_blocked()
                assert serves_returned == [0]  # returned normally: nothing escaped into the nursery
                assert (await bystander.call_tool("echo", {"text": "still here"})).text == "still here"
            nursery.cancel_scope.cancel()
    finally:
        SessionActor.on_notification = original  # type: ignore[method-assign]


async def test_a_handler_crash_during_cancel_is_contained(
    autojump_clock: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    supervisor = TaskSupervisor()
    settle = TaskActor.settle

    def explode_on_cancel(self: TaskActor, outcome: TaskOutcome, status: TaskStatus | None = None) -> None:
        if status == TaskStatus.CANCELLED:
            raise RuntimeError("actor bug")  # raised while the supervisor runs the handler
        settle(self, outcome, status)

    monkeypatch.setattr(TaskActor, "settle", explode_on_cancel)

    async def work(actor: TaskActor) -> TaskOutcome:
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    async with trio.open_nursery() as nursery:
        await nursery.start(supervisor.run)
        created: Reply[TaskRecord] = Reply()
        supervisor.tell(CreateTask("owner", work, None, None, created))
        task_id = (await created.wait()).task_id
        supervisor.tell(Route("owner", task_id, Start()))
        cancel: Reply[tuple[TaskRecord, bool]] = Reply()
        supervisor.tell(Route("owner", task_id, Cancel(cancel)))
        with pytest.raises(McpError) as info:
            await cancel.wait()  # answered, not left hanging
        assert info.value.code == INTERNAL_ERROR and "actor bug" in info.value.message
        result: Reply[TaskOutcome] = Reply()
        supervisor.tell(Route("owner", task_id, AwaitResult(result)))
        outcome = await result.wait()
        assert outcome.error is not None and outcome.error.message == info.value.message
        await trio.testing.wait_all_tasks_blocked()
        assert supervisor.live_count("owner") == 0  # the work was cancelled and forgotten
        stored = await supervisor.store.get(task_id)
        assert stored is not None and stored.status == TaskStatus.FAILED
        nursery.cancel_scope.cancel()


async def test_reply_continuation_runs_once_when_answered_or_at_once_if_already() -> None:
    seen: list[int] = []
    reply: Reply[int] = Reply()
    reply.then(lambda result: seen.append(result.unwrap()))
    assert seen == []
    reply.send(7)
    reply.send(8)  # first answer wins; the continuation does not run twice
    assert seen == [7]
    late: list[int] = []
    reply.then(lambda result: late.append(result.unwrap()))
    assert late == [7]


async def test_a_busy_mailbox_reader_still_lets_others_run() -> None:
    from trio_mcp.actors.runtime import YIELD_EVERY

    box: Mailbox[int] = Mailbox(capacity=10_000)
    for i in range(10 * YIELD_EVERY):
        box.put(i)
    progress: list[int] = []
    drained = 0

    async def other() -> None:
        while drained < 10 * YIELD_EVERY:
            progress.append(drained)
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        await trio.lowlevel.checkpoint()
        for _ in range(10 * YIELD_EVERY):
            await box.get()
            drained += 1
    # The other task ran while the backlog drained, and not after every single message.
    assert len(progress) >= 5
    assert len(progress) <= 10 * YIELD_EVERY // 2
