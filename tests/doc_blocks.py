"""Running a Markdown guide's ```python blocks as a test module (shared by the doc tests)."""

from __future__ import annotations

import re

OPEN = re.compile(r"^```python\s*$")
CLOSE = re.compile(r"^```\s*$")


def python_blocks(text: str) -> list[tuple[int, list[str]]]:
    """``(first line number, lines)`` of each ```python block, in order."""
    blocks: list[tuple[int, list[str]]] = []
    current: list[str] | None = None
    start = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if current is None:
            if OPEN.match(line):
                current, start = [], number + 1
        elif CLOSE.match(line):
            blocks.append((start, current))
            current = None
        else:
            current.append(line)
    assert current is None, "unclosed ```python block"
    return blocks


def aligned_source(text: str) -> str:
    """The blocks' code, each line at its line number in the document (so tracebacks point
    at the right line of the guide)."""
    lines = [""] * len(text.splitlines())
    for start, block in python_blocks(text):
        lines[start - 1 : start - 1 + len(block)] = block
    return "\n".join(lines) + "\n"
