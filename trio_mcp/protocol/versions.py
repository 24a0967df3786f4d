"""Protocol versions of the handshake era, and how a server picks one."""

from __future__ import annotations

LATEST_VERSION = "2025-11-25"
SUPPORTED_VERSIONS: tuple[str, ...] = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")
"""Newest first. Tasks exist only in 2025-11-25."""

TASKS_SINCE = "2025-11-25"


def negotiate(requested: str) -> str:
    """The version a server answers to ``initialize``: the client's if supported, else our latest.

    >>> negotiate("2025-06-18")
    '2025-06-18'
    >>> negotiate("1999-01-01")
    '2025-11-25'
    """
    return requested if requested in SUPPORTED_VERSIONS else LATEST_VERSION


def has_tasks(version: str) -> bool:
    """Whether core tasks (SEP-1686) are part of ``version``."""
    return version >= TASKS_SINCE
