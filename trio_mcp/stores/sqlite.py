"""The embedded durable store: task records in an SQLite file (standard-library :mod:`sqlite3`).

>>> # server = Server("tools", store=lambda: SqliteTaskStore("tasks.db"))
>>> # server = Server("tools", store=store_from_url("sqlite:///tasks.db"))

Records survive the process: a server restarted on the same file answers ``tasks/get``,
``tasks/result`` and ``tasks/list`` (cursors included) for every task the old process stored.
Work does not survive it: a task that was ``working`` or ``input_required`` when its process
died can never finish. The store lists them (:meth:`SqliteTaskStore.unfinished`), and a server
starting on the file fails them before it serves anyone: they become ``failed`` with
:data:`INTERRUPTED_MESSAGE`.

Guarantees, beyond the rules of :mod:`trio_mcp.stores.base` (the contract suite holds it to
them):

- **Off the Trio thread.** Every database call runs in a worker thread
  (:func:`trio.to_thread.run_sync`) on the store's one connection, one call at a time (a
  capacity limiter of one thread, and a lock). The connection is made lazily by the first
  call, in that thread, so ``SqliteTaskStore(path)`` is a cheap constructor — a zero-argument
  factory fit for ``Server(store=...)`` — and :meth:`SqliteTaskStore.open` connects at once.
  On a :class:`trio.testing.MockClock` (the testing kit's) the Trio thread waits for the
  worker in place instead: a store call then takes no mock time and lets no other task run,
  as with the memory store, so mock-clock runs stay reproducible (otherwise an autojumping
  clock would jump to the next timeout whenever a call is in a thread).
- **Nothing half-written.** Each method is one SQLite transaction (writes take the write lock
  up front, ``BEGIN IMMEDIATE``). A caller that is cancelled still waits for its call to end —
  the call is not abandoned — so it either happened entirely or not at all.
- **Durable.** WAL journal, ``synchronous=FULL`` by default: a call that returned is on disk,
  even across a power cut (``synchronous="NORMAL"`` keeps it across a process crash only).
- **Conditional update in SQL**: ``UPDATE ... WHERE task_id=? AND version=?``.
- **Cursors** name the owner (a digest), the owner's epoch and a position in the owner's own
  counter, kept in an ``owners`` table; they depend on nothing but that owner's history, stay
  valid across restarts, and are refused for any other owner. An owner's row is dropped with
  its last record (so a store does not grow with every connection ever served); a cursor
  from before that is recognised as older than every record since, as in the memory store.
- Records are kept as the JSON text of :func:`~trio_mcp.protocol.records.record_to_json`:
  a record holding anything that is not JSON is refused (TypeError/ValueError) and changes
  nothing; nothing a caller holds is shared with what the store keeps.

One file, one serving process — enforced. A store that connects takes an exclusive OS lock on
the file (``flock(LOCK_EX | LOCK_NB)`` on the sidecar ``PATH.lock``, which names the holder's
pid) and keeps it until :meth:`~SqliteTaskStore.aclose`; the OS drops it when the process ends,
however it ends (SIGKILL too). While one process holds it, a store in any other process fails
to connect with :class:`StoreLocked` (``PATH is in use by another trio-mcp process (pid N); one
server process per task file``), so a second server refuses to start rather than fail the
first one's running tasks as interrupted: a server connects its store when it starts. Store
objects of the *same* process on one file share its lock (a store reopened after closing, a
second one reading the file), and SQLite serialises them. The lock file is left in place (an
empty one is harmless); ``":memory:"`` takes no lock, nor does Windows (no ``fcntl``). A child
made by a bare ``fork()`` (no exec) inherits the lock while it lives.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Literal, TypeVar

import outcome
import trio

from ..protocol.cursors import encode_cursor, split_cursor
from ..protocol.records import TaskRecord, record_from_text, record_to_text
from ..protocol.tasks import TaskStatus
from .base import InvalidCursor, store_key, text_digest

if sys.platform != "win32":
    import fcntl

__all__ = [
    "INTERRUPTED_MESSAGE",
    "SCHEMA_VERSION",
    "SqliteTaskStore",
    "StoreClosed",
    "StoreLocked",
]

T = TypeVar("T")

INTERRUPTED_MESSAGE = "The server process running this task stopped; its work cannot be resumed."
"""The ``statusMessage`` (and error message) of a task a starting server failed because the
process running it is gone (the runtime's ``PROCESS_GONE``)."""

SCHEMA_VERSION = 1
"""``PRAGMA user_version`` of a file this store made; a file with another (non-zero) one is refused."""

_RUNNING = (TaskStatus.WORKING.value, TaskStatus.INPUT_REQUIRED.value)

_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS owners (
    owner BLOB PRIMARY KEY,        -- the owner, UTF-8 (surrogatepass)
    epoch TEXT NOT NULL,           -- digest of the owner's first task id since it last had none
    counter INTEGER NOT NULL       -- the owner's last position
);
CREATE TABLE IF NOT EXISTS tasks (
    task_id BLOB PRIMARY KEY,      -- UTF-8 (surrogatepass): any str is a key
    owner BLOB NOT NULL,
    position INTEGER NOT NULL,     -- in the owner's own counter: paging order
    version INTEGER NOT NULL,
    status TEXT NOT NULL,
    expires_at REAL NOT NULL,
    record TEXT NOT NULL           -- json.dumps(record_to_json(record))
);
CREATE UNIQUE INDEX IF NOT EXISTS tasks_by_owner ON tasks (owner, position);
CREATE INDEX IF NOT EXISTS tasks_by_expiry ON tasks (expires_at);
CREATE INDEX IF NOT EXISTS tasks_running ON tasks (status) WHERE status IN {_RUNNING!r};
"""


class StoreLocked(Exception):
    """Another process serves tasks from this SQLite file (it holds the file's lock). Its
    message is one line naming the file (and the holder's pid, when known)."""


_held_guard = threading.Lock()
_held: dict[str, list[int]] = {}
"""The file locks this process holds: real path of the file -> [lock file descriptor, how
many connected stores share it]. ``flock`` locks belong to an open file description, so a
second descriptor of this process would be refused too: the stores of one process share one."""


def _lock_file(path: str) -> str | None:
    """Take the lock of the task file ``path`` for this process (or share the one it holds);
    the key to release it with (None: no lock, for ``":memory:"``, ``""`` or on Windows).
    Raises :class:`StoreLocked` if another process holds it."""
    if path in ("", ":memory:") or sys.platform == "win32":
        return None
    key = os.path.realpath(path)
    with _held_guard:
        held = _held.get(key)
        if held is not None:
            held[1] += 1
            return key
        fd = os.open(key + ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _holder(fd)
                by = f"another trio-mcp process (pid {holder})" if holder else "another trio-mcp process"
                raise StoreLocked(f"{key} is in use by {by}; one server process per task file") from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        _held[key] = [fd, 1]
        return key


def _holder(fd: int) -> int | None:
    """The pid written in a lock file (None if it is missing or garbled)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() and int(text) > 0 else None


def _unlock_file(key: str | None) -> None:
    """Release what :func:`_lock_file` took (the lock itself once no store of this process uses it)."""
    if key is None:
        return
    with _held_guard:
        held = _held[key]
        held[1] -= 1
        if held[1] == 0:
            del _held[key]
            os.close(held[0])  # closing the descriptor releases the flock


class StoreClosed(Exception):
    """The store was used after :meth:`SqliteTaskStore.aclose`."""


class SqliteTaskStore:
    """Task records in an SQLite file (see the module docstring for its guarantees).

    ``SqliteTaskStore(path)`` does no I/O: the file is opened (and made, with its tables) by the
    first call. ``await SqliteTaskStore.open(path)`` opens it at once (errors surface there);
    ``async with`` closes it. ``busy_timeout`` is how long a call waits for another connection's
    write lock (seconds) before failing.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
    ) -> None:
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, not {synchronous!r}")
        self.path = os.fspath(path)
        self._busy_timeout = busy_timeout
        self._synchronous = synchronous
        self._connection: sqlite3.Connection | None = None
        self._lock_key: str | None = None
        """The file lock this store's connection holds a share of (see :func:`_lock_file`)."""
        self._closed = False
        self._lock = threading.Lock()
        """Held by whichever thread uses the connection (the limiter already admits one)."""
        self._limiter = trio.CapacityLimiter(1)

    def __repr__(self) -> str:
        return f"SqliteTaskStore({self.path!r})"

    # -- the connection -------------------------------------------------------------------
    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        busy_timeout: float = 30.0,
        synchronous: Literal["FULL", "NORMAL"] = "FULL",
    ) -> SqliteTaskStore:
        """A store on ``path``, connected now (the file and its tables made if absent)."""
        store = cls(path, busy_timeout=busy_timeout, synchronous=synchronous)
        await store.connect()
        return store

    async def connect(self) -> None:
        """Connect now if not yet (else nothing): take the file's lock, open the file (made with
        its tables if absent). Raises :class:`StoreLocked` if another process serves the file;
        a server calls it when it starts, so that it refuses to start then."""
        await self._call(lambda connection: None)

    async def aclose(self) -> None:
        """Close the connection (after any call under way). Later calls raise :class:`StoreClosed`;
        closing again does nothing."""

        def close() -> None:
            with self._lock:
                self._closed = True
                if self._connection is not None:
                    self._connection.close()
                    self._connection = None
                    key, self._lock_key = self._lock_key, None
                    _unlock_file(key)

        await self._in_thread(close)

    async def __aenter__(self) -> SqliteTaskStore:
        await self.connect()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _connect(self) -> sqlite3.Connection:
        """The connection, made on first use (in a worker thread, holding the lock)."""
        if self._closed:
            raise StoreClosed(f"{self!r} is closed")
        if self._connection is not None:
            return self._connection
        connection = sqlite3.connect(  # opens (makes) the file: an unusable path fails here, in SQLite
            self.path, timeout=self._busy_timeout, isolation_level=None, check_same_thread=False
        )
        key: str | None = None
        try:
            key = _lock_file(self.path)  # before any statement: StoreLocked if another process serves it
            connection.execute("PRAGMA journal_mode=WAL")  # ":memory:" stays "memory": fine
            connection.execute(f"PRAGMA synchronous={self._synchronous}")
            connection.execute("BEGIN IMMEDIATE")
            try:
                version = connection.execute("PRAGMA user_version").fetchone()[0]
                if version not in (0, SCHEMA_VERSION):
                    raise RuntimeError(
                        f"{self.path}: task store schema version {version}, this store reads {SCHEMA_VERSION}"
                    )
                for statement in _SCHEMA.split(";"):
                    if statement.strip():
                        connection.execute(statement)
                connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
                connection.execute("COMMIT")
            except BaseException:
                connection.execute("ROLLBACK")
                raise
        except BaseException:
            connection.close()
            _unlock_file(key)
            raise
        self._connection = connection
        self._lock_key = key
        return connection

    async def _call(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``operation`` on the connection in a worker thread, one at a time; not abandoned
        when the caller is cancelled (it ends first, so nothing is left half-done)."""

        def run() -> T:
            with self._lock:
                return operation(self._connect())

        return await self._in_thread(run)

    async def _in_thread(self, run: Callable[[], T]) -> T:
        """``run()`` in a worker thread, one at a time, waited for even if cancelled."""
        if not hasattr(trio.lowlevel.current_clock(), "autojump_threshold"):  # not a MockClock
            return await trio.to_thread.run_sync(run, limiter=self._limiter)
        # On Trio's mock clock (tests), waiting for a thread breaks what the clock promises: an
        # autojumping clock jumps to the next deadline as soon as every task waits (a task
        # waiting for a thread too), so a call would seem to take as long as the next timeout,
        # and ``wait_all_tasks_blocked`` (the testing kit's "settle") returns while a call is
        # under way. There, wait for the worker thread in place: a call takes no mock time and
        # lets no other task run (like the memory store's), so mock-clock runs stay reproducible.
        done: list[outcome.Outcome[T]] = []
        finished = threading.Event()

        def deliver(result: outcome.Outcome[T]) -> None:
            done.append(result)
            finished.set()

        trio.lowlevel.start_thread_soon(run, deliver)
        finished.wait()
        return done[0].unwrap()

    async def _write(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Like :meth:`_call`, in one write transaction: all of it is stored, or none."""

        def transaction(connection: sqlite3.Connection) -> T:
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = operation(connection)
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            return result

        return await self._call(transaction)

    async def _read(self, operation: Callable[[sqlite3.Connection], T]) -> T:
        """Like :meth:`_call`, in one read transaction: every query sees the same snapshot."""

        def transaction(connection: sqlite3.Connection) -> T:
            connection.execute("BEGIN")
            try:
                return operation(connection)
            finally:
                connection.execute("COMMIT")

        return await self._call(transaction)

    # -- the TaskStore interface ----------------------------------------------------------
    async def create(self, record: TaskRecord) -> None:
        text = record_to_text(record)  # before anything: a record that is not JSON changes nothing
        task_key, owner_key = store_key(record.task_id), store_key(record.owner)

        def create(connection: sqlite3.Connection) -> None:
            if connection.execute("SELECT 1 FROM tasks WHERE task_id=?", (task_key,)).fetchone():
                raise ValueError(f"task {record.task_id!r} exists")
            row = connection.execute("SELECT counter FROM owners WHERE owner=?", (owner_key,)).fetchone()
            if row is None:
                position = 1
                connection.execute(
                    "INSERT INTO owners (owner, epoch, counter) VALUES (?, ?, 1)",
                    (owner_key, text_digest(record.task_id, 8)),
                )
            else:
                position = row[0] + 1
                connection.execute("UPDATE owners SET counter=? WHERE owner=?", (position, owner_key))
            connection.execute(
                "INSERT INTO tasks (task_id, owner, position, version, status, expires_at, record)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (task_key, owner_key, position, record.version, record.status.value, record.expires_at, text),
            )

        await self._write(create)

    async def get(self, task_id: str) -> TaskRecord | None:
        task_key = store_key(task_id)

        def get(connection: sqlite3.Connection) -> str | None:
            row = connection.execute("SELECT record FROM tasks WHERE task_id=?", (task_key,)).fetchone()
            return row[0] if row is not None else None

        text = await self._call(get)
        return record_from_text(text) if text is not None else None

    async def update(self, record: TaskRecord) -> bool:
        """Replace the stored record if its version is ``record.version - 1`` and its owner is
        ``record.owner`` (a record never changes owner); says whether it did."""
        text = record_to_text(record)
        values = (record.version, record.status.value, record.expires_at, text)
        where = (store_key(record.task_id), store_key(record.owner), record.version - 1)

        def update(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                "UPDATE tasks SET version=?, status=?, expires_at=?, record=?"
                " WHERE task_id=? AND owner=? AND version=?",
                values + where,
            )
            return cursor.rowcount == 1

        return await self._call(update)  # one statement: atomic by itself

    async def delete(self, task_id: str) -> TaskRecord | None:
        task_key = store_key(task_id)

        def delete(connection: sqlite3.Connection) -> str | None:
            found = connection.execute(
                "DELETE FROM tasks WHERE task_id=? RETURNING owner, record", (task_key,)
            ).fetchall()  # all of it: the statement ends before the next one
            if not found:
                return None
            owner_key, text = found[0]
            if not connection.execute("SELECT 1 FROM tasks WHERE owner=? LIMIT 1", (owner_key,)).fetchone():
                connection.execute("DELETE FROM owners WHERE owner=?", (owner_key,))
            return str(text)

        text = await self._write(delete)
        return record_from_text(text) if text is not None else None

    async def page(self, owner: str, cursor: str | None, limit: int) -> tuple[list[TaskRecord], str | None]:
        tag = text_digest(owner, 16)
        after = 0
        kind = ""
        if cursor is not None:
            try:
                kind, after = split_cursor(cursor)
            except ValueError:
                raise InvalidCursor(cursor) from None
            if not kind.startswith(f"task.{tag}.") or after < 1:
                raise InvalidCursor(cursor)  # not one made for this owner
        owner_key = store_key(owner)

        def page(connection: sqlite3.Connection) -> tuple[list[str], str | None]:
            nonlocal after
            row = connection.execute(
                "SELECT epoch, counter FROM owners WHERE owner=?", (owner_key,)
            ).fetchone()
            if row is None:
                return [], None  # no records (any the cursor came after are gone, none came since)
            epoch, counter = row
            current = f"task.{tag}.{epoch}"
            if cursor is not None:
                if kind != current:
                    after = 0  # from before the owner last had no records: all now are newer
                elif after > counter:
                    raise InvalidCursor(cursor)
            rows = connection.execute(
                "SELECT position, record FROM tasks WHERE owner=? AND position>? ORDER BY position LIMIT ?",
                (owner_key, after, max(limit, 0) + 1),
            ).fetchall()
            texts = [text for _, text in rows[:limit]]
            more = len(rows) > len(texts)
            return texts, (encode_cursor(current, rows[len(texts) - 1][0]) if texts and more else None)

        texts, next_cursor = await self._read(page)
        return [record_from_text(text) for text in texts], next_cursor

    async def due(self, now: float, limit: int) -> list[TaskRecord]:
        def due(connection: sqlite3.Connection) -> list[str]:
            rows = connection.execute(
                "SELECT record FROM tasks WHERE expires_at<=? ORDER BY expires_at, rowid LIMIT ?",
                (now, max(limit, 0)),
            ).fetchall()
            return [text for (text,) in rows]

        return [record_from_text(text) for text in await self._call(due)]

    # -- a durable store (DurableTaskStore) ----------------------------------------------
    async def unfinished(self, limit: int) -> list[TaskRecord]:
        """Up to ``limit`` records that are ``working`` or ``input_required``, oldest first (in
        the order they were stored). The file's lock is this process's: their work ran in a
        process that is gone, and cannot be resumed."""

        def unfinished(connection: sqlite3.Connection) -> list[str]:
            rows = connection.execute(
                f"SELECT record FROM tasks WHERE status IN {_RUNNING!r} ORDER BY rowid LIMIT ?",
                (max(limit, 0),),
            ).fetchall()
            return [text for (text,) in rows]

        return [record_from_text(text) for text in await self._call(unfinished)]

    # -- beyond the interface -------------------------------------------------------------
    async def count(self) -> int:
        """How many records the file holds."""
        return await self._call(
            lambda connection: int(connection.execute("SELECT count(*) FROM tasks").fetchone()[0])
        )

    def __len__(self) -> int:
        """How many records the file holds — a blocking call on the caller's thread, for tests
        and diagnostics only (in a Trio task, ``await store.count()``)."""
        with self._lock:
            return int(self._connect().execute("SELECT count(*) FROM tasks").fetchone()[0])
