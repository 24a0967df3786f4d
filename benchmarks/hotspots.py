"""Profile the server under one workload with py-spy and print its hot spots.

``python -m benchmarks.hotspots --workload get --live 10000``

It starts the benchmark server, makes ``--live`` idle sleep tasks, attaches ``py-spy record``
(a dev tool, not a dependency: ``pip install py-spy``) to the server process, runs the workload
(``get``: ``--requests`` tasks/get cycling over the tasks; ``cancel``: tasks/cancel for every
task; ``create``: ``--requests`` task-augmented echo calls), detaches, and prints the functions
with the most samples, by self time and inclusive time. ``--native`` also samples C frames
(the garbage collector shows up as ``gc_collect_main``/``collect``). ``--ws`` serves the same
server over WebSocket instead of stdio. ``--raw PATH`` keeps the py-spy output (collapsed
stacks, usable by flame graph tools).
"""

from __future__ import annotations

import argparse
import collections
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from .workloads import by_id, create_echo, create_sleep, server, task_ids, ws_server


def summarize(raw: Path, top: int) -> str:
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = stack.split(";")
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    if not total:
        return "no samples"
    lines = [f"{total} samples", "", "self time:"]
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in own.most_common(top)]
    lines += ["", "inclusive time:"]
    lines += [f"  {100 * n / total:5.1f}%  {frame}" for frame, n in inclusive.most_common(top)]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.hotspots", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--workload", choices=("get", "cancel", "create"), default="get")
    parser.add_argument("--live", type=int, default=10_000, help="idle live sleep tasks first")
    parser.add_argument("--requests", type=int, default=50_000, help="requests for get/create")
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--rate", type=int, default=500, help="py-spy samples per second")
    parser.add_argument("--native", action="store_true", help="sample C frames too")
    parser.add_argument("--ws", action="store_true", help="serve over WebSocket instead of stdio")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--raw", type=Path, help="keep py-spy's collapsed stacks here")
    args = parser.parse_args(argv)
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy is not installed: pip install py-spy", file=sys.stderr)
        return 2
    raw = args.raw or Path(tempfile.mkstemp(prefix="bench-spy-", suffix=".txt")[1])
    srv = ws_server() if args.ws else server()
    try:
        ids = task_ids(srv.run(create_sleep(args.live, 3600.0), args.window), "create") if args.live else []
        if args.workload == "get":
            if not ids:
                parser.error("--workload get needs --live > 0")
            requests = by_id("tasks/get", [ids[i % len(ids)] for i in range(args.requests)])
        elif args.workload == "cancel":
            requests = by_id("tasks/cancel", ids)
        else:
            requests = create_echo(args.requests)
        srv.client.ping()
        command = [spy, "record", "--pid", str(srv.client.pid), "--rate", str(args.rate)]
        command += ["--format", "raw", "--output", str(raw), *(["--native"] if args.native else [])]
        profiler = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(1.0)  # let py-spy attach
        run = srv.run(requests, args.window)
        profiler.send_signal(signal.SIGINT)
        profiler.wait(30)
    finally:
        srv.close()
    over = "WebSocket" if args.ws else "stdio"
    print(
        f"{args.workload} over {over}: {run.count} requests at {run.rate:,.0f}/s with {args.live} live tasks"
    )
    print(summarize(raw, args.top))
    if args.raw is None:
        raw.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
