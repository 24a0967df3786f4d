"""The ``trio-mcp`` command: every subcommand, its errors and exit codes, the live progress
display in a pseudo-terminal, Ctrl-C cancelling a task, questions (elicitation) answered at
the terminal or from piped stdin, and signal shutdown of ``serve``.

Client commands run in-process with click's CliRunner against one shared
``trio-mcp serve --ws ... --token`` subprocess (cheap per test); what needs a real process
(serve, signals, a terminal) runs as a subprocess, always under a deadline.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import json
import os
import re
import select
import shlex
import signal
import socket
import struct
import subprocess
import sys
import termios
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from click.testing import CliRunner, Result
from conftest import served
from rich.console import Console

from trio_mcp import connect
from trio_mcp.cli import ExitCode, cli, main
from trio_mcp.cli.app import default_demo_server
from trio_mcp.cli.demo import command_name
from trio_mcp.cli.elicit import Field, Skip, TerminalElicitor, form_fields
from trio_mcp.cli.errors import CliError
from trio_mcp.cli.parsing import (
    coerce_value,
    format_duration_ms,
    load_server,
    parse_duration_ms,
    parse_tool_arguments,
)
from trio_mcp.cli.render import result_lines
from trio_mcp.protocol.messages import (
    CallToolResult,
    ElicitRequestParams,
    ElicitResult,
    ElicitUrlRequestParams,
    TextContent,
    Tool,
)
from trio_mcp.transports.stdio import open_subprocess_transport

REPO = Path(__file__).resolve().parents[2]
DEMO_FILE = REPO / "examples" / "demo_server.py"
PY = sys.executable
STDIO_TARGET = f"{shlex.quote(PY)} {shlex.quote(str(DEMO_FILE))}"
CLI = [PY, "-m", "trio_mcp.cli"]
TOKEN = "test-token"
ENV = {"COLUMNS": "120", "TRIO_MCP_TOKEN": None, "NO_COLOR": None}


# ------------------------------------------------------------------------------ helpers


@pytest.fixture(autouse=True)
def _restore_import_state(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Loading a SERVER spec in-process prepends to sys.path and registers the module; undo it."""
    monkeypatch.setattr(sys, "path", sys.path.copy())
    before = set(sys.modules)
    yield
    for name in set(sys.modules) - before:
        if name.startswith("_trio_mcp_serve_"):
            del sys.modules[name]


def invoke(*args: str, env: dict[str, str | None] | None = None, input: str | None = None) -> Result:
    return CliRunner().invoke(
        cli, list(args), env={**ENV, **(env or {})}, input=input, catch_exceptions=False
    )


@pytest.fixture(scope="module")
def ws_url() -> Iterator[str]:
    """``trio-mcp serve examples/demo_server.py:server --ws 127.0.0.1:0 --token ...``; on
    teardown, SIGTERM must stop it cleanly (exit 0) at once."""
    with served(f"{DEMO_FILE}:server", "--ws", "127.0.0.1:0", "--token", TOKEN) as url:
        yield url


def ws(ws_url: str, *args: str, env: dict[str, str | None] | None = None, input: str | None = None) -> Result:
    """Invoke ``trio-mcp <command> <ws_url> <args>`` with the server's token."""
    command, *rest = args
    words = command.split()
    return invoke(*words, ws_url, *rest, env={"TRIO_MCP_TOKEN": TOKEN, **(env or {})}, input=input)


def run_in_pty(
    argv: list[str],
    *,
    trigger: tuple[bytes, Callable[[subprocess.Popen[bytes], int], None]] | None = None,
    controlling_tty: bool = False,
    timeout: float = 15.0,
) -> tuple[int, bytes]:
    """Run ``argv`` with stdin/stdout/stderr on a pseudo-terminal (110x30); return its exit
    code and everything it wrote. ``trigger``: when the output first contains the bytes, call
    the function with (process, pty master fd). ``controlling_tty``: make the terminal the
    child's controlling terminal in a session of its own, so that typing ^C on it sends
    SIGINT to its foreground process group, as in a real terminal."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 110, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "TRIO_MCP_TOKEN")}
    env["TERM"] = "xterm-256color"

    def take_terminal() -> None:
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    process = subprocess.Popen(
        argv,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env=env,
        cwd=REPO,
        start_new_session=controlling_tty,
        preexec_fn=take_terminal if controlling_tty else None,
    )
    os.close(slave)
    output = b""
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, f"timed out; output so far: {output[-2000:]!r}"
            if trigger is not None and trigger[0] in output:
                trigger[1](process, master)
                trigger = None
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every process holding the terminal has gone
                    break
                if not chunk:
                    break
                output += chunk
            elif process.poll() is not None:
                break
        return process.wait(timeout=max(0.1, deadline - time.monotonic())), output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        os.close(master)


def plain(output: bytes) -> str:
    """Terminal output without ANSI escape sequences."""
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", output.decode("utf-8", "replace"))


# ------------------------------------------------------------------------ pure helpers


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("500ms", 500),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("1.5s", 1500),
        ("1h30m", 5_400_000),
    ],
)
def test_durations(text: str, ms: int) -> None:
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["5", "", "abc", "5 parsecs", "0s", "-1s", "1x"])
def test_bad_durations_are_usage_errors(text: str) -> None:
    with pytest.raises(CliError) as info:
        parse_duration_ms(text)
    assert info.value.code == ExitCode.USAGE
    if text == "5":
        assert info.value.hint is not None and "5s" in info.value.hint


def test_format_duration() -> None:
    shown = [format_duration_ms(v) for v in (500, 1500, 90_000, 3_600_000, None)]
    assert shown == ["500ms", "1.5s", "1m30s", "1h", "-"]


def test_values_are_coerced_with_the_input_schema() -> None:
    assert coerce_value("3", {"type": "number"}) == 3
    assert coerce_value('"3"', {"type": "number"}) == 3
    assert coerce_value("2.0", {"type": "integer"}) == 2
    assert coerce_value("123", {"type": "string"}) == "123"
    assert coerce_value("true", {"type": "string"}) == "true"
    assert coerce_value('"quoted"', {"type": "string"}) == "quoted"
    assert coerce_value("yes", {"type": "boolean"}) is True
    assert coerce_value("[1, 2]", {"type": "array"}) == [1, 2]
    assert coerce_value("null", {"anyOf": [{"type": "number"}, {"type": "null"}]}) is None
    assert coerce_value("3", {"anyOf": [{"type": "string"}, {"type": "number"}]}) == 3
    assert coerce_value("b", {"enum": ["a", "b"]}) == "b"
    assert coerce_value("hello", {}) == "hello"
    assert coerce_value('{"a": 1}', {}) == {"a": 1}
    for raw, kind in [("x", "number"), ("1.5", "integer"), ("maybe", "boolean")]:
        with pytest.raises(ValueError):
            coerce_value(raw, {"type": kind})
    with pytest.raises(ValueError, match='"a", "b"'):
        coerce_value("c", {"enum": ["a", "b"]})


SLEEP = Tool(
    name="sleep",
    input_schema={
        "type": "object",
        "properties": {"seconds": {"type": "number"}, "label": {"type": "string"}},
        "required": ["seconds"],
        "additionalProperties": False,
    },
)


def test_tool_arguments(tmp_path: Path) -> None:
    assert parse_tool_arguments(SLEEP, ["seconds=3", "label=7"]) == {"seconds": 3, "label": "7"}
    assert parse_tool_arguments(SLEEP, ["label=x"], '{"seconds": 1.5}') == {"seconds": 1.5, "label": "x"}
    assert parse_tool_arguments(SLEEP, ["seconds=2"], '{"seconds": 1}') == {"seconds": 2}
    args_file = tmp_path / "args.json"
    args_file.write_text('{"seconds": 4}')
    assert parse_tool_arguments(SLEEP, [], f"@{args_file}") == {"seconds": 4}
    failures = {
        "seconds=abc": (["seconds=abc"], None, "expects a number"),
        "unknown": (["secs=1"], None, "did you mean 'seconds'"),
        "missing": (["label=x"], None, "needs argument seconds"),
        "no equals": (["seconds"], None, "expected key=value"),
        "json list": ([], "[1]", "must be a JSON object"),
        "json syntax": ([], "{seconds: 1}", "not valid JSON"),
        "json type": ([], '{"seconds": "soon"}', "must be number"),
        "json file": ([], f"@{tmp_path / 'missing.json'}", "cannot read"),
    }
    for pairs, json_args, message in failures.values():
        with pytest.raises(CliError) as info:
            parse_tool_arguments(SLEEP, pairs, json_args)
        assert info.value.code == ExitCode.USAGE
        assert message in f"{info.value.message} {info.value.hint}"


def test_load_server_from_a_file_or_a_module(tmp_path: Path) -> None:
    assert load_server(f"{DEMO_FILE}:server").info.name == "trio-mcp-demo"
    assert load_server("trio_mcp.cli.demo_server").info.name == "trio-mcp-demo"  # OBJECT defaults to server
    broken = tmp_path / "broken_server.py"
    broken.write_text("raise RuntimeError('boom at import')\n")
    cases = {
        f"{tmp_path / 'nope.py'}:server": "no such file",
        f"{DEMO_FILE}:srv": "Server objects in it",
        f"{DEMO_FILE}:main": "not a trio_mcp.Server",
        "no_such_module_xyz:server": "no module named 'no_such_module_xyz'",
        "bad spec:server": "neither a module name",
        f"{DEMO_FILE}:": "invalid SERVER spec",
        f"{broken}:server": "RuntimeError: boom at import",
    }
    for spec, message in cases.items():
        with pytest.raises(CliError) as info:
            load_server(spec)
        assert info.value.code == ExitCode.USAGE
        assert message in f"{info.value.message} {info.value.hint}", spec
    assert info.value.details is not None and "Traceback" in info.value.details


def test_results_print_text_and_structured_content() -> None:
    structured = CallToolResult(content=[TextContent('{"a": 1}')], structured_content={"a": 1})
    assert result_lines(structured) == ['{\n  "a": 1\n}']  # the JSON text block is not repeated
    mixed = CallToolResult(content=[TextContent("hello"), TextContent("world")])
    assert result_lines(mixed) == ["hello", "world"]


def test_demo_uses_the_example_server_of_a_checkout() -> None:
    assert default_demo_server().endswith("examples/demo_server.py:server")


# ----------------------------------------------------------------------------------- help


CLIENT_CODES = {0, 2, 3, 4, 130}
"""What a client command that runs no tool can exit with: success, usage, connection, protocol, Ctrl-C."""


@pytest.mark.parametrize(
    ("command", "codes"),
    [
        ("", {0, 1, 2, 3, 4, 130}),
        ("serve", {0, 2, 3, 130}),
        ("tools", CLIENT_CODES),
        ("call", CLIENT_CODES | {1}),
        ("demo", CLIENT_CODES),
        ("tasks", CLIENT_CODES | {1}),
        ("tasks list", CLIENT_CODES),
        ("tasks get", CLIENT_CODES),
        ("tasks result", CLIENT_CODES | {1}),
        ("tasks cancel", CLIENT_CODES),
    ],
)
def test_help_on_every_command_has_examples_and_its_own_exit_codes(command: str, codes: set[int]) -> None:
    result = invoke(*command.split(), "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout
    table = result.stdout.split("Exit codes:", 1)[1]
    rows = {int(m.group(1)): m.group(2) for m in re.finditer(r"^\s+(\d+)\s+(.*)$", table, re.MULTILINE)}
    assert set(rows) == codes, rows
    if command == "serve":  # a signal is how a server is meant to stop: exit 0, not 130
        assert "SIGINT" in rows[0] and "SIGTERM" in rows[0]
        assert "second signal" in rows[130] and "interrupted by Ctrl-C" not in result.stdout
    elif 130 in rows:
        assert "Ctrl-C" in rows[130] and "143" in rows[130]


def test_main_maps_usage_errors_and_help_to_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["no-such-command"])
    assert info.value.code == ExitCode.USAGE
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert "trio-mcp" in capsys.readouterr().out


# ---------------------------------------------------------------------------------- tools


def test_tools_over_stdio_shows_task_support() -> None:
    result = invoke("tools", STDIO_TARGET)
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if line.count("│") > 3}
    assert "optional" in rows["sleep"] and "seconds: number" in rows["sleep"]
    assert "forbidden" in rows["add"] and "required" in rows["batch_job"]
    assert "trio-mcp-demo 0.1.0 (protocol 2025-11-25)" in result.stdout


def test_tools_as_json(ws_url: str) -> None:
    result = ws(ws_url, "tools", "-o", "json")
    assert result.exit_code == 0, result.output
    tools = {tool["name"]: tool for tool in json.loads(result.stdout)}
    assert tools["batch_job"]["execution"] == {"taskSupport": "required"}
    assert tools["echo"]["inputSchema"]["required"] == ["text"]


# ----------------------------------------------------------------------------------- call


def test_plain_calls_coerce_arguments(ws_url: str) -> None:
    result = ws(ws_url, "call", "echo", "text=123")
    assert (result.exit_code, result.stdout) == (0, "123\n")
    result = ws(ws_url, "call", "add", "a=2", 'b="3"')
    assert (result.exit_code, result.stdout) == (0, "5.0\n")
    result = ws(ws_url, "call", "echo", "--json", '{"text": "from json"}')
    assert (result.exit_code, result.stdout) == (0, "from json\n")
    result = ws(ws_url, "call", "echo", "text=hi", "-o", "json")
    assert json.loads(result.stdout)["content"] == [{"type": "text", "text": "hi"}]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["ech", "text=hi"], ExitCode.USAGE, "did you mean 'echo'"),
        (["add", "a=two", "b=3"], ExitCode.USAGE, "argument 'a' of tool 'add' expects a number, got 'two'"),
        (["add", "a=1", "b=2", "--task"], ExitCode.USAGE, "cannot run as a task"),
        (["batch_job", "seconds=1"], ExitCode.USAGE, "only runs as a task"),
        (["sleep", "seconds=1", "--task", "--ttl", "soon"], ExitCode.USAGE, "invalid duration 'soon'"),
        (["sleep", "seconds=1", "--ttl", "5s"], ExitCode.USAGE, "only apply with --task"),
        (["fail", "message=boom"], ExitCode.TOOL_ERROR, "Error from tool fail: boom"),
    ],
)
def test_call_errors(ws_url: str, args: list[str], code: int, message: str) -> None:
    result = ws(ws_url, "call", *args)
    assert result.exit_code == code, result.output
    assert message in result.stderr
    assert result.stdout == ""


def test_call_as_a_task_follows_it_and_prints_the_result(ws_url: str) -> None:
    result = ws(ws_url, "call", "sleep", "seconds=0.3", "--task", "--ttl", "1m")
    assert result.exit_code == 0, result.output
    assert result.stdout == "slept 0.3s\n"
    assert re.search(r"Created \S+ working \(ttl 1m, poll every 500ms\)", result.stderr)
    assert "completed" in result.stderr  # not a terminal: one line per status change


def test_call_as_a_task_with_json_output(ws_url: str) -> None:
    result = ws(ws_url, "call", "sleep", "seconds=0.2", "--task", "-o", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["task"]["status"] == "completed"
    assert report["result"]["content"][0]["text"] == "slept 0.2s"
    assert report["error"] is None
    assert result.stderr == ""


def test_a_failing_task_exits_1(ws_url: str) -> None:
    result = ws(ws_url, "call", "fail", "message=broken", "--task")
    assert result.exit_code == ExitCode.TOOL_ERROR
    assert "failed - broken" in result.stderr and "Error from tool fail: broken" in result.stderr


@pytest.mark.parametrize("protocol", ["2026-07-28", "auto"])
def test_the_modern_era_from_the_command_line(ws_url: str, protocol: str) -> None:
    plain = ws(ws_url, "call", "echo", "text=hi", "--protocol", protocol)
    assert (plain.exit_code, plain.stdout) == (0, "hi\n"), plain.output
    # A task the server decided on (the demo's window is 1 s): followed to its result.
    slow = ws(ws_url, "call", "sleep", "seconds=2", "--task", "--protocol", protocol, "-o", "json")
    assert slow.exit_code == 0, slow.output
    report = json.loads(slow.stdout)
    assert report["task"]["status"] == "completed"
    assert report["result"]["content"][0]["text"] == "slept 2.0s"
    # A fast call asked to run as a task comes back as the plain result the server chose.
    fast = ws(ws_url, "call", "echo", "text=quick", "--task", "--protocol", protocol, "-o", "json")
    assert fast.exit_code == 0, fast.output
    report = json.loads(fast.stdout)
    assert report["task"] is None and report["error"] is None
    assert report["result"]["content"] == [{"type": "text", "text": "quick"}]
    assert report["result"]["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "trio-mcp-demo"


def test_input_is_asked_at_the_terminal_in_the_modern_era(ws_url: str) -> None:
    result = ws(ws_url, "call", "ask", "question=Your name?", "--protocol", "2026-07-28", input="Ada\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "The user answered: Ada\n"
    assert "Your name?" in result.stderr


# ---------------------------------------------------------------------------------- tasks


def test_tasks_outlive_one_invocation_on_a_websocket_server_with_a_token(ws_url: str) -> None:
    created = ws(ws_url, "call", "batch_job", "seconds=30", "--task", "--detach")
    assert created.exit_code == 0, created.output
    task_id = created.stdout.strip()
    listed = ws(ws_url, "tasks list", "-o", "json")
    assert {"taskId": task_id, "status": "working"}.items() <= {
        k: v for t in json.loads(listed.stdout) if t["taskId"] == task_id for k, v in t.items()
    }.items()
    table = ws(ws_url, "tasks list")
    assert task_id in table.stdout and "batch job running" in table.stdout
    got = ws(ws_url, "tasks get", task_id)
    assert got.exit_code == 0 and "working" in got.stdout and "1h" in got.stdout

    cancelled = ws(ws_url, "tasks cancel", task_id)
    assert (cancelled.exit_code, cancelled.stdout.split()[:2]) == (0, [task_id, "cancelled"])
    result = ws(ws_url, "tasks result", task_id)
    assert result.exit_code == ExitCode.TOOL_ERROR and "Task cancelled" in result.stderr
    again = ws(ws_url, "tasks cancel", task_id)
    assert again.exit_code == ExitCode.PROTOCOL and "already in terminal status" in again.stderr
    unknown = ws(ws_url, "tasks get", "no-such-task")
    assert unknown.exit_code == ExitCode.PROTOCOL and "Task not found" in unknown.stderr

    quick = ws(ws_url, "call", "batch_job", "seconds=0.1", "--task", "--detach", "-o", "json")
    quick_id = json.loads(quick.stdout)["taskId"]
    done = ws(ws_url, "tasks result", quick_id)
    assert (done.exit_code, done.stdout) == (0, "batch job done after 0.1s\n")


def test_task_ids_may_begin_with_a_dash(ws_url: str) -> None:
    # Task ids are URL-safe base64: 1 in 32 begins with "-" and must not be taken for an option.
    for task_id in ["-Xabcdefghijk", "-oFoobarbaz12", "--Xabcdefghij"]:
        result = ws(ws_url, "tasks get", task_id, "-o", "json")
        assert result.exit_code == ExitCode.PROTOCOL, (task_id, result.output)
        assert "Task not found" in result.stderr
    typo = ws(ws_url, "tasks get", "some-id", "-x")
    assert typo.exit_code == ExitCode.USAGE and "No such option '-x'" in typo.stderr


def test_tasks_on_a_stdio_target_see_a_fresh_server() -> None:
    result = invoke("tasks", "list", STDIO_TARGET)
    assert result.exit_code == 0
    assert "fresh server" in result.stderr and "No tasks." in result.stderr


# ---------------------------------------------------------------------- connection errors


def test_connection_errors_exit_3(ws_url: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    cases: list[tuple[list[str], dict[str, str | None], str]] = [
        (["tools", f"ws://127.0.0.1:{closed_port}/"], {}, "cannot connect"),
        (["tools", ws_url], {}, "pass --token"),
        (["tools", ws_url, "--token", "wrong"], {}, "401 Unauthorized (the token was not accepted"),
        (["tools", "no-such-command-xyz --serve"], {}, "command not found"),
        (["tools", f"{shlex.quote(PY)} -c 'import sys; sys.exit(7)'"], {}, "exited with status 7"),
        (["tools", "sleep 30", "--timeout", "300ms"], {}, "did not complete the MCP handshake within 0.3s"),
    ]
    for args, env, message in cases:
        result = invoke(*args, env=env)
        assert result.exit_code == ExitCode.CONNECTION, (args, result.output)
        assert message in result.stderr, (args, result.stderr)


def test_bad_target_syntax_is_a_usage_error() -> None:
    result = invoke("tools", "python 'unbalanced")
    assert result.exit_code == ExitCode.USAGE and "cannot split TARGET" in result.stderr


# ---------------------------------------------------------------------------------- serve


def test_serve_rejects_a_bad_server_spec_and_options() -> None:
    result = invoke("serve", "examples/nope.py:server")
    assert result.exit_code == ExitCode.USAGE and "no such file" in result.stderr
    result = invoke("serve", f"{DEMO_FILE}:server", "--ws", "localhost:http")
    assert result.exit_code == ExitCode.USAGE and "numeric port" in result.stderr
    result = invoke("serve", f"{DEMO_FILE}:server", "--token", "x")
    assert result.exit_code == ExitCode.USAGE and "only apply with --ws" in result.stderr
    result = invoke("serve", f"{DEMO_FILE}:server", "--ws", ":0", "--allow-origin", "not an origin")
    assert result.exit_code == ExitCode.USAGE and "not an origin pattern" in result.stderr


def test_serve_on_a_port_in_use_is_a_connection_error() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = invoke("serve", f"{DEMO_FILE}:server", "--ws", f"127.0.0.1:{port}")
    assert result.exit_code == ExitCode.CONNECTION
    assert "cannot listen on 127.0.0.1" in result.stderr and "port 0 picks a free one" in result.stderr


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_serve_over_stdio_shuts_down_cleanly_on_a_signal(signum: int) -> None:
    command = [*CLI, "serve", f"{DEMO_FILE}:server"]
    with trio.fail_after(15):
        async with open_subprocess_transport(command) as transport, connect(transport) as client:
            created = await client.call_tool_as_task("sleep", {"seconds": 3600})
            assert created.task.status == "working"
            transport.process.send_signal(signum)
            with trio.fail_after(3):
                await transport.process.wait()
    assert transport.process.returncode == 0


# -------------------------------------------------------------- a terminal: progress, Ctrl-C


def test_progress_bar_in_a_terminal(ws_url: str) -> None:
    code, output = run_in_pty([*CLI, "call", ws_url, "sleep", "seconds=1.2", "--task", "--token", TOKEN])
    text = plain(output)
    assert code == 0, text
    assert "━" in text  # the bar
    percentages = {int(p) for p in re.findall(r"(\d+)%", text)}
    assert 100 in percentages and len(percentages & set(range(10, 100, 10))) >= 3, percentages
    assert "sleeping: step" in text  # the status message
    assert re.search(r"0:00:0\d", text)  # elapsed time
    assert "✔ sleep" in text and "completed" in text
    assert text.rstrip().endswith("slept 1.2s")


def _task_status(ws_url: str, task_id: str) -> str:
    result = ws(ws_url, "tasks get", task_id, "-o", "json")
    assert result.exit_code == 0, result.output
    status: str = json.loads(result.stdout)["status"]
    return status


def test_sigint_during_a_task_cancels_it_and_exits_130(ws_url: str) -> None:
    def interrupt(process: subprocess.Popen[bytes], master: int) -> None:
        process.send_signal(signal.SIGINT)

    argv = [*CLI, "call", ws_url, "sleep", "seconds=3600", "--task", "--token", TOKEN]
    code, output = run_in_pty(argv, trigger=(b"sleeping: step", interrupt))
    text = plain(output)
    assert code == ExitCode.INTERRUPTED, text
    match = re.search(r"final status: (\S+) cancelled", text)
    assert match, text
    assert _task_status(ws_url, match.group(1)) == "cancelled"  # really cancelled on the server


def test_ctrl_c_typed_in_the_terminal_cancels_a_stdio_task(tmp_path: Path) -> None:
    # ^C reaches the whole foreground process group; the stdio server we spawned must not die
    # of it before it has answered tasks/cancel (the CLI starts it in a session of its own).
    def type_ctrl_c(process: subprocess.Popen[bytes], master: int) -> None:
        os.write(master, b"\x03")

    argv = [*CLI, "call", STDIO_TARGET, "sleep", "seconds=3600", "--task"]
    code, output = run_in_pty(argv, trigger=(b"sleeping: step", type_ctrl_c), controlling_tty=True)
    text = plain(output)
    assert code == ExitCode.INTERRUPTED, text
    assert re.search(r"final status: \S+ cancelled - The task was cancelled by request", text), text


# ----------------------------------------------------------------------------------- demo


def test_demo_walks_through_tasks() -> None:
    result = invoke("demo", "--server", "trio_mcp.cli.demo_server:server", "--pace", "0.25")
    assert result.exit_code == 0, result.output
    out: Any = result.stdout
    for expected in [
        "Connected to trio-mcp-demo",
        "1. Create a task and follow it",
        "tasks/result: 'slept 0.5s'",
        "batch job done after 0.25s",
        "tasks/cancel: ",
        "error -32602: Cannot cancel task",
        "error -32011",
        "isError=True: something broke",
        "add as a task: error -32601",
        "5. A task that needs input",
        "tasks/result: The user answered: trio",
        "6. tasks/list",
        "7. MCP 2026-07-28",
        "echo (done within the window): fast calls stay plain",
        "still running after the window, so a task: ",
        "its result (tasks/get, inline): slept 1.5s",
        "ask asked for input at once: input_required, inputRequests ['input-0']",
        "answered with tasks/update: The user answered: trio",
        "Done.",
    ]:
        assert expected in out, expected
    assert out.count("cancelled") >= 3


def test_demo_ends_with_a_command_this_shell_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    """``make demo`` runs ``.venv/bin/trio-mcp`` with the venv not activated: the hint at the
    end must name a command that exists, not a bare ``trio-mcp`` the shell cannot find."""
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # the venv's bin is not on PATH
    monkeypatch.chdir(REPO)
    result = invoke("demo", "--server", "trio_mcp.cli.demo_server:server", "--pace", "0.1")
    assert result.exit_code == 0, result.output
    hint = result.stdout.split("Try it yourself:", 1)[1].split()
    exe = hint[0]
    assert exe != "trio-mcp" and Path(exe).is_file() and os.access(exe, os.X_OK)
    assert Path(exe).name == "trio-mcp"
    assert "activate`" in result.stdout
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}:/usr/bin:/bin")
    assert command_name() == "trio-mcp"


# ---------------------------------------------------------------------- elicitation: asking


FORM = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "title": "Name", "minLength": 2},
        "email": {"type": "string", "format": "email"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "size": {
            "type": "string",
            "oneOf": [{"const": "s", "title": "Small"}, {"const": "l", "title": "Large"}],
        },
        "color": {
            "type": "string",
            "enum": ["red", "green"],
            "enumNames": ["Red", "Green"],
            "default": "red",
        },
        "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "b", "c"]}, "maxItems": 2},
        "subscribe": {"type": "boolean", "default": False},
        "score": {"type": "number"},
    },
    "required": ["name", "age", "size", "tags"],
}


def test_elicitation_answers_are_checked_against_the_schema() -> None:
    fields = {field.name: field for field in form_fields(FORM)}
    assert [f.kind for f in fields.values()] == [
        "string",
        "string",
        "integer",
        "choice",
        "choice",
        "multi",
        "boolean",
        "number",
    ]
    name, email, age, size = fields["name"], fields["email"], fields["age"], fields["size"]
    color, tags, subscribe, score = fields["color"], fields["tags"], fields["subscribe"], fields["score"]
    assert name.answer(" Ada ") == " Ada "  # strings are kept as typed
    assert age.answer("36") == 36 and age.answer("1e2") == 100 and score.answer("2.5") == 2.5
    assert size.answer("2") == "l" and size.answer("small") == "s" and size.answer("l") == "l"
    assert color.answer("") == "red" and color.answer("Green") == "green"  # default; a title
    assert tags.answer("c, a, c") == ["c", "a"] and tags.answer("3") == ["c"]
    assert subscribe.answer("") is False and subscribe.answer("yes") is True
    assert email.answer("") is Skip.OMIT and score.answer("") is Skip.OMIT  # optional: left out
    failures = [
        (name, "A", "must be at least 2 characters"),
        (name, "", "an answer is required"),
        (email, "nope", "not a valid email address"),
        (age, "200", "must be from 0 to 150"),
        (age, "1.5", "not a whole number"),
        (score, "nan", "not a finite number"),
        (score, "many", "not a number"),
        (size, "medium", "not one of the choices: Small, Large"),
        (tags, "a,b,c", "choose at most 2"),
        (subscribe, "maybe", "not yes or no"),
    ]
    for field, text, message in failures:
        with pytest.raises(ValueError, match=re.escape(message)):
            field.answer(text)
    prompts = {name: f.prompt().plain for name, f in fields.items()}
    assert prompts["age"] == "  age (integer from 0 to 150): "
    assert prompts["color"] == "  color [1-2] (default: Red): "
    assert prompts["tags"] == "  tags [a/b/c, comma-separated] (choose at most 2): "
    assert prompts["subscribe"] == "  subscribe [y/N]: "
    assert prompts["email"] == "  email (email address, optional): "
    assert [line.plain for line in size.option_lines()] == ["    1) Small = s", "    2) Large = l"]
    assert Field.of("x", {"type": "object"}, True).answer('{"a": 1}') == {"a": 1}  # beyond the subset


async def test_the_elicitor_asks_again_until_an_answer_fits_and_declines_at_end_of_input() -> None:
    err = io.StringIO()
    answers = "A\nAda\n\n200\n36\nlarge\n\na,b\nno\n\n" + "Bob\n"  # then the input ends
    elicitor = TerminalElicitor(Console(file=err, width=200), stdin=io.StringIO(answers))
    request = ElicitRequestParams(
        "Sign up", FORM, meta={"io.modelcontextprotocol/related-task": {"taskId": "t1"}}
    )
    with trio.fail_after(5):
        result = await elicitor(request)
        assert result == ElicitResult(
            "accept",
            {"name": "Ada", "age": 36, "size": "l", "color": "red", "tags": ["a", "b"], "subscribe": False},
        )
        assert await elicitor(ElicitRequestParams("Again", FORM)) == ElicitResult("decline")
        assert await elicitor(ElicitRequestParams("Once more", FORM)) == ElicitResult("decline")
        await elicitor.withdraw()
        assert await elicitor(ElicitRequestParams("Too late", FORM)) == ElicitResult("cancel")
    transcript = err.getvalue()
    assert transcript.startswith("? Task t1 asks: Sign up\n  Name (at least 2 characters): A\n")
    assert "✘ must be at least 2 characters, got 1" in transcript
    assert "  email (email address, optional): \n" in transcript  # the answers are echoed
    assert "  age (integer from 0 to 150): 200\n  ✘ must be from 0 to 150, got 200" in transcript
    assert "? The server asks: Again" in transcript
    assert transcript.count("(end of input)") == 2 and transcript.count("→ declined") == 2
    assert "Too late" not in transcript


def test_ask_with_piped_stdin_reads_the_answer_and_declines_at_end_of_input(ws_url: str) -> None:
    result = ws(ws_url, "call", "ask", "question=Favourite colour?", "--task", input="blue\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "The user answered: blue\n"  # stdout stays the result
    assert re.search(r"\? Task \S+ asks: Favourite colour\?\n  answer \(Your answer\): blue\n", result.stderr)
    result = ws(ws_url, "call", "ask", "question=Favourite colour?", "-o", "json", input="")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["content"][0]["text"] == "The user chose to decline."
    assert "? The server asks: Favourite colour?" in result.stderr and "→ declined" in result.stderr


def _type(keys: bytes) -> Callable[[subprocess.Popen[bytes], int], None]:
    def type_keys(process: subprocess.Popen[bytes], master: int) -> None:
        os.write(master, keys)

    return type_keys


@pytest.mark.parametrize("as_task", [True, False], ids=["task", "plain"])
def test_ask_in_a_terminal(as_task: bool) -> None:
    argv = [*CLI, "call", STDIO_TARGET, "ask", "question=Favourite colour?", *(["--task"] if as_task else [])]
    code, output = run_in_pty(argv, trigger=(b"(Your answer)", _type(b"deep blue\r")))
    text = plain(output)
    assert code == 0, text
    assert "Ctrl-D declines, Ctrl-C cancels" in text
    assert re.search(r"answer \(Your answer\): deep blue\r?\n", text), text
    if as_task:  # the bar stopped at input_required above the prompt, and went on below it
        assert text.index("input_required · Favourite colour?") < text.index("asks: Favourite colour?")
        assert "✔ ask" in text[text.index("deep blue") :]
    assert text.rstrip().endswith("The user answered: deep blue")


@pytest.mark.parametrize(
    ("keys", "action"), [(b"\x04", "decline"), (b"\x03", "cancel")], ids=["ctrl-d", "ctrl-c"]
)
def test_ctrl_d_declines_and_ctrl_c_cancels_only_the_question(ws_url: str, keys: bytes, action: str) -> None:
    argv = [*CLI, "call", ws_url, "ask", "question=Favourite colour?", "--task", "--token", TOKEN]
    code, output = run_in_pty(argv, trigger=(b"(Your answer)", _type(keys)), controlling_tty=True)
    text = plain(output)
    assert code == 0, text  # Ctrl-C dismissed the question: the task went on and completed
    assert "✔ ask" in text and "completed" in text
    assert ("→ declined" if action == "decline" else "→ cancelled this request") in text
    assert text.rstrip().endswith(f"The user chose to {action}.")


# ---------------------------------------------------------------------------------- --store


@contextlib.contextmanager
def serving_with(*options: str) -> Iterator[str]:
    """``trio-mcp serve`` the demo over WebSocket with a token and ``options``; its URL."""
    with served(f"{DEMO_FILE}:server", "--ws", "127.0.0.1:0", "--token", TOKEN, *options) as url:
        yield url


def test_a_sqlite_store_keeps_tasks_across_a_restart(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path / 'tasks.db'}"
    with serving_with("--store", store) as url:
        done = ws(url, "call", "echo", "text=kept", "--task", "-o", "json")
        assert done.exit_code == 0, done.output
        done_id = json.loads(done.stdout)["task"]["taskId"]
        running = ws(url, "call", "batch_job", "seconds=600", "--task", "--detach")
        assert running.exit_code == 0, running.output
        running_id = running.stdout.strip()
    with serving_with("--store", store) as url:  # a new process on the same file
        result = ws(url, "tasks result", done_id)
        assert (result.exit_code, result.stdout) == (0, "kept\n"), result.output
        got = ws(url, "tasks get", running_id, "-o", "json")
        assert got.exit_code == 0, got.output
        task = json.loads(got.stdout)
        assert task["status"] == "failed"
        assert "stopped" in task["statusMessage"]


def test_an_unknown_store_is_a_usage_error() -> None:
    result = invoke("serve", f"{DEMO_FILE}:server", "--store", "postgres://nope")
    assert result.exit_code == ExitCode.USAGE
    assert "unknown task store" in result.output


# ------------------------------------------------------------------ elicitation: a URL to open
async def test_the_elicitor_opens_a_url_only_with_consent(monkeypatch: pytest.MonkeyPatch) -> None:
    import webbrowser

    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    err = io.StringIO()
    elicitor = TerminalElicitor(Console(file=err, width=200), stdin=io.StringIO("y\nno\n"))
    page = "https://auth.example/connect?state=abc"
    with trio.fail_after(5):
        assert await elicitor.url(ElicitUrlRequestParams("Connect your account", page)) == ElicitResult(
            "accept"
        )
        assert await elicitor.url(ElicitUrlRequestParams("Again", page)) == ElicitResult("decline")
        assert await elicitor.url(ElicitUrlRequestParams("At the end", page)) == ElicitResult("decline")
        # not a web page: shown, declined, nothing asked or opened
        assert await elicitor.url(ElicitUrlRequestParams("Run", "file:///etc/passwd")) == ElicitResult(
            "decline"
        )
        await elicitor.withdraw()
        assert await elicitor.url(ElicitUrlRequestParams("Too late", page)) == ElicitResult("cancel")
    assert opened == [page]  # once: only where the user said yes
    transcript = err.getvalue()
    assert transcript.startswith(
        f"? The server asks you to open a page: Connect your account\n  {page}\n  (on auth.example)\n"
        "  Open it in your browser? [y/N]: y\n"
    )
    assert transcript.count("→ declined") == 2 and "not an http(s) URL: declined" in transcript


def test_call_answers_a_url_elicitation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import webbrowser

    opened: list[str] = []
    monkeypatch.setattr(webbrowser, "open", lambda url: opened.append(url) or True)
    server = tmp_path / "urls.py"
    server.write_text(
        textwrap.dedent(
            """
            from trio_mcp import Context, Server

            server = Server("urls")

            @server.tool()
            async def connect(ctx: Context) -> str:
                \"\"\"Send the user to connect an account.\"\"\"
                answer = await ctx.elicit_url("Connect your account", "https://auth.example/connect")
                return f"the user chose: {answer.action}"

            if __name__ == "__main__":
                server.run()
            """
        )
    )
    target = f"{shlex.quote(PY)} {shlex.quote(str(server))}"
    result = invoke("call", target, "connect", input="y\n")
    assert result.exit_code == 0, result.output
    assert result.stdout == "the user chose: accept\n"
    assert "asks you to open a page: Connect your account" in result.stderr
    assert opened == ["https://auth.example/connect"]
    result = invoke("call", target, "connect", input="")
    assert result.exit_code == 0 and result.stdout == "the user chose: decline\n"
