"""The ``trio-mcp`` command: serve a :class:`~trio_mcp.Server`, list a server's tools, call
them (as tasks, with a live progress bar), manage tasks, and run a demo.

See ``docs/cli.md``, or ``trio-mcp --help``. :func:`main` is the console script;
:data:`cli` is the click group (for ``click.testing.CliRunner``).
"""

from .app import cli, main
from .errors import CliError, ExitCode

__all__ = ["CliError", "ExitCode", "cli", "main"]
