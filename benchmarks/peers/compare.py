"""Workload 0, the headline: trio-mcp beside the TypeScript SDK, a bare-Trio floor and the raw floor.

Four peers serve the same two tools over stdio and get the same request patterns from the same
load client (``benchmarks/client.py``, window W):

* ``trio-mcp``: ``benchmarks/server.py``, the server under test;
* ``ts-sdk``: ``benchmarks/peers/ts_tasks_server.mjs``, the official TypeScript SDK (pinned in
  ``benchmarks/peers/node.py``) with its in-memory task store, on Node 22;
* ``bare-trio``: ``benchmarks/trio_floor.py``, the same semantics in bare Trio (spawn, dict,
  cancel scope, event): what the semantics cost in Python and Trio without a runtime;
* ``raw-floor``: ``benchmarks/floor.py``, fixed answers and no state: the load client's ceiling.

One *round* runs every peer at once, side by side, on two sets of fresh processes, as in
workloads 1 to 5: (a) N task-augmented ``echo`` creates, then ``tasks/result`` for each
(``timed_creates_side_by_side``); (b) L idle ``sleep`` tasks: RSS before and after,
``tasks/get`` (at least ``get_min``), ``tasks/cancel`` in rounds (``ScaleRuns.side_by_side``).
Create and result bytes are the same for every peer; get, cancel and result carry each peer's
own task ids (the TypeScript SDK's are 32 characters, trio-mcp's 24).

Side by side: each timed run is cut into chunks of ``peer_chunk`` requests (1 000), and the
peers take turns chunk by chunk, the order rotating (``workloads.interleaved``): every peer
meets the machine in the same seconds, so a drift in its speed (other tenants of a shared host,
frequency) weighs on all of them alike. Measured one peer after another, minutes apart, the
same code's CPU per create varied by 30% from run to run on a 2-core VM, and so did its ratios
to the other peers; taken in turns, a create's ratio to the bare-Trio floor stayed within
1.15 to 1.26 over five rounds. Only one peer works at a time: the others wait, idle, for their
next chunk. There are ``peer_repeats`` rounds (5), who goes first rotating per round, and each
figure is the median over the rounds. The headline figure is the server's CPU per request: the
whole process's CPU time over its timed chunks (the sum of ``/proc/PID/task/*/schedstat``, so
that Node's helper threads count), divided by the requests. The main thread's share is kept in
the JSON as ``main_thread_cpu_us_per_request``.

After each round, ``trio_cancel_cost`` measures Trio alone in a fresh process: the CPU to
cancel a task sleeping in its own cancel scope and unwind it, at L tasks, with no I/O, no JSON
and no record (``benchmarks/trio_floor.py --cancel-cost L``). It is the part of a
``tasks/cancel`` no Trio server can avoid, printed beside the TypeScript SDK's whole cancel.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..client import Request, RunResult
from ..variants import cpu_between, process_cpu
from ..workloads import (
    BENCH_DIR,
    FLOOR_SCRIPT,
    SERVER_SCRIPT,
    ScaleRuns,
    Sizes,
    Target,
    by_id,
    interleaved,
    timed_creates_side_by_side,
)
from . import node

TRIO_FLOOR_SCRIPT = BENCH_DIR / "trio_floor.py"
LABELS = {"trio-mcp": "trio-mcp", "ts-sdk": "TS SDK", "bare-trio": "bare Trio", "raw-floor": "raw floor"}
OPS = ("create", "result", "get", "cancel")


def peer_names(ts: bool) -> list[str]:
    return [name for name in LABELS if ts or name != "ts-sdk"]


def peer_argv(name: str) -> list[str]:
    if name == "trio-mcp":
        return [sys.executable, str(SERVER_SCRIPT)]
    if name == "ts-sdk":
        return node.command()
    if name == "bare-trio":
        return [sys.executable, str(TRIO_FLOOR_SCRIPT)]
    if name == "raw-floor":
        return [sys.executable, str(FLOOR_SCRIPT)]
    raise ValueError(f"unknown peer {name!r}")


class PeerTarget(Target):
    """A peer under load; its CPU per run is the whole process's (every thread)."""

    def __init__(self, name: str, argv: Sequence[str] | None = None) -> None:
        """``argv``: the command to start instead of the peer's own (the peer's command
        wrapped, e.g. under valgrind: ``benchmarks/instructions.py``)."""
        super().__init__(list(argv) if argv is not None else peer_argv(name), record_gc=name == "trio-mcp")
        self.name = name
        self.main_cpu: dict[tuple[float, float], float] = {}

    def run(self, requests: Sequence[Request], window: int) -> RunResult:
        pid = self.client.pid
        before = process_cpu(pid)
        run = self.client.run(requests, window)
        self.main_cpu[run.windows[0]] = run.peer_cpu
        run.peer_cpu = cpu_between(before, process_cpu(pid))
        return run

    def stat(self, run: RunResult) -> dict[str, Any]:
        data = super().stat(run)
        main = sum(self.main_cpu.get(window, 0.0) for window in run.windows)
        data["main_thread_cpu_us_per_request"] = round(main / run.count * 1e6, 2) if run.count else 0.0
        return data


def one_round(names: Sequence[str], sizes: Sizes) -> dict[str, dict[str, Any]]:
    """One round: every peer at once, side by side (``sizes.peer_chunk``: see
    :func:`~benchmarks.workloads.interleaved`). Create and result (N) on fresh processes, then
    get, cancel and memory at the main L on fresh ones."""
    w, chunk = sizes.window, sizes.peer_chunk
    targets = _start(names)
    try:
        created, ids = timed_creates_side_by_side(targets, sizes, chunk)
        for target in targets.values():
            target.client.ping()
            target.client.settle(min(sizes.settle, 0.5))  # every echo has finished
        results = interleaved(targets, {name: by_id("tasks/result", ids[name]) for name in names}, w, chunk)
        for name, run in results.items():
            if run.errors:
                raise RuntimeError(f"{name}: tasks/result failed: {next(iter(run.errors.values()))}")
            bad = [r for r in run.results if r["content"][0]["text"] != "hello"]
            if bad:
                raise RuntimeError(f"{name}: tasks/result returned a wrong result: {bad[0]}")
    finally:
        _close(targets)
    out: dict[str, dict[str, Any]] = {
        name: {"create": target.stat(created[name]), "result": target.stat(results[name])}
        for name, target in targets.items()
    }
    targets = _start(names)
    try:
        scale = ScaleRuns.side_by_side(targets, sizes.scale_for_targets(), sizes, chunk)
    finally:
        _close(targets)
    for name, target in targets.items():
        runs = scale[name]
        out[name]["get"] = target.stat(runs.got)
        out[name]["cancel"] = target.stat(runs.cancelled)
        out[name]["cancel_one_at_a_time"] = target.stat(runs.probe)
        out[name]["create_sleep"] = target.stat(runs.created)
        out[name]["memory"] = runs.memory()
    return out


def _start(names: Sequence[str]) -> dict[str, PeerTarget]:
    targets: dict[str, PeerTarget] = {}
    try:
        for name in names:
            targets[name] = PeerTarget(name)
    except BaseException:
        _close(targets)
        raise
    return targets


def _close(targets: dict[str, PeerTarget]) -> None:
    for target in targets.values():
        target.close()


def _median(values: Sequence[float]) -> float:
    return round(statistics.median(values), 2) if values else 0.0


def _ratio(a: float, b: float) -> float:
    return round(a / b, 4) if b else 0.0


def _paired(ours: Sequence[dict[str, Any]], theirs: Sequence[dict[str, Any]], op: str) -> float:
    """The median over rounds of ours ÷ theirs (CPU per request), 0.0 if none can be taken."""
    pairs = [
        a[op]["cpu_us_per_request"] / b[op]["cpu_us_per_request"]
        for a, b in zip(ours, theirs, strict=True)
        if b[op]["cpu_us_per_request"]
    ]
    return round(statistics.median(pairs), 4) if pairs else 0.0


def compare(sizes: Sizes, log: Callable[[str], None]) -> dict[str, Any]:
    """``sizes.peer_repeats`` rounds of every peer side by side; medians and ratios to trio-mcp."""
    names = peer_names(sizes.ts)
    live = sizes.scale_for_targets()
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    trio_cancel: list[float] = []
    for repeat in range(sizes.peer_repeats):
        shift = repeat % len(names)
        order = names[shift:] + names[:shift]  # who goes first in each chunk's turn, rotated too
        one = one_round(order, sizes)
        for name in order:
            runs[name].append(one[name])
            cpu = ", ".join(f"{op} {one[name][op]['cpu_us_per_request']:.1f}" for op in OPS)
            log(
                f"  {repeat + 1}/{sizes.peer_repeats} {LABELS[name]}: CPU us/request {cpu}; "
                f"RSS/task {one[name]['memory']['bytes_per_task'] / 1024:.2f} KiB"
            )
        trio_cancel.append(trio_cancel_cost(live))
        log(f"  {repeat + 1}/{sizes.peer_repeats} Trio alone: {trio_cancel[-1]:.1f} us per cancel and unwind")
    median: dict[str, dict[str, Any]] = {}
    for name, its in runs.items():
        median[name] = {
            "cpu_us_per_request": {op: _median([r[op]["cpu_us_per_request"] for r in its]) for op in OPS},
            "cpu_us_per_request_runs": {op: [r[op]["cpu_us_per_request"] for r in its] for op in OPS},
            "rate": {op: _median([r[op]["rate"] for r in its]) for op in OPS},
            "p99_ms": {op: _median([r[op]["p99_ms"] for r in its]) for op in OPS},
            "rss_bytes_per_task": _median([r["memory"]["bytes_per_task"] for r in its]),
            "rss_bytes_per_task_runs": [r["memory"]["bytes_per_task"] for r in its],
        }
    ours = median["trio-mcp"]
    ratios: dict[str, dict[str, float]] = {}
    for name in names[1:]:
        theirs = median[name]
        ratios[name] = {
            op: _ratio(ours["cpu_us_per_request"][op], theirs["cpu_us_per_request"][op]) for op in OPS
        }
        ratios[name]["rss_bytes_per_task"] = _ratio(ours["rss_bytes_per_task"], theirs["rss_bytes_per_task"])
    # Each round's trio-mcp run against the same round's run of the peer (the machine's speed
    # drifts between rounds more than within one): the median of those ratios, for reading
    # beside the ratios of the medians (which the targets are judged on).
    paired = {name: {op: _paired(runs["trio-mcp"], runs[name], op) for op in OPS} for name in names[1:]}
    versions: dict[str, str] = {}
    if sizes.ts:
        versions = {"node": node.node_version(), **node.PACKAGES}
    return {
        "L": live,
        "n": sizes.n,
        "window": sizes.window,
        "chunk": sizes.peer_chunk,
        "repeats": sizes.peer_repeats,
        "peers": names,
        "versions": versions,
        "median": median,
        "ratios": ratios,
        "paired_ratios": paired,
        "runs": runs,
        "trio_cancel_us": {"median": _median(trio_cancel), "runs": trio_cancel},
    }


def trio_cancel_cost(live: int) -> float:
    """:func:`benchmarks.trio_floor.trio_cancel_cost` at ``live`` tasks, in a fresh process (as
    the peers are): µs of CPU per cancel and unwind of a sleeping task in Trio alone."""
    out = subprocess.run(
        [sys.executable, str(TRIO_FLOOR_SCRIPT), "--cancel-cost", str(live)],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return float(json.loads(out.stdout)["us_per_cancel"])
