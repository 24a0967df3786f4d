"""A 503 with ``Retry-After`` (a server process stopping: the request was refused unprocessed)
is sent again by the client, waiting as asked: a stateless 2026-07-28 request, or a 2025-11-25
``initialize``, up to ``UNAVAILABLE_RETRIES`` times, waiting at most ``MAX_RETRY_AFTER``
seconds. Over a real socket, against a server that answers 503 first, then serves."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from oauth_server import Request, Response, serve

from trio_mcp import McpError
from trio_mcp.client import _http, connect_http

MODERN = "2026-07-28"


class Stopping:
    """Answers the first ``refusals`` POSTs (of ``method``, if given) 503 + ``Retry-After``,
    then serves both eras; records the method of every POST and when it came."""

    def __init__(self, refusals: int, retry_after: str | None = "0.2", method: str | None = None) -> None:
        self.refusals = refusals
        self.retry_after = retry_after
        self.method = method
        self.posts: list[tuple[str, float]] = []

    async def __call__(self, request: Request) -> Response:
        if request.method == "DELETE":
            return Response(200)
        if request.method == "GET":
            return Response(405)
        body = json.loads(request.body)
        method, rid = body.get("method"), body.get("id")
        self.posts.append((str(method), trio.current_time()))
        if self.refusals > 0 and (self.method is None or method == self.method):
            self.refusals -= 1
            headers = {"retry-after": self.retry_after} if self.retry_after is not None else {}
            return Response(503, b"stopping", headers)
        session = {"mcp-session-id": "s1"}
        if rid is None:
            return Response(202)
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "mock", "version": "1"},
            }
        elif method == "server/discover":
            result = {"supportedVersions": [MODERN], "capabilities": {"tools": {}}}
        elif method == "tools/call":
            result = {"content": [{"type": "text", "text": "ok"}]}
        else:
            result = {}
        return Response.json(200, {"jsonrpc": "2.0", "id": rid, "result": result}, **session)


async def run(mock: Stopping, protocol: str) -> str:
    """Connect and call a tool; its text (the McpError raised as it is, not in a group)."""
    outcome: str | McpError = ""
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve, mock)
        try:
            with trio.fail_after(15):
                async with connect_http(f"http://127.0.0.1:{port}/mcp", protocol=protocol) as client:
                    outcome = (await client.call_tool("work")).text
        except McpError as exc:
            outcome = exc
        nursery.cancel_scope.cancel()
    if isinstance(outcome, McpError):
        raise outcome
    return outcome


@pytest.mark.parametrize(("protocol", "first"), [(MODERN, "server/discover"), ("2025-11-25", "initialize")])
async def test_a_503_with_retry_after_is_sent_again_after_the_wait(protocol: str, first: str) -> None:
    mock = Stopping(refusals=1)
    assert await run(mock, protocol) == "ok"
    (method_1, at_1), (method_2, at_2) = mock.posts[:2]
    assert method_1 == method_2 == first
    assert at_2 - at_1 >= 0.2  # Retry-After was honoured


async def test_a_stateless_tool_call_is_sent_again_up_to_three_times() -> None:
    mock = Stopping(refusals=3, retry_after="0", method="tools/call")
    assert await run(mock, MODERN) == "ok"
    assert [m for m, _ in mock.posts].count("tools/call") == 4

    mock = Stopping(refusals=4, retry_after="0", method="tools/call")  # a fourth 503: given up
    with pytest.raises(McpError, match="HTTP 503"):
        await run(mock, MODERN)
    assert [m for m, _ in mock.posts].count("tools/call") == 4


async def test_the_wait_is_capped_and_other_refusals_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_http, "MAX_RETRY_AFTER", 0.1)
    mock = Stopping(refusals=1, retry_after="3600", method="tools/call")
    started = trio.current_time()
    assert await run(mock, MODERN) == "ok"
    assert trio.current_time() - started < 5

    mock = Stopping(refusals=1, retry_after=None, method="tools/call")  # no Retry-After: an answer
    with pytest.raises(McpError, match="HTTP 503"):
        await run(mock, MODERN)
    mock = Stopping(refusals=1, method="tools/call")  # a 2025-11-25 session's request: not resent
    with pytest.raises(McpError, match="HTTP 503"):
        await run(mock, "2025-11-25")
    assert [m for m, _ in mock.posts].count("tools/call") == 1
