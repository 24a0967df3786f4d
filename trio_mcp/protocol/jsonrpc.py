"""Sans-IO JSON-RPC 2.0: bytes in, message objects out, and back.

:func:`parse` never raises anything but :class:`InvalidMessage`, whose ``response`` is the
exact error object to send back (``id`` null where the request's id could not be read).
Batches are refused: MCP after 2025-03-26 forbids them.
"""

from __future__ import annotations

from typing import Any

import attrs

from . import _json
from ._frozen import slot_builder
from .errors import INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR

__all__ = [
    "NOTIFICATION_PREFIX",
    "ErrorObject",
    "ErrorResponse",
    "InvalidMessage",
    "Message",
    "Notification",
    "Received",
    "Request",
    "RequestId",
    "Response",
    "Unreadable",
    "encode",
    "encode_error",
    "encode_notification",
    "encode_notification_json",
    "encode_request",
    "encode_response",
    "encode_response_json",
    "parse",
    "parse_object",
    "read",
    "too_large",
]

RequestId = int | str


@attrs.frozen(weakref_slot=False)  # no weak reference slot: built by slot_builder
class Request:
    id: RequestId
    method: str
    params: dict[str, Any] | None = None


_request = slot_builder(Request)


@attrs.frozen(slots=True)
class Notification:
    method: str
    params: dict[str, Any] | None = None


@attrs.frozen(slots=True)
class Response:
    id: RequestId
    result: dict[str, Any]


@attrs.frozen(slots=True)
class ErrorObject:
    code: int
    message: str
    data: Any = None


@attrs.frozen(slots=True)
class ErrorResponse:
    id: RequestId | None
    error: ErrorObject


Message = Request | Notification | Response | ErrorResponse


@attrs.frozen
class Unreadable:
    """What a transport hands on for input that is not a JSON-RPC message (or too large to
    read): ``response``, the error to answer it with. A value, not an exception: the
    connection goes on with the next message."""

    response: ErrorResponse


Received = Message | Unreadable
"""What a transport's ``receive`` returns: a parsed message, or input it could not read."""


class InvalidMessage(Exception):
    """Input that is not a valid JSON-RPC message; ``response`` is the answer to send."""

    def __init__(self, response: ErrorResponse) -> None:
        super().__init__(response.error.message)
        self.response = response


def _invalid(code: int, message: str, id: RequestId | None = None) -> InvalidMessage:
    return InvalidMessage(ErrorResponse(id, ErrorObject(code, message)))


def _valid_id(value: Any) -> bool:
    # bool is an int subclass but never a valid id; null is never a valid request id.
    return (type(value) is int) or isinstance(value, str)


def parse(data: bytes | str) -> Message:
    """Decode one JSON-RPC message (:class:`InvalidMessage` if it is not one).

    >>> parse(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    Request(id=1, method='ping', params=None)
    """
    message = read(data)
    if isinstance(message, Unreadable):
        raise InvalidMessage(message.response)
    return message


def read(data: bytes | str) -> Received:
    """Decode one JSON-RPC message for a transport: the message, or the :class:`Unreadable`
    to answer (never raises).

    >>> read(b'{"jsonrpc":"2.0","id":1,"method":"ping"}')
    Request(id=1, method='ping', params=None)
    >>> read(b"[]").response.error.code
    -32600
    """
    try:
        obj = _json.loads(data)
    except (ValueError, RecursionError):
        return Unreadable(ErrorResponse(None, ErrorObject(PARSE_ERROR, "Parse error: not valid JSON")))
    if type(obj) is not dict:
        if isinstance(obj, list):
            return Unreadable(
                ErrorResponse(
                    None, ErrorObject(INVALID_REQUEST, "Invalid request: batches are not supported")
                )
            )
        return Unreadable(
            ErrorResponse(
                None, ErrorObject(INVALID_REQUEST, "Invalid request: a message must be a JSON object")
            )
        )
    try:
        return parse_object(obj)
    except InvalidMessage as exc:
        return Unreadable(exc.response)


def too_large(limit: int) -> Unreadable:
    """The :class:`Unreadable` for a message over a transport's ``limit`` bytes (skipped)."""
    return Unreadable(
        ErrorResponse(
            None, ErrorObject(INVALID_REQUEST, f"Invalid request: message exceeds the {limit} byte limit")
        )
    )


def parse_object(obj: dict[str, Any]) -> Message:
    """Classify an already-decoded JSON object as a JSON-RPC message."""
    has_id = "id" in obj
    raw_id = obj.get("id")
    id_ = raw_id if has_id and _valid_id(raw_id) else None
    if obj.get("jsonrpc") != "2.0":
        raise _invalid(INVALID_REQUEST, 'Invalid request: "jsonrpc" must be "2.0"', id_)
    method = obj.get("method")
    # Only an error response may carry a null id (its request's id was unreadable).
    if has_id and id_ is None and (raw_id is not None or method is not None):
        raise _invalid(INVALID_REQUEST, 'Invalid request: "id" must be a string or an integer')
    if method is not None:
        if not isinstance(method, str):
            raise _invalid(INVALID_REQUEST, 'Invalid request: "method" must be a string', id_)
        params = obj.get("params")
        if params is not None and not isinstance(params, dict):
            raise _invalid(INVALID_PARAMS, 'Invalid params: "params" must be an object', id_)
        if id_ is None:
            return Notification(method, params)
        return _request(id_, method, params)
    if "result" in obj and "error" not in obj:
        result = obj["result"]
        if id_ is None or not isinstance(result, dict):
            raise _invalid(
                INVALID_REQUEST, 'Invalid request: a response needs an "id" and an object "result"'
            )
        return Response(id_, result)
    if "error" in obj and "result" not in obj:
        error = obj["error"]
        if (
            not isinstance(error, dict)
            or type(error.get("code")) is not int
            or not isinstance(error.get("message"), str)
        ):
            raise _invalid(INVALID_REQUEST, 'Invalid request: "error" needs an integer code and a message')
        return ErrorResponse(id_, ErrorObject(error["code"], error["message"], error.get("data")))
    raise _invalid(INVALID_REQUEST, 'Invalid request: no "method", "result" or "error"', id_)


def _dumps(obj: dict[str, Any]) -> bytes:
    """Strict JSON (no NaN/Infinity: ValueError). Lone surrogates cannot be UTF-8, so such a
    message is written with ASCII escapes, which any JSON reader turns back into the same text."""
    return _json.dumps(obj)


def encode_request(id: RequestId, method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        msg["params"] = params
    return _dumps(msg)


NOTIFICATION_PREFIX = b'{"jsonrpc":"2.0","method":'
"""The bytes every notification this module encodes begins with, and no request or response
it encodes does (they have their ``id`` first): a router can tell a notification, and which
method, without parsing it.

>>> encode_notification("notifications/x").startswith(NOTIFICATION_PREFIX)
True
>>> encode_request(1, "ping").startswith(NOTIFICATION_PREFIX)
False
"""


def encode_notification(method: str, params: dict[str, Any] | None = None) -> bytes:
    msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    return _dumps(msg)


def encode_response(id: RequestId, result: dict[str, Any]) -> bytes:
    return _dumps({"jsonrpc": "2.0", "id": id, "result": result})


def encode_response_json(id: RequestId, result_json: bytes) -> bytes:
    """:func:`encode_response` for a result already written as JSON text (the same bytes).

    >>> encode_response_json(7, b'{"a":1}') == encode_response(7, {"a": 1})
    True
    """
    encoded_id = b"%d" % id if type(id) is int else _json.dumps(id)
    return b'{"jsonrpc":"2.0","id":' + encoded_id + b',"result":' + result_json + b"}"


def encode_notification_json(method: str, params_json: bytes) -> bytes:
    """:func:`encode_notification` for params already written as JSON text (the same bytes).

    >>> encode_notification_json("m", b'{"a":1}') == encode_notification("m", {"a": 1})
    True
    """
    return b'{"jsonrpc":"2.0","method":' + _json.dumps(method) + b',"params":' + params_json + b"}"


def encode_error(id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _dumps({"jsonrpc": "2.0", "id": id, "error": error})


def encode(message: Message) -> bytes:
    """Encode any message object (the inverse of :func:`parse`)."""
    if isinstance(message, Request):
        return encode_request(message.id, message.method, message.params)
    if isinstance(message, Notification):
        return encode_notification(message.method, message.params)
    if isinstance(message, Response):
        return encode_response(message.id, message.result)
    e = message.error
    return encode_error(message.id, e.code, e.message, e.data)
