"""Opaque pagination cursors: a kind and a position, base64url-encoded.

Clients must treat them as opaque; :func:`decode_cursor` refuses anything it did not make
for that kind (the caller answers -32602).
"""

from __future__ import annotations

import base64
import binascii

__all__ = ["decode_cursor", "encode_cursor", "split_cursor"]


def encode_cursor(kind: str, position: int) -> str:
    """An opaque cursor for ``position`` in a listing of ``kind``.

    >>> decode_cursor("tools", encode_cursor("tools", 7))
    7
    """
    return base64.urlsafe_b64encode(f"{kind}:{position}".encode()).decode().rstrip("=")


def split_cursor(cursor: str) -> tuple[str, int]:
    """The kind and position of a cursor made by :func:`encode_cursor`; ValueError otherwise.

    Only ASCII digits are a position (``int()`` would also take other scripts' digits), and
    the text must be exactly what :func:`encode_cursor` writes (base64 decoding alone would
    skip characters outside its alphabet).

    >>> split_cursor(encode_cursor("tools", 7))
    ('tools', 7)
    """
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    except (ValueError, binascii.Error, UnicodeDecodeError):
        raise ValueError("not a cursor") from None
    kind, colon, number = raw.rpartition(":")
    if not colon or not (number.isascii() and number.isdigit()):
        raise ValueError("not a cursor")
    position = int(number)
    if encode_cursor(kind, position) != cursor:
        raise ValueError("not a cursor")
    return kind, position


def decode_cursor(kind: str, cursor: str) -> int:
    """The position in a cursor made by :func:`encode_cursor` for ``kind``; ValueError otherwise."""
    found, position = split_cursor(cursor)
    if found != kind:
        raise ValueError(f"not a {kind} cursor")
    return position
