"""A TCP round-robin balancer for the tests that run several server processes.

:func:`round_robin` serves on a free port of 127.0.0.1 (given to ``task_status``) and sends
each new connection to the next of ``ports`` — a list the test may change while it runs (a
rolling deploy) — skipping ports that refuse the connection; bytes are piped both ways.
"""

from __future__ import annotations

import itertools

import trio

__all__ = ["round_robin"]


async def round_robin(ports: list[int], task_status: trio.TaskStatus[int]) -> None:
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

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(relay, listeners)
