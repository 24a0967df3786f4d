"""The supervisor's expiry table (``trio_mcp/protocol/_expiries.py``) against a plain model.

What a server relies on: a task is handed back for expiry once, never before its deadline and
at most a millisecond after it; earlier deadlines come first; a removed task's id is dropped
by compaction without losing any kept one, and what is filed stays bounded by the tasks kept.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from trio_mcp.protocol._expiries import Expiries

# Trio's clock starts at a large random offset: deadlines are big floats.
OFFSET = 123_456.789

steps = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.floats(0.0, 5.0, allow_nan=False)),
        st.tuples(st.just("advance"), st.floats(0.0, 2.0, allow_nan=False)),
        st.tuples(st.just("remove"), st.integers(0, 10_000)),
    ),
    max_size=300,
)


@settings(max_examples=200, deadline=None)
@given(steps)
def test_every_task_is_due_once_never_early_at_most_a_millisecond_late(ops: list[tuple[str, float]]) -> None:
    expiries = Expiries()
    now = OFFSET
    deadlines: dict[str, float] = {}  # every task ever filed
    kept: set[str] = set()  # filed, not yet handed back, not removed
    handed: list[str] = []
    for op, value in ops:
        if op == "add":
            task_id = f"t{len(deadlines)}"
            deadline = now + value
            due = expiries.add(task_id, deadline)
            assert deadline <= due <= deadline + 0.001 + 1e-9
            deadlines[task_id] = deadline
            kept.add(task_id)
        elif op == "advance":
            now += value
            out = expiries.pop_due(now)
            assert all(deadlines[t] <= now for t in out)  # never early
            handed += out
            kept.difference_update(out)
            # every task still waiting is not due yet: none is more than a millisecond late
            assert all(math.ceil(deadlines[t] * 1000) / 1000 > now for t in kept)
        elif kept:
            victim = sorted(kept)[int(value) % len(kept)]
            kept.discard(victim)  # removed before its time: the supervisor forgets it
            expiries.compact(kept)
            assert len(expiries) <= 2 * len(kept) + 64  # bounded by what is kept
    handed += expiries.pop_due(math.inf)
    assert len(handed) == len(set(handed))  # once each
    assert kept <= set(handed)  # every kept task is handed back
    ticks = [math.ceil(deadlines[t] * 1000) for t in handed]
    assert ticks == sorted(ticks)  # earlier deadlines first
    assert len(expiries) == 0 and expiries.earliest == math.inf


def test_compaction_drops_removed_ids_and_keeps_the_rest() -> None:
    expiries = Expiries()
    for i in range(1000):
        expiries.add(f"t{i}", OFFSET + i / 100)  # ten buckets' worth per tenth of a second
    kept = {f"t{i}" for i in range(0, 1000, 10)}
    expiries.compact(kept)
    assert len(expiries) == len(kept)  # 1000 filed > 2 * 100 + 64: compacted
    assert set(expiries.pop_due(math.inf)) == kept


def test_compaction_waits_until_removed_ids_are_half_of_all() -> None:
    expiries = Expiries()
    for i in range(200):
        expiries.add(f"t{i}", OFFSET)
    kept = {f"t{i}" for i in range(100)}
    expiries.compact(kept)
    assert len(expiries) == 200  # 200 <= 2 * 100 + 64: not yet
    expiries.compact(set(list(kept)[:60]))
    assert len(expiries) == 60


def test_tasks_created_together_share_a_bucket() -> None:
    expiries = Expiries()
    for i in range(500):
        expiries.add(f"t{i}", OFFSET + 3600 + i * 1e-6)  # within half a millisecond
    assert len(expiries._buckets) <= 2 and len(expiries) == 500


def test_a_task_alone_in_its_millisecond_is_filed_without_a_list() -> None:
    expiries = Expiries()
    expiries.add("alone", OFFSET + 1.0)
    expiries.add("first", OFFSET + 2.0)
    expiries.add("second", OFFSET + 2.0)
    assert sorted(map(type, expiries._buckets.values()), key=str) == [list, str]  # no list for one id
    assert expiries.pop_due(OFFSET + 1.5) == ["alone"] and len(expiries) == 2
    assert expiries.pop_due(OFFSET + 2.0) == ["first", "second"] and len(expiries) == 0
