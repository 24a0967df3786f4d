"""Instructions per create in the real server process: ``python -m benchmarks.instructions``.

The figure CPU time cannot give on a noisy machine. Each subject (``trio-mcp``:
``benchmarks/server.py``; ``bare-trio``: ``benchmarks/trio_floor.py``) is started under
``valgrind --tool=cachegrind`` exactly as ``make bench`` starts it, driven over its pipes by the
bench's own client (the warm-up, then N task-augmented ``echo`` calls, window 64), and stopped
with SIGTERM once every answer is in, so that neither shutdown nor the client is counted. Two
sizes are run; instructions per create are the difference of their totals over the difference
of their sizes, which cancels start-up. Repeats agree to about 1%. ``--cache`` also simulates
the caches and prints first-level misses per create (data read misses, instruction misses).

``--http --op OP``: the same for one HTTP request (``benchmarks.http_peers``' operations
``call``, ``create``, ``result``, ``get``, ``m_call``, ``m_get``; 16 keep-alive connections,
answers ``application/json``) of ``trio-mcp`` (``server.py --http``) against the h11 floor
(``http_floor.py``). The finished tasks whose results are asked for are made in both runs at
the larger size, so they cancel out too. (Not ``cancel``: the tasks left uncancelled in the
smaller run are removed at its end, which costs about what a cancel does; a ``create``'s
figure includes its finished task's removal at the end.)
``--source DIR`` runs trio-mcp from another checkout (``git worktree add``): two versions
compared by their counts, on a machine busy with other work.

Needs ``valgrind`` on the PATH; each subject takes about half a minute.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from .peers.compare import PeerTarget, peer_argv
from .workloads import Sizes, timed_creates

SUBJECTS = ("trio-mcp", "bare-trio")
HTTP_SUBJECTS = ("trio-mcp", "floor")
HTTP_OPS = ("call", "create", "result", "get", "m_call", "m_get")
HTTP_WARMUP = 100
COUNTERS = {"instructions": "I   refs", "d1_read_misses": "D1  misses", "i1_misses": "I1  misses"}


def totals(log: str) -> dict[str, int]:
    """The counters cachegrind's summary (in ``log``) gives for the whole process.

    >>> totals("==1== I   refs:      1,296,625,899\\n==1== D1  misses:   31,946,305  (28,632,639 rd")
    {'instructions': 1296625899, 'd1_read_misses': 28632639}
    """
    out: dict[str, int] = {}
    for name, label in COUNTERS.items():
        match = re.search(re.escape(label) + r":\s+([\d,]+)(?:\s+\(\s*([\d,]+) rd)?", log)
        if match is not None:
            out[name] = int((match.group(2) or match.group(1)).replace(",", ""))
    return out


def run_once(subject: str, n: int, cache: bool) -> dict[str, int]:
    """One subject under cachegrind for ``n`` creates: its whole-process counters."""
    with tempfile.TemporaryDirectory(prefix="bench-cachegrind-") as directory:
        log = Path(directory) / "cachegrind.log"
        command = [*_cachegrind(log, cache), *peer_argv(subject)]
        target = PeerTarget(subject, argv=command)
        try:
            timed_creates(target, dataclasses.replace(Sizes(), n=n))
            target.client.ping()  # every answer is in
            os.kill(target.client.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                target.client.process.wait(timeout=60)  # valgrind writes its summary as it exits
        finally:
            target.close()
        return totals(log.read_text())


def per_create(subject: str, small: int, large: int, cache: bool) -> dict[str, float]:
    a, b = run_once(subject, small, cache), run_once(subject, large, cache)
    return {name: (b[name] - a[name]) / (large - small) for name in a if name in b}


def _cachegrind(log: Path, cache: bool) -> list[str]:
    return [
        "valgrind",
        "--tool=cachegrind",
        f"--cache-sim={'yes' if cache else 'no'}",
        "--cachegrind-out-file=/dev/null",
        f"--log-file={log}",
    ]


def http_run_once(
    subject: str, op: str, n: int, prepared: int, cache: bool, source: str | None = None
) -> dict[str, int]:
    """One HTTP subject under cachegrind for ``n`` requests of ``op`` (the finished tasks a
    ``result`` asks for made for ``prepared`` of them): its whole-process counters."""
    from . import http_peers

    env = {"PYTHONPATH": os.path.abspath(source)} if source is not None and subject == "trio-mcp" else {}
    sizes = dataclasses.replace(http_peers.Sizes(), n=prepared, warmup=HTTP_WARMUP)
    with tempfile.TemporaryDirectory(prefix="bench-cachegrind-") as directory:
        log = Path(directory) / "cachegrind.log"
        wrap = [*_cachegrind(log, cache), sys.executable]
        peer = http_peers.measured_peer(subject, op, wrap, env, sizes, prepared)
        child = peer.child
        try:
            peer.timed(op, HTTP_WARMUP)
            peer.run(peer.requests(op, n), sizes.connections)
            peer.end_session()
            assert child.process.stdin is not None
            child.process.stdin.close()  # the server exits; valgrind writes its summary
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.process.wait(timeout=120)
        finally:
            child.close()
        return totals(log.read_text())


def per_http_request(
    subject: str, op: str, small: int, large: int, cache: bool, source: str | None = None
) -> dict[str, float]:
    a = http_run_once(subject, op, small, large, cache, source)
    b = http_run_once(subject, op, large, large, cache, source)
    return {name: (b[name] - a[name]) / (large - small) for name in a if name in b}


def report(figures: dict[str, dict[str, float]], unit: str) -> str:
    lines = [
        f"{subject}: " + ", ".join(f"{name} {value:,.0f}" for name, value in counts.items()) + f" per {unit}"
        for subject, counts in figures.items()
    ]
    if len(figures) == 2:
        (name, ours), (base, floor) = figures.items()
        lines.append(
            f"{name} / {base}: " + ", ".join(f"{k} {ours[k] / floor[k]:.3f}" for k in ours if floor.get(k))
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--subject", choices=sorted({*SUBJECTS, *HTTP_SUBJECTS}), action="append", help="default: both"
    )
    parser.add_argument("--sizes", type=int, nargs=2, default=None, metavar=("SMALL", "LARGE"))
    parser.add_argument("--cache", action="store_true", help="simulate the caches too")
    parser.add_argument("--http", action="store_true", help="one HTTP request, against the h11 floor")
    parser.add_argument("--op", choices=HTTP_OPS, default="get", help="with --http: the request")
    parser.add_argument("--source", metavar="DIR", help="with --http: trio-mcp from this checkout")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH")
    allowed = HTTP_SUBJECTS if args.http else SUBJECTS
    subjects = args.subject or allowed
    if any(s not in allowed for s in subjects):
        parser.error(f"the subjects {'with' if args.http else 'without'} --http: {', '.join(allowed)}")
    if args.http:
        small, large = args.sizes or (500, 2000)
        figures = {s: per_http_request(s, args.op, small, large, args.cache, args.source) for s in subjects}
        print(report(figures, args.op))
    else:
        small, large = args.sizes or (1000, 3000)
        print(report({s: per_create(s, small, large, args.cache) for s in subjects}, "create"))


if __name__ == "__main__":
    main()
