"""``python -m benchmarks.http_peers``: trio-mcp over HTTP and WebSocket against its peers.

In one interleaved run: server CPU per request and p50 latency per operation.

Servers (each a child process on 127.0.0.1, started once for the whole run):

* **trio-mcp**: ``benchmarks/server.py --http`` (``serve_http``, our h11 server), both eras.
* **TS SDK**: ``benchmarks/peers/ts_http_server.mjs``, the TypeScript SDK's
  ``StreamableHTTPServerTransport`` with its tasks (Node 22; ``benchmarks/peers/node.py``).
* **Python SDK 2**: ``benchmarks/peers/sdk2_http_server.py``, the official SDK 2.x's
  ``MCPServer.streamable_http_app()`` under uvicorn, in ``.venv-sdk2``
  (``benchmarks/peers/sdk2.py``); it has no tasks, so it serves the plain calls only.
* **floor**: ``benchmarks/http_floor.py``, h11 on Trio answering the raw floor's fixed JSON
  body for each method: what any HTTP server on Trio costs before MCP.

The peers are asked to answer ``application/json`` (``enableJsonResponse``, ``json_response``),
their cheapest mode and the one trio-mcp uses when nothing precedes an answer; ``--peer-sse``
keeps their default SSE stream per POST instead.

Operations (``-n`` timed requests each per round, ``--connections`` keep-alive connections):

* 2025-11-25, one session (``initialize``, ``Mcp-Session-Id``): ``call`` (a plain ``tools/call``
  of ``echo``), ``create`` (``echo`` as a task), ``result`` (``tasks/result`` of those tasks,
  completed), ``get`` (``tasks/get`` over a pool of live ``sleep`` tasks), ``cancel``
  (``tasks/cancel`` of live ``sleep`` tasks made untimed just before).
* 2026-07-28, no session (the per-request ``_meta`` envelope, the tasks extension declared, the
  ``Mcp-Method``/``Mcp-Name`` headers): ``m_call`` (plain ``echo``), ``m_get`` (``tasks/get``
  over live ``sleep`` tasks, which became tasks after the server's auto-task window).
* ``get@1`` and ``m_get@1``: the same gets on one connection (the latency target).

Each server runs only the operations it serves; the floor runs them all (its answer depends on
the method only). **Rounds** (``--rounds``): every operation in turn; within an operation the
servers take turns every ``--chunk`` requests (fresh connections, warmed by one untimed request
each), the first of a turn rotating, so that every server's figure spans the same seconds of the
shared machine; the figure is the median over rounds, and the "paired" line is the median of
each round's own ratio. Before the first round, ``--warmup`` untimed requests of every operation
on every server (V8 compiles the SDK's hot paths then; its compiler threads would otherwise
weigh on the first round). Server CPU per request is the server process's CPU over
the timed part of a run (all its threads, ``/proc/PID/task/*/schedstat``) over its requests;
p50 is the request's latency at the client. Ratios are trio-mcp ÷ peer (below 1, we spend less).

**WebSocket** (``--no-ws`` skips it): neither the TypeScript SDK (1.x ships only a WebSocket
*client* transport) nor the Python SDK 2.x serves MCP over WebSocket, so trio-mcp's
``serve_websocket`` (``benchmarks/server.py --ws``) is compared with the floor only
(``http_floor.py --ws``, wsproto on Trio): ``ws_create`` and ``ws_get`` over one connection
with ``--connections`` requests in flight (``benchmarks.client.WsLoadClient``).

A peer that cannot be set up (no npm, no network for the SDK 2 environment) is skipped with the
reason printed; so is one that fails during the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import http_load
from .client import PROTOCOL_VERSION, Request, RunResult, WsLoadClient, merge, read_port
from .http_load import Failed, encode_request, rpc

HERE = Path(__file__).resolve().parent
SERVER_SCRIPT = HERE / "server.py"
FLOOR_SCRIPT = HERE / "http_floor.py"
MODERN = "2026-07-28"
PROTOCOL_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
SLEEP_SECONDS = 3600

SERVERS = ("trio-mcp", "ts-sdk", "sdk2", "floor")
LABELS = {"trio-mcp": "trio-mcp", "ts-sdk": "TS SDK", "sdk2": "Python SDK 2", "floor": "h11 floor"}
OPS = ("call", "create", "result", "get", "cancel", "m_call", "m_get", "get@1", "m_get@1")
OP_LABELS = {
    "call": "2025-11-25 tools/call",
    "create": "task create",
    "result": "tasks/result",
    "get": "tasks/get",
    "cancel": "tasks/cancel",
    "m_call": "2026-07-28 tools/call",
    "m_get": "2026-07-28 tasks/get",
    "get@1": "tasks/get, 1 conn",
    "m_get@1": "2026-07-28 get, 1 conn",
    "ws_create": "WS task create",
    "ws_get": "WS tasks/get",
}
SERVES = {
    "trio-mcp": OPS,
    "ts-sdk": ("call", "create", "result", "get", "cancel", "get@1"),
    "sdk2": ("call", "m_call"),
    "floor": OPS,
}
WS_OPS = ("ws_create", "ws_get")
# The "Done when" of issue 29: trio-mcp's CPU per request at most these peers' on these ops...
AT_MOST_TS = ("call", "create", "get", "cancel", "result")
AT_MOST_SDK2 = ("m_call",)
FLOOR_FACTOR = 2.0  # ...at most 2x the floor on every op, and p50 tasks/get at 1 connection:
P50_ONE_MS = 0.5


@dataclass
class Sizes:
    n: int = 1000
    rounds: int = 5
    connections: int = 16
    pool: int = 16
    one_n: int = 500
    ws_n: int = 2000
    chunk: int = 250
    """Requests each server runs of an op before the next takes its turn."""
    warmup: int = 500
    """Untimed requests of each op on each server before the first round."""
    ws: bool = True
    sse: bool = False
    servers: tuple[str, ...] = SERVERS
    source: str | None = None
    """A directory holding the ``trio_mcp`` package to measure instead of the installed one."""


SMOKE = Sizes(n=40, rounds=1, connections=4, pool=4, one_n=20, ws_n=60, chunk=20, warmup=0)


# -- the servers -------------------------------------------------------------------------------
class Child:
    """A server child: ``argv`` prints ``WORD PORT`` once listening, exits when stdin closes."""

    def __init__(self, argv: Sequence[str], word: str, env: dict[str, str] | None = None) -> None:
        self.errors = tempfile.TemporaryFile()
        self.process = subprocess.Popen(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            env={**os.environ, **(env or {})},
        )
        try:
            self.port = read_port(self.process, word, 60.0)
        except BaseException as exc:
            self.close()
            raise RuntimeError(f"{argv[-1]} did not start: {exc}; stderr: {self.stderr()}") from exc

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr(self) -> str:
        self.errors.seek(0)
        return self.errors.read().decode(errors="replace")[-2000:]

    def close(self) -> None:
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
                self.process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        self.errors.close()


class Peer:
    """One HTTP server and how to ask it each operation (request bytes built before the clock)."""

    plain_tool = "echo"
    task_tool = "echo"
    session = True  # 2025-11-25 operations need an initialize first

    def __init__(self, name: str, child: Child, sizes: Sizes) -> None:
        self.name = name
        self.child = child
        self.sizes = sizes
        self.port = child.port
        self.session_id: str | None = None
        self.next_id = 1
        self.pool: list[str] = []  # live sleep tasks (2025-11-25) for the gets
        self.modern_pool: list[str] = []  # live sleep tasks (2026-07-28)
        self.created: list[str] = []  # this round's completed echo tasks, for tasks/result
        self.fresh: list[str] = []  # this round's live sleep tasks, for tasks/cancel

    # headers and bodies
    def classic_headers(self) -> dict[str, str]:
        headers = {"MCP-Protocol-Version": PROTOCOL_VERSION}
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        return headers

    def _id(self) -> int:
        self.next_id += 1
        return self.next_id

    def classic(self, method: str, params: dict[str, Any] | None) -> bytes:
        return encode_request(self.port, rpc(self._id(), method, params), self.classic_headers())

    def modern(self, method: str, params: dict[str, Any], name: str) -> bytes:
        meta = {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: {"extensions": {TASKS_EXTENSION: {}}}}
        headers = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method, "Mcp-Name": name}
        return encode_request(self.port, rpc(self._id(), method, {**params, "_meta": meta}), headers)

    def call(self, tool: str, arguments: dict[str, Any], task: bool = False) -> bytes:
        params: dict[str, Any] = {"name": tool, "arguments": arguments}
        if task:
            params["task"] = {}
        return self.classic("tools/call", params)

    # set-up, untimed
    def handshake(self) -> None:
        if not self.session:
            return
        hello = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "trio-mcp-bench", "version": "0.1.0"},
        }
        response = http_load.post(self.port, rpc(0, "initialize", hello), {})
        if response.status != 200:
            raise Failed(f"initialize: HTTP {response.status} {response.body[:200]!r}")
        self.session_id = response.headers["mcp-session-id"]
        note = http_load.post(self.port, rpc(None, "notifications/initialized"), self.classic_headers())
        if note.status != 202:
            raise Failed(f"notifications/initialized: HTTP {note.status}")

    def make_tasks(self, count: int) -> list[str]:
        """``count`` live sleep tasks (2025-11-25), untimed."""
        requests = [self.call("sleep", {"seconds": SLEEP_SECONDS}, task=True) for _ in range(count)]
        done = self.run(requests, self.sizes.connections, keep=True)
        return [m["result"]["task"]["taskId"] for m in done.messages if m is not None]

    def make_modern_tasks(self, count: int) -> list[str]:
        """``count`` live 2026-07-28 sleep tasks: each call is answered with a task once the
        server's auto-task window (1 s) has passed, so they are made all at once."""
        requests = [
            self.modern("tools/call", {"name": "sleep", "arguments": {"seconds": SLEEP_SECONDS}}, "sleep")
            for _ in range(count)
        ]
        done = self.run(requests, count, keep=True)
        ids = []
        for m in done.messages:
            assert m is not None
            result = m["result"]
            if result.get("resultType") != "task":
                raise Failed(f"a 2026-07-28 sleep call did not become a task: {result}")
            ids.append(result["taskId"])
        return ids

    def setup(self, ops: Sequence[str]) -> None:
        self.handshake()
        if {"get", "get@1"} & set(ops):
            self.pool = self.make_tasks(self.sizes.pool)
        if {"m_get", "m_get@1"} & set(ops):
            self.modern_pool = self.make_modern_tasks(self.sizes.pool)

    def prepare(self, op: str, count: int) -> None:
        """Untimed work an operation needs first (live tasks to cancel)."""
        if op == "cancel":
            self.fresh = self.make_tasks(count)

    def requests(self, op: str, count: int) -> list[bytes]:
        """``count`` requests of ``op`` (the warm-up's included)."""
        text = {"text": "hello"}
        if op == "call":
            return [self.call(self.plain_tool, text) for _ in range(count)]
        if op == "create":
            return [self.call(self.task_tool, text, task=True) for _ in range(count)]
        if op == "result":
            ids = self.created
            return [self.classic("tasks/result", {"taskId": ids[i % len(ids)]}) for i in range(count)]
        if op in ("get", "get@1"):
            pool = self.pool
            return [self.classic("tasks/get", {"taskId": pool[i % len(pool)]}) for i in range(count)]
        if op == "cancel":
            return [self.classic("tasks/cancel", {"taskId": task_id}) for task_id in self.fresh[:count]]
        if op == "m_call":
            return [
                self.modern("tools/call", {"name": self.plain_tool, "arguments": text}, self.plain_tool)
                for _ in range(count)
            ]
        if op in ("m_get", "m_get@1"):
            pool = self.modern_pool
            return [
                self.modern("tasks/get", {"taskId": pool[i % len(pool)]}, pool[i % len(pool)])
                for i in range(count)
            ]
        raise ValueError(op)

    def run(self, requests: Sequence[bytes], connections: int, keep: bool = False) -> http_load.HttpRun:
        if self.child.process.poll() is not None:
            raise Failed(f"{self.name} exited ({self.child.process.returncode}): {self.child.stderr()}")
        return http_load.run(self.port, self.child.pid, requests, connections, keep=keep)

    def timed(self, op: str, count: int) -> http_load.HttpRun:
        """``count`` timed requests of ``op`` (after the warm-up and untimed preparations)."""
        connections = 1 if op.endswith("@1") else self.sizes.connections
        self.prepare(op, count + connections)
        done = self.run(self.requests(op, count + connections), connections, keep=op == "create")
        if op == "create":
            self.created += [m["result"]["task"]["taskId"] for m in done.messages if m is not None]
        return done

    def close(self) -> None:
        self.end_session()
        self.child.close()

    def end_session(self) -> None:
        """DELETE the 2025-11-25 session, if there is one: its tasks go with it."""
        if self.session_id is not None and self.child.process.poll() is None:
            try:
                request = encode_request(self.port, b"", self.classic_headers())
                request = request.replace(b"POST ", b"DELETE ", 1)
                import socket

                with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
                    sock.sendall(request)
                    sock.recv(4096)
            except OSError:
                pass


class TsPeer(Peer):
    task_tool = "task_echo"  # its echo is a plain tool: a plain call of a task tool would poll


class Sdk2Peer(Peer):
    pass


class FloorPeer(Peer):
    """No state: every task id is made up, the answer depends on the method only."""

    session = False

    def setup(self, ops: Sequence[str]) -> None:
        self.pool = self.modern_pool = self.created = [f"floor-{i}" for i in range(self.sizes.pool)]

    def prepare(self, op: str, count: int) -> None:
        self.fresh = [f"floor-{i}" for i in range(count)]


def measured_peer(
    subject: str, op: str, wrap: Sequence[str], env: dict[str, str], sizes: Sizes, results: int
) -> Peer:
    """A ``trio-mcp`` (``server.py --http``) or ``floor`` peer for a tool that measures its
    server process, answering ``application/json``: its command behind ``wrap`` (a tracer,
    valgrind: ending with the Python to run the script), set up for ``op`` (with ``results``
    finished tasks to ask for, for ``result``)."""
    script, args = (SERVER_SCRIPT, ["--http", "127.0.0.1:0"]) if subject == "trio-mcp" else (FLOOR_SCRIPT, [])
    child = Child([*wrap, str(script), *args], "http-port", {"BENCH_JSON_RESPONSE": "1", **env})
    peer = (Peer if subject == "trio-mcp" else FloorPeer)(subject, child, sizes)
    try:
        peer.setup((op,))
        if op == "result":
            peer.timed("create", results)  # finished tasks whose results are asked for
    except BaseException:
        peer.close()
        raise
    return peer


def trio_mcp_env(sizes: Sizes) -> dict[str, str]:
    """The trio-mcp children's environment: ``--trio-mcp-source`` first on their path."""
    return {} if sizes.source is None else {"PYTHONPATH": os.path.abspath(sizes.source)}


def start(name: str, sizes: Sizes) -> Peer:
    env = {"BENCH_JSON_RESPONSE": "0" if sizes.sse else "1"}
    if name == "trio-mcp":
        argv = [sys.executable, str(SERVER_SCRIPT), "--http", "127.0.0.1:0"]
        return Peer(name, Child(argv, "http-port", trio_mcp_env(sizes)), sizes)
    if name == "floor":
        return FloorPeer(name, Child([sys.executable, str(FLOOR_SCRIPT)], "http-port"), sizes)
    if name == "ts-sdk":
        from .peers import node

        argv = node.command(source=node.HTTP_SERVER_SOURCE)
        return TsPeer(name, Child(argv, "http-port", env), sizes)
    if name == "sdk2":
        from .peers import sdk2

        return Sdk2Peer(name, Child(sdk2.command(), "http-port", {**env, "PYTHONPATH": ""}), sizes)
    raise ValueError(name)


def install(names: Sequence[str], log: Callable[[str], None]) -> tuple[list[str], dict[str, str]]:
    """The servers that can run, and the reason for each that cannot."""
    ready: list[str] = []
    skipped: dict[str, str] = {}
    for name in names:
        try:
            if name == "ts-sdk":
                from .peers import node

                node.install(say=log)
            elif name == "sdk2":
                from .peers import sdk2

                sdk2.install(say=log)
        except Exception as exc:  # SetupError, or anything else: skip the peer, never crash
            skipped[name] = f"{type(exc).__name__}: {exc}"
            log(f"skipping {LABELS[name]}: {skipped[name]}")
            continue
        ready.append(name)
    return ready, skipped


# -- the run -----------------------------------------------------------------------------------
@dataclass
class Results:
    sizes: Sizes
    runs: dict[str, dict[str, list[dict[str, Any]]]] = field(default_factory=dict)  # server -> op -> rounds
    skipped: dict[str, str] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)

    def median(self, server: str, op: str, key: str) -> float | None:
        values = [r[key] for r in self.runs.get(server, {}).get(op, [])]
        return round(statistics.median(values), 4) if values else None


def measure(sizes: Sizes, log: Callable[[str], None]) -> Results:
    results = Results(sizes)
    names, results.skipped = install([s for s in SERVERS if s in sizes.servers], log)
    peers: dict[str, Peer] = {}
    try:
        for name in names:
            try:
                peer = start(name, sizes)
                peers[name] = peer
                peer.setup(SERVES[name])
            except Exception as exc:
                if name == "trio-mcp":
                    raise
                results.skipped[name] = f"{type(exc).__name__}: {exc}"
                log(f"skipping {LABELS[name]}: {results.skipped[name]}")
                peers.pop(name, None)
        results.runs = {name: {op: [] for op in SERVES[name]} for name in peers}
        if sizes.warmup > 0:  # untimed: V8 compiles the SDK's hot paths, CPython fills its caches
            warm = dataclasses.replace(sizes, n=sizes.warmup, one_n=sizes.warmup, chunk=sizes.warmup)
            for peer in peers.values():
                peer.sizes = warm
            try:
                for op in OPS:
                    interleaved(peers, op, 0, results.skipped, log)
            finally:
                for peer in peers.values():
                    peer.sizes = sizes
            log(f"  warm-up: {sizes.warmup} requests of each op on each server")
        for round_no in range(sizes.rounds):
            for op in OPS:
                for by_name, run in interleaved(peers, op, round_no, results.skipped, log).items():
                    results.runs[by_name][op].append(run.stat())
            line = "; ".join(
                f"{LABELS[name]} "
                + " ".join(
                    f"{op} {results.runs[name][op][-1]['cpu_us_per_request']:.0f}" for op in SERVES[name]
                )
                for name in peers
            )
            log(f"  round {round_no + 1}/{sizes.rounds}, CPU us/request: {line}")
    finally:
        for peer in peers.values():
            peer.close()
    for name in list(results.runs):
        if name not in peers and name in results.skipped:
            del results.runs[name]  # dropped part-way: no figures, only the reason
    if sizes.ws:
        for name, by_op in websocket(sizes, log).items():
            results.runs.setdefault(name, {}).update(by_op)
    results.versions = versions(list(results.runs), sizes.source)
    return results


def interleaved(
    peers: dict[str, Peer], op: str, round_no: int, skipped: dict[str, str], log: Callable[[str], None]
) -> dict[str, http_load.HttpRun]:
    """One round of ``op`` on every peer that serves it, in turns of ``sizes.chunk`` requests:
    each turn runs every peer once, the first of a turn rotating with the turn and the round,
    so that every peer's figure spans the same seconds of the machine. A peer other than
    trio-mcp that fails is dropped (closed, removed from ``peers``) with its reason."""
    names = [name for name in peers if op in SERVES[name]]
    if not names:
        return {}
    sizes = peers[names[0]].sizes
    total = sizes.one_n if op.endswith("@1") else sizes.n
    chunk = max(1, min(sizes.chunk, total))
    parts: dict[str, list[http_load.HttpRun]] = {name: [] for name in names}
    if op == "create":
        for name in names:
            peers[name].created = []
    for turn, start in enumerate(range(0, total, chunk)):
        count = min(chunk, total - start)
        shift = (turn + round_no) % len(names)
        for name in names[shift:] + names[:shift]:
            peer = peers.get(name)
            if peer is None:
                continue
            try:
                parts[name].append(peer.timed(op, count))
            except Exception as exc:
                if name == "trio-mcp":
                    raise
                skipped[name] = f"failed during {op}: {type(exc).__name__}: {exc}"
                log(f"dropping {LABELS[name]}: {skipped[name]}")
                peers.pop(name).close()
                del parts[name]
    return {name: http_load.HttpRun.merge(runs) for name, runs in parts.items() if name in peers}


def websocket(sizes: Sizes, log: Callable[[str], None]) -> dict[str, dict[str, list[dict[str, Any]]]]:
    """trio-mcp's WebSocket transport and the wsproto floor, interleaved like the HTTP ops."""
    clients = {
        "trio-mcp": WsLoadClient(
            [sys.executable, str(SERVER_SCRIPT), "--ws", "127.0.0.1:0"],
            env={**os.environ, **trio_mcp_env(sizes)},
        ),
    }
    try:
        clients["floor"] = WsLoadClient([sys.executable, str(FLOOR_SCRIPT), "--ws"])
        pools: dict[str, list[str]] = {}
        for name, client in clients.items():
            client.handshake()
            params = {"name": "sleep", "arguments": {"seconds": SLEEP_SECONDS}, "task": {}}
            made = client.run([("tools/call", params)] * sizes.pool, sizes.connections)
            pools[name] = [r["task"]["taskId"] for r in made.results]
        runs: dict[str, dict[str, list[dict[str, Any]]]] = {
            name: {op: [] for op in WS_OPS} for name in clients
        }
        order = list(clients)
        for round_no in range(sizes.rounds):
            for op in WS_OPS:
                requests: dict[str, list[Request]] = {}
                for name in order:
                    if op == "ws_create":
                        params = {"name": "echo", "arguments": {"text": "hello"}, "task": {}}
                        requests[name] = [("tools/call", params)] * sizes.ws_n
                    else:
                        pool = pools[name]
                        requests[name] = [
                            ("tasks/get", {"taskId": pool[i % len(pool)]}) for i in range(sizes.ws_n)
                        ]
                    warm = max(sizes.connections, sizes.warmup if round_no == 0 else 0)
                    warm_up = (requests[name] * (1 + warm // len(requests[name])))[:warm]
                    clients[name].run(warm_up, sizes.connections)  # untimed
                chunk = max(1, min(sizes.chunk * 2, sizes.ws_n))  # cheaper requests: longer turns
                parts: dict[str, list[RunResult]] = {name: [] for name in order}
                cpu = dict.fromkeys(order, 0.0)
                for turn, start in enumerate(range(0, sizes.ws_n, chunk)):
                    shift = (turn + round_no) % len(order)
                    for name in order[shift:] + order[:shift]:
                        client = clients[name]
                        before = http_load.process_cpu(client.pid)
                        parts[name].append(
                            client.run(requests[name][start : start + chunk], sizes.connections)
                        )
                        cpu[name] += http_load.process_cpu(client.pid) - before
                for name in order:
                    done = merge(parts[name])
                    if done.errors:
                        raise Failed(f"WebSocket {name} {op}: {next(iter(done.errors.values()))}")
                    runs[name][op].append(
                        {
                            "requests": done.count,
                            "seconds": round(done.seconds, 4),
                            "rate": round(done.rate, 1),
                            "cpu_us_per_request": round(cpu[name] / done.count * 1e6, 2),
                            "p50_ms": round(done.percentile(50) * 1e3, 4),
                            "p99_ms": round(done.percentile(99) * 1e3, 4),
                        }
                    )
            log(
                f"  WebSocket round {round_no + 1}/{sizes.rounds}, CPU us/request: "
                + "; ".join(
                    f"{LABELS[n]} "
                    + " ".join(f"{op} {runs[n][op][-1]['cpu_us_per_request']:.0f}" for op in WS_OPS)
                    for n in order
                )
            )
    finally:
        for client in clients.values():
            client.close()
    return {name: {**ops} for name, ops in runs.items()}


def versions(names: Sequence[str], source: str | None = None) -> dict[str, Any]:
    from importlib.metadata import version

    import trio

    out: dict[str, Any] = {"python": sys.version.split()[0], "trio": trio.__version__, "h11": version("h11")}
    out["trio_mcp"] = f"from {source}" if source else trio_mcp_revision()
    if "ts-sdk" in names:
        from .peers import node

        out["node"] = node.node_version()
        out.update(node.PACKAGES)
    if "sdk2" in names:
        from .peers import sdk2

        out["sdk2"] = sdk2.versions()
    return out


def trio_mcp_revision() -> str:
    """The commit measured, with ``+changes`` if the working tree differs from it."""
    root = HERE.parent

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--", "trio_mcp") else "")


# -- the report --------------------------------------------------------------------------------
def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def summary(results: Results) -> dict[str, Any]:
    """Medians per server and op, trio-mcp's ratios to each peer, and the issue's targets."""
    ops = [op for op in (*OPS, *WS_OPS) if "trio-mcp" in results.runs and op in results.runs["trio-mcp"]]
    median = {
        name: {
            op: {
                key: results.median(name, op, key)
                for key in ("cpu_us_per_request", "p50_ms", "p99_ms", "rate")
            }
            for op in by_op
        }
        for name, by_op in results.runs.items()
    }
    ratios: dict[str, dict[str, float | None]] = {}
    for peer in ("ts-sdk", "sdk2", "floor"):
        if peer in median:
            ratios[peer] = {
                op: _ratio(
                    median["trio-mcp"][op]["cpu_us_per_request"], median[peer][op]["cpu_us_per_request"]
                )
                for op in ops
                if op in median[peer]
            }
    # Each round's trio-mcp figure over the same round's peer figure, the median of those: the
    # machine drifts between rounds more than within one; read it beside the ratio of medians.
    paired: dict[str, dict[str, float | None]] = {}
    ours_runs = results.runs.get("trio-mcp", {})
    for peer in ratios:
        paired[peer] = {}
        for op in ratios[peer]:
            pairs = [
                a["cpu_us_per_request"] / b["cpu_us_per_request"]
                for a, b in zip(ours_runs[op], results.runs[peer][op], strict=False)
                if b["cpu_us_per_request"]
            ]
            paired[peer][op] = round(statistics.median(pairs), 3) if pairs else None
    targets: list[dict[str, Any]] = []

    def target(what: str, value: float | None, limit: float) -> None:
        if value is not None:
            targets.append({"target": what, "value": value, "limit": limit, "result": _verdict(value, limit)})

    for op in AT_MOST_TS:
        target(f"{op}: CPU trio-mcp / TS SDK", ratios.get("ts-sdk", {}).get(op), 1.0)
    for op in AT_MOST_SDK2:
        target(f"{op}: CPU trio-mcp / Python SDK 2", ratios.get("sdk2", {}).get(op), 1.0)
    for op in ops:
        target(f"{op}: CPU trio-mcp / floor", ratios.get("floor", {}).get(op), FLOOR_FACTOR)
    for op in ("get@1", "m_get@1"):
        if op in median.get("trio-mcp", {}):
            target(f"{op}: p50 ms", median["trio-mcp"][op]["p50_ms"], P50_ONE_MS)
    return {"ops": ops, "median": median, "ratios": ratios, "paired_ratios": paired, "targets": targets}


def _verdict(value: float, limit: float) -> str:
    return "PASS" if value <= limit else "MISS"


def table(results: Results, summ: dict[str, Any]) -> str:
    names = [n for n in SERVERS if n in results.runs]
    median = summ["median"]

    def cell(name: str, op: str) -> str:
        figure = median.get(name, {}).get(op)
        if figure is None:
            return "—"
        return f"{figure['cpu_us_per_request']:.0f} / {figure['p50_ms']:.2f}"

    peers = [p for p in ("ts-sdk", "sdk2", "floor") if p in summ["ratios"]]
    head = ["op", *(LABELS[n] for n in names), *(f"/ {LABELS[p]}" for p in peers)]
    rows = [head]
    for op in summ["ops"]:
        ratio_cells = []
        for p in peers:
            r = summ["ratios"][p].get(op)
            ratio_cells.append("—" if r is None else f"{r:.3f}")
        rows.append([OP_LABELS[op], *(cell(n, op) for n in names), *ratio_cells])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(c.ljust(widths[i]) if i == 0 else c.rjust(widths[i]) for i, c in enumerate(row))
        for row in rows
    ]
    s = results.sizes
    out = [
        f"HTTP/WebSocket peers: server CPU us per request / p50 ms, median of {s.rounds} interleaved rounds; "
        f"{s.n} requests per op per round on {s.connections} keep-alive connections "
        f"(@1: {s.one_n} on one); ratios are trio-mcp's CPU / the peer's; "
        f"peers answer {'SSE' if s.sse else 'application/json'}",
        *lines,
    ]
    for p in peers:
        pairs = ", ".join(f"{op} {r:.3f}" for op, r in summ["paired_ratios"][p].items() if r is not None)
        out.append(f"paired (median of each round's trio-mcp / {LABELS[p]}): {pairs}")
    if results.sizes.ws:
        out.append("WS rows: one WebSocket connection, that many requests in flight; no SDK serves WebSocket")
    for name, reason in results.skipped.items():
        out.append(f"skipped {LABELS[name]}: {reason}")
    out.append("targets (issue 29):")
    for t in summ["targets"]:
        out.append(f"  {t['result']}  {t['target']} = {t['value']} (<= {t['limit']})")
    return "\n".join(out)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, Sizes]:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.http_peers", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, one round")
    parser.add_argument("-n", type=int, help="timed requests per op, server and round")
    parser.add_argument("--rounds", type=int, help="interleaved rounds (medians over them)")
    parser.add_argument("--connections", type=int, help="keep-alive connections (requests in flight)")
    parser.add_argument("--one-n", type=int, help="timed requests of the one-connection gets")
    parser.add_argument("--ws-n", type=int, help="timed requests per WebSocket op and round")
    parser.add_argument("--pool", type=int, help="live tasks the gets cycle over")
    parser.add_argument("--chunk", type=int, help="requests per server per turn (servers take turns)")
    parser.add_argument("--warmup", type=int, help="untimed requests per op and server before round 1")
    parser.add_argument("--servers", help=f"comma-separated, of {','.join(SERVERS)} (trio-mcp always)")
    parser.add_argument("--no-ws", action="store_true", help="skip the WebSocket ops")
    parser.add_argument("--peer-sse", action="store_true", help="the peers answer SSE (their default)")
    parser.add_argument("--json", metavar="PATH", help="also write every figure to PATH")
    parser.add_argument(
        "--trio-mcp-source",
        metavar="DIR",
        help="measure the trio_mcp package in DIR (e.g. a `git archive` of a commit), not the installed one",
    )
    args = parser.parse_args(argv)
    sizes = Sizes(**vars(SMOKE)) if args.smoke else Sizes()
    for name in ("n", "rounds", "connections", "one_n", "ws_n", "pool", "chunk", "warmup"):
        if getattr(args, name) is not None:
            setattr(sizes, name, getattr(args, name))
    if args.servers:
        wanted = {s.strip() for s in args.servers.split(",") if s.strip()}
        unknown = wanted - set(SERVERS)
        if unknown:
            parser.error(f"unknown servers: {', '.join(sorted(unknown))}")
        sizes.servers = tuple(s for s in SERVERS if s in wanted | {"trio-mcp"})
    sizes.ws = sizes.ws and not args.no_ws
    sizes.sse = args.peer_sse
    sizes.source = args.trio_mcp_source
    return args, sizes


def main(argv: Sequence[str] | None = None) -> int:
    args, sizes = parse_args(sys.argv[1:] if argv is None else argv)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.monotonic()
    load = os.getloadavg()[0]
    results = measure(sizes, log)
    summ = summary(results)
    print(
        f"{len(os.sched_getaffinity(0))} cpus; load average {load:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at end; {time.monotonic() - started:.0f} s; {json.dumps(results.versions)}"
    )
    print(table(results, summ))
    if args.json:
        data = {
            "sizes": vars(sizes),
            "versions": results.versions,
            "skipped": results.skipped,
            "runs": results.runs,
            **summ,
        }
        Path(args.json).write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
