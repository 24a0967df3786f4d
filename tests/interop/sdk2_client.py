"""Run by ``test_mcp_sdk2_client.py`` in its own virtual environment (the official Python SDK 2.x,
whose package name clashes with the 1.x SDK the other interop tests use).

Usage: ``python sdk2_client.py PYTHON SERVER_FILE`` (stdio: the SDK starts the server) or
``python sdk2_client.py http://HOST:PORT/mcp`` (Streamable HTTP: the SDK's ``Client(url)``
form). Connects the SDK's ``Client`` in its default ``auto`` mode, exercises the server, and
prints one JSON report on stdout.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio
import mcp_types as types
from mcp import Client
from mcp.client.stdio import StdioServerParameters


def text_of(result: Any) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


async def on_elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"answer": "Ada"})


async def main() -> None:
    target: StdioServerParameters | str
    if sys.argv[1].startswith(("http://", "https://")):
        target = sys.argv[1]
    else:
        target = StdioServerParameters(command=sys.argv[1], args=sys.argv[2:])
    report: dict[str, Any] = {}
    async with Client(target, elicitation_callback=on_elicit) as client:
        report["protocol_version"] = client.protocol_version
        report["tools"] = sorted(tool.name for tool in (await client.list_tools()).tools)
        report["echo"] = text_of(await client.call_tool("echo", {"text": "hello"}))
        report["add"] = text_of(await client.call_tool("add", {"a": 2, "b": 3}))
        failed = await client.call_tool("fail", {"message": "kaboom"})
        report["fail"] = [failed.is_error, text_of(failed)]
        report["ask"] = text_of(await client.call_tool("ask", {"question": "Your name?"}))
        report["sleep"] = text_of(await client.call_tool("sleep", {"seconds": 1.5}))
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
