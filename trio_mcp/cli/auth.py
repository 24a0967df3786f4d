"""OAuth for the client commands: ``trio-mcp auth login|status|logout`` and the stored tokens
that ``call``, ``tools`` and ``tasks`` use for an ``http(s)://`` TARGET given no ``--token``.

Tokens live in a :class:`~trio_mcp.client.FileTokenStore` (``$XDG_CONFIG_HOME/trio-mcp/oauth.json``,
mode 0600), keyed by the MCP server's canonical URL."""

from __future__ import annotations

import datetime
import json
import re
import sys
import time
import webbrowser
from typing import Any

import httpx
import trio

from ..client.auth import (
    AuthorizationError,
    FileTokenStore,
    LoopbackAuthorizer,
    OAuth,
    TokenStore,
    canonical_resource,
    parse_www_authenticate,
)

__all__ = [
    "LoginNeeded",
    "StagedLogin",
    "announce_url",
    "asks_for_oauth",
    "describe",
    "login_oauth",
    "registered_port",
    "stored_oauth",
    "stored_records",
    "when",
]

DEFAULT_PORT = 33418
"""The loopback redirect port (``http://127.0.0.1:33418/callback``) unless ``--port``."""


def announce_url(url: str, *, browser: bool) -> None:
    """Print the authorization URL (stderr), then try to open it in a browser."""
    print(
        f"Open this URL to authorize (waiting for the browser to come back):\n  {url}",
        file=sys.stderr,
        flush=True,
    )
    if browser:
        try:
            webbrowser.open(url)
        except Exception:  # no browser is fine: the URL is printed
            pass


class StagedLogin:
    """The token store of ``auth login``: it starts the login from ``key``'s stored record
    without its tokens (and without client registrations made for another ``port``), and
    keeps what the login obtains apart from the real store until :meth:`commit`: a login that
    fails or is interrupted leaves what was stored before as it was. Other keys pass through.
    """

    def __init__(self, store: TokenStore, key: str, port: int) -> None:
        self.store = store
        self.key = key
        self.port = port
        self._staged: dict[str, Any] | None = None
        self._started = False

    async def load(self, key: str) -> dict[str, Any] | None:
        if key != self.key:
            return await self.store.load(key)
        if not self._started:
            self._started = True
            record = await self.store.load(key)
            if record is not None:  # a fresh login; the registration is kept if it fits the port
                record.pop("tokens", None)
                if registered_port(record) not in (None, self.port):
                    record.pop("clients", None)  # registered for another redirect URI: register anew
            self._staged = record
        return json.loads(json.dumps(self._staged)) if self._staged is not None else None

    async def save(self, key: str, record: dict[str, Any]) -> None:
        if key != self.key:
            await self.store.save(key, record)
            return
        self._started = True
        self._staged = json.loads(json.dumps(record))

    async def delete(self, key: str) -> None:
        if key != self.key:
            await self.store.delete(key)
            return
        self._started = True
        self._staged = None

    async def commit(self) -> dict[str, Any] | None:
        """Store what the login obtained (if it obtained tokens): the new record, or None."""
        staged = self._staged
        if not staged or not (staged.get("tokens") or {}).get("access_token"):
            return None
        await self.store.save(self.key, staged)
        return staged


def login_oauth(*, port: int, browser: bool, store: TokenStore, timeout: float) -> OAuth:
    """The OAuth of ``auth login``: the browser and a loopback redirect on ``port``."""
    authorizer = LoopbackAuthorizer(
        port=port, open_url=lambda url: announce_url(url, browser=browser), timeout=timeout
    )
    return OAuth(authorizer, store=store)


def registered_port(record: dict[str, Any]) -> int | None:
    """The loopback port the stored client registrations redirect to (``auth login --port``)."""
    clients = record.get("clients")
    for client in clients.values() if isinstance(clients, dict) else ():
        uris = client.get("redirect_uris") if isinstance(client, dict) else None
        for uri in uris if isinstance(uris, list) else ():
            found = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/callback", str(uri))
            if found is not None:
                return int(found.group(1))
    return None


class LoginNeeded:
    """The authorizer of ``call``, ``tools`` and ``tasks``: they use stored tokens (refreshing
    them) but never open a browser themselves; a new authorization (the refresh token was
    refused, or the server wants more scopes) is an error saying to log in again."""

    def __init__(self, url: str, port: int) -> None:
        self.url = url
        self.port = port

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    async def authorize(self, url: str) -> str:
        raise AuthorizationError(f"the stored login no longer works: run `trio-mcp auth login {self.url}`")


async def stored_oauth(url: str) -> OAuth | None:
    """An OAuth using (and refreshing) the tokens stored for ``url``; None if there are none."""
    store = FileTokenStore()
    record = await store.load(canonical_resource(url))
    if not record or not record.get("tokens"):
        return None
    return OAuth(LoginNeeded(url, registered_port(record) or DEFAULT_PORT), store=store)


def stored_records(store: FileTokenStore) -> dict[str, dict[str, Any]]:
    """Every record of the token file, by server URL (empty if there is no file); for code
    outside Trio (``auth status``). In Trio code: ``await store.records()``."""
    return trio.run(store.records)


def describe(server: str, record: dict[str, Any], *, now: float | None = None) -> dict[str, Any]:
    """What ``auth status`` shows of a record: never a token or a secret."""
    tokens = record.get("tokens") if isinstance(record.get("tokens"), dict) else {}
    assert isinstance(tokens, dict)
    expires_at = tokens.get("expires_at")
    now = time.time() if now is None else now
    return {
        "server": server,
        "issuer": record.get("issuer"),
        "logged_in": bool(tokens.get("access_token")),
        "scopes": str(tokens.get("scope") or "").split(),
        "expires_at": expires_at if isinstance(expires_at, int | float) else None,
        "expired": isinstance(expires_at, int | float) and expires_at <= now,
        "refreshable": bool(tokens.get("refresh_token")),
    }


async def asks_for_oauth(challenge: str | None) -> bool:
    """Whether a 401's ``WWW-Authenticate`` leads to an authorization server: its
    protected-resource metadata names one (a server with a static ``--token`` names none)."""
    metadata_url = parse_www_authenticate(challenge).get("resource_metadata")
    if not metadata_url:
        return False
    try:
        async with httpx.AsyncClient(timeout=5.0, follow_redirects=False) as http:
            response = await http.get(metadata_url)
        data = response.json()
    except (httpx.HTTPError, ValueError):
        return False
    servers = data.get("authorization_servers") if isinstance(data, dict) else None
    return isinstance(servers, list) and bool(servers)


def when(timestamp: float | None) -> str:
    """An expiry for people: ``expires 2026-11-26 03:00:00 UTC`` (or ``expired ...``)."""
    if timestamp is None:
        return "no expiry given"
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return f"{'expired' if timestamp <= time.time() else 'expires'} {moment}"
