"""The MCP endpoint under hostile clients, over real sockets on our HTTP server: the replay
buffer's bounds, per-client session limits and the handshake deadline, per-address task
quotas for anonymous 2026-07-28 callers, and any JSON in any field (a property test)."""

from __future__ import annotations

import functools
import json
import queue
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from json_strategies import json_values
from trio.testing import MockClock

from trio_mcp import Context, Server, TaskLimits
from trio_mcp.protocol.modern import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY, TASKS_EXTENSION
from trio_mcp.server import McpHttpApp, mcp_asgi_app, serve_http
from trio_mcp.server._http import WATCH_AFTER, _Watches
from trio_mcp.transports.h11_server import H11Server
from trio_mcp.transports.http import ACCEPT_BOTH, SSEDecoder

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
POST = {"accept": ACCEPT_BOTH, "content-type": "application/json"}
HELLO = {"protocolVersion": HANDSHAKE, "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}


def make_server(limits: TaskLimits | None = None) -> Server:
    server = Server("hardening", limits=limits)
    gates: dict[str, trio.Event] = {}
    server.gates = gates  # type: ignore[attr-defined]

    @server.tool()
    async def big(size: int, ctx: Context) -> str:
        """A result of ``size`` bytes, after a progress notification (when asked for one: the
        answer is then an SSE stream, its events kept for replay)."""
        await ctx.report_progress(1, 1)
        return "x" * size

    started: dict[str, trio.Event] = {}
    server.started = started  # type: ignore[attr-defined]

    @server.tool()
    async def gate(tag: str, ctx: Context) -> str:
        """Wait until the test opens ``tag``."""
        started.setdefault(tag, trio.Event()).set()
        await gates.setdefault(tag, trio.Event()).wait()
        return tag

    @server.tool(task_support="required")
    async def job() -> str:
        """A task that runs until cancelled."""
        await trio.sleep_forever()
        return "never"

    return server


@asynccontextmanager
async def serving(server: Server, **options: Any) -> AsyncIterator[tuple[str, McpHttpApp]]:
    """The app on our HTTP server on 127.0.0.1: (endpoint URL, the app)."""
    app = mcp_asgi_app(server, retry_ms=50, **options)
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with app.running(), trio.open_nursery() as nursery:
        await nursery.start(H11Server(app).serve, listeners)
        yield f"http://127.0.0.1:{port}/mcp", app
        nursery.cancel_scope.cancel()


def client_from(address: str) -> httpx.AsyncClient:
    """An HTTP client whose connections come from ``address`` (127.0.0.0/8 is all loopback)."""
    return httpx.AsyncClient(transport=httpx.AsyncHTTPTransport(local_address=address), timeout=10)


def rpc(id: Any, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        message["id"] = id
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


async def initialize(http: httpx.AsyncClient, url: str, *, finish: bool = True) -> httpx.Response:
    response = await http.post(url, content=rpc(1, "initialize", HELLO), headers=POST)
    if finish and response.status_code == 200:
        headers = {**POST, "mcp-session-id": response.headers["mcp-session-id"]}
        done = await http.post(url, content=rpc(None, "notifications/initialized"), headers=headers)
        assert done.status_code == 202
    return response


def modern(
    id: int, method: str, params: dict[str, Any], *, tasks: bool = True
) -> tuple[bytes, dict[str, str]]:
    capabilities = {"extensions": {TASKS_EXTENSION: {}}} if tasks else {}
    meta = {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: capabilities}
    headers = {**POST, "mcp-protocol-version": MODERN, "mcp-method": method}
    if "name" in params:
        headers["mcp-name"] = params["name"]
    return rpc(id, method, {**params, "_meta": meta}), headers


async def call_stream(http: httpx.AsyncClient, url: str, session: str, id: int, tool: str, args: Any) -> str:
    """A handshake-era tools/call asking for progress, read to its end: the response's data
    (the answer is an SSE stream when the tool reports progress first)."""
    headers = {**POST, "mcp-session-id": session}
    body = rpc(id, "tools/call", {"name": tool, "arguments": args, "_meta": {"progressToken": id}})
    async with http.stream("POST", url, content=body, headers=headers) as response:
        if response.headers["content-type"] == "application/json":
            return (await response.aread()).decode()
        decoder = SSEDecoder()
        async for chunk in response.aiter_bytes():
            for event in decoder.feed(chunk):
                if event.data and "result" in json.loads(event.data):
                    return event.data
    raise AssertionError("no response")


async def test_replay_buffer_is_bounded_in_bytes_and_drops_delivered_answers_first() -> None:
    server = make_server()
    limit, total = 64 * 1024, 100 * 1024
    with trio.fail_after(20):
        async with serving(server, event_buffer_bytes=limit, max_event_bytes=total) as (url, app):
            async with httpx.AsyncClient(timeout=10) as http:
                sessions = [(await initialize(http, url)).headers["mcp-session-id"] for _ in range(3)]
                first = sessions[0]
                # an answer that is never delivered: its POST stream drops before it is ready
                headers = {**POST, "mcp-session-id": first}
                body = rpc(99, "tools/call", {"name": "gate", "arguments": {"tag": "late"}})
                async with http.stream("POST", url, content=body, headers=headers) as response:
                    decoder = SSEDecoder()
                    priming = None
                    async for chunk in response.aiter_bytes():
                        events = decoder.feed(chunk)
                        if events:
                            priming = events[0].id
                            break
                assert priming is not None
                server.gates.setdefault("late", trio.Event()).set()  # type: ignore[attr-defined]
                # then every session is sent many delivered answers, far past the limits
                for n in range(12):
                    for session in sessions:
                        data = await call_stream(http, url, session, 100 + n, "big", {"size": 20_000})
                        assert len(data) > 20_000
                        assert all(s.bytes <= limit for s in app.sessions.values())
                        assert app.replay.total <= total
                # the undelivered answer survived the flood: it is replayed
                replay_headers = {
                    "accept": "text/event-stream",
                    "mcp-session-id": first,
                    "last-event-id": priming,
                }
                async with http.stream("GET", url, headers=replay_headers) as replay:
                    decoder = SSEDecoder()
                    found = None
                    async for chunk in replay.aiter_bytes():
                        for event in decoder.feed(chunk):
                            if event.data and json.loads(event.data).get("id") == 99:
                                found = json.loads(event.data)
                        if found:
                            break
                assert found is not None and found["result"]["content"][0]["text"] == "late"
                assert app.replay.total == sum(s.bytes for s in app.sessions.values())
                for session in sessions:  # ended sessions hold nothing any more
                    assert (await http.delete(url, headers={"mcp-session-id": session})).status_code == 200
                assert app.replay.total == 0


async def test_one_client_cannot_take_every_session() -> None:
    with trio.fail_after(20):
        async with serving(make_server(), max_sessions=6, max_sessions_per_client=3) as (url, app):
            async with client_from("127.0.0.1") as flooder, client_from("127.0.0.2") as other:
                # one address sends many initialize and never finishes the handshake
                for _ in range(20):
                    assert (await initialize(flooder, url, finish=False)).status_code == 200
                assert sum(1 for s in app.sessions.values() if s.client == "address:127.0.0.1") <= 3
                # everyone else still gets sessions, up to the total
                mine = [await initialize(other, url) for _ in range(3)]
                assert all(r.status_code == 200 for r in mine)
                third = await initialize(client_from("127.0.0.3"), url)
                assert third.status_code == 200  # the flooder's unfinished sessions made room
                # sessions of others in use are never taken for room
                for response in mine:
                    headers = {**POST, "mcp-session-id": response.headers["mcp-session-id"]}
                    listed = await other.post(url, content=rpc(2, "tools/list"), headers=headers)
                    assert listed.status_code == 200


@pytest.fixture
def clock() -> MockClock:
    """Real time, plus jumps (past a deadline at once instead of waiting)."""
    return MockClock(rate=1)


async def test_unfinished_handshakes_expire(clock: MockClock) -> None:
    async with serving(make_server(), handshake_timeout=30) as (url, app):
        async with httpx.AsyncClient(timeout=10) as http:
            unfinished = (await initialize(http, url, finish=False)).headers["mcp-session-id"]
            finished = (await initialize(http, url)).headers["mcp-session-id"]
            clock.jump(20)
            await trio.sleep(0.05)
            assert unfinished in app.sessions  # not yet
            clock.jump(20)
            while unfinished in app.sessions:  # noqa: ASYNC110
                await trio.sleep(0.01)
            assert finished in app.sessions
            headers = {**POST, "mcp-session-id": unfinished}
            assert (await http.post(url, content=rpc(2, "tools/list"), headers=headers)).status_code == 404


async def test_anonymous_modern_callers_are_held_to_per_address_quotas() -> None:
    # Every anonymous 2026-07-28 caller is the one owner "anonymous": each address gets an
    # allowance of its own, so one filling its share leaves the others theirs.
    limits = TaskLimits(max_live_tasks_per_owner=2, max_live_tasks_per_client=5)
    with trio.fail_after(10):
        async with serving(make_server(limits)) as (url, _):
            async with client_from("127.0.0.1") as greedy, client_from("127.0.0.2") as polite:

                async def create(http: httpx.AsyncClient, id: int) -> dict[str, Any]:
                    body, headers = modern(id, "tools/call", {"name": "job", "arguments": {}})
                    response = await http.post(url, content=body, headers=headers)
                    answer: dict[str, Any] = response.json()
                    return answer

                assert "result" in await create(greedy, 1) and "result" in await create(greedy, 2)
                refused = await create(greedy, 3)
                assert "error" in refused and refused["id"] == 3
                assert "result" in await create(polite, 4)  # another client is not locked out


# -- graceful shutdown ------------------------------------------------------------------------------


async def test_stopping_finishes_requests_in_flight_then_answers_32603_and_closes_streams() -> None:
    server = make_server()
    gates, started = server.gates, server.started  # type: ignore[attr-defined]
    answers: dict[str, Any] = {}
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            serving_scope = trio.CancelScope()
            stopped = trio.Event()

            async def run(task_status: trio.TaskStatus[int]) -> None:
                with serving_scope:
                    await serve_http(server, grace=0.5, task_status=task_status)
                stopped.set()

            port = await nursery.start(run)
            url = f"http://127.0.0.1:{port}/mcp"
            http = httpx.AsyncClient(timeout=10)
            keep_alive = httpx.AsyncClient(timeout=10)
            session = (await initialize(http, url)).headers["mcp-session-id"]
            assert (await initialize(keep_alive, url)).status_code == 200  # its connection stays open

            async def call(tag: str) -> None:
                body, headers = modern(
                    1, "tools/call", {"name": "gate", "arguments": {"tag": tag}}, tasks=False
                )
                response = await http.post(url, content=body, headers=headers)
                answers[tag] = response.json()

            async def listen() -> None:
                headers = {"accept": "text/event-stream", "mcp-session-id": session}
                async with http.stream("GET", url, headers=headers) as stream:
                    async for _ in stream.aiter_bytes():
                        pass
                answers["get"] = "ended cleanly"

            for tag in ("quick", "never"):
                nursery.start_soon(call, tag)
                await started.setdefault(tag, trio.Event()).wait()
            nursery.start_soon(listen)
            await trio.sleep(0.1)
            begun = trio.current_time()
            serving_scope.cancel()
            await trio.sleep(0.05)
            refused = await keep_alive.post(url, content=rpc(2, "initialize", HELLO), headers=POST)
            assert refused.status_code == 503 and refused.headers["retry-after"]
            gates.setdefault("quick", trio.Event()).set()  # finishes within the grace period
            await stopped.wait()
            assert 0.5 <= trio.current_time() - begun < 4
            await http.aclose()
            await keep_alive.aclose()
    assert answers["quick"]["result"]["content"][0]["text"] == "quick"
    assert answers["never"]["error"]["code"] == -32603
    assert "shutting down" in answers["never"]["error"]["message"].lower()
    assert answers["get"] == "ended cleanly"


# -- any JSON in any field: never a 500 ------------------------------------------------------------


@pytest.fixture(scope="module")
def threaded_url() -> Iterator[str]:
    """serve_http in a thread of its own (hypothesis drives it from plain sync tests)."""
    ports: queue.Queue[Any] = queue.Queue()
    stop: list[Any] = []

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            stop.append((trio.lowlevel.current_trio_token(), nursery.cancel_scope))
            port = await nursery.start(
                lambda task_status: serve_http(make_server(), grace=0, task_status=task_status)
            )
            ports.put(port)

    thread = threading.Thread(target=trio.run, args=(main,), daemon=True)
    thread.start()
    port = ports.get(timeout=10)
    yield f"http://127.0.0.1:{port}/mcp"
    token, scope = stop[0]
    trio.from_thread.run_sync(scope.cancel, trio_token=token)
    thread.join(timeout=10)


METHODS = st.sampled_from(
    [
        "initialize",
        "tools/call",
        "tools/list",
        "tasks/get",
        "tasks/cancel",
        "tasks/result",
        "tasks/update",
        "resources/read",
        "prompts/get",
        "ping",
        "notifications/cancelled",
        "notifications/initialized",
    ]
)
FIELDS = st.sampled_from(
    [
        "name",
        "arguments",
        "uri",
        "taskId",
        "task",
        "_meta",
        "cursor",
        "requestId",
        "inputResponses",
        "requestState",
        "protocolVersion",
        "capabilities",
    ]
)
IDS = st.one_of(st.integers(-(2**40), 2**40), st.text(max_size=8), json_values)
HEADER_NAMES = st.sampled_from(
    [
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
        "accept",
        "content-type",
        "origin",
        "mcp-param-x",
    ]
)
HEADER_VALUES = st.one_of(
    st.sampled_from([MODERN, HANDSHAKE, "tools/call", "=?base64?!?=", "*/*", "application/json", "", "p1.x"]),
    st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12).map(str.strip),
)


@st.composite
def hostile_requests(draw: st.DrawFn) -> tuple[bytes, dict[str, str], Any]:
    method = draw(METHODS)
    params: dict[str, Any] = draw(st.dictionaries(FIELDS, json_values, max_size=4))
    if draw(st.booleans()):  # often a modern envelope, whose fields are random too
        params["_meta"] = {
            PROTOCOL_VERSION_KEY: draw(st.sampled_from([MODERN, HANDSHAKE]) | json_values),
            CLIENT_CAPABILITIES_KEY: draw(st.just({"extensions": {TASKS_EXTENSION: {}}}) | json_values),
        }
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
    request_id = draw(IDS)
    if draw(st.booleans()):
        message["id"] = request_id
    headers = {**POST, **draw(st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=4))}
    if draw(st.booleans()):  # headers that agree with the body: the checks after them are reached
        headers.update({"mcp-protocol-version": MODERN, "mcp-method": method})
        for field in ("name", "uri", "taskId"):
            if isinstance(params.get(field), str) and params[field].isprintable() and params[field].isascii():
                headers["mcp-name"] = params[field].strip()
    if draw(st.integers(0, 9)) == 0:  # now and then not even JSON-RPC
        return json.dumps(draw(json_values)).encode(), headers, None
    return json.dumps(message).encode(), headers, message.get("id")


@pytest.fixture(scope="module")
def sync_http() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=10) as http:
        yield http


@example(
    (
        rpc(
            7,
            "tools/call",
            {"name": ["a"], "_meta": {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: {}}},
        ),
        {**POST, "mcp-protocol-version": MODERN, "mcp-method": "tools/call"},
        7,
    )
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(hostile_requests())
def test_any_json_in_any_field_is_never_a_500(
    threaded_url: str, sync_http: httpx.Client, case: tuple[bytes, dict[str, str], Any]
) -> None:
    """Random bodies (any JSON type in any field, envelopes included) and random MCP headers:
    always a 4xx (or a 200/202 answer), an error carrying the request's id once the body is
    read, and the server goes on serving."""
    body, headers, request_id = case
    response = sync_http.post(threaded_url, content=body, headers=headers)
    assert response.status_code < 500, response.text
    read = response.status_code not in (401, 403, 413, 421)  # else answered before reading the body
    if read and response.headers.get("content-type") == "application/json" and response.content:
        answer = response.json()
        if "error" in answer and isinstance(request_id, int | str) and not isinstance(request_id, bool):
            assert answer["id"] == request_id, (answer, request_id)
    assert sync_http.get(threaded_url.replace("/mcp", "/nothing")).status_code == 404


class _Steps(trio.abc.Instrument):
    """Counts the scheduler steps of tasks whose name contains ``part``."""

    def __init__(self, part: str) -> None:
        self.part = part
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.part in task.name:
            self.steps += 1


async def test_an_idle_app_never_wakes_for_disconnect_watches(autojump_clock: MockClock) -> None:
    """Requests are watched for their client's disconnect by one task of the app's, which
    sleeps until a request has been served long enough to need a watch: an idle server does
    not wake up for it."""
    app = McpHttpApp(make_server())
    steps = _Steps("_Watches.run")
    async with app.running():
        await trio.sleep(0.1)  # started, and asleep
        trio.lowlevel.add_instrument(steps)
        try:
            await trio.sleep(3600)
        finally:
            trio.lowlevel.remove_instrument(steps)
    assert steps.steps == 0


class _FakeExchange:
    """What :class:`_Watches` uses of an exchange."""

    def __init__(self) -> None:
        self.disconnected = False
        self.watched: trio.CancelScope | None = None
        self.alarm: Any = None
        self.watches = 0

    def start_watch(self, nursery: trio.Nursery) -> None:
        self.watches += 1

    def stop_watch(self) -> None:
        self.watched = None


async def test_quick_requests_never_wake_the_watch_task_and_a_slow_one_is_watched_on_time(
    autojump_clock: MockClock,
) -> None:
    watches = _Watches()
    steps = _Steps("_Watches.run")
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watches.run, nursery, name="_Watches.run")
        await trio.sleep(1)
        trio.lowlevel.add_instrument(steps)
        quick = [_FakeExchange() for _ in range(20)]
        for exchange in quick:  # each answered in 10 ms, one after another
            await watches.watched(exchange, functools.partial(trio.sleep, 0.01))  # type: ignore[arg-type]
        assert steps.steps == 0 and watches.alarms.pending == 0
        assert all(exchange.watches == 0 for exchange in quick)
        slow = _FakeExchange()
        began = trio.current_time()
        async with trio.open_nursery() as inner:
            inner.start_soon(watches.watched, slow, functools.partial(trio.sleep, 1))  # type: ignore[arg-type]
            await trio.sleep(WATCH_AFTER / 2)
            assert slow.watches == 0
            await trio.sleep(WATCH_AFTER)
            assert slow.watches == 1  # watched once it had been served WATCH_AFTER
        assert trio.current_time() - began == pytest.approx(1)
        trio.lowlevel.remove_instrument(steps)
        assert steps.steps <= 2  # woken for the slow one's watch only
        nursery.cancel_scope.cancel()
