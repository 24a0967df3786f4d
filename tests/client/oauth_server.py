"""A tiny HTTP server (Trio + h11) and a tiny OAuth 2.1 authorization server on it, for the
client's authorization tests: real sockets, real redirects, real PKCE checks."""

from __future__ import annotations

import base64
import hashlib
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import attrs
import h11
import trio


@attrs.define
class Request:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def form(self) -> dict[str, str]:
        return {k: v[0] for k, v in parse_qs(self.body.decode()).items()}


@attrs.define
class Response:
    status: int
    body: bytes = b""
    headers: dict[str, str] = attrs.field(factory=dict)
    stream: AsyncIterator[bytes] | None = None  # a streamed body (after the headers), chunked

    @classmethod
    def json(cls, status: int, data: Any, **headers: str) -> Response:
        return cls(status, json.dumps(data).encode(), {"content-type": "application/json", **headers})


Handler = Callable[[Request], Awaitable[Response]]


async def serve(handler: Handler, *, task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve ``handler`` on 127.0.0.1 (keep-alive), reporting the port."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])

    async def connection(stream: trio.SocketStream) -> None:
        conn = h11.Connection(h11.SERVER)
        request: h11.Request | None = None
        body = b""
        async with stream:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    try:
                        data = await stream.receive_some(65536)
                    except trio.BrokenResourceError:
                        return
                    conn.receive_data(data)
                    if not data:
                        return
                elif isinstance(event, h11.Request):
                    request, body = event, b""
                elif isinstance(event, h11.Data):
                    body += event.data
                elif isinstance(event, h11.EndOfMessage) and request is not None:
                    target = request.target.decode()
                    parts = urlsplit(target)
                    got = Request(
                        request.method.decode(),
                        parts.path,
                        {k: v[0] for k, v in parse_qs(parts.query).items()},
                        {k.decode().lower(): v.decode() for k, v in request.headers},
                        body,
                    )
                    answer = await handler(got)
                    headers = list(answer.headers.items())
                    if answer.stream is None:
                        headers.append(("content-length", str(len(answer.body))))
                    else:
                        headers.append(("transfer-encoding", "chunked"))
                    try:
                        head = h11.Response(status_code=answer.status, headers=headers)
                        await stream.send_all(conn.send(head))
                        if answer.stream is not None:
                            async for chunk in answer.stream:
                                await stream.send_all(conn.send(h11.Data(data=chunk)))
                        else:
                            await stream.send_all(conn.send(h11.Data(data=answer.body)))
                        await stream.send_all(conn.send(h11.EndOfMessage()))
                    except trio.BrokenResourceError:
                        return
                    if conn.our_state is h11.MUST_CLOSE:
                        return
                    conn.start_next_cycle()
                    request = None
                else:
                    return

    await trio.serve_listeners(connection, listeners)


def s256(verifier: str) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()


@attrs.define
class AuthServer:
    """An authorization server that authorizes at once (no login page): dynamic registration,
    the authorization code with PKCE S256 (checked), refresh tokens, client credentials.
    ``tokens`` maps each access token it issued to its scopes; tests revoke by deleting."""

    url: str = ""
    expires_in: int = 3600
    scopes_supported: list[str] | None = None
    grantable: set[str] | None = None  # None: whatever is asked
    registrations: list[dict[str, Any]] = attrs.field(factory=list)
    authorizations: list[dict[str, str]] = attrs.field(factory=list)
    token_requests: list[dict[str, str]] = attrs.field(factory=list)
    tokens: dict[str, set[str]] = attrs.field(factory=dict)
    clients: dict[str, str | None] = attrs.field(factory=dict)  # client_id -> secret
    _codes: dict[str, dict[str, str]] = attrs.field(factory=dict)
    _refresh: dict[str, set[str]] = attrs.field(factory=dict)
    _counter: Any = attrs.field(factory=lambda: itertools.count(1))

    def metadata(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "issuer": self.url,
            "authorization_endpoint": self.url + "/authorize",
            "token_endpoint": self.url + "/token",
            "registration_endpoint": self.url + "/register",
            "response_types_supported": ["code"],
            "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
            "code_challenge_methods_supported": ["S256"],
            "token_endpoint_auth_methods_supported": ["client_secret_basic", "none"],
            "authorization_response_iss_parameter_supported": True,
        }
        if self.scopes_supported is not None:
            data["scopes_supported"] = self.scopes_supported
        return data

    def _issue(self, scopes: set[str]) -> dict[str, Any]:
        if self.grantable is not None:
            scopes = scopes & self.grantable
        n = next(self._counter)
        access, refresh = f"at-{n}", f"rt-{n}"
        self.tokens[access] = scopes
        self._refresh[refresh] = scopes
        return {
            "access_token": access,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "refresh_token": refresh,
            "scope": " ".join(sorted(scopes)),
        }

    async def __call__(self, request: Request) -> Response:
        if request.path == "/.well-known/oauth-authorization-server":
            return Response.json(200, self.metadata())
        if request.path == "/register" and request.method == "POST":
            body = json.loads(request.body)
            self.registrations.append(body)
            client_id = f"client-{len(self.registrations)}"
            self.clients[client_id] = None
            return Response.json(201, {**body, "client_id": client_id})
        if request.path == "/authorize":
            query = request.query
            self.authorizations.append(query)
            code = f"code-{next(self._counter)}"
            self._codes[code] = query
            back = {"code": code, "state": query.get("state", ""), "iss": self.url}
            return Response(302, headers={"location": query["redirect_uri"] + "?" + urlencode(back)})
        if request.path == "/token" and request.method == "POST":
            form = request.form()
            self.token_requests.append(form)
            grant = form.get("grant_type")
            if grant == "authorization_code":
                asked = self._codes.pop(form.get("code", ""), None)
                if (
                    asked is None
                    or s256(form.get("code_verifier", "")) != asked.get("code_challenge")
                    or form.get("resource") != asked.get("resource")
                    or form.get("redirect_uri") != asked.get("redirect_uri")
                ):
                    return Response.json(400, {"error": "invalid_grant"})
                return Response.json(200, self._issue(set(asked.get("scope", "").split())))
            if grant == "refresh_token":
                scopes = self._refresh.pop(form.get("refresh_token", ""), None)
                if scopes is None:
                    return Response.json(400, {"error": "invalid_grant"})
                return Response.json(200, self._issue(scopes))
            if grant == "client_credentials":
                basic = request.headers.get("authorization", "")
                expected = base64.b64encode(b"machine:s3cret").decode()
                if basic != f"Basic {expected}":
                    return Response.json(401, {"error": "invalid_client"})
                return Response.json(200, self._issue(set(form.get("scope", "").split())))
            if grant == "urn:ietf:params:oauth:grant-type:jwt-bearer":
                if form.get("assertion") != "workload-jwt" or form.get("client_id") != "workload":
                    return Response.json(400, {"error": "invalid_grant"})
                return Response.json(200, self._issue(set(form.get("scope", "").split())))
            return Response.json(400, {"error": "unsupported_grant_type"})
        return Response(404, b"not found")


def now() -> float:
    return time.time()
