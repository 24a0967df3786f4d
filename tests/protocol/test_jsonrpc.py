"""Tests for trio_mcp.protocol.jsonrpc: sans-IO parse and encode of JSON-RPC 2.0 messages."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from json_strategies import json_objects, json_values

from trio_mcp.protocol import jsonrpc
from trio_mcp.protocol.jsonrpc import (
    ErrorObject,
    ErrorResponse,
    InvalidMessage,
    Notification,
    Request,
    Response,
)

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
INVALID_PARAMS = -32602


def rejected(data: bytes | str) -> ErrorResponse:
    """The error response ``parse`` prescribes for ``data`` (which it must refuse)."""
    with pytest.raises(InvalidMessage) as info:
        jsonrpc.parse(data)
    response = info.value.response
    assert isinstance(response, ErrorResponse)
    assert str(info.value) == response.error.message
    assert response.error.message  # never empty: it is shown to people
    return response


def obj(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


# ------------------------------------------------------------------ each message kind


def test_parse_request() -> None:
    msg = jsonrpc.parse(b'{"jsonrpc":"2.0","id":7,"method":"tools/list","params":{"cursor":"c"}}')
    assert msg == Request(7, "tools/list", {"cursor": "c"})


def test_parse_request_without_params() -> None:
    assert jsonrpc.parse(b'{"jsonrpc":"2.0","id":"a","method":"ping"}') == Request("a", "ping", None)


def test_parse_notification() -> None:
    msg = jsonrpc.parse(b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":3}}')
    assert msg == Notification("notifications/cancelled", {"requestId": 3})


def test_parse_notification_without_params() -> None:
    assert jsonrpc.parse(b'{"jsonrpc":"2.0","method":"notifications/initialized"}') == Notification(
        "notifications/initialized", None
    )


def test_parse_response() -> None:
    assert jsonrpc.parse(b'{"jsonrpc":"2.0","id":3,"result":{"ok":true}}') == Response(3, {"ok": True})


def test_parse_error_response() -> None:
    msg = jsonrpc.parse(b'{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"nope","data":[1]}}')
    assert msg == ErrorResponse("x", ErrorObject(-32601, "nope", [1]))


def test_parse_error_response_with_null_id() -> None:
    # The answer to a request whose id could not be read.
    msg = jsonrpc.parse(b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}')
    assert msg == ErrorResponse(None, ErrorObject(-32700, "Parse error"))


def test_parse_accepts_str_and_bytes() -> None:
    text = '{"jsonrpc":"2.0","id":1,"method":"ping"}'
    assert jsonrpc.parse(text) == jsonrpc.parse(text.encode()) == Request(1, "ping")


def test_parse_accepts_utf8_content() -> None:
    data = '{"jsonrpc":"2.0","id":"é","method":"tools/call","params":{"name":"日本"}}'.encode()
    assert jsonrpc.parse(data) == Request("é", "tools/call", {"name": "日本"})


@pytest.mark.parametrize("id_", [0, "", -1, 2**70, "0"])
def test_edge_ids_are_valid(id_: int | str) -> None:
    msg = jsonrpc.parse(obj(jsonrpc="2.0", id=id_, method="ping"))
    assert isinstance(msg, Request)
    assert msg.id == id_
    assert type(msg.id) is type(id_)
    response = jsonrpc.parse(obj(jsonrpc="2.0", id=id_, result={}))
    assert response == Response(id_, {})


def test_id_zero_is_a_request_not_a_notification() -> None:
    assert isinstance(jsonrpc.parse(b'{"jsonrpc":"2.0","id":0,"method":"x"}'), Request)
    assert isinstance(jsonrpc.parse(b'{"jsonrpc":"2.0","id":"","method":"x"}'), Request)


# ------------------------------------------------------------------ -32700 parse errors


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"   ",
        b"not json",
        b"{'jsonrpc': '2.0'}",
        b"\xff\xfe\x00garbage",
        b'{"jsonrpc":"2.0","id":1,"method":"ping"',  # truncated
        b'{"jsonrpc":"2.0","id":1,"meth',
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}}',  # trailing garbage
        b'{"jsonrpc":"2.0","id":1,"method":"ping"} {"jsonrpc":"2.0","id":2,"method":"ping"}',
    ],
)
def test_non_json_is_a_parse_error_with_null_id(data: bytes) -> None:
    response = rejected(data)
    assert response.id is None
    assert response.error.code == PARSE_ERROR


def test_every_truncation_of_a_request_is_a_parse_error() -> None:
    whole = jsonrpc.encode_request(12, "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    for end in range(len(whole)):
        response = rejected(whole[:end])
        assert (response.id, response.error.code) == (None, PARSE_ERROR), whole[:end]


@pytest.mark.parametrize("opener", ["[", '{"a":'])
def test_deep_nesting_is_a_parse_error_not_a_crash(opener: str) -> None:
    depth = 200_000
    closer = "]" if opener == "[" else "}"
    response = rejected(opener * depth + "1" + closer * depth)
    assert (response.id, response.error.code) == (None, PARSE_ERROR)


def test_deep_nesting_inside_a_request_is_a_parse_error() -> None:
    depth = 100_000
    data = '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + "[" * depth + "]" * depth + "}}"
    response = rejected(data)
    assert response.error.code == PARSE_ERROR
    assert response.id is None  # the id was never readable: the document never decoded


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity"])
def test_non_json_number_literals_are_a_parse_error(literal: str) -> None:
    response = rejected('{"jsonrpc":"2.0","id":1,"method":"ping","params":{"x":' + literal + "}}")
    assert response.error.code == PARSE_ERROR


# ------------------------------------------------------------------ -32600 invalid requests


def test_batch_is_refused_with_null_id() -> None:
    batch = b'[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","id":2,"method":"ping"}]'
    response = rejected(batch)
    assert (response.id, response.error.code) == (None, INVALID_REQUEST)
    assert "batch" in response.error.message


def test_empty_batch_is_refused() -> None:
    response = rejected(b"[]")
    assert (response.id, response.error.code) == (None, INVALID_REQUEST)


@pytest.mark.parametrize("data", [b"1", b"-2.5", b'"ping"', b"true", b"null"])
def test_non_object_is_an_invalid_request(data: bytes) -> None:
    response = rejected(data)
    assert (response.id, response.error.code) == (None, INVALID_REQUEST)


@pytest.mark.parametrize("version", [None, "1.0", "2", 2.0, 2, ["2.0"], {"v": "2.0"}, "2.0 "])
@pytest.mark.parametrize("id_", [1, "abc", 0, ""])
def test_wrong_jsonrpc_version_echoes_a_readable_id(version: Any, id_: int | str) -> None:
    fields: dict[str, Any] = {"id": id_, "method": "ping"}
    if version is not None:
        fields["jsonrpc"] = version
    response = rejected(json.dumps(fields))
    assert response.error.code == INVALID_REQUEST
    assert response.id == id_
    assert type(response.id) is type(id_)


@pytest.mark.parametrize("bad_id", [None, True, 1.5, 1.0, {"a": 1}, [1]])
def test_wrong_jsonrpc_version_with_unreadable_id_answers_null(bad_id: Any) -> None:
    response = rejected(json.dumps({"jsonrpc": "1.0", "id": bad_id, "method": "ping"}))
    assert (response.id, response.error.code) == (None, INVALID_REQUEST)


@pytest.mark.parametrize("bad_id", [None, True, False, 1.5, 2.0, {"a": 1}, [1], []])
def test_request_with_invalid_id_is_an_invalid_request(bad_id: Any) -> None:
    response = rejected(json.dumps({"jsonrpc": "2.0", "id": bad_id, "method": "ping"}))
    assert (response.id, response.error.code) == (None, INVALID_REQUEST)
    assert '"id"' in response.error.message


@pytest.mark.parametrize("method", [1, True, [], {}, 1.5])
def test_non_string_method_is_an_invalid_request(method: Any) -> None:
    response = rejected(json.dumps({"jsonrpc": "2.0", "id": 4, "method": method}))
    assert (response.id, response.error.code) == (4, INVALID_REQUEST)
    assert '"method"' in response.error.message


def test_non_string_method_in_a_notification_is_an_invalid_request() -> None:
    response = rejected(b'{"jsonrpc":"2.0","method":5}')
    assert (response.id, response.error.code) == (None, INVALID_REQUEST)


def test_object_without_method_result_or_error_is_an_invalid_request() -> None:
    response = rejected(b'{"jsonrpc":"2.0","id":9}')
    assert (response.id, response.error.code) == (9, INVALID_REQUEST)
    response = rejected(b'{"jsonrpc":"2.0"}')
    assert (response.id, response.error.code) == (None, INVALID_REQUEST)


def test_both_result_and_error_is_an_invalid_request() -> None:
    response = rejected(b'{"jsonrpc":"2.0","id":9,"result":{},"error":{"code":1,"message":"m"}}')
    assert (response.id, response.error.code) == (9, INVALID_REQUEST)


@pytest.mark.parametrize(
    "data",
    [
        b'{"jsonrpc":"2.0","id":1,"result":[]}',
        b'{"jsonrpc":"2.0","id":1,"result":5}',
        b'{"jsonrpc":"2.0","id":1,"result":null}',
        b'{"jsonrpc":"2.0","result":{}}',
        b'{"jsonrpc":"2.0","id":null,"result":{}}',
    ],
)
def test_malformed_response_is_an_invalid_request(data: bytes) -> None:
    assert rejected(data).error.code == INVALID_REQUEST


@pytest.mark.parametrize(
    "error",
    [
        "boom",
        [],
        {},
        {"code": -1},
        {"message": "m"},
        {"code": "1", "message": "m"},
        {"code": 1.5, "message": "m"},
        {"code": True, "message": "m"},
        {"code": 1, "message": 2},
    ],
)
def test_malformed_error_response_is_an_invalid_request(error: Any) -> None:
    response = rejected(json.dumps({"jsonrpc": "2.0", "id": 1, "error": error}))
    assert response.error.code == INVALID_REQUEST


# ------------------------------------------------------------------ -32602 non-object params


@pytest.mark.parametrize("params", [[1, 2], [], "x", 3, True])
def test_non_object_params_is_invalid_params_with_id(params: Any) -> None:
    response = rejected(json.dumps({"jsonrpc": "2.0", "id": "r1", "method": "tools/call", "params": params}))
    assert (response.id, response.error.code) == ("r1", INVALID_PARAMS)
    assert '"params"' in response.error.message


def test_null_params_means_no_params() -> None:
    assert jsonrpc.parse(b'{"jsonrpc":"2.0","id":1,"method":"ping","params":null}') == Request(1, "ping")


def test_unknown_top_level_fields_are_ignored() -> None:
    assert jsonrpc.parse(b'{"jsonrpc":"2.0","id":1,"method":"ping","extra":[1]}') == Request(1, "ping")


# ------------------------------------------------------------------ encoding


def test_encode_request_and_notification_shapes() -> None:
    assert json.loads(jsonrpc.encode_request(1, "ping")) == {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    assert json.loads(jsonrpc.encode_request("a", "m", {"x": 1})) == {
        "jsonrpc": "2.0",
        "id": "a",
        "method": "m",
        "params": {"x": 1},
    }
    assert json.loads(jsonrpc.encode_notification("n")) == {"jsonrpc": "2.0", "method": "n"}


def test_encode_error_omits_absent_data_and_keeps_null_id() -> None:
    assert json.loads(jsonrpc.encode_error(None, -32700, "Parse error")) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }
    assert json.loads(jsonrpc.encode_error(3, -32602, "bad", {"field": "x"}))["error"] == {
        "code": -32602,
        "message": "bad",
        "data": {"field": "x"},
    }


def test_encode_is_one_line_of_utf8() -> None:
    # stdio framing: one message per line, so no raw newline may appear inside an encoded message.
    data = jsonrpc.encode_response(1, {"text": "line1\nline2", "name": "日本"})
    assert b"\n" not in data
    assert "日本".encode() in data  # UTF-8, not \u escapes
    assert jsonrpc.parse(data) == Response(1, {"text": "line1\nline2", "name": "日本"})


def test_invalid_message_response_encodes_to_a_wire_error() -> None:
    with pytest.raises(InvalidMessage) as info:
        jsonrpc.parse(b'{"jsonrpc":"1.0","id":5,"method":"ping"}')
    wire = json.loads(jsonrpc.encode(info.value.response))
    assert wire["jsonrpc"] == "2.0"
    assert wire["id"] == 5
    assert wire["error"]["code"] == INVALID_REQUEST
    assert "data" not in wire["error"]


# ------------------------------------------------------------------ round trip (hypothesis)

request_ids = st.integers(min_value=-(2**63), max_value=2**63) | st.text(max_size=12)
known_methods = st.sampled_from(["ping", "tools/call", "tasks/get", "notifications/progress"])
methods = known_methods | st.text(max_size=20)

requests = st.builds(Request, id=request_ids, method=methods, params=st.none() | json_objects)
notifications = st.builds(Notification, method=methods, params=st.none() | json_objects)
responses = st.builds(Response, id=request_ids, result=json_objects)
error_responses = st.builds(
    ErrorResponse,
    id=st.none() | request_ids,
    error=st.builds(
        ErrorObject,
        code=st.integers(min_value=-(2**31), max_value=2**31),
        message=st.text(),
        data=json_values,
    ),
)


@settings(max_examples=300, deadline=None)
@given(requests | notifications)
def test_requests_and_notifications_round_trip(message: Request | Notification) -> None:
    data = jsonrpc.encode(message)
    assert b"\n" not in data
    assert jsonrpc.parse(data) == message


@settings(max_examples=200, deadline=None)
@given(responses | error_responses)
def test_responses_round_trip(message: Response | ErrorResponse) -> None:
    assert jsonrpc.parse(jsonrpc.encode(message)) == message


@settings(max_examples=100, deadline=None)
@given(requests)
def test_encoded_request_is_plain_jsonrpc(message: Request) -> None:
    wire = json.loads(jsonrpc.encode(message))
    assert wire["jsonrpc"] == "2.0"
    assert wire["id"] == message.id
    assert wire["method"] == message.method
    assert ("params" in wire) == (message.params is not None)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=64) | json_values.map(lambda v: json.dumps(v).encode()))
def test_parse_never_raises_anything_but_invalid_message(data: bytes) -> None:
    try:
        message = jsonrpc.parse(data)
    except InvalidMessage as exc:
        error = exc.response
        assert error.error.code in (PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS)
        assert error.id is None or type(error.id) is int or isinstance(error.id, str)
        # The prescribed response must itself be encodable and parse back as an error response.
        assert jsonrpc.parse(jsonrpc.encode(error)) == error
    else:
        assert isinstance(message, Request | Notification | Response | ErrorResponse)
