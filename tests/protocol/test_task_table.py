"""The task table (``trio_mcp/protocol/table.py``) against a plain model: every decision it makes
(admission by owner, client and process, in count and in kept result bytes; which tasks are
due) is the model's, after any sequence of additions, endings, kept results, removals and
expiries."""

from __future__ import annotations

import math
from typing import Any

import attrs
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_mcp.protocol.table import CHARGED_FROM, TaskLimits, TaskTable

LIMITS = TaskLimits(
    max_live_tasks_per_owner=3,
    max_tasks_per_owner=5,
    max_live_tasks_per_client=4,
    max_tasks_per_client=6,
    max_live_tasks=7,
    max_tasks=9,
    max_kept_result_bytes_per_owner=5_000,
    max_kept_result_bytes=8_000,
)
OWNERS = ["alice", "bob", "carol"]
CLIENTS = [None, "address:a", "address:b"]


def account(owner: str, client: str | None) -> tuple[str, str | None]:
    """Whom a task counts under for the per-owner limits: its owner, per client it came from."""
    return (owner, client if client != owner else None)


@attrs.define
class Model:
    owner: dict[str, str] = attrs.Factory(dict)
    client: dict[str, str | None] = attrs.Factory(dict)
    live: set[str] = attrs.Factory(set)
    due_at: dict[str, float] = attrs.Factory(dict)
    size: dict[str, int] = attrs.Factory(dict)

    def of(self, owner: str) -> list[str]:
        return [t for t, o in self.owner.items() if o == owner]

    def in_account(self, owner: str, client: str | None) -> list[str]:
        return [t for t, o in self.owner.items() if account(o, self.client[t]) == account(owner, client)]

    def refused(self, owner: str, client: str | None) -> bool:
        mine = self.in_account(owner, client)
        if sum(t in self.live for t in mine) >= LIMITS.max_live_tasks_per_owner:
            return True
        if len(mine) >= LIMITS.max_tasks_per_owner:
            return True
        if sum(self.size.get(t, 0) for t in mine) >= LIMITS.max_kept_result_bytes_per_owner:
            return True
        if client is not None and client != owner:
            theirs = [t for t in self.owner if account(self.owner[t], self.client[t])[1] == client]
            if sum(t in self.live for t in theirs) >= LIMITS.max_live_tasks_per_client:
                return True
            if len(theirs) >= LIMITS.max_tasks_per_client:
                return True
        return (
            len(self.live) >= LIMITS.max_live_tasks
            or len(self.owner) >= LIMITS.max_tasks
            or sum(self.size.values()) >= LIMITS.max_kept_result_bytes
        )

    def remove(self, task_id: str) -> None:
        for table in (self.owner, self.client, self.due_at, self.size):
            table.pop(task_id, None)
        self.live.discard(task_id)


operation = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(OWNERS), st.sampled_from(CLIENTS), st.integers(1, 50)),
    st.tuples(st.just("end"), st.integers(0, 30)),
    st.tuples(st.just("remove"), st.integers(0, 30)),
    st.tuples(st.just("keep"), st.integers(0, 30), st.sampled_from([0, 100, CHARGED_FROM, 2_000, 4_000])),
    st.tuples(st.just("due"), st.integers(0, 60)),
)


@settings(max_examples=400, deadline=None)
@given(st.lists(operation, max_size=80))
def test_the_table_decides_as_the_model(operations: list[tuple[Any, ...]]) -> None:
    table = TaskTable(LIMITS)
    model = Model()
    made: list[str] = []
    for op in operations:
        kind = op[0]
        if kind == "add":
            _, owner, client, ms = op
            refusal = table.refusal(owner, client)
            assert (refusal is not None) == model.refused(owner, client), (owner, client, model)
            if refusal is None:
                task_id = f"t{len(made)}"
                made.append(task_id)
                due = table.add(task_id, owner, client, deadline=ms / 1000)
                assert due == math.ceil(ms) / 1000
                model.owner[task_id], model.client[task_id] = owner, client
                model.live.add(task_id)
                model.due_at[task_id] = due
        elif made:
            task_id = made[op[1] % len(made)] if kind != "due" else ""
            if kind == "end":
                assert table.ended(task_id) == (task_id in model.live)
                model.live.discard(task_id)
            elif kind == "remove":
                assert table.remove(task_id) == model.owner.get(task_id)
                model.remove(task_id)
            elif kind == "keep":
                size = op[2]
                owner = model.owner.get(task_id)
                fits = (
                    size < CHARGED_FROM
                    or owner is None
                    or task_id in model.size
                    or (
                        sum(model.size.get(t, 0) for t in model.in_account(owner, model.client[task_id]))
                        + size
                        <= LIMITS.max_kept_result_bytes_per_owner
                        and sum(model.size.values()) + size <= LIMITS.max_kept_result_bytes
                    )
                )
                assert (table.keep_result(task_id, size) is None) == fits
                if fits and size >= CHARGED_FROM and owner is not None and task_id not in model.size:
                    model.size[task_id] = size
            else:
                now = op[1] / 1000
                due = table.pop_due(now)
                expected = sorted(
                    (t for t, at in model.due_at.items() if at <= now), key=model.due_at.__getitem__
                )
                assert sorted(due) == sorted(expected)
                assert [model.due_at[t] for t in due] == sorted(
                    model.due_at[t] for t in due
                )  # earliest first
                for t in due:
                    del model.due_at[t]  # handed back once; still kept until removed
        assert len(table) == len(model.owner)
        assert table.live_total == len(model.live)
        for owner in OWNERS:
            assert table.live_count(owner) == sum(t in model.live for t in model.of(owner))
            for client in CLIENTS:
                assert table.kept_result_bytes(owner, client) == sum(
                    model.size.get(t, 0) for t in model.in_account(owner, client)
                )
        assert table.kept_result_bytes() == sum(model.size.values())


def test_a_client_share_is_below_the_process_caps() -> None:
    # Four owners on one address fill the address's share, not the process: another client
    # still gets tasks.
    table = TaskTable(LIMITS)
    made = 0
    for owner in ["o1", "o2", "o3", "o4"]:
        while table.refusal(owner, "address:a") is None:
            table.add(f"t{made}", owner, "address:a", deadline=1.0)
            made += 1
    assert made == LIMITS.max_live_tasks_per_client
    refusal = table.refusal("o5", "address:a")
    assert refusal is not None and "per client" in refusal.message
    assert table.refusal("o6", "address:b") is None


def test_an_owner_shared_by_many_clients_gives_each_its_own_allowance() -> None:
    # Every anonymous caller of a stateless HTTP server is one owner: one address using up
    # the per-owner allowance leaves another address its own.
    table = TaskTable(LIMITS)
    made = 0
    while table.refusal("anonymous", "address:a") is None:
        table.add(f"t{made}", "anonymous", "address:a", deadline=1.0)
        made += 1
    assert made == LIMITS.max_live_tasks_per_owner
    assert table.refusal("anonymous", "address:b") is None
    assert table.live_count("anonymous") == made  # still one owner: its tasks are listed together


def test_kept_result_bytes_refuse_results_then_creations_until_removed() -> None:
    table = TaskTable(LIMITS)
    for i in range(3):
        table.add(f"t{i}", "alice", None, deadline=1.0)
        table.ended(f"t{i}")
    assert table.keep_result("t0", 3_000) is None
    assert table.keep_result("t1", 2_000) is None  # exactly the owner's 5 000
    refused = table.keep_result("t2", 1_500)
    assert refused is not None and refused.code == -32603
    refusal = table.refusal("alice", None)
    assert refusal is not None and "result bytes" in refusal.message
    assert table.refusal("bob", None) is None
    table.remove("t0")
    assert table.kept_result_bytes("alice") == 2_000 and table.refusal("alice", None) is None
