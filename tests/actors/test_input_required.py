"""input_required: elicitation and sampling from inside tools, as tasks and as plain calls."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from conftest import kit_client

from trio_mcp import Context, McpError, Server, TaskStatus
from trio_mcp.protocol.errors import INVALID_REQUEST
from trio_mcp.protocol.messages import (
    MODEL_IMMEDIATE_RESPONSE_KEY,
    RELATED_TASK_KEY,
    CreateMessageParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    ProgressParams,
    Task,
)
from trio_mcp.testing import open_harness

pytestmark = pytest.mark.every_store  # make test runs it again on each store

SCHEMA = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}


class Record:
    def __init__(self) -> None:
        self.cleaned_up = 0
        self.cancelled = 0


def make_server(record: Record) -> Server:
    server = Server("input", version="1")

    @server.tool(immediate_response="asking the user")
    async def ask(question: str, ctx: Context) -> str:
        try:
            await ctx.report_progress(1, 3)
            reply = await ctx.elicit(question, SCHEMA)
            await ctx.report_progress(2, 3)
            await trio.sleep(1)
            await ctx.report_progress(3, 3)
            if reply.action == "accept" and reply.content:
                return f"answer: {reply.content['answer']}"
            return f"action: {reply.action}"
        except trio.Cancelled:
            record.cancelled += 1
            raise
        finally:
            record.cleaned_up += 1

    @server.tool()
    async def summarize(text: str, ctx: Context) -> str:
        result = await ctx.sample([f"Summarize: {text}"], max_tokens=50)
        return f"{result.model}: {result.text}"

    return server


class Human:
    """A scripted user: answers each elicitation when told to, and records what it saw."""

    def __init__(self, action: str = "accept", answer: str = "42") -> None:
        self.action = action
        self.answer = answer
        self.seen: list[ElicitRequestParams] = []
        self.go = trio.Event()

    async def __call__(self, params: ElicitRequestParams) -> ElicitResult:
        self.seen.append(params)
        await self.go.wait()
        content = {"answer": self.answer} if self.action == "accept" else None
        return ElicitResult(action=self.action, content=content)  # type: ignore[arg-type]


async def test_elicitation_in_a_task_goes_input_required_and_back(autojump_clock: Any) -> None:
    record, human = Record(), Human()
    async with kit_client(make_server(record), on_elicit=human) as client:
        statuses: list[TaskStatus] = []
        client.status_callbacks.append(lambda t: statuses.append(t.status))
        created = await client.call_tool_as_task("ask", {"question": "meaning of life?"})
        assert created.meta == {MODEL_IMMEDIATE_RESPONSE_KEY: "asking the user"}
        task_id = created.task.task_id
        await trio.testing.wait_all_tasks_blocked()
        assert (await client.get_task(task_id)).status == TaskStatus.INPUT_REQUIRED
        assert (await client.poll_task(task_id)).status == TaskStatus.INPUT_REQUIRED
        [request] = human.seen
        assert request.message == "meaning of life?"
        assert request.requested_schema == SCHEMA
        assert request.meta == {RELATED_TASK_KEY: {"taskId": task_id}}
        human.go.set()
        result = await client.task_result(task_id)
        assert result.text == "answer: 42"
        assert statuses == [TaskStatus.INPUT_REQUIRED, TaskStatus.WORKING, TaskStatus.COMPLETED]


async def test_elicitation_while_two_result_waiters_are_open(autojump_clock: Any) -> None:
    record, human = Record(), Human()
    async with kit_client(make_server(record), on_elicit=human) as client:
        task_id = (await client.call_tool_as_task("ask", {"question": "q"})).task.task_id
        answers: list[str] = []

        async def wait_result() -> None:
            answers.append((await client.task_result(task_id)).text)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_result)
            nursery.start_soon(wait_result)
            await trio.testing.wait_all_tasks_blocked()
            assert len(human.seen) == 1 and answers == []
            human.go.set()
        assert answers == ["answer: 42", "answer: 42"]


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_decline_and_cancel_reach_the_tool(action: str, autojump_clock: Any) -> None:
    human = Human(action=action)
    human.go.set()
    async with kit_client(make_server(Record()), on_elicit=human) as client:
        task_id = (await client.call_tool_as_task("ask", {"question": "q"})).task.task_id
        assert (await client.task_result(task_id)).text == f"action: {action}"


async def test_cancel_during_input_required_stops_waiting_at_once(autojump_clock: Any) -> None:
    record, human = Record(), Human()
    cancelled_requests: list[Any] = []
    async with kit_client(make_server(record), on_elicit=human) as client:
        original = client.on_notification

        async def spy(notification: Any) -> None:
            if notification.method == "notifications/cancelled":
                cancelled_requests.append(notification.params["requestId"])
            await original(notification)

        client.on_notification = spy  # type: ignore[method-assign]
        task_id = (await client.call_tool_as_task("ask", {"question": "q"})).task.task_id
        await trio.testing.wait_all_tasks_blocked()
        assert (await client.get_task(task_id)).status == TaskStatus.INPUT_REQUIRED
        assert (await client.cancel_task(task_id)).status == TaskStatus.CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert record.cancelled == 1 and record.cleaned_up == 1
        assert len(cancelled_requests) == 1  # the server withdrew its elicitation request
        human.go.set()  # a late answer changes nothing
        await trio.testing.wait_all_tasks_blocked()
        assert (await client.get_task(task_id)).status == TaskStatus.CANCELLED


async def test_client_disconnect_during_input_required_cancels_the_task(autojump_clock: Any) -> None:
    record, human = Record(), Human()
    async with open_harness(make_server(record)) as harness:
        async with harness.connect(on_elicit=human) as client:
            await client.call_tool_as_task("ask", {"question": "q"})
            await harness.settle()
            assert len(human.seen) == 1
        await harness.settle()
        assert record.cleaned_up == 1
        assert len(harness.runtime.supervisor.store) == 0
        harness.trace.assert_statuses("task-1", "working", "input_required")  # removed, never finished


async def test_progress_continues_across_input_required(autojump_clock: Any) -> None:
    human = Human()
    human.go.set()
    async with kit_client(make_server(Record()), on_elicit=human) as client:
        progress: list[ProgressParams] = []
        created = await client.call_tool_as_task("ask", {"question": "q"}, on_progress=progress.append)
        await client.task_result(created.task.task_id)
        assert [p.progress for p in progress] == [1, 2, 3]


async def test_without_the_capability_elicitation_is_refused(autojump_clock: Any) -> None:
    async with kit_client(make_server(Record())) as client:  # no on_elicit: not declared
        assert "elicitation" not in client.capabilities
        task_id = (await client.call_tool_as_task("ask", {"question": "q"})).task.task_id
        with pytest.raises(McpError) as info:
            await client.task_result(task_id)
        assert info.value.code == INVALID_REQUEST and "elicitation" in info.value.message
        task: Task = await client.get_task(task_id)
        assert task.status == TaskStatus.FAILED
        with pytest.raises(McpError):
            await client.call_tool("ask", {"question": "q"})


async def test_plain_call_elicits_as_an_ordinary_request(autojump_clock: Any) -> None:
    human = Human(answer="plain")
    human.go.set()
    async with kit_client(make_server(Record()), on_elicit=human) as client:
        result = await client.call_tool("ask", {"question": "q"})
        assert result.text == "answer: plain"
        assert human.seen[0].meta is None  # no task, no related-task metadata


async def test_sampling_from_a_task(autojump_clock: Any) -> None:
    asked: list[CreateMessageParams] = []

    async def model(params: CreateMessageParams) -> CreateMessageResult:
        asked.append(params)
        return CreateMessageResult(role="assistant", content={"type": "text", "text": "short"}, model="m-1")

    async with kit_client(make_server(Record()), on_sample=model) as client:
        task_id = (await client.call_tool_as_task("summarize", {"text": "long story"})).task.task_id
        assert (await client.task_result(task_id)).text == "m-1: short"
        [params] = asked
        assert params.max_tokens == 50
        assert params.messages[0].content == {"type": "text", "text": "Summarize: long story"}
        assert params.meta == {RELATED_TASK_KEY: {"taskId": task_id}}
