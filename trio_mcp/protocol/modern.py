"""The modern-era dialect: MCP 2026-07-28, stateless, with the tasks extension (SEP-2663).

No ``initialize``: every request carries its own envelope in ``params._meta`` (the protocol
version and the client's capabilities, optionally its info and a log level), so a request is
understood on its own. :meth:`ModernDialect.interpret` checks the envelope and turns the request
into an era-neutral command plus a :class:`ModernScope`, which writes that request's answers:
``resultType`` on every result, ``serverInfo`` in result ``_meta``, the flat
``CreateTaskResult``, the ``DetailedTask`` of ``tasks/get``, and ``InputRequiredResult``.

>>> from trio_mcp.protocol.jsonrpc import Request
>>> from trio_mcp.protocol.messages import Implementation
>>> dialect = ModernDialect(Implementation("demo", "1.0"), None)
>>> dialect.interpret(Request(1, "tools/list", {"_meta": {}}), lambda name: None).code
-32602
>>> envelope = {PROTOCOL_VERSION_KEY: "2026-07-28", CLIENT_CAPABILITIES_KEY: {}}
>>> command, scope = dialect.interpret(Request(2, "server/discover", {"_meta": envelope}), lambda n: None)
>>> command
Discover()
"""

from __future__ import annotations

from typing import Any

from . import _json
from .commands import (
    CallTool,
    CancelRequest,
    CancelTask,
    Command,
    Discover,
    GetTask,
    Listen,
    ListTools,
    UpdateTask,
    call_tool_command,
)
from .converter import structure, unstructure
from .errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    MISSING_REQUIRED_CLIENT_CAPABILITY,
    UNSUPPORTED_PROTOCOL_VERSION,
    ErrorValue,
    McpError,
)
from .handshake import LEVELS, ToolSupport, call_tool_fields, log_params, progress_token_of
from .jsonrpc import Notification, Request
from .messages import (
    RELATED_TASK_KEY,
    CallToolResult,
    CancelledParams,
    Implementation,
    PaginatedParams,
    TaskIdParams,
)
from .records import TaskOutcome, TaskRecord, task_fields
from .surface import SURFACE_METHODS, interpret_surface
from .tasks import TaskStatus
from .versions import MODERN_VERSIONS

__all__ = [
    "CLIENT_CAPABILITIES_KEY",
    "CLIENT_INFO_KEY",
    "LOG_LEVEL_KEY",
    "PROTOCOL_VERSION_KEY",
    "REMOVED_METHODS",
    "SERVER_INFO_KEY",
    "SUBSCRIPTION_ID_KEY",
    "TASKS_EXTENSION",
    "ModernDialect",
    "ModernScope",
    "is_modern",
    "requires_tasks_extension",
]

PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO_KEY = "io.modelcontextprotocol/clientInfo"
LOG_LEVEL_KEY = "io.modelcontextprotocol/logLevel"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SUBSCRIPTION_ID_KEY = "io.modelcontextprotocol/subscriptionId"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"

REMOVED_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "resources/unsubscribe",
        "tasks/result",
        "tasks/list",
    }
)
"""Methods of the handshake era that 2026-07-28 removed: answered -32601."""

DEFAULT_LIST_TTL_MS = 0
"""``ttlMs`` on cacheable results: 0, "re-fetch whenever needed" (tools may change)."""


def is_modern(params: dict[str, Any] | None) -> bool:
    """Whether a message carries the modern envelope (a protocol version in ``_meta``)."""
    if not params:
        return False
    meta = params.get("_meta")
    return isinstance(meta, dict) and PROTOCOL_VERSION_KEY in meta


def requires_tasks_extension() -> ErrorValue:
    """-32021 naming the tasks extension as the capability the client lacks."""
    return ErrorValue(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"Missing required client capability: extensions.{TASKS_EXTENSION}",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


class ModernScope:
    """One modern-era request: what its envelope said, and how its answers are written."""

    era = "modern"

    def __init__(
        self,
        version: str,
        client_capabilities: dict[str, Any],
        client_info: dict[str, Any] | None,
        log_level: str | None,
        server_info: dict[str, Any],
    ) -> None:
        self.version = version
        self.client_capabilities = client_capabilities
        self.client_info = client_info
        self.log_level = log_level
        self._server_info = server_info

    @property
    def has_tasks_extension(self) -> bool:
        extensions = self.client_capabilities.get("extensions")
        return isinstance(extensions, dict) and isinstance(extensions.get(TASKS_EXTENSION), dict)

    # -- results ----------------------------------------------------------------------------
    def complete(self, result: dict[str, Any], result_type: str = "complete") -> dict[str, Any]:
        """``result`` with ``resultType`` and the server's identity in ``_meta``."""
        out = dict(result)
        out["resultType"] = result_type
        meta = out.get("_meta")
        out["_meta"] = (
            {**meta, SERVER_INFO_KEY: self._server_info}
            if isinstance(meta, dict)
            else {SERVER_INFO_KEY: self._server_info}
        )
        return out

    def cacheable(self, result: dict[str, Any]) -> dict[str, Any]:
        """A complete result with the caching hints cacheable results require."""
        return self.complete({**result, "ttlMs": DEFAULT_LIST_TTL_MS, "cacheScope": "public"})

    @staticmethod
    def _task(record: TaskRecord) -> dict[str, Any]:
        return task_fields(record, ttl_key="ttlMs", poll_interval_key="pollIntervalMs")

    def detailed_task(self, record: TaskRecord) -> dict[str, Any]:
        """The ``DetailedTask``: the task, plus ``inputRequests``, ``result`` or ``error``."""
        task = self._task(record)
        outcome = record.outcome
        if record.status == TaskStatus.INPUT_REQUIRED:
            task["inputRequests"] = dict(record.input_requests)
        elif record.status == TaskStatus.COMPLETED and outcome is not None and outcome.result is not None:
            task["result"] = outcome.result
        elif record.status == TaskStatus.FAILED and outcome is not None:
            if outcome.error is not None:
                task["error"] = outcome.error.to_json()
            else:  # a handshake-era task failed by an isError result, seen from this era
                message = record.status_message or "The tool reported an error"
                task["error"] = {
                    "code": INTERNAL_ERROR,
                    "message": message,
                    "data": {"result": outcome.result},
                }
        return task

    def render_task(self, record: TaskRecord) -> dict[str, Any]:
        """``tasks/get``: the DetailedTask as a complete result."""
        return self.complete(self.detailed_task(record))

    def task_json(self, record: TaskRecord) -> bytes:
        """:meth:`render_task` as JSON text (written each time: it carries the result)."""
        return _json.dumps(self.render_task(record))

    def cancelled_json(self, record: TaskRecord, was_terminal: bool) -> bytes | ErrorValue:
        """``tasks/cancel`` is an acknowledgement, whatever the task's state (JSON text)."""
        return _json.dumps(self.complete({}))

    def status_json(self, record: TaskRecord) -> bytes | None:
        """None: task notifications go only to ``subscriptions/listen`` streams in this era."""
        return None

    def render_created(self, record: TaskRecord, immediate_response: str | None) -> dict[str, Any]:
        """The flat ``CreateTaskResult`` (``resultType: "task"``)."""
        result = self._task(record)
        if immediate_response:
            result["_meta"] = {"io.modelcontextprotocol/model-immediate-response": immediate_response}
        return self.complete(result, "task")

    def created_json(self, record: TaskRecord, immediate_response: str | None) -> bytes:
        """:meth:`render_created` as JSON text."""
        return _json.dumps(self.render_created(record, immediate_response))

    def render_outcome(self, task_id: str, outcome: TaskOutcome) -> dict[str, Any] | ErrorValue:
        """A call answered with what it produced (no task was ever shown to the client)."""
        if outcome.result is None:
            assert outcome.error is not None
            return outcome.error
        return self.complete(outcome.result)

    @staticmethod
    def resource_not_found(uri: str) -> ErrorValue:
        """``resources/read`` of an unknown URI: -32602 naming it (SEP-2164)."""
        return ErrorValue(INVALID_PARAMS, f"Resource not found: {uri}", {"uri": uri})

    def tagged(
        self, subscription_id: int | str, method: str, params: dict[str, Any]
    ) -> tuple[str, dict[str, Any]]:
        """A notification of a ``subscriptions/listen`` stream, tagged with its subscription."""
        meta = {**(params.get("_meta") or {}), SUBSCRIPTION_ID_KEY: subscription_id}
        return method, {**params, "_meta": meta}

    def input_required(self, input_requests: dict[str, Any], request_state: str | None) -> dict[str, Any]:
        """``InputRequiredResult``: what the client must answer before retrying."""
        result: dict[str, Any] = {"inputRequests": input_requests}
        if request_state is not None:
            result["requestState"] = request_state
        return self.complete(result, "input_required")

    @staticmethod
    def settle_tool_result(result: CallToolResult) -> TaskOutcome:
        """An ``isError`` tool result *completes* its task in this era; only JSON-RPC errors fail it."""
        return TaskOutcome(result=unstructure(result))

    # -- subscriptions ------------------------------------------------------------------------
    @staticmethod
    def subscription_ack(subscription_id: int | str, honoured: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The first message of a ``subscriptions/listen`` stream: what it will carry."""
        params = {"notifications": honoured, "_meta": {SUBSCRIPTION_ID_KEY: subscription_id}}
        return "notifications/subscriptions/acknowledged", params

    def task_notification(self, subscription_id: int | str, record: TaskRecord) -> tuple[str, dict[str, Any]]:
        """``notifications/tasks``: the full DetailedTask, tagged with its subscription."""
        params = self.detailed_task(record)
        params["_meta"] = {SUBSCRIPTION_ID_KEY: subscription_id}
        return "notifications/tasks", params

    def listen_closed(self, subscription_id: int | str) -> dict[str, Any]:
        """The result that ends a ``subscriptions/listen`` stream gracefully."""
        return self.complete({"_meta": {SUBSCRIPTION_ID_KEY: subscription_id}})

    # -- what the server may send ------------------------------------------------------------
    def log_message(self, level: str, data: Any, logger: str | None) -> dict[str, Any] | None:
        """``notifications/message`` params if the request asked for ``level`` or lower, else None."""
        return log_params(self.log_level, level, data, logger)

    def input_request(
        self, capability: str, method: str, params: dict[str, Any], task_id: str | None
    ) -> tuple[str, dict[str, Any]] | ErrorValue:
        """An input request (carried in a result, never sent), or -32021 if not declared."""
        if not isinstance(self.client_capabilities.get(capability), dict):
            return ErrorValue(
                MISSING_REQUIRED_CLIENT_CAPABILITY,
                f"Missing required client capability: {capability}",
                {"requiredCapabilities": {capability: {}}},
            )
        return method, params

    @staticmethod
    def related_task(task_id: str) -> dict[str, Any]:
        return {RELATED_TASK_KEY: {"taskId": task_id}}

    def client_accepts_task(self, kind: str, verb: str) -> bool:
        """Clients host no tasks in this era (SEP-2260)."""
        return False


class ModernDialect:
    """The 2026-07-28 rules. Stateless: what a request means depends on the request alone."""

    era = "modern"

    def __init__(self, server_info: Implementation, instructions: str | None) -> None:
        self._server_info: dict[str, Any] = unstructure(server_info)
        self.instructions = instructions

    def interpret(
        self, request: Request, tool_support: ToolSupport
    ) -> tuple[Command, ModernScope] | ErrorValue:
        """The command ``request`` stands for, with its scope, or the error to answer."""
        try:
            return self._interpret(request, tool_support)
        except McpError as exc:
            return exc.value

    def _envelope(self, params: dict[str, Any] | None) -> ModernScope | ErrorValue:
        meta = params.get("_meta") if params else None
        if not isinstance(meta, dict):
            return ErrorValue(INVALID_PARAMS, f"Invalid params: '_meta' must carry '{PROTOCOL_VERSION_KEY}'")
        version = meta.get(PROTOCOL_VERSION_KEY)
        if not isinstance(version, str):
            return ErrorValue(INVALID_PARAMS, f"Invalid params: missing _meta['{PROTOCOL_VERSION_KEY}']")
        if version not in MODERN_VERSIONS:
            return ErrorValue(
                UNSUPPORTED_PROTOCOL_VERSION,
                f"Unsupported protocol version: {version}",
                {"supported": list(MODERN_VERSIONS), "requested": version},
            )
        capabilities = meta.get(CLIENT_CAPABILITIES_KEY)
        if not isinstance(capabilities, dict):
            return ErrorValue(INVALID_PARAMS, f"Invalid params: missing _meta['{CLIENT_CAPABILITIES_KEY}']")
        info = meta.get(CLIENT_INFO_KEY)
        level = meta.get(LOG_LEVEL_KEY)
        if level is not None and level not in LEVELS:
            return ErrorValue(INVALID_PARAMS, f"Invalid params: unknown log level {level!r}")
        return ModernScope(
            version, capabilities, info if isinstance(info, dict) else None, level, self._server_info
        )

    def _interpret(
        self, request: Request, tool_support: ToolSupport
    ) -> tuple[Command, ModernScope] | ErrorValue:
        method, params = request.method, request.params
        scope = self._envelope(params)
        if isinstance(scope, ErrorValue):
            return scope
        if method == "server/discover":
            return Discover(), scope
        if method == "tools/list":
            return ListTools(structure(params, PaginatedParams).cursor), scope
        if method == "tools/call":
            call = self._call_tool(params, tool_support, scope)
            return call if isinstance(call, ErrorValue) else (call, scope)
        if method in SURFACE_METHODS and method not in ("resources/subscribe", "resources/unsubscribe"):
            surface = interpret_surface(method, params)
            return surface if isinstance(surface, ErrorValue) else (surface, scope)
        if method == "subscriptions/listen":
            listen = self._listen(params, scope)
            return listen if isinstance(listen, ErrorValue) else (listen, scope)
        if method in ("tasks/get", "tasks/update", "tasks/cancel"):
            if not scope.has_tasks_extension:
                return requires_tasks_extension()
            task_id = structure(params, TaskIdParams).task_id
            if method == "tasks/get":
                return GetTask(task_id), scope
            if method == "tasks/cancel":
                return CancelTask(task_id), scope
            responses = (params or {}).get("inputResponses")
            if not isinstance(responses, dict):
                return ErrorValue(INVALID_PARAMS, "Invalid params at 'inputResponses': expected an object")
            for key, value in responses.items():
                if not isinstance(value, dict):
                    return ErrorValue(
                        INVALID_PARAMS, f"Invalid params at 'inputResponses.{key}': expected an object"
                    )
            return UpdateTask(task_id, responses), scope
        return ErrorValue(METHOD_NOT_FOUND, f"Method not found: {method}")

    @staticmethod
    def _listen(params: dict[str, Any] | None, scope: ModernScope) -> Listen | ErrorValue:
        wanted = (params or {}).get("notifications")
        if not isinstance(wanted, dict):
            return ErrorValue(INVALID_PARAMS, "Invalid params at 'notifications': expected an object")
        task_ids = wanted.get("taskIds")
        uris = wanted.get("resourceSubscriptions")
        for key, value in (("taskIds", task_ids), ("resourceSubscriptions", uris)):
            if value is not None and (
                not isinstance(value, list) or not all(isinstance(v, str) for v in value)
            ):
                return ErrorValue(
                    INVALID_PARAMS, f"Invalid params at 'notifications.{key}': expected strings"
                )
        if task_ids is not None and not scope.has_tasks_extension:
            return requires_tasks_extension()
        return Listen(
            tuple(dict.fromkeys(task_ids)) if task_ids is not None else None,
            tools_list_changed=wanted.get("toolsListChanged") is True,
            prompts_list_changed=wanted.get("promptsListChanged") is True,
            resources_list_changed=wanted.get("resourcesListChanged") is True,
            resource_uris=tuple(dict.fromkeys(uris)) if uris is not None else None,
        )

    def _call_tool(
        self, params: dict[str, Any] | None, tool_support: ToolSupport, scope: ModernScope
    ) -> CallTool | ErrorValue:
        name, arguments, _, _, meta = call_tool_fields(params)  # ``task`` means nothing in this era
        token = progress_token_of(meta)
        support = tool_support(name)
        if support is None:
            return ErrorValue(INVALID_PARAMS, f"Unknown tool: '{name}'")
        responses = (params or {}).get("inputResponses")
        state = (params or {}).get("requestState")
        if responses is not None and not isinstance(responses, dict):
            return ErrorValue(INVALID_PARAMS, "Invalid params at 'inputResponses': expected an object")
        if state is not None and not isinstance(state, str):
            return ErrorValue(INVALID_PARAMS, "Invalid params at 'requestState': expected a string")
        # CallTool(name, arguments, progress_token, as_task, ttl_ms, auto_task, input_responses,
        # request_state): no client-asked ttl in this era.
        if support == "required":
            if not scope.has_tasks_extension:
                return requires_tasks_extension()
            return call_tool_command(name, arguments, token, True, None, False, responses, state)
        auto = support == "optional" and scope.has_tasks_extension
        return call_tool_command(name, arguments, token, False, None, auto, responses, state)

    @staticmethod
    def interpret_notification(notification: Notification) -> CancelRequest | None:
        """``notifications/cancelled`` for an in-flight request; None for anything else."""
        if notification.method != "notifications/cancelled":
            return None
        try:
            params = structure(notification.params, CancelledParams)
        except McpError:
            return None
        return CancelRequest(params.request_id) if params.request_id is not None else None

    def discover(self, scope: ModernScope, capabilities: dict[str, Any]) -> dict[str, Any]:
        """The ``server/discover`` result."""
        result: dict[str, Any] = {
            "supportedVersions": list(MODERN_VERSIONS),
            "capabilities": {**capabilities, "extensions": {TASKS_EXTENSION: {}}},
        }
        if self.instructions is not None:
            result["instructions"] = self.instructions
        return scope.cacheable(result)
