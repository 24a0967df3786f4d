"""Connecting a :class:`~trio_mcp.Client` over Streamable HTTP (both protocol eras).

:class:`HttpTransport` is a :class:`~trio_mcp.transports.base.Transport` over HTTP (httpx, on
Trio through anyio): ``send`` POSTs each message, and what comes back (a JSON object, or the
data of each SSE event) is what ``receive`` returns. The era is read from each message:

* **2025-11-25**: ``initialize`` is POSTed first and waited for; its ``Mcp-Session-Id`` and
  negotiated version go on every later request. After ``notifications/initialized`` a GET
  stream is kept open for the server's own requests and notifications, reconnecting with
  ``Last-Event-ID`` (after the server's ``retry``) when it drops; a POST stream that drops
  before its response is resumed the same way. ``aclose`` DELETEs the session. A 404 for the
  session means the server ended it: the transport ends (the client sees the connection close).
* **2026-07-28** (a request carrying the ``_meta`` envelope): stateless POSTs with the
  ``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name`` headers. Cancelling a request
  closes its HTTP response (what cancels it on the server); no ``notifications/cancelled``
  is sent.

Requests run concurrently (each POST in its own Trio task); messages other than requests are
POSTed in order.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
import trio

from ..actors.runtime import unwrap_single
from ..protocol import jsonrpc
from ..protocol.errors import INTERNAL_ERROR, McpError
from ..protocol.modern import PROTOCOL_VERSION_KEY, is_modern
from ..protocol.versions import LATEST_VERSION
from ..transports.http import (
    ACCEPT_BOTH,
    HEADER_LAST_EVENT_ID,
    HEADER_METHOD,
    HEADER_NAME,
    HEADER_PROTOCOL_VERSION,
    HEADER_SESSION_ID,
    JSON,
    SSE,
    SSEDecoder,
    encode_header_value,
    expected_name,
)
from ._auth import AuthorizationError
from ._client import (
    Client,
    ConnectionClosed,
    ElicitationCompleteCallback,
    ElicitationHandler,
    SamplingHandler,
    UrlElicitationHandler,
    connect,
)
from ._headers import HeaderParam, param_header_values

__all__ = ["CONNECT_TIMEOUT", "HttpTransport", "connect_http", "open_http_transport"]

log = logging.getLogger("trio_mcp.http.client")

CONNECT_TIMEOUT = 10.0
"""Seconds to wait for a TCP (and TLS) connection to the server."""
MAX_RESUME_ATTEMPTS = 5
"""Reconnections tried, in a row, for a dropped POST stream before its request fails."""
GET_OPEN_TIMEOUT = 5.0
"""Seconds the handshake waits for the session's GET stream to open."""
DELETE_TIMEOUT = 2.0
"""Seconds ``aclose`` waits for the server to answer the session's DELETE."""


class HttpTransport:
    """One MCP connection over Streamable HTTP (see the module docstring). Open it with
    :func:`open_http_transport`, which owns its background tasks."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        url: str,
        nursery: trio.Nursery,
        *,
        token: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.url = url
        self._http = http
        self._nursery = nursery
        self._base: dict[str, str] = dict(headers or {})
        if token is not None:
            self._base["authorization"] = f"Bearer {token}"
        self._in_send, self._in_recv = trio.open_memory_channel[bytes](1024)
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        """The handshake-era version agreed by ``initialize`` (sent as MCP-Protocol-Version)."""
        self.retry = 1.0
        """Seconds before reconnecting a dropped stream (the server's last ``retry``)."""
        self._modern_calls: dict[jsonrpc.RequestId, trio.CancelScope] = {}
        self._get_started = False
        self.closed = False
        self.refusal: tuple[int, str] | None = None
        """The HTTP status and the server's message (or body) if the last response refused its
        request at the HTTP level (4xx/5xx without a JSON-RPC response to it: 401, 403, 404, ...),
        else None. Such a refusal reaches the client as a JSON-RPC error; this tells a caller
        (the CLI, after a failed handshake) what it really was."""
        self.tool_headers: dict[str, list[HeaderParam]] = {}
        """SEP-2243: per tool, its arguments sent as ``Mcp-Param-*`` headers too (filled by
        :meth:`~trio_mcp.client.Client.list_tools`)."""
        self.challenge: str | None = None
        """The ``WWW-Authenticate`` header of the last 401 or 403."""
        self.auth_error: AuthorizationError | None = None
        """Why the OAuth flow (``auth=``) failed, if it did."""

    # -- Transport ------------------------------------------------------------------------
    async def receive(self) -> jsonrpc.Received:
        try:
            return jsonrpc.read(await self._in_recv.receive())
        except trio.ClosedResourceError:
            raise trio.EndOfChannel from None

    async def send(self, message: bytes) -> None:
        if self.closed:
            raise trio.ClosedResourceError("the HTTP transport is closed")
        try:
            obj = json.loads(message)
        except ValueError:
            obj = None
        if not isinstance(obj, dict):
            raise ValueError("not a JSON-RPC message")
        method = obj.get("method")
        params = obj.get("params") if isinstance(obj.get("params"), dict) else None
        request_id = obj.get("id") if method is not None and isinstance(obj.get("id"), int | str) else None
        if method == "notifications/cancelled" and params is not None:
            scope = self._modern_calls.get(params.get("requestId"))  # type: ignore[arg-type]
            if scope is not None:  # a modern request is cancelled by closing its response
                scope.cancel()
                return
        modern = method is not None and is_modern(params)
        headers = self._headers(method, params, modern)
        if request_id is None:
            # notifications and responses: in order, answered at once (202)
            await self._post(message, headers, None, modern)
            if (
                method == "notifications/initialized"
                and self.session_id is not None
                and not self._get_started
            ):
                self._get_started = True
                # wait until the GET stream is open (or refused): what the server sends on it
                # right after the handshake, such as a request during the first tool call,
                # would otherwise be lost
                opened = trio.Event()
                self._nursery.start_soon(self._get_stream, opened)
                with trio.move_on_after(GET_OPEN_TIMEOUT):
                    await opened.wait()
            return
        if method == "initialize" and not modern:
            await self._post(message, headers, request_id, modern, initialize=True)
            return
        if modern:
            scope = trio.CancelScope()
            self._modern_calls[request_id] = scope
            self._nursery.start_soon(self._modern_post, message, headers, request_id, scope)
        else:
            self._nursery.start_soon(self._post, message, headers, request_id, modern)

    async def aclose(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.session_id is not None:
            with trio.move_on_after(DELETE_TIMEOUT):
                try:
                    await self._http.delete(self.url, headers=self._session_headers())
                except httpx.HTTPError as exc:
                    log.debug("DELETE of the session failed: %r", exc)
        self._in_send.close()
        self._nursery.cancel_scope.cancel()

    # -- headers --------------------------------------------------------------------------
    def _session_headers(self) -> dict[str, str]:
        headers = dict(self._base)
        if self.session_id is not None:
            headers[HEADER_SESSION_ID] = self.session_id
        if self.protocol_version is not None:
            headers[HEADER_PROTOCOL_VERSION] = self.protocol_version
        return headers

    def _headers(self, method: str | None, params: dict[str, Any] | None, modern: bool) -> dict[str, str]:
        if not modern:
            headers = self._session_headers()
        else:
            headers = dict(self._base)
            meta = (params or {}).get("_meta") or {}
            headers[HEADER_PROTOCOL_VERSION] = str(meta.get(PROTOCOL_VERSION_KEY))
            assert method is not None
            headers[HEADER_METHOD] = method
            name = expected_name(method, params)
            if name is not None:
                headers[HEADER_NAME] = encode_header_value(name)
            if method == "tools/call" and name is not None and name in self.tool_headers:
                headers.update(param_header_values(self.tool_headers[name], (params or {}).get("arguments")))
        headers["accept"] = ACCEPT_BOTH
        headers["content-type"] = JSON
        return headers

    # -- incoming ---------------------------------------------------------------------------
    async def _feed(self, data: bytes) -> None:
        try:
            await self._in_send.send(data)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            pass

    async def _fail(self, request_id: jsonrpc.RequestId | None, message: str) -> None:
        if request_id is not None:
            await self._feed(jsonrpc.encode_error(request_id, INTERNAL_ERROR, message))
        else:
            log.info("%s", message)

    def _session_lost(self) -> None:
        log.info("the server ended the HTTP session")
        self.session_id = None
        self._in_send.close()

    # -- POST -------------------------------------------------------------------------------
    async def _modern_post(
        self, message: bytes, headers: dict[str, str], request_id: jsonrpc.RequestId, scope: trio.CancelScope
    ) -> None:
        try:
            with scope:
                await self._post(message, headers, request_id, True)
        finally:
            self._modern_calls.pop(request_id, None)

    async def _post(
        self,
        message: bytes,
        headers: dict[str, str],
        request_id: jsonrpc.RequestId | None,
        modern: bool,
        *,
        initialize: bool = False,
    ) -> None:
        try:
            for attempt in range(UNAVAILABLE_RETRIES + 1):
                async with self._http.stream("POST", self.url, content=message, headers=headers) as response:
                    wait = (
                        _retry_after(response)
                        if (modern or initialize) and attempt < UNAVAILABLE_RETRIES
                        else None
                    )
                    if wait is None:
                        await self._answer(response, request_id, modern, initialize)
                        return
                    await response.aread()
                # 503 + Retry-After: a server process stopping refused it unprocessed, and
                # closed the connection; a balancer sends the retry to another process.
                log.info("HTTP 503 (the server is stopping): retrying in %.1f s", wait)
                await trio.sleep(wait)
        except httpx.HTTPError as exc:
            await self._fail(request_id, f"HTTP request failed: {exc!r}")
        except AuthorizationError as exc:
            self.auth_error = exc
            await self._fail(request_id, f"authorization failed: {exc}")

    async def _answer(
        self, response: httpx.Response, request_id: jsonrpc.RequestId | None, modern: bool, initialize: bool
    ) -> None:
        status = response.status_code
        content_type = response.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        self.refusal = None
        if status in (401, 403):
            self.challenge = response.headers.get("www-authenticate")
        if status == 202:
            return
        if status == 404 and not modern and HEADER_SESSION_ID in response.request.headers:
            await self._fail(request_id, "HTTP 404: the server ended the session")
            self._session_lost()
            return
        if status == 200 and content_type == SSE:
            if initialize:
                self.session_id = response.headers.get(HEADER_SESSION_ID) or self.session_id
            last_id, answered = await self._consume(response, request_id, initialize=initialize)
            if answered or request_id is None:
                return
            if not modern and last_id is not None and self.session_id is not None:
                await self._resume(last_id, request_id)
            else:
                await self._fail(request_id, "the server closed the response stream without a response")
            return
        body = await response.aread()
        if content_type == JSON:
            try:
                obj = json.loads(body)
            except ValueError:
                obj = None
            if _is_jsonrpc(obj):
                assert isinstance(obj, dict)
                if "error" in obj and obj.get("id") is None and request_id is not None:
                    obj["id"] = request_id  # an HTTP-level refusal of this request
                    body = json.dumps(obj).encode()
                    if status >= 400:
                        error = obj["error"] if isinstance(obj["error"], dict) else {}
                        self.refusal = (status, str(error.get("message") or response.reason_phrase))
                if initialize and status == 200:
                    self.session_id = response.headers.get(HEADER_SESSION_ID)
                    self._note_version(obj)
                await self._feed(body)
                return
        # Not a JSON-RPC message (an HTML page, or an OAuth error body such as
        # {"error": "invalid_token"}): it is never handed to the session, which would answer it.
        text = body.decode("utf-8", errors="replace").strip()[:200]
        if status >= 400:
            self.refusal = (status, text)
        await self._fail(request_id, f"HTTP {status} {response.reason_phrase}: {text}".rstrip(": "))

    def _note_version(self, message: Any) -> None:
        """Remember the version an ``initialize`` result agreed on."""
        result = message.get("result") if isinstance(message, dict) else None
        version = result.get("protocolVersion") if isinstance(result, dict) else None
        if isinstance(version, str):
            self.protocol_version = version

    async def _consume(
        self, response: httpx.Response, request_id: jsonrpc.RequestId | None, *, initialize: bool = False
    ) -> tuple[str | None, bool]:
        """Feed an SSE stream's events in; (the last event id, whether ``request_id`` was answered)."""
        decoder = SSEDecoder()
        last_id: str | None = None
        answered = False
        try:
            async for chunk in response.aiter_bytes():
                for event in decoder.feed(chunk):
                    if event.retry is not None:
                        self.retry = event.retry / 1000
                    if event.id is not None:
                        last_id = event.id
                    if not event.data:
                        continue
                    if request_id is not None and _answers(event.data, request_id):
                        answered = True
                        if initialize:
                            self._note_version(json.loads(event.data))
                    await self._feed(event.data.encode("utf-8"))
        except httpx.HTTPError as exc:
            log.debug("SSE stream dropped: %r", exc)
        return last_id, answered

    async def _resume(self, last_id: str, request_id: jsonrpc.RequestId) -> None:
        """A POST stream dropped before its response: GET it again from ``last_id``."""
        failures = 0
        while failures < MAX_RESUME_ATTEMPTS and not self.closed:
            await trio.sleep(self.retry)
            headers = {**self._session_headers(), "accept": SSE, HEADER_LAST_EVENT_ID: last_id}
            try:
                async with self._http.stream("GET", self.url, headers=headers) as response:
                    if response.status_code == 404:
                        await self._fail(request_id, "HTTP 404: the server ended the session")
                        self._session_lost()
                        return
                    if response.status_code != 200:
                        failures += 1
                        if response.status_code in (400, 405):
                            break
                        continue
                    failures = 0
                    new_id, answered = await self._consume(response, request_id)
                    if answered:
                        return
                    last_id = new_id or last_id
            except (httpx.HTTPError, AuthorizationError):
                failures += 1
        await self._fail(request_id, "the response stream dropped and could not be resumed")

    # -- the GET stream -------------------------------------------------------------------
    async def _get_stream(self, opened: trio.Event | None = None) -> None:
        """Keep the session's GET stream open: server requests and notifications. Sets
        ``opened`` once the first GET is answered (or failed)."""
        last_id: str | None = None
        failures = 0
        opened = opened if opened is not None else trio.Event()
        while not self.closed and self.session_id is not None:
            headers = {**self._session_headers(), "accept": SSE}
            if last_id is not None:
                headers[HEADER_LAST_EVENT_ID] = last_id
            try:
                async with self._http.stream("GET", self.url, headers=headers) as response:
                    opened.set()
                    if response.status_code == 405:
                        return  # the server offers no GET stream
                    if response.status_code == 404:
                        self._session_lost()
                        return
                    if response.status_code == 200:
                        failures = 0
                        new_id, _ = await self._consume(response, None)
                        last_id = new_id or last_id
                    else:
                        failures += 1
            except (httpx.HTTPError, AuthorizationError) as exc:
                log.debug("GET stream failed: %r", exc)
                failures += 1
            opened.set()
            await trio.sleep(self.retry * min(failures + 1, 30))


UNAVAILABLE_RETRIES = 3
"""How often a stateless (2026-07-28) request, or an ``initialize``, is sent again after a 503
with ``Retry-After`` (waiting that long, at most :data:`MAX_RETRY_AFTER` seconds)."""
MAX_RETRY_AFTER = 5.0


def _retry_after(response: httpx.Response) -> float | None:
    """The wait a 503 with ``Retry-After`` (seconds) asks for; None for any other answer."""
    if response.status_code != 503:
        return None
    try:
        return min(max(float(response.headers.get("retry-after", "")), 0.0), MAX_RETRY_AFTER)
    except ValueError:
        return None


def _is_jsonrpc(obj: Any) -> bool:
    """A JSON-RPC 2.0 response (``result``, or an ``error`` object) or request/notification."""
    if not isinstance(obj, dict) or obj.get("jsonrpc") != "2.0":
        return False
    if isinstance(obj.get("method"), str):
        return True
    return "result" in obj or isinstance(obj.get("error"), dict)


def _answers(data: str, request_id: jsonrpc.RequestId) -> bool:
    try:
        message = json.loads(data)
    except ValueError:
        return False
    return isinstance(message, dict) and "method" not in message and message.get("id") == request_id


@asynccontextmanager
async def open_http_transport(
    url: str,
    *,
    token: str | None = None,
    headers: dict[str, str] | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    verify: ssl.SSLContext | bool = True,
    auth: httpx.Auth | None = None,
) -> AsyncIterator[HttpTransport]:
    """An :class:`HttpTransport` to the MCP endpoint at ``url`` (``http://`` or ``https://``).

    ``token`` is sent as ``Authorization: Bearer``; ``headers`` are added to every request;
    ``verify`` is httpx's TLS verification (a context, or False to turn it off); ``auth`` an
    httpx authentication flow for every request, such as :class:`~trio_mcp.client.OAuth`.
    """
    if not url.lower().startswith(("http://", "https://")):
        raise ValueError(f"not an http:// or https:// URL: {url!r}")
    timeout = httpx.Timeout(connect=connect_timeout, read=None, write=30.0, pool=None)
    if verify is True and url.lower().startswith("http://"):
        verify = False  # no TLS to an http:// URL (no redirects are followed): skip loading CAs
    with unwrap_single():
        async with (
            httpx.AsyncClient(timeout=timeout, verify=verify, follow_redirects=False, auth=auth) as http,
            trio.open_nursery() as nursery,
        ):
            transport = HttpTransport(http, url, nursery, token=token, headers=headers)
            try:
                yield transport
            finally:
                with trio.CancelScope(shield=True):
                    await transport.aclose()
                nursery.cancel_scope.cancel()


@asynccontextmanager
async def connect_http(
    url: str,
    *,
    token: str | None = None,
    auth: httpx.Auth | None = None,
    protocol: str = LATEST_VERSION,
    on_elicit: ElicitationHandler | None = None,
    on_sample: SamplingHandler | None = None,
    roots: Sequence[Mapping[str, Any]] | None = None,
    headers: dict[str, str] | None = None,
    connect_timeout: float = CONNECT_TIMEOUT,
    verify: ssl.SSLContext | bool = True,
    on_elicit_url: UrlElicitationHandler | None = None,
    on_elicitation_complete: ElicitationCompleteCallback | None = None,
) -> AsyncIterator[Client]:
    """A connected :class:`~trio_mcp.Client` to the MCP endpoint at ``url``.

    ``on_elicit``, ``on_elicit_url``, ``on_elicitation_complete``, ``on_sample`` and ``roots``
    as for :func:`~trio_mcp.client.connect`.

    ``protocol`` as for :func:`~trio_mcp.client.connect`: a handshake-era version (default
    2025-11-25: a session), ``"2026-07-28"`` (stateless), or ``"auto"`` (probe, then fall back).

    Authorization: a static ``token`` (``Authorization: Bearer``), or ``auth``, an
    :class:`~trio_mcp.client.OAuth` that answers the server's 401 and 403 with the OAuth 2.1
    flow of the MCP specification (see :mod:`trio_mcp.client.auth`). A server that refuses
    the connection with 401 or 403 all the same raises
    :class:`~trio_mcp.client.AuthorizationError` (with its status and ``WWW-Authenticate``).

    >>> # async with connect_http("http://127.0.0.1:8000/mcp", protocol="2026-07-28") as client:
    >>> #     result = await client.call_tool("echo", {"text": "hi"})
    """
    async with open_http_transport(
        url, token=token, headers=headers, connect_timeout=connect_timeout, verify=verify, auth=auth
    ) as transport:
        opened = False
        try:
            async with connect(
                transport,
                protocol=protocol,
                on_elicit=on_elicit,
                on_sample=on_sample,
                roots=roots,
                on_elicit_url=on_elicit_url,
                on_elicitation_complete=on_elicitation_complete,
            ) as client:
                opened = True
                yield client
        except BaseException as exc:  # a group too: the transport closing cancels the client's tasks
            if opened:
                raise
            refused = _refusal_error(transport)
            if refused is None or not _holds(exc, (McpError, ConnectionClosed)):
                raise
            raise refused from exc


def _holds(error: BaseException, kinds: tuple[type[BaseException], ...]) -> bool:
    """Whether ``error``, or one exception of the group it is, is one of ``kinds``."""
    if isinstance(error, BaseExceptionGroup):
        return any(_holds(inner, kinds) for inner in error.exceptions)
    return isinstance(error, kinds)


def _refusal_error(transport: HttpTransport) -> AuthorizationError | None:
    """What a handshake refused at the HTTP level for want of authorization really was."""
    if transport.auth_error is not None:
        return transport.auth_error
    if transport.refusal is None or transport.refusal[0] not in (401, 403):
        return None
    status, text = transport.refusal
    what = "needs authorization" if status == 401 else "refused the credentials (403)"
    return AuthorizationError(
        f"the server {what}: HTTP {status} {text}".rstrip(), status=status, challenge=transport.challenge
    )
