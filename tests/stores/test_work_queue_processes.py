"""Work that survives its process: real ``trio-mcp serve --no-work`` fronts and ``trio-mcp
worker`` processes (``queue_server.py``) on a real ``valkey-server``, a 2026-07-28 client over
HTTP, real SIGKILLs and SIGTERMs:

- a worker killed (-9) while it runs tasks: those of a tool marked ``retries`` run again on
  another worker and complete; those of a tool that is not end ``failed``, saying why;
- a worker stopped by SIGTERM drains: tasks that finish within ``--drain`` complete there, the
  others go back to the queue (retryable) and complete on another worker, or end ``failed``
  "server shut down"; the worker exits 0;
- a front with ``--no-work`` runs nothing itself: every task is run by a worker;
- 150 cancels sent through a front that neither created nor runs the tasks all stop the work
  on the worker, and the tasks read ``cancelled`` from then on;
- a rolling deploy under load — every front and every worker replaced in turn (a new one
  started, then the old one sent SIGTERM), clients going through a round-robin balancer — fails
  no client operation and no task of a retryable tool.
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

import pytest
import trio
from balancer import round_robin
from redis_server import fresh_prefix, shared_server

from trio_mcp import TaskStatus
from trio_mcp.client import Client, connect_http
from trio_mcp.protocol.messages import DetailedTask

SERVER = str(Path(__file__).with_name("queue_server.py")) + ":server"
START_TIMEOUT = 20.0
LEASE = 1.5


class Process:
    def __init__(self, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.log = log
        with open(log, "wb") as stderr:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "trio_mcp.cli", *args],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_for(self, marker: str) -> str:
        """The first line of its stderr holding ``marker``."""
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            text = self.log.read_text(errors="replace")
            for line in text.splitlines():
                if marker in line:
                    return line
            assert self.process.poll() is None, f"exited ({self.process.returncode}): {text[-3000:]}"
            assert time.monotonic() < deadline, f"did not start: {text[-3000:]}"
            time.sleep(0.05)


@contextlib.contextmanager
def processes(tmp_path: Path) -> Iterator[dict[str, object]]:
    """Start fronts and workers on a fresh prefix; all killed when the block ends."""
    env = {
        **os.environ,
        "QUEUE_REDIS_URL": shared_server().url,
        "QUEUE_PREFIX": fresh_prefix(),
        "QUEUE_LEASE": str(LEASE),
    }
    started: list[Process] = []
    count = iter(range(100))

    def front(*extra: str) -> str:
        process = Process(
            ["serve", SERVER, "--http", "127.0.0.1:0", *extra], tmp_path / f"front-{next(count)}.log", env
        )
        started.append(process)
        line = process.wait_for(" on http://")
        return "http://" + line.split(" on http://", 1)[1].strip()

    def worker(*extra: str) -> Process:
        process = Process(["worker", SERVER, *extra], tmp_path / f"worker-{next(count)}.log", env)
        started.append(process)
        process.wait_for("Working for")
        return process

    try:
        yield {"front": front, "worker": worker, "started": started}
    finally:
        for process in started:
            if process.process.poll() is None:
                process.process.kill()
            process.process.wait()


def notes(log: Path) -> list[tuple[str, str, int]]:
    return [
        (what, task, int(pid)) for what, task, pid in (line.split() for line in log.read_text().splitlines())
    ]


async def start(client: Client, tool: str, seconds: float, log: Path) -> str:
    task = await client.start_tool(tool, {"seconds": seconds, "log": str(log)})
    assert isinstance(task, DetailedTask), f"{tool} was not answered with a task: {task}"
    return task.task_id


async def until_ended(client: Client, task_ids: list[str], seconds: float) -> dict[str, DetailedTask]:
    ended: dict[str, DetailedTask] = {}
    with trio.move_on_after(seconds):
        while len(ended) < len(task_ids):
            for task_id in task_ids:
                if task_id not in ended:
                    task = await client.get_detailed_task(task_id)
                    if task.status in (TaskStatus.COMPLETED, TaskStatus.FAILED, TaskStatus.CANCELLED):
                        ended[task_id] = task
            await trio.sleep(0.1)
    return ended


async def until_started(log: Path, count: int) -> None:
    with trio.fail_after(START_TIMEOUT):
        while sum(what == "started" for what, _, _ in notes(log)) < count:  # noqa: ASYNC110
            await trio.sleep(0.05)


def text_of(task: DetailedTask) -> str:
    assert task.result is not None, task
    return str(task.result["content"][0]["text"])


@pytest.mark.timeout(120)
async def test_a_killed_workers_retryable_tasks_complete_on_another_and_the_others_fail(
    tmp_path: Path,
) -> None:
    log = tmp_path / "work.log"
    log.touch()
    with processes(tmp_path) as start_:
        url = start_["front"]("--no-work")  # type: ignore[operator]
        doomed = start_["worker"]()  # type: ignore[operator]
        async with connect_http(url, protocol="2026-07-28") as client:
            retried = [await start(client, "again", 60.0, log) for _ in range(6)]
            lost = [await start(client, "once", 60.0, log) for _ in range(3)]
            await until_started(log, 9)
            assert {pid for _, _, pid in notes(log)} == {doomed.pid}  # the front ran none
            survivor = start_["worker"]()  # type: ignore[operator]
            assert not [note for note in notes(log) if note[0] == "completed"]  # killed mid-work
            doomed.process.send_signal(signal.SIGKILL)
            doomed.process.wait()
            ended = await until_ended(client, retried + lost, 20)
    assert len(ended) == 9, f"{9 - len(ended)} tasks never ended"
    for task_id in retried:
        assert ended[task_id].status == TaskStatus.COMPLETED, ended[task_id]
        assert text_of(ended[task_id]) == f"done by {survivor.pid}"
    for task_id in lost:
        task = ended[task_id]
        assert task.status == TaskStatus.FAILED, task
        assert task.error is not None and "may not run again" in task.error["message"], task.error
    completed = [(task, pid) for what, task, pid in notes(log) if what == "completed"]
    assert sorted(completed) == sorted((task_id, survivor.pid) for task_id in retried)  # each once, there


@pytest.mark.timeout(120)
async def test_a_worker_stopped_by_sigterm_drains_then_hands_back_what_may_run_again(tmp_path: Path) -> None:
    log = tmp_path / "work.log"
    log.touch()
    with processes(tmp_path) as start_:
        url = start_["front"]("--no-work")  # type: ignore[operator]
        stopping = start_["worker"]("--drain", "1")  # type: ignore[operator]
        async with connect_http(url, protocol="2026-07-28") as client:
            quick = [await start(client, "once", 0.3, log) for _ in range(2)]
            handed = [await start(client, "again", 30.0, log) for _ in range(3)]
            cut = [await start(client, "once", 30.0, log) for _ in range(2)]
            await until_started(log, 7)
            other = start_["worker"]()  # type: ignore[operator]
            stopping.process.send_signal(signal.SIGTERM)
            with trio.fail_after(15):
                while stopping.process.poll() is None:  # noqa: ASYNC110
                    await trio.sleep(0.05)
            assert stopping.process.returncode == 0, stopping.log.read_text()[-3000:]
            ended = await until_ended(client, quick + cut + handed, 10)
    assert len(ended) == 7, f"{7 - len(ended)} tasks never ended"
    for task_id in handed:  # handed back, then run again on the other worker
        assert text_of(ended[task_id]) == f"done by {other.pid}"
    for task_id in quick:
        assert text_of(ended[task_id]) == f"done by {stopping.pid}"
    for task_id in cut:
        task = ended[task_id]
        assert task.status == TaskStatus.FAILED and task.error is not None, task
        assert "shut down" in task.error["message"], task.error


@pytest.mark.timeout(120)
async def test_150_cancels_through_another_front_stop_every_queued_work(tmp_path: Path) -> None:
    count = 150
    log = tmp_path / "work.log"
    log.touch()
    with processes(tmp_path) as start_:
        creating, cancelling = start_["front"]("--no-work"), start_["front"]("--no-work")  # type: ignore[operator]
        runner = start_["worker"]()  # type: ignore[operator]
        async with (
            connect_http(creating, protocol="2026-07-28") as on_a,
            connect_http(cancelling, protocol="2026-07-28") as on_b,
        ):
            ids: list[str] = []
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:

                    async def one() -> None:
                        ids.append(await start(on_a, "again", 60.0, log))

                    for _ in range(count):
                        nursery.start_soon(one)
            await until_started(log, count)
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    for task_id in ids:
                        nursery.start_soon(on_b.cancel_task, task_id)
            with trio.move_on_after(10):
                while sum(what == "stopped" for what, _, _ in notes(log)) < count:  # noqa: ASYNC110
                    await trio.sleep(0.1)
            stopped = {task for what, task, pid in notes(log) if what == "stopped" and pid == runner.pid}
            assert stopped == set(ids), f"{count - len(stopped)}/{count} works not stopped"
            for client in (on_a, on_b):
                statuses = {(await client.get_task(task_id)).status for task_id in ids}
                assert statuses == {TaskStatus.CANCELLED}
    assert not [note for note in notes(log) if note[0] == "completed"]


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


@pytest.mark.timeout(120)
async def test_a_rolling_deploy_under_load_fails_no_operation_and_no_retryable_task(tmp_path: Path) -> None:
    log = tmp_path / "work.log"
    log.touch()
    with processes(tmp_path) as start_:
        front, worker = start_["front"], start_["worker"]
        fronts = [front("--no-work", "--grace", "2") for _ in range(2)]  # type: ignore[operator]
        workers = [worker("--drain", "0.5") for _ in range(2)]  # type: ignore[operator]
        ports = [port_of(url) for url in fronts]
        failures: list[str] = []
        created: list[str] = []
        operations = 0
        async with trio.open_nursery() as outer, trio.open_nursery() as nursery:
            balancer = await outer.start(round_robin, ports)
            url = f"http://127.0.0.1:{balancer}/mcp"
            loading = trio.Event()

            async def load(client_number: int) -> None:
                nonlocal operations
                async with connect_http(url, protocol="2026-07-28") as client:
                    while not loading.is_set():
                        try:
                            task_id = await start(client, "again", 1.0, log)
                            created.append(task_id)
                            await client.get_detailed_task(task_id)
                            operations += 2
                        except Exception as exc:  # every failure counts, whatever it is
                            failures.append(f"client {client_number}: {exc!r}")
                        await trio.sleep(0.05)

            for number in range(4):
                nursery.start_soon(load, number)
            await trio.sleep(1.0)
            for index in range(len(ports)):  # each front in turn: a new one, then the old one stops
                new = front("--no-work", "--grace", "2")  # type: ignore[operator]
                old = ports[index]
                ports[index] = port_of(new)
                for process in list(start_["started"]):  # type: ignore[call-overload]
                    if f"127.0.0.1:{old}/" in process.log.read_text(errors="replace"):
                        process.process.send_signal(signal.SIGTERM)
                await trio.sleep(1.0)
            for index, old_worker in enumerate(list(workers)):  # then each worker
                workers[index] = worker("--drain", "0.5")  # type: ignore[operator]
                old_worker.process.send_signal(signal.SIGTERM)
                await trio.sleep(1.0)
            await trio.sleep(0.5)
            loading.set()
            outer.cancel_scope.cancel()  # the balancer: once the load's last requests are answered
        async with connect_http(f"http://127.0.0.1:{ports[0]}/mcp", protocol="2026-07-28") as client:
            ended = await until_ended(client, created, 20)
    assert not failures, f"{len(failures)}/{operations} client operations failed: {failures[:5]}"
    assert len(ended) == len(created), f"{len(created) - len(ended)} tasks never ended"
    not_completed = {
        task_id: task.status for task_id, task in ended.items() if task.status != TaskStatus.COMPLETED
    }
    assert not not_completed, f"{len(not_completed)}/{len(created)} retryable tasks did not complete"
    assert len(created) >= 20  # the load was real
