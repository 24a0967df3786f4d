"""Benchmarks of the trio_mcp runtime against a raw stdio floor. Run ``python -m benchmarks``.

``server.py`` is the server under test (stdio, or WebSocket with ``--ws``), ``floor.py`` the
raw floor, ``client.py`` the load clients (stdio and WebSocket), ``workloads.py`` the eight
workloads, ``report.py`` the table and targets, ``__main__.py`` the command line, and
``hotspots.py`` a py-spy profile of one workload. See ``docs/performance.md`` for a real run.
"""
