"""Helpers shared by several test modules (import them with ``from conftest import ...``).

Only helpers that really were the same code in more than one module live here. The modules'
``Probe``, ``make_server`` and ``Wire`` stay where they are: they share a name, not a body (each
module's server has its own tools and server info, and each probe records different things).
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio

if TYPE_CHECKING:
    import mcp.types

    from trio_mcp import Client, Server
    from trio_mcp.server.schema import ArgumentSpec
    from trio_mcp.transports.memory import MemoryTransport

collect_ignore = ["interop/sdk2_client.py"]
"""Run only in the SDK 2.x environment (it imports that SDK), never collected here."""

# trio_mcp, anyio and mcp are imported inside the helpers that use them: every test module loads
# this file, and a module that uses none of these helpers should not fail with them.

# ----------------------------------------------------------------------------- the task store

TASK_STORES = ("memory", "json", "sqlite", "redis")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--task-store",
        choices=TASK_STORES,
        default="memory",
        help="the store every task supervisor keeps its records in when none is given: memory (the"
        " default store), json (tests/json_store.py: records kept only as JSON text), sqlite"
        " (trio_mcp.stores.sqlite: each store a fresh SQLite file) or redis"
        " (trio_mcp.stores.redis: each store a fresh key prefix on a test server, see"
        " tests/redis_server.py)",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """In a store pass (``--task-store=json|sqlite|redis -m every_store``, as ``make pytest``
    runs them), a test module that never names the marker is not even imported: none of its
    tests could be selected, and importing and collecting them all (the doctests of every
    module included) was most of such a pass's time. Any other run collects as usual."""
    if config.getoption("--task-store") == "memory" or config.getoption("markexpr") != "every_store":
        return None
    if collection_path.suffix != ".py" or collection_path.name == "conftest.py":
        return None
    if not collection_path.name.startswith("test_"):
        return True  # helpers and the package's own modules: doctests only, never every_store
    return "every_store" not in collection_path.read_text(encoding="utf-8", errors="replace")


@pytest.fixture(autouse=True)
def task_store_choice(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """With ``--task-store=json``, every default store is a fresh :class:`JsonTextTaskStore`
    (``--task-store=sqlite``: a fresh SQLite file, see :func:`fresh_sqlite_store`).

    Servers capture the factory ``default_store`` when they are built (often at import time), so
    the patch is on what that factory makes: the ``MemoryTaskStore`` name it looks up on each call.
    The supervisor's own default (client-side supervisors, tests building one) is patched the same
    way. Explicit stores (``Server(store=...)``, ``open(store=...)``) are left alone.
    """
    choice: str = request.config.getoption("--task-store")
    if choice == "json":
        from json_store import JsonTextTaskStore

        monkeypatch.setattr("trio_mcp.server._server.MemoryTaskStore", JsonTextTaskStore)
        monkeypatch.setattr("trio_mcp.actors.supervisor.MemoryTaskStore", JsonTextTaskStore)
    elif choice == "sqlite":
        monkeypatch.setattr("trio_mcp.server._server.MemoryTaskStore", fresh_sqlite_store)
        monkeypatch.setattr("trio_mcp.actors.supervisor.MemoryTaskStore", fresh_sqlite_store)
    elif choice == "redis":
        from redis_server import fresh_redis_store

        monkeypatch.setattr("trio_mcp.server._server.MemoryTaskStore", fresh_redis_store)
        monkeypatch.setattr("trio_mcp.actors.supervisor.MemoryTaskStore", fresh_redis_store)
    return choice


_sqlite_dir: list[str] = []
_sqlite_files = itertools.count()


def fresh_sqlite_store() -> Any:
    """A :class:`~trio_mcp.stores.sqlite.SqliteTaskStore` on a new file (in a temporary
    directory removed when the test process exits): a zero-argument store factory."""
    from trio_mcp.stores.sqlite import SqliteTaskStore

    if not _sqlite_dir:
        _sqlite_dir.append(tempfile.mkdtemp(prefix="trio-mcp-sqlite-"))
        atexit.register(shutil.rmtree, _sqlite_dir[0], ignore_errors=True)
    return SqliteTaskStore(os.path.join(_sqlite_dir[0], f"{next(_sqlite_files)}.db"))


# ----------------------------------------------------------------------------- parallel runs (xdist)

ALONE = (
    # Each one's timing (a wall-clock bound, or a burst of clients and processes under a
    # deadline) assumes the machine is not also running another test: under pytest-xdist (make
    # pytest: -n auto) it waits until the other workers are between tests and runs by itself.
    "tests/stores/test_redis_runtime_faults.py::test_150_cancels_through_another_process_stop_every_work",
    "tests/stores/test_redis_faults.py::test_on_a_frozen_server_every_call_fails_within_its_own_deadline",
    "tests/stores/test_redis_faults.py::test_a_connection_that_stops_answering_takes_no_new_calls",
    "tests/transports/test_http.py::test_two_hundred_concurrent_clients_get_their_own_answers",
    "tests/transports/test_websocket.py::test_fifty_concurrent_clients",
    "tests/transports/test_websocket.py::test_stuck_client_does_not_delay_others",
    "tests/transports/test_stdio_transport.py::test_subprocess_ignoring_eof_and_sigterm_gets_killed",
    "tests/actors/test_hardening.py::test_sigterm_answers_pending_requests_and_exits_zero",
    "tests/server/test_authoring.py::test_cancelling_a_sync_tool_ends_its_task_at_once_and_abandons_the_thread",
    "tests/testing/test_testing_kit.py::test_hours_of_work_take_no_real_time",
    # 200 sessions hung up at once: a burst of store calls, each under the store's timeout.
    "tests/actors/test_session_hangups.py::test_hang_ups_during_server_directed_calls_leave_no_hidden_task",
    "tests/actors/test_session_hangups.py::test_hang_ups_during_handshake_era_task_creations_leave_no_unannounced_task",
)
"""Test ids (a parametrized test: all its cases) that get the ``alone`` mark; a test may also
carry ``@pytest.mark.alone`` itself."""


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.split("[", 1)[0] in ALONE:
            item.add_marker(pytest.mark.alone)


@pytest.fixture(scope="session")
def _run_lock(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Path | None:
    """The lock file the workers of this xdist run share: in the run's base temporary directory
    (each worker's own is a directory in it), so pytest removes it with the rest in a later
    run. None when this process is not an xdist worker."""
    if not hasattr(request.config, "workerinput"):
        return None
    return tmp_path_factory.getbasetemp().parent / "alone.lock"


@pytest.fixture(autouse=True)
def _alone_or_side_by_side(request: pytest.FixtureRequest, _run_lock: Path | None) -> Iterator[None]:
    """Under xdist, every test holds the run's lock shared, and a test marked ``alone`` holds
    it exclusively: it starts once the tests running on other workers have ended, and none
    starts until it has ended. A turnstile lock in front lets the exclusive taker in first
    (a stream of shared takers would otherwise keep it waiting). Without xdist: nothing."""
    if _run_lock is None:
        yield
        return
    import fcntl  # POSIX: only reached under xdist

    alone = request.node.get_closest_marker("alone") is not None
    with open(_run_lock, "a+b") as lock, open(_run_lock.with_suffix(".turnstile"), "a+b") as turnstile:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


# ----------------------------------------------------------------------------- in-process servers


@asynccontextmanager
async def kit_client(server: Server, **options: Any) -> AsyncIterator[Client]:
    """A client on the testing kit's harness (mock clock, trace, watchdog)."""
    from trio_mcp.testing import open_harness

    async with open_harness(server, **options) as harness:
        yield harness.client


@asynccontextmanager
async def serve_in_memory(server: Server, **transport_options: Any) -> AsyncIterator[MemoryTransport]:
    """Serve one session of ``server`` over an in-memory transport; yield the client's end.

    ``transport_options`` go to :func:`memory_transport_pair` (e.g. ``max_message_size``). The
    session is cancelled when the block exits.
    """
    from trio_mcp.transports.memory import memory_transport_pair

    client_side, server_side = memory_transport_pair(**transport_options)
    async with server.open() as runtime, trio.open_nursery() as nursery:
        nursery.start_soon(runtime.serve, server_side)
        yield client_side
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------------------- interop (reference SDK)


def exception_leaves(error: BaseException) -> list[BaseException]:
    """The non-group exceptions inside ``error`` (nested groups flattened), or ``[error]``."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for sub in error.exceptions for leaf in exception_leaves(sub)]
    return [error]


def run_on_asyncio(main: Callable[[], Awaitable[None]]) -> None:
    """``anyio.run(main, backend="asyncio")`` on a plain asyncio loop (trio-asyncio, once another
    test imported it, would make ``new_event_loop()`` its own); a lone exception wrapped in
    (nested) groups by the SDK's task groups, e.g. a failed assertion, is re-raised unwrapped."""
    import asyncio

    import anyio

    try:
        anyio.run(main, backend="asyncio", backend_options={"loop_factory": asyncio.SelectorEventLoop})
    except BaseExceptionGroup as group:
        leaves = exception_leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from group
        raise


def sdk_text_of(result: mcp.types.CallToolResult) -> str:
    """The text of an SDK ``CallToolResult`` that must hold exactly one text block."""
    import mcp.types as types

    assert len(result.content) == 1, result.content
    block = result.content[0]
    assert isinstance(block, types.TextContent), block
    return block.text


# ----------------------------------------------------------------------------- servers in subprocesses


@contextlib.contextmanager
def served(
    *serve_args: str,
    url: bytes = rb"ws://127\.0\.0\.1:(\d+)/",
    command: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
) -> Iterator[str]:
    """Run ``trio-mcp serve <serve_args>`` (listening on port 0), or ``command``, in a
    subprocess and yield the URL it prints on stderr (``url`` matches it, its group is the
    port). On leaving, SIGTERM must stop it cleanly: exit status 0."""
    argv = [sys.executable, "-m", "trio_mcp.cli", "serve", *serve_args] if command is None else list(command)
    process = subprocess.Popen(
        argv,
        cwd=Path(__file__).resolve().parents[1],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )
    assert process.stderr is not None
    seen = b""
    deadline = time.monotonic() + 15
    try:
        while (match := re.search(url, seen)) is None:
            assert time.monotonic() < deadline, f"serve did not start: {seen!r}"
            ready, _, _ = select.select([process.stderr], [], [], 0.2)
            if ready:
                chunk = os.read(process.stderr.fileno(), 4096)
                assert chunk, f"serve exited: {seen!r}"
                seen += chunk
        yield match.group(0).decode()
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        finally:
            process.stderr.close()
    assert code == 0


def checked_spec(fn: Any, **kwargs: Any) -> ArgumentSpec:
    """``argument_spec(fn)``, its schema checked by the reference JSON Schema validator."""
    import jsonschema

    from trio_mcp.server.schema import argument_spec

    spec = argument_spec(fn, **kwargs)
    jsonschema.Draft202012Validator.check_schema(spec.schema)
    return spec


def argument_error(spec: ArgumentSpec, arguments: Any) -> tuple[str, str]:
    """The field and message of the ArgumentError ``spec`` refuses ``arguments`` with."""
    from trio_mcp.server.schema import ArgumentError

    with pytest.raises(ArgumentError) as info:
        spec.validate(arguments)
    return info.value.field, info.value.message
