"""One place a tool runs, and its way back to the client.

:class:`ToolRun` is every run of a tool — validate the arguments, run it, map what it returned
or raised to a result — for a plain call (awaited by :meth:`ToolRun.result`) and for a task
(staged by the task's actor), in both eras. :class:`ToolCall` is what the public
``Context`` stands on: progress, status, logging and input from the client, each the way
the call's era and mode provide it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

import trio

from ..protocol.converter import unstructure
from ..protocol.errors import INVALID_PARAMS, INVALID_REQUEST, ErrorValue, McpError
from ..protocol.messages import CallToolResult, CreateTaskResult, TaskSupport, Tool
from ..protocol.records import TaskOutcome, text_outcome, text_result
from ..transports.security import Caller, current_caller
from ._middleware import Middlewares, RequestInfo
from ._receiver import Renderer
from .task_actor import StagedWork, TaskActor

if TYPE_CHECKING:
    from ._requestor import TaskRequestor
    from .supervisor import TaskSupervisor

__all__ = [
    "HookedToolRun",
    "InputNeeded",
    "Peer",
    "Scope",
    "ToolCall",
    "ToolEntry",
    "ToolRun",
    "task_support_of",
]


class ToolEntry(Protocol):
    """A tool as the runtime sees it (the server layer's registered tool): its description
    and the three parts of running it, none of which waits but the coroutine ``start`` returns."""

    @property
    def tool(self) -> Tool: ...

    @property
    def immediate_response(self) -> str | None: ...

    @property
    def task_support(self) -> TaskSupport:
        """``tool.task_support`` (kept: it is asked at every call)."""

    @property
    def context_param(self) -> str | None:
        """The parameter the tool takes its Context by, if it takes one."""

    @property
    def retries(self) -> int:
        """How many more runs a task of this tool gets when its process dies holding it."""

    @property
    def idempotent(self) -> bool:
        """Its tasks may be run again after a crash however often it takes."""

    @property
    def scopes(self) -> tuple[str, ...]:
        """OAuth scopes a caller must hold to call it."""

    def start(
        self, arguments: dict[str, Any] | None, call: ToolCall | None
    ) -> Awaitable[Any] | CallToolResult: ...

    def finish(self, value: Any) -> CallToolResult: ...

    def failed(self, exc: Exception) -> CallToolResult: ...


def task_support_of(tools: Mapping[str, ToolEntry]) -> Callable[[str], TaskSupport | None]:
    """How a dialect asks a tool's task support (None: no such tool), read from ``tools`` as
    it is at each call (tools added later are found)."""

    def task_support(name: str) -> TaskSupport | None:
        entry = tools.get(name)
        return entry.task_support if entry is not None else None

    return task_support


class Scope(Renderer, Protocol):
    """What a tool call needs of its request's era: a handshake dialect or a modern scope."""

    @property
    def era(self) -> str: ...

    def related_task(self, task_id: str) -> dict[str, Any]: ...
    def log_message(self, level: str, data: Any, logger: str | None) -> dict[str, Any] | None: ...
    def input_request(
        self, capability: str, method: str, params: dict[str, Any], task_id: str | None
    ) -> tuple[str, dict[str, Any]] | ErrorValue: ...
    def client_accepts_task(self, kind: str, verb: str) -> bool: ...
    def settle_tool_result(self, result: CallToolResult) -> TaskOutcome: ...
    def cacheable(self, result: dict[str, Any]) -> dict[str, Any]: ...
    def resource_not_found(self, uri: str) -> ErrorValue: ...


class Peer(Protocol):
    """The far end of a call: a connection's session, or one stateless request's exchange."""

    @property
    def closed(self) -> bool: ...

    @property
    def client_tasks(self) -> TaskRequestor: ...

    @property
    def supervisor(self) -> TaskSupervisor: ...

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool: ...
    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]: ...


class InputNeeded:
    """A modern-era call's multi round-trip state: the answers it was given (from the
    ``requestState`` and the retry's ``inputResponses``) and the input it still needs.

    Keys are the tool's own (``ctx.elicit(..., key="user_name")``) or made from the request
    itself (a digest of method and params, numbered if asked again), so the same call re-run
    asks under the same keys whatever order concurrent questions happen in. ``task_shown``:
    for a call running as a task, whether its CreateTaskResult went out (input is then asked
    through the task instead)."""

    __slots__ = ("answers", "asked", "needed", "needed_event", "scope", "task_shown")

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.needed: dict[str, Any] = {}
        self.asked: dict[str, int] = {}
        self.scope = trio.CancelScope()
        self.needed_event = trio.Event()
        self.task_shown = False

    def key_for(self, key: str | None, request: dict[str, Any]) -> str:
        if key is None:
            canonical = json.dumps(request, sort_keys=True, separators=(",", ":"), default=str)
            key = "input-" + hashlib.sha256(canonical.encode()).hexdigest()[:12]
        seen = self.asked.get(key, 0)
        self.asked[key] = seen + 1
        return key if seen == 0 else f"{key}-{seen + 1}"


class ToolCall:
    """One running tool call's way back to its client: the mechanics behind the public
    :class:`~trio_mcp.Context` (progress, status, logging, input from the client).

    Input comes three ways, whatever the tool wrote (``await ctx.elicit(...)``): a handshake-era
    server→client request (in a task: ``input_required`` meanwhile); a modern-era task's
    ``inputRequests``, answered by ``tasks/update``; or, in a modern-era plain call, an
    ``InputRequiredResult`` — the call is stopped (cancelled, so its cleanup runs) and run
    again from the start when the client retries with the answers.
    """

    __slots__ = ("_last_progress", "caller", "mrtr", "peer", "progress_token", "scope", "task")

    def __init__(
        self,
        peer: Peer,
        progress_token: int | str | None,
        task: TaskActor | None,
        scope: Scope,
        mrtr: InputNeeded | None = None,
        caller: Caller | None = None,
    ) -> None:
        self.peer = peer
        self.progress_token = progress_token
        self.task = task
        self.scope = scope
        self.mrtr = mrtr
        self.caller = caller if caller is not None else current_caller.get()
        """Who made the request (identity, scopes, headers): given, or the context's."""
        self._last_progress: float | None = None

    @property
    def task_id(self) -> str | None:
        return self.task.task_id if self.task is not None else None

    def progress(self, progress: float, total: float | None, message: str | None) -> bool:
        """Send ``notifications/progress``; False if there is no token, ``progress`` does not
        increase, the task has ended, or the outbound queue is full."""
        task = self.task
        if self.progress_token is None or (task is not None and (task.record.is_terminal or task.stopped)):
            return False
        if self._last_progress is not None and progress <= self._last_progress:
            return False
        self._last_progress = progress
        params: dict[str, Any] = {"progressToken": self.progress_token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        if task is not None:
            params["_meta"] = self.scope.related_task(task.task_id)
        return self.peer.notify("notifications/progress", params)

    def set_status(self, message: str | None) -> None:
        if self.task is not None:
            self.task.set_status_message(message)

    def log(self, level: str, data: Any, logger: str | None) -> bool:
        params = self.scope.log_message(level, data, logger)
        return params is not None and self.peer.notify("notifications/message", params)

    async def ask_client(
        self, capability: str, method: str, params: dict[str, Any], status: str | None, key: str | None = None
    ) -> dict[str, Any]:
        """Input from the client, the way this call's era and mode provide it. ``key`` names
        the request in a modern-era ``inputRequests`` map (default: made from the request)."""
        request = self.scope.input_request(capability, method, params, self.task_id)
        if isinstance(request, ErrorValue):
            raise request.exception()
        method, params = request
        if self.scope.era == "modern":
            if self.mrtr is not None and not self.mrtr.task_shown:
                return await self._ask_by_retry(method, params, key)
            if self.task is not None:
                return await self._ask_through_task(method, params, status, key)
            return await self._ask_by_retry(method, params, key)
        if self.task is None:
            return await self.peer.request(method, params)
        with self.task.awaiting_input(status):
            return await self.peer.request(method, params)

    async def _ask_through_task(
        self, method: str, params: dict[str, Any], status: str | None, wanted: str | None
    ) -> dict[str, Any]:
        assert self.task is not None
        key, reply = self.task.request_input({"method": method, "params": params}, status, key=wanted)
        try:
            answer = await reply.wait()
        finally:
            self.task.withdraw_input(key)
        if not isinstance(answer, dict):
            raise McpError(INVALID_PARAMS, f"Invalid params at 'inputResponses.{key}': expected an object")
        return answer

    async def _ask_by_retry(self, method: str, params: dict[str, Any], wanted: str | None) -> dict[str, Any]:
        mrtr = self.mrtr
        assert mrtr is not None
        request = {"method": method, "params": params}
        key = mrtr.key_for(wanted, request)
        answer = mrtr.answers.get(key)
        if answer is not None:
            if not isinstance(answer, dict):
                raise McpError(
                    INVALID_PARAMS, f"Invalid params at 'inputResponses.{key}': expected an object"
                )
            return answer
        mrtr.needed[key] = request
        if not mrtr.needed_event.is_set():
            mrtr.needed_event.set()
            # Let questions asked at the same moment (siblings in a nursery) join this round,
            # then stop the call here; the client retries with the answers.
            for _ in range(3):
                await trio.lowlevel.checkpoint()
            mrtr.scope.cancel()
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def client_task(
        self, kind: str, verb: str, method: str, params: dict[str, Any], ttl_ms: int | None
    ) -> CreateTaskResult:
        """Ask the client to run ``method`` as a task on its side; returns its CreateTaskResult."""
        if not self.scope.client_accepts_task(kind, verb):
            raise McpError(INVALID_REQUEST, f"The client does not accept task-augmented {method} requests")
        if self.task is not None:
            params["_meta"] = self.scope.related_task(self.task.task_id)
        return await self.peer.client_tasks.create(method, params, ttl_ms)


class ToolRun(StagedWork):
    """One run of a tool: the one place a tool runs, for plain calls and tasks in both eras.

    Validate → run → map: :meth:`start` validates the arguments and starts the tool (or has
    the ``isError`` result for bad ones), without waiting; what the tool returns goes to
    :meth:`finish`, what it raises (not McpError, which stays a protocol error) to :meth:`fail`.
    A task's actor awaits the running tool itself, so no frame of the runtime's sits between
    them for the task's whole life; a plain call awaits it in :meth:`result`. A small object
    rather than a closure: every live task keeps one.
    """

    __slots__ = ("arguments", "caller", "entry", "mrtr", "peer", "progress_token", "replay", "scope")

    def __init__(
        self,
        peer: Peer,
        entry: ToolEntry,
        arguments: dict[str, Any] | None,
        progress_token: int | str | None,
        scope: Scope,
        mrtr: InputNeeded | None = None,
    ) -> None:
        self.peer = peer
        self.entry = entry
        self.arguments = arguments
        self.progress_token = progress_token
        self.scope = scope
        self.mrtr = mrtr
        self.caller = current_caller.get()  # the request's: a task keeps its creator's
        self.replay: bytes | None = None

    def _begin(self, actor: TaskActor | None) -> Awaitable[Any] | CallToolResult:
        entry = self.entry
        # The tool's call context, made only for a tool that takes a Context.
        call = (
            ToolCall(self.peer, self.progress_token, actor, self.scope, self.mrtr, self.caller)
            if entry.context_param is not None
            else None
        )
        arguments, self.arguments = self.arguments, None  # the tool has them now: not kept
        return entry.start(arguments, call)

    async def result(self) -> dict[str, Any]:
        """Run as a plain call: the complete result, in the era's shape."""
        running = self._begin(None)
        if not isinstance(running, CallToolResult):
            try:
                value = await running
            except McpError:
                raise
            except Exception as exc:
                running = self.entry.failed(exc)
            else:
                if type(value) is str:  # the commonest result: one text block, built as a task's is
                    return self.scope.complete(text_result(value))
                running = self.entry.finish(value)
        data: dict[str, Any] = unstructure(running)
        return self.scope.complete(data)

    def start(self, actor: TaskActor) -> Awaitable[Any] | TaskOutcome:
        running = self._begin(actor)
        if isinstance(running, CallToolResult):
            return self.scope.settle_tool_result(running)
        return running

    def finish(self, value: Any) -> TaskOutcome:
        if type(value) is str:
            # The commonest result, one text block, written directly: what the entry's result
            # unstructures to, and no era fails a task on it (it is not ``isError``).
            return text_outcome(value)
        return self.scope.settle_tool_result(self.entry.finish(value))

    def fail(self, exc: Exception) -> TaskOutcome:
        return self.scope.settle_tool_result(self.entry.failed(exc))


class HookedToolRun(ToolRun):
    """A :class:`ToolRun` through the server's tool middleware, made instead of a plain one
    only when the server has some: the run of a tool whose arguments are valid goes through
    the hooks, inside its task if it has one (:meth:`Middlewares.run_tool`)."""

    __slots__ = ("hooks",)

    def __init__(
        self,
        peer: Peer,
        entry: ToolEntry,
        arguments: dict[str, Any] | None,
        progress_token: int | str | None,
        scope: Scope,
        mrtr: InputNeeded | None = None,
        *,
        hooks: tuple[Middlewares, RequestInfo],
    ) -> None:
        super().__init__(peer, entry, arguments, progress_token, scope, mrtr)
        self.hooks = hooks
        """The server's middleware, and the info of the request that started the run."""

    def _begin(self, actor: TaskActor | None) -> Awaitable[Any] | CallToolResult:
        arguments = self.arguments
        running = super()._begin(actor)
        if isinstance(running, CallToolResult):  # bad arguments: nothing runs
            return running
        middleware, request = self.hooks
        task_id = actor.task_id if actor is not None else None
        return middleware.run_tool(self.entry.tool.name, arguments, task_id, request, running)
