"""Benchmarks of the trio_mcp runtime against a raw stdio floor. Run ``python -m benchmarks``.

``server.py`` is the server under test, ``floor.py`` the raw floor, ``client.py`` the load
client, ``workloads.py`` the seven workloads, ``report.py`` the table and targets, and
``__main__.py`` the command line. See ``docs/performance.md`` for a real run.
"""
