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
