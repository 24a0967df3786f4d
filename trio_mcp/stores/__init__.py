"""Task records at rest: the store interface and its three stores, chosen by URL.

- :mod:`trio_mcp.stores.base`: the :class:`TaskStore` interface every store keeps, the abilities
  some stores add (:class:`SharedTaskStore`, :class:`DurableTaskStore`), and the contract;
- :mod:`trio_mcp.stores.memory`: :class:`MemoryTaskStore`, the default (this process only);
- :mod:`trio_mcp.stores.sqlite`: :class:`SqliteTaskStore`, records in an SQLite file that
  survive a restart (one serving process per file);
- :mod:`trio_mcp.stores.redis`: :class:`RedisTaskStore`, records in Redis or Valkey shared by
  several server processes.

A store keeps records and answers what it holds; what a record means (which tasks to fail after
a restart, what wins when two writes meet) is the runtime's decision
(:mod:`trio_mcp.actors`). A ``--store`` URL names one:

>>> parse_store_url("sqlite:///tasks.db"), parse_store_url("memory")
(('sqlite', 'tasks.db'), ('memory', None))
>>> store_from_url("sqlite:///tasks.db")()
SqliteTaskStore('tasks.db')
>>> store_from_url("redis://127.0.0.1:6379/0", prefix="app:")()
RedisTaskStore('redis://127.0.0.1:6379/0', prefix='app:')
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from .base import DurableTaskStore, InvalidCursor, SharedTaskStore, TaskEvent, TaskStore
from .memory import MemoryTaskStore
from .sqlite import SqliteTaskStore, StoreClosed, StoreLocked

if TYPE_CHECKING:
    from .redis import RedisTaskStore


def __getattr__(name: str) -> Any:
    # The Redis store loads its client library (coredis, anyio) only when it is used: a
    # process without Redis (the CLI, a stdio server) does not pay for that import.
    if name == "RedisTaskStore":
        from .redis import RedisTaskStore

        return RedisTaskStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "DurableTaskStore",
    "InvalidCursor",
    "MemoryTaskStore",
    "RedisTaskStore",
    "SharedTaskStore",
    "SqliteTaskStore",
    "StoreClosed",
    "StoreLocked",
    "TaskEvent",
    "TaskStore",
    "open_store",
    "parse_store_url",
    "store_from_url",
]


def parse_store_url(url: str) -> tuple[Literal["memory", "sqlite", "redis"], str | None]:
    """The kind of store a ``--store`` URL names, and where it is.

    - ``memory`` (or ``memory:``): :class:`MemoryTaskStore` (None);
    - ``sqlite:///PATH``: :class:`SqliteTaskStore` on PATH, everything after the third slash
      (``sqlite:///tasks.db`` is relative, ``sqlite:////var/lib/tasks.db`` absolute);
    - ``redis://[[USER]:PASSWORD@]HOST[:PORT][/DB]``, ``rediss://…`` (TLS, with
      ``?ssl_ca_certs=…&ssl_certfile=…&ssl_keyfile=…&ssl_cert_reqs=…`` options) or
      ``redis+sentinel://HOST[:PORT][,HOST[:PORT]...]/SERVICE[/DB]``: :class:`RedisTaskStore`
      (the URL; :func:`trio_mcp.stores.redis.parse_redis_url` reads it, and refuses Redis
      Cluster URLs, saying why).

    Anything else raises ValueError.

    >>> parse_store_url("sqlite:////var/tasks.db")
    ('sqlite', '/var/tasks.db')
    """
    if url in ("memory", "memory:"):
        return "memory", None
    prefix = "sqlite:///"
    if url.startswith(prefix) and len(url) > len(prefix):
        return "sqlite", url[len(prefix) :]
    if url.lower().startswith(("redis:", "rediss:", "redis+", "rediss+")):
        return "redis", url
    raise ValueError(
        f"unknown task store {url!r}: expected 'memory', 'sqlite:///PATH', 'redis://HOST[:PORT][/DB]',"
        " 'rediss://HOST[:PORT][/DB]' or 'redis+sentinel://HOST[:PORT]/SERVICE'"
    )


def store_from_url(url: str, **options: Any) -> Callable[[], TaskStore]:
    """A zero-argument store factory for ``Server(store=...)`` from a ``--store`` URL (see
    :func:`parse_store_url`); ``options`` are the store's keyword arguments. A bad URL or
    option raises ValueError (or TypeError) now, not at the first call."""
    kind, where = parse_store_url(url)
    if kind == "memory":
        if options:
            raise ValueError(f"the memory store takes no options: {sorted(options)}")
        return MemoryTaskStore
    assert where is not None
    if kind == "sqlite":
        SqliteTaskStore(where, **options)  # refuses a bad option now; opens nothing
        return lambda: SqliteTaskStore(where, **options)
    from .redis import RedisTaskStore

    RedisTaskStore(where, **options)  # refuses a bad URL or option now; connects to nothing
    return lambda: RedisTaskStore(where, **options)


def open_store(url: str, **options: Any) -> TaskStore:
    """A new store from a ``--store`` URL (``store_from_url(url, **options)()``): no I/O yet,
    the store connects (or opens its file) at its first call.

    >>> type(open_store("memory")).__name__
    'MemoryTaskStore'
    """
    return store_from_url(url, **options)()
