"""One request's life in the runtime: admitted → answered → written, in one context.

Each request a session (or :meth:`~trio_mcp.actors._oneshot.Stateless.serve_one`) takes gets an
:class:`InboundRequest`. Work that waits — a call in a Trio task of its own, the tool it runs —
runs in the request's context (:meth:`InboundRequest.run`), in which :data:`current_request`
is the request itself, so one request's work can carry a trace span or any context variable.

Its stages are reported, in order and once each, to the server's :class:`RequestObserver`
if it has one (telemetry hooks in here): admitted, answered (with the JSON-RPC error code, if
it failed) and written (handed to the transport); a request that gets no answer (cancelled by
``notifications/cancelled``, or its client gone) ends dropped instead.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from ..protocol import jsonrpc
from ..protocol.commands import Serving

__all__ = ["Hidden", "InboundRequest", "RequestObserver", "current_request"]


class RequestObserver(Protocol):
    """Told of each request's stages, in order, in the task that reached them (cheap calls
    only: they run on the connection's hot path)."""

    def admitted(self, request: InboundRequest) -> None: ...
    def answered(self, request: InboundRequest, error: int | None) -> None: ...
    def written(self, request: InboundRequest) -> None: ...
    def dropped(self, request: InboundRequest) -> None: ...


class Hidden(Protocol):
    """A server-directed call's task while no client may know of it (see ``HiddenTask``)."""

    done: bool

    def queued(self) -> None: ...
    def written(self) -> None: ...
    def remove(self) -> None: ...


T = TypeVar("T")

current_request: contextvars.ContextVar[InboundRequest | None] = contextvars.ContextVar(
    "trio_mcp_current_request", default=None
)
"""The request being served, in its own context (None outside of one)."""

ADMITTED, ANSWERED, WRITTEN, DROPPED = "admitted", "answered", "written", "dropped"


class InboundRequest:
    """One request, from admission to its answer's write.

    ``stage`` goes ``admitted`` → ``answered`` → ``written`` (or ``dropped`` from either of
    the first two); each stage is reported once to ``observer``. The request is itself the
    ``on_written`` callback of its answer when anything waits for that write (calling it
    marks it written, then runs :attr:`after_written`): one object per request, nothing more
    on the hot path.
    """

    __slots__ = ("after_written", "hidden", "message", "observer", "serving", "stage")

    def __init__(self, message: jsonrpc.Request, observer: RequestObserver | None = None) -> None:
        self.message = message
        self.serving: Serving | None = None
        """How it is served, once its dialect has read it (None: refused before that)."""
        self.observer = observer
        self.stage = ADMITTED
        self.after_written: Callable[[], None] | None = None
        """Run once the answer is handed to the transport (e.g. release the request's slot)."""
        self.hidden: Hidden | None = None
        """A server-directed call's task, while no client may know of it."""
        if observer is not None:
            observer.admitted(self)

    @property
    def id(self) -> jsonrpc.RequestId:
        return self.message.id

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Call ``fn(*args)`` in this request's context: a copy of the caller's in which
        :data:`current_request` is this request (a Trio task ``fn`` spawns, e.g. by
        ``nursery.start_soon``, starts from a copy of it and keeps it for its life). The
        request does not keep the context: that would be a reference cycle holding the
        request, its arguments included, until the cyclic collector ran."""
        context = contextvars.copy_context()
        context.run(current_request.set, self)
        return context.run(fn, *args)

    def queue(
        self,
        post: Callable[[bytes, Callable[[], None] | None, jsonrpc.RequestId], bool],
        data: bytes,
        code: int | None,
    ) -> bool:
        """Answer: queue ``data`` with ``post`` (the request is its ``on_written``), marking
        it answered (``code``: the error it carries); False, and dropped, if ``post``
        refused it (the connection closed)."""
        observer = self.observer
        if self.stage is ADMITTED:
            self.stage = ANSWERED
            if observer is not None:
                observer.answered(self, code)
        # Its own on_written only when something waits for the write (nothing, for most
        # quick answers: no callback to run then).
        needed = observer is not None or self.after_written is not None or self.hidden is not None
        if post(data, self if needed else None, self.message.id):
            return True
        self.after_written = None
        self.dropped()
        return False

    def answered(self, code: int | None = None) -> None:
        """The answer is queued (``code``: the JSON-RPC error it carries, if any)."""
        if self.stage is ADMITTED:
            self.stage = ANSWERED
            if self.observer is not None:
                self.observer.answered(self, code)

    def written(self) -> None:
        """The answer was handed to the transport: then :attr:`after_written` runs."""
        if self.stage is ANSWERED:
            self.stage = WRITTEN
            if self.observer is not None:
                self.observer.written(self)
        after = self.after_written
        if after is not None:
            self.after_written = None
            after()
        hidden = self.hidden
        if hidden is not None:
            hidden.written()

    __call__ = written

    def dropped(self) -> None:
        """No answer will be written (cancelled, or the client is gone)."""
        if self.stage in (ADMITTED, ANSWERED):
            self.stage = DROPPED
            if self.observer is not None:
                self.observer.dropped(self)
