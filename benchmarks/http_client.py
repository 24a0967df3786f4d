"""A load client for Streamable HTTP (2025-11-25 era, one session), with the same interface as
:class:`benchmarks.client.LoadClient`, so the stdio workloads run over HTTP unchanged.

The child is ``benchmarks/server.py --http 127.0.0.1:0``: it prints ``http-port PORT`` once it
listens and exits when its stdin closes. :meth:`HttpLoadClient.handshake` POSTs ``initialize``
(the answer carries ``Mcp-Session-Id``) and ``notifications/initialized``; every later request
is one POST with that session id, ``tools/call`` answered on an SSE stream and the task queries
with one JSON object (see ``docs/http.md``). No GET stream is opened: task status notifications
wait in the session's bounded event buffer, as they would for a client that does not listen.

Each :meth:`~HttpLoadClient.run` is one ``trio.run`` with an ``httpx.AsyncClient`` (HTTP/1.1)
and ``window`` workers taking the next request as soon as their previous one is answered, so at
most ``window`` requests are in flight, each on its own keep-alive connection. The connections
are opened (``window`` pings) before the clock starts. Request bodies are encoded before the
clock starts, as in the stdio client. httpx costs far more CPU per request than the stdio
client's few lines of framing; the client's CPU is reported next to the server's, and on
2 cores the server's CPU per request is the figure to compare.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import trio

from .client import (
    PROTOCOL_VERSION,
    LoadClient,
    Request,
    RunResult,
    _encode,
    cpu_seconds,
    read_port,
)

SSE_DATA = "data:"


class HttpLoadClient(LoadClient):
    """One MCP session over Streamable HTTP to a child serving ``/mcp`` on 127.0.0.1."""

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
        try:
            self.port = read_port(self.process, "http-port", start_timeout)
        except BaseException:
            self.process.kill()
            self.process.wait()
            raise
        self.url = f"http://127.0.0.1:{self.port}/mcp"
        self.session_id: str | None = None
        self._next_id = 1
        self.notifications = 0

    def _headers(self) -> dict[str, str]:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL_VERSION,
        }
        if self.session_id is not None:
            headers["Mcp-Session-Id"] = self.session_id
        return headers

    def handshake(self) -> dict[str, Any]:
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "trio-mcp-bench", "version": "0.1.0"},
        }
        headers = self._headers()
        headers.pop("MCP-Protocol-Version")
        with httpx.Client(timeout=30.0) as client:
            response = client.post(self.url, content=_encode(0, "initialize", params), headers=headers)
            response.raise_for_status()
            self.session_id = response.headers["mcp-session-id"]
            answer = _answer(response.headers.get("content-type", ""), response.text, 0)
            if "error" in answer:
                raise RuntimeError(f"initialize failed: {answer['error']}")
            note = client.post(
                self.url,
                content=b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                headers=self._headers(),
            )
            if note.status_code != 202:
                raise RuntimeError(f"notifications/initialized: HTTP {note.status_code}")
        result: dict[str, Any] = answer["result"]
        return result

    def settle(self, seconds: float) -> None:
        time.sleep(seconds)

    def run(self, requests: Sequence[Request], window: int) -> RunResult:
        return trio.run(self._run, requests, window)

    async def _run(self, requests: Sequence[Request], window: int) -> RunResult:
        n = len(requests)
        base = self._next_id
        self._next_id += n + window
        bodies = [_encode(base + i, method, params) for i, (method, params) in enumerate(requests)]
        pings = [_encode(base + n + i, "ping", None) for i in range(window)]
        latencies = [0.0] * n
        results: list[Any] = [None] * n
        errors: dict[int, dict[str, Any]] = {}
        headers = self._headers()
        workers = max(1, min(window, n))
        limits = httpx.Limits(max_connections=workers, max_keepalive_connections=workers)
        timeout = httpx.Timeout(self.timeout)
        async with httpx.AsyncClient(limits=limits, timeout=timeout) as client:

            async def post(body: bytes, request_id: int) -> dict[str, Any]:
                response = await client.post(self.url, content=body, headers=headers)
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
                return _answer(response.headers.get("content-type", ""), response.text, request_id)

            async with trio.open_nursery() as nursery:  # open the connections, untimed
                for i in range(workers):
                    nursery.start_soon(post, pings[i], base + n + i)

            todo = iter(range(n))
            perf_counter = time.perf_counter

            async def worker() -> None:
                for i in todo:
                    sent = perf_counter()
                    message = await post(bodies[i], base + i)
                    latencies[i] = perf_counter() - sent
                    if "error" in message:
                        errors[i] = message["error"]
                    else:
                        results[i] = message.get("result")

            pid = self.process.pid
            peer_cpu = cpu_seconds(pid)
            client_cpu = time.process_time()
            started = time.monotonic()
            start = perf_counter()
            async with trio.open_nursery() as nursery:
                for _ in range(workers):
                    nursery.start_soon(worker)
            seconds = perf_counter() - start
            timed = (started, time.monotonic())
            client_cpu = time.process_time() - client_cpu
            peer_cpu = cpu_seconds(pid) - peer_cpu
        return RunResult(n, seconds, latencies, results, errors, [timed], peer_cpu, client_cpu, n)

    def close(self, timeout: float = 60.0) -> int:
        """DELETE the session (its tasks go with it), then close the child's stdin and reap it."""
        if self.session_id is not None and self.process.poll() is None:
            try:
                with httpx.Client(timeout=10.0) as client:
                    client.delete(self.url, headers=self._headers())
            except httpx.HTTPError:
                pass
            self.session_id = None
        return super().close(timeout)


def _answer(content_type: str, text: str, request_id: int) -> dict[str, Any]:
    """The JSON-RPC response in a POST's body: the body itself, or the SSE event carrying it."""
    if content_type.startswith("application/json"):
        message: dict[str, Any] = json.loads(text)
        return message
    for line in text.splitlines():
        if line.startswith(SSE_DATA) and len(line) > len(SSE_DATA) + 1:
            message = json.loads(line[len(SSE_DATA) :])
            if message.get("id") == request_id and "method" not in message:
                return message
    raise RuntimeError(f"no response to request {request_id} in the SSE stream: {text[:200]!r}")
