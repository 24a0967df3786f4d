"""Every TaskStore keeps the rules of ``trio_mcp/stores/base.py``'s docstring.

Each test runs against the in-memory store, :class:`json_store.JsonTextTaskStore` (records
kept only as JSON text), the SQLite store (a fresh file each) and the Redis store (a fresh key
prefix each, on the test server of ``tests/redis_server.py``); a new store joins the suite by
adding its factory to ``STORES``.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from conftest import fresh_sqlite_store
from json_store import JsonTextTaskStore
from redis_server import fresh_redis_store

from trio_mcp import Server
from trio_mcp.actors.supervisor import TaskSupervisor
from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores import InvalidCursor, MemoryTaskStore, TaskStore
from trio_mcp.testing import open_harness

pytestmark = pytest.mark.every_store  # make test runs it again on each store

STORES: dict[str, Callable[[], TaskStore]] = {
    "memory": MemoryTaskStore,
    "json": JsonTextTaskStore,
    "sqlite": fresh_sqlite_store,
    "redis": fresh_redis_store,
}


@pytest.fixture(params=sorted(STORES))
def make_store(request: pytest.FixtureRequest) -> Callable[[], TaskStore]:
    factory: Callable[[], TaskStore] = STORES[request.param]
    return factory


@pytest.fixture
def store(make_store: Callable[[], TaskStore]) -> TaskStore:
    return make_store()


def record(task_id: str, owner: str = "alice", *, now: float = 0.0, ttl_ms: int = 60_000) -> TaskRecord:
    return new_record(task_id, owner, now=now, ttl_ms=ttl_ms, poll_interval_ms=500)


def b64(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


async def create_all(store: TaskStore, *records: TaskRecord) -> None:
    for r in records:
        await store.create(r)


async def all_pages(store: TaskStore, owner: str, limit: int) -> list[list[str]]:
    """Every page of ``owner``'s task ids, following the cursor chain to its end."""
    pages: list[list[str]] = []
    cursor: str | None = None
    while True:
        records, cursor = await store.page(owner, cursor, limit)
        assert len(records) <= limit
        assert all(r.owner == owner for r in records)
        pages.append([r.task_id for r in records])
        if cursor is None:
            return pages
        assert isinstance(cursor, str) and cursor
        assert len(pages) < 1000, "the cursor chain does not end"


# ----------------------------------------------------------------------------- create, get


async def test_get_returns_the_created_record_or_none(store: TaskStore) -> None:
    assert await store.get("t1") is None
    created = record("t1")
    await store.create(created)
    assert await store.get("t1") == created
    assert await store.get("t2") is None


async def test_create_keeps_every_field(store: TaskStore) -> None:
    full = attrs.evolve(
        record("t1"),
        status=TaskStatus.INPUT_REQUIRED,
        status_message="waiting",
        input_requests={"r1": {"method": "elicitation/create", "params": {"message": "name?"}}},
        version=3,
    )
    await store.create(full)
    assert await store.get("t1") == full


async def test_create_of_an_existing_id_raises_and_keeps_the_stored_record(store: TaskStore) -> None:
    first = record("t1", "alice")
    await store.create(first)
    with pytest.raises(ValueError):
        await store.create(record("t1", "bob", now=5.0))
    assert await store.get("t1") == first
    assert [r.task_id for r in (await store.page("alice", None, 10))[0]] == ["t1"]
    assert (await store.page("bob", None, 10)) == ([], None)


# ----------------------------------------------------------------------------- update


async def test_update_succeeds_only_with_the_next_version(store: TaskStore) -> None:
    original = record("t1")
    await store.create(original)
    next_one = original.with_message("step 1", now=1.0)
    assert next_one.version == original.version + 1
    assert await store.update(next_one) is True
    assert await store.get("t1") == next_one

    done = next_one.settle(TaskOutcome(result={"content": []}), now=2.0)
    assert await store.update(done) is True
    stored = await store.get("t1")
    assert stored == done and stored is not None and stored.status == TaskStatus.COMPLETED


@pytest.mark.parametrize("offset", [-2, -1, 0, 2, 5])
async def test_update_with_any_other_version_is_refused_and_changes_nothing(
    store: TaskStore, offset: int
) -> None:
    original = attrs.evolve(record("t1"), version=3)
    await store.create(original)
    candidate = attrs.evolve(original, status_message="changed", last_updated_at=9.0, version=3 + offset)
    assert await store.update(candidate) is False
    assert await store.get("t1") == original


async def test_update_of_the_same_version_twice_only_succeeds_once(store: TaskStore) -> None:
    original = record("t1")
    await store.create(original)
    a = original.with_message("a", now=1.0)
    b = original.with_message("b", now=1.0)  # a competing change of the same version
    assert await store.update(a) is True
    assert await store.update(b) is False
    assert await store.get("t1") == a


async def test_update_of_a_missing_record_is_false(store: TaskStore) -> None:
    assert await store.update(record("t1").with_message("x", now=1.0)) is False
    assert await store.get("t1") is None
    await store.create(record("t1"))
    await store.delete("t1")
    assert await store.update(record("t1").with_message("x", now=1.0)) is False
    assert await store.get("t1") is None


# ----------------------------------------------------------------------------- delete


async def test_delete_returns_the_record_then_none(store: TaskStore) -> None:
    original = record("t1")
    await store.create(original)
    changed = original.with_message("m", now=1.0)
    assert await store.update(changed)
    assert await store.delete("t1") == changed
    assert await store.get("t1") is None
    assert await store.delete("t1") is None
    assert await store.delete("never") is None
    assert await store.page("alice", None, 10) == ([], None)


async def test_an_id_can_be_created_again_after_delete(store: TaskStore) -> None:
    await store.create(record("t1"))
    await store.delete("t1")
    again = record("t1", now=3.0)
    await store.create(again)
    assert await store.get("t1") == again


# ----------------------------------------------------------------------------- page


async def test_page_lists_one_owner_in_creation_order(store: TaskStore) -> None:
    ids = ["t9", "t1", "t5", "t3", "t7"]  # creation order, not id order
    for i, task_id in enumerate(ids):
        await store.create(record(task_id, "alice", now=float(10 - i)))  # nor time order
        await store.create(record(f"b-{task_id}", "bob"))
    assert await all_pages(store, "alice", 10) == [ids]
    assert await all_pages(store, "bob", 10) == [[f"b-{task_id}" for task_id in ids]]


async def test_page_of_an_owner_with_nothing_is_empty(store: TaskStore) -> None:
    assert await store.page("nobody", None, 5) == ([], None)
    await store.create(record("t1", "alice"))
    assert await store.page("nobody", None, 5) == ([], None)


@pytest.mark.parametrize(("count", "limit"), [(1, 1), (5, 1), (6, 3), (7, 3), (3, 3), (3, 10), (10, 4)])
async def test_cursor_chain_visits_each_record_exactly_once(store: TaskStore, count: int, limit: int) -> None:
    ids = [f"t{i}" for i in range(count)]
    await create_all(store, *(record(task_id) for task_id in ids))
    pages = await all_pages(store, "alice", limit)
    assert [task_id for page in pages for task_id in page] == ids
    assert all(len(page) == limit for page in pages[:-1])  # limit at a time
    assert 1 <= len(pages[-1]) <= limit  # the last page is not an empty extra one
    assert len(pages) == -(-count // limit)


async def test_page_returns_the_current_records(store: TaskStore) -> None:
    original = record("t1")
    await store.create(original)
    changed = original.with_message("now", now=1.0)
    assert await store.update(changed)
    assert (await store.page("alice", None, 10))[0] == [changed]


async def test_records_deleted_between_pages_are_skipped_never_repeated(store: TaskStore) -> None:
    ids = [f"t{i}" for i in range(9)]
    await create_all(store, *(record(task_id) for task_id in ids))
    first, cursor = await store.page("alice", None, 3)
    assert [r.task_id for r in first] == ids[:3]
    assert cursor is not None
    for task_id in ("t1", "t3", "t4", "t6"):  # one already listed, the rest not yet
        await store.delete(task_id)
    second, cursor = await store.page("alice", cursor, 3)
    assert [r.task_id for r in second] == ["t5", "t7", "t8"]
    assert cursor is None


async def test_paging_after_most_records_are_deleted_keeps_order_and_cursor(store: TaskStore) -> None:
    # Enough deletions, before and after a cursor, that a store compacting its index does so
    # (the memory store drops its holes once they are half of it): nothing is lost, repeated
    # or reordered, and the cursor taken before still continues after the same record.
    ids = [f"t{i:03}" for i in range(200)]
    await create_all(store, *(record(task_id) for task_id in ids))
    first, cursor = await store.page("alice", None, 10)
    assert [r.task_id for r in first] == ids[:10] and cursor is not None
    gone = {task_id for i, task_id in enumerate(ids) if i % 4 != 1 or 60 <= i < 120}
    for task_id in sorted(gone, key=lambda t: (int(t[1:]) * 37) % 200):  # deleted out of order
        assert await store.delete(task_id) is not None
    later = [f"n{i}" for i in range(5)]
    await create_all(store, *(record(task_id) for task_id in later))
    seen: list[str] = []
    while cursor is not None:
        page, cursor = await store.page("alice", cursor, 7)
        seen += [r.task_id for r in page]
    kept = [t for t in ids if t not in gone]
    assert seen == [t for t in kept if t not in ids[:10]] + later
    assert [t for page in await all_pages(store, "alice", 9) for t in page] == kept + later


async def test_a_deleted_cursor_record_does_not_break_the_chain(store: TaskStore) -> None:
    ids = [f"t{i}" for i in range(6)]
    await create_all(store, *(record(task_id) for task_id in ids))
    first, cursor = await store.page("alice", None, 2)
    assert [r.task_id for r in first] == ["t0", "t1"]
    await store.delete("t1")  # the record the cursor points after
    await store.delete("t2")
    rest, cursor = await store.page("alice", cursor, 10)
    assert [r.task_id for r in rest] == ["t3", "t4", "t5"] and cursor is None


async def test_when_the_rest_is_deleted_the_cursor_gives_an_empty_last_page(store: TaskStore) -> None:
    await create_all(store, *(record(f"t{i}") for i in range(4)))
    _, cursor = await store.page("alice", None, 2)
    assert cursor is not None
    await store.delete("t2")
    await store.delete("t3")
    assert await store.page("alice", cursor, 2) == ([], None)


async def test_when_every_record_is_deleted_the_cursor_gives_an_empty_last_page(store: TaskStore) -> None:
    # Deleted between pages, even the owner's last ones: skipped, not an invalid cursor.
    await create_all(store, *(record(f"t{i}") for i in range(4)))
    _, cursor = await store.page("alice", None, 2)
    assert cursor is not None
    for i in range(4):
        await store.delete(f"t{i}")
    assert await store.page("alice", cursor, 2) == ([], None)


async def test_records_created_after_a_cursor_come_on_later_pages(store: TaskStore) -> None:
    await create_all(store, *(record(f"t{i}") for i in range(3)))
    first, cursor = await store.page("alice", None, 2)
    assert [r.task_id for r in first] == ["t0", "t1"] and cursor is not None
    await create_all(store, record("t3"), record("t4"))
    rest, cursor = await store.page("alice", cursor, 10)
    assert [r.task_id for r in rest] == ["t2", "t3", "t4"] and cursor is None


async def test_records_created_after_the_owner_had_none_left_come_after_an_old_cursor(
    store: TaskStore,
) -> None:
    # Creation order holds across an owner's emptying: an old cursor still points before the
    # records created after it, so every one of them is listed.
    await create_all(store, *(record(f"t{i}") for i in range(3)))
    _, cursor = await store.page("alice", None, 2)
    assert cursor is not None
    for i in range(3):
        await store.delete(f"t{i}")
    await create_all(store, *(record(f"n{i}") for i in range(3)))
    rest, cursor = await store.page("alice", cursor, 10)
    assert [r.task_id for r in rest] == ["n0", "n1", "n2"] and cursor is None


async def test_a_cursor_is_stable(store: TaskStore) -> None:
    await create_all(store, *(record(f"t{i}") for i in range(5)))
    _, cursor = await store.page("alice", None, 2)
    assert cursor is not None
    again = await store.page("alice", cursor, 2)
    assert await store.page("alice", cursor, 2) == again
    assert await store.page("alice", None, 2) == ((await store.page("alice", None, 2))[0], cursor)


async def test_a_cursor_of_one_owner_is_invalid_for_another(store: TaskStore) -> None:
    # Bob has at least as many records as alice, so only the owner can tell the cursors apart.
    for i in range(4):
        await store.create(record(f"a{i}", "alice"))
        await store.create(record(f"b{i}", "bob"))
    _, alice_cursor = await store.page("alice", None, 2)
    _, bob_cursor = await store.page("bob", None, 2)
    assert alice_cursor is not None and bob_cursor is not None
    with pytest.raises(InvalidCursor):
        await store.page("bob", alice_cursor, 2)
    with pytest.raises(InvalidCursor):
        await store.page("alice", bob_cursor, 2)
    with pytest.raises(InvalidCursor):
        await store.page("carol", alice_cursor, 2)  # an owner with no records at all


async def test_a_cursor_of_one_owner_is_invalid_for_another_with_fewer_records(store: TaskStore) -> None:
    await create_all(store, *(record(f"a{i}", "alice") for i in range(6)))
    await store.create(record("b0", "bob"))
    _, cursor = await store.page("alice", None, 4)
    assert cursor is not None
    with pytest.raises(InvalidCursor):
        await store.page("bob", cursor, 2)


GARBAGE_CURSORS = [
    "",
    "nonsense",
    "!!!!",
    "é",
    "dGFzazp4",  # base64 of "task:x"
    b64("task:"),
    b64("task:-1"),
    b64("task:1.5"),
    b64("task: 1"),
    b64("task:٣"),  # a digit, but not an ASCII one (int() would take it)
    b64("task:\uff11"),  # a fullwidth digit
    b64("task:99999999999999999999"),
    b64("tools:1"),
    b64("json:1"),
    b64(":1"),
    base64.urlsafe_b64encode(b"\xff\xfe\x00task").decode(),  # not UTF-8
]


@pytest.mark.parametrize("garbage", GARBAGE_CURSORS)
async def test_a_garbage_cursor_is_invalid(store: TaskStore, garbage: str) -> None:
    await create_all(store, *(record(f"t{i}") for i in range(3)))
    with pytest.raises(InvalidCursor):
        await store.page("alice", garbage, 2)


async def test_a_real_cursor_with_non_ascii_digits_is_invalid(store: TaskStore) -> None:
    # A cursor this store made, its last number rewritten in Arabic-Indic digits (int() takes them).
    await create_all(store, *(record(f"t{i}") for i in range(5)))
    _, cursor = await store.page("alice", None, 2)
    assert cursor is not None
    text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
    head = text.rstrip("0123456789")
    assert head != text, f"expected the cursor {text!r} to end in its position"
    digits = text[len(head) :]
    forged = b64(head + "".join(chr(0x0660 + int(d)) for d in digits))
    with pytest.raises(InvalidCursor):
        await store.page("alice", forged, 2)


async def test_a_cursor_this_store_made_then_altered_is_invalid(store: TaskStore) -> None:
    await create_all(store, *(record(f"t{i}") for i in range(5)))
    _, cursor = await store.page("alice", None, 2)
    assert cursor is not None
    for altered in (cursor + "x", cursor + "!", cursor[:-1] + "#", "x" + cursor):
        with pytest.raises(InvalidCursor):
            await store.page("alice", altered, 2)


async def test_a_cursor_reveals_nothing_of_other_owners(make_store: Callable[[], TaskStore]) -> None:
    # The same sequence of alice's operations gives byte-identical cursors (and pages),
    # whatever bob did in between (here: nothing, or many creations and deletions).
    async def alice_run(busy_bob: bool) -> list[tuple[list[str], str | None]]:
        store = make_store()
        seen: list[tuple[list[str], str | None]] = []
        bob = 0

        async def bob_acts() -> None:
            nonlocal bob
            if busy_bob:
                for _ in range(7):
                    bob += 1
                    await store.create(record(f"b{bob}", "bob"))
                await store.delete(f"b{bob - 3}")

        for i in range(6):
            await bob_acts()
            await store.create(record(f"a{i}", "alice"))
        await bob_acts()
        cursor: str | None = None
        for step in range(3):
            records, cursor = await store.page("alice", cursor, 2)
            seen.append(([r.task_id for r in records], cursor))
            await bob_acts()
            if step == 0:
                await store.delete("a3")
                await store.create(record("a6", "alice"))
                await bob_acts()
        return seen

    quiet = await alice_run(False)
    busy = await alice_run(True)
    assert quiet == busy
    assert [ids for ids, _ in quiet] == [["a0", "a1"], ["a2", "a4"], ["a5", "a6"]]


# ----------------------------------------------------------------------------- due


async def test_due_returns_only_expired_records_earliest_first(store: TaskStore) -> None:
    # expires_at = now + ttl: created out of expiry order, and some never due.
    expiries = {"t1": 5.0, "t2": 1.0, "t3": 100.0, "t4": 3.0, "t5": 4.0, "t6": 2.0}
    for task_id, expires_at in expiries.items():
        await store.create(
            record(task_id, "alice" if task_id < "t4" else "bob", ttl_ms=int(expires_at * 1000))
        )
    assert await store.due(0.5, 10) == []
    assert [r.task_id for r in await store.due(3.0, 10)] == ["t2", "t6", "t4"]  # at or before now
    assert [r.task_id for r in await store.due(50.0, 10)] == ["t2", "t6", "t4", "t5", "t1"]
    due = await store.due(1000.0, 10)
    assert [r.task_id for r in due] == ["t2", "t6", "t4", "t5", "t1", "t3"]
    assert all(r.expires_at <= 1000.0 for r in due)
    assert due[0] == await store.get("t2")


async def test_due_sees_records_created_and_deleted_between_askings(store: TaskStore) -> None:
    # A supervisor asks once when it starts; records come and go after that, and the next
    # asking (a restart that keeps the store) must see exactly the ones there then.
    await store.create(record("early", ttl_ms=2000))
    assert await store.due(0.5, 10) == []
    for task_id, ttl_ms in (("later", 1000), ("gone", 500), ("long", 9000)):
        await store.create(record(task_id, ttl_ms=ttl_ms))
    await store.delete("gone")
    assert [r.task_id for r in await store.due(2.0, 1)] == ["later"]
    await store.create(record("last", ttl_ms=1500))
    assert [r.task_id for r in await store.due(5.0, 10)] == ["later", "last", "early"]


@pytest.mark.parametrize("limit", [1, 2, 3])
async def test_due_returns_at_most_limit(store: TaskStore, limit: int) -> None:
    for i in range(5):
        await store.create(record(f"t{i}", ttl_ms=(5 - i) * 1000))  # t4 expires first
    due = await store.due(10.0, limit)
    assert [r.task_id for r in due] == ["t4", "t3", "t2", "t1", "t0"][:limit]


async def test_due_records_stay_until_deleted(store: TaskStore) -> None:
    await create_all(store, record("t1", ttl_ms=1000), record("t2", ttl_ms=2000), record("t3", ttl_ms=9000))
    assert [r.task_id for r in await store.due(5.0, 1)] == ["t1"]
    assert [r.task_id for r in await store.due(5.0, 1)] == ["t1"]  # still there: not consumed
    assert [r.task_id for r in await store.due(5.0, 10)] == ["t1", "t2"]
    assert await store.get("t1") is not None
    await store.delete("t1")
    assert [r.task_id for r in await store.due(5.0, 10)] == ["t2"]


async def test_a_deleted_record_is_never_due(store: TaskStore) -> None:
    await create_all(store, *(record(f"t{i}", ttl_ms=1000 * (i + 1)) for i in range(6)))
    for i in (0, 2, 3):
        await store.delete(f"t{i}")
    assert [r.task_id for r in await store.due(100.0, 10)] == ["t1", "t4", "t5"]
    assert [r.task_id for r in await store.due(100.0, 1)] == ["t1"]
    await store.delete("t1")
    assert [r.task_id for r in await store.due(100.0, 1)] == ["t4"]


async def test_a_deleted_then_recreated_id_is_due_by_its_new_expiry(store: TaskStore) -> None:
    await store.create(record("t1", ttl_ms=1000))
    await store.delete("t1")
    await store.create(record("t1", now=10.0, ttl_ms=1000))
    assert await store.due(5.0, 10) == []
    assert [r.expires_at for r in await store.due(11.0, 10)] == [11.0]


async def test_due_returns_the_current_records(store: TaskStore) -> None:
    original = record("t1", ttl_ms=1000)
    await store.create(original)
    done = original.settle(TaskOutcome(result={"content": []}), now=0.5)
    assert await store.update(done)
    assert await store.due(2.0, 10) == [done]


# ----------------------------------------------------------------------------- JSON store only


async def test_the_json_store_refuses_a_record_that_is_not_json() -> None:
    store = JsonTextTaskStore()
    live = attrs.evolve(record("t1"), input_requests={"r1": object()})
    with pytest.raises(TypeError):
        await store.create(live)
    assert len(store) == 0 and await store.get("t1") is None
    await store.create(record("t1"))
    with pytest.raises(TypeError):
        await store.update(attrs.evolve(live, version=1))
    assert await store.get("t1") == record("t1")


async def test_the_json_store_shares_nothing_with_its_callers() -> None:
    store = JsonTextTaskStore()
    requests = {"r1": {"params": {"message": "name?"}}}
    original = attrs.evolve(record("t1"), input_requests=requests)
    await store.create(original)
    requests["r1"]["params"]["message"] = "changed after create"
    got = await store.get("t1")
    assert got is not None and got.input_requests == {"r1": {"params": {"message": "name?"}}}
    assert got is not await store.get("t1")
    assert len(store) == 1


# ----------------------------------------------------------------------------- the --task-store option

BUILT_AT_IMPORT = Server("store-choice")  # like most test modules' servers: built before any fixture


@BUILT_AT_IMPORT.tool()
async def echo(text: str) -> str:
    return text


def expected_store(choice: str) -> str:
    return {
        "memory": "MemoryTaskStore",
        "json": "JsonTextTaskStore",
        "sqlite": "SqliteTaskStore",
        "redis": "RedisTaskStore",
    }[choice]


async def test_the_task_store_option_reaches_servers_built_at_import(
    task_store_choice: str, autojump_clock: Any
) -> None:
    async with BUILT_AT_IMPORT.open() as runtime:
        assert type(runtime.supervisor.store).__name__ == expected_store(task_store_choice)
    async with open_harness(BUILT_AT_IMPORT) as harness:
        assert type(harness.runtime.supervisor.store).__name__ == expected_store(task_store_choice)
        task = (await harness.client.call_tool_as_task("echo", {"text": "hi"})).task
        result = await harness.client.task_result(task.task_id)
        assert result.content[0].text == "hi"  # type: ignore[union-attr]
        assert len(harness.runtime.supervisor.store) == 1  # type: ignore[arg-type]


async def test_the_task_store_option_reaches_servers_built_in_a_test(task_store_choice: str) -> None:
    server = Server("built-here")
    async with server.open() as runtime:
        assert type(runtime.supervisor.store).__name__ == expected_store(task_store_choice)
    supervisor = TaskSupervisor()  # the supervisor's own default (client-side supervisors use it)
    assert type(supervisor.store).__name__ == expected_store(task_store_choice)


async def test_an_explicit_store_is_left_alone(task_store_choice: str) -> None:
    async with Server("explicit", store=MemoryTaskStore).open() as runtime:
        assert type(runtime.supervisor.store) is MemoryTaskStore
    mine = JsonTextTaskStore()
    async with Server("given").open(store=mine) as runtime:
        assert runtime.supervisor.store is mine
