"""The task table: every decision about this process's tasks, in one place, without I/O.

A :class:`TaskTable` is the registry of the tasks a server process keeps: whose each one is
(its owner, and the client the owner counts under), which are live (not ended), how many
result bytes the finished ones keep, and when each expires. It decides whether a new task is
admitted (:meth:`TaskTable.refusal`, against :class:`TaskLimits`), whether a finished task's
result may be kept (:meth:`TaskTable.keep_result`), and which tasks are due
(:meth:`TaskTable.pop_due`). It does no I/O and knows no clock and no Trio: the caller passes
the times, so every method is synchronous, runs to completion, and is safe to call from the
actor that owns the table (the runtime's supervisor, in its own Trio task).

>>> table = TaskTable(TaskLimits(max_live_tasks_per_owner=1))
>>> table.refusal("alice", None) is None
True
>>> table.add("t1", "alice", None, deadline=10.0)
10.0
>>> table.refusal("alice", None).message
'Too many live tasks: at most 1 per requestor'
>>> table.ended("t1"), table.refusal("alice", None) is None
(True, True)
>>> table.pop_due(9.0), table.pop_due(10.0)
([], ['t1'])
>>> table.remove("t1"), len(table)
('alice', 0)

``tests/protocol/test_task_table.py`` holds it to a plain model (hypothesis).
"""

from __future__ import annotations

import attrs

from ._expiries import Expiries
from .errors import INTERNAL_ERROR, TASK_LIMIT_REACHED, ErrorValue

__all__ = ["CHARGED_FROM", "TaskLimits", "TaskTable"]

CHARGED_FROM = 1024
"""Results smaller than this many bytes are not counted against the kept-bytes limits (their
number is bounded by the count limits); larger ones are, by their size."""


@attrs.frozen
class TaskLimits:
    """The documented task policy of a server. All durations in milliseconds."""

    default_ttl_ms: int = 60 * 60 * 1000
    """TTL of a task whose request named none: one hour."""
    max_ttl_ms: int = 24 * 60 * 60 * 1000
    """Longest TTL granted: one day. Longer requests are clamped to it."""
    poll_interval_ms: int = 500
    """Suggested polling interval reported in every task."""
    max_live_tasks_per_owner: int = 10_000
    """Non-terminal tasks one owner may have at once."""
    max_tasks_per_owner: int = 20_000
    """Tasks one owner may have kept at once, finished ones included (each keeps its result
    until its TTL ends): past it, creation fails until some expire."""
    max_live_tasks_per_client: int = 20_000
    """Non-terminal tasks of one client at once, all its owners together. A client is a peer
    address (every unauthenticated connection from it is an owner of its own) or an
    authenticated identity; kept below :attr:`max_live_tasks`, so that no one client can fill
    the server for the others."""
    max_tasks_per_client: int = 40_000
    """Tasks one client may have kept at once (finished ones included), below :attr:`max_tasks`."""
    max_live_tasks: int = 100_000
    """Non-terminal tasks of all owners together, in this process."""
    max_tasks: int = 200_000
    """Tasks of all owners together kept by this process, finished ones included."""
    max_result_bytes: int = 8 * 1024 * 1024
    """Largest result a task keeps (its JSON size): a larger one fails the task with -32603,
    so a finished task never holds more than this."""
    max_kept_result_bytes_per_owner: int = 256 * 1024 * 1024
    """Bytes of results one owner's finished tasks may keep at once (each result counted from
    :data:`CHARGED_FROM` bytes up): a result past it fails its task with -32603, and creations
    are refused until some expire. With ``max_tasks_per_owner`` it bounds what one owner can
    make the server keep."""
    max_kept_result_bytes: int = 2 * 1024 * 1024 * 1024
    """Bytes of results all owners' finished tasks may keep at once, in this process."""
    store_timeout: float = 5.0
    """Seconds each task store call may take: a read past it answers its request -32603; a
    write past it is tried again (with a backoff) until stored; a creation not stored within
    it is refused -32603."""
    list_page_size: int = 100
    """Tasks per ``tasks/list`` page."""
    auto_task_after_ms: int = 1_000
    """Modern era, client with the tasks extension: a ``task_support="optional"`` tool still
    running after this long is answered with a task (``CreateTaskResult``); one that ends
    sooner, with its plain result. A tool that asks for input within the window becomes a task
    at once."""

    def grant_ttl(self, requested: int | None) -> int:
        if requested is None:
            return self.default_ttl_ms
        return max(0, min(requested, self.max_ttl_ms))


class TaskTable:
    """The tasks of one process (see the module docstring). Tasks are added live; a task
    :meth:`ended` is no longer live but still kept (its result answers until it expires);
    :meth:`remove` (or :meth:`pop_due`) forgets it."""

    __slots__ = (
        "_bytes",
        "_bytes_of",
        "_client_kept",
        "_client_live",
        "_client_of",
        "_expiries",
        "_kept",
        "_live",
        "_live_total",
        "_owner_bytes",
        "_owner_of",
        "limits",
    )

    def __init__(self, limits: TaskLimits | None = None) -> None:
        self.limits = limits or TaskLimits()
        # Each owner's live task ids: a dict used as an insertion-ordered set (at ten thousand
        # entries a dict costs some 30 bytes an entry, a set over 50).
        self._live: dict[str, dict[str, None]] = {}
        self._live_total = 0
        self._owner_of: dict[str, str] = {}  # every kept task's owner
        self._kept: dict[str, int] = {}  # tasks kept per owner
        # Owners counted under a client other than themselves (while they keep tasks), and
        # each such client's live and kept tasks.
        self._client_of: dict[str, str] = {}
        self._client_live: dict[str, int] = {}
        self._client_kept: dict[str, int] = {}
        # Result bytes kept (results of CHARGED_FROM bytes and more): per task, owner, all.
        self._bytes_of: dict[str, int] = {}
        self._owner_bytes: dict[str, int] = {}
        self._bytes = 0
        self._expiries = Expiries()

    def __len__(self) -> int:
        """Tasks kept."""
        return len(self._owner_of)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._owner_of

    def owner_of(self, task_id: str) -> str | None:
        return self._owner_of.get(task_id)

    def live_count(self, owner: str) -> int:
        """Live tasks of ``owner``."""
        return len(self._live.get(owner, ()))

    def live_ids(self, owner: str) -> list[str]:
        """The ids of ``owner``'s live tasks, oldest first."""
        return list(self._live.get(owner, ()))

    @property
    def live_total(self) -> int:
        return self._live_total

    def kept_result_bytes(self, owner: str | None = None) -> int:
        """Result bytes kept by ``owner``'s finished tasks (None: by all)."""
        return self._bytes if owner is None else self._owner_bytes.get(owner, 0)

    @property
    def earliest(self) -> float:
        """When the next task is due (``math.inf`` if none)."""
        return self._expiries.earliest

    # -- decisions ---------------------------------------------------------------------------
    def refusal(self, owner: str, client: str | None) -> ErrorValue | None:
        """Why a new task of ``owner`` (counted under ``client``; None: the owner) may not be
        made now, or None if it may. An owner counts under the client it first came with, for
        as long as it keeps tasks."""
        limits = self.limits
        if owner in self._kept:
            client = self._client_of.get(owner)
        if len(self._live.get(owner, ())) >= limits.max_live_tasks_per_owner:
            return _too_many_live(limits.max_live_tasks_per_owner, "requestor")
        if self._kept.get(owner, 0) >= limits.max_tasks_per_owner:
            return _too_many_kept(limits.max_tasks_per_owner, "requestor")
        if self._owner_bytes and self._owner_bytes.get(owner, 0) >= limits.max_kept_result_bytes_per_owner:
            return ErrorValue(
                TASK_LIMIT_REACHED,
                f"Too many result bytes kept: at most {limits.max_kept_result_bytes_per_owner} per "
                "requestor, until some tasks expire",
            )
        if client is not None and client != owner:
            if self._client_live.get(client, 0) >= limits.max_live_tasks_per_client:
                return _too_many_live(limits.max_live_tasks_per_client, "client")
            if self._client_kept.get(client, 0) >= limits.max_tasks_per_client:
                return _too_many_kept(limits.max_tasks_per_client, "client")
        if (
            self._live_total >= limits.max_live_tasks
            or len(self._owner_of) >= limits.max_tasks
            or self._bytes >= limits.max_kept_result_bytes
        ):
            return ErrorValue(TASK_LIMIT_REACHED, "Server at capacity: too many tasks; retry later")
        return None

    def keep_result(self, task_id: str, size: int) -> ErrorValue | None:
        """Whether the finished task may keep a result of ``size`` bytes (None: it may, and it
        is counted until the task is removed); the error to end the task with if not. (A result
        over ``max_result_bytes`` is refused before it gets here, by the task's actor.)"""
        limits = self.limits
        if size < CHARGED_FROM:
            return None
        owner = self._owner_of.get(task_id)
        if owner is None or task_id in self._bytes_of:
            return None  # not kept here (removed meanwhile), or counted already
        owner_bytes = self._owner_bytes.get(owner, 0)
        if owner_bytes + size > limits.max_kept_result_bytes_per_owner or self._bytes + size > (
            limits.max_kept_result_bytes
        ):
            return ErrorValue(
                INTERNAL_ERROR,
                f"Internal error: the result ({size} bytes) exceeds what the server keeps for this "
                "requestor until its other tasks expire",
            )
        self._bytes_of[task_id] = size
        self._owner_bytes[owner] = owner_bytes + size
        self._bytes += size
        return None

    # -- changes -----------------------------------------------------------------------------
    def add(self, task_id: str, owner: str, client: str | None, deadline: float) -> float:
        """A new live task of ``owner`` (admitted: see :meth:`refusal`), due at ``deadline``
        (in the caller's clock); returns when it will be due (at most a millisecond later).
        ``client`` counts only for an owner's first kept task (an owner keeps its client)."""
        live = self._live.get(owner)
        if live is None:
            live = self._live[owner] = {}
        live[task_id] = None
        self._live_total += 1
        kept = self._kept.get(owner, 0)
        self._kept[owner] = kept + 1
        self._owner_of[task_id] = owner
        if kept:
            client = self._client_of.get(owner)  # the client it first came with
        elif client is not None and client != owner:
            self._client_of[owner] = client
        else:
            client = None
        if client is not None:
            self._client_live[client] = self._client_live.get(client, 0) + 1
            self._client_kept[client] = self._client_kept.get(client, 0) + 1
        return self._expiries.add(task_id, deadline)

    def ended(self, task_id: str) -> bool:
        """The task is no longer live (it ended, or its owner went); False if it was not."""
        owner = self._owner_of.get(task_id)
        if owner is None:
            return False
        live = self._live.get(owner)
        if live is None or task_id not in live:
            return False
        del live[task_id]
        self._live_total -= 1
        if not live:
            del self._live[owner]
        client = self._client_of.get(owner)
        if client is not None:
            _count_down(self._client_live, client)
        return True

    def remove(self, task_id: str) -> str | None:
        """Forget the task (ended first if live); its owner, or None if it was not kept."""
        self.ended(task_id)
        owner = self._owner_of.pop(task_id, None)
        if owner is None:
            return None
        _count_down(self._kept, owner)
        client = self._client_of.get(owner)
        if client is not None:
            _count_down(self._client_kept, client)
            if owner not in self._kept:
                del self._client_of[owner]
        size = self._bytes_of.pop(task_id, None) if self._bytes_of else None
        if size is not None:
            self._bytes -= size
            left = self._owner_bytes[owner] - size
            if left:
                self._owner_bytes[owner] = left
            else:
                del self._owner_bytes[owner]
        self._expiries.compact(self._owner_of)
        return owner

    def pop_due(self, now: float) -> list[str]:
        """The kept tasks due at ``now`` (each handed back once); the caller removes them."""
        kept = self._owner_of
        due = [task_id for task_id in self._expiries.pop_due(now) if task_id in kept]
        self._expiries.compact(kept)
        return due


def _too_many_live(limit: int, per: str) -> ErrorValue:
    return ErrorValue(TASK_LIMIT_REACHED, f"Too many live tasks: at most {limit} per {per}")


def _too_many_kept(limit: int, per: str) -> ErrorValue:
    return ErrorValue(
        TASK_LIMIT_REACHED,
        f"Too many tasks kept: at most {limit} per {per}, finished ones included, until they expire",
    )


def _count_down(counts: dict[str, int], key: str) -> None:
    left = counts[key] - 1
    if left:
        counts[key] = left
    else:
        del counts[key]
