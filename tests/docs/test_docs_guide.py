"""Runs the code of ``docs/guide.md``: its examples are this module's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from doc_blocks import aligned_source, python_blocks

pytestmark = pytest.mark.every_store  # make test runs it again on each store

DOC = Path(__file__).resolve().parents[2] / "docs" / "guide.md"
_TEXT = DOC.read_text(encoding="utf-8")
_BEFORE = set(globals())
exec(compile(aligned_source(_TEXT), str(DOC), "exec"), globals())
DOC_TESTS = sorted(name for name in set(globals()) - _BEFORE if name.startswith("test_"))


def test_the_guide_runs_its_examples() -> None:
    assert len(python_blocks(_TEXT)) == 14
    assert DOC_TESTS == [
        "test_a_plain_tool_reports_progress_and_stops_when_cancelled",
        "test_a_task_from_start_to_end",
        "test_a_task_that_needs_input",
        "test_an_asyncio_tool",
        "test_argument_types",
        "test_cancel_really_stops_the_work",
        "test_input_in_each_era",
        "test_log_levels",
        "test_middleware_around_requests_and_tool_runs",
        "test_one_database_for_the_whole_run",
        "test_plain_calls_and_errors",
        "test_resources_prompts_and_completion",
        "test_spans_for_a_call_and_a_task",
        "test_structured_output",
        "test_the_server_decides_what_becomes_a_task",
    ]
