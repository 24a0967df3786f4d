"""A server on a real SQLite file, in a real process, under store faults: the file unwritable
for seconds, a SIGKILL under write load, a restart after the kill.

What is held: a client never sees a task state before it is in the file (durable before
visible), a write that failed is tried again until stored (never dropped), and a task a client
saw ``completed`` is still ``completed`` after the server was killed and restarted; the new
process fails what the dead one left unfinished, and the dead one's file lock does not refuse it.

The file is made unwritable from outside the server: this test process holds an exclusive
write transaction on it (``BEGIN EXCLUSIVE``, another SQLite connection). The server's store
waits ``busy_timeout`` (0.2 s here) for the write lock, then its write fails with ``database is
locked`` — an ``sqlite3.OperationalError``, the error path of a full disk (``database or disk is
full``). Readers are not blocked (WAL): the server still reads, and so does this test.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_mcp import Client, ConnectionClosed, McpError
from trio_mcp.client import connect
from trio_mcp.protocol.errors import INTERNAL_ERROR
from trio_mcp.protocol.messages import Task
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores.sqlite import INTERRUPTED_MESSAGE
from trio_mcp.transports.stdio import open_subprocess_transport

ROOT = Path(__file__).resolve().parents[2]

SERVER_SCRIPT = textwrap.dedent(
    """
    import logging
    import sys

    import trio

    from trio_mcp import Server
    from trio_mcp.stores.sqlite import SqliteTaskStore
    from trio_mcp.transports.stdio import open_stdio_transport

    PATH, LOG = sys.argv[1], sys.argv[2]
    logging.basicConfig(filename=LOG, level=logging.WARNING)
    # A short busy timeout: a write that finds another connection's write lock fails fast.
    server = Server("faults", store=lambda: SqliteTaskStore(PATH, busy_timeout=0.2))


    @server.tool()
    async def work(n: int, seconds: float) -> str:
        await trio.sleep(seconds)
        return f"done-{n}"


    async def main() -> None:
        # An explicit owner (an identity): the tasks outlive the connection and the process.
        async with server.open() as runtime, open_stdio_transport() as transport:
            await runtime.serve(transport, owner="identity:tester")


    trio.run(main)
    """
)

GONE = (ConnectionClosed, McpError, trio.BrokenResourceError, trio.ClosedResourceError)
"""What a client's calls raise once its server was killed."""


@asynccontextmanager
async def serving(db: Path) -> AsyncIterator[tuple[Client, trio.Process]]:
    """A server process on the task file ``db`` and a client connected to it over stdio (the
    2025-11-25 handshake). The child is shut down (SIGKILL at worst) and reaped when the block
    is left, however it is left."""
    script = db.parent / "server.py"
    script.write_text(SERVER_SCRIPT)
    command = [sys.executable, str(script), str(db), str(db.parent / "server.log")]
    async with (
        open_subprocess_transport(command, cwd=ROOT, shutdown_timeout=1.0) as transport,
        connect(transport) as client,
    ):
        yield client, transport.process


class FileView:
    """The task file as another reader sees it (this process's own connection, autocommit:
    each query reads the newest committed state)."""

    def __init__(self, db: Path) -> None:
        self.connection = sqlite3.connect(db, timeout=5.0, isolation_level=None)

    def status(self, task_id: str) -> str | None:
        row = self.connection.execute(
            "SELECT status FROM tasks WHERE task_id=?", (task_id.encode("utf-8", "surrogatepass"),)
        ).fetchone()
        return None if row is None else str(row[0])

    def statuses(self) -> dict[str, str]:
        return {
            bytes(task_id).decode("utf-8", "surrogatepass"): str(status)
            for task_id, status in self.connection.execute("SELECT task_id, status FROM tasks")
        }

    def close(self) -> None:
        self.connection.close()


def text_of(result: Any) -> str:
    return str(result.content[0].text)


async def result_or_error(client: Client, task_id: str) -> str:
    """What tasks/result answers: the result's text, or the error."""
    try:
        return text_of(await client.task_result(task_id))
    except McpError as exc:
        return f"error {exc.code}: {exc}"


async def start(client: Client, n: int, seconds: float) -> str:
    """A task of ``work(n, seconds)`` (which returns ``done-{n}``); its id."""
    return (await client.call_tool_as_task("work", {"n": n, "seconds": seconds})).task.task_id


# ----------------------------------------------------------------------------- the file unwritable


async def test_tasks_that_end_while_the_file_is_unwritable_are_completed_once_it_is_writable(
    tmp_path: Path,
) -> None:
    db = tmp_path / "tasks.db"
    count, outage = 20, 3.0
    released_within = 10.0
    file = FileView(db)
    holder = sqlite3.connect(db, timeout=10.0, isolation_level=None, check_same_thread=False)
    early: list[tuple[str, str, str | None]] = []  # (how, task id, file status): seen before stored
    got_completed: dict[str, float] = {}  # task id -> when tasks/get first said completed
    results: dict[str, tuple[str, float]] = {}  # task id -> (tasks/result text, when)
    released_at = float("inf")
    all_seen = trio.Event()  # every task read completed by tasks/get, and answered by tasks/result
    try:
        with trio.fail_after(30):
            async with serving(db) as (client, _):

                def seen_completed(how: str, task_id: str) -> None:
                    # Right when the wire said so (no other Trio task runs in between): is it in the file?
                    stored = file.status(task_id)
                    if stored != TaskStatus.COMPLETED.value:
                        early.append((how, task_id, stored))

                ids: dict[int, str] = {}

                async def create(n: int) -> None:
                    seconds = 0.5 + 0.5 * n / (count - 1)  # 0.5 .. 1.0 s
                    ids[n] = await start(client, n, seconds)

                async with trio.open_nursery() as nursery:
                    for n in range(count):
                        nursery.start_soon(create, n)
                # The file is unwritable from here (once the server's write under way, if any, ended).
                await trio.to_thread.run_sync(holder.execute, "BEGIN EXCLUSIVE")
                locked_at = trio.current_time()
                at_lock = file.statuses()  # what the file holds while it cannot be written
                assert sorted(at_lock) == sorted(ids.values())  # every creation answered is stored

                async def poll(n: int) -> None:
                    task_id = ids[n]
                    while True:
                        task = await client.get_task(task_id)
                        if task.status == TaskStatus.COMPLETED:
                            seen_completed("tasks/get", task_id)
                            got_completed.setdefault(task_id, trio.current_time())
                            if len(got_completed) == len(results) == count:
                                all_seen.set()
                            return
                        assert task.status == TaskStatus.WORKING, task
                        await trio.sleep(0.05)

                async def result(n: int) -> None:
                    task_id = ids[n]
                    text = text_of(await client.task_result(task_id))
                    seen_completed("tasks/result", task_id)
                    results[task_id] = (text, trio.current_time())
                    if len(got_completed) == len(results) == count:
                        all_seen.set()

                async with trio.open_nursery() as nursery:
                    for n in range(count):
                        nursery.start_soon(poll, n)
                        nursery.start_soon(result, n)
                    await trio.sleep(outage - (trio.current_time() - locked_at))
                    # What the wire said while the file could not be written: only what it held.
                    shown_during = set(got_completed) | set(results)
                    in_file_during = {t for t, s in file.statuses().items() if s == "completed"}
                    holder.execute("ROLLBACK")
                    released_at = trio.current_time()
                    with trio.fail_after(released_within):
                        await all_seen.wait()

                # Then: what every task reads (tasks/get, tasks/result) and what the file holds.
                final = {task_id: (await client.get_task(task_id)).status for task_id in ids.values()}
                again = {n: await result_or_error(client, task_id) for n, task_id in ids.items()}
                in_file = file.statuses()
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        file.close()

    ended_during_outage = [t for t, s in at_lock.items() if s != "completed"]
    late = max(max(got_completed.values()), max(when for _, when in results.values())) - released_at
    not_completed = [t for t, status in final.items() if status != TaskStatus.COMPLETED]
    print(
        f"\n{len(ended_during_outage)}/{count} tasks ended while the file was unwritable; after it was"
        f" writable again, {count - len(not_completed)}/{count} read completed (the last {late:.2f} s"
        f" after); {len(early)} seen completed before it was in the file;"
        f" {len([t for t, s in in_file.items() if s != 'completed'])} not completed in the file"
    )
    assert early == []  # no task read completed on the wire before it was in the file
    assert shown_during <= in_file_during  # nothing shown completed while it could not be stored
    assert not_completed == []  # every finished task ends completed ...
    assert again == {n: f"done-{n}" for n in ids}  # ... with its result
    assert {n: results[task_id][0] for n, task_id in ids.items()} == again
    assert set(in_file.values()) == {"completed"}  # ... in the file too
    # The outage really hit: most tasks ended during it, and the server's writes failed.
    assert len(ended_during_outage) >= count // 2, at_lock
    assert "database is locked" in (tmp_path / "server.log").read_text()


# ----------------------------------------------------------------------------- SIGKILL under load


async def test_a_task_seen_completed_is_still_completed_after_a_sigkill_and_a_restart(tmp_path: Path) -> None:
    db = tmp_path / "tasks.db"
    quick, long_running, kill_at = 120, 5, 40
    created: dict[str, int] = {}  # task id -> n (its creation was answered)
    seen: set[str] = set()  # tasks the client saw completed before the kill
    killed = trio.Event()

    with trio.fail_after(40):
        try:
            async with serving(db) as (client, process):

                def saw(task_id: str) -> None:
                    if killed.is_set() or task_id not in created:
                        return
                    seen.add(task_id)
                    if len(seen) == kill_at:  # right after the client saw it completed
                        process.kill()  # SIGKILL
                        killed.set()

                def on_status(task: Task) -> None:
                    if task.status == TaskStatus.COMPLETED:
                        saw(task.task_id)

                client.status_callbacks.append(on_status)

                async def guarded(call: Callable[[], Any]) -> None:
                    try:
                        await call()
                    except GONE:
                        if not killed.is_set():
                            raise

                async def run(n: int, seconds: float) -> None:
                    task_id = await start(client, n, seconds)
                    created[task_id] = n
                    if seconds < 10:
                        text_of(await client.task_result(task_id))
                        saw(task_id)

                async def poll() -> None:
                    while True:
                        for task_id in list(created):
                            if (await client.get_task(task_id)).status == TaskStatus.COMPLETED:
                                saw(task_id)
                        await trio.lowlevel.checkpoint()

                async with trio.open_nursery() as nursery:
                    for n in range(long_running):
                        nursery.start_soon(guarded, lambda n=n: run(n, 60.0))
                    for n in range(long_running, long_running + quick):
                        seconds = 0.05 * (n % 8)  # 0 .. 0.35 s: ends come in a burst
                        nursery.start_soon(guarded, lambda n=n, s=seconds: run(n, s))
                    nursery.start_soon(guarded, poll)
                    await killed.wait()
                    nursery.cancel_scope.cancel()
                await process.wait()
        except* GONE:
            pass  # the dead server's connection, torn down

    assert killed.is_set() and len(seen) == kill_at
    after: dict[str, Task] = {}
    with trio.fail_after(30):
        async with serving(db) as (client, _):  # the restart (not refused: the OS dropped the lock)
            for task_id in created:
                after[task_id] = await client.get_task(task_id)  # every creation answered is kept
            lost = [task_id for task_id in seen if after[task_id].status != TaskStatus.COMPLETED]
            print(
                f"\n{len(created)} tasks created, {len(seen)} seen completed when killed, {len(lost)} of them"
                f" lost; after the restart {sum(t.status == TaskStatus.COMPLETED for t in after.values())}"
                f" completed, {sum(t.status == TaskStatus.FAILED for t in after.values())} failed"
            )
            assert lost == []
            for task_id in seen:
                assert text_of(await client.task_result(task_id)) == f"done-{created[task_id]}"
            for task_id, task in after.items():
                if task.status == TaskStatus.COMPLETED:
                    continue  # ended and stored, whether the client saw it or not
                # Running when the server died: failed by the new process, with the reason.
                assert task.status == TaskStatus.FAILED, task
                assert task.status_message == INTERRUPTED_MESSAGE
                with pytest.raises(McpError) as raised:
                    await client.task_result(task_id)
                assert raised.value.code == INTERNAL_ERROR
            long_ids = [task_id for task_id, n in created.items() if n < long_running]
            assert len(long_ids) == long_running
            assert {after[task_id].status for task_id in long_ids} == {TaskStatus.FAILED}


# ----------------------------------------------------------------------------- the lock after a kill


def another_server(script: Path, db: Path) -> subprocess.CompletedProcess[str]:
    """Start another server process on ``db`` (with nothing on its stdin) and let it end."""
    return subprocess.run(
        [sys.executable, str(script), str(db), str(db.parent / "third.log")],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )


async def test_a_server_restarted_right_after_a_sigkill_is_not_refused_by_the_file_lock(
    tmp_path: Path,
) -> None:
    db = tmp_path / "tasks.db"
    lock = tmp_path / "tasks.db.lock"
    killed: list[int] = []
    with trio.fail_after(30):
        try:
            async with serving(db) as (client, process):
                done = await start(client, 1, 0.0)
                assert text_of(await client.task_result(done)) == "done-1"
                assert lock.read_text().strip() == str(process.pid)  # it holds the file
                process.kill()  # SIGKILL
                await process.wait()
                killed.append(process.pid)
                with pytest.raises(GONE):
                    await client.get_task(done)
        except* GONE:
            assert killed  # the dead server's connection, torn down (and nothing before the kill)
        assert killed

        async with serving(db) as (client, process):  # at once: not refused
            assert (await client.get_task(done)).status == TaskStatus.COMPLETED
            assert text_of(await client.task_result(done)) == "done-1"
            assert process.pid != killed[0]
            assert lock.read_text().strip() == str(process.pid)  # the new process holds it now
            # ... and really holds it: a third process on the file is refused while it serves.
            third = await trio.to_thread.run_sync(another_server, tmp_path / "server.py", db)
            assert third.returncode != 0, third.stderr
            assert f"is in use by another trio-mcp process (pid {process.pid})" in third.stderr
            assert (await client.get_task(done)).status == TaskStatus.COMPLETED
