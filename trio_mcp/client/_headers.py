"""SEP-2243 on the client: tool arguments mirrored into ``Mcp-Param-{Name}`` headers.

A tool's ``inputSchema`` may mark a property with ``"x-mcp-header": "Name"``: over Streamable
HTTP (2026-07-28) the client then sends that argument's value in ``Mcp-Param-Name`` too
(encoded as ``Mcp-Name`` is: plain visible ASCII, else ``=?base64?…?=``). A tool whose
annotations break the rules (empty, not a header token, not unique, on a non-primitive or
``number`` property, or not reachable from the root through ``properties`` alone) is left out
of ``list_tools``, with a warning.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any

from ..transports.http import encode_header_value

__all__ = ["HeaderParam", "header_params", "param_header_values"]

log = logging.getLogger("trio_mcp.client")

HEADER = "x-mcp-header"
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_PRIMITIVE = ("string", "integer", "boolean")
MAX_SAFE_INTEGER = 2**53 - 1

HeaderParam = tuple[tuple[str, ...], str]
"""An annotated argument: its path (``properties`` keys from the root) and its header name."""


def _count(node: Any) -> int:
    """Every ``x-mcp-header`` key anywhere in ``node``."""
    if isinstance(node, dict):
        return (HEADER in node) + sum(_count(v) for v in node.values())
    if isinstance(node, list):
        return sum(_count(v) for v in node)
    return 0


def _reachable(
    schema: Mapping[str, Any], path: tuple[str, ...], out: list[tuple[tuple[str, ...], Any, Any]]
) -> None:
    properties = schema.get("properties")
    if not isinstance(properties, dict):
        return
    for key, child in properties.items():
        if not isinstance(child, dict):
            continue
        if HEADER in child:
            out.append(((*path, key), child[HEADER], child.get("type")))
        _reachable(child, (*path, key), out)


def header_params(input_schema: Mapping[str, Any]) -> list[HeaderParam]:
    """The ``x-mcp-header`` arguments of a tool; ValueError saying what is wrong if any
    annotation breaks SEP-2243's rules (the tool is then rejected).

    >>> header_params({"properties": {"region": {"type": "string", "x-mcp-header": "Region"}}})
    [(('region',), 'Region')]
    >>> header_params({"properties": {"n": {"type": "number", "x-mcp-header": "N"}}})
    Traceback (most recent call last):
    ...
    ValueError: x-mcp-header 'N' is on a property of type 'number' (only string, integer, boolean)
    """
    found: list[tuple[tuple[str, ...], Any, Any]] = []
    _reachable(input_schema, (), found)
    if len(found) != _count(input_schema):
        raise ValueError("an x-mcp-header is not reachable from the schema root through properties alone")
    seen: set[str] = set()
    params: list[HeaderParam] = []
    for path, name, kind in found:
        if not isinstance(name, str) or not name:
            raise ValueError(f"x-mcp-header of {'.'.join(path)!r} is empty or not a string")
        if not _TOKEN.fullmatch(name):
            raise ValueError(f"x-mcp-header {name!r} is not an HTTP header token")
        if name.lower() in seen:
            raise ValueError(f"x-mcp-header {name!r} is not unique (case-insensitively)")
        seen.add(name.lower())
        if kind not in _PRIMITIVE:
            raise ValueError(
                f"x-mcp-header {name!r} is on a property of type {kind!r} (only string, integer, boolean)"
            )
        params.append((path, name))
    return params


def _header_text(value: Any) -> str | None:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value) if abs(value) <= MAX_SAFE_INTEGER else None
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_SAFE_INTEGER:
        return str(int(value))
    if isinstance(value, str):
        return value
    return None


def param_header_values(params: list[HeaderParam], arguments: Any) -> dict[str, str]:
    """The ``Mcp-Param-*`` headers of a call with ``arguments`` (absent or null: no header).

    >>> param_header_values([(("region",), "Region"), (("n",), "N")], {"region": "Hello, 世界", "n": None})
    {'Mcp-Param-Region': '=?base64?SGVsbG8sIOS4lueVjA==?='}
    """
    headers: dict[str, str] = {}
    for path, name in params:
        value: Any = arguments
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        text = _header_text(value)
        if text is not None:
            headers[f"Mcp-Param-{name}"] = encode_header_value(text)
    return headers


def accept_tool(name: str, input_schema: Mapping[str, Any]) -> list[HeaderParam] | None:
    """The tool's header arguments, or None (with a warning) if its annotations are invalid."""
    try:
        return header_params(input_schema)
    except ValueError as exc:
        log.warning("tool %r left out: %s (SEP-2243)", name, exc)
        return None
