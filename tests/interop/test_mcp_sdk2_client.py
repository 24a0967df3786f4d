"""The official Python SDK 2.x client (``mcp`` 2.3) against ``examples/demo_server.py`` over stdio.

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
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SDK2_PYTHON = Path(os.environ.get("TRIO_MCP_SDK2_PYTHON", REPO / ".venv-sdk2" / "bin" / "python"))


def test_the_sdk2_client_settles_on_the_modern_era_and_calls_the_tools() -> None:
    if not SDK2_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{SDK2_PYTHON} is missing: `make test` builds it")
        pytest.skip("the SDK 2.x environment is built by `make test` (.venv-sdk2)")
    done = subprocess.run(
        [
            str(SDK2_PYTHON),
            str(Path(__file__).with_name("sdk2_client.py")),
            sys.executable,
            str(REPO / "examples" / "demo_server.py"),
        ],
        capture_output=True,
        text=True,
        timeout=90,
        env={**os.environ, "PYTHONPATH": ""},
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["protocol_version"] == "2026-07-28"
    assert report["tools"] == ["add", "ask", "batch_job", "echo", "fail", "sleep"]
    assert report["echo"] == "hello"
    assert report["add"] == "5.0"
    assert report["fail"] == [True, "kaboom"]
    assert report["ask"] == "The user answered: Ada"
    assert report["sleep"] == "slept 1.5s"
