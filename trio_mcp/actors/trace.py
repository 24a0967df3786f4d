"""Tracing hooks: the runtime reports what happens, in order, to an optional tracer.

A tracer is any callable ``tracer(kind, fields)``. The runtime calls it synchronously at the
moment of each event, so a tracer that reads ``trio.current_time()`` gets the event's time.
Kinds: ``actor.start`` / ``actor.stop`` / ``actor.crash`` (``actor``, ``name``),
``task.created`` / ``task.transition`` (``task_id``, ``status``, ``old``),
``task.expired`` / ``task.removed`` (``task_id``), ``message.in`` / ``message.out``
(``connection``, ``data``: the raw bytes).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = [
    "Tracer",
    "no_trace",
]

Tracer = Callable[[str, dict[str, Any]], None]


def no_trace(kind: str, fields: dict[str, Any]) -> None:
    """The default tracer: does nothing."""
