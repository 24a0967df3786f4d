"""One serving process per SQLite task file, enforced with an OS lock (``PATH.lock``), checked
with real processes; and ``unfinished``, what a durable store hands the runtime on start."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import served

from trio_mcp import Server
from trio_mcp.protocol.records import TaskOutcome, TaskRecord, new_record
from trio_mcp.protocol.tasks import TaskStatus
from trio_mcp.stores.base import DurableTaskStore
from trio_mcp.stores.sqlite import SqliteTaskStore, StoreLocked

ROOT = Path(__file__).resolve().parents[2]

HOLDER = textwrap.dedent(
    """
    import sys, trio
    from trio_mcp.stores.sqlite import SqliteTaskStore

    async def main():
        store = await SqliteTaskStore.open(sys.argv[1])
        print("holding", flush=True)
        await trio.sleep_forever()

    trio.run(main)
    """
)
"""A process that opens the store on ``argv[1]`` (taking its lock) and holds it until killed."""

BARE_LOCK = textwrap.dedent(
    """
    import fcntl, os, sys, time
    fd = os.open(sys.argv[1] + ".lock", os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.ftruncate(fd, 0)
    os.write(fd, b"not a pid")
    print("holding", flush=True)
    time.sleep(600)
    """
)
"""A process holding the lock file with no pid in it (garbled)."""

OPENER = textwrap.dedent(
    """
    import sys, trio
    from trio_mcp.stores.sqlite import SqliteTaskStore, StoreLocked

    async def main():
        try:
            store = await SqliteTaskStore.open(sys.argv[1])
        except StoreLocked as exc:
            print(exc)
            sys.exit(3)
        print(await store.count())
        await store.aclose()

    trio.run(main)
    """
)
"""A process that opens the store once: prints its record count, or the lock error (exit 3)."""

SERVER_FILE = textwrap.dedent(
    """
    from trio_mcp import Server

    server = Server("locked-out")

    if __name__ == "__main__":
        server.run()
    """
)
"""A server file ending in ``server.run()``: ``python server.py --store ...``."""


@contextlib.contextmanager
def holding(path: Path, script: str = HOLDER) -> Iterator[subprocess.Popen[bytes]]:
    """A child process holding the lock of the task file ``path`` for the block; killed after."""
    process = subprocess.Popen(
        [sys.executable, "-c", script, str(path)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert process.stdout is not None
        deadline = time.monotonic() + 15
        seen = b""
        while b"holding" not in seen:
            assert time.monotonic() < deadline, f"the holder did not start: {seen!r}"
            ready, _, _ = select.select([process.stdout], [], [], 0.2)
            if ready:
                chunk = os.read(process.stdout.fileno(), 4096)
                assert chunk, (
                    f"the holder exited: {seen!r} {process.stderr.read() if process.stderr else b''!r}"
                )
                seen += chunk
        yield process
    finally:
        process.kill()
        process.wait()
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()


def open_in_child(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", OPENER, str(path)], cwd=ROOT, capture_output=True, text=True, timeout=30
    )


def refusal(path: Path, pid: int | None) -> str:
    """The one line a store on ``path`` is refused with while process ``pid`` holds it."""
    holder = f" (pid {pid})" if pid is not None else ""
    real = os.path.realpath(path)
    return f"{real} is in use by another trio-mcp process{holder}; one server process per task file"


def record(task_id: str) -> TaskRecord:
    return new_record(task_id, "alice", now=0.0, ttl_ms=60_000, poll_interval_ms=500)


# ----------------------------------------------------------------------------- across processes


async def test_a_second_process_is_refused_with_one_line_naming_the_file_and_the_holder(
    tmp_path: Path,
) -> None:
    path = tmp_path / "tasks.db"
    with holding(path) as holder:
        with pytest.raises(StoreLocked) as raised:
            await SqliteTaskStore.open(path)
        message = str(raised.value)
        assert message == refusal(path, holder.pid)
        assert "\n" not in message
        store = SqliteTaskStore(path)  # lazily: the first call is refused, and again
        for _ in range(2):
            with pytest.raises(StoreLocked):
                await store.count()
        await store.aclose()
        with pytest.raises(StoreLocked):  # a server refuses to start: it connects its store first
            async with Server("second", store=lambda: SqliteTaskStore(path)).open():
                pass  # pragma: no cover
        assert holder.poll() is None


async def test_a_lock_file_without_a_pid_still_refuses(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    with holding(path, BARE_LOCK):
        with pytest.raises(StoreLocked) as raised:
            await SqliteTaskStore.open(path)
    assert str(raised.value) == refusal(path, None)


async def test_the_lock_dies_with_a_process_killed_with_sigkill(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    with holding(path) as holder:
        with pytest.raises(StoreLocked):
            await SqliteTaskStore.open(path)
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        async with SqliteTaskStore(path) as store:
            await store.create(record("t1"))
            assert (path.parent / "tasks.db.lock").read_text().strip() == str(os.getpid())
            refused = open_in_child(path)  # and now this process holds it
            assert refused.returncode == 3, refused.stderr
            assert refused.stdout.strip() == refusal(path, os.getpid())
    opened = open_in_child(path)  # released at aclose
    assert (opened.returncode, opened.stdout.strip()) == (0, "1"), opened.stderr


def test_serve_exits_3_with_one_line_while_another_process_serves_the_file(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    url = f"sqlite:///{path}"
    script = tmp_path / "server.py"
    script.write_text(SERVER_FILE)
    with served(
        "examples/demo_server.py:server",
        "--http",
        "127.0.0.1:0",
        "--store",
        url,
        url=rb"http://127\.0\.0\.1:\d+/mcp",
    ):
        pid = int((tmp_path / "tasks.db.lock").read_text())
        line = refusal(path, pid)
        commands = {
            "trio-mcp serve": [
                sys.executable,
                "-m",
                "trio_mcp.cli",
                "serve",
                "examples/demo_server.py:server",
            ],
            "python server.py": [sys.executable, str(script)],
        }
        seconds = {  # both at once: each is refused before it listens
            name: subprocess.Popen(
                [*command, "--http", "127.0.0.1:0", "--store", url],
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env={**os.environ, "COLUMNS": "80"},
            )
            for name, command in commands.items()
        }
        try:
            for name, second in seconds.items():
                _, stderr = second.communicate(timeout=30)
                assert second.returncode == 3, (name, stderr)
                lines = stderr.strip().splitlines()
                assert len(lines) == 1, (name, stderr)  # no traceback
                assert lines[0].endswith(line), (name, stderr)
        finally:
            for second in seconds.values():
                second.kill()
                second.communicate()


# ----------------------------------------------------------------------------- in one process


async def test_stores_of_one_process_share_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "tasks.db"
    first = await SqliteTaskStore.open(path)
    second = await SqliteTaskStore.open(path)  # a second store object: not refused
    await first.create(record("t1"))
    assert await second.get("t1") == record("t1")
    await first.aclose()
    assert await second.count() == 1  # still connected, the lock still held
    assert open_in_child(path).returncode == 3
    async with SqliteTaskStore(path) as reopened:  # a store reopened after another closed
        assert await reopened.count() == 1
    await second.aclose()
    again = await SqliteTaskStore.open(path)  # reopened once every store closed
    await again.aclose()
    opened = open_in_child(path)  # and no store of this process holds it now
    assert (opened.returncode, opened.stdout.strip()) == (0, "1"), opened.stderr


async def test_memory_takes_no_lock(tmp_path: Path) -> None:
    async with SqliteTaskStore(":memory:") as one, SqliteTaskStore(":memory:") as two:
        await one.create(record("t1"))
        assert await two.get("t1") is None


# ----------------------------------------------------------------------------- unfinished


async def test_unfinished_lists_the_working_and_input_required_records_oldest_first(tmp_path: Path) -> None:
    async with SqliteTaskStore(tmp_path / "tasks.db") as store:
        assert isinstance(store, DurableTaskStore)
        for task_id in ("w1", "done", "ask", "w2", "failed", "cancelled", "w3"):
            await store.create(record(task_id))
        assert await store.update(record("done").settle(TaskOutcome(result={"content": []}), now=1.0))
        assert await store.update(
            record("failed").settle(TaskOutcome(result={"content": []}), now=1.0, status=TaskStatus.FAILED)
        )
        assert await store.update(
            record("cancelled").settle(
                TaskOutcome(result={"content": []}), now=1.0, status=TaskStatus.CANCELLED
            )
        )
        asking = record("ask").with_input_requests(
            {"r1": {"method": "elicitation/create"}}, TaskStatus.INPUT_REQUIRED, "?", now=1.0
        )
        assert await store.update(asking)
        # A later write does not make a record newer: the order is the order they were stored.
        assert await store.update(
            record("w1").with_input_requests({"r": {"method": "x"}}, TaskStatus.INPUT_REQUIRED, "?", now=2.0)
        )

        unfinished = await store.unfinished(10)
        assert [r.task_id for r in unfinished] == ["w1", "ask", "w2", "w3"]
        assert [r.status for r in unfinished] == [
            TaskStatus.INPUT_REQUIRED,
            TaskStatus.INPUT_REQUIRED,
            TaskStatus.WORKING,
            TaskStatus.WORKING,
        ]
        assert unfinished[1] == asking
        assert [r.task_id for r in await store.unfinished(2)] == ["w1", "ask"]
        assert await store.unfinished(0) == []
        assert await store.unfinished(-1) == []
        assert await store.count() == 7  # nothing changed

        await store.delete("w1")
        assert [r.task_id for r in await store.unfinished(1)] == ["ask"]
