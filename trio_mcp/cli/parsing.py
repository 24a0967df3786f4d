"""Pure helpers of the command line: durations, SERVER specs, and tool arguments.

Every function here raises :class:`~trio_mcp.cli.errors.CliError` (exit code 2) with a
message meant for the user.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import json
import math
import re
import sys
import traceback
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

from ..protocol.messages import Tool
from ..server import Server
from .errors import CliError, ExitCode, usage_error

__all__ = [
    "coerce_value",
    "format_duration_ms",
    "load_server",
    "parse_duration_ms",
    "parse_tool_arguments",
    "suggest",
    "type_label",
]

# ------------------------------------------------------------------------------- durations

_UNITS_MS = {"ms": 1.0, "s": 1000.0, "m": 60_000.0, "h": 3_600_000.0, "d": 86_400_000.0}
_DURATION = re.compile(r"(?:\d+(?:\.\d+)?|\.\d+)(?:ms|s|m|h|d)")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)(ms|s|m|h|d)")
DURATION_HELP = "a number with a unit: 500ms, 30s, 5m, 1h, 1d, or combined like 1h30m"


def parse_duration_ms(text: str) -> int:
    """``"30s"`` → 30000. Units ms, s, m, h, d; parts may be combined (``1h30m``) and
    fractional (``1.5s``). The result must be at least 1 ms.

    >>> parse_duration_ms("500ms"), parse_duration_ms("1.5s"), parse_duration_ms("1h30m")
    (500, 1500, 5400000)
    """
    cleaned = text.strip().lower().replace(" ", "")
    if not cleaned or not re.fullmatch(f"(?:{_DURATION.pattern})+", cleaned):
        hint = None
        if re.fullmatch(r"\d+(?:\.\d+)?", cleaned):
            hint = f"add a unit, e.g. {cleaned}s (seconds) or {cleaned}ms (milliseconds)"
        raise usage_error(f"invalid duration {text!r}: expected {DURATION_HELP}", hint=hint)
    total = sum(float(number) * _UNITS_MS[unit] for number, unit in _DURATION_PART.findall(cleaned))
    if not math.isfinite(total) or total > 2**53:
        raise usage_error(f"duration {text!r} is too long")
    ms = round(total)
    if ms < 1:
        raise usage_error(f"duration {text!r} is too short: it must be at least 1ms")
    return ms


def format_duration_ms(ms: int | float | None) -> str:
    """3600000 → ``"1h"``; 1500 → ``"1.5s"``; 90000 → ``"1m30s"``; None → ``"-"``."""
    if ms is None:
        return "-"
    if ms < 1000:
        return f"{ms:g}ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:g}s"
    parts: list[str] = []
    whole = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, whole = divmod(whole, size)
        if count:
            parts.append(f"{count}{unit}")
    return "".join(parts)


# ------------------------------------------------------------------------------ SERVER spec

SPEC_HELP = "MODULE:OBJECT (e.g. mypkg.server:server) or FILE.py:OBJECT; OBJECT defaults to 'server'"


def _split_spec(spec: str) -> tuple[str, str]:
    spec = spec.strip()
    if not spec:
        raise usage_error(f"empty SERVER spec: expected {SPEC_HELP}")
    where, colon, attr = spec.rpartition(":")
    if not colon:
        where, attr = spec, "server"
    if not where or not attr:
        raise usage_error(f"invalid SERVER spec {spec!r}: expected {SPEC_HELP}")
    if not all(part.isidentifier() for part in attr.split(".")):
        raise usage_error(f"invalid object name {attr!r} in {spec!r}: expected a Python name like 'server'")
    return where, attr


def _looks_like_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where or "\\" in where


def _import_failure(what: str, exc: BaseException) -> CliError:
    details = "".join(traceback.format_exception(exc)).rstrip()
    return CliError(
        ExitCode.USAGE,
        f"importing {what} failed: {type(exc).__name__}: {exc}",
        hint="the module raised an exception while being imported; see the traceback above",
        details=details,
    )


def _load_file(path_text: str) -> ModuleType:
    path = Path(path_text).expanduser()
    if not path.is_file():
        hint = "give a path to a .py file, or a module name such as mypkg.server"
        if path.exists():
            raise usage_error(f"{path_text!r} is not a file", hint=hint)
        raise usage_error(f"no such file: {path_text!r}", hint=hint)
    path = path.resolve()
    name = f"_trio_mcp_serve_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise usage_error(f"cannot import {path_text!r} as Python source")
    module = importlib.util.module_from_spec(spec)
    # Like `python FILE`: the file's directory comes first on sys.path (for its own imports),
    # and the module is registered so dataclasses, attrs and type hints can find it.
    sys.path.insert(0, str(path.parent))
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise _import_failure(path_text, exc) from exc
    return module


def _load_module(name: str) -> ModuleType:
    if not all(part.isidentifier() for part in name.split(".")):
        raise usage_error(f"{name!r} is neither a module name nor a .py file", hint=f"expected {SPEC_HELP}")
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))  # like `python -m`: modules in the current directory
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise usage_error(
                f"no module named {exc.name!r}",
                hint="check the spelling, the current directory, and that the package is installed; "
                "a file is given as path/to/file.py:server",
            ) from exc
        raise _import_failure(name, exc) from exc
    except Exception as exc:
        raise _import_failure(name, exc) from exc


def _servers_in(module: ModuleType) -> list[str]:
    return sorted(name for name, value in vars(module).items() if isinstance(value, Server))


def load_server(spec: str) -> Server:
    """Import ``MODULE:OBJECT`` or ``FILE.py:OBJECT`` (OBJECT may be dotted; default ``server``)
    and return the :class:`~trio_mcp.Server` it names."""
    where, attr = _split_spec(spec)
    module = _load_file(where) if _looks_like_file(where) else _load_module(where)
    value: Any = module
    for part in attr.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            found = _servers_in(module)
            if found:
                hint = "Server objects in it: " + ", ".join(f"{where}:{name}" for name in found)
            else:
                hint = "it defines no trio_mcp.Server at module level"
            raise usage_error(f"{where!r} has no attribute {attr!r}", hint=hint) from None
    if not isinstance(value, Server):
        found = _servers_in(module)
        listing = (
            ("Server objects in it: " + ", ".join(f"{where}:{name}" for name in found)) if found else None
        )
        raise usage_error(f"{where}:{attr} is a {type(value).__name__}, not a trio_mcp.Server", hint=listing)
    return value


# ---------------------------------------------------------------------------- tool arguments


def suggest(word: str, choices: Iterable[str]) -> str | None:
    """``"did you mean 'echo'?"`` for a near miss, else None."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"did you mean {close[0]!r}?" if close else None


def type_label(schema: Any) -> str:
    """A short human name for a JSON Schema: ``number``, ``string|null``, ``array[integer]``,
    ``"a"|"b"`` for enums."""
    if not isinstance(schema, Mapping):
        return "any"
    if "enum" in schema:
        return "|".join(json.dumps(v) for v in schema["enum"])
    if "const" in schema:
        return json.dumps(schema["const"])
    for key in ("anyOf", "oneOf"):
        if key in schema and isinstance(schema[key], list):
            return "|".join(type_label(branch) for branch in schema[key])
    kind = schema.get("type")
    if isinstance(kind, list):
        return "|".join(str(k) for k in kind)
    if kind == "array":
        items = schema.get("items")
        return f"array[{type_label(items)}]" if isinstance(items, Mapping) else "array"
    if isinstance(kind, str):
        return kind
    return "any"


_EXAMPLES = {
    "number": "1.5",
    "integer": "3",
    "boolean": "true",
    "string": "text",
    "null": "null",
    "array": "'[1, 2]'",
    "object": "'{\"key\": 1}'",
}


def _example(schema: Any) -> str:
    """A KEY=VALUE value that fits ``schema``, for hints."""
    if not isinstance(schema, Mapping):
        return "value"
    if schema.get("enum"):
        first = schema["enum"][0]
        return first if isinstance(first, str) else json.dumps(first)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _example(schema[key][0])
    kind = schema.get("type")
    if isinstance(kind, list) and kind:
        kind = kind[0]
    return _EXAMPLES.get(kind, "value") if isinstance(kind, str) else "value"


class _NoMatch(Exception):
    def __init__(self, expected: str) -> None:
        super().__init__(expected)
        self.expected = expected


_TRUE = {"true", "yes", "on", "1", "y"}
_FALSE = {"false", "no", "off", "0", "n"}
_MISSING = object()


def _parse_json(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return _MISSING


def _coerce(raw: str, parsed: Any, schema: Any) -> Any:
    """Interpret the text ``raw`` (``parsed``: its JSON value, or _MISSING) per ``schema``."""
    if not isinstance(schema, Mapping) or not schema:
        return raw if parsed is _MISSING else parsed
    if "enum" in schema or "const" in schema:
        choices = list(schema["enum"]) if "enum" in schema else [schema["const"]]
        for candidate in (parsed, raw):
            for choice in choices:
                if candidate is not _MISSING and type(candidate) is type(choice) and candidate == choice:
                    return choice
        raise _NoMatch("one of " + ", ".join(json.dumps(c) for c in choices))
    for key in ("anyOf", "oneOf"):
        branches = schema.get(key)
        if isinstance(branches, list):
            # Prefer an exact JSON reading over a string reading: '3' for number|string is 3.
            ordered = sorted(branches, key=lambda b: isinstance(b, Mapping) and b.get("type") == "string")
            for branch in ordered:
                try:
                    return _coerce(raw, parsed, branch)
                except _NoMatch:
                    continue
            raise _NoMatch(type_label(schema))
    kind = schema.get("type")
    if isinstance(kind, list):
        return _coerce(raw, parsed, {"anyOf": [{**schema, "type": k} for k in kind]})
    if kind == "string":
        return parsed if isinstance(parsed, str) else raw
    if kind in ("number", "integer"):
        value = parsed
        if isinstance(value, str):
            value = _parse_json(value.strip())
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise _NoMatch("an integer" if kind == "integer" else "a number")
        if kind == "integer":
            if isinstance(value, float):
                if not value.is_integer():
                    raise _NoMatch("an integer")
                value = int(value)
        return value
    if kind == "boolean":
        if isinstance(parsed, bool):
            return parsed
        text = (parsed if isinstance(parsed, str) else raw).strip().lower()
        if text in _TRUE:
            return True
        if text in _FALSE:
            return False
        raise _NoMatch("a boolean (true or false)")
    if kind == "null":
        if parsed is None:
            return None
        raise _NoMatch("null")
    if kind == "array":
        if isinstance(parsed, list):
            return parsed
        raise _NoMatch("a JSON array, e.g. '[1, 2]'")
    if kind == "object":
        if isinstance(parsed, dict):
            return parsed
        raise _NoMatch('a JSON object, e.g. \'{"key": "value"}\'')
    return raw if parsed is _MISSING else parsed


def coerce_value(raw: str, schema: Any) -> Any:
    """The value of ``key=raw`` for a parameter with JSON Schema ``schema``.

    ``raw`` is read as JSON when possible, else taken as a string, then fitted to the schema:
    a string parameter keeps the text as typed (``text=123`` is ``"123"``), ``"3"`` for a
    number is 3, ``yes``/``no`` work for booleans. Raises ValueError naming what was expected.

    >>> coerce_value("3", {"type": "number"}), coerce_value("123", {"type": "string"})
    (3, '123')
    """
    try:
        return _coerce(raw, _parse_json(raw), schema)
    except _NoMatch as exc:
        raise ValueError(exc.expected) from None


_JSON_TYPES: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "integer": lambda v: (
        (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, float) and v.is_integer())
    ),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
}


def json_type_matches(value: Any, schema: Any) -> bool:
    """Whether a JSON value has the type ``schema`` asks for (top-level ``type``, ``anyOf``,
    ``oneOf``, ``enum`` and ``const`` only; anything more is left to the server)."""
    if not isinstance(schema, Mapping):
        return True
    if "enum" in schema or "const" in schema:
        choices = list(schema["enum"]) if "enum" in schema else [schema["const"]]
        return any(type(value) is type(choice) and value == choice for choice in choices)
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list):
            return any(json_type_matches(value, branch) for branch in schema[key])
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    checks = [_JSON_TYPES[k] for k in kinds if isinstance(k, str) and k in _JSON_TYPES]
    return not checks or any(check(value) for check in checks)


def _load_json_arguments(text: str) -> dict[str, Any]:
    source = "--json"
    if text.startswith("@"):
        path = Path(text[1:]).expanduser()
        source = f"--json {text}"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise usage_error(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise usage_error(
            f"{source} is not valid JSON: {exc}", hint='quote it for the shell: --json \'{"text": "hi"}\''
        ) from None
    if not isinstance(value, dict):
        raise usage_error(f"{source} must be a JSON object, not {type(value).__name__}")
    return value


def parse_tool_arguments(tool: Tool, pairs: Sequence[str], json_args: str | None = None) -> dict[str, Any]:
    """Build a ``tools/call`` arguments object from ``--json`` and ``key=value`` pairs
    (pairs override ``--json``), checked against the tool's ``inputSchema``: unknown names,
    missing required parameters and values that cannot be made to fit are usage errors."""
    schema = tool.input_schema if isinstance(tool.input_schema, Mapping) else {}
    properties: Mapping[str, Any] = schema.get("properties") or {}
    closed = schema.get("additionalProperties") is False
    required: list[str] = [r for r in schema.get("required") or [] if isinstance(r, str)]
    arguments: dict[str, Any] = _load_json_arguments(json_args) if json_args is not None else {}

    def known(name: str) -> None:
        if closed and name not in properties:
            hint = suggest(name, properties)
            params = ", ".join(properties) or "none"
            raise usage_error(
                f"tool {tool.name!r} has no parameter {name!r}",
                hint=f"{hint + ' ' if hint else ''}its parameters: {params}",
            )

    for name, value in arguments.items():
        known(name)
        if not json_type_matches(value, properties.get(name)):
            raise usage_error(
                f"argument {name!r} of tool {tool.name!r} must be {type_label(properties.get(name))}, "
                f"got {json.dumps(value)} in --json"
            )
    for pair in pairs:
        name, eq, raw = pair.partition("=")
        name = name.strip()
        if not eq or not name:
            raise usage_error(
                f"expected key=value, got {pair!r}",
                hint=f"e.g. trio-mcp call TARGET {tool.name} "
                + " ".join(f"{p}=..." for p in (required or list(properties)[:2])),
            )
        known(name)
        prop = properties.get(name)
        try:
            arguments[name] = coerce_value(raw, prop)
        except ValueError as exc:
            raise usage_error(
                f"argument {name!r} of tool {tool.name!r} expects {exc}, got {raw!r}",
                hint=f"{name} is {type_label(prop)}, e.g. {name}={_example(prop)}",
            ) from None
    missing = [name for name in required if name not in arguments]
    if missing:
        shown = ", ".join(f"{name} ({type_label(properties.get(name))})" for name in missing)
        raise usage_error(
            f"tool {tool.name!r} needs {'argument' if len(missing) == 1 else 'arguments'} {shown}",
            hint="pass " + " ".join(f"{name}=..." for name in missing),
        )
    return arguments
