"""The task table: every decision about this process's tasks, in one place, without I/O.

A :class:`TaskTable` is the registry of the tasks a server process keeps: whose each one is
(its owner, and the client it was made from), which are live (not ended), how many
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
    max_running_work: int = 1_000
    """With a work queue (a Redis store): tasks this process runs at once. Past it, the tasks
    it creates are queued for another process, and it claims none until it has room."""
    max_queued_per_owner: int | None = 10_000
    """With a work queue: tasks of one owner waiting in the queue (all processes together);
    past it, creations that would queue are refused with -32010."""
    max_queued: int | None = 100_000
    """With a work queue: tasks waiting in the queue, all owners together; past it, -32010."""
    lease_seconds: float = 15.0
    """With a shared store (Redis): the lease a process holds on each task it runs, renewed
    every third of it. When a process dies, its tasks are run again elsewhere (tools that
    allow it) or failed by the next process that looks, within about 4/3 of this."""

    def grant_ttl(self, requested: int | None) -> int:
        if requested is None:
            return self.default_ttl_ms
        return max(0, min(requested, self.max_ttl_ms))


class TaskTable:
    """The tasks of one process (see the module docstring). Tasks are added live; a task
    :meth:`ended` is no longer live but still kept (its result answers until it expires);
    :meth:`remove` (or :meth:`pop_due`) forgets it.

    The per-owner limits count an owner's tasks per client it creates them from (its
    *account*): tasks made without a client (an identity, a stdio connection) count under the
    owner alone; an owner shared by several clients (every anonymous caller of a stateless
    HTTP server is one owner) gives each client an allowance of its own, so none can use up
    another's. Each task also counts under the client that created it, for the per-client caps.
    """

    __slots__ = (
        "_account_live",
        "_accounts",
        "_bytes",
        "_bytes_of",
        "_client_kept",
        "_client_live",
        "_expired",
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
        self._kept: dict[str, int] = {}  # tasks kept per account
        # The tasks made from a client other than their owner: (account, client) each, and
        # each such account's live tasks and each client's live and kept ones.
        self._accounts: dict[str, tuple[str, str]] = {}
        self._account_live: dict[str, int] = {}
        self._client_live: dict[str, int] = {}
        self._client_kept: dict[str, int] = {}
        # Result bytes kept (results of CHARGED_FROM bytes and more): per task, account, all.
        self._bytes_of: dict[str, int] = {}
        self._owner_bytes: dict[str, int] = {}
        self._bytes = 0
        self._expiries = Expiries()
        # The last EXPIRED_MEMORY tasks that expired (id -> owner), so that asking for one
        # says it expired rather than that it never was.
        self._expired: dict[str, str] = {}

    def __len__(self) -> int:
        """Tasks kept."""
        return len(self._owner_of)

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._owner_of

    def owner_of(self, task_id: str) -> str | None:
        return self._owner_of.get(task_id)

    def live_count(self, owner: str) -> int:
        """Live tasks of ``owner`` (from any client)."""
        return len(self._live.get(owner, ()))

    def live_ids(self, owner: str) -> list[str]:
        """The ids of ``owner``'s live tasks, oldest first."""
        return list(self._live.get(owner, ()))

    @property
    def live_total(self) -> int:
        return self._live_total

    def kept_result_bytes(self, owner: str | None = None, client: str | None = None) -> int:
        """Result bytes kept by the finished tasks ``owner`` made from ``client`` (None: by all)."""
        return self._bytes if owner is None else self._owner_bytes.get(_account(owner, client), 0)

    @property
    def earliest(self) -> float:
        """When the next task is due (``math.inf`` if none)."""
        return self._expiries.earliest

    # -- decisions ---------------------------------------------------------------------------
    def refusal(self, owner: str, client: str | None) -> ErrorValue | None:
        """Why a new task of ``owner``, made from ``client`` (None: no client but the owner),
        may not be made now, or None if it may."""
        limits = self.limits
        account = _account(owner, client)
        if account is owner:  # its live tasks but those made from a client
            live = len(self._live.get(owner, ())) - self._account_live.get(_FROM_CLIENTS + owner, 0)
        else:
            live = self._account_live.get(account, 0)
        if live >= limits.max_live_tasks_per_owner:
            return _too_many_live(limits.max_live_tasks_per_owner, "requestor")
        if self._kept.get(account, 0) >= limits.max_tasks_per_owner:
            return _too_many_kept(limits.max_tasks_per_owner, "requestor")
        if self._owner_bytes and self._owner_bytes.get(account, 0) >= limits.max_kept_result_bytes_per_owner:
            return ErrorValue(
                TASK_LIMIT_REACHED,
                f"Too many result bytes kept: at most {limits.max_kept_result_bytes_per_owner} per "
                "requestor, until some tasks expire",
            )
        if account is not owner:
            assert client is not None
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
        made = self._accounts.get(task_id)
        account = made[0] if made is not None else owner
        account_bytes = self._owner_bytes.get(account, 0)
        if account_bytes + size > limits.max_kept_result_bytes_per_owner or self._bytes + size > (
            limits.max_kept_result_bytes
        ):
            return ErrorValue(
                INTERNAL_ERROR,
                f"Internal error: the result ({size} bytes) exceeds what the server keeps for this "
                "requestor until its other tasks expire",
            )
        self._bytes_of[task_id] = size
        self._owner_bytes[account] = account_bytes + size
        self._bytes += size
        return None

    # -- changes -----------------------------------------------------------------------------
    def add(self, task_id: str, owner: str, client: str | None, deadline: float) -> float:
        """A new live task of ``owner``, made from ``client`` (admitted: see :meth:`refusal`),
        due at ``deadline`` (in the caller's clock); returns when it will be due (at most a
        millisecond later)."""
        live = self._live.get(owner)
        if live is None:
            live = self._live[owner] = {}
        live[task_id] = None
        self._live_total += 1
        self._owner_of[task_id] = owner
        account = _account(owner, client)
        self._kept[account] = self._kept.get(account, 0) + 1
        if account is not owner:
            assert client is not None
            self._accounts[task_id] = (account, client)
            self._account_live[account] = self._account_live.get(account, 0) + 1
            from_clients = _FROM_CLIENTS + owner
            self._account_live[from_clients] = self._account_live.get(from_clients, 0) + 1
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
        made = self._accounts.get(task_id) if self._accounts else None
        if made is not None:
            _count_down(self._account_live, made[0])
            _count_down(self._account_live, _FROM_CLIENTS + owner)
            _count_down(self._client_live, made[1])
        return True

    def remove(self, task_id: str) -> str | None:
        """Forget the task (ended first if live); its owner, or None if it was not kept."""
        self.ended(task_id)
        owner = self._owner_of.pop(task_id, None)
        if owner is None:
            return None
        made = self._accounts.pop(task_id, None) if self._accounts else None
        account = owner
        if made is not None:
            account = made[0]
            _count_down(self._client_kept, made[1])
        _count_down(self._kept, account)
        size = self._bytes_of.pop(task_id, None) if self._bytes_of else None
        if size is not None:
            self._bytes -= size
            left = self._owner_bytes[account] - size
            if left:
                self._owner_bytes[account] = left
            else:
                del self._owner_bytes[account]
        self._expiries.compact(self._owner_of)
        return owner

    def expired(self, task_id: str, owner: str) -> None:
        """``task_id`` (of ``owner``) expired and was removed: remember it (the last
        :data:`EXPIRED_MEMORY` of them), for :meth:`was_expired`."""
        expired = self._expired
        expired[task_id] = owner
        if len(expired) > EXPIRED_MEMORY:
            del expired[next(iter(expired))]

    def was_expired(self, task_id: str, owner: str) -> bool:
        """Whether ``owner``'s task ``task_id`` expired lately (a task of another owner never
        did, as far as ``owner`` can tell: foreign tasks look exactly like missing ones).

        >>> table = TaskTable()
        >>> table.expired("t1", "alice")
        >>> table.was_expired("t1", "alice"), table.was_expired("t1", "mallory")
        (True, False)
        """
        return self._expired.get(task_id) == owner

    def pop_due(self, now: float) -> list[str]:
        """The kept tasks due at ``now`` (each handed back once); the caller removes them."""
        kept = self._owner_of
        due = [task_id for task_id in self._expiries.pop_due(now) if task_id in kept]
        self._expiries.compact(kept)
        return due


EXPIRED_MEMORY = 10_000
"""Expired task ids a table remembers (about 100 bytes each), so that a late poll of one is
told it expired rather than that it never was."""

_FROM_CLIENTS = "\x00from clients: "
"""Prefix of the count of an owner's live tasks made from clients (in ``_account_live``)."""


def _account(owner: str, client: str | None) -> str:
    """Whom a task counts under for the per-owner limits: the owner itself (the same object,
    so ``is`` tells), or the owner as seen from one client."""
    if client is None or client == owner:
        return owner
    return f"{owner} from {client}"


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
