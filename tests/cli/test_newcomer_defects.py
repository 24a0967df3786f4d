"""Defects a newcomer met (issue 32, point 5), each against real processes: a task store that
cannot be opened and a busy port stop the server at start in one line (exit 3), ``--detach``
is refused where the task could not outlive the command, and an HTTP target with nothing
listening is one clear line."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from trio_mcp.cli import ExitCode, cli

PY = sys.executable
BAD_STORE = "sqlite:////proc/nope/tasks.db"
"""A store file no process can make (/proc takes no new directories)."""
ENV = {"COLUMNS": "200", "TRIO_MCP_TOKEN": None, "NO_COLOR": None}


@pytest.fixture(scope="module")
def server_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("newcomer") / "server.py"
    path.write_text(
        textwrap.dedent(
            """
            from trio_mcp import Server

            server = Server("newcomer")

            @server.tool
            async def echo(text: str) -> str:
                return text

            if __name__ == "__main__":
                server.run()
            """
        )
    )
    return path


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=ENV, catch_exceptions=False)


@pytest.mark.parametrize("transport", [[], ["--http", "127.0.0.1:0"]], ids=["stdio", "http"])
def test_a_store_that_cannot_be_opened_stops_python_server_py_in_one_line(
    server_file: Path, transport: list[str]
) -> None:
    done = run(PY, str(server_file), "--store", BAD_STORE, *transport)
    assert done.returncode == 3, done.stderr
    store = "SqliteTaskStore('/proc/nope/tasks.db')"
    assert done.stderr.splitlines() == [
        f"error: cannot open the task store {store}: unable to open database file"
    ]
    assert "Serving" not in done.stderr


def test_a_store_that_cannot_be_opened_stops_trio_mcp_serve_in_one_line(server_file: Path) -> None:
    done = run(
        PY, "-m", "trio_mcp.cli", "serve", str(server_file), "--http", "127.0.0.1:0", "--store", BAD_STORE
    )
    assert done.returncode == ExitCode.CONNECTION, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot open the task store" in lines[0], done.stderr


def test_python_server_py_on_a_busy_port_says_so_in_one_line(server_file: Path, busy_port: int) -> None:
    done = run(PY, str(server_file), "--http", f"127.0.0.1:{busy_port}")
    assert done.returncode == 3
    assert done.stderr.splitlines() == [
        f"error: cannot listen on 127.0.0.1:{busy_port}: Address already in use"
    ]


def test_detach_is_refused_where_the_task_would_die_with_the_command(server_file: Path) -> None:
    stdio = invoke("call", f"{PY} {server_file}", "echo", "text=x", "--task", "--detach")
    assert stdio.exit_code == ExitCode.USAGE
    assert "a stdio TARGET's server ends with it" in stdio.stderr
    # Refused before connecting: no server is needed to say so.
    no_token = invoke("call", "ws://127.0.0.1:1", "echo", "text=x", "--task", "--detach")
    assert no_token.exit_code == ExitCode.USAGE
    assert no_token.stderr.startswith("Error: --detach needs --token")
    assert not no_token.stdout  # no task id for a task that would not survive


def test_an_http_target_with_nothing_listening_is_one_clear_line() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    result = invoke("tools", f"http://127.0.0.1:{port}/mcp", "--timeout", "5s")
    assert result.exit_code == ExitCode.CONNECTION
    first, hint = result.stderr.strip().splitlines()
    assert first.startswith(f"Error: cannot connect to http://127.0.0.1:{port}/mcp: nothing answers there")
    assert "ConnectError" not in result.stderr
    assert hint.startswith("Hint: is `trio-mcp serve ... --http HOST:PORT`")


def test_help_and_hints_name_every_transport() -> None:
    assert "WebSocket or Streamable HTTP" in " ".join(invoke("serve", "--help").stdout.split())
    bad = invoke("tools", "no-such-command-xyz")
    assert bad.exit_code == ExitCode.CONNECTION
    assert "ws://HOST:PORT or http://HOST:PORT/mcp" in bad.stderr


async def test_an_expired_task_is_explained_by_its_ttl_not_by_tokens() -> None:
    from trio_mcp.cli.app import _task_request
    from trio_mcp.cli.errors import CliError
    from trio_mcp.protocol.errors import INVALID_PARAMS, McpError

    async def expired() -> None:
        raise McpError(INVALID_PARAMS, "Failed to retrieve task: Task has expired")

    with pytest.raises(CliError) as caught:
        await _task_request("ws://127.0.0.1:8765", expired)
    assert caught.value.message.endswith("Task has expired")
    assert caught.value.hint is not None and "ttl" in caught.value.hint
    assert "token" not in caught.value.hint


def test_python_server_py_logs_in_the_format_of_trio_mcp_serve(server_file: Path) -> None:
    process = subprocess.Popen(
        [PY, str(server_file), "--log-level", "info"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    process.stdin.write(
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}) + "\n"
    )
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["id"] == 1  # serving: its signal handlers are set
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=20)
    assert process.returncode == 0
    # `trio-mcp serve`: "2026-01-02 03:04:05,678 INFO    trio_mcp: ..." (time, level, logger)
    line = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} INFO    trio_mcp: signal 15: shutting down$")
    assert any(line.match(text) for text in stderr.splitlines()), stderr
