"""``trio-mcp worker`` needs a store that queues work: with any other it says so and exits 2."""

from __future__ import annotations

import subprocess
import sys


def test_a_worker_on_a_store_that_queues_nothing_is_a_usage_error() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "trio_mcp.cli",
            "worker",
            "trio_mcp.cli.demo_server:server",
            "--store",
            "memory",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "a worker needs a shared store that queues work: --store redis://HOST:PORT/DB" in done.stderr
