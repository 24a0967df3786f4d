"""A server for ``test_work_queue_processes.py``, served by the CLI: ``trio-mcp serve
tests/stores/queue_server.py:server --http 127.0.0.1:0 [--no-work]`` (fronts) and ``trio-mcp
worker tests/stores/queue_server.py:server`` (workers), its Redis store named by environment
variables:

- ``QUEUE_REDIS_URL`` (required) and ``QUEUE_PREFIX`` (its key prefix);
- ``QUEUE_LEASE``: the lease on a running task, seconds (default 2: a dead process's tasks are
  taken up again within about 3 s);
- ``QUEUE_MAX_RUNNING``: tasks one process runs at once (default 1000).

Its tools, each a task (``task_support="required"``), each noting in the file ``log`` when it
starts and when it completes or is stopped (``started|completed|stopped <task id> <pid>``); a
task's first run takes
``seconds``, a run again 0.2 s:

- ``again(seconds, log)``: may run again if its process dies (``retries=2``);
- ``once(seconds, log)``: may not (no ``retries``): its task fails if its process dies.

Importing it does nothing but declare the server; the environment is read when the store is made.
"""

from __future__ import annotations

import os

import trio

from trio_mcp import Context, Server
from trio_mcp.protocol.table import TaskLimits
from trio_mcp.stores.redis import RedisTaskStore


def make_store() -> RedisTaskStore:
    return RedisTaskStore(os.environ["QUEUE_REDIS_URL"], prefix=os.environ.get("QUEUE_PREFIX", "queue:"))


server = Server(
    "queue",
    version="1",
    store=make_store,
    limits=TaskLimits(
        lease_seconds=float(os.environ.get("QUEUE_LEASE", "2")),
        max_running_work=int(os.environ.get("QUEUE_MAX_RUNNING", "1000")),
    ),
)


def _ran_before(path: str, task_id: str | None) -> bool:
    with open(path, encoding="utf-8") as file:
        return f"started {task_id} " in file.read()


def _note(path: str, what: str, task_id: str | None) -> None:
    with open(path, "a", encoding="utf-8") as file:  # one short append: one line, whole
        file.write(f"{what} {task_id} {os.getpid()}\n")


async def _work(seconds: float, log: str, ctx: Context) -> str:
    again = _ran_before(log, ctx.task_id)
    _note(log, "started", ctx.task_id)
    try:
        await trio.sleep(0.2 if again else seconds)  # a run again is quick
    except trio.Cancelled:
        _note(log, "stopped", ctx.task_id)
        raise
    _note(log, "completed", ctx.task_id)
    return f"done by {os.getpid()}"


@server.tool(task_support="required", retries=2)
async def again(seconds: float, log: str, ctx: Context) -> str:
    """Work for ``seconds``; run again elsewhere if its process dies."""
    return await _work(seconds, log, ctx)


@server.tool(task_support="required")
async def once(seconds: float, log: str, ctx: Context) -> str:
    """Work for ``seconds``; never run twice."""
    return await _work(seconds, log, ctx)
