"""A server process for ``test_redis_runtime_faults.py``: a :class:`~trio_mcp.Server` on a
Redis task store, run as ``python tests/stores/redis_fault_server.py --http 127.0.0.1:0
--token TOKEN`` with the store named by environment variables:

- ``FAULT_REDIS_URL`` (required): the URL of the store (``redis://``, ``rediss://``, ``redis+sentinel://``);
- ``FAULT_REDIS_PREFIX``: its key prefix (default ``trio-mcp-faults:``);
- ``FAULT_STORE_TIMEOUT``: each store call's deadline, seconds (default 5).

Its tools:

- ``nap(seconds)``: sleeps, then answers ``napped <seconds>s``;
- ``steps(seconds, interval, log)``: sets its task's status message every ``interval`` seconds
  (each a write of the task's record) for ``seconds``, and appends one line to the file ``log``
  when it starts (``started <task id> <time>``) and when it ends: ``completed <task id> <time>``,
  or ``stopped <task id> <time>`` when its work was cancelled (``time.time()``).

Importing it does nothing but declare the server (pytest imports it for doctests); the
environment is read when the store is made.
"""

from __future__ import annotations

import os
import time

import trio

from trio_mcp import Context, Server
from trio_mcp.stores.redis import RedisTaskStore


def make_store() -> RedisTaskStore:
    """The store of this process, as the environment names it."""
    return RedisTaskStore(
        os.environ["FAULT_REDIS_URL"],
        prefix=os.environ.get("FAULT_REDIS_PREFIX", "trio-mcp-faults:"),
        timeout=float(os.environ.get("FAULT_STORE_TIMEOUT", "5")),
    )


server = Server("redis-faults", version="1", store=make_store)


def _note(path: str, what: str, task_id: str | None) -> None:
    with open(path, "a", encoding="utf-8") as file:  # one short append: one line, whole
        file.write(f"{what} {task_id} {time.time()!r}\n")


@server.tool(task_support="optional")
async def nap(seconds: float) -> str:
    """Sleep, then answer."""
    await trio.sleep(seconds)
    return f"napped {seconds:g}s"


@server.tool(task_support="optional")
async def steps(seconds: float, interval: float, log: str, ctx: Context) -> str:
    """Set the task's status every ``interval`` seconds for ``seconds``; note in ``log``
    whether the work completed or was stopped."""
    task_id = ctx.task_id
    _note(log, "started", task_id)
    done = 0
    try:
        end = trio.current_time() + seconds
        while trio.current_time() < end:
            done += 1
            ctx.set_status(f"step {done}")
            await trio.sleep(interval)
    except trio.Cancelled:
        _note(log, "stopped", task_id)
        raise
    _note(log, "completed", task_id)
    return f"{done} steps"


if __name__ == "__main__":
    server.run()
