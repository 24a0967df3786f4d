"""The task state machine, shared by every protocol era.

Pure code: statuses, which transitions are legal, and which states are terminal. A task starts
``working``; ``completed``, ``failed`` and ``cancelled`` are terminal and never change again.
"""

from __future__ import annotations

import datetime
import enum

__all__ = [
    "TERMINAL",
    "InvalidTransition",
    "TaskStatus",
    "can_transition",
    "check_transition",
    "format_timestamp",
]


class TaskStatus(enum.StrEnum):
    WORKING = "working"
    INPUT_REQUIRED = "input_required"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL


TERMINAL: frozenset[TaskStatus] = frozenset({TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED})

_LIVE_TARGETS = {
    TaskStatus.WORKING: frozenset(
        {TaskStatus.INPUT_REQUIRED, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
    TaskStatus.INPUT_REQUIRED: frozenset(
        {TaskStatus.WORKING, TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED}
    ),
}


class InvalidTransition(Exception):
    """A status change the state machine forbids (e.g. anything out of a terminal state)."""

    def __init__(self, old: TaskStatus, new: TaskStatus) -> None:
        super().__init__(f"illegal task transition {old.value} -> {new.value}")
        self.old = old
        self.new = new


def can_transition(old: TaskStatus, new: TaskStatus) -> bool:
    """Whether ``old -> new`` is a legal transition.

    >>> can_transition(TaskStatus.WORKING, TaskStatus.COMPLETED)
    True
    >>> can_transition(TaskStatus.CANCELLED, TaskStatus.COMPLETED)
    False
    """
    return new in _LIVE_TARGETS.get(old, _NONE)


def check_transition(old: TaskStatus, new: TaskStatus) -> None:
    """Raise :class:`InvalidTransition` unless ``old -> new`` is legal (every task change
    checks: :func:`can_transition` read in place)."""
    if new not in _LIVE_TARGETS.get(old, _NONE):
        raise InvalidTransition(old, new)


_NONE: frozenset[TaskStatus] = frozenset()


def format_timestamp(epoch_seconds: float) -> str:
    """ISO 8601 in UTC with milliseconds, as tasks carry them (truncated to the millisecond,
    as ``datetime.isoformat`` does). The date and time of recent whole seconds are kept, so
    formatting the many timestamps of one second costs a lookup and an f-string (a task
    record keeps its times' text: see ``TaskRecord.created_text``).

    >>> format_timestamp(0)
    '1970-01-01T00:00:00.000Z'
    >>> format_timestamp(1_700_000_000.9999)
    '2023-11-14T22:13:20.999Z'
    """
    # Split and rounded as datetime does (``math.modf``): the whole seconds toward zero, and
    # the fraction, which subtracting them gives exactly.
    second = int(epoch_seconds)
    micro = round((epoch_seconds - second) * 1_000_000)
    if micro >= 1_000_000:
        second, micro = second + 1, micro - 1_000_000
    elif micro < 0:
        second, micro = second - 1, micro + 1_000_000
    prefix = _seconds.get(second)
    if prefix is None:
        if len(_seconds) >= _SECONDS_KEPT:
            _seconds.clear()
        prefix = datetime.datetime.fromtimestamp(second, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _seconds[second] = prefix
    return prefix + _MILLIS[micro // 1000]


_MILLIS = tuple(f".{milli:03d}Z" for milli in range(1000))
"""The text after the seconds, by millisecond (a lookup, not a formatting, per timestamp)."""
_SECONDS_KEPT = 4096
_seconds: dict[int, str] = {}  # whole seconds already formatted (tasks made in the same second)
