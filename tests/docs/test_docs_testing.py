"""Runs the code of ``docs/testing.md``: the guide's examples are tests of this module.

Every ```python block of the guide is put at its own line numbers (all other lines become
blank) and executed here, in order, as one module. The test functions and fixtures it defines
become this module's, so pytest collects and runs them like any other test, and a failure
(or a checkpoint the kit reports) points at the right line of ``docs/testing.md``.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_blocks import aligned_source, python_blocks

pytestmark = pytest.mark.every_store  # make test runs it again on each store

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
_TEXT = DOC.read_text(encoding="utf-8")
_BEFORE = set(globals())
exec(compile(aligned_source(_TEXT), str(DOC), "exec"), globals())
DOC_TESTS = sorted(name for name in set(globals()) - _BEFORE if name.startswith("test_"))

# The guide says it: a store on a real server (Redis) makes runs wait on real sockets, so two
# runs may order simultaneous answers differently; identical traces are the memory store's.
test_same_trace_every_time = pytest.mark.skipif(
    "config.getoption('--task-store') == 'redis'",
    reason="docs/testing.md, Determinism: not promised with a store on a real server",
)(globals()["test_same_trace_every_time"])


def test_the_guide_has_its_examples() -> None:
    blocks = python_blocks(_TEXT)
    assert len(blocks) >= 10
    assert len(DOC_TESTS) >= 14, DOC_TESTS
    # Every block is part of the run: the module holds what each block defines.
    assert "build_report" in globals() and "upload" in globals()
