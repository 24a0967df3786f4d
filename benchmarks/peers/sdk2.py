"""The Python SDK 2.x peer's setup: ``.venv-sdk2`` (the one the Makefile builds for the interop
test, ``mcp==2.3.0``) with uvicorn in it.

``python -m benchmarks.peers.sdk2`` makes sure of it: it creates the environment if it is
missing (as the Makefile's ``.venv-sdk2/.installed`` rule does) and installs uvicorn there if
``mcp`` did not bring it. ``--check`` only says whether it is ready. :func:`command` is the argv
that starts ``benchmarks/peers/sdk2_http_server.py`` with that environment's Python.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV = ROOT / ".venv-sdk2"
SDK_VERSION = "2.3.0"
SERVER_SOURCE = Path(__file__).resolve().parent / "sdk2_http_server.py"


class SetupError(Exception):
    """The environment could not be made or found."""


def python(venv: Path = VENV) -> Path:
    return venv / "bin" / "python"


def versions(venv: Path = VENV) -> dict[str, str] | None:
    """``{"mcp": ..., "uvicorn": ...}`` installed in ``venv``, or None if either is missing."""
    exe = python(venv)
    if not exe.exists():
        return None
    code = (
        "import importlib.metadata as m, json; "
        "print(json.dumps({n: m.version(n) for n in ('mcp', 'uvicorn', 'starlette', 'h11')}))"
    )
    done = subprocess.run([exe, "-c", code], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    import json

    found: dict[str, str] = json.loads(done.stdout)
    return found


def installed(venv: Path = VENV) -> bool:
    found = versions(venv)
    return found is not None and found["mcp"] == SDK_VERSION


def install(venv: Path = VENV, say: Callable[[str], None] = print) -> None:
    """Create ``venv`` with ``mcp==2.3.0`` unless present, then uvicorn unless present."""
    exe = python(venv)
    try:
        if not exe.exists():
            say(f"creating {venv} (mcp=={SDK_VERSION}) for the Python SDK 2.x peer")
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run(
                [exe, "-m", "pip", "install", "-q", "--disable-pip-version-check", f"mcp=={SDK_VERSION}"],
                check=True,
            )
        has_uvicorn = subprocess.run([exe, "-c", "import uvicorn"], capture_output=True, check=False)
        if has_uvicorn.returncode != 0:
            say(f"installing uvicorn into {venv}")
            subprocess.run(
                [exe, "-m", "pip", "install", "-q", "--disable-pip-version-check", "uvicorn"], check=True
            )
    except (OSError, subprocess.CalledProcessError) as exc:
        raise SetupError(f"could not set up {venv}: {exc}") from exc
    if not installed(venv):
        raise SetupError(f"{venv} has no mcp=={SDK_VERSION} with uvicorn (found {versions(venv)})")


def command(venv: Path = VENV) -> list[str]:
    if not installed(venv):
        raise SetupError(
            f"the Python SDK 2.x peer is not set up: run `python -m benchmarks.peers.sdk2` ({venv})"
        )
    return [str(python(venv)), str(SERVER_SOURCE)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peers.sdk2", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="only say whether the peer is ready")
    args = parser.parse_args(argv)
    if args.check:
        ok = installed()
        print(f"Python SDK 2.x peer in {VENV}: {'ready' if ok else 'not ready'}")
        return 0 if ok else 1
    try:
        install()
    except SetupError as exc:
        print(f"benchmarks.peers.sdk2: {exc}", file=sys.stderr)
        return 2
    print(f"Python SDK 2.x peer ready in {VENV}: {versions()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
