"""Streamable HTTP, the sans-IO parts: header rules, SSE framing, Host checks.

Everything here takes values already read and returns values; the ASGI application that
serves MCP over HTTP is :mod:`trio_mcp.server._http` (``mcp_asgi_app``, ``serve_http``) and
the client transport is :mod:`trio_mcp.client._http` (``connect_http``).

>>> sse_event(b'{"jsonrpc":"2.0"}', id="p1.3")
b'id: p1.3\\ndata: {"jsonrpc":"2.0"}\\n\\n'
>>> decoder = SSEDecoder()
>>> decoder.feed(b"retry: 500\\nid: g.0\\ndata: \\n\\nid: g.1\\ndata: {}\\n")
[SSEEvent(data='', id='g.0', event='message', retry=500)]
>>> decoder.feed(b"\\n")
[SSEEvent(data='{}', id='g.1', event='message', retry=None)]
>>> encode_header_value("get_weather"), encode_header_value("Hello, 世界")
('get_weather', '=?base64?SGVsbG8sIOS4lueVjA==?=')
>>> decode_header_value("=?base64?SGVsbG8sIOS4lueVjA==?="), decode_header_value("=?base64?!?=")
('Hello, 世界', None)
>>> allowed = host_check(DEFAULT_ALLOWED_HOSTS)
>>> allowed("localhost:8000"), allowed("127.0.0.1"), allowed("[::1]:9"), allowed("evil.example:80")
(True, True, True, False)
>>> accepts(["application/json, text/event-stream"], "application/json", "text/event-stream")
True
>>> accepts(["application/json"], "application/json", "text/event-stream")
False
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs

__all__ = [
    "ACCEPT_BOTH",
    "DEFAULT_ALLOWED_HOSTS",
    "DEFAULT_EVENT_BUFFER",
    "DEFAULT_EVENT_BUFFER_BYTES",
    "DEFAULT_GRACE",
    "DEFAULT_HANDSHAKE_TIMEOUT",
    "DEFAULT_IDLE_TIMEOUT",
    "DEFAULT_KEEPALIVE_INTERVAL",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_MAX_EVENT_BYTES",
    "DEFAULT_MAX_SESSIONS",
    "DEFAULT_MAX_SESSIONS_PER_CLIENT",
    "DEFAULT_RETRY_MS",
    "HEADER_LAST_EVENT_ID",
    "HEADER_METHOD",
    "HEADER_NAME",
    "HEADER_PROTOCOL_VERSION",
    "HEADER_SESSION_ID",
    "JSON",
    "METADATA_PATH",
    "SSE",
    "SSEDecoder",
    "SSEEvent",
    "accepts",
    "decode_header_value",
    "encode_header_value",
    "expected_name",
    "format_event_id",
    "host_check",
    "is_loopback",
    "parse_event_id",
    "sse_comment",
    "sse_event",
]

JSON = "application/json"
SSE = "text/event-stream"
ACCEPT_BOTH = f"{JSON}, {SSE}"
"""The ``Accept`` value a client sends with every POST."""

HEADER_SESSION_ID = "mcp-session-id"
HEADER_PROTOCOL_VERSION = "mcp-protocol-version"
HEADER_METHOD = "mcp-method"
HEADER_NAME = "mcp-name"
HEADER_LAST_EVENT_ID = "last-event-id"

METADATA_PATH = "/.well-known/oauth-protected-resource"
"""Where RFC 9728 Protected Resource Metadata is served (also with the MCP path appended)."""

DEFAULT_MAX_BODY_SIZE = 4 * 1024 * 1024
"""Largest request body accepted (bytes); larger is refused with 413."""
DEFAULT_EVENT_BUFFER = 1000
"""SSE events a handshake-era session keeps for replay (``Last-Event-ID``), over all its streams."""
DEFAULT_EVENT_BUFFER_BYTES = 8 * 1024 * 1024
"""Bytes of SSE events a handshake-era session keeps for replay; past it events already
written to the client are dropped first, then the oldest."""
DEFAULT_MAX_EVENT_BYTES = 256 * 1024 * 1024
"""Bytes of SSE events kept for replay by all sessions together; past it events already
written are dropped first (in every session), then the oldest of the session holding most."""
DEFAULT_RETRY_MS = 1000
"""The ``retry`` (milliseconds) sent first on every SSE stream: how long a client waits to reconnect."""
DEFAULT_IDLE_TIMEOUT = 30 * 60.0
"""Seconds a handshake-era session may go without any HTTP request before it is ended."""
DEFAULT_MAX_SESSIONS = 1000
"""Handshake-era sessions open at once; ``initialize`` past that is refused with 503."""
DEFAULT_MAX_SESSIONS_PER_CLIENT = 100
"""Handshake-era sessions of one client (its authenticated identity, else its address) at once:
past it the client's own unused sessions are ended first, else its ``initialize`` gets 503."""
DEFAULT_HANDSHAKE_TIMEOUT = 30.0
"""Seconds a handshake-era session may take from ``initialize`` to ``notifications/initialized``
before it is ended."""
DEFAULT_GRACE = 10.0
"""Seconds ``serve_http`` lets requests in flight finish when it stops, before they are
answered -32603 "server shutting down"."""
DEFAULT_KEEPALIVE_INTERVAL = 15.0
"""Seconds between SSE comment lines on a quiet stream (keeps proxies from timing it out)."""

DEFAULT_ALLOWED_HOSTS: tuple[str, ...] = ("localhost:*", "127.0.0.1:*", "[::1]:*")
"""``Host`` values accepted by default (against DNS rebinding): the local machine, any port.

Entry syntax: ``host`` or ``host:*`` (any port, or none), ``host:port`` (exactly that port),
``[v6addr]:*``, or ``*`` (any host: the check is off).
"""

_SENTINEL = re.compile(r"^=\?base64\?(.*)\?=$", re.DOTALL)
_SAFE = re.compile(r"^[\x21-\x7e]([\x20-\x7e\t]*[\x21-\x7e])?$")


def encode_header_value(value: str) -> str:
    """``value`` as an HTTP header value: itself if it is plain visible ASCII (inner spaces
    and tabs allowed), else (or if it looks like the sentinel) ``=?base64?…?=`` of its UTF-8."""
    if _SAFE.match(value) and not _SENTINEL.match(value):
        return value
    return "=?base64?" + base64.b64encode(value.encode("utf-8")).decode("ascii") + "?="


def decode_header_value(text: str) -> str | None:
    """The value a header carries (the base64 sentinel form decoded); None if malformed."""
    match = _SENTINEL.match(text)
    if match is None:
        return text
    try:
        return base64.b64decode(match.group(1), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


_NAME_FIELDS = {
    "tools/call": "name",
    "prompts/get": "name",
    "resources/read": "uri",
    "tasks/get": "taskId",
    "tasks/update": "taskId",
    "tasks/cancel": "taskId",
}
"""The field of ``params`` that ``Mcp-Name`` carries, by method."""


def expected_name(method: str, params: Any) -> str | None:
    """What ``Mcp-Name`` must carry for ``method``: ``params.name`` (``tools/call``,
    ``prompts/get``), ``params.uri`` (``resources/read``), ``params.taskId`` (``tasks/get``,
    ``tasks/update``, ``tasks/cancel``); None when the method has no name header (or the body
    lacks the field, which the request's own validation reports)."""
    key = _NAME_FIELDS.get(method)
    if key is None or not isinstance(params, dict):
        return None
    value = params.get(key)
    return value if isinstance(value, str) else None


def accepts(values: Sequence[str], *types: str) -> bool:
    """Whether ``Accept`` header ``values`` list every one of ``types`` (``*/*`` and
    ``type/*`` count; a ``q=0`` entry does not)."""
    offered: list[str] = []
    for value in values:
        for item in value.split(","):
            media, *params = (part.strip() for part in item.split(";"))
            if any(p.replace(" ", "").lower() in ("q=0", "q=0.0", "q=0.00", "q=0.000") for p in params):
                continue
            if media:
                offered.append(media.lower())
    for wanted in types:
        major = wanted.split("/", 1)[0]
        if not any(o in (wanted, "*/*", f"{major}/*") for o in offered):
            return False
    return True


HOST_CACHE_SIZE = 256
"""``Host`` values a :func:`host_check` predicate remembers its answer for."""


def _split_host(text: str) -> tuple[str, int | None] | None:
    """``host[:port]`` / ``[v6]:port`` → (lower-case host, port or None); None if malformed."""
    text = text.strip().lower()
    if not text:
        return None
    if text.startswith("["):
        host, bracket, rest = text.partition("]")
        host += bracket
        if not bracket:
            return None
    else:
        host, _, rest = text.partition(":")
        rest = ":" + rest if _ else ""
    if not rest:
        return host, None
    port_text = rest[1:]
    if (
        not rest.startswith(":")
        or not (port_text.isascii() and port_text.isdigit())
        or int(port_text) > 65535
    ):
        return None
    return host, int(port_text)


def host_check(patterns: Iterable[str] | Callable[[str], bool] | None) -> Callable[[str], bool]:
    """A predicate ``Host header value -> bool`` for an allow-list (see
    :data:`DEFAULT_ALLOWED_HOSTS`), a predicate, or None (any host)."""
    if patterns is None:
        return lambda host: True
    if callable(patterns):
        return patterns
    if isinstance(patterns, str):
        raise TypeError("allowed_hosts must be a collection of hosts, not one string")
    rules: list[tuple[str, int | None]] = []
    for entry in patterns:
        entry = entry.strip()
        if entry == "*":
            return lambda host: True
        any_port = entry.endswith(":*")
        parsed = _split_host(entry[:-2] if any_port else entry)
        if parsed is None:
            raise ValueError(f"not a host pattern: {entry!r} (expected host, host:port or host:*)")
        rules.append(parsed)

    decided: dict[str, bool] = {}  # the Host values seen, and what was decided for each

    def check(value: str) -> bool:
        known = decided.get(value)
        if known is not None:
            return known
        parsed = _split_host(value)
        if parsed is None:
            allowed = False
        else:
            host, port = parsed
            allowed = any(host == r_host and (r_port is None or r_port == port) for r_host, r_port in rules)
        if len(decided) < HOST_CACHE_SIZE:  # (a client sending many Host values is decided anew)
            decided[value] = allowed
        return allowed

    return check


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a bind address or name) is this machine only.

    >>> is_loopback("127.0.0.1"), is_loopback("::1"), is_loopback("localhost"), is_loopback("0.0.0.0")
    (True, True, True, False)
    """
    host = host.strip("[]").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# -- Server-Sent Events ---------------------------------------------------------------------
def sse_event(
    data: bytes | str, *, id: str | None = None, event: str | None = None, retry: int | None = None
) -> bytes:
    """One SSE event, framed. ``data`` may span lines (each becomes a ``data:`` line)."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    lines: list[str] = []
    if retry is not None:
        lines.append(f"retry: {int(retry)}")
    if id is not None:
        if "\n" in id or "\r" in id or "\0" in id:
            raise ValueError("an SSE event id cannot contain newlines or NUL")
        lines.append(f"id: {id}")
    if event is not None:
        lines.append(f"event: {event}")
    for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n"):
        lines.append(f"data: {line}")
    return ("\n".join(lines) + "\n\n").encode("utf-8")


def sse_comment(text: str = "") -> bytes:
    """An SSE comment (``: text``): ignored by clients; a keep-alive."""
    return f": {text}\n\n".encode()


@attrs.frozen
class SSEEvent:
    """One decoded SSE event. ``id`` is the event's own id (None if it set none)."""

    data: str
    id: str | None = None
    event: str = "message"
    retry: int | None = None


class SSEDecoder:
    """Incremental SSE parser (the WHATWG rules): feed bytes, get whole events.

    Events with no ``data`` field are dispatched only if they carry an ``id`` or ``retry``
    (a priming event); comments are skipped.
    """

    def __init__(self) -> None:
        self._buffer = b""
        self._data: list[str] = []
        self._has_data = False
        self._id: str | None = None
        self._event = ""
        self._retry: int | None = None
        self._touched = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        self._buffer += chunk
        events: list[SSEEvent] = []
        while True:
            match = re.search(rb"\r\n|\n|\r", self._buffer)
            if match is None:
                break
            if match.group() == b"\r" and match.end() == len(self._buffer):
                break  # maybe the first half of \r\n
            line = self._buffer[: match.start()].decode("utf-8", errors="replace")
            self._buffer = self._buffer[match.end() :]
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> SSEEvent | None:
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        field, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
            self._has_data = True
        elif field == "id":
            if "\0" not in value:
                self._id = value
                self._touched = True
        elif field == "event":
            self._event = value
        elif field == "retry":
            if value.isascii() and value.isdigit():
                self._retry = int(value)
                self._touched = True
        return None

    def _dispatch(self) -> SSEEvent | None:
        event = None
        if self._has_data or self._touched:
            event = SSEEvent("\n".join(self._data), self._id, self._event or "message", self._retry)
        self._data, self._has_data, self._event, self._retry, self._touched = [], False, "", None, False
        self._id = None
        return event


def format_event_id(stream: str, sequence: int) -> str:
    """An event id naming its stream and its place in the session: ``"<stream>.<n>"``.

    >>> format_event_id("p3", 17), parse_event_id("p3.17"), parse_event_id("nonsense")
    ('p3.17', ('p3', 17), None)
    """
    return f"{stream}.{sequence}"


def parse_event_id(text: str) -> tuple[str, int] | None:
    stream, dot, number = text.strip().rpartition(".")
    if not dot or not stream or not (number.isascii() and number.isdigit()):
        return None
    return stream, int(number)
