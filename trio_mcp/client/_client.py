"""A Trio MCP client, with the task API of 2025-11-25.

>>> import trio
>>> from trio_mcp import Server
>>> server = Server("demo")
>>> @server.tool(task_support="optional")
... async def echo(text: str) -> str:
...     return text
>>> async def main() -> str:
...     async with connect_in_memory(server) as client:
...         created = await client.call_tool_as_task("echo", {"text": "hi"})
...         return (await client.task_result(created.task.task_id)).text
>>> trio.run(main)
'hi'
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Protocol

import attrs
import trio

from ..actors._endpoint import NO_RESPONSE, ConnectionClosed, Endpoint
from ..actors._receiver import Started, TaskReceiver
from ..actors._requestor import TaskRequestor, poll_task
from ..actors.runtime import unwrap_single
from ..actors.supervisor import TaskSupervisor
from ..actors.task_actor import TaskActor
from ..protocol import jsonrpc
from ..protocol.converter import structure, unstructure
from ..protocol.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    TASK_CANCELLED,
    UNSUPPORTED_PROTOCOL_VERSION,
    URL_ELICITATION_REQUIRED,
    ErrorValue,
    McpError,
)
from ..protocol.handshake import HandshakeDialect
from ..protocol.messages import (
    CallToolResult,
    CancelledParams,
    CreateMessageParams,
    CreateMessageResult,
    CreateTaskResult,
    DetailedTask,
    ElicitRequestParams,
    ElicitResult,
    ElicitUrlRequestParams,
    Implementation,
    InitializeResult,
    ListTasksResult,
    ListToolsResult,
    PaginatedParams,
    ProgressParams,
    Task,
    TaskIdParams,
    TaskMetadata,
    Tool,
)
from ..protocol.modern import CLIENT_CAPABILITIES_KEY, CLIENT_INFO_KEY, PROTOCOL_VERSION_KEY, TASKS_EXTENSION
from ..protocol.records import TaskOutcome
from ..protocol.tasks import TaskStatus
from ..protocol.versions import LATEST_VERSION, MODERN_VERSIONS
from ..transports.base import Transport
from ..transports.memory import memory_transport_pair
from ..transports.stdio import open_subprocess_transport
from ._headers import accept_tool
from ._results import GetPromptResult, Prompt, ReadResourceResult, Resource, ResourceTemplate

__all__ = [
    "MAX_INPUT_ROUNDS",
    "PROBE_TIMEOUT",
    "Client",
    "ConnectionClosed",
    "ElicitationCompleteCallback",
    "ElicitationHandler",
    "ProgressCallback",
    "SamplingHandler",
    "Servable",
    "StatusCallback",
    "UrlElicitationHandler",
    "UrlElicitationRequired",
    "connect",
    "connect_in_memory",
    "connect_stdio",
]


class _Runtime(Protocol):
    async def serve(self, transport: Transport) -> None: ...


class Servable(Protocol):
    """What :func:`connect_in_memory` serves: anything with ``open()`` like :class:`~trio_mcp.Server`."""

    def open(self) -> AbstractAsyncContextManager[_Runtime]: ...


PROBE_TIMEOUT = 5.0
"""Seconds ``protocol="auto"`` waits for an answer to its ``server/discover`` probe."""
MAX_INPUT_ROUNDS = 16
"""Most ``InputRequiredResult`` rounds one modern-era call may take."""

ProgressCallback = Callable[[ProgressParams], None]
StatusCallback = Callable[[Task], None]
ElicitationHandler = Callable[[ElicitRequestParams], Awaitable[ElicitResult]]
UrlElicitationHandler = Callable[[ElicitUrlRequestParams], Awaitable[ElicitResult]]
"""Answers a URL-mode elicitation: show the message and the full URL, and open it (in the
user's browser, never fetched by the client) only with the user's consent."""
ElicitationCompleteCallback = Callable[[str], None]
"""Told the ``elicitationId`` of a URL-mode elicitation the server says is over."""
MAX_KNOWN_ELICITATIONS = 1000
SamplingHandler = Callable[[CreateMessageParams], Awaitable[CreateMessageResult]]

CLIENT_INFO = Implementation(name="trio-mcp-client", version="0.1.0")


class UrlElicitationRequired(McpError):
    """A request refused with -32042 (2025-11-25): the server needs the user to visit the
    URLs of ``elicitations`` (URL-mode requests, each with its ``elicitation_id``) before it
    can be served. Show them as :data:`UrlElicitationHandler` would; the request may be sent
    again once they are done (``on_elicitation_complete`` hears of each, if the server says).

    >>> error = UrlElicitationRequired(-32042, "Connect first", {"elicitations": [
    ...     {"mode": "url", "elicitationId": "e1", "url": "https://x/connect", "message": "Connect"}]})
    >>> [(e.elicitation_id, e.url) for e in error.elicitations]
    [('e1', 'https://x/connect')]
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(code, message, data)
        found = data.get("elicitations") if isinstance(data, dict) else None
        self.elicitations: list[ElicitUrlRequestParams] = []
        for item in found if isinstance(found, list) else ():
            try:
                self.elicitations.append(structure(item, ElicitUrlRequestParams))
            except McpError:
                continue  # not a URL-mode elicitation: nothing to show


class Client(Endpoint):
    """One connection to an MCP server. Use :func:`connect`, :func:`connect_stdio` or
    :func:`connect_in_memory`, which run it and perform the handshake."""

    def __init__(
        self,
        transport: Transport,
        *,
        on_elicit: ElicitationHandler | None = None,
        on_sample: SamplingHandler | None = None,
        client_info: Implementation = CLIENT_INFO,
        tasks_extension: bool = True,
        roots: Sequence[Mapping[str, Any]] | None = None,
        on_elicit_url: UrlElicitationHandler | None = None,
        on_elicitation_complete: ElicitationCompleteCallback | None = None,
    ) -> None:
        super().__init__(transport)
        self.on_elicit_url = on_elicit_url
        """Answers URL-mode elicitations; None: no ``elicitation.url`` capability."""
        self.on_elicitation_complete = on_elicitation_complete
        """Called with the id of each URL-mode elicitation the server says is over
        (``notifications/elicitation/complete``, 2025-11-25), once, for ids it asked about."""
        self._url_elicitations: dict[str, None] = {}  # ids asked, not yet said complete
        self.roots: list[dict[str, Any]] | None = [dict(r) for r in roots] if roots is not None else None
        """What ``roots/list`` answers (``{"uri": "file:///…", "name": …}`` each); None: no
        ``roots`` capability. Change it with :meth:`set_roots`."""
        self.tasks_extension = tasks_extension
        """Modern era: declare the tasks extension, so the server may answer with tasks."""
        self.on_elicit = on_elicit
        self.client_info = client_info
        self.era: str | None = None
        """``"handshake"`` or ``"modern"`` once connected (see :meth:`open`)."""
        self.protocol_version: str | None = None
        self.discovery: dict[str, Any] | None = None
        """The ``server/discover`` result, in the modern era."""
        self._dialect = HandshakeDialect()  # how the tasks we run for the server are written
        self.on_sample = on_sample
        self.tasks = TaskRequestor(self)
        """The server's tasks (the raw requestor API; the methods below wrap it)."""
        self.receiver: TaskReceiver | None = None
        """Runs the tasks the server asks of us; set by :func:`connect`."""
        self.server: InitializeResult | None = None
        self._progress: dict[int | str, ProgressCallback] = {}
        self._tokens = itertools.count(1)
        self.status_callbacks: list[StatusCallback] = []
        self._answered: dict[str, set[str]] = {}
        self._serving: dict[jsonrpc.RequestId, trio.CancelScope] = {}  # the server's requests we answer

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send a request and wait for its result; an error response raises McpError (-32042:
        :class:`UrlElicitationRequired`, whose elicitations' ids are then known to
        ``on_elicitation_complete``)."""
        try:
            return await super().request(method, params)
        except McpError as exc:
            if exc.code != URL_ELICITATION_REQUIRED or isinstance(exc, UrlElicitationRequired):
                raise
            required = UrlElicitationRequired(exc.code, exc.message, exc.data)
            for elicitation in required.elicitations:
                if elicitation.elicitation_id is not None:
                    self._know_elicitation(elicitation.elicitation_id)
            raise required from exc

    def _know_elicitation(self, elicitation_id: str) -> None:
        """Remember a URL-mode elicitation the server asked for (its completion is awaited)."""
        self._url_elicitations[elicitation_id] = None
        while len(self._url_elicitations) > MAX_KNOWN_ELICITATIONS:
            del self._url_elicitations[next(iter(self._url_elicitations))]

    # -- incoming -------------------------------------------------------------------------
    @property
    def capabilities(self) -> dict[str, Any]:
        """What this client declares: elicitation / sampling when it has a handler for them."""
        capabilities: dict[str, Any] = {}
        if self.elicits:
            capabilities["elicitation"] = self._elicitation_modes()
        if self.on_sample is not None:
            capabilities["sampling"] = {}
        if self.roots is not None:
            capabilities["roots"] = {"listChanged": True}
        if self.receiver is not None and (self.elicits or self.on_sample):
            requests: dict[str, Any] = {}
            if self.elicits:
                requests["elicitation"] = {"create": {}}
            if self.on_sample is not None:
                requests["sampling"] = {"createMessage": {}}
            capabilities["tasks"] = {"list": {}, "cancel": {}, "requests": requests}
        return capabilities

    @property
    def elicits(self) -> bool:
        """Whether this client answers elicitations (``on_elicit`` or ``on_elicit_url``)."""
        return self.on_elicit is not None or self.on_elicit_url is not None

    def _elicitation_modes(self) -> dict[str, Any]:
        modes: dict[str, Any] = {}
        if self.on_elicit is not None:
            modes["form"] = {}
        if self.on_elicit_url is not None:
            modes["url"] = {}
        return modes

    async def on_request(self, request: jsonrpc.Request) -> None:
        if request.method == "ping":
            await self.respond(request.id, {})
        elif request.method == "roots/list" and self.roots is not None:
            await self.respond(request.id, {"roots": self.roots})
        elif request.method == "elicitation/create" and self.elicits:
            await self._run_handler(request, None, self._elicit_any)
        elif request.method == "sampling/createMessage" and self.on_sample is not None:
            await self._run_handler(request, CreateMessageParams, self.on_sample)
        elif request.method.startswith("tasks/") and self.receiver is not None:
            await self._serve_tasks(request, self.receiver)
        else:
            await self.respond_error(
                request.id, ErrorValue(METHOD_NOT_FOUND, f"Method not found: {request.method}")
            )

    async def _elicit(self, params: ElicitRequestParams) -> ElicitResult:
        """``on_elicit``, with the schema's defaults filled in where an accepted answer left a
        field out (SEP-1034)."""
        assert self.on_elicit is not None
        result = await self.on_elicit(params)
        return apply_elicitation_defaults(params, result)

    async def _elicit_any(self, params: dict[str, Any]) -> ElicitResult:
        """An ``elicitation/create`` of either mode, to the handler of that mode; -32602 for a
        mode this client did not declare (as the specification says)."""
        mode = params.get("mode", "form")
        if mode == "url" and self.on_elicit_url is not None:
            request = structure(params, ElicitUrlRequestParams)
            if request.elicitation_id is not None:
                self._know_elicitation(request.elicitation_id)
            result = await self.on_elicit_url(request)
            return attrs.evolve(result, content=None)  # URL mode: nothing but the action
        if mode == "form" and self.on_elicit is not None:
            return await self._elicit(structure(params, ElicitRequestParams))
        raise McpError(INVALID_PARAMS, f"Invalid params: this client does not take {mode!r} elicitations")

    async def _run_handler(
        self,
        request: jsonrpc.Request,
        params_type: type[Any] | None,
        handler: Callable[[Any], Awaitable[Any]],
    ) -> None:
        """Answer a server request with ``handler``: as a task when the server asked for one
        and we declared task support, else as an ordinary request. Never blocks the reader.
        ``params_type`` None: the handler takes the params as they came (an object)."""
        assert self.nursery is not None

        def parse(params: Any) -> Any:
            if params_type is None:
                return structure(params if params is not None else {}, dict[str, Any])
            return structure(params, params_type)

        async def plain(request: jsonrpc.Request) -> dict[str, Any]:
            data: dict[str, Any] = unstructure(await handler(parse(request.params)))
            return data

        receiver = self.receiver
        if isinstance((request.params or {}).get("task"), dict) and receiver is not None:

            async def as_task(request: jsonrpc.Request) -> dict[str, Any]:
                params = parse(request.params)
                ttl = structure((request.params or {})["task"], TaskMetadata).ttl

                async def work(actor: TaskActor) -> TaskOutcome:
                    return TaskOutcome(result=unstructure(await handler(params)))

                await receiver.create(request, work, ttl)
                return NO_RESPONSE

            await self.answer(request, as_task)
        else:
            scope = trio.CancelScope()
            self._serving[request.id] = scope
            self.nursery.start_soon(self._answer_withdrawable, request, plain, scope)

    async def _answer_withdrawable(
        self,
        request: jsonrpc.Request,
        handler: Callable[[jsonrpc.Request], Awaitable[dict[str, Any]]],
        scope: trio.CancelScope,
    ) -> None:
        """Answer a server request unless the server withdraws it (``notifications/cancelled``):
        then the handler is cancelled and, as the spec asks, nothing is answered."""
        try:
            with scope:
                await self.answer(request, handler)
        finally:
            if self._serving.get(request.id) is scope:
                del self._serving[request.id]

    async def _serve_tasks(self, request: jsonrpc.Request, receiver: TaskReceiver) -> None:
        method = request.method
        if method not in ("tasks/get", "tasks/cancel", "tasks/list", "tasks/result"):
            await self.respond_error(
                request.id, ErrorValue(METHOD_NOT_FOUND, f"Method not found: {request.method}")
            )
            return

        async def handle(request: jsonrpc.Request) -> dict[str, Any]:
            if method == "tasks/list":
                cursor = structure(request.params, PaginatedParams).cursor
                return await receiver.start_list(cursor, self._dialect.render_page).wait()
            return await receiver.result(structure(request.params, TaskIdParams).task_id)

        if method == "tasks/result":
            assert self.nursery is not None
            self.nursery.start_soon(self.answer, request, handle)
        elif method == "tasks/list":
            await self.answer(request, handle)
        else:  # tasks/get, tasks/cancel: the dialect writes the task as JSON text, sent as it is
            try:
                task_id = structure(request.params, TaskIdParams).task_id
            except McpError as exc:
                await self.respond_error(request.id, exc.value)
                return
            started: Started = (receiver.start_get if method == "tasks/get" else receiver.start_cancel)(
                task_id
            )
            await self._send_answer(await started.answer(request.id), None)

    async def on_notification(self, notification: jsonrpc.Notification) -> None:
        try:
            if notification.method == "notifications/progress":
                params = structure(notification.params, ProgressParams)
                callback = self._progress.get(params.progress_token)
                if callback is not None:
                    callback(params)
            elif notification.method == "notifications/tasks/status":
                task = structure(notification.params, Task)
                for on_status in self.status_callbacks:
                    on_status(task)
            elif notification.method == "notifications/elicitation/complete":
                done = (notification.params or {}).get("elicitationId")
                if isinstance(done, str) and done in self._url_elicitations:  # unknown ids ignored
                    del self._url_elicitations[done]
                    if self.on_elicitation_complete is not None:
                        self.on_elicitation_complete(done)
            elif notification.method == "notifications/cancelled":
                withdrawn = structure(notification.params, CancelledParams).request_id
                scope = self._serving.get(withdrawn) if withdrawn is not None else None
                if scope is not None:
                    scope.cancel()
        except McpError:
            pass  # a malformed notification from the server is not worth dying for

    # -- lifecycle ------------------------------------------------------------------------
    async def initialize(
        self,
        client_info: Implementation = CLIENT_INFO,
        capabilities: dict[str, Any] | None = None,
        protocol_version: str = LATEST_VERSION,
    ) -> InitializeResult:
        result = await self.request(
            "initialize",
            {
                "protocolVersion": protocol_version,
                "capabilities": capabilities if capabilities is not None else self.capabilities,
                "clientInfo": unstructure(client_info),
            },
        )
        self.server = structure(result, InitializeResult)
        self.era, self.protocol_version = "handshake", self.server.protocol_version
        await self.send(jsonrpc.encode_notification("notifications/initialized"))
        return self.server

    async def open(self, protocol: str = LATEST_VERSION, *, probe_timeout: float = PROBE_TIMEOUT) -> None:
        """Start talking to the server in ``protocol``: a handshake-era version (``initialize``),
        ``"2026-07-28"`` (``server/discover``), or ``"auto"``: probe with ``server/discover`` and
        settle on the modern era if the server speaks it, else fall back to ``initialize`` — on
        any answer that is not a modern one, or no answer within ``probe_timeout`` seconds."""
        if protocol in MODERN_VERSIONS:
            try:
                await self.discover(protocol)
            except McpError as exc:
                # -32022 naming our version among those supported: retry it once, as the spec
                # says a client retries with a supported version (the refusal may be transient)
                supported = exc.data.get("supported") if isinstance(exc.data, dict) else None
                if exc.code != UNSUPPORTED_PROTOCOL_VERSION or not isinstance(supported, list):
                    raise
                if protocol not in supported:
                    raise
                await self.discover(protocol)
            return
        if protocol != "auto":
            await self.initialize(protocol_version=protocol)
            return
        version = MODERN_VERSIONS[0]
        with trio.move_on_after(probe_timeout):
            try:
                await self.discover(version)
                return
            except McpError as exc:
                supported = exc.data.get("supported") if isinstance(exc.data, dict) else None
                if exc.code == UNSUPPORTED_PROTOCOL_VERSION and isinstance(supported, list):
                    common = [v for v in MODERN_VERSIONS if v in supported]
                    if common:
                        await self.discover(common[0])
                        return
        await self.initialize()

    async def discover(self, version: str = MODERN_VERSIONS[0]) -> dict[str, Any]:
        """``server/discover``: settle on the modern era at ``version``."""
        result = await self.request("server/discover", self._envelope(None, version))
        if "supportedVersions" not in result:
            raise McpError(INVALID_REQUEST, "not a server/discover result")
        self.discovery = result
        self.era, self.protocol_version = "modern", version
        return result

    @property
    def modern(self) -> bool:
        return self.era == "modern"

    def modern_capabilities(self) -> dict[str, Any]:
        """What this client declares on each modern-era request: input it can give, and tasks."""
        capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if self.tasks_extension else {}
        if self.elicits:
            capabilities["elicitation"] = self._elicitation_modes()
        if self.on_sample is not None:
            capabilities["sampling"] = {}
        if self.roots is not None:
            capabilities["roots"] = {}
        return capabilities

    async def set_roots(self, roots: Sequence[Mapping[str, Any]]) -> None:
        """Change the roots; in the handshake era the server is told
        (``notifications/roots/list_changed``). Modern-era servers ask each time."""
        self.roots = [dict(r) for r in roots]
        if self.era == "handshake":
            await self.send(jsonrpc.encode_notification("notifications/roots/list_changed"))

    def _envelope(self, params: dict[str, Any] | None, version: str | None = None) -> dict[str, Any]:
        out = dict(params or {})
        meta = dict(out.get("_meta") or {})
        meta[PROTOCOL_VERSION_KEY] = version or self.protocol_version
        meta[CLIENT_CAPABILITIES_KEY] = self.modern_capabilities()
        meta[CLIENT_INFO_KEY] = unstructure(self.client_info)
        out["_meta"] = meta
        return out

    async def _call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """A request in this connection's era (the modern envelope added where it belongs)."""
        if self.modern:
            return await self.request(method, self._envelope(params))
        return await self.request(method, params)

    async def ping(self) -> None:
        await self.request("ping")

    # -- tools ----------------------------------------------------------------------------
    async def list_tools(self) -> list[Tool]:
        """Every tool, following ``nextCursor`` across pages."""
        tools: list[Tool] = []
        cursor: str | None = None
        while True:
            page = structure(
                await self._call("tools/list", {"cursor": cursor} if cursor else {}), ListToolsResult
            )
            tools.extend(page.tools)
            if page.next_cursor is None:
                return self._accept_tools(tools)
            cursor = page.next_cursor

    def _accept_tools(self, tools: list[Tool]) -> list[Tool]:
        """Over a transport that mirrors arguments into headers (Streamable HTTP, SEP-2243):
        leave out the tools whose ``x-mcp-header`` annotations are invalid, and tell the
        transport which arguments of the others travel as ``Mcp-Param-*`` headers."""
        registry = getattr(self.transport, "tool_headers", None)
        if not isinstance(registry, dict):
            return tools
        accepted = []
        for tool in tools:
            params = accept_tool(tool.name, tool.input_schema)
            if params is not None:
                registry[tool.name] = params
                accepted.append(tool)
        return accepted

    # -- resources, prompts, completion --------------------------------------------------------
    async def _all_pages(self, method: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await self._call(method, {"cursor": cursor} if cursor else {})
            items.extend(item for item in page.get(key) or [] if isinstance(item, dict))
            cursor = page.get("nextCursor") if isinstance(page.get("nextCursor"), str) else None
            if cursor is None:
                return items

    async def list_resources(self) -> list[Resource]:
        """Every resource (``resources/list``, across pages)."""
        return [structure(r, Resource) for r in await self._all_pages("resources/list", "resources")]

    async def list_resource_templates(self) -> list[ResourceTemplate]:
        """Every resource template (``resources/templates/list``, across pages)."""
        pages = await self._all_pages("resources/templates/list", "resourceTemplates")
        return [structure(t, ResourceTemplate) for t in pages]

    async def read_resource(self, uri: str) -> ReadResourceResult:
        """``resources/read``: its ``contents`` hold the resource (``.text`` joins the texts)."""
        return structure(await self._call("resources/read", {"uri": uri}), ReadResourceResult)

    async def list_prompts(self) -> list[Prompt]:
        """Every prompt (``prompts/list``, across pages)."""
        return [structure(p, Prompt) for p in await self._all_pages("prompts/list", "prompts")]

    async def get_prompt(self, name: str, arguments: dict[str, str] | None = None) -> GetPromptResult:
        """``prompts/get``: its ``messages`` are the prompt."""
        params: dict[str, Any] = {"name": name}
        if arguments:
            params["arguments"] = arguments
        return structure(await self._call("prompts/get", params), GetPromptResult)

    async def complete(self, ref: dict[str, Any], argument: str, value: str) -> list[str]:
        """``completion/complete``: the suggested values for ``argument`` of ``ref`` (a
        ``{"type": "ref/prompt", "name": ...}`` or ``{"type": "ref/resource", "uri": ...}``)."""
        result = await self._call(
            "completion/complete", {"ref": ref, "argument": {"name": argument, "value": value}}
        )
        completion = result.get("completion") if isinstance(result.get("completion"), dict) else {}
        return [v for v in (completion or {}).get("values") or [] if isinstance(v, str)]

    def _meta_for(self, on_progress: ProgressCallback | None) -> tuple[dict[str, Any] | None, int | None]:
        if on_progress is None:
            return None, None
        token = next(self._tokens)
        self._progress[token] = on_progress
        return {"progressToken": token}, token

    async def call_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> CallToolResult:
        """An ordinary call: waits for the result. Protocol errors raise McpError; a tool's own
        failure comes back as a result with ``is_error``."""
        if self.modern:
            started = await self.start_tool(name, arguments, on_progress=on_progress)
            if isinstance(started, CallToolResult):
                return started
            return await self.task_result(started.task_id)
        meta, token = self._meta_for(on_progress)
        params: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        if meta:
            params["_meta"] = meta
        try:
            return structure(await self.request("tools/call", params), CallToolResult)
        finally:
            if token is not None:
                self._progress.pop(token, None)

    async def start_tool(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> CallToolResult | DetailedTask:
        """Modern era: call a tool and return what the server decided — its result, or the task
        it runs the call as (follow it with :meth:`task_result`, :meth:`get_detailed_task`,
        :meth:`update_task`, :meth:`cancel_task`). Requests for input (``InputRequiredResult``)
        are answered with ``on_elicit`` / ``on_sample`` and the call retried, as MRTR says."""
        meta, token = self._meta_for(on_progress)
        base: dict[str, Any] = {"name": name, "arguments": arguments or {}}
        if meta:
            base["_meta"] = meta
        params = base
        try:
            for _ in range(MAX_INPUT_ROUNDS):
                result = await self._call("tools/call", params)
                kind = result.get("resultType", "complete")
                if kind == "task":
                    return structure(result, DetailedTask)
                if kind == "complete":
                    return structure(result, CallToolResult)
                if kind != "input_required":
                    raise McpError(INVALID_REQUEST, f"unknown resultType {kind!r} from the server")
                params = {
                    **base,
                    "inputResponses": await self._answer_inputs(result.get("inputRequests") or {}),
                }
                if isinstance(result.get("requestState"), str):
                    params["requestState"] = result["requestState"]
            raise McpError(INVALID_REQUEST, f"the server asked for input more than {MAX_INPUT_ROUNDS} times")
        finally:
            if token is not None:
                self._progress.pop(token, None)

    async def _answer_inputs(self, requests: dict[str, Any]) -> dict[str, Any]:
        """Answer a modern-era ``inputRequests`` map with this client's handlers."""
        answers: dict[str, Any] = {}
        for key, request in requests.items():
            method = request.get("method") if isinstance(request, dict) else None
            params = request.get("params") if isinstance(request, dict) else None
            if method == "elicitation/create" and self.elicits:
                answers[key] = unstructure(await self._elicit_any(structure(params, dict[str, Any])))
            elif method == "sampling/createMessage" and self.on_sample is not None:
                answers[key] = unstructure(await self.on_sample(structure(params, CreateMessageParams)))
            elif method == "roots/list" and self.roots is not None:
                answers[key] = {"roots": self.roots}
            else:
                raise McpError(METHOD_NOT_FOUND, f"cannot answer the server's {method!r} request")
        return answers

    async def call_tool_as_task(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        ttl_ms: int | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> CreateTaskResult:
        """Create a task; returns at once. ``on_progress`` stays subscribed for the task's life.

        Raises McpError (-32600) without sending anything if the server did not declare
        ``tasks.requests.tools.call``: the spec forbids task-augmenting its tools then.
        """
        if self.modern:
            raise McpError(
                INVALID_REQUEST, "In 2026-07-28 the server decides what runs as a task: use start_tool"
            )
        if self.server is not None and not _declares(
            self.server.capabilities, "tasks", "requests", "tools", "call"
        ):
            raise McpError(INVALID_REQUEST, "The server does not support task-augmented tools/call")
        meta, _ = self._meta_for(on_progress)
        params: dict[str, Any] = {
            "name": name,
            "arguments": arguments or {},
            "task": unstructure(TaskMetadata(ttl=ttl_ms)),
        }
        if meta:
            params["_meta"] = meta
        return structure(await self.request("tools/call", params), CreateTaskResult)

    # -- tasks ----------------------------------------------------------------------------
    async def get_task(self, task_id: str) -> Task:
        if self.modern:
            return (await self.get_detailed_task(task_id)).as_task()
        return await self.tasks.get(task_id)

    async def get_detailed_task(self, task_id: str) -> DetailedTask:
        """Modern era: ``tasks/get``, with the result, error or input requests inline."""
        return structure(await self._call("tasks/get", {"taskId": task_id}), DetailedTask)

    async def answer_task_input(self, task: DetailedTask | str) -> bool:
        """Modern era: answer the task's input requests not answered yet (with ``on_elicit`` /
        ``on_sample``) through ``tasks/update``; whether there were any. Keys are unique for a
        task's life, so each request is answered once however often it is seen."""
        if isinstance(task, str):
            task = await self.get_detailed_task(task)
        answered = self._answered.setdefault(task.task_id, set())
        pending = {k: v for k, v in (task.input_requests or {}).items() if k not in answered}
        if not pending:
            return False
        answered.update(pending)
        await self.update_task(task.task_id, await self._answer_inputs(pending))
        return True

    async def update_task(self, task_id: str, responses: dict[str, Any]) -> None:
        """Modern era: ``tasks/update``, answers to the task's input requests by key."""
        await self._call("tasks/update", {"taskId": task_id, "inputResponses": responses})

    async def task_result(self, task_id: str, *, default_interval_ms: int = 1000) -> CallToolResult:
        """Wait for the task to end and return what the call would have returned
        (or raise the McpError it would have raised). In the modern era this polls
        ``tasks/get`` and answers the task's input requests with ``on_elicit`` / ``on_sample``."""
        if not self.modern:
            return structure(await self.tasks.result(task_id), CallToolResult)
        while True:
            task = await self.get_detailed_task(task_id)
            for on_status in self.status_callbacks:
                on_status(task.as_task())
            if task.status == TaskStatus.COMPLETED and task.result is not None:
                return structure(task.result, CallToolResult)
            if task.status == TaskStatus.FAILED:
                error = task.error or {}
                raise McpError(
                    int(error.get("code", INTERNAL_ERROR)),
                    str(error.get("message", "failed")),
                    error.get("data"),
                )
            if task.status == TaskStatus.CANCELLED:
                raise McpError(TASK_CANCELLED, "Task was cancelled: the request has no result")
            if await self.answer_task_input(task):
                continue
            interval = task.poll_interval_ms if task.poll_interval_ms is not None else default_interval_ms
            await trio.sleep(interval / 1000)

    async def list_tasks(self, cursor: str | None = None) -> ListTasksResult:
        return await self.tasks.list(cursor)

    def all_tasks(self) -> AsyncIterator[Task]:
        """Every task the server lists for us, across pages."""
        return self.tasks.all()

    async def cancel_task(self, task_id: str) -> Task:
        """Cancel the task; the task as it is afterwards. (Modern era: ``tasks/cancel`` is an
        acknowledgement, and the task is read back with ``tasks/get``.)"""
        if self.modern:
            await self._call("tasks/cancel", {"taskId": task_id})
            return await self.get_task(task_id)
        return await self.tasks.cancel(task_id)

    async def poll_task(
        self, task_id: str, *, on_status: StatusCallback | None = None, default_interval_ms: int = 1000
    ) -> Task:
        """Poll ``tasks/get`` until the task is terminal (or ``input_required``), sleeping the
        server's ``pollInterval`` between polls. Returns the last Task seen."""
        return await poll_task(
            self.get_task, task_id, on_status=on_status, default_interval_ms=default_interval_ms
        )


def apply_elicitation_defaults(params: ElicitRequestParams, result: ElicitResult) -> ElicitResult:
    """An accepted elicitation answer with the ``default`` of every property of the requested
    schema it leaves out (SEP-1034); other answers as they are.

    >>> schema = {"type": "object", "properties": {"n": {"type": "integer", "default": 3}}}
    >>> params = ElicitRequestParams("?", schema)
    >>> apply_elicitation_defaults(params, ElicitResult(action="accept", content={})).content
    {'n': 3}
    """
    if result.action != "accept":
        return result
    properties = params.requested_schema.get("properties")
    if not isinstance(properties, dict):
        return result
    content = dict(result.content or {})
    for name, schema in properties.items():
        if name not in content and isinstance(schema, dict) and "default" in schema:
            content[name] = schema["default"]
    return attrs.evolve(result, content=content)


def _declares(capabilities: dict[str, Any], *path: str) -> bool:
    node: Any = capabilities
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return False
        node = node[key]
    return True


@asynccontextmanager
async def connect(
    transport: Transport,
    *,
    initialize: bool = True,
    on_elicit: ElicitationHandler | None = None,
    on_sample: SamplingHandler | None = None,
    protocol: str = LATEST_VERSION,
    tasks_extension: bool = True,
    roots: Sequence[Mapping[str, Any]] | None = None,
    on_elicit_url: UrlElicitationHandler | None = None,
    on_elicitation_complete: ElicitationCompleteCallback | None = None,
) -> AsyncIterator[Client]:
    """Run a client on ``transport`` (and, by default, open the conversation: see
    :meth:`Client.open` for ``protocol``, default the 2025-11-25 handshake).

    ``on_elicit`` / ``on_sample`` answer the server's elicitation (form mode) and sampling
    requests; ``on_elicit_url`` its URL-mode elicitations (``on_elicitation_complete`` hears
    when the server says one is over). The client declares each capability (``elicitation``
    with ``form`` and/or ``url``, ``sampling``) only when given its handler. ``roots``
    (``{"uri": "file:///…", "name": …}`` each) answer ``roots/list``; without it, no ``roots``
    capability.
    """
    client = Client(
        transport,
        on_elicit=on_elicit,
        on_sample=on_sample,
        tasks_extension=tasks_extension,
        roots=roots,
        on_elicit_url=on_elicit_url,
        on_elicitation_complete=on_elicitation_complete,
    )
    with unwrap_single():
        async with trio.open_nursery() as nursery:
            if client.elicits or on_sample is not None:
                # The client runs tasks for the server too: the same actors as a server session.
                supervisor = TaskSupervisor()
                await nursery.start(supervisor.run)
                client.receiver = TaskReceiver(client, supervisor, "server", client._dialect)

            async def reader() -> None:
                await client.run_connection(nursery)

            nursery.start_soon(reader)
            try:
                if initialize:
                    await client.open(protocol)
                yield client
            finally:
                nursery.cancel_scope.cancel()
                with trio.CancelScope(shield=True):
                    await transport.aclose()


@asynccontextmanager
async def connect_stdio(command: Sequence[str], **kwargs: Any) -> AsyncIterator[Client]:
    """Spawn ``command`` as an MCP server over stdio and connect to it."""
    handlers = {
        key: kwargs.pop(key)
        for key in (
            "on_elicit",
            "on_sample",
            "protocol",
            "tasks_extension",
            "roots",
            "on_elicit_url",
            "on_elicitation_complete",
        )
        if key in kwargs
    }
    async with (
        open_subprocess_transport(command, **kwargs) as transport,
        connect(transport, **handlers) as client,
    ):
        yield client


@asynccontextmanager
async def connect_in_memory(server: Servable, **handlers: Any) -> AsyncIterator[Client]:
    """Serve ``server`` (a :class:`~trio_mcp.Server`) in this process and connect a client to
    it in memory.

    ``handlers`` (``on_elicit``, ``on_elicit_url``, ``on_sample``, ``protocol``, ...) are
    passed to :func:`connect`."""
    client_side, server_side = memory_transport_pair()
    with unwrap_single():
        async with server.open() as runtime, trio.open_nursery() as nursery:
            nursery.start_soon(runtime.serve, server_side)
            async with connect(client_side, **handlers) as client:
                yield client
            nursery.cancel_scope.cancel()
