"""Tests for the WebSocket transport, server and client (real sockets on 127.0.0.1)."""

from __future__ import annotations

import datetime
import ipaddress
import itertools
import json
import socket
import ssl
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio_websocket
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

from trio_mcp import McpError, Server, ServerRuntime
from trio_mcp.client import ConnectionClosed, connect, connect_websocket
from trio_mcp.server import serve_websocket
from trio_mcp.transports.security import DEFAULT_ALLOWED_ORIGINS
from trio_mcp.transports.websocket import (
    DEFAULT_MAX_MESSAGE_SIZE,
    WebSocketTransport,
    open_websocket_transport,
    parse_host_port,
)

pytestmark = pytest.mark.every_store  # make test runs it again on each store

LIMIT = 4096  # max_message_size of the test servers
INVALID_PARAMS = -32602
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
INITIALIZE = {
    "protocolVersion": "2025-11-25",
    "capabilities": {},
    "clientInfo": {"name": "raw-test-client", "version": "0"},
}


# ----------------------------------------------------------------------------- fixtures


class Probe:
    """What the test tools report: which ran, which ended, which were cancelled."""

    def __init__(self) -> None:
        self.started: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.ended: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.release: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.cancelled: set[str] = set()
        self.calls: list[str] = []


def make_server(probe: Probe) -> Server:
    server = Server("ws-test", version="1.0")

    @server.tool()
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    async def tagged(tag: str, delay: float) -> str:
        """Sleep ``delay`` seconds, return the tag."""
        probe.calls.append(tag)
        await trio.sleep(delay)
        return tag

    @server.tool()
    async def hold(key: str) -> str:
        """Run until released (or cancelled); records both."""
        probe.started[key].set()
        try:
            await probe.release[key].wait()
            return f"released {key}"
        except BaseException:
            probe.cancelled.add(key)
            raise
        finally:
            probe.ended[key].set()

    return server


@pytest.fixture
def probe() -> Probe:
    return Probe()


@pytest.fixture
def server(probe: Probe) -> Server:
    return make_server(probe)


@asynccontextmanager
async def serving(server_or_runtime: Any, **kwargs: Any) -> AsyncIterator[int]:
    """Run serve_websocket in the background; yield its port; stop it on exit."""
    kwargs.setdefault("max_message_size", LIMIT)
    async with trio.open_nursery() as nursery:
        port: int = await nursery.start(partial(serve_websocket, server_or_runtime, **kwargs))
        yield port
        nursery.cancel_scope.cancel()


def url(port: int, scheme: str = "ws") -> str:
    return f"{scheme}://127.0.0.1:{port}/mcp"


class RawClient:
    """A bare WebSocket client on wsproto: the test decides every frame and every read."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.events: deque[Event] = deque()
        self.ids = itertools.count(1)

    @classmethod
    @asynccontextmanager
    async def open(cls, port: int, *, receive_buffer: int | None = None) -> AsyncIterator[RawClient]:
        sock = trio.socket.socket()
        if receive_buffer is not None:  # a small kernel buffer: a client that stops reading jams sooner
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        await sock.connect(("127.0.0.1", port))
        async with trio.SocketStream(sock) as stream:
            yield cls(stream)

    async def handshake(
        self, subprotocols: Iterable[str] = ("mcp",), headers: Iterable[tuple[bytes, bytes]] = ()
    ) -> Event:
        request = Request(
            host="127.0.0.1", target="/mcp", subprotocols=list(subprotocols), extra_headers=list(headers)
        )
        await self.stream.send_all(self.ws.send(request))
        event = await self.next_event()
        assert isinstance(event, AcceptConnection | RejectConnection), event
        return event

    async def next_event(self) -> Event:
        while not self.events:
            data = await self.stream.receive_some(65536)
            if not data:
                raise EOFError
            self.ws.receive_data(data)
            self.events.extend(self.ws.events())
        return self.events.popleft()

    async def send_json(self, message: dict[str, Any], *, pad: int = 0) -> None:
        # JSON allows whitespace around values: padding makes a big but valid message.
        await self.stream.send_all(self.ws.send(TextMessage(json.dumps(message) + " " * pad)))

    def encode_request(self, method: str, params: dict[str, Any] | None = None, *, pad: int = 0) -> bytes:
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params or {}}
        return self.ws.send(TextMessage(json.dumps(message) + " " * pad))

    async def receive_json(self) -> dict[str, Any]:
        """The next message (answering pings on the way)."""
        parts: list[str] = []
        while True:
            event = await self.next_event()
            if isinstance(event, Ping):
                await self.stream.send_all(self.ws.send(event.response()))
            elif isinstance(event, TextMessage):
                parts.append(event.data)
                if event.message_finished:
                    message: dict[str, Any] = json.loads("".join(parts))
                    return message
            elif isinstance(event, CloseConnection):
                raise EOFError(event.code)

    async def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        request_id = next(self.ids)
        await self.send_json({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params or {}})
        while True:
            message = await self.receive_json()
            if message.get("id") == request_id:
                return message

    async def initialize(self) -> None:
        reply = await self.request("initialize", INITIALIZE)
        assert "result" in reply, reply
        await self.send_json({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def read_until_closed(self) -> None:
        """Read (and discard) until the server has closed the TCP connection."""
        while True:
            try:
                data = await self.stream.receive_some(1 << 20)
            except trio.BrokenResourceError:  # connection reset
                return
            if not data:
                return


async def rpc(transport: WebSocketTransport, request_id: int, method: str, params: dict[str, Any]) -> Any:
    """One request on a bare transport; returns the decoded response."""
    await transport.send(
        json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()
    )
    while True:
        message = json.loads(await transport.receive_bytes())
        if message.get("id") == request_id:
            return message


async def expect_rejected(status: int, port: int, **kwargs: Any) -> trio_websocket.ConnectionRejected:
    with pytest.raises(trio_websocket.ConnectionRejected) as excinfo:
        async with open_websocket_transport(url(port), **kwargs):
            pytest.fail("the handshake should have been refused")
    assert excinfo.value.status_code == status
    return excinfo.value


async def expect_error(code: int, call: Any) -> None:
    with pytest.raises(McpError) as excinfo:
        await call
    assert excinfo.value.code == code


# ----------------------------------------------------------------------------- handshake


async def test_round_trip_and_task(server: Server) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, connect_websocket(url(port)) as client:
            assert client.server is not None and client.server.server_info.name == "ws-test"
            assert (await client.call_tool("echo", {"text": "héllo"})).text == "héllo"
            created = await client.call_tool_as_task("tagged", {"tag": "t", "delay": 0})
            assert (await client.task_result(created.task.task_id)).text == "t"


@pytest.mark.parametrize(
    ("offered", "selected"),
    [(["mcp"], "mcp"), (["other", "mcp"], "mcp"), ([], None)],
    ids=["mcp", "other-and-mcp", "none"],
)
async def test_subprotocol_accepted(server: Server, offered: list[str], selected: str | None) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, RawClient.open(port) as raw:
            accepted = await raw.handshake(subprotocols=offered)
            assert isinstance(accepted, AcceptConnection)
            assert accepted.subprotocol == selected
            await raw.initialize()
            reply = await raw.request("tools/call", {"name": "echo", "arguments": {"text": "hi"}})
            assert reply["result"]["content"][0]["text"] == "hi"


async def test_only_other_subprotocols_refused(server: Server) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, RawClient.open(port) as raw:
            refused = await raw.handshake(subprotocols=["graphql-ws", "wamp"])
            assert isinstance(refused, RejectConnection)
            assert refused.status_code == 400


async def test_client_negotiates_mcp(server: Server) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, open_websocket_transport(url(port)) as transport:
            assert transport.connection.subprotocol == "mcp"


@pytest.mark.parametrize(
    "origin",
    [
        "https://evil.example",
        "http://localhost.evil.example",
        "http://127.0.0.1.nip.io:8080",
        "null",
        "file://",
        "not an origin",
        "ftp://localhost",
    ],
)
async def test_foreign_origin_refused_403(server: Server, origin: str) -> None:
    with trio.fail_after(5):
        async with serving(server) as port:
            if " " in origin:  # our client refuses to send it; a raw one can
                async with RawClient.open(port) as raw:
                    refused = await raw.handshake(headers=[(b"Origin", origin.encode())])
                    assert isinstance(refused, RejectConnection) and refused.status_code == 403
            else:
                await expect_rejected(403, port, origin=origin)


@pytest.mark.parametrize(
    "origin",
    [
        None,
        "http://localhost:5173",
        "https://localhost",
        "http://127.0.0.1:8080",
        "https://127.0.0.1",
        "http://[::1]:3000",
        "HTTP://LOCALHOST:1",
    ],
)
async def test_local_or_absent_origin_allowed(server: Server, origin: str | None) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, connect_websocket(url(port), origin=origin) as client:
            assert (await client.call_tool("echo", {"text": "ok"})).text == "ok"


async def test_custom_allowed_origins(server: Server) -> None:
    with trio.fail_after(5):
        allowed = ["https://app.example", "http://dev.example:*"]
        async with serving(server, allowed_origins=allowed) as port:
            for origin in ("https://app.example", "https://app.example:443", "http://dev.example:9999"):
                async with open_websocket_transport(url(port), origin=origin):
                    pass
            for origin in ("https://app.example:8443", "http://app.example", "http://localhost:3000"):
                await expect_rejected(403, port, origin=origin)
        async with serving(server, allowed_origins=lambda origin: origin.endswith(".trusted")) as port:
            async with open_websocket_transport(url(port), origin="https://a.trusted"):
                pass
            await expect_rejected(403, port, origin="https://a.untrusted")
        async with serving(server, allowed_origins=["*"]) as port:
            async with open_websocket_transport(url(port), origin="https://anything.example"):
                pass
    with pytest.raises(ValueError):
        await serve_websocket(server, allowed_origins=["localhost"])


def test_default_allowed_origins_are_local_only() -> None:
    hosts = {entry.split("://", 1)[1].rsplit(":", 1)[0] for entry in DEFAULT_ALLOWED_ORIGINS}
    assert hosts == {"localhost", "127.0.0.1", "[::1]"}
    assert DEFAULT_MAX_MESSAGE_SIZE == 4 * 1024 * 1024


async def test_bearer_token(server: Server, probe: Probe) -> None:
    async def authenticate(token: str) -> str | None:  # async authenticators work too
        await trio.lowlevel.checkpoint()
        return TOKENS.get(token)

    with trio.fail_after(5):
        for auth in (TOKENS.get, authenticate):
            async with serving(server, authenticate=auth) as port:
                refused = await expect_rejected(401, port)
                assert (b"www-authenticate", b'Bearer realm="mcp"') in [
                    (k.lower(), v) for k, v in refused.headers
                ]
                await expect_rejected(401, port, token="wrong-token")
                async with RawClient.open(port) as raw:  # not the Bearer scheme
                    refused_raw = await raw.handshake(headers=[(b"Authorization", b"Basic dG9rLWFsaWNl")])
                    assert isinstance(refused_raw, RejectConnection) and refused_raw.status_code == 401
                async with connect_websocket(url(port), token="tok-alice") as client:
                    assert (await client.call_tool("echo", {"text": "authorized"})).text == "authorized"
    with pytest.raises(ValueError):
        async with open_websocket_transport("ws://127.0.0.1:1/", token="bad token\r\nX-Injected: 1"):
            pass


async def test_failing_authenticator_refuses_500_and_server_survives(server: Server) -> None:
    def authenticate(token: str) -> str | None:
        if token == "boom":
            raise RuntimeError("auth backend down")
        return TOKENS.get(token)

    with trio.fail_after(5):
        async with serving(server, authenticate=authenticate) as port:
            await expect_rejected(500, port, token="boom")
            async with connect_websocket(url(port), token="tok-bob") as client:
                await client.ping()


async def test_a_failing_session_is_logged_and_others_go_on(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    class FlakyRuntime(ServerRuntime):
        """Crashes while serving its first connection, like a bug in a session would."""

        failures = 1

        async def serve(self, transport: Any, *, owner: str | None = None, **options: Any) -> None:
            if FlakyRuntime.failures:
                FlakyRuntime.failures -= 1
                raise RuntimeError("bug in a session")
            await super().serve(transport, owner=owner, **options)

    with trio.fail_after(5):
        async with server.open() as runtime:
            flaky = FlakyRuntime(runtime.server, runtime.supervisor)
            async with serving(flaky) as port:
                async with open_websocket_transport(url(port)) as transport:
                    with pytest.raises(trio.EndOfChannel):
                        await transport.receive_bytes()
                async with connect_websocket(url(port)) as client:
                    assert (await client.call_tool("echo", {"text": "fine"})).text == "fine"
    assert any("bug in a session" in record.getMessage() for record in caplog.records)


async def test_silent_connection_dropped_after_handshake_timeout(server: Server) -> None:
    with trio.fail_after(5):
        async with serving(server, handshake_timeout=0.2) as port, RawClient.open(port) as raw:
            await raw.stream.send_all(b"GET /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
            started = trio.current_time()
            await raw.read_until_closed()
            assert trio.current_time() - started < 2


# ----------------------------------------------------------------------------- framing and close


async def test_binary_frame_closes_1003(server: Server) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, open_websocket_transport(url(port)) as transport:
            await transport.connection.send_message(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
            with pytest.raises(trio.EndOfChannel):
                await transport.receive_bytes()
            assert transport.close_reason is not None and transport.close_reason.code == 1003


@pytest.mark.parametrize(
    "payload",
    ["x" * (LIMIT + 1), "€" * (LIMIT // 3 + 1)],  # the second is under LIMIT characters but over LIMIT bytes
    ids=["ascii", "multibyte"],
)
async def test_oversized_message_closes_1009(server: Server, payload: str) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, open_websocket_transport(url(port)) as transport:
            await transport.send(payload.encode())
            with pytest.raises(trio.EndOfChannel):
                await transport.receive_bytes()
            assert transport.close_reason is not None and transport.close_reason.code == 1009


async def test_message_of_exactly_the_limit_passes(server: Server) -> None:
    def request(text: str) -> bytes:
        params = {"name": "echo", "arguments": {"text": text}}
        message = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": params}
        return json.dumps(message, ensure_ascii=False).encode()

    text = "é" * ((LIMIT - len(request(""))) // 2)  # 2 bytes each in UTF-8
    if len(request(text)) < LIMIT:
        text += "a"
    assert len(request(text)) == LIMIT
    with trio.fail_after(5):
        async with serving(server) as port, open_websocket_transport(url(port)) as transport:
            assert "result" in await rpc(transport, 1, "initialize", INITIALIZE)
            await transport.send(request(text))
            reply = json.loads(await transport.receive_bytes())
            assert reply["result"]["content"][0]["text"] == text


async def test_server_shutdown_closes_cleanly(server: Server) -> None:
    server_scope = trio.CancelScope()

    async def run_server(*, task_status: trio.TaskStatus[int]) -> None:
        with server_scope:
            await serve_websocket(server, task_status=task_status)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            port: int = await nursery.start(run_server)
            async with open_websocket_transport(url(port)) as transport:
                assert "result" in await rpc(transport, 1, "initialize", INITIALIZE)
                server_scope.cancel()  # stop the server; the client stays
                with pytest.raises(trio.EndOfChannel):
                    await transport.receive_bytes()
                assert transport.close_reason is not None and transport.close_reason.code == 1000
                with pytest.raises(trio.BrokenResourceError):
                    await transport.send(b'{"jsonrpc":"2.0","id":9,"method":"ping"}')
            with pytest.raises(trio.ClosedResourceError):
                await transport.send(b"{}")


async def test_cancelled_client_still_closes_cleanly_and_promptly(server: Server, probe: Probe) -> None:
    with trio.fail_after(5):
        async with serving(server) as port:
            started = trio.current_time()
            with trio.move_on_after(0.1):
                async with open_websocket_transport(url(port)) as transport, connect(transport) as client:
                    await client.call_tool_as_task("hold", {"key": "cancelled-client"})
                    await trio.sleep_forever()
            # The closing handshake completed (code 1000) although the client was cancelled, and
            # did not wait out the close timeout.
            assert trio.current_time() - started < 1.0
            assert transport.close_reason is not None and transport.close_reason.code == 1000
            await probe.ended["cancelled-client"].wait()


async def test_errors_in_the_block_are_not_wrapped(server: Server) -> None:
    with trio.fail_after(5):
        async with serving(server) as port:
            with pytest.raises(KeyError, match="mine"):
                async with open_websocket_transport(url(port)):
                    raise KeyError("mine")
        with pytest.raises(trio_websocket.HandshakeError):  # nothing listens there any more
            async with open_websocket_transport(url(port)):
                pass
    with pytest.raises(ValueError):
        async with open_websocket_transport("http://127.0.0.1:1/"):
            pass


async def test_client_close_cancels_connection_owned_tasks(server: Server, probe: Probe) -> None:
    with trio.fail_after(5):
        async with serving(server) as port:
            async with connect_websocket(url(port)) as client:
                await client.call_tool_as_task("hold", {"key": "clean"})
                await probe.started["clean"].wait()
            await probe.ended["clean"].wait()  # the clean close ended the session and its task
            assert "clean" in probe.cancelled


# ----------------------------------------------------------------------------- ownership


async def test_abrupt_disconnect_cancels_connection_owned_task(server: Server, probe: Probe) -> None:
    with trio.fail_after(5):
        async with serving(server) as port:
            async with open_websocket_transport(url(port)) as transport, connect(transport) as client:
                created = await client.call_tool_as_task("hold", {"key": "conn"})
                assert created.task.status == "working"
                await probe.started["conn"].wait()
                await transport.abort()  # TCP gone, no closing handshake
            await probe.ended["conn"].wait()
            assert "conn" in probe.cancelled
            # Nobody else can reach it: a new connection is a new owner.
            async with connect_websocket(url(port)) as other:
                await expect_error(INVALID_PARAMS, other.get_task(created.task.task_id))
                assert (await other.list_tasks()).tasks == []


async def test_identity_owned_task_survives_reconnect(server: Server, probe: Probe) -> None:
    with trio.fail_after(8):
        async with serving(server, authenticate=TOKENS.get) as port:
            # Alice starts two tasks and an ordinary call, then her connection drops.
            async with (
                open_websocket_transport(url(port), token="tok-alice") as transport,
                connect(transport) as alice,
                trio.open_nursery() as nursery,
            ):
                keep = (await alice.call_tool_as_task("hold", {"key": "keep"})).task.task_id
                stop = (await alice.call_tool_as_task("hold", {"key": "stop"})).task.task_id

                async def plain_call() -> None:
                    with pytest.raises(ConnectionClosed):
                        await alice.call_tool("hold", {"key": "plain"})

                nursery.start_soon(plain_call)
                for key in ("keep", "stop", "plain"):
                    await probe.started[key].wait()
                await transport.abort()
            # The ordinary call belonged to the connection: the server ended it ...
            await probe.ended["plain"].wait()
            # ... but the tasks belong to "alice", and live on.
            assert not probe.ended["keep"].is_set() and not probe.ended["stop"].is_set()

            # Bob sees none of them, and gets -32602 for each.
            async with connect_websocket(url(port), token="tok-bob") as bob:
                assert (await bob.list_tasks()).tasks == []
                for task_id in (keep, stop):
                    await expect_error(INVALID_PARAMS, bob.get_task(task_id))
                    await expect_error(INVALID_PARAMS, bob.cancel_task(task_id))
                    await expect_error(INVALID_PARAMS, bob.task_result(task_id))
            assert not probe.ended["keep"].is_set() and not probe.ended["stop"].is_set()

            # Alice, reconnected with the same token, has them all.
            async with connect_websocket(url(port), token="tok-alice") as alice:
                assert (await alice.get_task(keep)).status == "working"
                assert {task.task_id for task in (await alice.list_tasks()).tasks} == {keep, stop}
                assert (await alice.cancel_task(stop)).status == "cancelled"
                await probe.ended["stop"].wait()
                assert "stop" in probe.cancelled
                probe.release["keep"].set()
                result = await alice.task_result(keep)
                assert result.text == "released keep"
                assert (await alice.get_task(keep)).status == "completed"
            assert "keep" not in probe.cancelled


async def test_fifty_concurrent_clients(probe: Probe) -> None:
    """25 authenticated clients (identity-owned tasks) on one listener and 25 anonymous ones
    (connection-owned) on another, sharing one runtime: nothing lost, nothing crossed."""
    server = make_server(probe)
    tokens = {f"token-{i}": f"user-{i}" for i in range(25)}
    results: dict[int, list[str]] = {}

    async def one_client(i: int, port: int, token: str | None) -> None:
        async with connect_websocket(url(port), token=token) as client:
            tags = [f"client{i}-task{j}" for j in range(3)]
            created = [
                (await client.call_tool_as_task("tagged", {"tag": tag, "delay": 0.01 * j})).task.task_id
                for j, tag in enumerate(tags)
            ]
            texts = []
            for task_id in created:
                result = await client.task_result(task_id)
                assert result.meta is not None
                assert result.meta["io.modelcontextprotocol/related-task"]["taskId"] == task_id
                texts.append(result.text)
            assert texts == tags
            listed = {task.task_id: task for task in (await client.list_tasks()).tasks}
            assert set(listed) == set(created)
            assert all(task.status == "completed" for task in listed.values())
            results[i] = texts

    with trio.fail_after(10):
        async with server.open() as runtime:
            async with (
                serving(runtime, authenticate=tokens.get) as auth_port,
                serving(runtime) as open_port,
                trio.open_nursery() as nursery,
            ):
                for i in range(50):
                    if i % 2:
                        nursery.start_soon(one_client, i, open_port, None)
                    else:
                        nursery.start_soon(one_client, i, auth_port, f"token-{i // 2}")
    assert sorted(results) == list(range(50))
    assert sorted(probe.calls) == sorted(f"client{i}-task{j}" for i in range(50) for j in range(3))


# ----------------------------------------------------------------------------- slow and dead peers


async def test_stuck_client_does_not_delay_others(probe: Probe) -> None:
    server = make_server(probe)

    async def padded() -> str:
        return "padded"

    # A client that floods requests and never reads: the server keeps reading (it never waits
    # on a writer), and once the answers waiting for that client pass the outbound byte limit
    # (16 MiB) it closes the connection. Nobody else waits meanwhile.
    server.add_tool(padded, description="x" * 32_000)
    with trio.fail_after(20):
        async with serving(server, ping_interval=None, max_message_size=DEFAULT_MAX_MESSAGE_SIZE) as port:
            async with RawClient.open(port, receive_buffer=4096) as stuck:
                assert isinstance(await stuck.handshake(), AcceptConnection)
                await stuck.initialize()
                reply = await stuck.request(
                    "tools/call", {"name": "hold", "arguments": {"key": "stuck"}, "task": {}}
                )
                assert reply["result"]["task"]["status"] == "working"

                async with connect_websocket(url(port)) as other:
                    sent = 0
                    disconnected = False
                    while not disconnected and sent < 5_000:
                        frame = stuck.encode_request("tools/list", pad=16_000)
                        try:
                            with trio.move_on_after(0.5):
                                await stuck.stream.send_all(frame)
                        except trio.BrokenResourceError:
                            disconnected = True
                        sent += 1
                        if sent % 100 == 0:  # meanwhile another client is served at full speed
                            started = time.monotonic()
                            assert (await other.call_tool("echo", {"text": str(sent)})).text == str(sent)
                            assert time.monotonic() - started < 0.5
                    assert disconnected, f"the server kept {sent} unread answers for a non-reading client"
                    # Each answer is ~130 kB (the padded tools list): 16 MiB is about 130 answers.
                    assert sent < 1_000
                    created = await other.call_tool_as_task("tagged", {"tag": "unaffected", "delay": 0})
                    assert (await other.task_result(created.task.task_id)).text == "unaffected"
            # The stuck client's session ended with its connection, and its task with it.
            await probe.ended["stuck"].wait()
            assert "stuck" in probe.cancelled


async def test_keepalive_drops_unresponsive_peer_only(server: Server, probe: Probe) -> None:
    with trio.fail_after(8):
        async with (
            serving(server, ping_interval=0.2, ping_timeout=0.3) as port,
            connect_websocket(url(port)) as healthy,  # trio-websocket answers pings by itself
            RawClient.open(port) as silent,
        ):
            assert isinstance(await silent.handshake(), AcceptConnection)
            await silent.initialize()
            reply = await silent.request(
                "tools/call", {"name": "hold", "arguments": {"key": "silent"}, "task": {}}
            )
            assert reply["result"]["task"]["status"] == "working"
            await probe.started["silent"].wait()
            # From now on the silent client answers nothing, not even pings.
            started = trio.current_time()
            await probe.ended["silent"].wait()  # disconnected: its connection-owned task is cancelled
            assert "silent" in probe.cancelled
            assert trio.current_time() - started >= 0.2
            await silent.read_until_closed()
            # The healthy client was idle for as long, and is still connected.
            assert (await healthy.call_tool("echo", {"text": "still here"})).text == "still here"


# ----------------------------------------------------------------------------- TLS


def make_tls_contexts(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A self-signed certificate for 127.0.0.1: (server context, client context trusting it)."""
    pytest.importorskip("cryptography")
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "trio-mcp test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "cert.pem", directory / "key.pem"
    cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(cert_file, key_file)
    client_context = ssl.create_default_context(cafile=str(cert_file))
    return server_context, client_context


async def test_wss(server: Server, tmp_path: Path) -> None:
    server_context, client_context = make_tls_contexts(tmp_path)
    with trio.fail_after(5):
        async with serving(server, ssl_context=server_context) as port:
            async with connect_websocket(url(port, "wss"), ssl_context=client_context) as client:
                assert (await client.call_tool("echo", {"text": "secret"})).text == "secret"
            # A client that doesn't trust the certificate fails the TLS handshake.
            with pytest.raises(trio_websocket.HandshakeError):
                async with open_websocket_transport(url(port, "wss")):
                    pass


# ----------------------------------------------------------------------------- CLI helper


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:8765", ("127.0.0.1", 8765)),
        ("0.0.0.0:80", ("0.0.0.0", 80)),
        ("localhost:0", ("localhost", 0)),
        ("[::1]:9000", ("::1", 9000)),
        (":8765", ("127.0.0.1", 8765)),
        ("8765", ("127.0.0.1", 8765)),
        (" example.com:443 ", ("example.com", 443)),
    ],
)
def test_parse_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text) == expected


@pytest.mark.parametrize(
    "text",
    ["", "localhost", "host:", "host:http", "host:70000", "::1:80", "[::1]", "[nope]:80", "h:-1", "h:\uff11"],
)
def test_parse_host_port_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_host_port(text)


async def test_binary_frames_from_server_are_refused_by_client_too(server: Server) -> None:
    """The transport is symmetric: our client closes with 1003 on a binary frame as well."""
    async with trio.open_nursery() as nursery:

        async def handler(request: trio_websocket.WebSocketRequest) -> None:
            connection = await request.accept(subprotocol="mcp")
            await connection.send_message(b"\x00binary")
            with pytest.raises(trio_websocket.ConnectionClosed):
                await connection.get_message()
            assert connection.closed is not None and connection.closed.code == 1003

        ws_server = await nursery.start(
            partial(trio_websocket.serve_websocket, handler, "127.0.0.1", 0, None)
        )
        with trio.fail_after(5):
            async with open_websocket_transport(url(ws_server.port)) as transport:
                with pytest.raises(trio.EndOfChannel):
                    await transport.receive_bytes()
                assert transport.close_reason is not None and transport.close_reason.code == 1003
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------------------- batched writes


async def test_send_many_writes_its_frames_at_once_and_each_is_a_message(server: Server) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, open_websocket_transport(url(port)) as transport:
            assert "result" in await rpc(transport, 0, "initialize", INITIALIZE)
            stream = transport.connection._stream
            writes: list[int] = []
            send_all = stream.send_all

            async def counted(data: bytes) -> None:
                writes.append(len(data))
                await send_all(data)

            stream.send_all = counted  # type: ignore[method-assign]
            pings = [json.dumps({"jsonrpc": "2.0", "id": i, "method": "ping"}).encode() for i in (1, 2, 3)]
            await transport.send_many(pings)
            assert len(writes) == 1  # three frames, one write
            answers = [json.loads(await transport.receive_bytes()) for _ in pings]
            assert [a["id"] for a in answers] == [1, 2, 3] and all(a["result"] == {} for a in answers)
            with pytest.raises(UnicodeDecodeError):
                await transport.send_many([b'{"jsonrpc":"2.0","id":4,"method":"ping"}', b"\xff"])
            assert len(writes) == 1  # nothing of that batch was sent


async def test_send_many_after_the_peer_closed_raises_broken(server: Server) -> None:
    with trio.fail_after(5):
        async with serving(server) as port, open_websocket_transport(url(port)) as transport:
            await transport.connection.aclose()
            with pytest.raises(trio.BrokenResourceError):
                await transport.send_many([b"{}", b"{}"])


async def test_answers_to_a_burst_of_requests_go_out_together(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """trio-websocket hands the session one message per scheduler round; the session's writer
    waits while a burst is still being read (``paced_input``), so 32 pipelined requests are
    answered in one or two writes, not 32."""
    writes: list[int] = []
    send, send_many = WebSocketTransport.send, WebSocketTransport.send_many

    async def counted_send(self: WebSocketTransport, message: bytes) -> None:
        writes.append(1)
        await send(self, message)

    async def counted_send_many(self: WebSocketTransport, messages: Any) -> None:
        writes.append(len(messages))
        await send_many(self, messages)

    monkeypatch.setattr(WebSocketTransport, "send", counted_send)
    monkeypatch.setattr(WebSocketTransport, "send_many", counted_send_many)
    with trio.fail_after(10):
        async with serving(server) as port, RawClient.open(port) as client:
            await client.handshake()
            await client.initialize()
            writes.clear()
            burst = b"".join(client.encode_request("ping") for _ in range(32))
            await client.stream.send_all(burst)  # one TCP write: 32 frames
            answers = [await client.receive_json() for _ in range(32)]
    assert all(answer["result"] == {} for answer in answers)
    assert sum(writes) == 32
    assert len(writes) <= 2
