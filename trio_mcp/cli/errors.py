"""Exit codes of the ``trio-mcp`` command and the error that carries one."""

from __future__ import annotations

import enum

__all__ = [
    "CliError",
    "ExitCode",
]


class ExitCode(enum.IntEnum):
    """What ``trio-mcp`` exits with (documented in ``docs/cli.md``)."""

    OK = 0
    """Success."""
    TOOL_ERROR = 1
    """The tool returned ``isError``, or the task ended ``failed`` or ``cancelled`` (by someone else)."""
    USAGE = 2
    """Bad command line: unknown tool or argument, bad value, bad duration, bad SERVER spec."""
    CONNECTION = 3
    """The target could not be started or reached, refused us, or went away; ``serve``: it
    could not listen, or its ``--store`` file is served by another process (``StoreLocked``)."""
    PROTOCOL = 4
    """The server answered a request with a JSON-RPC error (e.g. an unknown task id)."""
    INTERRUPTED = 130
    """Stopped by Ctrl-C (SIGINT); a running task was cancelled first."""
    TERMINATED = 143
    """Stopped by SIGTERM; a running task was cancelled first."""


class CliError(Exception):
    """An error to report to the user (no traceback) and exit with ``code``.

    ``hint`` is a second line suggesting a fix; ``details`` is extra text shown dimmed
    (e.g. the traceback of an exception raised while importing a server module).
    """

    def __init__(self, code: ExitCode, message: str, *, hint: str | None = None, details: str | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint
        self.details = details


def usage_error(message: str, *, hint: str | None = None) -> CliError:
    return CliError(ExitCode.USAGE, message, hint=hint)
