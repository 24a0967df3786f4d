"""The runtime on a Redis store that fails: real server processes (``redis_fault_server.py``,
served over Streamable HTTP) on a real ``valkey-server`` that is killed and restarted, frozen
(SIGSTOP), or whose event subscription is cut, with clients over HTTP (2025-11-25 tasks):

- tasks whose work ends while Redis is down are all stored ``completed`` once it is back;
- with Redis frozen, every ``tasks/get`` is answered (a task, or -32603) within the store's
  timeout and a second;
- 150 cancels sent through a process that does not run the tasks all stop the work, and the
  tasks read ``cancelled`` on both processes from then on;
- a ``tasks/result`` waiting on another process's task is answered though the ``changed``
  event of its end never reached it;
- two processes on a TLS Redis (``rediss://``, a private CA and a client certificate) serve
  tasks end to end: records, leases and events all go over TLS.

The module runs its own persistent server (``tests/redis_server.py``); each test works under
a fresh key prefix with server processes of its own, killed (and Redis resumed) on the way out.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest
import trio
from redis_server import RedisServer, TlsTerminator, fresh_prefix, make_certificates

from trio_mcp import McpError, TaskStatus
from trio_mcp.client import Client, connect_http
from trio_mcp.protocol.errors import INTERNAL_ERROR
from trio_mcp.stores.redis import RedisTaskStore

SERVER_SCRIPT = Path(__file__).with_name("redis_fault_server.py")
TOKEN = "faults-token"
"""Every client sends it: the tasks belong to one identity, whichever process a client uses."""
START_TIMEOUT = 15.0
STORE_TIMEOUT = 1.0
"""The deadline of each store call in the server processes of the frozen-server test (seconds;
the others have the store's default, 5 s)."""


@pytest.fixture(scope="module")
def module_redis() -> Iterator[RedisServer]:
    with RedisServer(persistent=True) as server:
        yield server


@pytest.fixture
def redis(module_redis: RedisServer) -> Iterator[RedisServer]:
    """The module's Redis, running (a test before may have killed it), resumed after the test
    whatever happens in it."""
    module_redis.start()
    try:
        yield module_redis
    finally:
        if module_redis.process is not None:
            os.kill(module_redis.pid, signal.SIGCONT)


# ----------------------------------------------------------------------------- server processes


@attrs.frozen
class ServerProcess:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


def _url_of(process: subprocess.Popen[bytes], log: Path, deadline: float) -> str:
    """The URL the process writes to its log once it serves."""
    marker = " on http://"
    while True:
        text = log.read_text(errors="replace")
        for line in text.splitlines():
            if line.startswith("Serving ") and marker in line:
                return "http://" + line.split(marker, 1)[1].strip()
        assert process.poll() is None, f"the server process exited ({process.returncode}): {text[-3000:]}"
        assert time.monotonic() < deadline, f"the server process did not start: {text[-3000:]}"
        time.sleep(0.05)


@contextlib.contextmanager
def server_processes(
    redis_urls: list[str], prefix: str, directory: Path, *, store_timeout: float = 5.0
) -> Iterator[list[ServerProcess]]:
    """A server process on each of these Redis URLs, all under ``prefix`` with this store
    timeout, started together; killed when the block ends. Their stderr goes to files in
    ``directory`` (shown when one fails to start)."""
    started: list[tuple[subprocess.Popen[bytes], Path]] = []
    try:
        for index, redis_url in enumerate(redis_urls):
            log = directory / f"server-{index}.log"
            env = {
                **os.environ,
                "FAULT_REDIS_URL": redis_url,
                "FAULT_REDIS_PREFIX": prefix,
                "FAULT_STORE_TIMEOUT": str(store_timeout),
            }
            with open(log, "wb") as stderr:
                process = subprocess.Popen(
                    [sys.executable, str(SERVER_SCRIPT), "--http", "127.0.0.1:0", "--token", TOKEN],
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=stderr,
                    env=env,
                )
            started.append((process, log))
        deadline = time.monotonic() + START_TIMEOUT
        yield [ServerProcess(process, _url_of(process, log, deadline), log) for process, log in started]
    finally:
        for process, _ in started:
            if process.poll() is None:
                process.kill()
            process.wait()


def connect(server: ServerProcess) -> contextlib.AbstractAsyncContextManager[Client]:
    return connect_http(server.url, token=TOKEN)


async def create_all(client: Client, calls: list[tuple[str, dict[str, object]]]) -> list[str]:
    """Create these tasks concurrently; their ids, in order."""
    ids: list[str] = [""] * len(calls)

    async def create(index: int, name: str, arguments: dict[str, object]) -> None:
        ids[index] = (await client.call_tool_as_task(name, arguments)).task.task_id

    async with trio.open_nursery() as nursery:
        for index, (name, arguments) in enumerate(calls):
            nursery.start_soon(create, index, name, arguments)
    return ids


async def status_or_error(client: Client, task_id: str) -> str:
    """``tasks/get``: the task's status, or ``error <code>``."""
    try:
        return (await client.get_task(task_id)).status.value
    except McpError as exc:
        return f"error {exc.code}"


# ----------------------------------------------------------------------------- a restart


async def test_tasks_that_end_while_redis_restarts_are_all_stored_completed(
    redis: RedisServer, tmp_path: Path
) -> None:
    prefix = fresh_prefix()
    count = 20
    with server_processes([redis.url], prefix, tmp_path) as [a]:
        async with connect(a) as client:
            started = trio.current_time()
            # Each work ends between 1 and 1.95 s after its creation: while Redis is down.
            ids = await create_all(client, [("nap", {"seconds": 1.0 + i * 0.05}) for i in range(count)])
            created = trio.current_time()
            await trio.sleep(max(0.0, 0.3 - (created - started)))
            redis.kill()  # SIGKILL; appendfsync always: everything acknowledged is on disk
            down = trio.current_time()
            try:
                await trio.sleep(2.2)
            finally:
                redis.start()  # same port, same directory: it reads its append-only file
            back = trio.current_time()
            assert down - started < 1.0, "Redis went down after a task had ended"
            assert back - created > 1.95 + 0.1, "Redis came back before every task had ended"

            seen: dict[str, str] = {}
            left = set(ids)
            with trio.move_on_after(10):
                while left:
                    async with trio.open_nursery() as nursery:
                        for task_id in list(left):

                            async def read(task_id: str = task_id) -> None:
                                seen[task_id] = await status_or_error(client, task_id)
                                if seen[task_id] != "working":
                                    left.discard(task_id)

                            nursery.start_soon(read)
                    if left:
                        await trio.sleep(0.1)
            settled = trio.current_time() - back
            lost = {task_id: status for task_id, status in seen.items() if status != "completed"}
            assert not lost, (
                f"{len(lost)}/{count} tasks not completed within 10 s of Redis coming back:"
                f" {sorted(lost.values())}\n{a.log_tail()}"
            )
            with trio.fail_after(5):
                for index, task_id in enumerate(ids):
                    assert (await client.task_result(task_id)).text == f"napped {1.0 + index * 0.05:g}s"

    # What the clients were shown is what Redis holds.
    async with RedisTaskStore(redis.url, prefix=prefix) as store:
        for task_id in ids:
            record = await store.get(task_id)
            assert record is not None and record.status == TaskStatus.COMPLETED, record
            assert record.outcome is not None and record.outcome.result is not None
    print(f"20/20 tasks completed {settled:.2f} s after Redis came back")


# ----------------------------------------------------------------------------- a frozen server


async def test_with_redis_frozen_every_tasks_get_is_answered_within_the_store_timeout(
    redis: RedisServer, tmp_path: Path
) -> None:
    prefix = fresh_prefix()
    with server_processes([redis.url] * 2, prefix, tmp_path, store_timeout=STORE_TIMEOUT) as [a, b]:
        async with connect(a) as on_a, connect(b) as on_b:
            with trio.fail_after(10):
                finished = await create_all(on_a, [("nap", {"seconds": 0})] * 10)
                for task_id in finished:  # answered once the end is stored: A's actor is gone
                    assert (await on_a.task_result(task_id)).text == "napped 0s"
                running = await create_all(on_a, [("nap", {"seconds": 60})] * 10)
                for task_id in running:
                    assert (await on_b.get_task(task_id)).status == TaskStatus.WORKING
            requests = (
                [(on_a, task_id, "finished, through A") for task_id in finished]
                + [(on_a, task_id, "running, through A") for task_id in running]
                + [(on_b, task_id, "running on A, through B") for task_id in running]
            )
            answers: list[tuple[str, str, float]] = []

            async def get(client: Client, task_id: str, what: str) -> None:
                made = trio.current_time()
                with trio.move_on_after(30):
                    answer = await status_or_error(client, task_id)
                    answers.append((what, answer, trio.current_time() - made))
                    return
                answers.append((what, "no answer", trio.current_time() - made))

            os.kill(redis.pid, signal.SIGSTOP)
            try:
                async with trio.open_nursery() as nursery:
                    for client, task_id, what in requests:
                        nursery.start_soon(get, client, task_id, what)
            finally:
                os.kill(redis.pid, signal.SIGCONT)

            slowest = max(took for _, _, took in answers)
            assert len(answers) == 30
            # With a shared store every process answers from the store (none answers older than
            # another): frozen, each request gets -32603 within the store's deadline.
            assert [answer for _, answer, _ in answers] == [f"error {INTERNAL_ERROR}"] * 30, answers
            assert slowest <= STORE_TIMEOUT + 1.0, sorted((round(took, 2), what) for what, _, took in answers)

            # Redis resumed: everything is answered again, and a new task runs.
            with trio.fail_after(STORE_TIMEOUT * 3 + 5):
                for task_id in finished:
                    assert (await on_b.get_task(task_id)).status == TaskStatus.COMPLETED
                    assert (await on_a.get_task(task_id)).status == TaskStatus.COMPLETED
                for task_id in running:
                    assert (await on_b.get_task(task_id)).status == TaskStatus.WORKING
                    assert (await on_a.get_task(task_id)).status == TaskStatus.WORKING
                (task_id,) = await create_all(on_a, [("nap", {"seconds": 0})])
                assert (await on_b.task_result(task_id)).text == "napped 0s"
    kinds = sorted({(what, answer) for what, answer, _ in answers})
    print(f"30 tasks/get on a frozen Redis: slowest answered in {slowest:.2f} s; answers: {kinds}")


# ----------------------------------------------------------------------------- cancels elsewhere


async def test_150_cancels_through_another_process_stop_every_work(
    redis: RedisServer, tmp_path: Path
) -> None:
    count = 150
    seconds = 30.0  # never ends by itself in the test
    work_log = tmp_path / "work.log"
    work_log.touch()
    prefix = fresh_prefix()
    with server_processes([redis.url] * 2, prefix, tmp_path) as [a, b]:
        async with connect(a) as on_a, connect(b) as on_b:
            began = time.time()
            with trio.fail_after(20):
                ids = await create_all(
                    on_a, [("steps", {"seconds": seconds, "interval": 0.03, "log": str(work_log)})] * count
                )
            # Every status each process showed, in order, and when each cancel was acknowledged.
            shown: dict[str, dict[str, list[str]]] = {task_id: {"A": [], "B": []} for task_id in ids}
            acknowledged: dict[str, float] = {}
            refused: dict[str, str] = {}

            async def cancel(task_id: str) -> None:
                try:
                    task = await on_b.cancel_task(task_id)
                except McpError as exc:
                    refused[task_id] = f"error {exc.code}: {exc.message}"
                    return
                acknowledged[task_id] = time.time()
                shown[task_id]["B"].append(task.status.value)
                for name, client in (("A", on_a), ("B", on_b)):  # read at once on both processes
                    shown[task_id][name].append(await status_or_error(client, task_id))

            created = time.time()
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    for task_id in ids:
                        nursery.start_soon(cancel, task_id)
            assert not refused, f"{len(refused)}/{count} cancels refused: {sorted(set(refused.values()))}"

            # Every work stops (it notes "stopped", never "completed"), soon after its cancel.
            def ends() -> dict[str, tuple[str, float]]:
                found: dict[str, tuple[str, float]] = {}
                for line in work_log.read_text().splitlines():
                    what, task_id, when = line.split()
                    if what != "started":
                        found[task_id] = (what, float(when))
                return found

            with trio.move_on_after(5):
                while len(ends()) < count:  # noqa: ASYNC110 (another process writes the file)
                    await trio.sleep(0.1)
            ended = ends()
            completed = [task_id for task_id, (what, _) in ended.items() if what == "completed"]
            assert not completed, f"{len(completed)}/{count} works ran on to completed: " + "; ".join(
                f"{task_id}: ended {ended[task_id][1] - acknowledged.get(task_id, float('nan')):+.2f} s after"
                f" the acknowledgement, seen {shown[task_id]}"
                for task_id in completed
            )
            assert len(ended) == count, (
                f"{count - len(ended)}/{count} works still running 5 s after the cancels"
            )
            late = {
                task_id: round(when - acknowledged[task_id], 2)
                for task_id, (_, when) in ended.items()
                if when - acknowledged[task_id] > 3.0
            }
            assert not late, f"{len(late)} works stopped over 3 s after their cancel was acknowledged: {late}"

            # Every task reads cancelled on both processes from then on, never anything after.
            async def read_again(task_id: str) -> None:
                for name, client in (("A", on_a), ("B", on_b)):
                    shown[task_id][name].append(await status_or_error(client, task_id))

            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    for task_id in ids:
                        nursery.start_soon(read_again, task_id)
            backwards = {}  # each process's reads: working, then cancelled for good
            for task_id, views in shown.items():
                for name, statuses in views.items():
                    first = statuses.index("cancelled") if "cancelled" in statuses else len(statuses)
                    before, after = statuses[:first], statuses[first:]
                    if not after or set(before) - {"working"} or set(after) != {"cancelled"}:
                        backwards[f"{name} {task_id}"] = statuses
            assert not backwards, f"{len(backwards)} task views not ending cancelled for good: {backwards}"
    stale = sum(views["A"][0] != "cancelled" for views in shown.values())
    assert not stale, f"A showed {stale} tasks working after B acknowledged their cancel"  # never backwards
    slowest = max(when - acknowledged[task_id] for task_id, (_, when) in ended.items())
    print(
        f"{count} tasks created in {created - began:.2f} s, cancelled through B in"
        f" {max(acknowledged.values()) - created:.2f} s; every work stopped, the slowest {slowest:.2f} s"
        f" after its acknowledgement; A showed {stale} of them working right after it"
    )


# ----------------------------------------------------------------------------- missed events


async def test_a_remote_result_waiter_is_answered_though_the_end_event_was_missed(
    redis: RedisServer, tmp_path: Path
) -> None:
    # B logs in as a user of its own, so that its subscription alone can be cut: without the
    # right to the store's channel, its subscribed connection is closed and it cannot
    # subscribe again (a subscription lost for a while, as in a network partition).
    user = ("faults-b", "b-secret")
    assert redis.command("ACL", "SETUSER", user[0], "on", f">{user[1]}", "~*", "&*", "+@all") == b"+OK\r\n"
    prefix = fresh_prefix()
    channel = RedisTaskStore(redis.url, prefix=prefix).channel
    b_url = f"redis://{user[0]}:{user[1]}@127.0.0.1:{redis.port}/0"
    try:
        with server_processes([redis.url, b_url], prefix, tmp_path) as [a, b]:
            async with connect(a) as on_a, connect(b) as on_b:
                (task_id,) = await create_all(on_a, [("nap", {"seconds": 1.0})])
                created = trio.current_time()
                answered: list[float] = []

                async def wait_on_b() -> None:
                    assert (await on_b.task_result(task_id)).text == "napped 1s"
                    answered.append(trio.current_time())

                with trio.move_on_after(1.0 + 8):  # the test fails below, not at the TTL
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(wait_on_b)
                        await trio.sleep(0.3)  # B has read the task (working): it waits for news
                        assert redis.command("ACL", "SETUSER", user[0], "resetchannels") == b"+OK\r\n"
                        cut = trio.current_time()
                        try:
                            await trio.sleep(0.2)
                            # Only A is subscribed now: B misses the "changed" event of the end.
                            assert redis.command("PUBSUB", "NUMSUB", channel).endswith(b":1\r\n")
                            await trio.sleep(1.3)  # A's work ends meanwhile
                        finally:
                            redis.command("ACL", "SETUSER", user[0], "allchannels")
                        assert cut - created < 1.0, "the subscription was cut after the work had ended"
                assert answered, f"B's tasks/result was not answered within {1.0 + 8} s"
                assert answered[0] - created <= 1.0 + 3.0, answered[0] - created
    finally:
        redis.command("ACL", "DELUSER", user[0])
    print(f"B's tasks/result answered {answered[0] - created - 1.0:.2f} s after the work ended")


# ----------------------------------------------------------------------------- TLS


async def test_two_processes_on_a_tls_redis_serve_tasks_end_to_end(
    redis: RedisServer, tmp_path: Path
) -> None:
    files = make_certificates(tmp_path)
    prefix = fresh_prefix()
    with TlsTerminator(redis.port, files, client_certificates=True) as tls:
        url = (
            f"rediss://127.0.0.1:{tls.port}/0?ssl_ca_certs={files.ca}"
            f"&ssl_certfile={files.client_cert}&ssl_keyfile={files.client_key}"
        )
        with server_processes([url, url], prefix, tmp_path) as [a, b]:
            async with connect(a) as on_a, connect(b) as on_b:
                with trio.fail_after(15):
                    done, running = await create_all(
                        on_a, [("nap", {"seconds": 0.3}), ("nap", {"seconds": 60})]
                    )
                    # B answers A's task once A's end reaches it (a record and an event, over TLS).
                    assert (await on_b.task_result(done)).text == "napped 0.3s"
                    assert (await on_b.cancel_task(running)).status == TaskStatus.CANCELLED
                    assert (await on_a.get_task(running)).status == TaskStatus.CANCELLED
                    assert (await on_a.get_task(done)).status == TaskStatus.COMPLETED
    async with RedisTaskStore(redis.url, prefix=prefix) as store:  # the records are in the real server
        stored = await store.get(done)
        assert stored is not None and stored.status == TaskStatus.COMPLETED
