"""OpenTelemetry for a server: a span per request and per task, and the runtime's metrics.

Needs the ``opentelemetry-api`` package (``pip install 'trio-mcp[otel]'``); nothing else of
trio-mcp imports this module, so a server that does not ask for telemetry runs without it.
Switch it on with :meth:`Server.instrument() <trio_mcp.Server.instrument>` or
``Server(..., telemetry=True)``; spans and metrics then go to the global tracer and meter
providers the application configured (the OpenTelemetry SDK, an exporter), or to the ones
given to ``instrument``.

What is recorded follows the OpenTelemetry semantic conventions for MCP (``gen-ai/mcp.md``):

* a ``SERVER`` span per request, named ``{mcp.method.name} {target}`` (the tool or prompt name
  where there is one), with ``mcp.method.name``, ``jsonrpc.request.id``, ``gen_ai.tool.name``
  and ``gen_ai.operation.name`` (``execute_tool``) for a tool call, ``gen_ai.prompt.name``,
  ``mcp.resource.uri``, ``mcp.protocol.version`` where the request says it, ``mcp.session.id``
  for a request of a 2025-11-25 session that has an id (Streamable HTTP's ``Mcp-Session-Id``;
  stdio and WebSocket connections have none), and, for an error answer, ``error.type`` and
  ``rpc.response.status_code`` (the JSON-RPC code) with an error status. A request that
  carries W3C trace context in ``params._meta`` (``traceparent``, ``tracestate``) gets its
  span as a child of the client's; the tool's own code runs in the request's span, so spans it
  starts are its children.
* a span per task (``mcp.task {tool}``, ``INTERNAL``), from creation to its terminal status
  (``mcp.task.status``), linked to the span of the request that created it; a task's tool runs
  in it.
* metrics: ``mcp.server.operation.duration`` (histogram, seconds, by method, tool and
  ``error.type``), ``trio_mcp.server.requests`` (counter, by method and ``trio_mcp.outcome``:
  ``ok``, ``error`` or ``dropped``), ``trio_mcp.tasks.live`` (up-down counter),
  ``trio_mcp.tasks.created``, ``trio_mcp.tasks.finished`` (by ``mcp.task.status``),
  ``trio_mcp.task.duration`` (histogram, seconds), and for every task-store call (the store
  writer's, the supervisor's reads, a shared store's leases, events and queue):
  ``trio_mcp.store.operation.duration`` (histogram, seconds) and ``trio_mcp.store.errors``
  (counter), by ``trio_mcp.store.operation`` (``create``, ``get``, ``update``, ``delete``,
  ``page``, ``due``, ``hold``, ``release``, ``publish``, ``lapsed``, ``claim``, ``requeue``, …),
  ``trio_mcp.store.kind`` (``memory``, ``sqlite``, ``redis``: the store's class name) and, for
  a failed call, ``error.type`` (``timeout``, or the exception's class).

Durations are measured on Trio's clock (a test's ``MockClock`` drives them).

>>> from trio_mcp import Server
>>> server = Server("observed", telemetry=True)
>>> type(server.request_observer).__name__
'Telemetry'
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

import trio
from opentelemetry import context as otel_context
from opentelemetry import metrics, propagate, trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode

from ..actors._request import InboundRequest, current_request
from ..actors._session import current_session_id
from ..protocol.modern import PROTOCOL_VERSION_KEY

__all__ = ["Telemetry"]

_SCOPE = "trio_mcp"
_TERMINAL = frozenset({"completed", "failed", "cancelled"})


class _Live:
    """A request in flight: its span and when it was admitted (Trio's clock)."""

    __slots__ = ("attributes", "error", "makes_task", "span", "started")

    def __init__(
        self, span: trace.Span, started: float, attributes: dict[str, Any], makes_task: bool
    ) -> None:
        self.span = span
        self.started = started
        self.attributes = attributes
        self.error: int | None = None
        self.makes_task = makes_task
        """A tool call that may create a task, and has not yet been linked to one."""


class _LiveTask:
    __slots__ = ("span", "started")

    def __init__(self, span: trace.Span, started: float) -> None:
        self.span = span
        self.started = started


class Telemetry:
    """The server's :class:`~trio_mcp.actors._request.RequestObserver` recording OpenTelemetry
    spans and metrics (see the module's docstring); also a runtime tracer (task events), the
    task store's :class:`~trio_mcp.actors._observe.StoreObserver` and the wrapper of every
    tool's run. Made by :meth:`Server.instrument`."""

    def __init__(
        self,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> None:
        self.tracer = trace.get_tracer(_SCOPE, tracer_provider=tracer_provider)
        meter = metrics.get_meter(_SCOPE, meter_provider=meter_provider)
        self.duration = meter.create_histogram(
            "mcp.server.operation.duration",
            unit="s",
            description="MCP request duration as observed on the receiver, until the answer is sent.",
        )
        self.requests = meter.create_counter(
            "trio_mcp.server.requests", unit="{request}", description="Requests served, by outcome."
        )
        self.tasks_live = meter.create_up_down_counter(
            "trio_mcp.tasks.live", unit="{task}", description="Tasks not yet terminal."
        )
        self.tasks_created = meter.create_counter(
            "trio_mcp.tasks.created", unit="{task}", description="Tasks created."
        )
        self.tasks_finished = meter.create_counter(
            "trio_mcp.tasks.finished", unit="{task}", description="Tasks that reached a terminal status."
        )
        self.task_duration = meter.create_histogram(
            "trio_mcp.task.duration", unit="s", description="A task's life, from creation to its end."
        )
        self.store_duration = meter.create_histogram(
            "trio_mcp.store.operation.duration",
            unit="s",
            description="Task store calls: how long each took, by operation and store kind.",
            explicit_bucket_boundaries_advisory=_STORE_BUCKETS,
        )
        self.store_errors = meter.create_counter(
            "trio_mcp.store.errors",
            unit="{error}",
            description="Task store calls that failed, by error type.",
        )
        self._requests: dict[InboundRequest, _Live] = {}
        self._tasks: dict[str, _LiveTask] = {}
        self._store_attributes: dict[tuple[str, str, str | None], dict[str, str]] = {}

    # -- RequestObserver ------------------------------------------------------------------
    def admitted(self, request: InboundRequest) -> None:
        message = request.message
        method = message.method
        params = message.params if isinstance(message.params, dict) else {}
        attributes: dict[str, Any] = {"mcp.method.name": method, "jsonrpc.request.id": str(message.id)}
        target = None
        if method == "tools/call" and isinstance(params.get("name"), str):
            target = attributes["gen_ai.tool.name"] = params["name"]
            attributes["gen_ai.operation.name"] = "execute_tool"
        elif method == "prompts/get" and isinstance(params.get("name"), str):
            target = attributes["gen_ai.prompt.name"] = params["name"]
        elif method.startswith("resources/") and isinstance(params.get("uri"), str):
            attributes["mcp.resource.uri"] = params["uri"]
        meta = params.get("_meta")
        meta = meta if isinstance(meta, dict) else {}
        version = meta.get(PROTOCOL_VERSION_KEY)
        if version is None:  # 2025-11-25 and before: the connection's session, where it has an id
            session_id = current_session_id.get()
            if session_id is not None:
                attributes["mcp.session.id"] = session_id
        if method == "initialize":
            version = params.get("protocolVersion")
        if isinstance(version, str):
            attributes["mcp.protocol.version"] = version
        parent = propagate.extract({k: v for k, v in meta.items() if isinstance(v, str)}) if meta else None
        span = self.tracer.start_span(
            f"{method} {target}" if target else method, parent, kind=SpanKind.SERVER, attributes=attributes
        )
        metric_attributes = {k: attributes[k] for k in _METRIC_KEYS if k in attributes}
        makes_task = (
            target is not None and method == "tools/call" and ("task" in params or version is not None)
        )
        self._requests[request] = _Live(span, trio.current_time(), metric_attributes, makes_task)

    def answered(self, request: InboundRequest, error: int | None) -> None:
        live = self._requests.get(request)
        if live is None or error is None:
            return
        live.error = error
        code = str(error)
        live.span.set_attribute("error.type", code)
        live.span.set_attribute("rpc.response.status_code", code)
        live.span.set_status(Status(StatusCode.ERROR))
        live.attributes["error.type"] = code
        live.attributes["rpc.response.status_code"] = code

    def written(self, request: InboundRequest) -> None:
        self._end(request, "error" if self._error_of(request) else "ok")

    def dropped(self, request: InboundRequest) -> None:
        live = self._requests.get(request)
        if live is not None and live.error is None:
            live.span.set_attribute("error.type", "cancelled")
            live.span.set_status(Status(StatusCode.ERROR, "no answer was sent"))
            live.attributes["error.type"] = "cancelled"
        self._end(request, "dropped")

    def _error_of(self, request: InboundRequest) -> bool:
        live = self._requests.get(request)
        return live is not None and live.error is not None

    def _end(self, request: InboundRequest, outcome: str) -> None:
        live = self._requests.pop(request, None)
        if live is None:
            return
        live.span.end()
        self.duration.record(trio.current_time() - live.started, live.attributes)
        method = {"mcp.method.name": live.attributes["mcp.method.name"], "trio_mcp.outcome": outcome}
        self.requests.add(1, method)

    # -- the runtime's tracer: task events -------------------------------------------------
    def trace_event(self, kind: str, fields: dict[str, Any]) -> None:
        """A runtime tracer (see :mod:`trio_mcp.actors.trace`): task spans and task metrics."""
        if kind == "task.created":
            self._task_created(str(fields["task_id"]))
        elif kind == "task.transition":
            status = str(fields["status"])
            if status in _TERMINAL:
                self._task_ended(str(fields["task_id"]), status)
            else:
                live = self._tasks.get(str(fields["task_id"]))
                if live is not None:
                    live.span.add_event("mcp.task.status", {"mcp.task.status": status})
        elif kind in ("task.expired", "task.removed"):
            self._task_ended(str(fields["task_id"]), "expired" if kind == "task.expired" else "removed")

    def _task_created(self, task_id: str) -> None:
        links: list[Link] = []
        origin = self._origin()
        if origin is not None:
            links.append(Link(origin.span.get_span_context()))
        attributes: dict[str, Any] = {"mcp.task.id": task_id}
        if origin is not None:
            tool = origin.attributes.get("gen_ai.tool.name")
            if tool is not None:
                attributes["gen_ai.tool.name"] = tool
        name = (
            f"mcp.task {attributes['gen_ai.tool.name']}" if "gen_ai.tool.name" in attributes else "mcp.task"
        )
        span = self.tracer.start_span(name, kind=SpanKind.INTERNAL, links=links, attributes=attributes)
        self._tasks[task_id] = _LiveTask(span, trio.current_time())
        self.tasks_created.add(1)
        self.tasks_live.add(1)

    def _origin(self) -> _Live | None:
        """The request creating a task now: the one whose context the creation runs in, else
        the oldest task-making call still unlinked (the supervisor creates tasks in the order
        their calls were admitted)."""
        request = current_request.get()
        live = self._requests.get(request) if request is not None else None
        if live is None:
            live = next((live for live in self._requests.values() if live.makes_task), None)
        if live is not None:
            live.makes_task = False
        return live

    def _task_ended(self, task_id: str, status: str) -> None:
        live = self._tasks.pop(task_id, None)
        if live is None:
            return
        live.span.set_attribute("mcp.task.status", status)
        if status != "completed":
            live.span.set_status(Status(StatusCode.ERROR, status))
        live.span.end()
        self.tasks_live.add(-1)
        self.tasks_finished.add(1, {"mcp.task.status": status})
        self.task_duration.record(trio.current_time() - live.started, {"mcp.task.status": status})

    # -- StoreObserver: every task-store call ------------------------------------------------
    def store_call(self, kind: str, operation: str, seconds: float, error: Exception | None) -> None:
        """A task-store call ended (see :mod:`trio_mcp.actors._observe`): its latency, and its
        error if it failed."""
        error_type = None if error is None else _error_type(error)
        key = (kind, operation, error_type)
        attributes = self._store_attributes.get(key)
        if attributes is None:
            attributes = {"trio_mcp.store.kind": kind, "trio_mcp.store.operation": operation}
            if error_type is not None:
                attributes["error.type"] = error_type
            self._store_attributes[key] = attributes
        self.store_duration.record(seconds, attributes)
        if error_type is not None:
            self.store_errors.add(1, attributes)

    # -- a tool's run ---------------------------------------------------------------------
    def wrap_tool(self, tool: object, running: Awaitable[Any], task_id: str | None) -> Awaitable[Any]:
        """``running`` (the tool's coroutine) run inside its task's span, or its request's."""
        span: trace.Span | None = None
        if task_id is None:  # a task's work runs in a Trio task named after it
            task_id = trio.lowlevel.current_task().name
        if task_id in self._tasks:
            span = self._tasks[task_id].span
        else:
            request = current_request.get()
            live = self._requests.get(request) if request is not None else None
            if live is not None:
                span = live.span
        if span is None:
            return running
        return _in_span(span, running)


async def _in_span(span: trace.Span, running: Awaitable[Any]) -> Any:
    token = otel_context.attach(trace.set_span_in_context(span))
    try:
        return await running
    finally:
        otel_context.detach(token)


def _error_type(error: Exception) -> str:
    """``error.type`` of a failed store call: ``timeout`` for a deadline that passed, else the
    exception's class, fully qualified (``sqlite3.OperationalError``; a builtin's bare name)."""
    if isinstance(error, trio.TooSlowError):
        return "timeout"
    cls = type(error)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"


_STORE_BUCKETS = (
    0.0001,
    0.00025,
    0.0005,
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
)
"""Seconds: a memory store's calls take microseconds, a database's milliseconds, a stalled
one up to the store's deadline."""

_METRIC_KEYS = ("mcp.method.name", "gen_ai.tool.name", "gen_ai.prompt.name", "mcp.protocol.version")
