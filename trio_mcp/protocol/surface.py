"""What resources, prompts and completion requests mean: the same in every protocol era.

Both dialects hand these methods here; only where the eras differ (``resources/subscribe``
exists only in the handshake era; how "not found" is answered) do they decide themselves.

>>> interpret_surface("resources/read", {"uri": "test://a"})
ReadResource(uri='test://a')
>>> interpret_surface("prompts/get", {"name": "p", "arguments": {"x": 1}}).message
"Invalid params at 'arguments.x': expected a string"
"""

from __future__ import annotations

from typing import Any

from .commands import (
    Command,
    Complete,
    GetPrompt,
    ListPrompts,
    ListResources,
    ListResourceTemplates,
    ReadResource,
    SubscribeResource,
)
from .errors import INVALID_PARAMS, ErrorValue

__all__ = ["SURFACE_METHODS", "interpret_surface"]

SURFACE_METHODS = frozenset(
    {
        "resources/list",
        "resources/templates/list",
        "resources/read",
        "resources/subscribe",
        "resources/unsubscribe",
        "prompts/list",
        "prompts/get",
        "completion/complete",
    }
)


def _invalid(where: str, what: str) -> ErrorValue:
    return ErrorValue(INVALID_PARAMS, f"Invalid params at '{where}': {what}")


def _cursor(params: dict[str, Any]) -> str | ErrorValue | None:
    cursor = params.get("cursor")
    if cursor is not None and not isinstance(cursor, str):
        return _invalid("cursor", "expected a string")
    return cursor


def _string(params: dict[str, Any], key: str) -> str | ErrorValue:
    value = params.get(key)
    if not isinstance(value, str):
        return _invalid(key, "expected a string" if key in params else "required field missing")
    return value


def interpret_surface(method: str, params: dict[str, Any] | None) -> Command | ErrorValue:
    """The command for one of :data:`SURFACE_METHODS`, or the -32602 error its params deserve."""
    params = params or {}
    if method in ("resources/list", "resources/templates/list", "prompts/list"):
        cursor = _cursor(params)
        if isinstance(cursor, ErrorValue):
            return cursor
        if method == "resources/list":
            return ListResources(cursor)
        if method == "prompts/list":
            return ListPrompts(cursor)
        return ListResourceTemplates(cursor)
    if method in ("resources/read", "resources/subscribe", "resources/unsubscribe"):
        uri = _string(params, "uri")
        if isinstance(uri, ErrorValue):
            return uri
        if method == "resources/read":
            return ReadResource(uri)
        return SubscribeResource(uri, method == "resources/subscribe")
    if method == "prompts/get":
        name = _string(params, "name")
        if isinstance(name, ErrorValue):
            return name
        arguments = params.get("arguments") or {}
        if not isinstance(arguments, dict):
            return _invalid("arguments", "expected an object")
        for key, value in arguments.items():
            if not isinstance(value, str):
                return _invalid(f"arguments.{key}", "expected a string")
        return GetPrompt(name, arguments)
    if method == "completion/complete":
        ref, argument, context = params.get("ref"), params.get("argument"), params.get("context")
        if not isinstance(ref, dict) or ref.get("type") not in ("ref/prompt", "ref/resource"):
            return _invalid("ref", "expected a ref/prompt or ref/resource reference")
        key = "name" if ref["type"] == "ref/prompt" else "uri"
        if not isinstance(ref.get(key), str):
            return _invalid(f"ref.{key}", "expected a string")
        if not isinstance(argument, dict) or not isinstance(argument.get("name"), str):
            return _invalid("argument", "expected {name, value}")
        if not isinstance(argument.get("value", ""), str):
            return _invalid("argument.value", "expected a string")
        if context is not None and not isinstance(context, dict):
            return _invalid("context", "expected an object")
        return Complete(ref, argument, context)
    raise ValueError(f"not a surface method: {method}")
