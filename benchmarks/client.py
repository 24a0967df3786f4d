"""A lean MCP load client: raw pipes to a child process, pipelined requests, ids matched.

It speaks newline-delimited JSON-RPC directly (no ``trio_mcp`` client, no event loop): all
request lines of a run are encoded before the clock starts, then at most ``window`` requests
are kept in flight, written in batches with one ``write`` per batch and read back in large
chunks. Responses may come in any order; each is matched to its request by id. Notifications
(task status, progress) are skipped without being decoded. The same client drives the server
under test and the raw floor, so their rates are directly comparable.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PROTOCOL_VERSION = "2025-11-25"
# The runtime and the floor both encode compactly with "jsonrpc" first, so a notification line
# starts exactly so; anything else is decoded.
_NOTIFICATION_PREFIX = b'{"jsonrpc":"2.0","method":'
_READ_SIZE = 1 << 20

Request = tuple[str, dict[str, Any] | None]


class ServerGone(RuntimeError):
    """The child closed its output (exited) while answers were still due."""


@dataclass
class RunResult:
    """One pipelined run: its duration, per-request latencies, results and errors by index."""

    count: int
    seconds: float
    latencies: list[float]
    results: list[Any]
    errors: dict[int, dict[str, Any]] = field(default_factory=dict)
    windows: list[tuple[float, float]] = field(default_factory=list)
    """(start, end) of the timed part on the system-wide monotonic clock, one per merged run."""
    peer_cpu: float = 0.0
    """CPU seconds the child (server or floor) used during the timed part."""
    client_cpu: float = 0.0
    """CPU seconds this load client used during the timed part."""

    @property
    def rate(self) -> float:
        """Requests per second, from the first write to the last answer."""
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def percentile(self, p: float) -> float:
        """Latency (seconds) at percentile ``p`` (0..100), nearest rank."""
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        rank = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))
        return ordered[rank]


def merge(runs: Sequence[RunResult]) -> RunResult:
    """Several timed runs as one: counts and seconds add up, latencies pool."""
    merged = RunResult(0, 0.0, [], [])
    for run in runs:
        offset = merged.count
        merged.count += run.count
        merged.seconds += run.seconds
        merged.latencies.extend(run.latencies)
        merged.results.extend(run.results)
        merged.errors.update({offset + i: e for i, e in run.errors.items()})
        merged.windows.extend(run.windows)
        merged.peer_cpu += run.peer_cpu
        merged.client_cpu += run.client_cpu
    return merged


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) of ``pid``'s main thread so far, from /proc/PID/schedstat (ns).

    The server and the floor are single-threaded, so this is all of their CPU time. It is the
    figure to trust on a busy machine: a rate counts time spent waiting for a core, this does not.
    """
    try:
        return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    except (OSError, ValueError, IndexError):
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB, from /proc/PID/status (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class LoadClient:
    """One connection: a child process spoken to over its stdin/stdout."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 600.0,
    ) -> None:
        self.argv = list(argv)
        self.timeout = timeout
        self.process = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=None if env is None else dict(env),
            cwd=cwd,
            bufsize=0,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._wfd = self.process.stdin.fileno()
        self._rfd = self.process.stdout.fileno()
        os.set_blocking(self._wfd, False)
        os.set_blocking(self._rfd, False)
        self._rest = b""
        self._next_id = 1
        self.notifications = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    # -- lifecycle --------------------------------------------------------------------------
    def handshake(self) -> dict[str, Any]:
        """``initialize`` then ``notifications/initialized``; returns the InitializeResult."""
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "trio-mcp-bench", "version": "0.1.0"},
        }
        run = self.run([("initialize", params)], window=1)
        if run.errors:
            raise RuntimeError(f"initialize failed: {run.errors[0]}")
        self._write_all(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        result: dict[str, Any] = run.results[0]
        return result

    def close(self, timeout: float = 60.0) -> int:
        """Close the child's stdin (the MCP way to stop a stdio server), drain, reap."""
        assert self.process.stdin is not None
        self.process.stdin.close()
        deadline = time.monotonic() + timeout
        # Keep reading so a child still writing can never block on a full pipe.
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self._rfd], [], [], 0.2)
            if ready:
                try:
                    if not os.read(self._rfd, _READ_SIZE):
                        break
                except BlockingIOError:
                    pass
            elif self.process.poll() is not None:
                break
        try:
            code = self.process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()
        return code

    def __enter__(self) -> LoadClient:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process.returncode is None:
            try:
                self.close()
            except Exception:
                self.process.kill()
                self.process.wait()

    # -- requests ---------------------------------------------------------------------------
    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One request, waited for; raises RuntimeError on an error answer."""
        run = self.run([(method, params)], window=1)
        if run.errors:
            raise RuntimeError(f"{method} failed: {run.errors[0]}")
        return run.results[0]

    def ping(self) -> None:
        """A round trip: everything sent before it has been read by the server."""
        self.call("ping")

    def settle(self, seconds: float) -> None:
        """Wait ``seconds`` while reading (and discarding) whatever the server sends."""
        deadline = time.perf_counter() + seconds
        while (left := deadline - time.perf_counter()) > 0:
            ready, _, _ = select.select([self._rfd], [], [], left)
            if ready:
                self._read_lines()

    def run(self, requests: Sequence[Request], window: int) -> RunResult:
        """Send ``requests`` with at most ``window`` in flight; wait for every answer.

        Timing starts at the first write and ends at the last answer; each request's latency
        runs from the write of the batch that carried it to the read of its answer.
        """
        n = len(requests)
        base = self._next_id
        self._next_id += n
        lines = [_encode(base + i, method, params) for i, (method, params) in enumerate(requests)]
        sent_at = [0.0] * n
        latencies = [0.0] * n
        results: list[Any] = [None] * n
        errors: dict[int, dict[str, Any]] = {}
        answered = [False] * n
        pending = bytearray()
        sent = done = 0
        poller = select.poll()
        poller.register(self._rfd, select.POLLIN)
        writing = False
        perf_counter = time.perf_counter
        loads = json.loads
        prefix = _NOTIFICATION_PREFIX
        pid = self.process.pid
        peer_cpu = cpu_seconds(pid)
        client_cpu = time.process_time()
        started = time.monotonic()
        start = perf_counter()
        give_up = start + self.timeout
        while done < n:
            if sent < n and sent - done < window:
                k = min(window - (sent - done), n - sent)
                now = perf_counter()
                sent_at[sent : sent + k] = [now] * k
                pending += b"".join(lines[sent : sent + k])
                sent += k
            if pending:
                try:
                    del pending[: os.write(self._wfd, pending)]
                except BlockingIOError:
                    pass
            if pending and not writing:
                poller.register(self._wfd, select.POLLOUT)
                writing = True
            elif writing and not pending:
                poller.unregister(self._wfd)
                writing = False
            try:
                chunk = os.read(self._rfd, _READ_SIZE)
            except BlockingIOError:
                if perf_counter() > give_up:
                    raise TimeoutError(f"{n - done} of {n} answers missing after {self.timeout}s") from None
                poller.poll(1000)
                continue
            if not chunk:
                raise ServerGone(f"server exited ({self.process.poll()}) with {n - done} answers due")
            now = perf_counter()
            *complete, self._rest = (self._rest + chunk).split(b"\n")
            for line in complete:
                if not line or line.startswith(prefix):
                    self.notifications += 1
                    continue
                message = loads(line)
                index = message.get("id", 0) - base
                if not 0 <= index < n or answered[index]:
                    continue  # a stray answer from an earlier run; never expected
                answered[index] = True
                latencies[index] = now - sent_at[index]
                if "error" in message:
                    errors[index] = message["error"]
                else:
                    results[index] = message.get("result")
                done += 1
        seconds = perf_counter() - start
        timed = (started, time.monotonic())
        client_cpu = time.process_time() - client_cpu
        peer_cpu = cpu_seconds(pid) - peer_cpu
        return RunResult(n, seconds, latencies, results, errors, [timed], peer_cpu, client_cpu)

    # -- internals --------------------------------------------------------------------------
    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._wfd, view) :]
            except BlockingIOError:
                select.select([], [self._wfd], [], 1.0)

    def _read_lines(self) -> None:
        try:
            chunk = os.read(self._rfd, _READ_SIZE)
        except BlockingIOError:
            return
        if not chunk:
            raise ServerGone(f"server exited ({self.process.poll()})")
        *complete, self._rest = (self._rest + chunk).split(b"\n")
        self.notifications += len(complete)


def _encode(request_id: int, method: str, params: dict[str, Any] | None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"
