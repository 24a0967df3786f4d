"""Middleware: ordered async hooks around every request and every tool call of a server.

Two kinds, registered on a :class:`~trio_mcp.Server` in the order they should run (the first
registered is the outermost: it sees a request first and its answer last):

- **request middleware**, around each request a client sends, in both protocol eras::

      @server.middleware
      async def deny_guests(request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
          if request.method == "tools/call" and request.identity is None:
              raise McpError(-32001, "sign in first")   # answered; nothing is served
          return await call_next()                      # serve it: its result

  ``await call_next()`` serves the request and returns its result (a dict), or raises the
  :class:`~trio_mcp.McpError` it is answered with. Return a result, or raise an McpError to
  answer with that error instead. A refused task creation creates no task.

- **tool middleware**, around each run of a tool whose arguments are valid, a plain call's or
  a task's (inside the task, for its whole run)::

      @server.tool_middleware
      async def audit(call: ToolCallInfo, call_next: ToolCallNext) -> Any:
          value = await call_next()    # what the tool returned (or raises what it raised)
          return value

A class bundles both: subclass :class:`Middleware`, override :meth:`~Middleware.on_request`
and/or :meth:`~Middleware.on_tool_call`, and ``server.add_middleware(instance)``. Built in:
:class:`RequestLog` (timing, and one structured log line per request) and :class:`RateLimit`
(a token bucket per caller).

An exception a middleware raises itself (not an McpError) is a bug: it is logged once, the
request is answered -32603 (a task's run fails with -32603), and the connection goes on
serving. ``call_next`` may be called once. A server without middleware serves every request
exactly as before, at no cost.
"""

from __future__ import annotations

import collections
import json
import logging
import math
from collections.abc import Collection
from typing import Any

import trio

from ..actors._middleware import (
    CallNext,
    RequestInfo,
    RequestMiddleware,
    ToolCallInfo,
    ToolCallNext,
    ToolMiddleware,
)
from ..protocol.errors import INTERNAL_ERROR, McpError

__all__ = [
    "RATE_LIMITED",
    "CallNext",
    "Middleware",
    "RateLimit",
    "RequestInfo",
    "RequestLog",
    "RequestMiddleware",
    "ToolCallInfo",
    "ToolCallNext",
    "ToolMiddleware",
]

RATE_LIMITED = -32029
"""The JSON-RPC error :class:`RateLimit` answers with: a code of the range JSON-RPC leaves to
servers (-32000 to -32099), its own so that a client can tell "slow down" from a failure
(-32603 says the server is broken, -32600 that the request is, and neither is retried sensibly);
29 after HTTP's 429 Too Many Requests. ``data.retryAfterMs`` says when a request will be let
through again."""


class Middleware:
    """Base class of a middleware with hooks of both kinds; override either or both (only the
    overridden ones are registered by :meth:`Server.add_middleware
    <trio_mcp.Server.add_middleware>`)."""

    async def on_request(self, request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        """Around each request: ``await call_next()`` serves it."""
        return await call_next()

    async def on_tool_call(self, call: ToolCallInfo, call_next: ToolCallNext) -> Any:
        """Around each run of a tool: ``await call_next()`` runs it."""
        return await call_next()


def hooks_of(middleware: Any) -> tuple[RequestMiddleware | None, ToolMiddleware | None]:
    """The request and tool hooks of what :meth:`Server.add_middleware` was given: an object
    with ``on_request`` and/or ``on_tool_call`` (a :class:`Middleware`: those it overrides), or
    an async function, which is request middleware."""
    if isinstance(middleware, Middleware):
        cls = type(middleware)
        request = middleware.on_request if cls.on_request is not Middleware.on_request else None
        tool = middleware.on_tool_call if cls.on_tool_call is not Middleware.on_tool_call else None
        return request, tool
    request = getattr(middleware, "on_request", None)
    tool = getattr(middleware, "on_tool_call", None)
    if request is not None or tool is not None:
        return request, tool
    if callable(middleware):
        return middleware, None
    raise TypeError(
        f"middleware is an async function (request, call_next) or an object with on_request or "
        f"on_tool_call, not {type(middleware).__name__}"
    )


# -- request log ------------------------------------------------------------------------------------
REQUEST_LOGGER = "trio_mcp.requests"


def _value(value: Any) -> str:
    text = str(value)
    if not text or any(c in text for c in ' ="\n') or not text.isprintable():
        return json.dumps(text)
    return text


class RequestLog(Middleware):
    """Timing and structured logging: one line per request, at INFO (``level``) on the
    ``trio_mcp.requests`` logger, once its answer is known::

        request method=tools/call tool=report id=7 era=handshake session=session-1 outcome=ok duration_ms=12.5

    ``outcome`` is ``ok``, ``tool_error`` (a tool's ``isError`` result), ``error`` (with
    ``code``, the JSON-RPC error) or ``cancelled`` (no answer: ``notifications/cancelled``, or
    the client went away); ``task`` names the task of a ``tasks/*`` request, ``identity`` an
    authenticated caller. The same fields are on the record as ``mcp_request`` (a dict) for a
    structured (JSON) formatter. Each tool run is also logged at DEBUG (``tool name=... task=...
    outcome=... duration_ms=...``): a task's run outlives the request that created it.
    Durations are on Trio's clock (a test's ``MockClock`` drives them).

    ``python server.py --log-level info`` and ``trio-mcp serve ... --log-level info`` both
    show the lines, in the same format (time, level, logger).
    """

    def __init__(self, logger: logging.Logger | str = REQUEST_LOGGER, level: int = logging.INFO) -> None:
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self.level = level

    async def on_request(self, request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        started = trio.current_time()
        try:
            result = await call_next()
        except McpError as exc:
            self._log(request, started, "error", exc.code)
            raise
        except trio.Cancelled:
            self._log(request, started, "cancelled", None)
            raise
        except Exception:
            self._log(request, started, "error", INTERNAL_ERROR)
            raise
        self._log(request, started, "tool_error" if result.get("isError") is True else "ok", None)
        return result

    def _log(self, request: RequestInfo, started: float, outcome: str, code: int | None) -> None:
        if not self.logger.isEnabledFor(self.level):
            return
        fields: dict[str, Any] = {"method": request.method}
        if request.tool is not None:
            fields["tool"] = request.tool
        if request.task_id is not None:
            fields["task"] = request.task_id
        fields["id"] = request.request_id
        fields["era"] = request.era
        if request.session_id is not None:
            fields["session"] = request.session_id
        if request.identity is not None:
            fields["identity"] = request.identity
        fields["outcome"] = outcome
        if code is not None:
            fields["code"] = code
        fields["duration_ms"] = round((trio.current_time() - started) * 1000, 3)
        line = " ".join(f"{key}={_value(value)}" for key, value in fields.items())
        self.logger.log(self.level, "request %s", line, extra={"mcp_request": fields})

    async def on_tool_call(self, call: ToolCallInfo, call_next: ToolCallNext) -> Any:
        if not self.logger.isEnabledFor(logging.DEBUG):
            return await call_next()
        started = trio.current_time()
        outcome = "error"
        try:
            value = await call_next()
            outcome = "ok"
            return value
        except trio.Cancelled:
            outcome = "cancelled"
            raise
        finally:
            fields: dict[str, Any] = {"name": call.tool}
            if call.task_id is not None:
                fields["task"] = call.task_id
            fields["outcome"] = outcome
            fields["duration_ms"] = round((trio.current_time() - started) * 1000, 3)
            line = " ".join(f"{key}={_value(value)}" for key, value in fields.items())
            self.logger.debug("tool %s", line, extra={"mcp_tool": fields})


# -- rate limit -------------------------------------------------------------------------------------
class RateLimit(Middleware):
    """A token bucket per caller: ``rate`` requests a second on average, in bursts of up to
    ``burst`` (default: one second's worth, at least 1). A request past it is answered
    :data:`RATE_LIMITED` (-32029, ``data.retryAfterMs``) and not served: no tool runs, no
    task is created; the connection goes on.

    The caller is the authenticated identity, else the client's address, else the connection
    (``key=`` chooses otherwise: a function of the :class:`RequestInfo`, returning a string, or
    None to let the request through unlimited). ``exempt`` methods are never limited: by
    default ``initialize`` (a refused handshake leaves a client nothing to retry on),
    ``ping``, and ``tasks/cancel`` (refusing a cancel would keep work running, the opposite of
    what a limit is for). At most ``max_callers`` buckets are kept, the least
    recently seen dropped first (a dropped caller starts again with a full bucket). Time is
    Trio's clock, so a test's ``MockClock`` drives the refill.
    """

    def __init__(
        self,
        rate: float,
        burst: int | None = None,
        *,
        key: Any = None,
        exempt: Collection[str] = ("initialize", "ping", "tasks/cancel"),
        max_callers: int = 10_000,
    ) -> None:
        if not rate > 0 or math.isinf(rate):
            raise ValueError(f"rate is requests per second, a positive number, not {rate!r}")
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else max(1, math.ceil(rate)))
        if self.burst < 1:
            raise ValueError(f"burst must be at least 1, not {burst!r}")
        self.key = key if key is not None else caller_of
        self.exempt = frozenset(exempt)
        self.max_callers = max_callers
        self._buckets: collections.OrderedDict[str, tuple[float, float]] = collections.OrderedDict()

    async def on_request(self, request: RequestInfo, call_next: CallNext) -> dict[str, Any]:
        if request.method not in self.exempt:
            caller = self.key(request)
            if caller is not None:
                wait = self.take(caller)
                if wait > 0:
                    retry_ms = math.ceil(wait * 1000)
                    raise McpError(
                        RATE_LIMITED,
                        f"Rate limit exceeded: retry in {retry_ms} ms",
                        {"retryAfterMs": retry_ms},
                    )
        return await call_next()

    def take(self, caller: str) -> float:
        """Take a token from ``caller``'s bucket: 0 if there was one, else the seconds until
        there is (nothing taken)."""
        now = trio.current_time()
        buckets = self._buckets
        tokens, then = buckets.pop(caller, (self.burst, now))
        tokens = min(self.burst, tokens + (now - then) * self.rate)
        wait = 0.0
        if tokens >= 1:
            tokens -= 1
        else:
            wait = (1 - tokens) / self.rate
        buckets[caller] = (tokens, now)  # the most recently seen last
        while len(buckets) > self.max_callers:
            buckets.popitem(last=False)
        return wait


def caller_of(request: RequestInfo) -> str:
    """Whom :class:`RateLimit` counts a request against by default: the authenticated
    identity, else the client's address, else the connection (its tasks' owner)."""
    if request.identity is not None:
        return "identity:" + request.identity
    if request.client is not None:
        return "client:" + request.client
    return request.owner
