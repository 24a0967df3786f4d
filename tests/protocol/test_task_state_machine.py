"""Tests for trio_mcp.protocol.tasks: the task status state machine and task timestamps."""

from __future__ import annotations

import datetime
import itertools
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_mcp.protocol.tasks import (
    TERMINAL,
    InvalidTransition,
    TaskStatus,
    can_transition,
    check_transition,
    format_timestamp,
)

W = TaskStatus.WORKING
I = TaskStatus.INPUT_REQUIRED  # noqa: E741
C = TaskStatus.COMPLETED
F = TaskStatus.FAILED
X = TaskStatus.CANCELLED

# The spec (SEP-1686): working -> input_required | completed | failed | cancelled;
# input_required -> working | completed | failed | cancelled; terminal states never change.
LEGAL: frozenset[tuple[TaskStatus, TaskStatus]] = frozenset(
    {(W, I), (W, C), (W, F), (W, X), (I, W), (I, C), (I, F), (I, X)}
)
ALL_PAIRS = list(itertools.product(TaskStatus, repeat=2))
ILLEGAL = [pair for pair in ALL_PAIRS if pair not in LEGAL]


def _pair_id(pair: tuple[TaskStatus, TaskStatus]) -> str:
    return f"{pair[0].value}->{pair[1].value}"


def test_there_are_exactly_five_statuses_with_spec_wire_values() -> None:
    assert {s.value for s in TaskStatus} == {"working", "input_required", "completed", "failed", "cancelled"}
    assert len(ALL_PAIRS) == 25
    assert len(LEGAL) + len(ILLEGAL) == 25


def test_statuses_are_strings_on_the_wire() -> None:
    # StrEnum: a status compares equal to, and formats as, its wire value.
    assert TaskStatus.INPUT_REQUIRED == "input_required"
    assert f"{TaskStatus.CANCELLED}" == "cancelled"
    assert TaskStatus("completed") is TaskStatus.COMPLETED


@pytest.mark.parametrize("pair", sorted(LEGAL), ids=_pair_id)
def test_legal_transition(pair: tuple[TaskStatus, TaskStatus]) -> None:
    old, new = pair
    assert can_transition(old, new) is True
    check_transition(old, new)  # does not raise


@pytest.mark.parametrize("pair", ILLEGAL, ids=_pair_id)
def test_illegal_transition(pair: tuple[TaskStatus, TaskStatus]) -> None:
    old, new = pair
    assert can_transition(old, new) is False
    with pytest.raises(InvalidTransition) as info:
        check_transition(old, new)
    assert info.value.old is old
    assert info.value.new is new
    assert str(info.value) == f"illegal task transition {old.value} -> {new.value}"


def test_terminal_states() -> None:
    assert frozenset({C, F, X}) == TERMINAL
    assert [s for s in TaskStatus if s.is_terminal] == [C, F, X]
    assert not W.is_terminal
    assert not I.is_terminal


@pytest.mark.parametrize("terminal", sorted(TERMINAL), ids=lambda s: s.value)
def test_terminal_states_never_change(terminal: TaskStatus) -> None:
    # Not even to themselves: a cancelled task stays cancelled when its work later finishes.
    for new in TaskStatus:
        assert not can_transition(terminal, new)


def test_no_self_transitions() -> None:
    for status in TaskStatus:
        assert not can_transition(status, status)


def test_every_live_state_can_reach_every_terminal_state() -> None:
    for live in (W, I):
        for terminal in TERMINAL:
            assert can_transition(live, terminal)


ISO_MS_Z = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$")


@pytest.mark.parametrize(
    ("epoch", "expected"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (0.5, "1970-01-01T00:00:00.500Z"),
        (1_700_000_000.123, "2023-11-14T22:13:20.123Z"),
        (1_764_028_800, "2025-11-25T00:00:00.000Z"),
        (951_782_400.999, "2000-02-29T00:00:00.999Z"),
    ],
)
def test_format_timestamp_known_values(epoch: float, expected: str) -> None:
    assert format_timestamp(epoch) == expected


@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_format_timestamp_is_iso8601_utc_with_milliseconds(epoch: float) -> None:
    text = format_timestamp(epoch)
    assert ISO_MS_Z.match(text), text
    parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    assert parsed.tzinfo is not None
    assert parsed.utcoffset() == datetime.timedelta(0)
    # Millisecond precision: never more than a millisecond away from the input (truncation).
    assert abs(parsed.timestamp() - epoch) < 0.001 + 1e-6


@given(
    st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False),
    st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False),
)
def test_format_timestamp_sorts_like_time(a: float, b: float) -> None:
    # Fixed-width ISO 8601 in UTC: string order is time order (clients sort tasks by createdAt).
    if a <= b:
        assert format_timestamp(a) <= format_timestamp(b)
    else:
        assert format_timestamp(a) >= format_timestamp(b)
