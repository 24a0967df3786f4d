"""Answering the server's ``elicitation/create`` requests at the terminal (``trio-mcp call``).

The server's message is shown on stderr, then each property of its flat ``requestedSchema`` is
asked in turn (string, number, integer, boolean, single- and multi-select enums, per the MCP
elicitation schema subset), checked, and asked again until it fits:

- Enter on an empty answer takes the ``default``, or skips an optional property;
- **Ctrl-D** (end of input) *declines* the request;
- **Ctrl-C** *cancels* (dismisses) the request: only the question, not the command or its task.

While a question is open, the live progress display is paused (its last frame stays above the
prompt) and the other messages of the command wait. Reading stdin never blocks Trio: lines are
read in a worker thread (``trio.to_thread.run_sync``) that polls, so a cancelled question does
not leave a thread behind eating the next answer.

When stdin is not a terminal (a script), answers are read from it one line each, the same way,
and echoed after their prompt; at the end of input the request is declined.
"""

from __future__ import annotations

import datetime
import enum
import json
import math
import os
import re
import select
import sys
import threading
import webbrowser
from collections.abc import Awaitable, Callable
from typing import Any, TextIO
from urllib.parse import urlparse

import attrs
import trio
from rich.console import Console
from rich.text import Text

from ..protocol.messages import RELATED_TASK_KEY, ElicitRequestParams, ElicitResult, ElicitUrlRequestParams
from .render import LiveDisplays
from .runner import Interrupts

__all__ = ["Choice", "Field", "LineReader", "TerminalElicitor", "form_fields"]

_TRUE = frozenset({"y", "yes", "true", "t", "1", "on"})
_FALSE = frozenset({"n", "no", "false", "f", "0", "off"})
_EMAIL = re.compile(r"[^@\s]+@[^@\s]+\.[^@\s]+")
_FORMATS = {"email": "email address", "uri": "URI", "date": "date, YYYY-MM-DD", "date-time": "ISO date-time"}


class Skip(enum.Enum):
    """What an answer may stand for besides a value."""

    OMIT = "omit"  # an optional property left empty: not in the content
    DECLINE = "decline"  # end of input (Ctrl-D)


# ------------------------------------------------------------------------------- the form


@attrs.frozen
class Choice:
    value: Any
    title: str | None = None

    @property
    def label(self) -> str:
        return self.title if self.title is not None else _show(self.value)


def _show(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def _choices(schema: dict[str, Any]) -> tuple[Choice, ...]:
    """The options of an enum schema: ``oneOf``/``anyOf`` of ``{const, title}``, or ``enum``
    (with the legacy ``enumNames`` as titles)."""
    options = schema.get("oneOf") or schema.get("anyOf")
    if isinstance(options, list) and options and all(isinstance(o, dict) and "const" in o for o in options):
        return tuple(
            Choice(o["const"], str(o["title"]) if o.get("title") is not None else None) for o in options
        )
    values = schema.get("enum")
    if isinstance(values, list) and values:
        names = schema.get("enumNames")
        if isinstance(names, list) and len(names) == len(values):
            return tuple(Choice(v, str(n)) for v, n in zip(values, names, strict=True))
        return tuple(Choice(v) for v in values)
    return ()


@attrs.frozen
class Field:
    """One property of a requested schema, and how to ask for it.

    ``kind`` is ``string``, ``number``, ``integer``, ``boolean``, ``choice`` (a single-select
    enum), ``multi`` (an array of enum values) or ``json`` (anything else: typed as JSON).
    """

    name: str
    schema: dict[str, Any]
    required: bool
    kind: str
    choices: tuple[Choice, ...] = ()

    @classmethod
    def of(cls, name: str, schema: Any, required: bool) -> Field:
        schema = schema if isinstance(schema, dict) else {}
        kind = schema.get("type")
        if kind == "array":
            items = schema.get("items")
            choices = _choices(items) if isinstance(items, dict) else ()
            return cls(name, schema, required, "multi" if choices else "json", choices)
        choices = _choices(schema)
        if choices:
            return cls(name, schema, required, "choice", choices)
        if kind in ("string", "number", "integer", "boolean"):
            return cls(name, schema, required, kind)
        return cls(name, schema, required, "json")

    @property
    def label(self) -> str:
        title = self.schema.get("title")
        return str(title) if title else self.name

    @property
    def titled(self) -> bool:
        return any(choice.title is not None for choice in self.choices)

    # -- asking -----------------------------------------------------------------------------
    def option_lines(self) -> list[Text]:
        """The numbered options of a titled enum, shown before its prompt."""
        if not self.titled:
            return []
        return [
            Text.assemble(f"    {i}) ", (choice.label, "bold"), (f" = {_show(choice.value)}", "dim"))
            for i, choice in enumerate(self.choices, 1)
        ]

    def prompt(self) -> Text:
        """``  answer (Your answer): ``, with what is expected and the default."""
        text = Text("  ")
        text.append(self.label, style="bold")
        description = self.schema.get("description")
        if description and str(description) != self.label:
            text.append(f" ({description})", style="dim")
        for hint in self._hints():
            text.append(" ")
            text.append(hint, style="cyan")
        text.append(": ")
        return text

    def _hints(self) -> list[str]:
        """``[choices]`` to pick from, then one ``(...)`` of what is expected."""
        s = self.schema
        hints: list[str] = []
        details: list[str] = []
        default = s.get("default")
        if self.kind == "boolean":
            hints.append("[Y/n]" if default is True else "[y/N]" if default is False else "[y/n]")
        elif self.kind in ("choice", "multi"):
            listed = f"1-{len(self.choices)}" if self.titled else "/".join(c.label for c in self.choices)
            hints.append(f"[{listed}, comma-separated]" if self.kind == "multi" else f"[{listed}]")
            items = self._bounds("minItems", "maxItems", "")
            if items:
                details.append(f"choose {items}")
        elif self.kind in ("number", "integer"):
            bounds = self._bounds("minimum", "maximum", "")
            details.append(f"{self.kind} {bounds}" if bounds else self.kind)
        elif self.kind == "string":
            if s.get("format") in _FORMATS:
                details.append(_FORMATS[s["format"]])
            length = self._bounds("minLength", "maxLength", "characters")
            if length:
                details.append(length)
        else:
            details.append("JSON")
        if default is not None and self.kind != "boolean":
            details.append(f"default: {self._default_label(default)}")
        elif default is None and not self.required:
            details.append("optional")
        if details:
            hints.append(f"({', '.join(details)})")
        return hints

    def _default_label(self, default: Any) -> str:
        if self.kind == "choice":
            return next((c.label for c in self.choices if c.value == default), _show(default))
        if self.kind == "multi" and isinstance(default, list):
            return ", ".join(next((c.label for c in self.choices if c.value == v), _show(v)) for v in default)
        return _show(default)

    def _limit(self, key: str) -> int | float | None:
        """A numeric constraint of the schema (anything else is ignored)."""
        value = self.schema.get(key)
        return value if isinstance(value, int | float) and not isinstance(value, bool) else None

    def _bounds(self, low_key: str, high_key: str, unit: str) -> str:
        """``from 1 to 10 characters``, ``at least 1``, ... (empty without constraints)."""
        low, high = self._limit(low_key), self._limit(high_key)
        unit = f" {unit}" if unit else ""
        if low is not None and high is not None:
            return f"from {low:g} to {high:g}{unit}" if low != high else f"exactly {low:g}{unit}"
        if low is not None:
            return f"at least {low:g}{unit}"
        if high is not None:
            return f"at most {high:g}{unit}"
        return ""

    # -- checking ---------------------------------------------------------------------------
    def answer(self, text: str) -> Any:
        """The value for what the user typed (stripped of its newline), :attr:`Skip.OMIT`, or
        a ValueError saying what is wrong."""
        if text == "" or (not text.strip() and self.kind != "string"):
            if "default" in self.schema:
                return self.schema["default"]
            if not self.required:
                return Skip.OMIT
            if self.kind == "multi":
                return self._check_items([])
            raise ValueError("an answer is required")
        if self.kind == "string":
            return self._check_string(text)
        text = text.strip()
        if self.kind in ("number", "integer"):
            return self._check_number(text)
        if self.kind == "boolean":
            if text.lower() in _TRUE:
                return True
            if text.lower() in _FALSE:
                return False
            raise ValueError(f"{text!r} is not yes or no: answer y or n")
        if self.kind == "choice":
            return self._pick(text)
        if self.kind == "multi":
            picked: list[Any] = []
            for part in text.split(","):
                if part.strip():
                    value = self._pick(part.strip())
                    if value not in picked:
                        picked.append(value)
            return self._check_items(picked)
        try:
            return json.loads(text)
        except ValueError:
            raise ValueError(f'{text!r} is not JSON (quote strings: "text")') from None

    def _check_string(self, text: str) -> str:
        s = self.schema
        low, high = self._limit("minLength"), self._limit("maxLength")
        if (low is not None and len(text) < low) or (high is not None and len(text) > high):
            raise ValueError(
                f"must be {self._bounds('minLength', 'maxLength', 'characters')}, got {len(text)}"
            )
        kind = s.get("format")
        valid = True
        if kind == "email":
            valid = _EMAIL.fullmatch(text) is not None
        elif kind == "uri":
            parsed = urlparse(text)
            valid = bool(parsed.scheme) and bool(parsed.netloc or parsed.path)
        elif kind in ("date", "date-time"):
            try:
                if kind == "date":
                    datetime.date.fromisoformat(text)
                else:
                    datetime.datetime.fromisoformat(text)
            except ValueError:
                valid = False
        if not valid:
            raise ValueError(f"{text!r} is not a valid {_FORMATS[str(kind)]}")
        pattern = s.get("pattern")
        if isinstance(pattern, str):
            try:
                matched = re.search(pattern, text) is not None
            except re.error:
                matched = True  # a pattern Python cannot read: the server will judge
            if not matched:
                raise ValueError(f"{text!r} does not match the pattern {pattern}")
        return text

    def _check_number(self, text: str) -> int | float:
        number: int | float
        try:
            number = int(text)
        except ValueError:
            try:
                number = float(text)
            except ValueError:
                raise ValueError(f"{text!r} is not a number") from None
            if not math.isfinite(number):
                raise ValueError(f"{text!r} is not a finite number") from None
            if self.kind == "integer":
                if not number.is_integer():
                    raise ValueError(f"{text!r} is not a whole number") from None
                number = int(number)
        low, high = self._limit("minimum"), self._limit("maximum")
        if (low is not None and number < low) or (high is not None and number > high):
            raise ValueError(f"must be {self._bounds('minimum', 'maximum', '')}, got {text}")
        return number

    def _pick(self, text: str) -> Any:
        for choice in self.choices:  # the value exactly as the server spells it
            if _show(choice.value) == text:
                return choice.value
        if text.isdigit() and 1 <= int(text) <= len(self.choices):
            return self.choices[int(text) - 1].value
        folded = text.casefold()
        matches = [c for c in self.choices if folded in (c.label.casefold(), _show(c.value).casefold())]
        if len(matches) == 1:
            return matches[0].value
        listed = ", ".join(c.label for c in self.choices)
        raise ValueError(
            f"{text!r} is not one of the choices: {listed} (or their number, 1-{len(self.choices)})"
        )

    def _check_items(self, picked: list[Any]) -> list[Any]:
        low, high = self._limit("minItems"), self._limit("maxItems")
        if (low is not None and len(picked) < low) or (high is not None and len(picked) > high):
            raise ValueError(f"choose {self._bounds('minItems', 'maxItems', '')}, got {len(picked)}")
        return picked


def form_fields(requested_schema: dict[str, Any]) -> list[Field]:
    """The properties of a flat ``requestedSchema``, in order."""
    properties = requested_schema.get("properties") if isinstance(requested_schema, dict) else None
    required = requested_schema.get("required") if isinstance(requested_schema, dict) else None
    names = set(required) if isinstance(required, list) else set()
    if not isinstance(properties, dict):
        return []
    return [Field.of(str(name), schema, name in names) for name, schema in properties.items()]


# ------------------------------------------------------------------------------ reading


class LineReader:
    """Lines of ``stream`` (stdin), read without blocking Trio.

    When the stream has a file descriptor, a worker thread waits on it with ``select`` in short
    slices, so a cancelled read ends its thread promptly instead of consuming the next line.
    On a terminal, Ctrl-D reads as end of input for that question only; on a pipe or file, the
    end of input is final. Streams without a descriptor (tests) are read with ``readline``.
    """

    POLL = 0.05

    def __init__(self, stream: TextIO | None) -> None:
        self.stream = stream  # None: no stdin at all (closed), always at its end
        self.fd: int | None = None
        self.interactive = False
        if stream is not None:
            try:
                self.interactive = stream.isatty()
                if sys.platform != "win32":  # no select() on pipes there: plain readline
                    self.fd = stream.fileno()
            except (OSError, ValueError):  # io.UnsupportedOperation: no descriptor (tests)
                self.fd = None
        self._buffer = b""
        self._eof = False
        self._lock = threading.Lock()

    async def readline(self) -> str | None:
        """The next line (with its newline, if it had one), or None at the end of input."""
        if self.stream is None:
            return None
        if self.fd is None:
            line: str = await trio.to_thread.run_sync(self.stream.readline, abandon_on_cancel=True)
            return line or None
        stop = threading.Event()
        try:
            return await trio.to_thread.run_sync(self._read, self.fd, stop, abandon_on_cancel=True)
        finally:
            stop.set()

    def _read(self, fd: int, stop: threading.Event) -> str | None:
        with self._lock:
            while not stop.is_set():
                newline = self._buffer.find(b"\n")
                if newline >= 0:
                    line, self._buffer = self._buffer[: newline + 1], self._buffer[newline + 1 :]
                    return line.decode("utf-8", "replace")
                if self._eof:
                    rest, self._buffer = self._buffer, b""
                    return rest.decode("utf-8", "replace") if rest else None
                ready, _, _ = select.select([fd], [], [], self.POLL)
                if not ready or stop.is_set():
                    continue
                try:
                    data = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                except OSError:  # e.g. EIO: the terminal went away
                    data = b""
                if self.interactive:
                    # A terminal hands over one line per read: Enter, or Ctrl-D after some text
                    # (no newline), or Ctrl-D alone (nothing): the end of input, this time only.
                    return (self._buffer + data).decode("utf-8", "replace") or None
                if not data:
                    self._eof = True
                self._buffer += data
            return None


# ----------------------------------------------------------------------------- the handler


class TerminalElicitor:
    """An ``on_elicit`` handler for :func:`~trio_mcp.cli.runner.open_target` that asks the user.

    Questions are asked one at a time (concurrent requests wait their turn), inside
    ``displays.pause()``. With ``ready=False`` questions wait for :meth:`open` (so that they
    come after what the command prints first). :meth:`withdraw` ends an open question (the
    call is over: nobody needs the answer) and answers later requests with ``cancel``.
    """

    def __init__(
        self,
        err: Console,
        *,
        displays: LiveDisplays | None = None,
        interrupts: Interrupts | None = None,
        stdin: TextIO | None = None,
        ready: bool = True,
    ) -> None:
        self.err = err
        self.displays = displays if displays is not None else LiveDisplays()
        self.interrupts = interrupts
        self.reader = LineReader(stdin if stdin is not None else sys.stdin)
        self._lock = trio.Lock()
        self._ready = trio.Event()
        if ready:
            self._ready.set()
        self._scope: trio.CancelScope | None = None
        self._withdrawn = False
        self._mid_line = False

    @property
    def interactive(self) -> bool:
        return self.reader.interactive

    def open(self) -> None:
        """Let questions be asked from now on."""
        self._ready.set()

    async def withdraw(self) -> None:
        """End the open question, if any (it is answered ``cancel``), and wait until it is."""
        self._withdrawn = True
        self._ready.set()
        if self._scope is not None:
            self._scope.cancel()
        async with self._lock:
            pass

    async def __call__(self, params: ElicitRequestParams) -> ElicitResult:
        """A form-mode elicitation: each field asked in turn."""
        return await self._turn(lambda: self._form(params))

    async def url(self, params: ElicitUrlRequestParams) -> ElicitResult:
        """A URL-mode elicitation (the ``on_elicit_url`` handler): the message and the whole
        URL are shown, and the URL is opened in the user's browser only if they say yes
        (``accept``; no, or the end of input: ``decline``). The client never fetches it; a URL
        that is not ``http(s)://`` is shown and declined."""
        return await self._turn(lambda: self._visit(params))

    async def _turn(self, asking: Callable[[], Awaitable[ElicitResult]]) -> ElicitResult:
        """Ask once it is this question's turn (one at a time, once :meth:`open`)."""
        await self._ready.wait()
        async with self._lock:
            if self._withdrawn:
                return ElicitResult(action="cancel")
            with self.displays.pause():
                return await self._ask(asking)

    async def _ask(self, asking: Callable[[], Awaitable[ElicitResult]]) -> ElicitResult:
        scope = trio.CancelScope()
        self._scope = scope
        interrupts = self.interrupts if self.interactive else None
        if interrupts is not None:
            interrupts.prompt = scope.cancel
        try:
            with scope:
                return await asking()
        finally:
            self._scope = None
            if interrupts is not None and interrupts.prompt == scope.cancel:
                interrupts.prompt = None
            self._end_line()
        if self._withdrawn:
            self._note("withdrawn: the call has ended", "dim")
        else:
            self._note("cancelled this request; the call goes on (Ctrl-C again stops it)", "magenta")
        return ElicitResult(action="cancel")

    async def _form(self, params: ElicitRequestParams) -> ElicitResult:
        related = (params.meta or {}).get(RELATED_TASK_KEY)
        task_id = related.get("taskId") if isinstance(related, dict) else None
        who = f"Task {task_id}" if task_id else "The server"
        self.err.print(Text.assemble(("? ", "bold yellow"), (who, "bold"), " asks: ", params.message))
        if self.interactive:
            self.err.print(Text("  Answer each question; Ctrl-D declines, Ctrl-C cancels.", style="dim"))
        fields = form_fields(params.requested_schema)
        if not fields:
            fields = [Field("accept", {"title": "Press Enter to accept"}, False, "confirm")]
        content: dict[str, Any] = {}
        for field in fields:
            value = await self._ask_field(field)
            if value is Skip.DECLINE:
                self._note("declined", "yellow")
                return ElicitResult(action="decline")
            if value is not Skip.OMIT and field.kind != "confirm":
                content[field.name] = value
        return ElicitResult(action="accept", content=content)

    async def _visit(self, params: ElicitUrlRequestParams) -> ElicitResult:
        related = (params.meta or {}).get(RELATED_TASK_KEY)
        task_id = related.get("taskId") if isinstance(related, dict) else None
        who = f"Task {task_id}" if task_id else "The server"
        self.err.print(
            Text.assemble(("? ", "bold yellow"), (who, "bold"), " asks you to open a page: ", params.message)
        )
        target = urlparse(params.url)
        self.err.print(Text.assemble("  ", (params.url, "underline")))
        if target.scheme not in ("http", "https") or not target.hostname:
            self._note("not an http(s) URL: declined", "yellow")
            return ElicitResult(action="decline")
        self.err.print(Text.assemble("  (on ", (target.hostname, "bold"), ")"))
        self.err.print(Text.assemble("  ", ("Open it in your browser? [y/N]", "bold"), ": "), end="")
        self._mid_line = True
        raw = await self.reader.readline()
        if raw is not None and not self.interactive:
            self.err.print(Text(raw.rstrip("\r\n")), end="")  # the transcript shows what was answered
        self._end_line()
        if raw is None or raw.strip().lower() not in ("y", "yes"):
            self._note("declined", "yellow")
            return ElicitResult(action="decline")
        opened = await trio.to_thread.run_sync(webbrowser.open, params.url)
        if not opened:
            self._note("no browser could be opened here: open the URL above yourself", "yellow")
        return ElicitResult(action="accept")

    async def _ask_field(self, field: Field) -> Any:
        for line in field.option_lines():
            self.err.print(line)
        prompt = (
            Text.assemble("  ", (field.label, "bold"), ": ") if field.kind == "confirm" else field.prompt()
        )
        while True:
            self.err.print(prompt, end="")
            self._mid_line = True
            raw = await self.reader.readline()
            if raw is None:
                if not self.interactive:
                    self.err.print(Text("(end of input)", style="dim"), end="")
                self._end_line()
                return Skip.DECLINE
            text = raw.rstrip("\r\n")
            if self.interactive:
                self._mid_line = not raw.endswith("\n")  # Ctrl-D after some text: no newline
            else:
                self.err.print(Text(text), end="")  # the transcript shows what was answered
            self._end_line()
            if field.kind == "confirm":
                return Skip.OMIT
            try:
                return field.answer(text)
            except ValueError as exc:
                hint = "; Ctrl-D declines" if self.interactive and "required" in str(exc) else ""
                self.err.print(Text.assemble(("  ✘ ", "bold red"), str(exc), hint))

    def _end_line(self) -> None:
        if self._mid_line:
            self._mid_line = False
            self.err.print()

    def _note(self, what: str, style: str) -> None:
        self.err.print(Text.assemble(("  → ", "bold"), (what, style)))
