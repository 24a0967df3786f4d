"""The house layering rules, read from the source with ``ast`` (nothing here imports trio_mcp).

- ``protocol`` is sans-IO: no Trio (nor trio_websocket, outcome), and nothing above it;
- ``transports`` move bytes: nothing from actors, server, client, cli or testing;
- ``stores`` keep records: nothing of ours but the protocol;
- ``actors`` run the protocol: nothing from server, client, cli or testing;
- ``server`` and ``client`` build on actors, transports and protocol (and the client never on
  the server);
- no import cycles among trio_mcp modules.

Every import counts: at module level, under ``if TYPE_CHECKING:``, and inside functions.
Importing the ``trio_mcp`` package itself counts as importing what it re-exports (the server
and the client), so the lower layers may not do it either.
"""

from __future__ import annotations

import ast
import itertools
import pathlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import attrs
import pytest

PACKAGE_DIR = pathlib.Path(__file__).resolve().parents[2] / "trio_mcp"
ROOT = "trio_mcp"
LAYERS = ("protocol", "transports", "stores", "actors", "server", "client", "cli", "testing")


@attrs.frozen
class Import:
    module: str  # the importing module
    target: str  # the absolute name of the imported module (or the module a name came from)
    line: int

    def __str__(self) -> str:
        path = _MODULES[self.module].relative_to(PACKAGE_DIR.parent)
        return f"{path}:{self.line}: imports {self.target}"


def _module_files() -> dict[str, pathlib.Path]:
    modules: dict[str, pathlib.Path] = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


_MODULES = _module_files()


def _imports_of(module: str) -> Iterator[Import]:
    """Every import statement in ``module``, anywhere in the file, as absolute names.

    ``from X import y`` yields X, and also X.y when that is a trio_mcp module.
    """
    path = _MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level - 1 >= len(base):
                    raise AssertionError(f"{path}:{node.lineno}: relative import beyond the top package")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                assert node.module is not None
                target = node.module
            yield Import(module, target, node.lineno)
            for alias in node.names:
                submodule = f"{target}.{alias.name}"
                if submodule in _MODULES:
                    yield Import(module, submodule, node.lineno)


_IMPORTS: dict[str, list[Import]] = {module: list(_imports_of(module)) for module in _MODULES}


def _layer(name: str) -> str | None:
    """``protocol`` for ``trio_mcp.protocol.x``; ``""`` for the top package; None if not ours."""
    parts = name.split(".")
    if parts[0] != ROOT:
        return None
    return parts[1] if len(parts) > 1 else ""


def _violations(
    layer: str, forbidden_layers: set[str], forbidden_top_level: frozenset[str] = frozenset()
) -> list[str]:
    found = []
    for module, imports in _IMPORTS.items():
        if _layer(module) != layer:
            continue
        for imp in imports:
            target_layer = _layer(imp.target)
            if target_layer is None:
                if imp.target.split(".")[0] in forbidden_top_level:
                    found.append(str(imp))
            elif target_layer in forbidden_layers:
                found.append(str(imp))
    return found


def test_the_walk_sees_every_layer() -> None:
    # Guards the rules below against passing vacuously (a moved or renamed package).
    assert {_layer(m) for m in _MODULES} >= {"", *LAYERS}
    assert sum(len(imports) for imports in _IMPORTS.values()) > 100


def test_protocol_is_sans_io() -> None:
    forbidden = {"", "actors", "transports", "stores", "server", "client", "cli", "testing"}
    found = _violations("protocol", forbidden, frozenset({"trio", "trio_websocket", "outcome"}))
    assert not found, "protocol must not import Trio or any layer above it:\n" + "\n".join(found)


def test_transports_import_no_runtime_layer() -> None:
    found = _violations("transports", {"", "actors", "stores", "server", "client", "cli", "testing"})
    assert not found, (
        "transports must not import actors, stores, server, client, cli, testing:\n" + "\n".join(found)
    )


def test_stores_import_only_the_protocol() -> None:
    found = _violations("stores", {"", *LAYERS} - {"stores", "protocol"})
    assert not found, "stores may import only the protocol:\n" + "\n".join(found)


def test_actors_import_no_server_client_cli_or_testing() -> None:
    found = _violations("actors", {"", "server", "client", "cli", "testing"})
    assert not found, "actors must not import server, client, cli or testing:\n" + "\n".join(found)


@pytest.mark.parametrize("layer", ["server", "client"])
def test_server_and_client_build_only_on_actors_transports_protocol(layer: str) -> None:
    allowed = {layer, "actors", "stores", "transports", "protocol"}
    found = _violations(layer, {"", *LAYERS} - allowed)
    assert not found, f"{layer} may import only actors, stores, transports and protocol:\n" + "\n".join(found)


def test_client_does_not_import_server() -> None:
    found = _violations("client", {"server"})
    assert not found, "the client must not import the server:\n" + "\n".join(found)


def _graph() -> dict[str, set[str]]:
    return {
        module: {imp.target for imp in imports if imp.target in _MODULES and imp.target != module}
        for module, imports in _IMPORTS.items()
    }


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative): the components with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def _a_cycle_through(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One concrete cycle inside a strongly connected component, for the failure message."""
    members = set(component)
    start = component[0]
    # Breadth-first from start back to start, staying inside the component.
    paths: dict[str, list[str]] = {start: [start]}
    frontier = [start]
    while frontier:
        next_frontier = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    next_frontier.append(child)
        frontier = next_frontier
    raise AssertionError("not a strongly connected component")  # pragma: no cover


def _describe_cycle(cycle: list[str]) -> str:
    steps = []
    for importer, imported in itertools.pairwise(cycle):
        line = next(imp.line for imp in _IMPORTS[importer] if imp.target == imported)
        steps.append(f"  {_MODULES[importer].relative_to(PACKAGE_DIR.parent)}:{line} imports {imported}")
    return " -> ".join(cycle) + "\n" + "\n".join(steps)


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": {"e"}}
    assert _strongly_connected(graph) == [["a", "b", "c"]]
    assert _a_cycle_through(["a", "b", "c"], graph) == ["a", "b", "c", "a"]


def test_no_import_cycles() -> None:
    graph = _graph()
    cycles = [_describe_cycle(_a_cycle_through(c, graph)) for c in _strongly_connected(graph)]
    assert not cycles, f"{len(cycles)} import cycle(s) among trio_mcp modules:\n" + "\n".join(cycles)


def test_importing_the_handshake_dialect_does_not_load_trio() -> None:
    code = textwrap.dedent(
        """
        import sys
        import trio_mcp.protocol.handshake
        loaded = sorted(m for m in ("trio", "trio_websocket", "outcome") if m in sys.modules)
        ours = sorted(
            m for m in sys.modules if m.startswith("trio_mcp.") and not m.startswith("trio_mcp.protocol")
        )
        print(",".join(loaded))
        print(",".join(ours))
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    loaded, ours = [*done.stdout.splitlines(), "", ""][:2]
    assert not loaded, (
        f"importing trio_mcp.protocol.handshake loaded {loaded}; "
        f"it also loaded these trio_mcp modules outside protocol: {ours or 'none'}"
    )
