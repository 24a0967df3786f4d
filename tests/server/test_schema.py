"""Tests for trio_mcp.server.schema: inputSchema generation and argument validation."""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import pickle
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal, NewType, Optional

import attrs
import jsonschema  # type: ignore[import-untyped]
import pytest
from conftest import argument_error, checked_spec
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_mcp.server.schema import ArgumentError, ArgumentSpec, argument_spec

# --- fixtures: types used by tool functions ----------------------------------------------------


class Color(enum.Enum):
    RED = "red"
    GREEN = "green"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@attrs.frozen
class Point:
    x: int
    y: int = 0


@attrs.define
class Line:
    start: Point
    end: Point
    label: str | None = None
    tags: list[str] = attrs.Factory(list)


@attrs.define
class Positive:
    value: int = attrs.field(validator=attrs.validators.gt(0))


@attrs.define
class Private:
    _secret: str


@dataclasses.dataclass(frozen=True)
class Size:
    width: float
    height: float = 1.0
    unit: Literal["px", "em"] = "px"


@attrs.define
class Node:
    children: list[Node]


UserId = NewType("UserId", int)

POINT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "title": "Point",
    "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
    "required": ["x"],
    "additionalProperties": False,
}


_spec = checked_spec
_error = argument_error


# --- schema output ------------------------------------------------------------------------------


async def scalars(
    ctx: object,
    name: Annotated[str, "Who to greet"],
    count: int,
    ratio: float = 0.5,
    loud: bool = False,
    nothing: None = None,
    anything: Any = None,
) -> str:
    return name


def test_schema_scalars_defaults_descriptions_and_skip() -> None:
    assert _spec(scalars, skip={"ctx"}).schema == {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "Who to greet"},
            "count": {"type": "integer"},
            "ratio": {"type": "number", "default": 0.5},
            "loud": {"type": "boolean", "default": False},
            "nothing": {"type": "null", "default": None},
            "anything": {"default": None},
        },
        "required": ["name", "count"],
        "additionalProperties": False,
    }


async def containers(
    items: list[int],
    seq: Sequence[str],
    var: tuple[float, ...],
    pair: tuple[int, str],
    empty: tuple[()],
    uniq: set[str],
    frozen: frozenset[int],
    scores: dict[str, float],
    mapping: Mapping[str, bool],
    bare: dict,  # type: ignore[type-arg]
    bare_list: list,  # type: ignore[type-arg]
) -> None:
    pass


def test_schema_containers() -> None:
    assert _spec(containers).schema["properties"] == {
        "items": {"type": "array", "items": {"type": "integer"}},
        "seq": {"type": "array", "items": {"type": "string"}},
        "var": {"type": "array", "items": {"type": "number"}},
        "pair": {
            "type": "array",
            "prefixItems": [{"type": "integer"}, {"type": "string"}],
            "minItems": 2,
            "maxItems": 2,
        },
        "empty": {"type": "array", "minItems": 0, "maxItems": 0},
        "uniq": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "frozen": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True},
        "scores": {"type": "object", "additionalProperties": {"type": "number"}},
        "mapping": {"type": "object", "additionalProperties": {"type": "boolean"}},
        "bare": {"type": "object"},
        "bare_list": {"type": "array"},
    }


async def choices(
    maybe: Optional[int],  # noqa: UP045 - the typing spelling must work too
    either: int | str,
    mode: Literal["fast", "slow"],
    mixed: Literal[1, "one", None],
    numbers: Literal[1, 2],
    color: Color = Color.GREEN,
    level: Level = Level.LOW,
    user: UserId = UserId(0),
) -> None:
    pass


def test_schema_unions_literals_enums() -> None:
    assert _spec(choices).schema["properties"] == {
        "maybe": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        "mode": {"type": "string", "enum": ["fast", "slow"]},
        "mixed": {"enum": [1, "one", None]},
        "numbers": {"type": "integer", "enum": [1, 2]},
        "color": {"type": "string", "enum": ["red", "green"], "title": "Color", "default": "green"},
        "level": {"type": "integer", "enum": [1, 2], "title": "Level", "default": 1},
        "user": {"type": "integer", "default": 0},
    }


async def shapes(line: Line, size: Size, where: Point | None = None, private: Private | None = None) -> None:
    pass


def test_schema_attrs_and_dataclasses() -> None:
    assert _spec(shapes).schema == {
        "type": "object",
        "properties": {
            "line": {
                "type": "object",
                "title": "Line",
                "properties": {
                    "start": POINT_SCHEMA,
                    "end": POINT_SCHEMA,
                    "label": {"anyOf": [{"type": "string"}, {"type": "null"}], "default": None},
                    "tags": {"type": "array", "items": {"type": "string"}},  # factory: no default
                },
                "required": ["start", "end"],
                "additionalProperties": False,
            },
            "size": {
                "type": "object",
                "title": "Size",
                "properties": {
                    "width": {"type": "number"},
                    "height": {"type": "number", "default": 1.0},
                    "unit": {"type": "string", "enum": ["px", "em"], "default": "px"},
                },
                "required": ["width"],
                "additionalProperties": False,
            },
            "where": {"anyOf": [POINT_SCHEMA, {"type": "null"}], "default": None},
            "private": {
                "anyOf": [
                    {
                        "type": "object",
                        "title": "Private",
                        "properties": {"secret": {"type": "string"}},
                        "required": ["secret"],
                        "additionalProperties": False,
                    },
                    {"type": "null"},
                ],
                "default": None,
            },
        },
        "required": ["line", "size"],
        "additionalProperties": False,
    }


_SENTINEL = object()


async def odd_defaults(
    a: tuple[int, int] = (1, 2),
    b: Any = _SENTINEL,
    c: frozenset[int] = frozenset({1}),
    d: int = None,  # type: ignore[assignment]  # noqa: RUF013 - deliberately sloppy
    e: float = math.inf,
    f: dict[str, Any] = {"k": [1, None]},  # noqa: B006
    g: Point = Point(1),
) -> None:
    pass


def test_schema_default_only_when_json_and_valid() -> None:
    props = _spec(odd_defaults).schema["properties"]
    assert props["a"]["default"] == [1, 2]
    assert props["f"]["default"] == {"k": [1, None]}
    # Not JSON (object, frozenset, inf, attrs instance) or invalid against the schema (None for int).
    for name in "bcdeg":
        assert "default" not in props[name], name
    assert _spec(odd_defaults).schema["required"] == []


def test_schemas_do_not_share_mutable_parts() -> None:
    first, second = argument_spec(simple), argument_spec(simple)
    first.schema["properties"]["name"]["description"] = "changed"
    assert second.schema["properties"]["name"] == {"type": "string"}
    assert argument_spec(simple).schema["properties"]["name"] == {"type": "string"}


def test_spec_is_frozen_and_methods_and_partials_work() -> None:
    class Tools:
        async def method(self, x: int) -> None:
            pass

    spec = _spec(Tools().method)
    assert spec.schema["required"] == ["x"]
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        spec.schema = {}  # type: ignore[misc]

    async def base(a: int, b: str) -> None:
        pass

    partial_spec = _spec(functools.partial(base, 1))
    assert partial_spec.schema["properties"] == {"b": {"type": "string"}}
    assert partial_spec.validate({"b": "x"}) == {"b": "x"}


# --- definition-time errors ---------------------------------------------------------------------


async def f_varargs(*args: int) -> None: ...
async def f_kwargs(**kwargs: int) -> None: ...
async def f_posonly(x: int, /) -> None: ...
async def f_unannotated(x) -> None: ...  # type: ignore[no-untyped-def]
async def f_bytearray(x: bytearray) -> None: ...
async def f_int_keys(x: dict[int, str]) -> None: ...
async def f_unhashable_set(x: set[list[int]]) -> None: ...
async def f_mutable_attrs_set(x: set[Line]) -> None: ...
async def f_any_set(x: frozenset[Any]) -> None: ...
async def f_recursive(x: Node) -> None: ...
async def f_bytes_literal(x: Literal[b"x"]) -> None: ...
async def f_nested_bad(x: list[Optional[complex]]) -> None: ...  # noqa: UP045


@attrs.define
class HasBadField:
    ok: int
    bad: complex


async def f_bad_field(x: HasBadField) -> None: ...


class ObjectEnum(enum.Enum):
    A = object()


async def f_object_enum(x: ObjectEnum) -> None: ...


@pytest.mark.parametrize(
    ("fn", "fragment"),
    [
        (f_varargs, "*args is not supported"),
        (f_kwargs, "**kwargs is not supported"),
        (f_posonly, "positional-only parameter 'x'"),
        (f_unannotated, "parameter 'x' has no type annotation"),
        (f_bytearray, "parameter 'x': unsupported type annotation bytearray"),
        (f_int_keys, "object keys must be annotated as str"),
        (f_unhashable_set, "not hashable"),
        (f_mutable_attrs_set, "not hashable"),
        (f_any_set, "not hashable"),
        (f_recursive, "recursive type Node is not supported"),
        (f_bytes_literal, "not a JSON scalar"),
        (f_nested_bad, "unsupported type annotation complex"),
        (f_bad_field, "HasBadField.bad: unsupported type annotation complex"),
        (f_object_enum, "ObjectEnum: enum value"),
    ],
)
def test_unsupported_signatures_raise_type_error(fn: Any, fragment: str) -> None:
    with pytest.raises(TypeError) as info:
        argument_spec(fn)
    assert fragment in str(info.value)
    assert fn.__qualname__ in str(info.value)


def test_skip_also_skips_unsupported_parameters() -> None:
    async def fn(ctx: bytes, *rest: int, x: int) -> None: ...

    assert argument_spec(fn, skip=("ctx", "rest")).schema["required"] == ["x"]


def test_unresolvable_forward_reference_is_type_error() -> None:
    async def fn(x: DoesNotExist) -> None: ...  # type: ignore[name-defined]  # noqa: F821

    with pytest.raises(TypeError, match="cannot resolve the type hints"):
        argument_spec(fn)


# --- validation: the arguments object -----------------------------------------------------------


async def simple(name: str, count: int = 1) -> None:
    pass


SIMPLE = argument_spec(simple)


def test_arguments_object() -> None:
    assert SIMPLE.validate({"name": "a"}) == {"name": "a"}  # defaults are not filled in
    assert SIMPLE.validate({"name": "a", "count": 3}) == {"name": "a", "count": 3}
    assert argument_spec(scalars, skip={"ctx", "name", "count"}).validate(None) == {}
    assert _error(SIMPLE, None) == ("name", "required")
    assert _error(SIMPLE, {}) == ("name", "required")
    assert _error(SIMPLE, {"name": "a", "extra": 1}) == ("extra", "unexpected argument")
    assert _error(SIMPLE, ["a"]) == ("", "arguments must be an object")
    assert _error(SIMPLE, "a") == ("", "arguments must be an object")
    # Parameters in declaration order come before unexpected keys.
    assert _error(SIMPLE, {"extra": 1, "name": 5}) == ("name", "expected string, got integer")


def test_argument_error_format_and_pickle() -> None:
    error = ArgumentError("point.x", "required")
    assert str(error) == "point.x: required"
    assert str(ArgumentError("", "arguments must be an object")) == "arguments must be an object"
    clone = pickle.loads(pickle.dumps(error))
    assert (clone.field, clone.message, str(clone)) == ("point.x", "required", "point.x: required")


# --- validation: scalars ------------------------------------------------------------------------

SCALARS = argument_spec(scalars, skip={"ctx"})


def _one(spec: ArgumentSpec, name: str, value: Any, base: dict[str, Any] | None = None) -> Any:
    return spec.validate({**(base or {}), name: value})[name]


BASE = {"name": "n", "count": 1}


def test_int_accepts_integral_floats_only() -> None:
    assert _one(SCALARS, "count", 7, BASE) == 7
    converted = _one(SCALARS, "count", 2.0, BASE)
    assert converted == 2 and type(converted) is int
    assert _one(SCALARS, "count", 1e20, BASE) == 10**20
    assert _error(SCALARS, {**BASE, "count": 1.5}) == ("count", "expected integer, got 1.5")
    assert _error(SCALARS, {**BASE, "count": True}) == ("count", "expected integer, got boolean")
    assert _error(SCALARS, {**BASE, "count": "1"}) == ("count", "expected integer, got string")
    assert _error(SCALARS, {**BASE, "count": math.nan}) == ("count", "expected integer, got NaN")


def test_float_accepts_ints_rejects_bools_and_non_finite() -> None:
    converted = _one(SCALARS, "ratio", 3, BASE)
    assert converted == 3.0 and type(converted) is float
    assert _one(SCALARS, "ratio", -0.25, BASE) == -0.25
    assert _error(SCALARS, {**BASE, "ratio": False}) == ("ratio", "expected number, got boolean")
    assert _error(SCALARS, {**BASE, "ratio": None}) == ("ratio", "expected number, got null")
    assert _error(SCALARS, {**BASE, "ratio": math.inf}) == ("ratio", "expected a finite number")
    assert _error(SCALARS, {**BASE, "ratio": math.nan}) == ("ratio", "expected a finite number")
    assert _error(SCALARS, {**BASE, "ratio": 10**400}) == ("ratio", "number out of range")


def test_str_bool_null_any() -> None:
    assert _error(SCALARS, {**BASE, "name": None}) == ("name", "expected string, got null")
    assert _one(SCALARS, "loud", True, BASE) is True
    assert _error(SCALARS, {**BASE, "loud": 1}) == ("loud", "expected boolean, got integer")
    assert _error(SCALARS, {**BASE, "loud": "true"}) == ("loud", "expected boolean, got string")
    assert _one(SCALARS, "nothing", None, BASE) is None
    assert _error(SCALARS, {**BASE, "nothing": 0}) == ("nothing", "expected null, got integer")
    weird = {"a": [1, {"b": None}]}
    assert _one(SCALARS, "anything", weird, BASE) is weird


# --- validation: containers ---------------------------------------------------------------------

CONTAINERS = argument_spec(containers)
CONTAINER_ARGS: dict[str, Any] = {
    "items": [1, 2.0],
    "seq": ["a"],
    "var": [1, 2.5],
    "pair": [1, "x"],
    "empty": [],
    "uniq": ["a", "b"],
    "frozen": [3, 4],
    "scores": {"a": 1},
    "mapping": {"on": True},
    "bare": {"k": [1]},
    "bare_list": [None, "x"],
}


def test_containers_convert() -> None:
    out = CONTAINERS.validate(CONTAINER_ARGS)
    assert out == {
        "items": [1, 2],
        "seq": ["a"],
        "var": (1.0, 2.5),
        "pair": (1, "x"),
        "empty": (),
        "uniq": {"a", "b"},
        "frozen": frozenset({3, 4}),
        "scores": {"a": 1.0},
        "mapping": {"on": True},
        "bare": {"k": [1]},
        "bare_list": [None, "x"],
    }
    assert type(out["items"][1]) is int and type(out["scores"]["a"]) is float
    assert type(out["var"]) is tuple and type(out["uniq"]) is set and type(out["frozen"]) is frozenset
    # In-process callers may pass tuples for arrays.
    assert _one(CONTAINERS, "items", (5, 6), CONTAINER_ARGS) == [5, 6]


@pytest.mark.parametrize(
    ("name", "value", "field", "message"),
    [
        ("items", "12", "items", "expected array, got string"),
        ("items", {"0": 1}, "items", "expected array, got object"),
        ("items", [1, 2, "3"], "items[2]", "expected integer, got string"),
        ("seq", ["a", None], "seq[1]", "expected string, got null"),
        ("var", [0.5, True], "var[1]", "expected number, got boolean"),
        ("pair", [1], "pair", "expected 2 items, got 1"),
        ("pair", [1, "x", 2], "pair", "expected 2 items, got 3"),
        ("pair", ["x", "x"], "pair[0]", "expected integer, got string"),
        ("empty", [1], "empty", "expected 0 items, got 1"),
        ("uniq", ["a", "b", "a"], "uniq[2]", "duplicate item"),
        ("frozen", [1, 1.0], "frozen[1]", "duplicate item"),
        ("scores", [1.0], "scores", "expected object, got array"),
        ("scores", {"ok": 1, "bad": "x"}, "scores.bad", "expected number, got string"),
        ("scores", {"a b": "x"}, 'scores["a b"]', "expected number, got string"),
        ("mapping", {1: True}, "mapping[1]", "object keys must be strings"),
        ("bare", "x", "bare", "expected object, got string"),
    ],
)
def test_container_rejections(name: str, value: Any, field: str, message: str) -> None:
    assert _error(CONTAINERS, {**CONTAINER_ARGS, name: value}) == (field, message)


# --- validation: unions, literals, enums ---------------------------------------------------------

CHOICES = argument_spec(choices)
CHOICE_ARGS: dict[str, Any] = {"maybe": None, "either": 1, "mode": "fast", "mixed": None, "numbers": 1}


def test_unions() -> None:
    assert _one(CHOICES, "maybe", None, CHOICE_ARGS) is None
    assert _one(CHOICES, "maybe", 4.0, CHOICE_ARGS) == 4
    assert _one(CHOICES, "either", "s", CHOICE_ARGS) == "s"
    assert _one(CHOICES, "either", 3, CHOICE_ARGS) == 3
    assert _error(CHOICES, {**CHOICE_ARGS, "maybe": "4"}) == ("maybe", "expected integer or null, got string")
    assert _error(CHOICES, {**CHOICE_ARGS, "either": None}) == (
        "either",
        "expected integer or string, got null",
    )
    assert _error(CHOICES, {**CHOICE_ARGS, "either": [1]}) == (
        "either",
        "expected integer or string, got array",
    )


def test_union_branches_are_tried_in_order() -> None:
    async def fn(a: int | float, b: float | int, c: bool | int, d: str | Any) -> None:
        pass

    out = argument_spec(fn).validate({"a": 2.0, "b": 2, "c": 1, "d": 5})
    assert out == {"a": 2, "b": 2.0, "c": 1, "d": 5}
    assert type(out["a"]) is int and type(out["b"]) is float and type(out["c"]) is int
    assert argument_spec(fn).validate({"a": 2.5, "b": 1, "c": True, "d": "x"})["c"] is True


def test_literals() -> None:
    assert _one(CHOICES, "mode", "slow", CHOICE_ARGS) == "slow"
    assert _one(CHOICES, "mixed", "one", CHOICE_ARGS) == "one"
    converted = _one(CHOICES, "numbers", 2.0, CHOICE_ARGS)
    assert converted == 2 and type(converted) is int
    assert _error(CHOICES, {**CHOICE_ARGS, "mode": "medium"}) == (
        "mode",
        'expected one of "fast", "slow", got "medium"',
    )
    assert _error(CHOICES, {**CHOICE_ARGS, "numbers": True}) == ("numbers", "expected one of 1, 2, got true")
    assert _error(CHOICES, {**CHOICE_ARGS, "mixed": 0}) == ("mixed", 'expected one of 1, "one", null, got 0')
    assert _error(CHOICES, {**CHOICE_ARGS, "mode": ["fast"]}) == (
        "mode",
        'expected one of "fast", "slow", got array',
    )


def test_huge_numbers_are_reported_not_crashed_on() -> None:
    huge = 10**5000  # past Python's int-to-str digit limit
    assert _error(CHOICES, {**CHOICE_ARGS, "numbers": huge}) == (
        "numbers",
        "expected one of 1, 2, got integer",
    )
    assert _one(CHOICES, "maybe", huge, CHOICE_ARGS) == huge
    assert _error(SIMPLE, {"name": "a", huge: 1}) == ("integer", "unexpected argument")


def test_enums_become_members() -> None:
    assert _one(CHOICES, "color", "red", CHOICE_ARGS) is Color.RED
    assert _one(CHOICES, "level", 2, CHOICE_ARGS) is Level.HIGH
    assert _one(CHOICES, "level", 2.0, CHOICE_ARGS) is Level.HIGH
    assert _one(CHOICES, "color", Color.GREEN, CHOICE_ARGS) is Color.GREEN  # in-process caller
    assert _error(CHOICES, {**CHOICE_ARGS, "color": "RED"}) == (
        "color",
        'expected one of "red", "green", got "RED"',
    )
    assert _error(CHOICES, {**CHOICE_ARGS, "level": True}) == ("level", "expected one of 1, 2, got true")
    assert _one(CHOICES, "user", 12, CHOICE_ARGS) == 12


def test_optional_literal_reports_the_bad_value() -> None:
    async def fn(mode: Literal["a", "b"] | None) -> None:
        pass

    spec = argument_spec(fn)
    assert _error(spec, {"mode": "c"}) == ("mode", 'expected one of "a", "b", got "c"')
    assert _error(spec, {"mode": 1}) == ("mode", 'expected one of "a", "b" or null, got integer')


# --- validation: attrs classes and dataclasses ------------------------------------------------------

SHAPES = argument_spec(shapes)
LINE = {"start": {"x": 0}, "end": {"x": 3, "y": 4}}
SIZE = {"width": 2}


def test_objects_become_instances() -> None:
    out = SHAPES.validate(
        {"line": LINE, "size": SIZE, "where": {"x": 1.0, "y": 2}, "private": {"secret": "s"}}
    )
    assert out["line"] == Line(Point(0), Point(3, 4))
    assert out["line"].tags == []  # the attrs factory applied
    assert out["size"] == Size(2.0)
    assert type(out["size"].width) is float
    assert out["where"] == Point(1, 2) and type(out["where"].x) is int
    assert out["private"] == Private("s")
    assert SHAPES.validate({"line": LINE, "size": SIZE, "where": None})["where"] is None


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ({"line": "x", "size": SIZE}, "line", "expected object, got string"),
        ({"line": {"start": {"x": 0}}, "size": SIZE}, "line.end", "required"),
        ({"line": {**LINE, "end": {"y": 1}}, "size": SIZE}, "line.end.x", "required"),
        ({"line": {**LINE, "end": {"x": "1"}}, "size": SIZE}, "line.end.x", "expected integer, got string"),
        ({"line": {**LINE, "end": {"x": 1, "z": 2}}, "size": SIZE}, "line.end.z", "unexpected field"),
        ({"line": {**LINE, "colour": "red"}, "size": SIZE}, "line.colour", "unexpected field"),
        ({"line": {**LINE, "odd key": 1}, "size": SIZE}, 'line["odd key"]', "unexpected field"),
        ({"line": {**LINE, "tags": ["a", 2]}, "size": SIZE}, "line.tags[1]", "expected string, got integer"),
        ({"line": {**LINE, "label": 3}, "size": SIZE}, "line.label", "expected string or null, got integer"),
        (
            {"line": LINE, "size": {"width": 1, "unit": "pt"}},
            "size.unit",
            'expected one of "px", "em", got "pt"',
        ),
        ({"line": LINE, "size": SIZE, "where": {"x": "1"}}, "where.x", "expected integer, got string"),
        ({"line": LINE, "size": SIZE, "where": {}}, "where.x", "required"),
        ({"line": LINE, "size": SIZE, "where": [1, 2]}, "where", "expected object or null, got array"),
        ({"line": LINE, "size": SIZE, "private": {"_secret": "s"}}, "private.secret", "required"),
    ],
)
def test_object_rejections(arguments: dict[str, Any], field: str, message: str) -> None:
    assert _error(SHAPES, arguments) == (field, message)


def test_objects_in_containers() -> None:
    async def fn(points: list[Point], grid: dict[str, tuple[Point, Point]], unique: frozenset[Point]) -> None:
        pass

    spec = _spec(fn)
    out = spec.validate(
        {"points": [{"x": 1}, {"x": 2}], "grid": {"g": [{"x": 0}, {"x": 1}]}, "unique": [{"x": 1}, {"x": 2}]}
    )
    assert out == {
        "points": [Point(1), Point(2)],
        "grid": {"g": (Point(0), Point(1))},
        "unique": frozenset({Point(1), Point(2)}),
    }
    base: dict[str, Any] = {"points": [], "grid": {}, "unique": []}
    assert _error(spec, {**base, "points": [{"x": 1}, {"y": 2}]}) == ("points[1].x", "required")
    assert _error(spec, {**base, "grid": {"g": [{"x": 0}, {"x": None}]}}) == (
        "grid.g[1].x",
        "expected integer, got null",
    )
    # Equal only once the omitted default is filled in: still a duplicate.
    assert _error(spec, {**base, "unique": [{"x": 1}, {"x": 1, "y": 0}]}) == ("unique[1]", "duplicate item")


def test_nested_lists_report_the_full_index_path() -> None:
    async def fn(matrix: list[list[int]]) -> None:
        pass

    spec = argument_spec(fn)
    assert spec.validate({"matrix": [[1], [2, 3.0]]}) == {"matrix": [[1], [2, 3]]}
    assert _error(spec, {"matrix": [[1], [2, 3, "x"]]}) == ("matrix[1][2]", "expected integer, got string")


def test_constructor_refusal_is_an_argument_error() -> None:
    async def fn(p: Positive) -> None:
        pass

    spec = argument_spec(fn)
    assert spec.validate({"p": {"value": 3}}) == {"p": Positive(3)}
    field, message = _error(spec, {"p": {"value": -1}})
    assert field == "p" and message.startswith("invalid Positive: ")


def test_deep_union_error_beats_generic_one() -> None:
    async def fn(shape: Point | Size) -> None:
        pass

    spec = argument_spec(fn)
    assert spec.validate({"shape": {"width": 1}}) == {"shape": Size(1.0)}
    assert spec.validate({"shape": {"x": 1}}) == {"shape": Point(1)}
    # Neither branch matches; the first error from inside an object is more useful than "expected object".
    assert _error(spec, {"shape": {"x": "1"}}) == ("shape.x", "expected integer, got string")
    assert _error(spec, {"shape": 5}) == ("shape", "expected object, got integer")


# --- properties -----------------------------------------------------------------------------------


async def mixed(
    name: str,
    count: int,
    ratio: float,
    flag: bool,
    tags: list[str],
    point: Point,
    mode: Literal["a", "b"],
    color: Color,
    maybe: int | None = None,
    pair: tuple[int, str] = (0, ""),
    scores: dict[str, float] = {},  # noqa: B006
    unique: frozenset[int] = frozenset(),
    size: Size | None = None,
) -> None:
    pass


MIXED = argument_spec(mixed)
MIXED_VALIDATOR = jsonschema.Draft202012Validator(MIXED.schema)

finite_floats = st.floats(allow_nan=False, allow_infinity=False)
small_ints = st.integers(min_value=-(2**63), max_value=2**63)


def _json(scalars: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
        ),
        max_leaves=12,
    )


# Values a client can send (finite), and anything json.loads can produce (NaN, huge ints too).
json_values = _json(st.none() | st.booleans() | small_ints | finite_floats | st.text(max_size=5))
any_json = _json(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5))
# Type-confusable near misses, so that rejections are not all "got object".
_scalar_misses: list[Any] = [None, True, False, 0, 1, 2.0, 1.5, -1, "", "a", "b", "red", "px"]
near_misses = st.sampled_from([*_scalar_misses, [], {}, [1], [1, 1.0], [1, "a", 2], ["a", 1], {"x": 1}])
# What json.loads also lets through but no JSON Schema number can be here.
extremes = st.sampled_from([math.nan, math.inf, -math.inf, 10**400, -(10**400), [1.0, math.nan]])

valid_mixed = st.fixed_dictionaries(
    {
        "name": st.text(),
        "count": small_ints | small_ints.map(float),
        "ratio": finite_floats | small_ints,
        "flag": st.booleans(),
        "tags": st.lists(st.text()),
        "point": st.fixed_dictionaries({"x": small_ints}, optional={"y": small_ints}),
        "mode": st.sampled_from(["a", "b"]),
        "color": st.sampled_from([c.value for c in Color]),
    },
    optional={
        "maybe": st.none() | small_ints,
        "pair": st.tuples(small_ints, st.text()).map(list),
        "scores": st.dictionaries(st.text(), finite_floats),
        "unique": st.lists(small_ints, unique=True),
        "size": st.none()
        | st.fixed_dictionaries(
            {"width": finite_floats},
            optional={"height": finite_floats, "unit": st.sampled_from(["px", "em"])},
        ),
    },
)


@given(valid_mixed)
def test_values_from_matching_strategies_validate(arguments: dict[str, Any]) -> None:
    out = MIXED.validate(arguments)
    assert out.keys() == arguments.keys()
    assert out["count"] == arguments["count"] and type(out["count"]) is int
    assert out["ratio"] == float(arguments["ratio"]) and type(out["ratio"]) is float
    assert out["point"] == Point(**arguments["point"])
    assert out["color"] is Color(arguments["color"])
    if "pair" in out:
        assert out["pair"] == tuple(arguments["pair"])
    if "unique" in out:
        assert out["unique"] == frozenset(arguments["unique"])
    if arguments.get("size") is not None:
        assert out["size"] == Size(**arguments["size"])
    assert MIXED_VALIDATOR.is_valid(arguments)


# Each parameter, fields inside the nested objects, and unknown keys at both levels.
TARGETS = [
    *MIXED.schema["properties"],
    "extra",
    "point.x",
    "point.y",
    "point.extra",
    "size.width",
    "size.unit",
]


def _corrupt(target: str, values: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Valid arguments with the value at ``target`` replaced by one drawn from ``values``."""

    def replace(arguments: dict[str, Any], value: Any) -> dict[str, Any]:
        if "." not in target:
            return {**arguments, target: value}
        outer, inner = target.split(".")
        nested = arguments.get(outer) or {"width": 1.0}
        return {**arguments, outer: {**nested, inner: value}}

    return st.builds(replace, valid_mixed, values)


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=40)
@given(data=st.data())
def test_arbitrary_json_raises_only_argument_error_at_the_bad_field(target: str, data: st.DataObject) -> None:
    arguments = data.draw(_corrupt(target, any_json | near_misses | extremes))
    try:
        MIXED.validate(arguments)
    except ArgumentError as exc:
        assert exc.field == target or exc.field.startswith((f"{target}.", f"{target}["))
    else:
        # Accepted: then a reference validator agrees, and no NaN/inf got through (huge ints may:
        # Python's int is unbounded, though a float parameter refuses them).
        assert MIXED_VALIDATOR.is_valid(arguments)
        assert _all_finite(arguments)


def _all_finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_all_finite(item) for item in value)
    if isinstance(value, dict):
        return all(_all_finite(item) for item in value.values())
    return True


@given(
    any_json
    | st.dictionaries(st.sampled_from(TARGETS) | st.text(max_size=3), any_json | extremes, max_size=8)
)
def test_arbitrary_arguments_raise_only_argument_error(arguments: Any) -> None:
    try:
        MIXED.validate(arguments)
    except ArgumentError as exc:
        assert str(exc)


@pytest.mark.parametrize("target", TARGETS)
@settings(max_examples=40)
@given(data=st.data())
def test_validation_agrees_with_jsonschema(target: str, data: st.DataObject) -> None:
    # For finite JSON (all a client can send), acceptance matches a reference validator.
    arguments = data.draw(_corrupt(target, json_values | near_misses))
    try:
        MIXED.validate(arguments)
        accepted = True
    except ArgumentError:
        accepted = False
    assert accepted == MIXED_VALIDATOR.is_valid(arguments)
