"""The server under test: a ``trio_mcp.Server`` with two tools, served over stdio or WebSocket.

Run it as ``python benchmarks/server.py [--default-ttl-ms MS] [--max-ttl-ms MS] [--max-live N]
[--ws HOST:PORT | --http HOST:PORT] [--store URL]``. The defaults give a long TTL (six hours) so
that nothing expires during a benchmark; the churn workload starts it with
``--default-ttl-ms 1000 --max-ttl-ms 2000`` (the short-TTL variant). Every setting can also come
from the environment (``BENCH_DEFAULT_TTL_MS``, ``BENCH_MAX_TTL_MS``, ``BENCH_MAX_LIVE``); flags
win.

With ``--ws HOST:PORT`` (``--ws 127.0.0.1:0`` picks a free port) the same tools are served with
``trio_mcp.server.serve_websocket`` instead of stdio (default keep-alive, no
authentication, so each connection owns its tasks). Once listening it prints ``ws-port PORT``
on stdout, for the harness to read; it exits when its stdin closes, as the stdio server does.
With ``--http HOST:PORT`` it serves them with ``trio_mcp.server.serve_http`` (Streamable HTTP at
``/mcp``, both eras, no authentication) and prints ``http-port PORT``. In both network modes a
line ``stats`` on stdin makes it print one JSON line on stdout: the sessions being served, the
live task actors and the records in the task store (``-1`` if the store cannot count them).

``--store URL`` picks the task store (``memory``, the default; ``sqlite:///PATH``;
``redis://HOST:PORT/DB``), through ``trio_mcp.stores.redis.store_from_url``.
``--max-outbound-bytes`` and ``--write-timeout`` lower the endpoint's bounds on a peer that does
not read (16 MiB and 30 s by default) so that the smoke run of the hardening workloads takes
seconds; the full run measures the defaults.

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
from dataclasses import dataclass
from typing import Any

import attrs
import trio

from trio_mcp import Server, TaskLimits
from trio_mcp.actors import _endpoint
from trio_mcp.server import ServerRuntime, serve_http, serve_websocket, tune_gc
from trio_mcp.stores import store_from_url
from trio_mcp.transports.websocket import parse_host_port

LONG_TTL_MS = 6 * 60 * 60 * 1000
DEFAULT_MAX_LIVE = 1_000_000


def build_server(limits: TaskLimits, store: str = "memory") -> Server:
    """The benchmark server: ``echo {text}`` and ``sleep {seconds}``, both task-optional."""
    server = Server("trio-mcp-bench", version="0.1.0", limits=limits, store=store_from_url(store))

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


@dataclass
class Options:
    limits: TaskLimits
    ws: tuple[str, int] | None
    http: tuple[str, int] | None
    store: str


def parse_args(argv: Sequence[str]) -> Options:
    """The task limits, ``(host, port)`` to serve WebSocket or HTTP on (None: stdio), the store."""
    env = os.environ
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--ws", metavar="HOST:PORT", type=parse_host_port, help="serve over WebSocket instead of stdio"
    )
    mode.add_argument(
        "--http", metavar="HOST:PORT", type=parse_host_port, help="serve Streamable HTTP instead of stdio"
    )
    parser.add_argument("--store", default="memory", help="memory, sqlite:///PATH or redis://HOST:PORT/DB")
    parser.add_argument(
        "--default-ttl-ms", type=int, default=int(env.get("BENCH_DEFAULT_TTL_MS", LONG_TTL_MS))
    )
    parser.add_argument("--max-ttl-ms", type=int, default=int(env.get("BENCH_MAX_TTL_MS", 0)) or None)
    parser.add_argument("--max-live", type=int, default=int(env.get("BENCH_MAX_LIVE", DEFAULT_MAX_LIVE)))
    parser.add_argument("--max-outbound-bytes", type=int, help="smoke runs only (default 16 MiB)")
    parser.add_argument("--write-timeout", type=float, help="smoke runs only (default 30 s)")
    args = parser.parse_args(argv)
    max_ttl = args.max_ttl_ms if args.max_ttl_ms is not None else max(args.default_ttl_ms, LONG_TTL_MS)
    # Every cap on tasks is lifted to --max-live: the benchmark keeps up to 100 000 live tasks
    # (and 20 000 finished ones) on one connection.
    caps = {"max_live_tasks_per_owner", "max_tasks_per_owner", "max_live_tasks"}
    fields = {field.name for field in attrs.fields(TaskLimits)}
    limits = TaskLimits(
        default_ttl_ms=args.default_ttl_ms,
        max_ttl_ms=max_ttl,
        **{name: args.max_live for name in caps & fields},
    )
    lower_bounds(args.max_outbound_bytes, args.write_timeout)
    return Options(limits, args.ws, args.http, args.store)


def lower_bounds(max_outbound_bytes: int | None, write_timeout: float | None) -> None:
    """Smaller defaults for every ``Endpoint`` of this process (the server exposes no option)."""
    defaults = _endpoint.Endpoint.__init__.__kwdefaults__
    if max_outbound_bytes is not None:
        defaults["max_outbound_bytes"] = max_outbound_bytes
    if write_timeout is not None:
        defaults["write_timeout"] = write_timeout


def stats(runtime: ServerRuntime) -> dict[str, Any]:
    """What the runtime holds now (``records`` is -1 if the store cannot count them)."""
    store = runtime.supervisor.store
    try:
        records = len(store)  # type: ignore[arg-type]
    except TypeError:
        records = -1
    return {"sessions": len(runtime.sessions), "actors": runtime.supervisor.actors, "records": records}


async def serve_network(server: Server, ws: tuple[str, int] | None, http: tuple[str, int] | None) -> None:
    """Serve ``server`` over WebSocket or HTTP until stdin closes; print ``ws-port PORT`` (or
    ``http-port PORT``) once listening, and a stats line for every ``stats`` line read."""
    async with server.open() as runtime, trio.open_nursery() as nursery:
        if ws is not None:
            bound = await nursery.start(functools.partial(serve_websocket, runtime, *ws))
            print(f"ws-port {bound}", flush=True)
        else:
            assert http is not None
            bound = await nursery.start(functools.partial(serve_http, runtime, *http))
            print(f"http-port {bound}", flush=True)
        stdin = trio.lowlevel.FdStream(os.dup(sys.stdin.fileno()))
        async with stdin:
            rest = b""
            while chunk := await stdin.receive_some():
                *lines, rest = (rest + chunk).split(b"\n")
                for line in lines:
                    if line.strip() == b"stats":
                        print(json.dumps(stats(runtime)), flush=True)
        nursery.cancel_scope.cancel()


def main(argv: Sequence[str] | None = None) -> None:
    options = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    if gc_log := os.environ.get("BENCH_GC_LOG"):
        record_gc(gc_log)
    if os.environ.get("BENCH_TUNE_GC", "1") == "1":
        tune_gc()
    server = build_server(options.limits, options.store)
    if options.ws is None and options.http is None:
        trio.run(server.serve_stdio)
    else:
        trio.run(serve_network, server, options.ws, options.http)


if __name__ == "__main__":
    main()
