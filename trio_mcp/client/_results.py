"""What the client's resource, prompt and completion calls return: frozen attrs classes in the
style of :mod:`trio_mcp.protocol.messages`, read with the same converter (snake_case names for
the wire's camelCase, ``meta`` for ``_meta``; unknown fields, such as a 2026-07-28 result's
``resultType`` or ``ttlMs``, are ignored).

>>> from trio_mcp.protocol.converter import structure
>>> read = structure({"contents": [{"uri": "memo://a", "text": "hi"}]}, ReadResourceResult)
>>> (read.contents[0].uri, read.text)
('memo://a', 'hi')
"""

from __future__ import annotations

from typing import Any, Literal

import attrs

from ..protocol.messages import ContentBlock, Meta, TextContent

__all__ = [
    "GetPromptResult",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "ReadResourceResult",
    "Resource",
    "ResourceContents",
    "ResourceTemplate",
]


@attrs.frozen
class Resource:
    """One entry of ``resources/list``."""

    uri: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    annotations: dict[str, Any] | None = None
    icons: list[dict[str, Any]] | None = None
    meta: Meta | None = None


@attrs.frozen
class ResourceTemplate:
    """One entry of ``resources/templates/list``: ``uri_template`` is an RFC 6570 template."""

    uri_template: str
    name: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    annotations: dict[str, Any] | None = None
    icons: list[dict[str, Any]] | None = None
    meta: Meta | None = None


@attrs.frozen
class ResourceContents:
    """One of the ``contents`` of ``resources/read``: ``text``, or ``blob`` (base64)."""

    uri: str
    mime_type: str | None = None
    text: str | None = None
    blob: str | None = None
    meta: Meta | None = None


@attrs.frozen
class ReadResourceResult:
    """``resources/read``."""

    contents: list[ResourceContents] = attrs.Factory(list)
    meta: Meta | None = None

    @property
    def text(self) -> str:
        """The text contents joined by newlines (blobs left out)."""
        return "\n".join(c.text for c in self.contents if c.text is not None)


@attrs.frozen
class PromptArgument:
    name: str
    title: str | None = None
    description: str | None = None
    required: bool | None = None


@attrs.frozen
class Prompt:
    """One entry of ``prompts/list``."""

    name: str
    title: str | None = None
    description: str | None = None
    arguments: list[PromptArgument] | None = None
    icons: list[dict[str, Any]] | None = None
    meta: Meta | None = None


@attrs.frozen
class PromptMessage:
    role: Literal["user", "assistant"]
    content: ContentBlock


@attrs.frozen
class GetPromptResult:
    """``prompts/get``: the prompt's ``messages``."""

    messages: list[PromptMessage] = attrs.Factory(list)
    description: str | None = None
    meta: Meta | None = None

    @property
    def text(self) -> str:
        """The text of the messages' text contents, joined by newlines."""
        return "\n".join(m.content.text for m in self.messages if isinstance(m.content, TextContent))
