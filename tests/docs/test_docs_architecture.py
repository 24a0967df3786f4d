"""Runs the code of ``docs/architecture.md`` and checks the files it names exist.

The page's ```python block exercises the sans-IO protocol layer on its own, so it runs in a
fresh interpreter that must finish without having imported Trio (the layering the page
describes, which ``tests/project/test_layering.py`` enforces on the source).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from doc_blocks import aligned_source, python_blocks

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "architecture.md"
_TEXT = DOC.read_text(encoding="utf-8")

CHECK = """
import sys
for name in ("trio", "trio_websocket", "outcome"):
    assert name not in sys.modules, f"the protocol example loaded {name}"
"""
FILE_NAME = r"`((?:tests|docs)/[\w/]+\.\w+|(?:protocol|actors|transports|server|client)/[\w/]+\.py)`"
"""A file the page names in backquotes: ``tests/...``, or a module under ``trio_mcp/``."""


def test_the_page_has_its_example() -> None:
    assert len(python_blocks(_TEXT)) == 1


def test_the_protocol_example_runs_without_trio() -> None:
    program = f"exec(compile({aligned_source(_TEXT)!r}, {str(DOC)!r}, 'exec'))\n{CHECK}"
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr


def test_the_files_it_names_exist() -> None:
    named = set(re.findall(FILE_NAME, _TEXT))
    assert len(named) >= 8, named
    missing = [
        name
        for name in sorted(named)
        if not (ROOT / name).exists() and not (ROOT / "trio_mcp" / name).exists()
    ]
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_the_modules_in_its_pictures_exist() -> None:
    # The right-hand column of the walk and the layer names: ``actors/_session`` and the like
    # (not a test file's room: ``tests/actors/...``).
    named = set(re.findall(r"(?<!tests/)\b((?:protocol|actors|transports|server|client)/\w+)\b", _TEXT))
    missing = [
        name
        for name in sorted(named)
        if not (ROOT / "trio_mcp" / f"{name}.py").exists() and not (ROOT / "trio_mcp" / name).is_dir()
    ]
    assert not missing, f"docs/architecture.md names modules that do not exist: {missing}"
