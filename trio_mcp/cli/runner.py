"""Running a command inside Trio: signals, connecting to a TARGET, and errors → exit codes."""

from __future__ import annotations

import contextlib
import http
import math
import re
import shlex
import signal
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import attrs
import httpx
import trio

from ..client import (
    Client,
    ConnectionClosed,
    ElicitationHandler,
    HttpTransport,
    UrlElicitationHandler,
    connect,
)
from ..protocol.errors import McpError
from ..protocol.versions import LATEST_VERSION
from ..transports.stdio import SubprocessTransport, open_subprocess_transport
from .errors import CliError, ExitCode

__all__ = ["Interrupts", "flatten", "is_url", "open_target", "refusal_error", "run_trio", "unwrap"]

SHUTDOWN_GRACE = 2.0
"""Seconds a spawned stdio server gets after its stdin closes (and again after SIGTERM)."""


@attrs.define(eq=False)
class Interrupts:
    """Turns SIGINT/SIGTERM into cancellation.

    By default a signal cancels the whole command. While ``handler`` is set (e.g. while a task
    is being followed), the *first* signal calls it instead so the command can clean up (send
    ``tasks/cancel``); any further signal cancels the command at once.

    While ``prompt`` is set (a question is being asked at the terminal), SIGINT calls it
    instead and is not counted: Ctrl-C dismisses the question, not the command or its task.
    """

    scope: trio.CancelScope
    handler: Callable[[], None] | None = None
    prompt: Callable[[], None] | None = None
    received: list[int] = attrs.Factory(list)

    @property
    def signalled(self) -> bool:
        return bool(self.received)

    @property
    def exit_code(self) -> ExitCode:
        if self.received and self.received[0] == signal.SIGTERM:
            return ExitCode.TERMINATED
        return ExitCode.INTERRUPTED

    async def watch(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            task_status.started()
            async for signum in signals:
                if signum == signal.SIGINT and self.prompt is not None:
                    prompt, self.prompt = self.prompt, None
                    prompt()
                    continue
                self.received.append(signum)
                handler, self.handler = self.handler, None
                if handler is not None and len(self.received) == 1:
                    handler()
                else:
                    self.scope.cancel()


def flatten(exc: BaseException) -> list[BaseException]:
    """The leaves of an exception (group)."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in flatten(sub)]
    return [exc]


def unwrap(exc: BaseException) -> BaseException:
    """The one exception that matters in a nursery's group: the only leaf that is not
    ``Cancelled`` (else the group itself)."""
    leaves = [leaf for leaf in flatten(exc) if not isinstance(leaf, trio.Cancelled)]
    if len(leaves) == 1:
        return leaves[0]
    cli_errors = [leaf for leaf in leaves if isinstance(leaf, CliError)]
    return cli_errors[0] if cli_errors else exc


def as_cli_error(exc: BaseException) -> CliError | None:
    """Map the exceptions a command may end with to a user-facing error (None: a bug)."""
    exc = unwrap(exc)
    if isinstance(exc, CliError):
        return exc
    if isinstance(exc, McpError):
        return CliError(ExitCode.PROTOCOL, f"the server answered error {exc.code}: {exc.message}")
    if isinstance(exc, ConnectionClosed | trio.BrokenResourceError | trio.ClosedResourceError):
        return CliError(ExitCode.CONNECTION, "the connection to the server was lost")
    websocket = sys.modules.get("trio_websocket")  # imported only if a ws:// TARGET was used
    if websocket is not None and isinstance(exc, websocket.ConnectionRejected):  # raised past _open_websocket
        return refusal_error(
            "the server", exc.status_code, token=None, detail=_body_text(exc.body), token_known=False
        )
    return None


def _body_text(body: object) -> str | None:
    """The first line of a refusal's body, for the user (None if there is none)."""
    if not isinstance(body, bytes | str):
        return None
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    lines = text.strip().splitlines()
    return lines[0][:200] if lines else None


def refusal_error(
    where: str,
    status: int,
    *,
    token: str | None,
    detail: str | None = None,
    token_known: bool = True,
    login: str | None = None,
) -> CliError:
    """The error for a server that refused the connection with HTTP ``status`` (exit 3), in one
    line: ``ws://h:p/ refused the connection: 401 Unauthorized (a bearer token is required: ...)``.
    ``token``: the one sent (None: none; ``token_known=False``: not known whether one was sent).
    ``detail``: what the server said (its body, or its JSON-RPC error's message), if anything.
    ``login``: the URL to give ``trio-mcp auth login`` (a 401 from a server using OAuth)."""
    try:
        phrase = http.HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    if detail and phrase and detail.lower().startswith(phrase.lower() + ":"):
        detail = detail[len(phrase) + 1 :].strip()  # "Forbidden: Origin not allowed"
    if status == 401 and login is not None:
        why = f"it needs an OAuth login: run `trio-mcp auth login {login}`"
    elif status == 401 and not token_known:
        why = "a valid bearer token is required: check --token or TRIO_MCP_TOKEN"
    elif status == 401:
        why = (
            "a bearer token is required: pass --token TOKEN or set TRIO_MCP_TOKEN"
            if token is None
            else "the token was not accepted: check --token or TRIO_MCP_TOKEN"
        )
    elif status == 403:
        why = detail or "this client is not allowed: its Origin, or its token's scope"
    elif status == 404:
        why = "nothing is served at this path: `serve --http` serves /mcp"
    elif status == 400 and not detail:
        why = (
            "is it an MCP endpoint? `serve --ws` serves ws://HOST:PORT/, `serve --http` http://HOST:PORT/mcp"
        )
    else:
        why = detail or ""
    head = f"{status} {phrase}".strip()
    return CliError(
        ExitCode.CONNECTION, f"{where} refused the connection: {head}" + (f" ({why})" if why else "")
    )


def run_trio(
    body: Callable[[Interrupts], Awaitable[int]], *, on_interrupted: Callable[[], None] | None = None
) -> int:
    """``trio.run`` the command ``body`` under signal handling; return its exit code.

    If a signal cancels the command, ``on_interrupted`` is called and the code is 130 (SIGINT)
    or 143 (SIGTERM). Exceptions are left to the caller (see :func:`as_cli_error`).
    """

    async def main() -> int:
        with trio.CancelScope() as scope:
            interrupts = Interrupts(scope)
            async with trio.open_nursery() as nursery:
                await nursery.start(interrupts.watch)
                code = await body(interrupts)
                nursery.cancel_scope.cancel()
            return code
        if on_interrupted is not None:
            on_interrupted()
        return int(interrupts.exit_code)

    return trio.run(main)


# ------------------------------------------------------------------------------ targets


def is_url(target: str) -> bool:
    return target.strip().lower().startswith(("ws://", "wss://", "http://", "https://"))


def _is_http(target: str) -> bool:
    return target.strip().lower().startswith(("http://", "https://"))


def _command(target: str) -> list[str]:
    try:
        argv = shlex.split(target)
    except ValueError as exc:
        raise CliError(
            ExitCode.USAGE,
            f"cannot split TARGET {target!r} into a command: {exc}",
            hint="quote the whole command once, e.g. \"python server.py --flag 'a b'\"",
        ) from None
    if not argv:
        raise CliError(
            ExitCode.USAGE,
            'empty TARGET: give a command such as "python server.py", or a ws:// or http:// URL',
        )
    return argv


@asynccontextmanager
async def _spawn(argv: list[str]) -> AsyncIterator[SubprocessTransport]:
    # The child gets a session of its own: Ctrl-C in the terminal then reaches only us, and we
    # get to send tasks/cancel to a server that is still alive before closing its stdin.
    async with contextlib.AsyncExitStack() as stack:
        try:
            transport = await stack.enter_async_context(
                open_subprocess_transport(argv, shutdown_timeout=SHUTDOWN_GRACE, start_new_session=True)
            )
        except FileNotFoundError:
            raise CliError(
                ExitCode.CONNECTION,
                f"cannot start {argv[0]!r}: command not found",
                hint='TARGET is a command line quoted as one argument ("python server.py"), '
                "or the URL of a running server (ws://HOST:PORT or http://HOST:PORT/mcp)",
            ) from None
        except OSError as exc:
            raise CliError(ExitCode.CONNECTION, f"cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        yield transport


async def _handshake(
    client: Client,
    target: str,
    limit: float,
    *,
    process: trio.Process | None,
    protocol: str,
    refusal: Callable[[], tuple[int, str] | None] | None = None,
    token: str | None = None,
    transport: HttpTransport | None = None,
) -> None:
    """``client.open(protocol)`` within ``limit`` seconds; failures become exit-3 errors.
    ``refusal``: the HTTP refusal behind a JSON-RPC error, if any (HTTP targets);
    ``transport``: the HTTP transport (its OAuth failure and its last challenge)."""
    try:
        with trio.fail_after(limit):
            await client.open(protocol)
    except trio.TooSlowError:
        raise CliError(
            ExitCode.CONNECTION,
            f"{target!r} did not complete the MCP handshake within {limit:g}s",
            hint="is it an MCP server? (a stdio server must write nothing but messages to stdout)",
        ) from None
    except (ConnectionClosed, trio.BrokenResourceError, trio.ClosedResourceError):
        how = "closed the connection"
        if process is not None:
            with trio.move_on_after(1.0):
                await process.wait()
            if process.returncode is not None:
                how = f"exited with status {process.returncode}"
        raise CliError(
            ExitCode.CONNECTION,
            f"{target!r} {how} during the MCP handshake",
            hint="see its error output above; run the command alone to check it starts",
        ) from None
    except McpError as exc:
        if transport is not None and transport.auth_error is not None:
            raise CliError(
                ExitCode.CONNECTION,
                f"{target}: OAuth authorization failed: {transport.auth_error}",
            ) from None
        refused = refusal() if refusal is not None else None
        if refused is not None:
            status, detail = refused
            login = None
            if status == 401 and token is None and transport is not None:
                from .auth import asks_for_oauth

                if await asks_for_oauth(transport.challenge):
                    login = target.strip()
            raise refusal_error(target, status, token=token, detail=detail or None, login=login) from None
        unreached = _http_failure(target, exc)
        if unreached is not None:
            raise unreached from None
        raise CliError(
            ExitCode.CONNECTION, f"{target!r} refused the MCP handshake: error {exc.code}: {exc.message}"
        ) from None


_HTTP_FAILED = re.compile(r"HTTP request failed: (\w+)\((.*)\)", re.DOTALL)


def _http_failure(target: str, exc: McpError) -> CliError | None:
    """An HTTP target that could not be reached (nothing listening, a timeout, a reset): one
    line naming the target, not the HTTP client's exception. None for any other error."""
    found = _HTTP_FAILED.fullmatch(exc.message)
    if found is None:
        return None
    kind, detail = found.group(1), found.group(2).strip("'\"")
    if kind in ("ConnectError", "ConnectTimeout"):
        reason = "nothing answers there" if kind == "ConnectError" else "timed out"
        return CliError(
            ExitCode.CONNECTION,
            f"cannot connect to {target}: {reason}" + (f" ({detail})" if detail else ""),
            hint="is `trio-mcp serve ... --http HOST:PORT` (or `python server.py --http ...`) running there?",
        )
    failed = f"{kind}: {detail}" if detail else kind
    return CliError(ExitCode.CONNECTION, f"{target}: the HTTP request failed: {failed}")


@asynccontextmanager
async def open_target(
    target: str,
    *,
    token: str | None = None,
    connect_timeout: float = 10.0,
    on_elicit: ElicitationHandler | None = None,
    protocol: str = LATEST_VERSION,
    on_elicit_url: UrlElicitationHandler | None = None,
) -> AsyncIterator[Client]:
    """An initialized :class:`~trio_mcp.Client` on TARGET: a ``ws://``/``wss://`` or
    ``http://``/``https://`` URL, or a
    command line (one string, split like a shell does) spawned as a stdio server.
    ``on_elicit`` answers the server's elicitation requests (the capability is declared),
    ``on_elicit_url`` its URL-mode ones.
    ``protocol``: see :meth:`Client.open` (a handshake version, ``2026-07-28`` or ``auto``)."""
    if not (math.isfinite(connect_timeout) and connect_timeout > 0):
        raise CliError(ExitCode.USAGE, "--timeout must be positive")
    if _is_http(target):
        auth = None
        if token is None:  # no --token: the tokens of `trio-mcp auth login`, if any
            from .auth import stored_oauth

            auth = await stored_oauth(target.strip())
        async with _open_http(
            target,
            token=token,
            connect_timeout=connect_timeout,
            on_elicit=on_elicit,
            protocol=protocol,
            auth=auth,
            on_elicit_url=on_elicit_url,
        ) as client:
            yield client
        return
    if is_url(target):
        async with _open_websocket(
            target,
            token=token,
            connect_timeout=connect_timeout,
            on_elicit=on_elicit,
            protocol=protocol,
            on_elicit_url=on_elicit_url,
        ) as client:
            yield client
        return
    argv = _command(target)
    async with (
        _spawn(argv) as transport,
        connect(transport, initialize=False, on_elicit=on_elicit, on_elicit_url=on_elicit_url) as client,
    ):
        try:
            await _handshake(client, target, connect_timeout, process=transport.process, protocol=protocol)
        except CliError:
            if transport.process.returncode is None:
                transport.process.terminate()  # not an MCP server: no grace period for it
            raise
        yield client


@asynccontextmanager
async def _open_http(
    url: str,
    *,
    token: str | None,
    connect_timeout: float,
    on_elicit: ElicitationHandler | None = None,
    protocol: str = LATEST_VERSION,
    auth: httpx.Auth | None = None,
    on_elicit_url: UrlElicitationHandler | None = None,
) -> AsyncIterator[Client]:
    """A Client on an ``http://``/``https://`` MCP endpoint (``serve --http``: path ``/mcp``);
    ``auth``: an OAuth flow (the stored tokens of ``trio-mcp auth login``)."""
    from ..client import open_http_transport

    entered = False
    try:
        async with (
            open_http_transport(
                url.strip(), token=token, connect_timeout=connect_timeout, auth=auth
            ) as transport,
            connect(transport, initialize=False, on_elicit=on_elicit, on_elicit_url=on_elicit_url) as client,
        ):
            await _handshake(
                client,
                url,
                connect_timeout,
                process=None,
                protocol=protocol,
                refusal=lambda: transport.refusal,
                token=token,
                transport=transport,
            )
            entered = True
            yield client
    except ValueError as exc:
        if entered:
            raise
        raise CliError(ExitCode.USAGE, f"cannot use {url!r}: {exc}") from None


@asynccontextmanager
async def _open_websocket(
    url: str,
    *,
    token: str | None,
    connect_timeout: float,
    on_elicit: ElicitationHandler | None = None,
    protocol: str = LATEST_VERSION,
    on_elicit_url: UrlElicitationHandler | None = None,
) -> AsyncIterator[Client]:
    try:
        import trio_websocket

        from ..transports.websocket import open_websocket_transport
    except ImportError as exc:  # pragma: no cover - the module ships with trio_mcp
        raise CliError(ExitCode.CONNECTION, f"WebSocket support is not available: {exc}") from None

    entered = False
    try:
        async with open_websocket_transport(url, token=token, connect_timeout=connect_timeout) as transport:
            async with connect(
                transport, initialize=False, on_elicit=on_elicit, on_elicit_url=on_elicit_url
            ) as client:
                await _handshake(client, url, connect_timeout, process=None, protocol=protocol)
                entered = True
                yield client
    except ValueError as exc:
        if entered:
            raise
        raise CliError(ExitCode.USAGE, f"cannot use {url!r}: {exc}") from None
    except trio_websocket.ConnectionRejected as exc:
        if entered:  # pragma: no cover - only raised while connecting
            raise
        raise refusal_error(url, exc.status_code, token=token, detail=_body_text(exc.body)) from None
    except trio_websocket.HandshakeError as exc:
        if entered:  # pragma: no cover - only raised while connecting
            raise
        reason = str(exc) or (
            "timed out" if isinstance(exc, trio_websocket.ConnectionTimeout) else type(exc).__name__
        )
        raise CliError(
            ExitCode.CONNECTION,
            reason if reason.startswith("cannot connect") else f"cannot connect to {url}: {reason}",
            hint="is `trio-mcp serve ... --ws HOST:PORT` running there?",
        ) from None
