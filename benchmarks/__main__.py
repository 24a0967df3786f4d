"""``python -m benchmarks``: measure the runtime against the raw floor and print the table.

Examples::

    python -m benchmarks                      # the default run (about 5 minutes on 2 cores)
    python -m benchmarks --smoke --json out.json
    python -m benchmarks --quick              # no L=100000 point, no churn (about 4 minutes)
    python -m benchmarks --no-churn --scales 250,10000
    python -m benchmarks --no-ws              # stdio only
    python -m benchmarks --no-churn --no-ws --scales 250,10000 --no-http   # stores and hardening
    python -m benchmarks --no-stores --no-http --no-ws --no-hardening --no-churn --scales 250,10000
                                              # peers, workloads 1-6 at two L, memory (~2 min)
    python -m benchmarks --no-peers           # without the TypeScript SDK and bare-Trio peers

HTTP and WebSocket against the TypeScript SDK, the Python SDK 2.x under uvicorn and an
h11-on-Trio floor are a separate run (``make bench`` runs both): ``python -m
benchmarks.http_peers`` (``--help``; ``benchmarks/http_peers.py``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import hardening, memory, report, variants, workloads
from .peers import compare, node
from .workloads import SMOKE, Sizes


def _ints(text: str) -> list[int]:
    return [int(part) for part in text.split(",") if part.strip()]


def _pair(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition(",")
    return int(lo), int(hi or lo)


def parse_args(argv: Sequence[str]) -> tuple[argparse.Namespace, Sizes]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: every workload in seconds")
    parser.add_argument("--json", metavar="PATH", help="also write every figure to PATH as JSON")
    parser.add_argument("--quick", action="store_true", help="skip the L=100000 point and the churn")
    parser.add_argument("--no-churn", action="store_true", help="skip the TTL churn workload")
    parser.add_argument("--no-ws", action="store_true", help="skip the WebSocket workloads")
    parser.add_argument("--no-stores", action="store_true", help="skip the SQLite/Redis store workload")
    parser.add_argument("--no-http", action="store_true", help="skip the Streamable HTTP workload")
    parser.add_argument("--no-hardening", action="store_true", help="skip the hardening workloads")
    parser.add_argument(
        "--no-peers", action="store_true", help="skip the TypeScript SDK and bare-Trio peers (workload 0)"
    )
    parser.add_argument("--no-ts", action="store_true", help="skip only the TypeScript SDK peer")
    parser.add_argument("--peer-repeats", type=int, help="rounds of the peers side by side (medians of them)")
    parser.add_argument(
        "--peer-chunk", type=int, help="requests each peer runs before the next takes its turn (workload 0)"
    )
    parser.add_argument("--no-breakdown", action="store_true", help="skip the in-process memory breakdown")
    parser.add_argument("-n", type=int, help="task-augmented echo calls for create/result")
    parser.add_argument("--scales", type=_ints, help="comma-separated numbers L of live tasks")
    parser.add_argument("--main-scale", type=int, help="the L at which targets are judged")
    parser.add_argument("--get-min", type=int, help="at least this many tasks/get per L")
    parser.add_argument("--cancel-min", type=int, help="at least this many timed tasks/cancel per L")
    parser.add_argument("--probe", type=int, help="one-at-a-time cancels per L (latency)")
    parser.add_argument("--window", type=int, help="requests in flight")
    parser.add_argument("--warmup", type=int, help="untimed tasks before each measurement")
    parser.add_argument("--settle", type=float, help="seconds to wait before reading RSS")
    parser.add_argument("--floor-repeats", type=int, help="floor runs per pattern; the best is kept")
    parser.add_argument("--churn-tasks", type=int, help="short-TTL tasks in the churn workload")
    parser.add_argument("--churn-chunk", type=int, help="churn tasks per timed chunk")
    parser.add_argument("--churn-ttl-ms", type=_pair, metavar="LO,HI", help="churn TTLs, spread over LO..HI")
    args = parser.parse_args(argv)
    sizes = dataclasses.replace(SMOKE) if args.smoke else Sizes()
    for name in (
        "n",
        "scales",
        "main_scale",
        "get_min",
        "cancel_min",
        "probe",
        "window",
        "warmup",
        "settle",
        "floor_repeats",
        "churn_tasks",
        "churn_chunk",
        "churn_ttl_ms",
        "peer_repeats",
        "peer_chunk",
    ):
        value = getattr(args, name)
        if value is not None:
            setattr(sizes, name, value)
    if args.quick:
        sizes.scales = [live for live in sizes.scales if live < 100_000] or sizes.scales
        sizes.churn_tasks = 0
    if args.no_churn:
        sizes.churn_tasks = 0
    for part in ("ws", "stores", "http", "hardening", "peers", "ts", "breakdown"):  # --no-PART
        if getattr(args, f"no_{part}"):
            setattr(sizes, part, False)
    sizes.scales = sorted(set(sizes.scales))
    return args, sizes


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import trio

    return {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "trio": trio.__version__,
        "platform": platform.platform(),
        "loadavg_start": list(os.getloadavg()),
    }


def run(sizes: Sizes, argv: Sequence[str]) -> dict[str, Any]:
    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    started = time.monotonic()
    results: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "benchmarks", *argv]),
        "machine": machine(),
        "config": workloads.sizes_dict(sizes),
    }
    w: dict[str, Any] = {}
    if sizes.peers:
        peers = ", ".join(compare.LABELS[name] for name in compare.peer_names(sizes.ts))
        log(f"peers at L={sizes.scale_for_targets()}: {peers}; {sizes.peer_repeats} rounds, side by side")
        w["peers"] = compare.compare(sizes, log)
    raw = workloads.floor()
    try:
        log(f"create/result: N={sizes.n}, window {sizes.window}")
        w.update(workloads.create_and_result(sizes, raw, log))
        log(f"get/cancel/memory at L = {', '.join(map(str, sizes.scales))}")
        points = [workloads.at_scale(live, sizes, raw, log) for live in sizes.scales]
    finally:
        raw.close()
    main_l, base_l = sizes.scale_for_targets(), min(sizes.scales)
    by_l = {p["L"]: p for p in points}
    top, low = by_l[main_l], by_l[base_l]
    w["get"] = {"L": main_l, **top["get"]}
    w["cancel"] = {"L": main_l, **top["cancel"]}
    w["memory"] = {
        "L": main_l,
        **top["memory"],
        "bytes_per_task_by_L": {str(p["L"]): p["memory"]["bytes_per_task"] for p in points},
    }
    w["scaling"] = {
        "main_L": main_l,
        "base_L": base_l,
        "get_rate_ratio": round(top["get"]["server"]["rate"] / low["get"]["server"]["rate"], 4),
        "cancel_rate_ratio": round(top["cancel"]["server"]["rate"] / low["cancel"]["server"]["rate"], 4),
        "get_cpu_ratio": _cpu_growth(top["get"], low["get"]),
        "cancel_cpu_ratio": _cpu_growth(top["cancel"], low["cancel"]),
        "points": points,
        "flat_sequential": _flatness(points),
    }
    if base_l != max(sizes.scales):
        log(f"flatness: L={base_l} and L={max(sizes.scales)} side by side")
        w["scaling"]["flat"] = workloads.paired_flatness(sizes, base_l, max(sizes.scales), log)
    if sizes.ws:
        log(f"WebSocket: create N={sizes.n}, get/cancel at L={main_l}")
        w["ws"] = workloads.websocket(sizes, w["create"], top, log)
    if sizes.churn_tasks > 0:
        log(f"churn: {sizes.churn_tasks} tasks, TTL {sizes.churn_ttl_ms[0]}-{sizes.churn_ttl_ms[1]} ms")
        w["churn"] = workloads.churn(sizes, log)
    if sizes.stores:
        log(f"stores: memory, sqlite, redis; N={sizes.store_n}, L={sizes.store_live}")
        w["stores"] = variants.stores(sizes, log)
    if sizes.http:
        log(f"HTTP: N={sizes.http_n}, L={sizes.http_live}, window {sizes.http_window}")
        w["http"] = variants.http(sizes, log)
    if sizes.hardening:
        log("hardening: a client that never reads, a waiter flood, disconnect churn")
        w["hardening"] = hardening.hardening(sizes, log)
    if sizes.breakdown:
        traced = min(main_l, sizes.breakdown_trace_live)
        log(f"memory breakdown in-process at L={main_l} (traced at L={traced})")
        w["memory_breakdown"] = memory.breakdown(main_l, trace_live=sizes.breakdown_trace_live)
    results["workloads"] = w
    results["targets"] = report.targets(results)
    results["machine"]["loadavg_end"] = list(os.getloadavg())
    results["seconds"] = round(time.monotonic() - started, 1)
    return results


def _flatness(points: list[dict[str, Any]]) -> dict[str, Any]:
    """Server CPU per request at the largest L over that at the smallest (1.0 = flat), for get,
    cancel and the creates of the sleep tasks."""
    low, top = points[0], points[-1]
    return {
        "from_L": low["L"],
        "to_L": top["L"],
        "get_cpu_ratio": _cpu_growth(top["get"], low["get"]),
        "cancel_cpu_ratio": _cpu_growth(top["cancel"], low["cancel"]),
        "create_cpu_ratio": _cpu_growth({"server": top["create_sleep"]}, {"server": low["create_sleep"]}),
    }


def _cpu_growth(top: dict[str, Any], low: dict[str, Any]) -> float:
    """Server CPU per request at the main L over that at the base L (1.0 = no growth)."""
    base = low["server"]["cpu_us_per_request"]
    return round(top["server"]["cpu_us_per_request"] / base, 4) if base else 0.0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args, sizes = parse_args(argv)
    if sizes.peers and sizes.ts:
        try:
            node.install(say=lambda line: print(line, file=sys.stderr, flush=True))
        except node.SetupError as exc:
            print(f"benchmarks: the TypeScript SDK peer: {exc}\n(--no-ts skips it)", file=sys.stderr)
            return 2
    results = run(sizes, argv)
    m = results["machine"]
    print(f"trio_mcp benchmarks: {results['command']}")
    print(
        f"machine: {m['nproc']} cpus, {m['cpu']}, {m['implementation']} {m['python']}, trio {m['trio']}; "
        f"load average {m['loadavg_start'][0]:.2f} at start, {m['loadavg_end'][0]:.2f} at end; "
        f"{results['seconds']:.0f} s"
    )
    print(f"window {sizes.window} requests in flight; floor = best of {sizes.floor_repeats} runs\n")
    print(report.table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
