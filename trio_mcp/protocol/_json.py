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
  run of 19 digits, such as ``-2**63 - 1``, is read by the standard library).

>>> dumps({"a": [1, 2.5, "é"]})
b'{"a":[1,2.5,"\\xc3\\xa9"]}'
>>> loads(b'{"id": 123456789012345678901234567890, "low": -9223372036854775809}')
{'id': 123456789012345678901234567890, 'low': -9223372036854775809}
>>> dumps({"x": float("nan")})
Traceback (most recent call last):
  ...
ValueError: Out of range float values are not JSON compliant...
"""

from __future__ import annotations

import json
from typing import Any

import orjson

__all__ = ["dumps", "loads"]

# A run of 19 digits may be an integer orjson reads as a float (below -2**63 or above
# 2**64 - 1). Runs are found by mapping every digit to "0" and everything else to a space,
# then searching for 19 zeros: two C passes, several times faster than a regular expression.
_DIGIT_RUNS = bytes(0x30 if 0x30 <= i <= 0x39 else 0x20 for i in range(256))
_LONG_RUN = b"0" * 19
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
    # (bytes.find, not ``in``: ``in`` first tries the operand as an integer, and the TypeError
    # it formats and drops costs more than the search.)
    if data.find(_NULL) >= 0:  # a NaN or an Infinity would have become null: let the strict encoder judge
        return _stdlib_dumps(obj)
    return data


def loads(data: bytes | str) -> Any:
    """Decode one JSON text (``ValueError`` if it is not strict JSON)."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if raw.translate(_DIGIT_RUNS).find(_LONG_RUN) < 0:
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the standard library decides: its own error, or a text orjson will not read
    return json.loads(data, parse_constant=_refuse_constant)
