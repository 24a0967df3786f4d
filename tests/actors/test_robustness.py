"""Property tests: a live server session fed hostile input over an in-memory transport.

Whatever arrives, the session must keep serving (it answers a ``ping`` afterwards), everything it
sends must be a well-formed JSON-RPC message, every error must carry the code the input calls for,
and the server must never crash. Each Hypothesis example runs a fresh server in its own
``trio.run`` under an autojump clock (no real waiting).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing
from conftest import serve_in_memory
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from json_strategies import json_objects, json_scalars, json_values

from trio_mcp import Context, Server
from trio_mcp.protocol.jsonrpc import encode_request
from trio_mcp.protocol.versions import LATEST_VERSION
from trio_mcp.transports.base import DEFAULT_MAX_MESSAGE_SIZE
from trio_mcp.transports.memory import MemoryTransport

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
STANDARD_CODES = {PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS}

LEVELS = ["debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"]
KNOWN_METHODS = [
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "tasks/get",
    "tasks/result",
    "tasks/cancel",
    "tasks/list",
    "logging/setLevel",
]
SETTINGS = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# ----------------------------------------------------------------------------- server and harness


def make_server() -> Server:
    server = Server("robust")

    @server.tool(task_support="optional")
    async def echo(text: str) -> str:
        return text

    @server.tool(task_support="forbidden")
    async def add(a: float, b: float) -> float:
        return a + b

    @server.tool(task_support="required")
    async def job() -> str:
        return "done"

    @server.tool(task_support="optional")
    async def progress(steps: int, ctx: Context) -> str:
        for step in range(min(steps, 5)):
            await ctx.report_progress(step + 1, 5)
            ctx.log("info", {"step": step})
        return "ok"

    return server


SERVER = make_server()


def _strict_json(data: bytes) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"the server sent the non-JSON literal {name}: {data!r}")

    return json.loads(data, parse_constant=refuse)


def check_message(message: Any) -> None:
    """Everything the server sends must be a well-formed JSON-RPC 2.0 message."""
    assert isinstance(message, dict), message
    assert message.get("jsonrpc") == "2.0", message
    if "id" not in message:
        assert set(message) <= {"jsonrpc", "method", "params"}, message
        assert isinstance(message["method"], str) and message["method"].startswith("notifications/")
        assert isinstance(message.get("params", {}), dict)
        return
    assert set(message) <= {"jsonrpc", "id", "result", "error"}, message
    request_id = message["id"]
    assert request_id is None or type(request_id) is int or isinstance(request_id, str), message
    assert ("result" in message) != ("error" in message), message
    if "result" in message:
        assert isinstance(message["result"], dict), message
        assert request_id is not None
        return
    error = message["error"]
    assert isinstance(error, dict) and set(error) <= {"code", "message", "data"}, message
    assert type(error["code"]) is int, message
    assert isinstance(error["message"], str) and error["message"], message
    # Nothing a client sends should be an internal error: -32603 means a handler broke.
    assert error["code"] != INTERNAL_ERROR, message


class Wire:
    def __init__(self, transport: MemoryTransport) -> None:
        self.transport = transport
        self._pings = itertools.count()

    async def send(self, message: Any) -> None:
        await self.transport.send(json.dumps(message).encode())

    async def receive(self) -> dict[str, Any]:
        with trio.fail_after(30):
            data = await self.transport.receive_bytes()
        message = _strict_json(data)
        check_message(message)
        return message  # type: ignore[no-any-return]

    async def exchange(self, payload: bytes) -> list[dict[str, Any]]:
        """Send ``payload``, then a ping; return what arrived besides the ping's answer.

        The ping must be answered (the session still serves). Answers from handlers that run in
        their own Trio task may come after it, so the wire is drained for a virtual second more.
        """
        await self.transport.send(payload)
        ping_id = f"__robustness_ping_{next(self._pings)}__"
        await self.send({"jsonrpc": "2.0", "id": ping_id, "method": "ping"})
        others: list[dict[str, Any]] = []
        while True:
            message = await self.receive()
            if message.get("id") == ping_id:
                assert message == {"jsonrpc": "2.0", "id": ping_id, "result": {}}
                break
            others.append(message)
        with trio.move_on_after(1):
            while True:
                others.append(await self.receive())
        return others

    async def initialize(self) -> None:
        await self.send(
            {
                "jsonrpc": "2.0",
                "id": "init",
                "method": "initialize",
                "params": {
                    "protocolVersion": LATEST_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "fuzz", "version": "0"},
                },
            }
        )
        response = await self.receive()
        assert response["id"] == "init"
        assert response["result"]["protocolVersion"] == LATEST_VERSION
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})


def run_session(
    scenario: Callable[[Wire], Awaitable[None]],
    *,
    initialize: bool = True,
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE,
) -> None:
    """Run ``scenario`` against a fresh server session; a crash of the server fails the test."""

    async def main() -> None:
        async with serve_in_memory(SERVER, max_message_size=max_message_size) as client_side:
            wire = Wire(client_side)
            if initialize:
                await wire.initialize()
            await scenario(wire)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def only_error(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """The single message received, which must be an error response."""
    assert len(messages) == 1, messages
    assert "error" in messages[0], messages
    return messages[0]


def answers_to(messages: list[dict[str, Any]], request_id: Any) -> list[dict[str, Any]]:
    return [m for m in messages if "id" in m and m["id"] == request_id and type(m["id"]) is type(request_id)]


def is_valid_id(value: Any) -> bool:
    return type(value) is int or isinstance(value, str)


# ----------------------------------------------------------------------------- strategies

valid_ids = st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=10)
invalid_ids = (
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(json_scalars, max_size=2)
    | json_objects
)


def not_a(*kinds: type) -> st.SearchStrategy[Any]:
    """JSON values whose JSON type is none of ``kinds`` (bool never counts as int)."""

    def ok(value: Any) -> bool:
        if isinstance(value, bool):
            return bool not in kinds
        return not isinstance(value, kinds)

    return json_values.filter(ok)


non_string = not_a(str)
non_object = not_a(dict)
non_string_non_null = not_a(str, type(None))
non_object_non_null = not_a(dict, type(None))

VALID_REQUESTS: list[bytes] = [
    encode_request(1, "ping"),
    encode_request("a", "tools/list", {"cursor": "abc"}),
    encode_request(2, "tools/call", {"name": "echo", "arguments": {"text": "hello"}}),
    encode_request(3, "tools/call", {"name": "echo", "arguments": {"text": "x"}, "task": {"ttl": 1000}}),
    encode_request(4, "tasks/get", {"taskId": "0123456789abcdef"}),
    encode_request(5, "logging/setLevel", {"level": "debug"}),
    encode_request(
        "init",
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "1"}},
    ),
]


# ----------------------------------------------------------------------------- garbage and broken JSON


@SETTINGS
@given(st.lists(st.binary(max_size=200), min_size=1, max_size=4))
def test_garbage_bytes(payloads: list[bytes]) -> None:
    async def scenario(wire: Wire) -> None:
        for payload in payloads:
            error = only_error(await wire.exchange(payload))
            assert error["id"] is None
            try:
                json.loads(payload)
            except (ValueError, RecursionError):
                assert error["error"]["code"] == PARSE_ERROR
            else:  # valid JSON by chance (a number, ``{}``...): still not a message
                assert error["error"]["code"] == INVALID_REQUEST

    run_session(scenario)


@SETTINGS
@given(st.sampled_from(VALID_REQUESTS), st.data())
def test_truncated_json_of_valid_requests(request: bytes, data: st.DataObject) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(request) - 1), label="cut")

    async def scenario(wire: Wire) -> None:
        error = only_error(await wire.exchange(request[:cut]))
        assert error["id"] is None
        assert error["error"]["code"] == PARSE_ERROR

    run_session(scenario)


def test_deeply_nested_json_is_a_parse_error() -> None:
    async def scenario(wire: Wire) -> None:
        depth = 100_000
        for payload in (
            b"[" * depth + b"]" * depth,
            b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"a":' + b"[" * depth + b"]" * depth + b"}}",
        ):
            error = only_error(await wire.exchange(payload))
            assert (error["id"], error["error"]["code"]) == (None, PARSE_ERROR)

    run_session(scenario)


# ----------------------------------------------------------------------------- JSON that is not a message


@SETTINGS
@given(json_values.filter(lambda v: not isinstance(v, dict)))
def test_json_non_objects_are_invalid_requests(value: Any) -> None:
    async def scenario(wire: Wire) -> None:
        error = only_error(await wire.exchange(json.dumps(value).encode()))
        assert (error["id"], error["error"]["code"]) == (None, INVALID_REQUEST)

    run_session(scenario)


message_keys = st.sampled_from(["id", "method", "params", "result", "error", "x"]) | st.text(max_size=6)


@SETTINGS
@given(
    st.dictionaries(message_keys, json_values, max_size=6),
    st.sampled_from([None, "1.0", "2", 2, 2.0, "", ["2.0"]]),
)
def test_objects_without_jsonrpc_2_0_are_invalid_requests(obj: dict[str, Any], version: Any) -> None:
    obj = {k: v for k, v in obj.items() if k != "jsonrpc"}
    if version is not None:
        obj["jsonrpc"] = version

    async def scenario(wire: Wire) -> None:
        error = only_error(await wire.exchange(json.dumps(obj).encode()))
        assert error["error"]["code"] == INVALID_REQUEST
        expected_id = obj["id"] if "id" in obj and is_valid_id(obj["id"]) else None
        assert error["id"] == expected_id
        assert type(error["id"]) is type(expected_id)

    run_session(scenario)


# ----------------------------------------------------------------------------- message-shaped input

methods = st.sampled_from(KNOWN_METHODS) | st.text(max_size=20)
params_values = st.none() | json_objects


@st.composite
def request_like(draw: st.DrawFn) -> tuple[dict[str, Any], str]:
    """A JSON-RPC 2.0 object and what kind of answer it calls for."""
    kind = draw(st.sampled_from(["request", "bad_id", "bad_method", "bad_params", "notification"]))
    obj: dict[str, Any] = {"jsonrpc": "2.0"}
    if kind != "notification":
        obj["id"] = draw(invalid_ids if kind == "bad_id" else valid_ids)
    obj["method"] = draw(not_a(str, type(None)) if kind == "bad_method" else methods)
    if kind == "bad_params":
        obj["params"] = draw(non_object_non_null)
    else:
        params = draw(params_values)
        if params is not None:
            obj["params"] = params
    return obj, kind


@settings(SETTINGS, max_examples=150)
@given(request_like())
def test_message_shaped_objects(case: tuple[dict[str, Any], str]) -> None:
    obj, kind = case
    try:
        data = json.dumps(obj, allow_nan=False).encode()
    except ValueError:
        assume(False)  # Infinity is not JSON: test_jsonrpc covers it as a parse error

    async def scenario(wire: Wire) -> None:
        messages = await wire.exchange(data)
        if kind == "notification":
            assert [m for m in messages if "id" in m] == []
            return
        if kind == "bad_id":
            error = only_error(messages)
            assert (error["id"], error["error"]["code"]) == (None, INVALID_REQUEST)
            return
        answers = answers_to(messages, obj["id"])
        assert len(answers) == 1, messages
        (answer,) = answers
        if kind == "bad_method":
            assert answer["error"]["code"] == INVALID_REQUEST
        elif kind == "bad_params":
            assert answer["error"]["code"] == INVALID_PARAMS
        elif obj["method"] not in KNOWN_METHODS:
            assert answer["error"]["code"] == METHOD_NOT_FOUND
        elif obj["method"] == "initialize":
            assert answer["error"]["code"] in (INVALID_REQUEST, INVALID_PARAMS)  # already initialized
        elif obj["method"] == "ping":
            assert answer["result"] == {}
        elif "error" in answer:
            assert answer["error"]["code"] in STANDARD_CODES

    run_session(scenario)


# ----------------------------------------------------------------------------- wrongly typed params


def with_field(base: dict[str, Any], field: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return values.map(lambda value: {**base, field: value})


def without(base: dict[str, Any], field: str) -> st.SearchStrategy[dict[str, Any]]:
    return st.just({k: v for k, v in base.items() if k != field})


TOOLS_CALL = {"name": "echo", "arguments": {"text": "x"}}
TASK_ID = {"taskId": "0123456789abcdef"}

BAD_PARAMS: dict[str, st.SearchStrategy[Any]] = {
    "tools/call": st.one_of(
        with_field(TOOLS_CALL, "name", non_string),
        without(TOOLS_CALL, "name"),
        with_field(TOOLS_CALL, "arguments", non_object_non_null),
        with_field(
            TOOLS_CALL,
            "task",
            st.integers()
            | st.floats(allow_nan=False, allow_infinity=False)
            | st.booleans()
            | st.text()
            | st.lists(st.integers()),
        ),
        with_field(TOOLS_CALL, "task", not_a(int, type(None)).map(lambda ttl: {"ttl": ttl})),
        with_field(TOOLS_CALL, "_meta", non_object_non_null),
    ),
    "tasks/get": st.one_of(
        with_field(TASK_ID, "taskId", non_string),
        st.just({}),
        with_field(TASK_ID, "_meta", non_object_non_null),
    ),
    "tasks/result": st.one_of(
        with_field(TASK_ID, "taskId", non_string),
        st.just({}),
        with_field(TASK_ID, "_meta", non_object_non_null),
    ),
    "tasks/cancel": st.one_of(
        with_field(TASK_ID, "taskId", non_string),
        st.just({}),
        with_field(TASK_ID, "_meta", non_object_non_null),
    ),
    "tasks/list": st.one_of(
        with_field({}, "cursor", non_string_non_null), with_field({}, "_meta", non_object_non_null)
    ),
    "logging/setLevel": st.one_of(
        st.just({}), with_field({}, "level", json_values.filter(lambda v: v not in LEVELS))
    ),
}


@settings(SETTINGS, max_examples=120)
@given(st.sampled_from(sorted(BAD_PARAMS)).flatmap(lambda m: st.tuples(st.just(m), BAD_PARAMS[m])), valid_ids)
def test_wrongly_typed_params_are_invalid_params(
    case: tuple[str, dict[str, Any]], request_id: int | str
) -> None:
    method, params = case
    payload = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}).encode()

    async def scenario(wire: Wire) -> None:
        messages = await wire.exchange(payload)
        (answer,) = answers_to(messages, request_id)
        assert "error" in answer, answer
        assert answer["error"]["code"] == INVALID_PARAMS, answer
        assert answer["error"]["message"].startswith("Invalid params"), answer

    run_session(scenario)


INITIALIZE = {
    "protocolVersion": LATEST_VERSION,
    "capabilities": {},
    "clientInfo": {"name": "c", "version": "1"},
}
BAD_INITIALIZE = st.one_of(
    with_field(INITIALIZE, "protocolVersion", non_string),
    without(INITIALIZE, "protocolVersion"),
    with_field(INITIALIZE, "clientInfo", non_object),
    without(INITIALIZE, "clientInfo"),
    with_field(INITIALIZE, "clientInfo", non_string.map(lambda name: {"name": name, "version": "1"})),
    with_field(INITIALIZE, "clientInfo", non_string.map(lambda version: {"name": "c", "version": version})),
    with_field(INITIALIZE, "capabilities", non_object),
    with_field(INITIALIZE, "_meta", non_object_non_null),
)


@SETTINGS
@given(BAD_INITIALIZE)
def test_wrongly_typed_initialize_params_leave_the_session_usable(params: dict[str, Any]) -> None:
    payload = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params}).encode()

    async def scenario(wire: Wire) -> None:
        error = only_error(await wire.exchange(payload))
        assert (error["id"], error["error"]["code"]) == (1, INVALID_PARAMS)
        await wire.initialize()  # a correct initialize still succeeds afterwards
        assert await wire.exchange(encode_request(2, "tools/list")) != []

    run_session(scenario, initialize=False)


@SETTINGS
@given(json_objects | st.none(), st.sampled_from([None, [], "x", 1]))
def test_malformed_cancellations_are_ignored(params: Any, request_id: Any) -> None:
    if params is not None and request_id is not None:
        params = {**params, "requestId": request_id}
    notification: dict[str, Any] = {"jsonrpc": "2.0", "method": "notifications/cancelled"}
    if params is not None:
        notification["params"] = params

    async def scenario(wire: Wire) -> None:
        assert await wire.exchange(json.dumps(notification).encode()) == []

    run_session(scenario)


# ----------------------------------------------------------------------------- oversized messages

LIMIT = 2048


@SETTINGS
@given(st.lists(st.integers(min_value=0, max_value=3 * LIMIT), min_size=1, max_size=4), valid_ids)
def test_oversized_messages_are_refused_and_the_connection_keeps_serving(
    pads: list[int], request_id: int | str
) -> None:
    async def scenario(wire: Wire) -> None:
        for pad in pads:
            payload = encode_request(request_id, "ping", {"pad": "x" * pad})
            messages = await wire.exchange(payload)
            if len(payload) > LIMIT:
                # Never read, so never answered as itself: one error with a null id.
                error = only_error(messages)
                assert (error["id"], error["error"]["code"]) == (None, INVALID_REQUEST)
                assert str(LIMIT) in error["error"]["message"]
            else:
                assert messages == [{"jsonrpc": "2.0", "id": request_id, "result": {}}]

    run_session(scenario, max_message_size=LIMIT)


def test_message_exactly_at_the_limit_is_accepted() -> None:
    async def scenario(wire: Wire) -> None:
        base = encode_request(9, "ping", {"pad": ""})
        at_limit = encode_request(9, "ping", {"pad": "x" * (LIMIT - len(base))})
        assert len(at_limit) == LIMIT
        assert await wire.exchange(at_limit) == [{"jsonrpc": "2.0", "id": 9, "result": {}}]
        over = encode_request(9, "ping", {"pad": "x" * (LIMIT - len(base) + 1)})
        error = only_error(await wire.exchange(over))
        assert error["id"] is None

    run_session(scenario, max_message_size=LIMIT)


# ----------------------------------------------------------------------------- known crashes


@pytest.mark.parametrize(
    "payload",
    [
        b'{"jsonrpc":"2.0","id":"\\ud800","method":"ping"}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"\\udfff"}}',
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"a\\ud83d"}}}',
        b'{"jsonrpc":"1.0","id":"\\ud800","method":"ping"}',
    ],
    ids=["request-id", "unknown-tool-name", "tool-result-text", "invalid-request-id"],
)
def test_lone_surrogates_do_not_crash_the_session(payload: bytes) -> None:
    async def scenario(wire: Wire) -> None:
        messages = await wire.exchange(payload)
        assert len([m for m in messages if "id" in m]) == 1

    run_session(scenario)


def test_server_output_is_strict_json_even_for_nan_input() -> None:
    payload = (
        b'{"jsonrpc":"2.0","id":1,"method":"tools/call",'
        b'"params":{"name":"progress","arguments":{"steps":2},"_meta":{"progressToken":NaN}}}'
    )

    async def scenario(wire: Wire) -> None:
        messages = await wire.exchange(payload)  # _strict_json refuses NaN in anything received
        assert len([m for m in messages if "id" in m]) == 1

    run_session(scenario)
