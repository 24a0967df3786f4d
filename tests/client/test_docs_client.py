"""Runs the code of ``docs/client.md``: the page's examples are tests of this module.

Every ```python block of the page is put at its own line numbers (all other lines become
blank) and executed here, in order, as one module; the test functions it defines are
collected like any other (a failure points at the right line of ``docs/client.md``).
"""

from __future__ import annotations

from pathlib import Path

from doc_blocks import aligned_source, python_blocks

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
_TEXT = DOC.read_text(encoding="utf-8")
_BEFORE = set(globals())
exec(compile(aligned_source(_TEXT), str(DOC), "exec"), globals())
DOC_TESTS = sorted(name for name in set(globals()) - _BEFORE if name.startswith("test_"))


def test_the_page_has_its_examples() -> None:
    assert len(python_blocks(_TEXT)) >= 4
    assert DOC_TESTS == [
        "test_oauth_end_to_end",
        "test_resources_and_prompts_are_typed",
        "test_tokens_survive_the_program",
        "test_url_elicitation_in_both_eras",
    ]
