"""What every network transport checks before it serves anyone: the Origin of browser
requests (against DNS rebinding and cross-site requests) and bearer-token identities.

Helpers shared by the WebSocket transport and HTTP: each takes header values already read,
and says yes or no. Only two verifiers do I/O, over HTTP (httpx): :class:`JwksVerifier`
(``jwt_verifier(jwks_url=...)``: keys from a JWKS) and :class:`IntrospectionVerifier` (RFC
7662). Who made a request (:class:`Caller`: identity, scopes, headers) travels to the tools in
:data:`current_caller`.

>>> allowed = origin_check(DEFAULT_ALLOWED_ORIGINS)
>>> allowed("http://localhost:5173"), allowed("https://evil.example"), allowed("null")
(True, False, False)
>>> bearer_token(["Bearer s3cret"]), bearer_token(["Basic abc"]), bearer_token([])
('s3cret', None, None)
>>> identity_owner("alice")
'identity:alice'

An OAuth 2.1 resource server checks access tokens with :func:`jwt_verifier` (PyJWT):

>>> import jwt, time
>>> verify = jwt_verifier("a-long-enough-shared-secret-for-hs256", audience="https://mcp.example/mcp",
...                       required_scopes=["mcp:tools"])
>>> def token(**claims):
...     claims = {"sub": "alice", "aud": "https://mcp.example/mcp", "exp": time.time() + 60, **claims}
...     return jwt.encode(claims, "a-long-enough-shared-secret-for-hs256", algorithm="HS256")
>>> verify(token(scope="mcp:tools profile"))
AccessToken(identity='alice', scopes=['mcp:tools', 'profile'])
>>> verify(token(aud="https://other.example/mcp")) is None  # a token for another resource
True
>>> verify(token(scope="profile"))
Traceback (most recent call last):
  ...
trio_mcp.transports.security.InsufficientScope: the token lacks the scopes: mcp:tools
"""

from __future__ import annotations

import base64
import collections
import contextvars
import hashlib
import hmac
import inspect
import ipaddress
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, overload
from urllib.parse import quote, urlsplit

import attrs
import trio

__all__ = [
    "DEFAULT_ALLOWED_ORIGINS",
    "INSUFFICIENT_SCOPE_CODE",
    "NO_CALLER",
    "AccessToken",
    "Authenticator",
    "Caller",
    "InsufficientScope",
    "IntrospectionVerifier",
    "JwksVerifier",
    "JwtVerifier",
    "OriginPolicy",
    "RequestHeaders",
    "VerifierUnavailable",
    "authenticate",
    "bearer_token",
    "current_caller",
    "identity_owner",
    "introspection_verifier",
    "jwt_verifier",
    "missing_scopes",
    "origin_check",
    "request_headers",
    "static_token",
    "verify_token",
]

log = logging.getLogger("trio_mcp.auth")

DEFAULT_ALLOWED_ORIGINS: tuple[str, ...] = (
    "http://localhost:*",
    "https://localhost:*",
    "http://127.0.0.1:*",
    "https://127.0.0.1:*",
    "http://[::1]:*",
    "https://[::1]:*",
)
"""Origins a browser page may connect from by default: the local machine, any port.

Entry syntax (for ``allowed_origins``): ``scheme://host`` (that origin on the scheme's default
port), ``scheme://host:port`` (exactly that port), ``scheme://host:*`` (any port), the literal
``null``, or ``*`` (any origin at all: this turns the check off).
"""


def _frozen(scopes: Iterable[str]) -> frozenset[str]:
    return frozenset(scopes)


@attrs.frozen(repr=False)
class AccessToken:
    """What a verifier learnt from a valid bearer token: who it is (the task owner is
    ``identity:<identity>``), the scopes it grants, and its claims (a JWT's payload)."""

    identity: str
    scopes: frozenset[str] = attrs.field(default=frozenset(), converter=_frozen)
    claims: Mapping[str, Any] = attrs.field(factory=dict, eq=False)

    def __repr__(self) -> str:  # no claims: they may hold personal data
        return f"AccessToken(identity={self.identity!r}, scopes={sorted(self.scopes)!r})"


class InsufficientScope(Exception):
    """Raised by a verifier for a valid token that lacks scopes the resource requires: HTTP
    answers **403** ``error="insufficient_scope"`` naming ``required`` (RFC 6750 §3.1)."""

    def __init__(self, required: Iterable[str], token: AccessToken | None = None) -> None:
        self.required = tuple(required)
        self.token = token
        missing = [s for s in self.required if token is None or s not in token.scopes]
        super().__init__("the token lacks the scopes: " + " ".join(missing or self.required))


INSUFFICIENT_SCOPE_CODE = -32003
"""The JSON-RPC error answering a ``tools/call`` whose caller's token lacks the tool's scopes
where there is no HTTP status to say it (WebSocket). In the range JSON-RPC 2.0 reserves for
implementation-defined server errors (-32000 to -32099), none of which MCP has taken for
this: the request is well formed and its parameters valid (so not -32600 or -32602, which
also mean "unknown tool" for ``tools/call``), it is forbidden to this caller — the
"403 → -32003" convention of JSON-RPC servers that map HTTP statuses."""

_REDACTED_HEADERS = frozenset({"authorization", "proxy-authorization"})
REDACTED = "[redacted]"
"""What :func:`request_headers` shows instead of a credential header's value."""


def request_headers(pairs: Iterable[tuple[str | bytes, str | bytes]]) -> Mapping[str, str]:
    """A read-only mapping of HTTP request headers for a tool to read: names lower-cased,
    repeated headers joined with ``", "`` (``Cookie`` with ``"; "``), and the value of
    ``Authorization`` (and ``Proxy-Authorization``) never shown: it is :data:`REDACTED`.
    Built when first read (most tools never look).

    >>> headers = request_headers([("Authorization", "Bearer s3cret"), ("X-Trace", "a"), ("x-trace", "b")])
    >>> dict(headers)
    {'authorization': '[redacted]', 'x-trace': 'a, b'}
    >>> headers["x-trace"] = "c"
    Traceback (most recent call last):
      ...
    TypeError: 'RequestHeaders' object does not support item assignment
    """
    return RequestHeaders(pairs)


class RequestHeaders(Mapping[str, str]):
    """What :func:`request_headers` returns: read-only, built from the raw pairs on first use."""

    __slots__ = ("_built", "_pairs")

    def __init__(self, pairs: Iterable[tuple[str | bytes, str | bytes]]) -> None:
        self._pairs = pairs
        self._built: dict[str, str] | None = None

    def _headers(self) -> dict[str, str]:
        built = self._built
        if built is None:
            built = {}
            for raw_name, raw_value in self._pairs:
                name = (raw_name.decode("latin-1") if isinstance(raw_name, bytes) else raw_name).lower()
                value = raw_value.decode("latin-1") if isinstance(raw_value, bytes) else raw_value
                if name in _REDACTED_HEADERS:
                    value = REDACTED
                elif name in built:
                    value = built[name] + ("; " if name == "cookie" else ", ") + value
                built[name] = value
            self._built, self._pairs = built, ()
        return built

    def __getitem__(self, name: str) -> str:
        return self._headers()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._headers())

    def __len__(self) -> int:
        return len(self._headers())

    def __repr__(self) -> str:
        return f"RequestHeaders({self._headers()!r})"


_NO_HEADERS: Mapping[str, str] = MappingProxyType({})


@attrs.frozen
class Caller:
    """Who makes a request, as a tool sees it (``ctx.identity``, ``ctx.scopes``,
    ``ctx.headers``): the authenticated identity (None without authentication), the scopes of
    its token (empty without a verifier, or for a verifier that returns a bare identity), and
    the HTTP headers of the request that carried the call (see :func:`request_headers`; empty
    where there are none, as over stdio; for WebSocket, those of the opening handshake).

    A transport sets :data:`current_caller` where the runtime reads what a request is for: a
    tool call made in that context — a task too, which keeps its creating request's — sees it.
    """

    identity: str | None = None
    scopes: frozenset[str] = attrs.field(default=frozenset(), converter=_frozen)
    headers: Mapping[str, str] = attrs.field(default=_NO_HEADERS, repr=False, eq=False)


NO_CALLER = Caller()
"""The caller of a request nobody described (stdio): no identity, no scopes, no headers."""

current_caller: contextvars.ContextVar[Caller] = contextvars.ContextVar(
    "trio_mcp_current_caller", default=NO_CALLER
)
"""The :class:`Caller` of the request being read or served."""


def missing_scopes(required: Iterable[str], granted: Iterable[str]) -> tuple[str, ...]:
    """The scopes of ``required`` (in order, once each) that ``granted`` lacks.

    >>> missing_scopes(["files:read", "files:write"], {"files:read"})
    ('files:write',)
    """
    have = set(granted)
    out: list[str] = []
    for scope in required:
        if scope not in have and scope not in out:
            out.append(scope)
    return tuple(out)


Authenticator = Callable[[str], Awaitable[str | AccessToken | None] | str | AccessToken | None]
"""Maps a bearer token to an identity (a ``str``, or an :class:`AccessToken` with its scopes),
or to None to refuse it; raises :class:`InsufficientScope` for a valid token without the
scopes required. May be sync or async. :func:`jwt_verifier` builds one for JWT access tokens.
"""

OriginPolicy = Iterable[str] | Callable[[str], bool]
"""An allow-list of origin patterns (see :data:`DEFAULT_ALLOWED_ORIGINS`) or a predicate."""


def identity_owner(identity: str) -> str:
    """The task owner of an authenticated identity (connections without one mint their own)."""
    return "identity:" + identity


def _parse_origin(text: str, *, allow_wildcard_port: bool = False) -> tuple[str, str, int | None] | None:
    """``scheme://host[:port]`` → (scheme, host, port); port None means "any". None if malformed."""
    any_port = allow_wildcard_port and text.endswith(":*")
    if any_port:
        text = text[:-2]
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = parts.hostname
    if not scheme or not host or parts.path or parts.query or parts.fragment or parts.username:
        return None
    if parts.password is not None or "@" in parts.netloc:
        return None
    if any_port:
        if port is not None:
            return None
        return scheme, host, None
    if port is None:
        port = {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(scheme)
        if port is None:
            return None
    return scheme, host, port


def origin_check(policy: OriginPolicy) -> Callable[[str], bool]:
    """A predicate ``origin -> bool`` for an allow-list (or the predicate itself)."""
    if callable(policy):
        return policy
    if isinstance(policy, str):
        raise TypeError("allowed_origins must be a collection of origins, not one string")
    patterns: list[tuple[str, str, int | None]] = []
    allow_null = False
    for entry in policy:
        entry = entry.strip()
        if entry == "*":
            return lambda origin: True
        if entry.lower() == "null":
            allow_null = True
            continue
        parsed = _parse_origin(entry, allow_wildcard_port=True)
        if parsed is None:
            raise ValueError(f"not an origin pattern: {entry!r} (expected scheme://host[:port|:*])")
        patterns.append(parsed)

    def check(origin: str) -> bool:
        if origin.strip().lower() == "null":
            return allow_null
        parsed = _parse_origin(origin.strip())
        if parsed is None:
            return False
        scheme, host, port = parsed
        return any(
            scheme == p_scheme and host == p_host and (p_port is None or p_port == port)
            for p_scheme, p_host, p_port in patterns
        )

    return check


def bearer_token(authorization: Sequence[str]) -> str | None:
    """The token of exactly one ``Authorization: Bearer <token>`` header value, else None."""
    if len(authorization) != 1:
        return None
    scheme, _, token = authorization[0].strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token


def static_token(token: str, identity: str = "cli-token") -> Callable[[str], str | None]:
    """An authenticator accepting exactly ``token`` (compared in constant time) as ``identity``.

    >>> check = static_token("s3cret")
    >>> check("s3cret"), check("guess")
    ('cli-token', None)
    """
    expected = token.encode()

    def authenticate(offered: str) -> str | None:
        return identity if hmac.compare_digest(offered.encode(), expected) else None

    return authenticate


async def verify_token(authenticate: Authenticator, token: str) -> AccessToken | None:
    """Run ``authenticate`` (sync or async) on ``token``: an :class:`AccessToken` (a plain
    identity has no scopes), or None (refused). :class:`InsufficientScope` propagates."""
    result = authenticate(token)
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return None
    if isinstance(result, str):
        return AccessToken(result) if result else None
    if isinstance(result, AccessToken):
        return result if result.identity else None
    raise TypeError(f"authenticate() must return str, AccessToken or None, not {type(result).__name__}")


async def authenticate(authenticate: Authenticator, token: str) -> str | None:
    """Run ``authenticate`` (sync or async) on ``token``: the identity, or None (refused; a
    token without the required scopes is refused too)."""
    try:
        verified = await verify_token(authenticate, token)
    except InsufficientScope:
        return None
    return verified.identity if verified is not None else None


# -- JWT access tokens (OAuth 2.1 resource server) ------------------------------------------
HMAC_ALGORITHMS = ("HS256", "HS384", "HS512")
ASYMMETRIC_ALGORITHMS = (
    "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA",
)  # fmt: skip
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+")  # RFC 6749 §3.3 scope-token


def _is_pem(key: Any) -> bool:
    text = key.decode("latin-1") if isinstance(key, bytes) else key
    return isinstance(text, str) and ("-----BEGIN" in text or text.startswith(("ssh-", "ecdsa-")))


def _scopes_of(claims: Mapping[str, Any]) -> frozenset[str]:
    """``scope`` (RFC 9068: space-separated; a list is accepted too), else ``scp`` (a list)."""
    value = claims.get("scope", claims.get("scp"))
    if isinstance(value, str):
        return frozenset(value.split())
    if isinstance(value, list | tuple):
        return frozenset(s for s in value if isinstance(s, str) and s)
    return frozenset()


class JwtVerifier:
    """An :data:`Authenticator` for JWT access tokens (see :func:`jwt_verifier`). Pure and
    synchronous: it does no I/O (give it the keys; :class:`JwksVerifier` fetches them)."""

    def __init__(
        self,
        key: Any,
        *,
        audience: str | Sequence[str],
        algorithms: Sequence[str] | None = None,
        issuer: str | Sequence[str] | None = None,
        required_scopes: Iterable[str] = (),
        leeway: float = 0.0,
    ) -> None:
        import jwt  # PyJWT: imported when used (it loads `cryptography` when installed)

        if isinstance(audience, str):
            audience = [audience]
        self.audience = [a for a in audience if a]
        if not self.audience:
            raise ValueError("audience is required: the URL of this resource (RFC 8707)")
        if algorithms is None:
            symmetric = not callable(key) and isinstance(key, str | bytes) and not _is_pem(key)
            algorithms = HMAC_ALGORITHMS if symmetric else ASYMMETRIC_ALGORITHMS
        self.algorithms = list(algorithms)
        if not self.algorithms or any(a.lower() == "none" for a in self.algorithms):
            raise ValueError("algorithms must name at least one algorithm, and never 'none'")
        hmac = [a for a in self.algorithms if a in HMAC_ALGORITHMS]
        if hmac and len(hmac) != len(self.algorithms):
            # one key both as an HMAC secret and a public key invites algorithm confusion
            raise ValueError("do not mix HMAC (HS*) and public-key algorithms in one verifier")
        if not hmac and not jwt.algorithms.has_crypto:
            raise RuntimeError("public-key JWT algorithms need the `cryptography` package: pyjwt[crypto]")
        self.issuer = [issuer] if isinstance(issuer, str) else list(issuer) if issuer is not None else None
        self.required_scopes = tuple(required_scopes)
        for scope in self.required_scopes:
            if not _SCOPE_TOKEN.fullmatch(scope):
                raise ValueError(f"not a valid OAuth scope: {scope!r}")
        self.leeway = leeway
        self._key = key
        self._jwt = jwt

    def __call__(self, token: str) -> AccessToken | None:
        try:
            key = self._key(self._jwt.get_unverified_header(token)) if callable(self._key) else self._key
        except (self._jwt.PyJWTError, ValueError, TypeError):
            return None
        return None if key is None else self.verify_with(token, key)

    def verify_with(
        self, token: str, key: Any, algorithms: Sequence[str] | None = None
    ) -> AccessToken | None:
        """Check ``token`` against ``key`` (and ``algorithms``, default the verifier's): the
        :class:`AccessToken`, None if refused; :class:`InsufficientScope` if it lacks a
        required scope."""
        jwt = self._jwt
        try:
            claims = jwt.decode(
                token,
                key,
                algorithms=list(algorithms) if algorithms is not None else self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                leeway=self.leeway,
                options={"require": ["exp", "aud", "sub"] + (["iss"] if self.issuer else [])},
            )
        except (jwt.PyJWTError, ValueError, TypeError):
            return None
        subject = claims.get("sub")
        if not isinstance(subject, str) or not subject:
            return None
        access = AccessToken(subject, _scopes_of(claims), claims)
        if not access.scopes.issuperset(self.required_scopes):
            raise InsufficientScope(self.required_scopes, access)
        return access


# -- fetching keys and token state over HTTP --------------------------------------------------
MAX_JWKS_BYTES = 512 * 1024
"""The largest JWKS document :class:`JwksVerifier` reads."""
MAX_INTROSPECTION_BYTES = 64 * 1024
"""The largest introspection answer :class:`IntrospectionVerifier` reads."""


class VerifierUnavailable(Exception):
    """The JWKS or introspection endpoint could not be used (unreachable, an error status, not
    JSON). Not the token's fault: HTTP answers 500, and the client is not told to log in again."""


def _check_endpoint(url: str) -> str:
    """``url`` if it is https, or http to this machine (a test, a sidecar); else ValueError."""
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    if parts.scheme == "https" and host:
        return url
    if parts.scheme == "http" and host:
        loopback = host == "localhost"
        try:
            loopback = loopback or ipaddress.ip_address(host).is_loopback
        except ValueError:
            pass
        if loopback:
            return url
    raise ValueError(f"not an https URL (plain http only to this machine): {url!r}")


async def _fetch_json(
    method: str, url: str, limit: int, seconds: float, headers: Mapping[str, str] = {}, **request: Any
) -> Any:
    """One HTTP exchange (httpx, on Trio through anyio) within ``seconds``: the JSON answer of
    a 200, at most ``limit`` bytes, no redirects followed; :class:`VerifierUnavailable`
    otherwise."""
    import httpx

    body = bytearray()
    try:
        with trio.fail_after(seconds):
            async with (
                httpx.AsyncClient(follow_redirects=False) as http,
                http.stream(
                    method, url, headers={"accept": "application/json", **headers}, **request
                ) as response,
            ):
                if response.status_code != 200:
                    raise VerifierUnavailable(f"{method} {url}: HTTP {response.status_code}")
                async for chunk in response.aiter_bytes():
                    body += chunk
                    if len(body) > limit:
                        raise VerifierUnavailable(f"{method} {url}: the answer is over {limit} bytes")
    except trio.TooSlowError as exc:
        raise VerifierUnavailable(f"{method} {url}: no answer within {seconds} s") from exc
    except httpx.HTTPError as exc:
        raise VerifierUnavailable(f"{method} {url}: {exc!r}") from exc
    try:
        return json.loads(body)
    except ValueError as exc:
        raise VerifierUnavailable(f"{method} {url}: the answer is not JSON") from exc


@attrs.frozen
class _Jwk:
    key: Any  # a `cryptography` public key
    algorithm: str | None  # the JWK's "alg", when it names one


class JwksVerifier:
    """An async :data:`Authenticator` for JWT access tokens signed with keys published as a
    JWKS (RFC 7517) at ``jwks_url`` — see :func:`jwt_verifier` for what it accepts.

    Keys are fetched (httpx, on Trio) when first needed and kept; they are fetched again when
    a token names a ``kid`` the set does not have (the authorization server rotated its keys),
    or when they are older than ``max_age`` seconds. Fetches are rate-limited: at most one per
    ``min_refresh_interval`` seconds, whatever tokens arrive, so a flood of tokens naming
    made-up ``kid`` values costs one fetch per interval (they are refused meanwhile), and
    concurrent requests wait for the one fetch in progress. At most ``max_keys`` keys are
    kept (the first ones of the document that are usable signing keys: ``use`` absent or
    ``sig``, not ``oct``); the document may not exceed :data:`MAX_JWKS_BYTES`. If a fetch
    fails the keys already known are used on; with none, verification raises
    :class:`VerifierUnavailable` (HTTP: 500).
    """

    def __init__(
        self,
        jwks_url: str,
        *,
        audience: str | Sequence[str],
        algorithms: Sequence[str] | None = None,
        issuer: str | Sequence[str] | None = None,
        required_scopes: Iterable[str] = (),
        leeway: float = 0.0,
        min_refresh_interval: float = 30.0,
        max_age: float = 3600.0,
        max_keys: int = 32,
        timeout: float = 10.0,
    ) -> None:
        self.jwks_url = _check_endpoint(jwks_url)
        algorithms = ASYMMETRIC_ALGORITHMS if algorithms is None else tuple(algorithms)
        if any(a in HMAC_ALGORITHMS for a in algorithms):
            raise ValueError("a JWKS publishes public keys: HMAC (HS*) algorithms cannot be used with it")
        if not (min_refresh_interval >= 0 and max_age > 0 and max_keys >= 1 and timeout > 0):
            raise ValueError("min_refresh_interval >= 0, max_age > 0, max_keys >= 1 and timeout > 0")
        self._rules = JwtVerifier(
            None,
            audience=audience,
            algorithms=algorithms,
            issuer=issuer,
            required_scopes=required_scopes,
            leeway=leeway,
        )
        self.required_scopes = self._rules.required_scopes
        self.min_refresh_interval = min_refresh_interval
        self.max_age = max_age
        self.max_keys = max_keys
        self.timeout = timeout
        self.fetches = 0
        """JWKS fetches attempted so far."""
        self._keys: dict[str | None, _Jwk] = {}
        self._tried_at: float | None = None  # the last fetch attempt (trio.current_time())
        self._loaded_at: float | None = None  # the last successful one
        self._lock = trio.Lock()

    @property
    def key_ids(self) -> list[str | None]:
        """The ``kid`` of each key known now (None for a key without one)."""
        return list(self._keys)

    async def __call__(self, token: str) -> AccessToken | None:
        jwt = self._rules._jwt
        try:
            header = jwt.get_unverified_header(token)
        except (jwt.PyJWTError, ValueError, TypeError):
            return None
        kid, algorithm = header.get("kid"), header.get("alg")
        if (kid is not None and not isinstance(kid, str)) or algorithm not in self._rules.algorithms:
            return None
        found = self._find(kid)
        loaded = self._loaded_at
        if found is None or loaded is None or trio.current_time() - loaded >= self.max_age:
            await self._refresh()
            found = self._find(kid)
        if found is None:
            if not self._keys and self._loaded_at is None:
                raise VerifierUnavailable(f"no keys could be fetched from {self.jwks_url}")
            return None
        if found.algorithm is not None and found.algorithm != algorithm:
            return None  # the key is for another algorithm
        return self._rules.verify_with(token, found.key, [algorithm])

    def _find(self, kid: str | None) -> _Jwk | None:
        if kid is None:  # a token without kid: the key, if the set has exactly one
            return next(iter(self._keys.values())) if len(self._keys) == 1 else None
        return self._keys.get(kid)

    async def _refresh(self) -> None:
        """Fetch the keys again, unless a fetch was tried within ``min_refresh_interval``."""
        async with self._lock:  # concurrent callers wait for the fetch in progress
            tried = self._tried_at
            if tried is not None and trio.current_time() - tried < self.min_refresh_interval:
                return
            self._tried_at = trio.current_time()
            self.fetches += 1
            try:
                document = await _fetch_json("GET", self.jwks_url, MAX_JWKS_BYTES, self.timeout)
                keys = self._parse(document)
            except VerifierUnavailable as exc:
                log.warning("fetching the JWKS failed (keeping %d known keys): %s", len(self._keys), exc)
                return
            self._keys = keys
            self._loaded_at = trio.current_time()
            log.info("fetched %d signing keys from %s", len(keys), self.jwks_url)

    def _parse(self, document: Any) -> dict[str | None, _Jwk]:
        jwt = self._rules._jwt
        entries = document.get("keys") if isinstance(document, dict) else None
        if not isinstance(entries, list):
            raise VerifierUnavailable(f"{self.jwks_url}: not a JWKS (no 'keys' list)")
        keys: dict[str | None, _Jwk] = {}
        for entry in entries:
            if len(keys) >= self.max_keys:
                log.warning("%s lists more than %d keys: the rest are ignored", self.jwks_url, self.max_keys)
                break
            if not isinstance(entry, dict) or entry.get("use", "sig") != "sig" or entry.get("kty") == "oct":
                continue
            kid = entry.get("kid")
            algorithm = entry.get("alg")
            if (kid is not None and not isinstance(kid, str)) or kid in keys:
                continue
            if algorithm is not None and algorithm not in self._rules.algorithms:
                continue
            try:
                parsed = jwt.PyJWK(entry)
            except (jwt.PyJWTError, ValueError, TypeError, KeyError):
                continue
            keys[kid] = _Jwk(parsed.key, algorithm)
        return keys


@attrs.frozen
class _Known:
    access: AccessToken
    until: float  # time.time() past which it is asked again


class IntrospectionVerifier:
    """An async :data:`Authenticator` asking the authorization server about each token (OAuth
    2.0 Token Introspection, RFC 7662) — for opaque tokens, or to see revocations at once.

    Each token is POSTed (``token``, ``token_type_hint=access_token``) to ``url``, the server
    authenticated with ``client_id`` and ``client_secret`` (HTTP Basic, RFC 6749 §2.3.1). The
    token is accepted when the answer says ``"active": true``; its ``exp`` (when given) has
    not passed and its ``nbf`` has (``leeway`` seconds of skew); its ``aud`` names
    ``audience`` when that is given (then ``aud`` is required: give it, unless your
    authorization server binds tokens to this resource otherwise); its ``iss`` is ``issuer``
    when that is given; and it has a ``sub`` (else a ``username``): the identity. Its scopes are
    the ``scope`` member (space-separated); without every one of ``required_scopes`` it raises
    :class:`InsufficientScope`.

    **Cache.** An accepted token is remembered (by its SHA-256, not the token itself) until its
    ``exp``, and for at most ``cache_ttl`` seconds (default 60) — so a token revoked at the
    authorization server may still be accepted for up to that long — with at most
    ``max_cache`` tokens kept (the least recently used go first). Refused tokens are not
    remembered: each is asked about again. An endpoint that cannot be used raises
    :class:`VerifierUnavailable` (HTTP: 500), never refuses the token.
    """

    def __init__(
        self,
        url: str,
        *,
        client_id: str,
        client_secret: str,
        audience: str | Sequence[str] | None = None,
        issuer: str | None = None,
        required_scopes: Iterable[str] = (),
        leeway: float = 0.0,
        cache_ttl: float = 60.0,
        max_cache: int = 1024,
        timeout: float = 10.0,
    ) -> None:
        self.url = _check_endpoint(url)
        credentials = f"{quote(client_id, safe='')}:{quote(client_secret, safe='')}"
        self._authorization = "Basic " + base64.b64encode(credentials.encode()).decode("ascii")
        self.audience = [audience] if isinstance(audience, str) else list(audience or ())
        self.issuer = issuer
        self.required_scopes = tuple(required_scopes)
        for scope in self.required_scopes:
            if not _SCOPE_TOKEN.fullmatch(scope):
                raise ValueError(f"not a valid OAuth scope: {scope!r}")
        if not (cache_ttl >= 0 and max_cache >= 0 and timeout > 0 and leeway >= 0):
            raise ValueError("cache_ttl, max_cache and leeway must be >= 0, timeout > 0")
        self.leeway = leeway
        self.cache_ttl = cache_ttl
        self.max_cache = max_cache
        self.timeout = timeout
        self.requests = 0
        """Introspection requests made so far."""
        self._cache: collections.OrderedDict[bytes, _Known] = collections.OrderedDict()

    async def __call__(self, token: str) -> AccessToken | None:
        digest = hashlib.sha256(token.encode()).digest()
        now = time.time()
        known = self._cache.get(digest)
        access: AccessToken | None = None
        if known is not None:
            if known.until > now:
                self._cache.move_to_end(digest)
                access = known.access
            else:
                del self._cache[digest]
        if access is None:
            self.requests += 1
            answer = await _fetch_json(
                "POST",
                self.url,
                MAX_INTROSPECTION_BYTES,
                self.timeout,
                data={"token": token, "token_type_hint": "access_token"},
                headers={"authorization": self._authorization},
            )
            now = time.time()
            accepted = self._accept(answer, now)
            if accepted is None:
                return None
            access, until = accepted
            if self.max_cache and until > now:
                self._cache[digest] = _Known(access, until)
                while len(self._cache) > self.max_cache:
                    self._cache.popitem(last=False)
        if not access.scopes.issuperset(self.required_scopes):
            raise InsufficientScope(self.required_scopes, access)
        return access

    def _accept(self, answer: Any, now: float) -> tuple[AccessToken, float] | None:
        """The token an introspection answer describes and how long to trust it, or None."""
        if not isinstance(answer, dict) or answer.get("active") is not True:
            return None

        def number(name: str) -> float | bool | None:
            value = answer.get(name)
            if value is None:
                return None
            if isinstance(value, bool) or not isinstance(value, int | float):
                return False  # malformed
            return float(value)

        expires, not_before = number("exp"), number("nbf")
        if expires is False or not_before is False:
            return None
        if expires is not None and expires <= now - self.leeway:
            return None
        if not_before is not None and not_before > now + self.leeway:
            return None
        if self.audience:
            aud = answer.get("aud")
            named = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else []
            if not any(isinstance(a, str) and a in self.audience for a in named):
                return None
        if self.issuer is not None and answer.get("iss") != self.issuer:
            return None
        identity = answer.get("sub")
        if not isinstance(identity, str) or not identity:
            identity = answer.get("username")
            if not isinstance(identity, str) or not identity:
                return None
        until = now + self.cache_ttl
        if expires is not None:
            until = min(until, float(expires))
        return AccessToken(identity, _scopes_of(answer), answer), until


def introspection_verifier(
    url: str,
    *,
    client_id: str,
    client_secret: str,
    audience: str | Sequence[str] | None = None,
    issuer: str | None = None,
    required_scopes: Iterable[str] = (),
    leeway: float = 0.0,
    cache_ttl: float = 60.0,
    max_cache: int = 1024,
    timeout: float = 10.0,
) -> IntrospectionVerifier:
    """An ``authenticate=`` that asks the authorization server's introspection endpoint
    (RFC 7662) about each token; see :class:`IntrospectionVerifier` (what it accepts, and its
    cache of accepted tokens: until their ``exp``, at most ``cache_ttl`` seconds).

    ``url`` must be https (plain http only to this machine).

    >>> verify = introspection_verifier("https://auth.example/introspect", client_id="mcp",
    ...                                 client_secret="s3cret", required_scopes=["mcp:tools"])
    >>> verify.cache_ttl, verify.required_scopes
    (60.0, ('mcp:tools',))
    """
    return IntrospectionVerifier(
        url,
        client_id=client_id,
        client_secret=client_secret,
        audience=audience,
        issuer=issuer,
        required_scopes=required_scopes,
        leeway=leeway,
        cache_ttl=cache_ttl,
        max_cache=max_cache,
        timeout=timeout,
    )


@overload
def jwt_verifier(
    key: Any,
    *,
    audience: str | Sequence[str],
    algorithms: Sequence[str] | None = None,
    issuer: str | Sequence[str] | None = None,
    required_scopes: Iterable[str] = (),
    leeway: float = 0.0,
) -> JwtVerifier: ...


@overload
def jwt_verifier(
    key: None = None,
    *,
    jwks_url: str,
    audience: str | Sequence[str],
    algorithms: Sequence[str] | None = None,
    issuer: str | Sequence[str] | None = None,
    required_scopes: Iterable[str] = (),
    leeway: float = 0.0,
    min_refresh_interval: float = 30.0,
    max_age: float = 3600.0,
    max_keys: int = 32,
    timeout: float = 10.0,
) -> JwksVerifier: ...


def jwt_verifier(
    key: Any = None,
    *,
    jwks_url: str | None = None,
    audience: str | Sequence[str],
    algorithms: Sequence[str] | None = None,
    issuer: str | Sequence[str] | None = None,
    required_scopes: Iterable[str] = (),
    leeway: float = 0.0,
    min_refresh_interval: float = 30.0,
    max_age: float = 3600.0,
    max_keys: int = 32,
    timeout: float = 10.0,
) -> JwtVerifier | JwksVerifier:
    """An ``authenticate=`` for servers that accept JWT access tokens (OAuth 2.1 resource
    server; RFC 9068 tokens), built on PyJWT.

    A token is accepted when its signature verifies with ``key``, it has not expired (``exp``
    is required; ``nbf``/``iat`` are checked when present, with ``leeway`` seconds), its
    ``aud`` names ``audience`` (this resource's URL: a token issued for another resource is
    refused), its ``iss`` is ``issuer`` when given, and it has a ``sub``. The result is the
    identity (``sub``) and the scopes (the ``scope`` claim, space-separated). A valid token
    without every one of ``required_scopes`` raises :class:`InsufficientScope` (HTTP: 403).

    ``key``: an HMAC secret (``str``/``bytes``), a public key (PEM, a ``cryptography`` key,
    or a ``jwt.PyJWK``), or a callable from the token's unverified header to such a key
    (pick by ``kid``) or None (refuse). ``algorithms``: default ``HS256/384/512`` for a
    secret, else the public-key ones (RS*, PS*, ES*, EdDSA); ``none`` is never accepted,
    and HMAC and public-key algorithms cannot be mixed. With a key it is synchronous and
    does no I/O (:class:`JwtVerifier`).

    ``jwks_url`` instead of ``key``: the keys are the authorization server's published JWKS
    (its metadata's ``jwks_uri``), fetched, cached and refreshed by a :class:`JwksVerifier`
    (async): fetched again when a token names an unknown ``kid``, at most once per
    ``min_refresh_interval`` seconds, and after ``max_age`` seconds; at most ``max_keys``
    kept; ``timeout`` per fetch. Public-key algorithms only; the URL must be https (plain http
    only to this machine).

    >>> verify = jwt_verifier(jwks_url="https://auth.example/jwks.json", audience="https://mcp.example/mcp")
    >>> type(verify).__name__, verify.min_refresh_interval, verify.max_keys
    ('JwksVerifier', 30.0, 32)
    """
    rules: dict[str, Any] = {
        "audience": audience,
        "algorithms": algorithms,
        "issuer": issuer,
        "required_scopes": required_scopes,
        "leeway": leeway,
    }
    if jwks_url is not None:
        if key is not None:
            raise TypeError("give a key or a jwks_url, not both")
        return JwksVerifier(
            jwks_url,
            min_refresh_interval=min_refresh_interval,
            max_age=max_age,
            max_keys=max_keys,
            timeout=timeout,
            **rules,
        )
    if key is None:
        raise TypeError("jwt_verifier needs a key (or a jwks_url)")
    return JwtVerifier(key, **rules)
