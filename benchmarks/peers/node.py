"""The TypeScript SDK peer's setup: Node 22 and the pinned SDK, installed once into ``.cache/bench/``.

``python -m benchmarks.peers.node`` installs them (``make bench`` does it first; it needs ``npm``
the first time only, like ``make conformance``), and ``--check`` only says whether they are
there. The install code is shared with the conformance suite: ``scripts/node_setup.py``.

:func:`command` is how the harness starts the peer: ``benchmarks/peers/ts_tasks_server.mjs``
is copied next to the ``node_modules`` it imports from (ESM imports resolve from the file's own
directory), then run with the cached Node.
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "bench"
SERVER_SOURCE = Path(__file__).resolve().parent / "ts_tasks_server.mjs"
HTTP_SERVER_SOURCE = Path(__file__).resolve().parent / "ts_http_server.mjs"
"""The same tools over Streamable HTTP (``benchmarks/http_peers.py``)."""

SDK = "@modelcontextprotocol/sdk"
SDK_VERSION = "1.32.2"
PACKAGES = {SDK: SDK_VERSION, "zod": "4.6.7"}
"""Exact versions (zod is the SDK's peer dependency, for the tools' input schemas)."""


def _node_setup() -> ModuleType:
    name = "node_setup"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / "node_setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


node_setup = _node_setup()
SetupError: type[Exception] = node_setup.SetupError


def installed(cache: Path = CACHE) -> bool:
    """Node 22 and the pinned packages are in ``cache`` (never installs)."""
    return bool(node_setup.installed(cache, PACKAGES))


def install(cache: Path = CACHE, say: Callable[[str], None] = print) -> None:
    """Install them unless present; SetupError (needs npm) if that fails."""
    node_setup.install(cache, PACKAGES, say)


def node_version(cache: Path = CACHE) -> str:
    done = subprocess.run(
        [node_setup.node_binary(cache), "--version"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip()


def command(cache: Path = CACHE, source: Path = SERVER_SOURCE) -> list[str]:
    """The argv that starts the TypeScript SDK tasks server over stdio (installed first), or
    another server script of this directory (``source``, e.g. :data:`HTTP_SERVER_SOURCE`)."""
    if not installed(cache):
        raise SetupError(
            f"the TypeScript SDK peer is not installed in {cache}: run `python -m benchmarks.peers.node` "
            "(needs npm once) or pass --no-ts"
        )
    script = cache / source.name
    shutil.copyfile(source, script)
    return [str(node_setup.node_binary(cache)), str(script)]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.peers.node", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--check", action="store_true", help="only say whether the peer is installed")
    parser.add_argument("--cache", type=Path, default=CACHE)
    args = parser.parse_args(argv)
    cache: Path = args.cache.resolve()
    if args.check:
        ok = installed(cache)
        print(f"TypeScript SDK peer in {cache}: {'installed' if ok else 'not installed'}")
        return 0 if ok else 1
    try:
        install(cache)
    except SetupError as exc:
        print(f"benchmarks.peers.node: {exc}", file=sys.stderr)
        return 2
    pins = ", ".join(f"{name} {version}" for name, version in PACKAGES.items())
    print(f"TypeScript SDK peer ready in {cache}: Node {node_version(cache)}, {pins}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
