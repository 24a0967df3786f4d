"""Bytecodes per request, by function: ``python -m benchmarks.bytecodes --op create``.

Where CPU time and instruction counts say how much a request costs, this says where: each
subject (``trio-mcp``: ``benchmarks/server.py``; ``bare-trio``: ``benchmarks/trio_floor.py``)
runs under a tracer that counts the Python bytecodes each function executes
(``sys.settrace`` with ``f_trace_opcodes``), started and stopped by a signal around the
measured requests only (after the warm-up, before shutdown). It is driven over its pipes by
the bench's own client, as ``make bench`` drives it, and prints bytecodes per request: the
total, the functions that execute the most, and for trio-mcp its modules beside bare
Trio's. The counts do not depend on the machine's load: run it while other work runs, and
compare two versions of the code by their counts.

A bytecode is not a fixed cost (a call into C — ``orjson``, a dict lookup — is one or a few),
so read the counts beside the instruction counts of ``benchmarks/instructions.py``; on
trio-mcp's paths, where the C side is small, the two move together (a ``tasks/create`` here:
CPU per request about 0.014 µs per bytecode plus 22 µs). Tracing makes the server some 20
times slower: what depends on time (timers, batching) may differ from a normal run.

``--lines``: by line (``file:first line:function@line``) rather than by function, to see
which statements of a function cost what.

``--op``: ``create`` (task-augmented ``echo`` calls), ``get``, ``cancel`` (of ``sleep`` tasks
made first), ``result`` (of finished ``echo`` tasks). ``--n``: requests counted (window 64).

``--http``: the same over Streamable HTTP (``server.py --http`` against the h11 floor,
``http_floor.py``; 16 keep-alive connections), with ``benchmarks.http_peers``' operations
(``call``, ``create``, ``result``, ``get``, ``cancel``, ``m_call``, ``m_get``). Slowed down
twentyfold, a request there is watched for its client's disconnect (after 50 ms) far more
often than at full speed: read Trio's share with care, the runtime's own functions are exact.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import signal
import sys
import tempfile
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as the tracer around a server (see _serve_traced)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SUBJECTS = ("trio-mcp", "bare-trio")
OPS = ("create", "get", "cancel", "result")
HTTP_SUBJECTS = ("trio-mcp", "floor")
HTTP_OPS = ("call", "create", "result", "get", "cancel", "m_call", "m_get")
WINDOW = 64
WARMUP = 200


def _where(code: Any) -> str:
    """A function's name with its file, shortened to what is under site-packages, the
    repository or the standard library: ``trio_mcp/actors/_session.py:268:on_request``."""
    path = code.co_filename
    for marker in ("site-packages/", "/lib/python3."):
        if marker in path:
            path = path.split(marker, 1)[1]
            if marker.startswith("/lib"):
                path = path.split("/", 1)[-1]
            break
    else:
        root = str(Path(__file__).resolve().parents[1]) + "/"
        path = path.removeprefix(root)
    return f"{path}:{code.co_firstlineno}:{code.co_name}"


def _serve_traced(argv: Sequence[str]) -> None:
    """Run the server script ``argv[0]`` (with its arguments) in this process; SIGUSR1 starts
    counting, the next one stops and writes the counts (JSON) to ``$BYTECODES_OUT``."""
    import gc
    import runpy

    bytecodes: collections.Counter[Any] = collections.Counter()
    calls: collections.Counter[Any] = collections.Counter()
    by_line = bool(os.environ.get("BYTECODES_LINES"))

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if event == "opcode":
            bytecodes[(frame.f_code, frame.f_lineno) if by_line else frame.f_code] += 1
        elif event == "call":  # a call, or a coroutine resumed
            frame.f_trace_opcodes = True
            calls[frame.f_code] += 1
        return tracer

    def watch(frame: Any) -> None:
        frame.f_trace = tracer
        frame.f_trace_opcodes = True

    counting = False

    def toggle(signum: int, frame: Any) -> None:
        nonlocal counting
        counting = not counting
        if counting:
            bytecodes.clear()
            calls.clear()
            # Frames already running (the loops of long-lived Trio tasks, suspended) are
            # counted from here on too, not only the frames made from now on.
            for obj in gc.get_objects():
                kind = type(obj)
                if kind is types.CoroutineType:
                    suspended = obj.cr_frame
                elif kind is types.GeneratorType:
                    suspended = obj.gi_frame
                else:
                    continue
                if suspended is not None:
                    watch(suspended)
            while frame is not None:
                watch(frame)
                frame = frame.f_back
            sys.settrace(tracer)
            return
        sys.settrace(None)
        if by_line:  # "file:first line:function@line"; no calls
            out = {f"{_where(key[0])}@{key[1]}": [count, 0] for key, count in bytecodes.items()}
        else:
            out = {_where(code): [count, calls.get(code, 0)] for code, count in bytecodes.items()}
        Path(os.environ["BYTECODES_OUT"]).write_text(json.dumps(out))

    signal.signal(signal.SIGUSR1, toggle)
    sys.argv = list(argv)
    runpy.run_path(argv[0], run_name="__main__")


def _counted(pid: int, out: Path, run: Callable[[], object], pause: Callable[[float], None]) -> Any:
    """The counts (by function) of the server at ``pid`` (run by :func:`_serve_traced`,
    writing them to ``out``) while ``run()`` sends the requests measured; ``pause(seconds)``
    waits (reading the server's notifications meanwhile, for a stdio client)."""
    pause(0.2)  # what came before (notifications, a status change) is in
    os.kill(pid, signal.SIGUSR1)
    pause(0.2)  # the signal is handled: counting
    run()
    pause(0.2)  # what follows the answers (a status notification) is counted
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 60
    while not out.exists() and time.monotonic() < deadline:
        pause(0.05)
    return json.loads(out.read_text())


def count(subject: str, op: str, n: int) -> dict[str, tuple[float, float]]:
    """Bytecodes and calls per request of ``op`` for ``subject``, by function."""
    from .peers.compare import PeerTarget, peer_argv
    from .workloads import by_id, create_echo, create_sleep, task_ids

    with tempfile.TemporaryDirectory(prefix="bench-bytecodes-") as directory:
        out = Path(directory) / "counts.json"
        os.environ["BYTECODES_OUT"] = str(out)
        argv = peer_argv(subject)
        target = PeerTarget(subject, argv=[argv[0], str(Path(__file__).resolve()), *argv[1:]])
        try:
            client = target.client
            warm = task_ids(target.run(create_echo(WARMUP), WINDOW), "warm-up create")
            target.run(by_id("tasks/result", warm), WINDOW)
            if op == "create":
                requests = create_echo(n)
            else:  # tasks of their own for the warm-up (a task is cancelled once)
                made = create_sleep(WARMUP + n, 3600) if op in ("get", "cancel") else create_echo(WARMUP + n)
                ids = task_ids(target.run(made, WINDOW), "create")
                client.ping()
                client.settle(0.2)  # every echo has finished
                target.run(by_id(f"tasks/{op}", ids[:WARMUP]), WINDOW)
                requests = by_id(f"tasks/{op}", ids[WARMUP:])
            client.ping()

            def measured() -> None:
                run = target.run(requests, WINDOW)
                if run.errors:
                    raise RuntimeError(f"{subject}: {op} failed: {next(iter(run.errors.values()))}")

            counts = _counted(client.pid, out, measured, client.settle)
        finally:
            target.close()
    return {where: (b / n, c / n) for where, (b, c) in counts.items()}


def count_http(subject: str, op: str, n: int) -> dict[str, tuple[float, float]]:
    """Bytecodes and calls per request of the HTTP ``op`` (``benchmarks.http_peers``' names)
    for ``subject``: ``trio-mcp`` (``server.py --http``) or ``floor`` (``http_floor.py``),
    on 16 keep-alive connections."""
    from . import http_peers

    sizes = dataclasses.replace(http_peers.Sizes(), n=n, warmup=WARMUP)
    with tempfile.TemporaryDirectory(prefix="bench-bytecodes-") as directory:
        out = Path(directory) / "counts.json"
        wrap = [sys.executable, str(Path(__file__).resolve())]
        peer = http_peers.measured_peer(subject, op, wrap, {"BYTECODES_OUT": str(out)}, sizes, WARMUP)
        child = peer.child
        try:
            for _ in range(2):
                peer.timed(op, WARMUP)
            peer.prepare(op, n)  # the tasks to cancel, made before counting
            requests = peer.requests(op, n)
            counts = _counted(child.pid, out, lambda: peer.run(requests, sizes.connections), time.sleep)
        finally:
            peer.close()
    return {where: (b / n, c / n) for where, (b, c) in counts.items()}


def _module(where: str) -> str:
    return where.split(":", 1)[0]


def report(figures: dict[str, dict[str, tuple[float, float]]], op: str, top: int) -> str:
    lines: list[str] = []
    totals = {s: sum(b for b, _ in f.values()) for s, f in figures.items()}
    for subject, counts in figures.items():
        calls = sum(c for _, c in counts.values())
        lines.append(f"{subject}: {totals[subject]:,.0f} bytecodes, {calls:.1f} calls per {op}")
        for where, (b, c) in sorted(counts.items(), key=lambda kv: -kv[1][0])[:top]:
            lines.append(f"  {b:8.1f} {c:6.2f}  {where}")
    if len(figures) == 2 and all(totals.values()):
        base = next(s for s in figures if s != "trio-mcp")
        ours, floor = figures["trio-mcp"], figures[base]
        lines.append(f"trio-mcp / {base}: bytecodes {totals['trio-mcp'] / totals[base]:.3f}")
        by_module: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
        for index, counts in enumerate((ours, floor)):
            for where, (b, _) in counts.items():
                by_module[_module(where)][index] += b
        lines.append(f"by module (trio-mcp, {base}, difference):")
        for module, (a, b) in sorted(by_module.items(), key=lambda kv: kv[1][1] - kv[1][0])[:top]:
            if abs(a - b) >= 1:
                lines.append(f"  {a:8.1f} {b:8.1f} {a - b:+8.1f}  {module}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", choices=sorted({*OPS, *HTTP_OPS}), default="create")
    parser.add_argument("--http", action="store_true", help="over HTTP, against the h11 floor")
    parser.add_argument(
        "--subject", choices=sorted({*SUBJECTS, *HTTP_SUBJECTS}), action="append", help="default: both"
    )
    parser.add_argument("--n", type=int, default=1000, help="requests counted")
    parser.add_argument("--top", type=int, default=30, help="functions (and modules) shown")
    parser.add_argument("--lines", action="store_true", help="by line of each function, not by function")
    args = parser.parse_args(argv)
    if args.lines:
        os.environ["BYTECODES_LINES"] = "1"  # read by the traced server
    if args.http:
        figures = {s: count_http(s, args.op, args.n) for s in args.subject or HTTP_SUBJECTS}
    else:
        if args.op not in OPS:
            parser.error(f"--op {args.op} is an HTTP operation: add --http")
        figures = {s: count(s, args.op, args.n) for s in args.subject or SUBJECTS}
    print(report(figures, args.op, args.top))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].endswith(".py"):
        _serve_traced(sys.argv[1:])  # the tracer around a server: see count()
    else:
        main()
