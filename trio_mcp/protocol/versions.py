"""Protocol versions, by era, and how a handshake-era server picks one.

The *handshake era* (2024-11-05 … 2025-11-25) opens a connection with ``initialize``; the
*modern era* (2026-07-28) carries its version in every request's ``_meta``.
"""

from __future__ import annotations

__all__ = [
    "HANDSHAKE_VERSIONS",
    "LATEST_VERSION",
    "MODERN_VERSIONS",
    "SUPPORTED_VERSIONS",
    "VERSIONS_WITH_CORE_TASKS",
    "has_tasks",
    "negotiate",
]

HANDSHAKE_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""Versions negotiated by ``initialize``, newest first."""

MODERN_VERSIONS: tuple[str, ...] = ("2026-07-28",)
"""Versions carried per request in ``_meta`` (no ``initialize``)."""

LATEST_VERSION = HANDSHAKE_VERSIONS[0]
"""The newest handshake-era version: what ``initialize`` falls back to."""

SUPPORTED_VERSIONS = HANDSHAKE_VERSIONS
"""What ``initialize`` can agree on (the handshake era's versions)."""

VERSIONS_WITH_CORE_TASKS: frozenset[str] = frozenset({"2025-11-25"})
"""Versions whose core protocol has tasks (SEP-1686). Later versions moved tasks into the
``io.modelcontextprotocol/tasks`` extension, which is not the same wire."""


def negotiate(requested: str) -> str:
    """The version a server answers to ``initialize``: the client's if supported, else our latest.

    >>> negotiate("2025-06-18")
    '2025-06-18'
    >>> negotiate("1999-01-01")
    '2025-11-25'
    >>> negotiate("2026-07-28")  # not a handshake-era version
    '2025-11-25'
    """
    return requested if requested in HANDSHAKE_VERSIONS else LATEST_VERSION


def has_tasks(version: str) -> bool:
    """Whether core tasks (SEP-1686) are part of ``version``: exactly 2025-11-25.

    >>> has_tasks("2025-11-25"), has_tasks("2025-06-18"), has_tasks("2026-07-28")
    (True, False, False)
    """
    return version in VERSIONS_WITH_CORE_TASKS
