"""Serving one stateless request: :meth:`Stateless.serve_one`, without a connection actor.

A 2026-07-28 request carries everything it means (its envelope), so it needs no session: it
is read by the modern dialect, served by the one dispatch table
(:mod:`trio_mcp.actors._dispatch`) in the caller's own Trio task, and answered by returning
the encoded answer. What it sends before that — progress, log messages, the notifications of
a ``subscriptions/listen`` — goes to the caller's ``send``, in order. The HTTP transport
serves every 2026-07-28 POST this way; the same request over a connection (stdio,
WebSocket) is served by that connection's session through the same table.

Guarantees:

- **The same answers as a session's**: the same handlers, the same errors (nothing raised
  but cancellation), the same rules for server-directed tasks (one is kept only if the
  answer showing it is returned).
- **Nothing outlives the call** but tasks whose answer showed them: cancel the caller (its
  client went away) and the request's work is cancelled, a hidden task removed.
- **Shutdown**: :meth:`Stateless.shutdown` cancels every request being served, each
  answered -32603 "server shutting down".
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import trio

from ..protocol import jsonrpc
from ..protocol.commands import Command, Serving, serving_of
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, ErrorValue, McpError
from ..protocol.handshake import HandshakeDialect
from ..protocol.modern import ModernDialect, ModernScope, is_modern
from ..transports.security import Caller, current_caller
from ._calls import task_support_of
from ._dispatch import (
    HANDLERS,
    Handler,
    Listener,
    Service,
    answer_from,
    answer_of,
    asked,
    asked_now,
    refused,
    request_info,
    served,
    unoffered,
    with_hooks,
)
from ._middleware import Middlewares
from ._receiver import Started, TaskReceiver
from ._request import InboundRequest, current_request
from ._requestor import TaskRequestor
from .supervisor import Remove, TaskSupervisor

__all__ = ["SHUTTING_DOWN", "Stateless"]

SHUTTING_DOWN = ErrorValue(INTERNAL_ERROR, "Server shutting down: the request was cancelled")
NOT_STATELESS = ErrorValue(INVALID_REQUEST, "Invalid request: not a stateless (2026-07-28) request")
ABANDONED = ErrorValue(INTERNAL_ERROR, "Request cancelled: its caller went away")
"""The answer of a request whose ``cancel_scope`` its caller cancelled (written to nobody)."""

Send = Callable[[bytes], bool]
"""Where a request's own notifications go (each already encoded); False if it was dropped."""


class _Exchange:
    """One stateless request as its handler sees whoever serves it (the dispatch ``Host``)."""

    connection_owned = False
    session_id = None  # no session: one stateless request

    def __init__(
        self,
        stateless: Stateless,
        owner: str,
        client: str | None,
        send: Send,
        scope: trio.CancelScope | None = None,
    ) -> None:
        self.service = stateless.service
        self.supervisor = stateless.supervisor
        self.dialect = stateless.dialect
        self.modern = stateless.modern
        self.owner = owner
        self.receiver = TaskReceiver(self, stateless.supervisor, owner, stateless.dialect, client)
        self.listeners: dict[jsonrpc.RequestId, Listener] = {}
        self.subscribed: set[str] = set()
        self.unwritten: set[str] = set()
        self.closed = False
        self.scope = scope if scope is not None else trio.CancelScope()
        self.shut_down = False
        self._send = send
        self._client_tasks: TaskRequestor | None = None

    @property
    def client_tasks(self) -> TaskRequestor:
        if self._client_tasks is None:
            self._client_tasks = TaskRequestor(self)
        return self._client_tasks

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        return self.notify_encoded(jsonrpc.encode_notification(method, params))

    def notify_encoded(self, data: bytes) -> bool:
        return not self.closed and self._send(data)

    async def send(self, data: bytes) -> None:
        await trio.lowlevel.checkpoint_if_cancelled()
        if self.closed or not self._send(data):
            raise McpError(INTERNAL_ERROR, "Internal error: the response stream is closed")

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        # The modern era asks the client by multi round-trip or through a task, never by a
        # server-to-client request.
        raise McpError(INVALID_REQUEST, f"A stateless request cannot send the client a {method} request")

    def remove_task(self, task_id: str) -> None:
        self.supervisor.remove(Remove(self.owner, task_id))

    def tagged(self, kind: str, uri: str | None) -> None:
        """Tell this request's ``subscriptions/listen`` of a list change or resource update."""
        for subscription, listener in list(self.listeners.items()):
            if uri is None and kind in listener.lists:
                self.notify(*listener.scope.tagged(subscription, f"notifications/{kind}/list_changed", {}))
            elif uri is not None and uri in listener.uris:
                self.notify(
                    *listener.scope.tagged(subscription, "notifications/resources/updated", {"uri": uri})
                )


class Stateless:
    """Serves stateless (2026-07-28) requests one at a time each, for one runtime."""

    def __init__(self, service: Service, supervisor: TaskSupervisor) -> None:
        self.service = service
        self.supervisor = supervisor
        self.dialect = HandshakeDialect()
        """Never speaks (no handshake here): the task receiver's default renderer."""
        self.modern = ModernDialect(service.info, service.instructions)
        self._tool_support = task_support_of(service.tools)
        self._serving: set[_Exchange] = set()
        self._closing = False

    def _refused(self, message: jsonrpc.Request) -> ErrorValue | tuple[Command, ModernScope, Handler]:
        """What ``message`` asks and what serves it, or the error that refuses it."""
        if self._closing:
            return SHUTTING_DOWN
        if not is_modern(message.params):
            return NOT_STATELESS
        refused = unoffered(self.service, message.method)
        if refused is not None:
            return refused
        interpreted = self.modern.interpret(message, self._tool_support)
        if isinstance(interpreted, ErrorValue):
            return interpreted
        command, scope = interpreted
        handler = HANDLERS.get((serving_of(command, modern=True), type(command)))
        if handler is None:  # no such serving in this era (tasks/result, task creation)
            return ErrorValue(INVALID_REQUEST, f"Invalid request: {message.method}")
        return command, scope, handler

    async def serve_one(
        self,
        message: jsonrpc.Request,
        *,
        owner: str,
        client: str | None = None,
        send: Send,
        caller: Caller | None = None,
        cancel_scope: trio.CancelScope | None = None,
    ) -> tuple[bytes, int | None]:
        """Serve one modern-era request in the caller's Trio task: its encoded answer, and the
        JSON-RPC error code that answer carries (None for a result).

        ``owner`` is the identity its tasks belong to (e.g. the authenticated subject, or one
        owner for every anonymous caller), ``client`` whom they count under for the
        per-client limits (its address). ``send`` takes the request's notifications, in order,
        before the answer is returned (it must not block; False: dropped). Cancel the caller
        to abandon the request: its work is cancelled. ``caller``: who makes the request, as
        its tools see it (``ctx.identity``, ``ctx.scopes``, ``ctx.headers``; a task it creates
        keeps it); default the context's :data:`~trio_mcp.transports.security.current_caller`.
        ``cancel_scope``: the (not yet entered) scope to serve in, default a new one: its owner
        may cancel it to abandon the request (e.g. its client went away) without a scope of
        its own around the call; the request's work is cancelled, it counts as dropped, and
        the answer returned (:data:`ABANDONED`) is for nobody.
        """
        request = InboundRequest(message, self.service.request_observer)
        read = self._refused(message)
        middleware = self.service.middleware_chain
        if isinstance(read, ErrorValue):
            if middleware is not None:
                return await self._refused_through(middleware, request, read, owner, client)
            request.answered(read.code)
            request.written()
            return _encoded(message.id, read), read.code
        command, scope, handler = read
        serving = request.serving = serving_of(command, modern=True)
        exchange = _Exchange(self, owner, client, send, cancel_scope)
        self._serving.add(exchange)
        token = current_request.set(request)
        caller_token = current_caller.set(caller) if caller is not None else None
        data: bytes | None = None
        error: int | None = None
        try:
            started: Any = None
            if middleware is None and (
                serving is Serving.QUERY or serving is Serving.CREATE or serving is Serving.NOW
            ):
                # Asked (or known at once), and answered from the reply: at once if it is there
                # (as a rule, with the memory store), with no cancel scope, since nothing waits.
                try:
                    started = handler(exchange, command, scope, request)
                    if not isinstance(started, Started) or started.reply.answered:
                        data, error = answer_from(request, asked_now(started), None)
                except Exception as exc:
                    data, error = answer_from(request, None, exc)
            if data is None:
                with exchange.scope:
                    if started is not None:  # its reply is on its way: awaited here
                        data, error = await answer_of(request, lambda: asked(started))
                    elif middleware is not None:
                        info = request_info(request, command, "modern", scope.version, owner, client, None)
                        hooked = with_hooks(handler, command, middleware, info)
                        inner = functools.partial(served, hooked, exchange, command, scope, request)
                        data, error = await answer_of(request, lambda: middleware.serve(info, inner))
                    else:
                        data, error = await answer_of(
                            request, lambda: handler(exchange, command, scope, request)
                        )
            if exchange.shut_down:
                data, error = _encoded(message.id, SHUTTING_DOWN), SHUTTING_DOWN.code
            elif data is None:  # the owner of cancel_scope abandoned it
                return _encoded(message.id, ABANDONED), ABANDONED.code
            request.answered(error)
            request.written()  # handed to the caller: the answer's transport
            return data, error
        finally:
            current_request.reset(token)
            if caller_token is not None:
                current_caller.reset(caller_token)
            exchange.closed = True
            self._serving.discard(exchange)
            if data is None:
                request.dropped()
            hidden = request.hidden
            if hidden is not None:
                hidden.done = True
                if data is None or error is not None:  # not shown: it goes
                    hidden.remove()
            for task_id in exchange.unwritten:  # created for an answer never handed over
                exchange.remove_task(task_id)

    async def _refused_through(
        self,
        middleware: Middlewares,
        request: InboundRequest,
        error: ErrorValue,
        owner: str,
        client: str | None,
    ) -> tuple[bytes, int | None]:
        """A request refused before any handler, answered through the middleware."""
        info = request_info(request, None, "modern", None, owner, client, None)
        try:
            data, code = await answer_of(request, lambda: middleware.serve(info, lambda: refused(error)))
        except BaseException:
            request.dropped()
            raise
        request.answered(code)
        request.written()
        return data, code

    def list_changed(self, kind: str) -> None:
        """Tell the open ``subscriptions/listen`` requests that the ``kind`` list changed."""
        for exchange in list(self._serving):
            exchange.tagged(kind, None)

    def resource_updated(self, uri: str) -> None:
        """Tell the open ``subscriptions/listen`` requests that the resource ``uri`` changed."""
        for exchange in list(self._serving):
            exchange.tagged("resources", uri)

    def shutdown(self) -> None:
        """Stop: every request being served is cancelled and answered :data:`SHUTTING_DOWN`;
        new ones are answered so at once."""
        self._closing = True
        for exchange in list(self._serving):
            exchange.shut_down = True
            exchange.scope.cancel()


def _encoded(request_id: jsonrpc.RequestId, error: ErrorValue) -> bytes:
    return jsonrpc.encode_error(request_id, error.code, error.message, error.data)
