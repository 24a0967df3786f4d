"""``server.run()`` takes its transport from the command line, as ``trio-mcp serve`` does:
a server file written like the README's serves stdio, WebSocket and HTTP by its own arguments."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import trio

from tests.conftest import served
from tests.doc_blocks import python_blocks
from trio_mcp import connect_http, connect_stdio, connect_websocket
from trio_mcp.server import RunOptions, parse_run_args

ROOT = Path(__file__).resolve().parents[2]


def readme_server(directory: Path) -> Path:
    """The README's server, exactly as written there, as a file."""
    blocks = [lines for _, lines in python_blocks((ROOT / "README.md").read_text(encoding="utf-8"))]
    (source,) = [lines for lines in blocks if any("server.run()" in line for line in lines)]
    path = directory / "myserver.py"
    path.write_text("\n".join(source) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------------- parsing


def test_no_arguments_serve_stdio() -> None:
    assert parse_run_args([]) == RunOptions()
    assert parse_run_args(["--stdio"]).transport == "stdio"


def test_ws_and_http_take_host_and_port() -> None:
    ws = parse_run_args(
        ["--ws", "127.0.0.1:8766", "--token", "s3cret", "--allow-origin", "https://a.example"]
    )
    assert (ws.transport, ws.listen, ws.token, ws.allow_origins) == (
        "ws",
        ("127.0.0.1", 8766),
        "s3cret",
        ("https://a.example",),
    )
    http = parse_run_args(["--http", ":8000", "--store", "sqlite:///tasks.db", "--log-level", "info"])
    assert (http.transport, http.listen, http.store, http.log_level) == (
        "http",
        ("127.0.0.1", 8000),
        "sqlite:///tasks.db",
        "info",
    )


def test_the_command_line_overrides_the_keyword_defaults() -> None:
    defaults = RunOptions.from_arguments(http="127.0.0.1:8000", token="kw")
    assert parse_run_args([], defaults=defaults) == defaults
    chosen = parse_run_args(["--ws", ":9000"], defaults=defaults)
    assert (chosen.transport, chosen.listen, chosen.token) == ("ws", ("127.0.0.1", 9000), "kw")
    assert parse_run_args(["--stdio"], defaults=defaults) == RunOptions()


def test_the_token_and_store_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIO_MCP_TOKEN", "from-env")
    monkeypatch.setenv("TRIO_MCP_STORE", "sqlite:///env.db")
    options = parse_run_args(["--ws", ":8765"])
    assert (options.token, options.store) == ("from-env", "sqlite:///env.db")
    assert parse_run_args([]).token is None  # the environment's token is for network transports


@pytest.mark.parametrize(
    ("argv", "complaint"),
    [
        (["--ws", ":1", "--http", ":2"], "not allowed with argument"),
        (["--token", "t"], "only apply with --ws or --http"),
        (["--ws", "nowhere:port"], "argument --ws"),
        (["--store", "ftp://x"], "argument --store"),
        (["--log-level", "loud"], "invalid choice"),
        (["--frobnicate"], "unrecognized arguments"),
    ],
)
def test_bad_arguments_print_usage_and_exit_2(
    argv: list[str], complaint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parse_run_args(argv, prog="myserver.py")
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: myserver.py")
    assert complaint in err


def test_a_bad_store_in_the_environment_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRIO_MCP_STORE", "ftp://x")
    with pytest.raises(SystemExit) as exited:
        parse_run_args([], prog="myserver.py")
    assert exited.value.code == 2
    assert "TRIO_MCP_STORE: unknown task store 'ftp://x'" in capsys.readouterr().err
    assert parse_run_args(["--store", "memory"]).store == "memory"  # the command line wins


def test_keyword_arguments_that_disagree_are_refused() -> None:
    with pytest.raises(ValueError, match="cannot be combined"):
        RunOptions.from_arguments(ws=":1", http=":2")
    with pytest.raises(ValueError, match="only apply with ws or http"):
        RunOptions.from_arguments(token="t")
    with pytest.raises(ValueError, match="unknown task store"):
        RunOptions.from_arguments(store="ftp://x")


# ------------------------------------------------------------------ the README's server file


async def _echo_through(client: object) -> str:
    result = await client.call_tool("echo", {"text": "hi"})  # type: ignore[attr-defined]
    return str(result.content[0].text)


def test_the_readme_server_serves_websocket_by_its_own_command_line(tmp_path: Path) -> None:
    path = readme_server(tmp_path)
    command = [sys.executable, str(path), "--ws", "127.0.0.1:0", "--token", "s3cret"]
    with served(command=command) as url:

        async def main() -> None:
            async with connect_websocket(url, token="s3cret") as client:
                assert await _echo_through(client) == "hi"
            with pytest.raises(Exception, match="401"):
                async with connect_websocket(url, token="wrong"):
                    pass

        trio.run(main)


def test_the_readme_server_serves_http_by_its_own_command_line(tmp_path: Path) -> None:
    path = readme_server(tmp_path)
    command = [sys.executable, str(path), "--http", "127.0.0.1:0"]
    with served(command=command, url=rb"http://127\.0\.0\.1:(\d+)/mcp") as url:

        async def main() -> None:
            for protocol in ("2025-11-25", "2026-07-28"):
                async with connect_http(url, protocol=protocol) as client:
                    assert await _echo_through(client) == "hi"

        trio.run(main)


def test_the_readme_server_serves_stdio_without_arguments(tmp_path: Path) -> None:
    path = readme_server(tmp_path)

    async def main() -> None:
        async with connect_stdio([sys.executable, str(path)]) as client:
            assert await _echo_through(client) == "hi"

    trio.run(main)


def test_the_readme_server_refuses_bad_arguments(tmp_path: Path) -> None:
    path = readme_server(tmp_path)
    done = subprocess.run(
        [sys.executable, str(path), "--ws", "127.0.0.1:0", "--http", "127.0.0.1:0"],
        capture_output=True,
        text=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 2
    assert "usage: myserver.py" in done.stderr


# ------------------------------------------------------------------------ the collector

_MANY_LONG_LIVED = """
import gc, json
from trio_mcp.server import GC_THRESHOLD, tune_gc
tune_gc()
full_before = gc.get_stats()[2]["collections"]  # tune_gc's own
kept, largest = [], 0
for i in range(400_000):  # long-lived tracked objects, as live tasks are
    kept.append([i])
    if i % 997 == 0:
        largest = max(largest, len(gc.get_objects(0)) + len(gc.get_objects(1)))
full = gc.get_stats()[2]["collections"] - full_before
print(json.dumps({"largest": largest, "threshold": GC_THRESHOLD, "full": full}))
"""


def test_under_tune_gc_no_collection_scans_more_than_two_young_generations() -> None:
    # What a young or middle collection scans is what the two younger generations hold: under
    # tune_gc that stays about two young generations' worth, however many objects live on
    # (under the earlier settings the middle generation grew to a million objects: 0.4 s
    # pauses at 100 000 live tasks). No full collection comes from 400 000 allocations.
    done = subprocess.run(
        [sys.executable, "-c", _MANY_LONG_LIVED], capture_output=True, text=True, check=True, timeout=120
    )
    seen = json.loads(done.stdout)
    assert seen["largest"] <= 2 * seen["threshold"] + 1000
    assert seen["full"] == 0


def test_sigterm_over_http_lets_a_request_in_flight_finish(tmp_path: Path) -> None:
    # server.run() over HTTP stops as trio-mcp serve does: the listener stops first, a
    # request in flight finishes within the grace (it is not cut with -32603), exit 0.
    path = readme_server(tmp_path)
    process = subprocess.Popen(
        [sys.executable, str(path), "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    seen = b""
    try:
        while (match := re.search(rb"http://127\.0\.0\.1:(\d+)/mcp", seen)) is None:
            chunk = process.stderr.read1(4096)
            assert chunk, seen
            seen += chunk
        url = match.group(0).decode()

        envelope = {
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
            "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
        }
        body = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "sleep", "arguments": {"seconds": 1.0}, "_meta": envelope},
        }
        headers = {
            "accept": "application/json, text/event-stream",
            "mcp-protocol-version": "2026-07-28",
            "mcp-method": "tools/call",
            "mcp-name": "sleep",
        }

        async def main() -> str:
            async with httpx.AsyncClient(timeout=15) as http, trio.open_nursery() as nursery:
                answer: list[str] = []

                async def call() -> None:
                    response = await http.post(url, json=body, headers=headers)
                    answer.append(response.text)

                nursery.start_soon(call)
                await trio.sleep(0.3)
                process.send_signal(signal.SIGTERM)
            return answer[0]

        assert "slept 1.0s" in trio.run(main)
        assert process.wait(timeout=15) == 0
    finally:
        process.kill()
        process.wait()
