"""The one cattrs converter for MCP messages.

- snake_case attributes are written camelCase; ``meta`` is ``_meta``;
- optional fields left at their default are omitted (content ``type`` always written);
- unknown incoming fields are ignored, so newer peers interoperate;
- primitives are checked strictly (``"5"`` is not an int, ``5`` is not a str), and a failure
  raises :class:`~trio_mcp.protocol.errors.McpError` -32602 naming the wire path of the field.
"""

from __future__ import annotations

from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from .errors import INVALID_PARAMS, McpError
from .messages import CONTENT_TYPES, ContentBlock
from .tasks import TaskStatus

__all__ = [
    "converter",
    "structure",
    "unstructure",
    "wire_name",
]

T = TypeVar("T")

converter = cattrs.Converter(omit_if_default=True, detailed_validation=True)


def wire_name(name: str) -> str:
    """``task_id`` -> ``taskId``; ``meta`` -> ``_meta``."""
    if name == "meta":
        return "_meta"
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


def _always_written(a: attrs.Attribute[Any]) -> bool:
    # ``type`` tags a union; a Factory default (``content=[]``) is a required field left empty.
    return a.name == "type" or isinstance(a.default, attrs.Factory)  # type: ignore[arg-type]


def _overrides(cls: type[Any]) -> dict[str, Any]:
    return {
        a.name: override(rename=wire_name(a.name), omit_if_default=False if _always_written(a) else None)
        for a in attrs.fields(cls)
    }


def _object_structure_fn(cls: type[Any]) -> Any:
    inner = make_dict_structure_fn(cls, converter, **_overrides(cls))

    def structure_object(value: Any, type_: Any) -> Any:
        if not isinstance(value, dict):  # cattrs alone would take any container
            raise TypeError(f"expected object, got {_json_type(value)}")
        return inner(value, type_)

    return structure_object


converter.register_unstructure_hook_factory(
    attrs.has,
    lambda cls: make_dict_unstructure_fn(cls, converter, _cattrs_omit_if_default=True, **_overrides(cls)),
)
converter.register_structure_hook_factory(attrs.has, _object_structure_fn)


def _strict(kind: type[Any], label: str) -> Any:
    def hook(value: Any, _: Any) -> Any:
        if type(value) is kind:
            return value
        if kind is float and type(value) is int:
            return float(value)
        raise TypeError(f"expected {label}, got {_json_type(value)}")

    return hook


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "object",
    }.get(type(value), type(value).__name__)


converter.register_structure_hook(str, _strict(str, "string"))
converter.register_structure_hook(int, _strict(int, "integer"))
converter.register_structure_hook(float, _strict(float, "number"))
converter.register_structure_hook(bool, _strict(bool, "boolean"))


def _id_like(value: Any, _: Any) -> int | str:
    if type(value) is int or isinstance(value, str):
        return value
    raise TypeError(f"expected string or integer, got {_json_type(value)}")


converter.register_structure_hook(int | str, _id_like)
converter.register_structure_hook(int | str | None, lambda v, t: None if v is None else _id_like(v, t))


def _object(value: Any, _: Any) -> dict[str, Any]:
    # Open-ended JSON objects pass through uncopied: they are already JSON.
    if isinstance(value, dict):
        return value
    raise TypeError(f"expected object, got {_json_type(value)}")


converter.register_structure_hook_func(lambda t: t == dict[str, Any], _object)


def _is_list_type(t: Any) -> bool:
    return getattr(t, "__origin__", None) is list


def _list_factory(t: Any) -> Any:
    item_type = t.__args__[0]
    item_hook = converter.get_structure_hook(item_type)

    def hook(value: Any, _: Any) -> list[Any]:
        if not isinstance(value, list):
            raise TypeError(f"expected array, got {_json_type(value)}")
        out = []
        for index, item in enumerate(value):
            try:
                out.append(item_hook(item, item_type))
            except Exception as exc:
                exc.add_note(cattrs.IterableValidationNote(f"index {index}", index, item_type))
                raise ExceptionGroup("invalid array item", [exc]) from None
        return out

    return hook


converter.register_structure_hook_factory(_is_list_type, _list_factory)
converter.register_unstructure_hook(TaskStatus, lambda status: status.value)


def _status(value: Any, _: Any) -> TaskStatus:
    # Registered explicitly: the strict ``str`` hook would otherwise claim this StrEnum.
    if isinstance(value, str):
        try:
            return TaskStatus(value)
        except ValueError:
            pass
    raise ValueError(f"expected a task status, got {value!r}")


converter.register_structure_hook(TaskStatus, _status)


def _structure_content(value: Any, _: Any) -> Any:
    if not isinstance(value, dict):
        raise TypeError(f"expected object, got {_json_type(value)}")
    cls = CONTENT_TYPES.get(value.get("type"))  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown content type {value.get('type')!r}")
    return converter.structure(value, cls)


converter.register_structure_hook(ContentBlock, _structure_content)
converter.register_unstructure_hook(ContentBlock, lambda block: converter.unstructure(block))


def _path_of(exc: BaseException) -> tuple[str, str]:
    """The wire path and message of the first leaf error in a cattrs validation group."""
    path = ""
    while isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0]
        note = next(
            (n for n in getattr(inner, "__notes__", []) if isinstance(n, cattrs.AttributeValidationNote)),
            None,
        )
        if note is not None:
            path = f"{path}.{wire_name(note.name)}" if path else wire_name(note.name)
        else:
            idx = next(
                (n for n in getattr(inner, "__notes__", []) if isinstance(n, cattrs.IterableValidationNote)),
                None,
            )
            if idx is not None:
                path = f"{path}[{idx.index}]"
        exc = inner
    if isinstance(exc, KeyError):
        return path, "required field missing"
    return path, str(exc)


def structure(data: Any, cls: type[T]) -> T:
    """Structure wire data into ``cls``; any mismatch is an McpError -32602 naming the field.

    >>> from trio_mcp.protocol.messages import TaskIdParams
    >>> structure({"taskId": "abc"}, TaskIdParams).task_id
    'abc'
    """
    if data is None:
        data = {}
    try:
        return converter.structure(data, cls)
    except Exception as exc:
        path, message = _path_of(exc)
        where = f" at '{path}'" if path else ""
        raise McpError(INVALID_PARAMS, f"Invalid params{where}: {message}") from None


def unstructure(obj: Any) -> Any:
    """Turn a message object into JSON-ready data (the inverse of :func:`structure`)."""
    return converter.unstructure(obj)
