"""Tool arguments beyond JSON's own types, and parameter descriptions from docstrings.

Each type: its schema, a good value converted (the exact Python value and type the tool gets), a
bad value refused at the exact field path. Then TypedDicts, pydantic models, results
(``jsonable``), the three docstring styles, and one tool called end to end.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime as dt
import enum
import functools
import json
import math
import pathlib
import subprocess
import sys
import uuid
from decimal import Decimal
from typing import Annotated, Any, NotRequired, Optional, Required, TypedDict

import attrs
import jsonschema  # type: ignore[import-untyped]
import pydantic
import pytest
import typing_extensions
from conftest import argument_error, checked_spec
from hypothesis import example, given
from hypothesis import strategies as st

from trio_mcp import Server, connect_in_memory
from trio_mcp.server._docstrings import parameter_descriptions, without_parameter_sections
from trio_mcp.server.schema import ArgumentError, ArgumentSpec, argument_spec, jsonable

UTC = dt.UTC


_spec = checked_spec
_error = argument_error


def _one(spec: ArgumentSpec, value: Any, name: str = "x") -> Any:
    return spec.validate({name: value})[name]


def _exact(got: Any, expected: Any) -> None:
    """Equal, of the same type, and (for times) with the same offset: ``==`` alone would
    let an aware 10:00+01:00 equal 09:00Z."""
    assert got == expected
    assert type(got) is type(expected)
    if isinstance(expected, (dt.datetime, dt.time)):
        assert got.utcoffset() == expected.utcoffset()


# --- datetime, date, time -------------------------------------------------------------------------


async def takes_datetime(x: dt.datetime) -> None: ...
async def takes_date(x: dt.date) -> None: ...
async def takes_time(x: dt.time) -> None: ...


DATETIME = _spec(takes_datetime)
DATE = _spec(takes_date)
TIME = _spec(takes_time)
PLUS_2 = dt.timezone(dt.timedelta(hours=2))
MINUS_0530 = dt.timezone(-dt.timedelta(hours=5, minutes=30))


def test_datetime_date_time_schemas() -> None:
    assert DATETIME.schema["properties"]["x"] == {"type": "string", "format": "date-time"}
    assert DATE.schema["properties"]["x"] == {"type": "string", "format": "date"}
    assert TIME.schema["properties"]["x"] == {"type": "string", "format": "time"}


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2024-05-01T09:30:00Z", dt.datetime(2024, 5, 1, 9, 30, tzinfo=UTC)),
        ("2024-05-01t09:30:00z", dt.datetime(2024, 5, 1, 9, 30, tzinfo=UTC)),
        ("2024-05-01T09:30:00+02:00", dt.datetime(2024, 5, 1, 9, 30, tzinfo=PLUS_2)),
        ("2024-05-01T09:30:00-05:30", dt.datetime(2024, 5, 1, 9, 30, tzinfo=MINUS_0530)),
        ("2024-05-01T09:30:00-00:00", dt.datetime(2024, 5, 1, 9, 30, tzinfo=UTC)),
        ("2024-05-01T09:30:00", dt.datetime(2024, 5, 1, 9, 30)),  # no offset: naive
        ("2024-05-01T09:30:00.5Z", dt.datetime(2024, 5, 1, 9, 30, 0, 500000, tzinfo=UTC)),
        ("2024-05-01T09:30:00.123456789Z", dt.datetime(2024, 5, 1, 9, 30, 0, 123456, tzinfo=UTC)),
        ("2024-02-29T23:59:59.999999+00:00", dt.datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=UTC)),
    ],
)
def test_datetime_accepts_rfc_3339(text: str, expected: dt.datetime) -> None:
    _exact(_one(DATETIME, text), expected)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("2024-05-01", 'expected an RFC 3339 date-time such as "2024-05-01T09:30:00Z", got "2024-05-01"'),
        ("2024-05-01 09:30:00Z", 'expected an RFC 3339 date-time such as "2024-05-01T09:30:00Z", got'),
        ("2024-05-01T09:30Z", "expected an RFC 3339 date-time"),  # seconds are required
        ("2024-05-01T09:30:00+0200", "expected an RFC 3339 date-time"),
        ("2024-05-01T09:30:00Z\n", "expected an RFC 3339 date-time"),
        ("\uff12\uff10\uff12\uff14-05-01T09:30:00Z", "expected an RFC 3339 date-time"),  # fullwidth digits
        ("yesterday", 'expected an RFC 3339 date-time such as "2024-05-01T09:30:00Z", got "yesterday"'),
        ("2023-02-29T00:00:00Z", 'invalid date-time "2023-02-29T00:00:00Z": day is out of range for month'),
        ("2024-05-01T24:00:00Z", 'invalid date-time "2024-05-01T24:00:00Z": hour must be in 0..23'),
        ("2016-12-31T23:59:60Z", 'invalid date-time "2016-12-31T23:59:60Z": second must be in 0..59'),
        ("0000-01-01T00:00:00Z", 'invalid date-time "0000-01-01T00:00:00Z": year 0 is out of range'),
        (
            "2024-05-01T09:30:00+24:00",
            'invalid date-time "2024-05-01T09:30:00+24:00": UTC offset out of range',
        ),
    ],
)
def test_datetime_refuses(text: str, message: str) -> None:
    field, got = _error(DATETIME, {"x": text})
    assert field == "x" and got.startswith(message)


def test_date_and_time() -> None:
    _exact(_one(DATE, "2024-02-29"), dt.date(2024, 2, 29))
    _exact(_one(TIME, "09:30:00"), dt.time(9, 30))
    _exact(_one(TIME, "23:59:59.25Z"), dt.time(23, 59, 59, 250000, tzinfo=UTC))
    _exact(_one(TIME, "09:30:00-05:30"), dt.time(9, 30, tzinfo=MINUS_0530))
    assert _error(DATE, {"x": "2024-5-1"}) == ("x", 'expected a date such as "2024-05-01", got "2024-5-1"')
    assert _error(DATE, {"x": "2024-05-01T00:00:00Z"})[1].startswith("expected a date such as")
    assert _error(DATE, {"x": "2023-02-29"}) == (
        "x",
        'invalid date "2023-02-29": day is out of range for month',
    )
    assert (
        _error(TIME, {"x": "9:30"})[1] == 'expected a time such as "09:30:00" or "09:30:00+02:00", got "9:30"'
    )
    assert _error(TIME, {"x": "09:60:00"}) == ("x", 'invalid time "09:60:00": minute must be in 0..59')
    for spec, label in ((DATETIME, "date-time"), (DATE, "date"), (TIME, "time")):
        assert _error(spec, {"x": 20240501}) == ("x", f"expected {label}, got integer")
        assert _error(spec, {"x": None}) == ("x", f"expected {label}, got null")


def test_in_process_callers_may_pass_the_python_values() -> None:
    now = dt.datetime(2024, 5, 1, 9, 30, tzinfo=UTC)
    assert _one(DATETIME, now) is now
    assert _one(DATE, now.date()) == now.date()
    assert _one(TIME, now.timetz()) == now.timetz()
    # A datetime is a date to Python, not to a date parameter.
    assert _error(DATE, {"x": now}) == ("x", "expected date, got datetime")


tz_offsets = st.integers(min_value=-(24 * 60 - 1), max_value=24 * 60 - 1).map(
    lambda minutes: dt.timezone(dt.timedelta(minutes=minutes))
)


@given(st.datetimes(timezones=st.none() | tz_offsets))
def test_datetimes_round_trip(value: dt.datetime) -> None:
    _exact(_one(DATETIME, jsonable(value)), value)
    _exact(_one(DATE, jsonable(value.date())), value.date())
    _exact(_one(TIME, jsonable(value.timetz())), value.timetz())


# --- timedelta ------------------------------------------------------------------------------------


async def takes_timedelta(x: dt.timedelta) -> None: ...


TIMEDELTA = _spec(takes_timedelta)


def test_timedelta_schema() -> None:
    assert TIMEDELTA.schema["properties"]["x"] == {
        "anyOf": [{"type": "number"}, {"type": "string", "format": "duration"}]
    }


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (90, dt.timedelta(seconds=90)),
        (1.5, dt.timedelta(seconds=1, microseconds=500000)),
        (-2, dt.timedelta(seconds=-2)),
        ("PT1H30M", dt.timedelta(hours=1, minutes=30)),
        ("P1DT2H3M4S", dt.timedelta(days=1, hours=2, minutes=3, seconds=4)),
        ("P2W", dt.timedelta(weeks=2)),
        ("P1W2D", dt.timedelta(days=9)),
        ("PT0.5S", dt.timedelta(microseconds=500000)),
        ("PT1,25S", dt.timedelta(seconds=1, microseconds=250000)),
        ("PT0.0000019S", dt.timedelta(microseconds=1)),  # past microseconds: truncated
        ("-P1D", dt.timedelta(days=-1)),
        ("+PT36H", dt.timedelta(hours=36)),
        ("PT0S", dt.timedelta(0)),
    ],
)
def test_timedelta_accepts_seconds_and_iso_8601(value: Any, expected: dt.timedelta) -> None:
    _exact(_one(TIMEDELTA, value), expected)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("P", 'expected seconds or an ISO 8601 duration such as "PT1H30M", got "P"'),
        ("PT", 'expected seconds or an ISO 8601 duration such as "PT1H30M", got "PT"'),
        ("1h", 'expected seconds or an ISO 8601 duration such as "PT1H30M", got "1h"'),
        ("PT1.5M", 'expected seconds or an ISO 8601 duration such as "PT1H30M", got "PT1.5M"'),
        ("P1DT", 'expected seconds or an ISO 8601 duration such as "PT1H30M", got "P1DT"'),
        ("P1M", 'invalid duration "P1M": years and months have no fixed length; use weeks, days, hours,'),
        ("P1Y2D", 'invalid duration "P1Y2D": years and months have no fixed length'),
        ("P9999999999D", "duration out of range"),
        (1e300, "duration out of range"),
        (math.nan, "expected a finite number"),
        (True, "expected seconds or ISO 8601 duration, got boolean"),
        ([1], "expected seconds or ISO 8601 duration, got array"),
    ],
)
def test_timedelta_refuses(value: Any, message: str) -> None:
    field, got = _error(TIMEDELTA, {"x": value})
    assert field == "x" and got.startswith(message)


@given(st.timedeltas())
def test_timedeltas_round_trip(value: dt.timedelta) -> None:
    text = jsonable(value)
    assert isinstance(text, str) and text.lstrip("-").startswith("P")
    _exact(_one(TIMEDELTA, text), value)


def test_timedelta_text_form() -> None:
    assert jsonable(dt.timedelta(0)) == "PT0S"
    assert jsonable(dt.timedelta(days=1)) == "P1D"
    assert jsonable(dt.timedelta(hours=1, minutes=30)) == "PT1H30M"
    assert jsonable(dt.timedelta(days=2, seconds=1, microseconds=500)) == "P2DT1.0005S"
    assert jsonable(dt.timedelta(days=-1, seconds=5)) == "-PT23H59M55S"


# --- UUID, paths ----------------------------------------------------------------------------------


async def takes_uuid(x: uuid.UUID) -> None: ...


UUID_SPEC = _spec(takes_uuid)
SOME_UUID = uuid.UUID("123e4567-e89b-12d3-a456-426614174000")


def test_uuid() -> None:
    assert UUID_SPEC.schema["properties"]["x"] == {"type": "string", "format": "uuid"}
    _exact(_one(UUID_SPEC, "123e4567-e89b-12d3-a456-426614174000"), SOME_UUID)
    _exact(_one(UUID_SPEC, "123E4567-E89B-12D3-A456-426614174000"), SOME_UUID)
    assert _one(UUID_SPEC, SOME_UUID) is SOME_UUID
    expected = 'expected a UUID such as "123e4567-e89b-12d3-a456-426614174000", got '
    assert _error(UUID_SPEC, {"x": "urn:uuid:1"}) == ("x", expected + '"urn:uuid:1"')
    for other in (
        "123e4567e89b12d3a456426614174000",
        "{123e4567-e89b-12d3-a456-426614174000}",
        " " + str(SOME_UUID),
    ):
        field, message = _error(UUID_SPEC, {"x": other})
        assert field == "x" and message.startswith(expected)
    assert _error(UUID_SPEC, {"x": 5}) == ("x", "expected UUID, got integer")


@given(st.uuids())
def test_uuids_round_trip(value: uuid.UUID) -> None:
    _exact(_one(UUID_SPEC, jsonable(value)), value)


async def takes_paths(
    path: pathlib.Path, pure: pathlib.PurePath, posix: pathlib.PurePosixPath, windows: pathlib.PureWindowsPath
) -> None: ...


def test_paths() -> None:
    spec = _spec(takes_paths)
    path_schema = {"type": "string", "format": "path", "minLength": 1}
    assert spec.schema["properties"] == dict.fromkeys(("path", "pure", "posix", "windows"), path_schema)
    names = {"path": "/tmp/a b", "pure": "x/y", "posix": "/etc", "windows": "C:\\Users"}
    out = spec.validate(names)
    _exact(out["path"], pathlib.Path("/tmp/a b"))
    assert isinstance(out["pure"], pathlib.PurePath) and str(out["pure"]) == "x/y"
    _exact(out["posix"], pathlib.PurePosixPath("/etc"))
    _exact(out["windows"], pathlib.PureWindowsPath("C:/Users"))
    assert _error(spec, {**names, "path": ""}) == ("path", "expected a non-empty path")
    assert _error(spec, {**names, "pure": "a\x00b"}) == ("pure", "a path cannot contain a NUL character")
    assert _error(spec, {**names, "posix": ["a"]}) == ("posix", "expected path, got array")
    here = pathlib.Path(".")
    assert spec.validate({**names, "path": here})["path"] is here


def test_a_concrete_path_class_of_another_os_is_refused() -> None:
    other = pathlib.WindowsPath if sys.platform != "win32" else pathlib.PosixPath

    async def fn(x: pathlib.PurePath) -> None:
        pass

    fn.__annotations__["x"] = other
    with pytest.raises(TypeError, match="cannot be instantiated here"):
        argument_spec(fn)


# --- bytes ----------------------------------------------------------------------------------------


async def takes_bytes(x: bytes) -> None: ...


BYTES = _spec(takes_bytes)


def test_bytes() -> None:
    assert BYTES.schema["properties"]["x"] == {"type": "string", "contentEncoding": "base64"}
    _exact(_one(BYTES, "aGk="), b"hi")
    _exact(_one(BYTES, "AP8="), b"\x00\xff")
    _exact(_one(BYTES, "+/+/"), b"\xfb\xff\xbf")
    _exact(_one(BYTES, ""), b"")
    assert _one(BYTES, b"raw") == b"raw"  # in-process


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("aGk", "invalid base64: incorrect padding"),
        ("aG=", "invalid base64: incorrect padding"),
        ("aGk=aGk=", "invalid base64: excess data after padding"),
        ("=aGk", "invalid base64: leading padding not allowed"),
        ("aG=k", "invalid base64: discontinuous padding not allowed"),
        ("aGk=\n", 'invalid base64: character "\\n" at position 4'),
        ("aG k", 'invalid base64: character " " at position 2'),
        ("-_-_", 'invalid base64: character "-" at position 0'),  # the URL-safe alphabet is not base64
        ("héllo===", 'invalid base64: character "\\u00e9" at position 1'),
        ("QR==", "invalid base64: the unused bits of the last character are not zero"),
        ("QUI=", None),
        ("QUJ=", "invalid base64: the unused bits of the last character are not zero"),
    ],
)
def test_bytes_refuses_what_is_not_strict_base64(text: str, message: str | None) -> None:
    if message is None:
        assert _one(BYTES, text) == b"AB"
    else:
        assert _error(BYTES, {"x": text}) == ("x", message)


def test_bytes_refuses_other_json_types() -> None:
    assert _error(BYTES, {"x": [104, 105]}) == ("x", "expected base64 string, got array")


@given(st.binary())
def test_bytes_round_trip(data: bytes) -> None:
    _exact(_one(BYTES, jsonable(data)), data)


@given(st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=", max_size=12))
def test_accepted_base64_is_exactly_the_canonical_encoding(text: str) -> None:
    try:
        data = _one(BYTES, text)
    except ArgumentError as exc:
        assert exc.field == "x" and exc.message.startswith("invalid base64: ")
    else:
        assert base64.b64encode(data).decode() == text


# --- Decimal --------------------------------------------------------------------------------------


async def takes_decimal(x: Decimal) -> None: ...


DECIMAL = _spec(takes_decimal)
DECIMAL_SCHEMA = {
    "anyOf": [
        {"type": "number"},
        {"type": "string", "pattern": "^-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?$"},
    ]
}


def test_decimal_schema() -> None:
    assert DECIMAL.schema["properties"]["x"] == DECIMAL_SCHEMA


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1, Decimal(1)),
        (0.1, Decimal("0.1")),  # the digits sent, not the binary float's
        (1e-7, Decimal("1E-7")),
        (-2.5e20, Decimal("-2.5E+20")),
        ("12.50", Decimal("12.50")),  # trailing zeros kept
        ("-0", Decimal("-0")),
        ("1E+3", Decimal("1E+3")),
        ("123456789012345678901234567890.123456789", Decimal("123456789012345678901234567890.123456789")),
        (10**30, Decimal(10**30)),
    ],
)
def test_decimal_accepts_numbers_and_numeric_strings(value: Any, expected: Decimal) -> None:
    got = _one(DECIMAL, value)
    _exact(got, expected)
    assert got.as_tuple() == expected.as_tuple()  # the same digits and exponent, not just equal


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("NaN", 'expected a decimal number such as "12.50", got "NaN"'),
        ("Infinity", 'expected a decimal number such as "12.50", got "Infinity"'),
        ("+1", 'expected a decimal number such as "12.50", got "+1"'),
        (" 1", 'expected a decimal number such as "12.50", got " 1"'),
        ("1.", 'expected a decimal number such as "12.50", got "1."'),
        (".5", 'expected a decimal number such as "12.50", got ".5"'),
        ("01", 'expected a decimal number such as "12.50", got "01"'),
        ("1_000", 'expected a decimal number such as "12.50", got "1_000"'),
        ("\u0661", 'expected a decimal number such as "12.50", got "\\u0661"'),  # an Arabic-Indic one
        (math.nan, "expected a finite number"),
        (-math.inf, "expected a finite number"),
        ("1e1000000", "decimal out of range"),
        ("1e-1000001", "decimal out of range"),
        ("1e99999999999999999999", "decimal out of range"),
        (True, "expected number or numeric string, got boolean"),
        (None, "expected number or numeric string, got null"),
    ],
)
def test_decimal_refuses(value: Any, message: str) -> None:
    assert _error(DECIMAL, {"x": value}) == ("x", message)


def test_decimal_in_process() -> None:
    value = Decimal("3.14")
    assert _one(DECIMAL, value) is value
    assert _error(DECIMAL, {"x": Decimal("NaN")}) == ("x", "expected a finite number")
    assert _one(DECIMAL, "0e-9999999") == 0  # zero has no magnitude to overflow


DECIMAL_VALIDATOR = jsonschema.Draft202012Validator(DECIMAL.schema)


@given(st.text(alphabet="0123456789-+.eE ", max_size=8) | st.decimals(allow_nan=False).map(str))
def test_decimal_strings_agree_with_the_schema(text: str) -> None:
    valid = DECIMAL_VALIDATOR.is_valid({"x": text})
    try:
        got = _one(DECIMAL, text)
    except ArgumentError as exc:
        assert not valid or exc.message == "decimal out of range"
    else:
        assert valid and got == Decimal(text)


@given(st.decimals(allow_nan=False, allow_infinity=False))
def test_decimals_round_trip(value: Decimal) -> None:
    got = _one(DECIMAL, jsonable(value))
    assert got.as_tuple() == value.as_tuple()


# --- enums ----------------------------------------------------------------------------------------


class Colour(str, enum.Enum):  # noqa: UP042 - the mixin spelling must work too
    RED = "red"
    BLUE = "blue"


class Mode(enum.StrEnum):
    FAST = "fast"
    SLOW = "slow"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


class Mixed(enum.Enum):
    ONE = 1
    TWO = "two"
    NONE = None


async def takes_enums(colour: Colour, mode: Mode, level: Level, mixed: Mixed) -> None: ...


def test_enums_of_every_kind_become_their_members() -> None:
    spec = _spec(takes_enums)
    assert spec.schema["properties"] == {
        "colour": {"type": "string", "enum": ["red", "blue"], "title": "Colour"},
        "mode": {"type": "string", "enum": ["fast", "slow"], "title": "Mode"},
        "level": {"type": "integer", "enum": [1, 2], "title": "Level"},
        "mixed": {"enum": [1, "two", None], "title": "Mixed"},
    }
    out = spec.validate({"colour": "blue", "mode": "slow", "level": 2.0, "mixed": None})
    assert out["colour"] is Colour.BLUE and out["mode"] is Mode.SLOW
    assert out["level"] is Level.HIGH and out["mixed"] is Mixed.NONE
    assert spec.validate({"colour": "red", "mode": "fast", "level": 1, "mixed": "two"})["mixed"] is Mixed.TWO
    good = {"colour": "red", "mode": "fast", "level": 1, "mixed": 1}
    assert _error(spec, {**good, "mode": "FAST"}) == ("mode", 'expected one of "fast", "slow", got "FAST"')
    assert _error(spec, {**good, "mixed": "1"}) == ("mixed", 'expected one of 1, "two", null, got "1"')


# --- containers, objects, defaults ----------------------------------------------------------------


@attrs.frozen
class Meeting:
    at: dt.datetime
    room: uuid.UUID
    length: dt.timedelta = dt.timedelta(hours=1)


@dataclasses.dataclass
class Upload:
    name: pathlib.Path
    data: bytes
    price: Decimal | None = None


async def takes_containers(
    ids: list[uuid.UUID],
    days: dict[str, dt.date],
    maybe: Optional[dt.datetime],  # noqa: UP045 - the typing spelling must work too
    unique: frozenset[uuid.UUID],
    slot: tuple[dt.date, dt.time],
    meeting: Meeting,
    uploads: list[Upload],
) -> None: ...


CONTAINERS = _spec(takes_containers)
CONTAINER_ARGS: dict[str, Any] = {
    "ids": [str(SOME_UUID)],
    "days": {"start": "2024-05-01"},
    "maybe": None,
    "unique": [str(SOME_UUID), str(uuid.UUID(int=1))],
    "slot": ["2024-05-01", "09:00:00"],
    "meeting": {"at": "2024-05-01T09:00:00Z", "room": str(SOME_UUID)},
    "uploads": [{"name": "a.txt", "data": "aGk="}],
}


def test_types_inside_containers_and_objects() -> None:
    props = CONTAINERS.schema["properties"]
    assert props["ids"] == {"type": "array", "items": {"type": "string", "format": "uuid"}}
    assert props["days"] == {"type": "object", "additionalProperties": {"type": "string", "format": "date"}}
    assert props["maybe"] == {"anyOf": [{"type": "string", "format": "date-time"}, {"type": "null"}]}
    assert props["unique"]["uniqueItems"] is True
    assert props["meeting"]["properties"]["length"] == {
        "anyOf": [{"type": "number"}, {"type": "string", "format": "duration"}],
        "default": "PT1H",
    }
    out = CONTAINERS.validate(CONTAINER_ARGS)
    assert out == {
        "ids": [SOME_UUID],
        "days": {"start": dt.date(2024, 5, 1)},
        "maybe": None,
        "unique": frozenset({SOME_UUID, uuid.UUID(int=1)}),
        "slot": (dt.date(2024, 5, 1), dt.time(9)),
        "meeting": Meeting(dt.datetime(2024, 5, 1, 9, tzinfo=UTC), SOME_UUID),
        "uploads": [Upload(pathlib.Path("a.txt"), b"hi")],
    }
    assert type(out["ids"][0]) is uuid.UUID and type(out["uploads"][0].name) is type(pathlib.Path("."))
    assert CONTAINERS.validate({**CONTAINER_ARGS, "maybe": "2024-05-01T09:00:00Z"})["maybe"] == dt.datetime(
        2024, 5, 1, 9, tzinfo=UTC
    )


@pytest.mark.parametrize(
    ("name", "value", "field", "message"),
    [
        (
            "ids",
            [str(SOME_UUID), "x"],
            "ids[1]",
            'expected a UUID such as "123e4567-e89b-12d3-a456-426614174000"',
        ),
        ("days", {"start": "2024-13-01"}, "days.start", 'invalid date "2024-13-01": month must be in 1..12'),
        ("days", {"a b": 1}, 'days["a b"]', "expected date, got integer"),
        ("maybe", 5, "maybe", "expected date-time or null, got integer"),
        (
            "maybe",
            "soon",
            "maybe",
            'expected an RFC 3339 date-time such as "2024-05-01T09:30:00Z", got "soon"',
        ),
        ("unique", [str(SOME_UUID), str(SOME_UUID).upper()], "unique[1]", "duplicate item"),
        ("slot", ["2024-05-01", "9h"], "slot[1]", 'expected a time such as "09:30:00"'),
        ("meeting", {"at": "2024-05-01T09:00:00Z"}, "meeting.room", "required"),
        (
            "meeting",
            {**CONTAINER_ARGS["meeting"], "length": "P1M"},
            "meeting.length",
            'invalid duration "P1M"',
        ),
        ("uploads", [{"name": "a", "data": "aGk"}], "uploads[0].data", "invalid base64: incorrect padding"),
        (
            "uploads",
            [{"name": "a", "data": "", "price": "x"}],
            "uploads[0].price",
            "expected a decimal number",
        ),
    ],
)
def test_bad_values_inside_containers_name_the_path(name: str, value: Any, field: str, message: str) -> None:
    got_field, got = _error(CONTAINERS, {**CONTAINER_ARGS, name: value})
    assert got_field == field
    assert got.startswith(message), got


async def takes_defaults(
    day: dt.date = dt.date(2024, 1, 2),
    at: dt.datetime = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC),
    wait: dt.timedelta = dt.timedelta(minutes=5),
    price: Decimal = Decimal("9.90"),
    blob: bytes = b"\x00",
    where: pathlib.Path = pathlib.Path("out"),
    nowhere: pathlib.Path = pathlib.Path(""),
    ident: uuid.UUID = SOME_UUID,
    nan: Decimal = Decimal("NaN"),
) -> None: ...


def test_defaults_are_advertised_as_their_json_strings() -> None:
    props = _spec(takes_defaults).schema["properties"]
    assert {name: prop.get("default") for name, prop in props.items()} == {
        "day": "2024-01-02",
        "at": "2024-01-02T03:04:05+00:00",
        "wait": "PT5M",
        "price": "9.90",
        "blob": "AA==",
        "where": "out",
        "nowhere": ".",  # Path("") is Path(".")
        "ident": str(SOME_UUID),
        "nan": None,  # not valid against its own schema
    }


# --- TypedDict ------------------------------------------------------------------------------------


class Address(TypedDict):
    street: str
    since: dt.date


class Options(TypedDict, total=False):
    limit: int
    after: Required[dt.datetime]
    address: Address
    note: Annotated[str, "free text"]


class MoreOptions(Options):
    tags: list[str]  # total: required, though the base is not
    hint: NotRequired[Annotated[str, "a hint"]]
    flag: Annotated[NotRequired[bool], "a flag"]


class Cycle(TypedDict):
    again: list[Cycle]


async def takes_typed_dicts(options: Options, more: MoreOptions | None = None) -> None: ...


TYPED = _spec(takes_typed_dicts)
ADDRESS_SCHEMA = {
    "type": "object",
    "title": "Address",
    "properties": {"street": {"type": "string"}, "since": {"type": "string", "format": "date"}},
    "required": ["street", "since"],
    "additionalProperties": False,
}


def test_typed_dict_schema() -> None:
    assert TYPED.schema["properties"]["options"] == {
        "type": "object",
        "title": "Options",
        "properties": {
            "limit": {"type": "integer"},
            "after": {"type": "string", "format": "date-time"},
            "address": ADDRESS_SCHEMA,
            "note": {"type": "string", "description": "free text"},
        },
        "required": ["after"],
        "additionalProperties": False,
    }
    more = TYPED.schema["properties"]["more"]["anyOf"][0]
    assert more["required"] == ["after", "tags"]
    assert more["properties"]["hint"] == {"type": "string", "description": "a hint"}
    assert more["properties"]["flag"] == {"type": "boolean", "description": "a flag"}


def test_typed_dict_values_are_converted_dicts() -> None:
    options = {"after": "2024-05-01T00:00:00Z", "address": {"street": "Main", "since": "2020-01-01"}}
    out = TYPED.validate(
        {"options": options, "more": {"after": "2024-05-01T00:00:00Z", "tags": ["a"], "flag": True}}
    )
    assert out == {
        "options": {
            "after": dt.datetime(2024, 5, 1, tzinfo=UTC),
            "address": {"street": "Main", "since": dt.date(2020, 1, 1)},
        },
        "more": {"after": dt.datetime(2024, 5, 1, tzinfo=UTC), "tags": ["a"], "flag": True},
    }
    assert type(out["options"]) is dict and type(out["options"]["address"]) is dict
    assert out["options"] is not options  # a new dict, never the caller's


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ({"options": {}}, "options.after", "required"),
        ({"options": {"after": "x"}}, "options.after", "expected an RFC 3339 date-time such as"),
        ({"options": {"after": "2024-05-01T00:00:00Z", "limt": 1}}, "options.limt", "unexpected field"),
        (
            {"options": {"after": "2024-05-01T00:00:00Z", "address": {"street": "s", "since": "2020"}}},
            "options.address.since",
            'expected a date such as "2024-05-01", got "2020"',
        ),
        (
            {"options": {"after": "2024-05-01T00:00:00Z", "address": {"since": "2020-01-01"}}},
            "options.address.street",
            "required",
        ),
        (
            {"options": {"after": "2024-05-01T00:00:00Z"}, "more": {"after": "2024-05-01T00:00:00Z"}},
            "more.tags",
            "required",
        ),
        ({"options": ["after"]}, "options", "expected object, got array"),
    ],
)
def test_typed_dict_rejections(arguments: dict[str, Any], field: str, message: str) -> None:
    got_field, got = _error(TYPED, arguments)
    assert got_field == field and got.startswith(message)


def test_recursive_typed_dict_is_refused() -> None:
    async def fn(x: Cycle) -> None: ...

    with pytest.raises(TypeError, match="recursive type Cycle is not supported"):
        argument_spec(fn)


class ExtPoint(typing_extensions.TypedDict, total=False):
    x: typing_extensions.Required[int]
    y: int


async def takes_ext_point(p: ExtPoint) -> None: ...


def test_typing_extensions_typed_dict() -> None:
    spec = _spec(takes_ext_point)
    assert spec.schema["properties"]["p"]["required"] == ["x"]
    assert spec.validate({"p": {"x": 1.0}}) == {"p": {"x": 1}}


# --- pydantic models ------------------------------------------------------------------------------


class Item(pydantic.BaseModel):
    sku: str
    count: int = 1


class Order(pydantic.BaseModel):
    """An order."""

    id: uuid.UUID
    when: dt.datetime
    items: list[Item]
    code: int | str = 0


class Tree(pydantic.BaseModel):
    label: str
    children: list[Tree] = []


class Frozen(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    n: int

    @pydantic.field_validator("n")
    @classmethod
    def positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError("must be positive")
        return value


class Numbers(pydantic.RootModel[list[int]]):
    pass


async def takes_models(order: Order, tree: Tree | None = None, frozen: set[Frozen] | None = None) -> None: ...


MODELS = _spec(takes_models)
ORDER = {
    "id": str(SOME_UUID),
    "when": "2024-05-01T09:00:00Z",
    "items": [{"sku": "a"}, {"sku": "b", "count": 2}],
}


def test_pydantic_schema_keeps_defs_at_the_root() -> None:
    schema = MODELS.schema
    order = schema["properties"]["order"]
    assert "$defs" not in order
    assert order["title"] == "Order" and order["description"] == "An order."
    assert order["properties"]["items"]["items"] == {"$ref": "#/$defs/Item"}
    assert schema["properties"]["tree"] == {
        "anyOf": [{"$ref": "#/$defs/Tree"}, {"type": "null"}],
        "default": None,
    }
    assert set(schema["$defs"]) == {"Item", "Tree"}
    assert schema["$defs"]["Item"] == Item.model_json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    assert validator.is_valid({"order": ORDER, "tree": {"label": "r", "children": [{"label": "c"}]}})
    assert not validator.is_valid({"order": {**ORDER, "items": [{"count": 1}]}})


def test_pydantic_values_become_instances() -> None:
    out = MODELS.validate(
        {"order": ORDER, "tree": {"label": "r", "children": [{"label": "c"}]}, "frozen": [{"n": 1}]}
    )
    order = out["order"]
    assert type(order) is Order
    assert order == Order(
        id=SOME_UUID,
        when=dt.datetime(2024, 5, 1, 9, tzinfo=UTC),
        items=[Item(sku="a"), Item(sku="b", count=2)],
    )
    assert out["tree"] == Tree(label="r", children=[Tree(label="c")])
    assert out["frozen"] == {Frozen(n=1)}
    instance = Order.model_validate(ORDER)
    assert MODELS.validate({"order": instance})["order"] is instance


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ({"order": {**ORDER, "id": "nope"}}, "order.id", "Input should be a valid UUID"),
        ({"order": {**ORDER, "items": [{"sku": "a"}, {"count": 2}]}}, "order.items[1].sku", "required"),
        (
            {"order": {**ORDER, "items": [{"sku": "a", "count": "many"}]}},
            "order.items[0].count",
            "Input should be",
        ),
        ({"order": {**ORDER, "code": [1]}}, "order.code", "Input should be a valid integer"),  # no union tag
        ({"order": "x"}, "order", "expected object, got string"),
        (
            {"order": ORDER, "tree": {"label": "r", "children": [{"label": 1}]}},
            "tree.children[0].label",
            "Input",
        ),
        ({"order": ORDER, "tree": 5}, "tree", "expected object or null, got integer"),
        ({"order": ORDER, "frozen": [{"n": 0}]}, "frozen[0].n", "Value error, must be positive"),
        ({"order": ORDER, "frozen": [{"n": 1, "m": 2}]}, "frozen[0].m", "unexpected field"),
    ],
)
def test_pydantic_errors_name_the_path(arguments: dict[str, Any], field: str, message: str) -> None:
    got_field, got = _error(MODELS, arguments)
    assert got_field == field and got.startswith(message), (got_field, got)


class Holder(TypedDict):
    item: Item


async def takes_root_model(numbers: Numbers, holders: list[Holder]) -> None: ...


def test_pydantic_root_model_and_models_inside_our_types() -> None:
    spec = _spec(takes_root_model)
    assert spec.schema["properties"]["numbers"] == {
        "items": {"type": "integer"},
        "title": "Numbers",
        "type": "array",
    }
    assert spec.schema["properties"]["holders"]["items"]["properties"]["item"] == Item.model_json_schema()
    out = spec.validate({"numbers": [1, 2], "holders": [{"item": {"sku": "a"}}]})
    assert out == {"numbers": Numbers([1, 2]), "holders": [{"item": Item(sku="a")}]}
    assert _error(spec, {"numbers": [1, "x"], "holders": []}) == (
        "numbers[1]",
        "Input should be a valid integer, unable to parse string as an integer",
    )


class Part(pydantic.BaseModel):
    a: int


OtherPart = pydantic.create_model("Part", b=(str, ...))  # another model, the same name


class First(pydantic.BaseModel):
    part: Part


class Second(pydantic.BaseModel):
    part: OtherPart  # type: ignore[valid-type]
    parts: dict[str, OtherPart] = {}  # type: ignore[valid-type]


async def takes_parts(first: First, second: Second, again: First | None = None) -> None: ...


def test_same_named_definitions_of_different_models_are_kept_apart() -> None:
    spec = _spec(takes_parts)
    defs = spec.schema["$defs"]
    assert defs == {"Part": Part.model_json_schema(), "Part_2": OtherPart.model_json_schema()}
    second = spec.schema["properties"]["second"]["properties"]
    assert second["part"] == {"$ref": "#/$defs/Part_2"}
    assert second["parts"]["additionalProperties"] == {"$ref": "#/$defs/Part_2"}
    assert spec.schema["properties"]["first"]["properties"]["part"] == {"$ref": "#/$defs/Part"}
    validator = jsonschema.Draft202012Validator(spec.schema)
    assert validator.is_valid({"first": {"part": {"a": 1}}, "second": {"part": {"b": "x"}}})
    assert not validator.is_valid({"first": {"part": {"a": 1}}, "second": {"part": {"a": 1}}})


class Unschemable:
    pass


WrapsPart = pydantic.create_model("Wrapper", part=(Part, ...))
WrapsOtherPart = pydantic.create_model("Wrapper", part=(OtherPart, ...))  # equal until Part is renamed


async def takes_wrappers(first: WrapsPart, second: WrapsOtherPart) -> None:  # type: ignore[valid-type]
    pass


def test_a_rename_that_makes_another_definition_differ_renames_that_one_too() -> None:
    spec = _spec(takes_wrappers)
    assert spec.schema["properties"]["first"]["properties"]["part"] == {"$ref": "#/$defs/Part"}
    assert spec.schema["properties"]["second"]["properties"]["part"] == {"$ref": "#/$defs/Part_2"}
    assert set(spec.schema["$defs"]) == {"Part", "Part_2"}
    validator = jsonschema.Draft202012Validator(spec.schema)
    assert validator.is_valid({"first": {"part": {"a": 1}}, "second": {"part": {"b": "x"}}})
    assert not validator.is_valid({"first": {"part": {"a": 1}}, "second": {"part": {"a": 1}}})


class HoldsWrapper(pydantic.BaseModel):
    wrapper: WrapsPart  # type: ignore[valid-type]


class HoldsOtherWrapper(pydantic.BaseModel):
    wrapper: WrapsOtherPart  # type: ignore[valid-type]


async def takes_held_wrappers(first: HoldsWrapper, second: HoldsOtherWrapper) -> None: ...


def test_renames_cascade_through_the_definitions_that_refer_to_them() -> None:
    spec = _spec(takes_held_wrappers)
    defs = spec.schema["$defs"]
    assert set(defs) == {"Part", "Wrapper", "Part_2", "Wrapper_2"}
    assert defs["Wrapper"]["properties"]["part"] == {"$ref": "#/$defs/Part"}
    assert defs["Wrapper_2"]["properties"]["part"] == {"$ref": "#/$defs/Part_2"}
    assert spec.schema["properties"]["second"]["properties"]["wrapper"] == {"$ref": "#/$defs/Wrapper_2"}
    validator = jsonschema.Draft202012Validator(spec.schema)
    assert validator.is_valid(
        {"first": {"wrapper": {"part": {"a": 1}}}, "second": {"wrapper": {"part": {"b": "x"}}}}
    )
    assert not validator.is_valid(
        {"first": {"wrapper": {"part": {"a": 1}}}, "second": {"wrapper": {"part": {"a": 1}}}}
    )


class Odd(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(arbitrary_types_allowed=True)
    thing: pydantic.SkipValidation[Unschemable]


async def takes_odd(x: Odd) -> None: ...


def test_a_model_json_schema_cannot_describe_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="cannot make the JSON schema of pydantic model Odd: "):
        argument_spec(takes_odd)


def test_without_pydantic_loaded_a_model_is_unsupported(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pydantic.main", None)
    with pytest.raises(TypeError, match="unsupported type annotation Item"):
        argument_spec(takes_item)


async def takes_item(item: Item) -> None: ...


def test_the_schema_module_does_not_import_pydantic() -> None:
    code = "import sys, trio_mcp, trio_mcp.server.schema; print('pydantic' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


# --- results: jsonable ----------------------------------------------------------------------------


@attrs.frozen
class Receipt:
    issued: dt.date
    total: Decimal


@dataclasses.dataclass
class Attachment:
    name: pathlib.PurePosixPath
    data: bytes


def test_jsonable_turns_results_into_json() -> None:
    value = {
        "at": dt.datetime(2024, 5, 1, 9, 30, tzinfo=UTC),
        "naive": dt.datetime(2024, 5, 1, 9, 30, 0, 5),
        "day": dt.date(2024, 5, 1),
        "time": dt.time(9, 30, tzinfo=PLUS_2),
        "wait": dt.timedelta(hours=1, minutes=30),
        "id": SOME_UUID,
        "path": pathlib.PurePosixPath("/a/b"),
        "price": Decimal("12.50"),
        "raw": b"hi",
        "mode": Mode.FAST,
        "level": Level.HIGH,
        "colour": Colour.RED,
        "pair": (1, "x"),
        "tags": frozenset({"only"}),
        "receipt": Receipt(dt.date(2024, 1, 1), Decimal("1")),
        "attachment": Attachment(pathlib.PurePosixPath("a.txt"), b"\x00"),
        "order": Order(id=SOME_UUID, when=dt.datetime(2024, 5, 1, tzinfo=UTC), items=[Item(sku="a")]),
        SOME_UUID: "uuid key",
        Level.LOW: "enum key",
        dt.date(2024, 1, 1): "date key",
        3: "int key",
    }
    out = jsonable(value)
    assert out == {
        "at": "2024-05-01T09:30:00+00:00",
        "naive": "2024-05-01T09:30:00.000005",
        "day": "2024-05-01",
        "time": "09:30:00+02:00",
        "wait": "PT1H30M",
        "id": str(SOME_UUID),
        "path": "/a/b",
        "price": "12.50",
        "raw": "aGk=",
        "mode": "fast",
        "level": 2,
        "colour": "red",
        "pair": [1, "x"],
        "tags": ["only"],
        "receipt": {"issued": "2024-01-01", "total": "1"},
        "attachment": {"name": "a.txt", "data": "AA=="},
        "order": {
            "id": str(SOME_UUID),
            "when": "2024-05-01T00:00:00Z",
            "items": [{"sku": "a", "count": 1}],
            "code": 0,
        },
        str(SOME_UUID): "uuid key",
        1: "enum key",
        "2024-01-01": "date key",
        3: "int key",
    }
    assert type(out["level"]) is int and type(out["mode"]) is str
    json.dumps(out, allow_nan=False)  # really JSON


def test_jsonable_leaves_the_rest_for_json_to_refuse() -> None:
    thing = object()
    assert jsonable([thing])[0] is thing
    assert math.isnan(jsonable({"x": math.nan})["x"])
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(ValueError, match="nested too deeply, or refers to itself"):
        jsonable(loop)


@given(st.datetimes(timezones=st.none() | tz_offsets), st.binary(), st.uuids(), st.timedeltas())
def test_results_read_back_as_arguments(
    when: dt.datetime, data: bytes, ident: uuid.UUID, wait: dt.timedelta
) -> None:
    async def fn(when: dt.datetime, data: bytes, ident: uuid.UUID, wait: dt.timedelta) -> None: ...

    arguments = {"when": when, "data": data, "ident": ident, "wait": wait}
    assert argument_spec(fn).validate(json.loads(json.dumps(jsonable(arguments)))) == arguments


# --- parameter descriptions from docstrings -------------------------------------------------------


async def google(
    name: str, count: int, shape: dict[str, int], quiet: bool = False, *, extra: str = ""
) -> None:
    """Do a thing.

    A longer explanation, with Args: in it.

    Args:
        name (str): Who to greet,
            by first name.
        count: How many times.

            A second paragraph.
        shape (dict(str, int)): Sizes: by name.
        quiet:
            Whether to keep quiet.
        extra: One of:
            - a: the first
            - b: the second

    Returns:
        Nothing.

    Raises:
        ValueError: never. count: not a parameter here.
    """


async def numpy_style(name: str, low: float, high: float, *args: int, quiet: bool = False) -> None:
    """Do a thing.

    Parameters
    ----------
    name : str
        Who to greet,
        by first name.
    low, high : float
        The bounds.
    *args : int
        Ignored when skipped.
    quiet
        Whether to keep quiet.

    Returns
    -------
    None
        name : not a parameter description.
    """


async def sphinx(name: str, count: int, quiet: bool = False) -> None:
    """Do a thing.

    :param name: Who to greet,
        by first name.
    :type name: str
    :param int count: How many times.
    :param quiet:  Whether to keep quiet.
    :returns: nothing.
    :rtype: None
    """


EXPECTED_DESCRIPTIONS = {
    "name": "Who to greet, by first name.",
    "quiet": "Whether to keep quiet.",
}


def _descriptions(spec: ArgumentSpec) -> dict[str, str]:
    return {
        name: prop["description"] for name, prop in spec.schema["properties"].items() if "description" in prop
    }


def test_google_style() -> None:
    assert _descriptions(_spec(google)) == {
        **EXPECTED_DESCRIPTIONS,
        "count": "How many times.\n\nA second paragraph.",
        "shape": "Sizes: by name.",
        "extra": "One of:\n- a: the first\n- b: the second",
    }


def test_numpy_style() -> None:
    assert _descriptions(_spec(numpy_style, skip={"args"})) == {
        **EXPECTED_DESCRIPTIONS,
        "low": "The bounds.",
        "high": "The bounds.",
    }


def test_sphinx_style() -> None:
    assert _descriptions(_spec(sphinx)) == {**EXPECTED_DESCRIPTIONS, "count": "How many times."}


def test_annotated_wins_over_the_docstring_and_defaults_stay() -> None:
    async def fn(name: Annotated[str, "From Annotated"], count: int = 3) -> None:
        """Summary.

        Args:
            name: From the docstring.
            count: From the docstring too.
        """

    assert _spec(fn).schema["properties"] == {
        "name": {"type": "string", "description": "From Annotated"},
        "count": {"type": "integer", "description": "From the docstring too.", "default": 3},
    }


def test_descriptions_of_classes_callables_and_partials() -> None:
    class Tool:
        """A tool class.

        Args:
            size: From the class docstring.
        """

        size: int
        depth: int

        def __init__(self, size: int, depth: int = 0) -> None:
            """:param depth: From __init__."""

    class Callable:
        def __call__(self, size: int) -> None:
            """:param size: From __call__."""

    async def base(ignored: int, size: int) -> None:
        """:param ignored: Bound by the partial.
        :param size: From the wrapped function.
        """

    assert _descriptions(_spec(Tool)) == {"size": "From the class docstring.", "depth": "From __init__."}
    assert _descriptions(_spec(Callable())) == {"size": "From __call__."}
    assert _descriptions(_spec(functools.partial(base, 1))) == {"size": "From the wrapped function."}


def test_a_wrapped_tool_keeps_its_descriptions() -> None:
    def tool(name: str) -> str:
        """Args:
        name: Who.
        """
        return name

    @functools.wraps(tool)
    async def wrapper(**kwargs: Any) -> Any:
        return tool(**kwargs)

    assert _descriptions(_spec(wrapper)) == {"name": "Who."}


@pytest.mark.parametrize(
    ("doc", "expected"),
    [
        (None, {}),
        ("", {}),
        ("Just a summary.", {}),
        ("Args:\n    x: \n    y: Why.", {"y": "Why."}),  # an empty description is no description
        ("Args:\n    not an entry\n        continued\n    x: Ex.", {"x": "Ex."}),
        ("Args:\n    x (Callable[[int], str]): Ex.", {"x": "Ex."}),
        ("Args:\n    x (unclosed: Ex.", {}),
        ("Keyword Arguments:\n    **kw: Extra.", {"kw": "Extra."}),
        ("Args:\n\tx: Tabbed.", {"x": "Tabbed."}),
        (
            "Parameters\n----------\nx : int\n\n    After a blank line.\nbad name : str\n    No.",
            {"x": "After a blank line."},
        ),
        ("Parameters\n---\nx\n    Ex.\nNotes\n-----\ny\n    Not a parameter.", {"x": "Ex."}),
        (":param x: Ex.\n\n    Still x.\nNot x.", {"x": "Ex.\n\nStill x."}),
        (":param List[int] x: Typed.\n:param 3d: bad name", {"x": "Typed."}),
        (
            ":param x: Sphinx.\n\nArgs:\n    x: Google.\n    y: Google too.",
            {"x": "Sphinx.", "y": "Google too."},
        ),
    ],
)
def test_parameter_descriptions_edge_cases(doc: str | None, expected: dict[str, str]) -> None:
    assert parameter_descriptions(doc) == expected


_DOC_LINES = st.sampled_from(
    [
        "Summary.",
        "",
        "Args:",
        "Parameters",
        "----------",
        "Returns:",
        "x: Ex.",
        "x (int): Ex.",
        "x (int: Ex.",
        "x : int",
        ":param x: Ex.",
        ":type x: int",
        ":param : empty",
        "- item",
        "*args: Rest.",
    ]
)
_DOC_TEXT = st.lists(st.tuples(st.sampled_from(["", "  ", "    ", "\t"]), _DOC_LINES), max_size=12).map(
    lambda lines: "\n".join(indent + line for indent, line in lines)
)


@given(_DOC_TEXT | st.text())
# Dropping an empty Google section joined a title to an underline: a new NumPy section.
@example("Parameters\nArgs:\n----------\nParameters\n  Summary.")
def test_any_docstring_parses_without_error(doc: str) -> None:
    descriptions = parameter_descriptions(doc)
    assert all(name.isidentifier() and text == text.strip() and text for name, text in descriptions.items())
    stripped = without_parameter_sections(doc)
    assert parameter_descriptions(stripped) == {}


def test_without_parameter_sections() -> None:
    # Proposed for the tool description: the parameters are described by the schema already.
    assert without_parameter_sections(google.__doc__ or "") == (
        "Do a thing.\n\nA longer explanation, with Args: in it.\n\nReturns:\n    Nothing.\n\n"
        "Raises:\n    ValueError: never. count: not a parameter here."
    )
    assert without_parameter_sections(numpy_style.__doc__ or "") == (
        "Do a thing.\n\nReturns\n-------\nNone\n    name : not a parameter description."
    )
    assert (
        without_parameter_sections(sphinx.__doc__ or "") == "Do a thing.\n\n:returns: nothing.\n:rtype: None"
    )
    assert without_parameter_sections("Summary only.") == "Summary only."


# --- end to end -----------------------------------------------------------------------------------


async def test_a_served_tool_receives_python_values() -> None:
    server = Server("typed", version="1")
    received: list[tuple[dt.datetime, uuid.UUID, bytes]] = []

    @server.tool()
    async def store(when: dt.datetime, key: uuid.UUID, payload: bytes) -> str:
        """Store a payload.

        Args:
            when: When it was made.
            key: Where it goes.
            payload: The bytes themselves.
        """
        received.append((when, key, payload))
        return f"{len(payload)} bytes for {key} at {when.isoformat()}"

    async with connect_in_memory(server) as client:
        [tool] = await client.list_tools()
        assert tool.input_schema["properties"] == {
            "when": {"type": "string", "format": "date-time", "description": "When it was made."},
            "key": {"type": "string", "format": "uuid", "description": "Where it goes."},
            "payload": {
                "type": "string",
                "contentEncoding": "base64",
                "description": "The bytes themselves.",
            },
        }
        arguments = {"when": "2024-05-01T09:30:00+02:00", "key": str(SOME_UUID), "payload": "AAEC/w=="}
        result = await client.call_tool("store", arguments)
        assert not result.is_error
        assert result.text == f"4 bytes for {SOME_UUID} at 2024-05-01T09:30:00+02:00"
        [(when, key, payload)] = received
        _exact(when, dt.datetime(2024, 5, 1, 9, 30, tzinfo=PLUS_2))
        _exact(key, SOME_UUID)
        _exact(payload, b"\x00\x01\x02\xff")

        bad = await client.call_tool("store", {**arguments, "payload": "AAEC/w="})
        assert bad.is_error and "payload: invalid base64: incorrect padding" in bad.text
        assert len(received) == 1


def test_the_tool_description_leaves_the_parameters_to_the_schema() -> None:
    from trio_mcp import Server

    server = Server("described")

    @server.tool()
    async def greet(name: str, times: int = 1) -> str:
        """Greet someone.

        Args:
            name: Who to greet.
            times: How often.

        Returns:
            The greeting.
        """
        return name * times

    tool = server.tools["greet"].tool
    assert tool.description == "Greet someone.\n\nReturns:\n    The greeting."
    assert tool.input_schema["properties"]["name"]["description"] == "Who to greet."
    assert tool.input_schema["properties"]["times"]["description"] == "How often."


def test_results_carry_these_types_as_json() -> None:
    import uuid

    from trio_mcp.server._server import to_result

    made = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    key = uuid.UUID("12345678-1234-5678-1234-567812345678")
    result = to_result({"at": made, "id": key, "blob": b"\x00\x01"})
    assert result.structured_content == {
        "at": "2026-01-02T03:04:05+00:00",
        "id": "12345678-1234-5678-1234-567812345678",
        "blob": "AAE=",
    }
