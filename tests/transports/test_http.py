"""Streamable HTTP: the server (both eras on one endpoint), its security rules, and the client
(real sockets on 127.0.0.1; raw requests with httpx, and our own ``connect_http``)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from doc_blocks import aligned_source

from trio_mcp import Context, McpError, Server
from trio_mcp.client import connect_http
from trio_mcp.protocol.modern import CLIENT_CAPABILITIES_KEY, PROTOCOL_VERSION_KEY, TASKS_EXTENSION
from trio_mcp.server import mcp_asgi_app, serve_http
from trio_mcp.transports.http import (
    ACCEPT_BOTH,
    DEFAULT_ALLOWED_HOSTS,
    SSEDecoder,
    SSEEvent,
    accepts,
    decode_header_value,
    encode_header_value,
    host_check,
    parse_event_id,
    sse_event,
)

MODERN = "2026-07-28"
HANDSHAKE = "2025-11-25"
RETRY_MS = 50
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
INITIALIZE = {
    "protocolVersion": HANDSHAKE,
    "capabilities": {},
    "clientInfo": {"name": "raw-http-test", "version": "0"},
}
POST_HEADERS = {"accept": ACCEPT_BOTH, "content-type": "application/json"}


# ----------------------------------------------------------------------------- fixtures


class Probe:
    """What the test tools report: which started, which were cancelled; gates to release."""

    def __init__(self) -> None:
        self.started: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.release: defaultdict[str, trio.Event] = defaultdict(trio.Event)
        self.cancelled: defaultdict[str, trio.Event] = defaultdict(trio.Event)


def make_server(probe: Probe) -> Server:
    server = Server("http-test", version="1.0")

    @server.tool()
    async def echo(text: str) -> str:
        """Return the text."""
        return text

    @server.tool()
    async def gate(tag: str, ctx: Context) -> str:
        """Report progress, then wait until the test releases ``tag``."""
        probe.started[tag].set()
        await ctx.report_progress(1, 2, "waiting")
        try:
            await probe.release[tag].wait()
        except trio.Cancelled:
            probe.cancelled[tag].set()
            raise
        return tag

    @server.tool(task_support="required")
    async def job(tag: str) -> str:
        """A task-only tool: waits until released."""
        probe.started[tag].set()
        try:
            await probe.release[tag].wait()
        except trio.Cancelled:
            probe.cancelled[tag].set()
            raise
        return f"job {tag}"

    @server.tool()
    async def slow(text: str) -> str:
        """Return the text after a while (longer than the server waits to answer JSON)."""
        await trio.sleep(0.3)
        return text

    @server.tool()
    async def noted(text: str, ctx: Context) -> str:
        """Report progress, then return at once."""
        await ctx.report_progress(1, 1, "done")
        return text

    @server.tool()
    async def ask(ctx: Context) -> str:
        """Ask the client for a name."""
        answer = await ctx.elicit(
            "Your name?", {"type": "object", "properties": {"name": {"type": "string"}}}
        )
        return f"hello {(answer.content or {}).get('name')}"

    return server


@pytest.fixture
def probe() -> Probe:
    return Probe()


@asynccontextmanager
async def serving(server: Server, **kwargs: Any) -> AsyncIterator[str]:
    """Serve ``server`` over HTTP on 127.0.0.1; yields the endpoint URL."""
    kwargs.setdefault("retry_ms", RETRY_MS)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(partial(serve_http, server, **kwargs))
        yield f"http://127.0.0.1:{port}/mcp"
        nursery.cancel_scope.cancel()


@pytest.fixture
async def url(probe: Probe) -> AsyncIterator[str]:
    async with serving(make_server(probe)) as endpoint:
        yield endpoint


@pytest.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as client:
        yield client


def rpc(id: int | str | None, method: str, params: dict[str, Any] | None = None) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if id is not None:
        message["id"] = id
    if params is not None:
        message["params"] = params
    return json.dumps(message).encode()


def session_headers(session_id: str, **extra: str) -> dict[str, str]:
    return {**POST_HEADERS, "mcp-session-id": session_id, "mcp-protocol-version": HANDSHAKE, **extra}


async def initialize(http: httpx.AsyncClient, url: str, **headers: str) -> str:
    response = await http.post(
        url, content=rpc(1, "initialize", INITIALIZE), headers={**POST_HEADERS, **headers}
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    session_id = response.headers["mcp-session-id"]
    assert session_id and all(0x21 <= ord(c) <= 0x7E for c in session_id)
    assert response.json()["result"]["protocolVersion"] == HANDSHAKE
    done = await http.post(
        url, content=rpc(None, "notifications/initialized"), headers=session_headers(session_id, **headers)
    )
    assert done.status_code == 202 and done.content == b""
    return session_id


async def events(response: httpx.Response) -> AsyncIterator[SSEEvent]:
    decoder = SSEDecoder()
    async for chunk in response.aiter_bytes():
        for event in decoder.feed(chunk):
            yield event


async def until_response(response: httpx.Response, request_id: int) -> tuple[list[SSEEvent], dict[str, Any]]:
    """Read SSE events until the response to ``request_id``: (all events, the response); an
    answer that is plain JSON (the response came first) is (no events, the response)."""
    if response.headers["content-type"].startswith("application/json"):
        message = json.loads(await response.aread())
        assert message.get("id") == request_id, message
        return [], message
    seen: list[SSEEvent] = []
    async for event in events(response):
        seen.append(event)
        if event.data:
            message = json.loads(event.data)
            if message.get("id") == request_id and "method" not in message:
                return seen, message
    raise AssertionError(f"the stream ended without the response to {request_id}: {seen}")


def envelope(
    params: dict[str, Any] | None = None, *, tasks: bool = True, version: str = MODERN
) -> dict[str, Any]:
    capabilities: dict[str, Any] = {"extensions": {TASKS_EXTENSION: {}}} if tasks else {}
    return {
        **(params or {}),
        "_meta": {PROTOCOL_VERSION_KEY: version, CLIENT_CAPABILITIES_KEY: capabilities},
    }


def modern_headers(method: str, name: str | None = None, version: str = MODERN) -> dict[str, str]:
    headers = {**POST_HEADERS, "mcp-protocol-version": version, "mcp-method": method}
    if name is not None:
        headers["mcp-name"] = name
    return headers


async def modern_post(
    http: httpx.AsyncClient,
    url: str,
    id: int,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    name: str | None = None,
    tasks: bool = True,
) -> httpx.Response:
    return await http.post(
        url, content=rpc(id, method, envelope(params, tasks=tasks)), headers=modern_headers(method, name)
    )


# ----------------------------------------------------------------------------- the pure helpers


def test_sse_decoder_handles_split_chunks_crlf_and_comments() -> None:
    decoder = SSEDecoder()
    out: list[SSEEvent] = []
    raw = (
        b": keep-alive\r\n\r\nretry: 7\r\nid: p1.0\r\ndata: \r\n\r\n"
        b'id: p1.4\r\ndata: {"a":\r\ndata: 1}\r\n\r\n'
    )
    for i in range(len(raw)):  # one byte at a time
        out.extend(decoder.feed(raw[i : i + 1]))
    assert out == [SSEEvent("", "p1.0", "message", 7), SSEEvent('{"a":\n1}', "p1.4")]
    assert SSEDecoder().feed(sse_event("a\nb", id="g.3", retry=5)) == [SSEEvent("a\nb", "g.3", "message", 5)]


def test_header_value_encoding_round_trips() -> None:
    for value in ["plain", "Hello, 世界", " padded ", "line1\nline2", "=?base64?literal?=", "", "a b"]:
        encoded = encode_header_value(value)
        assert encoded.isascii() and "\n" not in encoded
        assert decode_header_value(encoded) == value
    assert encode_header_value("a b") == "a b"
    assert decode_header_value("=?base64?***?=") is None


def test_host_and_accept_rules() -> None:
    allowed = host_check(DEFAULT_ALLOWED_HOSTS)
    assert allowed("localhost") and allowed("LOCALHOST:1") and allowed("[::1]:8080")
    assert not allowed("localhost.evil.example") and not allowed("127.0.0.1:99999") and not allowed("")
    exact = host_check(["mcp.example.com:443", "api.example.com"])
    assert exact("mcp.example.com:443") and not exact("mcp.example.com:80") and exact("api.example.com:8443")
    assert host_check(None)("anything") and host_check(["*"])("anything")
    with pytest.raises(ValueError):
        host_check(["bad host:port:x"])
    assert accepts(["*/*"], "application/json", "text/event-stream")
    assert accepts(["text/event-stream;q=0.9", "application/json"], "application/json", "text/event-stream")
    assert not accepts(["application/json, text/event-stream;q=0"], "application/json", "text/event-stream")
    assert parse_event_id("p12.7") == ("p12", 7) and parse_event_id("p12") is None


# ----------------------------------------------------------------------------- 2025-11-25


async def test_handshake_session_rules(url: str, http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        session = await initialize(http, url)
        listed = await http.post(url, content=rpc(2, "tools/list"), headers=session_headers(session))
        assert listed.status_code == 200 and listed.headers["content-type"] == "application/json"
        assert {t["name"] for t in listed.json()["result"]["tools"]} >= {"echo", "gate", "job"}
        # no session header → 400; unknown session → 404
        missing = await http.post(url, content=rpc(3, "tools/list"), headers=POST_HEADERS)
        assert missing.status_code == 400 and missing.json()["error"]["code"] == -32600
        unknown = await http.post(url, content=rpc(4, "tools/list"), headers=session_headers("nope"))
        assert unknown.status_code == 404
        # an unsupported MCP-Protocol-Version → 400
        bad = await http.post(
            url,
            content=rpc(5, "tools/list"),
            headers=session_headers(session, **{"mcp-protocol-version": "1999-01-01"}),
        )
        assert bad.status_code == 400
        # Accept must list both types → else 406
        for accept in ("application/json", "text/event-stream"):
            refused = await http.post(
                url, content=rpc(6, "tools/list"), headers=session_headers(session, accept=accept)
            )
            assert refused.status_code == 406
        # not JSON → 400 with -32700; not application/json → 415
        garbage = await http.post(url, content=b"{nope", headers=session_headers(session))
        assert garbage.status_code == 400 and garbage.json()["error"]["code"] == -32700
        text = await http.post(
            url,
            content=rpc(7, "tools/list"),
            headers=session_headers(session, **{"content-type": "text/plain"}),
        )
        assert text.status_code == 415
        # other HTTP methods → 405 with Allow
        put = await http.put(url, content=b"{}", headers=session_headers(session))
        assert put.status_code == 405 and "POST" in put.headers["allow"]
        # DELETE ends the session; afterwards it is unknown
        deleted = await http.delete(url, headers=session_headers(session))
        assert deleted.status_code == 200
        after = await http.post(url, content=rpc(8, "tools/list"), headers=session_headers(session))
        assert after.status_code == 404
        assert (await http.delete(url, headers=session_headers(session))).status_code == 404


async def test_handshake_tools_call_is_sse_with_ids_priming_and_retry(
    url: str, http: httpx.AsyncClient
) -> None:
    """A call whose response is not there at once gets a resumable SSE stream: the priming
    event (an id, empty data, ``retry``) first, every event with an id of one stream."""
    with trio.fail_after(10):
        session = await initialize(http, url)
        params = {"name": "slow", "arguments": {"text": "hi"}}
        async with http.stream(
            "POST", url, content=rpc(2, "tools/call", params), headers=session_headers(session)
        ) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["x-accel-buffering"] == "no"
            seen, response = await until_response(r, 2)
        priming = seen[0]
        assert priming.data == "" and priming.retry == RETRY_MS and priming.id is not None
        assert all(e.id is not None for e in seen)
        ids = [parse_event_id(e.id or "") for e in seen]
        assert len({e.id for e in seen}) == len(seen) and len({i[0] for i in ids if i}) == 1  # one stream
        assert response["result"]["content"][0]["text"] == "hi"


async def test_handshake_call_answered_at_once_is_plain_json(url: str, http: httpx.AsyncClient) -> None:
    """A ``tools/call`` (plain or task-augmented) or ``tasks/result`` whose response is the
    first thing it produces is answered as one JSON object: nothing to resume, no stream kept
    for replay."""
    with trio.fail_after(10):
        session = await initialize(http, url)
        plain = {"name": "echo", "arguments": {"text": "hi"}}
        r = await http.post(url, content=rpc(2, "tools/call", plain), headers=session_headers(session))
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == {
            "jsonrpc": "2.0",
            "id": 2,
            "result": {"content": [{"type": "text", "text": "hi"}]},
        }
        task = {**plain, "task": {"ttl": 60_000}}
        r = await http.post(url, content=rpc(3, "tools/call", task), headers=session_headers(session))
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        task_id = r.json()["result"]["task"]["taskId"]
        r = await http.post(
            url, content=rpc(4, "tasks/result", {"taskId": task_id}), headers=session_headers(session)
        )
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json()["result"]["content"][0]["text"] == "hi"


async def test_handshake_call_with_progress_body_is_priming_progress_then_response(
    url: str, http: httpx.AsyncClient
) -> None:
    """What comes before the response makes the answer an SSE stream; the server writes what
    is ready in one body part, and the client still sees the priming event first (its id and
    ``retry``), then the progress and the response on the same stream, and the body ends."""
    with trio.fail_after(10):
        session = await initialize(http, url)
        for request_id in (2, 3):  # a second POST stream: its own key, the same shape
            params = {"name": "noted", "arguments": {"text": "hi"}, "_meta": {"progressToken": request_id}}
            r = await http.post(
                url, content=rpc(request_id, "tools/call", params), headers=session_headers(session)
            )
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert r.content.startswith(f"retry: {RETRY_MS}\nid: p".encode()) and r.content.endswith(b"\n\n")
            seen = SSEDecoder().feed(r.content)
            assert len(seen) == 3, seen
            priming, progress, answer = seen
            assert priming.data == "" and priming.retry == RETRY_MS
            ids = [parse_event_id(e.id or "") for e in seen]
            assert all(i is not None for i in ids)
            assert len({i[0] for i in ids if i}) == 1  # one stream
            assert [i[1] for i in ids if i] == sorted(i[1] for i in ids if i)  # ids in order
            assert json.loads(progress.data)["method"] == "notifications/progress"
            response = json.loads(answer.data)
            assert response["id"] == request_id and response["result"]["content"][0]["text"] == "hi"


async def test_handshake_progress_goes_on_the_post_stream(
    url: str, http: httpx.AsyncClient, probe: Probe
) -> None:
    with trio.fail_after(10):
        session = await initialize(http, url)
        params = {"name": "gate", "arguments": {"tag": "p"}, "_meta": {"progressToken": "tok"}}
        async with http.stream(
            "POST", url, content=rpc(2, "tools/call", params), headers=session_headers(session)
        ) as r:
            await probe.started["p"].wait()
            probe.release["p"].set()
            seen, response = await until_response(r, 2)
        methods = [json.loads(e.data).get("method") for e in seen if e.data]
        assert methods == ["notifications/progress", None]
        assert response["result"]["content"][0]["text"] == "p"


async def test_get_stream_is_one_per_session(url: str, http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        session = await initialize(http, url)
        headers = session_headers(session, accept="text/event-stream")
        async with http.stream("GET", url, headers=headers) as first:
            assert first.status_code == 200 and first.headers["content-type"].startswith("text/event-stream")
            async for event in events(first):
                assert event.data == "" and event.id is not None and event.retry == RETRY_MS
                break
            second = await http.get(url, headers=headers)
            assert second.status_code == 409
        no_session = await http.get(url, headers={"accept": "text/event-stream"})
        assert no_session.status_code == 400
        not_sse = await http.get(url, headers=session_headers(session, accept="application/json"))
        assert not_sse.status_code == 406


async def test_resumption_replays_a_task_status_notification(
    url: str, http: httpx.AsyncClient, probe: Probe
) -> None:
    with trio.fail_after(15):
        session = await initialize(http, url)
        headers = session_headers(session, accept="text/event-stream")
        async with http.stream("GET", url, headers=headers) as stream:
            async for event in events(stream):
                last_id = event.id
                break
        assert last_id is not None
        # the GET stream has dropped; a task's status changes meanwhile
        params = {"name": "gate", "arguments": {"tag": "t"}, "task": {"ttl": 60_000}}
        created = await http.post(url, content=rpc(2, "tools/call", params), headers=session_headers(session))
        _, response = await until_response(created, 2)
        task_id = response["result"]["task"]["taskId"]
        await probe.started["t"].wait()
        probe.release["t"].set()
        while True:
            got = await http.post(
                url, content=rpc(3, "tasks/get", {"taskId": task_id}), headers=session_headers(session)
            )
            if got.json()["result"]["status"] == "completed":
                break
            await trio.sleep(0.01)
        # reconnect with Last-Event-ID: the status notification is replayed
        statuses: list[str] = []
        ids: list[str] = []
        async with http.stream("GET", url, headers={**headers, "last-event-id": last_id}) as resumed:
            assert resumed.status_code == 200
            async for event in events(resumed):
                assert event.id is not None
                ids.append(event.id)
                if event.data:
                    message = json.loads(event.data)
                    if message.get("method") == "notifications/tasks/status":
                        assert message["params"]["taskId"] == task_id
                        statuses.append(message["params"]["status"])
                        if statuses[-1] == "completed":
                            break
        assert statuses[-1] == "completed"
        numbers = [parse_event_id(i) for i in ids]
        assert all(n is not None for n in numbers)
        assert [n[1] for n in numbers if n] == sorted(n[1] for n in numbers if n)


async def test_dropped_post_stream_is_resumed_and_loses_no_response(
    url: str, http: httpx.AsyncClient, probe: Probe
) -> None:
    with trio.fail_after(10):
        session = await initialize(http, url)
        params = {"name": "gate", "arguments": {"tag": "d"}}
        async with http.stream(
            "POST", url, content=rpc(2, "tools/call", params), headers=session_headers(session)
        ) as r:
            async for event in events(r):
                priming = event.id
                break
        assert priming is not None and priming.startswith("p")
        await probe.started["d"].wait()
        assert not probe.cancelled["d"].is_set()  # a dropped stream is not a cancellation here
        probe.release["d"].set()
        headers = session_headers(session, accept="text/event-stream", **{"last-event-id": priming})
        async with http.stream("GET", url, headers=headers) as resumed:
            assert resumed.status_code == 200
            _, response = await until_response(resumed, 2)
        assert response["result"]["content"][0]["text"] == "d"
        stale = await http.get(url, headers={**headers, "last-event-id": "nonsense"})
        assert stale.status_code == 400


async def test_handshake_plain_call_elicits_on_its_post_stream(url: str, http: httpx.AsyncClient) -> None:
    """A plain call that asks the client something: the request reaches the client on the
    call's own SSE stream while the call waits, and the client's answer (another POST)
    lets the call finish on that stream."""
    hello = {**INITIALIZE, "capabilities": {"elicitation": {}}}
    with trio.fail_after(10):
        response = await http.post(url, content=rpc(1, "initialize", hello), headers=POST_HEADERS)
        session = response.headers["mcp-session-id"]
        await http.post(url, content=rpc(None, "notifications/initialized"), headers=session_headers(session))
        params = {"name": "ask", "arguments": {}}
        async with http.stream(
            "POST", url, content=rpc(2, "tools/call", params), headers=session_headers(session)
        ) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            answer: dict[str, Any] | None = None
            async for event in events(r):
                message = json.loads(event.data) if event.data else {}
                if message.get("method") == "elicitation/create":
                    reply = {
                        "jsonrpc": "2.0",
                        "id": message["id"],
                        "result": {"action": "accept", "content": {"name": "Ada"}},
                    }
                    posted = await http.post(url, content=json.dumps(reply), headers=session_headers(session))
                    assert posted.status_code == 202
                elif message.get("id") == 2:
                    answer = message
                    break
        assert answer is not None and answer["result"]["content"][0]["text"] == "hello Ada"


async def test_delete_ends_a_plain_call_in_progress(url: str, http: httpx.AsyncClient, probe: Probe) -> None:
    """Ending the session stops its plain calls: the tool is cancelled and the call's POST
    response ends (no response to a call of a session that is gone)."""
    with trio.fail_after(10):
        session = await initialize(http, url)
        params = {"name": "gate", "arguments": {"tag": "gone"}}
        async with http.stream(
            "POST", url, content=rpc(2, "tools/call", params), headers=session_headers(session)
        ) as r:
            await probe.started["gone"].wait()
            assert (await http.delete(url, headers=session_headers(session))).status_code == 200
            await probe.cancelled["gone"].wait()
            seen = [json.loads(e.data) for e in [e async for e in events(r)] if e.data]
        assert all(message.get("id") != 2 for message in seen)  # the stream ended, unanswered


async def test_idle_sessions_expire(probe: Probe, http: httpx.AsyncClient) -> None:
    async with serving(make_server(probe), idle_timeout=0.2) as endpoint:
        with trio.fail_after(10):
            session = await initialize(http, endpoint)
            await trio.sleep(0.5)
            gone = await http.post(endpoint, content=rpc(2, "tools/list"), headers=session_headers(session))
            assert gone.status_code == 404


async def test_delete_cancels_the_sessions_tasks(url: str, http: httpx.AsyncClient, probe: Probe) -> None:
    with trio.fail_after(10):
        session = await initialize(http, url)
        params = {"name": "gate", "arguments": {"tag": "del"}, "task": {"ttl": 60_000}}
        created = await http.post(url, content=rpc(2, "tools/call", params), headers=session_headers(session))
        _, response = await until_response(created, 2)
        assert response["result"]["task"]["status"] == "working"
        await probe.started["del"].wait()
        assert (await http.delete(url, headers=session_headers(session))).status_code == 200
        await probe.cancelled["del"].wait()  # no authentication: the tasks were the session's


async def test_sessions_are_bounded(probe: Probe, http: httpx.AsyncClient) -> None:
    async with serving(make_server(probe), max_sessions=1) as endpoint:
        with trio.fail_after(10):
            first = await initialize(http, endpoint)
            refused = await http.post(
                endpoint, content=rpc(1, "initialize", INITIALIZE), headers=POST_HEADERS
            )
            assert refused.status_code == 503 and refused.headers["retry-after"]
            assert (await http.delete(endpoint, headers=session_headers(first))).status_code == 200
            await initialize(http, endpoint)


# ----------------------------------------------------------------------------- 2026-07-28


async def test_modern_requests_are_stateless(url: str, http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        discovered = await modern_post(http, url, 1, "server/discover")
        assert discovered.status_code == 200 and "mcp-session-id" not in discovered.headers
        assert MODERN in discovered.json()["result"]["supportedVersions"]
        called = await modern_post(
            http, url, 2, "tools/call", {"name": "echo", "arguments": {"text": "x"}}, name="echo"
        )
        assert called.status_code == 200 and called.headers["content-type"] == "application/json"
        assert called.json()["result"]["content"][0]["text"] == "x"
        # a base64-encoded Mcp-Name is decoded before comparing
        encoded = await modern_post(
            http,
            url,
            3,
            "tools/call",
            {"name": "echo", "arguments": {"text": "y"}},
            name="=?base64?ZWNobw==?=",
        )
        assert encoded.status_code == 200 and encoded.json()["result"]["content"][0]["text"] == "y"
        # notifications are accepted (202); GET and DELETE are not offered in this era
        note = await http.post(
            url,
            content=rpc(None, "notifications/cancelled", envelope({"requestId": 9})),
            headers=modern_headers("notifications/cancelled"),
        )
        assert note.status_code == 202
        get = await http.get(url, headers={"accept": "text/event-stream", "mcp-protocol-version": MODERN})
        delete = await http.delete(url, headers={"mcp-protocol-version": MODERN})
        assert get.status_code == 405 and delete.status_code == 405


@pytest.mark.parametrize(
    ("method", "params", "headers"),
    [
        pytest.param("tools/list", {}, {"mcp-protocol-version": None}, id="missing-version"),
        pytest.param("tools/list", {}, {"mcp-protocol-version": HANDSHAKE}, id="version-mismatch"),
        pytest.param("tools/list", {}, {"mcp-method": None}, id="missing-method"),
        pytest.param("tools/list", {}, {"mcp-method": "tools/call"}, id="method-mismatch"),
        pytest.param(
            "tools/call", {"name": "echo", "arguments": {"text": "a"}}, {}, id="missing-name-tools-call"
        ),
        pytest.param(
            "tools/call",
            {"name": "echo", "arguments": {"text": "a"}},
            {"mcp-name": "gate"},
            id="name-mismatch-tools-call",
        ),
        pytest.param(
            "tools/call",
            {"name": "echo", "arguments": {"text": "a"}},
            {"mcp-name": "=?base64?%%?="},
            id="malformed-base64",
        ),
        pytest.param("tasks/get", {"taskId": "abc"}, {"mcp-name": "xyz"}, id="name-mismatch-tasks-get"),
        pytest.param("tasks/get", {"taskId": "abc"}, {}, id="missing-name-tasks-get"),
        pytest.param("tasks/cancel", {"taskId": "abc"}, {"mcp-name": "xyz"}, id="name-mismatch-tasks-cancel"),
    ],
)
async def test_modern_header_mismatch_is_400_and_32020(
    url: str, http: httpx.AsyncClient, method: str, params: dict[str, Any], headers: dict[str, str | None]
) -> None:
    sent: dict[str, str] = dict(modern_headers(method))
    for key, value in headers.items():
        if value is None:
            sent.pop(key, None)
        else:
            sent[key] = value
    with trio.fail_after(10):
        response = await http.post(url, content=rpc(7, method, envelope(params)), headers=sent)
    assert response.status_code == 400
    body = response.json()
    assert body["error"]["code"] == -32020 and body["id"] == 7


async def test_modern_error_statuses(url: str, http: httpx.AsyncClient) -> None:
    with trio.fail_after(10):
        for method in ("initialize", "ping", "tasks/result", "logging/setLevel", "no/such/method"):
            params = {**INITIALIZE} if method == "initialize" else {}
            response = await modern_post(http, url, 1, method, params)
            assert response.status_code == 404, method
            assert response.json()["error"]["code"] == -32601
        # the header says modern but the body has no envelope → -32602
        bare = await http.post(url, content=rpc(2, "tools/list", {}), headers=modern_headers("tools/list"))
        assert bare.status_code == 400 and bare.json()["error"]["code"] == -32602
        # an unsupported version in both header and body → -32022, with what we support
        odd = await http.post(
            url,
            content=rpc(3, "tools/list", envelope({}, version="v999.0.0")),
            headers=modern_headers("tools/list", version="v999.0.0"),
        )
        assert odd.status_code == 400
        error = odd.json()["error"]
        assert error["code"] == -32022 and error["data"]["requested"] == "v999.0.0"
        # a missing capability → -32021; unknown tool → -32602
        needs = await modern_post(
            http, url, 4, "tools/call", {"name": "job", "arguments": {"tag": "z"}}, name="job", tasks=False
        )
        assert needs.status_code == 400 and needs.json()["error"]["code"] == -32021
        unknown = await modern_post(http, url, 5, "tools/call", {"name": "nope"}, name="nope")
        assert unknown.status_code == 400 and unknown.json()["error"]["code"] == -32602


async def test_modern_tasks_live_across_posts(url: str, http: httpx.AsyncClient, probe: Probe) -> None:
    with trio.fail_after(10):
        created = await modern_post(
            http, url, 1, "tools/call", {"name": "job", "arguments": {"tag": "a"}}, name="job"
        )
        assert created.status_code == 200
        task = created.json()["result"]
        assert task["resultType"] == "task" and task["status"] == "working"
        task_id = task["taskId"]
        await probe.started["a"].wait()
        got = await modern_post(http, url, 2, "tasks/get", {"taskId": task_id}, name=task_id)
        assert got.status_code == 200 and got.json()["result"]["status"] == "working"
        cancelled = await modern_post(http, url, 3, "tasks/cancel", {"taskId": task_id}, name=task_id)
        assert cancelled.status_code == 200
        await probe.cancelled["a"].wait()
        after = await modern_post(http, url, 4, "tasks/get", {"taskId": task_id}, name=task_id)
        assert after.json()["result"]["status"] == "cancelled"
        # a second task runs to completion and its result is read on a later POST
        second = await modern_post(
            http, url, 5, "tools/call", {"name": "job", "arguments": {"tag": "b"}}, name="job"
        )
        second_id = second.json()["result"]["taskId"]
        probe.release["b"].set()
        while True:
            done = (
                await modern_post(http, url, 6, "tasks/get", {"taskId": second_id}, name=second_id)
            ).json()
            if done["result"]["status"] == "completed":
                break
            await trio.sleep(0.01)
        assert done["result"]["result"]["content"][0]["text"] == "job b"
        # an unknown task id is -32602 (400)
        missing = await modern_post(http, url, 7, "tasks/get", {"taskId": "nope"}, name="nope")
        assert missing.status_code == 400 and missing.json()["error"]["code"] == -32602


async def test_modern_sse_streams_notifications_then_the_response(
    url: str, http: httpx.AsyncClient, probe: Probe
) -> None:
    params = envelope({"name": "gate", "arguments": {"tag": "s"}, "_meta": {}}, tasks=False)
    params["_meta"]["progressToken"] = 5
    with trio.fail_after(10):
        async with http.stream(
            "POST", url, content=rpc(1, "tools/call", params), headers=modern_headers("tools/call", "gate")
        ) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            assert r.headers["x-accel-buffering"] == "no"
            probe.release["s"].set()
            seen, response = await until_response(r, 1)
    assert [json.loads(e.data).get("method") for e in seen if e.data] == ["notifications/progress", None]
    assert response["result"]["content"][0]["text"] == "s"


async def test_closing_a_modern_response_cancels_the_tool(
    url: str, http: httpx.AsyncClient, probe: Probe
) -> None:
    params = envelope({"name": "gate", "arguments": {"tag": "c"}}, tasks=False)
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:

            async def call() -> None:
                await http.post(
                    url, content=rpc(1, "tools/call", params), headers=modern_headers("tools/call", "gate")
                )

            nursery.start_soon(call)
            await probe.started["c"].wait()
            nursery.cancel_scope.cancel()  # closes the connection: the response stream is gone
        await probe.cancelled["c"].wait()  # the tool itself saw trio.Cancelled


async def test_both_eras_on_one_endpoint_at_once(url: str, http: httpx.AsyncClient, probe: Probe) -> None:
    with trio.fail_after(10):
        session = await initialize(http, url)
        results: dict[str, str] = {}

        async def handshake_call() -> None:
            r = await http.post(
                url,
                content=rpc(2, "tools/call", {"name": "gate", "arguments": {"tag": "old"}}),
                headers=session_headers(session),
            )
            _, response = await until_response(r, 2)
            results["old"] = response["result"]["content"][0]["text"]

        async def modern_call() -> None:
            r = await modern_post(
                http,
                url,
                2,
                "tools/call",
                {"name": "gate", "arguments": {"tag": "new"}},
                name="gate",
                tasks=False,
            )
            results["new"] = r.json()["result"]["content"][0]["text"]

        async with trio.open_nursery() as nursery:
            nursery.start_soon(handshake_call)
            nursery.start_soon(modern_call)
            await probe.started["old"].wait()
            await probe.started["new"].wait()  # both running at once
            probe.release["old"].set()
            probe.release["new"].set()
        assert results == {"old": "old", "new": "new"}


# ----------------------------------------------------------------------------- security


async def test_origin_host_and_body_size_are_checked(probe: Probe, http: httpx.AsyncClient) -> None:
    async with serving(make_server(probe), max_body_size=1024) as endpoint:
        with trio.fail_after(10):
            evil = await http.post(
                endpoint,
                content=rpc(1, "initialize", INITIALIZE),
                headers={**POST_HEADERS, "origin": "https://evil.example"},
            )
            assert evil.status_code == 403
            local = await http.post(
                endpoint,
                content=rpc(1, "initialize", INITIALIZE),
                headers={**POST_HEADERS, "origin": "http://localhost:5173"},
            )
            assert local.status_code == 200
            rebound = await http.post(
                endpoint,
                content=rpc(1, "initialize", INITIALIZE),
                headers={**POST_HEADERS, "host": "evil.example"},
            )
            assert rebound.status_code == 421
            named = await http.post(
                endpoint,
                content=rpc(1, "initialize", INITIALIZE),
                headers={**POST_HEADERS, "host": "localhost:1234"},
            )
            assert named.status_code == 200
            big = await http.post(endpoint, content=b"x" * 2048, headers=POST_HEADERS)
            assert big.status_code == 413
            other = await http.get(endpoint.replace("/mcp", "/elsewhere"))
            assert other.status_code == 404


async def test_bearer_auth_and_protected_resource_metadata(probe: Probe, http: httpx.AsyncClient) -> None:
    async with serving(
        make_server(probe),
        authenticate=TOKENS.get,
        authorization_servers=["https://auth.example"],
        scopes_supported=["mcp"],
    ) as endpoint:
        with trio.fail_after(10):
            base = endpoint.removesuffix("/mcp")
            missing = await http.post(
                endpoint, content=rpc(1, "initialize", INITIALIZE), headers=POST_HEADERS
            )
            assert missing.status_code == 401
            challenge = missing.headers["www-authenticate"]
            metadata_url = f"{base}/.well-known/oauth-protected-resource/mcp"
            assert challenge == f'Bearer resource_metadata="{metadata_url}"'
            wrong = await http.post(
                endpoint,
                content=rpc(1, "initialize", INITIALIZE),
                headers={**POST_HEADERS, "authorization": "Bearer nope"},
            )
            assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
            for where in (metadata_url, f"{base}/.well-known/oauth-protected-resource"):
                document = await http.get(where)
                assert document.status_code == 200
                assert document.json() == {
                    "resource": endpoint,
                    "authorization_servers": ["https://auth.example"],
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": ["mcp"],
                }
            alice = {"authorization": "Bearer tok-alice"}
            session = await initialize(http, endpoint, **alice)
            mine = await http.post(
                endpoint, content=rpc(2, "tools/list"), headers=session_headers(session, **alice)
            )
            assert mine.status_code == 200
            # another identity cannot use alice's session
            bob = await http.post(
                endpoint,
                content=rpc(2, "tools/list"),
                headers=session_headers(session, authorization="Bearer tok-bob"),
            )
            assert bob.status_code == 404
            # modern era: tasks belong to the identity across POSTs, and to nobody else
            created = await http.post(
                endpoint,
                content=rpc(3, "tools/call", envelope({"name": "job", "arguments": {"tag": "auth"}})),
                headers={**modern_headers("tools/call", "job"), **alice},
            )
            task_id = created.json()["result"]["taskId"]
            get = rpc(4, "tasks/get", envelope({"taskId": task_id}))
            own = await http.post(
                endpoint, content=get, headers={**modern_headers("tasks/get", task_id), **alice}
            )
            assert own.status_code == 200 and own.json()["result"]["taskId"] == task_id
            theirs = await http.post(
                endpoint,
                content=get,
                headers={**modern_headers("tasks/get", task_id), "authorization": "Bearer tok-bob"},
            )
            assert theirs.status_code == 400 and theirs.json()["error"]["code"] == -32602
            probe.release["auth"].set()
            async with connect_http(endpoint, token="tok-alice") as client:
                assert (await client.call_tool("echo", {"text": "authed"})).text == "authed"
            with pytest.raises(McpError):
                async with connect_http(endpoint) as client:
                    pass


JWT_SECRET = "a-test-secret-of-at-least-32-bytes-for-hs256"
RESOURCE = "https://mcp.example/mcp"


def jwt_token(key: Any = JWT_SECRET, algorithm: str = "HS256", **claims: Any) -> str:
    import time

    import jwt

    payload = {"sub": "alice", "aud": RESOURCE, "exp": time.time() + 60, "scope": "mcp:tools", **claims}
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, key, algorithm=algorithm)


def test_jwt_verifier_checks_signature_expiry_audience_issuer_and_scopes() -> None:
    import time

    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    from trio_mcp.transports.security import AccessToken, InsufficientScope, jwt_verifier

    verify = jwt_verifier(JWT_SECRET, audience=RESOURCE, issuer="https://auth.example")
    good = verify(jwt_token(iss="https://auth.example", scope="mcp:tools read"))
    assert good == AccessToken("alice", {"mcp:tools", "read"})
    assert good is not None and good.claims["iss"] == "https://auth.example"
    assert verify(jwt_token(iss="https://auth.example", scope=None)) == AccessToken("alice")
    for refused in (
        jwt_token(iss="https://auth.example", exp=time.time() - 5),  # expired
        jwt_token(iss="https://auth.example", exp=None),  # no expiry at all
        jwt_token(iss="https://auth.example", aud="https://other.example/mcp"),  # another resource
        jwt_token(iss="https://auth.example", aud=None),
        jwt_token(iss="https://evil.example"),  # another issuer
        jwt_token(),  # no issuer, but one is required
        jwt_token(iss="https://auth.example", sub=None),
        jwt_token("another-secret-of-at-least-32-bytes-long!", iss="https://auth.example"),  # forged
        jwt_token(iss="https://auth.example", nbf=time.time() + 60),  # not yet valid
        jwt_token(None, "none", iss="https://auth.example"),  # unsigned
        "not.a.jwt",
        "garbage",
    ):
        assert verify(refused) is None, refused
    # aud may be a list naming this resource among others; scopes may come as `scp`, a list
    assert jwt_verifier(JWT_SECRET, audience=RESOURCE)(
        jwt_token(aud=["https://other.example", RESOURCE], scope=None, scp=["a", "b"])
    ) == AccessToken("alice", {"a", "b"})
    # required scopes: a valid token without them is not refused, it is insufficient
    strict = jwt_verifier(JWT_SECRET, audience=RESOURCE, required_scopes=["mcp:tools", "mcp:admin"])
    with pytest.raises(InsufficientScope) as insufficient:
        strict(jwt_token())
    assert insufficient.value.required == ("mcp:tools", "mcp:admin")
    assert insufficient.value.token == AccessToken("alice", {"mcp:tools"})
    assert strict(jwt_token(scope="mcp:admin mcp:tools")) == AccessToken("alice", {"mcp:admin", "mcp:tools"})
    # public keys: RSA and EC, as key objects or PEM; the key may be picked by `kid`
    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    by_kid = {"r": rsa_key.public_key(), "e": ec_key.public_key()}
    keyed = jwt_verifier(lambda header: by_kid.get(header.get("kid")), audience=RESOURCE)
    import jwt

    for kid, private, algorithm in (("r", rsa_key, "RS256"), ("e", ec_key, "ES256")):
        claims = {"sub": "bob", "aud": RESOURCE, "exp": time.time() + 60}
        signed = jwt.encode(claims, private, algorithm=algorithm, headers={"kid": kid})
        assert keyed(signed) == AccessToken("bob")
        assert keyed(jwt.encode(claims, private, algorithm=algorithm, headers={"kid": "?"})) is None
    from cryptography.hazmat.primitives import serialization

    pem = rsa_key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    rs256 = jwt_verifier(pem, audience=RESOURCE)
    assert rs256(jwt_token(rsa_key, "RS256")) == AccessToken("alice", {"mcp:tools"})
    # algorithm confusion: an HMAC token signed with the public key as its secret is refused
    assert rs256(jwt_token(JWT_SECRET)) is None
    with pytest.raises(ValueError, match="mix"):
        jwt_verifier(pem, audience=RESOURCE, algorithms=["RS256", "HS256"])
    with pytest.raises(ValueError, match="none"):
        jwt_verifier(JWT_SECRET, audience=RESOURCE, algorithms=["none"])
    with pytest.raises(ValueError, match="audience"):
        jwt_verifier(JWT_SECRET, audience="")
    with pytest.raises(ValueError, match="scope"):
        jwt_verifier(JWT_SECRET, audience=RESOURCE, required_scopes=['a"b'])


async def test_jwt_bearer_auth_401_403_and_metadata(probe: Probe, http: httpx.AsyncClient) -> None:
    import time

    from trio_mcp.transports.security import jwt_verifier

    verify = jwt_verifier(JWT_SECRET, audience=RESOURCE, required_scopes=["mcp:tools"])
    async with serving(
        make_server(probe),
        authenticate=verify,
        authorization_servers=["https://auth.example"],
        resource_url=RESOURCE,
    ) as endpoint:
        with trio.fail_after(10):
            metadata_url = "https://mcp.example/.well-known/oauth-protected-resource/mcp"

            async def post(token: str | None) -> httpx.Response:
                auth = {"authorization": f"Bearer {token}"} if token is not None else {}
                return await http.post(
                    endpoint, content=rpc(1, "initialize", INITIALIZE), headers={**POST_HEADERS, **auth}
                )

            missing = await post(None)
            assert missing.status_code == 401
            assert missing.headers["www-authenticate"] == (
                f'Bearer resource_metadata="{metadata_url}", scope="mcp:tools"'
            )
            for refused in (
                jwt_token(exp=time.time() - 5),  # expired
                jwt_token(aud="https://other.example/mcp"),  # issued for another resource
                jwt_token("a-forged-secret-of-at-least-32-bytes-long"),
            ):
                answer = await post(refused)
                assert answer.status_code == 401
                assert answer.headers["www-authenticate"] == (
                    f'Bearer resource_metadata="{metadata_url}", scope="mcp:tools", error="invalid_token"'
                )
            lacking = await post(jwt_token(scope="profile"))
            assert lacking.status_code == 403
            assert lacking.headers["www-authenticate"] == (
                f'Bearer error="insufficient_scope", scope="mcp:tools", resource_metadata="{metadata_url}"'
            )
            assert lacking.json()["error"]["message"].startswith("Forbidden")
            good = await post(jwt_token())
            assert good.status_code == 200 and good.headers["mcp-session-id"]
            base = endpoint.removesuffix("/mcp")
            for where in (
                f"{base}/.well-known/oauth-protected-resource/mcp",
                f"{base}/.well-known/oauth-protected-resource",
            ):
                document = await http.get(where)
                assert document.status_code == 200
                assert document.json() == {
                    "resource": RESOURCE,
                    "authorization_servers": ["https://auth.example"],
                    "bearer_methods_supported": ["header"],
                    "scopes_supported": ["mcp:tools"],  # the verifier's required scopes
                }
            # both eras with a valid token: the identity is the token's subject
            for protocol in (HANDSHAKE, MODERN):
                async with connect_http(endpoint, token=jwt_token(), protocol=protocol) as client:
                    assert (await client.call_tool("echo", {"text": protocol})).text == protocol
            # a modern task belongs to the subject: another subject cannot see it
            created = await http.post(
                endpoint,
                content=rpc(3, "tools/call", envelope({"name": "job", "arguments": {"tag": "jwt"}})),
                headers={**modern_headers("tools/call", "job"), "authorization": f"Bearer {jwt_token()}"},
            )
            task_id = created.json()["result"]["taskId"]
            get = rpc(4, "tasks/get", envelope({"taskId": task_id}))
            for sub, status in (("alice", 200), ("mallory", 400)):
                seen = await http.post(
                    endpoint,
                    content=get,
                    headers={
                        **modern_headers("tasks/get", task_id),
                        "authorization": f"Bearer {jwt_token(sub=sub)}",
                    },
                )
                assert seen.status_code == status
            probe.release["jwt"].set()


async def test_scopes_from_a_custom_verifier(probe: Probe, http: httpx.AsyncClient) -> None:
    """A hand-written verifier may return an AccessToken and raise InsufficientScope (async too)."""
    from trio_mcp.transports.security import AccessToken, InsufficientScope

    async def verify(token: str) -> AccessToken | None:
        await trio.lowlevel.checkpoint()
        if token == "reader":
            raise InsufficientScope(["write"], AccessToken("r", {"read"}))
        return AccessToken("w", {"read", "write"}) if token == "writer" else None

    async with serving(
        make_server(probe), authenticate=verify, scopes_supported=["read", "write"]
    ) as endpoint:
        with trio.fail_after(10):
            reader = await http.post(
                endpoint,
                content=rpc(1, "initialize", INITIALIZE),
                headers={**POST_HEADERS, "authorization": "Bearer reader"},
            )
            assert reader.status_code == 403
            assert reader.headers["www-authenticate"].startswith(
                'Bearer error="insufficient_scope", scope="write"'
            )
            missing = await http.post(
                endpoint, content=rpc(1, "initialize", INITIALIZE), headers=POST_HEADERS
            )
            assert missing.status_code == 401 and "scope=" not in missing.headers["www-authenticate"]
            async with connect_http(endpoint, token="writer") as client:
                assert (await client.call_tool("echo", {"text": "w"})).text == "w"
            document = await http.get(endpoint.replace("/mcp", "/.well-known/oauth-protected-resource"))
            assert document.json()["scopes_supported"] == ["read", "write"]


# ----------------------------------------------------------------------------- our client


async def test_connect_http_handshake_era(url: str, probe: Probe) -> None:
    async def on_elicit(params: Any) -> Any:
        from trio_mcp.protocol.messages import ElicitResult

        return ElicitResult(action="accept", content={"name": "ada"})

    with trio.fail_after(10):
        async with connect_http(url, on_elicit=on_elicit) as client:
            assert client.era == "handshake" and client.protocol_version == HANDSHAKE
            assert (await client.call_tool("echo", {"text": "hi"})).text == "hi"
            created = await client.call_tool_as_task("gate", {"tag": "h"})
            await probe.started["h"].wait()
            probe.release["h"].set()
            assert (await client.task_result(created.task.task_id)).text == "h"
            # a server→client request (elicitation) reaches us on the GET stream
            assert (await client.call_tool("ask")).text == "hello ada"


async def test_connect_http_modern_era(url: str, probe: Probe) -> None:
    with trio.fail_after(10):
        async with connect_http(url, protocol=MODERN) as client:
            assert client.era == "modern"
            assert (await client.call_tool("echo", {"text": "hi"})).text == "hi"
            started = await client.start_tool("job", {"tag": "m"})
            assert not hasattr(started, "content")
            probe.release["m"].set()
            assert (await client.task_result(started.task_id, default_interval_ms=10)).text == "job m"
        async with connect_http(url, protocol="auto") as client:
            assert client.era == "modern"


async def test_connect_http_modern_cancel_closes_the_request(url: str, probe: Probe) -> None:
    with trio.fail_after(10):
        async with connect_http(url, protocol=MODERN) as client:
            client.tasks_extension = False  # a plain call, not a task
            with trio.move_on_after(5) as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(client.call_tool, "gate", {"tag": "x"})
                    await probe.started["x"].wait()
                    nursery.cancel_scope.cancel()
            assert not scope.cancelled_caught
            await probe.cancelled["x"].wait()


async def test_two_hundred_concurrent_clients_get_their_own_answers(probe: Probe) -> None:
    """200 clients at once, both eras mixed, three calls each in flight together: every answer
    goes to the call that asked for it. (Each handshake-era client holds up to five connections:
    the listen backlog is raised above hypercorn's 100, which a burst like this overflows. The
    clients share one TLS context: httpx would load the CA bundle for each, ~20 ms apiece.)"""
    import ssl

    tls = ssl.create_default_context()

    async def one(n: int) -> None:
        protocol = HANDSHAKE if n % 2 else MODERN
        async with connect_http(url, protocol=protocol, verify=tls) as client:
            async with trio.open_nursery() as nursery:
                for k in range(3):

                    async def call(k: int = k) -> None:
                        text = f"client-{n}-call-{k}"
                        assert (await client.call_tool("echo", {"text": text})).text == text

                    nursery.start_soon(call)

    with trio.fail_after(15):
        async with serving(make_server(probe), backlog=1024) as url, trio.open_nursery() as nursery:
            for n in range(200):
                nursery.start_soon(one, n)


async def test_asgi_app_under_hypercorn_with_lifespan(probe: Probe, http: httpx.AsyncClient) -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    app = mcp_asgi_app(make_server(probe), path="/api/mcp")
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = logging.getLogger("test.hypercorn")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(serve, app, config)
            endpoint = binds[0] + "/api/mcp"
            async with connect_http(endpoint, protocol=MODERN) as client:
                assert (await client.call_tool("echo", {"text": "mounted"})).text == "mounted"
            nursery.cancel_scope.cancel()


async def test_hypercorn_stops_with_a_plain_call_in_progress(probe: Probe) -> None:
    """Mounted under hypercorn, a 2025-11-25 plain call runs in its POST's task: hypercorn's
    shutdown cancels that task (after its graceful timeout, before the app's lifespan ends),
    and the call with it; the server stops."""
    from hypercorn.config import Config
    from hypercorn.trio import serve

    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = logging.getLogger("test.hypercorn")
    config.graceful_timeout = 0.2
    stop = trio.Event()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            binds = await nursery.start(
                partial(serve, mcp_asgi_app(make_server(probe)), config, shutdown_trigger=stop.wait)
            )
            endpoint = binds[0] + "/mcp"
            async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as http:
                session = await initialize(http, endpoint)
                params = {"name": "gate", "arguments": {"tag": "held"}}

                async def call() -> None:
                    with contextlib.suppress(httpx.HTTPError):
                        await http.post(
                            endpoint, content=rpc(2, "tools/call", params), headers=session_headers(session)
                        )

                nursery.start_soon(call)
                await probe.started["held"].wait()
                stop.set()
                await probe.cancelled["held"].wait()
        assert not probe.release["held"].is_set()


async def test_a_plain_call_outlives_a_client_that_stops_reading(probe: Probe) -> None:
    """On our own server, a client that stops reading its call's SSE stream is let go (its
    connection closed) once a write has waited ``write_timeout``; the call, which runs in that
    connection's task, goes on (a dropped connection is not a cancellation) and finishes when
    its work does."""
    from trio_mcp.server import McpHttpApp
    from trio_mcp.transports.h11_server import H11Server

    server = make_server(probe)

    @server.tool()
    async def flood(ctx: Context) -> str:
        """Send megabytes of progress, then wait until released."""
        for i in range(200):
            await ctx.report_progress(i, 200, "x" * 65536)
        probe.started["flooded"].set()
        try:
            await probe.release["flood"].wait()
        except trio.Cancelled:
            probe.cancelled["flood"].set()
            raise
        probe.started["flood done"].set()
        return "done"

    app = McpHttpApp(server)
    http_server = H11Server(app, write_timeout=0.3)
    with trio.fail_after(20):
        async with app.running(), trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            await nursery.start(http_server.serve, listeners)
            port = listeners[0].socket.getsockname()[1]
            url = f"http://127.0.0.1:{port}/mcp"
            async with httpx.AsyncClient(timeout=httpx.Timeout(10.0)) as http:
                session = await initialize(http, url)
            body = rpc(2, "tools/call", {"name": "flood", "arguments": {}, "_meta": {"progressToken": 1}})
            headers = {
                **session_headers(session),
                "host": f"127.0.0.1:{port}",
                "content-length": str(len(body)),
            }
            head = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            stalled = await trio.open_tcp_stream("127.0.0.1", port)
            await stalled.send_all(f"POST /mcp HTTP/1.1\r\n{head}\r\n".encode() + body)  # and never reads
            await probe.started["flooded"].wait()
            # (the server's side gives up on its own: wait for that before reading a byte)
            while not all(connection.gone for connection in http_server.connections):  # noqa: ASYNC110
                await trio.sleep(0.01)
            while await stalled.receive_some(1 << 20):  # what was sent before, then the end
                pass
            assert not probe.cancelled["flood"].is_set()
            probe.release["flood"].set()
            await probe.started["flood done"].wait()
            await stalled.aclose()
            nursery.cancel_scope.cancel()


class CutFirstStream:
    """ASGI middleware: ends the first SSE response to a POST right after its priming event,
    as a proxy that drops the connection would (the app behind it does not know)."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.cut = False
        self.was_cut = trio.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or self.cut:
            await self.app(scope, receive, send)
            return
        state = {"sse": False, "done": False}

        async def cutting_send(message: Any) -> None:
            if state["done"]:
                return
            if message["type"] == "http.response.start":
                state["sse"] = (b"content-type", b"text/event-stream") in message["headers"]
            elif state["sse"] and not self.cut:
                self.cut = state["done"] = True
                await send({**message, "more_body": False})
                self.was_cut.set()
                return
            await send(message)

        await self.app(scope, receive, cutting_send)


async def test_connect_http_resumes_a_dropped_post_stream(probe: Probe) -> None:
    from hypercorn.config import Config
    from hypercorn.trio import serve

    app = mcp_asgi_app(make_server(probe), retry_ms=RETRY_MS)
    middleware = CutFirstStream(app)
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.errorlog = logging.getLogger("test.hypercorn")
    with trio.fail_after(10):
        async with app.running(), trio.open_nursery() as nursery:
            binds = await nursery.start(serve, middleware, config)
            async with connect_http(binds[0] + "/mcp") as client:
                async with trio.open_nursery() as calls:
                    result: list[str] = []

                    async def call() -> None:
                        result.append((await client.call_tool("gate", {"tag": "r"})).text)

                    calls.start_soon(call)
                    await probe.started["r"].wait()
                    # (a response that came at once would be plain JSON: nothing to cut)
                    await middleware.was_cut.wait()
                    probe.release["r"].set()
                assert middleware.cut and result == ["r"]
            nursery.cancel_scope.cancel()


async def test_connect_http_handshake_cancel_reaches_the_tool(url: str, probe: Probe) -> None:
    with trio.fail_after(10):
        async with connect_http(url) as client:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.call_tool, "gate", {"tag": "k"})
                await probe.started["k"].wait()
                nursery.cancel_scope.cancel()  # sends notifications/cancelled in this era
            await probe.cancelled["k"].wait()
            assert (await client.call_tool("echo", {"text": "still here"})).text == "still here"


async def test_cli_targets_and_serve_option(url: str) -> None:
    from click.testing import CliRunner

    from trio_mcp.cli.app import cli
    from trio_mcp.cli.runner import open_target

    with trio.fail_after(10):
        for protocol in (HANDSHAKE, MODERN):
            async with open_target(url, protocol=protocol) as client:
                assert (await client.call_tool("echo", {"text": protocol})).text == protocol
    both = CliRunner().invoke(cli, ["serve", "x.py", "--ws", ":1", "--http", ":2"])
    assert both.exit_code == 2 and "cannot be combined" in both.output
    bad = CliRunner().invoke(cli, ["serve", "x.py", "--http", "nope"])
    assert bad.exit_code == 2 and "--http" in bad.output
    no_http = CliRunner().invoke(cli, ["serve", "x.py", "--tls-cert", __file__])
    assert no_http.exit_code == 2 and "only apply with --http" in no_http.output
    key_only = CliRunner().invoke(cli, ["serve", "x.py", "--http", ":0", "--tls-key", __file__])
    assert key_only.exit_code == 2 and "--tls-key needs --tls-cert" in key_only.output
    short = CliRunner().invoke(cli, ["serve", "x.py", "--state-key", "short"])
    assert short.exit_code == 2 and "--state-key" in short.output
    from_env = CliRunner().invoke(cli, ["serve", "x.py"], env={"TRIO_MCP_STATE_KEY": "short"})
    assert from_env.exit_code == 2 and "--state-key" in from_env.output


# ----------------------------------------------------------------------------- docs/http.md

DOC = Path(__file__).resolve().parents[2] / "docs" / "http.md"
_DOC_TEXT = DOC.read_text(encoding="utf-8")
_BEFORE = set(globals())
exec(compile(aligned_source(_DOC_TEXT), str(DOC), "exec"), globals())  # its test_* run here
DOC_TESTS = sorted(name for name in set(globals()) - _BEFORE if name.startswith("test_"))


def test_the_http_doc_runs_its_examples() -> None:
    assert DOC_TESTS == [
        "test_identity_and_scopes",
        "test_jwt_resource_server",
        "test_mounted_app",
        "test_serve_and_call_in_both_eras",
    ]


# ----------------------------------------------------------------------------- interop


def test_reference_sdk_client_over_streamable_http(probe: Probe) -> None:
    """The official Python SDK's Streamable HTTP client (asyncio) against our server (Trio, in
    a thread of its own): handshake, tools, progress, and an elicitation it answers."""
    import queue
    import threading

    import anyio
    import mcp.types as types
    from mcp.client.session import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    started: queue.Queue[tuple[int, trio.lowlevel.TrioToken, trio.CancelScope]] = queue.Queue()

    async def run_server() -> None:
        with trio.CancelScope() as scope:
            async with trio.open_nursery() as nursery:
                port = await nursery.start(partial(serve_http, make_server(probe), retry_ms=RETRY_MS))
                started.put((port, trio.lowlevel.current_trio_token(), scope))

    thread = threading.Thread(target=trio.run, args=(run_server,), daemon=True)
    thread.start()
    port, token, scope = started.get(timeout=10)
    progress: list[float] = []

    async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        return types.ElicitResult(action="accept", content={"name": "sdk"})

    async def main() -> None:
        with anyio.fail_after(10):
            async with (
                streamable_http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, session_id),
                ClientSession(read, write, elicitation_callback=on_elicit) as session,
            ):
                assert (await session.initialize()).protocolVersion == HANDSHAKE
                assert session_id()
                assert "echo" in {t.name for t in (await session.list_tools()).tools}
                echoed = await session.call_tool("echo", {"text": "sdk"})
                assert isinstance(echoed.content[0], types.TextContent) and echoed.content[0].text == "sdk"

                async def on_progress(value: float, total: float | None, message: str | None) -> None:
                    progress.append(value)

                trio.from_thread.run_sync(lambda: probe.release["sdk"].set(), trio_token=token)
                gated = await session.call_tool("gate", {"tag": "sdk"}, progress_callback=on_progress)
                assert not gated.isError and progress == [1]
                asked = await session.call_tool("ask", {})
                assert (
                    isinstance(asked.content[0], types.TextContent) and asked.content[0].text == "hello sdk"
                )

    try:
        anyio.run(main, backend="asyncio", backend_options={"loop_factory": asyncio.SelectorEventLoop})
    finally:
        trio.from_thread.run_sync(scope.cancel, trio_token=token)
        thread.join(timeout=10)


async def test_a_null_argument_travels_without_its_mcp_param_header() -> None:
    # SEP-2243: an argument marked x-mcp-header goes in an Mcp-Param-* header too, but a null
    # one is omitted by the client (ours and the spec's); the server must not require it.
    server = Server("headers")

    async def regional(region: str | None = None) -> str:
        return f"region {region}"

    server.add_tool(
        regional,
        input_schema={
            "type": "object",
            "properties": {"region": {"type": "string", "x-mcp-header": "Region"}},
        },
    )
    with trio.fail_after(10):
        async with serving(server) as endpoint, connect_http(endpoint, protocol=MODERN) as client:
            await client.list_tools()  # what the client learns its headers from
            assert (await client.call_tool("regional", {"region": None})).text == "region None"
            assert (await client.call_tool("regional", {"region": "eu"})).text == "region eu"


async def test_a_handler_bug_ends_only_its_session(
    url: str, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A session's messages are served in their POST's Trio task; a bug in serving one (an
    exception no answer covers) ends that session, as it would end a connection, and the POST
    is answered 404: the server and its other sessions go on."""
    from trio_mcp.actors._session import SessionActor

    serve = SessionActor.on_request

    async def buggy(self: SessionActor, message: Any) -> None:
        if message.method == "tools/list":
            raise RuntimeError("a bug")
        await serve(self, message)

    monkeypatch.setattr(SessionActor, "on_request", buggy)
    with trio.fail_after(10):
        broken, healthy = await initialize(http, url), await initialize(http, url)
        response = await http.post(url, content=rpc(2, "tools/list"), headers=session_headers(broken))
        assert response.status_code == 404
        assert "a bug" in caplog.text
        ping = rpc(3, "ping")
        assert (await http.post(url, content=ping, headers=session_headers(broken))).status_code == 404
        answered = await http.post(url, content=ping, headers=session_headers(healthy))
        assert answered.status_code == 200 and answered.json() == {"jsonrpc": "2.0", "id": 3, "result": {}}
