"""The raw floor: the least work a Python stdio MCP server could do per request.

It reads stdin in chunks, splits lines, ``json.loads`` each one and writes a fixed answer of
the right shape (a CreateTaskResult for ``tools/call``, a Task for ``tasks/get`` and
``tasks/cancel``, a CallToolResult for ``tasks/result``...) carrying the request's id. It keeps
no state and answers every line of a chunk with one ``write``. Whatever rate a client reaches
against it is the ceiling for any Python server seen by that client: ratios to it say how
much of that ceiling the real server keeps.

Run as ``python benchmarks/floor.py``; it exits at end of input.
"""

from __future__ import annotations

import json
import os


def _task(status: str) -> dict[str, object]:
    return {
        "taskId": "floor-task-0000000000000000",
        "status": status,
        "createdAt": "2025-11-25T00:00:00.000Z",
        "lastUpdatedAt": "2025-11-25T00:00:00.000Z",
        "ttl": 21_600_000,
        "pollInterval": 500,
    }


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


ANSWERS: dict[str, bytes] = {
    "initialize": _json(
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {
                "tools": {"listChanged": False},
                "tasks": {"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}},
            },
            "serverInfo": {"name": "raw-floor", "version": "0"},
        }
    ),
    "ping": b"{}",
    "tools/call": _json({"task": _task("working")}),
    "tasks/get": _json(_task("working")),
    "tasks/cancel": _json({**_task("cancelled"), "statusMessage": "The task was cancelled by request."}),
    "tasks/result": _json(
        {
            "content": [{"type": "text", "text": "hello"}],
            "_meta": {"io.modelcontextprotocol/related-task": {"taskId": "floor-task-0000000000000000"}},
        }
    ),
    "tasks/list": b'{"tasks":[]}',
}
UNKNOWN = b'{"code":-32601,"message":"Method not found"}'


def answer(message: dict[str, object]) -> bytes | None:
    """The response line for one decoded message, or None for a notification."""
    if "id" not in message:
        return None
    request_id = json.dumps(message["id"]).encode()
    body = ANSWERS.get(str(message.get("method")))
    if body is None:
        return b'{"jsonrpc":"2.0","id":' + request_id + b',"error":' + UNKNOWN + b"}\n"
    return b'{"jsonrpc":"2.0","id":' + request_id + b',"result":' + body + b"}\n"


def main() -> None:
    rest = b""
    while True:
        chunk = os.read(0, 1 << 16)
        if not chunk:
            return
        *lines, rest = (rest + chunk).split(b"\n")
        out = []
        for line in lines:
            if line.strip():
                reply = answer(json.loads(line))
                if reply is not None:
                    out.append(reply)
        if out:
            data = memoryview(b"".join(out))
            while data:
                data = data[os.write(1, data) :]


if __name__ == "__main__":
    main()
