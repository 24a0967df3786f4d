"""A lean HTTP/1.1 load client for the HTTP peers (``benchmarks/http_peers.py``).

Raw sockets and a few lines of response parsing, so that the client's own CPU stays small
beside the servers' on a 2-core machine (httpx costs several times a canned server's whole
request). Every request is encoded to bytes before the clock starts; ``connections`` keep-alive
connections each carry one request at a time (no pipelining), the next as soon as the previous
answer is complete, so at most ``connections`` requests are in flight.

:func:`run` opens fresh connections for each run and sends one request on each before the clock
starts (the first ``connections`` requests of the list: warm-up, untimed), so that no run pays
for a connection's opening and no server's keep-alive timeout matters between interleaved runs.
Responses are read by ``Content-Length`` or chunked encoding; the JSON-RPC message is the body
itself (``application/json``) or the SSE ``data:`` line that answers the request.

:func:`process_cpu` is the server's CPU time: the sum of ``/proc/PID/task/*/schedstat`` over all
its threads (Node's compiler and collector threads count).
"""

from __future__ import annotations

import json
import selectors
import socket
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .client import thread_sum

READ_SIZE = 1 << 16
ACCEPT = "application/json, text/event-stream"


def process_cpu(pid: int) -> float:
    """CPU seconds used so far by every live thread of ``pid`` (``/proc/PID/task/*/schedstat``)."""
    return thread_sum(pid, "schedstat", lambda data: int(data.split()[0])) / 1e9


def encode_request(port: int, body: bytes, headers: Mapping[str, str], path: str = "/mcp") -> bytes:
    """One POST, ready for the wire."""
    lines = [
        f"POST {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Content-Type: application/json",
        f"Accept: {ACCEPT}",
        *(f"{name}: {value}" for name, value in headers.items()),
        f"Content-Length: {len(body)}",
        "",
        "",
    ]
    return "\r\n".join(lines).encode("latin-1") + body


def rpc(request_id: int | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0"}
    if request_id is not None:
        message["id"] = request_id
    message["method"] = method
    if params is not None:
        message["params"] = params
    return json.dumps(message, separators=(",", ":")).encode()


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    body: bytes

    def message(self) -> dict[str, Any] | None:
        """The JSON-RPC response in the body (JSON, or the SSE event answering), or None."""
        if not self.body:
            return None
        if self.headers.get("content-type", "").startswith("text/event-stream"):
            found = None
            for line in self.body.split(b"\n"):
                if line.startswith(b"data:") and len(line) > 6:
                    decoded = json.loads(line[5:])
                    if isinstance(decoded, dict) and "method" not in decoded:
                        found = decoded
            return found
        decoded = json.loads(self.body)
        return decoded if isinstance(decoded, dict) else None


def parse_response(buf: bytearray) -> Response | None:
    """The first complete response in ``buf`` (removed from it), or None if it is not whole yet."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        return None
    head = buf[:end].decode("latin-1").split("\r\n")
    status = int(head[0].split(" ", 2)[1])
    headers: dict[str, str] = {}
    for line in head[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    start = end + 4
    if "content-length" in headers:
        stop = start + int(headers["content-length"])
        if len(buf) < stop:
            return None
        body = bytes(buf[start:stop])
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        parts: list[bytes] = []
        pos = start
        while True:
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            size = int(bytes(buf[pos:line_end]).split(b";")[0], 16)
            if size == 0:  # the last chunk; then trailer fields (none here) and an empty line
                trailer_end = buf.find(b"\r\n\r\n", line_end)
                if trailer_end < 0:
                    return None
                stop = trailer_end + 4
                break
            chunk_start = line_end + 2
            if len(buf) < chunk_start + size + 2:
                return None
            parts.append(bytes(buf[chunk_start : chunk_start + size]))
            pos = chunk_start + size + 2
        body = b"".join(parts)
    else:  # no body (202, 204)
        stop, body = start, b""
    del buf[:stop]
    return Response(status, headers, body)


def post(port: int, body: bytes, headers: Mapping[str, str], timeout: float = 30.0) -> Response:
    """One request on a connection of its own (set-up, never timed)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(encode_request(port, body, headers))
        buf = bytearray()
        while (response := parse_response(buf)) is None:
            data = sock.recv(READ_SIZE)
            if not data:
                raise ConnectionError("the server closed the connection before answering")
            buf += data
        return response


class Failed(RuntimeError):
    """A request was answered with an HTTP error or a JSON-RPC error."""


@dataclass
class HttpRun:
    """One timed run: its requests, seconds, latencies and the server's CPU seconds."""

    count: int
    seconds: float
    latencies: list[float]
    server_cpu: float
    client_cpu: float
    messages: list[dict[str, Any] | None] = field(default_factory=list)
    """Every answer's JSON-RPC message, the warm-up's first (when ``keep`` was asked)."""

    @classmethod
    def merge(cls, runs: Sequence[HttpRun]) -> HttpRun:
        """Several runs as one: counts, seconds and CPU add up, latencies and messages pool."""
        return cls(
            sum(r.count for r in runs),
            sum(r.seconds for r in runs),
            [latency for r in runs for latency in r.latencies],
            sum(r.server_cpu for r in runs),
            sum(r.client_cpu for r in runs),
            [m for r in runs for m in r.messages],
        )

    def percentile(self, p: float) -> float:
        if not self.latencies:
            return 0.0
        ordered = sorted(self.latencies)
        rank = min(len(ordered) - 1, max(0, round(p / 100 * len(ordered) + 0.5) - 1))
        return ordered[rank]

    def stat(self) -> dict[str, Any]:
        n = self.count
        return {
            "requests": n,
            "seconds": round(self.seconds, 4),
            "rate": round(n / self.seconds, 1) if self.seconds > 0 else 0.0,
            "cpu_us_per_request": round(self.server_cpu / n * 1e6, 2) if n else 0.0,
            "client_cpu_us_per_request": round(self.client_cpu / n * 1e6, 2) if n else 0.0,
            "p50_ms": round(self.percentile(50) * 1e3, 4),
            "p99_ms": round(self.percentile(99) * 1e3, 4),
        }


class _Conn:
    __slots__ = ("buf", "index", "sent", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buf = bytearray()
        self.index = -1
        self.sent = 0.0


def _check(response: Response, keep: bool) -> dict[str, Any] | None:
    if response.status not in (200, 202):
        raise Failed(f"HTTP {response.status}: {response.body[:300]!r}")
    if not keep and b'"error"' not in response.body:
        return None
    message = response.message()
    if message is not None and "error" in message:
        raise Failed(f"JSON-RPC error: {message['error']}")
    return message


def run(
    port: int,
    pid: int,
    requests: Sequence[bytes],
    connections: int,
    *,
    keep: bool = False,
    timeout: float = 300.0,
) -> HttpRun:
    """Warm ``connections`` fresh connections with the first ``connections`` requests, then time
    the rest. ``keep``: decode and keep every answer's message (for task ids)."""
    connections = max(1, min(connections, len(requests)))
    warm, timed = requests[:connections], requests[connections:]
    selector = selectors.DefaultSelector()
    conns: list[_Conn] = []
    messages: list[dict[str, Any] | None] = []
    try:
        for _ in range(connections):
            sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conns.append(_Conn(sock))
        for conn, request in zip(conns, warm, strict=True):  # untimed, all at once
            conn.sock.sendall(request)
        for conn in conns:
            while (response := parse_response(conn.buf)) is None:
                data = conn.sock.recv(READ_SIZE)
                if not data:
                    raise ConnectionError("the server closed a connection during the warm-up")
                conn.buf += data
            messages.append(_check(response, keep))
        for conn in conns:
            conn.sock.setblocking(False)
            selector.register(conn.sock, selectors.EVENT_READ, conn)
        n = len(timed)
        latencies = [0.0] * n
        answers: list[dict[str, Any] | None] = [None] * n
        perf_counter = time.perf_counter
        next_index = 0
        done = 0
        server_cpu = process_cpu(pid)
        client_cpu = time.process_time()
        start = perf_counter()
        give_up = start + timeout
        for conn in conns:
            if next_index < n:
                conn.index = next_index
                conn.sent = perf_counter()
                conn.sock.send(timed[next_index])
                next_index += 1
        while done < n:
            events = selector.select(1.0)
            if not events and perf_counter() > give_up:
                raise TimeoutError(f"{n - done} of {n} answers missing after {timeout}s")
            for key, _ in events:
                conn = key.data
                data = conn.sock.recv(READ_SIZE)
                if not data:
                    raise ConnectionError(f"the server closed a connection with {n - done} answers due")
                conn.buf += data
                response = parse_response(conn.buf)
                if response is None:
                    continue
                now = perf_counter()
                latencies[conn.index] = now - conn.sent
                answers[conn.index] = _check(response, keep)
                done += 1
                if next_index < n:
                    conn.index = next_index
                    conn.sent = now
                    sent = conn.sock.send(timed[next_index])
                    if sent != len(timed[next_index]):  # never for these small requests
                        conn.sock.setblocking(True)
                        conn.sock.sendall(timed[next_index][sent:])
                        conn.sock.setblocking(False)
                    next_index += 1
        seconds = perf_counter() - start
        server_cpu = process_cpu(pid) - server_cpu
        client_cpu = time.process_time() - client_cpu
    finally:
        selector.close()
        for conn in conns:
            conn.sock.close()
    return HttpRun(n, seconds, latencies, server_cpu, client_cpu, messages + answers if keep else [])
