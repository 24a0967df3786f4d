"""Context: what a running tool may do besides returning — progress, status, logging, input
(:class:`ThreadContext`: the same for a plain tool, from its worker thread)."""

from __future__ import annotations

import functools
import threading
import uuid
import weakref
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import trio

from ..protocol.converter import structure, unstructure
from ..protocol.errors import INVALID_PARAMS, INVALID_REQUEST, MISSING_REQUIRED_CLIENT_CAPABILITY, McpError
from ..protocol.messages import (
    CreateMessageParams,
    CreateMessageResult,
    CreateTaskResult,
    ElicitResult,
    ElicitUrlRequestParams,
    LoggingLevel,
    SamplingMessage,
)

if TYPE_CHECKING:
    from ..actors._requestor import TaskRequestor
    from ..actors._session import ToolCall
    from ..actors.supervisor import TaskSupervisor

__all__ = ["Context", "ThreadContext", "ToolCancelled"]

T = TypeVar("T")

_lifespan_values: weakref.WeakKeyDictionary[TaskSupervisor, Any] = weakref.WeakKeyDictionary()
"""What each open runtime's lifespan yielded, by the runtime's supervisor (the one thing a
call knows of the runtime that runs it). Kept by :meth:`Server.open` while the runtime is open."""


def bind_lifespan(supervisor: TaskSupervisor, value: Any) -> None:
    """Make ``value`` the :attr:`Context.lifespan` of the calls ``supervisor``'s runtime serves."""
    _lifespan_values[supervisor] = value


def unbind_lifespan(supervisor: TaskSupervisor) -> None:
    _lifespan_values.pop(supervisor, None)


class Context:
    """Passed to a tool that declares a parameter annotated ``Context``.

    >>> from trio_mcp import Server
    >>> server = Server("demo")
    >>> @server.tool(task_support="optional")
    ... async def sleep(seconds: float, ctx: Context) -> str:
    ...     await ctx.report_progress(0, seconds)
    ...     return "done"
    """

    def __init__(self, call: ToolCall) -> None:
        self._call = call

    @property
    def task_id(self) -> str | None:
        """The MCP task this call runs as, or None for an ordinary call."""
        return self._call.task_id

    @property
    def identity(self) -> str | None:
        """Who calls: the identity the server's ``authenticate=`` verifier gave the caller's
        bearer token (a JWT's ``sub``), or None without authentication (stdio; HTTP or
        WebSocket without a verifier). In a 2025-11-25 session it is the session's (fixed at
        ``initialize``); in a 2026-07-28 request, the request's; in a task, that of the request
        that created it.

        >>> # @server.tool(scopes=["files:write"])
        >>> # async def save(path: str, text: str, ctx: Context) -> str:
        >>> #     log.info("%s saves %s", ctx.identity, path)
        """
        return self._call.caller.identity

    @property
    def scopes(self) -> frozenset[str]:
        """The OAuth scopes of the caller's token (empty without a verifier, or for one that
        returns a bare identity). Those of the request that carried the call (a task: of the
        request that created it)."""
        return self._call.caller.scopes

    @property
    def headers(self) -> Mapping[str, str]:
        """The HTTP headers of the request that carried the call, read-only, names in lower
        case (a task: of the request that created it; WebSocket: of its opening handshake;
        stdio: none). ``Authorization`` is there, its value never:
        ``"[redacted]"``."""
        return self._call.caller.headers

    @property
    def lifespan(self) -> Any:
        """What the server's ``lifespan`` yielded (a connection pool, a client, a dict of
        them…): the same object for every call and every connection the runtime serves.
        None when the server has no lifespan. See :class:`~trio_mcp.Server`.

        >>> # async def lookup(key: str, ctx: Context) -> str:
        >>> #     db: Database = ctx.lifespan
        >>> #     return await db.get(key)
        """
        return _lifespan_values.get(self._call.peer.supervisor)

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> bool:
        """Send ``notifications/progress`` for this request's progressToken.

        Returns False (and sends nothing) when the requestor gave no token, when ``progress``
        does not increase (the spec requires strictly increasing values), or once the task is
        terminal. Never blocks on a slow client: progress is best-effort. It is a Trio
        checkpoint, so a cancelled task stops here.
        """
        await trio.lowlevel.checkpoint()
        return self._call.progress(progress, total, message)

    async def elicit(self, message: str, schema: dict[str, Any], *, key: str | None = None) -> ElicitResult:
        """Ask the user for input through the client (``elicitation/create``).

        ``schema`` is the flat JSON Schema object of what to ask (``{"type": "object",
        "properties": {...}}``). In a task, the task is ``input_required`` until the answer
        arrives, and the request carries the related-task ``_meta``; if the task is cancelled
        meanwhile, the wait stops at once. Returns the client's ``accept`` (with ``content``),
        ``decline`` or ``cancel``. Raises :class:`McpError` if the client did not declare the
        ``elicitation`` capability.

        In MCP 2026-07-28 the question travels in the call's answer (``InputRequiredResult``, or
        a task's ``inputRequests``) under ``key`` (default: one made from the question), and the
        call is run again from the start with the answer: code before it must be safe to repeat.

        >>> # answer = await ctx.elicit("Your name?", {"type": "object",
        >>> #     "properties": {"name": {"type": "string"}}, "required": ["name"]})
        """
        params: dict[str, Any] = {"message": message, "requestedSchema": schema}
        result = await self._call.ask_client("elicitation", "elicitation/create", params, message, key)
        return structure(result, ElicitResult)

    async def elicit_url(
        self, message: str, url: str, *, elicitation_id: str | None = None, key: str | None = None
    ) -> ElicitResult:
        """Send the user to ``url`` (URL-mode ``elicitation/create``): for what must not pass
        through the client — a third party's authorization, an API key, a payment. The client
        shows ``message`` and the full URL and asks the user's consent to open it.

        Returns the client's ``accept`` (the user agreed to go: the interaction itself happens
        out of band, and may not be over), ``decline`` or ``cancel``. Raises :class:`McpError`
        if the client did not declare ``elicitation.url``.

        2025-11-25: the request carries ``elicitation_id`` (default a fresh UUID): give your
        own to tell the client when the interaction is over, with
        :meth:`elicitation_complete`. 2026-07-28 has no id: as with :meth:`elicit`, the
        question travels in the call's answer under ``key`` and the call is run again with
        the answer; find out from your own state whether the interaction is over.

        >>> # answer = await ctx.elicit_url("Connect your GitHub account",
        >>> #     "https://mcp.example.com/connect?session=...", elicitation_id=eid)
        """
        modern = self._call.scope.era == "modern"
        capabilities = getattr(self._call.scope, "client_capabilities", None)
        elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
        if not (isinstance(elicitation, dict) and isinstance(elicitation.get("url"), dict)):
            if modern:
                raise McpError(
                    MISSING_REQUIRED_CLIENT_CAPABILITY,
                    "Missing required client capability: elicitation.url",
                    {"requiredCapabilities": {"elicitation": {"url": {}}}},
                )
            raise McpError(
                INVALID_REQUEST, "The client does not support URL-mode elicitation (elicitation.url)"
            )
        if not modern and elicitation_id is None:
            elicitation_id = str(uuid.uuid4())
        request = ElicitUrlRequestParams(message, url, None if modern else elicitation_id)
        params: dict[str, Any] = unstructure(request)
        result = await self._call.ask_client("elicitation", "elicitation/create", params, message, key)
        return structure(result, ElicitResult)

    def elicitation_complete(self, elicitation_id: str) -> bool:
        """Tell the client that the out-of-band interaction of the URL-mode elicitation
        ``elicitation_id`` is over (``notifications/elicitation/complete``, 2025-11-25; it may
        then retry what waited for it). False, and nothing sent, in 2026-07-28 (which has no
        such notification) or when the notification could not be queued."""
        if self._call.scope.era == "modern":
            return False
        return self._call.peer.notify("notifications/elicitation/complete", {"elicitationId": elicitation_id})

    async def sample(
        self,
        messages: list[str | SamplingMessage],
        *,
        max_tokens: int,
        system_prompt: str | None = None,
        temperature: float | None = None,
        key: str | None = None,
    ) -> CreateMessageResult:
        """Ask the client's model for a completion (``sampling/createMessage``).

        Plain strings are user text messages. Same task behaviour as :meth:`elicit`.
        """
        request = CreateMessageParams(
            messages=[
                m if isinstance(m, SamplingMessage) else SamplingMessage("user", {"type": "text", "text": m})
                for m in messages
            ],
            max_tokens=max_tokens,
            system_prompt=system_prompt,
            temperature=temperature,
        )
        result = await self._call.ask_client(
            "sampling", "sampling/createMessage", unstructure(request), None, key
        )
        return structure(result, CreateMessageResult)

    async def list_roots(self, *, key: str | None = None) -> list[dict[str, Any]]:
        """The client's roots (``roots/list``): ``[{"uri": "file:///…", "name": …}, …]``.
        Raises :class:`McpError` if the client did not declare the ``roots`` capability."""
        result = await self._call.ask_client("roots", "roots/list", {}, None, key)
        roots = result.get("roots")
        if not isinstance(roots, list):
            raise McpError(INVALID_PARAMS, "Invalid params: roots/list answered without a roots list")
        return roots

    @property
    def client_tasks(self) -> TaskRequestor:
        """Follow the tasks the client runs for us: ``get``, ``result``, ``list``, ``cancel``, ``poll``."""
        return self._call.peer.client_tasks

    async def elicit_task(
        self, message: str, schema: dict[str, Any], *, ttl_ms: int | None = None
    ) -> CreateTaskResult:
        """Ask the client to run an elicitation *as a task* on its side, and return at once.

        Follow it with :attr:`client_tasks` (``poll``, then ``result`` gives the ElicitResult
        data). Raises :class:`McpError` unless the client declared
        ``tasks.requests.elicitation.create``.
        """
        params: dict[str, Any] = {"message": message, "requestedSchema": schema}
        return await self._call.client_task("elicitation", "create", "elicitation/create", params, ttl_ms)

    async def sample_task(
        self, messages: list[str], *, max_tokens: int, ttl_ms: int | None = None
    ) -> CreateTaskResult:
        """Like :meth:`elicit_task`, for ``sampling/createMessage``."""
        request = CreateMessageParams(
            messages=[SamplingMessage("user", {"type": "text", "text": m}) for m in messages],
            max_tokens=max_tokens,
        )
        params: dict[str, Any] = unstructure(request)
        return await self._call.client_task(
            "sampling", "createMessage", "sampling/createMessage", params, ttl_ms
        )

    def set_status(self, message: str | None) -> None:
        """Set the task's ``statusMessage`` (a no-op for an ordinary call)."""
        self._call.set_status(message)

    def log(self, level: LoggingLevel, data: Any, logger: str | None = None) -> bool:
        """Send ``notifications/message`` if ``level`` passes the client's ``logging/setLevel``."""
        return self._call.log(level, data, logger)


class ToolCancelled(Exception):
    """Raised by :meth:`ThreadContext.check_cancelled` (and by its calls back to the client)
    in a plain tool whose call was cancelled: let it propagate, the call's result is discarded."""


class ThreadContext:
    """What a plain (``def``, not ``async def``) tool gets by a parameter annotated
    ``ThreadContext``: the :class:`Context` of its call, with every method callable from its
    worker thread (each runs on Trio through ``trio.from_thread``), and a way to notice that
    the call was cancelled.

    A plain tool's thread cannot be interrupted: when its call is cancelled (``tasks/cancel``,
    ``notifications/cancelled``, the client gone) the call ends at once and the thread is
    abandoned, its result discarded. A long tool checks :attr:`cancelled`, or calls
    :meth:`check_cancelled`, now and then, so its thread stops working too.

    >>> from trio_mcp import Server
    >>> server = Server("cpu")
    >>> @server.tool
    ... def crunch(n: int, ctx: ThreadContext) -> int:
    ...     total = 0
    ...     for i in range(n):
    ...         if i % 100_000 == 0:
    ...             ctx.check_cancelled()  # raises ToolCancelled once the call is cancelled
    ...             ctx.report_progress(i, n)
    ...         total += i
    ...     return total
    """

    __slots__ = ("_cancelled", "_context")

    def __init__(self, context: Context, cancelled: threading.Event) -> None:
        self._context = context
        self._cancelled = cancelled

    @property
    def context(self) -> Context:
        """The call's :class:`Context` (its async methods are for Trio code, not this thread)."""
        return self._context

    @property
    def cancelled(self) -> bool:
        """Whether the call was cancelled (or has ended): the thread's work is not wanted."""
        return self._cancelled.is_set()

    def check_cancelled(self) -> None:
        """Raise :class:`ToolCancelled` if the call was cancelled; cheap, call it often."""
        if self._cancelled.is_set():
            raise ToolCancelled("the tool call was cancelled")

    @property
    def task_id(self) -> str | None:
        """The MCP task this call runs as, or None for an ordinary call."""
        return self._context.task_id

    @property
    def identity(self) -> str | None:
        """:attr:`Context.identity`."""
        return self._context.identity

    @property
    def scopes(self) -> frozenset[str]:
        """:attr:`Context.scopes`."""
        return self._context.scopes

    @property
    def headers(self) -> Mapping[str, str]:
        """:attr:`Context.headers` (read-only: safe to read from the thread)."""
        return self._context.headers

    @property
    def lifespan(self) -> Any:
        """What the server's ``lifespan`` yielded (see :attr:`Context.lifespan`). Shared with
        the Trio side: use only what is safe to use from a thread."""
        return self._context.lifespan

    def _on_trio(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        self.check_cancelled()
        return trio.from_thread.run(functools.partial(fn, *args, **kwargs))

    def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> bool:
        """:meth:`Context.report_progress`, from the thread."""
        return self._on_trio(self._context.report_progress, progress, total, message)

    def elicit(self, message: str, schema: dict[str, Any], *, key: str | None = None) -> ElicitResult:
        """:meth:`Context.elicit`, from the thread: blocks it until the user answers."""
        return self._on_trio(self._context.elicit, message, schema, key=key)

    def elicit_url(
        self, message: str, url: str, *, elicitation_id: str | None = None, key: str | None = None
    ) -> ElicitResult:
        """:meth:`Context.elicit_url`, from the thread: blocks it until the user answers."""
        return self._on_trio(self._context.elicit_url, message, url, elicitation_id=elicitation_id, key=key)

    def sample(
        self, messages: list[str | SamplingMessage], *, max_tokens: int, **options: Any
    ) -> CreateMessageResult:
        """:meth:`Context.sample`, from the thread."""
        return self._on_trio(self._context.sample, messages, max_tokens=max_tokens, **options)

    def list_roots(self, *, key: str | None = None) -> list[dict[str, Any]]:
        """:meth:`Context.list_roots`, from the thread."""
        return self._on_trio(self._context.list_roots, key=key)

    def set_status(self, message: str | None) -> None:
        """:meth:`Context.set_status`, from the thread."""
        self.check_cancelled()
        trio.from_thread.run_sync(self._context.set_status, message)

    def log(self, level: LoggingLevel, data: Any, logger: str | None = None) -> bool:
        """:meth:`Context.log`, from the thread."""
        self.check_cancelled()
        return trio.from_thread.run_sync(self._context.log, level, data, logger)
