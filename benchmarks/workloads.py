"""The workloads: each starts its own server process, drives it, and runs the same request
pattern against the raw floor for comparison. The WebSocket workloads run the create, get and
cancel patterns against the same server served over WebSocket, and compare with the stdio
figures of the same run instead.

Every figure is a plain dict (JSON-ready). A *stat* describes one timed pipelined run::

    {"requests", "seconds", "rate", "p50_ms", "p99_ms", "max_ms", "errors",
     "full_gc": {"count", "seconds", "max_s"}}   # full_gc: server runs only

``full_gc`` counts the server's generation-2 garbage collections that started inside the timed
run (recorded by the server itself, see ``benchmarks/server.py``).
"""

from __future__ import annotations

import functools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .client import LoadClient, Request, RunResult, WsLoadClient, merge

BENCH_DIR = Path(__file__).resolve().parent
SERVER_SCRIPT = BENCH_DIR / "server.py"
FLOOR_SCRIPT = BENCH_DIR / "floor.py"
INVALID_PARAMS = -32602


@dataclass
class Sizes:
    """Everything that sets how big and how long a run is."""

    n: int = 20_000
    """Task-augmented ``echo`` calls for the create and result workloads."""
    scales: list[int] = field(default_factory=lambda: [250, 1_000, 10_000, 100_000])
    """Numbers L of live ``sleep`` tasks for get, cancel and memory."""
    main_scale: int = 10_000
    """The L at which targets are judged (the largest scale if it is not among them)."""
    get_min: int = 20_000
    """At least this many ``tasks/get`` per L (cycling over the L tasks when L is smaller)."""
    cancel_min: int = 5_000
    """At least this many timed ``tasks/cancel`` per L: rounds of create L / cancel L repeat."""
    probe: int = 100
    """Sequential (window 1) cancels per L for unloaded latency, at most L/10."""
    window: int = 64
    """Requests in flight."""
    warmup: int = 100
    """Untimed tasks made (and got, cancelled) before each measurement. Kept small: memory they
    free is reused by the measured tasks and would make RSS per task look smaller."""
    settle: float = 1.0
    """Seconds to wait before reading RSS."""
    floor_repeats: int = 3
    """The floor is measured this many times and its best run kept."""
    peer_chunk: int = 1_000
    """Workload 0 runs its peers side by side: each timed run is cut into chunks of this many
    requests, which the peers take in turn (see :func:`interleaved`)."""
    sleep_seconds: float = 3600.0
    ws: bool = True
    """Also run create, get and cancel (at the main L) over WebSocket."""
    churn_tasks: int = 100_000
    """Short-TTL ``echo`` tasks in the churn workload; 0 skips it."""
    churn_chunk: int = 5_000
    churn_ttl_ms: tuple[int, int] = (1_000, 2_000)
    churn_wait: float = 10.0
    """Seconds past the longest TTL to wait for every task to expire."""
    stores: bool = True
    """Workload 9: create, get and cancel with the SQLite and Redis stores, as ratios to memory."""
    store_n: int = 5_000
    store_live: int = 1_000
    store_get_min: int = 5_000
    store_cancel_min: int = 2_000
    http: bool = True
    """Workload 10: create, get and cancel over Streamable HTTP, as ratios to stdio."""
    http_n: int = 3_000
    http_live: int = 1_000
    http_get_min: int = 3_000
    http_cancel_min: int = 1_000
    http_window: int = 8
    """Requests in flight over HTTP (one keep-alive connection each; see ``http_client.py``)."""
    hardening: bool = True
    """Workload 11: a client that never reads, a tasks/result waiter flood, disconnect churn."""
    flood_waiters: int = 300
    churn_connections: int = 200
    churn_connection_tasks: int = 20
    max_outbound_bytes: int | None = None
    """Lower the server's bound on unread answers (smoke runs only; None: the 16 MiB default)."""
    write_timeout: float | None = None
    """Lower the server's write timeout (smoke runs only; None: the 30 s default)."""
    non_reader_seconds: float = 60.0
    """Give up on a non-reading client the server has not disconnected after this long."""
    peers: bool = True
    """Workload 0, the headline: the TypeScript SDK and bare-Trio peers beside trio-mcp and the
    raw floor at the main L (``benchmarks/peers/compare.py``)."""
    ts: bool = True
    """Include the TypeScript SDK peer (Node 22 and the SDK in .cache/bench/, installed once)."""
    peer_repeats: int = 5
    """Interleaved runs of every peer; the figures are their medians. (Five, not three: single
    runs on a shared 2-core machine swing by a third, and a median of three moves with one.)"""
    breakdown: bool = True
    """Workload 12: where a live task's memory goes, in-process (``benchmarks/memory.py``)."""
    breakdown_trace_live: int = 2_000
    """Tasks in the breakdown's traced (tracemalloc) round."""

    def scale_for_targets(self) -> int:
        return self.main_scale if self.main_scale in self.scales else max(self.scales)


SMOKE = Sizes(
    n=200,
    scales=[100, 1_000],
    main_scale=1_000,
    get_min=300,
    cancel_min=200,
    probe=10,
    window=16,
    warmup=20,
    settle=0.2,
    floor_repeats=1,
    peer_chunk=50,
    churn_tasks=600,
    churn_chunk=200,
    churn_ttl_ms=(200, 400),
    churn_wait=5.0,
    store_n=100,
    store_live=100,
    store_get_min=200,
    store_cancel_min=100,
    http_n=40,
    http_live=40,
    http_get_min=40,
    http_cancel_min=40,
    http_window=4,
    flood_waiters=300,
    churn_connections=20,
    churn_connection_tasks=5,
    max_outbound_bytes=256 * 1024,
    write_timeout=2.0,
    non_reader_seconds=15.0,
    peer_repeats=1,
    breakdown_trace_live=200,
)


# -- request patterns ------------------------------------------------------------------------
def create_echo(count: int, ttl_ms: Callable[[int], int] | None = None) -> list[Request]:
    if ttl_ms is None:
        params = {"name": "echo", "arguments": {"text": "hello"}, "task": {}}
        return [("tools/call", params)] * count
    return [
        ("tools/call", {"name": "echo", "arguments": {"text": "hello"}, "task": {"ttl": ttl_ms(i)}})
        for i in range(count)
    ]


def create_sleep(count: int, seconds: float) -> list[Request]:
    return [("tools/call", {"name": "sleep", "arguments": {"seconds": seconds}, "task": {}})] * count


def by_id(method: str, task_ids: Sequence[str]) -> list[Request]:
    return [(method, {"taskId": task_id}) for task_id in task_ids]


def task_ids(run: RunResult, what: str) -> list[str]:
    if run.errors:
        first = next(iter(run.errors.values()))
        raise RuntimeError(f"{what}: {len(run.errors)} of {run.count} requests failed, e.g. {first}")
    return [result["task"]["taskId"] for result in run.results]


# -- processes ---------------------------------------------------------------------------------
class Target:
    """A child process under load (the server under test or the floor), handshake done."""

    def __init__(
        self, argv: Sequence[str], *, record_gc: bool, client: type[LoadClient] = LoadClient
    ) -> None:
        self.gc_path: str | None = None
        env = dict(os.environ)
        if record_gc:
            fd, self.gc_path = tempfile.mkstemp(prefix="bench-gc-", suffix=".json")
            os.close(fd)
            env["BENCH_GC_LOG"] = self.gc_path
        self.client = client(argv, env=env)
        self.client.handshake()
        self.gc: dict[str, Any] | None = None

    def run(self, requests: Sequence[Request], window: int) -> RunResult:
        return self.client.run(requests, window)

    def close(self) -> None:
        self.client.close()
        if self.gc_path is not None:
            try:
                text = Path(self.gc_path).read_text()
                self.gc = json.loads(text) if text else None
            finally:
                os.unlink(self.gc_path)

    def stat(self, run: RunResult) -> dict[str, Any]:
        """Call after :meth:`close` to include the server's full collections."""
        data = stat(run)
        if self.gc is not None:
            pauses = [took for start, took in self.gc["full"] if any(a <= start <= b for a, b in run.windows)]
            data["full_gc"] = {
                "count": len(pauses),
                "seconds": round(sum(pauses), 4),
                "max_s": round(max(pauses, default=0.0), 4),
            }
        return data


def server(*args: str) -> Target:
    return Target([sys.executable, str(SERVER_SCRIPT), *args], record_gc=True)


def ws_server(*args: str) -> Target:
    """The same server, served over WebSocket on a free port of 127.0.0.1."""
    return Target(
        [sys.executable, str(SERVER_SCRIPT), "--ws", "127.0.0.1:0", *args],
        record_gc=True,
        client=WsLoadClient,
    )


def floor() -> Target:
    return Target([sys.executable, str(FLOOR_SCRIPT)], record_gc=False)


def stat(run: RunResult) -> dict[str, Any]:
    return {
        "requests": run.count,
        "seconds": round(run.seconds, 4),
        "rate": round(run.rate, 1),
        "p50_ms": round(run.percentile(50) * 1e3, 3),
        "p99_ms": round(run.percentile(99) * 1e3, 3),
        "max_ms": round(max(run.latencies, default=0.0) * 1e3, 3),
        "errors": len(run.errors),
        "cpu_us_per_request": round(run.peer_cpu / run.count * 1e6, 2) if run.count else 0.0,
        "client_cpu_us_per_request": round(run.client_cpu / run.count * 1e6, 2) if run.count else 0.0,
        "answers_per_read": round(run.count / run.reads, 2) if run.reads else 0.0,
    }


def best(runs: Sequence[RunResult]) -> RunResult:
    return max(runs, key=lambda run: run.rate)


def compare(server_stat: dict[str, Any], floor_stat: dict[str, Any]) -> dict[str, Any]:
    """``ratio``: server rate / floor rate (the targets' measure); ``cpu_ratio``: floor CPU per
    request / server CPU per request, the same comparison freed from waiting for a busy core."""
    server_cpu, floor_cpu = server_stat["cpu_us_per_request"], floor_stat["cpu_us_per_request"]
    return {
        "server": server_stat,
        "floor": floor_stat,
        "ratio": round(server_stat["rate"] / floor_stat["rate"], 4) if floor_stat["rate"] else 0.0,
        "cpu_ratio": round(floor_cpu / server_cpu, 4) if server_cpu else 0.0,
    }


def settled_rss(target: Target, seconds: float) -> int:
    target.client.ping()
    target.client.settle(seconds)
    return target.client.rss_kib()


# -- workloads 1 and 2: create, result ----------------------------------------------------------
def interleaved(
    targets: Mapping[str, Target], requests: Mapping[str, Sequence[Request]], window: int, chunk: int | None
) -> dict[str, RunResult]:
    """Each target's ``requests`` as one timed run (merged), the targets taking turns.

    With ``chunk``, every target's requests are cut into chunks of that many, and chunk k of
    every target runs before chunk k + 1 of any, the order of the targets rotating by one per
    chunk: all of them meet the machine in the same moments, so that a drift in its speed
    (other tenants, frequency) weighs on each alike and their ratios keep still. Without it,
    each target's requests run in one piece, one target after the other."""
    if chunk is None:
        return {name: target.run(requests[name], window) for name, target in targets.items()}
    return {name: merge(parts) for name, parts in interleaved_parts(targets, requests, window, chunk).items()}


def interleaved_parts(
    targets: Mapping[str, Target], requests: Mapping[str, Sequence[Request]], window: int, chunk: int
) -> dict[str, list[RunResult]]:
    """:func:`interleaved` with ``chunk``, each target's runs kept apart, one per chunk."""
    names = list(targets)
    runs: dict[str, list[RunResult]] = {name: [] for name in names}
    longest = max((len(requests[name]) for name in names), default=0)
    for k, start in enumerate(range(0, longest, chunk)):
        shift = k % len(names)
        for name in names[shift:] + names[:shift]:
            part = requests[name][start : start + chunk]
            if part:
                runs[name].append(targets[name].run(part, window))
    return runs


def timed_creates(srv: Target, sizes: Sizes) -> tuple[RunResult, list[str]]:
    """Warm up, then the timed run of N task-augmented echo calls; the run and the task ids."""
    created, ids = timed_creates_side_by_side({"": srv}, sizes, None)
    return created[""], ids[""]


def timed_creates_side_by_side(
    targets: Mapping[str, Target], sizes: Sizes, chunk: int | None
) -> tuple[dict[str, RunResult], dict[str, list[str]]]:
    """:func:`timed_creates` for several targets, their timed runs :func:`interleaved`."""
    w = sizes.window
    for srv in targets.values():
        warm = task_ids(srv.run(create_echo(sizes.warmup), w), "warm-up create")
        srv.run(by_id("tasks/result", warm), w)
        srv.client.ping()
    created = interleaved(targets, {name: create_echo(sizes.n) for name in targets}, w, chunk)
    return created, {name: task_ids(run, "create") for name, run in created.items()}


def create_and_result(sizes: Sizes, raw: Target, log: Callable[[str], None]) -> dict[str, Any]:
    """N task-augmented echo calls until every CreateTaskResult is in; then tasks/result for each."""
    w = sizes.window
    srv = server()
    try:
        created, ids = timed_creates(srv, sizes)
        srv.client.ping()
        srv.client.settle(min(sizes.settle, 0.5))  # every echo has finished before results are asked
        results = srv.run(by_id("tasks/result", ids), w)
        bad = [r for r in results.results if r is not None and r["content"][0]["text"] != "hello"]
        if bad:
            raise RuntimeError(f"tasks/result returned a wrong result: {bad[0]}")
    finally:
        srv.close()
    floor_create = best([raw.run(create_echo(sizes.n), w) for _ in range(sizes.floor_repeats)])
    floor_result = best([raw.run(by_id("tasks/result", ids), w) for _ in range(sizes.floor_repeats)])
    out = {
        "create": {"n": sizes.n, **compare(srv.stat(created), stat(floor_create)), "server_gc": srv.gc},
        "result": {"n": sizes.n, **compare(srv.stat(results), stat(floor_result))},
    }
    for name in ("create", "result"):
        log(f"  {name}: N={sizes.n} {_brief(out[name])}")
    return out


# -- workloads 3 to 6: get and cancel under L live tasks, memory -------------------------------
@dataclass
class ScaleRuns:
    """The server side of workloads 3 to 5 at one L: the timed runs and what they were given."""

    live: int
    ids: list[str]
    get_ids: list[str]
    probe_n: int
    round_sizes: list[int]
    created: RunResult
    """Every timed creation of L sleep tasks: the first, and one per further round of cancels
    (at a small L, so that it counts as many creates as the cancels do)."""
    got: RunResult
    probe: RunResult
    cancelled: RunResult
    rss_before_kib: int
    rss_after_kib: int

    @classmethod
    def measure(cls, srv: Target, live: int, sizes: Sizes) -> ScaleRuns:
        """L idle live sleep tasks: RSS before and after, tasks/get for each (at least
        ``get_min``), ``probe_n`` cancels one at a time, then cancels in rounds of L."""
        return cls.side_by_side({"": srv}, live, sizes, None)[""]

    @classmethod
    def side_by_side(
        cls, targets: Mapping[str, Target], live: int, sizes: Sizes, chunk: int | None
    ) -> dict[str, ScaleRuns]:
        """:meth:`measure` for several targets, each timed step :func:`interleaved` (RSS is
        read per target: each holds its own L tasks)."""
        w = sizes.window
        names = list(targets)
        probe_n = max(1, min(sizes.probe, live // 10))

        def timed(requests_of: Callable[[str], list[Request]], window: int = w) -> dict[str, RunResult]:
            return interleaved(targets, {name: requests_of(name) for name in names}, window, chunk)

        rss_before: dict[str, int] = {}
        for name, srv in targets.items():
            warm = task_ids(srv.run(create_sleep(sizes.warmup, sizes.sleep_seconds), w), "warm-up create")
            srv.run(by_id("tasks/get", warm), w)
            srv.run(by_id("tasks/cancel", warm), w)
            rss_before[name] = settled_rss(srv, sizes.settle)
        created = timed(lambda _: create_sleep(live, sizes.sleep_seconds))
        ids = {name: task_ids(created[name], "create") for name in names}
        rss_after = {name: settled_rss(srv, sizes.settle) for name, srv in targets.items()}
        get_ids = {name: [ids[name][i % live] for i in range(max(live, sizes.get_min))] for name in names}
        got = timed(lambda name: by_id("tasks/get", get_ids[name]))
        for run in got.values():
            if run.errors:
                raise RuntimeError(
                    f"tasks/get: {len(run.errors)} errors, e.g. {next(iter(run.errors.values()))}"
                )
        probe = timed(lambda name: by_id("tasks/cancel", ids[name][:probe_n]), 1)
        first = timed(lambda name: by_id("tasks/cancel", ids[name][probe_n:]))
        rounds = {name: [first[name]] for name in names}
        creations = {name: [created[name]] for name in names}
        round_sizes = [live - probe_n]
        while sum(round_sizes) < sizes.cancel_min:
            made = timed(lambda _: create_sleep(live, sizes.sleep_seconds))
            for name, run in made.items():
                creations[name].append(run)
            cancels = {name: by_id("tasks/cancel", task_ids(run, "create")) for name, run in made.items()}
            for srv in targets.values():
                srv.client.ping()
            for name, run in interleaved(targets, cancels, w, chunk).items():
                rounds[name].append(run)
            round_sizes.append(live)
        out: dict[str, ScaleRuns] = {}
        for name in names:
            cancelled = merge(rounds[name])
            not_cancelled = [
                r
                for r in cancelled.results + probe[name].results
                if r is not None and r["status"] != "cancelled"
            ]
            if not_cancelled:
                raise RuntimeError(f"tasks/cancel answered a task that is not cancelled: {not_cancelled[0]}")
            out[name] = cls(
                live,
                ids[name],
                get_ids[name],
                probe_n,
                round_sizes,
                merge(creations[name]),
                got[name],
                probe[name],
                cancelled,
                rss_before[name],
                rss_after[name],
            )
        return out

    def memory(self) -> dict[str, Any]:
        return {
            "rss_before_kib": self.rss_before_kib,
            "rss_after_kib": self.rss_after_kib,
            "bytes_per_task": round((self.rss_after_kib - self.rss_before_kib) * 1024 / self.live, 1),
        }


def at_scale(live: int, sizes: Sizes, raw: Target, log: Callable[[str], None]) -> dict[str, Any]:
    """L idle live sleep tasks: RSS per task, tasks/get for each, then tasks/cancel for each."""
    w = sizes.window
    srv = server()
    try:
        runs = ScaleRuns.measure(srv, live, sizes)
    finally:
        srv.close()
    ids, get_ids, probe_n, round_sizes = runs.ids, runs.get_ids, runs.probe_n, runs.round_sizes

    floor_get = best([raw.run(by_id("tasks/get", get_ids), w) for _ in range(sizes.floor_repeats)])
    floor_probe = best([raw.run(by_id("tasks/cancel", ids[:probe_n]), 1) for _ in range(sizes.floor_repeats)])
    floor_cancel = best(
        [
            merge([raw.run(by_id("tasks/cancel", ids[:size]), w) for size in round_sizes])
            for _ in range(sizes.floor_repeats)
        ]
    )
    point: dict[str, Any] = {
        "L": live,
        "create_sleep": srv.stat(runs.created),
        "get": compare(srv.stat(runs.got), stat(floor_get)),
        "cancel": {
            **compare(srv.stat(runs.cancelled), stat(floor_cancel)),
            "rounds": len(round_sizes),
            "probe": {"window": 1, "server": srv.stat(runs.probe), "floor": stat(floor_probe)},
        },
        "memory": runs.memory(),
        "server_gc": srv.gc,
    }
    log(
        f"  L={live}: get {_brief(point['get'])}; cancel {_brief(point['cancel'])}; "
        f"cancel W=1 p99 {point['cancel']['probe']['server']['p99_ms']:.2f} ms; "
        f"RSS/task {point['memory']['bytes_per_task'] / 1024:.2f} KiB"
    )
    return point


# -- workload 6: flatness, the two ends side by side -------------------------------------------
def paired_flatness(sizes: Sizes, lo: int, hi: int, log: Callable[[str], None]) -> dict[str, Any]:
    """Server CPU per request with ``hi`` live tasks over that with ``lo``, for a create, a
    ``tasks/get`` and a ``tasks/cancel``: two fresh servers side by side, taking turns as the
    peers of workload 0 do, so that the machine's drift weighs on both ends alike (the L points
    of workloads 3 to 5 each run on a server of their own, minutes apart, and their ratio moved
    by a fifth from run to run with the same code). Who goes first alternates per turn.

    1. *Build-up* (reported, not judged): the high server creates its ``hi`` tasks, a chunk
       (``peer_chunk``) per turn, while the low one creates ``lo`` and cancels them. This is
       the cost of *growing* to ``hi``: every create adds objects for good, so the collector
       runs as many times more often, and fresh memory is faulted in, where the low server
       only recycles.
    2. *Create at L*: with their ``lo`` and ``hi`` tasks live, both create ``lo`` more per turn
       (timed) and cancel them (not timed), ``cancel_min // lo`` turns: a create with L tasks
       alive, at either end.
    3. *Get*: as many gets on both, cycling over each server's live tasks, in chunks.
    4. *Cancel*: per turn the high server cancels its next chunk of long-lived tasks, the low
       one creates ``lo`` (not timed) and cancels them (timed).

    ``*_cpu_ratio`` is the ratio of the two CPU totals per request; ``*_paired`` the median
    over turns of each turn's ratio."""
    w, chunk, secs = sizes.window, sizes.peer_chunk, sizes.sleep_seconds
    ends = {"low": server(), "high": server()}
    low, high = ends["low"], ends["high"]
    timed: dict[str, dict[str, list[RunResult]]] = {
        op: {"low": [], "high": []} for op in (*OPS_FLAT, "build")
    }
    try:
        for srv in ends.values():
            warm = task_ids(srv.run(create_sleep(sizes.warmup, secs), w), "warm-up create")
            srv.run(by_id("tasks/get", warm), w)
            srv.run(by_id("tasks/cancel", warm), w)

        def round_trip(end: str, op: str) -> None:
            """``lo`` tasks created and cancelled on one end; the ``op`` half is timed."""
            srv = ends[end]
            made = srv.run(create_sleep(lo, secs), w)
            cancelled = srv.run(by_id("tasks/cancel", task_ids(made, "create")), w)
            timed[op][end].append(cancelled if op == "cancel" else made)

        def turn_order(turn: int) -> tuple[str, str]:
            return ("high", "low") if turn % 2 == 0 else ("low", "high")

        def chunk_turns(op: str, high_step: Callable[[int], RunResult]) -> None:
            """A turn per chunk of the high server's ``hi`` tasks: its timed step on the chunk
            starting at that index, and a round trip of the low one timing ``op``."""
            for turn, start in enumerate(range(0, hi, chunk)):
                for end in turn_order(turn):
                    if end == "high":
                        timed[op]["high"].append(high_step(start))
                    else:
                        round_trip("low", op)

        high_ids: list[str] = []

        def grow(start: int) -> RunResult:
            run = high.run(create_sleep(min(chunk, hi - start), secs), w)
            high_ids.extend(task_ids(run, "create"))
            return run

        chunk_turns("build", grow)
        low_ids = task_ids(low.run(create_sleep(lo, secs), w), "create")
        for turn in range(max(1, sizes.cancel_min // lo)):
            for end in turn_order(turn):
                round_trip(end, "create")
        count = max(hi, sizes.get_min)
        got = interleaved_parts(
            ends,
            {
                "low": by_id("tasks/get", [low_ids[i % lo] for i in range(count)]),
                "high": by_id("tasks/get", [high_ids[i % hi] for i in range(count)]),
            },
            w,
            chunk,
        )
        for end in ends:
            timed["get"][end] = got[end]
        low.run(by_id("tasks/cancel", low_ids), w)
        chunk_turns(
            "cancel", lambda start: high.run(by_id("tasks/cancel", high_ids[start : start + chunk]), w)
        )
    finally:
        for srv in ends.values():
            srv.close()
    out: dict[str, Any] = {"from_L": lo, "to_L": hi, "side_by_side": True, "chunk": chunk}
    for op in (*OPS_FLAT, "build"):
        lows, highs = timed[op]["low"], timed[op]["high"]
        low_cpu = sum(r.peer_cpu for r in lows) / sum(r.count for r in lows)
        high_cpu = sum(r.peer_cpu for r in highs) / sum(r.count for r in highs)
        turns = [
            (h.peer_cpu / h.count) / (lw.peer_cpu / lw.count)
            for lw, h in zip(lows, highs, strict=True)
            if lw.peer_cpu
        ]
        out[f"{op}_cpu_ratio"] = round(high_cpu / low_cpu, 4) if low_cpu else 0.0
        out[f"{op}_paired"] = round(statistics.median(turns), 4) if turns else 0.0
        out[f"{op}_cpu_us"] = {"low": round(low_cpu * 1e6, 2), "high": round(high_cpu * 1e6, 2)}
        out[f"{op}_requests"] = {"low": sum(r.count for r in lows), "high": sum(r.count for r in highs)}
    log(
        f"  flatness side by side, L={lo} -> L={hi}: "
        + ", ".join(
            f"{op} x{out[f'{op}_cpu_ratio']:.3f} ({out[f'{op}_cpu_us']['low']:.1f} -> "
            f"{out[f'{op}_cpu_us']['high']:.1f} us)"
            for op in (*OPS_FLAT, "build")
        )
    )
    return out


OPS_FLAT = ("create", "get", "cancel")
"""What :func:`paired_flatness` judges: a create, a get and a cancel with L tasks live."""


# -- workload 7: create, get and cancel over WebSocket ------------------------------------------
def vs_stdio(ws_stat: dict[str, Any], stdio_stat: dict[str, Any]) -> dict[str, Any]:
    """``ratio``: WebSocket rate / stdio rate; ``cpu_ratio``: stdio server CPU per request /
    WebSocket server CPU per request. Below 1: the WebSocket transport costs more."""
    ws_cpu, stdio_cpu = ws_stat["cpu_us_per_request"], stdio_stat["cpu_us_per_request"]
    return {
        "ws": ws_stat,
        "stdio": stdio_stat,
        "ratio": round(ws_stat["rate"] / stdio_stat["rate"], 4) if stdio_stat["rate"] else 0.0,
        "cpu_ratio": round(stdio_cpu / ws_cpu, 4) if ws_cpu else 0.0,
    }


def websocket(
    sizes: Sizes, stdio: dict[str, Any], point: dict[str, Any], log: Callable[[str], None]
) -> dict[str, Any]:
    """Workloads 1, 3 and 4 over WebSocket: N echo creates, then at the main L the gets and
    cancels, each against a fresh server as over stdio, with the same client window.

    ``stdio`` is the create figure and ``point`` the scaling point at the main L, both from
    this run's stdio workloads: every figure is reported as a ratio to them.
    """
    live = point["L"]
    srv = ws_server()
    try:
        created, _ = timed_creates(srv, sizes)
    finally:
        srv.close()
    create = {"n": sizes.n, **vs_stdio(srv.stat(created), stdio["server"])}
    srv = ws_server()
    try:
        runs = ScaleRuns.measure(srv, live, sizes)
    finally:
        srv.close()
    probe = vs_stdio(srv.stat(runs.probe), point["cancel"]["probe"]["server"])
    out: dict[str, Any] = {
        "create": create,
        "get": {"L": live, **vs_stdio(srv.stat(runs.got), point["get"]["server"])},
        "cancel": {
            "L": live,
            **vs_stdio(srv.stat(runs.cancelled), point["cancel"]["server"]),
            "rounds": len(runs.round_sizes),
            "probe": {"window": 1, **probe},
        },
        "create_sleep": {"L": live, **vs_stdio(srv.stat(runs.created), point["create_sleep"])},
        "memory": {"L": live, **runs.memory()},
        "server_gc": srv.gc,
    }
    for name in ("create", "get", "cancel"):
        entry = out[name]
        size = f"N={sizes.n}" if name == "create" else f"L={live}"
        log(
            f"  ws {name}: {size} {entry['ws']['rate']:.0f}/s (stdio {entry['stdio']['rate']:.0f}/s, "
            f"x{entry['ratio']:.3f}; CPU {entry['ws']['cpu_us_per_request']:.0f} vs "
            f"{entry['stdio']['cpu_us_per_request']:.0f} us/req), p50 {entry['ws']['p50_ms']:.2f} ms "
            f"p99 {entry['ws']['p99_ms']:.2f} ms"
        )
    return out


# -- workload 8: TTL churn --------------------------------------------------------------------------
def churn(sizes: Sizes, log: Callable[[str], None]) -> dict[str, Any]:
    """Many short-TTL echo tasks created over time; all must expire and memory come back."""
    w = sizes.window
    lo, hi = sizes.churn_ttl_ms
    span = hi - lo + 1

    def ttl_of(i: int) -> int:
        return lo + (i * 7919) % span  # spread evenly over [lo, hi]

    def ttl_from(base: int, i: int) -> int:
        return ttl_of(base + i)

    srv = server("--default-ttl-ms", str(lo), "--max-ttl-ms", str(hi))
    chunks: list[dict[str, Any]] = []
    sample: list[str] = []
    try:
        warm = task_ids(srv.run(create_echo(sizes.warmup, ttl_of), w), "warm-up create")
        srv.run(by_id("tasks/get", warm), w)
        srv.client.settle(hi / 1000 + 0.5)
        rss_start = settled_rss(srv, sizes.settle)
        peak = rss_start
        t0 = time.monotonic()
        made = 0
        every = max(1, sizes.churn_tasks // 200)
        while made < sizes.churn_tasks:
            count = min(sizes.churn_chunk, sizes.churn_tasks - made)
            run = srv.run(create_echo(count, functools.partial(ttl_from, made)), w)
            ids = task_ids(run, "churn create")
            sample.extend(ids[::every])
            rss = srv.client.rss_kib()
            peak = max(peak, rss)
            chunks.append({**stat(run), "elapsed_s": round(time.monotonic() - t0, 3), "rss_kib": rss})
            made += count
        created_at = time.monotonic()
        left = -1
        while time.monotonic() < created_at + hi / 1000 + sizes.churn_wait:
            left = len(srv.client.call("tasks/list")["tasks"])
            if left == 0:
                break
            srv.client.settle(0.1)
        empty_after = time.monotonic() - created_at
        probe = srv.run(by_id("tasks/get", sample), w)
        expired = sum(1 for e in probe.errors.values() if e.get("code") == INVALID_PARAMS)
        rss_end = settled_rss(srv, sizes.settle)
    finally:
        srv.close()
    first, last = chunks[0]["rate"], chunks[-1]["rate"]
    cpu_first, cpu_last = chunks[0]["cpu_us_per_request"], chunks[-1]["cpu_us_per_request"]
    # Growth is judged from the first chunk that starts once the longest TTL has passed since the
    # first create: from then on every chunk expires about as many tasks as it creates. Before,
    # the table fills and fewer tasks expire, so a create costs less (36 us per create against
    # 49 in the steady state of one run at 17 000 creates/s, where chunk 2 still ended before
    # the shortest TTL). A run too short to get there is judged on its second half.
    starts = [0.0] + [c["elapsed_s"] for c in chunks[:-1]]
    steady = next((i for i, start in enumerate(starts) if start >= hi / 1000), len(chunks) // 2)
    cpu_steady = chunks[steady]["cpu_us_per_request"]
    # The judged growth: the median of the last third of the chunks from there over that of the
    # first third. One chunk's CPU swings by a third on a shared 2-core machine (one run gave 62,
    # 48, 77, 74, 67, 60, 51, 56, 67, 77 us with no trend), so one chunk over another mostly
    # measures that swing; a cost that grows with the run still moves the medians.
    cpus = [c["cpu_us_per_request"] for c in chunks[steady:]]
    third = max(1, len(cpus) // 3)
    cpu_early, cpu_late = statistics.median(cpus[:third]), statistics.median(cpus[-third:])
    out = {
        "tasks": sizes.churn_tasks,
        "ttl_ms": [lo, hi],
        "chunks": chunks,
        "create_rate": round(sizes.churn_tasks / (created_at - t0), 1),
        "rate_first_chunk": first,
        "rate_last_chunk": last,
        "rate_ratio_last_first": round(last / first, 4) if first else 0.0,
        "cpu_us_first_chunk": cpu_first,
        "cpu_us_last_chunk": cpu_last,
        "cpu_ratio_last_first": round(cpu_last / cpu_first, 4) if cpu_first else 0.0,
        "steady_chunk": steady,
        "cpu_us_steady_chunk": cpu_steady,
        "cpu_ratio_last_steady": round(cpu_last / cpu_steady, 4) if cpu_steady else 0.0,
        "thirds": third,
        "cpu_us_early_median": cpu_early,
        "cpu_us_late_median": cpu_late,
        "cpu_ratio_late_early": round(cpu_late / cpu_early, 4) if cpu_early else 0.0,
        "list_empty": left == 0,
        "list_empty_after_s": round(empty_after, 3),
        "get_probe": {"sampled": len(sample), "expired_-32602": expired},
        "rss_start_kib": rss_start,
        "rss_peak_kib": peak,
        "rss_end_kib": rss_end,
        "rss_end_over_start": round(rss_end / rss_start, 4),
        "server_gc": srv.gc,
    }
    log(
        f"  churn: {sizes.churn_tasks} tasks at {out['create_rate']:.0f}/s, chunk rate first {first:.0f}/s "
        f"last {last:.0f}/s, CPU first {cpu_first:.0f} us/req last {cpu_last:.0f} us/req; "
        f"list empty {out['list_empty']} after {empty_after:.1f}s; "
        f"{expired}/{len(sample)} sampled gets -32602; RSS {rss_start} -> peak {peak} -> {rss_end} KiB"
    )
    return out


def _brief(entry: dict[str, Any]) -> str:
    s, f = entry["server"], entry["floor"]
    return (
        f"{s['rate']:.0f}/s (floor {f['rate']:.0f}/s, x{entry['ratio']:.3f}; "
        f"CPU {s['cpu_us_per_request']:.0f} vs {f['cpu_us_per_request']:.1f} us/req), "
        f"p50 {s['p50_ms']:.2f} ms p99 {s['p99_ms']:.2f} ms"
    )


def sizes_dict(sizes: Sizes) -> dict[str, Any]:
    return asdict(sizes)
