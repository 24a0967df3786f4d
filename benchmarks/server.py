"""The server under test: a ``trio_mcp.Server`` with two tools, served over stdio or WebSocket.

Run it as ``python benchmarks/server.py [--default-ttl-ms MS] [--max-ttl-ms MS] [--max-live N]
[--ws HOST:PORT]``. The defaults give a long TTL (six hours) so that nothing expires during a
benchmark; the churn workload starts it with ``--default-ttl-ms 1000 --max-ttl-ms 2000`` (the
short-TTL variant). Every setting can also come from the environment (``BENCH_DEFAULT_TTL_MS``,
``BENCH_MAX_TTL_MS``, ``BENCH_MAX_LIVE``); flags win.

With ``--ws HOST:PORT`` (``--ws 127.0.0.1:0`` picks a free port) the same tools are served with
``trio_mcp.server.serve_websocket`` instead of stdio (default keep-alive, no
authentication, so each connection owns its tasks). Once listening it prints ``ws-port PORT``
on stdout, for the harness to read; it exits when its stdin closes, as the stdio server does.

With ``BENCH_GC_LOG=PATH`` it also records Python's garbage collections (``gc.callbacks``:
count and time per generation, and every full, generation-2 collection with its start on
the system-wide monotonic clock) and writes them to PATH as JSON at exit, so the harness can
say how much of a timed run was spent in collector pauses. Recording costs two callbacks per
collection and keeps a list only of the rare full collections.
"""

from __future__ import annotations

import argparse
import atexit
import functools
import gc
import json
import logging
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import trio

from trio_mcp import Server, TaskLimits
from trio_mcp.server import serve_websocket, tune_gc
from trio_mcp.transports.websocket import parse_host_port

LONG_TTL_MS = 6 * 60 * 60 * 1000
DEFAULT_MAX_LIVE = 1_000_000


def build_server(limits: TaskLimits) -> Server:
    """The benchmark server: ``echo {text}`` and ``sleep {seconds}``, both task-optional."""
    server = Server("trio-mcp-bench", version="0.1.0", limits=limits)

    @server.tool(task_support="optional")
    async def echo(text: str) -> str:
        """Return the text unchanged."""
        return text

    @server.tool(task_support="optional")
    async def sleep(seconds: float) -> str:
        """Sleep for the given seconds (an idle live task); cancellable."""
        await trio.sleep(seconds)
        return f"slept {seconds}s"

    return server


class GcRecorder:
    """Totals per generation, and each full collection as ``[monotonic_start, seconds]``."""

    def __init__(self) -> None:
        self.count = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self.full: list[list[float]] = []
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.monotonic()
            return
        took = time.monotonic() - self._started
        generation = info["generation"]
        self.count[generation] += 1
        self.seconds[generation] += took
        if generation == 2:
            self.full.append([self._started, took])

    def dump(self, path: str) -> None:
        data = {"count": self.count, "seconds": self.seconds, "full": self.full}
        with open(path, "w") as f:
            json.dump(data, f)


def record_gc(path: str) -> None:
    recorder = GcRecorder()
    gc.callbacks.append(recorder)
    atexit.register(recorder.dump, path)


def parse_args(argv: Sequence[str]) -> tuple[TaskLimits, tuple[str, int] | None]:
    """The task limits, and ``(host, port)`` to serve WebSocket on (None: stdio)."""
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--ws", metavar="HOST:PORT", type=parse_host_port, help="serve over WebSocket instead of stdio"
    )
    parser.add_argument(
        "--default-ttl-ms", type=int, default=int(env.get("BENCH_DEFAULT_TTL_MS", LONG_TTL_MS))
    )
    parser.add_argument("--max-ttl-ms", type=int, default=int(env.get("BENCH_MAX_TTL_MS", 0)) or None)
    parser.add_argument("--max-live", type=int, default=int(env.get("BENCH_MAX_LIVE", DEFAULT_MAX_LIVE)))
    args = parser.parse_args(argv)
    max_ttl = args.max_ttl_ms if args.max_ttl_ms is not None else max(args.default_ttl_ms, LONG_TTL_MS)
    limits = TaskLimits(
        default_ttl_ms=args.default_ttl_ms,
        max_ttl_ms=max_ttl,
        max_live_tasks_per_owner=args.max_live,
    )
    return limits, args.ws


async def serve_ws(server: Server, host: str, port: int) -> None:
    """Serve ``server`` over WebSocket until stdin closes; print ``ws-port PORT`` once listening."""
    async with trio.open_nursery() as nursery:
        bound = await nursery.start(functools.partial(serve_websocket, server, host, port))
        print(f"ws-port {bound}", flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async with stdin:
            while await stdin.receive_some():
                pass
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    limits, ws = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if gc_log := os.environ.get("BENCH_GC_LOG"):
        record_gc(gc_log)
    if os.environ.get("BENCH_TUNE_GC", "1") == "1":
        tune_gc()
    server = build_server(limits)
    if ws is None:
        trio.run(server.serve_stdio)
    else:
        trio.run(serve_ws, server, *ws)


if __name__ == "__main__":
    main()
