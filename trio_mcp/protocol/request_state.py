"""Integrity-protected ``requestState`` for multi round-trip requests (MRTR, SEP-2322).

A modern-era tool call that needs input answers ``InputRequiredResult``; the client retries
with ``inputResponses`` and the exact ``requestState``. The state carries everything the retry
needs — the answers given so far, bound to the tool, its arguments and the caller — so any
server process holding the same key can serve the retry (nothing is kept in memory between
the two requests). It is signed with HMAC-SHA256: a state that was altered, made for another
tool, other arguments or another caller, or that has expired, is refused.

>>> codec = StateCodec(b"k" * 32)
>>> token = codec.seal({"answers": {"input-0": {"action": "decline"}}}, binding="t1", now=0.0)
>>> codec.open(token, binding="t1", now=1.0)
{'answers': {'input-0': {'action': 'decline'}}}
>>> codec.open(token[:-2] + "xx", binding="t1", now=1.0) is None
True
>>> codec.open(token, binding="other", now=1.0) is None
True
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from typing import Any

__all__ = ["DEFAULT_STATE_LIFETIME", "StateCodec", "binding_of"]

DEFAULT_STATE_LIFETIME = 15 * 60.0
"""Seconds a ``requestState`` stays valid: a user has this long to answer."""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def binding_of(owner: str, method: str, name: str, arguments: Any) -> str:
    """What a state is bound to: the caller, the request and its exact arguments (a digest)."""
    canonical = json.dumps([owner, method, name, arguments], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()


class StateCodec:
    """Seals and opens ``requestState`` strings with one secret key.

    Servers that share retries (behind a load balancer) must share the key; by default each
    process makes its own (``StateCodec()``), so a state opens only where it was made.
    """

    def __init__(self, key: bytes | None = None, *, lifetime: float = DEFAULT_STATE_LIFETIME) -> None:
        self._key = key if key is not None else secrets.token_bytes(32)
        if len(self._key) < 16:
            raise ValueError("a requestState key needs at least 16 bytes")
        self.lifetime = lifetime

    def _mac(self, payload: bytes) -> bytes:
        return hmac.new(self._key, payload, hashlib.sha256).digest()

    def seal(self, data: dict[str, Any], *, binding: str, now: float) -> str:
        payload = json.dumps(
            {"b": binding, "exp": now + self.lifetime, "d": data}, sort_keys=True, separators=(",", ":")
        ).encode()
        return f"{_b64(payload)}.{_b64(self._mac(payload))}"

    def open(self, token: str, *, binding: str, now: float) -> dict[str, Any] | None:
        """The data sealed in ``token``, or None if it is forged, altered, expired or not for ``binding``."""
        body, dot, mac = token.partition(".")
        if not dot:
            return None
        try:
            payload, tag = _unb64(body), _unb64(mac)
        except (ValueError, binascii.Error):
            return None
        if not hmac.compare_digest(tag, self._mac(payload)):
            return None
        try:
            sealed = json.loads(payload)
        except ValueError:  # pragma: no cover - we signed it, so we wrote it
            return None
        if not isinstance(sealed, dict) or sealed.get("b") != binding:
            return None
        expires = sealed.get("exp")
        if not isinstance(expires, int | float) or expires < now:
            return None
        data = sealed.get("d")
        return data if isinstance(data, dict) else None
