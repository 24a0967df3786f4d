"""connect_http and authorization, over real sockets: a refusal is raised, never answered (the
401 loop of issue 31), and OAuth 2.1 against a real (tiny) authorization server in front of
our own HTTP server: discovery, registration, PKCE, the resource indicator, refresh, step-up,
client credentials, and the token stores."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
from oauth_server import AuthServer, Request, Response, serve

from trio_mcp import Server
from trio_mcp.client import (
    AuthorizationError,
    FileTokenStore,
    HeadlessAuthorizer,
    MemoryTokenStore,
    OAuth,
    connect_http,
)
from trio_mcp.server import serve_http
from trio_mcp.transports.security import AccessToken, InsufficientScope

ERAS = ["2025-11-25", "2026-07-28"]


# -- the 401 loop ------------------------------------------------------------------------------------
@pytest.mark.parametrize("protocol", ERAS)
@pytest.mark.parametrize("status", [401, 403])
async def test_a_refusal_whose_body_is_not_json_rpc_is_raised_and_never_answered(
    protocol: str, status: int
) -> None:
    posts: list[Request] = []
    challenge = 'Bearer error="invalid_token", resource_metadata="http://127.0.0.1:1/prm"'

    async def refuse(request: Request) -> Response:
        if request.method == "POST":
            posts.append(request)
        return Response.json(status, {"error": "invalid_token"}, **{"www-authenticate": challenge})

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, refuse)
        with trio.fail_after(10), pytest.raises(AuthorizationError) as raised:
            async with connect_http(f"http://127.0.0.1:{port}/mcp", protocol=protocol):
                pass
        nursery.cancel_scope.cancel()
    assert raised.value.status == status
    assert raised.value.challenge == challenge
    assert len(posts) == 1  # the body {"error": ...} was never taken for a message and answered


# -- OAuth against a real authorization server -----------------------------------------------------
@attrs.define
class Resource:
    """What the MCP server (our serve_http) requires of a token; tests change it."""

    auth: AuthServer
    required: set[str] = attrs.field(factory=lambda: {"mcp:read"})
    seen: list[str] = attrs.field(factory=list)

    def verify(self, token: str) -> AccessToken | None:
        self.seen.append(token)
        scopes = self.auth.tokens.get(token)
        if scopes is None:
            return None
        access = AccessToken("user", scopes)
        if not self.required <= scopes:
            raise InsufficientScope(sorted(self.required), access)
        return access


def demo_server() -> Server:
    server = Server("protected")

    @server.tool()
    async def whoami() -> str:
        return "you"

    return server


@asynccontextmanager
async def protected(**auth_options: object) -> AsyncIterator[tuple[str, AuthServer, Resource]]:
    """An authorization server and our HTTP server protected by it; (MCP URL, AS, resource)."""
    auth = AuthServer(**auth_options)  # type: ignore[arg-type]
    resource = Resource(auth)
    async with trio.open_nursery() as nursery:
        as_port = await nursery.start(serve, auth)
        auth.url = f"http://127.0.0.1:{as_port}"

        class Verifier:
            required_scopes = ("mcp:read",)

            def __call__(self, token: str) -> AccessToken | None:
                return resource.verify(token)

        port = await nursery.start(
            partial(serve_http, demo_server(), authenticate=Verifier(), authorization_servers=[auth.url])
        )
        yield f"http://127.0.0.1:{port}/mcp", auth, resource
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("protocol", ERAS)
async def test_oauth_authorizes_with_pkce_and_the_resource_then_calls_the_tool(protocol: str) -> None:
    async with protected() as (url, auth, _resource):
        oauth = OAuth(HeadlessAuthorizer(), client_name="tests")
        with trio.fail_after(15):
            async with connect_http(url, auth=oauth, protocol=protocol) as client:
                assert (await client.call_tool("whoami")).text == "you"
    [registration] = auth.registrations  # dynamic registration, once, as a native client
    assert registration["redirect_uris"] == ["http://localhost:3000/callback"]
    assert "refresh_token" in registration["grant_types"]
    [asked] = auth.authorizations
    assert asked["code_challenge_method"] == "S256"
    assert asked["resource"] == url  # RFC 8707, the canonical URI of the MCP server
    assert asked["scope"] == "mcp:read"  # the challenge's scope
    assert auth.token_requests[0]["grant_type"] == "authorization_code"  # the AS checked the verifier


async def test_without_oauth_a_protected_server_raises_with_its_challenge() -> None:
    async with protected() as (url, _auth, _resource):
        with trio.fail_after(10), pytest.raises(AuthorizationError) as raised:
            async with connect_http(url):
                pass
    assert raised.value.status == 401
    assert raised.value.challenge is not None and "resource_metadata=" in raised.value.challenge


async def test_an_expired_token_is_refreshed_without_a_new_authorization() -> None:
    async with protected(expires_in=0) as (url, auth, _resource):  # every token is already stale
        oauth = OAuth(HeadlessAuthorizer())
        with trio.fail_after(15):
            async with connect_http(url, auth=oauth) as client:
                await client.call_tool("whoami")
                await client.call_tool("whoami")
    grants = [r["grant_type"] for r in auth.token_requests]
    assert grants[0] == "authorization_code"
    assert "refresh_token" in grants[1:]
    assert len(auth.authorizations) == 1  # the user was asked once


async def test_a_revoked_token_is_replaced_through_the_refresh_token() -> None:
    async with protected() as (url, auth, _resource):
        oauth = OAuth(HeadlessAuthorizer())
        with trio.fail_after(15):
            async with connect_http(url, auth=oauth, protocol="2026-07-28") as client:
                await client.call_tool("whoami")
                auth.tokens.clear()  # the server forgets every access token: 401
                assert (await client.call_tool("whoami")).text == "you"
    assert [r["grant_type"] for r in auth.token_requests] == ["authorization_code", "refresh_token"]
    assert len(auth.authorizations) == 1


async def test_403_insufficient_scope_steps_up_keeping_the_granted_scopes() -> None:
    async with protected() as (url, auth, resource):
        oauth = OAuth(HeadlessAuthorizer())
        with trio.fail_after(15):
            async with connect_http(url, auth=oauth, protocol="2026-07-28") as client:
                await client.call_tool("whoami")
                resource.required = {"mcp:read", "mcp:write"}  # now the server wants more: 403
                assert (await client.call_tool("whoami")).text == "you"
    first, second = auth.authorizations
    assert first["scope"] == "mcp:read"
    assert set(second["scope"].split()) == {"mcp:read", "mcp:write"}


async def test_a_server_that_keeps_refusing_is_given_up_on() -> None:
    async with protected(grantable={"mcp:read"}) as (url, auth, resource):
        resource.required = {"mcp:read", "mcp:admin"}  # a scope the authorization server never grants
        oauth = OAuth(HeadlessAuthorizer())
        with trio.fail_after(15), pytest.raises(AuthorizationError) as raised:
            async with connect_http(url, auth=oauth):
                pass
    assert 1 <= len(auth.authorizations) <= 3
    assert raised.value.status == 403


async def test_client_credentials_authenticate_the_client_without_a_user() -> None:
    async with protected() as (url, auth, _resource):
        oauth = OAuth(grant="client_credentials", client_id="machine", client_secret="s3cret")
        with trio.fail_after(15):
            async with connect_http(url, auth=oauth) as client:
                await client.call_tool("whoami")
    [request] = auth.token_requests
    assert request["grant_type"] == "client_credentials"
    assert request["resource"] == url
    assert not auth.authorizations and not auth.registrations


async def test_the_jwt_bearer_grant_presents_a_fresh_assertion() -> None:
    issued: list[tuple[str, str]] = []

    async def workload_token(issuer: str, resource: str) -> str:  # e.g. a file the platform rotates
        issued.append((issuer, resource))
        return "workload-jwt"

    async with protected() as (url, auth, _resource):
        oauth = OAuth(grant="jwt_bearer", client_id="workload", assertion=workload_token)
        with trio.fail_after(15):
            async with connect_http(url, auth=oauth) as client:
                await client.call_tool("whoami")
    [request] = auth.token_requests
    assert request["grant_type"] == "urn:ietf:params:oauth:grant-type:jwt-bearer"
    assert request["resource"] == url and issued == [(auth.url, url)]
    assert not auth.authorizations


async def test_tokens_in_a_file_store_survive_the_process_and_are_private(tmp_path: Path) -> None:
    path = tmp_path / "config" / "oauth.json"
    async with protected() as (url, auth, _resource):
        for _ in range(2):  # a second program run: a new OAuth on the same file
            oauth = OAuth(HeadlessAuthorizer(), store=FileTokenStore(path))
            with trio.fail_after(15):
                async with connect_http(url, auth=oauth) as client:
                    await client.call_tool("whoami")
    assert len(auth.authorizations) == 1 and len(auth.registrations) == 1
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert '"access_token": "at-' in path.read_text()
    await OAuth(store=FileTokenStore(path)).logout(url)
    assert "access_token" not in path.read_text()


async def test_a_resource_metadata_naming_another_server_is_refused() -> None:
    async def lying(request: Request) -> Response:
        if request.path.startswith("/.well-known/oauth-protected-resource"):
            return Response.json(
                200,
                {"resource": "https://evil.example/mcp", "authorization_servers": ["https://evil.example"]},
            )
        return Response.json(401, {"error": "invalid_token"}, **{"www-authenticate": "Bearer"})

    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, lying)
        oauth = OAuth(HeadlessAuthorizer(), store=MemoryTokenStore())
        with trio.fail_after(10), pytest.raises(AuthorizationError, match=r"evil\.example"):
            async with connect_http(f"http://127.0.0.1:{port}/mcp", auth=oauth):
                pass
        nursery.cancel_scope.cancel()


async def test_the_loopback_authorizer_receives_the_browsers_redirect() -> None:
    """LoopbackAuthorizer: the "browser" (here a task following the URL) is sent to the
    authorization server, which redirects it to the loopback listener with the code."""
    import httpx

    from trio_mcp.client import LoopbackAuthorizer

    opened: list[str] = []

    async def browser(url: str) -> None:
        async with httpx.AsyncClient(follow_redirects=True) as http:
            page = await http.get(url)
        assert "close this page" in page.text

    async with protected() as (url, auth, _resource), trio.open_nursery() as nursery:
        listener = trio.socket.socket()
        await listener.bind(("127.0.0.1", 0))
        port = listener.getsockname()[1]
        listener.close()  # a free port for the redirect

        def open_url(address: str) -> None:
            opened.append(address)
            nursery.start_soon(browser, address)

        oauth = OAuth(LoopbackAuthorizer(port=port, open_url=open_url, timeout=10))
        with trio.fail_after(15):
            async with connect_http(url, auth=oauth) as client:
                await client.call_tool("whoami")
    [address] = opened
    assert address.startswith(auth.url + "/authorize?")
    assert auth.registrations[0]["redirect_uris"] == [f"http://127.0.0.1:{port}/callback"]


# -- DPoP (RFC 9449) ----------------------------------------------------------------------------------
def check_proof(proof: str | None, method: str, url: str, nonce: str, token: str | None = None) -> str | None:
    """The key thumbprint of a valid DPoP proof for this request, None if it is not one, or
    "nonce" if all is right but the nonce."""
    import base64
    import hashlib

    from joserfc import jwt
    from joserfc.jwk import ECKey
    from joserfc.jws import extract_compact

    if proof is None:
        return None
    header = extract_compact(proof.encode()).headers()
    if header.get("typ") != "dpop+jwt" or "d" in header.get("jwk", {}):
        return None
    key = ECKey.import_key(header["jwk"])
    claims = jwt.decode(proof, key).claims
    if claims.get("htm") != method or claims.get("htu") != url or not claims.get("jti"):
        return None
    if token is not None:
        digest = base64.urlsafe_b64encode(hashlib.sha256(token.encode()).digest()).rstrip(b"=").decode()
        if claims.get("ath") != digest:
            return None
    return str(key.thumbprint()) if claims.get("nonce") == nonce else "nonce"


async def test_dpop_binds_the_token_and_answers_both_servers_nonce_challenges() -> None:
    auth = AuthServer()
    bound: dict[str, str] = {}  # access token -> the key thumbprint it is bound to
    seen = {"as_challenged": 0, "rs_challenged": 0, "calls": 0}

    async def token_endpoint(request: Request) -> Response:
        if request.path == "/.well-known/oauth-authorization-server":
            return Response.json(200, {**auth.metadata(), "dpop_signing_alg_values_supported": ["ES256"]})
        if request.path != "/token":
            return await auth(request)
        thumbprint = check_proof(request.headers.get("dpop"), "POST", auth.url + "/token", "as-nonce")
        if thumbprint == "nonce":
            seen["as_challenged"] += 1
            return Response.json(400, {"error": "use_dpop_nonce"}, **{"dpop-nonce": "as-nonce"})
        answer = await auth(request)
        data = json.loads(answer.body)
        if thumbprint is None or "access_token" not in data:
            return Response.json(400, {"error": "invalid_dpop_proof"})
        bound[data["access_token"]] = thumbprint
        return Response.json(200, {**data, "token_type": "DPoP"})

    async def mcp(request: Request) -> Response:
        if request.path.startswith("/.well-known/oauth-protected-resource"):
            return Response.json(200, {"resource": url, "authorization_servers": [auth.url]})
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        if scheme != "DPoP" or token not in bound:
            return Response.json(401, {"error": "invalid_token"}, **{"www-authenticate": "DPoP"})
        thumbprint = check_proof(request.headers.get("dpop"), request.method, url, "rs-nonce", token)
        if thumbprint == "nonce":
            seen["rs_challenged"] += 1
            challenge = {"www-authenticate": 'DPoP error="use_dpop_nonce"', "dpop-nonce": "rs-nonce"}
            return Response.json(401, {"error": "use_dpop_nonce"}, **challenge)
        if thumbprint != bound[token]:
            return Response.json(401, {"error": "invalid_token"}, **{"www-authenticate": "DPoP"})
        body = json.loads(request.body)
        seen["calls"] += body.get("method") == "tools/call"
        result: dict[str, Any] = {"supportedVersions": ["2026-07-28"], "capabilities": {"tools": {}}}
        if body.get("method") == "tools/call":
            result = {"content": [{"type": "text", "text": "bound"}]}
        return Response.json(200, {"jsonrpc": "2.0", "id": body.get("id"), "result": result})

    async with trio.open_nursery() as nursery:
        auth.url = f"http://127.0.0.1:{await nursery.start(serve, token_endpoint)}"
        url = f"http://127.0.0.1:{await nursery.start(serve, mcp)}/mcp"
        with trio.fail_after(15):
            async with connect_http(url, auth=OAuth(HeadlessAuthorizer()), protocol="2026-07-28") as client:
                assert (await client.call_tool("whoami")).text == "bound"
        nursery.cancel_scope.cancel()
    assert seen == {"as_challenged": 1, "rs_challenged": 1, "calls": 1}
