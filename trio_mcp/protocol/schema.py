"""Tool ``inputSchema`` from type hints, and strict validation of ``tools/call`` arguments.

:func:`argument_spec` reads a tool function's signature once and compiles it into an
:class:`ArgumentSpec`: a JSON Schema (draft 2020-12) object for ``tools/list``, plus a tree of
small checker closures that :meth:`ArgumentSpec.validate` runs on every call without looking at
type hints again.

Guarantees:

* Unsupported annotations, missing annotations, recursive classes, and ``*args``/``**kwargs``
  or positional-only parameters that are not skipped are a :class:`TypeError` when the spec is
  built, never a surprise at call time.
* For JSON-decoded input, ``validate`` accepts exactly what the schema describes, except that
  it also rejects non-finite floats (JSON cannot carry them), numbers too large for a
  ``float`` parameter, set items that are equal only after conversion (e.g. two objects that
  differ in an omitted default), and whatever an attrs/dataclass constructor refuses with
  ``TypeError``/``ValueError``. It raises nothing but :class:`ArgumentError`, which names the
  first offending field by path (``point.x``, ``items[2]``, ``scores["a b"]``). Parameters are
  checked in declaration order, then unexpected keys; object fields likewise. In-process
  callers may also pass tuples for arrays, any ``Mapping`` for objects, and enum members.
* Accepted values come back as the annotations promise: attrs classes and dataclasses become
  instances, enums become members, tuples/sets/frozensets become those types, an ``int`` sent
  to a ``float`` becomes a float, and an integral float (``2.0``) sent to an ``int`` becomes an
  int, because JSON does not tell them apart and JSON Schema's ``integer`` accepts ``2.0``
  too. Booleans are never numbers. ``1.5`` is not an integer.
* Omitted optional parameters are left out of the result so Python's own defaults apply.
  A schema ``"default"`` is advertised only when the Python default is JSON-representable
  and valid against its own schema.

Sans-IO: no trio, no I/O.
"""

from __future__ import annotations

import collections.abc as cabc
import copy
import dataclasses
import enum
import functools
import inspect
import json
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping
from typing import Any

import attrs

__all__ = ["ArgumentError", "ArgumentSpec", "argument_spec"]

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


_ANY = _Node({}, _check_any, "any value", hashable=False)
_SCALARS: dict[Any, _Node] = {
    str: _Node({"type": "string"}, _check_str, "string", hashable=True),
    int: _Node({"type": "integer"}, _check_int, "integer", hashable=True),
    float: _Node({"type": "number"}, _check_float, "number", hashable=True),
    bool: _Node({"type": "boolean"}, _check_bool, "boolean", hashable=True),
    None: _Node({"type": "null"}, _check_none, "null", hashable=True),
    type(None): _Node({"type": "null"}, _check_none, "null", hashable=True),
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
        if attrs.has(tp) or dataclasses.is_dataclass(tp):
            if tp in stack:
                raise TypeError(f"recursive type {tp.__qualname__} is not supported")
            return _object_node(tp, (*stack, tp))
    raise TypeError(f"unsupported type annotation {_name(tp)}")


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


def _object_node(cls: type, stack: tuple[type, ...]) -> _Node:
    properties: dict[str, Any] = {}
    required: list[str] = []
    fields: list[tuple[str, str, _Checker, bool]] = []
    hashable = getattr(cls, "__hash__", None) is not None
    for info in _class_fields(cls):
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
    cls_name = cls.__name__

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
        try:
            return cls(**kwargs)
        except (TypeError, ValueError) as exc:  # attrs validators / __post_init__ checks
            raise _Invalid(f"invalid {cls_name}: {exc}") from None

    schema = {
        "type": "object",
        "title": cls_name,
        "properties": properties,
        "required": required,
        "additionalProperties": False,
    }
    return _Node(schema, check_object, "object", hashable)


# --- public API -------------------------------------------------------------------------------

_NO_ARGUMENTS: Mapping[str, Any] = types.MappingProxyType({})


@attrs.frozen
class ArgumentSpec:
    """A tool's compiled ``inputSchema`` and the matching argument validator."""

    schema: dict[str, Any]
    """The ``inputSchema``: ``{"type": "object", "properties": ..., "required": [...],
    "additionalProperties": False}``."""
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


def _function_hints(fn: Callable[..., Any]) -> dict[str, Any]:
    target: Any = fn
    while isinstance(target, functools.partial):
        target = target.func
    if not (inspect.isroutine(target) or isinstance(target, type)):
        target = type(target).__call__  # a callable object
    try:
        return typing.get_type_hints(target, include_extras=True)
    except Exception as exc:  # NameError, bad string annotations, ...
        raise TypeError(f"cannot resolve the type hints of {fn!r}: {exc}") from exc


def argument_spec(fn: Callable[..., Any], *, skip: Collection[str] = ()) -> ArgumentSpec:
    """Compile ``fn``'s signature and type hints into an :class:`ArgumentSpec`.

    Parameters named in ``skip`` (e.g. a context parameter) are left out entirely. Parameters
    with defaults are optional; their schema carries ``"default"`` when the default is
    JSON-representable. ``Annotated[T, "text"]`` sets a ``"description"``. Raises
    :class:`TypeError` for anything that cannot be expressed as JSON arguments.
    """
    where = getattr(fn, "__qualname__", None) or repr(fn)
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"cannot read the signature of {where}: {exc}") from exc
    hints = _function_hints(fn)

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
        is_required = param.default is param.empty
        if is_required:
            required.append(name)
            properties[name] = node.schema
        else:
            properties[name] = _with_default(node, param.default)
        params.append((name, node.check, is_required))

    schema = {"type": "object", "properties": properties, "required": required, "additionalProperties": False}
    # Nodes share schema dicts (the scalar ones are module-wide); hand out a private copy.
    return ArgumentSpec(copy.deepcopy(schema), tuple(params))
