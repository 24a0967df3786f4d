"""A TCP round-robin balancer for the tests that run several server processes: the one of the
deploy recipe (``examples/deploy/local_cluster.py``), loaded by path.

:func:`round_robin` serves on a free port of 127.0.0.1 (given to ``task_status``) and sends
each new connection to the next of ``ports`` — a list the test may change while it runs (a
rolling deploy) — skipping ports that refuse the connection; bytes are piped both ways.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import trio

__all__ = ["round_robin"]

_RECIPE = Path(__file__).resolve().parents[1] / "examples" / "deploy" / "local_cluster.py"
_spec = importlib.util.spec_from_file_location("deploy_local_cluster", _RECIPE)
assert _spec is not None and _spec.loader is not None
_recipe = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_recipe)


async def round_robin(ports: list[int], task_status: trio.TaskStatus[int]) -> None:
    await _recipe.balance(ports, 0, task_status)
