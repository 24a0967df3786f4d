"""Instructions per create in the real server process: ``python -m benchmarks.instructions``.

The figure CPU time cannot give on a noisy machine. Each subject (``trio-mcp``:
``benchmarks/server.py``; ``bare-trio``: ``benchmarks/trio_floor.py``) is started under
``valgrind --tool=cachegrind`` exactly as ``make bench`` starts it, driven over its pipes by the
bench's own client (the warm-up, then N task-augmented ``echo`` calls, window 64), and stopped
with SIGTERM once every answer is in, so that neither shutdown nor the client is counted. Two
sizes are run; instructions per create are the difference of their totals over the difference
of their sizes, which cancels start-up. Repeats agree to about 1%. ``--cache`` also simulates
the caches and prints first-level misses per create (data read misses, instruction misses).

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
import tempfile
from pathlib import Path

from .peers.compare import PeerTarget, peer_argv
from .workloads import Sizes, timed_creates

SUBJECTS = ("trio-mcp", "bare-trio")
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
        command = [
            "valgrind",
            "--tool=cachegrind",
            f"--cache-sim={'yes' if cache else 'no'}",
            "--cachegrind-out-file=/dev/null",
            f"--log-file={log}",
            *peer_argv(subject),
        ]
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subject", choices=SUBJECTS, action="append", help="default: both")
    parser.add_argument("--sizes", type=int, nargs=2, default=(1000, 3000), metavar=("SMALL", "LARGE"))
    parser.add_argument("--cache", action="store_true", help="simulate the caches too")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not on the PATH")
    figures = {s: per_create(s, *args.sizes, args.cache) for s in args.subject or SUBJECTS}
    for subject, counts in figures.items():
        print(
            subject
            + ": "
            + ", ".join(f"{name} {value:,.0f}" for name, value in counts.items())
            + " per create"
        )
    if len(figures) == 2:
        ours, floor = figures["trio-mcp"], figures["bare-trio"]
        print(
            "trio-mcp / bare-trio: "
            + ", ".join(f"{k} {ours[k] / floor[k]:.3f}" for k in ours if floor.get(k))
        )


if __name__ == "__main__":
    main()
