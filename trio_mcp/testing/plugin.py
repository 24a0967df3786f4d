"""pytest plugin registered by trio-mcp (entry point ``pytest11: trio_mcp``).

Fixtures (for pytest-trio async tests):

``mcp_harness``
    a factory: ``harness = await mcp_harness(server, faults=..., owner=...)`` serves ``server``
    and connects a client (see :func:`trio_mcp.testing.open_harness`); every harness it made is
    closed when the test ends.
``mcp_server``
    your server: override it in a ``conftest.py`` or test module.
``mcp_client``
    a :class:`~trio_mcp.Client` connected to ``mcp_server`` through a harness.
``mcp_clock``
    ``trio.testing.MockClock(autojump_threshold=0)``.

Any async test that uses one of them, or is marked ``@pytest.mark.trio_mcp``, runs on an
autojump ``MockClock`` (unless it requests another clock fixture) with deterministic
scheduling: seed 0, or ``@pytest.mark.trio_mcp(seed=n)``; ``seed=None`` keeps Trio's usual
randomness. It is a Trio test even without pytest-trio's ``trio_mode``.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest
import trio
import trio.testing

from ..client import Client
from ..server import Server
from .determinism import DEFAULT_SEED, deterministic_scheduling
from .harness import Harness, open_harness

__all__ = ["HarnessFactory", "mcp_client", "mcp_clock", "mcp_harness", "mcp_server"]

KIT_FIXTURES = frozenset({"mcp_harness", "mcp_client", "mcp_clock"})


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "trio_mcp(seed=0): run this async test on an autojump MockClock with deterministic "
        "scheduling for `seed` (None: Trio's random scheduling)",
    )


def _seed_of(item: pytest.Item) -> int | None:
    marker = item.get_closest_marker("trio_mcp")
    if marker is None:
        return DEFAULT_SEED
    seed = marker.args[0] if marker.args else marker.kwargs.get("seed", DEFAULT_SEED)
    return None if seed is None else int(seed)


def _runner(item: pytest.Item) -> Callable[..., Any]:
    def run(
        fn: Callable[[], Awaitable[Any]],
        *,
        clock: trio.abc.Clock | None = None,
        instruments: tuple[trio.abc.Instrument, ...] = (),
    ) -> Any:
        if clock is None:
            clock = trio.testing.MockClock(autojump_threshold=0)
        with deterministic_scheduling(_seed_of(item)):
            return trio.run(fn, clock=clock, instruments=instruments)

    return run


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if not isinstance(item, pytest.Function):
            continue
        if not KIT_FIXTURES & set(item.fixturenames) and item.get_closest_marker("trio_mcp") is None:
            continue
        if not inspect.iscoroutinefunction(item.obj):
            continue
        explicit = [m for m in item.iter_markers("trio") if m.kwargs.get("run") not in (None, trio.run)]
        if explicit:
            continue  # the test chose its own runner
        item.add_marker(pytest.mark.trio(run=_runner(item)), append=False)


class HarnessFactory:
    """What the ``mcp_harness`` fixture gives: call it to serve a server and connect to it."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self._closing = trio.Event()
        self.harnesses: list[Harness] = []

    async def __call__(self, server: Server, **options: Any) -> Harness:
        """Serve ``server`` and connect a client; ``options`` go to ``open_harness``."""
        harness: Harness = await self._nursery.start(self._serve, server, options)
        self.harnesses.append(harness)
        return harness

    async def _serve(
        self, server: Server, options: dict[str, Any], *, task_status: trio.TaskStatus[Harness]
    ) -> None:
        async with open_harness(server, **options) as harness:
            task_status.started(harness)
            await self._closing.wait()

    def close(self) -> None:
        """Close every harness (they wind down in the fixture's nursery)."""
        self._closing.set()


@pytest.fixture
def mcp_clock() -> trio.testing.MockClock:
    """An autojump mock clock: sleeps and timeouts of any length take no real time."""
    return trio.testing.MockClock(autojump_threshold=0)


@pytest.fixture
async def mcp_harness() -> AsyncIterator[HarnessFactory]:
    """A factory of harnesses: ``harness = await mcp_harness(server)``."""
    async with trio.open_nursery() as nursery:
        factory = HarnessFactory(nursery)
        try:
            yield factory
        finally:
            factory.close()


@pytest.fixture
def mcp_server() -> Server:
    """Override this fixture to return the Server ``mcp_client`` connects to."""
    pytest.fail("define an `mcp_server` fixture (in conftest.py or the test module) returning your Server")


@pytest.fixture
async def mcp_client(mcp_harness: HarnessFactory, mcp_server: Server) -> Client:
    """A client connected to ``mcp_server`` (in memory, on the mock clock)."""
    harness = await mcp_harness(mcp_server)
    return harness.client
