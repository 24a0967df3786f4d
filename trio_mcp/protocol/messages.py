"""MCP message bodies used by trio-mcp, as frozen attrs classes.

Python names are snake_case; :mod:`trio_mcp.protocol.converter` maps them to the wire's
camelCase (and ``meta`` to ``_meta``), omits absent optional fields and ignores unknown ones.
Capabilities stay plain dicts: they are open-ended maps of ``{}`` objects.
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from .tasks import TaskStatus

__all__ = [
    "CONTENT_TYPES",
    "MODEL_IMMEDIATE_RESPONSE_KEY",
    "RELATED_TASK_KEY",
    "AudioContent",
    "CallToolParams",
    "CallToolResult",
    "CancelledParams",
    "ContentBlock",
    "CreateMessageParams",
    "CreateMessageResult",
    "CreateTaskResult",
    "DetailedTask",
    "ElicitAction",
    "ElicitRequestParams",
    "ElicitResult",
    "ElicitUrlRequestParams",
    "EmbeddedResource",
    "ImageContent",
    "Implementation",
    "InitializeParams",
    "InitializeResult",
    "ListTasksResult",
    "ListToolsResult",
    "LoggingLevel",
    "LoggingMessageParams",
    "Meta",
    "PaginatedParams",
    "ProgressParams",
    "ProgressToken",
    "ResourceLink",
    "SamplingMessage",
    "SetLevelParams",
    "Task",
    "TaskIdParams",
    "TaskMetadata",
    "TaskSupport",
    "TextContent",
    "Tool",
    "ToolExecution",
]

Meta = dict[str, Any]
ProgressToken = int | str
TaskSupport = Literal["forbidden", "optional", "required"]
LoggingLevel = Literal["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]

RELATED_TASK_KEY = "io.modelcontextprotocol/related-task"
MODEL_IMMEDIATE_RESPONSE_KEY = "io.modelcontextprotocol/model-immediate-response"


@attrs.frozen
class Implementation:
    name: str
    version: str
    title: str | None = None


@attrs.frozen
class InitializeParams:
    protocol_version: str
    client_info: Implementation
    capabilities: dict[str, Any] = attrs.Factory(dict)
    meta: Meta | None = None


@attrs.frozen
class InitializeResult:
    protocol_version: str
    capabilities: dict[str, Any]
    server_info: Implementation
    instructions: str | None = None
    meta: Meta | None = None


@attrs.frozen
class ToolExecution:
    task_support: TaskSupport | None = None


@attrs.frozen
class Tool:
    name: str
    input_schema: dict[str, Any]
    title: str | None = None
    description: str | None = None
    output_schema: dict[str, Any] | None = None
    annotations: dict[str, Any] | None = None
    execution: ToolExecution | None = None
    meta: Meta | None = None

    @property
    def task_support(self) -> TaskSupport:
        """``execution.taskSupport``, with absence meaning ``"forbidden"`` as the spec says."""
        if self.execution is None or self.execution.task_support is None:
            return "forbidden"
        return self.execution.task_support


@attrs.frozen
class PaginatedParams:
    cursor: str | None = None
    meta: Meta | None = None


@attrs.frozen
class ListToolsResult:
    tools: list[Tool]
    next_cursor: str | None = None
    meta: Meta | None = None


@attrs.frozen
class TaskMetadata:
    """The ``task`` field of a task-augmented request: ``ttl`` in milliseconds, or absent."""

    ttl: int | None = None


@attrs.frozen
class CallToolParams:
    name: str
    arguments: dict[str, Any] | None = None
    task: TaskMetadata | None = None
    meta: Meta | None = None


# Content blocks. ``type`` is always written (the converter never omits it).
@attrs.frozen
class TextContent:
    text: str
    type: Literal["text"] = "text"
    annotations: dict[str, Any] | None = None
    meta: Meta | None = None


@attrs.frozen
class ImageContent:
    data: str
    mime_type: str
    type: Literal["image"] = "image"
    annotations: dict[str, Any] | None = None
    meta: Meta | None = None


@attrs.frozen
class AudioContent:
    data: str
    mime_type: str
    type: Literal["audio"] = "audio"
    annotations: dict[str, Any] | None = None
    meta: Meta | None = None


@attrs.frozen
class ResourceLink:
    uri: str
    name: str
    type: Literal["resource_link"] = "resource_link"
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    annotations: dict[str, Any] | None = None
    meta: Meta | None = None


@attrs.frozen
class EmbeddedResource:
    resource: dict[str, Any]
    type: Literal["resource"] = "resource"
    annotations: dict[str, Any] | None = None
    meta: Meta | None = None


ContentBlock = TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource
CONTENT_TYPES: dict[str, type[Any]] = {
    "text": TextContent,
    "image": ImageContent,
    "audio": AudioContent,
    "resource_link": ResourceLink,
    "resource": EmbeddedResource,
}


@attrs.frozen
class CallToolResult:
    content: list[ContentBlock] = attrs.Factory(list)
    structured_content: dict[str, Any] | None = None
    is_error: bool = False
    meta: Meta | None = None

    @property
    def text(self) -> str:
        """All text blocks joined by newlines: handy in tests and scripts."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextContent))


@attrs.frozen
class Task:
    """A task as the 2025-11-25 wire shows it (``tasks/get`` answers these fields flat)."""

    task_id: str
    status: TaskStatus
    created_at: str
    last_updated_at: str
    ttl: int | None
    status_message: str | None = None
    poll_interval: int | None = None


@attrs.frozen
class DetailedTask:
    """A task as the 2026-07-28 tasks extension shows it (``tasks/get``, ``CreateTaskResult``):
    its state, plus the pending ``input_requests``, the ``result`` or the ``error`` inline."""

    task_id: str
    status: TaskStatus
    created_at: str
    last_updated_at: str
    ttl_ms: int | None = None
    status_message: str | None = None
    poll_interval_ms: int | None = None
    input_requests: dict[str, Any] | None = None
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    result_type: str | None = None

    def as_task(self) -> Task:
        """The fields both eras share, as a :class:`Task`."""
        return Task(
            task_id=self.task_id,
            status=self.status,
            created_at=self.created_at,
            last_updated_at=self.last_updated_at,
            ttl=self.ttl_ms,
            status_message=self.status_message,
            poll_interval=self.poll_interval_ms,
        )


@attrs.frozen
class CreateTaskResult:
    task: Task
    meta: Meta | None = None


@attrs.frozen
class TaskIdParams:
    """Params of ``tasks/get``, ``tasks/result`` and ``tasks/cancel``."""

    task_id: str
    meta: Meta | None = None


@attrs.frozen
class ListTasksResult:
    tasks: list[Task]
    next_cursor: str | None = None
    meta: Meta | None = None


@attrs.frozen
class ProgressParams:
    progress_token: ProgressToken
    progress: float
    total: float | None = None
    message: str | None = None
    meta: Meta | None = None


@attrs.frozen
class CancelledParams:
    request_id: int | str | None = None
    reason: str | None = None


@attrs.frozen
class SetLevelParams:
    level: LoggingLevel


@attrs.frozen
class LoggingMessageParams:
    level: LoggingLevel
    data: Any
    logger: str | None = None


ElicitAction = Literal["accept", "decline", "cancel"]


@attrs.frozen
class ElicitRequestParams:
    """``elicitation/create`` (form mode): a message and a flat JSON Schema of what to ask."""

    message: str
    requested_schema: dict[str, Any]
    task: TaskMetadata | None = None
    meta: Meta | None = None


@attrs.frozen
class ElicitUrlRequestParams:
    """``elicitation/create`` in URL mode (2025-11-25 and 2026-07-28): send the user to ``url``
    (out of band: what they enter there never passes through the client), explaining why in
    ``message``. ``elicitation_id`` (2025-11-25 only) names it in
    ``notifications/elicitation/complete``."""

    message: str
    url: str
    elicitation_id: str | None = None
    mode: Literal["url"] = attrs.Factory(lambda: "url")  # a Factory: always written
    task: TaskMetadata | None = None
    meta: Meta | None = None


@attrs.frozen
class ElicitResult:
    action: ElicitAction
    content: dict[str, Any] | None = None
    meta: Meta | None = None


@attrs.frozen
class SamplingMessage:
    role: Literal["user", "assistant"]
    content: dict[str, Any]


@attrs.frozen
class CreateMessageParams:
    """``sampling/createMessage``."""

    messages: list[SamplingMessage]
    max_tokens: int
    system_prompt: str | None = None
    temperature: float | None = None
    stop_sequences: list[str] | None = None
    model_preferences: dict[str, Any] | None = None
    include_context: str | None = None
    task: TaskMetadata | None = None
    meta: Meta | None = None


@attrs.frozen
class CreateMessageResult:
    role: Literal["user", "assistant"]
    content: dict[str, Any]
    model: str
    stop_reason: str | None = None
    meta: Meta | None = None

    @property
    def text(self) -> str:
        return str(self.content.get("text", "")) if self.content.get("type") == "text" else ""
