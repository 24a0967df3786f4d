"""The bare-Trio floor: the benchmark server's semantics in the least code Trio allows.

A stdio MCP server (newline-delimited JSON-RPC, protocol 2025-11-25, ``tasks`` capability) with
the tools of ``benchmarks/server.py``, ``echo {text}`` and ``sleep {seconds}``, both
task-optional, and no framework: per created task it spawns a Trio task in one nursery and keeps
a :class:`Record` (the Task as sent, a cancel scope, an event, the result) in a dict by id.

* ``tools/call`` with ``task``: make the record, spawn the tool inside the record's cancel
  scope, answer the CreateTaskResult at once. When the tool returns, the record is completed,
  its event set, and a ``notifications/tasks/status`` sent (as trio-mcp does).
* ``tasks/get``: the record's Task, from the dict.
* ``tasks/result``: the CallToolResult (with the related-task ``_meta``) at once if the task is
  done, else a Trio task waits on the event and answers then.
* ``tasks/cancel``: cancel the scope, mark the record cancelled (status message as trio-mcp's),
  set the event, send the status notification (trio-mcp sends one), answer the Task.
* TTL as trio-mcp's bench server: the requested ``ttl`` or six hours, capped; one sweeper task
  drops expired records (cancelling their work) from a heap of deadlines.

What it leaves out is what a runtime adds on top: per-session ownership, limits, a task store
interface, input validation beyond the argument types, progress, logging, task-input
(``input_required``), request withdrawal (``notifications/cancelled``), back-pressure on the
output, and the other MCP methods (``tools/list`` and the like answer -32601). Answers are
buffered and written by one writer task, so a burst of requests is answered with few writes,
as trio-mcp does. The same collector settings as ``trio_mcp.server.tune_gc`` apply (unless
``BENCH_TUNE_GC=0``), so that GC tuning is not part of the difference.

Run it as ``python benchmarks/trio_floor.py``; it exits at end of input. ``python
benchmarks/trio_floor.py --cancel-cost L`` prints, as JSON, Trio's own CPU per cancel of a
sleeping task at L tasks (:func:`trio_cancel_cost`) and exits. :class:`TrioFloor`
serves any message source (``benchmarks/memory.py`` drives it in-process).
"""

from __future__ import annotations

import datetime
import gc
import heapq
import json
import math
import os
import secrets
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
import trio.testing

PROTOCOL_VERSION = "2025-11-25"
LONG_TTL_MS = 6 * 60 * 60 * 1000
POLL_INTERVAL_MS = 500
RELATED_TASK = "io.modelcontextprotocol/related-task"
INVALID_PARAMS = -32602
METHOD_NOT_FOUND = -32601
TASK_CANCELLED = -32011  # what trio-mcp answers for tasks/result on a cancelled task
GC_THRESHOLD = 5_000  # trio_mcp.server.tune_gc's
GC_FULL_AFTER = 100_000  # trio_mcp.server.tune_gc's

_dumps = json.JSONEncoder(separators=(",", ":")).encode


async def echo(text: str) -> str:
    return text


async def sleep(seconds: float) -> str:
    await trio.sleep(seconds)
    return f"slept {seconds}s"


TOOLS: dict[str, tuple[Callable[..., Awaitable[str]], dict[str, type | tuple[type, ...]]]] = {
    "echo": (echo, {"text": str}),
    "sleep": (sleep, {"seconds": (int, float)}),
}


def now_iso() -> str:
    """ISO 8601 UTC with milliseconds; the date and time of the current second is cached."""
    epoch = time.time()
    second = int(epoch)
    global _second
    if _second[0] != second:
        moment = datetime.datetime.fromtimestamp(second, datetime.UTC)
        _second = (second, moment.strftime("%Y-%m-%dT%H:%M:%S"))
    return f"{_second[1]}.{int((epoch - second) * 1000):03d}Z"


_second: tuple[int, str] = (-1, "")


class Record:
    """One task: the Task as sent (a dict), its cancel scope, its event, its result."""

    __slots__ = ("done", "result", "scope", "task")

    def __init__(self, task: dict[str, Any]) -> None:
        self.task = task
        self.scope = trio.CancelScope()
        self.done = trio.Event()
        self.result: dict[str, Any] | None = None


class RequestError(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class TrioFloor:
    """The server: ``handle`` each decoded message; answers and notifications go to ``emit``
    (one encoded line each, newline included). Tasks are spawned into ``nursery``."""

    def __init__(
        self,
        nursery: trio.Nursery,
        emit: Callable[[bytes], None],
        default_ttl_ms: int = LONG_TTL_MS,
        max_ttl_ms: int = LONG_TTL_MS,
    ) -> None:
        self.nursery = nursery
        self.emit = emit
        self.default_ttl_ms = default_ttl_ms
        self.max_ttl_ms = max_ttl_ms
        self.tasks: dict[str, Record] = {}
        self.expiry: list[tuple[float, str]] = []
        self._sweep = trio.CancelScope()

    # -- the request loop -----------------------------------------------------------------------
    def handle(self, message: dict[str, Any]) -> None:
        if "id" not in message:
            return  # notifications/initialized, notifications/cancelled: nothing to do here
        request_id = _dumps(message["id"]).encode()
        method = message.get("method")
        params = message.get("params") or {}
        try:
            if method == "tasks/get":
                result: Any = self._record(params).task
            elif method == "tools/call":
                result = self.call_tool(request_id, params)
            elif method == "tasks/result":
                record = self._record(params)
                if not record.done.is_set():
                    self.nursery.start_soon(self._answer_when_done, request_id, record)
                    return
                result = self.task_result(record)
            elif method == "tasks/cancel":
                result = self.cancel(self._record(params))
            elif method == "ping":
                result = {}
            elif method == "tasks/list":
                result = {"tasks": [record.task for record in list(self.tasks.values())[:100]]}
            elif method == "initialize":
                result = self.initialize()
            else:
                raise RequestError(METHOD_NOT_FOUND, f"Method not found: {method}")
        except RequestError as exc:
            self.emit(_error(request_id, exc))
            return
        if result is not None:
            self.emit(
                b'{"jsonrpc":"2.0","id":' + request_id + b',"result":' + _dumps(result).encode() + b"}\n"
            )

    def initialize(self) -> dict[str, Any]:
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {
                "tools": {"listChanged": False},
                "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            },
            "serverInfo": {"name": "trio-floor", "version": "0.1.0"},
        }

    def _record(self, params: dict[str, Any]) -> Record:
        record = self.tasks.get(params.get("taskId"))  # type: ignore[arg-type]
        if record is None:
            raise RequestError(INVALID_PARAMS, "Failed to retrieve task: Task not found")
        return record

    # -- tools/call ------------------------------------------------------------------------------
    def call_tool(self, request_id: bytes, params: dict[str, Any]) -> dict[str, Any] | None:
        name = params.get("name")
        if name not in TOOLS:
            raise RequestError(INVALID_PARAMS, f"Unknown tool: {name}")
        tool, types = TOOLS[name]
        arguments = params.get("arguments") or {}
        for key, kind in types.items():
            if not isinstance(arguments.get(key), kind):
                raise RequestError(INVALID_PARAMS, f"Invalid arguments for tool {name}: {key}")
        task_params = params.get("task")
        if task_params is None:  # a plain call: answered when the tool returns
            self.nursery.start_soon(self._call_plain, request_id, tool, arguments)
            return None
        ttl = task_params.get("ttl")
        ttl = min(ttl if isinstance(ttl, int) and ttl > 0 else self.default_ttl_ms, self.max_ttl_ms)
        stamp = now_iso()
        task_id = secrets.token_urlsafe(18)
        task = {
            "taskId": task_id,
            "status": "working",
            "createdAt": stamp,
            "lastUpdatedAt": stamp,
            "ttl": ttl,
            "pollInterval": POLL_INTERVAL_MS,
        }
        record = Record(task)
        self.tasks[task_id] = record
        deadline = trio.current_time() + ttl / 1000
        heapq.heappush(self.expiry, (deadline, task_id))
        if deadline < self._sweep.deadline:
            self._sweep.deadline = deadline
        self.nursery.start_soon(self._run, record, tool, arguments)
        return {"task": task}

    async def _run(
        self, record: Record, tool: Callable[..., Awaitable[str]], arguments: dict[str, Any]
    ) -> None:
        with record.scope:
            try:
                text = await tool(**arguments)
                result: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
                status = "completed"
            except Exception as exc:
                result = {"content": [{"type": "text", "text": str(exc)}], "isError": True}
                status = "failed"
            if record.task["status"] != "working":
                return  # cancelled (or expired) while the tool was returning
            record.result = result
            self._finish(record, status)

    async def _call_plain(
        self, request_id: bytes, tool: Callable[..., Awaitable[str]], arguments: dict[str, Any]
    ) -> None:
        text = await tool(**arguments)
        body = _dumps({"content": [{"type": "text", "text": text}]}).encode()
        self.emit(b'{"jsonrpc":"2.0","id":' + request_id + b',"result":' + body + b"}\n")

    def _finish(self, record: Record, status: str, message: str | None = None) -> None:
        task = record.task
        task["status"] = status
        task["lastUpdatedAt"] = now_iso()
        if message is not None:
            task["statusMessage"] = message
        record.done.set()
        self.emit(
            b'{"jsonrpc":"2.0","method":"notifications/tasks/status","params":'
            + _dumps(task).encode()
            + b"}\n"
        )

    # -- tasks/result, tasks/cancel ----------------------------------------------------------------
    def task_result(self, record: Record) -> dict[str, Any]:
        if record.result is None:
            raise RequestError(TASK_CANCELLED, "Task was cancelled: the request has no result")
        return {**record.result, "_meta": {RELATED_TASK: {"taskId": record.task["taskId"]}}}

    async def _answer_when_done(self, request_id: bytes, record: Record) -> None:
        await record.done.wait()
        try:
            body = _dumps(self.task_result(record)).encode()
        except RequestError as exc:
            self.emit(_error(request_id, exc))
            return
        self.emit(b'{"jsonrpc":"2.0","id":' + request_id + b',"result":' + body + b"}\n")

    def cancel(self, record: Record) -> dict[str, Any]:
        if record.done.is_set():
            raise RequestError(
                INVALID_PARAMS, f"Cannot cancel task in terminal status: {record.task['status']}"
            )
        record.scope.cancel()
        self._finish(record, "cancelled", "The task was cancelled by request.")
        return record.task

    # -- expiry --------------------------------------------------------------------------------------
    async def sweep(self) -> None:
        """Drop records whose TTL has run out (cancelling work still running), forever."""
        while True:
            with trio.CancelScope(deadline=self.expiry[0][0] if self.expiry else math.inf) as self._sweep:
                await trio.sleep_forever()
            now = trio.current_time()
            while self.expiry and self.expiry[0][0] <= now:
                _, task_id = heapq.heappop(self.expiry)
                record = self.tasks.pop(task_id, None)
                if record is not None and not record.done.is_set():
                    record.scope.cancel()
                    record.done.set()


def _error(request_id: bytes, exc: RequestError) -> bytes:
    body = _dumps({"code": exc.code, "message": exc.message}).encode()
    return b'{"jsonrpc":"2.0","id":' + request_id + b',"error":' + body + b"}\n"


class Writer:
    """Lines to stdout: buffered while the server works, written together by one task."""

    def __init__(self, stream: trio.lowlevel.FdStream) -> None:
        self.stream = stream
        self.lines: list[bytes] = []
        self.ready = trio.Event()

    def emit(self, line: bytes) -> None:
        self.lines.append(line)
        self.ready.set()

    async def run(self) -> None:
        while True:
            await self.ready.wait()
            self.ready = trio.Event()
            data, self.lines = b"".join(self.lines), []
            await self.stream.send_all(data)


async def serve_stdio(default_ttl_ms: int = LONG_TTL_MS, max_ttl_ms: int = LONG_TTL_MS) -> None:
    stdin = trio.lowlevel.FdStream(os.dup(0))
    stdout = trio.lowlevel.FdStream(os.dup(1))
    async with stdin, stdout, trio.open_nursery() as nursery:
        writer = Writer(stdout)
        nursery.start_soon(writer.run)
        floor = TrioFloor(nursery, writer.emit, default_ttl_ms, max_ttl_ms)
        nursery.start_soon(floor.sweep)
        loads = json.loads
        rest = b""
        while chunk := await stdin.receive_some(1 << 16):
            *lines, rest = (rest + chunk).split(b"\n")
            for line in lines:
                if line.strip():
                    floor.handle(loads(line))
        nursery.cancel_scope.cancel()


def tune_gc() -> None:
    """trio_mcp.server.tune_gc's settings: freeze what start-up made; small young collections,
    every second one also the middle generation; full collections rare."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(GC_THRESHOLD, 0, GC_FULL_AFTER)


def trio_cancel_cost(live: int, rounds: int = 3, batch: int = 64) -> float:
    """Trio's own share of a ``tasks/cancel``, in µs of process CPU per task: ``live`` tasks
    each running :func:`sleep` (an hour) inside a cancel scope of its own, as every peer's
    task does, are cancelled ``batch`` at a time and unwound, with no I/O, no JSON and no
    record; the median of ``rounds`` rounds (this process: run it in a fresh one). What no
    Trio server can spend less than per cancel of a sleeping task, before reading the request
    or writing a byte."""
    figures: list[float] = []

    async def run_one(scope: trio.CancelScope) -> None:
        with scope:
            await sleep(3600.0)

    async def measure() -> None:
        async with trio.open_nursery() as nursery:
            for _ in range(rounds):
                scopes = [trio.CancelScope() for _ in range(live)]
                for scope in scopes:
                    nursery.start_soon(run_one, scope)
                await trio.testing.wait_all_tasks_blocked()
                started = time.process_time()
                for at in range(0, live, batch):
                    for scope in scopes[at : at + batch]:
                        scope.cancel()
                    await trio.lowlevel.checkpoint()
                await trio.testing.wait_all_tasks_blocked()
                figures.append((time.process_time() - started) / live * 1e6)

    tune_gc()
    trio.run(measure)
    return round(statistics.median(figures), 2)


def main() -> None:
    if sys.argv[1:2] == ["--cancel-cost"]:
        print(json.dumps({"us_per_cancel": trio_cancel_cost(int(sys.argv[2]))}))
        return
    env = os.environ
    default_ttl = int(env.get("BENCH_DEFAULT_TTL_MS", LONG_TTL_MS))
    max_ttl = int(env.get("BENCH_MAX_TTL_MS", 0)) or max(default_ttl, LONG_TTL_MS)
    if env.get("BENCH_TUNE_GC", "1") == "1":
        tune_gc()
    trio.run(serve_stdio, default_ttl, max_ttl)


if __name__ == "__main__":
    main()
