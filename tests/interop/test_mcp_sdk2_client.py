"""The official Python SDK 2.x client (``mcp`` 2.3) against ``examples/demo_server.py``, over
stdio and over Streamable HTTP (``trio-mcp serve ... --http``, the SDK's ``Client(url)``).

The SDK lives in its own virtual environment (``make test`` builds ``.venv-sdk2``: its package
name clashes with the 1.x SDK of the other interop tests). In its default ``auto`` mode it
probes with ``server/discover`` and must settle on 2026-07-28 with us, then call the tools:
plain results, a tool error, input through MRTR (``InputRequiredResult`` answered by its
elicitation callback), and a call that outlasts the server's auto-task window (the SDK does not
declare the tasks extension, so it gets the plain result).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from conftest import served

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "demo_server.py"
SDK2_PYTHON = Path(os.environ.get("TRIO_MCP_SDK2_PYTHON", REPO / ".venv-sdk2" / "bin" / "python"))


def sdk2_python() -> Path:
    if not SDK2_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{SDK2_PYTHON} is missing: `make test` builds it")
        pytest.skip("the SDK 2.x environment is built by `make test` (.venv-sdk2)")
    return SDK2_PYTHON


def run_sdk2_client(*args: str) -> dict[str, Any]:
    done = subprocess.run(
        [str(sdk2_python()), str(Path(__file__).with_name("sdk2_client.py")), *args],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return report


def check_report(report: dict[str, Any]) -> None:
    assert report["protocol_version"] == "2026-07-28"
    assert report["tools"] == ["add", "ask", "batch_job", "echo", "fail", "sleep"]
    assert report["echo"] == "hello"
    assert report["add"] == "5.0"
    assert report["fail"] == [True, "kaboom"]
    assert report["ask"] == "The user answered: Ada"
    assert report["sleep"] == "slept 1.5s"


def test_the_sdk2_client_settles_on_the_modern_era_and_calls_the_tools() -> None:
    check_report(run_sdk2_client(sys.executable, str(DEMO)))


@contextmanager
def serving_http() -> Iterator[str]:
    """``trio-mcp serve examples/demo_server.py --http 127.0.0.1:0``: its URL, read from stderr."""
    with served(str(DEMO), "--http", "127.0.0.1:0", url=rb"http://127\.0\.0\.1:(\d+)/mcp") as url:
        yield url


def test_the_sdk2_client_settles_on_the_modern_era_over_http() -> None:
    sdk2_python()
    with serving_http() as url:
        check_report(run_sdk2_client(url))
