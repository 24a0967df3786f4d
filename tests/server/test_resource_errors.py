"""Resource templates checked at registration, and the public "resource not found" error,
answered the way each era defines it (-32002 handshake, -32602 in 2026-07-28)."""

from __future__ import annotations

import pytest
from test_surface import HELLO, served

from trio_mcp import ResourceNotFound, Server


def test_a_template_variable_without_a_parameter_is_refused_at_registration() -> None:
    server = Server("templates")
    with pytest.raises(ValueError, match=r"no parameter for \{b\}"):

        @server.resource("x://{a}/{b}")
        def only_a(a: str) -> str:
            return a

    assert not server.templates


def test_a_required_parameter_without_a_variable_is_refused_at_registration() -> None:
    server = Server("templates")
    with pytest.raises(ValueError, match=r"no \{variable\} for parameter"):

        @server.resource("x://{a}")
        def needs_b(a: str, b: str) -> str:
            return a + b

    @server.resource("x://{a}/more")  # a default, or **kwargs, is fine
    def defaulted(a: str, b: str = "-", **rest: str) -> str:
        return a + b

    assert list(server.templates) == ["x://{a}/more"]


async def test_resource_not_found_raised_by_a_template_is_each_eras_not_found() -> None:
    server = Server("files")

    @server.resource("file:///{name}")
    def read(name: str) -> str:
        if name != "readme":
            raise ResourceNotFound(f"file:///{name}")
        return "Read me first."

    async with served(server) as wire:
        await wire.call("initialize", HELLO)
        found = await wire.call("resources/read", {"uri": "file:///readme"})
        assert found["result"]["contents"][0]["text"] == "Read me first."
        missing = await wire.call("resources/read", {"uri": "file:///nope"})
        assert missing["error"] == {
            "code": -32002,
            "message": "Resource not found",
            "data": {"uri": "file:///nope"},
        }
        modern = await wire.call("resources/read", {"uri": "file:///nope"}, modern=True)
        assert modern["error"]["code"] == -32602
        assert modern["error"]["data"] == {"uri": "file:///nope"}
