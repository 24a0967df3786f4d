"""The server side of OAuth (issue 31, item 4), over real sockets: JWT verification with keys
fetched from a JWKS endpoint (cached, refreshed on an unknown ``kid``, rate-limited, bounded),
token introspection (RFC 7662), who calls as a tool sees it (``ctx.identity``, ``ctx.scopes``,
``ctx.headers``, in both eras, in tasks, in threads, over WebSocket), and per-tool scopes (403
``insufficient_scope`` over HTTP, -32003 over WebSocket). The JWKS and introspection endpoints
are served by the test itself (h11 on Trio: ``tests/client/oauth_server.py``)."""

from __future__ import annotations

import base64
import importlib.util
import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import httpx
import jwt
import pytest
import trio
from conftest import kit_client
from cryptography.hazmat.primitives.asymmetric import ec
from trio.testing import MockClock

from trio_mcp import Context, McpError, Server, ThreadContext
from trio_mcp.client import connect_http, connect_websocket
from trio_mcp.protocol.messages import DetailedTask
from trio_mcp.protocol.modern import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY, TASKS_EXTENSION
from trio_mcp.server import serve_http, serve_websocket
from trio_mcp.transports.security import (
    INSUFFICIENT_SCOPE_CODE,
    AccessToken,
    IntrospectionVerifier,
    JwksVerifier,
    VerifierUnavailable,
    introspection_verifier,
    jwt_verifier,
)


def _load_oauth_server() -> Any:
    path = Path(__file__).resolve().parents[1] / "client" / "oauth_server.py"
    spec = importlib.util.spec_from_file_location("_auth_server_test_http", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_http = _load_oauth_server()
Request, Response, serve = _http.Request, _http.Response, _http.serve

RESOURCE = "https://mcp.example/mcp"
ERAS = ["2025-11-25", "2026-07-28"]
MODERN = "2026-07-28"
POST_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


# -- a JWKS endpoint ----------------------------------------------------------------------------
@attrs.define
class Keys:
    """Signing keys (EC P-256) and the JWKS endpoint publishing some of them."""

    private: dict[str, ec.EllipticCurvePrivateKey] = attrs.field(factory=dict)
    published: list[str] = attrs.field(factory=list)
    extra: list[dict[str, Any]] = attrs.field(factory=list)  # more JWKs to publish
    fetches: int = 0
    status: int = 200

    def add(self, kid: str, *, publish: bool = True) -> None:
        self.private[kid] = ec.generate_private_key(ec.SECP256R1())
        if publish:
            self.published.append(kid)

    def jwk(self, kid: str) -> dict[str, Any]:
        data: dict[str, Any] = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(self.private[kid].public_key()))
        return {**data, "kid": kid, "use": "sig", "alg": "ES256"}

    def token(self, kid: str | None, **claims: Any) -> str:
        claims = {"sub": "alice", "aud": RESOURCE, "exp": time.time() + 60, **claims}
        signer = self.private[kid] if kid in self.private else next(iter(self.private.values()))
        headers = {"kid": kid} if kid is not None else {}
        return jwt.encode(claims, signer, algorithm="ES256", headers=headers)

    async def __call__(self, request: Request) -> Response:
        self.fetches += 1
        if self.status != 200:
            return Response(self.status, b"unavailable")
        return Response.json(200, {"keys": [self.jwk(kid) for kid in self.published] + self.extra})


@asynccontextmanager
async def endpoint(handler: Any) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, handler)
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def test_keys_are_fetched_once_and_an_unknown_kid_refreshes_them_once() -> None:
    keys = Keys()
    keys.add("k1")
    async with endpoint(keys) as url:
        verify = jwt_verifier(jwks_url=url + "/jwks", audience=RESOURCE, min_refresh_interval=0.2)
        assert isinstance(verify, JwksVerifier)
        assert await verify(keys.token("k1", scope="a b")) == AccessToken("alice", ["a", "b"])
        assert await verify(keys.token("k1", sub="bob")) == AccessToken("bob")
        assert keys.fetches == 1  # cached
        await trio.sleep(0.25)
        keys.add("k2")  # the authorization server rotates its keys
        assert await verify(keys.token("k2")) == AccessToken("alice")
        assert keys.fetches == 2  # one refresh for the unknown kid
        assert await verify(keys.token("k2")) == AccessToken("alice")
        assert await verify(keys.token("k1")) == AccessToken("alice")
        assert keys.fetches == 2
        assert verify.key_ids == ["k1", "k2"]
        # Still a JWT verifier: wrong audience, expired, unsigned by a published key → refused.
        assert await verify(keys.token("k1", aud="https://other.example/mcp")) is None
        assert await verify(keys.token("k1", exp=time.time() - 5)) is None
        keys.add("k3", publish=False)
        forged = jwt.encode(
            {"sub": "mallory", "aud": RESOURCE, "exp": time.time() + 60},
            keys.private["k3"],
            algorithm="ES256",
            headers={"kid": "k1"},  # names a known key, signed by another
        )
        assert await verify(forged) is None


async def test_a_flood_of_made_up_kids_costs_at_most_one_fetch_per_interval(mock_clock: MockClock) -> None:
    # On a clock moved by hand: however long the machine takes to verify the flood, it all
    # comes within the interval (real sockets still serve the key set).
    keys = Keys()
    keys.add("k1")
    async with endpoint(keys) as url:
        verify = jwt_verifier(jwks_url=url + "/jwks", audience=RESOURCE, min_refresh_interval=0.5)
        assert await verify(keys.token("k1")) is not None
        assert keys.fetches == 1

        async def bogus(n: int) -> None:
            assert await verify(keys.token(f"made-up-{n}")) is None

        async with trio.open_nursery() as nursery:  # at once, within the interval
            for n in range(100):
                nursery.start_soon(bogus, n)
        for n in range(50):  # one after another
            await bogus(n)
        assert keys.fetches == 1
        mock_clock.jump(0.55)
        async with trio.open_nursery() as nursery:  # the interval passed: one refresh, shared
            for n in range(100):
                nursery.start_soon(bogus, n)
        assert keys.fetches == 2
        assert await verify(keys.token("k1")) is not None  # the real key still works
        assert keys.fetches == 2


async def test_the_key_set_is_bounded_and_unusable_keys_are_skipped() -> None:
    keys = Keys()
    for n in range(40):
        keys.add(f"k{n}")
    keys.extra = [
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},  # a secret: never from a JWKS
        {"kty": "EC", "kid": "broken", "crv": "P-256", "x": "AA", "y": "AA"},
    ]
    keys.published.reverse()
    async with endpoint(keys) as url:
        verify = jwt_verifier(jwks_url=url + "/jwks", audience=RESOURCE, max_keys=5)
        assert await verify(keys.token("k39")) is not None  # published first: kept
        assert verify.key_ids == ["k39", "k38", "k37", "k36", "k35"]
        assert await verify(keys.token("k0")) is None  # past the cap: not kept
    only = Keys()
    only.add("k1")
    only.extra = [{"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"}]
    async with endpoint(only) as url:
        verify = jwt_verifier(jwks_url=url + "/jwks", audience=RESOURCE)
        assert await verify(only.token(None)) is not None  # no kid, and one key: that key
        assert verify.key_ids == ["k1"]


async def test_an_unreachable_jwks_is_an_error_not_a_refusal() -> None:
    keys = Keys(status=503)
    keys.add("k1")
    async with endpoint(keys) as url:
        verify = jwt_verifier(jwks_url=url + "/jwks", audience=RESOURCE, min_refresh_interval=0)
        with pytest.raises(VerifierUnavailable):
            await verify(keys.token("k1"))
        keys.status = 200
        assert await verify(keys.token("k1")) is not None
        keys.status = 503  # keys known: kept when a refresh fails
        assert await verify(keys.token("k2")) is None
        assert await verify(keys.token("k1")) is not None
    with pytest.raises(ValueError, match="https"):
        jwt_verifier(jwks_url="http://auth.example/jwks", audience=RESOURCE)
    with pytest.raises(ValueError, match="HMAC"):
        jwt_verifier(jwks_url="https://auth.example/jwks", audience=RESOURCE, algorithms=["HS256"])
    with pytest.raises(TypeError):
        jwt_verifier("secret", jwks_url="https://auth.example/jwks", audience=RESOURCE)


async def test_a_jwks_verifier_guards_a_server_end_to_end() -> None:
    keys = Keys()
    keys.add("k1")
    server = Server("guarded")

    @server.tool
    async def whoami(ctx: Context) -> str:
        return f"{ctx.identity} {' '.join(sorted(ctx.scopes))}"

    async with endpoint(keys) as url, trio.open_nursery() as nursery:
        verify = jwt_verifier(jwks_url=url + "/jwks", audience=RESOURCE, required_scopes=["mcp"])
        port = await nursery.start(partial(serve_http, server, authenticate=verify, resource_url=RESOURCE))
        mcp = f"http://127.0.0.1:{port}/mcp"
        for protocol in ERAS:
            async with connect_http(
                mcp, token=keys.token("k1", scope="mcp extra"), protocol=protocol
            ) as client:
                assert (await client.call_tool("whoami", {})).text == "alice extra mcp"
        async with httpx.AsyncClient() as http:
            body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
            refused = await http.post(
                mcp, content=body, headers={**POST_HEADERS, "authorization": f"Bearer {keys.token('nope')}"}
            )
            assert refused.status_code == 401
            keys.status = 503
            verify._keys.clear()
            verify._loaded_at = None
            verify.min_refresh_interval = 0
            broken = await http.post(
                mcp, content=body, headers={**POST_HEADERS, "authorization": f"Bearer {keys.token('k1')}"}
            )
            assert broken.status_code == 500  # the endpoint's fault, not the token's
        nursery.cancel_scope.cancel()


# -- introspection --------------------------------------------------------------------------------
@attrs.define
class Introspection:
    """An RFC 7662 endpoint: ``tokens`` maps a token to what is said of it."""

    tokens: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    asked: list[dict[str, str]] = attrs.field(factory=list)

    async def __call__(self, request: Request) -> Response:
        expected = "Basic " + base64.b64encode(b"mcp-server:s%3Acret").decode()
        if request.method != "POST" or request.headers.get("authorization") != expected:
            return Response.json(401, {"error": "invalid_client"})
        form = request.form()
        self.asked.append(form)
        return Response.json(200, self.tokens.get(form.get("token", ""), {"active": False}))


async def test_introspection_active_inactive_expired_and_cached_until_exp() -> None:
    state = Introspection()
    now = time.time()
    state.tokens = {
        "good": {
            "active": True,
            "sub": "alice",
            "scope": "mcp files:read",
            "aud": RESOURCE,
            "exp": now + 600,
        },
        "named": {"active": True, "username": "bob", "aud": [RESOURCE, "other"], "exp": now + 600},
        "inactive": {"active": False, "sub": "alice"},
        "expired": {"active": True, "sub": "alice", "aud": RESOURCE, "exp": now - 5},
        "elsewhere": {"active": True, "sub": "alice", "aud": "https://other.example/mcp"},
        "anonymous": {"active": True, "aud": RESOURCE},
        "narrow": {"active": True, "sub": "dave", "aud": RESOURCE, "scope": "files:read"},
    }
    async with endpoint(state) as url:
        verify = introspection_verifier(
            url + "/introspect",
            client_id="mcp-server",
            client_secret="s:cret",  # form-encoded in Basic (RFC 6749 §2.3.1)
            audience=RESOURCE,
            cache_ttl=30,
        )
        assert isinstance(verify, IntrospectionVerifier)
        assert await verify("good") == AccessToken("alice", ["mcp", "files:read"])
        assert await verify("good") == AccessToken("alice", ["mcp", "files:read"])
        assert [form["token"] for form in state.asked] == ["good"]  # the second one was cached
        assert state.asked[0]["token_type_hint"] == "access_token"
        assert await verify("named") == AccessToken("bob")
        for refused in ("inactive", "expired", "elsewhere", "anonymous", "unknown"):
            assert await verify(refused) is None
            assert await verify(refused) is None  # refusals are not cached: asked again
        assert [form["token"] for form in state.asked].count("inactive") == 2
        # Cached until its exp, not a moment longer.
        state.tokens["soon"] = {"active": True, "sub": "carol", "aud": RESOURCE, "exp": time.time() + 1.0}
        assert await verify("soon") == AccessToken("carol")
        assert await verify("soon") == AccessToken("carol")
        assert [form["token"] for form in state.asked].count("soon") == 1
        await trio.sleep(max(0.0, state.tokens["soon"]["exp"] - time.time()) + 0.05)
        assert await verify("soon") is None  # asked again: its exp has passed
        assert [form["token"] for form in state.asked].count("soon") == 2
        # A revoked token is refused once its cache entry ends.
        short = introspection_verifier(
            url + "/introspect", client_id="mcp-server", client_secret="s:cret", cache_ttl=0.1
        )
        assert await short("narrow") == AccessToken("dave", ["files:read"])
        state.tokens["narrow"] = {"active": False}
        await trio.sleep(0.15)
        assert await short("narrow") is None
        # Bounded: only the most recently used are kept.
        small = introspection_verifier(
            url + "/introspect", client_id="mcp-server", client_secret="s:cret", max_cache=1
        )
        await small("good")
        await small("named")
        before = small.requests
        await small("named")
        await small("good")
        assert small.requests == before + 1
        # Wrong client credentials: the endpoint's refusal is an error, not the token's.
        wrong = introspection_verifier(url + "/introspect", client_id="mcp-server", client_secret="guess")
        with pytest.raises(VerifierUnavailable):
            await wrong("good")


async def test_introspection_enforces_required_scopes_through_http() -> None:
    state = Introspection()
    state.tokens = {
        "full": {"active": True, "sub": "alice", "scope": "mcp"},
        "bare": {"active": True, "sub": "alice", "scope": "profile"},
    }
    server = Server("introspected")

    @server.tool
    async def whoami(ctx: Context) -> str:
        return f"{ctx.identity}:{','.join(sorted(ctx.scopes))}"

    async with endpoint(state) as url, trio.open_nursery() as nursery:
        verify = introspection_verifier(
            url + "/introspect", client_id="mcp-server", client_secret="s:cret", required_scopes=["mcp"]
        )
        port = await nursery.start(partial(serve_http, server, authenticate=verify))
        mcp = f"http://127.0.0.1:{port}/mcp"
        async with connect_http(mcp, token="full", protocol=MODERN) as client:
            assert (await client.call_tool("whoami", {})).text == "alice:mcp"
        async with httpx.AsyncClient() as http:
            body = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'
            bare = await http.post(
                mcp, content=body, headers={**POST_HEADERS, "authorization": "Bearer bare"}
            )
            assert bare.status_code == 403
            assert bare.headers["www-authenticate"].startswith(
                'Bearer error="insufficient_scope", scope="mcp"'
            )
            gone = await http.post(
                mcp, content=body, headers={**POST_HEADERS, "authorization": "Bearer gone"}
            )
            assert gone.status_code == 401
        nursery.cancel_scope.cancel()


# -- who calls, as a tool sees it ---------------------------------------------------------------
TOKENS = {
    "alice-token": AccessToken("alice", ["mcp", "files:read"]),
    "writer-token": AccessToken("alice", ["mcp", "files:read", "files:write"]),
    "bob-token": AccessToken("bob", ["mcp"]),
}


async def table_verifier(token: str) -> AccessToken | None:
    await trio.lowlevel.checkpoint()
    return TOKENS.get(token)


def seen(ctx: Context | ThreadContext) -> str:
    return json.dumps(
        {"identity": ctx.identity, "scopes": sorted(ctx.scopes), "headers": dict(ctx.headers)}, sort_keys=True
    )


@attrs.define
class Ran:
    names: list[str] = attrs.field(factory=list)


def identity_server(ran: Ran | None = None) -> Server:
    server = Server("who")
    ran = ran if ran is not None else Ran()

    @server.tool(task_support="optional")
    async def whoami(ctx: Context) -> str:
        ran.names.append("whoami")
        return seen(ctx)

    @server.tool(task_support="required")
    async def whoami_later(ctx: Context) -> str:
        await trio.sleep(0.01)
        return seen(ctx)

    @server.tool
    def whoami_in_a_thread(ctx: ThreadContext) -> str:
        return seen(ctx)

    @server.tool(task_support="optional", scopes=["files:write"])
    async def write(text: str, ctx: Context) -> str:
        ran.names.append("write")
        return f"{ctx.identity} wrote {text}"

    @server.resource("who://me")
    async def me(ctx: Context) -> str:
        return seen(ctx)

    return server


def check_seen(text: str, identity: str | None, scopes: list[str], tag: str | None) -> dict[str, str]:
    data = json.loads(text)
    assert data["identity"] == identity
    assert data["scopes"] == sorted(scopes)
    headers: dict[str, str] = data["headers"]
    assert all(name == name.lower() for name in headers)
    assert headers.get("x-request-tag") == tag
    assert "-token" not in text  # the bearer token is never visible
    return headers


@pytest.mark.parametrize("protocol", ERAS)
async def test_a_tool_sees_the_identity_scopes_and_headers_of_its_request(protocol: str) -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, identity_server(), authenticate=table_verifier))
        url = f"http://127.0.0.1:{port}/mcp"
        async with connect_http(
            url, token="alice-token", protocol=protocol, headers={"X-Request-Tag": "t1"}
        ) as client:
            headers = check_seen(
                (await client.call_tool("whoami", {})).text, "alice", ["mcp", "files:read"], "t1"
            )
            assert headers["authorization"] == "[redacted]"
            assert headers["host"] == f"127.0.0.1:{port}"
            check_seen(
                (await client.call_tool("whoami_in_a_thread", {})).text, "alice", ["mcp", "files:read"], "t1"
            )
            if protocol == MODERN:
                started = await client.start_tool("whoami_later", {})
                assert isinstance(started, DetailedTask)
                task_id = started.task_id
            else:
                task_id = (await client.call_tool_as_task("whoami_later", {})).task.task_id
            done = await client.task_result(task_id)
            check_seen(done.text, "alice", ["mcp", "files:read"], "t1")  # a task: its creator's
        async with connect_http(url, token="bob-token", protocol=protocol) as client:
            check_seen((await client.call_tool("whoami", {})).text, "bob", ["mcp"], None)
        nursery.cancel_scope.cancel()


async def test_in_a_session_the_headers_are_those_of_the_post_that_carried_the_call() -> None:
    # 2025-11-25: identity fixed at initialize; headers (and the token's scopes) per POST.
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, identity_server(), authenticate=table_verifier))
        url = f"http://127.0.0.1:{port}/mcp"
        async with httpx.AsyncClient() as http:

            def headers(token: str, tag: str, session: str | None = None) -> dict[str, str]:
                out = {**POST_HEADERS, "authorization": f"Bearer {token}", "x-request-tag": tag}
                if session is not None:
                    out["mcp-session-id"] = session
                return out

            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            }
            opened = await http.post(url, json=init, headers=headers("alice-token", "init"))
            session = opened.headers["mcp-session-id"]
            note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
            assert (
                await http.post(url, json=note, headers=headers("alice-token", "n", session))
            ).status_code == 202

            async def answer(token: str, tag: str, id: int, method: str, params: Any) -> dict[str, Any]:
                body = {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
                response = await http.post(url, json=body, headers=headers(token, tag, session))
                assert response.status_code == 200, response.text
                if response.headers["content-type"] == "application/json":  # the response came first
                    return dict(response.json()["result"])
                lines = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
                result: dict[str, Any] = [json.loads(line) for line in lines if line][-1]["result"]
                return result

            async def call(token: str, tag: str, id: int) -> dict[str, Any]:
                result = await answer(token, tag, id, "tools/call", {"name": "whoami"})
                return json.loads(result["content"][0]["text"])

            first = await call("alice-token", "call-1", 2)
            assert first["headers"]["x-request-tag"] == "call-1"
            assert first["scopes"] == ["files:read", "mcp"]
            stepped = await call("writer-token", "call-2", 3)  # the same identity, a wider token
            assert stepped["headers"]["x-request-tag"] == "call-2"
            assert (
                stepped["scopes"] == ["files:read", "files:write", "mcp"] and stepped["identity"] == "alice"
            )
            # A task keeps what the request creating it brought, not what asks for its result.
            created = await answer(
                "alice-token", "create", 5, "tools/call", {"name": "whoami_later", "task": {"ttl": 60000}}
            )
            task_id = created["task"]["taskId"]
            result = await answer("writer-token", "result", 6, "tasks/result", {"taskId": task_id})
            later = json.loads(result["content"][0]["text"])
            assert later["headers"]["x-request-tag"] == "create" and later["scopes"] == ["files:read", "mcp"]
            other = await http.post(
                url,
                json={"jsonrpc": "2.0", "id": 4, "method": "ping"},
                headers=headers("bob-token", "x", session),
            )
            assert other.status_code == 404  # another identity: not its session
        nursery.cancel_scope.cancel()


async def test_over_websocket_a_tool_sees_the_handshakes_identity_and_headers() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_websocket, identity_server(), authenticate=table_verifier))
        async with connect_websocket(f"ws://127.0.0.1:{port}/", token="alice-token") as client:
            headers = check_seen(
                (await client.call_tool("whoami", {})).text, "alice", ["mcp", "files:read"], None
            )
            assert headers["authorization"] == "[redacted]" and "upgrade" in headers
            created = await client.call_tool_as_task("whoami", {})
            check_seen(
                (await client.task_result(created.task.task_id)).text, "alice", ["mcp", "files:read"], None
            )
        nursery.cancel_scope.cancel()


async def test_without_a_transport_that_knows_there_is_no_one(mcp_clock: Any) -> None:
    async with kit_client(identity_server()) as client:
        data = json.loads((await client.call_tool("whoami", {})).text)
        assert data == {"identity": None, "scopes": [], "headers": {}}


async def test_resources_see_the_caller_too() -> None:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, identity_server(), authenticate=table_verifier))
        async with httpx.AsyncClient() as http:
            body = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "resources/read",
                "params": envelope({"uri": "who://me"}),
            }
            answer = await http.post(
                f"http://127.0.0.1:{port}/mcp",
                json=body,
                headers={**modern_headers("resources/read", "who://me"), "authorization": "Bearer bob-token"},
            )
            text = answer.json()["result"]["contents"][0]["text"]
            check_seen(text, "bob", ["mcp"], None)
        nursery.cancel_scope.cancel()


# -- per-tool scopes -----------------------------------------------------------------------------
def envelope(params: dict[str, Any] | None = None) -> dict[str, Any]:
    capabilities = {"extensions": {TASKS_EXTENSION: {}}}
    return {**(params or {}), "_meta": {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: capabilities}}


def modern_headers(method: str, name: str | None = None) -> dict[str, str]:
    headers = {**POST_HEADERS, "mcp-protocol-version": MODERN, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


@asynccontextmanager
async def scoped_server(ran: Ran, **options: Any) -> AsyncIterator[tuple[str, httpx.AsyncClient]]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, identity_server(ran), **options))
        async with httpx.AsyncClient() as http:
            yield f"http://127.0.0.1:{port}/mcp", http
        nursery.cancel_scope.cancel()


async def open_session(http: httpx.AsyncClient, url: str, token: str) -> str:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "r", "version": "1"},
        },
    }
    auth = {"authorization": f"Bearer {token}"}
    opened = await http.post(url, json=init, headers={**POST_HEADERS, **auth})
    session = opened.headers["mcp-session-id"]
    note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    await http.post(url, json=note, headers={**POST_HEADERS, **auth, "mcp-session-id": session})
    return session


async def call_write(
    http: httpx.AsyncClient,
    url: str,
    token: str,
    protocol: str,
    *,
    task: bool = False,
    session: str | None = None,
) -> httpx.Response:
    params: dict[str, Any] = {"name": "write", "arguments": {"text": "hi"}}
    auth = {"authorization": f"Bearer {token}"}
    if protocol == MODERN:
        if task:
            params["task"] = {}
        body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": envelope(params)}
        return await http.post(url, json=body, headers={**modern_headers("tools/call", "write"), **auth})
    if task:
        params["task"] = {"ttl": 60000}
    assert session is not None
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": params}
    return await http.post(url, json=body, headers={**POST_HEADERS, **auth, "mcp-session-id": session})


@pytest.mark.parametrize("task", [False, True])
@pytest.mark.parametrize("protocol", ERAS)
async def test_a_tool_call_lacking_the_tools_scopes_is_answered_403_before_it_runs(
    protocol: str, task: bool
) -> None:
    ran = Ran()
    verify = jwt_verifier("a-long-enough-shared-secret-for-hs256", audience=RESOURCE, required_scopes=["mcp"])

    def token(scope: str) -> str:
        claims = {"sub": "alice", "aud": RESOURCE, "exp": time.time() + 60, "scope": scope}
        return jwt.encode(claims, "a-long-enough-shared-secret-for-hs256", algorithm="HS256")

    async with scoped_server(ran, authenticate=verify) as (url, http):
        reader, writer = token("mcp files:read"), token("mcp files:write")
        session = await open_session(http, url, reader) if protocol != MODERN else None
        refused = await call_write(http, url, reader, protocol, task=task, session=session)
        assert refused.status_code == 403
        port = url.split(":")[2].split("/")[0]
        assert refused.headers["www-authenticate"] == (
            'Bearer error="insufficient_scope", scope="mcp files:write", '
            f'resource_metadata="http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp"'
        )
        error = refused.json()
        assert error["id"] == 7 and error["error"]["code"] == INSUFFICIENT_SCOPE_CODE
        assert "files:write" in error["error"]["message"]
        assert ran.names == []  # nothing ran
        metadata = (
            await http.get(f"http://127.0.0.1:{port}/.well-known/oauth-protected-resource/mcp")
        ).json()
        assert metadata["scopes_supported"] == ["mcp", "files:write"]  # the verifier's, then the tools'
        if session is not None:
            session = await open_session(http, url, writer)
        allowed = await call_write(http, url, writer, protocol, task=task, session=session)
        assert allowed.status_code == 200, allowed.text
        assert "error" not in allowed.text
        if not task:
            assert "alice wrote hi" in allowed.text
        # Other tools, and unknown ones, are not this check's business.
        other = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "nope"}}
        if protocol == MODERN:
            headers = {**modern_headers("tools/call", "nope"), "authorization": f"Bearer {reader}"}
            other["params"] = envelope(other["params"])  # type: ignore[arg-type]
        else:
            assert session is not None
            headers = {**POST_HEADERS, "authorization": f"Bearer {writer}", "mcp-session-id": session}
        unknown = await http.post(url, json=other, headers=headers)
        assert unknown.status_code != 403 and "-32602" in unknown.text


@pytest.mark.parametrize("protocol", ERAS)
async def test_our_client_raises_the_tools_403_and_a_wider_token_is_served(protocol: str) -> None:
    ran = Ran()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, identity_server(ran), authenticate=table_verifier))
        url = f"http://127.0.0.1:{port}/mcp"
        async with connect_http(url, token="alice-token", protocol=protocol) as client:
            # The 403's body is the JSON-RPC answer to the call: raised as that error.
            with pytest.raises(McpError) as raised:
                await client.call_tool("write", {"text": "hi"})
            assert raised.value.code == INSUFFICIENT_SCOPE_CODE
            assert raised.value.data == {"error": "insufficient_scope", "scope": "files:write"}
        async with connect_http(url, token="writer-token", protocol=protocol) as client:
            assert (await client.call_tool("write", {"text": "hi"})).text == "alice wrote hi"
        nursery.cancel_scope.cancel()
    assert ran.names == ["write"]


async def test_without_a_verifier_tool_scopes_are_not_enforced() -> None:
    ran = Ran()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, identity_server(ran)))
        url = f"http://127.0.0.1:{port}/mcp"
        for protocol in ERAS:
            async with connect_http(url, protocol=protocol) as client:
                assert (await client.call_tool("write", {"text": "hi"})).text == "None wrote hi"
        nursery.cancel_scope.cancel()


async def test_without_a_verifier_at_all_tool_scopes_are_not_enforced(mcp_clock: Any) -> None:
    async with kit_client(identity_server()) as client:  # in memory, as over stdio
        assert (await client.call_tool("write", {"text": "hi"})).text == "None wrote hi"


async def test_over_websocket_a_tool_lacking_scopes_is_answered_minus_32003() -> None:
    ran = Ran()
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            partial(serve_websocket, identity_server(ran), authenticate=table_verifier)
        )
        async with connect_websocket(f"ws://127.0.0.1:{port}/", token="alice-token") as client:
            with pytest.raises(McpError) as raised:
                await client.call_tool("write", {"text": "hi"})
            assert raised.value.code == INSUFFICIENT_SCOPE_CODE
            assert "files:write" in raised.value.message
            with pytest.raises(McpError) as raised:
                await client.call_tool_as_task("write", {"text": "hi"})
            assert raised.value.code == INSUFFICIENT_SCOPE_CODE
            assert ran.names == []
            assert json.loads((await client.call_tool("whoami", {})).text)["identity"] == "alice"
        async with connect_websocket(f"ws://127.0.0.1:{port}/", token="writer-token") as client:
            assert (await client.call_tool("write", {"text": "hi"})).text == "alice wrote hi"
        nursery.cancel_scope.cancel()
    assert ran.names == ["whoami", "write"]
