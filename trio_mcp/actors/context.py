"""Context: what a running tool may do besides returning — progress, status, logging."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio

from ..protocol.converter import structure, unstructure
from ..protocol.errors import INVALID_REQUEST, McpError
from ..protocol.messages import (
    RELATED_TASK_KEY,
    CreateMessageParams,
    CreateMessageResult,
    CreateTaskResult,
    ElicitResult,
    LoggingLevel,
    SamplingMessage,
)

if TYPE_CHECKING:
    from .requestor import TaskRequestor
    from .session import SessionActor
    from .task_actor import TaskActor

LEVELS: tuple[str, ...] = ("debug", "info", "notice", "warning", "error", "critical", "alert", "emergency")


class Context:
    """Passed to a tool that declares a parameter annotated ``Context``.

    >>> @server.tool(task_support="optional")
    ... async def sleep(seconds: float, ctx: Context) -> str:
    ...     await ctx.report_progress(0, seconds)
    ...     ...
    """

    def __init__(
        self,
        session: SessionActor,
        *,
        progress_token: int | str | None = None,
        task: TaskActor | None = None,
    ) -> None:
        self._session = session
        self._token = progress_token
        self._task = task
        self._last_progress: float | None = None

    @property
    def task_id(self) -> str | None:
        """The MCP task this call runs as, or None for an ordinary call."""
        return self._task.task_id if self._task is not None else None

    def _related(self) -> dict[str, Any] | None:
        return {RELATED_TASK_KEY: {"taskId": self._task.task_id}} if self._task is not None else None

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
        if self._token is None or (self._task is not None and self._task.status.is_terminal):
            return False
        if self._last_progress is not None and progress <= self._last_progress:
            return False
        self._last_progress = progress
        params: dict[str, Any] = {"progressToken": self._token, "progress": progress}
        if total is not None:
            params["total"] = total
        if message is not None:
            params["message"] = message
        related = self._related()
        if related is not None:
            params["_meta"] = related
        return self._session.notify("notifications/progress", params)

    async def elicit(self, message: str, schema: dict[str, Any]) -> ElicitResult:
        """Ask the user for input through the client (``elicitation/create``).

        ``schema`` is the flat JSON Schema object of what to ask (``{"type": "object",
        "properties": {...}}``). In a task, the task is ``input_required`` until the answer
        arrives, and the request carries the related-task ``_meta``; if the task is cancelled
        meanwhile, the wait stops at once. Returns the client's ``accept`` (with ``content``),
        ``decline`` or ``cancel``. Raises :class:`McpError` if the client did not declare the
        ``elicitation`` capability.

        >>> # answer = await ctx.elicit("Your name?", {"type": "object",
        >>> #     "properties": {"name": {"type": "string"}}, "required": ["name"]})
        """
        params: dict[str, Any] = {"message": message, "requestedSchema": schema}
        result = await self._ask_client("elicitation", "elicitation/create", params, message)
        return structure(result, ElicitResult)

    async def sample(
        self,
        messages: list[str | SamplingMessage],
        *,
        max_tokens: int,
        system_prompt: str | None = None,
        temperature: float | None = None,
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
        result = await self._ask_client("sampling", "sampling/createMessage", unstructure(request), None)
        return structure(result, CreateMessageResult)

    @property
    def client_tasks(self) -> TaskRequestor:
        """Follow the tasks the client runs for us: ``get``, ``result``, ``list``, ``cancel``, ``poll``."""
        return self._session.client_tasks

    async def elicit_task(
        self, message: str, schema: dict[str, Any], *, ttl_ms: int | None = None
    ) -> CreateTaskResult:
        """Ask the client to run an elicitation *as a task* on its side, and return at once.

        Follow it with :attr:`client_tasks` (``poll``, then ``result`` gives the ElicitResult
        data). Raises :class:`McpError` unless the client declared
        ``tasks.requests.elicitation.create``.
        """
        params: dict[str, Any] = {"message": message, "requestedSchema": schema}
        return await self._client_task("elicitation", "create", "elicitation/create", params, ttl_ms)

    async def sample_task(
        self, messages: list[str], *, max_tokens: int, ttl_ms: int | None = None
    ) -> CreateTaskResult:
        """Like :meth:`elicit_task`, for ``sampling/createMessage``."""
        request = CreateMessageParams(
            messages=[SamplingMessage("user", {"type": "text", "text": m}) for m in messages],
            max_tokens=max_tokens,
        )
        params: dict[str, Any] = unstructure(request)
        return await self._client_task("sampling", "createMessage", "sampling/createMessage", params, ttl_ms)

    async def _client_task(
        self, kind: str, verb: str, method: str, params: dict[str, Any], ttl_ms: int | None
    ) -> CreateTaskResult:
        declared = self._session.client_capabilities.get("tasks", {}).get("requests", {}).get(kind, {})
        if not isinstance(declared, dict) or verb not in declared:
            raise McpError(INVALID_REQUEST, f"The client does not accept task-augmented {method} requests")
        if self._task is not None:
            params["_meta"] = self._related()
        return await self.client_tasks.create(method, params, ttl_ms)

    async def _ask_client(
        self, capability: str, method: str, params: dict[str, Any], status: str | None
    ) -> dict[str, Any]:
        if capability not in self._session.client_capabilities:
            raise McpError(
                INVALID_REQUEST, f"The client does not support {capability} (capability not declared)"
            )
        if self._task is None:
            return await self._session.request(method, params)
        params["_meta"] = self._related()
        with self._task.awaiting_input(status):
            return await self._session.request(method, params)

    def set_status(self, message: str | None) -> None:
        """Set the task's ``statusMessage`` (a no-op for an ordinary call)."""
        if self._task is not None:
            self._task.set_status_message(message)

    def log(self, level: LoggingLevel, data: Any, logger: str | None = None) -> bool:
        """Send ``notifications/message`` if ``level`` passes the client's ``logging/setLevel``."""
        return self._session.log(level, data, logger)


def level_passes(level: str, threshold: str) -> bool:
    return LEVELS.index(level) >= LEVELS.index(threshold)
