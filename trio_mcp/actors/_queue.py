"""Work any process can run: a task's call described for a work queue, and read back.

With a store that is a :class:`~trio_mcp.stores.base.WorkQueue` (Redis), every modern-era
(2026-07-28) task is stored with its *work*: the ``tools/call`` request that made it, as the
client sent it. The process that took the call runs it when it has room; otherwise the task
is queued and a process with room claims it (``trio-mcp worker``, or another front). When the
process running a task dies, its lease lapses, and a live process queues it again — only for
a tool that says it may run again (``@server.tool(retries=N)`` or ``idempotent=True``); others
end ``failed``. At least once, never exactly once: a tool run again must be safe to repeat.

A task run away from the connection that made it has no way back to that client but its
record: status messages, input requests (``inputRequests``, answered by ``tasks/update``
through any process) and the result. Progress and log notifications of such a run go nowhere.
Handshake-era (2025-11-25) tasks belong to their session and run where it is: they are not
queued, and end ``failed`` if their process dies.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..protocol import jsonrpc
from ..protocol.commands import CallTool
from ..protocol.errors import INTERNAL_ERROR, INVALID_REQUEST, ErrorValue, McpError
from ..protocol.messages import Implementation
from ..protocol.modern import ModernDialect
from ..protocol.records import TaskRecord
from ..transports.security import Caller
from ._calls import HookedToolRun, ToolEntry, ToolRun, task_support_of
from ._middleware import Middlewares, RequestInfo

if TYPE_CHECKING:
    from ._requestor import TaskRequestor
    from .supervisor import TaskSupervisor

__all__ = ["Detached", "WorkSource", "describe"]


def describe(message: jsonrpc.Request, caller: Caller) -> bytes:
    """A modern-era ``tools/call`` request as a task's work (what :class:`WorkSource` reads),
    with who made it: its identity and scopes (not its headers), which the tool sees wherever
    it runs."""
    work: dict[str, Any] = {"method": message.method, "params": message.params}
    if caller.identity is not None or caller.scopes:
        work["caller"] = {"identity": caller.identity, "scopes": sorted(caller.scopes)}
    return json.dumps(work, separators=(",", ":")).encode()


class Detached:
    """The far end of a task run away from its caller (:class:`~trio_mcp.actors._calls.Peer`):
    notifications go nowhere, and the client is reached only through the task's record."""

    closed = False

    def __init__(self, supervisor: TaskSupervisor) -> None:
        self.supervisor = supervisor

    @property
    def client_tasks(self) -> TaskRequestor:
        raise McpError(INVALID_REQUEST, "A queued task cannot ask its client to run a task")

    def notify(self, method: str, params: dict[str, Any] | None = None) -> bool:
        return False

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        raise McpError(INVALID_REQUEST, f"A queued task cannot send its client a {method} request")


class Tools(Protocol):
    """What :class:`WorkSource` needs of the server: its tools and who it is."""

    @property
    def tools(self) -> Mapping[str, ToolEntry]: ...

    @property
    def info(self) -> Implementation: ...

    @property
    def instructions(self) -> str | None: ...

    @property
    def middleware_chain(self) -> Middlewares | None: ...


class WorkSource:
    """Reads tasks' work back for one runtime: the run of a claimed task, and how many runs a
    task of each tool may have."""

    def __init__(self, service: Tools, supervisor: TaskSupervisor) -> None:
        self.service = service
        self.modern = ModernDialect(service.info, service.instructions)
        self._peer = Detached(supervisor)
        self._tool_support = task_support_of(service.tools)

    def _command(self, work: bytes) -> tuple[CallTool, Any, Caller, dict[str, Any]] | ErrorValue:
        try:
            data = json.loads(work)
            message = jsonrpc.Request(0, str(data["method"]), data["params"])
            who = data.get("caller") or {}
            caller = Caller(who.get("identity"), frozenset(who.get("scopes") or ()))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            return ErrorValue(INTERNAL_ERROR, f"Internal error: the task's work is unreadable ({exc})")
        interpreted = self.modern.interpret(message, self._tool_support)
        if isinstance(interpreted, ErrorValue):
            return interpreted
        command, scope = interpreted
        if type(command) is not CallTool:
            return ErrorValue(INTERNAL_ERROR, "Internal error: the task's work is not a tool call")
        return command, scope, caller, message.params or {}

    def run(self, record: TaskRecord, work: bytes) -> ToolRun | ErrorValue:
        """The run of a claimed task: its tool with its arguments, or why it cannot run here."""
        read = self._command(work)
        if isinstance(read, ErrorValue):
            return read
        command, scope, caller, params = read
        entry = self.service.tools.get(command.name)
        if entry is None:
            return ErrorValue(
                INTERNAL_ERROR, f"Internal error: this server has no tool '{command.name}' to run the task"
            )
        middleware = self.service.middleware_chain
        run: ToolRun
        if middleware is not None and middleware.tools:  # the tool middleware, wherever it runs
            info = RequestInfo(
                method="tools/call",
                request_id=record.task_id,
                params=params,
                era="modern",
                protocol_version=scope.version,
                tool=command.name,
                as_task=True,
                owner=record.owner,
                identity=caller.identity,
            )
            run = HookedToolRun(self._peer, entry, command.arguments, None, scope, hooks=(middleware, info))
        else:
            run = ToolRun(self._peer, entry, command.arguments, None, scope)
        run.caller = caller
        return run

    def max_runs(self, work: bytes) -> int | None:
        """How many runs a task of this work may have in all: 1 + the tool's ``retries``, None
        (no bound) for an idempotent tool, 1 for work that cannot be read."""
        read = self._command(work)
        if isinstance(read, ErrorValue):
            return 1
        entry = self.service.tools.get(read[0].name)
        if entry is None:
            return 1
        if entry.idempotent:
            return None
        return 1 + entry.retries
