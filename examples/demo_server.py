"""The demo server: echo, sleep, fail, add, batch_job and ask — every kind of task support.

Its tools are defined in ``trio_mcp/cli/demo_server.py`` (so that ``trio-mcp demo`` works from
an installed package too); read that file for the code. Run over stdio (the default):
``python examples/demo_server.py``; over WebSocket: ``python examples/demo_server.py --ws
127.0.0.1:8765``.
"""

from trio_mcp.cli.demo_server import main, server

__all__ = ["server"]

if __name__ == "__main__":
    main()
