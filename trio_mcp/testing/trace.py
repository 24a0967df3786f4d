"""The event trace: every runtime event, in order, stamped with the (mock) time.

A :class:`Trace` is a tracer (see :mod:`trio_mcp.actors.trace`): pass it to
``Server.open(tracer=...)`` or let :func:`~trio_mcp.testing.open_harness` do it. It records
each event as it happens and answers questions about the run afterwards.

Task ids come from :mod:`secrets`, and session numbers from a process-wide counter, so raw
events differ from run to run. :meth:`Trace.lines` and :meth:`Trace.dump` therefore show
*normalised* events: the n-th task id to appear becomes ``task-n`` and the n-th session
``session-n``, everywhere, including inside the raw bytes of messages. Every helper accepts
either form of a task id (``"task-1"`` or the real id).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import trio

from ..protocol.tasks import TERMINAL, TaskStatus

__all__ = ["Event", "Trace", "TraceAssertionError"]

_SESSION = re.compile(r"\bsession-\d+\b")


class TraceAssertionError(AssertionError):
    """A trace assertion failed; the message ends with the (normalised) trace."""


@attrs.frozen
class Event:
    """One recorded event: its position in the trace, the Trio time, its kind and fields.

    ``fields`` are what the runtime reported (message ``data`` stays raw ``bytes``).
    """

    index: int
    time: float
    kind: str
    fields: dict[str, Any]

    @property
    def task_id(self) -> str | None:
        value = self.fields.get("task_id")
        if value is None and self.kind in ("actor.start", "actor.stop", "actor.crash"):
            if self.fields.get("actor") == "TaskActor":
                value = self.fields.get("name")
        return value if isinstance(value, str) else None

    @property
    def message(self) -> dict[str, Any] | None:
        """The decoded JSON of a ``message.in`` / ``message.out`` event (None otherwise, or
        when the bytes are not a JSON object)."""
        data = self.fields.get("data")
        if not isinstance(data, bytes | str):
            return None
        try:
            decoded = json.loads(data)
        except ValueError:
            return None
        return decoded if isinstance(decoded, dict) else None


class Trace:
    """Records runtime events; a callable usable as a ``tracer``.

    >>> trace = Trace()
    >>> # async with server.open(tracer=trace) as runtime: ...
    >>> # trace.statuses("task-1") == ["working", "completed"]
    """

    def __init__(self, *, clock: Callable[[], float] | None = None) -> None:
        self.events: list[Event] = []
        self._clock = clock
        self._task_aliases: dict[str, str] = {}
        self._session_aliases: dict[str, str] = {}
        self._listeners: list[Callable[[Event], None]] = []
        self._id_pattern: re.Pattern[str] | None = None

    # -- recording ------------------------------------------------------------------------
    def __call__(self, kind: str, fields: dict[str, Any]) -> None:
        self.record(kind, fields)

    def record(self, kind: str, fields: dict[str, Any]) -> Event:
        """Append one event, stamped with ``trio.current_time()``."""
        now = self._clock() if self._clock is not None else _current_time()
        event = Event(len(self.events), now, kind, dict(fields))
        self.events.append(event)
        self._learn(event)
        for listener in list(self._listeners):
            listener(event)
        return event

    def subscribe(self, listener: Callable[[Event], None]) -> Callable[[], None]:
        """Call ``listener(event)`` synchronously for each new event; returns an unsubscriber."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener) if listener in self._listeners else None

    def _learn(self, event: Event) -> None:
        if event.kind == "task.created":
            task_id = event.fields.get("task_id")
            if isinstance(task_id, str) and task_id not in self._task_aliases:
                self._task_aliases[task_id] = f"task-{len(self._task_aliases) + 1}"
                self._id_pattern = None
        for key in ("connection", "name"):
            value = event.fields.get(key)
            if isinstance(value, str) and _SESSION.fullmatch(value) and value not in self._session_aliases:
                self._session_aliases[value] = f"session-{len(self._session_aliases) + 1}"

    # -- ids ------------------------------------------------------------------------------
    def alias(self, task_id: str) -> str:
        """The normalised name (``task-n``) of a raw task id; aliases are returned unchanged."""
        return self._task_aliases.get(task_id, task_id)

    def raw_id(self, task: str) -> str:
        """The raw task id behind an alias (``"task-1"``); raw ids are returned unchanged."""
        for raw, alias in self._task_aliases.items():
            if alias == task:
                return raw
        return task

    def task_ids(self) -> list[str]:
        """Aliases of every task created so far, in creation order."""
        return list(self._task_aliases.values())

    def normalize(self, text: str) -> str:
        """Replace raw task ids and session names in ``text`` by their aliases."""
        if self._task_aliases:
            if self._id_pattern is None:
                self._id_pattern = re.compile("|".join(map(re.escape, self._task_aliases)))
            text = self._id_pattern.sub(lambda m: self._task_aliases[m.group(0)], text)
        if self._session_aliases:
            text = _SESSION.sub(lambda m: self._session_aliases.get(m.group(0), m.group(0)), text)
        return text

    # -- rendering ------------------------------------------------------------------------
    def format_event(self, event: Event) -> str:
        """One normalised line: ``<time> <kind> <fields>``."""
        fields = event.fields
        kind = event.kind
        if kind in ("message.in", "message.out"):
            data = fields.get("data", b"")
            text = data.decode("utf-8", "replace") if isinstance(data, bytes) else str(data)
            body = f"{fields.get('connection')} {text}"
        elif kind == "task.created":
            body = f"{fields.get('task_id')} {fields.get('status')} ttl={fields.get('ttl')}"
        elif kind == "task.transition":
            body = f"{fields.get('task_id')} {fields.get('old')} -> {fields.get('status')}"
        elif kind in ("task.expired", "task.removed"):
            body = str(fields.get("task_id"))
        elif kind in ("actor.start", "actor.stop"):
            body = f"{fields.get('actor')} {fields.get('name')}"
        else:
            rest = {k: _plain(v) for k, v in fields.items()}
            body = json.dumps(rest, sort_keys=True, separators=(",", ":"), default=repr)
        return self.normalize(f"{event.time:.6f} {kind} {body}")

    def lines(self, events: Sequence[Event] | None = None) -> list[str]:
        """The normalised trace, one line per event."""
        return [self.format_event(e) for e in (self.events if events is None else events)]

    def dump(self) -> str:
        """The whole normalised trace as text (byte-identical for identical runs)."""
        return "".join(line + "\n" for line in self.lines())

    def __str__(self) -> str:
        return self.dump()

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    # -- queries --------------------------------------------------------------------------
    def of_kind(self, *kinds: str) -> list[Event]:
        """Events whose kind is one of ``kinds`` (a kind ending in ``.*`` matches a prefix)."""
        out: list[Event] = []
        for event in self.events:
            for kind in kinds:
                if event.kind == kind or (kind.endswith(".*") and event.kind.startswith(kind[:-1])):
                    out.append(event)
                    break
        return out

    def for_task(self, task: str) -> list[Event]:
        """Every ``task.*`` event and TaskActor start/stop of one task."""
        raw = self.raw_id(task)
        return [e for e in self.events if e.task_id == raw]

    def statuses(self, task: str) -> list[str]:
        """The statuses the task went through, in order, starting with its creation status.

        >>> # trace.statuses("task-1") == ["working", "cancelled"]
        """
        raw = self.raw_id(task)
        out: list[str] = []
        for event in self.events:
            if event.fields.get("task_id") != raw:
                continue
            if event.kind in ("task.created", "task.transition"):
                out.append(str(event.fields["status"]))
        return out

    def terminal_status(self, task: str) -> str | None:
        """The first terminal status the task reached, or None."""
        for status in self.statuses(task):
            if TaskStatus(status) in TERMINAL:
                return status
        return None

    def messages(
        self, direction: str | None = None, *, method: str | None = None, connection: str | None = None
    ) -> list[dict[str, Any]]:
        """Decoded messages; ``direction`` is ``"in"`` (to the server) or ``"out"``."""
        kinds = ("message.in", "message.out") if direction is None else (f"message.{direction}",)
        out: list[dict[str, Any]] = []
        for event in self.of_kind(*kinds):
            if connection is not None and self.normalize(str(event.fields.get("connection"))) != connection:
                continue
            message = event.message
            if message is None:
                continue
            if method is not None and message.get("method") != method:
                continue
            out.append(message)
        return out

    def requests(self, method: str | None = None) -> list[dict[str, Any]]:
        """Requests the server received."""
        return [m for m in self.messages("in", method=method) if "id" in m and "method" in m]

    def notifications(self, method: str | None = None) -> list[dict[str, Any]]:
        """Notifications the server sent."""
        return [m for m in self.messages("out", method=method) if "id" not in m and "method" in m]

    def response_to(self, request_id: int | str, connection: str | None = None) -> dict[str, Any] | None:
        """The server's response (result or error) to the request with this id."""
        for message in self.messages("out", connection=connection):
            if "method" not in message and message.get("id") == request_id:
                return message
        return None

    def unanswered_requests(self) -> list[dict[str, Any]]:
        """Requests the server received and never answered (per connection), excluding those the
        client withdrew with ``notifications/cancelled``."""
        pending: dict[tuple[str, Any], dict[str, Any]] = {}
        for event in self.of_kind("message.in", "message.out"):
            message = event.message
            if message is None:
                continue
            connection = str(event.fields.get("connection"))
            if event.kind == "message.in":
                if "method" in message and "id" in message:
                    pending[(connection, message["id"])] = message
                elif message.get("method") == "notifications/cancelled":
                    params = message.get("params") or {}
                    pending.pop((connection, params.get("requestId")), None)
            elif "method" not in message:
                pending.pop((connection, message.get("id")), None)
        return list(pending.values())

    def running_actors(self) -> list[str]:
        """``"<Actor> <name>"`` of every actor started and not (yet) stopped, normalised."""
        live: dict[tuple[Any, Any], None] = {}
        for event in self.of_kind("actor.start", "actor.stop"):
            key = (event.fields.get("actor"), event.fields.get("name"))
            if event.kind == "actor.start":
                live[key] = None
            else:
                live.pop(key, None)
        return [self.normalize(f"{actor} {name}") for actor, name in live]

    # -- assertions -----------------------------------------------------------------------
    def error(self, message: str) -> TraceAssertionError:
        """An assertion error whose message ends with this trace."""
        return TraceAssertionError(f"{message}\n--- trace ({len(self.events)} events) ---\n{self.dump()}")

    def assert_statuses(self, task: str, *expected: str) -> None:
        """Assert the task went exactly through ``expected`` (and nothing after).

        >>> # trace.assert_statuses("task-1", "working", "cancelled")
        """
        actual = self.statuses(task)
        if actual != list(expected):
            raise self.error(
                f"{self.alias(task)} went {' -> '.join(actual) or '(nowhere)'}, "
                f"expected {' -> '.join(expected)}"
            )

    def assert_terminal_once(self, task: str) -> str:
        """Assert the task reached exactly one terminal status, as its last; return it."""
        statuses = self.statuses(task)
        terminal = [s for s in statuses if TaskStatus(s) in TERMINAL]
        if len(terminal) != 1 or statuses[-1] != terminal[0]:
            raise self.error(
                f"{self.alias(task)} should end in exactly one terminal status, went "
                f"{' -> '.join(statuses) or '(nowhere)'}"
            )
        return terminal[0]

    def assert_all_answered(self) -> None:
        """Assert every request the server received got its response."""
        left = self.unanswered_requests()
        if left:
            listed = ", ".join(f"{m.get('method')} (id {m.get('id')!r})" for m in left)
            raise self.error(f"requests never answered: {listed}")

    def assert_no_running_actors(self) -> None:
        left = self.running_actors()
        if left:
            raise self.error(f"actors still running: {', '.join(left)}")


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _current_time() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # recorded outside a Trio run
        return 0.0
