"""The ``trio-mcp`` commands (click), each running Trio inside with ``trio.run``."""

from __future__ import annotations

import contextlib
import functools
import logging
import ssl
import sys
import textwrap
from collections.abc import Awaitable, Callable, Iterator, Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
import trio
from click.core import ParameterSource
from rich.markup import escape
from rich.text import Text

from ..client import Client
from ..protocol.errors import INVALID_PARAMS, TASK_CANCELLED, McpError
from ..protocol.messages import CallToolResult, Task, Tool
from ..protocol.tasks import TaskStatus
from ..server import Server, ServerRuntime
from ..transports.stdio import open_stdio_transport
from .elicit import TerminalElicitor
from .errors import CliError, ExitCode, usage_error
from .follow import TaskFollower
from .parsing import (
    DURATION_HELP,
    SPEC_HELP,
    format_duration_ms,
    load_server,
    parse_duration_ms,
    parse_tool_arguments,
    suggest,
)
from .render import (
    LiveDisplays,
    dump_json,
    print_error,
    print_result,
    stderr_console,
    stdout_console,
    task_line,
    task_table,
    tasks_table,
    tools_table,
    wire,
)
from .runner import Interrupts, as_cli_error, is_url, open_target, run_trio, unwrap

__all__ = ["cli", "main"]

F = TypeVar("F", bound=Callable[..., Any])

log = logging.getLogger("trio_mcp.cli")


def exit_codes(*rows: tuple[int, str]) -> str:
    """The ``Exit codes:`` epilog of a command's help: the codes *it* can exit with (click
    does not rewrap a ``\\b`` paragraph, so long meanings are wrapped here, to 96 columns)."""
    lines = ["\b", "Exit codes:"]
    for code, meaning in rows:
        lines.extend(textwrap.wrap(meaning, 96, initial_indent=f"  {code:<5}", subsequent_indent=" " * 7))
    return "\n".join(lines)


_USAGE = "usage error: bad option or value, bad duration, unparsable TARGET"
_CONNECTION = "connection error: TARGET could not be started or reached, refused us, or went away"
_PROTOCOL = "protocol error: the server answered with a JSON-RPC error"
_INTERRUPTED = "interrupted by Ctrl-C (143: by SIGTERM)"

EXIT_CODES_ALL = exit_codes(
    (ExitCode.OK, "success (serve: also when stopped by SIGINT or SIGTERM)"),
    (ExitCode.TOOL_ERROR, "the tool returned an error (isError), or the task failed or was cancelled"),
    (ExitCode.USAGE, "usage error: unknown tool/argument, bad value, bad duration, bad SERVER spec"),
    (
        ExitCode.CONNECTION,
        "connection error: TARGET could not be started, reached, refused us, or went away (serve: "
        "cannot listen, or the --store file is in use by another server process)",
    ),
    (ExitCode.PROTOCOL, "protocol error: the server answered with a JSON-RPC error (e.g. unknown task id)"),
    (
        ExitCode.INTERRUPTED,
        "interrupted by Ctrl-C (143: by SIGTERM); a task being followed is cancelled first",
    ),
)
"""The group's epilog: every code, each command's own --help lists those it can exit with."""

EXIT_CODES_SERVE = exit_codes(
    (ExitCode.OK, "stopped by SIGINT (Ctrl-C) or SIGTERM (a clean shutdown), or stdin closed (stdio)"),
    (ExitCode.USAGE, "usage error: bad SERVER spec, --ws/--http address, --store URL or option"),
    (
        ExitCode.CONNECTION,
        "cannot listen on HOST:PORT (e.g. the port is in use), or the --store sqlite:///PATH file is "
        "in use by another server process",
    ),
    (ExitCode.INTERRUPTED, "a second signal during the shutdown stopped it at once (143: if by SIGTERM)"),
)
EXIT_CODES_CLIENT = exit_codes(
    (ExitCode.OK, "success"),
    (ExitCode.USAGE, _USAGE),
    (ExitCode.CONNECTION, _CONNECTION),
    (ExitCode.PROTOCOL, _PROTOCOL),
    (ExitCode.INTERRUPTED, _INTERRUPTED),
)
"""A client command that runs no tool: `tools`, `tasks list`."""
EXIT_CODES_CALL = exit_codes(
    (ExitCode.OK, "success"),
    (
        ExitCode.TOOL_ERROR,
        "the tool returned an error (isError, e.g. invalid arguments), or the task failed "
        "or was cancelled by someone else",
    ),
    (
        ExitCode.USAGE,
        "usage error: unknown tool or argument, a value that does not fit its type, a missing "
        "argument, --task on a forbidden tool or none on a required one, bad duration, unparsable TARGET",
    ),
    (ExitCode.CONNECTION, _CONNECTION),
    (ExitCode.PROTOCOL, _PROTOCOL + " (e.g. -32602 for invalid arguments)"),
    (ExitCode.INTERRUPTED, _INTERRUPTED + "; a task being followed is cancelled first"),
)
EXIT_CODES_TASKS = exit_codes(
    (ExitCode.OK, "success"),
    (ExitCode.TOOL_ERROR, "tasks result: the task failed or was cancelled"),
    (ExitCode.USAGE, _USAGE),
    (ExitCode.CONNECTION, _CONNECTION),
    (ExitCode.PROTOCOL, _PROTOCOL + " (e.g. an unknown task id)"),
    (ExitCode.INTERRUPTED, _INTERRUPTED + "; the task goes on"),
)
EXIT_CODES_TASKS_GET = exit_codes(
    (ExitCode.OK, "success"),
    (ExitCode.USAGE, _USAGE),
    (ExitCode.CONNECTION, _CONNECTION),
    (ExitCode.PROTOCOL, _PROTOCOL + " (e.g. an unknown task id)"),
    (ExitCode.INTERRUPTED, _INTERRUPTED),
)
EXIT_CODES_TASKS_RESULT = exit_codes(
    (ExitCode.OK, "the task completed"),
    (ExitCode.TOOL_ERROR, "the task failed or was cancelled"),
    (ExitCode.USAGE, _USAGE),
    (ExitCode.CONNECTION, _CONNECTION),
    (ExitCode.PROTOCOL, _PROTOCOL + " (e.g. an unknown task id)"),
    (ExitCode.INTERRUPTED, _INTERRUPTED + ": waiting stopped, the task goes on"),
)
EXIT_CODES_TASKS_CANCEL = exit_codes(
    (ExitCode.OK, "the task was cancelled"),
    (ExitCode.USAGE, _USAGE),
    (ExitCode.CONNECTION, _CONNECTION),
    (ExitCode.PROTOCOL, _PROTOCOL + " (e.g. an unknown task id, or the task already ended)"),
    (ExitCode.INTERRUPTED, _INTERRUPTED),
)
EXIT_CODES_DEMO = exit_codes(
    (ExitCode.OK, "success"),
    (ExitCode.USAGE, "usage error: bad option"),
    (ExitCode.CONNECTION, "the demo server could not be started (e.g. a bad --server spec) or went away"),
    (ExitCode.PROTOCOL, "protocol error: the server answered a step with an unexpected JSON-RPC error"),
    (ExitCode.INTERRUPTED, _INTERRUPTED + "; a task being followed is cancelled first"),
)


def _version() -> str:
    try:
        return metadata.version("trio-mcp")
    except metadata.PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "unknown"


class Duration(click.ParamType):  # type: ignore[type-arg]  # generic only in click >= 8.2
    """A click parameter type for durations (``30s``, ``5m``, ``1h``, ``500ms``): milliseconds."""

    name = "DURATION"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> int:
        if isinstance(value, int):
            return value
        try:
            return parse_duration_ms(str(value))
        except CliError as exc:
            self.fail(exc.message + (f" ({exc.hint})" if exc.hint else ""), param, ctx)


DURATION = Duration()


def _execute(body: Callable[[Interrupts], Awaitable[int]]) -> NoReturn:
    """Run ``body`` in Trio and exit with its code; user-facing errors become messages."""
    err = stderr_console()

    def interrupted() -> None:
        err.print("[bold yellow]Interrupted.[/]")

    try:
        code = run_trio(body, on_interrupted=interrupted)
    except KeyboardInterrupt:
        interrupted()
        code = ExitCode.INTERRUPTED
    except Exception as exc:
        error = as_cli_error(exc) or _store_error(exc)
        if error is None:
            raise
        print_error(err, error)
        code = error.code
    except BaseExceptionGroup as group:  # pragma: no cover - a group with KeyboardInterrupt
        error = as_cli_error(group) or _store_error(group)
        if error is None:
            raise
        print_error(err, error)
        code = error.code
    raise SystemExit(int(code))


def _store_error(exc: BaseException) -> CliError | None:
    """A task store that cannot be served from this process: its SQLite file is in use by
    another server process, or it cannot be opened at all (``StartupError``): exit 3, its
    one-line message. None for anything else."""
    sqlite = sys.modules.get("trio_mcp.stores.sqlite")  # imported if a store could raise it
    server = sys.modules.get("trio_mcp.server._server")
    leaf = unwrap(exc)
    if (sqlite is not None and isinstance(leaf, sqlite.StoreLocked)) or (
        server is not None and isinstance(leaf, server.StartupError)
    ):
        return CliError(ExitCode.CONNECTION, str(leaf))
    return None


def client_options(fn: F) -> F:
    """``--token``, ``--timeout`` and ``--output``, shared by the commands that connect."""
    fn = click.option(
        "--output",
        "-o",
        type=click.Choice(["text", "json"]),
        default="text",
        show_default=True,
        help="text: tables and a progress bar for people; json: machine-readable JSON on stdout.",
    )(fn)
    fn = click.option(
        "--timeout",
        type=DURATION,
        default="10s",
        show_default=True,
        metavar="DURATION",
        help="How long to wait for TARGET to connect and complete the MCP handshake.",
    )(fn)
    fn = click.option(
        "--protocol",
        type=click.Choice(["auto", "2025-11-25", "2026-07-28"]),
        default="2025-11-25",
        show_default=True,
        envvar="TRIO_MCP_PROTOCOL",
        help="The MCP revision to speak: auto probes with server/discover and falls back to the "
        "2025-11-25 handshake [env: TRIO_MCP_PROTOCOL].",
    )(fn)
    fn = click.option(
        "--token",
        envvar="TRIO_MCP_TOKEN",
        metavar="TOKEN",
        help="Bearer token for a ws:// or http:// TARGET started with `serve --ws/--http ... --token` "
        "[env: TRIO_MCP_TOKEN].",
    )(fn)
    return fn


def _find_tool(tools: Sequence[Tool], name: str) -> Tool:
    for tool in tools:
        if tool.name == name:
            return tool
    names = [tool.name for tool in tools]
    did_you_mean = suggest(name, names)
    available = ", ".join(names) or "none"
    raise usage_error(
        f"the server has no tool {name!r}",
        hint=f"{did_you_mean + ' ' if did_you_mean else ''}its tools: {available}",
    )


@click.group(
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
    epilog=EXIT_CODES_ALL,
)
@click.version_option(_version(), "-V", "--version", prog_name="trio-mcp")
def cli() -> None:
    """Serve, inspect and call MCP servers whose tool calls run as tasks (MCP 2025-11-25).

    TARGET, for the client commands, is either a command line that starts a stdio server,
    given as one quoted argument, or the ws:// URL of a server started with `serve --ws`, or the
    http://HOST:PORT/mcp URL of one started with `serve --http`.

    \b
    Examples:
      trio-mcp demo
      trio-mcp serve examples/demo_server.py:server --ws 127.0.0.1:8765 --token s3cret
      trio-mcp tools "python examples/demo_server.py"
      trio-mcp call "python examples/demo_server.py" sleep seconds=3 --task
      trio-mcp tasks list ws://127.0.0.1:8765 --token s3cret
      trio-mcp auth login https://mcp.example.com/mcp
    """


# ------------------------------------------------------------------------------------ serve

_LOG_LEVEL = click.option(
    "--log-level",
    type=click.Choice(["debug", "info", "warning", "error"]),
    default="warning",
    show_default=True,
    help="Logging threshold; logs go to stderr.",
)
_DRAIN = click.option(
    "--drain",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    metavar="SECONDS",
    help="With a redis:// store: on SIGTERM/SIGINT, how long running tasks may go on; then each "
    "goes back to the queue (tools marked retries/idempotent) or ends failed.",
)


@cli.command(epilog=EXIT_CODES_SERVE)
@click.argument("spec", metavar="SERVER")
@click.option(
    "--ws",
    metavar="HOST:PORT",
    help="Serve over WebSocket on HOST:PORT (e.g. 127.0.0.1:8765, :8765, [::1]:8765; port 0 picks one) "
    "instead of stdio.",
)
@click.option(
    "--http",
    metavar="HOST:PORT",
    help="Serve Streamable HTTP (both MCP eras) at http://HOST:PORT/mcp instead of stdio.",
)
@click.option(
    "--token",
    envvar="TRIO_MCP_TOKEN",
    metavar="TOKEN",
    help="With --ws or --http: require `Authorization: Bearer TOKEN`; tasks then belong to the token, "
    "not the connection, and outlive it [env: TRIO_MCP_TOKEN].",
)
@click.option(
    "--allow-origin",
    "origins",
    multiple=True,
    metavar="ORIGIN",
    help="With --ws or --http: a browser Origin to accept (repeatable; e.g. https://app.example.com or "
    "http://localhost:*). Default: localhost on any port. Clients that send no Origin are always accepted.",
)
@click.option(
    "--store",
    metavar="URL",
    default="memory",
    show_default=True,
    envvar="TRIO_MCP_STORE",
    help="Where tasks are kept: memory, sqlite:///PATH (survives restarts; tasks left running by a "
    "stopped server are failed on start) or redis://HOST:PORT/DB (shared by several server "
    "processes) [env: TRIO_MCP_STORE].",
)
@click.option(
    "--tls-cert",
    metavar="PEM",
    type=click.Path(exists=True, dir_okay=False),
    help="With --http: serve HTTPS with this certificate chain (PEM); --tls-key gives its key.",
)
@click.option(
    "--tls-key",
    metavar="PEM",
    type=click.Path(exists=True, dir_okay=False),
    help="With --tls-cert: the private key (PEM), if not in the certificate file.",
)
@click.option(
    "--grace",
    type=click.FloatRange(min=0),
    default=10.0,
    show_default=True,
    metavar="SECONDS",
    help="With --http: on SIGTERM/SIGINT, how long requests in flight may run on before they are "
    'answered -32603 "server shutting down" (new requests get 503 + Retry-After meanwhile).',
)
@click.option(
    "--no-work",
    is_flag=True,
    help="With a redis:// --store: run no tasks here; every task this process creates is queued "
    "for `trio-mcp worker` processes (or other fronts) to run.",
)
@_DRAIN
@click.option(
    "--state-key",
    envvar="TRIO_MCP_STATE_KEY",
    metavar="KEY",
    help="The secret that seals 2026-07-28 requestState (multi round-trip input): give every "
    "process behind one load balancer the same one (at least 16 bytes; e.g. `openssl rand -hex 32`). "
    "Default: a random key per process [env: TRIO_MCP_STATE_KEY].",
)
@_LOG_LEVEL
@click.pass_context
def serve(
    ctx: click.Context,
    spec: str,
    ws: str | None,
    http: str | None,
    token: str | None,
    origins: tuple[str, ...],
    store: str,
    tls_cert: str | None,
    tls_key: str | None,
    grace: float,
    no_work: bool,
    drain: float,
    state_key: str | None,
    log_level: str,
) -> None:
    """Serve the trio_mcp.Server object SERVER over stdio (default), WebSocket or Streamable HTTP.

    SERVER is MODULE:OBJECT (imported like `python -m`, from the current directory too) or
    FILE.py:OBJECT; OBJECT defaults to `server`. Logs go to stderr; stdout carries only MCP
    messages. SIGINT (Ctrl-C) or SIGTERM shuts down cleanly: running tasks are cancelled and
    the command exits 0; a second signal during the shutdown stops it at once (exit 130, or
    143 if the first was SIGTERM). Over stdio it also exits 0 when stdin closes. Over --http
    the stop is graceful: no new connections, new requests get 503 + Retry-After, requests in
    flight get --grace seconds, then -32603 "server shutting down".

    \b
    Examples:
      trio-mcp serve examples/demo_server.py:server
      trio-mcp serve mypkg.tools:server --log-level info
      trio-mcp serve trio_mcp.cli.demo_server:server --ws 127.0.0.1:8765 --token s3cret
      trio-mcp serve examples/demo_server.py --http 127.0.0.1:8000 --store sqlite:///tasks.db
    """
    from ..stores import store_from_url

    try:
        store_factory = store_from_url(store)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="'--store'") from None
    token_given = ctx.get_parameter_source("token") not in (ParameterSource.ENVIRONMENT, None)
    if ws is not None and http is not None:
        raise click.UsageError("--ws and --http cannot be combined")
    listen = ws if ws is not None else http
    if listen is None and (origins or (token and token_given)):
        raise click.UsageError("--token and --allow-origin only apply with --ws or --http HOST:PORT")
    if (tls_cert is not None or tls_key is not None) and http is None:
        raise click.UsageError("--tls-cert and --tls-key only apply with --http HOST:PORT")
    if tls_key is not None and tls_cert is None:
        raise click.UsageError("--tls-key needs --tls-cert")
    key = state_key.encode("utf-8") if state_key else None
    if key is not None and len(key) < 16:
        raise click.BadParameter("the key needs at least 16 bytes", param_hint="'--state-key'")
    address: tuple[str, int] | None = None
    if listen is not None:
        from ..transports.websocket import parse_host_port

        try:
            address = parse_host_port(listen)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--ws'" if ws else "'--http'") from None
    err = stderr_console()
    with _logging_to_stderr(log_level):
        try:
            server = load_server(spec)
        except CliError as exc:
            print_error(err, exc)
            raise SystemExit(int(exc.code)) from None
        if store != "memory":
            server.store_factory = store_factory
        server.works = not no_work
        server.drain_seconds = drain
        if key is not None:
            from ..protocol.request_state import StateCodec

            server.state_codec = StateCodec(key)
        http_options = {"tls_cert": tls_cert, "tls_key": tls_key, "grace": grace}
        _serve(server, address, token, origins, over_http=http is not None, http_options=http_options)


# ----------------------------------------------------------------------------------- worker


@cli.command(epilog=EXIT_CODES_SERVE)
@click.argument("spec", metavar="SERVER")
@click.option(
    "--store",
    metavar="URL",
    envvar="TRIO_MCP_STORE",
    help="The redis:// (or rediss://, redis+sentinel://) store the fronts queue tasks in "
    "[env: TRIO_MCP_STORE]. Default: the server's own store, which must be such a store.",
)
@_DRAIN
@_LOG_LEVEL
def worker(spec: str, store: str | None, drain: float, log_level: str) -> None:
    """Run the tasks that server processes queue in a shared store, with no listener.

    SERVER is the same MODULE:OBJECT or FILE.py:OBJECT the fronts serve (the worker runs its
    tools). It claims queued tasks while it has room (the server's limits.max_running_work),
    renews its lease on each, and stores their statuses and results; clients reach them through
    any front. SIGTERM stops claiming and lets running tasks finish for --drain seconds.

    \b
    Examples:
      trio-mcp serve app.py --http 0.0.0.0:8000 --store redis://cache:6379/0 --no-work
      trio-mcp worker app.py --store redis://cache:6379/0
    """
    from ..stores import store_from_url

    factory = None
    if store is not None:
        try:
            factory = store_from_url(store)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="'--store'") from None
    err = stderr_console()
    with _logging_to_stderr(log_level):
        try:
            server = load_server(spec)
        except CliError as exc:
            print_error(err, exc)
            raise SystemExit(int(exc.code)) from None
        if factory is not None:
            server.store_factory = factory
        server.drain_seconds = drain

        async def body(interrupts: Interrupts) -> int:
            async with server.open() as runtime:
                if not runtime.supervisor.queues:
                    raise CliError(
                        ExitCode.USAGE,
                        "a worker needs a shared store that queues work: --store redis://HOST:PORT/DB",
                    )
                stopping = trio.Event()

                def stop() -> None:
                    log.warning("signal received: draining (running tasks get %g s)", drain)
                    stopping.set()

                interrupts.handler = stop
                err.print(f"Working for {server.info.name}: running queued tasks", highlight=False)
                await stopping.wait()
                await runtime.shutdown()
            return ExitCode.OK

        _execute(body)


@contextlib.contextmanager
def _logging_to_stderr(level: str) -> Iterator[None]:
    """Log (the server's own loggers too) to stderr at ``level`` while serving; undone after,
    so that an in-process invocation (tests) leaves logging as it found it."""
    root = logging.getLogger()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)-7s %(name)s: %(message)s"))
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper()))
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)


def _serve(
    server: Server,
    address: tuple[str, int] | None,
    token: str | None,
    origins: tuple[str, ...],
    *,
    over_http: bool = False,
    http_options: dict[str, Any] | None = None,
) -> None:

    async def body(interrupts: Interrupts) -> int:
        async with server.open() as runtime, trio.open_nursery() as nursery:
            listening = trio.CancelScope()
            stopped = trio.Event()

            async def shut_down() -> None:
                if over_http:
                    # serve_http stops gracefully when cancelled: no new requests (503), those
                    # in flight get --grace seconds, then -32603; it returns when done.
                    listening.cancel()
                    await stopped.wait()
                await runtime.shutdown()  # waiting requests answered, then everything cancelled
                nursery.cancel_scope.cancel()

            def stop() -> None:
                log.warning("signal received: shutting down (running tasks are cancelled)")
                nursery.start_soon(shut_down)

            interrupts.handler = stop

            async def serve() -> None:
                if address is None:
                    log.info("serving %s over stdio", server.info.name)
                    async with open_stdio_transport() as transport:
                        await runtime.serve(transport)
                    log.info("stdin closed: shutting down")
                else:
                    try:
                        with listening:
                            await _serve_ws(
                                runtime,
                                address,
                                token,
                                origins,
                                over_http=over_http,
                                http_options=http_options,
                            )
                    finally:
                        stopped.set()
                    if listening.cancel_called:
                        return  # shut_down goes on
                nursery.cancel_scope.cancel()

            nursery.start_soon(serve)
        return ExitCode.OK

    _execute(body)


async def _serve_ws(
    runtime: ServerRuntime,
    address: tuple[str, int],
    token: str | None,
    origins: tuple[str, ...],
    *,
    over_http: bool = False,
    http_options: dict[str, Any] | None = None,
) -> None:
    from ..server import serve_http, serve_websocket
    from ..transports.security import DEFAULT_ALLOWED_ORIGINS, static_token

    host, port = address
    serve_fn: Callable[..., Awaitable[object]] = serve_websocket
    extra: dict[str, Any] = {}
    if over_http:
        serve_fn = serve_http
        extra = {name: value for name, value in (http_options or {}).items() if value is not None}
    server = runtime.server
    serve = functools.partial(
        serve_fn,
        runtime,
        host,
        port,
        allowed_origins=origins or DEFAULT_ALLOWED_ORIGINS,
        authenticate=static_token(token) if token else None,
        **extra,
    )
    err = stderr_console()
    async with trio.open_nursery() as nursery:
        try:
            bound = await nursery.start(serve)
        except Exception as exc:  # arrives wrapped in the runtime's nursery's ExceptionGroup
            leaf = unwrap(exc)
            if isinstance(leaf, ssl.SSLError):
                raise usage_error(f"cannot use --tls-cert/--tls-key: {leaf}") from None
            if isinstance(leaf, OSError):
                raise CliError(
                    ExitCode.CONNECTION,
                    f"cannot listen on {host}:{port}: {leaf.strerror or leaf}",
                    hint="is another server using that port? port 0 picks a free one",
                ) from None
            if isinstance(leaf, ValueError):
                raise usage_error(str(leaf)) from None
            raise
        literal = f"[{host}]" if ":" in host else host
        count = len(server.tools)
        err.print(
            Text.assemble(
                "Serving ",
                (server.info.name, "bold"),
                f" {server.info.version} ({count} tool{'s' if count != 1 else ''}) on ",
                (
                    f"{'https' if extra.get('tls_cert') else 'http'}://{literal}:{bound}/mcp"
                    if over_http
                    else f"ws://{literal}:{bound}/",
                    "bold cyan",
                ),
            )
        )
        if token:
            err.print("Clients must send the token; their tasks belong to it and outlive connections.")
        elif over_http:
            err.print("No --token: a session's tasks end with it; 2026-07-28 tasks are shared by all.")
        else:
            err.print("No --token: each connection's tasks are cancelled when it closes.")
        err.print("Press Ctrl-C to stop.")


# ------------------------------------------------------------------------------------ tools


@cli.command(epilog=EXIT_CODES_CLIENT)
@click.argument("target")
@client_options
def tools(target: str, token: str | None, timeout: int, output: str, protocol: str) -> None:
    """List the tools of TARGET and whether each can run as a task.

    Task support is `optional` (call it either way), `required` (only with `call --task`) or
    `forbidden` (only without).

    \b
    Examples:
      trio-mcp tools "python examples/demo_server.py"
      trio-mcp tools ws://127.0.0.1:8765 --token s3cret -o json
    """

    async def body(interrupts: Interrupts) -> int:
        async with open_target(
            target, token=token, connect_timeout=timeout / 1000, protocol=protocol
        ) as client:
            found = await client.list_tools()
            info = client.server
        if output == "json":
            dump_json([wire(tool) for tool in found])
        else:
            title = None
            if info is not None:
                title = (
                    f"{info.server_info.name} {info.server_info.version} (protocol {info.protocol_version})"
                )
            stdout_console().print(tools_table(found, title=title))
        return ExitCode.OK

    _execute(body)


# ------------------------------------------------------------------------------------- call


@cli.command(epilog=EXIT_CODES_CALL)
@click.argument("target")
@click.argument("tool_name", metavar="TOOL")
@click.argument("pairs", metavar="[KEY=VALUE]...", nargs=-1)
@click.option(
    "--json",
    "json_args",
    metavar="JSON",
    help="All arguments as one JSON object (or @FILE to read it from a file); KEY=VALUE pairs override it.",
)
@click.option("--task", "as_task", is_flag=True, help="Run the call as a task and follow it to the end.")
@click.option(
    "--ttl",
    type=DURATION,
    metavar="DURATION",
    help=f"With --task: how long the server keeps the task and its result ({DURATION_HELP}).",
)
@click.option(
    "--detach",
    is_flag=True,
    help="With --task: print the task id and exit at once; follow it later with `trio-mcp tasks`.",
)
@client_options
def call(
    target: str,
    tool_name: str,
    pairs: tuple[str, ...],
    json_args: str | None,
    as_task: bool,
    ttl: int | None,
    detach: bool,
    token: str | None,
    timeout: int,
    output: str,
    protocol: str,
) -> None:
    """Call TOOL on TARGET with arguments KEY=VALUE...; print its result.

    Each VALUE is read as JSON when it parses (3, true, [1,2], {"a":1}, "quoted"), else as a
    string, then fitted to the tool's inputSchema: a string parameter keeps the text as
    typed (text=123 is "123"), "3" for a number is 3, yes/no work for booleans. Names, required
    arguments and each value's top-level type are checked here (exit 2); what is inside an
    array or object, and constraints such as minimum or pattern, are checked by the server.
    Text content is printed as text and structuredContent as JSON, on stdout.

    With --task the call becomes a task: a live progress bar (percentage when the server
    reports a total, a spinner otherwise), the task's status message and the elapsed time
    are shown on stderr until it ends, then the result is printed. Ctrl-C sends tasks/cancel,
    reports the final status and exits 130.

    When the tool asks the user something (elicitation), the question is asked on stderr and
    answered on stdin, one line per field: Enter takes the default or skips an optional
    field, Ctrl-D declines the request, Ctrl-C cancels it (the call or task goes on). Piped
    stdin answers line by line the same way; at its end the request is declined. A page the
    tool sends the user to (URL mode) is shown and opened in the browser only on "y".

    \b
    Examples:
      trio-mcp call "python examples/demo_server.py" echo text="hello world"
      trio-mcp call "python examples/demo_server.py" add a=2 b=3
      trio-mcp call "python examples/demo_server.py" sleep seconds=5 --task --ttl 5m
      trio-mcp call ws://127.0.0.1:8765 batch_job --json '{"seconds": 60}' --task --detach --token s3cret
      trio-mcp call "python examples/demo_server.py" sleep seconds=1 --task -o json
      trio-mcp call "python examples/demo_server.py" ask question="Your name?" --task
      echo Ada | trio-mcp call "python examples/demo_server.py" ask question="Your name?"
    """
    if not as_task and (ttl is not None or detach):
        raise click.UsageError("--ttl and --detach only apply with --task")

    async def body(interrupts: Interrupts) -> int:
        if detach:
            _check_detachable(target, token)
        displays = LiveDisplays()
        # Questions (elicitation) are asked at the terminal, on stderr; not with --detach: then
        # nobody would be there to answer, and the server is told so (capability not declared).
        elicitor = (
            None
            if detach
            else TerminalElicitor(stderr_console(), displays=displays, interrupts=interrupts, ready=False)
        )
        async with open_target(
            target,
            token=token,
            connect_timeout=timeout / 1000,
            on_elicit=elicitor,
            protocol=protocol,
            on_elicit_url=elicitor.url if elicitor is not None else None,
        ) as client:
            tool = _find_tool(await client.list_tools(), tool_name)
            arguments = parse_tool_arguments(tool, pairs, json_args)
            support = tool.task_support
            if as_task and support == "forbidden":
                raise usage_error(
                    f"tool {tool.name!r} cannot run as a task (taskSupport: forbidden)", hint="drop --task"
                )
            if not as_task and support == "required" and not client.modern:
                raise usage_error(
                    f"tool {tool.name!r} only runs as a task (taskSupport: required)", hint="add --task"
                )
            if not as_task:
                return await _plain_call(client, tool.name, arguments, output, displays, elicitor)
            return await _task_call(
                client, tool.name, arguments, ttl, detach, output, interrupts, displays, elicitor
            )

    _execute(body)


@contextlib.contextmanager
def _arguments_refused(tool: str) -> Iterator[None]:
    """A ``tools/call`` answered with error -32602 (invalid params): the server refused the
    arguments, e.g. a nested value the CLI does not check. Exit 4, with the server's message
    (which names the field) and where to read the schema."""
    try:
        yield
    except McpError as exc:
        if exc.code != INVALID_PARAMS:
            raise
        raise CliError(
            ExitCode.PROTOCOL,
            f"the server refused the arguments of tool {tool!r}: error {exc.code}: {exc.message}",
            hint="the CLI checks only top-level types; the server checks the rest against the tool's "
            "inputSchema (see it with `trio-mcp tools TARGET -o json`)",
        ) from None


async def _plain_call(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    output: str,
    displays: LiveDisplays,
    elicitor: TerminalElicitor | None,
) -> int:
    err = stderr_console()
    if elicitor is not None:
        elicitor.open()
    with _arguments_refused(name):
        if output == "text" and err.is_terminal:
            with displays.live(err.status(f"calling {escape(name)}…")):
                result = await client.call_tool(name, arguments)
        else:
            result = await client.call_tool(name, arguments)
    if elicitor is not None:
        await elicitor.withdraw()
    if output == "json":
        dump_json(wire(result))
    else:
        print_result(result, err=err, tool=name)
    return ExitCode.TOOL_ERROR if result.is_error else ExitCode.OK


async def _outcome(client: Client, task: Task) -> tuple[CallToolResult | None, McpError | None]:
    """The result (or error) of a terminal task."""
    if task.status == TaskStatus.CANCELLED:
        return None, None
    try:
        return await client.task_result(task.task_id), None
    except McpError as exc:
        return None, exc


def _report(
    task: Task, result: CallToolResult | None, error: McpError | None, output: str, tool: str | None
) -> int:
    """Print how a task ended; return the exit code for it. ``tool``: the tool the task runs,
    None when it is not known (``tasks result``: the task's record does not name its tool)."""
    err = stderr_console()
    if output == "json":
        dump_json(
            {
                "task": wire(task),
                "result": wire(result) if result is not None else None,
                "error": {"code": error.code, "message": error.message} if error is not None else None,
            }
        )
    elif result is not None:
        print_result(result, err=err, tool=tool, task=task)
    elif error is not None:
        if error.code == TASK_CANCELLED or task.status == TaskStatus.CANCELLED:
            err.print(Text.assemble(("Task cancelled: ", "bold magenta"), task.task_id))
        else:
            err.print(
                Text.assemble(
                    ("Task ", "bold red"),
                    (task.task_id, "cyan"),
                    (" failed: ", "bold red"),
                    f"error {error.code}: {error.message}",
                )
            )
    elif task.status == TaskStatus.CANCELLED:
        err.print(Text.assemble(("Task cancelled: ", "bold magenta"), task.task_id))
    if task.status == TaskStatus.COMPLETED and result is not None and not result.is_error:
        return ExitCode.OK
    return ExitCode.TOOL_ERROR


def _check_detachable(target: str, token: str | None) -> None:
    """Refuse ``--detach`` where nothing could reach the task after this command exits: a
    stdio TARGET (its server is this command's child) or a URL without a token (the task
    belongs to this command's connection, and ends with it)."""
    if not is_url(target):
        raise usage_error(
            "--detach needs a server that outlives this command: a stdio TARGET's server ends with it",
            hint="serve it with `trio-mcp serve ... --http HOST:PORT --token T`, call its URL with --token T",
        )
    if not token:
        raise usage_error(
            "--detach needs --token: without one the task belongs to this command's connection "
            "and ends when it closes",
            hint="give the server's --token (or set TRIO_MCP_TOKEN); serve with --token to own tasks by it",
        )


async def _task_call(
    client: Client,
    name: str,
    arguments: dict[str, Any],
    ttl: int | None,
    detach: bool,
    output: str,
    interrupts: Interrupts,
    displays: LiveDisplays,
    elicitor: TerminalElicitor | None,
) -> int:
    err = stderr_console()
    follower = TaskFollower(
        client,
        label=name,
        err=err,
        display="none" if output == "json" or detach else "auto",
        interrupts=interrupts,
        displays=displays,
    )
    with _arguments_refused(name):
        created = await follower.create(name, arguments, ttl_ms=ttl)
    if isinstance(created, CallToolResult):  # modern era: the server answered at once
        if output == "json":
            dump_json({"task": None, "result": wire(created), "error": None})
        else:
            print_result(created, err=err, tool=name)
        return ExitCode.TOOL_ERROR if created.is_error else ExitCode.OK
    if detach and not follower.cancel_requested:
        follower.detach()
        if output == "json":
            dump_json(wire(created))
        else:
            sys.stdout.write(created.task_id + "\n")
            sys.stdout.flush()
            err.print(Text.assemble("Created ", task_line(created)))
        return ExitCode.OK
    if output == "text":
        err.print(
            Text.assemble(
                "Created ",
                task_line(created),
                f" (ttl {format_duration_ms(created.ttl)}, poll every "
                f"{format_duration_ms(created.poll_interval)}). Ctrl-C cancels it.",
            )
        )
    if elicitor is not None:
        elicitor.open()  # questions that came with the task are asked after the line above
    final = await follower.follow()
    if elicitor is not None:
        await elicitor.withdraw()
    if follower.cancel_requested:
        if output == "json":
            dump_json({"task": wire(final), "result": None, "error": None})
        else:
            err.print(Text.assemble("Cancel requested; final status: ", task_line(final)))
        return int(interrupts.exit_code)
    result, error = await _outcome(client, final)
    return _report(final, result, error, output, name)


# ------------------------------------------------------------------------------------ tasks


@cli.group(epilog=EXIT_CODES_TASKS)
def tasks() -> None:
    """List, inspect, await and cancel tasks on TARGET.

    Tasks outlive one invocation only on a server started with a token (`serve --ws
    HOST:PORT --token TOKEN`, or --http), reached with the same --token: the tasks belong to
    the token. With a stdio TARGET every invocation starts a fresh server, whose task list is
    empty (this works, but is rarely useful). Without a token a server cancels a connection's
    tasks when it closes.

    Task ids are 24 URL-safe base64 characters and may begin with "-": write `--` before
    one (`tasks get URL -- "$ID"`); options may still follow it (`tasks get URL -- "$ID" -o
    json`). An id of 8 characters or more that begins with "-" is also taken as the id.

    \b
    Examples:
      export TRIO_MCP_TOKEN=s3cret
      trio-mcp serve examples/demo_server.py:server --ws 127.0.0.1:8765 &
      ID=$(trio-mcp call ws://127.0.0.1:8765 batch_job seconds=60 --task --detach)
      trio-mcp tasks list ws://127.0.0.1:8765
      trio-mcp tasks get ws://127.0.0.1:8765 -- "$ID" -o json
      trio-mcp tasks result ws://127.0.0.1:8765 -- "$ID"
      trio-mcp tasks cancel ws://127.0.0.1:8765 -- "$ID"
    """


def _stdio_note(target: str) -> None:
    if not is_url(target):
        stderr_console().print(
            "[yellow]Note:[/] TARGET is a stdio command, so this is a fresh server with no earlier tasks; "
            "use a ws:// server with --token for tasks that outlive one invocation."
        )


def _task_not_found_hint(target: str) -> str:
    if is_url(target):
        return (
            "check the id with `trio-mcp tasks list`; "
            "a server without --token only shows a connection its own tasks"
        )
    return "a stdio TARGET is a fresh server each time: it only knows tasks created in this invocation"


async def _task_request(target: str, coro: Callable[[], Awaitable[Any]]) -> Any:
    try:
        return await coro()
    except McpError as exc:
        raise CliError(
            ExitCode.PROTOCOL,
            f"the server answered error {exc.code}: {exc.message}",
            hint=_task_not_found_hint(target)
            if "not found" in exc.message.lower()
            else _TASK_EXPIRED_HINT
            if "expired" in exc.message.lower()
            else None,
        ) from None


_TASK_EXPIRED_HINT = (
    "a task and its result are kept for its ttl (see `tasks get`), then forgotten; "
    "ask for longer with `call --task --ttl DURATION`"
)


class TasksCommand(click.Command):
    """A ``tasks`` subcommand: its TASK_ID may begin with ``-``, and options may follow ``--``.

    Task ids are URL-safe base64 (``-qN0w50_pPaSFgMcDT74WyHI``): one in 32 begins with ``-``,
    which click would take for an option. So, before click parses the command line:

    * A token that begins with ``-``, is not one of the command's options (``-o``, ``-ojson``,
      ``--token=...``) and is at least 8 characters long is a positional argument (the id). A
      shorter unknown one stays an option, so that a typo like ``-x`` is still reported.
    * ``--`` makes the command's remaining positional arguments (TARGET, TASK_ID) the next
      tokens, taken as they are; what follows them is parsed as options again, so
      ``tasks get URL -- "$ID" -o json`` works. (With plain click, everything after ``--`` is
      positional.) A ``--`` after all of them makes the rest positional, as usual.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, self.rearrange(ctx, args))

    def rearrange(self, ctx: click.Context, args: Sequence[str]) -> list[str]:
        """The command line with its options first and every positional argument after one ``--``."""
        params = self.get_params(ctx)
        wanted = sum(1 for param in params if isinstance(param, click.Argument))
        takes_value = {
            opt
            for param in params
            if isinstance(param, click.Option) and not param.is_flag and not param.count
            for opt in param.opts
        }
        options: list[str] = []
        positional: list[str] = []
        rest = list(args)
        while rest:
            arg = rest.pop(0)
            if arg == "--":
                if len(positional) >= wanted:  # nothing left to fill: the rest is positional
                    positional.extend(rest)
                    break
                taken = rest[: max(0, wanted - len(positional))]
                positional.extend(taken)
                del rest[: len(taken)]
            elif arg.startswith("-") and arg != "-" and not self._is_task_id(params, arg):
                options.append(arg)
                if arg in takes_value and rest:
                    options.append(rest.pop(0))
            else:
                positional.append(arg)
        return [*options, "--", *positional]

    @staticmethod
    def _is_task_id(params: Sequence[click.Parameter], arg: str) -> bool:
        if len(arg) < 8:
            return False
        options = {opt for param in params for opt in (*param.opts, *param.secondary_opts)}
        if arg.startswith("--"):
            return arg.split("=", 1)[0] not in options
        short_with_value = {opt for opt in options if len(opt) == 2}
        return arg not in options and not (arg[:2] in short_with_value and arg[2:] in ("text", "json"))


@tasks.command("list", cls=TasksCommand, epilog=EXIT_CODES_CLIENT)
@click.argument("target")
@client_options
def tasks_list(target: str, token: str | None, timeout: int, output: str, protocol: str) -> None:
    """List the tasks TARGET has for us (all pages).

    \b
    Examples:
      trio-mcp tasks list ws://127.0.0.1:8765 --token s3cret
      trio-mcp tasks list ws://127.0.0.1:8765 --token s3cret -o json
    """

    async def body(interrupts: Interrupts) -> int:
        _stdio_note(target)
        async with open_target(
            target, token=token, connect_timeout=timeout / 1000, protocol=protocol
        ) as client:
            found = [task async for task in client.all_tasks()]
        if output == "json":
            dump_json([wire(task) for task in found])
        elif found:
            stdout_console().print(tasks_table(found))
        else:
            stderr_console().print("No tasks.")
        return ExitCode.OK

    _execute(body)


@tasks.command("get", cls=TasksCommand, epilog=EXIT_CODES_TASKS_GET)
@click.argument("target")
@click.argument("task_id")
@client_options
def tasks_get(target: str, task_id: str, token: str | None, timeout: int, output: str, protocol: str) -> None:
    """Show the status of task TASK_ID (tasks/get).

    \b
    Examples:
      trio-mcp tasks get ws://127.0.0.1:8765 2qKGxsZK_32RO34wml0V3KiM --token s3cret
      trio-mcp tasks get ws://127.0.0.1:8765 -- -qN0w50_pPaSFgMcDT74WyHI -o json --token s3cret
    """

    async def body(interrupts: Interrupts) -> int:
        _stdio_note(target)
        async with open_target(
            target, token=token, connect_timeout=timeout / 1000, protocol=protocol
        ) as client:
            task: Task = await _task_request(target, lambda: client.get_task(task_id))
        if output == "json":
            dump_json(wire(task))
        else:
            stdout_console().print(task_table(task))
        return ExitCode.OK

    _execute(body)


@tasks.command("result", cls=TasksCommand, epilog=EXIT_CODES_TASKS_RESULT)
@click.argument("target")
@click.argument("task_id")
@client_options
def tasks_result(
    target: str, task_id: str, token: str | None, timeout: int, output: str, protocol: str
) -> None:
    """Wait for task TASK_ID to end and print its result (tasks/result).

    Exits 0 if it completed, 1 if it failed or was cancelled. Ctrl-C stops waiting (exit
    130) but does not cancel the task: use `tasks cancel` for that.

    \b
    Examples:
      trio-mcp tasks result ws://127.0.0.1:8765 2qKGxsZK_32RO34wml0V3KiM --token s3cret
      trio-mcp tasks result ws://127.0.0.1:8765 -- "$ID" -o json
    """

    async def body(interrupts: Interrupts) -> int:
        _stdio_note(target)
        err = stderr_console()
        async with open_target(
            target, token=token, connect_timeout=timeout / 1000, protocol=protocol
        ) as client:
            task: Task = await _task_request(target, lambda: client.get_task(task_id))
            if not task.status.is_terminal and output == "text" and err.is_terminal:
                with err.status(f"waiting for task {escape(task_id)} to end…"):
                    result, error = await _outcome(client, task)
            else:
                result, error = await _outcome(client, task)
            final: Task = await _task_request(target, lambda: client.get_task(task_id))
        if error is not None and final.status not in (TaskStatus.FAILED, TaskStatus.CANCELLED):
            raise CliError(ExitCode.PROTOCOL, f"the server answered error {error.code}: {error.message}")
        return _report(final, result, error, output, None)

    _execute(body)


@tasks.command("cancel", cls=TasksCommand, epilog=EXIT_CODES_TASKS_CANCEL)
@click.argument("target")
@click.argument("task_id")
@client_options
def tasks_cancel(
    target: str, task_id: str, token: str | None, timeout: int, output: str, protocol: str
) -> None:
    """Cancel task TASK_ID (tasks/cancel) and show its final status.

    A task that already ended cannot be cancelled: the server answers an error (exit 4).

    \b
    Examples:
      trio-mcp tasks cancel ws://127.0.0.1:8765 2qKGxsZK_32RO34wml0V3KiM --token s3cret
      trio-mcp tasks cancel ws://127.0.0.1:8765 -- "$ID"
    """

    async def body(interrupts: Interrupts) -> int:
        _stdio_note(target)
        async with open_target(
            target, token=token, connect_timeout=timeout / 1000, protocol=protocol
        ) as client:
            task: Task = await _task_request(target, lambda: client.cancel_task(task_id))
        if output == "json":
            dump_json(wire(task))
        else:
            stdout_console().print(task_line(task))
        return ExitCode.OK

    _execute(body)


# ------------------------------------------------------------------------------------- auth

EXIT_CODES_AUTH = exit_codes(
    (ExitCode.OK, "success"),
    (ExitCode.USAGE, "usage error: bad option or value, not an http:// or https:// URL"),
    (
        ExitCode.CONNECTION,
        "login: the server or its authorization server could not be reached, or the authorization "
        "failed or did not come back in time",
    ),
    (ExitCode.INTERRUPTED, _INTERRUPTED),
)


def _http_url(url: str) -> str:
    url = url.strip()
    if not url.lower().startswith(("http://", "https://")):
        raise click.BadParameter(
            f"not an http:// or https:// URL: {url!r} (OAuth is for MCP servers over HTTP, "
            "e.g. https://mcp.example.com/mcp)",
            param_hint="URL",
        )
    return url


@cli.group(epilog=EXIT_CODES_AUTH)
def auth() -> None:
    """Log in to MCP servers over HTTP that use OAuth 2.1, and manage the stored tokens.

    `auth login URL` runs the authorization in your browser and stores the tokens in
    $XDG_CONFIG_HOME/trio-mcp/oauth.json (~/.config/...; mode 0600). `call`, `tools` and
    `tasks` then use them (refreshing them when they expire) for that URL when no --token is
    given.

    \b
    Examples:
      trio-mcp auth login https://mcp.example.com/mcp
      trio-mcp auth status
      trio-mcp auth logout https://mcp.example.com/mcp
    """


@auth.command("login", epilog=EXIT_CODES_AUTH)
@click.argument("url")
@click.option(
    "--no-browser",
    is_flag=True,
    help="Only print the authorization URL (e.g. over SSH: open it where you have a browser that "
    "can reach this machine's 127.0.0.1:PORT).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=33418,
    show_default=True,
    help="The loopback port the browser is sent back to (http://127.0.0.1:PORT/callback).",
)
@click.option(
    "--timeout",
    type=DURATION,
    default="5m",
    show_default=True,
    metavar="DURATION",
    help="How long to wait for the authorization to come back from the browser.",
)
def auth_login(url: str, no_browser: bool, port: int, timeout: int) -> None:
    """Log in to the MCP server at URL and store its tokens.

    Discovers the server's authorization server, registers this client with it, opens the
    authorization page in a browser (the URL is printed too) and waits for it to redirect back
    to http://127.0.0.1:PORT/callback; the tokens are then stored for URL. Logging in again
    replaces them.

    \b
    Examples:
      trio-mcp auth login https://mcp.example.com/mcp
      trio-mcp auth login http://127.0.0.1:8000/mcp --no-browser --port 8765
    """
    from ..client.auth import FileTokenStore, canonical_resource
    from .auth import StagedLogin, describe, login_oauth, when
    from .runner import _open_http

    target = _http_url(url)

    async def body(interrupts: Interrupts) -> int:
        store = FileTokenStore()
        key = canonical_resource(target)
        # What is stored stays as it is until the new tokens arrive (a failed login keeps it).
        staged = StagedLogin(store, key, port)
        oauth = login_oauth(port=port, browser=not no_browser, store=staged, timeout=timeout / 1000)
        # The handshake waits for the browser: longer than the authorizer, whose error says why.
        async with _open_http(target, token=None, connect_timeout=timeout / 1000 + 30, auth=oauth):
            pass
        record = await staged.commit()
        err = stderr_console()
        if not record:
            err.print(f"{escape(target)} did not ask for authorization: nothing to store.")
            return ExitCode.OK
        shown = describe(key, record)
        scopes = " ".join(shown["scopes"]) or "none"
        err.print(
            f"[bold green]Logged in[/] to {escape(key)} (issuer {escape(str(shown['issuer']))}; "
            f"scopes: {escape(scopes)}; {when(shown['expires_at'])})."
        )
        err.print(f"Tokens stored in {escape(str(store.path))}.")
        return ExitCode.OK

    _execute(body)


@auth.command("status", epilog=EXIT_CODES_AUTH)
@click.argument("url", required=False)
@click.option(
    "--output",
    "-o",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text: one line per server; json: machine-readable JSON on stdout.",
)
def auth_status(url: str | None, output: str) -> None:
    """Show what is stored: for each server (or URL), its issuer, scopes and expiry.

    Tokens themselves are never shown. An expired token with a refresh token is refreshed the
    next time it is used.

    \b
    Examples:
      trio-mcp auth status
      trio-mcp auth status https://mcp.example.com/mcp -o json
    """
    from ..client.auth import FileTokenStore, canonical_resource
    from .auth import describe, stored_records, when

    store = FileTokenStore()
    records = stored_records(store)
    if url is not None:
        key = canonical_resource(_http_url(url))
        records = {key: records[key]} if key in records else {}
    shown = [describe(server, record) for server, record in sorted(records.items())]
    shown = [entry for entry in shown if entry["logged_in"]]
    if output == "json":
        dump_json(shown)
        raise SystemExit(ExitCode.OK)
    out = stdout_console()
    if not shown:
        where = f"for {url.strip()}" if url is not None else f"in {store.path}"
        out.print(f"Not logged in: no tokens stored {escape(where)}.")
        raise SystemExit(ExitCode.OK)
    for entry in shown:
        scopes = " ".join(entry["scopes"]) or "none"
        refresh = ", refreshable" if entry["refreshable"] else ""
        out.print(
            f"{escape(entry['server'])}: issuer {escape(str(entry['issuer']))}; scopes: {escape(scopes)}; "
            f"{when(entry['expires_at'])}{refresh}"
        )
    raise SystemExit(ExitCode.OK)


@auth.command("logout", epilog=EXIT_CODES_AUTH)
@click.argument("url")
def auth_logout(url: str) -> None:
    """Forget the tokens (and the client registration) stored for the MCP server at URL.

    \b
    Examples:
      trio-mcp auth logout https://mcp.example.com/mcp
    """
    from ..client.auth import FileTokenStore, canonical_resource

    store = FileTokenStore()
    key = canonical_resource(_http_url(url))

    async def body(interrupts: Interrupts) -> int:
        known = await store.load(key) is not None
        await store.delete(key)
        message = f"Logged out of {key}." if known else f"Nothing was stored for {key}."
        stderr_console().print(escape(message))
        return ExitCode.OK

    _execute(body)


# ------------------------------------------------------------------------------------- demo


def default_demo_server() -> str:
    """``examples/demo_server.py:server`` next to the package if this is a source checkout,
    else the built-in copy ``trio_mcp.cli.demo_server:server``."""
    example = Path(__file__).resolve().parents[2] / "examples" / "demo_server.py"
    if example.is_file():
        try:
            return f"{example.relative_to(Path.cwd())}:server"
        except ValueError:
            return f"{example}:server"
    return "trio_mcp.cli.demo_server:server"


@cli.command(epilog=EXIT_CODES_DEMO)
@click.option(
    "--server",
    "spec",
    metavar="SERVER",
    help=f"The server to run the demo against ({SPEC_HELP}). Default: examples/demo_server.py if this "
    "is a source checkout, else the built-in copy trio_mcp.cli.demo_server:server.",
)
@click.option("--pace", type=float, default=1.0, hidden=True, help="Multiply the demo's durations (tests).")
def demo(spec: str | None, pace: float) -> None:
    """Walk through tasks end to end against the demo server, over stdio.

    Starts `trio-mcp serve SERVER` as a child process, lists its tools, then creates a task
    and follows it with a progress bar, awaits another with tasks/result, cancels a third
    mid-flight, shows a failing task and the taskSupport rules, answers a task's question
    (elicitation) with a scripted answer, lists the tasks, and shows MCP 2026-07-28 (the server
    decides which calls become tasks).

    \b
    Examples:
      trio-mcp demo
      trio-mcp demo --server trio_mcp.cli.demo_server:server
    """
    from .demo import run_demo

    server_spec = spec or default_demo_server()
    _execute(functools.partial(run_demo, server_spec, pace=pace))


# ------------------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """The ``trio-mcp`` console script."""
    try:
        code = cli.main(
            args=list(argv) if argv is not None else None, prog_name="trio-mcp", standalone_mode=False
        )
    except click.exceptions.Abort:
        stderr_console().print("[bold yellow]Interrupted.[/]")
        code = ExitCode.INTERRUPTED
    except click.ClickException as exc:
        exc.show()
        code = exc.exit_code
    except click.exceptions.Exit as exc:
        code = exc.exit_code
    except CliError as exc:  # pragma: no cover - commands handle their own
        print_error(stderr_console(), exc)
        code = exc.code
    raise SystemExit(int(code) if isinstance(code, int) else 0)
