"""Our HTTP/1.1 server (``trio_mcp.transports.h11_server``) over real sockets on 127.0.0.1:
keep-alive, deadlines, size limits, connection caps, streaming, disconnects, backpressure,
TLS and draining, each against a small application written here twice, the same behaviour
as an ASGI application and as a native one (``serve_request``): every test runs with both."""

from __future__ import annotations

import ssl
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio.testing import MockClock

from trio_mcp.transports.h11_server import ClientDisconnected, H11Server, Request

Scope = dict[str, Any]


class Recorder:
    """What the test application saw."""

    def __init__(self) -> None:
        self.disconnected = trio.Event()
        self.send_failed = trio.Event()
        self.release = trio.Event()
        self.started = trio.Event()
        self.bodies: list[bytes] = []


def make_app(rec: Recorder) -> Any:
    async def app(scope: Scope, receive: Any, send: Any) -> None:
        path = scope["path"]
        if path == "/echo":  # the whole body back, as one JSON-ish answer
            chunks = []
            while True:
                message = await receive()
                if message["type"] == "http.disconnect":
                    return
                chunks.append(message["body"])
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            rec.bodies.append(body)
            await send(
                {"type": "http.response.start", "status": 200, "headers": [(b"x-len", b"%d" % len(body))]}
            )
            await send({"type": "http.response.body", "body": body})
        elif path == "/stream":  # SSE events, each sent when the test releases it
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
            await rec.release.wait()
            await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/wait-disconnect":  # hold the response until the client goes
            await receive()  # the (empty) body
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"start\n", "more_body": True})
            rec.started.set()
            message = await receive()
            assert message["type"] == "http.disconnect"
            rec.disconnected.set()
        elif path == "/flood":  # write until the client's not reading stops us
            await send({"type": "http.response.start", "status": 200, "headers": []})
            rec.started.set()
            try:
                while True:
                    await send({"type": "http.response.body", "body": b"x" * 65536, "more_body": True})
            except ClientDisconnected:
                rec.send_failed.set()
        elif path == "/slow":  # in flight until released
            rec.started.set()
            await rec.release.wait()
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"slow done"})
        else:
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": scope["client"][0].encode()})

    return app


class NativeApp:
    """``make_app``'s application, served natively: the server hands it each :class:`Request`."""

    def __init__(self, rec: Recorder) -> None:
        self.rec = rec

    async def serve_request(self, request: Request) -> None:
        rec = self.rec
        path = request.path
        if path == "/echo":
            chunks = []
            while True:
                part = await request.read()
                if part is None:  # the client went away
                    return
                if not part:
                    break
                chunks.append(part)
            body = b"".join(chunks)
            rec.bodies.append(body)
            request.start(200, [(b"x-len", b"%d" % len(body))])
            await request.end(body)  # ended before anything was written: content-length
        elif path == "/stream":
            request.start(200, [(b"content-type", b"text/event-stream")])
            await request.write(b"data: one\n\n")
            await rec.release.wait()
            await request.write(b"data: two\n\n")
            await request.end()
        elif path == "/wait-disconnect":
            assert await request.read() == b""
            request.start(200, [])
            await request.write(b"start\n")
            rec.started.set()
            await request.wait_disconnect()
            assert request.gone
            rec.disconnected.set()
        elif path == "/flood":
            request.start(200, [])
            rec.started.set()
            try:
                while True:
                    await request.write(b"x" * 65536)
            except ClientDisconnected:
                rec.send_failed.set()
        elif path == "/slow":
            rec.started.set()
            await rec.release.wait()
            await request.respond(200, [], b"slow done")
        else:
            assert request.client is not None
            await request.respond(200, [], request.client[0].encode())


@pytest.fixture(params=["asgi", "native"])
def kind(request: pytest.FixtureRequest) -> str:
    """Which of the two applications ``serving`` serves."""
    return str(request.param)


@asynccontextmanager
async def serving(rec: Recorder, kind: str, **kwargs: Any) -> AsyncIterator[tuple[int, H11Server]]:
    server = H11Server(NativeApp(rec) if kind == "native" else make_app(rec), **kwargs)
    assert (server.native is not None) == (kind == "native")
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve, listeners)
        yield port, server
        nursery.cancel_scope.cancel()


class Raw:
    """A raw HTTP/1.1 client connection: bytes out, responses parsed by hand (so that requests
    can be anything: pipelined, malformed, unfinished)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = b""

    @classmethod
    async def open(cls, port: int, local: str | None = None) -> Raw:
        if local is None:
            return cls(await trio.open_tcp_stream("127.0.0.1", port))
        sock = trio.socket.socket()
        await sock.bind((local, 0))
        await sock.connect(("127.0.0.1", port))
        return cls(trio.SocketStream(sock))

    async def _more(self) -> bool:
        try:
            data = await self.stream.receive_some(65536)
        except trio.BrokenResourceError:
            data = b""
        self.buffer += data
        return bool(data)

    async def _until(self, marker: bytes) -> bytes | None:
        while marker not in self.buffer:
            if not await self._more():
                return None
        found, _, self.buffer = self.buffer.partition(marker)
        return found

    async def _exactly(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not await self._more():
                raise AssertionError("connection closed mid-body")
        found, self.buffer = self.buffer[:n], self.buffer[n:]
        return found

    async def response(self) -> tuple[int, dict[bytes, bytes], bytes]:
        """The next whole response: status, headers, body. Status 0 if the server closed first."""
        while True:
            head = await self._until(b"\r\n\r\n")
            if head is None:
                return 0, {}, b""
            line, *fields = head.split(b"\r\n")
            status = int(line.split()[1])
            headers = {k.strip().lower(): v.strip() for k, _, v in (f.partition(b":") for f in fields)}
            if status >= 200:
                break
        if b"content-length" in headers:
            return status, headers, await self._exactly(int(headers[b"content-length"]))
        body = b""
        while True:
            size = int(await self._until(b"\r\n") or b"0", 16)
            if size == 0:
                await self._until(b"\r\n")
                return status, headers, body
            body += await self._exactly(size)
            await self._exactly(2)

    async def closed(self) -> bool:
        """Whether the server closed the connection (reads to EOF)."""
        while await self._more():
            pass
        return True


def request(method: str, path: str, body: bytes = b"", **headers: str) -> bytes:
    lines = [f"{method} {path} HTTP/1.1", "host: 127.0.0.1"]
    lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
    if body and "transfer_encoding" not in headers:
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


async def test_keep_alive_pipelining_chunked_and_connection_close(kind: str) -> None:
    rec = Recorder()
    with trio.fail_after(10):
        async with serving(rec, kind) as (port, server):
            raw = await Raw.open(port)
            # three requests on one connection, the last two pipelined in one write
            await raw.stream.send_all(request("POST", "/echo", b"first"))
            assert (await raw.response())[2] == b"first"
            chunked = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
            await raw.stream.send_all(
                request("POST", "/echo", chunked, transfer_encoding="chunked") + request("GET", "/")
            )
            status, headers, body = await raw.response()
            assert (status, body, headers[b"x-len"]) == (200, b"hello world", b"11")
            assert (await raw.response())[2] == b"127.0.0.1"
            assert len(server.connections) == 1
            # Connection: close is honoured: answered, then closed
            await raw.stream.send_all(request("GET", "/", connection="close"))
            status, headers, _ = await raw.response()
            assert status == 200 and headers[b"connection"] == b"close"
            assert await raw.closed()
            # Expect: 100-continue gets its interim answer, then the body is read
            async with httpx.AsyncClient() as http:
                answer = await http.post(
                    f"http://127.0.0.1:{port}/echo", content=b"x" * 5000, headers={"expect": "100-continue"}
                )
                assert answer.status_code == 200 and answer.content == b"x" * 5000


@pytest.fixture
def clock() -> MockClock:
    """Real time, plus jumps: the test moves past a deadline at once instead of waiting."""
    return MockClock(rate=1)


async def test_deadlines_answer_408_and_idle_connections_close(clock: MockClock, kind: str) -> None:
    rec = Recorder()
    timeouts = {"header_timeout": 30, "body_timeout": 30, "keepalive_timeout": 30}
    with trio.fail_after(1000):  # virtual seconds: the test jumps the clock
        async with serving(rec, kind, **timeouts) as (port, server):
            # a head that never ends
            slow_head = await Raw.open(port)
            await slow_head.stream.send_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
            # a body that never comes, and a chunked body without its end
            silent = await Raw.open(port)
            await silent.stream.send_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nabc")
            endless = await Raw.open(port)
            await endless.stream.send_all(
                request("POST", "/echo", b"5\r\nhello\r\n", transfer_encoding="chunked")
            )
            # a body that trickles in, a byte at a time: the deadline is for the whole body
            drip = await Raw.open(port)
            await drip.stream.send_all(b"POST /echo HTTP/1.1\r\nhost: x\r\ncontent-length: 1000\r\n\r\n")

            async def trickle() -> None:
                try:
                    while True:
                        await drip.stream.send_all(b"a")
                        await trio.sleep(0.02)
                        clock.jump(1)  # 50 s of virtual time per real second: still never done
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass

            # a connection that says nothing at all, and one idle after a request
            mute = await Raw.open(port)
            idle = await Raw.open(port)
            await idle.stream.send_all(request("GET", "/"))
            assert (await idle.response())[0] == 200
            await trio.sleep(0.1)
            assert len(server.connections) == 6  # nothing is late yet
            async with trio.open_nursery() as nursery:
                nursery.start_soon(trickle)
                for raw in (drip, slow_head, silent, endless):
                    if raw is not drip:
                        clock.jump(31)
                    assert (await raw.response())[0] == 408
                nursery.cancel_scope.cancel()
            assert await mute.closed() and await idle.closed()
            while server.connections:  # noqa: ASYNC110
                await trio.sleep(0.01)
            # and the server goes on serving
            fresh = await Raw.open(port)
            await fresh.stream.send_all(request("GET", "/"))
            assert (await fresh.response())[0] == 200


async def test_size_limits_431_and_413(kind: str) -> None:
    rec = Recorder()
    with trio.fail_after(10):
        async with serving(rec, kind, max_header_size=1024, max_body_size=1000) as (port, _):
            big_head = await Raw.open(port)
            await big_head.stream.send_all(request("GET", "/", x_big="a" * 4000))
            assert (await big_head.response())[0] == 431
            declared = await Raw.open(port)
            await declared.stream.send_all(request("POST", "/echo", b"a" * 2000))
            assert (await declared.response())[0] == 413
            chunked = await Raw.open(port)
            body = b"".join(b"100\r\n" + b"a" * 256 + b"\r\n" for _ in range(8)) + b"0\r\n\r\n"
            await chunked.stream.send_all(request("POST", "/echo", body, transfer_encoding="chunked"))
            assert (await chunked.response())[0] == 413
            assert rec.bodies == []
            ok = await Raw.open(port)
            await ok.stream.send_all(request("POST", "/echo", b"a" * 1000))
            assert (await ok.response())[2] == b"a" * 1000


async def test_connection_cap_is_fair_per_address_and_evicts_idle(kind: str) -> None:
    rec = Recorder()
    with trio.fail_after(10):
        async with serving(rec, kind, max_connections=4, max_connections_per_address=2) as (port, server):
            first = [await Raw.open(port), await Raw.open(port)]
            for raw in first:  # both served (and then idle, kept alive)
                await raw.stream.send_all(request("GET", "/"))
                assert (await raw.response())[0] == 200
            third = await Raw.open(port)  # a third from 127.0.0.1: refused
            status, headers, _ = await third.response()
            assert status == 503 and b"retry-after" in headers
            # another address still gets in, up to the total; past it the idle ones make room
            others = [await Raw.open(port, local="127.0.0.2") for _ in range(2)]
            for raw in others:
                await raw.stream.send_all(request("GET", "/"))
                assert (await raw.response())[2] == b"127.0.0.2"
            newcomer = await Raw.open(port, local="127.0.0.3")
            await newcomer.stream.send_all(request("GET", "/"))
            assert (await newcomer.response())[2] == b"127.0.0.3"
            assert await first[0].closed()  # the connection idle the longest was closed
            assert len(server.connections) == 4


async def test_streaming_flushes_each_event_and_the_app_sees_disconnects(kind: str) -> None:
    rec = Recorder()
    with trio.fail_after(10):
        async with serving(rec, kind) as (port, _), httpx.AsyncClient() as http:
            async with http.stream("GET", f"http://127.0.0.1:{port}/stream") as response:
                chunks = response.aiter_raw()
                assert await chunks.__anext__() == b"data: one\n\n"  # before the app sends more
                rec.release.set()
                assert b"".join([c async for c in chunks]) == b"data: two\n\n"
            raw = await Raw.open(port)
            await raw.stream.send_all(request("GET", "/wait-disconnect"))
            await rec.started.wait()
            await raw.stream.aclose()
            await rec.disconnected.wait()


async def test_a_client_that_does_not_read_holds_the_writer_then_is_dropped(kind: str) -> None:
    rec = Recorder()
    with trio.fail_after(10):
        async with serving(rec, kind, write_timeout=0.3) as (port, server):
            raw = await Raw.open(port)
            await raw.stream.send_all(request("GET", "/flood"))
            await rec.started.wait()
            await rec.send_failed.wait()  # backpressure, then the write deadline: ClientDisconnected
            while server.connections:  # noqa: ASYNC110
                await trio.sleep(0.01)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    where: Path = tmp_path_factory.mktemp("tls")
    cert, key = str(where / "cert.pem"), str(where / "key.pem")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-keyout",
            key,
            "-out",
            cert,
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    return cert, key


async def test_tls(certificate: tuple[str, str], kind: str) -> None:
    cert, key = certificate
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    rec = Recorder()
    with trio.fail_after(10):
        async with serving(rec, kind, ssl_context=context) as (port, _):
            async with httpx.AsyncClient(verify=ssl.create_default_context(cafile=cert)) as http:
                for n in range(3):  # keep-alive over TLS
                    answer = await http.post(f"https://127.0.0.1:{port}/echo", content=b"secret %d" % n)
                    assert answer.content == b"secret %d" % n
                with pytest.raises(httpx.HTTPError):
                    await http.get(f"http://127.0.0.1:{port}/")  # plain HTTP on the TLS port


async def test_draining_refuses_new_requests_and_lets_the_running_one_finish(kind: str) -> None:
    rec = Recorder()
    with trio.fail_after(10):
        async with serving(rec, kind) as (port, server):
            busy, idle = await Raw.open(port), await Raw.open(port)
            await idle.stream.send_all(request("GET", "/"))
            assert (await idle.response())[0] == 200
            await busy.stream.send_all(request("GET", "/slow"))
            await rec.started.wait()
            server.drain()
            await idle.stream.send_all(request("GET", "/"))  # on a live keep-alive connection
            status, headers, _ = await idle.response()
            assert status == 503 and headers[b"retry-after"] and headers[b"connection"] == b"close"
            with pytest.raises(OSError):
                await trio.open_tcp_stream("127.0.0.1", port)  # no longer accepting
            assert server.in_progress == 1
            rec.release.set()
            status, headers, body = await busy.response()
            assert (status, body, headers[b"connection"]) == (200, b"slow done", b"close")


async def test_serve_http_over_tls(certificate: tuple[str, str]) -> None:
    from functools import partial

    from trio_mcp import Server
    from trio_mcp.client import connect_http
    from trio_mcp.server import serve_http

    cert, key = certificate
    server = Server("tls")

    @server.tool()
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(partial(serve_http, server, tls_cert=cert, tls_key=key))
            verify = ssl.create_default_context(cafile=cert)
            for protocol in ("2025-11-25", "2026-07-28"):
                async with connect_http(
                    f"https://127.0.0.1:{port}/mcp", protocol=protocol, verify=verify
                ) as client:
                    assert (await client.call_tool("echo", {"text": protocol})).text == protocol
            nursery.cancel_scope.cancel()
