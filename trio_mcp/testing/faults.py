"""Fault injection on the wire: a link between client and server that can drop, delay and
reorder deliveries.

The harness joins client and server through a :class:`Link` (two in-memory pipes and a pump
for each direction). A :class:`Faults` plan tells it what to do to each delivery:

>>> faults = Faults().drop_after(3, direction="out").delay(2.0, match="notifications/progress")

Directions are named from the server's side, like the trace's ``message.in`` / ``message.out``:
``"in"`` is client → server, ``"out"`` is server → client.

A delayed message is held for its delay while later messages pass it, which reorders it
after them; that is what a transport with several streams (Streamable HTTP) may do to
messages that are not in a request/response relation. ``ordered=True`` keeps the order
instead (the whole direction stalls, like a slow pipe).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Literal

import attrs
import trio

from ..protocol import jsonrpc
from .trace import Trace

__all__ = ["Delivery", "Direction", "Faults", "Link", "Pipe", "ToolFault", "pipe_pair"]

Direction = Literal["in", "out", "both"]
Matcher = Callable[["Delivery"], bool]


@attrs.frozen
class Delivery:
    """One message crossing the link, as fault rules see it."""

    direction: Literal["in", "out"]
    number: int
    """1-based count of messages in this direction on this link."""
    overall: int
    """1-based count of messages in both directions on this link."""
    message: dict[str, Any]
    answers: str | None = None
    """For a response (or error response): the method of the request it answers."""

    @property
    def method(self) -> str | None:
        """The method of a request or notification, or :attr:`answers` for a response."""
        method = self.message.get("method")
        return method if isinstance(method, str) else self.answers

    @property
    def kind(self) -> Literal["request", "notification", "response", "error"]:
        if "method" in self.message:
            return "request" if "id" in self.message else "notification"
        return "error" if "error" in self.message else "response"


def _matcher(match: str | Matcher | None) -> Matcher:
    if match is None:
        return lambda d: True
    if isinstance(match, str):
        name = match
        return lambda d: d.method == name
    return match


def _in_direction(direction: Direction, actual: str) -> bool:
    return direction == "both" or direction == actual


@attrs.frozen
class _Drop:
    after: int
    direction: Direction


@attrs.frozen
class _Delay:
    seconds: float
    direction: Direction
    match: Matcher
    times: int | None
    ordered: bool


@attrs.frozen
class ToolFault:
    """Make ``tool`` raise ``error``: at its ``at_progress``-th ``ctx.report_progress`` call (the
    exception comes out of that call, inside the tool), or when its work reaches its
    ``at_checkpoint``-th checkpoint (the tool is cancelled there, its cleanup runs, and the call
    then raises ``error`` as if the tool had)."""

    tool: str
    error: BaseException
    at_progress: int | None = None
    at_checkpoint: int | None = None


@attrs.define
class Faults:
    """A fault plan: what the harness does to deliveries and tools. Methods chain."""

    drops: list[_Drop] = attrs.Factory(list)
    delays: list[_Delay] = attrs.Factory(list)
    tool_faults: list[ToolFault] = attrs.Factory(list)

    def drop_after(self, n: int, *, direction: Direction = "both") -> Faults:
        """Drop the connection right after the ``n``-th message (in ``direction``) is delivered;
        ``n=0`` drops it before anything crosses."""
        self.drops.append(_Drop(n, direction))
        return self

    def delay(
        self,
        seconds: float,
        *,
        match: str | Matcher | None = None,
        direction: Direction = "out",
        times: int | None = None,
        ordered: bool = False,
    ) -> Faults:
        """Deliver matching messages ``seconds`` later (mock time). ``match`` is a method name
        (for a response: the method of its request) or a predicate on :class:`Delivery`;
        ``times`` limits how many messages are delayed. Unless ``ordered``, later messages
        overtake a delayed one."""
        self.delays.append(_Delay(seconds, direction, _matcher(match), times, ordered))
        return self

    def reorder(
        self, match: str | Matcher, *, direction: Direction = "out", by: float = 1e-3, times: int | None = 1
    ) -> Faults:
        """Let messages sent after the matching one overtake it: it is delayed by ``by``
        seconds (a mock millisecond by default), once unless ``times`` says otherwise."""
        return self.delay(by, match=match, direction=direction, times=times)

    def tool_raises(
        self,
        tool: str,
        error: BaseException,
        *,
        at_progress: int | None = None,
        at_checkpoint: int | None = None,
    ) -> Faults:
        """Make a tool raise ``error`` at a chosen step (see :class:`ToolFault`)."""
        if (at_progress is None) == (at_checkpoint is None):
            raise ValueError("give exactly one of at_progress and at_checkpoint")
        self.tool_faults.append(ToolFault(tool, error, at_progress, at_checkpoint))
        return self

    def for_tool(self, tool: str) -> list[ToolFault]:
        return [f for f in self.tool_faults if f.tool == tool]


# -- the pipes and the link ---------------------------------------------------------------------


class Pipe:
    """One end of an in-memory connection that can also be closed synchronously."""

    def __init__(
        self, send: trio.MemorySendChannel[bytes], receive: trio.MemoryReceiveChannel[bytes]
    ) -> None:
        self._send = send
        self._receive = receive

    async def send(self, message: bytes) -> None:
        try:
            await self._send.send(message)
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise trio.BrokenResourceError("peer closed") from exc

    async def receive(self) -> jsonrpc.Received:
        """The next message, parsed (what a client or server end reads)."""
        return jsonrpc.read(await self.receive_bytes())

    async def receive_bytes(self) -> bytes:
        """The next message as sent (what the link's pump moves)."""
        try:
            return await self._receive.receive()
        except trio.ClosedResourceError as exc:
            raise trio.EndOfChannel from exc

    def close(self) -> None:
        self._send.close()
        self._receive.close()

    async def aclose(self) -> None:
        self.close()
        await trio.lowlevel.checkpoint()


def pipe_pair() -> tuple[Pipe, Pipe]:
    """Two connected :class:`Pipe` ends with unbounded buffers."""
    a_send, b_receive = trio.open_memory_channel[bytes](float("inf"))
    b_send, a_receive = trio.open_memory_channel[bytes](float("inf"))
    return Pipe(a_send, a_receive), Pipe(b_send, b_receive)


class Link:
    """Client ⇄ link ⇄ server. :attr:`client_transport` and :attr:`server_transport` are the
    ends to give to the client and the server; :meth:`run` pumps between them."""

    def __init__(self, name: str, trace: Trace, faults: Faults | None = None) -> None:
        self.name = name
        self.trace = trace
        self.faults = faults if faults is not None else Faults()
        self.client_transport, self._client_end = pipe_pair()
        self._server_end, self.server_transport = pipe_pair()
        self.counts: dict[str, int] = {"in": 0, "out": 0}
        self.dropped = False
        self._delayed: dict[int, int] = {}
        self._methods: dict[Any, str] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            if any(d.after == 0 for d in self.faults.drops):
                self.drop("drop_after(0)")
            nursery.start_soon(self._pump, "in", self._client_end, self._server_end)
            nursery.start_soon(self._pump, "out", self._server_end, self._client_end)
            task_status.started()

    def drop(self, reason: str = "dropped by the test") -> None:
        """Cut the connection now (synchronous): both peers see it closed."""
        if self.dropped:
            return
        self.dropped = True
        self.trace.record("fault.drop", {"link": self.name, "reason": reason})
        self._client_end.close()
        self._server_end.close()

    def _close(self) -> None:
        # One peer hung up: pass it on to the other, as a real connection would.
        self._client_end.close()
        self._server_end.close()

    async def _pump(self, direction: Literal["in", "out"], source: Pipe, dest: Pipe) -> None:
        while True:
            try:
                data = await source.receive_bytes()
            except (trio.EndOfChannel, trio.BrokenResourceError, trio.ClosedResourceError):
                break
            delivery = self._delivery(direction, data)
            delay = self._delay_for(delivery)
            if delay is not None and not delay.ordered:
                assert self._nursery is not None
                self.trace.record(
                    "fault.delay",
                    {
                        "link": self.name,
                        "direction": direction,
                        "number": delivery.number,
                        "by": delay.seconds,
                    },
                )
                self._nursery.start_soon(self._deliver_later, dest, data, delay.seconds, delivery)
                continue
            if delay is not None:
                self.trace.record(
                    "fault.delay",
                    {
                        "link": self.name,
                        "direction": direction,
                        "number": delivery.number,
                        "by": delay.seconds,
                    },
                )
                await trio.sleep(delay.seconds)
            await self._deliver(dest, data, delivery)
        self._close()

    async def _deliver_later(self, dest: Pipe, data: bytes, seconds: float, delivery: Delivery) -> None:
        await trio.sleep(seconds)
        await self._deliver(dest, data, delivery)

    async def _deliver(self, dest: Pipe, data: bytes, delivery: Delivery) -> None:
        if self.dropped:
            return
        try:
            await dest.send(data)
        except trio.BrokenResourceError:
            return
        for rule in self.faults.drops:
            if not _in_direction(rule.direction, delivery.direction):
                continue
            count = delivery.overall if rule.direction == "both" else delivery.number
            if count == rule.after:
                self.drop(f"drop_after({rule.after}, direction={rule.direction!r})")

    def _delivery(self, direction: Literal["in", "out"], data: bytes) -> Delivery:
        self.counts[direction] += 1
        try:
            message = json.loads(data)
        except ValueError:
            message = None
        if not isinstance(message, dict):
            message = {}
        answers: str | None = None
        if "method" in message and "id" in message and direction == "in":
            self._methods[message["id"]] = str(message["method"])
        elif "method" not in message and direction == "out":
            answers = self._methods.pop(message.get("id"), None)
        return Delivery(
            direction, self.counts[direction], self.counts["in"] + self.counts["out"], message, answers
        )

    def _delay_for(self, delivery: Delivery) -> _Delay | None:
        for index, rule in enumerate(self.faults.delays):
            if not _in_direction(rule.direction, delivery.direction) or not rule.match(delivery):
                continue
            used = self._delayed.get(index, 0)
            if rule.times is not None and used >= rule.times:
                continue
            self._delayed[index] = used + 1
            return rule
        return None
