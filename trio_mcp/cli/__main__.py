"""``python -m trio_mcp.cli``: the same as the ``trio-mcp`` command."""

from . import main

main()
