"""Strict JSON, fast: orjson where it gives exactly the standard library's answer, the
standard library where it would not.

Guarantees (what :func:`dumps` and :func:`loads` promise whichever path they take):

- ``dumps`` never writes NaN or Infinity: it raises ``ValueError``, as the spec requires
  (orjson would write ``null``; any output containing ``null`` is therefore checked again by
  the standard library, which refuses them). Text is UTF-8; a string with a lone surrogate,
  which UTF-8 cannot hold, is written with ASCII escapes instead. Objects JSON cannot hold
  raise ``TypeError``.
- ``loads`` refuses ``NaN``, ``Infinity`` and ``-Infinity`` (``ValueError``) and keeps
  integers of any size exact (orjson would turn one past 64 bits into a float, so text with a
  run of 20 digits is read by the standard library).

>>> dumps({"a": [1, 2.5, "é"]})
b'{"a":[1,2.5,"\\xc3\\xa9"]}'
>>> loads(b'{"id": 123456789012345678901234567890}')
{'id': 123456789012345678901234567890}
>>> dumps({"x": float("nan")})
Traceback (most recent call last):
  ...
ValueError: Out of range float values are not JSON compliant...
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

__all__ = ["dumps", "loads"]

_LONG_NUMBER = re.compile(rb"\d{20}")
_NULL = b"null"


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _stdlib_dumps(obj: Any) -> bytes:
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: ASCII escapes read back as the same text
        return json.dumps(obj, separators=(",", ":"), allow_nan=False).encode()


def dumps(obj: Any) -> bytes:
    """Compact, strict JSON as UTF-8 bytes (see the module's guarantees)."""
    try:
        data = orjson.dumps(obj)
    except TypeError:  # surrogates, non-string keys, huge integers, unknown objects
        return _stdlib_dumps(obj)
    if _NULL in data:  # a NaN or an Infinity would have become null: let the strict encoder judge
        return _stdlib_dumps(obj)
    return data


def loads(data: bytes | str) -> Any:
    """Decode one JSON text (``ValueError`` if it is not strict JSON)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if _LONG_NUMBER.search(raw) is None:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library decides: its own error, or a text orjson will not read
    return json.loads(data, parse_constant=_refuse_constant)
