"""How a server is run: :class:`RunOptions`, read from a server file's command line by
:func:`parse_run_args` (see :meth:`~trio_mcp.server.Server.run`)."""

from __future__ import annotations

from collections.abc import Sequence

import attrs

__all__ = ["LOG_LEVELS", "RunOptions", "parse_run_args"]


LOG_LEVELS = ("debug", "info", "warning", "error")


def _address(text: str) -> tuple[str, int]:
    from ..transports.websocket import parse_host_port

    return parse_host_port(text)


def _store_url(text: str) -> str:
    from ..stores import store_from_url

    store_from_url(text)  # ValueError names what is wrong
    return text


def _check_store(_instance: object, _attribute: object, url: str) -> None:
    _store_url(url)


@attrs.frozen
class RunOptions:
    """How :meth:`Server.run` serves: parsed from a command line by :func:`parse_run_args`.

    >>> options = RunOptions.from_arguments(ws=":8765", token="s3cret")
    >>> options.transport, options.listen, options.token
    ('ws', ('127.0.0.1', 8765), 's3cret')
    """

    transport: str = attrs.field(default="stdio", validator=attrs.validators.in_(("stdio", "ws", "http")))
    listen: tuple[str, int] | None = None
    """Host and port for ``ws`` and ``http`` (port 0 picks a free one); None over stdio."""
    token: str | None = None
    """A bearer token clients must send (``ws``/``http`` only); their tasks then belong to it."""
    allow_origins: tuple[str, ...] = ()
    """Browser origins to accept (default: localhost on any port)."""
    store: str | None = attrs.field(default=None, validator=attrs.validators.optional(_check_store))
    """A ``--store`` URL (``memory``, ``sqlite:///PATH``, ``redis://HOST:PORT/DB``); None keeps
    the server's own store."""
    log_level: str = attrs.field(default="warning", validator=attrs.validators.in_(LOG_LEVELS))

    def __attrs_post_init__(self) -> None:
        if (self.transport == "stdio") != (self.listen is None):
            raise ValueError("ws and http need HOST:PORT; stdio takes none")
        if self.transport == "stdio" and (self.token or self.allow_origins):
            raise ValueError("a token and allowed origins only apply with ws or http")

    @classmethod
    def from_arguments(
        cls,
        *,
        ws: str | None = None,
        http: str | None = None,
        token: str | None = None,
        allow_origins: Sequence[str] = (),
        store: str | None = None,
        log_level: str = "warning",
    ) -> RunOptions:
        """Options from :meth:`Server.run`'s keyword arguments (ValueError if they disagree)."""
        if ws is not None and http is not None:
            raise ValueError("ws and http cannot be combined")
        transport, where = ("stdio", None)
        if ws is not None:
            transport, where = "ws", ws
        elif http is not None:
            transport, where = "http", http
        return cls(
            transport,
            _address(where) if where is not None else None,
            token or None,
            tuple(allow_origins),
            store,
            log_level,
        )


def parse_run_args(
    argv: Sequence[str], *, defaults: RunOptions | None = None, prog: str | None = None
) -> RunOptions:
    """Parse a server file's command line (see :meth:`Server.run`) over ``defaults``.

    Bad arguments print usage to stderr and raise ``SystemExit(2)``, as argparse does.

    >>> options = parse_run_args(["--http", "127.0.0.1:8000", "--log-level", "info"])
    >>> options.transport, options.listen, options.log_level
    ('http', ('127.0.0.1', 8000), 'info')
    >>> parse_run_args([]).transport
    'stdio'
    """
    import argparse
    import os

    base = defaults if defaults is not None else RunOptions()
    parser = argparse.ArgumentParser(prog=prog, description="Serve this MCP server (default: over stdio).")
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--stdio", action="store_true", help="serve over stdin/stdout (the default)")
    where.add_argument(
        "--ws", metavar="HOST:PORT", type=_address, help="serve over WebSocket at ws://HOST:PORT/"
    )
    where.add_argument(
        "--http", metavar="HOST:PORT", type=_address, help="serve Streamable HTTP at http://HOST:PORT/mcp"
    )
    parser.add_argument(
        "--token",
        metavar="TOKEN",
        help="with --ws/--http: require `Authorization: Bearer TOKEN` [env: TRIO_MCP_TOKEN]",
    )
    parser.add_argument(
        "--allow-origin",
        metavar="ORIGIN",
        action="append",
        default=[],
        help="with --ws/--http: a browser Origin to accept (repeatable; default: localhost on any port)",
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        type=_store_url,
        help="where tasks are kept: memory, sqlite:///PATH or redis://HOST:PORT/DB [env: TRIO_MCP_STORE]",
    )
    parser.add_argument(
        "--log-level", choices=LOG_LEVELS, help=f"stderr logging threshold (default: {base.log_level})"
    )
    args = parser.parse_args(list(argv))
    if args.stdio:
        transport, listen = "stdio", None
    elif args.ws is not None:
        transport, listen = "ws", args.ws
    elif args.http is not None:
        transport, listen = "http", args.http
    else:
        transport, listen = base.transport, base.listen
    token = args.token or (os.environ.get("TRIO_MCP_TOKEN") if transport != "stdio" else None) or base.token
    if transport == "stdio" and (args.token or args.allow_origin):
        parser.error("--token and --allow-origin only apply with --ws or --http HOST:PORT")
    from_env = os.environ.get("TRIO_MCP_STORE") if args.store is None else None
    if from_env:
        try:
            _store_url(from_env)
        except ValueError as exc:
            parser.error(f"TRIO_MCP_STORE: {exc}")
    store = args.store or from_env or base.store
    return RunOptions(
        transport,
        listen,
        token if transport != "stdio" else None,
        tuple(args.allow_origin) or (base.allow_origins if transport != "stdio" else ()),
        store,
        args.log_level or base.log_level,
    )
