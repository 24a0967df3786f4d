"""Workload 11: memory bounds under hostile or careless clients, measured as figures.

* **a. A client that never reads** (over stdio, and over WebSocket): after the handshake and a
  few live ``sleep`` tasks, it writes ``tasks/list`` and ``tasks/get`` requests as fast as the
  server reads them and reads nothing. The server's RSS (VmRSS) is sampled every 50 ms until
  the server disconnects it (it closes a connection once 16 MiB of answers wait to be written,
  or once one write has stalled for 30 s; smoke runs lower both). The disconnect is seen
  without reading: POLLHUP / POLLRDHUP / POLLERR on the client's end, or a failed write.
* **b. A waiter flood** (stdio): W ``tasks/result`` waiters on W live hour-long tasks, written
  in one burst; then pings one at a time (their round trip while the waiters are parked),
  a few ``tasks/get``, and finally ``tasks/cancel`` for every task, which releases the waiters.
  Past 256 outstanding requests a connection's requests are answered at once with -32603
  "at most 256 outstanding requests per connection".
* **c. Disconnect churn** (WebSocket): C connections, each creating K ``sleep`` tasks and then
  dropping its TCP connection without a closing handshake (RST). Without authentication each
  connection owns its tasks, so none may be left: the server is asked for its sessions, live
  task actors and stored records (a ``stats`` line on its stdin), and RSS before and after.
"""

from __future__ import annotations

import json
import os
import select
import socket
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from wsproto import ConnectionType, WSConnection

from .client import LoadClient, WsLoadClient, _encode, read_port, rss_kib
from .workloads import SERVER_SCRIPT, Sizes, by_id, create_sleep, task_ids

MIB = 1024 * 1024
SAMPLE_EVERY = 0.05
LONG = 3600.0


def _mib(kib: int) -> float:
    return round(kib / 1024, 2)


def _server_argv(sizes: Sizes, *args: str, bounds: bool = False) -> list[str]:
    argv = [sys.executable, str(SERVER_SCRIPT), *args]
    if bounds and sizes.max_outbound_bytes is not None:
        argv += ["--max-outbound-bytes", str(sizes.max_outbound_bytes)]
    if bounds and sizes.write_timeout is not None:
        argv += ["--write-timeout", str(sizes.write_timeout)]
    return argv


class LoggedLoadClient(LoadClient):
    """A stdio load client whose server's stderr (its log) goes to a file, counted after."""

    def __init__(self, argv: list[str], log_path: str) -> None:
        self.log_path = log_path
        super().__init__(argv)

    def _spawn(self, argv: Any, env: Any, cwd: Any, timeout: float) -> None:
        self.argv = list(argv)
        self.timeout = timeout
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                self.argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, bufsize=0
            )


def _warnings(log_path: str) -> int:
    """Lines of the server's log saying it closes a connection for a peer that does not read."""
    with open(log_path, errors="replace") as log:
        return sum(1 for line in log if "does not read" in line or "stalled" in line)


# -- a WebSocket connection to a server process started elsewhere ------------------------------
class AttachedWsClient(WsLoadClient):
    """One more WebSocket connection to an already running ``server.py --ws`` child."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, timeout: float = 120.0) -> None:
        self.process = process
        self.argv = []
        self.timeout = timeout
        self.port = port
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30.0)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ws = WSConnection(ConnectionType.CLIENT)
        self._upgrade(30.0)
        self.sock.setblocking(False)
        self._fragments: list[bytes] = []
        self._attach(self.sock.fileno(), self.sock.fileno())

    def abort(self) -> None:
        """Drop the connection with a TCP RST: no closing handshake, nothing drained."""
        if self.sock is not None:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.sock.close()
            self.sock = None

    def close(self, timeout: float = 60.0) -> int:
        self.abort()
        return 0


class NetworkServer:
    """``server.py --ws`` as a child: its port, RSS and ``stats``; stdin closed to stop it."""

    def __init__(self, argv: list[str], log_path: str | None = None) -> None:
        self.log_path = log_path
        with open(log_path or os.devnull, "wb") as log:
            self.process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log if log_path else None,
                bufsize=0,
            )
        self.port = read_port(self.process, "ws-port", 60.0)

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def stats(self, timeout: float = 10.0) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(b"stats\n")
        fd = self.process.stdout.fileno()
        data = b""
        deadline = time.monotonic() + timeout
        while not data.endswith(b"\n"):
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("the server printed no stats")
            data += os.read(fd, 4096)
        answer: dict[str, Any] = json.loads(data.decode().strip().splitlines()[-1])
        return answer

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()


# -- a: the client that never reads ------------------------------------------------------------
def _queries(ids: list[str], first_id: int) -> Iterator[bytes]:
    """tasks/list and tasks/get requests, alternating, ids counting up from ``first_id``."""
    request_id = first_id
    while True:
        for task_id in ids:
            yield _encode(request_id, "tasks/list", None)
            yield _encode(request_id + 1, "tasks/get", {"taskId": task_id})
            request_id += 2


def _never_read(client: LoadClient, pid: int, ids: list[str], sizes: Sizes) -> dict[str, Any]:
    """Write queries without reading until the server lets the client go; RSS sampled."""
    frame = client._frame
    queries = _queries(ids, client._next_id + 1_000_000)
    poller = select.poll()
    hangup = select.POLLHUP | select.POLLERR | getattr(select, "POLLRDHUP", 0)
    poller.register(client._rfd, hangup)
    wfd = client._wfd
    rss_start = rss_kib(pid)
    samples: list[list[float]] = [[0.0, rss_start, 0]]
    pending = bytearray()
    written = requests = generated = 0
    how = "timeout"
    start = time.monotonic()
    next_sample = start + SAMPLE_EVERY
    while True:
        now = time.monotonic()
        if now >= next_sample:
            try:
                samples.append([round(now - start, 3), rss_kib(pid), requests])
            except (OSError, RuntimeError):
                how = "server exited"
                break
            next_sample = now + SAMPLE_EVERY
        if now - start > sizes.non_reader_seconds:
            break
        if any(event & hangup for _, event in poller.poll(0)):
            how = "hung up"
            break
        if len(pending) < 256 * 1024:
            batch = b"".join(frame(next(queries)) for _ in range(512))
            pending += batch
            requests += 512
            generated += len(batch)
        try:
            sent = os.write(wfd, pending)
            del pending[:sent]
            written += sent
        except BlockingIOError:
            select.select([], [wfd], [], SAMPLE_EVERY)
        except OSError:  # EPIPE, ECONNRESET: the server closed its end
            how = "write failed"
            break
    seconds = time.monotonic() - start
    rss_values = [int(s[1]) for s in samples]
    peak = max(rss_values)
    return {
        "disconnected": how != "timeout",
        "how": how,
        "seconds_to_disconnect": round(seconds, 3),
        "requests_written": round(requests * written / generated) if generated else 0,
        "bytes_written": written,
        "rss_start_kib": rss_start,
        "rss_peak_kib": peak,
        "rss_growth_mib": _mib(peak - rss_start),
        "samples": samples[:: max(1, len(samples) // 100)],
    }


def non_reader_stdio(sizes: Sizes) -> dict[str, Any]:
    log_path = tempfile.mktemp(prefix="bench-server-log-")
    client = LoggedLoadClient(_server_argv(sizes, bounds=True), log_path)
    try:
        client.handshake()
        ids = task_ids(client.run(create_sleep(50, LONG), 16), "create")
        out = _never_read(client, client.pid, ids, sizes)
        try:
            code = client.process.wait(10)
        except subprocess.TimeoutExpired:
            code = None
        out["server_exit_code"] = code
        out["log_warnings"] = _warnings(log_path)
    finally:
        if os.path.exists(log_path):
            os.unlink(log_path)
        client.process.kill()
        client.process.wait()
        for pipe in (client.process.stdin, client.process.stdout):
            if pipe is not None:
                try:
                    pipe.close()
                except OSError:
                    pass
    return out


def non_reader_ws(sizes: Sizes) -> dict[str, Any]:
    log_path = tempfile.mktemp(prefix="bench-server-log-")
    srv = NetworkServer(_server_argv(sizes, "--ws", "127.0.0.1:0", bounds=True), log_path)
    try:
        client = AttachedWsClient(srv.process, srv.port)
        client.handshake()
        ids = task_ids(client.run(create_sleep(50, LONG), 16), "create")
        out = _never_read(client, srv.pid, ids, sizes)
        client.abort()
        time.sleep(max(sizes.settle, 0.5))
        out["rss_after_kib"] = srv.rss_kib()
        out["server_after"] = _stats_when_idle(srv)
        # the server is still serving others: a fresh connection gets answers
        with _closing(AttachedWsClient(srv.process, srv.port)) as other:
            other.handshake()
            other.ping()
        out["serves_others_after"] = True
    finally:
        srv.close()
        out_log = _warnings(log_path)
        os.unlink(log_path)
    out["log_warnings"] = out_log
    return out


class _closing:
    def __init__(self, client: AttachedWsClient) -> None:
        self.client = client

    def __enter__(self) -> AttachedWsClient:
        return self.client

    def __exit__(self, *exc: object) -> None:
        self.client.abort()


def _stats_when_idle(srv: NetworkServer, timeout: float = 10.0) -> dict[str, Any]:
    """The server's stats once no session is left (or after ``timeout``), with the wait."""
    start = time.monotonic()
    while True:
        stats = srv.stats()
        waited = time.monotonic() - start
        if (stats["sessions"] == 0 and stats["actors"] == 0) or waited > timeout:
            return {**stats, "after_s": round(waited, 3)}
        time.sleep(0.05)


# -- b: the waiter flood -------------------------------------------------------------------------
def _read_answers(client: LoadClient, ids: set[int], timeout: float) -> dict[int, tuple[float, Any]]:
    """Read until every id in ``ids`` is answered (or ``timeout``): id -> (time, message)."""
    got: dict[int, tuple[float, Any]] = {}
    deadline = time.perf_counter() + timeout
    while not ids <= got.keys():
        left = deadline - time.perf_counter()
        if left <= 0:
            break
        ready, _, _ = select.select([client._rfd], [], [], left)
        if not ready:
            continue
        try:
            chunk = os.read(client._rfd, 1 << 20)
        except BlockingIOError:
            continue
        if not chunk:
            break
        now = time.perf_counter()
        for line in client._messages(chunk):
            if not line:
                continue
            message = json.loads(line)
            if "id" in message and "method" not in message:
                got[message["id"]] = (now, message)
    return got


def _send(client: LoadClient, requests: list[tuple[str, dict[str, Any] | None]]) -> list[int]:
    first = client._next_id
    client._next_id += len(requests)
    data = b"".join(
        client._frame(_encode(first + i, method, params)) for i, (method, params) in enumerate(requests)
    )
    client._write_all(data)
    return list(range(first, first + len(requests)))


def waiter_flood(sizes: Sizes) -> dict[str, Any]:
    count = sizes.flood_waiters
    client = LoadClient(_server_argv(sizes))
    try:
        client.handshake()
        ids = task_ids(client.run(create_sleep(count, LONG), 64), "create")
        rss_before = client.rss_kib()
        sent_at = time.perf_counter()
        waiter_ids = _send(client, by_id("tasks/result", ids))
        # the waiters past the limit are answered at once; the others are parked
        refused_at_least = max(0, count - 256)
        got = _read_answers(client, set(waiter_ids[-refused_at_least:]) if refused_at_least else set(), 10.0)
        refused = [m for _, m in got.values() if "error" in m]
        codes = sorted({m["error"]["code"] for m in refused})
        messages = sorted({m["error"]["message"] for m in refused})
        refused_ms = (max((t for t, _ in got.values()), default=sent_at) - sent_at) * 1e3
        pings = []
        for _ in range(20):
            [ping_id] = _send(client, [("ping", None)])
            start = time.perf_counter()
            answer = _read_answers(client, {ping_id}, 10.0)
            pings.append((answer[ping_id][0] - start) * 1e3 if ping_id in answer else float("inf"))
        get_ids = _send(client, by_id("tasks/get", ids[:10]))
        gets = _read_answers(client, set(get_ids), 10.0)
        gets_refused = sum(1 for _, m in gets.values() if "error" in m)
        rss_parked = client.rss_kib()
        cancel_ids = _send(client, by_id("tasks/cancel", ids))
        start = time.perf_counter()
        released = _read_answers(client, set(cancel_ids) | set(waiter_ids) - got.keys(), 20.0)
        release_s = time.perf_counter() - start
        cancels_ok = sum(1 for i in cancel_ids if i in released and "result" in released[i][1])
        cancels_refused = sum(1 for i in cancel_ids if i in released and "error" in released[i][1])
        waiters_answered = sum(1 for i in waiter_ids if i in released)
        client.ping()
    finally:
        client.close()
    pings.sort()
    return {
        "waiters": count,
        "refused": len(refused),
        "refused_codes": codes,
        "refused_messages": messages,
        "refused_within_ms": round(refused_ms, 2),
        "ping_ms_p50": round(pings[len(pings) // 2], 3),
        "ping_ms_max": round(pings[-1], 3),
        "gets_while_parked": len(get_ids),
        "gets_refused": gets_refused,
        "cancels_ok": cancels_ok,
        "cancels_refused": cancels_refused,
        "parked_waiters_answered_after_cancel": waiters_answered,
        "release_s": round(release_s, 3),
        "rss_before_kib": rss_before,
        "rss_parked_kib": rss_parked,
    }


# -- c: disconnect churn -----------------------------------------------------------------------
def disconnect_churn(sizes: Sizes) -> dict[str, Any]:
    conns, per = sizes.churn_connections, sizes.churn_connection_tasks
    srv = NetworkServer(_server_argv(sizes, "--ws", "127.0.0.1:0"))
    try:

        def one_round(n: int, batch: int = 10) -> int:
            made = 0
            for start in range(0, n, batch):
                clients = [AttachedWsClient(srv.process, srv.port) for _ in range(min(batch, n - start))]
                for c in clients:
                    c.handshake()
                    made += len(task_ids(c.run(create_sleep(per, LONG), 64), "create"))
                for c in clients:
                    c.abort()
            return made

        one_round(min(10, conns))  # warm-up
        warm_stats = _stats_when_idle(srv)
        time.sleep(sizes.settle)
        rss_before = srv.rss_kib()
        start = time.monotonic()
        made = one_round(conns)
        seconds = time.monotonic() - start
        after = _stats_when_idle(srv)
        time.sleep(sizes.settle)
        rss_after = srv.rss_kib()
    finally:
        srv.close()
    return {
        "connections": conns,
        "tasks_per_connection": per,
        "tasks_created": made,
        "seconds": round(seconds, 3),
        "after_warmup": warm_stats,
        "left": after,
        "rss_before_kib": rss_before,
        "rss_after_kib": rss_after,
        "rss_growth_mib": _mib(rss_after - rss_before),
    }


def hardening(sizes: Sizes, log: Callable[[str], None]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "max_outbound_bytes": sizes.max_outbound_bytes or 16 * MIB,
        "write_timeout_s": sizes.write_timeout or 30.0,
    }
    for name, kind in (("non_reader_stdio", "stdio"), ("non_reader_ws", "ws")):
        r = out[name] = (non_reader_stdio if kind == "stdio" else non_reader_ws)(sizes)
        log(
            f"  never reads ({kind}): {r['how']} after {r['seconds_to_disconnect']:.1f} s, "
            f"{r['requests_written']:,} requests written; RSS {_mib(r['rss_start_kib'])} -> peak "
            f"{_mib(r['rss_peak_kib'])} MiB (+{r['rss_growth_mib']} MiB)"
        )
    f = out["waiter_flood"] = waiter_flood(sizes)
    log(
        f"  waiter flood: {f['waiters']} tasks/result, {f['refused']} refused {f['refused_codes']}; "
        f"ping p50 {f['ping_ms_p50']:.2f} ms max {f['ping_ms_max']:.2f} ms; "
        f"{f['gets_refused']}/{f['gets_while_parked']} gets refused; {f['cancels_ok']} cancels ok"
    )
    c = out["disconnect_churn"] = disconnect_churn(sizes)
    log(
        f"  disconnect churn: {c['connections']} x {c['tasks_per_connection']} tasks; left "
        f"{c['left']}; RSS {_mib(c['rss_before_kib'])} -> {_mib(c['rss_after_kib'])} MiB"
    )
    return out
