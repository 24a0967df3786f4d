"""Era-neutral commands: what a request *means*, whichever protocol era it was written in.

A dialect (one per era, e.g. :mod:`trio_mcp.protocol.handshake`) turns a parsed JSON-RPC
message into one of these, or into the :class:`~trio_mcp.protocol.errors.ErrorValue` to
answer; the session acts on commands and hands the era-neutral outcome (a task record, a tool
result, an error) back to its dialect to be written in that era's shape.

Each command also says how it is served (:class:`Serving`, its ``serving`` class attribute):
the one dispatch table of both eras. A new verb is a command here, its reading in a dialect,
and its handler in the runtime's dispatch (``trio_mcp/actors/_dispatch.py``): three files.
"""

from __future__ import annotations

import enum
from typing import Any, ClassVar

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
    "Serving",
    "SetLogLevel",
    "SubscribeResource",
    "UpdateTask",
    "serving_of",
]


class Serving(enum.Enum):
    """How a command is served: what the connection's reader does with it, the same in both
    eras (decided here, without I/O; the runtime only carries it out)."""

    NOW = "now"
    """Answered at once from what the session knows (ping, initialize, discover, ...)."""
    INLINE = "inline"
    """Answered by the reader in order: quick, waits on nothing else (lists, completion)."""
    QUERY = "query"
    """A message to the task table's owner, answered from its reply without waiting on it
    (get, cancel, update, list); not counted against the session's outstanding limit."""
    RESULT = "result"
    """``tasks/result``: answered at once when the task has ended, else waits (counted)."""
    CREATE = "create"
    """A task creation, counted until its CreateTaskResult is written; the work starts then."""
    CALL = "call"
    """Runs in a Trio task of its own (counted), which ``notifications/cancelled`` stops."""
    MAYBE_TASK = "maybe-task"
    """A server-directed call (2026-07-28): a task from the start, shown only if it must be."""

    # Members are singletons: hashed by identity, not by Enum's Python-level name hash (the
    # dispatch table is looked up by serving kind for every request).
    __hash__ = object.__hash__


@attrs.frozen
class Initialize:
    """Open a handshake-era connection."""

    serving: ClassVar[Serving] = Serving.NOW
    protocol_version: str
    capabilities: dict[str, Any]
    client_info: Implementation


@attrs.frozen
class Ping:
    serving: ClassVar[Serving] = Serving.NOW


@attrs.frozen
class SetLogLevel:
    serving: ClassVar[Serving] = Serving.NOW
    level: str


@attrs.frozen
class ListTools:
    serving: ClassVar[Serving] = Serving.INLINE
    cursor: str | None


@attrs.frozen(weakref_slot=False)  # no weak reference slot: built by slot_builder
class CallTool:
    """Run a tool: as a task when ``as_task`` (the dialect has checked the tool allows it).

    ``auto_task``: the server may decide (the modern era's server-directed tasks): a call that
    is still running after the server's window becomes a task. ``input_responses`` and
    ``request_state`` are a modern-era retry's answers to an ``InputRequiredResult``.
    """

    serving: ClassVar[Serving] = Serving.CALL
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

    serving: ClassVar[Serving] = Serving.NOW


@attrs.frozen
class Listen:
    """``subscriptions/listen`` (modern era): a stream of the notifications asked for: the
    status of the tasks ``task_ids`` (None: none asked for), list changes, resource updates."""

    serving: ClassVar[Serving] = Serving.CALL
    task_ids: tuple[str, ...] | None
    tools_list_changed: bool = False
    prompts_list_changed: bool = False
    resources_list_changed: bool = False
    resource_uris: tuple[str, ...] | None = None


@attrs.frozen
class ListResources:
    serving: ClassVar[Serving] = Serving.INLINE
    cursor: str | None


@attrs.frozen
class ListResourceTemplates:
    serving: ClassVar[Serving] = Serving.INLINE
    cursor: str | None


@attrs.frozen
class ReadResource:
    serving: ClassVar[Serving] = Serving.CALL
    uri: str


@attrs.frozen
class SubscribeResource:
    """``resources/subscribe`` (``subscribe=True``) or ``resources/unsubscribe`` (handshake era)."""

    serving: ClassVar[Serving] = Serving.NOW
    uri: str
    subscribe: bool


@attrs.frozen
class ListPrompts:
    serving: ClassVar[Serving] = Serving.INLINE
    cursor: str | None


@attrs.frozen
class GetPrompt:
    serving: ClassVar[Serving] = Serving.CALL
    name: str
    arguments: dict[str, str]


@attrs.frozen
class Complete:
    """``completion/complete``: values for ``argument`` of a prompt or resource template."""

    serving: ClassVar[Serving] = Serving.INLINE
    ref: dict[str, Any]
    argument: dict[str, Any]
    context: dict[str, Any] | None = None


@attrs.frozen
class UpdateTask:
    """``tasks/update``: answers to a task's outstanding input requests (modern era)."""

    serving: ClassVar[Serving] = Serving.QUERY
    task_id: str
    input_responses: dict[str, Any]


@attrs.frozen
class GetTask:
    serving: ClassVar[Serving] = Serving.QUERY
    task_id: str


@attrs.frozen
class CancelTask:
    serving: ClassVar[Serving] = Serving.QUERY
    task_id: str


@attrs.frozen
class ListTasks:
    serving: ClassVar[Serving] = Serving.QUERY
    cursor: str | None


@attrs.frozen
class AwaitTaskResult:
    """Wait for a task to end and answer with what its request produced."""

    serving: ClassVar[Serving] = Serving.RESULT
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


def serving_of(command: Command, modern: bool) -> Serving:
    """How ``command`` is served: its class's :class:`Serving`, but for a task-augmented
    ``tools/call`` — a creation in the handshake era, a server-directed call in the modern one
    (which is also what a call the server may turn into a task is).

    >>> serving_of(GetTask("t-1"), modern=False)
    <Serving.QUERY: 'query'>
    >>> serving_of(CallTool("slow", {}, as_task=True), modern=False)
    <Serving.CREATE: 'create'>
    >>> serving_of(CallTool("slow", {}, as_task=True), modern=True)
    <Serving.MAYBE_TASK: 'maybe-task'>
    """
    if type(command) is CallTool and (command.as_task or command.auto_task):
        return Serving.MAYBE_TASK if modern else Serving.CREATE
    return command.serving
