"""Era-neutral commands: what a request *means*, whichever protocol era it was written in.

A dialect (one per era, e.g. :mod:`trio_mcp.protocol.handshake`) turns a parsed JSON-RPC
message into one of these, or into the :class:`~trio_mcp.protocol.errors.ErrorValue` to
answer; the session acts on commands and hands the era-neutral outcome (a task record, a tool
result, an error) back to its dialect to be written in that era's shape.
"""

from __future__ import annotations

from typing import Any

import attrs

from ._frozen import slot_builder
from .messages import Implementation

__all__ = [
    "AwaitTaskResult",
    "CallTool",
    "CancelRequest",
    "CancelTask",
    "Command",
    "Complete",
    "Discover",
    "GetPrompt",
    "GetTask",
    "Initialize",
    "ListPrompts",
    "ListResourceTemplates",
    "ListResources",
    "ListTasks",
    "ListTools",
    "Listen",
    "Ping",
    "ReadResource",
    "SetLogLevel",
    "SubscribeResource",
    "UpdateTask",
]


@attrs.frozen
class Initialize:
    """Open a handshake-era connection."""

    protocol_version: str
    capabilities: dict[str, Any]
    client_info: Implementation


@attrs.frozen
class Ping:
    pass


@attrs.frozen
class SetLogLevel:
    level: str


@attrs.frozen
class ListTools:
    cursor: str | None


@attrs.frozen(weakref_slot=False)  # no weak reference slot: built by slot_builder
class CallTool:
    """Run a tool: as a task when ``as_task`` (the dialect has checked the tool allows it).

    ``auto_task``: the server may decide (the modern era's server-directed tasks): a call that
    is still running after the server's window becomes a task. ``input_responses`` and
    ``request_state`` are a modern-era retry's answers to an ``InputRequiredResult``.
    """

    name: str
    arguments: dict[str, Any] | None
    progress_token: int | str | None = None
    as_task: bool = False
    ttl_ms: int | None = None
    auto_task: bool = False
    input_responses: dict[str, Any] | None = None
    request_state: str | None = None


call_tool_command = slot_builder(CallTool)
"""``CallTool(...)`` of all eight fields, positionally (a dialect's hot path)."""


@attrs.frozen
class Discover:
    """``server/discover``: versions, capabilities and identity (modern era)."""


@attrs.frozen
class Listen:
    """``subscriptions/listen`` (modern era): a stream of the notifications asked for: the
    status of the tasks ``task_ids`` (None: none asked for), list changes, resource updates."""

    task_ids: tuple[str, ...] | None
    tools_list_changed: bool = False
    prompts_list_changed: bool = False
    resources_list_changed: bool = False
    resource_uris: tuple[str, ...] | None = None


@attrs.frozen
class ListResources:
    cursor: str | None


@attrs.frozen
class ListResourceTemplates:
    cursor: str | None


@attrs.frozen
class ReadResource:
    uri: str


@attrs.frozen
class SubscribeResource:
    """``resources/subscribe`` (``subscribe=True``) or ``resources/unsubscribe`` (handshake era)."""

    uri: str
    subscribe: bool


@attrs.frozen
class ListPrompts:
    cursor: str | None


@attrs.frozen
class GetPrompt:
    name: str
    arguments: dict[str, str]


@attrs.frozen
class Complete:
    """``completion/complete``: values for ``argument`` of a prompt or resource template."""

    ref: dict[str, Any]
    argument: dict[str, Any]
    context: dict[str, Any] | None = None


@attrs.frozen
class UpdateTask:
    """``tasks/update``: answers to a task's outstanding input requests (modern era)."""

    task_id: str
    input_responses: dict[str, Any]


@attrs.frozen
class GetTask:
    task_id: str


@attrs.frozen
class CancelTask:
    task_id: str


@attrs.frozen
class ListTasks:
    cursor: str | None


@attrs.frozen
class AwaitTaskResult:
    """Wait for a task to end and answer with what its request produced."""

    task_id: str


@attrs.frozen
class CancelRequest:
    """A notification: stop working on the peer's request ``request_id``."""

    request_id: int | str


Command = (
    Initialize
    | Ping
    | SetLogLevel
    | ListTools
    | CallTool
    | GetTask
    | CancelTask
    | ListTasks
    | AwaitTaskResult
    | Discover
    | UpdateTask
    | Listen
    | ListResources
    | ListResourceTemplates
    | ReadResource
    | SubscribeResource
    | ListPrompts
    | GetPrompt
    | Complete
)
