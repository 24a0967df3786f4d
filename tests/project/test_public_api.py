"""The package's public surface: what users may import, and that it does not drift by accident.

A name added to (or dropped from) an ``__all__``, or a new public module, must be a deliberate
change: update the expected sets here in the same commit.
"""

from __future__ import annotations

import importlib
import pkgutil
import types

import pytest

import trio_mcp
import trio_mcp.client
import trio_mcp.server

TOP_LEVEL_API = {
    "CallToolResult",
    "Client",
    "ConnectionClosed",
    "Context",
    "ErrorValue",
    "McpError",
    "ResourceNotFound",
    "Server",
    "ServerRuntime",
    "Task",
    "TaskLimits",
    "TaskOutcome",
    "TaskRecord",
    "TaskStatus",
    "TextContent",
    "ThreadContext",
    "Tool",
    "connect",
    "connect_http",
    "connect_in_memory",
    "connect_stdio",
    "connect_websocket",
    "mcp_asgi_app",
    "serve_http",
    "serve_websocket",
}

SERVER_API = {
    "GC_FULL_AFTER",
    "GC_THRESHOLD",
    "Context",
    "Lifespan",
    "McpHttpApp",
    "Middleware",
    "RateLimit",
    "RegisteredTool",
    "RequestInfo",
    "RequestLog",
    "ResourceNotFound",
    "RunOptions",
    "Server",
    "ServerRuntime",
    "StartupError",
    "TaskLimits",
    "ThreadContext",
    "ToolCallInfo",
    "ToolCancelled",
    "mcp_asgi_app",
    "parse_run_args",
    "serve_http",
    "serve_websocket",
    "tune_gc",
}

CLIENT_API = {
    "AuthorizationError",
    "Authorizer",
    "Client",
    "ConnectionClosed",
    "ElicitationCompleteCallback",
    "ElicitationHandler",
    "FileTokenStore",
    "GetPromptResult",
    "Prompt",
    "PromptArgument",
    "PromptMessage",
    "ReadResourceResult",
    "Resource",
    "ResourceContents",
    "ResourceTemplate",
    "UrlElicitationHandler",
    "UrlElicitationRequired",
    "HeadlessAuthorizer",
    "HttpTransport",
    "LoopbackAuthorizer",
    "MemoryTokenStore",
    "OAuth",
    "TokenStore",
    "ProgressCallback",
    "SamplingHandler",
    "Servable",
    "StatusCallback",
    "connect",
    "connect_http",
    "connect_in_memory",
    "connect_stdio",
    "connect_websocket",
    "open_http_transport",
}

PUBLIC_MODULES = [
    "trio_mcp",
    "trio_mcp.actors",
    "trio_mcp.actors.runtime",
    "trio_mcp.actors.supervisor",
    "trio_mcp.actors.task_actor",
    "trio_mcp.actors.trace",
    "trio_mcp.cli",
    "trio_mcp.cli.app",
    "trio_mcp.cli.auth",
    "trio_mcp.cli.demo",
    "trio_mcp.cli.demo_server",
    "trio_mcp.cli.elicit",
    "trio_mcp.cli.errors",
    "trio_mcp.cli.follow",
    "trio_mcp.cli.parsing",
    "trio_mcp.cli.render",
    "trio_mcp.cli.runner",
    "trio_mcp.client",
    "trio_mcp.client.auth",
    "trio_mcp.protocol",
    "trio_mcp.protocol.commands",
    "trio_mcp.protocol.converter",
    "trio_mcp.protocol.cursors",
    "trio_mcp.protocol.errors",
    "trio_mcp.protocol.handshake",
    "trio_mcp.protocol.jsonrpc",
    "trio_mcp.protocol.messages",
    "trio_mcp.protocol.modern",
    "trio_mcp.protocol.records",
    "trio_mcp.protocol.request_state",
    "trio_mcp.protocol.surface",
    "trio_mcp.protocol.table",
    "trio_mcp.protocol.tasks",
    "trio_mcp.protocol.versions",
    "trio_mcp.server",
    "trio_mcp.server.middleware",
    "trio_mcp.server.schema",
    "trio_mcp.server.telemetry",
    "trio_mcp.stores",
    "trio_mcp.stores.base",
    "trio_mcp.stores.memory",
    "trio_mcp.stores.redis",
    "trio_mcp.stores.sqlite",
    "trio_mcp.testing",
    "trio_mcp.testing.determinism",
    "trio_mcp.testing.explore",
    "trio_mcp.testing.faults",
    "trio_mcp.testing.harness",
    "trio_mcp.testing.monitor",
    "trio_mcp.testing.plugin",
    "trio_mcp.testing.probe",
    "trio_mcp.testing.trace",
    "trio_mcp.transports",
    "trio_mcp.transports.base",
    "trio_mcp.transports.h11_server",
    "trio_mcp.transports.http",
    "trio_mcp.transports.memory",
    "trio_mcp.transports.security",
    "trio_mcp.transports.stdio",
    "trio_mcp.transports.websocket",
]


def _is_public(name: str) -> bool:
    segments = name.split(".")
    return segments[-1] != "__main__" and not any(s.startswith("_") for s in segments)


def _walk_public_modules() -> list[str]:
    # walk_packages imports each package (not each module) to find what lies below it.
    found = ["trio_mcp"]
    for info in pkgutil.walk_packages(trio_mcp.__path__, "trio_mcp."):
        if _is_public(info.name):
            found.append(info.name)
    return sorted(found)


def _exported_namespace(module: types.ModuleType) -> set[str]:
    """The public names a package's namespace holds, leaving out submodules set as attributes."""
    return {
        name
        for name, value in vars(module).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }


# -- the top-level package -----------------------------------------------------------------------
def test_top_level_all_is_the_documented_api() -> None:
    assert sorted(trio_mcp.__all__) == sorted(TOP_LEVEL_API)
    assert len(trio_mcp.__all__) == len(set(trio_mcp.__all__)), "duplicate names in trio_mcp.__all__"


def test_top_level_names_all_import() -> None:
    namespace: dict[str, object] = {}
    exec("from trio_mcp import *", namespace)
    for name in trio_mcp.__all__:
        assert name in namespace, f"'from trio_mcp import *' lacks {name}"
        assert namespace[name] is getattr(trio_mcp, name)


def test_top_level_names_are_the_subpackages_objects() -> None:
    # The top level re-exports; it defines nothing of its own.
    for name in TOP_LEVEL_API & SERVER_API:
        assert getattr(trio_mcp, name) is getattr(trio_mcp.server, name), name
    for name in TOP_LEVEL_API & CLIENT_API:
        assert getattr(trio_mcp, name) is getattr(trio_mcp.client, name), name


# -- every public module -------------------------------------------------------------------------
def test_the_set_of_public_modules_is_not_growing_by_accident() -> None:
    found = _walk_public_modules()
    added, removed = sorted(set(found) - set(PUBLIC_MODULES)), sorted(set(PUBLIC_MODULES) - set(found))
    assert found == PUBLIC_MODULES, f"new public modules: {added}; public modules gone: {removed}"


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_public_module_defines_all_and_every_name_exists(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert isinstance(exported, list | tuple), f"{name}.__all__ is a {type(exported).__name__}"
    assert all(isinstance(n, str) for n in exported), f"{name}.__all__ holds a non-string"
    assert len(exported) == len(set(exported)), f"duplicate names in {name}.__all__"
    missing = [n for n in exported if not hasattr(module, n)]
    assert not missing, f"{name}.__all__ names what the module lacks: {missing}"
    private = [n for n in exported if n.startswith("_")]
    assert not private, f"{name}.__all__ exports private names: {private}"


# -- the public packages re-export exactly their __all__ ----------------------------------------
@pytest.mark.parametrize(
    ("package", "expected"),
    [(trio_mcp.server, SERVER_API), (trio_mcp.client, CLIENT_API)],
    ids=["server", "client"],
)
def test_public_package_reexports_exactly_its_all(package: types.ModuleType, expected: set[str]) -> None:
    assert sorted(package.__all__) == sorted(expected)
    assert _exported_namespace(package) == set(package.__all__)


@pytest.mark.parametrize("package", [trio_mcp.server, trio_mcp.client], ids=["server", "client"])
def test_public_package_star_import_gives_its_all(package: types.ModuleType) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {package.__name__} import *", namespace)
    assert {n for n in namespace if n != "__builtins__"} == set(package.__all__)
