"""``trio-mcp auth login|status|logout`` and the client commands using the stored tokens, over
real processes and sockets: a tiny authorization server (tests/client/oauth_server.py) in
front of our own ``serve_http``, the CLI run as a subprocess with its token file in a temporary
``XDG_CONFIG_HOME``, and the browser played by the test (httpx follows the printed URL)."""

from __future__ import annotations

import json
import os
import re
import socket
import stat
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path

import httpx
import trio
from click.testing import CliRunner

from trio_mcp import Server
from trio_mcp.cli import cli
from trio_mcp.server import serve_http
from trio_mcp.transports.security import AccessToken

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "client"))
from oauth_server import AuthServer, serve

REPO = Path(__file__).resolve().parents[2]
CLI = [sys.executable, "-m", "trio_mcp.cli"]


@asynccontextmanager
async def protected(expires_in: int = 3600) -> AsyncIterator[tuple[str, AuthServer]]:
    """An authorization server and our HTTP server requiring its tokens (scope mcp:read)."""
    auth = AuthServer(expires_in=expires_in)
    server = Server("protected")

    @server.tool()
    async def whoami() -> str:
        return "you"

    class Verifier:
        required_scopes = ("mcp:read",)

        def __call__(self, token: str) -> AccessToken | None:
            scopes = auth.tokens.get(token)
            return AccessToken("user", scopes) if scopes is not None else None

    async with trio.open_nursery() as nursery:
        auth.url = f"http://127.0.0.1:{await nursery.start(serve, auth)}"
        port = await nursery.start(
            partial(serve_http, server, authenticate=Verifier(), authorization_servers=[auth.url])
        )
        yield f"http://127.0.0.1:{port}/mcp", auth
        nursery.cancel_scope.cancel()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def environment(config: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("TRIO_MCP_TOKEN", "NO_COLOR")}
    return {**env, "XDG_CONFIG_HOME": str(config), "COLUMNS": "200"}


async def run(config: Path, *args: str) -> tuple[int, str, str]:
    with trio.fail_after(15):
        done = await trio.run_process(
            [*CLI, *args],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=environment(config),
            cwd=REPO,
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def login(config: Path, url: str, port: int | None = None) -> tuple[int, str]:
    """``trio-mcp auth login URL --no-browser``, the test playing the browser: it opens the
    printed authorization URL and follows the redirects back to the CLI's loopback port."""
    port = port or free_port()
    argv = [*CLI, "auth", "login", url, "--no-browser", "--port", str(port), "--timeout", "15s"]
    process = await trio.lowlevel.open_process(argv, stderr=-1, stdout=-1, env=environment(config), cwd=REPO)
    try:
        with trio.fail_after(15):
            assert process.stderr is not None
            seen = b""
            while (found := re.search(rb"(http://127\.0\.0\.1:\d+/authorize\?\S+)", seen)) is None:
                chunk = await process.stderr.receive_some()
                assert chunk, f"login exited: {seen!r}"
                seen += chunk
            async with httpx.AsyncClient(follow_redirects=True) as browser:
                page = await browser.get(found.group(1).decode())
            assert page.status_code == 200 and "Authorization received" in page.text
            async for chunk in process.stderr:
                seen += chunk
            code = await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    return code, seen.decode()


async def test_login_then_call_with_the_stored_tokens_status_and_logout(tmp_path: Path) -> None:
    async with protected(expires_in=1) as (url, auth):
        # Not logged in: one line saying how to log in, exit 3 (a refused connection).
        code, _out, err = await run(tmp_path, "tools", url)
        assert code == 3
        assert f"run `trio-mcp auth login {url}`" in err and len(err.strip().splitlines()) == 1

        port = free_port()
        code, err = await login(tmp_path, url, port)
        assert code == 0, err
        assert auth.registrations[0]["redirect_uris"] == [f"http://127.0.0.1:{port}/callback"]
        assert f"Logged in to {url}" in err and "mcp:read" in err
        [asked] = auth.authorizations  # a real authorization-code flow with PKCE and the resource
        assert asked["code_challenge_method"] == "S256" and asked["resource"] == url
        token_file = tmp_path / "trio-mcp" / "oauth.json"
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        assert json.loads(token_file.read_text())[url]["tokens"]["access_token"] in auth.tokens

        # Status shows the server, issuer, scopes and expiry, never a token.
        code, out, _err = await run(tmp_path, "auth", "status")
        assert code == 0
        assert f"{url}: issuer {auth.url}; scopes: mcp:read; expire" in out and "refreshable" in out
        assert not re.search(r"\b[ar]t-\d+\b", out)
        code, out, _err = await run(tmp_path, "auth", "status", url, "-o", "json")
        [entry] = json.loads(out)
        assert entry["server"] == url and entry["issuer"] == auth.url and entry["scopes"] == ["mcp:read"]

        # The stored (expired: expires_in=1) token is refreshed, with no new authorization.
        code, out, err = await run(tmp_path, "call", url, "whoami")
        assert (code, out.strip()) == (0, "you"), err
        assert len(auth.authorizations) == 1
        assert any(request["grant_type"] == "refresh_token" for request in auth.token_requests)

        # A login that no longer works (tokens revoked) is an error saying to log in again,
        # never a browser opened by `call`.
        auth.tokens.clear()
        auth._refresh.clear()
        code, _out, err = await run(tmp_path, "call", url, "whoami")
        assert code == 3 and f"no longer works: run `trio-mcp auth login {url}`" in err
        assert len(auth.authorizations) == 1

        # Logging in again keeps the client registration for the same --port, not for another.
        assert (await login(tmp_path, url, port))[0] == 0
        assert len(auth.registrations) == 1 and len(auth.authorizations) == 2
        assert (await login(tmp_path, url))[0] == 0
        assert len(auth.registrations) == 2 and len(auth.authorizations) == 3

        # Logged out: forgotten, and the client commands say to log in again.
        code, _out, err = await run(tmp_path, "auth", "logout", url)
        assert code == 0 and f"Logged out of {url}" in err
        assert url not in json.loads(token_file.read_text())
        code, out, _err = await run(tmp_path, "auth", "status")
        assert code == 0 and "Not logged in" in out
        code, _out, err = await run(tmp_path, "tasks", "list", url)
        assert code == 3 and "trio-mcp auth login" in err


async def test_a_failed_login_keeps_the_tokens_stored_before(tmp_path: Path) -> None:
    async with protected() as (url, auth):
        assert (await login(tmp_path, url))[0] == 0
        token_file = tmp_path / "trio-mcp" / "oauth.json"
        before = json.loads(token_file.read_text())[url]
        # Logging in again, and nobody comes back from the browser: the login fails...
        code, _out, err = await run(tmp_path, "auth", "login", url, "--no-browser", "--timeout", "1s")
        assert code != 0 and "Logged in" not in err
        # ...and what was stored is still there, and still works.
        assert json.loads(token_file.read_text())[url] == before
        code, out, err = await run(tmp_path, "call", url, "whoami")
        assert (code, out.strip()) == (0, "you"), err
        assert len(auth.authorizations) == 1


def test_auth_commands_document_themselves_and_reject_non_http_urls() -> None:
    runner = CliRunner()
    for command in (["auth"], ["auth", "login"], ["auth", "status"], ["auth", "logout"]):
        result = runner.invoke(cli, [*command, "--help"])
        assert result.exit_code == 0 and "Example" in result.output and "Exit codes:" in result.output
    result = runner.invoke(cli, ["auth", "login", "ws://127.0.0.1:1/"])
    assert result.exit_code == 2 and "not an http:// or https:// URL" in result.output
