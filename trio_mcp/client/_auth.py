"""The client's OAuth 2.1 (MCP authorization, 2025-11-25 and 2026-07-28): see :mod:`trio_mcp.client.auth`.

:class:`OAuth` is an ``httpx.Auth``: every request of the transport goes through it. It adds the
access token; on **401** (or **403** ``insufficient_scope``) it runs the specification's flow,
then sends the request again:

1. protected-resource metadata (RFC 9728): the ``resource_metadata`` of the challenge, else the
   well-known URLs (path-aware, then root); its ``resource`` must be the server (RFC 8707);
2. the first authorization server's metadata: RFC 8414 and OpenID Connect discovery, in the
   specification's order; its ``issuer`` must be the one asked for (RFC 8414 §3.3);
3. a client: pre-registered (``client_id=``), the one stored for that issuer, a client ID
   metadata document (``client_metadata_url=``, when the server supports them), or dynamic
   registration (RFC 7591). Credentials are kept per issuer: another issuer registers anew;
4. scopes: the challenge's (with those already granted), else the resource's
   ``scopes_supported``, else none; ``offline_access`` when the authorization server offers it;
5. a token: the refresh token if there is one; else the authorization code with PKCE S256, the
   ``resource`` indicator and the ``iss`` check of RFC 9207 (through an :class:`Authorizer`:
   a browser and a loopback redirect, or :class:`HeadlessAuthorizer`); or client credentials,
   or the JWT-bearer grant; bound to a key with DPoP (RFC 9449) where the server takes it.

The protocol pieces come from authlib (PKCE, the authorization URL, client authentication at
the token endpoint: ``client_secret_basic``, ``client_secret_post``, ``none``,
``private_key_jwt``); the discovery orders and MCP's rules are written here. Tokens and client
registrations live in a :class:`TokenStore`: :class:`MemoryTokenStore` (the default) or
:class:`FileTokenStore` (a 0600 JSON file in the user's configuration directory).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import inspect
import json
import logging
import os
import re
import socket
import ssl
import tempfile
import time
import webbrowser
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit, urlunsplit

import h11
import httpx
import trio
from authlib.common.security import generate_token  # type: ignore[import-untyped]
from authlib.common.urls import add_params_to_qs  # type: ignore[import-untyped]
from authlib.oauth2.auth import ClientAuth  # type: ignore[import-untyped]
from authlib.oauth2.rfc6749.parameters import prepare_grant_uri  # type: ignore[import-untyped]
from authlib.oauth2.rfc7636 import create_s256_code_challenge  # type: ignore[import-untyped]

from ..protocol.errors import INTERNAL_ERROR, McpError

__all__ = [
    "AuthorizationError",
    "Authorizer",
    "FileTokenStore",
    "HeadlessAuthorizer",
    "LoopbackAuthorizer",
    "MemoryTokenStore",
    "OAuth",
    "TokenStore",
    "as_metadata_urls",
    "canonical_resource",
    "default_token_file",
    "parse_www_authenticate",
    "prm_urls",
]

log = logging.getLogger("trio_mcp.client.auth")

PRM_WELL_KNOWN = "/.well-known/oauth-protected-resource"
OAUTH_WELL_KNOWN = "/.well-known/oauth-authorization-server"
OIDC_WELL_KNOWN = "/.well-known/openid-configuration"
MAX_AUTHORIZATIONS = 3
"""Authorizations in a row (without a request getting through) before giving up."""
JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
"""The JWT-bearer authorization grant (RFC 7523 §2.1): ``grant="jwt_bearer"``."""
GRANTS = ("authorization_code", "client_credentials", "jwt_bearer")
EXPIRY_MARGIN = 30.0
"""Seconds before its expiry an access token is refreshed."""


class AuthorizationError(McpError):
    """Authorization with an MCP server failed: it refused the connection (``status`` 401 or
    403, with its ``WWW-Authenticate`` in ``challenge``), or the OAuth flow could not complete
    (discovery, registration, the authorization response, the token endpoint).

    An :class:`~trio_mcp.McpError` (code -32603, what such a refusal always was), so code that
    catches those still does.

    >>> error = AuthorizationError("no", status=401, challenge="Bearer")
    >>> (error.code, error.status, error.challenge)
    (-32603, 401, 'Bearer')
    """

    def __init__(self, message: str, *, status: int | None = None, challenge: str | None = None) -> None:
        super().__init__(INTERNAL_ERROR, message, {"status": status} if status is not None else None)
        self.status = status
        self.challenge = challenge

    def __repr__(self) -> str:
        return f"AuthorizationError({self.message!r}, status={self.status!r})"


# -- WWW-Authenticate ------------------------------------------------------------------------------
_PARAM = re.compile(r'([A-Za-z0-9_\-]+)\s*=\s*("(?:[^"\\]|\\.)*"|[^\s,]+)')


def parse_www_authenticate(header: str | None) -> dict[str, str]:
    """The parameters of a ``Bearer`` challenge (RFC 6750 §3), lower-cased names.

    >>> parse_www_authenticate('Bearer resource_metadata="https://x/.well-known/p", scope="a b"')
    {'resource_metadata': 'https://x/.well-known/p', 'scope': 'a b'}
    >>> parse_www_authenticate(None)
    {}
    """
    if not header:
        return {}
    params: dict[str, str] = {}
    for name, value in _PARAM.findall(header):
        if value.startswith('"'):
            value = re.sub(r"\\(.)", r"\1", value[1:-1])
        params.setdefault(name.lower(), value)
    return params


# -- token stores ----------------------------------------------------------------------------------
class TokenStore(Protocol):
    """Where :class:`OAuth` keeps what it obtained for a resource (the MCP server's URL): its
    tokens and, per authorization server ``issuer``, the client registered there. Records are
    JSON objects."""

    async def load(self, key: str) -> dict[str, Any] | None: ...

    async def save(self, key: str, record: dict[str, Any]) -> None: ...

    async def delete(self, key: str) -> None: ...


class MemoryTokenStore:
    """Records in memory, for this process only.

    >>> import trio
    >>> store = MemoryTokenStore()
    >>> trio.run(store.save, "https://mcp.example/mcp", {"tokens": {"access_token": "t"}})
    >>> trio.run(store.load, "https://mcp.example/mcp")
    {'tokens': {'access_token': 't'}}
    """

    def __init__(self) -> None:
        self.records: dict[str, dict[str, Any]] = {}

    async def load(self, key: str) -> dict[str, Any] | None:
        record = self.records.get(key)
        return json.loads(json.dumps(record)) if record is not None else None

    async def save(self, key: str, record: dict[str, Any]) -> None:
        self.records[key] = json.loads(json.dumps(record))

    async def delete(self, key: str) -> None:
        self.records.pop(key, None)

    async def servers(self) -> list[str]:
        """The keys (MCP server URLs) holding tokens, sorted."""
        return sorted(k for k, record in self.records.items() if _has_tokens(record))


def _has_tokens(record: Any) -> bool:
    tokens = record.get("tokens") if isinstance(record, dict) else None
    return isinstance(tokens, dict) and bool(tokens.get("access_token") or tokens.get("refresh_token"))


def default_token_file() -> Path:
    """``$XDG_CONFIG_HOME/trio-mcp/oauth.json`` (default ``~/.config``; ``%APPDATA%`` on Windows)."""
    base = os.environ.get("XDG_CONFIG_HOME") or (os.environ.get("APPDATA") if os.name == "nt" else None)
    return Path(base or Path.home() / ".config") / "trio-mcp" / "oauth.json"


class FileTokenStore:
    """Records in one JSON file, readable by the user only (mode 0600, its directory 0700),
    rewritten atomically. Default :func:`default_token_file`.

    Each change is a read-modify-write of the one record it is about, under an exclusive lock
    on ``<file>.lock`` (POSIX; so concurrent programs lose nothing), through a temporary file
    of its own renamed over the file: a reader sees the old file or the new one, never half of
    one. A file that is not a JSON object is never overwritten: it is moved aside (to
    ``<file>.unreadable-<time>``, with a warning) before the next change is written.

    >>> import tempfile, trio
    >>> path = Path(tempfile.mkdtemp()) / "oauth.json"
    >>> trio.run(FileTokenStore(path).save, "https://mcp.example/mcp", {"tokens": {"access_token": "t"}})
    >>> oct(path.stat().st_mode & 0o777)
    '0o600'
    >>> trio.run(FileTokenStore(path).load, "https://mcp.example/mcp")
    {'tokens': {'access_token': 't'}}
    """

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = Path(path) if path is not None else default_token_file()
        self._lock = trio.Lock()

    def _read(self) -> dict[str, Any]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def _read_for_change(self) -> dict[str, Any]:
        """The file's records, to change one; an unreadable file is moved aside, not lost."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            return data
        aside = self.path.with_name(f"{self.path.name}.unreadable-{int(time.time())}")
        os.replace(self.path, aside)
        log.warning("the token file %s was not a JSON object: moved to %s", self.path, aside)
        return {}

    def _write(self, data: dict[str, Any]) -> None:
        fd, temporary = tempfile.mkstemp(dir=self.path.parent, prefix=self.path.name + ".", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(data, out, indent=1, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(temporary, 0o600)
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise

    def _change(self, key: str, record: dict[str, Any] | None) -> None:
        """Set (or, with None, delete) one record, under the file's lock."""
        self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with _file_lock(self.path.with_name(self.path.name + ".lock")):
            data = self._read_for_change()
            if record is not None:
                data[key] = record
            elif data.pop(key, None) is None:
                return
            self._write(data)

    async def load(self, key: str) -> dict[str, Any] | None:
        data = await trio.to_thread.run_sync(self._read)
        record = data.get(key)
        return record if isinstance(record, dict) else None

    async def save(self, key: str, record: dict[str, Any]) -> None:
        async with self._lock:
            await trio.to_thread.run_sync(self._change, key, record)

    async def delete(self, key: str) -> None:
        async with self._lock:
            await trio.to_thread.run_sync(self._change, key, None)

    async def records(self) -> dict[str, dict[str, Any]]:
        """Every record of the file, by key (empty if there is no file)."""
        data = await trio.to_thread.run_sync(self._read)
        return {k: v for k, v in data.items() if isinstance(v, dict)}

    async def servers(self) -> list[str]:
        """The keys (MCP server URLs, as :func:`canonical_resource` writes them) holding
        tokens, sorted: the servers a program can connect to without a new authorization.

        >>> import tempfile, trio
        >>> store = FileTokenStore(Path(tempfile.mkdtemp()) / "oauth.json")
        >>> trio.run(store.save, "https://a.example/mcp", {"tokens": {"access_token": "t"}})
        >>> trio.run(store.save, "https://b.example/mcp", {"clients": {}})
        >>> trio.run(store.servers)
        ['https://a.example/mcp']
        """
        return sorted(k for k, record in (await self.records()).items() if _has_tokens(record))


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on ``path`` across processes (``flock``; none where there is none)."""
    try:
        import fcntl
    except ImportError:  # Windows: the in-process lock and the atomic rename only
        yield
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


# -- authorizers: the user-agent part of the authorization-code flow ------------------------------
class Authorizer(Protocol):
    """Takes the user through the authorization server: gets ``url`` (the authorization
    request) opened and returns the URL the authorization server redirected back to
    (``redirect_uri`` with ``code``, ``state``, maybe ``iss`` or ``error``)."""

    @property
    def redirect_uri(self) -> str: ...

    async def authorize(self, url: str) -> str: ...


class HeadlessAuthorizer:
    """No user: GETs the authorization URL and reads the redirect from its ``Location``. For
    authorization servers that authorize without a login page (tests, the conformance suite's
    mock). The redirect URI is never listened on.

    >>> HeadlessAuthorizer().redirect_uri
    'http://localhost:3000/callback'
    """

    def __init__(self, redirect_uri: str = "http://localhost:3000/callback", *, verify: bool = True) -> None:
        self._redirect_uri = redirect_uri
        self._verify = verify

    @property
    def redirect_uri(self) -> str:
        return self._redirect_uri

    async def authorize(self, url: str) -> str:
        async with httpx.AsyncClient(follow_redirects=False, verify=self._verify) as http:
            response = await http.get(url)
        location = response.headers.get("location")
        if response.status_code not in (301, 302, 303, 307, 308) or not location:
            raise AuthorizationError(
                f"the authorization endpoint did not redirect (HTTP {response.status_code})"
            )
        return str(httpx.URL(url).join(location))


_PAGE = b"<!doctype html><title>trio-mcp</title><p>Authorization received: you may close this page.</p>"


class LoopbackAuthorizer:
    """A browser and a loopback redirect (RFC 8252 §7.3): ``authorize`` listens on
    ``http://127.0.0.1:<port>/callback``, hands the URL to ``open_url`` (default: the system
    browser; when none can be opened, ``print`` it) and waits up to ``timeout`` seconds for the
    browser to come back. ``port=0`` picks a free port now (the redirect URI is registered
    before anything listens).

    Only a request for ``/callback`` addressed to that very origin (its ``Host`` header
    ``127.0.0.1:<port>``) is taken for the browser's return; anything else arriving on the port
    is answered and ignored. A port that cannot be listened on raises
    :class:`AuthorizationError`.

    >>> LoopbackAuthorizer(port=8765).redirect_uri
    'http://127.0.0.1:8765/callback'
    """

    def __init__(
        self,
        *,
        port: int = 33418,
        open_url: Callable[[str], object] | None = None,
        timeout: float = 300.0,
    ) -> None:
        self.port = port if port else _free_port()
        self.open_url = open_url
        self.timeout = timeout

    @property
    def redirect_uri(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"

    def _open(self, url: str) -> None:
        if self.open_url is not None:
            self.open_url(url)
        elif not webbrowser.open(url):
            print(f"Open this URL to authorize:\n  {url}", flush=True)

    async def authorize(self, url: str) -> str:
        try:
            listeners = await trio.open_tcp_listeners(self.port, host="127.0.0.1")
        except OSError as exc:
            raise AuthorizationError(
                f"cannot listen on 127.0.0.1:{self.port} for the authorization redirect: {exc}"
            ) from exc
        origin = f"127.0.0.1:{self.port}"
        try:
            self._open(url)
            with trio.fail_after(self.timeout):
                while True:
                    stream = await listeners[0].accept()
                    async with stream:
                        received = await _serve_one(stream)
                    if received is None:
                        continue
                    target, host = received
                    if target.split("?", 1)[0] == "/callback" and host == origin:
                        return f"http://{origin}{target}"
        except trio.TooSlowError:
            raise AuthorizationError("no authorization came back from the browser in time") from None
        finally:
            for listener in listeners:
                await listener.aclose()


def _free_port() -> int:
    """A port free on 127.0.0.1 now (for a loopback redirect URI asked with port 0)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def _serve_one(stream: trio.abc.Stream) -> tuple[str, str] | None:
    """Read one HTTP request from ``stream``, answer it with a short page; its target and
    its ``Host`` header."""
    connection = h11.Connection(h11.SERVER)
    with trio.move_on_after(10):
        while True:
            event = connection.next_event()
            if event is h11.NEED_DATA:
                data = await stream.receive_some(65536)
                if not data:
                    return None
                connection.receive_data(bytes(data))
                continue
            if isinstance(event, h11.Request):
                target = event.target.decode("ascii", "replace")
                host = next((v for k, v in event.headers if k == b"host"), b"").decode("ascii", "replace")
                headers = [("content-type", "text/html; charset=utf-8"), ("content-length", str(len(_PAGE)))]
                headers.append(("connection", "close"))
                await stream.send_all(connection.send(h11.Response(status_code=200, headers=headers)) or b"")
                await stream.send_all(connection.send(h11.Data(data=_PAGE)) or b"")
                await stream.send_all(connection.send(h11.EndOfMessage()) or b"")
                return target, host.lower()
            return None
    return None


# -- OAuth -----------------------------------------------------------------------------------------
def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}"


def canonical_resource(url: str) -> str:
    """The MCP server's canonical URI (RFC 8707): no fragment, no query, lower-case scheme and
    host, no trailing slash.

    >>> canonical_resource("HTTPS://MCP.Example.com/mcp/?x=1#f")
    'https://mcp.example.com/mcp'
    """
    parts = urlsplit(url)
    path = parts.path.rstrip("/")
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, "", ""))


def _resource_matches(server_url: str, resource: str) -> bool:
    """Whether a PRM ``resource`` may name the server at ``server_url``: same origin, and the
    server's path is the resource's path or below it (RFC 9728 §3.3, as the SDKs read it)."""
    try:
        server, claimed = urlsplit(canonical_resource(server_url)), urlsplit(canonical_resource(resource))
    except ValueError:
        return False
    if (server.scheme, server.netloc) != (claimed.scheme, claimed.netloc):
        return False
    base = claimed.path.rstrip("/")
    return server.path == base or server.path.startswith(base + "/")


def prm_urls(server_url: str) -> list[str]:
    """The well-known protected-resource metadata URLs for ``server_url``, in the order the
    specification tries them: path-aware, then root.

    >>> prm_urls("https://mcp.example.com/public/mcp")
    ['https://mcp.example.com/.well-known/oauth-protected-resource/public/mcp', 'https://mcp.example.com/.well-known/oauth-protected-resource']
    """
    parts = urlsplit(server_url)
    origin = _origin(server_url)
    path = parts.path.rstrip("/")
    urls = [origin + PRM_WELL_KNOWN + path] if path else []
    return [*urls, origin + PRM_WELL_KNOWN]


def as_metadata_urls(issuer: str) -> list[str]:
    """Where an authorization server's metadata is looked for, in the specification's order
    (RFC 8414 first, then OpenID Connect discovery).

    >>> for url in as_metadata_urls("https://auth.example.com/tenant1"):
    ...     print(url)
    https://auth.example.com/.well-known/oauth-authorization-server/tenant1
    https://auth.example.com/.well-known/openid-configuration/tenant1
    https://auth.example.com/tenant1/.well-known/openid-configuration
    >>> as_metadata_urls("https://auth.example.com")
    ['https://auth.example.com/.well-known/oauth-authorization-server', 'https://auth.example.com/.well-known/openid-configuration']
    """
    origin = _origin(issuer)
    path = urlsplit(issuer).path.rstrip("/")
    if not path:
        return [origin + OAUTH_WELL_KNOWN, origin + OIDC_WELL_KNOWN]
    return [
        origin + OAUTH_WELL_KNOWN + path,
        origin + OIDC_WELL_KNOWN + path,
        origin + path + OIDC_WELL_KNOWN,
    ]


def _scopes(text: str | None) -> list[str]:
    return [s for s in (text or "").split(" ") if s]


def _union(*groups: Iterable[str]) -> list[str]:
    out: list[str] = []
    for group in groups:
        for scope in group:
            if scope not in out:
                out.append(scope)
    return out


class DPoPKey:
    """A DPoP key (RFC 9449, ES256) and the proofs it signs: one per request, bound to its
    method and URL (and to the access token it comes with), with the nonce each server asked
    for last."""

    def __init__(self, jwk: Mapping[str, Any] | None = None) -> None:
        from joserfc.jwk import ECKey  # imported here: slow to import, rarely needed

        self.key = ECKey.import_key(dict(jwk)) if jwk else ECKey.generate_key("P-256", private=True)
        self.nonces: dict[str, str] = {}

    def jwk(self) -> dict[str, Any]:
        return dict(self.key.as_dict(private=True))

    def proof(self, method: str, url: str, access_token: str | None = None) -> str:
        from joserfc import jwt

        parts = urlsplit(url)
        claims: dict[str, Any] = {
            "jti": generate_token(32),
            "htm": method,
            "htu": urlunsplit((parts.scheme, parts.netloc, parts.path, "", "")),
            "iat": int(time.time()),
        }
        nonce = self.nonces.get(_origin(url))
        if nonce is not None:
            claims["nonce"] = nonce
        if access_token is not None:
            digest = hashlib.sha256(access_token.encode("ascii")).digest()
            claims["ath"] = base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")
        header = {"typ": "dpop+jwt", "alg": "ES256", "jwk": self.key.as_dict(private=False)}
        return str(jwt.encode(header, claims, self.key))

    def note(self, response: httpx.Response) -> bool:
        """Remember the ``DPoP-Nonce`` a response carries; whether it brought a new one."""
        nonce = response.headers.get("dpop-nonce")
        origin = _origin(str(response.request.url))
        if not nonce or self.nonces.get(origin) == nonce:
            return False
        self.nonces[origin] = nonce
        return True


class OAuth(httpx.Auth):
    """OAuth 2.1 for :func:`~trio_mcp.client.connect_http` (``auth=OAuth(...)``): see the
    module docstring of :mod:`trio_mcp.client.auth` for the flow.

    ``authorizer``: takes the user through the authorization-code flow (default a
    :class:`LoopbackAuthorizer`: the browser). ``client_id`` / ``client_secret``: a
    pre-registered client (else a client ID metadata document at ``client_metadata_url``, or
    dynamic registration as ``client_name``); ``auth_method``: how it authenticates at the token
    endpoint (default: from the registration, else the first the server supports of
    ``client_secret_basic``, ``client_secret_post``, ``none``); ``private_key`` (PEM) with
    ``signing_alg``: ``private_key_jwt``. ``grant``: ``"authorization_code"``,
    ``"client_credentials"`` (a machine client: ``client_id`` with a secret or a private key)
    or ``"jwt_bearer"`` (RFC 7523: ``assertion`` is a JWT, such as a workload identity token,
    or a sync or async callable ``(issuer, resource)`` returning a fresh one: the
    authorization server's issuer and the MCP server's resource, what an identity provider's
    token exchange needs, as in enterprise-managed authorization, SEP-990).
    ``scopes``: request these instead of what the server suggests. ``store``: a
    :class:`TokenStore` (default :class:`MemoryTokenStore`). ``dpop``: bind tokens to a key
    with DPoP (RFC 9449) where the authorization server takes ES256 proofs (answering the
    servers' nonce challenges); the key is kept in the store with the tokens.

    >>> auth = OAuth(HeadlessAuthorizer(), client_name="my-agent")
    >>> # async with connect_http("https://mcp.example.com/mcp", auth=auth) as client: ...
    """

    def __init__(
        self,
        authorizer: Authorizer | None = None,
        *,
        client_id: str | None = None,
        client_secret: str | None = None,
        auth_method: str | None = None,
        private_key: str | None = None,
        signing_alg: str = "ES256",
        client_metadata_url: str | None = None,
        client_name: str = "trio-mcp",
        grant: str = "authorization_code",
        assertion: str | Callable[[str, str], str | Awaitable[str]] | None = None,
        scopes: Iterable[str] | None = None,
        store: TokenStore | None = None,
        verify: ssl.SSLContext | bool = True,
        timeout: float = 30.0,
        dpop: bool = True,
    ) -> None:
        if grant not in GRANTS:
            raise ValueError(f"unknown grant {grant!r}: one of {', '.join(GRANTS)}")
        if grant != "authorization_code" and client_id is None:
            raise ValueError(f"the {grant} grant needs a client_id")
        if (grant == "jwt_bearer") != (assertion is not None):
            raise ValueError("an assertion goes with the jwt_bearer grant, and it needs one")
        self.authorizer: Authorizer = authorizer if authorizer is not None else LoopbackAuthorizer()
        self.client_id = client_id
        self.client_secret = client_secret
        self.auth_method = auth_method
        self.private_key = private_key
        self.signing_alg = signing_alg
        self.client_metadata_url = client_metadata_url
        self.client_name = client_name
        self.grant = grant
        self.assertion = assertion
        self.scopes = list(scopes) if scopes is not None else None
        self.store: TokenStore = store if store is not None else MemoryTokenStore()
        self.verify = verify
        self.timeout = timeout
        self.dpop = dpop
        self._lock = trio.Lock()
        self._records: dict[str, dict[str, Any]] = {}
        self._dpops: dict[str, DPoPKey] = {}
        self._failures = 0

    # -- httpx.Auth -----------------------------------------------------------------------------
    async def async_auth_flow(self, request: httpx.Request) -> AsyncGenerator[httpx.Request, httpx.Response]:
        key = canonical_resource(str(request.url))
        record = await self._record(key)
        tokens = record.get("tokens") or {}
        if tokens.get("refresh_token") and _expired(tokens):
            async with self._lock:
                if (await self._record(key)).get("tokens") == tokens:
                    await self._refresh(key, str(request.url))
        authorizations = 0  # 401 (authorize), then perhaps 403 (step up): no more for one request
        nonce_retried = False
        while True:
            sent = self._authorize_request(request, key)
            response = yield request
            dpop = self._dpops.get(key)
            fresh_nonce = dpop is not None and dpop.note(response)
            challenge = parse_www_authenticate(response.headers.get("www-authenticate"))
            if response.status_code == 401 and challenge.get("error") == "use_dpop_nonce":
                if fresh_nonce and not nonce_retried:  # RFC 9449 §9: sign again with the nonce
                    nonce_retried = True
                    await response.aread()
                    continue
            if not _asks_for_authorization(response.status_code, challenge):
                if response.status_code < 400:
                    self._failures = 0
                return
            if authorizations >= 2:
                return
            await response.aread()
            async with self._lock:
                authorizations += 1
                if self._current_token(key) != sent:
                    continue  # another request authorized meanwhile: try its token
                if self._failures >= MAX_AUTHORIZATIONS:
                    raise AuthorizationError(
                        f"gave up after {MAX_AUTHORIZATIONS} authorizations in a row were refused",
                        status=response.status_code,
                        challenge=response.headers.get("www-authenticate"),
                    )
                self._failures += 1
                await self._obtain(
                    key, str(request.url), response.status_code, challenge, refresh=authorizations == 1
                )

    def _current_token(self, key: str) -> str | None:
        token = (self._records.get(key, {}).get("tokens") or {}).get("access_token")
        return token if isinstance(token, str) else None

    def _authorize_request(self, request: httpx.Request, key: str) -> str | None:
        token = self._current_token(key)
        if token is None:
            return None
        tokens = self._records[key].get("tokens") or {}
        if str(tokens.get("token_type", "bearer")).lower() == "dpop":  # RFC 9449 §7.1
            dpop = self._dpop_for(key)
            request.headers["authorization"] = f"DPoP {token}"
            request.headers["dpop"] = dpop.proof(request.method, str(request.url), token)
        else:
            request.headers["authorization"] = f"Bearer {token}"
        return token

    def _dpop_for(self, key: str) -> DPoPKey:
        """This resource's DPoP key (kept in its record, so a bound token outlives the process)."""
        dpop = self._dpops.get(key)
        if dpop is None:
            record = self._records.setdefault(key, {})
            stored = record.get("dpop_key")
            dpop = DPoPKey(stored if isinstance(stored, dict) else None)
            record["dpop_key"] = dpop.jwk()
            self._dpops[key] = dpop
        return dpop

    def _dpop_at(self, key: str, metadata: Mapping[str, Any]) -> DPoPKey | None:
        """DPoP for the token requests to this authorization server, if it takes ES256 proofs."""
        algorithms = metadata.get("dpop_signing_alg_values_supported")
        if not self.dpop or not isinstance(algorithms, list) or "ES256" not in algorithms:
            return None
        return self._dpop_for(key)

    async def _record(self, key: str) -> dict[str, Any]:
        if key not in self._records:
            self._records[key] = await self.store.load(key) or {}
        return self._records[key]

    async def _save(self, key: str) -> None:
        await self.store.save(key, self._records[key])

    async def logout(self, url: str) -> None:
        """Forget the tokens and clients stored for the MCP server at ``url``."""
        key = canonical_resource(url)
        self._records.pop(key, None)
        self._dpops.pop(key, None)
        await self.store.delete(key)

    # -- the flow -------------------------------------------------------------------------------
    def _http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(follow_redirects=False, verify=self.verify, timeout=self.timeout)

    async def _obtain(
        self, key: str, server_url: str, status: int, challenge: Mapping[str, str], *, refresh: bool = True
    ) -> None:
        """Get a new access token for ``key`` after a ``status`` refusal with ``challenge``."""
        record = await self._record(key)
        tokens = record.get("tokens") or {}
        async with self._http() as http:
            prm = await self._protected_resource(http, server_url, challenge)
            resource = prm.get("resource") if isinstance(prm.get("resource"), str) else None
            if resource is not None and not _resource_matches(server_url, resource):
                raise AuthorizationError(
                    f"the protected resource metadata names {resource!r}, not this server ({server_url})"
                )
            servers = prm.get("authorization_servers")
            if not isinstance(servers, list) or not servers or not isinstance(servers[0], str):
                raise AuthorizationError("the protected resource metadata names no authorization server")
            if (
                refresh
                and status == 401
                and tokens.get("refresh_token")
                and record.get("issuer") == servers[0]
                and await self._refresh(key, server_url)
            ):
                return
            metadata = await self._authorization_server(http, servers[0])
            issuer = metadata["issuer"]
            if record.get("issuer") not in (None, issuer):
                record.pop("tokens", None)  # another authorization server now: nothing of the old one
                tokens = {}
            record["issuer"] = issuer
            scopes = self._choose_scopes(status, challenge, prm, metadata, tokens)
            client = await self._client(http, record, metadata, scopes)
            target = resource or canonical_resource(server_url)
            if self.grant == "client_credentials":
                params: dict[str, str] = {"grant_type": "client_credentials", "resource": target}
            elif self.grant == "jwt_bearer":
                params = {
                    "grant_type": JWT_BEARER,
                    "assertion": await self._assertion(issuer, target),
                    "resource": target,
                }
            else:
                params = await self._authorization_code(metadata, client, scopes, target)
            if scopes:
                params["scope"] = " ".join(scopes)
            new = await self._token_request(http, metadata, client, params, self._dpop_at(key, metadata))
        new.setdefault("scope", " ".join(scopes))
        record["tokens"] = new
        record["resource"] = target
        await self._save(key)

    async def _get_json(self, http: httpx.AsyncClient, url: str) -> dict[str, Any] | None:
        try:
            response = await http.get(url, headers={"accept": "application/json"})
        except httpx.HTTPError as exc:
            log.debug("GET %s failed: %r", url, exc)
            return None
        if response.status_code != 200:
            return None
        try:
            data = response.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    async def _protected_resource(
        self, http: httpx.AsyncClient, server_url: str, challenge: Mapping[str, str]
    ) -> dict[str, Any]:
        hinted = challenge.get("resource_metadata")
        for url in [hinted] if hinted else prm_urls(server_url):
            found = await self._get_json(http, url)
            if found is not None:
                return found
        raise AuthorizationError(f"no protected resource metadata for {server_url}")

    async def _authorization_server(self, http: httpx.AsyncClient, issuer: str) -> dict[str, Any]:
        for url in as_metadata_urls(issuer):
            found = await self._get_json(http, url)
            if found is None:
                continue
            if found.get("issuer") != issuer:
                raise AuthorizationError(
                    f"the authorization server metadata at {url} names issuer {found.get('issuer')!r},"
                    f" not {issuer!r}: not used (RFC 8414 §3.3)"
                )
            if not isinstance(found.get("token_endpoint"), str):
                raise AuthorizationError(f"the authorization server metadata at {url} has no token_endpoint")
            return found
        raise AuthorizationError(f"no authorization server metadata for {issuer}")

    def _choose_scopes(
        self,
        status: int,
        challenge: Mapping[str, str],
        prm: Mapping[str, Any],
        metadata: Mapping[str, Any],
        tokens: Mapping[str, Any],
    ) -> list[str]:
        if self.scopes is not None:
            chosen = list(self.scopes)
        elif challenge.get("scope"):
            # the challenge is authoritative; keep what was granted (step-up, SEP-2350)
            chosen = _union(_scopes(tokens.get("scope")), _scopes(challenge["scope"]))
        else:
            supported = prm.get("scopes_supported")
            chosen = [s for s in supported if isinstance(s, str)] if isinstance(supported, list) else []
        offered = metadata.get("scopes_supported")
        if (
            self.grant == "authorization_code"
            and isinstance(offered, list)
            and "offline_access" in offered
            and "offline_access" not in chosen
        ):
            chosen.append("offline_access")  # a refresh token, where the server offers one (SEP-2207)
        return chosen

    async def _client(
        self, http: httpx.AsyncClient, record: dict[str, Any], metadata: Mapping[str, Any], scopes: list[str]
    ) -> dict[str, Any]:
        """The client to use with this authorization server (registered if need be)."""
        issuer = metadata["issuer"]
        if self.client_id is not None:
            return {"client_id": self.client_id, "client_secret": self.client_secret}
        clients = record.setdefault("clients", {})
        known = clients.get(issuer)
        if (
            isinstance(known, dict)
            and isinstance(known.get("client_id"), str)
            and self._redirects_here(known)
        ):
            return known
        if self.client_metadata_url is not None and metadata.get("client_id_metadata_document_supported"):
            client: dict[str, Any] = {
                "client_id": self.client_metadata_url,
                "token_endpoint_auth_method": "none",
            }
        elif isinstance(metadata.get("registration_endpoint"), str):
            client = await self._register(http, metadata, scopes)
        else:
            raise AuthorizationError(
                f"the authorization server {issuer} takes neither client ID metadata documents nor"
                " dynamic registration: give a pre-registered client_id"
            )
        clients[issuer] = client
        return client

    def _redirects_here(self, client: Mapping[str, Any]) -> bool:
        """Whether a stored registration may be used with this authorizer: one registered
        for other redirect URIs (another loopback port) is not, and a new one is made."""
        uris = client.get("redirect_uris")
        if self.grant != "authorization_code" or not isinstance(uris, list):
            return True
        return self.authorizer.redirect_uri in uris

    async def _assertion(self, issuer: str, resource: str) -> str:
        """The JWT-bearer grant's assertion; a callable is asked anew each time, with the
        authorization server's issuer and the resource (an assertion's audience, or what to
        ask an identity provider for: SEP-990's token exchange)."""
        assertion = self.assertion
        if callable(assertion):
            produced = assertion(issuer, resource)
            assertion = await produced if inspect.isawaitable(produced) else produced
        if not isinstance(assertion, str) or not assertion:
            raise AuthorizationError("the jwt_bearer grant has no assertion")
        return assertion

    def client_metadata(self, method: str | None = None) -> dict[str, Any]:
        """This client's metadata (RFC 7591): what dynamic registration sends, and what a client
        ID metadata document served at ``client_metadata_url`` should hold."""
        grants = [JWT_BEARER if self.grant == "jwt_bearer" else self.grant]
        grants.append("refresh_token")
        metadata: dict[str, Any] = {
            "client_name": self.client_name,
            "grant_types": grants,
            "token_endpoint_auth_method": method or "none",
        }
        if self.grant == "authorization_code":
            metadata["redirect_uris"] = [self.authorizer.redirect_uri]
            metadata["response_types"] = ["code"]
            metadata["application_type"] = "native"
        if self.client_metadata_url is not None:
            metadata["client_id"] = self.client_metadata_url
        return metadata

    async def _register(
        self, http: httpx.AsyncClient, metadata: Mapping[str, Any], scopes: list[str]
    ) -> dict[str, Any]:
        supported = metadata.get("token_endpoint_auth_methods_supported")
        method = self.auth_method or _pick_method(supported, secret=None)
        body = self.client_metadata(method)
        if scopes:
            body["scope"] = " ".join(scopes)
        try:
            response = await http.post(metadata["registration_endpoint"], json=body)
        except httpx.HTTPError as exc:
            raise AuthorizationError(f"dynamic client registration failed: {exc!r}") from exc
        if response.status_code not in (200, 201):
            raise AuthorizationError(
                f"dynamic client registration refused: HTTP {response.status_code} {response.text[:200]}"
            )
        try:
            client = response.json()
        except ValueError as exc:
            raise AuthorizationError("dynamic client registration answered no JSON") from exc
        if not isinstance(client, dict) or not isinstance(client.get("client_id"), str):
            raise AuthorizationError("dynamic client registration answered no client_id")
        client.setdefault("token_endpoint_auth_method", method)
        return client

    async def _authorization_code(
        self, metadata: Mapping[str, Any], client: Mapping[str, Any], scopes: list[str], resource: str
    ) -> dict[str, str]:
        """Run the authorization request; the token request's parameters (with the code)."""
        endpoint = metadata.get("authorization_endpoint")
        if not isinstance(endpoint, str):
            raise AuthorizationError("the authorization server has no authorization_endpoint")
        methods = metadata.get("code_challenge_methods_supported")
        if not isinstance(methods, list) or "S256" not in methods:
            raise AuthorizationError(
                "the authorization server does not support PKCE with S256: refusing to proceed"
            )
        verifier = generate_token(64)
        state = generate_token(32)
        issuer = metadata["issuer"]  # recorded with the verifier and the state (RFC 9207)
        redirect_uri = self.authorizer.redirect_uri
        url = prepare_grant_uri(
            endpoint,
            client_id=client["client_id"],
            response_type="code",
            redirect_uri=redirect_uri,
            scope=" ".join(scopes) or None,
            state=state,
            code_challenge=create_s256_code_challenge(verifier),
            code_challenge_method="S256",
            resource=resource,
        )
        returned = await self.authorizer.authorize(url)
        if not _same_endpoint(returned, redirect_uri):
            where = urlunsplit((*urlsplit(returned)[:3], "", ""))
            raise AuthorizationError(
                f"the authorization response came back to {where}, not to the redirect URI"
                f" {redirect_uri}: refused"
            )
        query = {k: v[0] for k, v in parse_qs(urlsplit(returned).query, keep_blank_values=True).items()}
        iss = query.get("iss")
        if iss is not None and iss != issuer:
            raise AuthorizationError(f"the authorization response came from issuer {iss!r}, not {issuer!r}")
        if iss is None and metadata.get("authorization_response_iss_parameter_supported") is True:
            raise AuthorizationError("the authorization response lacks the iss parameter its server promised")
        if query.get("state") != state:
            raise AuthorizationError("the authorization response's state does not match the request")
        if "error" in query:
            raise AuthorizationError(
                f"authorization refused: {query['error']} {query.get('error_description', '')}".rstrip()
            )
        code = query.get("code")
        if not code:
            raise AuthorizationError("the authorization response carries no code")
        return {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": redirect_uri,
            "code_verifier": verifier,
            "resource": resource,
        }

    async def _refresh(self, key: str, server_url: str) -> bool:
        """Use the refresh token of ``key``; whether a new access token came of it."""
        record = await self._record(key)
        tokens = record.get("tokens") or {}
        issuer = record.get("issuer")
        if not tokens.get("refresh_token") or not isinstance(issuer, str):
            return False
        async with self._http() as http:
            try:
                metadata = await self._authorization_server(http, issuer)
                client = await self._client(http, record, metadata, [])
                params = {
                    "grant_type": "refresh_token",
                    "refresh_token": tokens["refresh_token"],
                    "resource": record.get("resource") or canonical_resource(server_url),
                }
                dpop = self._dpop_at(key, metadata)
                if str(tokens.get("token_type", "")).lower() == "dpop":
                    dpop = self._dpop_for(key)  # a bound refresh token needs the same key
                new = await self._token_request(http, metadata, client, params, dpop)
            except AuthorizationError as exc:
                log.info("refreshing the token failed (%s): authorizing again", exc)
                record.pop("tokens", None)
                return False
        new.setdefault("refresh_token", tokens["refresh_token"])
        new.setdefault("scope", tokens.get("scope", ""))
        record["tokens"] = new
        await self._save(key)
        return True

    def _private_key_jwt(self, client_id: str, endpoint: str, issuer: str) -> Any:
        """Client authentication by a JWT signed with ``private_key`` (RFC 7523 §2.2), its
        audience the authorization server's issuer identifier (RFC 7523bis)."""
        # imported here: joserfc and the JWT machinery are slow to import, and rarely needed
        from authlib.oauth2.rfc7523 import PrivateKeyJWT  # type: ignore[import-untyped]
        from joserfc.jwk import import_key

        if self.private_key is None:
            raise AuthorizationError("private_key_jwt needs a private_key")
        try:
            key = import_key(self.private_key, _key_type(self.signing_alg))  # type: ignore[call-overload]
        except Exception as exc:  # joserfc raises its own errors for keys it cannot read
            raise AuthorizationError(f"cannot read the private key for {self.signing_alg}: {exc}") from exc
        encoder = PrivateKeyJWT(endpoint, claims={"aud": issuer}, alg=self.signing_alg)
        return ClientAuth(client_id, key, encoder)

    async def _token_request(
        self,
        http: httpx.AsyncClient,
        metadata: Mapping[str, Any],
        client: Mapping[str, Any],
        params: dict[str, str],
        dpop: DPoPKey | None = None,
    ) -> dict[str, Any]:
        endpoint = metadata["token_endpoint"]
        secret = client.get("client_secret") if isinstance(client.get("client_secret"), str) else None
        method: Any = self.auth_method or client.get("token_endpoint_auth_method")
        if self.private_key is not None:
            method = "private_key_jwt"
        if not isinstance(method, str) or (method.startswith("client_secret") and secret is None):
            method = _pick_method(metadata.get("token_endpoint_auth_methods_supported"), secret=secret)
        if method == "private_key_jwt":
            client_auth = self._private_key_jwt(client["client_id"], endpoint, metadata["issuer"])
        else:
            client_auth = ClientAuth(client["client_id"], secret, method)
        for attempt in range(2):  # a DPoP nonce challenge is answered once (RFC 9449 §8)
            headers = {"content-type": "application/x-www-form-urlencoded", "accept": "application/json"}
            if dpop is not None:
                headers["dpop"] = dpop.proof("POST", endpoint)
            body = add_params_to_qs("", [(k, v) for k, v in params.items() if v])
            uri, headers, body = client_auth.prepare("POST", endpoint, headers, body)
            try:
                response = await http.post(uri, content=body, headers=headers)
            except httpx.HTTPError as exc:
                raise AuthorizationError(f"the token request failed: {exc!r}") from exc
            try:
                data = response.json()
            except ValueError:
                data = None
            fresh_nonce = dpop is not None and dpop.note(response)
            nonce_asked = isinstance(data, dict) and data.get("error") == "use_dpop_nonce"
            if not (attempt == 0 and response.status_code == 400 and nonce_asked and fresh_nonce):
                break
        if (
            response.status_code != 200
            or not isinstance(data, dict)
            or not isinstance(data.get("access_token"), str)
        ):
            detail = data.get("error") if isinstance(data, dict) else response.text[:200]
            raise AuthorizationError(f"the token endpoint refused: HTTP {response.status_code} {detail}")
        kind = str(data.get("token_type", "bearer")).lower()
        if kind != "bearer" and not (kind == "dpop" and dpop is not None):
            raise AuthorizationError(f"unsupported token type {data.get('token_type')!r}")
        if isinstance(data.get("expires_in"), int | float):
            data["expires_at"] = time.time() + float(data["expires_in"])
        return data


def _same_endpoint(url: str, redirect_uri: str) -> bool:
    """Whether ``url`` is at ``redirect_uri``: the same scheme, host, port and path."""
    try:
        got, expected = urlsplit(url), urlsplit(redirect_uri)
        ports = (got.port, expected.port)
    except ValueError:
        return False
    return (got.scheme.lower(), (got.hostname or "").lower(), got.path) == (
        expected.scheme.lower(),
        (expected.hostname or "").lower(),
        expected.path,
    ) and ports[0] == ports[1]


def _key_type(alg: str) -> str:
    return "EC" if alg.startswith("ES") else "OKP" if alg == "EdDSA" else "RSA"


def _pick_method(supported: Any, *, secret: str | None) -> str:
    """A token-endpoint authentication method the server supports (RFC 8414's default list:
    ``client_secret_basic``): ``none`` for a client without a secret where it may, else the
    secret in the Authorization header, else in the body."""
    methods = [m for m in supported if isinstance(m, str)] if isinstance(supported, list) else []
    methods = methods or ["client_secret_basic"]
    if secret is None and "none" in methods:
        return "none"
    for method in ("client_secret_basic", "client_secret_post", "none"):
        if method in methods:
            return method
    return methods[0]


def _expired(tokens: Mapping[str, Any]) -> bool:
    expires_at = tokens.get("expires_at")
    return isinstance(expires_at, int | float) and expires_at - EXPIRY_MARGIN <= time.time()


def _asks_for_authorization(status: int, challenge: Mapping[str, str]) -> bool:
    return status == 401 or (status == 403 and challenge.get("error") == "insufficient_scope")
