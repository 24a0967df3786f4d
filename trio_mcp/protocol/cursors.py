"""Opaque pagination cursors: a kind and a position, base64url-encoded.

Clients must treat them as opaque; :func:`decode_cursor` refuses anything it did not make
for that kind (the caller answers -32602).
"""

from __future__ import annotations

import base64
import binascii

__all__ = ["decode_cursor", "encode_cursor"]


def encode_cursor(kind: str, position: int) -> str:
    """An opaque cursor for ``position`` in a listing of ``kind``.

    >>> decode_cursor("tools", encode_cursor("tools", 7))
    7
    """
    return base64.urlsafe_b64encode(f"{kind}:{position}".encode()).decode().rstrip("=")


def decode_cursor(kind: str, cursor: str) -> int:
    """The position in a cursor made by :func:`encode_cursor` for ``kind``; ValueError otherwise.

    Only ASCII digits are a position (``int()`` would also take other scripts' digits).
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"not a {kind} cursor") from None
    prefix, _, number = raw.partition(":")
    if prefix != kind or not (number.isascii() and number.isdigit()):
        raise ValueError(f"not a {kind} cursor")
    return int(number)
