"""The server's lifespan: a resource opened once per runtime, handed to tools, closed on shutdown."""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

import pytest
import trio
from conftest import kit_client

from trio_mcp import Context, Server, connect_in_memory
from trio_mcp.client import connect, connect_http, connect_websocket
from trio_mcp.server import Lifespan, mcp_asgi_app, serve_http, serve_websocket
from trio_mcp.server._server import SHUTDOWN_GRACE
from trio_mcp.transports.memory import memory_transport_pair

_pool_numbers = itertools.count(1)


class Pool:
    """Stands for a database pool: what a lifespan opens once and tools share."""

    def __init__(self, server: Server) -> None:
        self.number = next(_pool_numbers)
        self.server = server
        self.closed = False
        self.queries = 0

    async def query(self) -> str:
        await trio.lowlevel.checkpoint()
        assert not self.closed, "a tool used the pool after the lifespan closed it"
        self.queries += 1
        return f"pool-{self.number}"


class Probe:
    """A lifespan that records what happens to it, and tools that use what it yields."""

    def __init__(self, *, cleanup_seconds: float = 0.0) -> None:
        self.events: list[str] = []
        self.pools: list[Pool] = []
        self.cleanup_seconds = cleanup_seconds
        self.started = trio.Event()

    @asynccontextmanager
    async def lifespan(self, server: Server) -> AsyncIterator[Pool]:
        pool = Pool(server)
        self.pools.append(pool)
        self.events.append(f"enter {pool.number}")
        try:
            yield pool
        finally:
            if self.cleanup_seconds:
                await trio.sleep(self.cleanup_seconds)  # an awaited cleanup (closing connections)
            pool.closed = True
            self.events.append(f"exit {pool.number}")

    @property
    def entered(self) -> int:
        return sum(event.startswith("enter") for event in self.events)

    @property
    def exited(self) -> int:
        return sum(event.startswith("exit") for event in self.events)


def make_server(probe: Probe, lifespan: Lifespan | None = None) -> Server:
    server = Server("lifespan-test", version="1", lifespan=lifespan or probe.lifespan)

    @server.tool
    async def query(ctx: Context) -> str:
        pool: Pool = ctx.lifespan
        return await pool.query()

    @server.tool
    async def hold(ctx: Context) -> str:
        pool: Pool = ctx.lifespan
        probe.events.append("task started")
        probe.started.set()
        try:
            await trio.sleep_forever()
        finally:
            probe.events.append(f"task ended, pool {'closed' if pool.closed else 'open'}")
        raise AssertionError("unreachable")

    @server.resource("pool://number")
    async def number(ctx: Context) -> str:
        return str(ctx.lifespan.number)

    @server.prompt()
    async def which(ctx: Context) -> str:
        return f"Ask pool {ctx.lifespan.number}"

    return server


# -- the value reaches what a Context reaches ---------------------------------------------------


async def test_the_value_reaches_plain_calls_tasks_resources_and_prompts(autojump_clock: Any) -> None:
    probe = Probe()
    server = make_server(probe)
    async with connect_in_memory(server) as client:
        [pool] = probe.pools
        assert pool.server is server  # the lifespan is given the server it runs for
        assert (await client.call_tool("query")).text == f"pool-{pool.number}"
        created = await client.call_tool_as_task("query")
        assert (await client.task_result(created.task.task_id)).text == f"pool-{pool.number}"
        contents = await client.request("resources/read", {"uri": "pool://number"})
        assert contents["contents"][0]["text"] == str(pool.number)
        prompt = await client.request("prompts/get", {"name": "which"})
        assert prompt["messages"][0]["content"]["text"] == f"Ask pool {pool.number}"
        assert pool.queries == 2
    assert probe.events == [f"enter {pool.number}", f"exit {pool.number}"]


async def test_the_runtime_holds_the_value_and_a_server_without_lifespan_gives_none(
    autojump_clock: Any,
) -> None:
    probe = Probe()
    async with make_server(probe).open() as runtime:
        assert runtime.lifespan is probe.pools[0]
    plain = Server("plain")

    @plain.tool
    async def show(ctx: Context) -> str:
        return repr(ctx.lifespan)

    async with plain.open() as runtime, connect_in_memory(plain) as client:
        assert runtime.lifespan is None
        assert (await client.call_tool("show")).text == "None"


async def test_the_testing_kit_enters_it(autojump_clock: Any) -> None:
    probe = Probe()
    async with kit_client(make_server(probe)) as client:
        assert probe.entered == 1 and probe.exited == 0
        created = await client.call_tool_as_task("query")
        assert (await client.task_result(created.task.task_id)).text == "pool-" + str(probe.pools[0].number)
    assert probe.exited == 1


# -- once per runtime --------------------------------------------------------------------------


async def test_entered_once_for_many_calls_and_connections(autojump_clock: Any) -> None:
    probe = Probe()
    server = make_server(probe)
    async with server.open() as runtime, trio.open_nursery() as nursery:

        async def one_client(n: int) -> None:
            client_side, server_side = memory_transport_pair()
            async with trio.open_nursery() as serving:
                serving.start_soon(runtime.serve, server_side)
                async with connect(client_side) as client:
                    for _ in range(5):
                        assert (await client.call_tool("query")).text == "pool-" + str(probe.pools[0].number)
                    created = await client.call_tool_as_task("query")
                    await client.task_result(created.task.task_id)
                serving.cancel_scope.cancel()

        for n in range(4):
            nursery.start_soon(one_client, n)
    assert probe.entered == probe.exited == 1
    assert probe.pools[0].queries == 4 * 6


async def test_each_runtime_opened_on_a_server_enters_its_own(autojump_clock: Any) -> None:
    probe = Probe()
    server = make_server(probe)
    async with connect_in_memory(server) as first, connect_in_memory(server) as second:
        one, two = probe.pools
        assert (await first.call_tool("query")).text == f"pool-{one.number}"
        assert (await second.call_tool("query")).text == f"pool-{two.number}"
    # Last in, first out: the second runtime's lifespan is exited first.
    assert probe.events == [
        f"enter {one.number}",
        f"enter {two.number}",
        f"exit {two.number}",
        f"exit {one.number}",
    ]


async def test_websocket_clients_share_one_lifespan() -> None:
    probe = Probe()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(serve_websocket, make_server(probe))
            assert probe.entered == 1  # entered before the server listens
            url = f"ws://127.0.0.1:{port}/mcp"
            async with connect_websocket(url) as alice, connect_websocket(url) as bob:
                expected = f"pool-{probe.pools[0].number}"
                for _ in range(3):
                    assert (await alice.call_tool("query")).text == expected
                    assert (await bob.call_tool("query")).text == expected
                created = await bob.call_tool_as_task("query")
                assert (await bob.task_result(created.task.task_id)).text == expected
            nursery.cancel_scope.cancel()
    assert probe.entered == probe.exited == 1


async def test_one_runtime_passed_to_websocket_and_http_shares_its_lifespan() -> None:
    probe = Probe()
    server = make_server(probe)
    with trio.fail_after(10):
        async with server.open() as runtime, trio.open_nursery() as nursery:
            ws_port = await nursery.start(serve_websocket, runtime)
            http_port = await nursery.start(serve_http, runtime)
            async with (
                connect_websocket(f"ws://127.0.0.1:{ws_port}/mcp") as over_ws,
                connect_http(f"http://127.0.0.1:{http_port}/mcp") as over_http,
            ):
                expected = f"pool-{runtime.lifespan.number}"
                assert (await over_ws.call_tool("query")).text == expected
                assert (await over_http.call_tool("query")).text == expected
            nursery.cancel_scope.cancel()
    assert probe.entered == probe.exited == 1


# -- shutdown ----------------------------------------------------------------------------------


async def test_a_normal_shutdown_cancels_the_running_task_then_exits(autojump_clock: Any) -> None:
    probe = Probe(cleanup_seconds=1.0)
    async with connect_in_memory(make_server(probe)) as client:
        await client.call_tool_as_task("hold")
        await probe.started.wait()
    number = probe.pools[0].number
    assert probe.events == [f"enter {number}", "task started", "task ended, pool open", f"exit {number}"]


@pytest.mark.parametrize("call", ["task", "plain"])
async def test_a_cancelled_scope_cancels_the_call_before_the_lifespan_exits(
    autojump_clock: Any, call: str
) -> None:
    probe = Probe(cleanup_seconds=1.0)  # the cleanup awaits: it runs shielded from the cancellation
    with trio.CancelScope() as scope:
        async with connect_in_memory(make_server(probe)) as client, trio.open_nursery() as nursery:
            if call == "task":
                await client.call_tool_as_task("hold")
            else:
                nursery.start_soon(client.call_tool, "hold")
            await probe.started.wait()
            scope.cancel()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    number = probe.pools[0].number
    assert probe.events == [f"enter {number}", "task started", "task ended, pool open", f"exit {number}"]


async def test_a_cancelled_lifespan_exit_is_cut_after_the_grace_period(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    probe = Probe(cleanup_seconds=SHUTDOWN_GRACE * 10)
    with trio.CancelScope() as scope:
        async with connect_in_memory(make_server(probe)):
            scope.cancel()
            cancelled_at = trio.current_time()
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert trio.current_time() - cancelled_at == pytest.approx(SHUTDOWN_GRACE)
    assert probe.exited == 0  # its cleanup was cancelled at the deadline
    assert "was still exiting after" in caplog.text


async def test_a_lifespan_may_keep_a_nursery_open_across_its_yield(autojump_clock: Any) -> None:
    """Background tasks of the lifespan's own nursery are cancelled with the server (that
    cancels the nursery too): the cleanup shields its awaits itself, as anywhere in Trio."""
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(server: Server) -> AsyncIterator[dict[str, int]]:
        state = {"ticks": 0}

        async def ticker() -> None:
            while True:
                await trio.sleep(1)
                state["ticks"] += 1

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            try:
                yield state
            finally:
                with trio.CancelScope(shield=True):
                    await trio.sleep(0.5)
                    events.append(f"flushed {state['ticks']} ticks")
                nursery.cancel_scope.cancel()

    server = Server("ticking", lifespan=lifespan)

    @server.tool
    async def ticks(ctx: Context) -> int:
        return int(ctx.lifespan["ticks"])

    with trio.CancelScope() as scope:
        async with connect_in_memory(server) as client:
            await trio.sleep(3.5)
            assert (await client.call_tool("ticks")).text == "3"
            scope.cancel()
            await trio.sleep_forever()
    assert events == ["flushed 3 ticks"]


# -- failures ----------------------------------------------------------------------------------


class PoolUnavailable(Exception):
    pass


@asynccontextmanager
async def failing_to_enter(server: Server) -> AsyncIterator[None]:
    await trio.sleep(1)
    raise PoolUnavailable("database unreachable")
    yield


async def test_an_enter_failure_stops_the_start(autojump_clock: Any) -> None:
    server = make_server(Probe(), failing_to_enter)
    with pytest.raises(PoolUnavailable, match="database unreachable"):
        async with server.open():
            raise AssertionError("the runtime opened")
    with pytest.raises(PoolUnavailable):
        async with connect_in_memory(server):
            raise AssertionError("a client connected")


async def test_an_enter_failure_stops_a_websocket_server_before_it_listens() -> None:
    server = make_server(Probe(), failing_to_enter)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            with pytest.raises(PoolUnavailable):
                await nursery.start(partial(serve_websocket, server))


async def test_an_enter_failure_fails_the_asgi_startup(autojump_clock: Any) -> None:
    app = mcp_asgi_app(make_server(Probe(), failing_to_enter))
    to_app, app_receives = trio.open_memory_channel[MutableMapping[str, Any]](1)
    app_sends, from_app = trio.open_memory_channel[MutableMapping[str, Any]](1)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(app, {"type": "lifespan"}, app_receives.receive, app_sends.send)
        await to_app.send({"type": "lifespan.startup"})
        answer = await from_app.receive()
    assert answer == {"type": "lifespan.startup.failed", "message": "database unreachable"}


async def test_an_exit_failure_is_raised(autojump_clock: Any) -> None:
    @asynccontextmanager
    async def failing_to_exit(server: Server) -> AsyncIterator[None]:
        yield
        raise PoolUnavailable("could not close")

    server = make_server(Probe(), failing_to_exit)
    with pytest.raises(PoolUnavailable, match="could not close"):
        async with connect_in_memory(server) as client:
            await client.list_tools()
    with trio.CancelScope() as scope, pytest.raises(PoolUnavailable, match="could not close"):
        async with connect_in_memory(server):
            scope.cancel()  # a cancelled shutdown does not hide it either
            await trio.sleep_forever()


def test_a_lifespan_must_be_a_function_of_the_server() -> None:
    with pytest.raises(TypeError, match="lifespan must be a function of the server"):
        Server("x", lifespan=object())  # type: ignore[arg-type]


async def test_a_lifespan_returning_no_async_context_manager_is_named(autojump_clock: Any) -> None:
    async def not_decorated(server: Server) -> AsyncIterator[None]:
        yield

    server = Server("x", lifespan=not_decorated)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="decorate an async generator"):
        async with server.open():
            pass


async def test_errors_inside_the_runtime_reach_the_caller_and_the_lifespan_still_exits(
    autojump_clock: Any, caplog: pytest.LogCaptureFixture
) -> None:
    probe = Probe(cleanup_seconds=1.0)
    caplog.set_level(logging.WARNING)
    with pytest.RaisesGroup(pytest.RaisesExc(KeyError, match="mine"), flatten_subgroups=True):
        async with make_server(probe).open():
            raise KeyError("mine")
    assert probe.exited == 1
    assert "was still exiting" not in caplog.text
