"""The client the official conformance suite drives in client mode (``make conformance``).

    MCP_CONFORMANCE_SCENARIO=auth/basic-cimd python examples/conformance_client.py http://127.0.0.1:4000/mcp

The suite starts a mock server for each scenario and runs this program with the server's URL
as its last argument and, in the environment, ``MCP_CONFORMANCE_SCENARIO`` (the scenario),
``MCP_CONFORMANCE_PROTOCOL_VERSION`` (the spec version the run speaks) and
``MCP_CONFORMANCE_CONTEXT`` (JSON: credentials given to the client, such as a pre-registered
``client_id``). It uses only the public client API: :func:`~trio_mcp.client.connect_http` with
an :class:`~trio_mcp.client.OAuth` whose authorizer is headless (the suite's authorization
server redirects at once). Exit status 0: the scenario's work was done; 1: it failed (the
scenarios that test refusals expect that).

``python examples/conformance_client.py --zygote SOCKET`` (what ``scripts/conformance.py``
starts) imports the client once and forks a child per scenario; the command the suite runs
(``python -S examples/conformance_client.py``, with ``TRIO_MCP_CONFORMANCE_ZYGOTE=SOCKET``)
then only hands its stdio, arguments and environment over the socket and exits with the
child's status.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any

ZYGOTE_ENV = "TRIO_MCP_CONFORMANCE_ZYGOTE"
"""When set (by scripts/conformance.py), the path of a unix socket where a process that has
already imported everything forks a child per scenario: the suite starts dozens of clients at
once, and importing the client in each would cost more than the scenarios themselves."""


def launch_through_zygote(path: str) -> int:
    """Hand our stdio, arguments and environment to the zygote; its child's exit status."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(path)
        request = json.dumps({"argv": sys.argv, "env": dict(os.environ)}).encode()
        socket.send_fds(conn, [len(request).to_bytes(4, "big") + request], [0, 1, 2])
        status = conn.recv(4)
    return int.from_bytes(status, "big") if len(status) == 4 else 1


if __name__ == "__main__" and os.environ.get(ZYGOTE_ENV) and "--zygote" not in sys.argv:
    sys.exit(launch_through_zygote(os.environ[ZYGOTE_ENV]))
if "site" not in sys.modules:  # run with -S for the launcher's sake: the client needs the venv
    import site

    site.main()

import logging  # noqa: E402
from functools import partial  # noqa: E402

import httpx  # noqa: E402
import trio  # noqa: E402

from trio_mcp.client import (  # noqa: E402
    AuthorizationError,
    Client,
    HeadlessAuthorizer,
    OAuth,
    connect_http,
)
from trio_mcp.protocol.errors import McpError  # noqa: E402
from trio_mcp.protocol.messages import ElicitRequestParams, ElicitResult  # noqa: E402

CIMD_URL = "https://conformance-test.local/client-metadata.json"
"""The client ID metadata document URL the suite's authorization servers accept."""


def context() -> dict[str, Any]:
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    data = json.loads(raw) if raw else {}
    return data if isinstance(data, dict) else {}


def make_auth(scenario: str, ctx: dict[str, Any]) -> OAuth | None:
    if not scenario.startswith("auth/"):
        return None
    if scenario in ("auth/client-credentials-basic", "auth/client-credentials-jwt"):
        return OAuth(
            grant="client_credentials",
            client_id=ctx["client_id"],
            client_secret=ctx.get("client_secret"),
            private_key=ctx.get("private_key_pem"),
            signing_alg=ctx.get("signing_algorithm") or "ES256",
        )
    if scenario == "auth/wif-jwt-bearer":
        return OAuth(grant="jwt_bearer", client_id=ctx["client_id"], assertion=ctx["valid_jwt"])
    if scenario == "auth/enterprise-managed-authorization":
        return OAuth(
            grant="jwt_bearer",
            client_id=ctx["client_id"],
            client_secret=ctx["client_secret"],
            assertion=partial(id_jag, ctx),
        )
    return OAuth(
        HeadlessAuthorizer(),
        client_id=ctx.get("client_id"),
        client_secret=ctx.get("client_secret"),
        client_metadata_url=CIMD_URL,
        client_name="trio-mcp-conformance",
    )


async def id_jag(ctx: dict[str, Any], issuer: str, resource: str) -> str:
    """SEP-990: exchange the user's ID token at the enterprise IdP for an identity assertion
    grant (ID-JAG, RFC 8693 token exchange) for this authorization server and resource."""
    form = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "requested_token_type": "urn:ietf:params:oauth:token-type:id-jag",
        "audience": issuer,
        "resource": resource,
        "subject_token": ctx["idp_id_token"],
        "subject_token_type": "urn:ietf:params:oauth:token-type:id_token",
        "client_id": ctx["idp_client_id"],
    }
    async with httpx.AsyncClient() as http:
        response = await http.post(ctx["idp_token_endpoint"], data=form)
    response.raise_for_status()
    token = response.json()["access_token"]
    assert isinstance(token, str)
    return token


async def fill_defaults(params: ElicitRequestParams) -> ElicitResult:
    """Accept, with nothing filled in: the client applies the schema's defaults."""
    return ElicitResult(action="accept", content={})


async def exercise(client: Client, scenario: str, ctx: dict[str, Any]) -> None:
    tools = await client.list_tools()
    names = [tool.name for tool in tools]
    calls = ctx.get("toolCalls")
    if isinstance(calls, list):  # the calls the scenario asks for, of the tools we kept
        for call in calls:
            if call.get("name") in names:
                await client.call_tool(call["name"], call.get("arguments") or {})
        return
    if scenario in ("json-schema-ref-no-deref",):
        return
    if scenario == "json-schema-2020-12-preservation":
        focal = next(tool for tool in tools if tool.name == "json_schema_2020_12_tool")
        await client.call_tool("json_schema_echo", {"schema": focal.input_schema})
        return
    if scenario == "http-standard-headers":
        await client.call_tool(names[0], {}) if names else None
        for resource in (await client.list_resources())[:1]:
            await client.read_resource(resource.uri)
        for prompt in (await client.list_prompts())[:1]:
            await client.get_prompt(prompt.name)
        return
    if scenario.startswith("auth/"):
        if "test-tool" in names:
            await client.call_tool("test-tool", {})
        return
    if scenario == "elicitation-sep1034-client-defaults":
        await client.call_tool("test_client_elicitation_defaults", {})
        return
    for name in names:
        await client.call_tool(name, {"a": 2, "b": 3} if name == "add_numbers" else {})


async def main(url: str) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION") or "2025-11-25"
    ctx = context()
    auth = make_auth(scenario, ctx)
    try:
        with trio.fail_after(25):
            async with connect_http(url, auth=auth, protocol=version, on_elicit=fill_defaults) as client:
                await exercise(client, scenario, ctx)
    except (AuthorizationError, McpError, trio.TooSlowError) as exc:
        print(f"{scenario}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return 0


def run(argv: list[str]) -> int:
    logging.basicConfig(level=logging.WARNING)
    return trio.run(main, argv[-1])


def _receive_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def zygote(path: str) -> None:
    """Serve ``path``: for each launcher, fork a child that runs the scenario on its stdio."""
    import signal

    import trio_mcp.client._auth  # noqa: F401  (everything a scenario may need, imported once)

    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(path)
        server.listen(128)
        print("ready", flush=True)
        while True:
            conn, _ = server.accept()
            first, fds, _, _ = socket.recv_fds(conn, 4 + 65536, 3)
            try:
                size = int.from_bytes(first[:4], "big")
                request = json.loads(first[4:] + _receive_exactly(conn, size - len(first) + 4))
            except (ValueError, EOFError):
                conn.close()
                continue
            if os.fork() == 0:  # the child: the launcher's stdio, arguments and environment
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                server.close()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                os.environ.clear()
                os.environ.update(request["env"])
                status = 1
                try:
                    status = run(request["argv"])
                except BaseException:
                    import traceback

                    traceback.print_exc()
                finally:
                    sys.stdout.flush()
                    sys.stderr.flush()
                    conn.sendall(status.to_bytes(4, "big"))
                    os._exit(status)
            conn.close()
            for fd in fds:
                os.close(fd)


if __name__ == "__main__":
    if "--zygote" in sys.argv:
        zygote(sys.argv[-1])
    else:
        sys.exit(run(sys.argv))
