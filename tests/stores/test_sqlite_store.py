"""The SQLite store beyond the shared contract (``tests/stores/test_store_contract.py`` runs that on it):
restarts, recovery, threads, transactions, cancellation, and a server killed with SIGKILL."""

from __future__ import annotations

import base64
import os
import signal
import sqlite3
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio

import trio_mcp
from trio_mcp import McpError, Server
from trio_mcp.actors.supervisor import TaskSupervisor
from trio_mcp.protocol.errors import INTERNAL_ERROR, ErrorValue
from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores import InvalidCursor, MemoryTaskStore, parse_store_url, store_from_url
from trio_mcp.stores.sqlite import (
    INTERRUPTED_MESSAGE,
    SCHEMA_VERSION,
    SqliteTaskStore,
    StoreClosed,
)
from trio_mcp.testing import open_harness


def record(task_id: str, owner: str = "alice", *, now: float = 0.0, ttl_ms: int = 60_000) -> TaskRecord:
    return new_record(task_id, owner, now=now, ttl_ms=ttl_ms, poll_interval_ms=500)


async def ids_of(
    store: SqliteTaskStore, owner: str, cursor: str | None, limit: int
) -> tuple[list[str], str | None]:
    records, next_cursor = await store.page(owner, cursor, limit)
    return [r.task_id for r in records], next_cursor


# ----------------------------------------------------------------------------- opening, closing


async def test_the_constructor_does_no_io_and_the_first_call_makes_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    store = SqliteTaskStore(path)
    assert not path.exists()
    assert await store.get("t1") is None
    assert path.exists()
    with sqlite3.connect(path) as other:
        assert other.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert other.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {row[0] for row in other.execute("SELECT name FROM sqlite_master")}
        assert {"tasks", "owners", "tasks_by_owner", "tasks_by_expiry"} <= tables
    await store.aclose()


async def test_open_connects_at_once_and_aclose_ends_it(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    assert (tmp_path / "tasks.db").exists()
    await store.create(record("t1"))
    await store.aclose()
    await store.aclose()  # again: nothing
    with pytest.raises(StoreClosed):
        await store.get("t1")
    async with SqliteTaskStore(tmp_path / "tasks.db") as again:
        assert await again.get("t1") == record("t1")
    with pytest.raises(StoreClosed):
        await again.count()


async def test_open_surfaces_an_unusable_file(tmp_path: Path) -> None:
    with pytest.raises(sqlite3.Error):
        await SqliteTaskStore.open(tmp_path / "no-such-dir" / "tasks.db")
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database" * 100)
    with pytest.raises(sqlite3.DatabaseError):
        await SqliteTaskStore.open(garbage)


async def test_a_file_of_another_schema_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    with sqlite3.connect(path) as other:
        other.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(RuntimeError, match="schema version"):
        await SqliteTaskStore.open(path)


def test_synchronous_must_be_full_or_normal(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        SqliteTaskStore(tmp_path / "x.db", synchronous="OFF")  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- restarts


async def test_records_results_cursors_and_counters_survive_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    first = await SqliteTaskStore.open(path)
    for i in range(5):
        await first.create(record(f"a{i}", "alice", ttl_ms=1000 * (i + 1)))
    await first.create(record("b0", "bob"))
    done = record("a1", "alice", ttl_ms=2000).settle(
        TaskOutcome(result={"content": [{"type": "text", "text": "hi"}]}), now=1.0
    )
    assert await first.update(done)
    asking = record("a2", ttl_ms=3000).with_input_requests(
        {"r1": {"method": "elicitation/create"}}, TaskStatus.INPUT_REQUIRED, "?", now=1.0
    )
    assert await first.update(asking)
    await first.delete("a3")
    page1, cursor = await ids_of(first, "alice", None, 2)
    assert page1 == ["a0", "a1"] and cursor is not None
    before = {task_id: await first.get(task_id) for task_id in ("a0", "a1", "a2", "a4", "b0")}
    await first.aclose()

    second = await SqliteTaskStore.open(path)
    assert {task_id: await second.get(task_id) for task_id in before} == before
    assert await second.get("a3") is None
    got = await second.get("a1")
    assert got is not None and got.outcome == done.outcome and got.status == TaskStatus.COMPLETED
    # The old cursor goes on where it was; new records come after it (the counter went on).
    await second.create(record("a5", "alice"))
    assert await ids_of(second, "alice", cursor, 10) == (["a2", "a4", "a5"], None)
    # ... and the same history gives the same cursors as before the restart.
    assert await ids_of(second, "alice", None, 2) == (["a0", "a1"], cursor)
    assert (await second.page("bob", None, 10))[0] == [before["b0"]]
    with pytest.raises(InvalidCursor):
        await second.page("bob", cursor, 2)
    # Versions go on: only the next version is taken.
    assert not await second.update(attrs.evolve(done, version=done.version))
    assert await second.update(done.with_message("later", now=2.0))
    assert await second.count() == 6  # a0-a5 but a3, and b0
    await second.aclose()


async def test_due_works_across_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    async with SqliteTaskStore(path) as first:
        for task_id, seconds in {"t1": 5, "t2": 1, "t3": 100, "t4": 3}.items():
            await first.create(record(task_id, ttl_ms=seconds * 1000))
    async with SqliteTaskStore(path) as second:
        assert [r.task_id for r in await second.due(4.0, 10)] == ["t2", "t4"]
        assert [r.task_id for r in await second.due(50.0, 2)] == ["t2", "t4"]
        await second.delete("t2")
    async with SqliteTaskStore(path) as third:
        assert [r.task_id for r in await third.due(50.0, 10)] == ["t4", "t1"]


async def test_an_owner_emptied_before_a_restart_still_honours_its_old_cursor(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    async with SqliteTaskStore(path) as first:
        for i in range(3):
            await first.create(record(f"t{i}"))
        _, cursor = await ids_of(first, "alice", None, 2)
        for i in range(3):
            await first.delete(f"t{i}")
    with sqlite3.connect(path) as other:
        assert other.execute("SELECT count(*) FROM owners").fetchone()[0] == 0  # nothing kept
    async with SqliteTaskStore(path) as second:
        assert await ids_of(second, "alice", cursor, 2) == ([], None)
        await second.create(record("n0"))
        assert await ids_of(second, "alice", cursor, 2) == (["n0"], None)


# ----------------------------------------------------------------------------- unfinished tasks


async def test_a_starting_server_fails_running_tasks_and_leaves_ended_ones_alone(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    async with SqliteTaskStore(path) as first:
        working = record("working")
        asking = record("asking").with_input_requests({"r1": {}}, TaskStatus.INPUT_REQUIRED, "name?", now=1.0)
        completed = record("completed").settle(TaskOutcome(result={"content": []}), now=1.0)
        failed = record("failed").settle(TaskOutcome.from_error(ErrorValue(-32000, "boom")), now=1.0)
        cancelled = record("cancelled").settle(
            TaskOutcome(failed=True, message="stop"), now=1.0, status=TaskStatus.CANCELLED
        )
        for r in (working, asking, completed, failed, cancelled):
            await first.create(r)
    async with SqliteTaskStore(path) as second:
        assert [r.task_id for r in await second.unfinished(10)] == [working.task_id, asking.task_id]
        # A server starting on the file fails them (the store lists, the runtime decides).
        supervisor = TaskSupervisor(store=second, wall_clock=lambda: 7.0)
        async with trio.open_nursery() as nursery:
            await nursery.start(supervisor.run)
            nursery.cancel_scope.cancel()
        expected_outcome = TaskOutcome.from_error(ErrorValue(INTERNAL_ERROR, INTERRUPTED_MESSAGE))
        for before in (working, asking):
            after = await second.get(before.task_id)
            assert after is not None
            assert after.status == TaskStatus.FAILED
            assert after.status_message == INTERRUPTED_MESSAGE
            assert after.outcome == expected_outcome
            assert after.version == before.version + 1 and after.last_updated_at == 7.0
            assert after.input_requests == {}
            assert after.created_at == before.created_at and after.expires_at == before.expires_at
        for unchanged in (completed, failed, cancelled):
            assert await second.get(unchanged.task_id) == unchanged
        assert await second.unfinished(10) == []  # nothing left running
        statuses = [r.status for r in (await second.page("alice", None, 10))[0]]
        assert statuses == ["failed", "failed", "completed", "failed", "cancelled"]


async def test_an_empty_store_has_nothing_unfinished(tmp_path: Path) -> None:
    async with SqliteTaskStore(tmp_path / "tasks.db") as store:
        assert await store.unfinished(10) == []


# ----------------------------------------------------------------------------- threads, transactions


async def test_every_database_call_runs_off_the_trio_thread(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    threads: set[int] = set()
    assert store._connection is not None
    store._connection.set_trace_callback(lambda statement: threads.add(threading.get_ident()))
    await store.create(record("t1"))
    await store.get("t1")
    await store.update(record("t1").with_message("m", now=1.0))
    await store.page("alice", None, 10)
    await store.due(100.0, 10)
    await store.unfinished(10)
    await store.delete("t1")
    assert threads and threading.get_ident() not in threads
    await store.aclose()


async def test_many_trio_tasks_at_once_are_serialised(tmp_path: Path) -> None:
    store = await SqliteTaskStore.open(tmp_path / "tasks.db")
    owners = [f"owner{i}" for i in range(5)]
    wins: list[str] = []

    async def worker(owner: str, n: int) -> None:
        task_id = f"{owner}-{n}"
        await store.create(record(task_id, owner))
        current = await store.get(task_id)
        assert current is not None
        for step in range(3):
            assert await store.update(current.with_message(f"step {step}", now=float(step)))
            current = current.with_message(f"step {step}", now=float(step))

    async def racer(name: str, base: TaskRecord) -> None:
        if await store.update(base.with_message(name, now=1.0)):
            wins.append(name)

    async with trio.open_nursery() as nursery:
        for owner in owners:
            for n in range(10):
                nursery.start_soon(worker, owner, n)
    for owner in owners:
        pages: list[str] = []
        cursor: str | None = None
        while True:
            ids, cursor = await ids_of(store, owner, cursor, 3)
            pages.extend(ids)
            if cursor is None:
                break
        assert sorted(pages) == sorted(f"{owner}-{n}" for n in range(10))
    with sqlite3.connect(tmp_path / "tasks.db") as other:
        counters = dict(other.execute("SELECT owner, counter FROM owners"))
        assert counters == {owner.encode(): 10 for owner in owners}  # no position lost or reused

    race = record("race")
    await store.create(race)
    async with trio.open_nursery() as nursery:
        for i in range(20):
            nursery.start_soon(racer, f"r{i}", race)
    assert len(wins) == 1  # compare-and-set: exactly one of the same-version updates wins
    stored = await store.get("race")
    assert stored is not None and stored.status_message == wins[0]
    await store.aclose()


async def test_two_store_objects_on_one_file_share_it(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    one, two = await SqliteTaskStore.open(path), await SqliteTaskStore.open(path)
    wins: list[bool] = []

    async def create_some(store: SqliteTaskStore, prefix: str) -> None:
        for i in range(20):
            await store.create(record(f"{prefix}{i}"))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create_some, one, "x")
        nursery.start_soon(create_some, two, "y")
    ids, cursor = await ids_of(two, "alice", None, 100)
    assert len(ids) == 40 and cursor is None
    assert await ids_of(one, "alice", None, 100) == (ids, None)
    base = await one.get("x0")
    assert base is not None

    async def race(store: SqliteTaskStore, text: str) -> None:
        wins.append(await store.update(base.with_message(text, now=1.0)))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(race, one, "one")
        nursery.start_soon(race, two, "two")
    assert sorted(wins) == [False, True]
    await one.aclose()
    await two.aclose()


async def test_a_refused_create_changes_nothing_not_even_the_counter(tmp_path: Path) -> None:
    async def cursors(store: SqliteTaskStore) -> list[str | None]:
        out: list[str | None] = []
        cursor: str | None = None
        while True:
            _, cursor = await store.page("alice", cursor, 1)
            out.append(cursor)
            if cursor is None:
                return out

    clean = await SqliteTaskStore.open(tmp_path / "clean.db")
    busy = await SqliteTaskStore.open(tmp_path / "busy.db")
    for store in (clean, busy):
        await store.create(record("t0"))
    with pytest.raises(ValueError):
        await busy.create(record("t0"))  # exists
    with pytest.raises(TypeError):
        await busy.create(attrs.evolve(record("t9"), input_requests={"r": object()}))  # not JSON
    with pytest.raises(ValueError):
        await busy.create(attrs.evolve(record("t9"), expires_at=float("nan")))  # not JSON either
    with pytest.raises(TypeError):
        await busy.update(attrs.evolve(record("t0"), version=1, input_requests={"r": object()}))
    assert await busy.get("t9") is None and await busy.get("t0") == record("t0")
    for store in (clean, busy):
        await store.create(record("t1"))
        await store.create(record("t2"))
    assert await cursors(busy) == await cursors(clean)
    await clean.aclose()
    await busy.aclose()


async def test_a_cancelled_call_still_finishes_whole(tmp_path: Path) -> None:
    # Another connection holds the write lock: the create waits for it in its thread. The caller
    # is cancelled meanwhile; the call is not abandoned — it ends (the record is created) first.
    path = tmp_path / "tasks.db"
    store = await SqliteTaskStore.open(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    returned: list[bool] = []

    async def create() -> None:
        with trio.CancelScope() as scope:
            scopes.append(scope)
            await store.create(record("t1"))
            returned.append(True)
            await trio.sleep_forever()

    scopes: list[trio.CancelScope] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            await trio.sleep(0.3)
            scopes[0].cancel()
            await trio.sleep(0.3)
            assert not returned  # still waiting for the lock, despite the cancel
            blocker.execute("ROLLBACK")
    blocker.close()
    assert returned == [True]
    assert await store.get("t1") == record("t1")
    await store.aclose()


async def test_any_string_is_a_task_id_or_an_owner(tmp_path: Path) -> None:
    # A tasks/get of "\ud800" (JSON allows lone surrogates) is simply not found.
    async with SqliteTaskStore(tmp_path / "tasks.db") as store:
        assert await store.get("\ud800") is None
        assert await store.delete("\udfff") is None
        odd = record("\ud800x", "\udc80owner")
        await store.create(odd)
        assert await store.get("\ud800x") == odd
        assert (await store.page("\udc80owner", None, 5))[0] == [odd]
        assert await store.page("\udc81owner", None, 5) == ([], None)


async def test_a_record_that_changes_owner_is_not_stored(tmp_path: Path) -> None:
    async with SqliteTaskStore(tmp_path / "tasks.db") as store:
        await store.create(record("t1", "alice"))
        assert not await store.update(attrs.evolve(record("t1", "bob"), version=1))
        assert await store.get("t1") == record("t1", "alice")


async def test_len_counts_records(tmp_path: Path) -> None:
    store = SqliteTaskStore(tmp_path / "tasks.db")
    assert len(store) == 0
    await store.create(record("t1"))
    assert len(store) == 1 and await store.count() == 1
    await store.aclose()


async def test_a_cursor_names_only_a_digest_of_its_owner(tmp_path: Path) -> None:
    async with SqliteTaskStore(tmp_path / "tasks.db") as store:
        for i in range(3):
            await store.create(record(f"t{i}"))
        _, cursor = await store.page("alice", None, 1)
        assert cursor is not None
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        kind, _, position = text.rpartition(":")
        assert "alice" not in text and position == "1"
        _, tag, epoch = kind.split(".")
        for forged in (f"task.{'0' * len(tag)}.{epoch}:1", f"task.{tag}:1", f"{kind}:4", f"{kind}:0"):
            with pytest.raises(InvalidCursor):
                await store.page("alice", base64.urlsafe_b64encode(forged.encode()).decode().rstrip("="), 1)


# ----------------------------------------------------------------------------- the mock clock


async def test_on_an_autojump_clock_a_call_takes_no_mock_time(tmp_path: Path, autojump_clock: Any) -> None:
    store = SqliteTaskStore(tmp_path / "tasks.db")
    start = trio.current_time()
    with trio.fail_after(0.001):  # a thread would let the clock jump to this deadline
        await store.create(record("t1"))
        assert await store.get("t1") == record("t1")
    assert trio.current_time() == start
    await store.aclose()


async def test_a_server_on_the_testing_kit_runs_tasks_in_a_sqlite_file(
    tmp_path: Path, autojump_clock: Any
) -> None:
    server = Server("kit", store=lambda: SqliteTaskStore(tmp_path / "kit.db"))

    @server.tool()
    async def nap(seconds: float) -> str:
        await trio.sleep(seconds)
        return "rested"

    async with open_harness(server) as harness:
        task = (await harness.client.call_tool_as_task("nap", {"seconds": 60})).task
        result = await harness.client.task_result(task.task_id)
        assert result.content[0].text == "rested"  # type: ignore[union-attr]
        await harness.settle()
        async with SqliteTaskStore(tmp_path / "kit.db") as peek:  # another reader of the file
            stored = await peek.get(task.task_id)
            assert stored is not None and stored.status == TaskStatus.COMPLETED
            assert stored.outcome is not None and stored.outcome.result == {
                "content": [{"type": "text", "text": "rested"}]
            }
    async with SqliteTaskStore(tmp_path / "kit.db") as store:
        assert await store.get(task.task_id) is None  # its owner was the connection: gone with it


# ----------------------------------------------------------------------------- store URLs


def test_store_urls() -> None:
    assert parse_store_url("memory") == ("memory", None)
    assert parse_store_url("memory:") == ("memory", None)
    assert parse_store_url("sqlite:///tasks.db") == ("sqlite", "tasks.db")
    assert parse_store_url("sqlite:////var/lib/tasks.db") == ("sqlite", "/var/lib/tasks.db")
    for bad in ("", "sqlite://", "sqlite:///", "sqlite:tasks.db", "postgres://x", "tasks.db", "MEMORY"):
        with pytest.raises(ValueError):
            parse_store_url(bad)
    assert store_from_url("memory") is MemoryTaskStore
    made = store_from_url("sqlite:///some/where.db", synchronous="NORMAL")()
    assert isinstance(made, SqliteTaskStore) and made.path == "some/where.db"
    with pytest.raises(ValueError):
        store_from_url("memory", synchronous="NORMAL")


# ----------------------------------------------------------------------------- SIGKILL and restart

SERVER_SCRIPT = textwrap.dedent(
    """
    import os
    import sys
    import time

    import trio

    from trio_mcp import Server
    from trio_mcp.stores.sqlite import SqliteTaskStore
    from trio_mcp.transports.stdio import open_stdio_transport

    PATH = sys.argv[1]
    server = Server("durable", store=lambda: SqliteTaskStore(PATH))
    recovered = []


    @server.tool()
    async def pid() -> str:
        return str(os.getpid())


    @server.tool()
    async def recovered_count() -> str:
        return str(recovered[0])


    @server.tool()
    async def shout(text: str) -> str:
        return text.upper()


    @server.tool()
    async def forever() -> str:
        await trio.sleep_forever()
        return "never"


    async def main() -> None:
        # What the supervisor will fail on start: the tasks whose process is gone.
        async with SqliteTaskStore(PATH) as store:
            recovered.append(len(await store.unfinished(1000)))
        # An explicit owner (an identity): the tasks outlive the connection and the process.
        async with server.open() as runtime, open_stdio_transport() as transport:
            await runtime.serve(transport, owner="identity:tester")


    trio.run(main)
    """
)


def text_of(result: Any) -> str:
    return str(result.content[0].text)


async def test_a_server_killed_with_sigkill_keeps_its_records_and_fails_its_running_tasks(
    tmp_path: Path,
) -> None:
    script = tmp_path / "server.py"
    script.write_text(SERVER_SCRIPT)
    db = str(tmp_path / "tasks.db")
    command = [sys.executable, str(script), db]
    with trio.fail_after(60):
        try:
            async with trio_mcp.connect_stdio(command) as client:
                assert text_of(await client.call_tool("recovered_count")) == "0"
                pid = int(text_of(await client.call_tool("pid")))
                done = (await client.call_tool_as_task("shout", {"text": "kept"})).task
                assert text_of(await client.task_result(done.task_id)) == "KEPT"
                running = (await client.call_tool_as_task("forever")).task
                assert (await client.get_task(running.task_id)).status == TaskStatus.WORKING
                assert (await client.get_task(done.task_id)).status == TaskStatus.COMPLETED
                os.kill(pid, signal.SIGKILL)
                with pytest.raises((trio_mcp.ConnectionClosed, McpError)):
                    await client.call_tool("pid")
        except* (trio_mcp.ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the dead server's connection, torn down

        async with trio_mcp.connect_stdio(command) as client:
            assert text_of(await client.call_tool("recovered_count")) == "1"
            assert int(text_of(await client.call_tool("pid"))) != pid
            assert text_of(await client.task_result(done.task_id)) == "KEPT"
            kept = await client.get_task(done.task_id)
            assert kept.status == TaskStatus.COMPLETED and kept.created_at == done.created_at
            failed = await client.get_task(running.task_id)
            assert failed.status == TaskStatus.FAILED
            assert failed.status_message == INTERRUPTED_MESSAGE
            with pytest.raises(McpError) as raised:
                await client.task_result(running.task_id)
            assert raised.value.code == INTERNAL_ERROR
            assert INTERRUPTED_MESSAGE in str(raised.value)
            listed = [task.task_id for task in (await client.list_tasks()).tasks]
            assert listed == [done.task_id, running.task_id]
