"""The client library's odds and ends of OAuth (issue 31): listing the servers with stored
tokens, a token file left intact by a failed refresh (and never clobbered), and the loopback
redirect's port (a registration for another port is not reused; an authorization response
that comes back anywhere but the redirect URI is refused)."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest
import trio
from test_http_auth import protected

from trio_mcp.client import (
    AuthorizationError,
    FileTokenStore,
    HeadlessAuthorizer,
    LoopbackAuthorizer,
    MemoryTokenStore,
    OAuth,
    connect_http,
)


def listing(directory: Path, pattern: str) -> list[Path]:
    return sorted(directory.glob(pattern))


# -- listing ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["file", "memory"])
async def test_servers_lists_the_servers_holding_tokens(kind: str, tmp_path: Path) -> None:
    store = FileTokenStore(tmp_path / "oauth.json") if kind == "file" else MemoryTokenStore()
    assert await store.servers() == []
    await store.save("https://b.example/mcp", {"tokens": {"access_token": "t"}})
    await store.save("https://a.example/mcp", {"tokens": {"refresh_token": "r"}})
    await store.save("https://c.example/mcp", {"clients": {"https://as": {"client_id": "c"}}})
    assert await store.servers() == ["https://a.example/mcp", "https://b.example/mcp"]


async def test_after_a_login_the_file_store_lists_the_server(tmp_path: Path) -> None:
    store = FileTokenStore(tmp_path / "oauth.json")
    async with protected() as (url, _auth, _resource):
        with trio.fail_after(15):
            async with connect_http(url, auth=OAuth(HeadlessAuthorizer(), store=store)) as client:
                await client.call_tool("whoami")
    assert await store.servers() == [url]
    assert set(await store.records()) == {url}


# -- a failed refresh ---------------------------------------------------------------------------------
class LoginAgain:
    """The CLI's stance: never a browser; a new authorization is an error."""

    redirect_uri = "http://localhost:3000/callback"

    async def authorize(self, url: str) -> str:
        raise AuthorizationError("log in again")


async def test_a_failed_refresh_leaves_the_token_file_intact_and_the_next_login_replaces_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "oauth.json"
    async with protected(expires_in=0) as (url, auth, _resource):  # stored tokens are stale at once
        with trio.fail_after(15):
            async with connect_http(url, auth=OAuth(HeadlessAuthorizer(), store=FileTokenStore(path))):
                pass
        await FileTokenStore(path).save("https://other.example/mcp", {"tokens": {"access_token": "x"}})
        before = path.read_bytes()

        auth.tokens.clear()
        auth._refresh.clear()  # the refresh token is refused (invalid_grant) from now on
        with trio.fail_after(15), pytest.raises(AuthorizationError, match="log in again"):
            async with connect_http(url, auth=OAuth(LoginAgain(), store=FileTokenStore(path))):
                pass
        assert any(r["grant_type"] == "refresh_token" for r in auth.token_requests)
        assert path.read_bytes() == before  # not deleted, not rewritten

        with trio.fail_after(15):  # the next login replaces them
            async with connect_http(url, auth=OAuth(HeadlessAuthorizer(), store=FileTokenStore(path))):
                pass
    stored = json.loads(path.read_text())
    assert stored[url]["tokens"]["access_token"] in auth.tokens
    assert stored["https://other.example/mcp"] == {"tokens": {"access_token": "x"}}


async def test_an_unreadable_token_file_is_moved_aside_never_overwritten(tmp_path: Path) -> None:
    path = tmp_path / "oauth.json"
    path.write_text('{"https://a.example/mcp": {"tokens": ')  # cut short (an editor, a full disk)
    store = FileTokenStore(path)
    assert await store.load("https://a.example/mcp") is None  # reading does not fail
    await store.save("https://b.example/mcp", {"tokens": {"access_token": "t"}})
    [aside] = listing(tmp_path, "oauth.json.unreadable-*")
    assert aside.read_text().startswith('{"https://a.example/mcp"')
    assert json.loads(path.read_text()) == {"https://b.example/mcp": {"tokens": {"access_token": "t"}}}


async def test_concurrent_writers_of_one_file_lose_nothing(tmp_path: Path) -> None:
    path = tmp_path / "oauth.json"
    stores = [FileTokenStore(path), FileTokenStore(path)]  # two programs' stores, one file
    async with trio.open_nursery() as nursery:
        for n in range(24):
            nursery.start_soon(
                stores[n % 2].save, f"https://s{n}.example/mcp", {"tokens": {"access_token": "t"}}
            )
    assert len(await stores[0].servers()) == 24
    assert not listing(tmp_path, "*.tmp")


# -- the redirect port --------------------------------------------------------------------------------
class ComesBackElsewhere(HeadlessAuthorizer):
    """An authorizer whose "browser" comes back to another port than the redirect URI's."""

    async def authorize(self, url: str) -> str:
        returned = urlsplit(await super().authorize(url))
        return urlunsplit(returned._replace(netloc="127.0.0.1:1"))


async def test_an_authorization_response_on_another_port_is_refused() -> None:
    async with protected() as (url, auth, _resource):
        oauth = OAuth(ComesBackElsewhere("http://127.0.0.1:3000/callback"))
        with trio.fail_after(15), pytest.raises(AuthorizationError, match="not to the redirect URI"):
            async with connect_http(url, auth=oauth):
                pass
    assert not any(r["grant_type"] == "authorization_code" for r in auth.token_requests)


async def test_a_registration_for_another_redirect_port_is_not_reused() -> None:
    store = MemoryTokenStore()
    async with protected() as (url, auth, _resource):
        for port in (3001, 3001, 3002):
            oauth = OAuth(HeadlessAuthorizer(f"http://127.0.0.1:{port}/callback"), store=store)
            with trio.fail_after(15):
                async with connect_http(url, auth=oauth):
                    pass
            record = await store.load(url)
            assert record is not None
            record.pop("tokens")  # the next run has to authorize again (its client is kept)
            await store.save(url, record)
    assert [r["redirect_uris"] for r in auth.registrations] == [
        ["http://127.0.0.1:3001/callback"],
        ["http://127.0.0.1:3002/callback"],
    ]
    assert [a["redirect_uri"] for a in auth.authorizations] == [
        "http://127.0.0.1:3001/callback",
        "http://127.0.0.1:3001/callback",
        "http://127.0.0.1:3002/callback",
    ]


async def test_the_loopback_listener_takes_only_its_own_callback() -> None:
    authorizer = LoopbackAuthorizer(port=0, timeout=10)  # port 0: a free port, chosen now
    port = authorizer.port
    assert port != 0 and authorizer.redirect_uri == f"http://127.0.0.1:{port}/callback"

    async def browser(url: str) -> None:
        async with httpx.AsyncClient() as http:
            # a page elsewhere (DNS rebinding) and a wrong path: answered, not taken
            await http.get(
                f"http://127.0.0.1:{port}/callback?code=evil", headers={"host": f"evil.example:{port}"}
            )
            await http.get(f"http://127.0.0.1:{port}/favicon.ico")
            await http.get(f"http://127.0.0.1:{port}/callback?code=good&state=s")

    async with trio.open_nursery() as nursery:
        authorizer.open_url = lambda url: nursery.start_soon(browser, url)
        with trio.fail_after(10):
            returned = await authorizer.authorize("https://as.example/authorize?x=1")
    assert returned == f"http://127.0.0.1:{port}/callback?code=good&state=s"


async def test_a_redirect_port_that_cannot_be_listened_on_is_an_authorization_error() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        authorizer = LoopbackAuthorizer(port=taken.getsockname()[1], open_url=lambda url: None, timeout=5)
        with pytest.raises(AuthorizationError, match=r"cannot listen on 127\.0\.0\.1"):
            await authorizer.authorize("https://as.example/authorize")
