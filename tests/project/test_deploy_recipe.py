"""``examples/deploy/local_cluster.py`` as its README runs it: Redis, two fronts with
``--no-work``, two workers and a balancer; 2026-07-28 tasks through the balancer all run on the
workers and complete; SIGTERM stops everything in order and the launcher exits 0."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import trio
from redis_server import server_binary

from trio_mcp import TaskStatus
from trio_mcp.client import connect_http
from trio_mcp.protocol.messages import DetailedTask

RECIPE = Path(__file__).resolve().parents[2] / "examples" / "deploy" / "local_cluster.py"


async def test_the_local_cluster_runs_tasks_on_its_workers_and_stops_cleanly() -> None:
    env = {**os.environ, "REDIS_SERVER": str(server_binary())}
    command = [sys.executable, str(RECIPE), "--fronts", "2", "--workers", "2", "--port", "0", "--drain", "2"]
    process = await trio.lowlevel.open_process(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env
    )
    assert process.stdout is not None
    try:
        seen = b""
        with trio.fail_after(60):
            while (found := re.search(rb"Cluster on (http://\S+)", seen)) is None:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, seen
                seen += chunk
        url = found.group(1).decode()
        async with connect_http(url, protocol="2026-07-28") as client:
            started = [await client.start_tool("report", {"seconds": 1.5}) for _ in range(4)]
            assert all(isinstance(task, DetailedTask) for task in started)  # past the 1 s window
            results = []
            with trio.fail_after(20):
                for task in started:
                    assert isinstance(task, DetailedTask)
                    result = await client.task_result(task.task_id, default_interval_ms=100)
                    results.append(result.text)
                    assert (await client.get_task(task.task_id)).status == TaskStatus.COMPLETED
        assert all(text.startswith("report built by worker ") for text in results), results
        process.send_signal(signal.SIGTERM)
        with trio.fail_after(30):
            await process.wait()
        assert process.returncode == 0
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
