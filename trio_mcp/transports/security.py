"""What every network transport checks before it serves anyone: the Origin of browser
requests (against DNS rebinding and cross-site requests) and bearer-token identities.

Sans-IO helpers shared by the WebSocket transport and HTTP: each takes header values already
read, and says yes or no.

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

import hmac
import inspect
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

import attrs

__all__ = [
    "DEFAULT_ALLOWED_ORIGINS",
    "AccessToken",
    "Authenticator",
    "InsufficientScope",
    "JwtVerifier",
    "OriginPolicy",
    "authenticate",
    "bearer_token",
    "identity_owner",
    "jwt_verifier",
    "origin_check",
    "static_token",
    "verify_token",
]

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
    synchronous: it does no I/O (give it the keys; it fetches no JWKS)."""

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
        jwt = self._jwt
        try:
            key = self._key(jwt.get_unverified_header(token)) if callable(self._key) else self._key
            if key is None:
                return None
            claims = jwt.decode(
                token,
                key,
                algorithms=self.algorithms,
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


def jwt_verifier(
    key: Any,
    *,
    audience: str | Sequence[str],
    algorithms: Sequence[str] | None = None,
    issuer: str | Sequence[str] | None = None,
    required_scopes: Iterable[str] = (),
    leeway: float = 0.0,
) -> JwtVerifier:
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
    and HMAC and public-key algorithms cannot be mixed.
    """
    return JwtVerifier(
        key,
        audience=audience,
        algorithms=algorithms,
        issuer=issuer,
        required_scopes=required_scopes,
        leeway=leeway,
    )
