"""The server API: declare tools on a :class:`Server`, then serve it over any transport.

>>> server = Server("demo", version="1.0")
>>> @server.tool(task_support="optional")
... async def echo(text: str) -> str:
...     '''Return the text unchanged.'''
...     return text
>>> # trio.run(server.serve_stdio)
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import inspect
import json
import logging
import math
import signal
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeAlias, TypeVar, overload

import attrs
import trio

from ..actors._middleware import Middlewares, RequestMiddleware, ToolMiddleware
from ..actors._oneshot import Stateless
from ..actors._queue import WorkSource
from ..actors._request import RequestObserver
from ..actors._session import SessionActor, ToolCall
from ..actors.supervisor import TaskLimits, TaskSupervisor
from ..actors.trace import Tracer, no_trace
from ..protocol import jsonrpc
from ..protocol.converter import unstructure
from ..protocol.errors import INVALID_PARAMS, McpError
from ..protocol.messages import (
    AudioContent,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    Implementation,
    ResourceLink,
    TaskSupport,
    TextContent,
    Tool,
    ToolExecution,
)
from ..protocol.request_state import StateCodec
from ..stores.base import TaskStore
from ..stores.memory import MemoryTaskStore
from ..transports.base import Transport
from ..transports.stdio import open_stdio_transport
from ._context import Context, ThreadContext, bind_lifespan, unbind_lifespan
from ._docstrings import without_parameter_sections
from ._options import RunOptions, parse_run_args
from ._surface import (
    MAX_COMPLETIONS,
    Completer,
    RegisteredPrompt,
    RegisteredResource,
    RegisteredTemplate,
    ResourceNotFound,
    find_context_param,
)
from .schema import ArgumentError, ArgumentSpec, argument_spec, jsonable

if TYPE_CHECKING:
    from opentelemetry import metrics, trace

    from .telemetry import Telemetry

__all__ = [
    "GC_FULL_AFTER",
    "GC_THRESHOLD",
    "SHUTDOWN_GRACE",
    "Lifespan",
    "RegisteredTool",
    "Server",
    "ServerRuntime",
    "StartupError",
    "default_store",
    "tune_gc",
]

log = logging.getLogger("trio_mcp")

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
ToolWrapper: TypeAlias = Callable[["RegisteredTool", Awaitable[Any], "str | None"], Awaitable[Any]]
"""Wraps a tool's running coroutine: ``wrap(tool, running, task_id)`` returns what to await."""
G = TypeVar("G", bound=Callable[..., Any])
M = TypeVar("M", bound=RequestMiddleware)
T = TypeVar("T", bound=ToolMiddleware)
C = TypeVar("C", bound=Completer)


@attrs.frozen
class RegisteredTool:
    """A tool as registered: its wire description and how to call it."""

    tool: Tool
    fn: Callable[..., Awaitable[Any]]
    spec: ArgumentSpec | None
    """Validates and converts the arguments; None for a tool given its own ``input_schema``."""
    context_param: str | None
    immediate_response: str | None = None
    wrappers: list[ToolWrapper] = attrs.field(factory=list, eq=False, repr=False)
    """Wrap the tool's running coroutine (telemetry, asyncio): the server's list, shared by its tools."""
    retries: int = 0
    """How many times a task of this tool may be run again after the process running it died
    (work on a shared queue); 0: such a task ends ``failed``."""
    idempotent: bool = False
    """Running it again is harmless: its tasks are re-run after a crash however often it takes."""
    scopes: tuple[str, ...] = ()
    """OAuth scopes a caller's token must hold to call it (HTTP with a verifier)."""
    task_support: TaskSupport = attrs.field(init=False)
    """``tool.task_support``, read once (every call asks it)."""

    @task_support.default
    def _task_support(self) -> TaskSupport:
        return self.tool.task_support

    @property
    def name(self) -> str:
        return self.tool.name

    def start(
        self, arguments: dict[str, Any] | None, call: ToolCall | None
    ) -> Awaitable[Any] | CallToolResult:
        """Validate the arguments and start the tool, never waiting: its running coroutine,
        or the ``isError`` result for bad arguments. Await the coroutine, then hand what it
        returns to :meth:`finish` (an exception other than McpError to :meth:`failed`).
        ``call`` may be None for a tool that takes no Context (its ``context_param`` is None).

        The runtime runs every tool in these parts (``ToolRun``, for plain calls and tasks
        alike), so that no frame of ours sits between a task's actor and its tool while it
        runs (each would be kept for the task's whole life)."""
        try:
            kwargs = self.spec.validate(arguments) if self.spec is not None else dict(arguments or {})
        except ArgumentError as exc:
            return error_result(f"Invalid arguments for tool '{self.name}': {exc}")
        if self.context_param is not None:
            if call is None:
                raise TypeError(f"tool '{self.name}' takes a Context: start it with its call")
            kwargs[self.context_param] = Context(call)
        try:
            running = self.fn(**kwargs)
        except Exception as exc:  # raised before it could run (a callable that is not async)
            return self.failed(exc)
        for wrap in self.wrappers:
            running = wrap(self, running, call.task_id if call is not None else None)
        return running

    def finish(self, value: Any) -> CallToolResult:
        """The result for what the tool returned (an ``isError`` one if JSON cannot hold it)."""
        try:
            return to_result(value)
        except (TypeError, ValueError) as exc:  # a bug in the tool: say so loudly, answer isError
            log.error("tool %s returned a value that is not JSON: %r", self.name, exc, exc_info=exc)
            return error_result(f"Tool '{self.name}' returned a value that cannot be sent as JSON: {exc}")

    def failed(self, exc: Exception) -> CallToolResult:
        """The ``isError`` result for an exception the tool raised (not McpError)."""
        log.warning("tool %s raised %r", self.name, exc, exc_info=exc)
        return error_result(str(exc) or type(exc).__name__)


_CONTENT_CLASSES = (TextContent, ImageContent, AudioContent, ResourceLink, EmbeddedResource)


def error_result(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(message)], is_error=True)


def to_result(value: Any) -> CallToolResult:
    """Turn a tool's return value into a CallToolResult.

    ``str`` → one text block; a content block or a list of them → content; ``dict``, attrs
    instance or dataclass → ``structuredContent`` plus its JSON as text; ``None`` → no content;
    anything else JSON-serialisable → its JSON as text. A value JSON cannot hold (an arbitrary
    object, NaN) raises TypeError or ValueError.

    >>> import dataclasses
    >>> @dataclasses.dataclass
    ... class Loan:
    ...     amount: float
    >>> to_result(Loan(12.5)).structured_content
    {'amount': 12.5}
    """
    if isinstance(value, CallToolResult):
        return value
    if isinstance(value, str):
        return CallToolResult(content=[TextContent(value)])
    if value is None:
        return CallToolResult()
    if isinstance(value, _CONTENT_CLASSES):
        return CallToolResult(content=[value])
    if isinstance(value, list) and value and all(isinstance(v, _CONTENT_CLASSES) for v in value):
        return CallToolResult(content=list(value))
    if attrs.has(type(value)):
        value = unstructure(value)
    elif dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    value = jsonable(value)  # datetimes, UUIDs, paths, decimals, bytes, enums, models: as JSON
    text = json.dumps(value, allow_nan=False)
    if isinstance(value, dict):
        return CallToolResult(content=[TextContent(text)], structured_content=value)
    return CallToolResult(content=[TextContent(text)])


Lifespan: TypeAlias = Callable[["Server"], AbstractAsyncContextManager[Any]]
"""A server's ``lifespan``: called with the :class:`Server` when a runtime opens, it returns an
async context manager (typically an ``@contextlib.asynccontextmanager`` async generator) whose
value tools reach as :attr:`Context.lifespan <trio_mcp.server.Context.lifespan>`."""


class Server:
    """An MCP server: a name, tools, and the task policy.

    Tools default to ``task_support="optional"``: any client may run them as tasks.

    ``lifespan`` holds what tools share for as long as the server runs (a database pool, an
    HTTP client): a function ``lifespan(server)`` returning an async context manager, usually
    an ``@contextlib.asynccontextmanager`` async generator that yields the shared value. Tools,
    resources and prompts taking a :class:`Context` read that value as ``ctx.lifespan`` (it is
    also :attr:`ServerRuntime.lifespan`):

    >>> from contextlib import asynccontextmanager
    >>> @asynccontextmanager
    ... async def lifespan(server):
    ...     pool = {"hits": 0}  # open the real resource here
    ...     try:
    ...         yield pool
    ...     finally:
    ...         pool.clear()  # and close it here
    >>> server = Server("db", lifespan=lifespan)
    >>> @server.tool
    ... async def hit(ctx: Context) -> int:
    ...     ctx.lifespan["hits"] += 1
    ...     return ctx.lifespan["hits"]

    It is entered by :meth:`open`, once per runtime, before the runtime serves anything, and
    exited when the runtime closes, after every task and request of the runtime has been
    cancelled or has finished. One runtime serves the whole process when the server runs with
    :meth:`run`, :meth:`serve_stdio`, :func:`~trio_mcp.server.serve_websocket`,
    :func:`~trio_mcp.server.serve_http` or :func:`~trio_mcp.server.mcp_asgi_app` (whatever the
    number of connections); to share one lifespan between several transports, open the runtime
    once and pass it to each of them (each runtime opened on a :class:`Server` enters a
    lifespan of its own). An exception raised while entering stops the runtime from opening
    (the server does not start); one raised while exiting propagates from the ``open`` block.
    When the runtime closes because its caller was cancelled (a cancelled nursery, a deadline),
    the exit runs shielded from that cancellation for at most :data:`SHUTDOWN_GRACE` seconds, so
    the generator's ``finally`` can still ``await`` its cleanup (past that, its awaits are
    cancelled and a warning is logged; :meth:`run` shuts down on SIGINT or SIGTERM without
    such a cancellation). Background tasks the lifespan runs in a nursery of its own are
    cancelled with the server, and cancel that nursery: such a lifespan shields the awaits of
    its cleanup itself (``with trio.CancelScope(shield=True):``), as anywhere in Trio.
    """

    def __init__(
        self,
        name: str,
        version: str = "0.0.0",
        *,
        title: str | None = None,
        instructions: str | None = None,
        limits: TaskLimits | None = None,
        tools_page_size: int = 100,
        store: Callable[[], TaskStore] | None = None,
        state_key: bytes | None = None,
        max_threads: int = 8,
        lifespan: Lifespan | None = None,
        telemetry: bool = False,
    ) -> None:
        if lifespan is not None and not callable(lifespan):
            raise TypeError(f"lifespan must be a function of the server, not {type(lifespan).__name__}")
        self.info = Implementation(name=name, version=version, title=title)
        self.instructions = instructions
        self.limits = limits or TaskLimits()
        self.tools_page_size = tools_page_size
        self.store_factory: Callable[[], TaskStore] = store if store is not None else default_store
        """Makes the task store each :meth:`open` uses (default: :func:`default_store`)."""
        self.tools: dict[str, RegisteredTool] = {}
        self.resources: dict[str, RegisteredResource] = {}
        self.templates: dict[str, RegisteredTemplate] = {}
        self.prompts: dict[str, RegisteredPrompt] = {}
        self.completers: dict[tuple[str, str, str], Completer] = {}
        self._runtimes: set[ServerRuntime] = set()
        self._threads = trio.CapacityLimiter(max_threads)
        """Worker threads the plain (non-async) tools of this server may use at once."""
        self.state_codec = StateCodec(state_key)
        """Seals the ``requestState`` of modern-era input requests. Processes that share
        retries (several behind one load balancer) need the same ``state_key`` (32 random
        bytes); by default each server makes its own."""
        self.lifespan: Lifespan | None = lifespan
        """Entered by each :meth:`open` around the runtime; see the class docstring."""
        self.works = True
        """With a store that is a work queue (Redis): whether this process runs queued tasks.
        False (``trio-mcp serve --no-work``): every task it creates is queued for the others
        (``trio-mcp worker`` processes). Set it before the server is opened."""
        self.drain_seconds = 30.0
        """With a work queue: on shutdown, how long the tasks running here may go on before
        each is handed back to the queue (a tool marked ``retries``/``idempotent``) or ends
        ``failed`` (``--drain``). Without one, shutdown cancels running tasks at once."""
        self.request_observer: RequestObserver | None = None
        """Told of every request's stages — admitted, answered, written (or dropped) — for
        telemetry; see :class:`~trio_mcp.actors._request.RequestObserver`. Set it before the
        server is opened."""
        self.telemetry: Telemetry | None = None
        """The OpenTelemetry instrumentation, once :meth:`instrument` made it."""
        self._tool_wrappers: list[ToolWrapper] = []
        self._asyncio_tools = False
        """Whether a tool runs on asyncio: each runtime then opens an asyncio loop."""
        self._asyncio_loop: Any = None
        """The asyncio loop the latest runtime opened (while open), for calls outside its context."""
        self.middleware_chain: Middlewares | None = None
        """The middleware :meth:`add_middleware` registered, in order (None: none)."""
        self._request_middleware: list[RequestMiddleware] = []
        self._tool_middleware: list[ToolMiddleware] = []
        if telemetry:
            self.instrument()

    # -- middleware ---------------------------------------------------------------------------
    def add_middleware(self, middleware: Any) -> None:
        """Run ``middleware`` around every request (and, for an object with ``on_tool_call``,
        every tool run), inside those already added: the first added sees a request first and
        its answer last. ``middleware`` is an async function ``(request, call_next)`` (request
        middleware), or an object with ``on_request`` and/or ``on_tool_call``, such as a
        :class:`~trio_mcp.server.middleware.Middleware` (``RequestLog()``, ``RateLimit(10)``).
        See :mod:`trio_mcp.server.middleware`. Add it before serving: a connection looks once,
        when it opens, whether the server has middleware (one opened without any serves
        without, at no cost per request).

        >>> from trio_mcp.server.middleware import RateLimit, RequestLog
        >>> server = Server("guarded")
        >>> server.add_middleware(RequestLog())
        >>> server.add_middleware(RateLimit(rate=5, burst=10))
        """
        from .middleware import hooks_of

        on_request, on_tool_call = hooks_of(middleware)
        if on_request is not None:
            self._request_middleware.append(on_request)
        if on_tool_call is not None:
            self._tool_middleware.append(on_tool_call)
        self.middleware_chain = Middlewares(self._request_middleware, self._tool_middleware)

    def middleware(self, fn: M) -> M:
        """Decorator: ``fn(request, call_next)`` becomes request middleware (:meth:`add_middleware`)."""
        self.add_middleware(fn)
        return fn

    def tool_middleware(self, fn: T) -> T:
        """Decorator: ``fn(call, call_next)`` runs around every tool run, inside the tool
        middleware already added (a plain call's, or a task's, inside the task)."""
        self._tool_middleware.append(fn)
        self.middleware_chain = Middlewares(self._request_middleware, self._tool_middleware)
        return fn

    def instrument(
        self,
        *,
        tracer_provider: trace.TracerProvider | None = None,
        meter_provider: metrics.MeterProvider | None = None,
    ) -> Telemetry:
        """Record OpenTelemetry spans and metrics for this server (see
        :mod:`trio_mcp.server.telemetry` and ``docs/telemetry.md``): a span per request and per
        task, named and described after the OpenTelemetry MCP semantic conventions, and
        request and task metrics. Needs ``opentelemetry-api`` (``pip install 'trio-mcp[otel]'``);
        without the providers, the globally configured ones are used. Call it before the server
        is opened (``Server(..., telemetry=True)`` calls it with the global providers); calling
        it again returns the same instrumentation.

        >>> server = Server("observed")
        >>> telemetry = server.instrument()
        >>> server.request_observer is telemetry
        True
        """
        if self.telemetry is not None:
            return self.telemetry
        try:
            from .telemetry import Telemetry
        except ImportError as exc:
            if not (exc.name or "").startswith("opentelemetry"):
                raise
            raise ImportError(
                "telemetry needs the OpenTelemetry API: pip install 'trio-mcp[otel]'", name=exc.name
            ) from exc

        telemetry = Telemetry(tracer_provider, meter_provider)
        self.telemetry = telemetry
        self.request_observer = telemetry
        self._tool_wrappers.append(telemetry.wrap_tool)
        return telemetry

    @overload
    def tool(self, name: F, /) -> F: ...

    @overload
    def tool(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        task_support: TaskSupport = "optional",
        annotations: dict[str, Any] | None = None,
        immediate_response: str | None = None,
        asyncio: bool = False,
        retries: int = 0,
        idempotent: bool = False,
        scopes: Sequence[str] = (),
    ) -> Callable[[F], F]: ...

    def tool(
        self,
        name: str | F | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        task_support: TaskSupport = "optional",
        annotations: dict[str, Any] | None = None,
        immediate_response: str | None = None,
        asyncio: bool = False,
        retries: int = 0,
        idempotent: bool = False,
        scopes: Sequence[str] = (),
    ) -> Callable[[F], F] | F:
        """Register an async function as a tool. Its ``inputSchema`` comes from its type hints;
        a parameter annotated :class:`Context` receives the call's context.
        ``immediate_response`` is text for the model while a task runs, sent as
        ``_meta["io.modelcontextprotocol/model-immediate-response"]`` of the CreateTaskResult.

        ``asyncio=True`` runs an ``async def`` written for asyncio (one awaiting an asyncio
        database driver or SDK client) on an asyncio loop inside Trio, through trio-asyncio
        (``pip install 'trio-mcp[asyncio]'``; see :meth:`add_tool`).

        ``retries`` and ``idempotent`` say whether a task of this tool may run again when the
        process running it dies (work shared through a Redis store): at most ``retries`` more
        times, or always when ``idempotent``; other tools' tasks end ``failed`` instead.
        ``scopes`` are the OAuth scopes a caller's token must hold to call it: without them a
        ``tools/call`` (plain or as a task) is answered, before anything runs, HTTP **403**
        ``insufficient_scope`` (WebSocket: JSON-RPC error -32003). Enforced only where an
        ``authenticate=`` verifier is configured: with none (and over stdio) they are not.

        Use it as ``@server.tool()`` (with options) or bare, ``@server.tool``.
        """
        if callable(name):  # bare @server.tool: we were given the function itself
            self.add_tool(name)
            return name
        tool_name = name

        def register(fn: F) -> F:
            self.add_tool(
                fn,
                name=tool_name,
                title=title,
                description=description,
                task_support=task_support,
                annotations=annotations,
                immediate_response=immediate_response,
                asyncio=asyncio,
                retries=retries,
                idempotent=idempotent,
                scopes=scopes,
            )
            return fn

        return register

    def add_tool(
        self,
        fn: Callable[..., Awaitable[Any]],
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        task_support: TaskSupport = "optional",
        annotations: dict[str, Any] | None = None,
        immediate_response: str | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        asyncio: bool = False,
        retries: int = 0,
        idempotent: bool = False,
        scopes: Sequence[str] = (),
    ) -> RegisteredTool:
        """Register ``fn`` as a tool (see :meth:`tool`). ``input_schema`` replaces the schema
        made from the type hints and is sent exactly as given (any JSON Schema 2020-12, with
        ``$schema``, ``$defs``, composition…); the arguments then reach ``fn`` unvalidated, as
        keyword arguments. ``output_schema`` is the tool's ``outputSchema`` (its results should
        carry matching ``structuredContent``). Tools added while serving are announced with a
        list-changed notification.

        With ``asyncio=True`` the tool is a coroutine function written for asyncio: each
        runtime that serves such a tool opens one asyncio loop inside Trio
        (``trio_asyncio.open_loop()``, for the runtime's life), and each call runs the tool on
        it (``trio_asyncio.aio_as_trio``); cancelling the call or its task cancels the asyncio
        side (it sees ``asyncio.CancelledError``). Needs the ``trio-asyncio`` package
        (``pip install 'trio-mcp[asyncio]'``); a server without such a tool never imports it.
        A :class:`Context` it takes is Trio's: await its methods through
        ``trio_asyncio.trio_as_aio`` (``await trio_as_aio(ctx.report_progress)(1, 2)``).

        >>> import asyncio
        >>> server = Server("aio")
        >>> @server.tool(asyncio=True)
        ... async def pause(seconds: float) -> str:
        ...     await asyncio.sleep(seconds)  # any asyncio library: a driver, an SDK client
        ...     return "rested"
        """
        if retries < 0:
            raise ValueError(f"tool {fn.__qualname__}: retries must be 0 or more, not {retries}")
        if isinstance(scopes, str):
            raise TypeError(f"tool {fn.__qualname__}: scopes is a list of scope names, not one string")
        if asyncio:
            if not inspect.iscoroutinefunction(fn):
                raise TypeError(
                    f"tool {fn.__qualname__}: asyncio=True is for an async def written for asyncio"
                )
            fn = self._on_asyncio(fn)
        if inspect.iscoroutinefunction(fn):
            context_param = find_context_param(fn)
        else:
            fn, context_param = self._in_thread(fn)
        tool_name = name or fn.__name__
        if tool_name in self.tools:
            raise ValueError(f"a tool named {tool_name!r} is already registered")
        spec = (
            argument_spec(fn, skip=(context_param,) if context_param else ())
            if input_schema is None
            else None
        )
        doc = inspect.getdoc(fn)
        if doc is not None and spec is not None:  # the parameters are described in the schema
            doc = without_parameter_sections(doc) or None
        tool = Tool(
            name=tool_name,
            input_schema=input_schema
            if input_schema is not None
            else spec.schema
            if spec is not None
            else {},
            title=title,
            description=description if description is not None else doc,
            output_schema=output_schema,
            annotations=annotations,
            execution=ToolExecution(task_support=task_support),
        )
        registered = RegisteredTool(
            tool,
            fn,
            spec,
            context_param,
            immediate_response,
            self._tool_wrappers,
            retries=retries,
            idempotent=idempotent,
            scopes=tuple(scopes),
        )
        self.tools[tool_name] = registered
        self.notify_list_changed("tools")
        return registered

    def _in_thread(self, sync: Callable[..., Any]) -> tuple[Callable[..., Awaitable[Any]], str | None]:
        """A plain function as a tool, and the parameter it takes its :class:`ThreadContext`
        by: it runs in a worker thread, at most ``max_threads`` at once. Cancelling the call
        (``tasks/cancel``, ``notifications/cancelled``) ends the task or request at once; the
        thread cannot be interrupted, so it is abandoned and its result discarded when it
        returns. A long tool notices through its context (:attr:`ThreadContext.cancelled`)."""
        if find_context_param(sync) is not None:
            raise TypeError(
                f"tool {sync.__qualname__}: a plain (def) tool takes a ThreadContext, not a Context "
                f"(annotate the parameter ThreadContext: its methods work from the tool's thread)"
            )
        context_param = find_context_param(sync, ThreadContext)
        limiter = self._threads

        @functools.wraps(sync)
        async def run_in_thread(**kwargs: Any) -> Any:
            cancelled = threading.Event()
            if context_param is not None:
                kwargs[context_param] = ThreadContext(kwargs[context_param], cancelled)
            try:
                return await trio.to_thread.run_sync(
                    functools.partial(sync, **kwargs), abandon_on_cancel=True, limiter=limiter
                )
            except BaseException:
                cancelled.set()  # the call is over: the abandoned thread's work is not wanted
                raise

        return run_in_thread, context_param

    def _on_asyncio(self, fn: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
        """An asyncio coroutine function as a Trio one, run on the runtime's asyncio loop."""
        self._asyncio_tools = True

        @functools.wraps(fn)
        async def on_asyncio(**kwargs: Any) -> Any:
            import trio_asyncio  # type: ignore[import-untyped]

            loop = trio_asyncio.current_loop.get() or self._asyncio_loop
            if loop is None:
                raise RuntimeError(
                    f"tool {fn.__qualname__} runs on asyncio: no runtime of this server opened a loop"
                )
            return await trio_asyncio.aio_as_trio(fn, loop=loop)(**kwargs)

        return on_asyncio

    def remove_tool(self, name: str) -> None:
        """Stop offering a tool (clients are told its list changed)."""
        del self.tools[name]
        self.notify_list_changed("tools")

    # -- resources, prompts, completion -------------------------------------------------------
    def resource(
        self,
        uri: str,
        *,
        name: str | None = None,
        title: str | None = None,
        description: str | None = None,
        mime_type: str | None = None,
    ) -> Callable[[G], G]:
        """Register a resource at ``uri``, or at every URI matching a template when ``uri``
        holds ``{variables}`` (each one a parameter of the function; a template whose
        variables and required parameters differ is refused here, with ValueError). The
        function returns ``str`` (text), ``bytes`` (a blob) or contents dicts; it raises
        :class:`~trio_mcp.server.ResourceNotFound` for a URI it has nothing at.

        >>> server = Server("docs")
        >>> @server.resource("test://template/{id}/data", mime_type="application/json")
        ... def data(id: str) -> str:
        ...     return '{"id": "%s"}' % id
        """

        def register(fn: G) -> G:
            fields: dict[str, Any] = {
                "name": name or fn.__name__,
                "title": title,
                "description": description if description is not None else inspect.getdoc(fn),
                "mime_type": mime_type,
            }
            if "{" in uri:
                self.templates[uri] = RegisteredTemplate.compile(uri, fn, **fields)
            else:
                self.resources[uri] = RegisteredResource(
                    uri, fields.pop("name"), fn, find_context_param(fn), **fields
                )
            self.notify_list_changed("resources")
            return fn

        return register

    def prompt(
        self,
        name: str | None = None,
        *,
        title: str | None = None,
        description: str | None = None,
        arguments: dict[str, str] | None = None,
    ) -> Callable[[G], G]:
        """Register a prompt: its arguments are the function's parameters (strings; required
        unless they have a default; ``arguments`` describes them). The function returns a
        string (one user message), content blocks, ``(role, content)`` pairs, or a list."""

        def register(fn: G) -> G:
            prompt = RegisteredPrompt.from_function(
                fn,
                name=name or fn.__name__,
                title=title,
                description=description if description is not None else inspect.getdoc(fn),
                argument_descriptions=arguments,
            )
            self.prompts[prompt.name] = prompt
            self.notify_list_changed("prompts")
            return fn

        return register

    def completion(self, kind: str, name: str, argument: str) -> Callable[[C], C]:
        """Register ``completer(value, context_arguments) -> [values]`` for ``argument`` of the
        prompt ``name`` (``kind="prompt"``) or the resource template ``name``
        (``kind="resource"``). Sync or async; at most :data:`MAX_COMPLETIONS` are sent."""
        if kind not in ("prompt", "resource"):
            raise ValueError("kind is 'prompt' or 'resource'")

        def register(fn: C) -> C:
            self.completers[(kind, name, argument)] = fn
            return fn

        return register

    # -- what a session asks of us ----------------------------------------------------------
    def capabilities(self) -> dict[str, Any]:
        """What this server offers, as the handshake and ``server/discover`` declare it."""
        capabilities: dict[str, Any] = {"tools": {"listChanged": True}, "logging": {}}
        if self.resources or self.templates:
            capabilities["resources"] = {"subscribe": True, "listChanged": True}
        if self.prompts:
            capabilities["prompts"] = {"listChanged": True}
        if self.completers:
            capabilities["completions"] = {}
        return capabilities

    def resource_list(self) -> list[dict[str, Any]]:
        return [r.wire() for r in self.resources.values()]

    def template_list(self) -> list[dict[str, Any]]:
        return [t.wire() for t in self.templates.values()]

    def prompt_list(self) -> list[dict[str, Any]]:
        return [p.wire() for p in self.prompts.values()]

    async def read_resource(self, uri: str, call: ToolCall) -> list[dict[str, Any]] | None:
        """The contents at ``uri``, or None if no resource or template serves it (or its
        function raised :class:`ResourceNotFound`)."""
        try:
            resource = self.resources.get(uri)
            if resource is not None:
                return await resource.read(Context(call))
            for template in self.templates.values():
                values = template.match(uri)
                if values is not None:
                    return await template.read(uri, values, Context(call))
        except ResourceNotFound:
            return None
        return None

    async def get_prompt(self, name: str, arguments: dict[str, str], call: ToolCall) -> dict[str, Any]:
        prompt = self.prompts.get(name)
        if prompt is None:
            raise McpError(INVALID_PARAMS, f"Unknown prompt: '{name}'")
        return await prompt.get(arguments, Context(call))

    async def complete(
        self, ref: dict[str, Any], argument: dict[str, Any], context: dict[str, Any] | None
    ) -> dict[str, Any]:
        kind = "prompt" if ref["type"] == "ref/prompt" else "resource"
        name = ref["name"] if kind == "prompt" else ref["uri"]
        completer = self.completers.get((kind, name, argument["name"]))
        values: list[str] = []
        if completer is not None:
            found = completer(argument.get("value", ""), dict((context or {}).get("arguments") or {}))
            values = list(await found) if inspect.isawaitable(found) else list(found)
        elif (kind == "prompt" and name not in self.prompts) or (
            kind == "resource" and name not in self.templates
        ):
            raise McpError(INVALID_PARAMS, f"Unknown {kind}: '{name}'")
        return {
            "completion": {
                "values": values[:MAX_COMPLETIONS],
                "total": len(values),
                "hasMore": len(values) > MAX_COMPLETIONS,
            }
        }

    # -- telling clients ---------------------------------------------------------------------
    def notify_list_changed(self, kind: str) -> None:
        """Tell every connected client that the ``kind`` list (tools, prompts, resources) changed."""
        for runtime in list(self._runtimes):
            for session in list(runtime.sessions):
                session.list_changed(kind)
            runtime.stateless.list_changed(kind)

    def notify_resource_updated(self, uri: str) -> None:
        """Tell the clients subscribed to ``uri`` that it changed."""
        for runtime in list(self._runtimes):
            for session in list(runtime.sessions):
                session.resource_updated(uri)
            runtime.stateless.resource_updated(uri)

    # -- serving --------------------------------------------------------------------------
    @asynccontextmanager
    async def open(
        self,
        *,
        tracer: Tracer = no_trace,
        wall_clock: Callable[[], float] = time.time,
        store: TaskStore | None = None,
    ) -> AsyncIterator[ServerRuntime]:
        """Start the task supervisor; serve any number of connections inside the block.

        ``tracer`` receives every runtime event (see :mod:`trio_mcp.actors.trace`);
        ``wall_clock`` gives the epoch seconds stamped on tasks (tests pin it); ``store``
        keeps the task records (default: a new one from the server's ``store`` factory).

        The server's ``lifespan`` is entered first and exited last, once every task of the
        runtime has ended (see the class docstring).

        >>> # async with server.open() as runtime:
        >>> #     nursery.start_soon(runtime.serve, transport)
        """
        if self.telemetry is not None:
            tracer = _both(tracer, self.telemetry.trace_event)
        async with self._asyncio_loop_open(), self._entered_lifespan() as shared:
            owned = store is None  # a store we make, we close
            store = store if store is not None else self.store_factory()
            supervisor = TaskSupervisor(
                self.limits, store=store, wall_clock=wall_clock, tracer=tracer, store_observer=self.telemetry
            )
            supervisor.works = self.works
            runtime = ServerRuntime(self, supervisor, lifespan=shared)
            if self.lifespan is not None:
                bind_lifespan(supervisor, shared)
            try:
                connect = getattr(store, "connect", None)
                if connect is not None:  # a store that connects (SQLite: takes its file's lock) fails here
                    await _connect_store(store, connect)
                async with trio.open_nursery() as nursery:
                    try:
                        await nursery.start(supervisor.run)
                        self._runtimes.add(runtime)
                        yield runtime
                    finally:
                        self._runtimes.discard(runtime)
                        nursery.cancel_scope.cancel()
            finally:
                # Every task of the runtime has ended: none reads ctx.lifespan any more, and
                # none is still using the store (closing it sooner would fail their last calls).
                unbind_lifespan(supervisor)
                aclose = getattr(store, "aclose", None)
                if owned and aclose is not None:
                    with trio.CancelScope(shield=True):
                        await aclose()

    @asynccontextmanager
    async def _asyncio_loop_open(self) -> AsyncIterator[None]:
        """An asyncio loop inside Trio for the block, if a tool runs on asyncio (the lifespan,
        entered inside it, may use asyncio libraries through ``trio_asyncio.aio_as_trio`` too)."""
        if not self._asyncio_tools:
            yield
            return
        try:
            import trio_asyncio  # type: ignore[import-untyped]
        except ImportError as exc:
            needs = "a tool runs on asyncio (asyncio=True): install trio-asyncio"
            raise RuntimeError(f"{needs} ('pip install trio-mcp[asyncio]')") from exc
        async with trio_asyncio.open_loop() as loop:
            previous, self._asyncio_loop = self._asyncio_loop, loop
            try:
                yield
            finally:
                self._asyncio_loop = previous

    @asynccontextmanager
    async def _entered_lifespan(self) -> AsyncIterator[Any]:
        """The server's lifespan entered for the block (None without one). Leaving because the
        caller was cancelled, its exit is shielded from that for :data:`SHUTDOWN_GRACE` seconds."""
        if self.lifespan is None:
            yield None
            return
        manager = self.lifespan(self)
        if not (hasattr(manager, "__aenter__") and hasattr(manager, "__aexit__")):
            raise TypeError(
                f"lifespan(server) must return an async context manager (decorate an async generator "
                f"with @contextlib.asynccontextmanager), not {type(manager).__name__}"
            )
        # The shield is opened before the lifespan is entered, and switched on only on the way
        # out: opened around its exit alone, it would not nest with cancel scopes (nurseries) the
        # lifespan itself keeps open across its yield.
        guard = trio.CancelScope()
        stopped: BaseException | None = None
        with guard:
            async with manager as shared:
                try:
                    yield shared
                except BaseException as exc:
                    stopped = exc
                    raise
                finally:
                    if trio.current_effective_deadline() == -math.inf:  # the caller is cancelled
                        guard.shield = True
                        guard.deadline = trio.current_time() + SHUTDOWN_GRACE
        if guard.cancelled_caught:
            log.warning(
                "the lifespan of %s was still exiting after %g s: cancelled", self.info.name, SHUTDOWN_GRACE
            )
            if isinstance(stopped, Exception | KeyboardInterrupt):
                raise stopped  # the error that closed the runtime, not lost to the grace period
            await trio.lowlevel.checkpoint()  # the guard caught a Cancelled: the caller's goes on

    async def serve(self, transport: Transport) -> None:
        """Serve one connection until the peer hangs up; its tasks are cancelled then."""
        async with self.open() as runtime:
            await runtime.serve(transport)

    async def serve_stdio(self) -> None:
        """Serve over this process's stdin/stdout until stdin closes."""
        async with open_stdio_transport() as transport:
            await self.serve(transport)

    async def serve_stdio_until_signalled(self) -> None:
        """Serve over stdio until stdin closes, or until SIGTERM or SIGINT: then shut down
        cleanly (see :meth:`ServerRuntime.shutdown`) and return."""
        await self.serve_until_signalled(RunOptions())

    async def serve_until_signalled(self, options: RunOptions) -> None:
        """Serve as ``options`` say (stdio, WebSocket or Streamable HTTP) until SIGTERM or
        SIGINT, or until stdin closes over stdio: then shut down cleanly (see
        :meth:`ServerRuntime.shutdown`) and return. Over WebSocket and HTTP the URL served is
        written to stderr once listening (``Serving NAME on URL``)."""
        if options.store is not None:
            from ..stores import store_from_url

            self.store_factory = store_from_url(options.store)
        with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            async with self.open() as runtime, trio.open_nursery() as nursery:
                listening = trio.CancelScope()
                stopped = trio.Event()

                async def serve() -> None:
                    try:
                        with listening:
                            if options.listen is None:
                                async with open_stdio_transport() as transport:
                                    await runtime.serve(transport)
                            else:
                                await _listen(runtime, options)
                    finally:
                        stopped.set()
                    if not listening.cancel_called:
                        nursery.cancel_scope.cancel()

                nursery.start_soon(serve)
                async for signum in signals:
                    log.info("signal %d: shutting down", signum)
                    if options.transport == "http":
                        # serve_http stops gracefully when cancelled: no new requests (503),
                        # those in flight get their grace, then -32603; it returns when done.
                        listening.cancel()
                        await stopped.wait()
                    await runtime.shutdown()
                    nursery.cancel_scope.cancel()
                    break

    def run(
        self,
        argv: Sequence[str] | None = None,
        *,
        ws: str | None = None,
        http: str | None = None,
        token: str | None = None,
        allow_origins: Sequence[str] = (),
        store: str | None = None,
        log_level: str = "warning",
        gc_tuning: bool = True,
    ) -> None:
        """Blocking entry point: serve until SIGTERM/SIGINT (or, over stdio, until stdin
        closes); either way the process then exits with status 0, pending requests answered
        (:data:`SHUTDOWN_GRACE`). Logs go to stderr.

        The transport comes from the command line the way ``trio-mcp serve`` takes it, so
        ``python myserver.py --ws 127.0.0.1:8765`` works for any file ending in
        ``server.run()``: ``--stdio`` (the default), ``--ws HOST:PORT``, ``--http HOST:PORT``,
        ``--token TOKEN`` (or ``TRIO_MCP_TOKEN``), ``--allow-origin ORIGIN`` (repeatable),
        ``--store URL`` (or ``TRIO_MCP_STORE``) and ``--log-level LEVEL``. ``argv`` is what to
        parse (default ``sys.argv[1:]``; pass ``[]`` when embedding in a program with its own
        arguments). The keyword arguments are the defaults the command line overrides, e.g.
        ``server.run(http="127.0.0.1:8000")``. Bad arguments print usage and exit 2; a ``--store``
        file another process serves (:class:`~trio_mcp.stores.StoreLocked`), a store that cannot be
        opened or an address in use (:class:`StartupError`) prints one line and exits 3.

        ``gc_tuning`` applies :func:`tune_gc` first (this process is then a server: say False
        when embedding it in a program that manages the collector itself).
        """
        defaults = RunOptions.from_arguments(
            ws=ws, http=http, token=token, allow_origins=allow_origins, store=store, log_level=log_level
        )
        options = parse_run_args(sys.argv[1:] if argv is None else argv, defaults=defaults)
        logging.basicConfig(
            level=getattr(logging, options.log_level.upper()), stream=sys.stderr, format=LOG_FORMAT
        )
        if gc_tuning:
            tune_gc()
        try:
            trio.run(self.serve_until_signalled, options)
        except Exception as exc:
            leaf = _only_leaf(exc)
            # One line, exit 3: the store cannot be opened or is another process's, or the
            # address is taken (``trio-mcp serve`` says the same).
            if not isinstance(leaf, StartupError) and type(leaf).__name__ != "StoreLocked":
                raise
            print(f"error: {leaf}", file=sys.stderr, flush=True)
            raise SystemExit(3) from None


# ------------------------------------------------------------------- running from a command line


def _only_leaf(exc: BaseException) -> BaseException:
    """The one exception in ``exc``'s nested groups that is not ``Cancelled`` (else ``exc``)."""
    leaves: list[BaseException] = []
    pending = [exc]
    while pending:
        item = pending.pop()
        if isinstance(item, BaseExceptionGroup):
            pending.extend(item.exceptions)
        elif not isinstance(item, trio.Cancelled):
            leaves.append(item)
    return leaves[0] if len(leaves) == 1 else exc


Listener = Callable[..., Awaitable[object]]
"""``serve_websocket`` or ``serve_http``: ``(runtime, host, port, *, allowed_origins,
authenticate, task_status)``, reporting the bound port."""

_LISTENERS: dict[str, tuple[Listener, str]] = {}


def register_listener(transport: str, listener: Listener, url: str) -> None:
    """Make ``transport`` (``ws``, ``http``) servable by :meth:`Server.run`; ``url`` is the
    format of the address announced, with ``{host}`` and ``{port}``. The transports' own
    modules register themselves on import (this keeps them out of this module's imports)."""
    _LISTENERS[transport] = (listener, url)


async def _listen(runtime: ServerRuntime, options: RunOptions) -> None:
    from ..transports.security import DEFAULT_ALLOWED_ORIGINS, static_token

    assert options.listen is not None
    listener, url = _LISTENERS[options.transport]
    host, port = options.listen
    async with trio.open_nursery() as nursery:
        try:
            bound = await nursery.start(
                functools.partial(
                    listener,
                    runtime,
                    host,
                    port,
                    allowed_origins=options.allow_origins or DEFAULT_ALLOWED_ORIGINS,
                    authenticate=static_token(options.token) if options.token else None,
                )
            )
        except Exception as exc:  # arrives wrapped in the listener's nursery's ExceptionGroup
            leaf = _only_leaf(exc)
            if isinstance(leaf, OSError):
                raise StartupError(f"cannot listen on {host}:{port}: {leaf.strerror or leaf}") from None
            raise
        literal = f"[{host}]" if ":" in host else host
        address = url.format(host=literal, port=bound)
        print(f"Serving {runtime.server.info.name} on {address}", file=sys.stderr, flush=True)


class StartupError(Exception):
    """The server cannot start: its task store cannot be opened, or it cannot listen where
    it was told to. Its message is one line for the operator (:meth:`Server.run` and
    ``trio-mcp serve`` print it and exit 3)."""


async def _connect_store(store: TaskStore, connect: Callable[[], Awaitable[None]]) -> None:
    """Connect ``store`` at start-up: a store that cannot be opened (an unusable path, a server
    not there) is a :class:`StartupError` naming it; :class:`~trio_mcp.stores.StoreLocked` (the
    file is another process's) stays as it is."""
    try:
        await connect()
    except Exception as exc:
        if type(exc).__name__ == "StoreLocked":
            raise
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise StartupError(f"cannot open the task store {store!r}: {reason}") from exc


def _both(first: Tracer, second: Tracer) -> Tracer:
    if first is no_trace:
        return second

    def tracer(kind: str, fields: dict[str, Any]) -> None:
        first(kind, fields)
        second(kind, fields)

    return tracer


@asynccontextmanager
async def open_runtime(server_or_runtime: Server | ServerRuntime) -> AsyncIterator[ServerRuntime]:
    """An open runtime: ``server_or_runtime`` itself, or one opened on the server for the block."""
    if isinstance(server_or_runtime, ServerRuntime):
        yield server_or_runtime
    else:
        async with server_or_runtime.open() as runtime:
            yield runtime


def default_store() -> TaskStore:
    """The store a :class:`Server` uses unless told otherwise: records in this process's memory."""
    return MemoryTaskStore()


def tune_gc() -> None:
    """Collector settings for a server holding many long-lived tasks.

    Every live task is a few dozen tracked objects that live for minutes. With CPython's
    default thresholds the collector rescans them all again and again in full collections
    (most of a task creation's cost at 10 000 live tasks). This freezes what start-up
    allocated (modules, classes) and keeps every collection small:

    * a young collection every :data:`GC_THRESHOLD` allocations, and every second one also
      collects the middle generation (its threshold is 0), so what survives one young
      collection reaches the old generation at the next. A collection scans at most about
      ``2 * GC_THRESHOLD`` objects, recently made ones, however many tasks are live, and a
      long-lived object is scanned twice before it is old. (The earlier settings, young
      threshold 20 000 and middle 50, let the middle generation grow to a million objects:
      0.4 s pauses, and twice the collector's time per task creation, at 100 000 live tasks.)
    * a full collection is considered after :data:`GC_FULL_AFTER` middle ones (about 10⁹
      allocations; CPython then also waits until the old generation has grown by a quarter):
      cycles among old objects are still collected, rarely.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 0, GC_FULL_AFTER)


LOG_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
"""How :meth:`Server.run` writes log records to stderr: the format of ``trio-mcp serve``."""

SHUTDOWN_GRACE = 2.0
"""Seconds :meth:`ServerRuntime.shutdown` gives the answers to pending requests to be written."""

GC_THRESHOLD = 5_000
"""Allocations between young-generation collections under :func:`tune_gc` (CPython: 700)."""

GC_FULL_AFTER = 100_000
"""Middle-generation collections between full ones under :func:`tune_gc` (CPython: 10)."""


@attrs.define(eq=False)
class ServerRuntime:
    """A running server: its supervisor, shared by every connection served through it."""

    server: Server
    supervisor: TaskSupervisor
    sessions: set[SessionActor] = attrs.Factory(set)
    """The sessions being served now."""
    lifespan: Any = None
    """What the server's ``lifespan`` yielded for this runtime (None without one): what tools
    read as :attr:`Context.lifespan <trio_mcp.server.Context.lifespan>`."""
    stateless: Stateless = attrs.field(init=False)
    """Serves stateless (2026-07-28) requests without a connection: :meth:`serve_one`."""

    @stateless.default
    def _stateless(self) -> Stateless:
        # Queued tasks' work is read back against this server's tools (actors/_queue.py).
        self.supervisor.work_reader = WorkSource(self.server, self.supervisor)
        return Stateless(self.server, self.supervisor)

    async def serve_one(
        self,
        request: jsonrpc.Request,
        *,
        owner: str,
        client: str | None = None,
        send: Callable[[bytes], bool],
    ) -> tuple[bytes, int | None]:
        """Serve one stateless (2026-07-28) request in the caller's Trio task, without a
        connection actor: its encoded answer, and the JSON-RPC error code that answer carries
        (None for a result). Its notifications (progress, log messages, a
        ``subscriptions/listen`` stream) go to ``send`` first, in order.

        Tasks belong to ``owner``; ``client`` is whom they count under for the per-client
        limits. Cancel the caller to abandon the request (its work is cancelled). See
        :class:`~trio_mcp.actors._oneshot.Stateless`.
        """
        return await self.stateless.serve_one(request, owner=owner, client=client, send=send)

    async def shutdown(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Stop serving cleanly: every request still waiting is answered with an error
        (-32603 "server shutting down") and its work cancelled, and what is queued for each
        client is written, for at most ``grace`` seconds. Cancel the serving nursery after.

        With a store that is a work queue, the tasks running here first get
        :attr:`Server.drain_seconds` to finish (no new ones are claimed meanwhile); each still
        running then goes back to the queue for another process if its tool may run again
        (``retries``/``idempotent``), or ends ``failed`` "server shut down"."""
        if self.supervisor.queues:
            await self.supervisor.drain(self.server.drain_seconds)
        for session in list(self.sessions):
            session.shutdown()
        self.stateless.shutdown()
        with trio.move_on_after(grace):
            while any(session.outbound_bytes for session in self.sessions):  # noqa: ASYNC110
                await trio.sleep(0.01)  # bounded, once, at the end of the process

    async def serve(
        self,
        transport: Transport,
        *,
        owner: str | None = None,
        idle_timeout: float | None = None,
        client: str | None = None,
    ) -> None:
        """Run a session actor on ``transport`` until the peer hangs up (or, with
        ``idle_timeout``, stays silent that long with nothing outstanding).

        Tasks belong to ``owner``, a string identity (default: one minted for this connection).
        Connection-owned tasks are cancelled and removed when the connection closes; tasks of
        an explicit owner (an authenticated identity) outlive it. ``client`` is whom the
        owner's tasks count under for the per-client limits (:class:`TaskLimits`): the peer's
        address for a connection without an identity (default: the owner itself).
        """
        session = SessionActor(
            self.server, self.supervisor, transport, owner=owner, idle_timeout=idle_timeout, client=client
        )
        self.sessions.add(session)
        try:
            await session.run()
        except Exception as exc:  # the supervisor's decision: a crashed session closes its connection
            log.error("%s crashed; its connection is closed: %r", session.name, exc, exc_info=exc)
        finally:
            self.sessions.discard(session)
