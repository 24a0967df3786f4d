"""Where a live task's memory goes: ``python -m benchmarks.memory --live 10000``.

For each subject, in one process of its own (a child of this one, so that its RSS starts
clean), the server runs in memory beside a raw JSON-RPC driver (no ``trio_mcp`` client, which
would keep its own state per task), L idle ``sleep 3600`` tasks are created, 64 requests in
flight, and the growth is attributed per live task three ways:

* **RSS**: VmRSS after minus before, over L (what ``python -m benchmarks`` measures in the
  server process; here the driver lives in the same process but keeps nothing per task).
* **objects** (``gc.get_objects()`` and their untracked referents, such as strings and
  numbers): count and shallow size (``sys.getsizeof``) per task, by type. Coroutines, functions
  and bound methods are split by their code's name; a suspended coroutine's size includes its
  frame.
* **allocations** (``tracemalloc``, 8 frames, in a second round with a fresh server so that
  tracing costs nothing in the first, at ``min(L, --trace-live)`` tasks, 2 000 by default, as
  tracing slows task creation some tenfold): the bytes per task still allocated, by the line
  that allocated them, by the innermost line of the subject's own code that led there
  (trio-mcp's package or ``benchmarks/trio_floor.py``) and by file.

Subjects: ``trio-mcp`` (``benchmarks/server.py``'s server: the same tools, limits and TTLs,
served with ``ServerRuntime.serve`` over an in-memory transport) and ``bare-trio``
(``benchmarks/trio_floor.py``'s ``TrioFloor``, the same semantics in bare Trio).

Options: ``--subject trio-mcp`` (one subject, in this process), ``--top N`` (rows per table),
``--trace-live N``, ``--json PATH``. ``breakdown()`` returns the figures as a dict and
``lines()`` prints them (``python -m benchmarks`` does both at its main L).
"""

from __future__ import annotations

import argparse
import gc
import json
import re
import subprocess
import sys
import tracemalloc
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

import trio
import trio.testing

from trio_mcp.transports.memory import memory_transport_pair

from .server import build_server
from .server import parse_args as server_options
from .trio_floor import TrioFloor

ROOT = Path(__file__).resolve().parent.parent
SUBJECTS = ("trio-mcp", "bare-trio")
WINDOW = 64
WARMUP = 100
SLEEP_SECONDS = 3600.0
TRACE_DEPTH = 8
TRACE_LIVE = 2_000
"""At most this many tasks in the traced round: tracing costs about 1-3 ms per task created."""
OWN_CODE = {
    "trio-mcp": ("/trio_mcp/", "/benchmarks/server.py"),
    "bare-trio": ("/benchmarks/trio_floor.py",),
}
"""Per subject: the frames that count as its own code (path substrings): the runtime and the
bench server's tools, or the floor (whose tools are its own)."""

_INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "trio-mcp-bench-memory", "version": "0.1.0"},
        },
    }
).encode()
_INITIALIZED = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
_ANSWER_PREFIX = b'{"jsonrpc":"2.0","id":'


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _request(request_id: int, method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()


def task_ids(answers: Sequence[bytes]) -> list[dict[str, Any]]:
    """``{"taskId": ...}`` params for each CreateTaskResult answer."""
    return [{"taskId": json.loads(answer)["result"]["task"]["taskId"]} for answer in answers]


SLEEP_CALL = {"name": "sleep", "arguments": {"seconds": SLEEP_SECONDS}, "task": {}}


# -- the subjects, each behind one interface: send a request, receive its answer ------------------
class Driver:
    """A raw JSON-RPC peer of the subject: ``send`` one encoded request, ``receive`` the next
    encoded message. Answers are counted, notifications skipped; nothing is kept per task."""

    def __init__(
        self, send: Callable[[bytes], Awaitable[None]], receive: Callable[[], Awaitable[bytes]]
    ) -> None:
        self.send = send
        self.receive = receive
        self.next_id = 1

    async def answers(self, count: int) -> list[bytes]:
        out: list[bytes] = []
        while len(out) < count:
            message = await self.receive()
            if message.startswith(_ANSWER_PREFIX):
                out.append(message)
        return out

    async def run(self, method: str, params: Sequence[dict[str, Any]], keep: bool = False) -> list[bytes]:
        """One request per entry of ``params``, at most WINDOW in flight; the answers if
        ``keep`` (else they are dropped as they come)."""
        kept: list[bytes] = []
        for start in range(0, len(params), WINDOW):
            batch = params[start : start + WINDOW]
            for entry in batch:
                await self.send(_request(self.next_id, method, entry))
                self.next_id += 1
            answers = await self.answers(len(batch))
            if keep:
                kept += answers
        return kept

    async def handshake(self) -> None:
        await self.send(_INITIALIZE)
        await self.answers(1)
        await self.send(_INITIALIZED)

    async def create_sleeps(self, count: int, keep: bool = False) -> list[bytes]:
        return await self.run("tools/call", [SLEEP_CALL] * count, keep)

    async def warm_up(self) -> None:
        """WARMUP sleep tasks made, got and cancelled: code paths and free lists are warm."""
        by_id = task_ids(await self.create_sleeps(WARMUP, keep=True))
        await self.run("tasks/get", by_id)
        await self.run("tasks/cancel", by_id)


Measure = Callable[[Driver], Awaitable[None]]


async def _serve_trio_mcp(measure: Measure) -> None:
    server = build_server(server_options([]).limits)  # the bench server's tools, limits and TTLs
    client_side, server_side = memory_transport_pair()
    async with server.open() as runtime, trio.open_nursery() as nursery:
        nursery.start_soon(runtime.serve, server_side)
        driver = Driver(client_side.send, client_side.receive_bytes)
        await driver.handshake()
        await measure(driver)
        nursery.cancel_scope.cancel()


async def _serve_bare_trio(measure: Measure) -> None:
    send, receive = trio.open_memory_channel[bytes](float("inf"))
    loads = json.loads

    async with trio.open_nursery() as nursery:
        floor = TrioFloor(nursery, lambda line: send.send_nowait(line.rstrip(b"\n")))
        nursery.start_soon(floor.sweep)

        async def deliver(message: bytes) -> None:
            floor.handle(loads(message))

        driver = Driver(deliver, receive.receive)
        await driver.handshake()
        await measure(driver)
        nursery.cancel_scope.cancel()


SERVE: dict[str, Callable[[Measure], Awaitable[None]]] = {
    "trio-mcp": _serve_trio_mcp,
    "bare-trio": _serve_bare_trio,
}


# -- what is counted ------------------------------------------------------------------------------
def _type_name(obj: object) -> str:
    kind = type(obj)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    if kind.__name__ == "coroutine":
        return f"coroutine {obj.cr_code.co_qualname}"  # type: ignore[attr-defined]
    if kind.__name__ == "function":
        return f"function {obj.__qualname__}"  # type: ignore[attr-defined]
    if kind.__name__ == "method":
        return f"method {getattr(obj.__func__, '__qualname__', '?')}"  # type: ignore[attr-defined]
    return name


def census() -> dict[str, list[int]]:
    """Count and shallow bytes of every object the collector tracks (frozen ones aside), and of
    the untracked objects (strings, numbers...) they refer to, by type name."""
    gc.collect()
    objects = gc.get_objects()
    seen: set[int] = set()
    out: dict[str, list[int]] = {}
    getsizeof, is_tracked, referents = sys.getsizeof, gc.is_tracked, gc.get_referents

    def add(obj: object) -> None:
        seen.add(id(obj))
        entry = out.setdefault(_type_name(obj), [0, 0])
        entry[0] += 1
        entry[1] += getsizeof(obj)

    for obj in objects:
        if id(obj) not in seen:
            add(obj)
    for obj in objects:
        for ref in referents(obj):
            if not is_tracked(ref) and id(ref) not in seen:
                add(ref)
    del objects
    return out


def census_diff(before: dict[str, list[int]], after: dict[str, list[int]], live: int) -> list[dict[str, Any]]:
    """Per type: objects and bytes per live task (after minus before, over ``live``), largest first."""
    rows: list[dict[str, Any]] = []
    for name in set(before) | set(after):
        count = after.get(name, [0, 0])[0] - before.get(name, [0, 0])[0]
        size = after.get(name, [0, 0])[1] - before.get(name, [0, 0])[1]
        if count or size:
            rows.append(
                {"type": name, "per_task": round(count / live, 3), "bytes_per_task": round(size / live, 1)}
            )
    rows.sort(key=lambda row: -row["bytes_per_task"])
    return rows


def _own(subject: str, filename: str) -> bool:
    return any(part in filename for part in OWN_CODE[subject])


def _short(filename: str) -> str:
    """A file name without the machine's directories: ``trio/_core/_run.py``, ``trio_mcp/...``."""
    if "/site-packages/" in filename:
        return filename.split("/site-packages/", 1)[1]
    if filename.startswith(f"{ROOT}/"):
        return filename[len(str(ROOT)) + 1 :]
    stdlib = re.search(r"/lib/python3\.\d+/(.*)$", filename)
    return stdlib.group(1) if stdlib else filename


def traced(
    subject: str, before: tracemalloc.Snapshot, after: tracemalloc.Snapshot, live: int, top: int
) -> dict[str, Any]:
    """The allocations still held, per live task: by line, by the subject's own line, by file."""
    by_line: Counter[str] = Counter()
    by_own: Counter[str] = Counter()
    by_file: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    total = 0
    for diff in after.compare_to(before, "traceback"):
        size = diff.size_diff
        if not size:
            continue
        total += size
        frames = list(diff.traceback)[::-1]  # innermost first (a Traceback is oldest first)
        inner = frames[0]
        line = f"{_short(inner.filename)}:{inner.lineno}"
        by_line[line] += size
        counts[line] += diff.count_diff
        by_file[_short(inner.filename)] += size
        own = next((f for f in frames if _own(subject, f.filename)), None)
        by_own[f"{_short(own.filename)}:{own.lineno}" if own else "(no frame of its own)"] += size

    def rows(counter: Counter[str], with_count: bool = False) -> list[dict[str, Any]]:
        out = []
        for key, size in counter.most_common(top):
            row: dict[str, Any] = {"where": key, "bytes_per_task": round(size / live, 1)}
            if with_count:
                row["blocks_per_task"] = round(counts[key] / live, 2)
            out.append(row)
        return out

    return {
        "bytes_per_task": round(total / live, 1),
        "by_line": rows(by_line, with_count=True),
        "by_own_line": rows(by_own),
        "by_file": rows(by_file),
    }


# -- one subject, in this process -----------------------------------------------------------------
def measure(subject: str, live: int, top: int = 25, trace_live: int = TRACE_LIVE) -> dict[str, Any]:
    """Round 1: RSS and objects per task at ``live`` tasks. Round 2 (a fresh server, tracemalloc
    on): allocations per task at ``min(live, trace_live)`` tasks."""
    serve = SERVE[subject]
    out: dict[str, Any] = {"subject": subject, "live": live}

    async def census_round(driver: Driver) -> None:
        await driver.warm_up()
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        rss_before = rss_kib()
        before = census()
        await driver.create_sleeps(live)
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        rss_after = rss_kib()
        after = census()
        rows = census_diff(before, after, live)
        out["rss"] = {
            "before_kib": rss_before,
            "after_kib": rss_after,
            "bytes_per_task": round((rss_after - rss_before) * 1024 / live, 1),
        }
        out["objects"] = {
            "per_task": round(sum(row["per_task"] for row in rows), 2),
            "bytes_per_task": round(sum(row["bytes_per_task"] for row in rows), 1),
            "by_type": rows[:top],
        }

    traced_live = min(live, trace_live)

    async def trace_round(driver: Driver) -> None:
        await driver.warm_up()
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        before = tracemalloc.take_snapshot()
        await driver.create_sleeps(traced_live)
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        after = tracemalloc.take_snapshot()
        out["traced"] = {"live": traced_live, **traced(subject, before, after, traced_live, top)}

    # What imports made is static: frozen, the collector and the census skip it (the census
    # then walks the objects made since, the server's included, rather than the whole heap).
    gc.collect()
    gc.freeze()
    trio.run(serve, census_round)
    gc.collect()
    tracemalloc.start(TRACE_DEPTH)
    try:
        trio.run(serve, trace_round)
    finally:
        tracemalloc.stop()
    return out


def breakdown(
    live: int, subjects: Sequence[str] = SUBJECTS, top: int = 25, trace_live: int = TRACE_LIVE
) -> dict[str, Any]:
    """Each subject measured in a fresh child process (``--subject S --emit-json``), all at once
    (nothing here is timed, and each RSS is its own process's)."""
    children = {}
    for subject in subjects:
        argv = [sys.executable, "-m", "benchmarks.memory", "--subject", subject, "--live", str(live)]
        argv += ["--top", str(top), "--trace-live", str(trace_live), "--emit-json"]
        children[subject] = subprocess.Popen(
            argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
    results: dict[str, Any] = {"live": live, "subjects": {}}
    for subject, child in children.items():
        out, err = child.communicate()
        if child.returncode != 0:
            raise RuntimeError(f"memory breakdown of {subject} failed ({child.returncode}):\n{err}")
        results["subjects"][subject] = json.loads(out)
    return results


# -- the tables -----------------------------------------------------------------------------------
def lines(results: dict[str, Any], top: int = 15) -> list[str]:
    live = results["live"]
    subjects = results["subjects"]
    out = [
        f"memory per idle live sleep task, in-process (benchmarks/memory.py), L={live:,}: "
        "RSS growth; objects (gc-tracked and their untracked referents, shallow sizes); "
        "allocations still held (tracemalloc)"
    ]
    for name, s in subjects.items():
        out.append(
            f"  {name:9}: RSS {s['rss']['bytes_per_task']:7,.0f} B/task; "
            f"objects {s['objects']['per_task']:5.1f}/task = {s['objects']['bytes_per_task']:6,.0f} B; "
            f"traced {s['traced']['bytes_per_task']:6,.0f} B/task (at L={s['traced']['live']:,})"
        )
    for name, s in subjects.items():
        out.append("")
        out.append(f"  {name}: objects per task by type (count, bytes)")
        for row in s["objects"]["by_type"][:top]:
            out.append(f"    {row['bytes_per_task']:8,.1f} B  {row['per_task']:6.2f}  {row['type']}")
        out.append(f"  {name}: allocations per task by the subject's own line that led to them")
        for row in s["traced"]["by_own_line"][:top]:
            out.append(f"    {row['bytes_per_task']:8,.1f} B  {row['where']}")
        out.append(f"  {name}: allocations per task by allocating line (bytes, blocks)")
        for row in s["traced"]["by_line"][:top]:
            out.append(f"    {row['bytes_per_task']:8,.1f} B  {row['blocks_per_task']:5.2f}  {row['where']}")
        out.append(f"  {name}: allocations per task by file")
        for row in s["traced"]["by_file"][:top]:
            out.append(f"    {row['bytes_per_task']:8,.1f} B  {row['where']}")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__.splitlines()[0])
    parser.add_argument("--live", type=int, default=10_000, help="idle live sleep tasks (default 10000)")
    parser.add_argument("--subject", choices=SUBJECTS, help="one subject, measured in this process")
    parser.add_argument("--top", type=int, default=25, help="rows kept per table (default 25)")
    parser.add_argument(
        "--trace-live", type=int, default=TRACE_LIVE, help=f"tasks in the traced round (default {TRACE_LIVE})"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH")
    parser.add_argument("--emit-json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.subject:
        one = measure(args.subject, args.live, args.top, args.trace_live)
        if args.emit_json:
            print(json.dumps(one))
            return 0
        results = {"live": args.live, "subjects": {args.subject: one}}
    else:
        results = breakdown(args.live, SUBJECTS, args.top, args.trace_live)
    print("\n".join(lines(results, args.top)))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
