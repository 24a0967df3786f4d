"""A lean MCP load client: pipelined requests to a child process, ids matched.

It speaks JSON-RPC directly (no ``trio_mcp`` client, no event loop): all requests of a run are
encoded before the clock starts, then at most ``window`` requests are kept in flight, written
in batches with one ``write`` per batch and read back in large chunks. Responses may come in
any order; each is matched to its request by id. Notifications (task status, progress) are
skipped without being decoded. Two framings share that loop:

* :class:`LoadClient`: newline-delimited JSON over the child's stdin/stdout (raw pipes). It
  drives the server under test and the raw floor, so their rates are directly comparable.
* :class:`WsLoadClient`: one JSON-RPC message per WebSocket text frame, over a TCP connection
  to a child serving WebSocket (``benchmarks/server.py --ws``). ``wsproto`` makes the opening
  handshake and encodes (masks) the request frames before the clock starts; incoming frames
  are cut by a few lines of code here, as cheap per message as the stdio client's line
  splitting, so the two clients cost about the same and the ratio ws / stdio is the servers'.
"""

from __future__ import annotations

import json
import os
import select
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Pong, TextMessage
from wsproto.events import Request as WsRequest

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
    reads: int = 0
    """Reads that returned data during the timed part: count / reads is how many answers
    arrive together, i.e. how well the server batches its writes under this load."""

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
        merged.reads += run.reads
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


def thread_sum(pid: int, name: str, read: Callable[[bytes], float]) -> float:
    """The sum over ``pid``'s live threads of ``read(/proc/PID/task/TID/<name>)``; a thread that
    ends between the listing and the read counts nothing (0 if the process is gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    total = 0.0
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/{name}", "rb") as f:
                total += read(f.read())
        except (OSError, ValueError, IndexError):
            pass
    return total


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB, from /proc/PID/status (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class LoadClient:
    """One connection: a child process spoken to over its stdin/stdout (newline-delimited)."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 600.0,
    ) -> None:
        self._spawn(argv, env, cwd, timeout)
        assert self.process.stdin is not None and self.process.stdout is not None
        self._attach(self.process.stdin.fileno(), self.process.stdout.fileno())

    def _spawn(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None,
        cwd: str | os.PathLike[str] | None,
        timeout: float,
    ) -> None:
        """Start the server child with pipes on its stdin/stdout (every client kind does)."""
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

    def _attach(self, wfd: int, rfd: int) -> None:
        self._wfd = wfd
        self._rfd = rfd
        os.set_blocking(self._wfd, False)
        os.set_blocking(self._rfd, False)
        self._rest = b""
        self._pending = bytearray()
        """Bytes due to the peer: request batches, and (WebSocket) control frames."""
        self._next_id = 1
        self.notifications = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    # -- framing (overridden by WsLoadClient) ------------------------------------------------
    def _frame(self, message: bytes) -> bytes:
        """One encoded JSON-RPC message as it goes on the wire."""
        return message + b"\n"

    def _messages(self, chunk: bytes) -> list[bytes]:
        """The complete messages in what was read so far (a partial one is kept for later)."""
        *complete, self._rest = (self._rest + chunk).split(b"\n")
        return complete

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
        self._write_all(self._frame(b'{"jsonrpc":"2.0","method":"notifications/initialized"}'))
        result: dict[str, Any] = run.results[0]
        return result

    def close(self, timeout: float = 60.0) -> int:
        """Close the child's stdin (the MCP way to stop a stdio server), drain, reap."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        deadline = time.monotonic() + timeout
        # Keep reading so a child still writing can never block on a full pipe.
        rfd = self.process.stdout.fileno()
        os.set_blocking(rfd, False)
        while time.monotonic() < deadline:
            ready, _, _ = select.select([rfd], [], [], 0.2)
            if ready:
                try:
                    if not os.read(rfd, _READ_SIZE):
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
                self._read_messages()

    def run(self, requests: Sequence[Request], window: int) -> RunResult:
        """Send ``requests`` with at most ``window`` in flight; wait for every answer.

        Timing starts at the first write and ends at the last answer; each request's latency
        runs from the write of the batch that carried it to the read of its answer.
        """
        n = len(requests)
        base = self._next_id
        self._next_id += n
        frame = self._frame
        lines = [frame(_encode(base + i, method, params)) for i, (method, params) in enumerate(requests)]
        sent_at = [0.0] * n
        latencies = [0.0] * n
        results: list[Any] = [None] * n
        errors: dict[int, dict[str, Any]] = {}
        answered = [False] * n
        pending = self._pending
        sent = done = reads = 0
        poller = select.poll()
        poller.register(self._rfd, select.POLLIN)
        writing = False
        one_fd = self._wfd == self._rfd
        perf_counter = time.perf_counter
        loads = json.loads
        split = self._messages
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
                poller.register(self._wfd, select.POLLOUT | (select.POLLIN if one_fd else 0))
                writing = True
            elif writing and not pending:
                if one_fd:  # a socket: keep waiting for input on it
                    poller.register(self._rfd, select.POLLIN)
                else:
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
            reads += 1
            for line in split(chunk):
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
        self._flush()
        return RunResult(n, seconds, latencies, results, errors, [timed], peer_cpu, client_cpu, reads)

    # -- internals --------------------------------------------------------------------------
    def _write_all(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self._wfd, view) :]
            except BlockingIOError:
                select.select([], [self._wfd], [], 1.0)

    def _flush(self) -> None:
        """Write whatever is still due (control frames queued after the last request)."""
        if self._pending:
            data = bytes(self._pending)
            self._pending.clear()
            self._write_all(data)

    def _read_messages(self) -> None:
        try:
            chunk = os.read(self._rfd, _READ_SIZE)
        except BlockingIOError:
            return
        if not chunk:
            raise ServerGone(f"server exited ({self.process.poll()})")
        self.notifications += len(self._messages(chunk))
        self._flush()


class WsLoadClient(LoadClient):
    """One WebSocket connection to a child serving MCP over WebSocket on 127.0.0.1.

    The child (``benchmarks/server.py --ws 127.0.0.1:0``) prints ``ws-port PORT`` on stdout
    once it listens, and exits when its stdin closes, as a stdio server does; ``pid``,
    ``rss_kib`` and the peer CPU figures are the child's. The request loop is
    :meth:`LoadClient.run`; only the framing differs. Server pings are answered with pongs.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 600.0,
        start_timeout: float = 60.0,
    ) -> None:
        self._spawn(argv, env, cwd, timeout)
        self.sock: socket.socket | None = None
        try:
            self.port = read_port(self.process, "ws-port", start_timeout)
            self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=start_timeout)
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._ws = WSConnection(ConnectionType.CLIENT)
            self._upgrade(start_timeout)
        except BaseException:
            if self.sock is not None:
                self.sock.close()
            self.process.kill()
            self.process.wait()
            raise
        self.sock.setblocking(False)
        self._fragments: list[bytes] = []
        self._attach(self.sock.fileno(), self.sock.fileno())

    def _upgrade(self, timeout: float) -> None:
        """The opening handshake (HTTP Upgrade), subprotocol ``mcp``, made by wsproto."""
        assert self.sock is not None
        self.sock.settimeout(timeout)
        self.sock.sendall(
            self._ws.send(WsRequest(host=f"127.0.0.1:{self.port}", target="/", subprotocols=["mcp"]))
        )
        while True:
            data = self.sock.recv(65536)
            if not data:
                raise ServerGone("server closed the connection during the WebSocket handshake")
            self._ws.receive_data(data)
            for event in self._ws.events():
                if isinstance(event, AcceptConnection):
                    if event.subprotocol != "mcp":
                        raise RuntimeError(f"server chose subprotocol {event.subprotocol!r}, not 'mcp'")
                    return
                raise RuntimeError(f"WebSocket handshake refused: {event!r}")

    def _frame(self, message: bytes) -> bytes:
        return self._ws.send(TextMessage(data=message.decode()))

    def _messages(self, chunk: bytes) -> list[bytes]:
        """Cut the payloads of complete frames out of what was read (server frames are not
        masked); answer pings, and hand back text messages (fragmented ones reassembled)."""
        buf = self._rest + chunk if self._rest else chunk
        out: list[bytes] = []
        pos, size = 0, len(buf)
        while size - pos >= 2:
            first, length = buf[pos], buf[pos + 1]
            if length & 0x80:
                raise RuntimeError("the server sent a masked frame")
            head = 2
            if length == 126:
                if size - pos < 4:
                    break
                length, head = int.from_bytes(buf[pos + 2 : pos + 4], "big"), 4
            elif length == 127:
                if size - pos < 10:
                    break
                length, head = int.from_bytes(buf[pos + 2 : pos + 10], "big"), 10
            stop = pos + head + length
            if stop > size:
                break
            payload = buf[pos + head : stop]
            pos = stop
            if first == 0x81:  # FIN + text: one whole message, the usual case
                out.append(payload)
                continue
            opcode, fin = first & 0x0F, first & 0x80
            if opcode in (0x0, 0x1):  # a fragment of a text message
                self._fragments.append(payload)
                if fin:
                    out.append(b"".join(self._fragments))
                    self._fragments.clear()
            elif opcode == 0x9:
                self._pending += self._ws.send(Pong(payload=payload))
            elif opcode == 0xA:
                pass
            elif opcode == 0x8:
                raise ServerGone(f"server closed the WebSocket: {payload[:2].hex()} {payload[2:]!r}")
            else:
                raise RuntimeError(f"unexpected WebSocket frame, opcode {opcode:#x}")
        self._rest = buf[pos:]
        return out

    def close(self, timeout: float = 60.0) -> int:
        """Closing handshake (1000), then close the child's stdin and reap it."""
        if self.sock is not None:
            try:
                self._pending.clear()
                self.sock.setblocking(True)
                self.sock.settimeout(5.0)
                self.sock.sendall(self._ws.send(CloseConnection(code=1000)))
                self.sock.shutdown(socket.SHUT_WR)
                while self.sock.recv(_READ_SIZE):  # until the server closes its side
                    pass
            except OSError:
                pass
            finally:
                self.sock.close()
                self.sock = None
        return super().close(timeout)


def _encode(request_id: int, method: str, params: dict[str, Any] | None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message, separators=(",", ":")).encode()


def read_port(process: Any, word: str, timeout: float) -> int:
    """The port in the first line ``WORD PORT`` the child prints on stdout."""
    fd = process.stdout.fileno()
    data = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in data:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the server printed no port within {timeout}s")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 4096)
            if not chunk:
                raise ServerGone(f"server exited ({process.wait()}) before listening")
            data += chunk
    line = data.split(b"\n", 1)[0].decode()
    found, _, port = line.partition(" ")
    if found != word or not port.isdigit():
        raise RuntimeError(f"expected '{word} PORT' from the server, got {line!r}")
    return int(port)
