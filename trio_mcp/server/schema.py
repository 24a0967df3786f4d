"""Tool ``inputSchema`` from type hints, and strict validation of ``tools/call`` arguments.

:func:`argument_spec` reads a tool function's signature once and compiles it into an
:class:`ArgumentSpec`: a JSON Schema (draft 2020-12) object for ``tools/list``, plus a tree of
small checker closures that :meth:`ArgumentSpec.validate` runs on every call without looking at
type hints again.

Supported annotations: ``str``, ``int``, ``float``, ``bool``, ``None``, ``Any``; lists,
sequences, tuples, sets, frozensets, dicts with ``str`` keys; unions and ``Optional``,
``Literal``, ``NewType``, ``Annotated``; enums; attrs classes, dataclasses and ``TypedDict``
classes (``Required``/``NotRequired`` honoured); pydantic models, when pydantic is loaded;
and these leaves, each sent as a JSON string (or number) and converted:

* ``datetime``: ``{"type": "string", "format": "date-time"}``, RFC 3339 (``T``, seconds
  required); an offset (``Z``, ``+02:00``) gives an aware value, none a naive one;
* ``date``: ``format: date`` (``2024-05-01``); ``time``: ``format: time`` (``09:30:00``,
  offset optional);
* ``timedelta``: a number of seconds, or an ISO 8601 duration string (``format: duration``,
  ``P1DT2H30M``, ``-PT0.5S``; weeks to seconds, no years or months);
* ``UUID``: ``format: uuid``, the hyphenated 8-4-4-4-12 form;
* ``Path`` and the other ``PurePath`` classes: ``format: path`` (pydantic's name), non-empty,
  no NUL;
* ``bytes``: ``contentEncoding: base64``, the standard alphabet, padded and canonical;
* ``Decimal``: a JSON number (its shortest digits: ``0.1`` is ``Decimal("0.1")``), or a string
  in JSON's number syntax; finite, its exponent within the default decimal context's range.

Parameter descriptions come from ``Annotated[T, "text"]`` or, failing that, from the
function's docstring (Google ``Args:``, NumPy ``Parameters``, Sphinx ``:param x:``).
Pydantic models keep their own schema; their ``$defs`` are gathered at the schema's root.

Guarantees:

* Unsupported annotations, missing annotations, recursive classes, and ``*args``/``**kwargs``
  or positional-only parameters that are not skipped are a :class:`TypeError` when the spec is
  built, never a surprise at call time.
* For JSON-decoded input, ``validate`` accepts exactly what the schema describes, except that
  it also rejects non-finite floats (JSON cannot carry them), numbers too large for a
  ``float`` parameter, set items that are equal only after conversion (e.g. two objects that
  differ in an omitted default), strings that do not parse as their ``format`` or
  ``contentEncoding`` says (above), and whatever an attrs/dataclass constructor refuses with
  ``TypeError``/``ValueError``. Pydantic models are validated by pydantic, with the model's own
  configuration. ``validate`` raises nothing but :class:`ArgumentError`, which names the
  first offending field by path (``point.x``, ``items[2]``, ``scores["a b"]``). Parameters are
  checked in declaration order, then unexpected keys; object fields likewise. In-process
  callers may also pass tuples for arrays, any ``Mapping`` for objects, enum members, and the
  Python values of the leaves above (a ``datetime``, a ``UUID``, ``bytes``...).
* Accepted values come back as the annotations promise: attrs classes and dataclasses become
  instances, ``TypedDict`` classes plain dicts, pydantic models instances, enums members,
  tuples/sets/frozensets those types, the leaves above their Python types; an ``int`` sent
  to a ``float`` becomes a float, and an integral float (``2.0``) sent to an ``int`` becomes an
  int, because JSON does not tell them apart and JSON Schema's ``integer`` accepts ``2.0``
  too. Booleans are never numbers. ``1.5`` is not an integer.
* Omitted optional parameters are left out of the result so Python's own defaults apply.
  A schema ``"default"`` is advertised only when the Python default is JSON-representable
  (the leaves above as their strings) and valid against its own schema.

:func:`jsonable` turns values of these types back into JSON data, for results.

Sans-IO: no trio, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import collections.abc as cabc
import copy
import dataclasses
import datetime as dt
import decimal
import enum
import functools
import inspect
import json
import math
import pathlib
import re
import sys
import types
import typing
import uuid
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

import attrs

from ._docstrings import parameter_descriptions

__all__ = ["ArgumentError", "ArgumentSpec", "argument_spec", "jsonable"]

_Checker = Callable[[Any], Any]


class ArgumentError(Exception):
    """A tool argument failed validation.

    ``field`` is the dotted path of the offending value (``''`` for the whole arguments
    object, else e.g. ``'point.x'`` or ``'items[2]'``); ``message`` is human text.
    """

    field: str
    message: str

    def __init__(self, field: str, message: str) -> None:
        # Both in args so the exception pickles and reprs faithfully.
        super().__init__(field, message)
        self.field = field
        self.message = message

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


class _Invalid(Exception):
    """Raised by checkers; each container appends its path segment while it propagates.

    Building paths only on failure keeps the success path free of string work.
    """

    def __init__(self, message: str, *, mismatch: bool = False) -> None:
        self.message = message
        self.mismatch = mismatch
        self.segments: list[str] = []  # innermost first

    @property
    def shallow(self) -> bool:
        """The value's JSON type was wrong at the level that raised, not inside it.

        A union then reports "expected A or B" rather than this branch's complaint.
        """
        return self.mismatch and not self.segments

    def path(self) -> str:
        return "".join(reversed(self.segments))


def _invalid_at(message: str, segment: str) -> _Invalid:
    exc = _Invalid(message)
    exc.segments.append(segment)
    return exc


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _mismatch(label: str, value: Any) -> _Invalid:
    return _Invalid(f"expected {label}, got {_json_type(value)}", mismatch=True)


def _show(value: Any) -> str:
    """A short JSON rendering of a scalar, or its JSON type for anything else."""
    if value is None or isinstance(value, (bool, int, float, str)):
        try:
            text = json.dumps(value)
        except ValueError:  # an int past sys.get_int_max_str_digits()
            return _json_type(value)
        return text if len(text) <= 40 else text[:37] + "..."
    return _json_type(value)


def _key_segment(key: Any) -> str:
    if isinstance(key, str):
        return "." + key if key.isidentifier() else f"[{json.dumps(key)}]"
    return f"[{_show(key)}]"  # only in-process callers can send non-string keys


def _is_mapping(value: Any) -> bool:
    return type(value) is dict or isinstance(value, Mapping)


# --- compiled nodes ---------------------------------------------------------------------------


@attrs.frozen
class _Node:
    schema: dict[str, Any]
    check: _Checker
    label: str  # JSON-ish name of what is expected, for "expected X, got Y"
    hashable: bool  # whether checked values can go into a set


def _check_any(value: Any) -> Any:
    return value


def _check_str(value: Any) -> Any:
    if isinstance(value, str):
        return value
    raise _mismatch("string", value)


def _check_bool(value: Any) -> Any:
    if value is True or value is False:
        return value
    raise _mismatch("boolean", value)


def _check_none(value: Any) -> Any:
    if value is None:
        return None
    raise _mismatch("null", value)


def _check_int(value: Any) -> Any:
    kind = type(value)
    if kind is int:
        return value
    if kind is float:
        if value.is_integer():
            return int(value)
        raise _Invalid(f"expected integer, got {_show(value)}", mismatch=True)
    if isinstance(value, int) and kind is not bool:
        return int(value)
    raise _mismatch("integer", value)


def _check_float(value: Any) -> Any:
    kind = type(value)
    if kind is float or kind is int or (isinstance(value, (int, float)) and kind is not bool):
        try:
            result = float(value)
        except OverflowError:
            raise _Invalid("number out of range") from None
        if math.isfinite(result):
            return result
        raise _Invalid("expected a finite number")
    raise _mismatch("number", value)


# --- strings with a format: dates and times, durations, UUIDs, base64, decimals, paths -------------
# JSON carries these as strings (durations and decimals also as numbers). Each string is parsed
# strictly; in-process callers may also pass the Python value itself.

_DATE = r"(?P<year>\d{4})-(?P<month>\d{2})-(?P<day>\d{2})"
_TIME = r"(?P<hour>\d{2}):(?P<minute>\d{2}):(?P<second>\d{2})(?:\.(?P<fraction>\d+))?"
_OFFSET = r"(?:(?P<utc>[Zz])|(?P<sign>[+-])(?P<offset_hours>\d{2}):(?P<offset_minutes>\d{2}))?"
_DATETIME_RE = re.compile(f"{_DATE}[Tt]{_TIME}{_OFFSET}", re.ASCII)
_DATE_RE = re.compile(_DATE, re.ASCII)
_TIME_RE = re.compile(f"{_TIME}{_OFFSET}", re.ASCII)
_DURATION_RE = re.compile(
    r"(?P<sign>[-+])?P(?!$)(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)(?:[.,](?P<fraction>\d+))?S)?)?",
    re.ASCII,
)
_HEX = "[0-9a-fA-F]"
_UUID_RE = re.compile(f"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}", re.ASCII)
_DECIMAL_PATTERN = r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$"  # JSON's number syntax
_DECIMAL_RE = re.compile(_DECIMAL_PATTERN.strip("^$"), re.ASCII)
_BASE64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
# The default decimal context's exponent range: past it, arithmetic overflows (and int() of a
# huge exponent would build an enormous integer).
_DECIMAL_EMIN, _DECIMAL_EMAX = decimal.DefaultContext.Emin, decimal.DefaultContext.Emax


def _tzinfo(match: re.Match[str]) -> dt.tzinfo | None:
    if match["utc"]:
        return dt.UTC
    if match["sign"] is None:
        return None  # no offset: a naive value
    hours, minutes = int(match["offset_hours"]), int(match["offset_minutes"])
    if hours > 23 or minutes > 59:
        raise ValueError("UTC offset out of range")
    offset = dt.timedelta(hours=hours, minutes=minutes)
    return dt.timezone(-offset if match["sign"] == "-" else offset)


def _microseconds(fraction: str | None) -> int:
    """Digits after the decimal point as microseconds (past the sixth, truncated)."""
    return int(fraction[:6].ljust(6, "0")) if fraction else 0


def _parse_datetime(text: str) -> dt.datetime:
    match = _DATETIME_RE.fullmatch(text)
    if match is None:
        raise _Invalid(f'expected an RFC 3339 date-time such as "2024-05-01T09:30:00Z", got {_show(text)}')
    try:
        return dt.datetime(
            int(match["year"]),
            int(match["month"]),
            int(match["day"]),
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"]),
            _microseconds(match["fraction"]),
            tzinfo=_tzinfo(match),
        )
    except ValueError as exc:  # 2024-02-30, hour 24, a leap second, ...
        raise _Invalid(f"invalid date-time {_show(text)}: {exc}") from None


def _parse_date(text: str) -> dt.date:
    match = _DATE_RE.fullmatch(text)
    if match is None:
        raise _Invalid(f'expected a date such as "2024-05-01", got {_show(text)}')
    try:
        return dt.date(int(match["year"]), int(match["month"]), int(match["day"]))
    except ValueError as exc:
        raise _Invalid(f"invalid date {_show(text)}: {exc}") from None


def _parse_time(text: str) -> dt.time:
    match = _TIME_RE.fullmatch(text)
    if match is None:
        raise _Invalid(f'expected a time such as "09:30:00" or "09:30:00+02:00", got {_show(text)}')
    try:
        return dt.time(
            int(match["hour"]),
            int(match["minute"]),
            int(match["second"]),
            _microseconds(match["fraction"]),
            tzinfo=_tzinfo(match),
        )
    except ValueError as exc:
        raise _Invalid(f"invalid time {_show(text)}: {exc}") from None


def _parse_duration(text: str) -> dt.timedelta:
    match = _DURATION_RE.fullmatch(text)
    if match is None:
        raise _Invalid(f'expected seconds or an ISO 8601 duration such as "PT1H30M", got {_show(text)}')
    if match["years"] or match["months"]:
        raise _Invalid(
            f"invalid duration {_show(text)}: years and months have no fixed length;"
            " use weeks, days, hours, minutes or seconds"
        )

    def number(group: str) -> int:
        digits = match[group]
        return int(digits) if digits else 0

    try:
        result = dt.timedelta(
            weeks=number("weeks"),
            days=number("days"),
            hours=number("hours"),
            minutes=number("minutes"),
            seconds=number("seconds"),
            microseconds=_microseconds(match["fraction"]),
        )
    except (OverflowError, ValueError):  # past timedelta.max, or more digits than int() takes
        raise _Invalid("duration out of range") from None
    return -result if match["sign"] == "-" else result


def _format_duration(value: dt.timedelta) -> str:
    """``value`` as an ISO 8601 duration (days, hours, minutes, seconds), as parsed above."""
    sign = "-" if value < dt.timedelta(0) else ""
    value = abs(value)
    hours, rest = divmod(value.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    clock = (f"{hours}H" if hours else "") + (f"{minutes}M" if minutes else "")
    if seconds or value.microseconds or not (value.days or clock):
        fraction = f".{value.microseconds:06d}".rstrip("0") if value.microseconds else ""
        clock += f"{seconds}{fraction}S"
    return f"{sign}P" + (f"{value.days}D" if value.days else "") + (f"T{clock}" if clock else "")


def _check_timedelta(value: Any) -> Any:
    kind = type(value)
    if isinstance(value, str):
        return _parse_duration(value)
    if kind is int or kind is float or (isinstance(value, (int, float)) and kind is not bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise _Invalid("expected a finite number")
        try:
            return dt.timedelta(seconds=value)
        except (OverflowError, ValueError):
            raise _Invalid("duration out of range") from None
    if isinstance(value, dt.timedelta):
        return value
    raise _mismatch("seconds or ISO 8601 duration", value)


def _parse_uuid(text: str) -> uuid.UUID:
    if _UUID_RE.fullmatch(text) is None:
        raise _Invalid(f'expected a UUID such as "123e4567-e89b-12d3-a456-426614174000", got {_show(text)}')
    return uuid.UUID(text)


def _parse_base64(text: str) -> bytes:
    """Standard base64 (RFC 4648 section 4), padded, canonical: nothing else is accepted."""
    try:
        data = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        for index, char in enumerate(text):
            if char not in _BASE64_CHARS:
                raise _Invalid(f"invalid base64: character {json.dumps(char)} at position {index}") from None
        reason = str(exc)
        raise _Invalid(f"invalid base64: {reason[:1].lower()}{reason[1:]}") from None
    padding = len(text) - len(text.rstrip("="))
    if padding and base64.b64encode(data[-(3 - padding) :]) != text[-4:].encode("ascii"):
        # "QR==" decodes like "QQ==": the bits past the last byte must be zero.
        raise _Invalid("invalid base64: the unused bits of the last character are not zero")
    return data


def _check_decimal(value: Any) -> Any:
    kind = type(value)
    if isinstance(value, str):
        if _DECIMAL_RE.fullmatch(value) is None:
            raise _Invalid(f'expected a decimal number such as "12.50", got {_show(value)}')
        try:
            result = decimal.Decimal(value)
        except decimal.DecimalException:  # an exponent past what Decimal can hold at all
            raise _Invalid("decimal out of range") from None
    elif kind is int or (isinstance(value, int) and kind is not bool):
        result = decimal.Decimal(int(value))
    elif kind is float or isinstance(value, float):
        if not math.isfinite(value):
            raise _Invalid("expected a finite number")
        # The digits JSON carried (0.1), not the float's binary expansion (0.1000000000000000055...).
        result = decimal.Decimal(float.__repr__(value))
    elif isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise _Invalid("expected a finite number")
        result = value
    else:
        raise _mismatch("number or numeric string", value)
    if result and not _DECIMAL_EMIN <= result.adjusted() <= _DECIMAL_EMAX:
        raise _Invalid("decimal out of range")
    return result


def _parsed_node(
    schema: dict[str, Any], label: str, parse: Callable[[str], Any], is_value: Callable[[Any], bool]
) -> _Node:
    """A string that ``parse`` turns into a Python value; in-process callers may pass the value."""

    def check_parsed(value: Any) -> Any:
        if isinstance(value, str):
            return parse(value)
        if is_value(value):
            return value
        raise _mismatch(label, value)

    return _Node(schema, check_parsed, label, hashable=True)


def _path_node(cls: type[pathlib.PurePath]) -> _Node:
    try:
        cls(".")
    except Exception as exc:  # e.g. WindowsPath on POSIX
        raise TypeError(f"{cls.__qualname__} cannot be instantiated here: {exc}") from None

    def parse_path(text: str) -> pathlib.PurePath:
        if not text:
            raise _Invalid("expected a non-empty path")
        if "\x00" in text:
            raise _Invalid("a path cannot contain a NUL character")
        return cls(text)

    schema = {"type": "string", "format": "path", "minLength": 1}
    return _parsed_node(schema, "path", parse_path, lambda value: isinstance(value, cls))


_FORMATS: dict[Any, _Node] = {
    dt.datetime: _parsed_node(
        {"type": "string", "format": "date-time"},
        "date-time",
        _parse_datetime,
        lambda value: isinstance(value, dt.datetime),
    ),
    dt.date: _parsed_node(
        {"type": "string", "format": "date"},
        "date",
        _parse_date,
        lambda value: isinstance(value, dt.date) and not isinstance(value, dt.datetime),
    ),
    dt.time: _parsed_node(
        {"type": "string", "format": "time"}, "time", _parse_time, lambda value: isinstance(value, dt.time)
    ),
    dt.timedelta: _Node(
        {"anyOf": [{"type": "number"}, {"type": "string", "format": "duration"}]},
        _check_timedelta,
        "seconds or ISO 8601 duration",
        hashable=True,
    ),
    uuid.UUID: _parsed_node(
        {"type": "string", "format": "uuid"}, "UUID", _parse_uuid, lambda value: isinstance(value, uuid.UUID)
    ),
    bytes: _parsed_node(
        {"type": "string", "contentEncoding": "base64"},
        "base64 string",
        _parse_base64,
        lambda value: isinstance(value, bytes),
    ),
    decimal.Decimal: _Node(
        {"anyOf": [{"type": "number"}, {"type": "string", "pattern": _DECIMAL_PATTERN}]},
        _check_decimal,
        "number or numeric string",
        hashable=True,
    ),
}


_ANY = _Node({}, _check_any, "any value", hashable=False)
_SCALARS: dict[Any, _Node] = {
    str: _Node({"type": "string"}, _check_str, "string", hashable=True),
    int: _Node({"type": "integer"}, _check_int, "integer", hashable=True),
    float: _Node({"type": "number"}, _check_float, "number", hashable=True),
    bool: _Node({"type": "boolean"}, _check_bool, "boolean", hashable=True),
    None: _Node({"type": "null"}, _check_none, "null", hashable=True),
    type(None): _Node({"type": "null"}, _check_none, "null", hashable=True),
    **_FORMATS,
}

_LIST_ORIGINS = (list, cabc.Sequence, cabc.MutableSequence, cabc.Collection, cabc.Iterable)
_SET_ORIGINS: dict[Any, type[set[Any]] | type[frozenset[Any]]] = {
    set: set,
    cabc.MutableSet: set,
    frozenset: frozenset,
    cabc.Set: frozenset,
}
_DICT_ORIGINS = (dict, cabc.Mapping, cabc.MutableMapping)
_BARE_GENERICS = (*_LIST_ORIGINS, *_SET_ORIGINS, *_DICT_ORIGINS)


def _compile(tp: Any, stack: tuple[type, ...]) -> _Node:
    """Turn one annotation into a node. ``stack`` holds the classes being compiled, to refuse cycles."""
    if tp is Any or tp is object:
        return _ANY
    scalar = _SCALARS.get(tp) if isinstance(tp, type) or tp is None else None
    if scalar is not None:
        return scalar
    if isinstance(tp, typing.NewType):
        return _compile(tp.__supertype__, stack)

    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is typing.Annotated:
        return _annotated_node(_compile(args[0], stack), tp.__metadata__)
    if origin is typing.Union or origin is types.UnionType:
        return _union_node([_compile(arg, stack) for arg in args])
    if origin is typing.Literal:
        return _literal_node(args)
    # A bare generic (``list``, ``typing.List``) means its items are Any.
    if tp is typing.Tuple or tp is tuple:  # noqa: UP006 - the bare typing alias is a distinct object
        return _array_node(_ANY, tuple)
    if origin is None and tp in _BARE_GENERICS:
        origin, args = tp, ()
    if origin in _LIST_ORIGINS:
        return _array_node(_compile(args[0], stack) if args else _ANY, list)
    if origin is tuple:
        if len(args) == 2 and args[1] is Ellipsis:
            return _array_node(_compile(args[0], stack), tuple)
        return _tuple_node([_compile(arg, stack) for arg in args])
    if origin in _SET_ORIGINS:
        return _set_node(_compile(args[0], stack) if args else _ANY, _SET_ORIGINS[origin])
    if origin in _DICT_ORIGINS:
        if args and args[0] is not str:
            raise TypeError(f"{_name(tp)}: object keys must be annotated as str, not {_name(args[0])}")
        return _dict_node(_compile(args[1], stack) if args else _ANY)
    if origin is not None:
        raise TypeError(f"unsupported type annotation {_name(tp)}")

    if isinstance(tp, type):
        if issubclass(tp, enum.Enum):
            return _enum_node(tp)
        if issubclass(tp, pathlib.PurePath):
            return _path_node(tp)
        typed_dict = _is_typeddict(tp)
        if typed_dict or attrs.has(tp) or dataclasses.is_dataclass(tp):
            if tp in stack:
                raise TypeError(f"recursive type {tp.__qualname__} is not supported")
            if typed_dict:
                return _typeddict_node(tp, (*stack, tp))
            return _object_node(tp, (*stack, tp))
        model_base = _pydantic_model_base()
        if model_base is not None and issubclass(tp, model_base):
            return _pydantic_node(tp)
    raise TypeError(f"unsupported type annotation {_name(tp)}")


def _is_typeddict(tp: type) -> bool:
    # typing.is_typeddict() misses typing_extensions.TypedDict (its own metaclass before 3.13).
    return typing.is_typeddict(tp) or (
        issubclass(tp, dict) and all(hasattr(tp, name) for name in ("__required_keys__", "__total__"))
    )


def _pydantic_model_base() -> type | None:
    """pydantic's ``BaseModel``, if pydantic is loaded.

    pydantic stays optional and is never imported here: if no module has loaded it, no
    annotation can be one of its models.
    """
    main = sys.modules.get("pydantic.main")
    base = getattr(main, "BaseModel", None)
    return base if isinstance(base, type) else None


def _name(tp: Any) -> str:
    return tp.__qualname__ if isinstance(tp, type) else repr(tp)


def _annotated_node(inner: _Node, metadata: tuple[Any, ...]) -> _Node:
    description = next((item for item in metadata if isinstance(item, str)), None)
    if description is None:
        return inner
    return attrs.evolve(inner, schema={**inner.schema, "description": description})


def _union_node(branches: list[_Node]) -> _Node:
    label = " or ".join(dict.fromkeys(branch.label for branch in branches))
    schema = {"anyOf": [branch.schema for branch in branches]}
    hashable = all(branch.hashable for branch in branches)
    others = [branch for branch in branches if branch.check is not _check_none]

    if len(branches) == 2 and len(others) == 1:
        # Optional[T], the common case, skips the loop.
        inner = others[0].check

        def check_optional(value: Any) -> Any:
            if value is None:
                return None
            try:
                return inner(value)
            except _Invalid as exc:
                if exc.shallow:
                    raise _mismatch(label, value) from None
                raise

        return _Node(schema, check_optional, label, hashable)

    checks = tuple(branch.check for branch in branches)

    def check_union(value: Any) -> Any:
        # First branch that accepts wins. On failure, prefer the first error from a branch whose
        # type matched (it points deeper, e.g. at a bad field) over a generic type complaint.
        deep: _Invalid | None = None
        for check in checks:
            try:
                return check(value)
            except _Invalid as exc:
                if deep is None and not exc.shallow:
                    deep = exc
        if deep is not None:
            raise deep
        raise _mismatch(label, value)

    return _Node(schema, check_union, label, hashable)


def _tag(value: Any) -> str | None:
    """The JSON type family used to match enum values: keeps True apart from 1, 1.0 with 1."""
    kind = type(value)
    if kind is str:
        return "string"
    if kind is bool:
        return "boolean"
    if kind is int or kind is float:
        return "number"
    if value is None:
        return "null"
    return None


def _json_type_name(value: Any) -> str:
    return "integer" if type(value) is int else _json_type(value)


def _choice_node(pairs: list[tuple[Any, Any]], title: str | None = None) -> _Node:
    """A node accepting one of ``pairs`` (JSON value, Python value) and returning the Python value."""
    table = {(_tag(json_value), json_value): py for json_value, py in pairs}
    tags = {tag for tag, _ in table}
    py_values = tuple(py for _, py in pairs)
    label = "one of " + ", ".join(json.dumps(json_value) for json_value, _ in pairs)

    def check_choice(value: Any) -> Any:
        tag = _tag(value)
        if tag is not None:
            try:
                return table[tag, value]
            except KeyError:
                pass
        # In-process callers may pass the enum member itself.
        for py in py_values:
            if value is py:
                return py
        raise _Invalid(f"expected {label}, got {_show(value)}", mismatch=tag not in tags)

    types_ = {_json_type_name(json_value) for json_value, _ in pairs}
    if types_ == {"integer", "number"}:
        types_ = {"number"}
    schema: dict[str, Any] = {}
    if len(types_) == 1:
        schema["type"] = types_.pop()
    schema["enum"] = [json_value for json_value, _ in pairs]
    if title is not None:
        schema["title"] = title
    return _Node(schema, check_choice, label, hashable=True)


def _enum_value(value: Any, owner: str) -> Any:
    if value is None or type(value) in (str, int, bool) or (type(value) is float and math.isfinite(value)):
        return value
    raise TypeError(f"{owner}: enum value {value!r} is not a JSON scalar")


def _literal_node(values: tuple[Any, ...]) -> _Node:
    pairs: list[tuple[Any, Any]] = []
    for value in values:
        json_value = value.value if isinstance(value, enum.Enum) else value
        pairs.append((_enum_value(json_value, f"Literal[{value!r}]"), value))
    return _choice_node(pairs)


def _enum_node(cls: type[enum.Enum]) -> _Node:
    members = list(cls)
    if not members:
        raise TypeError(f"enum {cls.__qualname__} has no members")
    pairs = [(_enum_value(member.value, cls.__qualname__), member) for member in members]
    return _choice_node(pairs, title=cls.__name__)


def _array_node(item: _Node, result: type[list[Any]] | type[tuple[Any, ...]]) -> _Node:
    check_item = item.check
    make_tuple = result is tuple
    schema: dict[str, Any] = {"type": "array"}
    if item.schema:
        schema["items"] = item.schema

    def check_array(value: Any) -> Any:
        if type(value) is not list and not isinstance(value, (list, tuple)):
            raise _mismatch("array", value)
        try:
            # A comprehension is markedly faster than an indexed loop; only on failure do we
            # walk again to find the index (checkers are deterministic).
            items = [check_item(element) for element in value]
        except _Invalid:
            _raise_at_index(check_item, value)
            raise
        return tuple(items) if make_tuple else items

    return _Node(schema, check_array, "array", hashable=make_tuple and item.hashable)


def _raise_at_index(check_item: _Checker, value: Any) -> None:
    for index, element in enumerate(value):
        try:
            check_item(element)
        except _Invalid as exc:
            exc.segments.append(f"[{index}]")
            raise


def _tuple_node(items: list[_Node]) -> _Node:
    checks = tuple(item.check for item in items)
    size = len(checks)
    schema: dict[str, Any] = {"type": "array", "minItems": size, "maxItems": size}
    if items:
        schema["prefixItems"] = [item.schema for item in items]

    def check_tuple(value: Any) -> Any:
        if not isinstance(value, (list, tuple)):
            raise _mismatch("array", value)
        if len(value) != size:
            raise _Invalid(f"expected {size} items, got {len(value)}")
        out = []
        for index, (check, element) in enumerate(zip(checks, value, strict=True)):
            try:
                out.append(check(element))
            except _Invalid as exc:
                exc.segments.append(f"[{index}]")
                raise
        return tuple(out)

    return _Node(schema, check_tuple, "array", hashable=all(item.hashable for item in items))


def _set_node(item: _Node, result: type[set[Any]] | type[frozenset[Any]]) -> _Node:
    if not item.hashable:
        raise TypeError(f"set items of type {item.label} are not hashable")
    array = _array_node(item, list)
    check_items = array.check

    def check_set(value: Any) -> Any:
        items = check_items(value)
        out = result(items)
        if len(out) != len(items):
            seen: set[Any] = set()
            for index, element in enumerate(items):
                if element in seen:
                    raise _invalid_at("duplicate item", f"[{index}]")
                seen.add(element)
        return out

    schema = {**array.schema, "uniqueItems": True}
    return _Node(schema, check_set, "array", hashable=result is frozenset)


def _dict_node(value_node: _Node) -> _Node:
    check_value = value_node.check
    schema: dict[str, Any] = {"type": "object"}
    if value_node.schema:
        schema["additionalProperties"] = value_node.schema

    def check_dict(value: Any) -> Any:
        if not _is_mapping(value):
            raise _mismatch("object", value)
        out = {}
        for key, element in value.items():
            if not isinstance(key, str):
                raise _invalid_at("object keys must be strings", _key_segment(key))
            try:
                out[key] = check_value(element)
            except _Invalid as exc:
                exc.segments.append(_key_segment(key))
                raise
        return out

    return _Node(schema, check_dict, "object", hashable=False)


_NOT_JSON: Any = object()


def _json_default(value: Any) -> Any:
    """``value`` as JSON for a schema ``default``, or ``_NOT_JSON``."""
    if isinstance(value, enum.Enum):
        return _json_default(value.value)
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, _FORMATTED):
        return jsonable(value)  # a string the parameter's node parses back, checked below
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else _NOT_JSON
    if isinstance(value, (list, tuple)):
        items = [_json_default(item) for item in value]
        return _NOT_JSON if any(item is _NOT_JSON for item in items) else items
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            return _NOT_JSON
        out = {key: _json_default(item) for key, item in value.items()}
        return _NOT_JSON if any(item is _NOT_JSON for item in out.values()) else out
    return _NOT_JSON


_FORMATTED = (dt.date, dt.time, dt.timedelta, uuid.UUID, pathlib.PurePath, decimal.Decimal, bytes)
"""Types that go to JSON as strings (a ``datetime`` is a ``date``)."""


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON data (dicts, lists, strings, numbers, booleans, ``None``).

    The types tool arguments accept go back the way they came in: ``datetime``, ``date`` and
    ``time`` as ISO 8601 strings, ``timedelta`` as an ISO 8601 duration (``"PT1H30M"``),
    ``UUID``, paths and ``Decimal`` as strings (a decimal keeps its digits), ``bytes`` as base64,
    enum members as their values, pydantic models as ``model_dump(mode="json")``, attrs
    instances and dataclasses as dicts of their fields, tuples and sets as lists; mapping keys of
    those types are converted too (an ``IntEnum`` key to its number, which ``json.dumps`` writes
    as a string). Anything else (an arbitrary object, NaN) is left for ``json.dumps`` to refuse.
    A structure too deep or circular raises :class:`ValueError`.

    >>> import datetime, uuid
    >>> jsonable({"at": datetime.date(2024, 5, 1), "ids": (uuid.UUID(int=1),), "raw": b"hi"})
    {'at': '2024-05-01', 'ids': ['00000000-0000-0000-0000-000000000001'], 'raw': 'aGk='}
    """
    try:
        return _jsonable(value)
    except RecursionError:
        raise ValueError("the value is nested too deeply, or refers to itself") from None


def _jsonable(value: Any) -> Any:
    kind = type(value)
    if kind is str or kind is int or kind is float or kind is bool or value is None:
        return value
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, (str, int, float)):
        return value
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return _format_duration(value)
    if isinstance(value, (uuid.UUID, pathlib.PurePath, decimal.Decimal)):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {
            _jsonable(key) if isinstance(key, (enum.Enum, *_FORMATTED)) else key: _jsonable(item)
            for key, item in value.items()
        }
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(item) for item in value]
    if attrs.has(kind):
        return {field.name: _jsonable(getattr(value, field.name)) for field in attrs.fields(kind)}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: _jsonable(getattr(value, field.name)) for field in dataclasses.fields(value)}
    model_base = _pydantic_model_base()
    if model_base is not None and isinstance(value, model_base):
        return value.model_dump(mode="json")  # type: ignore[attr-defined]
    return value


def _with_default(node: _Node, default: Any) -> dict[str, Any]:
    """``node``'s schema plus ``"default"``, if the default is JSON and valid against it.

    A sloppy ``x: int = None`` must not advertise a default that the schema itself rejects.
    """
    json_value = _json_default(default)
    if json_value is _NOT_JSON:
        return node.schema
    try:
        node.check(json_value)
    except _Invalid:
        return node.schema
    return {**node.schema, "default": json_value}


@attrs.frozen
class _FieldInfo:
    name: str  # JSON property name
    kwarg: str  # constructor keyword
    annotation: Any
    required: bool
    default: Any  # _NOT_JSON when absent or produced by a factory


def _class_fields(cls: type) -> list[_FieldInfo]:
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:  # NameError, bad string annotations, ...
        raise TypeError(f"cannot resolve the type hints of {cls.__qualname__}: {exc}") from exc
    infos: list[_FieldInfo] = []
    if attrs.has(cls):
        for field in attrs.fields(cls):
            if not field.init:
                continue
            annotation = hints.get(field.name, field.type)
            if annotation is None or isinstance(annotation, str):
                raise TypeError(f"{cls.__qualname__}.{field.name} has no usable type annotation")
            default = field.default
            required = default is attrs.NOTHING
            if required or isinstance(default, attrs.Factory):  # type: ignore[arg-type]
                default = _NOT_JSON
            kwarg = field.alias or field.name
            infos.append(_FieldInfo(kwarg, kwarg, annotation, required, default))
        return infos
    if any(isinstance(hint, dataclasses.InitVar) for hint in hints.values()):
        raise TypeError(f"{cls.__qualname__}: dataclass InitVar fields are not supported")
    for dc_field in dataclasses.fields(cls):
        if not dc_field.init:
            continue
        has_default = dc_field.default is not dataclasses.MISSING
        required = not has_default and dc_field.default_factory is dataclasses.MISSING
        default = dc_field.default if has_default else _NOT_JSON
        annotation = hints[dc_field.name]
        infos.append(_FieldInfo(dc_field.name, dc_field.name, annotation, required, default))
    return infos


def _typeddict_fields(cls: type) -> list[_FieldInfo]:
    try:
        hints = typing.get_type_hints(cls, include_extras=True)
    except Exception as exc:  # NameError, bad string annotations, ...
        raise TypeError(f"cannot resolve the type hints of {cls.__qualname__}: {exc}") from exc
    required_keys: frozenset[str] = getattr(cls, "__required_keys__", frozenset())
    infos: list[_FieldInfo] = []
    for name, hint in hints.items():
        annotation, required = _strip_required(hint)
        # A string annotation hides Required[]/NotRequired[] from the class's own
        # __required_keys__ (Python 3.11): the resolved hint decides when it has one.
        is_required = name in required_keys if required is None else required
        infos.append(_FieldInfo(name, name, annotation, is_required, _NOT_JSON))
    return infos


def _strip_required(hint: Any) -> tuple[Any, bool | None]:
    """``Required[T]``/``NotRequired[T]`` (also inside ``Annotated``) as ``(T, required)``."""
    origin = typing.get_origin(hint)
    if origin is typing.Required or origin is typing.NotRequired:
        inner, _ = _strip_required(typing.get_args(hint)[0])
        return inner, origin is typing.Required
    if origin is typing.Annotated:
        inner, required = _strip_required(hint.__origin__)
        if required is not None:
            annotated: Any = typing.Annotated
            return annotated[(inner, *hint.__metadata__)], required
    return hint, None


def _object_node(cls: type, stack: tuple[type, ...]) -> _Node:
    cls_name = cls.__name__

    def build(kwargs: dict[str, Any]) -> Any:
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:  # attrs validators / __post_init__ checks
            raise _Invalid(f"invalid {cls_name}: {exc}") from None

    hashable = getattr(cls, "__hash__", None) is not None
    return _fields_node(cls, _class_fields(cls), stack, build, hashable)


def _typeddict_node(cls: type, stack: tuple[type, ...]) -> _Node:
    return _fields_node(cls, _typeddict_fields(cls), stack, None, hashable=False)


def _fields_node(
    cls: type,
    infos: list[_FieldInfo],
    stack: tuple[type, ...],
    build: Callable[[dict[str, Any]], Any] | None,
    hashable: bool,
) -> _Node:
    """An object with the fields ``infos``; ``build`` makes the value from the checked fields
    (keyed by constructor keyword), or the dict itself is the value (a TypedDict)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    fields: list[tuple[str, str, _Checker, bool]] = []
    for info in infos:
        try:
            node = _compile(info.annotation, stack)
        except TypeError as exc:
            raise TypeError(f"{cls.__qualname__}.{info.name}: {exc}") from None
        properties[info.name] = _with_default(node, info.default)
        if info.required:
            required.append(info.name)
        fields.append((info.name, info.kwarg, node.check, info.required))
        hashable = hashable and node.hashable
    names = frozenset(name for name, _, _, _ in fields)

    def check_object(value: Any) -> Any:
        if not _is_mapping(value):
            raise _mismatch("object", value)
        kwargs = {}
        for name, kwarg, check, is_required in fields:
            if name in value:
                try:
                    kwargs[kwarg] = check(value[name])
                except _Invalid as exc:
                    exc.segments.append("." + name)
                    raise
            elif is_required:
                raise _invalid_at("required", "." + name)
        if len(kwargs) != len(value):
            for key in value:
                if key not in names:
                    raise _invalid_at("unexpected field", _key_segment(key))
        return kwargs if build is None else build(kwargs)

    schema = {
        "type": "object",
        "title": cls.__name__,
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return _Node(schema, check_object, "object", hashable)


# --- pydantic models (only when pydantic is installed and loaded) ----------------------------------

_REF_TEMPLATE = "#/$defs/{model}"
_PYDANTIC_MESSAGES = {"missing": "required", "extra_forbidden": "unexpected field"}


def _pydantic_node(cls: type) -> _Node:
    """A pydantic model: its own JSON schema (``$defs`` are moved to the root by
    :func:`argument_spec`), validated by ``model_validate`` with the model's own configuration."""
    model: Any = cls
    try:
        schema = model.model_json_schema(ref_template=_REF_TEMPLATE)
    except Exception as exc:  # an undefined forward reference, a field JSON Schema cannot describe
        raise TypeError(f"cannot make the JSON schema of pydantic model {cls.__qualname__}: {exc}") from None
    validation_error: type[Exception] = sys.modules["pydantic"].ValidationError
    validate = model.model_validate
    takes_any_json = bool(getattr(cls, "__pydantic_root_model__", False))  # a RootModel[list[int]], ...
    cls_name = cls.__name__

    def check_model(value: Any) -> Any:
        if not (takes_any_json or _is_mapping(value) or isinstance(value, cls)):
            raise _mismatch("object", value)
        try:
            return validate(value)
        except validation_error as exc:
            raise _from_pydantic(exc, value) from None
        except (TypeError, ValueError) as exc:  # raised by a validator, not wrapped by pydantic
            raise _Invalid(f"invalid {cls_name}: {exc}") from None

    hashable = getattr(cls, "__hash__", None) is not None
    return _Node(schema, check_model, "object", hashable)


def _from_pydantic(exc: Any, value: Any) -> _Invalid:
    """pydantic's first error as ours, its location turned into our path.

    pydantic's location may name what is not in the input (the union branch it tried, as in
    ``('x', 'int')``); the path stops where the input does, except for a missing field's name.
    """
    errors = exc.errors(include_url=False)
    if not errors:
        return _Invalid(str(exc))
    first = errors[0]
    invalid = _Invalid(_PYDANTIC_MESSAGES.get(first["type"], first["msg"]))
    path: list[str] = []
    current = value
    loc = tuple(first["loc"])
    for position, part in enumerate(loc):
        if isinstance(part, int) and isinstance(current, (list, tuple)) and 0 <= part < len(current):
            path.append(f"[{part}]")
            current = current[part]
        elif isinstance(part, str) and _is_mapping(current) and part in current:
            path.append(_key_segment(part))
            current = current[part]
        elif position == len(loc) - 1 and first["type"] == "missing":
            path.append(_key_segment(part))
        else:
            break
    invalid.segments.extend(reversed(path))
    return invalid


# --- public API -------------------------------------------------------------------------------

_NO_ARGUMENTS: Mapping[str, Any] = types.MappingProxyType({})


@attrs.frozen
class ArgumentSpec:
    """A tool's compiled ``inputSchema`` and the matching argument validator."""

    schema: dict[str, Any]
    """The ``inputSchema``: ``{"type": "object", "properties": ..., "required": [...],
    "additionalProperties": False}``, and ``"$defs"`` when a pydantic model brought some."""
    _params: tuple[tuple[str, _Checker, bool], ...] = attrs.field(repr=False, eq=False)
    _names: frozenset[str] = attrs.field(init=False, repr=False, eq=False)

    @_names.default
    def _names_default(self) -> frozenset[str]:
        return frozenset(name for name, _, _ in self._params)

    def validate(self, arguments: Mapping[str, Any] | None) -> dict[str, Any]:
        """Check JSON-decoded ``arguments`` and return keyword arguments for the tool function.

        Values are converted (attrs classes to instances, enums to members, ...); omitted
        optional parameters stay omitted. Raises :class:`ArgumentError` naming the first
        offending field.
        """
        if arguments is None:
            arguments = _NO_ARGUMENTS
        elif not _is_mapping(arguments):
            raise ArgumentError("", "arguments must be an object")
        out: dict[str, Any] = {}
        for name, check, required in self._params:
            if name in arguments:
                try:
                    out[name] = check(arguments[name])
                except _Invalid as exc:
                    raise ArgumentError(name + exc.path(), exc.message) from None
            elif required:
                raise ArgumentError(name, "required")
        if len(out) != len(arguments):
            for key in arguments:
                if key not in self._names:
                    raise ArgumentError(key if isinstance(key, str) else _show(key), "unexpected argument")
        return out


def _unwrap_partial(fn: Callable[..., Any]) -> Any:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    return target


def _function_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    target = _unwrap_partial(fn)
    if not (inspect.isroutine(target) or isinstance(target, type)):
        target = type(target).__call__  # a callable object
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # NameError, bad string annotations, ...
        raise TypeError(f"cannot resolve the type hints of {fn!r}: {exc}") from exc


def _docstring_descriptions(fn: Callable[..., Any]) -> dict[str, str]:
    """Parameter descriptions from the docstrings of ``fn`` (a class: its own and its
    ``__init__``'s; a callable object: its ``__call__``'s and its class's)."""
    target = _unwrap_partial(fn)
    if inspect.isroutine(target):
        docs = [inspect.getdoc(target)]
    elif isinstance(target, type):
        init = vars(target).get("__init__")  # its own, not object's
        docs = [inspect.getdoc(target), inspect.getdoc(init) if init is not None else None]
    else:
        docs = [inspect.getdoc(type(target).__call__), inspect.getdoc(type(target))]
    found: dict[str, str] = {}
    for doc in docs:
        for name, text in parameter_descriptions(doc).items():
            found.setdefault(name, text)
    return found


def _annotated_description(hint: Any) -> bool:
    return typing.get_origin(hint) is typing.Annotated and any(isinstance(m, str) for m in hint.__metadata__)


_IN_SUBSCHEMA = ("items", "additionalProperties", "not", "contains", "propertyNames", "if", "then", "else")
_SUBSCHEMA_LISTS = ("anyOf", "allOf", "oneOf", "prefixItems")
_SUBSCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas", "$defs")


def _subschemas(schema: dict[str, Any]) -> Iterator[Any]:
    for key in _IN_SUBSCHEMA:
        if key in schema:
            yield schema[key]
    for key in _SUBSCHEMA_LISTS:
        yield from schema.get(key, ())
    for key in _SUBSCHEMA_MAPS:
        yield from schema.get(key, {}).values()


def _hoist_defs(root: dict[str, Any]) -> None:
    """Move the ``$defs`` of embedded schemas (pydantic's) to ``root``, where their
    ``"#/$defs/..."`` references point. A name already taken by a different definition is
    renamed (``Item_2``), and the references to it in its own subtree rewritten; identical
    definitions are kept once."""
    hoisted: dict[str, Any] = {}

    def ref(name: str) -> str:
        return _REF_TEMPLATE.format(model=name)

    def visit(schema: Any) -> None:
        if not isinstance(schema, dict):
            return
        local = schema.pop("$defs", None) if schema is not root else None
        for sub in _subschemas(schema):
            visit(sub)
        if not local:
            return
        for definition in local.values():
            visit(definition)
        names = {name: name for name in local}
        # Renaming one definition rewrites the references in the others, which may then
        # differ from a definition of their own name: repeat until nothing clashes.
        while clashes := [n for n in local if names[n] in hoisted and hoisted[names[n]] != local[n]]:
            taken = {*hoisted, *names.values()}
            for name in clashes:
                count = 2
                while f"{name}_{count}" in taken:
                    count += 1
                renames = {ref(names[name]): ref(f"{name}_{count}")}
                names[name] = f"{name}_{count}"
                taken.add(names[name])
                _rewrite_refs(schema, renames)
                _rewrite_refs(local, renames)
        for name, definition in local.items():
            hoisted.setdefault(names[name], definition)

    visit(root)
    if hoisted:
        root["$defs"] = hoisted


def _rewrite_refs(value: Any, renames: dict[str, str]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref" and isinstance(item, str):
                value[key] = renames.get(item, item)
            elif key == "mapping" and isinstance(item, dict):  # a pydantic discriminator's mapping
                for tag, ref in item.items():
                    if isinstance(ref, str):
                        item[tag] = renames.get(ref, ref)
            else:
                _rewrite_refs(item, renames)
    elif isinstance(value, list):
        for item in value:
            _rewrite_refs(item, renames)


def argument_spec(fn: Callable[..., Any], *, skip: Collection[str] = ()) -> ArgumentSpec:
    """Compile ``fn``'s signature and type hints into an :class:`ArgumentSpec`.

    Parameters named in ``skip`` (e.g. a context parameter) are left out entirely. Parameters
    with defaults are optional; their schema carries ``"default"`` when the default is
    JSON-representable. ``Annotated[T, "text"]`` sets a ``"description"``; without it, the
    parameter's entry in the docstring (Google, NumPy or Sphinx style) does. Raises
    :class:`TypeError` for anything that cannot be expressed as JSON arguments.
    """
    where = getattr(fn, "__qualname__", None) or repr(fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read the signature of {where}: {exc}") from exc
    hints = _function_hints(fn)
    descriptions = _docstring_descriptions(fn)

    properties: dict[str, Any] = {}
    required: list[str] = []
    params: list[tuple[str, _Checker, bool]] = []
    for param in signature.parameters.values():
        name = param.name
        if name in skip:
            continue
        if param.kind is param.VAR_POSITIONAL or param.kind is param.VAR_KEYWORD:
            stars = "*" if param.kind is param.VAR_POSITIONAL else "**"
            raise TypeError(f"{where}: {stars}{name} is not supported; tool arguments must be named")
        if param.kind is param.POSITIONAL_ONLY:
            raise TypeError(f"{where}: positional-only parameter {name!r} cannot be passed by name")
        if name not in hints:
            raise TypeError(f"{where}: parameter {name!r} has no type annotation")
        try:
            node = _compile(hints[name], ())
        except TypeError as exc:
            raise TypeError(f"{where}: parameter {name!r}: {exc}") from None
        description = descriptions.get(name)
        if description is not None and not _annotated_description(hints[name]):
            node = attrs.evolve(node, schema={**node.schema, "description": description})
        is_required = param.default is param.empty
        if is_required:
            required.append(name)
            properties[name] = node.schema
        else:
            properties[name] = _with_default(node, param.default)
        params.append((name, node.check, is_required))

    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    # Nodes share schema dicts (the scalar ones are module-wide); hand out a private copy.
    schema = copy.deepcopy(schema)
    _hoist_defs(schema)
    return ArgumentSpec(schema, tuple(params))
