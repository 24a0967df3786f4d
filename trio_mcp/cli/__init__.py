"""The ``trio-mcp`` command (in progress)."""


def main() -> None:
    raise SystemExit("trio-mcp: the command line is being built")
