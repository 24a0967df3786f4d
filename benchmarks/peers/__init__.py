"""The peers of the comparison: the same tools and requests served by the TypeScript SDK
(``ts_tasks_server.mjs``, set up by ``node.py``) and by a bare Trio server
(``benchmarks/trio_floor.py``), measured beside trio-mcp and the raw floor (``compare.py``)."""
