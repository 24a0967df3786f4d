"""Scale-out on Redis: CPU and Redis commands per task round trip, 1 process against 3.

    python -m benchmarks.scale [--tasks 300] [--processes 1,3] [--concurrency 1,16]

For each process count, ``trio-mcp serve benchmarks/scale_server.py:server --http`` processes
share one ``valkey-server`` (a fresh key prefix each); a client sends 2026-07-28 ``tools/call``
requests of a ``task_support="required"`` tool round robin over the processes (each answered
with its task), then polls each task with ``tasks/get`` through the *next* process until it
is completed — a round trip that crosses processes. Each process count is measured twice:
with one round trip at a time (**sequential**: each request finds its process idle since its
previous one, so it also measures a cold process's wake-up: caches refilled after the client,
Redis and the other processes ran) and with ``--concurrency`` round trips in flight
(**loaded**: each process busy, as under real traffic). Measured over the timed tasks (after a
warm-up): the CPU of every server process and of Redis, summed, per task; the commands the
processes sent Redis per task (counted by ``MONITOR`` in a separate, untimed pass: a script is
one command), and all the commands Redis ran, those inside scripts included (``INFO stats``
``total_commands_processed``). The issue's targets: at most 15 commands per round trip; CPU per
task at 3 processes at most 1.2x that at 1 process.

Also printed: the times per task the server processes went to sleep waiting (their voluntary
context switches, ``/proc/PID/task/*/status``; Redis's apart). Most of what 3 processes cost
over 1 is there: a process that sleeps between requests wakes with its caches cold, and on a
small shared machine its next stretch of work then costs up to about twice the CPU; one process
serving every request is usually still busy with the previous round trip when the next arrives.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.client import thread_sum
from benchmarks.http_load import post, process_cpu, rpc
from benchmarks.valkey import Valkey

SERVER = str(Path(__file__).with_name("scale_server.py")) + ":server"
MODERN = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}},
    "io.modelcontextprotocol/clientInfo": {"name": "scale", "version": "1"},
}


def headers(method: str, name: str | None = None) -> dict[str, str]:
    out = {"Mcp-Protocol-Version": MODERN, "Mcp-Method": method}
    if name is not None:
        out["Mcp-Name"] = name
    return out


def commands(port: int) -> int:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")
        time.sleep(0.05)
        text = sock.recv(1 << 16).decode()
    return int(re.search(r"total_commands_processed:(\d+)", text).group(1))  # type: ignore[union-attr]


def sent_commands(port: int, ports: list[int], tasks: int) -> float:
    """Commands the server processes send Redis per round trip (``MONITOR``; not inside scripts)."""
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(b"*1\r\n$7\r\nMONITOR\r\n")
        sock.settimeout(2.0)
        assert sock.recv(64).startswith(b"+OK")
        sock.setblocking(False)
        seen = bytearray()
        round_trips(ports, tasks, 5000)
        time.sleep(0.2)
        try:
            while data := sock.recv(1 << 16):
                seen += data
        except BlockingIOError:
            pass
    lines = [line for line in bytes(seen).split(b"\r\n") if line.startswith(b"+")]
    return sum(b" lua]" not in line for line in lines) / tasks


def sleeps(pid: int) -> int:
    """How many times every live thread of ``pid`` went to sleep waiting so far (voluntary
    context switches)."""
    return int(thread_sum(pid, "status", _voluntary_switches))


def _voluntary_switches(status: bytes) -> int:
    for line in status.splitlines():
        if line.startswith(b"voluntary_ctxt_switches:"):
            return int(line.split()[1])
    return 0


def start(env: dict[str, str]) -> tuple[subprocess.Popen[bytes], int]:
    process = subprocess.Popen(
        [sys.executable, "-m", "trio_mcp.cli", "serve", SERVER, "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stderr is not None
    seen = b""
    deadline = time.monotonic() + 30
    while (found := re.search(rb"http://127\.0\.0\.1:(\d+)/mcp", seen)) is None:
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"a server did not start: {seen.decode(errors='replace')}")
        seen += os.read(process.stderr.fileno(), 4096)
    return process, int(found.group(1))


def round_trips(ports: list[int], count: int, first_id: int, concurrency: int = 1) -> None:
    """``count`` round trips, ``concurrency`` at a time (threads, each its share in turn)."""
    if concurrency > 1:
        from concurrent.futures import ThreadPoolExecutor

        shares = [list(range(start, count, concurrency)) for start in range(concurrency)]
        with ThreadPoolExecutor(concurrency) as pool:
            for done in [pool.submit(_round_trips, ports, share, first_id) for share in shares]:
                done.result()
        return
    _round_trips(ports, list(range(count)), first_id)


def _round_trips(ports: list[int], indices: list[int], first_id: int) -> None:
    ids: list[str] = []
    for index in indices:
        port = ports[index % len(ports)]
        params = {"name": "work", "arguments": {"ms": 1}, "_meta": META}
        answer = post(
            port, rpc(first_id + index, "tools/call", params), headers("tools/call", "work")
        ).message()
        assert answer is not None and "result" in answer, answer
        ids.append(answer["result"]["taskId"])
    for index, task_id in zip(indices, ids, strict=True):
        port = ports[(index + 1) % len(ports)]
        while True:
            params = {"taskId": task_id, "_meta": META}
            answer = post(port, rpc(index, "tasks/get", params), headers("tasks/get", task_id)).message()
            assert answer is not None and "result" in answer, answer
            if answer["result"]["status"] == "completed":
                break
            time.sleep(0.01)


def measure(valkey: Valkey, processes: int, tasks: int, concurrency: int = 1) -> dict[str, Any]:
    env = {**os.environ, "SCALE_REDIS_URL": valkey.url, "SCALE_PREFIX": f"scale-{processes}-{time.time()}:"}
    started = [start(env) for _ in range(processes)]
    try:
        ports = [port for _, port in started]
        round_trips(ports, 40 * processes, 0, concurrency)  # warm-up: every process past its first calls
        time.sleep(0.5)
        servers = [process.pid for process, _ in started]
        pids = [*servers, valkey.pid]
        cpu, before = sum(process_cpu(pid) for pid in pids), commands(valkey.port)
        slept, redis_slept = sum(sleeps(pid) for pid in servers), sleeps(valkey.pid)
        began = time.monotonic()
        round_trips(ports, tasks, 1000, concurrency)
        elapsed = time.monotonic() - began
        cpu, done = sum(process_cpu(pid) for pid in pids) - cpu, commands(valkey.port)
        slept, redis_slept = sum(sleeps(pid) for pid in servers) - slept, sleeps(valkey.pid) - redis_slept
        return {
            "processes": processes,
            "concurrency": concurrency,
            "tasks": tasks,
            "cpu_ms_per_task": 1000 * cpu / tasks,
            "commands_run_per_task": (done - before - 1) / tasks,  # less the INFO itself
            "sleeps_per_task": slept / tasks,
            "redis_sleeps_per_task": redis_slept / tasks,
            "commands_sent_per_task": sent_commands(valkey.port, ports, 50),
            "seconds": elapsed,
        }
    finally:
        for process, _ in started:
            process.terminate()
        for process, _ in started:
            process.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Scale-out on Redis: CPU and commands per task, 1 vs 3 processes"
    )
    parser.add_argument("--tasks", type=int, default=300)
    parser.add_argument("--processes", default="1,3")
    parser.add_argument("--concurrency", default="1,16", help="round trips in flight, each measured")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    counts = [int(n) for n in args.processes.split(",")]
    levels = [int(n) for n in args.concurrency.split(",")]
    with Valkey() as valkey:
        results = [measure(valkey, n, args.tasks, c) for c in levels for n in counts]
    print(
        f"{'in flight':>9} {'processes':>9} {'CPU ms/task':>12} {'x 1 process':>12} {'sent/task':>10}"
        f" {'run/task':>9} {'sleeps/task':>12} {'Redis sleeps':>13}"
    )
    for row in results:
        base = next(
            r["cpu_ms_per_task"]
            for r in results
            if r["concurrency"] == row["concurrency"] and r["processes"] == counts[0]
        )
        print(
            f"{row['concurrency']:>9} {row['processes']:>9} {row['cpu_ms_per_task']:>12.2f}"
            f" {row['cpu_ms_per_task'] / base:>12.2f}"
            f" {row['commands_sent_per_task']:>10.1f} {row['commands_run_per_task']:>9.1f}"
            f" {row['sleeps_per_task']:>12.2f} {row['redis_sleeps_per_task']:>13.2f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
