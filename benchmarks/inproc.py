"""CPU per request without I/O: ``python -m benchmarks.inproc --subject trio-mcp --live 10000``.

The subject (``trio-mcp``: ``benchmarks/server.py``'s server through ``ServerRuntime.serve``;
or ``bare-trio``: ``benchmarks/trio_floor.py``'s ``TrioFloor`` behind a writer task that
batches its output as its stdio loop does) is fed in this process through a fake transport as
stdio feeds it: a window of 64 requests arrives at once, is read message by message without
waiting, and the answers leave in batches (``send_many``). L idle ``sleep`` tasks are made,
then N creates of ``echo`` tasks, N ``tasks/result`` of them, N ``tasks/get`` over the sleep
tasks and a ``tasks/cancel`` of each sleep task. For each it prints the process's CPU per
request and the collector's share of it (``gc.callbacks``), under ``tune_gc``'s settings.

What it is for: comparing a change, or the two subjects, without the noise of two processes
talking over pipes. Times still vary by some 10% between runs here; for a figure that does
not vary, count instructions (cachegrind repeats them to 0.2%) from the difference of two
sizes, which cancels start-up::

    for n in 1000 3000; do valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null \\
        .venv/bin/python -m benchmarks.inproc --subject trio-mcp --live 1000 -n $n --ops create; done

(instructions per create: the difference of the two ``I refs`` totals, over 2 000).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import trio

from trio_mcp.protocol import jsonrpc
from trio_mcp.server import tune_gc

from .memory import _ANSWER_PREFIX, _INITIALIZE, _INITIALIZED, SLEEP_CALL, SUBJECTS, task_ids
from .server import GcRecorder, build_server
from .server import parse_args as server_options
from .trio_floor import TrioFloor

OPS = ("create", "result", "get", "cancel")
WINDOW = 64
ECHO_CALL = {"name": "echo", "arguments": {"text": "hello"}, "task": {}}


class _Feed:
    """Both ends of the fake transport: requests go in a window at a time, and the driver
    waits until every request of the window is answered (notifications are not counted)."""

    def __init__(self) -> None:
        self.inbox: deque[bytes] = deque()
        self.answers: list[bytes] = []
        self._reader: trio.Event | None = None
        self._wanted = 0
        self._window_done: trio.Event | None = None

    # the subject's side (trio-mcp's Transport; the floor's loop reads the same way)
    async def receive(self) -> jsonrpc.Received:
        """Parsed, as a real transport hands a message on."""
        return jsonrpc.read(await self.receive_bytes())

    async def receive_bytes(self) -> bytes:
        """As sent (what the floor's loop reads: it parses for itself)."""
        while not self.inbox:
            self._reader = trio.Event()
            await self._reader.wait()
        return self.inbox.popleft()

    async def send(self, message: bytes) -> None:
        self.written([message])

    async def send_many(self, messages: Sequence[bytes]) -> None:
        self.written(messages)

    async def aclose(self) -> None:
        pass

    def written(self, messages: Sequence[bytes]) -> None:
        for message in messages:
            for line in message.split(b"\n"):
                if line.startswith(_ANSWER_PREFIX):
                    self.answers.append(line)
        if self._window_done is not None and len(self.answers) >= self._wanted:
            self._window_done.set()

    # the driver's side
    async def window(self, requests: list[bytes]) -> list[bytes]:
        self.answers = []
        self._wanted = len(requests)
        self.inbox.extend(requests)
        if self._reader is not None:
            self._reader.set()
        if len(self.answers) < self._wanted:
            self._window_done = trio.Event()
            await self._window_done.wait()
            self._window_done = None
        return self.answers


class _Driver:
    def __init__(self, feed: _Feed) -> None:
        self.feed = feed
        self.next_id = 1

    async def run(self, method: str, params: Sequence[dict[str, Any]]) -> list[bytes]:
        answers: list[bytes] = []
        for start in range(0, len(params), WINDOW):
            window = []
            for entry in params[start : start + WINDOW]:
                request = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": entry}
                window.append(json.dumps(request, separators=(",", ":")).encode())
                self.next_id += 1
            answers += await self.feed.window(window)
        return answers


Measure = Callable[[_Driver], Awaitable[None]]


async def _serve_trio_mcp(measure: Measure) -> None:
    server = build_server(server_options([]).limits)  # the bench server's tools, limits and TTLs
    feed = _Feed()
    async with server.open() as runtime, trio.open_nursery() as nursery:
        nursery.start_soon(runtime.serve, feed)
        await feed.window([_INITIALIZE])
        feed.inbox.append(_INITIALIZED)
        await measure(_Driver(feed))
        nursery.cancel_scope.cancel()


async def _serve_bare_trio(measure: Measure) -> None:
    feed = _Feed()
    queued: list[bytes] = []
    wake = trio.Event()

    def emit(line: bytes) -> None:
        queued.append(line)
        wake.set()

    async def writer() -> None:  # as the floor's stdio loop: what is queued goes out in one write
        nonlocal queued, wake
        while True:
            await wake.wait()
            wake = trio.Event()
            batch, queued = queued, []
            feed.written([b"".join(batch)])

    async with trio.open_nursery() as nursery:
        floor = TrioFloor(nursery, emit)
        nursery.start_soon(writer)
        nursery.start_soon(floor.sweep)

        async def read() -> None:
            while True:
                floor.handle(json.loads(await feed.receive_bytes()))

        nursery.start_soon(read)
        await feed.window([_INITIALIZE])
        await measure(_Driver(feed))
        nursery.cancel_scope.cancel()


SERVE: dict[str, Callable[[Measure], Awaitable[None]]] = {
    "trio-mcp": _serve_trio_mcp,
    "bare-trio": _serve_bare_trio,
}


def measure(subject: str, live: int, n: int, ops: Sequence[str] = OPS) -> dict[str, dict[str, float]]:
    """``{op: {"cpu_us": ..., "gc_us": ...}}`` per request, for each of ``ops`` and for
    ``create_sleep`` (the creation of the ``live`` sleep tasks)."""
    out: dict[str, dict[str, float]] = {}

    async def timed(name: str, driver: _Driver, method: str, params: list[dict[str, Any]]) -> list[bytes]:
        collector = GcRecorder()
        gc.callbacks.append(collector)
        started = time.process_time()
        try:
            answers = await driver.run(method, params)
        finally:
            gc.callbacks.remove(collector)
        count = max(len(params), 1)
        out[name] = {
            "cpu_us": round((time.process_time() - started) / count * 1e6, 2),
            "gc_us": round(sum(collector.seconds) / count * 1e6, 2),
        }
        return answers

    async def run(driver: _Driver) -> None:
        tune_gc()
        sleeps = task_ids(await timed("create_sleep", driver, "tools/call", [SLEEP_CALL] * live))
        echoes: list[dict[str, Any]] = []
        if "create" in ops or "result" in ops:
            echoes = task_ids(await timed("create", driver, "tools/call", [ECHO_CALL] * n))
            await trio.sleep(0.05)  # every echo has finished
        if "result" in ops:
            await timed("result", driver, "tasks/result", echoes)
        if "get" in ops:
            await timed("get", driver, "tasks/get", [sleeps[i % len(sleeps)] for i in range(n)])
        if "cancel" in ops:
            await timed("cancel", driver, "tasks/cancel", sleeps)

    trio.run(SERVE[subject], run)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.inproc", description=__doc__.splitlines()[0])
    parser.add_argument("--subject", choices=SUBJECTS, default="trio-mcp")
    parser.add_argument("--live", type=int, default=10_000, help="idle sleep tasks (L)")
    parser.add_argument("-n", type=int, default=20_000, help="creates, results and gets")
    parser.add_argument("--ops", default=",".join(OPS), help=f"which of {','.join(OPS)}")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    figures = measure(args.subject, args.live, args.n, args.ops.split(","))
    if args.json:
        print(json.dumps(figures))
    else:
        cells = "  ".join(f"{op} {f['cpu_us']:.1f} (gc {f['gc_us']:.1f})" for op, f in figures.items())
        print(f"{args.subject} L={args.live}: us/request {cells}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
