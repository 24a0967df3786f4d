"""OpenTelemetry: a span per request and per task, and the request and task metrics, read back
from the OpenTelemetry SDK's in-memory exporter and reader."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import trio

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from trio_mcp import Server, connect_in_memory
from trio_mcp.protocol.errors import McpError

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_ID = "00f067aa0ba902b7"


class Otel:
    """In-memory OpenTelemetry SDK providers, and the server instrumented with them."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.server = Server("observed")
        self.server.instrument(tracer_provider=self.tracer_provider, meter_provider=self.meter_provider)
        inner = self.tracer_provider.get_tracer("tool")

        @self.server.tool
        async def slow(seconds: float) -> str:
            with inner.start_as_current_span("inside the tool"):
                await trio.sleep(seconds)
            return "done"

    def finished(self, name: str) -> list[ReadableSpan]:
        return [span for span in self.spans.get_finished_spans() if span.name == name]

    def metric(self, name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        assert data is not None
        return [
            point
            for resource in data.resource_metrics
            for scope in resource.scope_metrics
            for metric in scope.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]


@pytest.fixture
def otel() -> Iterator[Otel]:
    kit = Otel()
    yield kit
    kit.tracer_provider.shutdown()


async def test_a_tool_call_is_a_server_span_named_and_described_by_the_mcp_conventions(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    async with connect_in_memory(otel.server) as client:
        params = {
            "name": "slow",
            "arguments": {"seconds": 5},
            "_meta": {"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
        }
        await client.request("tools/call", params)
    [span] = otel.finished("tools/call slow")
    assert span.kind is SpanKind.SERVER
    attributes = dict(span.attributes or {})
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["gen_ai.tool.name"] == "slow"
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert "jsonrpc.request.id" in attributes
    # The client's trace context, from params._meta: the span continues the client's trace.
    assert span.context is not None and span.parent is not None
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert format(span.parent.span_id, "016x") == PARENT_ID
    # The tool's own spans nest in the request's.
    [inner] = otel.finished("inside the tool")
    assert inner.parent is not None and inner.parent.span_id == span.context.span_id
    # The duration histogram, on Trio's clock: the call took the tool's 5 s.
    [point] = [
        p for p in otel.metric("mcp.server.operation.duration") if p.attributes.get("gen_ai.tool.name")
    ]
    assert point.count == 1 and 5 <= point.sum < 6
    assert point.attributes["mcp.method.name"] == "tools/call"


async def test_an_error_answer_marks_the_span_and_counts_as_an_error(otel: Otel) -> None:
    async with connect_in_memory(otel.server) as client:
        with pytest.raises(McpError):
            await client.request("prompts/get", {"name": "nope"})
        await client.list_tools()
    errors = [s for s in otel.spans.get_finished_spans() if s.name.startswith("prompts/get")]
    [span] = errors
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes is not None and span.attributes["error.type"].startswith("-326")
    counts = {
        (p.attributes["mcp.method.name"], p.attributes["trio_mcp.outcome"]): p.value
        for p in otel.metric("trio_mcp.server.requests")
    }
    assert counts[("prompts/get", "error")] == 1
    assert counts[("tools/list", "ok")] == 1
    assert counts[("initialize", "ok")] == 1


async def test_a_task_has_its_own_span_linked_to_the_call_that_created_it(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    async with connect_in_memory(otel.server) as client:
        created = await client.call_tool_as_task("slow", {"seconds": 30})
        live = {p.attributes.get("mcp.task.status"): p.value for p in otel.metric("trio_mcp.tasks.live")}
        assert live == {None: 1}
        result = await client.task_result(created.task.task_id)
        assert not result.is_error
    [call] = otel.finished("tools/call slow")
    [task] = otel.finished("mcp.task slow")
    assert task.attributes is not None
    assert task.attributes["mcp.task.id"] == created.task.task_id
    assert task.attributes["mcp.task.status"] == "completed"
    assert call.context is not None and task.context is not None
    assert [link.context.span_id for link in task.links] == [call.context.span_id]
    assert task.end_time is not None and task.start_time is not None
    assert (task.end_time - task.start_time) >= 0
    # The task's tool runs in the task's span (the call's span ended with its CreateTaskResult).
    [inner] = otel.finished("inside the tool")
    assert inner.parent is not None and inner.parent.span_id == task.context.span_id
    assert [p.value for p in otel.metric("trio_mcp.tasks.live")] == [0]
    assert [p.value for p in otel.metric("trio_mcp.tasks.created")] == [1]
    finished = {p.attributes["mcp.task.status"]: p.value for p in otel.metric("trio_mcp.tasks.finished")}
    assert finished == {"completed": 1}
    [duration] = otel.metric("trio_mcp.task.duration")
    assert duration.count == 1 and 30 <= duration.sum < 31


async def test_a_cancelled_task_ends_its_span_as_cancelled(otel: Otel) -> None:
    async with connect_in_memory(otel.server) as client:
        created = await client.call_tool_as_task("slow", {"seconds": 3600})
        await client.cancel_task(created.task.task_id)
    [task] = otel.finished("mcp.task slow")
    assert task.attributes is not None and task.attributes["mcp.task.status"] == "cancelled"
    assert task.status.status_code is StatusCode.ERROR
    finished = {p.attributes["mcp.task.status"]: p.value for p in otel.metric("trio_mcp.tasks.finished")}
    assert finished == {"cancelled": 1}


def test_the_runtime_never_imports_opentelemetry_unless_asked() -> None:
    import subprocess
    import sys

    code = (
        "import sys, trio, trio_mcp\n"
        "from trio_mcp import Server, connect_in_memory\n"
        "server = Server('plain')\n"
        "@server.tool\n"
        "async def echo(text: str) -> str:\n"
        "    return text\n"
        "async def main():\n"
        "    async with connect_in_memory(server) as client:\n"
        "        await client.call_tool('echo', {'text': 'x'})\n"
        "trio.run(main)\n"
        "print(any(m.startswith('opentelemetry') for m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert trace.get_tracer_provider() is not None


async def test_a_request_the_client_cancels_ends_its_span_as_dropped(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    from test_surface import HELLO, served

    async with served(otel.server) as wire:
        await wire.call("initialize", HELLO)

        async def send(message: dict[str, Any]) -> None:
            await wire.transport.send(json.dumps({"jsonrpc": "2.0", **message}).encode())

        await send({"method": "notifications/initialized"})
        call = {"name": "slow", "arguments": {"seconds": 3600}}
        await send({"id": 99, "method": "tools/call", "params": call})
        await trio.sleep(1)
        await send({"method": "notifications/cancelled", "params": {"requestId": 99}})
        await trio.sleep(1)
        [span] = otel.finished("tools/call slow")
    assert span.attributes is not None and span.attributes["error.type"] == "cancelled"
    outcomes = {
        (p.attributes["mcp.method.name"], p.attributes["trio_mcp.outcome"]): p.value
        for p in otel.metric("trio_mcp.server.requests")
    }
    assert outcomes[("tools/call", "dropped")] == 1


# ----------------------------------------------------------------------------- store calls


def store_calls(otel: Otel, kind: str) -> dict[tuple[str, str | None], Any]:
    """The store latency histogram's points for ``kind``: by (operation, error type)."""
    return {
        (p.attributes["trio_mcp.store.operation"], p.attributes.get("error.type")): p
        for p in otel.metric("trio_mcp.store.operation.duration")
        if p.attributes["trio_mcp.store.kind"] == kind
    }


def store_errors(otel: Otel) -> dict[tuple[str, str, str], int]:
    return {
        (
            p.attributes["trio_mcp.store.kind"],
            p.attributes["trio_mcp.store.operation"],
            p.attributes["error.type"],
        ): p.value
        for p in otel.metric("trio_mcp.store.errors")
    }


def observed(otel: Otel, store: Any, limits: Any = None) -> Server:
    """A server on ``store``, instrumented like ``otel.server``, with the ``slow`` tool."""
    server = Server("observed-store", store=lambda: store, limits=limits)
    server.instrument(tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)

    @server.tool
    async def slow(seconds: float) -> str:
        await trio.sleep(seconds)
        return "done"

    return server


async def test_every_memory_store_call_is_timed_by_operation(otel: Otel) -> None:
    from trio_mcp.stores.memory import MemoryTaskStore

    async with connect_in_memory(observed(otel, MemoryTaskStore())) as client:
        created = await client.call_tool_as_task("slow", {"seconds": 0})
        await client.task_result(created.task.task_id)
        await client.list_tasks()
    calls = store_calls(otel, "memory")
    # In place (create, update: each status), and through the supervisor's reads (the start-up
    # sweep of expired records, tasks/list).
    assert {("create", None), ("update", None), ("due", None), ("page", None)} <= set(calls)
    assert calls[("create", None)].count == 1
    assert calls[("update", None)].count >= 1  # working -> completed
    assert all(point.sum >= 0 for point in calls.values())
    assert store_errors(otel) == {}


async def test_every_sqlite_store_call_is_timed_on_a_real_file(otel: Otel, tmp_path: Any) -> None:
    from trio_mcp.stores.sqlite import SqliteTaskStore

    store = SqliteTaskStore(str(tmp_path / "tasks.db"))
    async with connect_in_memory(observed(otel, store)) as client:
        created = await client.call_tool_as_task("slow", {"seconds": 0})
        await client.task_result(created.task.task_id)
        await client.get_task(created.task.task_id)
        await client.list_tasks()
    calls = store_calls(otel, "sqlite")
    assert {("create", None), ("update", None), ("get", None), ("page", None), ("due", None)} <= set(calls)
    # Real I/O, on a thread: each call took some time.
    assert calls[("create", None)].count == 1 and calls[("create", None)].sum > 0
    assert calls[("get", None)].sum > 0
    assert store_errors(otel) == {}


class FailingStore:
    """A store that waits (not in place), its calls failing as the test says: ``failures``
    maps an operation to how many of its next calls raise :class:`OSError`; ``stalls`` names
    the operations whose calls never answer (they pass the store's deadline)."""

    def __init__(self) -> None:
        from trio_mcp.stores.memory import MemoryTaskStore

        self.inner = MemoryTaskStore()
        self.failures: dict[str, int] = {}
        self.stalls: set[str] = set()

    async def _gate(self, operation: str) -> None:
        await trio.lowlevel.checkpoint()
        if operation in self.stalls:
            await trio.sleep_forever()
        left = self.failures.get(operation, 0)
        if left:
            self.failures[operation] = left - 1
            raise OSError(f"store down ({operation})")

    async def create(self, record: Any) -> None:
        await self._gate("create")
        self.inner.create_now(record)

    async def get(self, task_id: str) -> Any:
        await self._gate("get")
        return self.inner.peek(task_id)

    async def update(self, record: Any) -> bool:
        await self._gate("update")
        return self.inner.update_now(record)

    async def delete(self, task_id: str) -> Any:
        await self._gate("delete")
        return self.inner.delete_now(task_id)

    async def page(self, owner: str, cursor: str | None, limit: int) -> Any:
        await self._gate("page")
        return await self.inner.page(owner, cursor, limit)

    async def due(self, now: float, limit: int) -> Any:
        await self._gate("due")
        return await self.inner.due(now, limit)


async def test_failed_store_calls_are_counted_by_error_type(
    otel: Otel, autojump_clock: trio.testing.MockClock
) -> None:
    from trio_mcp.actors.supervisor import TaskLimits

    store = FailingStore()
    async with connect_in_memory(observed(otel, store, TaskLimits(store_timeout=2.0))) as client:
        created = await client.call_tool_as_task("slow", {"seconds": 1})
        store.failures["update"] = 2  # the writer tries again until it is stored
        assert not (await client.task_result(created.task.task_id)).is_error
        store.failures["page"] = 1
        with pytest.raises(McpError):
            await client.list_tasks()
        store.stalls.add("get")
        with pytest.raises(McpError):
            await client.get_task(created.task.task_id)
    errors = store_errors(otel)
    assert errors[("failing", "update", "OSError")] == 2
    assert errors[("failing", "page", "OSError")] == 1
    assert errors[("failing", "get", "timeout")] == 1
    calls = store_calls(otel, "failing")
    # The latency of a failed call is recorded with its error type; the retry that worked, without.
    assert calls[("update", "OSError")].count == 2
    assert calls[("update", None)].count >= 1
    [timeout] = [p for key, p in calls.items() if key == ("get", "timeout")]
    assert timeout.count == 1 and 2 <= timeout.sum < 3  # the store's deadline, on Trio's clock


# ----------------------------------------------------------------------------- mcp.session.id


async def test_request_spans_carry_the_http_session_id(otel: Otel) -> None:
    import httpx

    from trio_mcp.server import serve_http

    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}

    def rpc(id: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
        message: dict[str, Any] = {
            "jsonrpc": "2.0",
            "method": method,
            **({"params": params} if params else {}),
        }
        return json.dumps({**message, **({"id": id} if id is not None else {})}).encode()

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_http, otel.server)
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as http:
            response = await http.post(url, content=rpc(1, "initialize", hello), headers=headers)
            assert response.status_code == 200, response.text
            session_id = response.headers["mcp-session-id"]
            session = {**headers, "mcp-session-id": session_id, "mcp-protocol-version": "2025-11-25"}
            await http.post(url, content=rpc(None, "notifications/initialized"), headers=session)
            response = await http.post(url, content=rpc(2, "tools/list"), headers=session)
            assert response.status_code == 200, response.text
        with trio.fail_after(5):  # a span ends once its answer is handed to the transport
            while len(otel.finished("initialize") + otel.finished("tools/list")) < 2:  # noqa: ASYNC110
                await trio.sleep(0.01)
        nursery.cancel_scope.cancel()
    [initialize] = otel.finished("initialize")
    [listed] = otel.finished("tools/list")
    assert initialize.attributes is not None and listed.attributes is not None
    assert initialize.attributes["mcp.session.id"] == session_id
    assert listed.attributes["mcp.session.id"] == session_id
    # Never on a metric: one series per session would be unbounded.
    assert all("mcp.session.id" not in p.attributes for p in otel.metric("mcp.server.operation.duration"))


async def test_a_connection_without_a_session_id_records_none(otel: Otel) -> None:
    async with connect_in_memory(otel.server) as client:
        await client.list_tools()
    [listed] = otel.finished("tools/list")
    assert listed.attributes is not None and "mcp.session.id" not in listed.attributes
