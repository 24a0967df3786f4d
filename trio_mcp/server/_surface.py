"""Resources, resource templates, prompts and completions: what a server offers besides tools.

Each is registered on a :class:`~trio_mcp.Server` with a decorator and served in both protocol
eras. Functions may be async or plain; a parameter annotated :class:`~trio_mcp.Context` gets
the request's context (so ``await ctx.elicit(...)`` works in a prompt or a resource too).
"""

from __future__ import annotations

import base64
import inspect
import re
import typing
from collections.abc import Awaitable, Callable
from typing import Any

import attrs

from ..protocol.converter import unstructure
from ..protocol.errors import INVALID_PARAMS, McpError
from ..protocol.messages import AudioContent, EmbeddedResource, ImageContent, ResourceLink, TextContent
from ._context import Context

__all__ = [
    "MAX_COMPLETIONS",
    "RegisteredPrompt",
    "RegisteredResource",
    "RegisteredTemplate",
    "ResourceNotFound",
    "prompt_messages",
    "resource_contents",
]

MAX_COMPLETIONS = 100
"""Values one ``completion/complete`` answer carries (the spec's maximum)."""

_CONTENT = (TextContent, ImageContent, AudioContent, ResourceLink, EmbeddedResource)


def find_context_param(fn: Callable[..., Any], kind: type = Context) -> str | None:
    """The name of ``fn``'s parameter annotated :class:`Context` (or ``kind``), if any."""
    hints = typing.get_type_hints(fn)
    for name in inspect.signature(fn).parameters:
        if hints.get(name) is kind:
            return name
    return None


def _described(out: dict[str, Any], entry: RegisteredResource | RegisteredTemplate) -> dict[str, Any]:
    """``out`` with the entry's title, description and mimeType, those it has."""
    fields = (("title", entry.title), ("description", entry.description), ("mimeType", entry.mime_type))
    for key, value in fields:
        if value is not None:
            out[key] = value
    return out


async def _call(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    value = fn(**kwargs)
    if inspect.isawaitable(value):
        value = await value
    return value


def resource_contents(uri: str, mime_type: str | None, value: Any) -> list[dict[str, Any]]:
    """A resource function's return value as ``contents``: ``str`` is text, ``bytes`` a
    base64 blob, a dict one contents object (``uri`` filled in), a list several.

    >>> resource_contents("test://a", "text/plain", "hi")
    [{'uri': 'test://a', 'mimeType': 'text/plain', 'text': 'hi'}]
    >>> resource_contents("test://b", None, b"\\x00\\x01")
    [{'uri': 'test://b', 'blob': 'AAE='}]
    """
    if isinstance(value, list):
        return [item for part in value for item in resource_contents(uri, mime_type, part)]
    out: dict[str, Any] = {"uri": uri}
    if mime_type is not None:
        out["mimeType"] = mime_type
    if isinstance(value, str):
        out["text"] = value
    elif isinstance(value, bytes | bytearray | memoryview):
        out["blob"] = base64.b64encode(bytes(value)).decode()
    elif isinstance(value, dict):
        return [{**out, **value}]
    else:
        raise TypeError(
            f"a resource returns str, bytes, a contents dict or a list of them, not {type(value).__name__}"
        )
    return [out]


def prompt_messages(value: Any) -> list[dict[str, Any]]:
    """A prompt function's return value as ``messages``: ``str`` or a content block is one user
    message, a ``{"role", "content"}`` dict one message, a ``(role, content)`` pair one message
    of that role, a list several.

    >>> prompt_messages("Hello")
    [{'role': 'user', 'content': {'type': 'text', 'text': 'Hello'}}]
    """
    if isinstance(value, list):
        return [message for part in value for message in prompt_messages(part)]
    if isinstance(value, tuple) and len(value) == 2 and value[0] in ("user", "assistant"):
        return [{"role": value[0], "content": _content(value[1])}]
    if isinstance(value, dict) and "role" in value and "content" in value:
        return [{"role": value["role"], "content": _content(value["content"])}]
    return [{"role": "user", "content": _content(value)}]


def _content(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"type": "text", "text": value}
    if isinstance(value, _CONTENT):
        data: dict[str, Any] = unstructure(value)
        return data
    if isinstance(value, dict) and "type" in value:
        return value
    raise TypeError(f"a prompt message holds a string or a content block, not {type(value).__name__}")


@attrs.frozen
class RegisteredResource:
    """A resource at a fixed URI."""

    uri: str
    name: str
    fn: Callable[..., Any]
    context_param: str | None
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None

    def wire(self) -> dict[str, Any]:
        return _described({"uri": self.uri, "name": self.name}, self)

    async def read(self, ctx: Context | None) -> list[dict[str, Any]]:
        kwargs = {self.context_param: ctx} if self.context_param is not None else {}
        return resource_contents(self.uri, self.mime_type, await _call(self.fn, kwargs))


class ResourceNotFound(Exception):
    """Raise it from a resource or resource template function to answer "resource not found"
    — the error each protocol era defines for it (-32002 in the handshake era, -32602 in
    2026-07-28), naming the URI read — instead of an internal error.

    >>> from trio_mcp import Server
    >>> server = Server("files")
    >>> @server.resource("file:///{name}")
    ... def read(name: str) -> str:
    ...     if name != "readme":
    ...         raise ResourceNotFound(f"file:///{name}")
    ...     return "Read me first."
    """

    def __init__(self, uri: str) -> None:
        super().__init__(f"Resource not found: {uri}")
        self.uri = uri


def _check_template_parameters(
    uri_template: str, fn: Callable[..., Any], variables: tuple[str, ...], context: str | None
) -> None:
    """Refuse, at registration, a template function that could not be called with the
    template's variables: each ``{variable}`` is a parameter (or goes to ``**kwargs``), and
    each parameter without a default is a variable (or the Context)."""
    parameters = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    missing = [v for v in variables if v not in parameters and not takes_any]
    if missing:
        names = ", ".join(f"{{{v}}}" for v in missing)
        raise ValueError(
            f"resource template {uri_template!r}: {fn.__qualname__}() has no parameter for {names}"
        )
    unfilled = [
        name
        for name, p in parameters.items()
        if name not in variables
        and name != context
        and p.default is inspect.Parameter.empty
        and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    ]
    if unfilled:
        raise ValueError(
            f"resource template {uri_template!r} has no {{variable}} for parameter(s) "
            f"{', '.join(unfilled)} of {fn.__qualname__}() (give them defaults, or name them in the URI)"
        )


@attrs.frozen
class RegisteredTemplate:
    """Resources at URIs matching an RFC 6570 level-1 template, ``test://template/{id}/data``:
    each ``{name}`` is a function parameter (a string without ``/``)."""

    uri_template: str
    name: str
    fn: Callable[..., Any]
    context_param: str | None
    pattern: re.Pattern[str]
    variables: tuple[str, ...]
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None

    @classmethod
    def compile(cls, uri_template: str, fn: Callable[..., Any], **fields: Any) -> RegisteredTemplate:
        variables = tuple(re.findall(r"\{([A-Za-z_][A-Za-z0-9_]*)\}", uri_template))
        regex = "".join(
            f"(?P<{part[1:-1]}>[^/]+)"
            if re.fullmatch(r"\{[A-Za-z_][A-Za-z0-9_]*\}", part)
            else re.escape(part)
            for part in re.split(r"(\{[A-Za-z_][A-Za-z0-9_]*\})", uri_template)
        )
        name, context = fields.pop("name"), find_context_param(fn)
        _check_template_parameters(uri_template, fn, variables, context)
        return cls(uri_template, name, fn, context, re.compile(regex), variables, **fields)

    def wire(self) -> dict[str, Any]:
        return _described({"uriTemplate": self.uri_template, "name": self.name}, self)

    def match(self, uri: str) -> dict[str, str] | None:
        found = self.pattern.fullmatch(uri)
        return found.groupdict() if found is not None else None

    async def read(self, uri: str, values: dict[str, str], ctx: Context | None) -> list[dict[str, Any]]:
        kwargs: dict[str, Any] = dict(values)
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        return resource_contents(uri, self.mime_type, await _call(self.fn, kwargs))


@attrs.frozen
class RegisteredPrompt:
    """A prompt: its arguments are the function's string parameters (required unless they
    have a default); its docstring is its description."""

    name: str
    fn: Callable[..., Any]
    context_param: str | None
    arguments: tuple[dict[str, Any], ...]
    title: str | None = None
    description: str | None = None

    @classmethod
    def from_function(cls, fn: Callable[..., Any], **fields: Any) -> RegisteredPrompt:
        context_param = find_context_param(fn)
        described = fields.pop("argument_descriptions", None) or {}
        arguments = tuple(
            {
                "name": name,
                **({"description": described[name]} if name in described else {}),
                "required": parameter.default is inspect.Parameter.empty,
            }
            for name, parameter in inspect.signature(fn).parameters.items()
            if name != context_param
        )
        return cls(fields.pop("name"), fn, context_param, arguments, **fields)

    def wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "arguments": list(self.arguments)}
        if self.title is not None:
            out["title"] = self.title
        if self.description is not None:
            out["description"] = self.description
        return out

    async def get(self, arguments: dict[str, str], ctx: Context | None) -> dict[str, Any]:
        missing = [a["name"] for a in self.arguments if a["required"] and a["name"] not in arguments]
        if missing:
            raise McpError(
                INVALID_PARAMS, f"Missing required arguments for prompt '{self.name}': {', '.join(missing)}"
            )
        known = {a["name"] for a in self.arguments}
        kwargs: dict[str, Any] = {k: v for k, v in arguments.items() if k in known}
        if self.context_param is not None:
            kwargs[self.context_param] = ctx
        result: dict[str, Any] = {"messages": prompt_messages(await _call(self.fn, kwargs))}
        if self.description is not None:
            result["description"] = self.description
        return result


Completer = Callable[..., Awaitable[list[str]] | list[str]]
"""``completer(value, context_arguments)`` → candidate values (sync or async)."""
