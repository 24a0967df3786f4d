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
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_ALLOWED_ORIGINS",
    "Authenticator",
    "OriginPolicy",
    "authenticate",
    "bearer_token",
    "identity_owner",
    "origin_check",
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

Authenticator = Callable[[str], Awaitable[str | None] | str | None]
"""Maps a bearer token to an identity, or to None to refuse it. May be sync or async."""

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


async def authenticate(authenticate: Authenticator, token: str) -> str | None:
    """Run ``authenticate`` (sync or async) on ``token``: the identity, or None (refused)."""
    result = authenticate(token)
    if inspect.isawaitable(result):
        result = await result
    if result is None:
        return None
    if not isinstance(result, str):
        raise TypeError(f"authenticate() must return str or None, not {type(result).__name__}")
    return result or None
