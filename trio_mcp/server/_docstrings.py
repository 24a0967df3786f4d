"""Parameter descriptions read from a docstring, in Google, NumPy or Sphinx style.

Only the parameter sections are read:

* Google: ``Args:`` (also ``Arguments:``, ``Parameters:``, ``Params:``, ``Keyword Args:``,
  ``Keyword Arguments:``, ``Kwargs:``, ``Other Parameters:``), entries ``name (type): text``
  or ``name: text``, indented under the header;
* NumPy: ``Parameters`` (also ``Other Parameters``, ``Keyword Arguments``) underlined with
  dashes, entries ``name : type`` (or ``a, b : type``) with the text indented below;
* Sphinx: ``:param name: text`` (also ``:param type name:``, ``:parameter``, ``:arg``,
  ``:argument``, ``:key``, ``:keyword``).

A description may run over several lines; its lines are joined with spaces, blank lines
separate paragraphs (kept as ``"\\n\\n"``), and list items (``- a``, ``* a``, ``1. a``) start
lines of their own. Leading stars are dropped from names (``*args`` documents ``args``). When
several sections document a parameter, the first one read wins (Sphinx, then Google, then NumPy).

Sans-IO, no third-party parser.
"""

from __future__ import annotations

import inspect
import re
import textwrap
from collections.abc import Iterator

import attrs

__all__ = ["parameter_descriptions", "without_parameter_sections"]


@attrs.frozen
class _Section:
    start: int
    """Index of the section's first line."""
    stop: int
    """One past its last non-blank line."""
    entries: tuple[tuple[str, str], ...]
    """``(parameter name, description)`` in the order written."""


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _lines(doc: str) -> list[str]:
    return inspect.cleandoc(doc).expandtabs().splitlines()


_LIST_ITEM = re.compile(r"(?:[-*+]|\d+[.)])\s", re.ASCII)


def _text(first: str, rest: list[str]) -> str:
    """One description from the text after the name and the lines that continue it."""
    lines = [first.strip(), *textwrap.dedent("\n".join(rest)).splitlines()]
    paragraphs: list[list[str]] = [[]]
    for raw in lines:
        line = raw.strip()
        current = paragraphs[-1]
        if not line:
            if current:
                paragraphs.append([])
        elif not current or _LIST_ITEM.match(line):
            current.append(line)
        else:
            current[-1] += " " + line
    return "\n\n".join("\n".join(paragraph) for paragraph in paragraphs if paragraph)


def _last_text_line(lines: list[str], start: int, stop: int) -> int:
    """One past the last non-blank line of ``lines[start:stop]`` (``start`` if there is none)."""
    while stop > start and not lines[stop - 1].strip():
        stop -= 1
    return stop


def _name(text: str) -> str | None:
    name = text.strip().lstrip("*")
    return name if name.isidentifier() else None


# --- Sphinx -------------------------------------------------------------------------------------

_SPHINX_PARAM = re.compile(r"( *):(?:param|parameter|arg|argument|key|keyword)\s+([^:]+?)\s*:(.*)")
_SPHINX_TYPE = re.compile(r"( *):type\s+[^:]+?\s*:.*")


def _sphinx_field_end(lines: list[str], index: int, indent: int) -> int:
    """One past the last line of the field list item starting at ``index``."""
    end = index + 1
    scan = end
    while scan < len(lines):
        line = lines[scan]
        if line.strip():
            if _indent(line) <= indent:
                break
            end = scan + 1
        scan += 1
    return end


def _sphinx(lines: list[str]) -> Iterator[_Section]:
    index = 0
    while index < len(lines):
        param = _SPHINX_PARAM.fullmatch(lines[index])
        kind = param or _SPHINX_TYPE.fullmatch(lines[index])
        if kind is None:
            index += 1
            continue
        end = _sphinx_field_end(lines, index, len(kind.group(1)))
        entries: tuple[tuple[str, str], ...] = ()
        if param is not None:
            name = _name(param.group(2).split()[-1])
            if name is not None:
                entries = ((name, _text(param.group(3), lines[index + 1 : end])),)
        yield _Section(index, end, entries)
        index = end


# --- Google ---------------------------------------------------------------------------------------

_GOOGLE_HEADER = re.compile(
    r"( *)(?:args|arguments|parameters|params|keyword args|keyword arguments|kwargs|other parameters)"
    r" *:",
    re.IGNORECASE,
)
_GOOGLE_NAME = re.compile(r"\*{0,2}\w+")
_GOOGLE_OTHER_SECTION = re.compile(
    r"(?:returns?|yields?|raises?|warns|examples?|notes?|warnings?|see also|todo|attributes|methods"
    r"|references) *:",
    re.IGNORECASE,
)


def _google_entry(line: str) -> tuple[str, str] | None:
    """``name (type): text`` or ``name: text`` as ``(name, text)``; the type may hold parentheses."""
    match = _GOOGLE_NAME.match(line)
    if match is None:
        return None
    name = _name(match.group())
    pos = match.end()
    while pos < len(line) and line[pos] == " ":
        pos += 1
    if pos < len(line) and line[pos] == "(":
        depth = 0
        for end in range(pos, len(line)):
            depth += {"(": 1, ")": -1}.get(line[end], 0)
            if depth == 0:
                break
        else:
            return None
        pos = end + 1
        while pos < len(line) and line[pos] == " ":
            pos += 1
    if name is None or pos >= len(line) or line[pos] != ":":
        return None
    return name, line[pos + 1 :]


def _google(lines: list[str]) -> Iterator[_Section]:
    index = 0
    while index < len(lines):
        header = _GOOGLE_HEADER.fullmatch(lines[index].rstrip())
        if header is None:
            index += 1
            continue
        indent = len(header.group(1))
        stop = index + 1
        if index == 0:
            # A docstring that opens with its header: cleandoc() dedented the entries under it to
            # the header's own column, so the section runs to the next section instead.
            while stop < len(lines) and not _GOOGLE_OTHER_SECTION.fullmatch(lines[stop].rstrip()):
                stop += 1
        while stop < len(lines) and (not lines[stop].strip() or _indent(lines[stop]) > indent):
            stop += 1
        stop = _last_text_line(lines, index + 1, stop)
        body = lines[index + 1 : stop]
        entries: list[tuple[str, str, list[str]]] = []
        if body:
            entry_indent = _indent(body[0])
            current: list[str] | None = None
            for line in body:
                if line.strip() and _indent(line) <= entry_indent:
                    entry = _google_entry(line.strip())
                    current = None
                    if entry is not None:
                        current = []
                        entries.append((*entry, current))
                elif current is not None:
                    current.append(line)
        yield _Section(index, stop, tuple((name, _text(first, rest)) for name, first, rest in entries))
        index = stop


# --- NumPy ----------------------------------------------------------------------------------------

_NUMPY_TITLES = frozenset({"parameters", "other parameters", "keyword arguments", "keyword args"})
_UNDERLINE = re.compile(r" *-{3,} *")


def _numpy_header_at(lines: list[str], index: int) -> bool:
    """Whether ``lines[index]`` is a NumPy section title (any section: the next one ends ours)."""
    return (
        index + 1 < len(lines)
        and bool(lines[index].strip())
        and _UNDERLINE.fullmatch(lines[index + 1]) is not None
        and _indent(lines[index + 1]) == _indent(lines[index])
    )


def _numpy(lines: list[str]) -> Iterator[_Section]:
    index = 0
    while index < len(lines):
        if not (_numpy_header_at(lines, index) and lines[index].strip().lower() in _NUMPY_TITLES):
            index += 1
            continue
        indent = _indent(lines[index])
        stop = index + 2
        while stop < len(lines) and not _numpy_header_at(lines, stop):
            line = lines[stop]
            if line.strip() and _indent(line) < indent:
                break
            stop += 1
        stop = _last_text_line(lines, index + 2, stop)
        entries: list[tuple[list[str], list[str]]] = []
        current: list[str] | None = None
        for line in lines[index + 2 : stop]:
            if line.strip() and _indent(line) == indent:
                names = [_name(part) for part in line.partition(":")[0].split(",")]
                current = None
                if names and all(names):
                    current = []
                    entries.append(([name for name in names if name is not None], current))
            elif current is not None:
                current.append(line)
        yield _Section(
            index,
            stop,
            tuple((name, _text("", rest)) for names, rest in entries for name in names),
        )
        index = stop


# --- public ---------------------------------------------------------------------------------------

_PARSERS = (_sphinx, _google, _numpy)


def _sections(lines: list[str]) -> Iterator[_Section]:
    for parse in _PARSERS:
        yield from parse(lines)


def parameter_descriptions(doc: str | None) -> dict[str, str]:
    """``{parameter name: description}`` from ``doc``'s parameter sections (empty ones left out).

    >>> parameter_descriptions('''Greet someone.
    ...
    ... Args:
    ...     name (str): Who to greet,
    ...         by first name.
    ...     loud: Shout.
    ... ''')
    {'name': 'Who to greet, by first name.', 'loud': 'Shout.'}
    """
    if not doc:
        return {}
    found: dict[str, str] = {}
    for section in _sections(_lines(doc)):
        for name, text in section.entries:
            if text:
                found.setdefault(name, text)
    return found


def without_parameter_sections(doc: str) -> str:
    """``doc`` (cleaned as by :func:`inspect.cleandoc`) without its parameter sections and
    ``:param``/``:type`` fields, for a description that leaves the parameters to the schema.

    >>> without_parameter_sections('''Greet someone.
    ...
    ... Args:
    ...     name: Who to greet.
    ...
    ... Returns:
    ...     The greeting.
    ... ''')
    'Greet someone.\\n\\nReturns:\\n    The greeting.'
    """
    lines = _lines(doc)
    while True:  # until none is left: the lines around a section dropped may make a new one
        dropped: set[int] = set()
        for section in _sections(lines):
            dropped.update(range(section.start, section.stop))
        if not dropped:
            break
        lines = [line for index, line in enumerate(lines) if index not in dropped]
    kept: list[str] = []
    for line in lines:
        if not line.strip() and (not kept or not kept[-1].strip()):
            continue
        kept.append(line)
    return "\n".join(kept).strip()
