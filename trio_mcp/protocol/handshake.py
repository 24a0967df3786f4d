"""The handshake-era dialect: MCP 2024-11-05 … 2025-11-25, with core tasks (SEP-1686) in 2025-11-25.

Sans-IO and per connection: it remembers what ``initialize`` agreed (version, the client's
capabilities, its log level) and decides everything a message means in this era — the
initialize gate, which methods exist in the negotiated version, whether a tool may or must run
as a task, what the client must have declared before the server asks it for input — and how
era-neutral outcomes (task records, tool results, errors) are written on this era's wire.

>>> from trio_mcp.protocol.jsonrpc import Request
>>> dialect = HandshakeDialect()
>>> dialect.interpret(Request(1, "tools/list"), lambda name: None)
ErrorValue(code=-32600, message="Invalid request: send 'initialize' first", data=None)
>>> dialect.interpret(Request(2, "ping"), lambda name: None)
Ping()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import _json
from .commands import (
    AwaitTaskResult,
    CancelRequest,
    CancelTask,
    Command,
    GetTask,
    Initialize,
    ListTasks,
    ListTools,
    Ping,
    SetLogLevel,
    call_tool_command,
)
from .converter import structure, unstructure
from .errors import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, ErrorValue, McpError
from .jsonrpc import Notification, Request, encode_notification_json
from .messages import (
    MODEL_IMMEDIATE_RESPONSE_KEY,
    RELATED_TASK_KEY,
    CallToolParams,
    CallToolResult,
    CancelledParams,
    Implementation,
    InitializeParams,
    InitializeResult,
    Meta,
    PaginatedParams,
    SetLevelParams,
    TaskIdParams,
    TaskSupport,
)
from .records import TaskOutcome, TaskRecord, task_fields
from .surface import SURFACE_METHODS, interpret_surface
from .versions import has_tasks, negotiate

__all__ = [
    "LEVELS",
    "RESOURCE_NOT_FOUND",
    "SERVER_TASK_CAPABILITIES",
    "HandshakeDialect",
    "ToolSupport",
    "level_passes",
    "log_params",
    "progress_token_of",
]

SERVER_TASK_CAPABILITIES: dict[str, Any] = {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}}
"""What a 2025-11-25 server declares under ``capabilities.tasks``."""

LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")

ToolSupport = Callable[[str], TaskSupport | None]
"""Looks a tool up by name: its ``taskSupport``, or None if there is no such tool."""

_ALWAYS = frozenset({"initialize", "ping"})
RESOURCE_NOT_FOUND = -32002
"""``resources/read`` of an unknown URI in the handshake era (2026-07-28 uses -32602)."""
_TASK_QUERIES: dict[str, type[GetTask | CancelTask | AwaitTaskResult]] = {
    "tasks/get": GetTask,
    "tasks/cancel": CancelTask,
    "tasks/result": AwaitTaskResult,
}


_STATUS_PREFIX = encode_notification_json("notifications/tasks/status", b"")[:-1]


def _cannot_cancel(record: TaskRecord) -> ErrorValue:
    status = record.status.value
    return ErrorValue(INVALID_PARAMS, f"Cannot cancel task: already in terminal status '{status}'")


_TTL_ONLY = frozenset({"ttl"})

CallFields = tuple[str, dict[str, Any] | None, bool, int | None, Meta | None]
"""``tools/call`` params as the dialects use them: the tool's name, its arguments, whether a
task was asked for (a ``task`` object), that task's ``ttl``, and ``_meta``."""


def call_tool_fields(params: dict[str, Any] | None) -> CallFields:
    """``tools/call`` params (either era's), as :func:`~trio_mcp.protocol.converter.structure`
    reads them into :class:`CallToolParams` (McpError -32602 naming the field otherwise; other
    keys are ignored, as it ignores them). The common shape — a name, an arguments object, at
    most a ``task`` with at most an integer ``ttl``, a ``_meta`` object or none — is read
    directly, without the two objects.

    >>> call_tool_fields({"name": "echo", "arguments": {"text": "hi"}, "task": {"ttl": 60000}})
    ('echo', {'text': 'hi'}, True, 60000, None)
    >>> call_tool_fields({"name": "echo", "_meta": {"progressToken": 1}, "requestState": "s"})
    ('echo', None, False, None, {'progressToken': 1})
    """
    if type(params) is dict:
        name = params.get("name")
        arguments = params.get("arguments")
        task = params.get("task")
        meta = params.get("_meta")
        if (
            type(name) is str
            and (arguments is None or type(arguments) is dict)
            and (meta is None or type(meta) is dict)
        ):
            if task is None:
                return name, arguments, False, None, meta
            if type(task) is dict and task.keys() <= _TTL_ONLY:
                ttl = task.get("ttl")
                if ttl is None or type(ttl) is int:
                    return name, arguments, True, ttl, meta
    call = structure(params, CallToolParams)
    task_meta = call.task
    return (
        call.name,
        call.arguments,
        task_meta is not None,
        task_meta.ttl if task_meta is not None else None,
        call.meta,
    )


def log_params(threshold: str | None, level: str, data: Any, logger: str | None) -> dict[str, Any] | None:
    """``notifications/message`` params for a message at ``level``, or None when the client
    asked for no log (``threshold`` None) or for a higher level.

    >>> log_params("info", "error", "disk full", None)
    {'level': 'error', 'data': 'disk full'}
    """
    if threshold is None or not level_passes(level, threshold):
        return None
    params: dict[str, Any] = {"level": level, "data": data}
    if logger is not None:
        params["logger"] = logger
    return params


def level_passes(level: str, threshold: str) -> bool:
    """Whether a message at ``level`` passes a client's ``logging/setLevel`` threshold.

    >>> level_passes("error", "warning"), level_passes("debug", "info")
    (True, False)
    """
    return LEVELS.index(level) >= LEVELS.index(threshold)


def progress_token_of(meta: dict[str, Any] | None) -> int | str | None:
    """A request's ``_meta.progressToken``: a string or an integer (else -32602), or None."""
    if not meta or "progressToken" not in meta:
        return None
    token = meta["progressToken"]
    if isinstance(token, str) or type(token) is int:
        return token
    raise McpError(INVALID_PARAMS, "Invalid params at '_meta.progressToken': expected a string or an integer")


class HandshakeDialect:
    """One connection's handshake-era state and rules. Create one per connection."""

    era = "handshake"

    def __init__(self) -> None:
        self.version: str | None = None
        self.client_capabilities: dict[str, Any] = {}
        self.client_info: Implementation | None = None
        self.log_level: str | None = None
        self.tasks_enabled = False
        """Whether core tasks exist on this connection (negotiated 2025-11-25): decided once,
        by :meth:`initialize`."""
        self._last_status: tuple[TaskRecord, bytes] | None = None

    # -- what the connection agreed ---------------------------------------------------------
    @property
    def initialized(self) -> bool:
        return self.version is not None

    # -- reading ----------------------------------------------------------------------------
    def interpret(self, request: Request, tool_support: ToolSupport) -> Command | ErrorValue:
        """What ``request`` asks for in this era, or the error to answer it with."""
        try:
            method, params = request.method, request.params
            query = _TASK_QUERIES.get(method)
            if query is not None and self.tasks_enabled:
                # The busiest requests: params of exactly ``{"taskId": "..."}`` need no converter.
                if type(params) is dict and len(params) == 1 and type(task_id := params.get("taskId")) is str:
                    return query(task_id)
                return query(structure(params, TaskIdParams).task_id)
            if method == "tools/call" and self.version is not None:  # the next busiest
                return self._call_tool(params, tool_support)
            return self._interpret(method, params, tool_support)
        except McpError as exc:
            return exc.value

    def _interpret(self, method: str, params: Any, tool_support: ToolSupport) -> Command | ErrorValue:
        if self.version is None and method not in _ALWAYS:
            return ErrorValue(INVALID_REQUEST, "Invalid request: send 'initialize' first")
        if method == "ping":
            return Ping()
        if method == "initialize":
            if self.version is not None:
                return ErrorValue(INVALID_REQUEST, "Invalid request: already initialized")
            init = structure(params, InitializeParams)
            return Initialize(init.protocol_version, init.capabilities, init.client_info)
        if method == "tools/list":
            return ListTools(structure(params, PaginatedParams).cursor)
        if method == "tools/call":
            return self._call_tool(params, tool_support)
        if method == "logging/setLevel":
            return SetLogLevel(structure(params, SetLevelParams).level)
        if method in SURFACE_METHODS:
            return interpret_surface(method, params)
        if method == "tasks/list" and self.tasks_enabled:
            return ListTasks(structure(params, PaginatedParams).cursor)
        return ErrorValue(METHOD_NOT_FOUND, f"Method not found: {method}")

    def _call_tool(self, params: dict[str, Any] | None, tool_support: ToolSupport) -> Command | ErrorValue:
        name, arguments, asked, ttl, meta = call_tool_fields(params)
        token = progress_token_of(meta) if meta is not None else None
        support = tool_support(name)
        if support is None:
            return ErrorValue(INVALID_PARAMS, f"Unknown tool: '{name}'")
        # ``"task": null`` is no task: a plain call. Before 2025-11-25 ``task`` means nothing.
        as_task = asked and self.tasks_enabled
        if as_task and support == "forbidden":
            return ErrorValue(METHOD_NOT_FOUND, f"Tool '{name}' does not support task-augmented calls")
        if not as_task and support == "required" and self.tasks_enabled:
            return ErrorValue(METHOD_NOT_FOUND, f"Tool '{name}' must be called as a task")
        # CallTool(name, arguments, progress_token, as_task, ttl_ms) of this era: no server-directed
        # task (auto_task), no input responses or request state (the modern era's retries).
        return call_tool_command(name, arguments, token, as_task, ttl if as_task else None, False, None, None)

    def interpret_notification(self, notification: Notification) -> CancelRequest | None:
        """``notifications/cancelled`` for a request id; None for anything needing no action."""
        if notification.method != "notifications/cancelled":
            return None  # notifications/initialized and unknown notifications need no action
        try:
            params = structure(notification.params, CancelledParams)
        except McpError:
            return None
        return CancelRequest(params.request_id) if params.request_id is not None else None

    # -- the handshake -----------------------------------------------------------------------
    def initialize(
        self,
        command: Initialize,
        server_info: Implementation,
        instructions: str | None,
        server_capabilities: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Agree on a version; the InitializeResult to answer with (``server_capabilities``:
        what the server offers, default tools and logging; tasks are added for 2025-11-25)."""
        self.version = negotiate(command.protocol_version)
        self.tasks_enabled = has_tasks(self.version)
        self.client_capabilities = command.capabilities
        self.client_info = command.client_info
        capabilities: dict[str, Any] = dict(
            server_capabilities or {"tools": {"listChanged": False}, "logging": {}}
        )
        if self.tasks_enabled:
            capabilities["tasks"] = SERVER_TASK_CAPABILITIES
        result = InitializeResult(
            protocol_version=self.version,
            capabilities=capabilities,
            server_info=server_info,
            instructions=instructions,
        )
        data: dict[str, Any] = unstructure(result)
        return data

    def set_log_level(self, command: SetLogLevel) -> dict[str, Any]:
        self.log_level = command.level
        return {}

    # -- writing results ---------------------------------------------------------------------
    @staticmethod
    def complete(result: dict[str, Any]) -> dict[str, Any]:
        """A finished result as this era writes it: unchanged (no ``resultType`` here)."""
        return result

    @staticmethod
    def render_task(record: TaskRecord) -> dict[str, Any]:
        """The 2025-11-25 ``Task`` object (``tasks/get``, ``tasks/cancel``, status notifications)."""
        return task_fields(record, ttl_key="ttl", poll_interval_key="pollInterval")

    @staticmethod
    def task_json(record: TaskRecord) -> bytes:
        """:meth:`render_task` as JSON text (the answer to ``tasks/get``), byte for byte what
        the encoder writes of it. A task with an id JSON needs no escape for (every id this
        runtime makes: printable ASCII) is written from a template, its status message, if any,
        encoded alone."""
        task_id = record.task_id
        ttl = record.ttl_ms
        poll = record.poll_interval_ms
        if (
            type(ttl) is int
            and (poll is None or type(poll) is int)
            and task_id.isascii()
            and task_id.isprintable()
            and '"' not in task_id
            and "\\" not in task_id
        ):
            head = (
                f'{{"taskId":"{task_id}","status":"{record.status}","createdAt":"{record.created_text}",'
                f'"lastUpdatedAt":"{record.updated_text}","ttl":{ttl}'
            ).encode()
            message = record.status_message
            if message is not None:
                head += b',"statusMessage":' + _json.dumps(message)
            return head + b"}" if poll is None else head + b',"pollInterval":%d}' % poll
        return _json.dumps(task_fields(record, ttl_key="ttl", poll_interval_key="pollInterval"))

    def cancelled_json(self, record: TaskRecord, was_terminal: bool) -> bytes | ErrorValue:
        """``tasks/cancel``: the cancelled task as JSON text (the text of its status
        notification, which went out just before, when there was one), or -32602 if it had
        already ended."""
        if was_terminal:
            return _cannot_cancel(record)
        written = self._last_status
        if written is not None and written[0] is record:
            return written[1]
        return self.task_json(record)

    def status_json(self, record: TaskRecord) -> bytes:
        """The whole ``notifications/tasks/status`` message for ``record`` (encoded). The
        task's text is remembered until the next one, for the answer to the cancel that
        made it."""
        task = self.task_json(record)
        self._last_status = (record, task)
        return _STATUS_PREFIX + task + b"}"

    def render_created(self, record: TaskRecord, immediate_response: str | None) -> dict[str, Any]:
        """The ``CreateTaskResult`` answering a task-augmented request: ``{"task": …}``. (The
        task is written afresh, not kept with the record: most tasks are never polled.)"""
        result: dict[str, Any] = {"task": self.render_task(record)}
        if immediate_response:
            result["_meta"] = {MODEL_IMMEDIATE_RESPONSE_KEY: immediate_response}
        return result

    def created_json(self, record: TaskRecord, immediate_response: str | None) -> bytes:
        """:meth:`render_created` as JSON text."""
        if immediate_response:
            return _json.dumps(self.render_created(record, immediate_response))
        return b'{"task":' + self.task_json(record) + b"}"

    def render_page(self, records: list[TaskRecord], next_cursor: str | None) -> dict[str, Any]:
        result: dict[str, Any] = {"tasks": [self.render_task(r) for r in records]}
        if next_cursor is not None:
            result["nextCursor"] = next_cursor
        return result

    @staticmethod
    def render_outcome(task_id: str, outcome: TaskOutcome) -> dict[str, Any] | ErrorValue:
        """``tasks/result``: what the request would have answered, tagged with the related task."""
        if outcome.result is None:
            assert outcome.error is not None
            return outcome.error
        result = dict(outcome.result)
        result["_meta"] = {**result.get("_meta", {}), RELATED_TASK_KEY: {"taskId": task_id}}
        return result

    @staticmethod
    def settle_tool_result(result: CallToolResult) -> TaskOutcome:
        """How a tool result ends its task in this era: an ``isError`` result fails it."""
        return TaskOutcome(
            result=unstructure(result),
            failed=result.is_error,
            message=result.text if result.is_error else None,
        )

    @staticmethod
    def related_task(task_id: str) -> dict[str, Any]:
        """The ``_meta`` that ties a message to the task it belongs to."""
        return {RELATED_TASK_KEY: {"taskId": task_id}}

    @staticmethod
    def resource_not_found(uri: str) -> ErrorValue:
        """``resources/read`` of an unknown URI: -32002 in this era."""
        return ErrorValue(RESOURCE_NOT_FOUND, "Resource not found", {"uri": uri})

    @staticmethod
    def cacheable(result: dict[str, Any]) -> dict[str, Any]:
        """List and read results as this era writes them: no caching hints."""
        return result

    # -- what the server may send ------------------------------------------------------------
    def log_message(self, level: str, data: Any, logger: str | None) -> dict[str, Any] | None:
        """``notifications/message`` params if ``level`` passes the client's level, else None."""
        return log_params(self.log_level, level, data, logger)

    def input_request(
        self, capability: str, method: str, params: dict[str, Any], task_id: str | None
    ) -> tuple[str, dict[str, Any]] | ErrorValue:
        """A server→client request for input (elicitation, sampling), or why it may not be sent."""
        if capability not in self.client_capabilities:
            return ErrorValue(
                INVALID_REQUEST, f"The client does not support {capability} (capability not declared)"
            )
        if task_id is not None:
            params = {**params, "_meta": self.related_task(task_id)}
        return method, params

    def client_accepts_task(self, kind: str, verb: str) -> bool:
        """Whether the client declared ``tasks.requests.<kind>.<verb>`` (e.g. elicitation.create)."""
        declared = self.client_capabilities.get("tasks", {})
        declared = declared.get("requests", {}) if isinstance(declared, dict) else {}
        declared = declared.get(kind, {}) if isinstance(declared, dict) else {}
        return isinstance(declared, dict) and verb in declared
