"""Task records: what a task *is*, as plain, era-neutral data.

A :class:`TaskRecord` holds nothing live (no cancel scope, no waiter, no callback): it is what
a store keeps, what a dialect renders into its era's wire shape, and what another process can
read. :func:`record_to_json` / :func:`record_from_json` are its exact JSON form, the one every
durable or shared store writes.

>>> record = new_record("t1", "alice", now=0.0, ttl_ms=1000, poll_interval_ms=500)
>>> record.status.value, record.expires_at
('working', 1.0)
>>> done = record.settle(TaskOutcome(result={"content": []}), now=0.5)
>>> done.status.value, done.version
('completed', 1)
>>> record_from_json(record_to_json(done)) == done
True
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs

from . import _json
from ._frozen import slot_builder
from .errors import ErrorValue
from .tasks import TERMINAL, TaskStatus, check_transition, format_timestamp

__all__ = [
    "NO_INPUT_REQUESTS",
    "TaskOutcome",
    "TaskRecord",
    "new_record",
    "record_from_json",
    "record_from_text",
    "record_to_json",
    "record_to_text",
    "task_fields",
    "text_outcome",
]


@attrs.frozen(weakref_slot=False)  # no weak reference slot: built by slot_builder
class TaskOutcome:
    """What the task's request produced: a result (a JSON object) or an error value.

    ``failed`` picks the terminal status: an error always fails the task; whether a tool's
    ``isError`` result fails it too is the creating era's rule (its dialect decides).
    ``message`` becomes the terminal ``statusMessage``.
    """

    result: dict[str, Any] | None = None
    error: ErrorValue | None = None
    failed: bool = False
    message: str | None = None

    @classmethod
    def from_error(cls, error: ErrorValue) -> TaskOutcome:
        return cls(error=error, failed=True, message=error.message)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"failed": self.failed}
        if self.result is not None:
            out["result"] = self.result
        if self.error is not None:
            out["error"] = self.error.to_json()
        if self.message is not None:
            out["message"] = self.message
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> TaskOutcome:
        error = obj.get("error")
        return cls(
            result=obj.get("result"),
            error=ErrorValue.from_json(error) if error is not None else None,
            failed=bool(obj.get("failed", False)),
            message=obj.get("message"),
        )


NO_INPUT_REQUESTS: Mapping[str, Any] = MappingProxyType({})
"""The input requests of a task that has none: one shared, read-only empty mapping (an
empty dict per record would be 64 bytes for every live task). Equal to ``{}``."""


@attrs.frozen(weakref_slot=False)  # no weak reference slot: built by slot_builder
class TaskRecord:
    """One task. Times are wall-clock epoch seconds; durations are milliseconds.

    ``owner`` is a string identity (an authenticated principal, or one minted for a
    connection). ``version`` grows by one with every change, so stores can update
    conditionally (compare-and-set). ``input_requests`` are the task's pending requests for
    input, keyed by an id unique for the task's life (JSON values); a record that has none
    shares :data:`NO_INPUT_REQUESTS`. A record is never changed in place, its mapping included.
    """

    task_id: str
    owner: str
    status: TaskStatus
    created_at: float
    last_updated_at: float
    ttl_ms: int
    expires_at: float
    poll_interval_ms: int | None = None
    status_message: str | None = None
    outcome: TaskOutcome | None = None
    input_requests: Mapping[str, Any] = NO_INPUT_REQUESTS
    version: int = 0
    created_text: str = attrs.field(init=False, eq=False, repr=False)
    """``created_at`` in ISO 8601 (UTC, milliseconds), as every era writes it: formatted when
    the record is built (not state: equality and the JSON form ignore it)."""
    updated_text: str = attrs.field(init=False, eq=False, repr=False)
    """``last_updated_at`` as text, likewise (the same string when the two times are equal)."""

    def __attrs_post_init__(self) -> None:
        # Only a record built by ``__init__`` (read from a store, or made by hand) formats
        # here; the hot path (``new_record``, a change) passes the text it already has.
        created = format_timestamp(self.created_at)
        updated = self.last_updated_at
        object.__setattr__(self, "created_text", created)
        object.__setattr__(
            self, "updated_text", created if updated == self.created_at else format_timestamp(updated)
        )

    @property
    def is_terminal(self) -> bool:
        return self.status in TERMINAL

    def _changed(
        self,
        now: float,
        status: TaskStatus,
        message: str | None,
        outcome: TaskOutcome | None,
        requests: Mapping[str, Any],
    ) -> TaskRecord:
        # The next version, built directly (this is every task change): its creation text is
        # this one's, and its new time is formatted now (a change is written at once: a status
        # notification, an answer to a poll).
        return _build(
            self.task_id,
            self.owner,
            status,
            self.created_at,
            now,
            self.ttl_ms,
            self.expires_at,
            self.poll_interval_ms,
            message,
            outcome,
            requests,
            self.version + 1,
            self.created_text,
            format_timestamp(now),
        )

    def transition(self, status: TaskStatus, message: str | None, *, now: float) -> TaskRecord:
        """The record after a legal status change (:class:`InvalidTransition` otherwise)."""
        check_transition(self.status, status)
        return self._changed(now, status, message, self.outcome, self.input_requests)

    def with_message(self, message: str | None, *, now: float) -> TaskRecord:
        return self._changed(now, self.status, message, self.outcome, self.input_requests)

    def with_input_requests(
        self, requests: Mapping[str, Any], status: TaskStatus, message: str | None, *, now: float
    ) -> TaskRecord:
        """The record with these pending input requests, in ``status`` (a legal move, or the same)."""
        if status != self.status:
            check_transition(self.status, status)
        return self._changed(now, status, message, self.outcome, requests)

    def with_version(self, version: int) -> TaskRecord:
        """The same record under another ``version`` (a store writer rebasing a change on
        what its store holds); nothing else changes.

        >>> new_record("t1", "alice", now=0.0, ttl_ms=1000, poll_interval_ms=None).with_version(7).version
        7
        """
        return _build(
            self.task_id,
            self.owner,
            self.status,
            self.created_at,
            self.last_updated_at,
            self.ttl_ms,
            self.expires_at,
            self.poll_interval_ms,
            self.status_message,
            self.outcome,
            self.input_requests,
            version,
            self.created_text,
            self.updated_text,
        )

    def settle(self, outcome: TaskOutcome, *, now: float, status: TaskStatus | None = None) -> TaskRecord:
        """The terminal record for ``outcome`` (``failed`` or ``completed`` unless ``status``)."""
        final = status or (_FAILED if outcome.failed else _COMPLETED)
        check_transition(self.status, final)
        return self._changed(now, final, outcome.message, outcome, NO_INPUT_REQUESTS)


_build = slot_builder(TaskRecord)
"""``TaskRecord(...)`` of all 14 slots, the two times' cached text last (a change passes on
the record before's ``created_text`` and formats its own time): a new task, every change."""

_outcome = slot_builder(TaskOutcome)


def text_outcome(text: str) -> TaskOutcome:
    """The outcome of a tool that returned ``text``: its result is one text block, and it
    does not fail the task. (The commonest outcome, built without the guarded ``__init__``.)

    >>> text_outcome("done") == TaskOutcome(result={"content": [{"type": "text", "text": "done"}]})
    True
    """
    return _outcome(text_result(text), None, False, None)


def text_result(text: str) -> dict[str, Any]:
    """The ``CallToolResult`` of a tool that returned ``text``, as JSON: one text block (what
    the entry's result unstructures to), written directly (a plain call's, a task's outcome's).

    >>> text_result("done")
    {'content': [{'type': 'text', 'text': 'done'}]}
    """
    return {"content": [{"type": "text", "text": text}]}


_WORKING = TaskStatus.WORKING
_FAILED = TaskStatus.FAILED
_COMPLETED = TaskStatus.COMPLETED


def new_record(task_id: str, owner: str, now: float, ttl_ms: int, poll_interval_ms: int | None) -> TaskRecord:
    """A fresh ``working`` task created at ``now``, expiring ``ttl_ms`` later. Its time is
    formatted now: every era's answer to a creation writes it. (The supervisor passes every
    argument positionally, the cheapest call; elsewhere they are named.)"""
    text = format_timestamp(now)
    return _build(
        task_id,
        owner,
        _WORKING,
        now,
        now,
        ttl_ms,
        now + ttl_ms / 1000,
        poll_interval_ms,
        None,
        None,
        NO_INPUT_REQUESTS,
        0,
        text,
        text,
    )


def task_fields(record: TaskRecord, *, ttl_key: str, poll_interval_key: str) -> dict[str, Any]:
    """The fields every era's task object shares, under that era's names for the two durations
    (2025-11-25: ``ttl``/``pollInterval``; 2026-07-28: ``ttlMs``/``pollIntervalMs``).

    >>> record = new_record("t1", "alice", now=0.0, ttl_ms=1000, poll_interval_ms=500)
    >>> task_fields(record, ttl_key="ttl", poll_interval_key="pollInterval")["createdAt"]
    '1970-01-01T00:00:00.000Z'
    """
    task: dict[str, Any] = {
        "taskId": record.task_id,
        "status": record.status.value,
        "createdAt": record.created_text,
        "lastUpdatedAt": record.updated_text,
        ttl_key: record.ttl_ms,
    }
    if record.status_message is not None:
        task["statusMessage"] = record.status_message
    if record.poll_interval_ms is not None:
        task[poll_interval_key] = record.poll_interval_ms
    return task


def record_to_json(record: TaskRecord) -> dict[str, Any]:
    """The record as a JSON object (the form durable and shared stores keep)."""
    out: dict[str, Any] = {
        "taskId": record.task_id,
        "owner": record.owner,
        "status": record.status.value,
        "createdAt": record.created_at,
        "lastUpdatedAt": record.last_updated_at,
        "ttlMs": record.ttl_ms,
        "expiresAt": record.expires_at,
        "version": record.version,
    }
    if record.poll_interval_ms is not None:
        out["pollIntervalMs"] = record.poll_interval_ms
    if record.status_message is not None:
        out["statusMessage"] = record.status_message
    if record.outcome is not None:
        out["outcome"] = record.outcome.to_json()
    if record.input_requests:
        out["inputRequests"] = dict(record.input_requests)
    return out


def record_to_text(record: TaskRecord) -> str:
    """The record's JSON form as compact text (what stores write)."""
    return _json.dumps(record_to_json(record)).decode()


def record_from_text(text: str | bytes) -> TaskRecord:
    """The inverse of :func:`record_to_text`."""
    return record_from_json(_json.loads(text))


def record_from_json(obj: dict[str, Any]) -> TaskRecord:
    """The inverse of :func:`record_to_json`."""
    outcome = obj.get("outcome")
    return TaskRecord(
        task_id=obj["taskId"],
        owner=obj["owner"],
        status=TaskStatus(obj["status"]),
        created_at=obj["createdAt"],
        last_updated_at=obj["lastUpdatedAt"],
        ttl_ms=obj["ttlMs"],
        expires_at=obj["expiresAt"],
        poll_interval_ms=obj.get("pollIntervalMs"),
        status_message=obj.get("statusMessage"),
        outcome=TaskOutcome.from_json(outcome) if outcome is not None else None,
        input_requests=obj.get("inputRequests") or NO_INPUT_REQUESTS,
        version=obj["version"],
    )
