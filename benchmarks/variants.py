"""Workloads 9 and 10: the same create / get / cancel patterns against a variant of the server,
each reported as a ratio to a baseline measured in the same run with the same sizes.

* **9 stores**: ``benchmarks/server.py --store URL`` with the memory store (the baseline), SQLite
  (a file in a temporary directory) and Redis (a ``valkey-server`` of its own, see
  ``benchmarks/valkey.py``), over stdio.
* **10 HTTP**: the memory-store server over stdio (the baseline) and over Streamable HTTP
  (``--http``, the 2025-11-25 era, one session; ``benchmarks/http_client.py``).

Each variant gets one fresh server: N task-augmented ``echo`` creates, then L idle ``sleep``
tasks, ``tasks/get`` over them and ``tasks/cancel`` for them, exactly as workloads 1, 3 and 4
(``timed_creates`` and ``ScaleRuns.measure``; the N completed echo tasks stay in the store
meanwhile). Server CPU here is the whole process's (``/proc/PID/stat``: the SQLite store works
in threads), and for Redis the ``valkey-server``'s CPU is reported beside it.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .client import LoadClient, Request, RunResult, thread_sum
from .http_client import HttpLoadClient
from .valkey import Valkey
from .workloads import SERVER_SCRIPT, ScaleRuns, Sizes, Target, timed_creates

PHASES = ("create", "get", "cancel")


def process_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of every thread of ``pid`` so far, two ways: the sum of the live threads'
    ``schedstat`` (ns, but a thread that exits takes its time with it) and ``/proc/PID/stat``'s
    user + system (every thread, dead ones included, but in clock ticks of 10 ms)."""
    precise = thread_sum(pid, "schedstat", lambda data: int(data.split()[0])) / 1e9
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return precise, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_between(before: tuple[float, float], after: tuple[float, float]) -> float:
    """CPU seconds used between two :func:`process_cpu` readings: the precise figure, unless the
    coarse one (which counts threads that exited) is larger by more than two ticks."""
    precise, coarse = after[0] - before[0], after[1] - before[1]
    return coarse if coarse > precise + 0.02 else precise


class ProcessTarget(Target):
    """A :class:`Target` whose peer CPU is the whole process's, plus that of ``extra_pid`` (the
    store's own server) per timed run, keyed by the run's window."""

    def __init__(
        self, argv: Sequence[str], *, client: type[LoadClient] = LoadClient, extra_pid: int | None = None
    ) -> None:
        super().__init__(argv, record_gc=True, client=client)
        self.extra_pid = extra_pid
        self.extra_cpu: dict[tuple[float, float], float] = {}

    def run(self, requests: Sequence[Request], window: int) -> RunResult:
        pid = self.client.pid
        before = process_cpu(pid)
        extra = process_cpu(self.extra_pid) if self.extra_pid is not None else (0.0, 0.0)
        run = self.client.run(requests, window)
        run.peer_cpu = cpu_between(before, process_cpu(pid))
        if self.extra_pid is not None:
            self.extra_cpu[run.windows[0]] = cpu_between(extra, process_cpu(self.extra_pid))
        return run

    def stat(self, run: RunResult) -> dict[str, Any]:
        data = super().stat(run)
        if self.extra_pid is not None:
            extra = sum(self.extra_cpu.get(w, 0.0) for w in run.windows)
            data["store_cpu_us_per_request"] = round(extra / run.count * 1e6, 2) if run.count else 0.0
        return data


def measure(target: ProcessTarget, sizes: Sizes, live: int) -> dict[str, Any]:
    """Creates, then get and cancel at ``live`` tasks, on one server; its stats per phase."""
    try:
        created, _ = timed_creates(target, sizes)
        runs = ScaleRuns.measure(target, live, sizes)
    finally:
        target.close()
    return {
        "create": target.stat(created),
        "get": target.stat(runs.got),
        "cancel": target.stat(runs.cancelled),
        "cancel_probe": target.stat(runs.probe),
        "memory": runs.memory(),
    }


def ratios(subject: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """Per phase: ``ratio`` = subject rate / baseline rate; ``cpu_ratio`` = baseline server CPU
    per request / subject server CPU per request (below 1: the subject costs more)."""
    out: dict[str, Any] = {}
    for phase in PHASES:
        s, b = subject[phase], base[phase]
        out[phase] = {
            "ratio": round(s["rate"] / b["rate"], 4) if b["rate"] else 0.0,
            "cpu_ratio": round(b["cpu_us_per_request"] / s["cpu_us_per_request"], 4)
            if s["cpu_us_per_request"]
            else 0.0,
        }
    return out


def _sub_sizes(sizes: Sizes, n: int, live: int, get_min: int, cancel_min: int, window: int) -> Sizes:
    return dataclasses.replace(
        sizes, n=n, get_min=get_min, cancel_min=cancel_min, window=window, probe=min(sizes.probe, 20)
    )


def _argv(*args: str) -> list[str]:
    return [sys.executable, str(SERVER_SCRIPT), *args]


def stores(sizes: Sizes, log: Callable[[str], None]) -> dict[str, Any]:
    """Workload 9: memory, SQLite and Redis stores, each as ratios to memory."""
    sub = _sub_sizes(
        sizes, sizes.store_n, sizes.store_live, sizes.store_get_min, sizes.store_cancel_min, sizes.window
    )
    live = sizes.store_live
    out: dict[str, Any] = {"n": sub.n, "L": live, "window": sub.window, "stores": {}}
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-") as directory:
        db = Path(directory) / "tasks.db"
        out["stores"]["memory"] = measure(ProcessTarget(_argv("--store", "memory")), sub, live)
        out["stores"]["sqlite"] = measure(ProcessTarget(_argv("--store", f"sqlite:///{db}")), sub, live)
    with Valkey() as valkey:
        target = ProcessTarget(_argv("--store", valkey.url), extra_pid=valkey.pid)
        out["stores"]["redis"] = measure(target, sub, live)
    base = out["stores"]["memory"]
    for name in ("sqlite", "redis"):
        out["stores"][name]["vs_memory"] = ratios(out["stores"][name], base)
    for name, entry in out["stores"].items():
        log(f"  store {name}: " + _brief(entry))
    return out


def http(sizes: Sizes, log: Callable[[str], None]) -> dict[str, Any]:
    """Workload 10: the same server over stdio and over Streamable HTTP, ratios to stdio."""
    sub = _sub_sizes(
        sizes, sizes.http_n, sizes.http_live, sizes.http_get_min, sizes.http_cancel_min, sizes.http_window
    )
    live = sizes.http_live
    stdio = measure(ProcessTarget(_argv()), sub, live)
    over_http = measure(ProcessTarget(_argv("--http", "127.0.0.1:0"), client=HttpLoadClient), sub, live)
    over_http["vs_stdio"] = ratios(over_http, stdio)
    out = {"n": sub.n, "L": live, "window": sub.window, "stdio": stdio, "http": over_http}
    log(f"  stdio: {_brief(stdio)}")
    log(f"  http:  {_brief(over_http)}")
    return out


def _brief(entry: dict[str, Any]) -> str:
    parts = []
    for phase in PHASES:
        s = entry[phase]
        text = f"{phase} {s['rate']:.0f}/s CPU {s['cpu_us_per_request']:.0f} us"
        if "store_cpu_us_per_request" in s:
            text += f" (+store {s['store_cpu_us_per_request']:.0f} us)"
        parts.append(text)
    return "; ".join(parts)
