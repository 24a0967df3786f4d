"""Defects of the ``trio-mcp`` command found by a new user (issue 17, point 6), one test (or
more) each: what ``tasks result`` calls a failed task, options after ``--`` in the ``tasks``
commands, realistic task ids in the help, a refused connection reported in one line (WebSocket
and HTTP, against real servers that require a token), a second signal stopping ``serve``, and
a nested bad argument value, which the CLI leaves to the server.

(Each command's own exit-code table is tested in ``tests/cli/test_cli.py``, with the other help
tests.)
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
import trio
import trio_websocket
from click.testing import CliRunner, Result
from conftest import served

from trio_mcp.cli import ExitCode, cli
from trio_mcp.cli.app import TasksCommand, tasks
from trio_mcp.cli.runner import Interrupts, as_cli_error, refusal_error, run_trio

REPO = Path(__file__).resolve().parents[2]
DEMO_FILE = REPO / "examples" / "demo_server.py"
PY = sys.executable
TOKEN = "defects-token"
ENV = {"COLUMNS": "200", "TRIO_MCP_TOKEN": None, "NO_COLOR": None}
TASK_ID = re.compile(r"^[A-Za-z0-9_-]{24}$")
"""A task id as a trio-mcp server mints it: ``secrets.token_urlsafe(18)``."""


def invoke(*args: str, env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, list(args), env={**ENV, **(env or {})}, catch_exceptions=False)


@pytest.fixture(scope="module")
def ws_url() -> Iterator[str]:
    with served(f"{DEMO_FILE}:server", "--ws", "127.0.0.1:0", "--token", TOKEN) as url:
        yield url


def ws(ws_url: str, command: str, *args: str) -> Result:
    """``trio-mcp <command> <ws_url> <args>`` with the server's token."""
    return invoke(*command.split(), ws_url, *args, env={"TRIO_MCP_TOKEN": TOKEN})


def detached(ws_url: str, tool: str, *pairs: str) -> str:
    created = ws(ws_url, "call", tool, *pairs, "--task", "--detach")
    assert created.exit_code == 0, created.output
    task_id = created.stdout.strip()
    assert TASK_ID.match(task_id), task_id
    return task_id


# ---------------------------------------------------------------- 1. tasks result of a failed task


def test_tasks_result_of_a_failed_task_names_the_task_not_a_tool(ws_url: str) -> None:
    task_id = detached(ws_url, "fail", "message=boom")
    result = ws(ws_url, "tasks result", "--", task_id)  # waits for the end
    assert result.exit_code == ExitCode.TOOL_ERROR, result.output
    assert result.stderr.strip().splitlines()[-1] == f"Task {task_id} failed: boom"
    assert f"Error from tool {task_id}" not in result.stderr
    # `call --task` knows the tool, and names it.
    called = ws(ws_url, "call", "fail", "message=boom", "--task")
    assert called.exit_code == ExitCode.TOOL_ERROR
    assert called.stderr.strip().splitlines()[-1] == "Error from tool fail: boom"


# ------------------------------------------------------------------ 2. options after `--`


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (
            ["URL", "--", "-qN0w50_pPaSFgMcDT74WyHI", "-o", "json"],
            ["-o", "json", "--", "URL", "-qN0w50_pPaSFgMcDT74WyHI"],
        ),
        (["--", "URL", "ID", "-ojson"], ["-ojson", "--", "URL", "ID"]),
        (["URL", "-o", "json", "--", "ID"], ["-o", "json", "--", "URL", "ID"]),
        (
            ["URL", "ID", "--output=json", "--token", "-tok"],
            ["--output=json", "--token", "-tok", "--", "URL", "ID"],
        ),
        (["URL", "-Xabcdefghijk"], ["--", "URL", "-Xabcdefghijk"]),  # an id that begins with "-"
        (["URL", "ID", "-x"], ["-x", "--", "URL", "ID"]),  # a short unknown option stays one
        (["URL", "ID", "--", "-o"], ["--", "URL", "ID", "-o"]),  # `--` after both: the rest is positional
        (["URL", "--", "ID", "extra"], ["--", "URL", "ID", "extra"]),
    ],
)
def test_tasks_commands_put_options_first_and_positionals_after_one_double_dash(
    argv: list[str], expected: list[str]
) -> None:
    command = tasks.commands["get"]
    assert isinstance(command, TasksCommand)
    with click.Context(command) as ctx:
        assert command.rearrange(ctx, argv) == expected


def test_every_tasks_command_takes_options_after_the_id_with_or_without_double_dash(ws_url: str) -> None:
    running = detached(ws_url, "batch_job", "seconds=600")
    for words in (["--", running], [running]):
        got = ws(ws_url, "tasks get", *words, "-o", "json")
        assert got.exit_code == 0, (words, got.output)
        assert json.loads(got.stdout)["taskId"] == running
    listed = invoke("tasks", "list", "--", ws_url, "-o", "json", env={"TRIO_MCP_TOKEN": TOKEN})
    assert listed.exit_code == 0, listed.output
    assert running in [task["taskId"] for task in json.loads(listed.stdout)]
    cancelled = ws(ws_url, "tasks cancel", "--", running, "-o", "json")
    assert cancelled.exit_code == 0, cancelled.output
    assert json.loads(cancelled.stdout)["status"] == "cancelled"
    for words in (["--", running], [running]):
        result = ws(ws_url, "tasks result", *words, "-o", "json")
        assert result.exit_code == ExitCode.TOOL_ERROR, (words, result.output)  # cancelled
        assert json.loads(result.stdout)["task"]["status"] == "cancelled"
    # An id that begins with "-": looked up, not refused as an option (exit 4, not 2).
    unknown = ws(ws_url, "tasks get", "--", "-qN0w50_pPaSFgMcDT74WyHI", "-o", "json")
    assert unknown.exit_code == ExitCode.PROTOCOL, unknown.output
    assert "Task not found" in unknown.stderr


# ------------------------------------------------------------------- 4. realistic task ids


@pytest.mark.parametrize("command", ["tasks", "tasks get", "tasks result", "tasks cancel"])
def test_help_shows_task_ids_as_the_server_mints_them(command: str) -> None:
    text = invoke(*command.split(), "--help").stdout
    assert not re.search(r"[0-9a-f]{8}-", text)  # nothing that looks like a UUID
    if command != "tasks":
        examples = text.split("Examples:", 1)[1].split("Options:", 1)[0]
        ids = re.findall(r"(?:8765|--) (\S{24})\b", examples)
        assert ids and all(TASK_ID.match(task_id) for task_id in ids), examples


# --------------------------------------------------------------- 5. a refused connection


def test_a_refused_websocket_connection_is_one_clear_line_exit_3(ws_url: str) -> None:
    missing = invoke("tools", ws_url)
    assert missing.exit_code == ExitCode.CONNECTION, missing.output
    assert missing.stderr == (
        f"Error: {ws_url} refused the connection: 401 Unauthorized "
        "(a bearer token is required: pass --token TOKEN or set TRIO_MCP_TOKEN)\n"
    )
    wrong = invoke("tasks", "list", ws_url, "--token", "wrong")
    assert wrong.exit_code == ExitCode.CONNECTION, wrong.output
    assert wrong.stderr == (
        f"Error: {ws_url} refused the connection: 401 Unauthorized "
        "(the token was not accepted: check --token or TRIO_MCP_TOKEN)\n"
    )


def test_a_refused_http_connection_is_one_clear_line_exit_3() -> None:
    url_pattern = rb"http://127\.0\.0\.1:(\d+)/mcp"
    with served(f"{DEMO_FILE}:server", "--http", "127.0.0.1:0", "--token", TOKEN, url=url_pattern) as url:
        for protocol in ("2025-11-25", "2026-07-28"):
            missing = invoke("tools", url, "--protocol", protocol)
            assert missing.exit_code == ExitCode.CONNECTION, missing.output
            assert missing.stderr == (
                f"Error: {url} refused the connection: 401 Unauthorized "
                "(a bearer token is required: pass --token TOKEN or set TRIO_MCP_TOKEN)\n"
            )
        wrong = invoke("tools", url, "--token", "wrong")
        assert wrong.exit_code == ExitCode.CONNECTION, wrong.output
        assert "401 Unauthorized (the token was not accepted" in wrong.stderr
        elsewhere = url.removesuffix("/mcp") + "/nope"
        lost = invoke("tools", elsewhere, "--token", TOKEN)
        assert lost.exit_code == ExitCode.CONNECTION, lost.output
        assert lost.stderr == (
            f"Error: {elsewhere} refused the connection: 404 Not Found "
            "(nothing is served at this path: `serve --http` serves /mcp)\n"
        )
        ok = invoke("tools", url, "--token", TOKEN, "-o", "json")
        assert ok.exit_code == 0, ok.output


def test_refusals_say_what_the_status_means() -> None:
    forbidden = refusal_error("ws://h:1/", 403, token=None, detail="origin not allowed")
    assert forbidden.code == ExitCode.CONNECTION
    assert forbidden.message == "ws://h:1/ refused the connection: 403 Forbidden (origin not allowed)"
    http_forbidden = refusal_error("http://h:1/mcp", 403, token="t", detail="Forbidden: Origin not allowed")
    assert http_forbidden.message.endswith("403 Forbidden (Origin not allowed)")
    assert "(this client is not allowed" in refusal_error("u", 403, token=None).message
    assert refusal_error("u", 503, token=None, detail="busy").message == (
        "u refused the connection: 503 Service Unavailable (busy)"
    )
    assert refusal_error("u", 299, token=None).message == "u refused the connection: 299"


def test_a_stray_connection_rejected_is_still_reported_cleanly() -> None:
    rejected = trio_websocket.ConnectionRejected(401, ((b"www-authenticate", b"Bearer"),), b"")
    for exc in (rejected, ExceptionGroup("nursery", [rejected])):
        error = as_cli_error(exc)
        assert error is not None and error.code == ExitCode.CONNECTION
        assert error.message == (
            "the server refused the connection: 401 Unauthorized "
            "(a valid bearer token is required: check --token or TRIO_MCP_TOKEN)"
        )
        assert "www-authenticate" not in error.message


# --------------------------------------------------------------------------- 3. serve: signals


def test_serve_over_websocket_exits_0_on_sigint_with_a_task_running() -> None:
    process = subprocess.Popen(
        [PY, "-m", "trio_mcp.cli", "serve", f"{DEMO_FILE}:server", "--ws", "127.0.0.1:0", "--token", TOKEN],
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert process.stderr is not None
    try:
        seen = b""
        deadline = time.monotonic() + 15
        while (match := re.search(rb"ws://127\.0\.0\.1:\d+/", seen)) is None:
            assert time.monotonic() < deadline, f"serve did not start: {seen!r}"
            if select.select([process.stderr], [], [], 0.2)[0]:
                chunk = os.read(process.stderr.fileno(), 4096)
                assert chunk, f"serve exited: {seen!r}"
                seen += chunk
        url = match.group(0).decode()
        detached(url, "batch_job", "seconds=3600")
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=10)
        seen += process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()
    assert code == 0, seen
    assert b"signal received: shutting down" in seen and b"Interrupted" not in seen


@pytest.mark.parametrize(("first", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_second_signal_during_a_shutdown_stops_at_once(first: int, code: int) -> None:
    """What ``serve`` does (its first signal starts a shutdown, its handler): a second signal
    cancels the command at once, and the exit code says which signal came first."""
    calls: list[str] = []

    async def body(interrupts: Interrupts) -> int:
        handled = trio.Event()

        def shutting_down() -> None:  # a shutdown that does not finish by itself
            calls.append("handler")
            handled.set()

        interrupts.handler = shutting_down
        signal.raise_signal(first)
        await handled.wait()
        signal.raise_signal(signal.SIGINT)
        await trio.sleep_forever()
        return ExitCode.OK  # pragma: no cover - cancelled

    assert run_trio(body, on_interrupted=lambda: calls.append("interrupted")) == code
    assert calls == ["handler", "interrupted"]


# ---------------------------------------------------------------- 6. nested argument values


SERVER_SOURCE = '''
from typing import Any

from trio_mcp import Server
from trio_mcp.protocol.errors import INVALID_PARAMS, McpError

server = Server("stats")


@server.tool()
async def stats(values: list[float], label: str = "x") -> dict[str, object]:
    """Summary statistics."""
    return {"label": label, "n": len(values), "mean": sum(values) / len(values)}


@server.tool()
async def strict(values: list[Any]) -> str:
    """Like a server that answers bad arguments with JSON-RPC error -32602."""
    for index, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise McpError(INVALID_PARAMS, f"Invalid params: values[{index}]: expected number")
    return "ok"
'''


def test_a_nested_bad_value_is_checked_by_the_server_and_reported_clearly(tmp_path: Path) -> None:
    server_file = tmp_path / "stats_server.py"
    server_file.write_text(textwrap.dedent(SERVER_SOURCE))
    with served(f"{server_file}:server", "--ws", "127.0.0.1:0") as target:
        _check_nested_values(target)


def _check_nested_values(target: str) -> None:
    # The top level is checked here: not an array at all is a usage error, nothing is sent.
    local = invoke("call", target, "stats", "values=3")
    assert local.exit_code == ExitCode.USAGE, local.output
    assert "argument 'values' of tool 'stats' expects a JSON array" in local.stderr
    # Inside the array: the server's check, naming the field; a trio-mcp server says isError.
    nested = invoke("call", target, "stats", 'values=[1,"x"]')
    assert nested.exit_code == ExitCode.TOOL_ERROR, nested.output
    assert nested.stdout == ""
    assert nested.stderr == (
        "Error from tool stats: Invalid arguments for tool 'stats': values[1]: expected number, got string\n"
    )
    in_json = invoke("call", target, "stats", "--json", '{"values": [1, {"a": 1}]}')
    assert in_json.exit_code == ExitCode.TOOL_ERROR, in_json.output
    assert "values[1]: expected number, got object" in in_json.stderr
    # A server that answers -32602 instead: exit 4, its message, and where the schema is.
    refused = invoke("call", target, "strict", 'values=[1,"x"]')
    assert refused.exit_code == ExitCode.PROTOCOL, refused.output
    lines = refused.stderr.splitlines()
    assert lines[0] == (
        "Error: the server refused the arguments of tool 'strict': error -32602: "
        "Invalid params: values[1]: expected number"
    )
    assert (
        lines[1].startswith("Hint: the CLI checks only top-level types")
        and "tools TARGET -o json" in lines[1]
    )
