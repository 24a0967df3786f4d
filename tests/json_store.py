"""A second :class:`~trio_mcp.stores.base.TaskStore` that keeps every record only as JSON text.

Each record is stored as ``json.dumps(record_to_json(record))`` and every read parses the text
back with :func:`record_from_json`, so a record holding anything live (a cancel scope, a waiter,
an object that is not JSON) fails to be stored, and nothing a caller holds is shared with what
the store keeps. ``tests/stores/test_store_contract.py`` holds it to the rules of the store module's
docstring, and ``pytest --task-store=json`` runs the task test suite against it.

It is deliberately simple (a test double, not a production store): paging and expiry scan.

Cursors: base64url of ``json:<owner tag>:<n>`` where ``n`` is a position in the owner's own
creation counter and the tag is a digest of the owner itself, so a cursor is valid only for the
owner it was made for and depends on nothing but that owner's own history. An owner's counter
is kept after its last record is deleted, so an earlier cursor stays valid (and later records
are numbered after it).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json

import attrs

from trio_mcp.protocol.records import TaskRecord, record_from_json, record_to_json
from trio_mcp.stores import InvalidCursor

__all__ = ["JsonTextTaskStore"]

_PREFIX = "json"


@attrs.define(eq=False)
class _Owner:
    counter: int = 0
    ids: dict[int, str] = attrs.Factory(dict)
    """Position -> task id of the owner's stored records (insertion order = ascending)."""


def _owner_tag(owner: str) -> str:
    return hashlib.sha256(owner.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class JsonTextTaskStore:
    """Task records as JSON text in dicts; every read parses the text again."""

    def __init__(self) -> None:
        self._texts: dict[str, str] = {}
        self._positions: dict[str, tuple[str, int, int]] = {}
        """Task id -> (owner, position in the owner's counter, store-wide creation number)."""
        self._owners: dict[str, _Owner] = {}
        self._created = 0

    def __len__(self) -> int:
        return len(self._texts)

    def _load(self, task_id: str) -> TaskRecord:
        return record_from_json(json.loads(self._texts[task_id]))

    @staticmethod
    def _dump(record: TaskRecord) -> str:
        return json.dumps(record_to_json(record), allow_nan=False)

    async def create(self, record: TaskRecord) -> None:
        if record.task_id in self._texts:
            raise ValueError(f"task {record.task_id!r} exists")
        text = self._dump(record)  # before any change: a record that is not JSON changes nothing
        owner = self._owners.setdefault(record.owner, _Owner())
        owner.counter += 1
        owner.ids[owner.counter] = record.task_id
        self._created += 1
        self._texts[record.task_id] = text
        self._positions[record.task_id] = (record.owner, owner.counter, self._created)

    async def get(self, task_id: str) -> TaskRecord | None:
        return self._load(task_id) if task_id in self._texts else None

    async def update(self, record: TaskRecord) -> bool:
        if record.task_id not in self._texts:
            return False
        stored = self._load(record.task_id)
        if stored.version != record.version - 1:
            return False
        self._texts[record.task_id] = self._dump(record)
        return True

    async def delete(self, task_id: str) -> TaskRecord | None:
        if task_id not in self._texts:
            return None
        record = self._load(task_id)
        owner, position, _ = self._positions.pop(task_id)
        del self._owners[owner].ids[position]
        del self._texts[task_id]
        return record

    def _encode(self, owner: str, position: int) -> str:
        raw = f"{_PREFIX}:{_owner_tag(owner)}:{position}".encode("ascii")
        return base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")

    def _decode(self, owner: str, cursor: str) -> int:
        """The position ``cursor`` names for ``owner``; InvalidCursor unless this store made it."""
        try:
            raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode("ascii")
        except (ValueError, binascii.Error, UnicodeError):
            raise InvalidCursor(cursor) from None
        prefix, tag, number = [*raw.split(":"), "", "", ""][:3]
        if prefix != _PREFIX or tag != _owner_tag(owner) or not (number.isascii() and number.isdigit()):
            raise InvalidCursor(cursor)
        position = int(number)
        known = self._owners.get(owner)
        if not 1 <= position <= (known.counter if known is not None else 0):
            raise InvalidCursor(cursor)
        if self._encode(owner, position) != cursor:  # only the exact text this store makes
            raise InvalidCursor(cursor)
        return position

    async def page(self, owner: str, cursor: str | None, limit: int) -> tuple[list[TaskRecord], str | None]:
        after = self._decode(owner, cursor) if cursor is not None else 0
        known = self._owners.get(owner)
        if known is None:
            return [], None
        later = [(position, task_id) for position, task_id in known.ids.items() if position > after]
        out = [self._load(task_id) for _, task_id in later[:limit]]
        more = len(later) > len(out)
        return out, (self._encode(owner, later[len(out) - 1][0]) if out and more else None)

    async def due(self, now: float, limit: int) -> list[TaskRecord]:
        records = [self._load(task_id) for task_id in self._texts]
        expired = [r for r in records if r.expires_at <= now]
        expired.sort(key=lambda r: (r.expires_at, self._positions[r.task_id][2]))
        return expired[:limit]
